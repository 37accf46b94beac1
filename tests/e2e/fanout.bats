#!/usr/bin/env bats
# Fan-out (issue 14): rdcp SRC host1:DST host2:DST ... and --hosts=FILE:DST.
# The hosts are this machine under several loopback addresses (127.0.0.x),
# each with its own DST; the remote shell is a local one that records the
# far side's pid per host, so a test can kill one host's rdcp.

load helpers

# host_field N FIELD: FIELD of the Nth host in --json's "hosts"
host_field() {
	python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["hosts"][int(sys.argv[1])][sys.argv[2]])' "$1" "$2"
}

# a remote shell: "rsh HOST CMD..." runs CMD here, its pid in $T/pid.HOST;
# a host named in $T/no-rdcp has no rdcp (the shell's 127); one named in
# $T/hang never answers (a login that hangs: it sleeps); one named in
# $T/down cannot be reached (ssh's 255, nothing said)
mk_rsh() {
	cat >"$T/rsh" <<-'EOF'
	#!/bin/sh
	h=$1; shift
	dir=$(dirname "$0")
	if [ -e "$dir/down" ] && grep -qx "$h" "$dir/down"; then exit 255; fi
	if [ -e "$dir/no-rdcp" ] && grep -qx "$h" "$dir/no-rdcp"; then
		echo "sh: 1: rdcp: not found" >&2; exit 127
	fi
	echo $$ >"$dir/pid.$h"
	if [ -e "$dir/hang" ] && grep -qx "$h" "$dir/hang"; then exec sleep 1000; fi
	# a host of its own: $dir/hosts.d/HOST is what it sees at $dir/dst
	hb=${h#*@}
	if [ -d "$dir/hosts.d/$hb" ]; then
		export XDG_CACHE_HOME=$dir/cache.$hb   # its own index too
		exec unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
			"$dir/hosts.d/$hb" "$dir/dst" "$@"
	fi
	exec "$@"
	EOF
	chmod +x "$T/rsh"
}

mk_tree() {
	mkdir -p "$1/sub" "$1/models/blobs"
	mk_files "$1/small" 300
	head -c 9000000 /dev/urandom >"$1/models/blobs/b1"   # 3 chunks
	head -c 200000 /dev/urandom >"$1/sub/mid"
	ln -s ../sub/mid "$1/models/rel"
	ln "$1/sub/mid" "$1/sub/mid-hard"
}

fan() { "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" "$@"; }

@test "fan-out: three hosts, empty / complete / changed, one run: each a mirror; SRC read and sent once" {
	mk_rsh
	mk_tree "$T/src"
	mkdir -p "$T/d2" "$T/d3"
	rsync -aH "$T/src/" "$T/d2/"          # complete
	rsync -aH "$T/src/" "$T/d3/"          # changed: 1 chunk of the blob, a file, an extra
	dd if=/dev/urandom of="$T/d3/models/blobs/b1" bs=4096 count=1 seek=1500 conv=notrunc status=none
	echo stale >"$T/d3/small/d0/f1"
	touch -d @1000 "$T/d3/small/d0/f1"
	echo extra >"$T/d3/extra"
	fan -aH --sync --delete --json "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" \
		"127.0.0.3:$T/d3" >"$T/json"
	cat "$T/json"
	for d in d1 d2 d3; do same "$T/src" "$T/$d"; done
	[ "$(json_field exit_code <"$T/json")" -eq 0 ]
	for k in 0 1 2; do [ "$(host_field $k status <"$T/json")" = ok ]; done
	# what each host lacked: all of it, nothing, one chunk and one file
	local size; size=$(du -sb --apparent-size "$T/src" | cut -f1)
	[ "$(host_field 0 bytes_sent <"$T/json")" -ge 9000000 ]
	[ "$(host_field 1 bytes_sent <"$T/json")" -eq 0 ]
	[ "$(host_field 2 bytes_sent <"$T/json")" -le $((4194304 + 100)) ]
	[ "$(host_field 2 deleted <"$T/json")" -eq 1 ]
	# the source sent the tree once, not once per host
	local tx; tx=$(json_field bytes_total_sent <"$T/json")
	echo "source sent $tx bytes for a tree of $size"
	[ "$tx" -le $((size * 12 / 10)) ]
	# a re-run moves nothing
	fan -aH --sync --delete --json "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" \
		"127.0.0.3:$T/d3" >"$T/json2"
	for k in 0 1 2; do [ "$(host_field $k bytes_sent <"$T/json2")" -eq 0 ]; done
	[ "$(json_field bytes_total_sent <"$T/json2")" -lt 200000 ]
}

# Live trees: files written between the scan and the reads. Every host
# gets the scanned part of a file that grew (its hashes are in the file
# list each host checks); a small file rewritten at its size cannot be
# sent as it now is (the hosts have the scan's hash of it): named, exit 24.
@test "fan-out: files that grew after the scan land their scanned part on every host; one rewritten at its size is named, exit 24" {
	mk_rsh
	mkdir -p "$T/src"
	head -c 1000 /dev/urandom >"$T/src/log"
	head -c $((5 * 1048576 + 3)) /dev/urandom >"$T/src/rec"
	head -c 2000 /dev/urandom >"$T/src/state"
	RDCP_TEST_PAUSE=$T/pause fan --sync "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" \
		2>"$T/err" &
	local pid=$! rc=0
	for _ in $(seq 400); do [ -e "$T/pause" ] && break; sleep 0.025; done
	[ -e "$T/pause" ]
	head -c 700 /dev/urandom >>"$T/src/log"
	head -c 1048576 /dev/urandom >>"$T/src/rec"
	head -c 2000 /dev/urandom >"$T/src/state"
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 24 ]
	grep -q "state: changed while being sent; not sent" "$T/err"
	! grep -q "log\|rec" "$T/err"
	local d
	for d in d1 d2; do
		[ "$(stat -c %s "$T/$d/log")" -eq 1000 ] && cmp -n 1000 "$T/src/log" "$T/$d/log"
		[ "$(stat -c %s "$T/$d/rec")" -eq $((5 * 1048576 + 3)) ]
		cmp -n $((5 * 1048576 + 3)) "$T/src/rec" "$T/$d/rec"
		[ ! -e "$T/$d/state" ]
	done
	fan --sync "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2"
	for d in d1 d2; do same "$T/src" "$T/$d"; done
}

