#!/usr/bin/env bats
# Chunk-level transfers over RDMA inside the soft-RoCE VM (issue 13): delta,
# grown files, block delta, --inplace, --append-verify, resume with
# --partial after kill -9, sparse files. Each result is compared with cmp
# and rsync -anciH --delete; wire bytes come from --json.
load ../e2e/helpers
ADDR=${RDCP_ADDR:?run me inside the soft-RoCE VM}
LRSH=$BATS_TEST_DIRNAME/../e2e/local-rsh
MiB=$((1 << 20))

same() {
	local d; d=$(rsync -anciH --delete "$1/" "$2/")
	if [ -n "$d" ]; then echo "trees differ:"; echo "$d"; return 1; fi
}
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1"; }

# push ARGS... SRC DST: over RDMA through the remote-shell path, --json
push() {
	"$RDCP" --sync -a --json --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$@"
}
poke() { printf 'Z' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

@test "rdma delta: one changed byte sends one block; a grown file its new bytes" {
	mkdir "$T/src"
	head -c $((20 * MiB + 7)) /dev/urandom >"$T/src/f"
	push "$T/src" "vm:$T/dst" >/dev/null
	poke "$T/src/f" $((10 * MiB))
	push "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(field transport <"$T/json")" = rdma ]
	[ "$(field bytes_sent <"$T/json")" -eq 65536 ]
	cmp "$T/src/f" "$T/dst/f"
	head -c $((3 * MiB)) /dev/urandom >>"$T/src/f"
	push "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	# the old last chunk held 7 bytes, not one whole block: sent again
	[ "$(field bytes_sent <"$T/json")" -eq $((3 * MiB + 7)) ]
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
	[ "$(field bytes_sent <"$T/json")" -le $((8 * 65536 + 4096)) ]
}

@test "rdma --inplace keeps the inode; --append-verify refuses a changed prefix" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	push "$T/src" "vm:$T/dst" >/dev/null
	local ino; ino=$(stat -c %i "$T/dst/f")
	poke "$T/src/f" $((5 * MiB))
	push --inplace "$T/src" "vm:$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(stat -c %i "$T/dst/f")" = "$ino" ]
	head -c $((2 * MiB)) /dev/urandom >>"$T/src/f"
	poke "$T/src/f" 100   # the prefix changed too: not appended
	local rc=0
	push --append-verify "$T/src" "vm:$T/dst" >"$T/json" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	[ "$(stat -c %s "$T/dst/f")" -eq $((12 * MiB)) ]
}

@test "rdma --partial: kill -9 of the sender at about half, the next run sends the rest" {
	mkdir "$T/src"
	local size=$((96 * MiB))
	head -c "$size" /dev/urandom >"$T/src/f"
	push --partial --bwlimit=16M "$T/src" "vm:$T/dst" >/dev/null 2>&1 &
	local pid=$! i t
	for ((i = 0; i < 400; i++)); do
		t=$(find "$T/dst" -name '.rdcp-tmp-*' -size +$((size / 2 / 1024))k 2>/dev/null | head -1)
		[ -n "$t" ] && break
		sleep 0.05
	done
	[ -n "$t" ]
	kill -9 "$pid"
	wait "$pid" || true
	# the receiving side learns of it from the RDMA connection's end, and
	# then gives its tree's lock back: wait for it (the only rdcp here)
	for ((i = 0; i < 600; i++)); do pgrep -f -- 'rdcp.* --server' >/dev/null || break; sleep 0.1; done
	echo "the receiver ended $((i / 10)) s after the sender was killed"
	! pgrep -f -- 'rdcp.* --server'
	push --partial "$T/src" "vm:$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(field bytes_sent <"$T/json")" -le $((size * 55 / 100)) ]
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
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
	[ "$(field bytes_sent <"$T/json")" -le $((4 * MiB)) ]
	# allocated: about the 3 MiB of data, far from 256 MiB
	[ "$(( $(stat -c %b "$T/dst/sparse") * 512 ))" -le $((8 * MiB)) ]
}
