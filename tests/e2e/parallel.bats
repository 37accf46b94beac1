#!/usr/bin/env bats
# Parallel I/O (issue 13, item 6): the sender reads and shapes chunks on a
# pool of I/O threads, the receiver verifies and writes them on its own,
# several chunks of one file or of several files at once (sync/recv/take.c).
# These check what that must not change: every file lands whole and
# verified, a file that fails does so alone and leaves no temp behind, and
# the rest still land. Results are compared with cmp and rsync -anciH.
load helpers

MiB=$((1 << 20))

# many large files of a few chunks each, mixed with small ones
mixed_tree() {
	mkdir -p "$1/big" "$1/small"
	local i
	for ((i = 0; i < 12; i++)); do
		head -c $((9 * MiB + i * 4099)) /dev/urandom >"$1/big/f$i"
	done
	for ((i = 0; i < 200; i++)); do
		head -c $((i * 37)) /dev/urandom >"$1/small/s$i"
	done
}

parallel_files() {
	mixed_tree "$T/src"
	sync_in "$1" --sync -a "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
	local i
	for ((i = 0; i < 12; i++)); do cmp "$T/src/big/f$i" "$T/dst/big/f$i"; done
	# a second round where every large file changed in one chunk
	for ((i = 0; i < 12; i++)); do
		printf 'x%d' "$i" | dd of="$T/src/big/f$i" bs=1 seek=$(((i % 3) * 4 * MiB + 5)) \
			conv=notrunc status=none
	done
	sync_in "$1" --sync -a "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
	for ((i = 0; i < 12; i++)); do cmp "$T/src/big/f$i" "$T/dst/big/f$i"; done
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
}

@test "parallel: 12 large files and 200 small ones land whole, then their deltas (local)" {
	parallel_files local
}
@test "parallel: 12 large files and 200 small ones land whole, then their deltas (push)" {
	parallel_files push
}
@test "parallel: 12 large files and 200 small ones land whole, then their deltas (pull)" {
	parallel_files pull
}

# The sender waits after the scan (RDCP_TEST_PAUSE); meanwhile one large
# file's middle chunk changes in SRC at the same size, so the bytes read no
# longer match the digest the manifest carries. That file must fail alone
# (exit 23, its DST version kept, no temp left) while its other chunks and
# the other files' chunks are in flight on the receiver's I/O threads.
# (Whether a chunk of it is still in flight when it fails is up to the
# scheduler: this checks the outcome, not that timing.)
changed_mid_send() {
	local mode=$1 rc=0 i
	mixed_tree "$T/src"
	mkdir "$T/dst"
	printf 'old' >"$T/dst/f5"   # DST's version of the file that will fail
	mkdir "$T/keep" && cp "$T/dst/f5" "$T/keep/f5"
	# ten chunks: when chunk 1 fails, the ones after it are in flight
	head -c $((40 * MiB)) /dev/urandom >"$T/src/f5"
	rm "$T/src/big/f5"
	RDCP_TEST_PAUSE=$T/pause sync_in "$mode" --sync -a "$T/src/" "$T/dst" 2>"$T/err" &
	local pid=$!
	for ((i = 0; i < 400; i++)); do [ -e "$T/pause" ] && break; sleep 0.05; done
	[ -e "$T/pause" ]
	head -c 4096 /dev/urandom | dd of="$T/src/f5" bs=4096 seek=$((5 * MiB / 4096)) \
		conv=notrunc status=none
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/err"
	# the receiver sent it back (RETRY; pulling, kept it for the client's
	# round): a round of its own, as it is
	[ "$rc" -eq 0 ]
	[ ! -s "$T/err" ]
	for ((i = 0; i < 12; i++)); do
		[ "$i" -eq 5 ] || cmp "$T/src/big/f$i" "$T/dst/big/f$i"
	done
	[ ! -e "$T/dst/big/f5" ]
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
	cmp "$T/src/f5" "$T/dst/f5"
	same "$T/src" "$T/dst"
}

@test "parallel: a file that changes in SRC during the data goes again in a round of its own, exit 0, no temp left (local)" {
	changed_mid_send local
}
@test "parallel: a file that changes in SRC during the data goes again in a round of its own, exit 0, no temp left (push)" {
	changed_mid_send push
}
@test "parallel: a file that changes in SRC during the data goes again in a round of its own, exit 0, no temp left (pull)" {
	changed_mid_send pull
}