@test "fan-out: -i names each host's changes; -n changes nothing anywhere" {
	mk_rsh
	mk_tree "$T/src"
	fan -aH --sync -n -i "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" >"$T/out"
	[ ! -e "$T/d1" ] && [ ! -e "$T/d2" ]
	grep -q '^127.0.0.1: <f+++++++++ sub/mid$' "$T/out"
	grep -q '^127.0.0.2: <f+++++++++ sub/mid$' "$T/out"
	fan -aH --sync -i "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" >"$T/out"
	grep -q '^127.0.0.2: <f+++++++++ models/blobs/b1$' "$T/out"
	! grep -q ': ok: ' "$T/out"   # the per-host line is -v's
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d2"
}

# Issue 36, 6c: a successful fan-out printed one line per host without -v,
# and cron mailed them. Quiet as rsync: the per-host line is -v's; errors
# still go to stderr.
@test "fan-out: a successful run without -v prints nothing (cron mails nothing); -v names each host" {
	mk_rsh
	mk_tree "$T/src"
	fan -aH --sync "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" \
		>"$T/out" 2>"$T/err"
	cat "$T/out" "$T/err"
	[ ! -s "$T/out" ]
	[ ! -s "$T/err" ]
	for d in d1 d2 d3; do same "$T/src" "$T/$d"; done
	echo new >"$T/src/sub/new"
	fan -aH --sync -v "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" \
		>"$T/out" 2>"$T/err"
	cat "$T/out" "$T/err"
	for k in 1 2 3; do grep -q "^127.0.0.$k:$T/d$k: ok: 1 files, 4 bytes received" "$T/out"; done
}

