#!/usr/bin/env bats
# What rdcp prints, against rsync 3.x as the reference: the same flags on
# the same trees, the lines compared (sorted: rsync and rdcp do things in
# another order). Small trees; each test a second or two.
load helpers

RRSH=$BATS_TEST_DIRNAME/local-rsh   # rsync's remote shell too: "host" dropped

# twin NAME: the tree $T/s, and DST states $T/a/dst (rdcp's) and
# $T/b/dst (rsync's) made identical with cp -a. Old mtimes, so no change
# hides in the current second.
mk_src() {
	mkdir -p "$T/s/sub" "$T/a" "$T/b"
	echo hello >"$T/s/a"
	echo bb >"$T/s/sub/b"
	printf 'twelve bytes' >"$T/s/c"
	ln -s a "$T/s/lnk"
	chmod 644 "$T/s/a" "$T/s/c" "$T/s/sub/b"
	touch -h -d '2020-01-01 00:00:00' "$T/s/a" "$T/s/sub/b" "$T/s/c" "$T/s/lnk"
	touch -d '2020-01-01 00:00:00' "$T/s/sub" "$T/s"
}
# copy SRC's state to both DSTs
twin_dst() {
	rm -rf "$T/a/dst" "$T/b/dst"
	cp -a "$T/s" "$T/a/dst"
	cp -a "$T/s" "$T/b/dst"
}
# the item lines of rdcp and rsync with FLAGS, local runs, sorted
both() {
	(cd "$T/a" && "$RDCP" "$@" ../s/ dst/) | sort >"$T/rdcp.out"
	(cd "$T/b" && rsync "$@" ../s/ dst/) | sort >"$T/rsync.out"
	echo "rdcp:"; cat "$T/rdcp.out"; echo "rsync:"; cat "$T/rsync.out"
	diff "$T/rsync.out" "$T/rdcp.out"
}
# the -v names, without the first line and the summary
names() { sed -n '2,/^$/p' | sed '/^$/d' | sort; }

@test "itemize: a new tree (file, dir, symlink, DST made) as rsync -ai" {
	mk_src
	both -ai
	grep -qx 'created directory dst' "$T/rdcp.out"
	grep -qx '>f+++++++++ a' "$T/rdcp.out"
	grep -qx 'cL+++++++++ lnk -> a' "$T/rdcp.out"
	grep -qx 'cd+++++++++ sub/' "$T/rdcp.out"
}

@test "itemize: size+time, time only, perms only, owner and group: rsync's columns" {
	mk_src
	twin_dst
	echo more >>"$T/s/a"                  # >f.st......
	touch -d '2021-06-01' "$T/s/c"        # >f..t......
	chmod 600 "$T/s/sub/b"                # .f...p.....
	touch -d '2020-01-01 00:00:00' "$T/s/a" "$T/s/sub" "$T/s"
	touch -d '2022-01-01' "$T/a/dst/a" "$T/b/dst/a"
	both -ai
	grep -qx '>f.st...... a' "$T/rdcp.out"
	grep -qx '>f..t...... c' "$T/rdcp.out"
	grep -qx '.f...p..... sub/b' "$T/rdcp.out"
	if [ "$(id -u)" != 0 ]; then
		echo "# SKIPPED the owner/group part: needs root" >&3
		return
	fi
	twin_dst
	chown 1:2 "$T/s/c"                    # .f....og...
	touch -d '2020-01-01 00:00:00' "$T/s"
	both -ai
	grep -qx '.f....og... c' "$T/rdcp.out"
}

