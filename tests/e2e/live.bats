#!/usr/bin/env bats
# Live trees (issue "Live trees"): files written while a run reads them.
# Each test changes SRC between the scan and the reads (the sender's test
# pause, RDCP_TEST_PAUSE), as a recording or a log does in a busy tree.
load helpers

# paused CMD...: CMD in the background, its output in $T/out and $T/err,
# until the sender's test pause has begun (after the scan, before the
# reads); SRC may then be changed. resumed: the run goes on; its exit
# status in $RC, its output shown.
paused() {
	RDCP_TEST_PAUSE=$T/pause "$@" >"$T/out" 2>"$T/err" &
	PID=$!
	for _ in $(seq 400); do [ -e "$T/pause" ] && return 0; sleep 0.025; done
	echo "the sender never paused at $T/pause"; return 1
}
resumed() {
	rm "$T/pause"
	RC=0
	wait "$PID" || RC=$?
	cat "$T/out" "$T/err"
}

# prefix_of A B N: B's bytes are A's first N bytes
prefix_of() {
	[ "$(stat -c %s "$2")" -eq "$3" ] || { echo "$2: $(stat -c %s "$2") bytes, not $3"; return 1; }
	cmp -n "$3" "$1" "$2"
}

# Files that grew after the scan, their scanned part unchanged: a small one
# and a large one whose last chunk is short, each appended to during the
# pause. The part the scan saw lands, silently, exit 0, and --delete still
# deletes (a busy file is no error); the next run, at rest, completes it.
grown_files() {
	local mode=$1; shift
	mkdir -p "$T/src" "$T/dst"
	head -c 1000 /dev/urandom >"$T/src/log"
	head -c $((9 * 1048576 + 100)) /dev/urandom >"$T/src/rec"
	echo kept >"$T/src/other"
	echo stale >"$T/dst/stale"
	paused sync_in "$mode" --sync --delete "$@" "$T/src/" "$T/dst"
	head -c 5000 /dev/urandom >>"$T/src/log"
	head -c $((3 * 1048576)) /dev/urandom >>"$T/src/rec"
	resumed
	[ "$RC" -eq 0 ]
	[ ! -s "$T/err" ]                     # nothing said: nothing went wrong
	prefix_of "$T/src/log" "$T/dst/log" 1000
	prefix_of "$T/src/rec" "$T/dst/rec" $((9 * 1048576 + 100))
	[ "$(cat "$T/dst/other")" = kept ]
	[ ! -e "$T/dst/stale" ]               # --delete was not switched off
	sync_in "$mode" --sync --delete "$@" "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "live: files that grew after the scan land their scanned part, exit 0, --delete still deletes (local)" {
	grown_files local
}
@test "live: files that grew after the scan land their scanned part, exit 0, --delete still deletes (push)" {
	grown_files push
}
@test "live: files that grew after the scan land their scanned part, exit 0, --delete still deletes (pull)" {
	grown_files pull
}
@test "live: files that grew after the scan, hashed by the scan (not settled), land their scanned part (local)" {
	unset RDCP_TEST_SETTLED_S   # the real rule: a fresh file is read by the scan
	grown_files local
}
@test "live: --append of recordings that grow during the run: the scanned part lands, exit 0 (push)" {
	mkdir -p "$T/src" "$T/dst"
	head -c $((6 * 1048576)) /dev/urandom >"$T/src/cam1"
	cp "$T/src/cam1" "$T/dst/cam1"
	head -c $((2 * 1048576 + 7)) /dev/urandom >>"$T/src/cam1"
	paused sync_in push --sync --append "$T/src" "$T/dst"
	head -c 1048576 /dev/urandom >>"$T/src/cam1"
	resumed
	[ "$RC" -eq 0 ]
	[ ! -s "$T/err" ]
	prefix_of "$T/src/cam1" "$T/dst/cam1" $((8 * 1048576 + 7))
	sync_in push --sync --append "$T/src" "$T/dst"
	same "$T/src" "$T/dst"
}

