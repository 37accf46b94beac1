#!/usr/bin/env bats
# Cases that need an RDMA device: run inside the soft-RoCE VM only
# (tests/rdma/guest-tests.sh), with RDCP_ADDR on the rxe interface.
load ../e2e/helpers
ADDR=${RDCP_ADDR:?run me inside the soft-RoCE VM}
SEND=${RDCP_BUILD}/rdsend
RECV=${RDCP_BUILD}/rdrecv

@test "auto: an address on an RDMA device is reached over RDMA" {
	local p
	echo hi >"$T/in"
	"$RECV" -v --contimeout 30 0 key "$T/out" 2>"$T/recv.err" &
	p=$(recv_port "$T/recv.err")
	run "$SEND" -v "$ADDR" "$p" key "$T/in"
	wait
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"over rdma"* ]]
	[[ "$output" != *"using TCP"* ]]
	grep -q "over rdma" "$T/recv.err"
	cmp "$T/in" "$T/out"
}

@test "auto: an address without RDMA falls back to TCP with one notice" {
	local p
	echo hi >"$T/in"
	"$RECV" --contimeout 30 0 key "$T/out" 2>"$T/recv.err" &
	p=$(recv_port "$T/recv.err")
	run "$SEND" -v 127.0.0.1 "$p" key "$T/in"
	wait
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c "using TCP" <<<"$output")" -eq 1 ]
	cmp "$T/in" "$T/out"
}

@test "forced rdma to an address no RDMA device serves: exit 16, says why" {
	run "$SEND" --contimeout 2 --transport rdma 127.0.0.1 "$(free_port)" key /dev/null
	echo "$output"
	[ "$status" -eq 16 ]
	[[ "$output" == *"no RDMA device"* ]]
}

@test "memlock limit too low: the error says what ulimit -l is and what is needed" {
	command -v setpriv >/dev/null || skip "setpriv missing"
	chmod 666 /dev/infiniband/* 2>/dev/null || true
	local p
	"$RECV" --transport rdma --contimeout 20 0 key >/dev/null 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
		bash -c "ulimit -l 1024; exec '$SEND' --transport rdma --pool 64M '$ADDR' $p key /dev/null"
	kill "$rpid" 2>/dev/null || true
	wait "$rpid" || true
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"ulimit -l"* ]]
	[[ "$output" == *"1024 KiB"* ]]
	[[ "$output" == *"64.00 MiB"* ]]
}

@test "auto with --encrypt on an RDMA address: TCP (RDMA does not encrypt), one notice, sealed" {
	local p
	head -c $((8 << 20)) /dev/urandom >"$T/in"
	"$RECV" -v --encrypt --contimeout 30 0 key "$T/out" 2>"$T/recv.err" &
	p=$(recv_port "$T/recv.err")
	run "$SEND" -v --encrypt "$ADDR" "$p" key "$T/in"
	wait
	echo "$output"
	cat "$T/recv.err"
	[ "$status" -eq 0 ]
	[ "$(grep -c "using TCP, not RDMA" <<<"$output")" -eq 1 ]
	[[ "$output" == *"over tcp"*"encrypted with"* ]]
	grep -q "over tcp.*encrypted with" "$T/recv.err"
	cmp "$T/in" "$T/out"
}