@test "itemize: -c, without -t (T), a directory's mtime, a symlink's target" {
	mk_src
	twin_dst
	echo HELLO >"$T/s/a"                  # same size and time: only -c sees it
	touch -d '2020-01-01 00:00:00' "$T/s/a"
	both -aic
	grep -qx '>fc........ a' "$T/rdcp.out"
	twin_dst
	printf 'TWELVE BYTES' >"$T/s/c"; echo 1234 >"$T/s/sub/b"
	touch -d '2021-01-01' "$T/s/c" "$T/s/sub/b"
	touch -d '2020-01-01' "$T/a/dst/sub/b" "$T/b/dst/sub/b"
	touch -d '2020-01-01 00:00:00' "$T/s/sub" "$T/s"
	both -rli
	grep -qx '>f..T...... c' "$T/rdcp.out"
	grep -qx '>f.sT...... sub/b' "$T/rdcp.out"
	twin_dst
	touch -d '2023-03-03' "$T/s/sub"
	ln -sfn sub "$T/s/lnk"
	touch -h -d '2020-01-01 00:00:00' "$T/s/lnk"; touch -d '2020-01-01 00:00:00' "$T/s"
	both -ai
	grep -qx '.d..t...... sub/' "$T/rdcp.out"
	grep -qx 'cLc........ lnk -> sub' "$T/rdcp.out"
}

@test "itemize: deletions (deepest first) and a dry run, as rsync" {
	mk_src
	twin_dst
	for d in a b; do
		mkdir -p "$T/$d/dst/gone/deeper"; echo x >"$T/$d/dst/gone/deeper/f"; echo y >"$T/$d/dst/extra"
		touch -d '2020-01-01 00:00:00' "$T/$d/dst"
	done
	echo new >"$T/s/new"; touch -d '2020-01-01 00:00:00' "$T/s/new" "$T/s"
	both -ain --delete
	grep -qx '\*deleting   gone/deeper/f' "$T/rdcp.out"
	grep -qx '>f+++++++++ new' "$T/rdcp.out"
	[ -e "$T/a/dst/extra" ] && [ ! -e "$T/a/dst/new" ]   # a dry run
	both -ai --delete
	[ ! -e "$T/a/dst/gone" ] && [ -e "$T/a/dst/new" ]
	# rsync's order for deletions: what is inside a directory, then it
	(cd "$T/a" && "$RDCP" -ai --delete ../s/ dst/) >/dev/null
	mkdir -p "$T/a/dst/g2/in"; echo z >"$T/a/dst/g2/in/f"
	run sh -c "cd '$T/a' && '$RDCP' -ai --delete ../s/ dst/"
	[ "$(grep deleting <<<"$output")" = "$(printf '%s\n' '*deleting   g2/in/f' '*deleting   g2/in/' '*deleting   g2/')" ]
}

@test "itemize: hard links (-H): one name sent, the others 'hf ... => it' (rsync sends the last name, rdcp the first)" {
	mk_src
	echo h >"$T/s/h1"; ln "$T/s/h1" "$T/s/h2"; touch -d '2020-01-01 00:00:00' "$T/s/h1" "$T/s"
	(cd "$T/a" && "$RDCP" -aiH ../s/ dst/) | sort >"$T/rdcp.out"
	(cd "$T/b" && rsync -aiH ../s/ dst/) | sed 's/h1/hX/g; s/h2/h1/g; s/hX/h2/g' | sort >"$T/rsync.out"
	cat "$T/rdcp.out"
	diff "$T/rsync.out" "$T/rdcp.out"
	grep -qx 'hf+++++++++ h2 => h1' "$T/rdcp.out"
}

@test "itemize: a push says '<f' as rsync does; pull and local say '>f'" {
	mk_src
	"$RDCP" -ai -e "$RRSH" --rdcp-path "$RDCP" "$T/s/" "localhost:$T/a/dst/" | sort >"$T/rdcp.out"
	rsync -ai -e "$RRSH" "$T/s/" "localhost:$T/b/dst/" | sort >"$T/rsync.out"
	sed -i "s|$T/[ab]/|X/|" "$T/rdcp.out" "$T/rsync.out"   # "created directory X/dst"
	cat "$T/rdcp.out"
	diff "$T/rsync.out" "$T/rdcp.out"
	grep -qx '<f+++++++++ a' "$T/rdcp.out"
	rm -rf "$T/a/dst" "$T/b/dst"
	"$RDCP" -ai -e "$RRSH" --rdcp-path "$RDCP" "localhost:$T/s/" "$T/a/dst/" | sort >"$T/rdcp.out"
	rsync -ai -e "$RRSH" "localhost:$T/s/" "$T/b/dst/" | sort >"$T/rsync.out"
	sed -i "s|$T/[ab]/|X/|" "$T/rdcp.out" "$T/rsync.out"
	diff "$T/rsync.out" "$T/rdcp.out"
	grep -qx '>f+++++++++ a' "$T/rdcp.out"
}