# kill_host_at "N..." ARGS...: a fan-out of SRC (100 small files, a 120 MB
# file) to ARGS, slow enough (40 MB/s) that hosts 127.0.0.N... are killed
# (kill -9) when the first of them holds about half of it; $got: its exit
# code.
kill_host_at() {
	local n=$1 k; shift
	mkdir -p "$T/src"
	mk_files "$T/src/small" 100
	head -c 120000000 /dev/urandom >"$T/src/big"
	local last=${*: -1}; last=${last%%:*}
	(exec "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" -a --sync -P --bwlimit 40M --json "$T/src/" \
		"$@" >"$T/json" 2>"$T/err") &
	local pid=$!
	for _ in $(seq 200); do [ -e "$T/pid.$last" ] && break; sleep 0.05; done
	# when the first of them holds half of the big file (of about 3 s; not
	# a fixed time: a loaded machine moves less in it, and its next run
	# must have chunks to reuse)
	local first=${n%% *} kb
	for _ in $(seq 400); do
		kb=$(du -sk "$T/d$first" 2>/dev/null | cut -f1)
		[ "${kb:-0}" -ge 58000 ] && break
		sleep 0.025
	done
	local pids=()
	for k in $n; do pids+=("$(cat "$T/pid.127.0.0.$k")"); done
	kill -9 "${pids[@]}"   # at once: no fork between two hosts' deaths
	got=0
	wait "$pid" || got=$?
	cat "$T/err" "$T/json"
}

@test "fan-out: a host killed mid-run is stepped over: the host before it feeds the one after it; the others finish; its next run completes it" {
	mk_rsh
	kill_host_at 2 "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" "127.0.0.4:$T/d4"
	[ "$got" -eq 10 ]
	for d in d1 d3 d4; do same "$T/src" "$T/$d"; done
	[ "$(host_field 1 status <"$T/json")" = failed ]
	for k in 0 2 3; do [ "$(host_field $k status <"$T/json")" = ok ]; done
	grep -q '127.0.0.2:.*: failed (exit 10)' "$T/err"
	# the chain re-linked: host 1 went on with host 3, which took its data
	# (a host's own lines name it)
	grep -q '^rdcp (127.0.0.1): forwarding the data to the next host failed: .*going on with the host after it (127.0.0.3 ' "$T/err"
	grep -q '^rdcp (127.0.0.3): the host before this one stopped sending' "$T/err"
	# so the source sent the big file about once: hosts 3 and 4 were not
	# sent the half they had not had when host 2 died again (with a second
	# round from the source alone, this was 1.6 x)
	local tx; tx=$(json_field bytes_total_sent <"$T/json")
	echo "source sent $tx bytes"
	[ "$tx" -le $((120000000 * 125 / 100)) ]
	# no process left on any host
	for p in $(cat "$T"/pid.*); do ! kill -0 "$p" 2>/dev/null; done
	# the killed host's next run completes it, from the chunks it verified (-P)
	fan -a --sync -P --json "$T/src/" "127.0.0.2:$T/d2" "127.0.0.1:$T/d1" >"$T/json"
	cat "$T/json"
	same "$T/src" "$T/d2"
	[ "$(host_field 0 bytes_sent <"$T/json")" -le $((120000000 * 8 / 10)) ]
	[ "$(host_field 1 bytes_sent <"$T/json")" -eq 0 ]
}

@test "fan-out: the first host killed mid-run (no host before it to step over it): the hosts after it are retried from the source" {
	mk_rsh
	kill_host_at 1 "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3"
	[ "$got" -eq 10 ]
	same "$T/src" "$T/d2"
	same "$T/src" "$T/d3"
	[ "$(host_field 0 status <"$T/json")" = failed ]
	[ "$(host_field 1 status <"$T/json")" = ok ]
	[ "$(host_field 2 status <"$T/json")" = ok ]
	grep -q '2 hosts lost the data when a host before them failed' "$T/err"
	! grep -q 'going on with the host after it' "$T/err"
	for p in $(cat "$T"/pid.*); do ! kill -0 "$p" 2>/dev/null; done
}

