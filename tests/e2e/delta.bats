#!/usr/bin/env bats
# Chunk-level delta (sync/recv/delta.c, sync/delta/chunks.c): a changed file DST
# already has costs only its changed 4 MiB chunks on the wire; the rest is
# cloned or copied from the old file into the temp file, so DST holds the
# old file or the new one, never a mix. Every result is compared with cmp
# and with rsync -anciH --delete (silent when the trees match).
load helpers

MiB=$((1 << 20))

# json_field FIELD: the number FIELD of the --json line on stdin

# poke FILE OFFSET: one byte changed at OFFSET
poke() { flip "$1" "$2"; }

# run_json MODE ARGS...: rdcp's --json line into $T/json, its exit in $rc
run_json() {
	rc=0
	sync_in "$@" >"$T/json" 2>"$T/err" || rc=$?
	cat "$T/err"
}

delta_one_chunk() {
	local mode=$1
	mkdir "$T/src"
	head -c $((20 * MiB + 1234)) /dev/urandom >"$T/src/f"
	sync_in "$mode" --sync -a "$T/src" "$T/dst"
	poke "$T/src/f" $((9 * MiB))
	run_json "$mode" --sync -a --json "$T/src" "$T/dst"
	[ "$rc" -eq 0 ]
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	# its chunk's one 64 KiB block (blocks.c); the rest reused
	[ "$(json_field bytes_sent <"$T/json")" -eq 65536 ]
	[ "$(json_field bytes_matched <"$T/json")" -eq $((20 * MiB + 1234 - 65536)) ]
}

@test "delta: one changed byte sends one block of its chunk (local)" {
	delta_one_chunk local
}
@test "delta: one changed byte sends one block of its chunk (push)" {
	delta_one_chunk push
}
@test "delta: one changed byte sends one block of its chunk (pull)" {
	delta_one_chunk pull
}