# A small file rewritten after the scan at its size (a state file saved in
# place): its bytes are not the scan's, so it is read again, and the read
# during which it stood still is sent as it now is, exit 0, --delete on.
# DST gets the scan's mtime with it (as rsync, which sends what it reads
# under the file list's mtime): the next run sees the newer mtime and
# sends it again, so the mirror is exact then.
rewritten_small() {
	local mode=$1
	mkdir -p "$T/src" "$T/dst"
	head -c 2000 /dev/urandom >"$T/src/state"
	echo kept >"$T/src/other"
	echo stale >"$T/dst/stale"
	touch -d @1500000000 "$T/src/state"
	paused sync_in "$mode" --sync --delete "$T/src/" "$T/dst"
	head -c 2000 /dev/urandom >"$T/src/state"   # new bytes, a new mtime
	resumed
	[ "$RC" -eq 0 ]
	[ ! -s "$T/err" ]
	cmp "$T/src/state" "$T/dst/state"           # as it now is, not the old bytes
	[ "$(stat -c %Y "$T/dst/state")" -eq 1500000000 ]   # the scan's mtime
	[ ! -e "$T/dst/stale" ]
	sync_in "$mode" --sync --delete "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "live: a small file rewritten after the scan at its size is read again and sent as it now is, exit 0 (local)" {
	rewritten_small local
}
@test "live: a small file rewritten after the scan at its size is read again and sent as it now is, exit 0 (push)" {
	rewritten_small push
}
@test "live: a small file rewritten after the scan at its size is read again and sent as it now is, exit 0 (pull)" {
	rewritten_small pull
}
@test "live: a small file rewritten after the scan at its size, hashed by the scan, is sent as it now is (local)" {
	unset RDCP_TEST_SETTLED_S   # the scan hashes it: the hash tells
	rewritten_small local
}

# With -c the file list carries every small file's hash and the receiver
# checks what lands against it: a file rewritten at its size is not sent
# in the first round (its bytes are not that hash), but the client, which
# sends, takes it again in a round of its own, as it now is: exit 0.
@test "live: with -c, a small file rewritten after the scan at its size goes in a second round as it now is, exit 0; a grown one lands its scanned part" {
	mkdir -p "$T/src"
	head -c 2000 /dev/urandom >"$T/src/state"
	head -c 1000 /dev/urandom >"$T/src/log"
	paused "$RDCP" --sync -c "$T/src" "$T/dst"
	head -c 2000 /dev/urandom >"$T/src/state"
	head -c 500 /dev/urandom >>"$T/src/log"
	resumed
	[ "$RC" -eq 0 ]
	[ ! -s "$T/err" ]
	cmp "$T/src/state" "$T/dst/state"
	prefix_of "$T/src/log" "$T/dst/log" 1000
	"$RDCP" --sync -c "$T/src" "$T/dst"
	same "$T/src" "$T/dst"
}

# What changed under the sender, a small file whose scanned part was
# rewritten as it grew (hash known) and a large one whose first chunk was,
# is not landed as the scan's: the first round does not send it (nor does
# the receiver refuse it: 23), and a second round, of those files alone,
# sends them as they then are: exit 0, DST is SRC. (local, push)
rewritten_files() {
	local mode=$1
	unset RDCP_TEST_SETTLED_S   # the scan hashes the small file
	mkdir -p "$T/src" "$T/dst"
	head -c 1000 /dev/urandom >"$T/src/log"
	head -c $((5 * 1048576)) /dev/urandom >"$T/src/rec"
	head -c 6000000 /dev/urandom >"$T/src/shrinks"
	echo old >"$T/dst/extra"
	local src=$T/src/ dst=$T/dst args=()
	[ "$mode" = push ] && { dst=localhost:$T/dst; args=(-e "$LRSH" --rdcp-path "$RDCP"); }
	[ "$mode" = pull ] && { src=localhost:$T/src/; args=(-e "$LRSH" --rdcp-path "$RDCP"); }
	paused "$RDCP" --sync --delete -i "${args[@]}" "$src" "$dst"
	head -c 3000 /dev/urandom >"$T/src/log"                        # rewritten, longer
	# in place: the first chunk overwritten, then more appended (same inode)
	head -c 4096 /dev/urandom | dd of="$T/src/rec" conv=notrunc status=none
	head -c 1048576 /dev/urandom >>"$T/src/rec"
	truncate -s 5000000 "$T/src/shrinks"                             # another size
	resumed
	[ "$RC" -eq 0 ]
	! grep -q "not sent\|does not match\|not deleting" "$T/err"
	same "$T/src" "$T/dst"                     # the extra file deleted too
	[ "$(grep -c '^[<>]f.* log$' "$T/out")" -eq 1 ]   # itemized once, as it landed
}
@test "live: files rewritten in place or cut after the scan go in a second round as they now are, exit 0, --delete deletes (local)" {
	rewritten_files local
}
@test "live: files rewritten in place or cut after the scan go in a second round as they now are, exit 0, --delete deletes (push)" {
	rewritten_files push
}

# Pulling, the far side lists what it found changed (CTL_RETRY after SENT)
# and the receiver adds what did not match; the client runs the rounds.
@test "live: files rewritten in place or cut after the scan go in a second round as they now are, exit 0, --delete deletes (pull)" {
	rewritten_files pull
}

