#!/usr/bin/env bats
# rdcp --sync over RDMA inside the soft-RoCE VM: push and pull through the
# remote-shell path, the data on rxe (--data-addr), trees compared with rsync.
load ../e2e/helpers
ADDR=${RDCP_ADDR:?run me inside the soft-RoCE VM}
LRSH=$BATS_TEST_DIRNAME/../e2e/local-rsh

same() {
	local d; d=$(rsync -anciH --delete "$1/" "$2/")
	if [ -n "$d" ]; then echo "trees differ:"; echo "$d"; return 1; fi
}

mk() {
	mkdir -p "$1/blobs" "$1/snap/rev"
	head -c $((24 << 20)) /dev/urandom >"$1/blobs/big"
	for i in $(seq 200); do echo "$i" >"$1/snap/rev/f$i"; done
	ln -s ../../blobs/big "$1/snap/rev/model"
}


@test "rdma: push, then a no-op re-run" {
	mk "$T/src"
	"$RDCP" --sync --json --streams 2 --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field transport <"$T/json")" = rdma ]
	[ "$(json_field files_sent <"$T/json")" -eq 201 ]
	same "$T/src" "$T/dst"
	"$RDCP" --sync --json --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field files_sent <"$T/json")" -eq 0 ]
	[ "$(json_field bytes_sent <"$T/json")" -eq 0 ]
}

@test "rdma windows: a tree in windows of directories (a data session each), with --delete; a re-run moves nothing" {
	mk "$T/src"
	mkdir -p "$T/src/snap/rev2" "$T/src/more/deep"
	for i in $(seq 40); do echo "$i" >"$T/src/snap/rev2/g$i"; echo "$i" >"$T/src/more/deep/h$i"; done
	# --transport rdma: RDMA or exit 16, in every window
	RDCP_TEST_WINDOW=60 "$RDCP" --sync -vv --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$T/src/" "vm:$T/dst" >"$T/out"
	cat "$T/out"
	[ "$(grep -c '^window ' "$T/out")" -ge 2 ]
	same "$T/src" "$T/dst"
	rm -r "$T/src/more"
	RDCP_TEST_WINDOW=60 "$RDCP" --sync --delete --json --transport rdma --data-addr "$ADDR" \
		-e "$LRSH" --rdcp-path "$RDCP" "$T/src/" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field files_sent <"$T/json")" -eq 0 ]
	[ "$(json_field deleted <"$T/json")" -eq 42 ]
	same "$T/src" "$T/dst"
}

@test "rdma ranked: mpirun -np 2, each rank's windows and big files over RDMA, --delete after both" {
	command -v mpirun >/dev/null || { echo "mpirun not installed (openmpi-bin)"; false; }
	mk "$T/src"
	mkdir -p "$T/src/more/deep"
	head -c $((20 << 20)) /dev/urandom >"$T/src/blobs/big2"
	for i in $(seq 40); do echo "$i" >"$T/src/more/deep/h$i"; done
	mkdir -p "$T/dst/gone" && touch "$T/dst/gone/x"
	# --transport rdma: RDMA or exit 16, on every rank
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp \
	OMPI_MCA_btl_vader_single_copy_mechanism=none RDCP_TEST_WINDOW=60 \
	RDCP_TEST_BIG=$((16 << 20)) timeout 300 mpirun --oversubscribe -np 2 "$RDCP" --sync \
		--delete --json --transport rdma --data-addr "$ADDR" -e "$LRSH" --rdcp-path "$RDCP" \
		"$T/src/" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field transport <"$T/json")" = rdma ]
	[ "$(json_field deleted <"$T/json")" -eq 2 ]
	same "$T/src" "$T/dst"
	# the two blobs (24 and 20 MiB) went one to each rank
	local k
	for k in 0 1; do
		[ "$(tail -n 1 "$T/json" | jq ".ranks[$k].bytes_sent")" -ge $((20 << 20)) ]
	done
}

@test "rdma: pull, one changed file" {
	mk "$T/src"
	"$RDCP" --sync --transport rdma --data-addr "$ADDR" -e "$LRSH" --rdcp-path "$RDCP" \
		"vm:$T/src" "$T/dst"
	same "$T/src" "$T/dst"
	echo changed >>"$T/src/snap/rev/f7"
	"$RDCP" --sync --json --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "vm:$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field files_sent <"$T/json")" -eq 1 ]
	[ "$(json_field transport <"$T/json")" = rdma ]
	same "$T/src" "$T/dst"
}