@test "fan-out: two hosts in a row killed: there is no one to step over to; the hosts after them are retried from the source, without waiting in turn" {
	mk_rsh
	local t0=$SECONDS
	kill_host_at "2 3" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" "127.0.0.4:$T/d4" \
		"127.0.0.5:$T/d5" "127.0.0.6:$T/d6"
	local took=$((SECONDS - t0))
	[ "$got" -eq 10 ]
	for d in d1 d4 d5 d6; do same "$T/src" "$T/$d"; done
	for k in 3 4 5; do [ "$(host_field $k status <"$T/json")" = ok ]; done
	# host 4 waits ~10 s for a re-link from host 2 (dead too); hosts 5 and 6
	# are told at once (a gap and a clean end), not after 10 s each
	echo "took $took s"
	[ "$took" -lt 25 ]
	grep -q '127.0.0.2:.*: failed (exit 10)' "$T/err"
	grep -q '127.0.0.3:.*: failed (exit 10)' "$T/err"
	grep -q '3 hosts lost the data when a host before them failed' "$T/err"
	# host 1 tried host 3 once, which was gone too: said by the transport
	# (or, when host 3 took the re-link in the instant before it died, its
	# forward to host 3 failed once more, and it did not try again)
	[ "$(grep -c '^rdcp (127.0.0.1): .*going on with the host after it (127.0.0.3 ' "$T/err")" -eq 1 ]
	[ "$(grep -c '^rdcp (127.0.0.1): cannot connect to 127.0.0.3 ' "$T/err")" -le 1 ]
	for p in $(cat "$T"/pid.*); do ! kill -0 "$p" 2>/dev/null; done
}

@test "fan-out: a host whose disk fills fails alone and keeps forwarding; no second round; --max-delete's stop is no reason to retry" {
	mk_rsh
	mkdir -p "$T/src" "$T/d1"
	mk_files "$T/src/small" 200
	head -c 12000000 /dev/urandom >"$T/src/big"
	mount -t tmpfs -o size=2m tmpfs "$T/d1"
	local got=0
	fan -a --sync --json "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" \
		>"$T/json" 2>"$T/err" || got=$?
	cat "$T/err" "$T/json"
	umount "$T/d1"
	[ "$got" -ne 0 ]
	[ "$(host_field 0 status <"$T/json")" = failed ]
	[ "$(host_field 1 status <"$T/json")" = ok ]
	[ "$(host_field 2 status <"$T/json")" = ok ]
	same "$T/src" "$T/d2"
	same "$T/src" "$T/d3"
	! grep -q 'lost the data' "$T/err"
	# three extras on each host, at most one deletion each: exit 25, no rerun
	for d in d2 d3; do touch "$T/$d/x1" "$T/$d/x2" "$T/$d/x3"; done
	got=0
	fan -a --sync --delete --max-delete=1 "$T/src/" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" \
		>"$T/out" 2>"$T/err" || got=$?
	cat "$T/out" "$T/err"
	[ "$got" -eq 25 ]
	! grep -q 'lost the data' "$T/err"
	[ "$(ls "$T/d2" | grep -c '^x')" -eq 2 ]
	[ "$(ls "$T/d3" | grep -c '^x')" -eq 2 ]
}

@test "fan-out: a host without rdcp fails alone, named, exit 5; the others complete" {
	mk_rsh
	mk_tree "$T/src"
	echo 127.0.0.2 >"$T/no-rdcp"
	local got=0
	fan -aH --sync "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" \
		>"$T/out" 2>"$T/err" || got=$?
	cat "$T/out" "$T/err"
	[ "$got" -eq 5 ]
	grep -q "127.0.0.2:$T/d2: failed (exit 5): could not start rdcp there" "$T/err"
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d3"
	[ ! -e "$T/d2" ]
}