# A large file rewritten in place all the time, for 120 s or until $T/stop.
busy_writer() {
	rm -f "$T/stop.writing"
	python3 - "$1" "$T/stop" "${2:-4096}" <<-'PY' &
	import os, sys, time
	end = time.monotonic() + 120   # (a test's tries all run within it)
	n = 0
	with open(sys.argv[1], "r+b", buffering=0) as f:
	    while time.monotonic() < end and not os.path.exists(sys.argv[2]):
	        f.seek(0)
	        f.write(os.urandom(int(sys.argv[3])))
	        n += 1
	        # the writes so far, replaced whole: a reader never meets the
	        # file empty, as it would between a truncate and its write
	        with open(sys.argv[2] + ".writing.new", "w") as c:
	            c.write(str(n))
	        os.replace(sys.argv[2] + ".writing.new", sys.argv[2] + ".writing")
	        time.sleep(0.002)
	PY
	WR=$!
	# writing before the run starts: python's start may take longer than
	# the run on a loaded machine (two lanes, the VM)
	local i
	for ((i = 0; i < 200; i++)); do
		[ -e "$T/stop.writing" ] && break
		sleep 0.05
	done
	sleep 0.05
}

# A file that never stands still (rewritten in place all the time) is
# tried three more times, a moment apart; the last round sends it as it
# reads it, as rsync does: its chunks tagged (SYNC_MSG_ASREAD), so the
# receiver knows them for the sender's. Exit 0, named with -v, --delete
# deletes; DST's index holds what landed, not the scan's hash.
@test "live: a large file rewritten in place all the time: three more rounds, then sent as read, exit 0; --delete deletes" {
	mkdir -p "$T/src" "$T/dst"
	echo extra >"$T/dst/extra"
	head -c $((6 * 1048576)) /dev/urandom >"$T/src/busy"
	echo calm >"$T/src/calm"
	busy_writer "$T/src/busy"
	local rc=0
	"$RDCP" --sync --delete -vv "$T/src/" "$T/dst" >"$T/out" 2>"$T/err" || rc=$?
	touch "$T/stop"
	wait "$WR"
	cat "$T/out" "$T/err"
	[ "$rc" -eq 0 ]
	[ ! -s "$T/err" ]
	[ "$(grep -c 'changed as they were read: sending them again' "$T/out")" -eq 3 ]
	grep -q '^busy: changed while it was read: sent as read$' "$T/out"
	cmp "$T/src/calm" "$T/dst/calm"
	[ ! -e "$T/dst/extra" ]
	# what was read: the writer's 4 KiB at the start, the rest as it was
	[ "$(stat -c %s "$T/dst/busy")" -eq $((6 * 1048576)) ]
	cmp -i 4096 "$T/src/busy" "$T/dst/busy"
	# DST's index vouches for what DST holds, not for the scan's hash
	local real
	real=$("$RDCP" --scan --no-index -v "$T/dst" | awk '$NF == "busy" { print $5 }')
	[ -n "$real" ]
	[ "$("$RDCP" --scan -v "$T/dst" | awk '$NF == "busy" { print $5 }')" = "$real" ]
	# at rest, the next run makes it the writer's last version
	"$RDCP" --sync --delete "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
}

