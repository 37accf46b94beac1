#!/usr/bin/env bats
# Block delta (sync/delta/blocks.c): inside a changed 4 MiB chunk only the 64 KiB
# blocks that differ cross the wire; the receiver rebuilds the chunk with
# its old file's blocks and writes it only if it verifies. Results compared
# with cmp and rsync -anciH --delete.
load helpers

MiB=$((1 << 20))
B=65536

scribble() {   # scribble FILE OFFSET BYTES: random bytes written at OFFSET
	head -c "$3" /dev/urandom | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

scattered() {
	local mode=$1 k
	mkdir "$T/src"
	head -c $((40 * MiB)) /dev/urandom >"$T/src/f"
	sync_in "$mode" --sync -a "$T/src" "$T/dst"
	for k in 10 300 2000 5000 7000 9999; do scribble "$T/src/f" $((k * 4096)) 4096; done
	sync_in "$mode" --sync -a --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	# six 4 KiB writes, each inside one 64 KiB block
	[ "$(json_field bytes_sent <"$T/json")" -eq $((6 * B)) ]
	[ "$(json_field bytes_matched <"$T/json")" -eq $((40 * MiB - 6 * B)) ]
}

@test "blocks: six scattered 4 KiB writes cost six 64 KiB blocks (local)" {
	scattered local
}
@test "blocks: six scattered 4 KiB writes cost six 64 KiB blocks (push)" {
	scattered push
}
@test "blocks: six scattered 4 KiB writes cost six 64 KiB blocks (pull)" {
	scattered pull
}

@test "blocks: a one-chunk file with one changed byte sends one block" {
	mkdir "$T/src"
	head -c $((1 * MiB + 777)) /dev/urandom >"$T/src/m"
	sync_in push --sync -a "$T/src" "$T/dst"
	scribble "$T/src/m" 500000 1
	sync_in push --sync -a --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/src/m" "$T/dst/m"
	[ "$(json_field bytes_sent <"$T/json")" -eq "$B" ]
}

@test "blocks: a write across a block boundary sends both blocks" {
	mkdir "$T/src"
	head -c $((9 * MiB)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	scribble "$T/src/f" $((7 * B - 100)) 200
	sync_in push --sync -a --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(json_field bytes_sent <"$T/json")" -eq $((2 * B)) ]
}

@test "blocks: a file that grew or shrank inside its last chunk" {
	mkdir "$T/src"
	head -c $((9 * MiB + 5000)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	head -c 70000 /dev/urandom >>"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
	truncate -s $((8 * MiB + 100)) "$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
}

@test "blocks: a chunk rewritten through goes whole, not by blocks" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	scribble "$T/src/f" $((4 * MiB)) $((4 * MiB))
	sync_in push --sync -a --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(json_field bytes_sent <"$T/json")" -eq $((4 * MiB)) ]
}

@test "blocks: with --inplace the same inode gets the rebuilt chunks" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	local ino; ino=$(stat -c %i "$T/dst/f")
	scribble "$T/src/f" $((5 * MiB + 3)) 10
	sync_in push --sync -a --inplace --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(stat -c %i "$T/dst/f")" = "$ino" ]
	[ "$(json_field bytes_sent <"$T/json")" -eq "$B" ]
}