@test "rdma: fan-out to three 'hosts' (one rxe device, three DSTs), every hop over RDMA; a re-run moves nothing" {
	mk "$T/src"
	mkdir -p "$T/d2"
	cp -a "$T/src/." "$T/d2/"
	echo changed >"$T/d2/snap/rev/f9"
	"$RDCP" --sync --json --transport rdma -e "$LRSH" --rdcp-path "$RDCP" "$T/src" \
		"$ADDR:$T/d1" "$ADDR:$T/d2" "$ADDR:$T/d3" >"$T/json"
	cat "$T/json"
	[ "$(json_field transport <"$T/json")" = rdma ]
	[ "$(json_field exit_code <"$T/json")" -eq 0 ]
	for d in d1 d2 d3; do same "$T/src" "$T/$d"; done
	# the source sent the tree once (24 MiB and 200 small files), not three times
	[ "$(json_field bytes_total_sent <"$T/json")" -lt $((26 << 20)) ]
	"$RDCP" --sync --json --transport rdma -e "$LRSH" --rdcp-path "$RDCP" "$T/src" \
		"$ADDR:$T/d1" "$ADDR:$T/d2" "$ADDR:$T/d3" >"$T/json"
	[ "$(json_field bytes_sent <"$T/json")" -eq 0 ]
}

@test "rdma: fan-out, the middle host of three killed mid-run: the first re-links to the last over RDMA; both finish" {
	mkdir -p "$T/src/small"
	for i in $(seq 50); do echo "$i" >"$T/src/small/f$i"; done
	head -c 100000000 /dev/urandom >"$T/src/big"
	# 25 MB/s, so that the middle host can be killed while the data flows
	("$RDCP" --sync --json -P --bwlimit 25M --transport rdma -e "$LRSH" --rdcp-path "$RDCP" \
		"$T/src/" "$ADDR:$T/d1" "$ADDR:$T/d2" "$ADDR:$T/d3" >"$T/json" 2>"$T/err") &
	local pid=$! victim= i p
	# the middle host: the server with a temp file open in d2
	for ((i = 0; i < 400 && !victim; i++)); do
		sleep 0.05
		for p in $(pgrep -f -- '--server'); do
			if ls -l "/proc/$p/fd" 2>/dev/null | grep -q "$T/d2/"; then victim=$p; fi
		done
	done
	# (no victim: the run is stopped, not left to hold bats' output open)
	[ -n "$victim" ] || { kill "$pid"; wait "$pid"; false; }
	# killed once it has written 20 MB of the 100 (its temp file is sized
	# up front; a fixed sleep after a slow find once killed it after its end)
	for ((i = 0; i < 400; i++)); do
		[ "$(awk '/^wchar/ { print $2 }' "/proc/$victim/io" 2>/dev/null || echo 0)" \
			-lt 20000000 ] || break
		sleep 0.02
	done
	kill -9 "$victim" || :
	local got=0
	wait "$pid" || got=$?
	cat "$T/err" "$T/json"
	[ "$got" -eq 10 ]
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d3"
	grep -q 'going on with the host after it' "$T/err"
	grep -q 'the host before this one stopped sending' "$T/err"
	# the last host's second round got only what was lost in flight through
	# the killed one (measured: 7 chunks, about the RDMA pool's 8 buffers
	# it held; 1.29 x in all), not the 60% it had not had yet (1.6 x)
	[ "$(json_field bytes_total_sent <"$T/json")" -le $((100000000 * 145 / 100)) ]
}

# Live trees over RDMA (issue "Live trees", item 1; live.bats has the TCP
# cases): between the scan and the reads (the sender's test pause) a
# recording grows, a log grows and a state file is rewritten at its size.
# The scanned parts land (the large file's chunks checked by the sender as
# it reads them: RDMA never sends from the page cache), the state file as
# it now is; exit 0, nothing said, --delete on; the next run completes it.
live_rdma() {
	local mode=$1 rc=0
	mkdir -p "$T/src" "$T/dst"
	head -c $((9 * 1048576 + 100)) /dev/urandom >"$T/src/rec"
	head -c 1000 /dev/urandom >"$T/src/log"
	head -c 2000 /dev/urandom >"$T/src/state"
	echo stale >"$T/dst/stale"
	local src=$T/src/ dst=vm:$T/dst
	[ "$mode" = pull ] && { src=vm:$T/src/; dst=$T/dst; }
	RDCP_TEST_PAUSE=$T/pause "$RDCP" --sync --delete --transport rdma --data-addr "$ADDR" \
		-e "$LRSH" --rdcp-path "$RDCP" "$src" "$dst" >"$T/out" 2>"$T/err" &
	local pid=$!
	for _ in $(seq 1200); do [ -e "$T/pause" ] && break; sleep 0.05; done
	[ -e "$T/pause" ] || { kill "$pid"; echo "the sender never paused"; false; }
	head -c $((3 * 1048576)) /dev/urandom >>"$T/src/rec"
	head -c 5000 /dev/urandom >>"$T/src/log"
	head -c 2000 /dev/urandom >"$T/src/state"
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/out" "$T/err"
	[ "$rc" -eq 0 ]
	[ ! -s "$T/err" ]
	[ "$(stat -c %s "$T/dst/rec")" -eq $((9 * 1048576 + 100)) ]
	cmp -n $((9 * 1048576 + 100)) "$T/src/rec" "$T/dst/rec"
	[ "$(stat -c %s "$T/dst/log")" -eq 1000 ] && cmp -n 1000 "$T/src/log" "$T/dst/log"
	cmp "$T/src/state" "$T/dst/state"
	[ ! -e "$T/dst/stale" ]
	"$RDCP" --sync --delete --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$src" "$dst"
	same "$T/src" "$T/dst"
}

