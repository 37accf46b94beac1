#!/usr/bin/env bats
# Chunk-level transfers over RDMA inside the soft-RoCE VM (issue 13): delta,
# grown files, block delta, --inplace, --append-verify, resume with
# --partial after kill -9 of either side, parallel files, reflinks on XFS,
# sparse files. Each result is compared with cmp and rsync -anciH --delete;
# wire bytes come from --json.
load ../e2e/helpers
ADDR=${RDCP_ADDR:?run me inside the soft-RoCE VM}
LRSH=$BATS_TEST_DIRNAME/../e2e/local-rsh
MiB=$((1 << 20))

same() {
	local d; d=$(rsync -anciH --delete "$1/" "$2/")
	if [ -n "$d" ]; then echo "trees differ:"; echo "$d"; return 1; fi
}

# push ARGS... SRC DST: over RDMA through the remote-shell path, --json
push() {
	"$RDCP" --sync -a --json --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$@"
}

# --partial: a large file cut off mid-transfer, resumed by the next run
SIZE=$((64 * MiB))
temps() { find "$T/dst" -name '.rdcp-tmp-*' 2>/dev/null; }
mk_src() {
	mkdir "$T/src"
	head -c "$SIZE" /dev/urandom >"$T/src/f"
	echo small >"$T/src/s"
}

# start_push RATE: a --partial push of $T/src into $T/dst at --bwlimit
# RATE, in the background ($pid); returns once DST's temp file holds half
# of $SIZE on disk (allocated blocks: the temp is $SIZE long from the
# start). rdcp itself goes in the background, not push: a function's & is
# a subshell, whose kill -9 would leave the transfer running.
start_push() {
	mkdir -p "$T/dst"
	"$RDCP" --sync -a --partial --bwlimit="$1" --transport rdma --data-addr "$ADDR" \
		-e "$LRSH" --rdcp-path "$RDCP" "$T/src" "vm:$T/dst" >/dev/null 2>"$T/first.err" &
	pid=$!
	local i t blocks
	for ((i = 0; i < 1000; i++)); do
		t=$(temps | head -1)
		blocks=$([ -n "$t" ] && stat -c %b "$t" || echo 0)
		[ $((blocks * 512)) -ge $((SIZE / 2)) ] && return 0
		sleep 0.02
	done
	echo "the temp file never got to half"; return 1
}

# servers: the push's receiving side (local-rsh execs rdcp --server as the
# push's own child; other runs' servers are not ours to wait for)
servers() { pgrep -P "$pid" -f -- --server || true; }

# gone PIDS...: wait until they have all exited (a zombie has: state Z)
gone() {
	local i s st alive
	for ((i = 0; i < 600; i++)); do
		alive=
		for s in "$@"; do
			st=$(cut -d' ' -f3 "/proc/$s/stat" 2>/dev/null) && [ "$st" != Z ] && alive=1
		done
		[ -z "$alive" ] && { echo "$* ended $((i / 10)) s after the kill"; return 0; }
		sleep 0.1
	done
	echo "$* still running 60 s after the kill"; return 1
}

# kill_sender: kill -9 the push of start_push, then wait for its receiving
# side, which learns of it from the RDMA connection's end and holds DST's
# lock until then (a run started at once would be refused)
kill_sender() {
	local spids; spids=$(servers)
	[ -n "$spids" ]
	kill -9 "$pid"
	wait "$pid" || true
	gone $spids
}

# resume: the --partial run after a cut-off one ($T/json); the result is
# SRC's, and no temp file is left
resume() {
	push --partial "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	[ -z "$(temps)" ]
}

@test "rdma delta: one changed byte sends one block; a grown file its new bytes" {
	mkdir "$T/src"
	head -c $((20 * MiB + 7)) /dev/urandom >"$T/src/f"
	push "$T/src" "vm:$T/dst" >/dev/null
	flip "$T/src/f" $((10 * MiB))
	push "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field transport <"$T/json")" = rdma ]
	[ "$(json_field bytes_sent <"$T/json")" -eq 65536 ]
	cmp "$T/src/f" "$T/dst/f"
	head -c $((3 * MiB)) /dev/urandom >>"$T/src/f"
	push "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	# the old last chunk held 7 bytes, not one whole block: sent again
	[ "$(json_field bytes_sent <"$T/json")" -eq $((3 * MiB + 7)) ]
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
}

@test "rdma delta: scattered 4 KiB writes cost about a block each" {
	mkdir "$T/src"
	head -c $((32 * MiB)) /dev/urandom >"$T/src/f"
	push "$T/src" "vm:$T/dst" >/dev/null
	local k
	for k in 1 9 17 25; do
		head -c 4096 /dev/urandom | dd of="$T/src/f" bs=4096 seek=$((k * 256 + 3)) \
			conv=notrunc status=none
	done
	push "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	# 4 writes: at most 2 blocks of 64 KiB each, not 4 chunks of 4 MiB
	[ "$(json_field bytes_sent <"$T/json")" -le $((8 * 65536 + 4096)) ]
}