# Issue 36, 6a: one host whose ssh hangs held the run's end for ssh's own
# connect timeout (71-78 s) before the healthy hosts were reported.
# --contimeout S (ssh's ConnectTimeout, and our own limit on the host's
# first word); a fan-out's default is 15 s.
@test "fan-out: a host that never answers (its login hangs) fails alone after --contimeout; the others complete" {
	mk_rsh
	mk_tree "$T/src"
	echo 127.0.0.2 >"$T/hang"
	# an "ssh": it records its arguments, then is the remote shell above
	mkdir "$T/bin"
	printf '#!/bin/sh\necho "$@" >>"%s/ssh-args"\nwhile [ "$1" = -o ]; do shift 2; done\nexec "%s/rsh" "$@"\n' \
		"$T" "$T" >"$T/bin/ssh"
	chmod +x "$T/bin/ssh"
	local got=0 t0=$SECONDS took
	timeout 60 "$RDCP" -e "$T/bin/ssh" --rdcp-path "$RDCP" -aH --sync --contimeout 3 --json \
		"$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" \
		>"$T/json" 2>"$T/err" || got=$?
	took=$((SECONDS - t0))
	cat "$T/err" "$T/json"
	echo "took $took s"
	[ "$took" -lt 30 ]
	[ "$got" -eq 5 ]   # the failed host's, as for a host without rdcp
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d3"
	[ ! -e "$T/d2" ]
	[ "$(host_field 0 status <"$T/json")" = ok ]
	[ "$(host_field 1 status <"$T/json")" = failed ]
	[ "$(host_field 2 status <"$T/json")" = ok ]
	grep -q "^rdcp: 127.0.0.2:$T/d2: failed (exit 5): no answer in 3 s (--contimeout)" "$T/err"
	[ "$(wc -l <"$T/err")" -eq 1 ]
	grep -q -- "-o ConnectTimeout=3 127.0.0.2 " "$T/ssh-args"
	! kill -0 "$(cat "$T/pid.127.0.0.2")" 2>/dev/null   # its login is not left behind
	# without --contimeout: 15 s, not ssh's own 75
	rm -rf "$T/d1" "$T/d3"
	t0=$SECONDS got=0
	timeout 60 "$RDCP" -e "$T/bin/ssh" --rdcp-path "$RDCP" -aH --sync "$T/src/" \
		"127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" >"$T/out" 2>"$T/err" || got=$?
	took=$((SECONDS - t0))
	cat "$T/err"
	echo "took $took s"
	[ "$got" -eq 5 ]
	[ "$took" -lt 40 ]
	grep -q "127.0.0.2:$T/d2: failed (exit 5): no answer in 15 s (--contimeout)" "$T/err"
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d3"
}

@test "fan-out: --hosts file with comments, blank lines, user@host, a data address; a host twice under two names, and SRC itself, are copied once" {
	mk_rsh
	mk_tree "$T/src"
	mkdir -p "$T/dst" "$T/hosts.d/127.0.0.1" "$T/hosts.d/127.0.0.2"
	cat >"$T/hosts" <<-EOF
	# workers
	127.0.0.1

	$(id -un)@127.0.0.2   127.0.0.2
	$(id -un)@127.0.0.1
	; another comment
	EOF
	fan -aH --sync --json "$T/src/" --hosts="$T/hosts:$T/dst" >"$T/json" 2>"$T/err"
	cat "$T/json" "$T/err"
	same "$T/src" "$T/hosts.d/127.0.0.1"
	same "$T/src" "$T/hosts.d/127.0.0.2"
	[ -z "$(ls -A "$T/dst")" ]
	[ "$(json_field exit_code <"$T/json")" -eq 0 ]
	# 127.0.0.1 and 127.0.0.2 are two hosts here, both with the path $T/dst;
	# user@127.0.0.1 is 127.0.0.1 again
	[ "$(grep -o '"status":"ok"' "$T/json" | wc -l)" -eq 2 ]
	[ "$(grep -o '"status":"skipped"' "$T/json" | wc -l)" -eq 1 ]
	grep -q "$(id -un)@127.0.0.1:$T/dst is 127.0.0.1:$T/dst again (127.0.0.1): copied once" "$T/err"
	# SRC itself: this machine, the same directory
	fan -aH --sync -v "$T/src/" "127.0.0.1:$T/src" "127.0.0.2:$T/dst2" >"$T/out"
	grep -q "127.0.0.1:$T/src: left out: it is SRC itself" "$T/out"
	same "$T/src" "$T/dst2"
	# a malformed line is named
	printf '127.0.0.1\nhost:with:colons\n' >"$T/bad"
	run "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" -a --sync "$T/src/" --hosts="$T/bad:$T/x"
	[ "$status" -eq 1 ]
	[[ "$output" == *"line 2: expected '[user@]host [data-address]'"* ]]
	run "$RDCP" -a --sync "$T/src/" --hosts="$T/nonexistent:$T/x"
	[ "$status" -eq 3 ]
	[[ "$output" == *"--hosts: cannot read $T/nonexistent"* ]]
}