@test "-v: names as rsync -v (files, new dirs, links, deletions), then rsync's two summary lines" {
	mk_src
	twin_dst
	echo more >>"$T/s/a"; chmod 600 "$T/s/c"; echo y >"$T/a/dst/extra"; echo y >"$T/b/dst/extra"
	touch -d '2020-01-01 00:00:00' "$T/s" "$T/a/dst" "$T/b/dst"
	(cd "$T/a" && "$RDCP" -av --delete ../s/ dst/) >"$T/rdcp.out"
	(cd "$T/b" && rsync -av --delete ../s/ dst/) >"$T/rsync.out"
	cat "$T/rdcp.out"
	diff <(names <"$T/rsync.out") <(names <"$T/rdcp.out")
	grep -qx 'deleting extra' "$T/rdcp.out"
	grep -Eq '^sent [0-9,]+ bytes  received [0-9,]+ bytes  [0-9,]+\.[0-9]{2} bytes/sec$' "$T/rdcp.out"
	grep -Eq '^total size is 27  speedup is [0-9]+\.[0-9]{2}$' "$T/rdcp.out"
	[ "$(grep -o '^total size is [0-9]*' "$T/rsync.out")" = "$(grep -o '^total size is [0-9]*' "$T/rdcp.out")" ]
	# a dry run says so, as rsync
	echo again >>"$T/s/a"
	run sh -c "cd '$T/a' && '$RDCP' -avn ../s/ dst/"
	[[ "$output" == *"speedup is "*" (DRY RUN)" ]]
	# -n alone prints nothing, as rsync
	run sh -c "cd '$T/a' && '$RDCP' -an ../s/ dst/ 2>&1"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "-q: a successful run prints nothing at all (stdout and stderr), local, push, pull" {
	mk_src
	run sh -c "'$RDCP' -aq '$T/s/' '$T/a/l' 2>&1"
	[ "$status" -eq 0 ] && [ -z "$output" ] && [ -e "$T/a/l/sub/b" ]
	run sh -c "'$RDCP' -aqi -e '$RRSH' --rdcp-path '$RDCP' '$T/s/' 'localhost:$T/a/p' 2>&1"
	[ "$status" -eq 0 ] && [ -z "$output" ] && [ -e "$T/a/p/sub/b" ]
	run sh -c "'$RDCP' -aqv -e '$RRSH' --rdcp-path '$RDCP' 'localhost:$T/s/' '$T/a/q' 2>&1"
	[ "$status" -eq 0 ] && [ -z "$output" ] && [ -e "$T/a/q/sub/b" ]
}

@test "no 'using TCP' notice without -v (push and pull); -v shows it" {
	mk_src
	run sh -c "'$RDCP' -a -e '$RRSH' --rdcp-path '$RDCP' '$T/s/' 'localhost:$T/a/p' 2>&1"
	[ "$status" -eq 0 ] && [ -z "$output" ]
	run sh -c "'$RDCP' -a -e '$RRSH' --rdcp-path '$RDCP' 'localhost:$T/s/' '$T/a/q' 2>&1"
	[ "$status" -eq 0 ] && [ -z "$output" ]
	if "$RDCP" --transport rdma -a "$T/s/" "$T/a/r" 2>/dev/null; then
		echo "# SKIPPED the -v part: this machine has an RDMA device (no fallback)" >&3
		return
	fi
	run sh -c "'$RDCP' -av -e '$RRSH' --rdcp-path '$RDCP' 'localhost:$T/s/' '$T/a/v' 2>&1"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'using TCP' <<<"$output")" -eq 1 ]
}