@test "rdma delta on XFS: the unchanged chunks are reflinked, not copied" {
	modprobe -a loop xfs   # modules in the VM's kernel, not loaded at boot
	truncate -s 400M "$T/xfs.img"
	mkfs.xfs -q -m reflink=1 "$T/xfs.img"
	mkdir "$T/mnt"
	mount -o loop "$T/xfs.img" "$T/mnt"
	mkdir "$T/src"
	head -c $((20 * MiB)) /dev/urandom >"$T/src/f"
	push "$T/src" "vm:$T/mnt/dst" >/dev/null
	ln "$T/mnt/dst/f" "$T/mnt/old"   # keeps the old extents alive to compare
	flip "$T/src/f" $((9 * MiB))
	push "$T/src" "vm:$T/mnt/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/mnt/dst/f"
	same "$T/src" "$T/mnt/dst"
	[ "$(json_field bytes_sent <"$T/json")" -eq 65536 ]
	# the four chunks kept (16 MiB) are extents shared with the old file's
	filefrag -v "$T/mnt/dst/f"
	local bs shared
	bs=$(stat -f -c %S "$T/mnt")
	shared=$(filefrag -v "$T/mnt/dst/f" | awk -F: -v bs="$bs" '/shared/ { n += $4 } END { print n * bs }')
	[ "$shared" -ge $((16 * MiB)) ]
}

@test "rdma --inplace keeps the inode; --append-verify refuses a changed prefix" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	push "$T/src" "vm:$T/dst" >/dev/null
	local ino; ino=$(stat -c %i "$T/dst/f")
	flip "$T/src/f" $((5 * MiB))
	push --inplace "$T/src" "vm:$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(stat -c %i "$T/dst/f")" = "$ino" ]
	head -c $((2 * MiB)) /dev/urandom >>"$T/src/f"
	flip "$T/src/f" 100   # the prefix changed too: not appended
	local rc=0
	push --append-verify "$T/src" "vm:$T/dst" >"$T/json" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	[ "$(stat -c %s "$T/dst/f")" -eq $((12 * MiB)) ]
}

@test "rdma --partial: kill -9 of the sender at half, the next run sends the rest" {
	mk_src
	start_push 16M
	kill_sender
	[ -n "$(temps)" ]   # kept for the next run
	resume
	[ "$(json_field bytes_sent <"$T/json")" -le $((SIZE * 55 / 100)) ]
	[ "$(json_field bytes_matched <"$T/json")" -ge $((SIZE * 45 / 100)) ]
}

@test "rdma --partial: kill -9 of the receiving side once half is recorded, the next run sends the rest" {
	mk_src
	start_push 8M
	# the receiver stores its record every half second (sync/recv/partial.c):
	# a second on, the record holds the half that was on disk (what it
	# verified in its last half second is lost with it)
	sleep 1
	local spids; spids=$(servers)
	[ -n "$spids" ]
	kill -9 $spids
	gone $spids
	wait "$pid" || true
	cat "$T/first.err"
	[ -n "$(temps)" ]
	resume
	[ "$(json_field bytes_sent <"$T/json")" -le $((SIZE * 55 / 100)) ]
}

@test "rdma --partial: chunks the source changed since are sent again" {
	mk_src
	start_push 16M
	kill_sender
	# rewrite 4 KiB of the first chunk, which the cut-off run had verified
	head -c 4096 /dev/urandom | dd of="$T/src/f" bs=4096 seek=10 conv=notrunc status=none
	resume
	# the rest of what it had verified is kept
	[ "$(json_field bytes_matched <"$T/json")" -ge $((SIZE * 40 / 100)) ]
}

# 6 large files of 3 chunks each (not whole chunks), 100 small ones
mixed_tree() {
	mkdir -p "$1/big" "$1/small"
	local i
	for ((i = 0; i < 6; i++)); do
		head -c $((9 * MiB + i * 4099)) /dev/urandom >"$1/big/f$i"
	done
	# printf, a builtin: 100 runs of head would cost seconds in the VM
	for ((i = 0; i < 100; i++)); do printf 'small %d\n' "$i" >"$1/small/s$i"; done
}

@test "rdma parallel: 6 large files and 100 small ones land whole, then their deltas" {
	mixed_tree "$T/src"
	push "$T/src/" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	same "$T/src" "$T/dst"
	local i
	for ((i = 0; i < 6; i++)); do cmp "$T/src/big/f$i" "$T/dst/big/f$i"; done
	local all; all=$(find "$T/src" -type f -printf '%s\n' | awk '{ n += $1 } END { print n }')
	[ "$(json_field bytes_sent <"$T/json")" -eq "$all" ]   # all of it, once
	# a second round where every large file changed in one chunk
	for ((i = 0; i < 6; i++)); do flip "$T/src/big/f$i" $(((i % 3) * 4 * MiB + 5)); done
	push "$T/src/" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	same "$T/src" "$T/dst"
	for ((i = 0; i < 6; i++)); do cmp "$T/src/big/f$i" "$T/dst/big/f$i"; done
	[ -z "$(temps)" ]
	# one 64 KiB block each
	[ "$(json_field bytes_sent <"$T/json")" -eq $((6 * 65536)) ]
}

@test "rdma -S: holes travel as ranges and stay holes" {
	mkdir "$T/src"
	truncate -s $((256 * MiB)) "$T/src/sparse"
	local k
	for k in 3 70 200; do
		head -c $((1 * MiB)) /dev/urandom | dd of="$T/src/sparse" bs=1M seek="$k" \
			conv=notrunc status=none
	done
	push -S "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/sparse" "$T/dst/sparse"
	[ "$(json_field bytes_sent <"$T/json")" -le $((4 * MiB)) ]
	# allocated: about the 3 MiB of data, far from 256 MiB
	[ "$(( $(stat -c %b "$T/dst/sparse") * 512 ))" -le $((8 * MiB)) ]
}