@test "fan-out: Ctrl-C stops every host; nothing is left running or half-written" {
	mk_rsh
	mkdir -p "$T/src"
	head -c 100000000 /dev/urandom >"$T/src/big"
	(exec "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" -a --sync --bwlimit 20M "$T/src/" \
		"127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3" 2>"$T/err") &
	local pid=$!
	for _ in $(seq 200); do
		[ -e "$T/pid.127.0.0.3" ] && [ -e "$T/pid.127.0.0.1" ] && break
		sleep 0.05
	done
	sleep 1
	local far; far=$(cat "$T"/pid.*)
	kill -INT "$pid"
	local got=0
	wait "$pid" || got=$?
	cat "$T/err"
	[ "$got" -eq 20 ]
	grep -q "interrupted by INT" "$T/err"
	# every host's rdcp is gone within 5 s (a loaded machine may take a
	# moment to deliver the hang-up and let them clean up)
	local left i
	for ((i = 0; i < 100; i++)); do
		left=
		for p in $far; do if kill -0 "$p" 2>/dev/null; then left="$left $p"; fi; done
		[ -z "$left" ] && break
		sleep 0.05
	done
	[ -z "$left" ] || { ps -o pid,stat,args -p "${left# }"; false; }
	[ ! -e "$T/d1/big" ] && [ ! -e "$T/d2/big" ] && [ ! -e "$T/d3/big" ]
	[ -z "$(find "$T" -name '.rdcp-tmp-*')" ]
}

@test "fan-out: options it cannot honour are refused before anything starts" {
	mk_rsh
	mk_tree "$T/src"
	run "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" -a --remove-source-files "$T/src/" \
		"127.0.0.1:$T/d1" "127.0.0.2:$T/d2"
	[ "$status" -eq 1 ]
	[[ "$output" == *"cannot take --remove-source-files"* ]]
	run "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" -a --data-addr 127.0.0.1 "$T/src/" \
		"127.0.0.1:$T/d1" "127.0.0.2:$T/d2"
	[ "$status" -eq 1 ]
	[[ "$output" == *"give each host's in a --hosts file"* ]]
	run "$RDCP" -a --relay "$T/src/" "$T/d1"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--relay is rdcp's own option"* ]]
	[ ! -e "$T/d1" ] && [ ! -e "$T/d2" ]
	[ ! -e "$T/pid.127.0.0.1" ]
	# a SRC that is not there: said once, not once per host; exit 23 (rsync's)
	local got=0
	fan -a --sync --json "$T/nonexistent/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" \
		>"$T/json" 2>"$T/err" || got=$?
	cat "$T/err" "$T/json"
	[ "$got" -eq 23 ]
	[ "$(wc -l <"$T/err")" -eq 1 ]
	grep -q "nonexistent/: No such file or directory" "$T/err"
	[ "$(host_field 0 status <"$T/json")" = "not run" ]
	[ ! -e "$T/d1" ] && [ ! -e "$T/d2" ]
}

# A relay forwards in arrival order; over several streams that broke the
# next host's per-stream buffer quota and a 3-host chain with --streams 4
# hung (90 MB of small files: every run). Every hop uses one stream now.
@test "fan-out with --streams 4: one stream per hop, said once; the chain finishes" {
	mk_rsh
	mkdir -p "$T/src"
	local d i
	for d in $(seq 0 29); do
		mkdir -p "$T/src/d$d"
		head -c 1000000 /dev/urandom | split -b 10000 -a 3 - "$T/src/d$d/f"
	done
	head -c 30000000 /dev/urandom >"$T/src/big"
	run timeout 60 "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" -a --sync --streams 4 "$T/src/" \
		"127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | grep -c 'a fan-out uses one stream per hop')" -eq 1 ]
	for d in d1 d2 d3; do same "$T/src" "$T/$d"; done
}