@test "rdma live: files that grow or are rewritten at their size after the scan are copied, exit 0 (push)" {
	live_rdma push
}
@test "rdma live: files that grow or are rewritten at their size after the scan are copied, exit 0 (pull)" {
	live_rdma pull
}

# A large file rewritten in place all the time, over RDMA: three more
# rounds, then the last sends it as read (ASREAD chunks: 4 MiB + a 16-byte
# tag, in the 4 MiB + 64 buffers both ends registered); exit 0, listed in
# --json's sent_as_read, its bytes past the writer's first 4 KiB SRC's.
never_still_rdma() {
	local mode=$1 rc=0
	mkdir -p "$T/src" "$T/dst"
	head -c $((9 * 1048576)) /dev/urandom >"$T/src/busy"
	python3 - "$T/src/busy" "$T/stop" <<-'PY' &
	import os, sys, time
	end = time.monotonic() + 60
	with open(sys.argv[1], "r+b", buffering=0) as f:
	    while time.monotonic() < end and not os.path.exists(sys.argv[2]):
	        f.seek(0)
	        f.write(os.urandom(4096))
	        time.sleep(0.002)
	PY
	local wr=$!
	sleep 0.2
	local src=$T/src/ dst=vm:$T/dst
	[ "$mode" = pull ] && { src=vm:$T/src/; dst=$T/dst; }
	"$RDCP" --sync --json --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$src" "$dst" >"$T/out" 2>"$T/err" || rc=$?
	touch "$T/stop"
	wait "$wr"
	cat "$T/out" "$T/err"
	[ "$rc" -eq 0 ]
	[ ! -s "$T/err" ]
	[ "$(json_field transport <"$T/out")" = rdma ]
	[ "$(jq -c .sent_as_read "$T/out")" = '["busy"]' ]
	[ "$(stat -c %s "$T/dst/busy")" -eq $((9 * 1048576)) ]
	cmp -i 4096 "$T/src/busy" "$T/dst/busy"
}
@test "rdma live: a large file that never stands still is sent as read in the last round, exit 0 (push)" {
	never_still_rdma push
}
@test "rdma live: a large file that never stands still is sent as read in the last round, exit 0 (pull)" {
	never_still_rdma pull
}

# --watch over RDMA: a whole round, then rounds for a new file, a deletion
# and a recording that grows under --append, every round's data on rxe
@test "rdma watch: changes land round by round over RDMA; a growing recording costs its new bytes; SIGTERM ends it, exit 0" {
	mkdir -p "$T/src/d" "$T/dst"
	echo a >"$T/src/a"
	head -c $((6 << 20)) /dev/urandom >"$T/src/rec"
	"$RDCP" --sync --json --watch --append --delete --transport rdma --data-addr "$ADDR" \
		-e "$LRSH" --rdcp-path "$RDCP" "$T/src/" "vm:$T/dst" >"$T/out" 2>"$T/err" &
	local pid=$! i d
	for ((i = 0; i < 400; i++)); do [ -s "$T/out" ] && break; sleep 0.05; done
	echo new >"$T/src/d/new"
	rm "$T/src/a"
	for ((i = 0; i < 8; i++)); do
		head -c 1048576 /dev/urandom >>"$T/src/rec"
		sleep 0.2
	done
	for ((i = 0; i < 200; i++)); do
		d=$(rsync -anciH --delete "$T/src/" "$T/dst/")
		[ -z "$d" ] && break
		sleep 0.05
	done
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	cat "$T/out" "$T/err"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	[ "$(jq -r .transport "$T/out" | sort -u | grep -v none)" = rdma ]
	[ "$(jq -r .exit_code "$T/out" | sort -u)" = 0 ]
	# the figures, for the log: a round's time and lag over RDMA (each
	# round connects its data session anew)
	jq -s -r '"# rdma watch: \(length) rounds; median round \(map(.seconds) | sort |
		.[length / 2 | floor]) s, median lag \(map(select(.lag_seconds != null) |
		.lag_seconds) | sort | .[length / 2 | floor]) s"' "$T/out" >&3
	# after the first round: 8 MiB appended and two small changes; the
	# recording's rounds each send its new bytes and one 64 KiB block
	local sent; sent=$(jq -s '[.[] | select(.round > 0) | .bytes_sent] | add' "$T/out")
	[ "$sent" -ge $((8 << 20)) ] && [ "$sent" -le $((9 << 20)) ]
}
