#!/usr/bin/env bats
# Host-only transport checks: this machine has no RDMA device.
load helpers
SEND=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdsend
RECV=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdrecv

@test "--transport rdma without an RDMA device: clear error, exit 16" {
	if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
		skip "this machine has an RDMA device"
	fi
	run "$SEND" --transport rdma 127.0.0.1 "$(free_port)" key /dev/null
	echo "$output"
	[ "$status" -eq 16 ]
	[[ "$output" == *"RDMA"* ]]
	run "$RECV" --transport rdma --contimeout 1 0 key
	echo "$output"
	[ "$status" -eq 16 ]
}

@test "auto without an RDMA device: one-line notice, then TCP" {
	local p
	echo hi >"$T/in"
	"$RECV" 0 key "$T/out" 2>"$T/recv.err" &
	p=$(recv_port "$T/recv.err")
	run "$SEND" -v 127.0.0.1 "$p" key "$T/in"
	wait
	[ "$status" -eq 0 ]
	[ "$(grep -c "using TCP" <<<"$output")" -eq 1 ]
	[[ "$output" == *"over tcp"* ]]
}

@test "usage errors exit 1 and say what is wrong" {
	run "$SEND" host notaport key
	[ "$status" -eq 1 ]
	[[ "$output" == *"PORT"* ]]
	run "$RECV" 1234
	[ "$status" -eq 1 ]
	run "$SEND" -P 99 host 1 key
	[ "$status" -eq 1 ]
	[[ "$output" == *"streams"* ]]
	run "$RECV" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Exit status"* ]]
}

@test "a peer that is not rdcp is dropped, the real sender still gets through" {
	local p
	echo real >"$T/in"
	"$RECV" --transport tcp 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	# garbage instead of an AUTH
	printf 'GET / HTTP/1.0\r\n\r\n%.0s' {1..20} | nc -q 1 127.0.0.1 "$p" >/dev/null || true
	"$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	wait "$rpid"
	cmp "$T/in" "$T/out"
	grep -q "not an rdcp sender" "$T/recv.err"
}