# Issue 36, 6b: with the link to host 2 cut (packets dropped, no reset) and
# --timeout 10, host 1, itself healthy, ended incomplete (exit 10) and was
# not retried: its hop to host 2 and the sender's to it timed out alike,
# and whichever came first decided. Each hop's limit is now shorter than the
# one before it (fan_hop_ms), so host 1 gives up on host 2 first and
# re-links to host 3; a first host whose feed is cut is retried too.
# The hosts are network namespaces (tests/lib/netns.sh), their own set.
@test "fan-out: the link to host 2 goes silent (dropped, no reset) under --timeout 10: host 1 re-links around it; every live host completes" {
	[ "$(id -u)" = 0 ] || skip "network namespaces need root"
	export NETNS_PREFIX=rdfo NETNS_NET=10.178.0
	source "$BATS_TEST_DIRNAME/../lib/netns.sh"
	netns_up 3 || { netns_down; skip "could not make network namespaces (iproute2, bridge)"; }
	mkdir -p "$T/src"
	mk_files "$T/src/small" 100
	head -c 100000000 /dev/urandom >"$T/src/big"
	local got=0 t0=$SECONDS took
	"$RDCP" -e "$BATS_TEST_DIRNAME/../lib/netns-rsh" --rdcp-path "$RDCP" -a --sync \
		--timeout 10 --bwlimit 20M --json "$T/src/" "10.178.0.1:$T/d1" "10.178.0.2:$T/d2" \
		"10.178.0.3:$T/d3" >"$T/json" 2>"$T/err" &
	local pid=$!
	# about 1.5 s into the data (of 5 s at 20 MB/s)
	for _ in $(seq 400); do [ -d "$T/d3" ] && break; sleep 0.05; done
	sleep 1.5
	netns_cut 2
	wait "$pid" || got=$?
	took=$((SECONDS - t0))
	netns_down
	cat "$T/err" "$T/json"
	echo "took $took s"
	[ "$(host_field 0 status <"$T/json")" = ok ]
	[ "$(host_field 1 status <"$T/json")" = failed ]
	[ "$(host_field 2 status <"$T/json")" = ok ]
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d3"
	[ "$got" -eq "$(host_field 1 exit_code <"$T/json")" ]
	grep -q '^rdcp (10.178.0.1): forwarding the data to the next host failed: .*going on with the host after it (10.178.0.3 ' "$T/err"
	[ "$took" -lt 60 ]
	# the link down from the start: host 1 cannot reach host 2, nor host 2
	# host 3; the second round must not put host 2 first again (the sender
	# could not reach it, and host 3, healthy, failed with it)
	rm -rf "$T/d1" "$T/d2" "$T/d3"
	netns_up 3 || skip "could not make network namespaces again"
	netns_cut 2
	got=0
	"$RDCP" -e "$BATS_TEST_DIRNAME/../lib/netns-rsh" --rdcp-path "$RDCP" -a --sync \
		--timeout 10 --json "$T/src/" "10.178.0.1:$T/d1" "10.178.0.2:$T/d2" \
		"10.178.0.3:$T/d3" >"$T/json" 2>"$T/err" || got=$?
	netns_down
	cat "$T/err" "$T/json"
	[ "$(host_field 0 status <"$T/json")" = ok ]
	[ "$(host_field 1 status <"$T/json")" = failed ]
	[ "$(host_field 2 status <"$T/json")" = ok ]
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d3"
	[ "$got" -eq 10 ]
}

# --watch into a fan-out (issue 37): the hosts' logins and the chain stay
# up between batches. fan_watching ARGS... DSTS...: the watch in the
# background (--json into $T/out, stderr into $T/err; its pid $WPID), once
# its first, whole round has landed.
fan_watching() {
	(exec "$RDCP" -e "$T/rsh" --rdcp-path "$RDCP" --sync -a --json --watch "$@" \
		>"$T/out" 2>"$T/err") &
	WPID=$!
	for _ in $(seq 400); do
		[ -s "$T/out" ] && return 0
		kill -0 "$WPID" 2>/dev/null || break
		sleep 0.025
	done
	echo "the watch's first round did not land:"; cat "$T/out" "$T/err"; return 1
}
# until_all SECONDS DIR...: each DIR identical to $T/src within SECONDS;
# the seconds each took after the call, into $T/lag (one line per DIR)
until_all() {
	local limit=$1 d i t0; shift
	t0=$(date +%s.%N)
	: >"$T/lag"
	for d in "$@"; do
		for ((i = 0; i < limit * 20; i++)); do
			[ -z "$(rsync -anciH --delete "$T/src/" "$d/")" ] && break
			sleep 0.05
		done
		[ -z "$(rsync -anciH --delete "$T/src/" "$d/")" ] ||
			{ echo "$d still differs:"; rsync -anciH --delete "$T/src/" "$d/"; cat "$T/err"; return 1; }
		echo "$d $(echo "$(date +%s.%N) - $t0" | bc)" >>"$T/lag"
	done
	cat "$T/lag"
}
# a few changes of every kind in $T/src
change_src() {
	echo "new $1" >"$T/src/new$1"
	mkdir -p "$T/src/nd$1/deep"
	echo x >"$T/src/nd$1/deep/x"
	head -c 100000 /dev/urandom >>"$T/src/log"
}

