#!/usr/bin/env bats
# -S (sync/delta/sparse.c): 64 KiB blocks of zeros travel as a mask and stay
# holes on DST; chunks in a hole of the source are not even read. Results
# compared with cmp and rsync -anciH --delete.
load helpers

MiB=$((1 << 20))

allocated() { echo $(( $(stat -c %b "$1") * 512 )); }

mk_sparse() {
	mkdir -p "$T/src"
	truncate -s $((256 * MiB)) "$T/src/img"
	local k
	for k in 3 70 200; do
		head -c "$MiB" /dev/urandom | dd of="$T/src/img" bs=1M seek="$k" conv=notrunc \
			status=none
	done
	dd if=/dev/zero of="$T/src/zeros" bs=1M count=5 status=none   # allocated zeros
	head -c 100000 /dev/urandom >"$T/src/tail"
	truncate -s 300000 "$T/src/tail"   # a one-chunk file ending in a hole
}

sparse_round_trip() {
	local mode=$1
	mk_sparse
	sync_in "$mode" --sync -a -S --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/img" "$T/dst/img"
	cmp "$T/src/zeros" "$T/dst/zeros"
	cmp "$T/src/tail" "$T/dst/tail"
	same "$T/src" "$T/dst"
	# 3 MiB of data and two blocks of "tail": nothing of the zeros
	[ "$(json_field bytes_sent <"$T/json")" -eq $((3 * MiB + 131072)) ]
	[ "$(allocated "$T/dst/img")" -le $((4 * MiB)) ]
	[ "$(allocated "$T/dst/zeros")" -eq 0 ]
}

@test "-S: holes travel as a mask and stay holes (local)" {
	sparse_round_trip local
}
@test "-S: holes travel as a mask and stay holes (push)" {
	sparse_round_trip push
}
@test "-S: holes travel as a mask and stay holes (pull)" {
	sparse_round_trip pull
}

@test "-S --inplace: blocks that became zeros are punched out of DST's file" {
	mkdir -p "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	local ino; ino=$(stat -c %i "$T/dst/f")
	dd if=/dev/zero of="$T/src/f" bs=1M seek=4 count=4 conv=notrunc status=none
	sync_in push --sync -a -S --inplace "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(stat -c %i "$T/dst/f")" = "$ino" ]
	[ "$(allocated "$T/dst/f")" -le $((9 * MiB)) ]
}

@test "without -S: zeros are written, as rsync without -S" {
	mk_sparse
	sync_in push --sync -a "$T/src" "$T/dst"
	cmp "$T/src/img" "$T/dst/img"
	[ "$(allocated "$T/dst/img")" -ge $((200 * MiB)) ]
}