@test "delta: a grown file sends its new bytes and its last old chunk" {
	mkdir "$T/src"
	head -c $((18 * MiB + 100)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	head -c $((5 * MiB)) /dev/urandom >>"$T/src/f"
	run_json push --sync -a --json "$T/src" "$T/dst"
	[ "$rc" -eq 0 ]
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	# the old last chunk (at 16 MiB: 2 MiB + 100 bytes) keeps its 32 whole
	# blocks; the rest of it and what follows: 23 MiB + 100 - 18 MiB
	[ "$(json_field bytes_sent <"$T/json")" -eq $((5 * MiB + 100)) ]
}

@test "delta: a file cut to a chunk boundary is built from the old one, nothing sent" {
	mkdir "$T/src"
	head -c $((13 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	truncate -s $((8 * MiB)) "$T/src/f"
	run_json local --sync -a --json "$T/src" "$T/dst"
	[ "$rc" -eq 0 ]
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	[ "$(json_field bytes_sent <"$T/json")" -eq 0 ]
	[ "$(json_field files_sent <"$T/json")" -eq 1 ]
}

@test "delta: -W sends changed files whole, as rsync's --whole-file" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	poke "$T/src/f" 5
	run_json push --sync -a -W --json "$T/src" "$T/dst"
	[ "$rc" -eq 0 ]
	cmp "$T/src/f" "$T/dst/f"
	[ "$(json_field bytes_sent <"$T/json")" -eq $((12 * MiB)) ]
	[ "$(json_field bytes_matched <"$T/json")" -eq 0 ]
}

@test "delta: --stats shows rsync's literal and matched data" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	poke "$T/src/f" $((5 * MiB))
	run sync_in local --sync -a --stats "$T/src" "$T/dst"
	[ "$status" -eq 0 ]
	[[ "$output" == *"Literal data: 65,536 bytes"* ]]
	[[ "$output" == *"Matched data: 12,517,376 bytes"* ]]
	[[ "$output" == *"Total transferred file size: 12,582,912 bytes"* ]]
}

@test "delta: the old file's other hard link keeps the old content (temp + rename)" {
	mkdir "$T/src"
	head -c $((9 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	ln "$T/dst/f" "$T/outside-link"
	cp "$T/dst/f" "$T/old"
	poke "$T/src/f" 7
	sync_in local --sync -a "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
	cmp "$T/old" "$T/outside-link"
}

@test "delta: DST's old file changed after the scan is not used as a basis (exit 23, file left)" {
	mkdir "$T/src"
	head -c $((9 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	poke "$T/src/f" 7
	# the sender waits at the pause file (after both scans) while DST's
	# file changes under the receiver
	local rc=0
	RDCP_TEST_PAUSE=$T/pause "$RDCP" --sync -a "$T/src" "$T/dst" 2>"$T/err" &
	local pid=$! i
	for ((i = 0; i < 200; i++)); do [ -e "$T/pause" ] && break; sleep 0.05; done
	[ -e "$T/pause" ]
	printf 'local edit' | dd of="$T/dst/f" bs=1 seek=$((6 * MiB)) conv=notrunc status=none
	cp "$T/dst/f" "$T/edited"
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	grep -q "f: changed in DST since the scan" "$T/err"
	cmp "$T/edited" "$T/dst/f"   # the local edit is not lost
	# the next run brings it up to date
	sync_in local --sync -a "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
}

@test "delta: on XFS the unchanged chunks are reflinked, not copied" {
	command -v mkfs.xfs >/dev/null || { echo "mkfs.xfs missing (scripts/deps.sh installs xfsprogs)"; return 1; }
	truncate -s 400M "$T/xfs.img"
	mkfs.xfs -q -m reflink=1 "$T/xfs.img"
	mkdir "$T/mnt"
	mount -o loop "$T/xfs.img" "$T/mnt"
	mkdir "$T/src"
	head -c $((40 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/mnt/dst"
	ln "$T/mnt/dst/f" "$T/mnt/old"   # keeps the old extents alive to compare
	poke "$T/src/f" $((21 * MiB))
	run_json local --sync -a --json "$T/src" "$T/mnt/dst"
	[ "$rc" -eq 0 ]
	cmp "$T/src/f" "$T/mnt/dst/f"
	[ "$(json_field bytes_sent <"$T/json")" -eq 65536 ]
	# the 36 MiB kept are extents shared with the old file's
	local shared; shared=$(filefrag -v "$T/mnt/dst/f" | grep -c shared || true)
	filefrag -v "$T/mnt/dst/f"
	[ "$shared" -ge 1 ]
}

# A recorder writes x.tmp and renames it to x; a directory is renamed; a
# file is copied: DST already holds the content, under another name. The
# new name is made from it (chunks reflinked or copied, each from DST's
# index), nothing sent; --delete then removes the old name. A hostile or
# mistaken candidate is not trusted: DST's file changed after its index
# row (same size) is not used (its digests are not vouched for).
renamed() {
	local mode=$1
	mkdir -p "$T/src/d"
	head -c $((9 * MiB + 5)) /dev/urandom >"$T/src/d/rec.tmp"
	head -c 300000 /dev/urandom >"$T/src/d/mid"
	head -c 5000000 /dev/urandom >"$T/src/other"
	sync_in "$mode" --sync -a "$T/src/" "$T/dst"
	mv "$T/src/d/rec.tmp" "$T/src/d/rec"
	cp -p "$T/src/d/mid" "$T/src/mid-copy"
	mv "$T/src/d" "$T/src/e"
	# DST's copy of other is rewritten at its size after its row was stored
	# (mtime kept): its row's digests no longer match; the new name of
	# SRC's other must not be made from it
	touch -r "$T/dst/other" "$T/ref"
	head -c 5000000 /dev/urandom >"$T/dst/other"
	touch -r "$T/ref" "$T/dst/other"
	mv "$T/src/other" "$T/src/other2"
	sync_in "$mode" --sync -a --delete --json "$T/src/" "$T/dst" >"$T/json"
	cat "$T/json"
	[ "$(json_field exit_code <"$T/json")" -eq 0 ]
	# other2's 5 MB only: rec and mid came from DST's own files
	[ "$(json_field bytes_sent <"$T/json")" -eq 5000000 ]
	[ "$(json_field bytes_matched <"$T/json")" -eq $((9 * MiB + 5 + 2 * 300000)) ]
	same "$T/src" "$T/dst"
}

@test "delta: a renamed file, a renamed directory's files and a copy are made from DST's own, nothing sent (local)" {
	renamed local
}
@test "delta: a renamed file, a renamed directory's files and a copy are made from DST's own, nothing sent (push)" {
	renamed push
}