never_still_json() {
	local src=$T/src/ dst=$T/dst size=${2:-$((6 * 1048576))}
	[ "$1" = push ] && dst=localhost:$T/dst
	[ "$1" = pull ] && src=localhost:$T/src/
	mkdir -p "$T/src" "$T/dst"
	head -c "$size" /dev/urandom >"$T/src/busy"
	# a small file goes unread by the scan (its stat alone: "Files not
	# read", docs/index.md), so its change shows only once its mtime moves,
	# and a write in the clock tick (4 ms) of the scan's stat leaves it put:
	# 2,000 other files keep the scan's stat and the read further apart
	[ "$size" -ge 65536 ] || mk_files "$T/src/many" 2000
	busy_writer "$T/src/busy" $((size < 4096 ? size : 4096))
	local rc=0 w0 w1 try
	# a run the writer did not write through (a loaded machine can leave
	# its python unscheduled for a whole run) tells nothing, nor one whose
	# last round's scan and read both fell between two of its writes (2 ms
	# apart: that round found the file still, rightly sent it, and named
	# nothing): again, 3 times; a run that never sends as read fails below
	for try in 1 2 3; do
		rc=0
		w0=$(cat "$T/stop.writing")
		"$RDCP" --sync --json -e "$LRSH" --rdcp-path "$RDCP" "$src" "$dst" \
			>"$T/out" 2>"$T/err" || rc=$?
		w1=$(cat "$T/stop.writing")
		echo "try $try: the writer wrote $((w1 - w0)) times during the run"
		if [ $((w1 - w0)) -ge 20 ]; then
			grep -q '"sent_as_read":\["busy"\]' "$T/out" && break
			echo "try $try: busy not sent as read (a round fell between two writes?)"
			cat "$T/out"
		fi
		rm -rf "$T/dst" && mkdir -p "$T/dst"
	done
	touch "$T/stop"
	wait "$WR"
	cat "$T/out" "$T/err"
	[ $((w1 - w0)) -ge 20 ] || { echo "the writer never kept writing through a run"; false; }
	[ "$rc" -eq 0 ]
	python3 - "$T/out" <<-'PY'
	import json, sys
	j = json.load(open(sys.argv[1]))
	assert j["sent_as_read"] == ["busy"], j
	assert j["exit_code"] == 0 and j["failed"] == [], j
	PY
	[ "$(stat -c %s "$T/dst/busy")" -eq "$size" ]
	[ "$size" -le 4096 ] || cmp -i 4096 "$T/src/busy" "$T/dst/busy"
}
@test "live: a large file that never stands still is listed in --json's sent_as_read (push), exit 0" {
	never_still_json push
}
@test "live: a large file that never stands still is listed in --json's sent_as_read (pull), exit 0" {
	never_still_json pull
}
@test "live: a small file that never stands still is sent as read in the last round, listed in --json (local, pull), exit 0" {
	never_still_json local 3000
	rm -rf "$T/src" "$T/dst" "$T/stop"
	never_still_json pull 3000
}

# With --delete and --remove-source-files there are no rounds: a round of
# the whole tree would find removed what landed, and delete it in DST.
@test "live: with --delete and --remove-source-files a file cut as it is sent is named, exit 24, and what landed stays in DST" {
	mkdir -p "$T/src"
	echo a >"$T/src/a"
	head -c 6000000 /dev/urandom >"$T/src/s"
	paused "$RDCP" -a --delete --remove-source-files "$T/src/" "$T/dst"
	truncate -s 5000000 "$T/src/s"
	resumed
	[ "$RC" -eq 24 ]
	grep -q "s: changed since the scan; not sent" "$T/err"
	[ "$(cat "$T/dst/a")" = a ] && [ ! -e "$T/src/a" ]
	[ -e "$T/src/s" ]
}

# A round lands what changed; a file that vanished in the first one still
# makes the run's 24.
@test "live: a file rewritten as it is sent lands in a second round, another that vanished still makes it exit 24" {
	mkdir -p "$T/src"
	head -c $((6 * 1048576)) /dev/urandom >"$T/src/big"
	echo gone >"$T/src/gone"
	echo stays >"$T/src/stays"
	paused "$RDCP" --sync --json "$T/src/" "$T/dst"
	head -c 4096 /dev/urandom | dd of="$T/src/big" conv=notrunc status=none
	rm "$T/src/gone"
	resumed
	[ "$RC" -eq 24 ]
	grep -q "gone: vanished since the scan" "$T/err"
	! grep -q "big" "$T/err"
	cmp "$T/src/big" "$T/dst/big"
	[ "$(jq -r .vanished "$T/out")" -eq 1 ]
	[ "$(jq -r '.failed | length' "$T/out")" -eq 1 ]
}

# Another file renamed over a hard link's leader after the scan, at the
# same size: the first round does not send it as the scan's file (its
# links would land it). The second round sees two files now, a (the new
# one) and b (the old bytes), and sends both: each lands as it is, and
# --remove-source-files removes them only once landed.
@test "live: a hard link's leader replaced by another file of its size goes in a second round; --remove-source-files removes only what landed" {
	mkdir -p "$T/src"
	head -c 3000 /dev/urandom >"$T/src/a"
	ln "$T/src/a" "$T/src/b"
	cp "$T/src/a" "$T/old"
	paused "$RDCP" --sync -H --remove-source-files "$T/src/" "$T/dst"
	head -c 3000 /dev/urandom >"$T/new" && cp "$T/new" "$T/new.copy" && mv "$T/new" "$T/src/a"
	resumed
	[ "$RC" -eq 0 ]
	cmp "$T/old" "$T/dst/b"                          # the old bytes kept, in DST
	cmp "$T/new.copy" "$T/dst/a"
	[ ! -e "$T/src/a" ] && [ ! -e "$T/src/b" ]
}