# json_field FILE FIELD: a field of the one JSON object in FILE
json_field() {
	python3 -c 'import json,sys
d = json.loads(open(sys.argv[1]).read())
print(json.dumps(d[sys.argv[2]]))' "$@"
}

@test "--json: one object on stdout, parsed by python3, its exit code the process's (success and failures)" {
	mk_src
	local rc=0
	"$RDCP" -a --json "$T/s/" "$T/a/$(printf 'odd"\\\n\001name')" >"$T/j" || rc=$?
	[ "$rc" -eq 0 ]
	[ "$(wc -l <"$T/j")" -eq 1 ]
	[ "$(json_field "$T/j" exit_code)" = 0 ]
	[ "$(json_field "$T/j" files_considered)" = 6 ]   # ./ sub/ a c lnk sub/b
	[ "$(json_field "$T/j" bytes_considered)" = 22 ]   # rsync: a link counts its target
	[ "$(json_field "$T/j" files_sent)" = 3 ]
	[ "$(json_field "$T/j" bytes_sent)" = 21 ]
	[ "$(json_field "$T/j" errors)" = 0 ]
	[ "$(json_field "$T/j" transport)" = '"tcp"' ]
	[ "$(json_field "$T/j" dst)" = "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$T/a/$(printf 'odd"\\\n\001name')")" ]
	# DST unusable (a file where a directory must be): exit 3, in the JSON too
	echo file >"$T/a/notdir"
	rc=0
	"$RDCP" -a --json "$T/s/" "$T/a/notdir/" >"$T/j" 2>"$T/err" || rc=$?
	[ "$rc" -eq 3 ]
	[ "$(json_field "$T/j" exit_code)" = 3 ]
	# the far side cannot start (connection never made): the same
	rc=0
	"$RDCP" -a --json -e "$RRSH" --rdcp-path /nonexistent/rdcp "$T/s/" "localhost:$T/a/x" >"$T/j" 2>"$T/err" || rc=$?
	[ "$rc" -ne 0 ]
	[ "$(json_field "$T/j" exit_code)" = "$rc" ]
	# a source file unreadable: exit 23, counted as an error
	if [ "$(id -u)" = 0 ]; then
		echo "# SKIPPED the unreadable-file part: root reads everything" >&3
		return
	fi
	chmod 000 "$T/s/c"
	rc=0
	"$RDCP" -a --json "$T/s/" "$T/a/u" >"$T/j" 2>"$T/err" || rc=$?
	[ "$rc" -eq 23 ] && [ "$(json_field "$T/j" errors)" = 1 ]
}

# jq_field FILE NAME: one field of the --json object in FILE (must exist)
jq_field() {
	jq -r --arg k "$2" 'if has($k) then .[$k] else error("no field \($k)") end' "$1"
}

# paused_vanish MODE: a --json run in MODE whose sender pauses after its
# scan, while two of SRC's files are removed; its JSON in $T/j, exit in $rc
paused_vanish() {
	local mode=$1
	rm -f "$T/pause"; rm -rf "$T/s2"; cp -a "$T/s" "$T/s2"
	head -c 200000 /dev/urandom >"$T/s2/big"
	RDCP_TEST_PAUSE=$T/pause sync_in "$mode" -a --json "$T/s2/" "$T/a/v$mode" >"$T/j" 2>"$T/err" &
	local pid=$!
	for _ in $(seq 500); do [ -e "$T/pause" ] && break; sleep 0.01; done
	rm "$T/s2/sub/b" "$T/s2/big"
	rm "$T/pause"
	rc=0; wait $pid || rc=$?
	cat "$T/j" "$T/err"
}

@test "--json: errors agrees with the exit code: vanished files (24) counted in errors and vanished (local, push, pull)" {
	mk_src
	local mode
	for mode in local push pull; do
		paused_vanish $mode
		[ "$rc" -eq 24 ]
		[ "$(jq_field "$T/j" exit_code)" = 24 ]
		[ "$(jq_field "$T/j" vanished)" = 2 ]
		[ "$(jq_field "$T/j" errors)" = 2 ]
	done
}

@test "--json: errors agrees with the exit code: a failed entry (23) is an error, not vanished; success has none" {
	mk_src
	mkdir -p "$T/a/f/a/in" && echo x >"$T/a/f/a/in/f"   # a full dir where SRC has a file
	local rc=0
	"$RDCP" -a --json "$T/s/" "$T/a/f" >"$T/j" 2>"$T/err" || rc=$?
	cat "$T/j" "$T/err"
	[ "$rc" -eq 23 ]
	[ "$(jq_field "$T/j" exit_code)" = 23 ]
	[ "$(jq_field "$T/j" errors)" = 1 ]
	[ "$(jq_field "$T/j" vanished)" = 0 ]
	"$RDCP" -a --json "$T/s/" "$T/a/ok" >"$T/j"
	[ "$(jq_field "$T/j" exit_code)" = 0 ]
	[ "$(jq_field "$T/j" errors)" = 0 ]
	[ "$(jq_field "$T/j" vanished)" = 0 ]
	# a far receiver that fails before its plan (DST unusable): its list,
	# empty, then its DONE; the run's code, not a protocol error
	echo file >"$T/a/afile"
	rc=0
	sync_in push -a --json "$T/s/" "$T/a/afile/" >"$T/j" 2>"$T/err" || rc=$?
	cat "$T/j" "$T/err"
	[ "$rc" -eq 3 ]
	[ "$(jq_field "$T/j" exit_code)" = 3 ]
	[ "$(jq_field "$T/j" errors)" = 0 ]
	[ "$(jq -c .failed "$T/j")" = '[]' ]
}

@test "--json: failed lists each failed entry with its reason (local, push, pull)" {
	mk_src
	local mode
	for mode in local push pull; do
		mkdir -p "$T/a/l$mode/a/in" && echo x >"$T/a/l$mode/a/in/f"   # a full dir where SRC has a file
		local rc=0
		sync_in $mode -a --json "$T/s/" "$T/a/l$mode" >"$T/j" 2>"$T/err" || rc=$?
		cat "$T/j" "$T/err"
		[ "$rc" -eq 23 ]
		[ "$(jq -c '.failed' "$T/j")" = '[{"path":"a","reason":"is a non-empty directory here: not replaced by the sender'"'"'s non-directory without --delete or --force: Directory not empty","vanished":false}]' ]
		[ "$(jq_field "$T/j" failed_omitted)" = 0 ]
	done
}

@test "--json: failed lists vanished files as vanished, as the sender said them (local, push, pull)" {
	mk_src
	local mode
	for mode in local push pull; do
		paused_vanish $mode
		[ "$rc" -eq 24 ]
		[ "$(jq -c '[.failed[] | [.path, .reason, .vanished]] | sort' "$T/j")" = \
		  '[["big","vanished since the scan",true],["sub/b","vanished since the scan",true]]' ]
		[ "$(jq_field "$T/j" failed_omitted)" = 0 ]
	done
}

@test "--json: failed is bounded: the first 100, failed_omitted counts the rest; errors counts them all" {
	mk_src
	local i
	mkdir -p "$T/s/many" "$T/a/m/many"
	for i in $(seq 1 130); do
		echo "$i" >"$T/s/many/f$i"
		mkdir -p "$T/a/m/many/f$i/in" && echo x >"$T/a/m/many/f$i/in/x"
	done
	local rc=0
	sync_in push -a --json "$T/s/" "$T/a/m" >"$T/j" 2>/dev/null || rc=$?
	[ "$rc" -eq 23 ]
	[ "$(jq_field "$T/j" errors)" = 130 ]
	[ "$(jq '.failed | length' "$T/j")" = 100 ]
	[ "$(jq_field "$T/j" failed_omitted)" = 30 ]
}

@test "--json: transport is always named: tcp when data moved, none on a no-op, a dry run or a run that failed early" {
	mk_src
	local mode
	for mode in local push pull; do
		sync_in $mode -a --json "$T/s/" "$T/a/t$mode" >"$T/j"
		[ "$(jq_field "$T/j" transport)" = tcp ]
		sync_in $mode -a --json "$T/s/" "$T/a/t$mode" >"$T/j"   # nothing to do
		[ "$(jq_field "$T/j" files_sent)" = 0 ]
		[ "$(jq_field "$T/j" transport)" = none ]
	done
	"$RDCP" -a -n --json "$T/s/" "$T/a/dry" >"$T/j"
	[ "$(jq_field "$T/j" transport)" = none ]
	"$RDCP" -a --json "$T/nosuch" "$T/a/x" >"$T/j" 2>/dev/null || true
	[ "$(jq_field "$T/j" exit_code)" = 23 ]
	[ "$(jq_field "$T/j" transport)" = none ]
	# every field of the schema in docs/rdcp.1 is there, and no other
	# (top-level: "failed"'s entries are objects of their own)
	diff <(jq -r 'keys_unsorted[]' "$T/j") \
	     <(sed -n '/^    {"rdcp":1/,/}$/p' "$BATS_TEST_DIRNAME/../../docs/rdcp.1" |
	       sed 's/\[{[^]]*\]//' | grep -o '"[a-z_0-9]*":' | tr -d '":' )
	# and each has its paragraph in the man page's list of fields
	local k
	for k in $(jq -r 'keys_unsorted[]' "$T/j"); do
		sed -n '/^\.B \\-\\-json$/,/^\.SH /p' "$BATS_TEST_DIRNAME/../../docs/rdcp.1" |
			grep -qE "^\.BR? (.*[ ,])?$k( |,|\$)" || { echo "rdcp(1) does not describe $k"; false; }
	done
}

@test "--stats: rsync's figures, the same as rsync's on the same trees" {
	mk_src
	twin_dst
	echo more >>"$T/s/a"; rm "$T/s/c"; mkdir "$T/s/nd"; echo n >"$T/s/nd/f"
	touch -d '2020-01-01 00:00:00' "$T/s/nd/f" "$T/s/nd" "$T/s"
	(cd "$T/a" && "$RDCP" -a --delete --stats ../s/ dst/) >"$T/rdcp.out"
	(cd "$T/b" && rsync -a --delete --stats ../s/ dst/) >"$T/rsync.out"
	cat "$T/rdcp.out"
	local re='^(Number of|Total file size|Total transferred file size|Literal data|Matched data)'
	diff <(grep -E "$re" "$T/rsync.out") <(grep -E "$re" "$T/rdcp.out")
	grep -q '^File list size: [0-9,]*$' "$T/rdcp.out"
	grep -q '^File list generation time: [0-9]*\.[0-9][0-9][0-9] seconds$' "$T/rdcp.out"
	grep -q '^File list transfer time: [0-9]*\.[0-9][0-9][0-9] seconds$' "$T/rdcp.out"
	# every one of rsync's lines, in rsync's order (a script that reads them)
	local labels='s/^\([A-Z][A-Za-z ]*\): .*/\1/p'
	diff <(sed -n "$labels" "$T/rsync.out") <(sed -n "$labels" "$T/rdcp.out")
	grep -q '^Total bytes sent: [0-9,]*$' "$T/rdcp.out"
	grep -q '^Total bytes received: [0-9,]*$' "$T/rdcp.out"
	grep -q '^total size is ' "$T/rdcp.out"
	# -h: rsync's units (powers of 1000), "3.00M"
	head -c 3000000 /dev/zero >"$T/s/big"
	run "$RDCP" -a --stats -h "$T/s/" "$T/a/h"
	[[ "$output" == *"Total file size: 3.00M bytes"* ]]
}

# at_least FILE-OR-STRING MIN: the number is MIN or more
at_least() {
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$@"
}

@test "--stats and --json: the sender's file list times, also when the client pulls" {
	mk_src
	# the index loads 400 ms late on both ends: each scan takes that long
	RDCP_TEST_INDEX_LATE=400 sync_in pull -a --stats "$T/s/" "$T/a/p" >"$T/out"
	cat "$T/out"
	local gen
	gen=$(sed -n 's/^File list generation time: \([0-9.]*\) seconds$/\1/p' "$T/out")
	at_least "$gen" 0.35
	RDCP_TEST_INDEX_LATE=400 sync_in push -a --json "$T/s/" "$T/a/q" >"$T/j"
	at_least "$(json_field "$T/j" flist_generation_seconds)" 0.35
	at_least "$(json_field "$T/j" flist_transfer_seconds)" 0
	# without the delay, a tree this small is listed in well under that
	sync_in pull -a --json "$T/s/" "$T/a/r" >"$T/j"
	! at_least "$(json_field "$T/j" flist_generation_seconds)" 0.35
}

@test "a file that vanishes mid-run gets no itemized line; the others do" {
	mk_src
	head -c 200000 /dev/urandom >"$T/s/big"
	RDCP_TEST_PAUSE=$T/pause "$RDCP" -ai "$T/s/" "$T/a/dst" >"$T/out" 2>"$T/err" &
	local pid=$!
	for _ in $(seq 500); do [ -e "$T/pause" ] && break; sleep 0.01; done
	rm "$T/s/sub/b" "$T/s/big"
	rm "$T/pause"
	local rc=0; wait $pid || rc=$?
	cat "$T/out" "$T/err"
	[ "$rc" -eq 24 ]
	grep -qx '>f+++++++++ a' "$T/out"
	! grep -q 'sub/b$' "$T/out"
	! grep -q 'big$' "$T/out"
}

@test "lines come as things happen, not after the run (local, push, pull)" {
	mk_src
	for mode in local push pull; do
		rm -f "$T/out" "$T/pause"
		RDCP_TEST_PAUSE=$T/pause sync_in $mode -ai "$T/s/" "$T/a/$mode" >"$T/out" 2>&1 &
		local pid=$!
		for _ in $(seq 500); do [ -e "$T/pause" ] && break; sleep 0.01; done
		sleep 0.5   # the sender waits before sending: the new dirs are made already
		cat "$T/out"
		grep -qx 'cd+++++++++ sub/' "$T/out"
		! grep -q 'f+++++++++ a' "$T/out"
		rm "$T/pause"
		wait $pid
		grep -q 'f+++++++++ a$' "$T/out"
	done
}

@test "--help: every exit code of rdcp(1)'s EXIT STATUS (2 included), -V, and no redundant -r beside --sync" {
	run "$RDCP" --help
	[ "$status" -eq 0 ]
	local man=$BATS_TEST_DIRNAME/../../docs/rdcp.1
	# the codes the man page lists (.TP then .B N), and those --help lists
	local want got
	want=$(sed -n '/^\.SH EXIT STATUS/,/^\.SH /p' "$man" | grep -A1 '^\.TP' | sed -n 's/^\.B \([0-9]*\)$/\1/p' | sort -n | tr '\n' ' ')
	got=$(sed -n '/^Exit status:/,/^$/p' <<<"$output" | grep -oE '(^|[ ,(:])[0-9]+ [a-zA-Z-]' | grep -oE '[0-9]+' | sort -n | uniq | tr '\n' ' ')
	echo "man: $want"; echo "help: $got"
	[ "$want" = "$got" ]
	[[ "$output" == *"-V, --version"* ]]
	! grep -E -- '--sync( -[a-zA-Z]+)* -r\b' <<<"$output"
}
