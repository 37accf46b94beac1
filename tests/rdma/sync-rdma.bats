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
	run "$RDCP" --sync -v --streams 2 --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$T/src" "vm:$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"over rdma"* ]]
	same "$T/src" "$T/dst"
	run "$RDCP" --sync -v --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "$T/src" "vm:$T/dst"
	[[ "$output" == *"0 files (0 B) transferred"* ]]
}

@test "rdma: pull, one changed file" {
	mk "$T/src"
	"$RDCP" --sync --transport rdma --data-addr "$ADDR" -e "$LRSH" --rdcp-path "$RDCP" \
		"vm:$T/src" "$T/dst"
	same "$T/src" "$T/dst"
	echo changed >>"$T/src/snap/rev/f7"
	run "$RDCP" --sync -v --transport rdma --data-addr "$ADDR" -e "$LRSH" \
		--rdcp-path "$RDCP" "vm:$T/src" "$T/dst"
	echo "$output"
	[[ "$output" == *"1 files"* ]]
	[[ "$output" == *"over rdma"* ]]
	same "$T/src" "$T/dst"
}
