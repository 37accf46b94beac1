#!/usr/bin/env bats
# Strangers on an RDMA listener, and the I/O timeout over RDMA: inside the
# soft-RoCE VM only (tests/rdma/guest-tests.sh), RDCP_ADDR on the rxe
# interface. The TCP counterpart is tests/e2e/transport-dos.bats.
load ../e2e/helpers
ADDR=${RDCP_ADDR:?run me inside the soft-RoCE VM}
SEND=${RDCP_BUILD}/rdsend
RECV=${RDCP_BUILD}/rdrecv

teardown() {
	local j
	for j in $(jobs -p); do kill -9 "$j" 2>/dev/null; done
	rm -rf "$T"
}

@test "attack (rdma): a wrong-key sender does not end rdrecv; the right one gets through" {
	command -v rping >/dev/null || { echo "rping (rdmacm-utils) is missing" >&2; false; }
	local p
	head -c $((16 << 20)) /dev/urandom >"$T/in"
	"$RECV" --transport rdma 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	# listening (not "after 0.5 s": under load rping came before it did)
	p=$(recv_port "$T/recv.err")
	# a connect request without our private data
	run timeout 10 rping -c -a "$ADDR" -p "$p" -C 1
	echo "rping: $status $output"
	[ "$status" -ne 0 ]
	run timeout 20 "$SEND" --transport rdma "$ADDR" "$p" wrong "$T/in"
	echo "$output"
	[ "$status" -eq 15 ]
	kill -0 "$rpid"
	[ ! -e "$T/out" ]
	run timeout 20 "$SEND" --transport rdma "$ADDR" "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	local rc=0
	wait "$rpid" || rc=$?
	cat "$T/recv.err"
	[ "$rc" -eq 0 ]
	cmp "$T/in" "$T/out"
	grep -q "not an rdcp sender" "$T/recv.err"
	grep -q "does not know the key" "$T/recv.err"
}

@test "attack (rdma): foreign connect requests and wrong-key senders racing a 4-stream session" {
	local p
	head -c $((64 << 20)) /dev/urandom >"$T/in"
	"$RECV" --transport rdma 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	local i pids=()
	for i in 1 2 3; do
		timeout 10 rping -c -a "$ADDR" -p "$p" -C 1 >/dev/null 2>&1 &
		timeout 20 "$SEND" --transport rdma "$ADDR" "$p" "wrong$i" "$T/in" 2>/dev/null &
		pids+=($!)
	done
	sleep 0.3   # the strangers are at the listener first
	run timeout 60 "$SEND" -P 4 --transport rdma "$ADDR" "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	local rc=0
	wait "$rpid" || rc=$?
	cat "$T/recv.err"
	[ "$rc" -eq 0 ]
	cmp "$T/in" "$T/out"
	for i in "${pids[@]}"; do   # refused (15), or too late: nobody listens (10)
		rc=0
		wait "$i" || rc=$?
		[ "$rc" -eq 15 ] || [ "$rc" -eq 10 ]
	done
}

@test "rdma: --allow refuses other addresses, --listen binds the RDMA listener" {
	local p
	echo hi >"$T/in"
	"$RECV" --transport rdma --allow 10.9.9.9 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run timeout 20 "$SEND" --transport rdma --contimeout 2 "$ADDR" "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 10 ]
	kill "$rpid"
	wait "$rpid" || true
	grep -q "not the allowed peer" "$T/recv.err"
	"$RECV" --transport rdma --listen "$ADDR" --allow "$ADDR" 0 key "$T/out" 2>"$T/recv2.err" &
	rpid=$!
	p=$(recv_port "$T/recv2.err")
	timeout 20 "$SEND" --transport rdma "$ADDR" "$p" key "$T/in"
	wait "$rpid"
	cmp "$T/in" "$T/out"
}

@test "attack (rdma): a stalled receiver (SIGSTOP): rdsend --timeout 2 exits 30 within seconds" {
	local p
	"$RECV" --transport rdma 0 key >"$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	head -c $((512 << 20)) /dev/zero |
		timeout 60 "$SEND" --transport rdma --timeout 2 "$ADDR" "$p" key 2>"$T/send.err" &
	local spid=$!
	# stop it once data flows (connecting takes seconds under emulation)
	for _ in $(seq 600); do [ -s "$T/out" ] && break; sleep 0.05; done
	[ -s "$T/out" ]
	kill -STOP "$rpid"
	local t0=$SECONDS rc=0
	wait "$spid" || rc=$?
	local took=$((SECONDS - t0))
	kill -CONT "$rpid"
	cat "$T/send.err"
	[ "$rc" -eq 30 ]
	[ "$took" -le 8 ]
	grep -q "the receiver is stopped or stuck" "$T/send.err"
}

@test "attack (rdma): a stalled sender (SIGSTOP): rdrecv --timeout 2 exits 30 within seconds" {
	local p
	timeout 30 "$RECV" --transport rdma --timeout 2 0 key >/dev/null 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" --transport rdma "$ADDR" "$p" key </dev/zero 2>/dev/null &
	local spid=$!
	sleep 2
	kill -STOP "$spid"
	local t0=$SECONDS rc=0
	wait "$rpid" || rc=$?
	local took=$((SECONDS - t0))
	kill -CONT "$spid"
	cat "$T/recv.err"
	[ "$rc" -eq 30 ]
	[ "$took" -le 8 ]
	grep -q "the sender is stopped or stuck" "$T/recv.err"
}