@test "fan-out watch: three hosts follow new, appended, deleted and renamed entries over one login each; SIGTERM ends it, exit 0" {
	mk_rsh
	mkdir -p "$T/src/d/e"
	echo a >"$T/src/a"
	echo c >"$T/src/d/e/c"
	head -c 300000 /dev/urandom >"$T/src/log"
	fan_watching --delete "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3"
	local pids; pids=$(cat "$T"/pid.*)
	until_all 5 "$T/d1" "$T/d2" "$T/d3"
	change_src 1
	until_all 5 "$T/d1" "$T/d2" "$T/d3"
	rm "$T/src/a"
	mv "$T/src/d" "$T/src/d2"
	chmod 600 "$T/src/new1"
	ln -s d2/e/c "$T/src/link"
	until_all 5 "$T/d1" "$T/d2" "$T/d3"
	[ ! -e "$T/d2/a" ] && [ ! -e "$T/d3/d" ]
	# one login per host for the whole watch: the same rdcp took every round
	[ "$(cat "$T"/pid.*)" = "$pids" ]
	for p in $pids; do kill -0 "$p"; done
	# --json: one object per round, every host in each, all ok
	[ "$(wc -l <"$T/out")" -ge 3 ]
	[ "$(jq -r .exit_code "$T/out" | sort -u)" = 0 ]
	[ "$(jq -r '.hosts[].status' "$T/out" | sort -u)" = ok ]
	[ "$(jq -r .round "$T/out" | tail -1)" -ge 2 ]
	kill -TERM "$WPID"
	local rc=0
	wait "$WPID" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ ! -s "$T/err" ]   # nothing said: nothing went wrong
	# every host's rdcp left with the watch
	for p in $pids; do ! kill -0 "$p" 2>/dev/null; done
}

@test "fan-out watch: a host that dies is cut out and said once; the others follow every change; it catches up when it is back" {
	mk_rsh
	mkdir -p "$T/src/d"
	echo a >"$T/src/a"
	head -c 300000 /dev/urandom >"$T/src/log"
	fan_watching --delete "$T/src/" "127.0.0.1:$T/d1" "127.0.0.2:$T/d2" "127.0.0.3:$T/d3"
	until_all 5 "$T/d1" "$T/d2" "$T/d3"
	# host 2's rdcp killed, and its logins failing from now on
	echo 127.0.0.2 >"$T/down"
	kill -9 "$(cat "$T/pid.127.0.0.2")"
	local t0=$SECONDS
	change_src 1
	until_all 5 "$T/d1" "$T/d3"
	rm "$T/src/a"
	mv "$T/src/d" "$T/src/d2"
	until_all 5 "$T/d1" "$T/d3"
	change_src 2
	until_all 5 "$T/d1" "$T/d3"
	[ -e "$T/d2/a" ] && [ ! -e "$T/d2/new2" ]   # it had none of them
	# said once for the outage, whatever the rounds and logins since
	while [ $((SECONDS - t0)) -lt 4 ]; do sleep 0.2; done
	cat "$T/err"
	[ "$(grep -c '127.0.0.2' "$T/err")" -eq 1 ]
	grep -q "^rdcp: 127.0.0.2:$T/d2: failed (exit [0-9]*): .*the watch goes on without it" "$T/err"
	# --json: host 2 down in the rounds since, the others ok
	jq -c '[.hosts[].status]' "$T/out" | grep -qx '\["ok","down","ok"\]'
	# back: its next login (1, 2, 4 ... s apart) is a whole round that
	# catches it up; then it follows the changes again
	rm "$T/down"
	until_all 15 "$T/d2"
	grep -q "127.0.0.2:$T/d2: back after [0-9]* s: caught up" "$T/err"
	change_src 3
	until_all 5 "$T/d1" "$T/d2" "$T/d3"
	[ "$(grep -c '127.0.0.2' "$T/err")" -eq 2 ]
	kill -TERM "$WPID"
	local rc=0
	wait "$WPID" || rc=$?
	[ "$rc" -eq 0 ]
	for p in $(cat "$T"/pid.*); do ! kill -0 "$p" 2>/dev/null; done
}
