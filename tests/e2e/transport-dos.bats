#!/usr/bin/env bats
# Strangers on the data port, stalled peers, and readers that leave: each
# test is named after the attack or failure it checks (docs/transport.md,
# "What a stranger can do"). TCP on the host; the hostile peers are
# tests/e2e/rdcp-peer.py. RDMA's counterpart: tests/rdma/rdma-dos.bats.
load helpers
SEND=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdsend
RECV=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdrecv
PEER=$BATS_TEST_DIRNAME/rdcp-peer.py
LRSH=$BATS_TEST_DIRNAME/local-rsh

# start_recv ARGS...: rdrecv in the background ($rpid) on a port the kernel
# picks ($p, the caller's), stderr in recv.err
start_recv() {
	"$RECV" --transport tcp "$@" 0 key "$T/out" 2>"$T/recv.err" &
	rpid=$!
	p=$(recv_port "$T/recv.err")
}

# its lines besides the one that says the port
recv_lines() { grep -vc '^rdrecv: listening on port ' "$T/recv.err"; }

teardown() {
	# whatever a failed test left running: only our own children
	local j
	for j in $(jobs -p); do kill -9 "$j" 2>/dev/null; done
	rm -rf "$T"
}

# finish: rdrecv exited 0, the copy is identical
recv_ok() {
	local rc=0
	wait "$rpid" || rc=$?
	cat "$T/recv.err"
	[ "$rc" -eq 0 ]
	cmp "$T/in" "$T/out"
}

@test "attack: 20 idle connections to the data port: the real rdsend still gets through at once" {
	head -c $((8 << 20)) /dev/urandom >"$T/in"
	local p
	start_recv
	python3 "$PEER" idle 127.0.0.1 "$p" 20 60 >"$T/idle.out" &
	sleep 0.5   # the squatters are in their handshakes first
	local t0=$SECONDS
	run "$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	[ $((SECONDS - t0)) -lt 4 ]   # not after the squatters' deadlines
	recv_ok
}

@test "attack: 20 garbage connections, half of them trickling then stalling, racing the real rdsend: both ends exit 0" {
	head -c $((8 << 20)) /dev/urandom >"$T/in"
	local p
	start_recv
	python3 "$PEER" garbage 127.0.0.1 "$p" 20 &
	sleep 0.5   # the tricklers hold their handshakes
	local t0=$SECONDS
	run "$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	[ $((SECONDS - t0)) -lt 4 ]
	recv_ok
}

@test "attack: 20 wrong-key senders racing the real rdsend: both ends exit 0, rdrecv keeps waiting" {
	head -c $((8 << 20)) /dev/urandom >"$T/in"
	local p
	start_recv
	run python3 "$PEER" wrongkey 127.0.0.1 "$p" 20
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"20 refused"* ]]
	kill -0 "$rpid"   # still waiting for its sender
	run "$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	recv_ok
}

@test "attack: idle, garbage and wrong-key connections interleaved with a 4-stream session: it is assembled right" {
	head -c $((64 << 20)) /dev/urandom >"$T/in"
	local p
	start_recv
	python3 "$PEER" flood 127.0.0.1 "$p" 20 >"$T/flood.out" &
	local fpid=$!
	sleep 1   # the flood is under way
	run "$SEND" -P 4 --msg-size 256K --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	kill "$fpid" 2>/dev/null || true
	recv_ok
}

@test "attack: a flood of strangers fills no log: at most 3 lines and a count" {
	echo hi >"$T/in"
	local p
	start_recv
	python3 "$PEER" wrongkey 127.0.0.1 "$p" 30
	python3 "$PEER" garbage 127.0.0.1 "$p" 30
	"$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	recv_ok
	[ "$(grep -c 'does not know the key\|not an rdcp sender' "$T/recv.err")" -eq 3 ]
	grep -q "57 more connections were dropped" "$T/recv.err"
	[ "$(recv_lines)" -eq 4 ]
}

@test "attack: a sender from another address than --allow is refused before any handshake" {
	head -c 100000 /dev/urandom >"$T/in"
	local p
	start_recv --allow 127.0.0.2
	# the right key, from the wrong address: not even a HELLO
	run python3 "$PEER" send 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 10 ]
	run "$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 10 ]
	[[ "$output" == *"closed the connection during the handshake"* ]]
	kill -0 "$rpid"
	[ ! -e "$T/out" ]
	# the allowed address gets through
	run python3 "$PEER" send 127.0.0.1 "$p" key "$T/in" --bind 127.0.0.2
	echo "$output"
	[ "$status" -eq 0 ]
	recv_ok
	grep -q "refused a connection from 127.0.0.1 port [0-9]*: not the allowed peer" "$T/recv.err"
}

@test "--allow takes IPv4, IPv6 and v4-mapped forms, and refuses a name" {
	echo hi >"$T/in"
	local p
	start_recv --allow ::ffff:127.0.0.1
	"$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	recv_ok
	run "$RECV" --allow localhost --contimeout 1 0 key
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"not a numeric IPv4 or IPv6 address"* ]]
}

@test "--listen binds one address: another local address is not served" {
	echo hi >"$T/in"
	local p
	start_recv --listen 127.0.0.2
	run "$SEND" --transport tcp --contimeout 1 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 10 ]
	[[ "$output" == *"refused"* ]]
	"$SEND" --transport tcp 127.0.0.2 "$p" key "$T/in"
	recv_ok
}

@test "attack: a wrong-key sender leaves an existing FILE untouched" {
	echo precious >"$T/out"
	echo other >"$T/in"
	local p
	start_recv
	run "$SEND" --transport tcp 127.0.0.1 "$p" wrong "$T/in"
	[ "$status" -eq 15 ]
	sleep 0.2
	[ "$(cat "$T/out")" = precious ]
	"$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	recv_ok
}

@test "rdrecv --contimeout 1 with idle strangers but no sender: exit 10 after about a second" {
	local p; p=$(free_port)   # the strangers need it before rdrecv is there
	python3 "$PEER" idle 127.0.0.1 "$p" 5 10 >/dev/null 2>&1 &   # refused until rdrecv is up
	local t0=$SECONDS
	run "$RECV" --transport tcp --contimeout 1 "$p" key
	echo "$output"
	[ "$status" -eq 10 ]
	[ $((SECONDS - t0)) -le 3 ]
	[[ "$output" == *"no sender came within 1 s (--contimeout)"* ]]
}

@test "rdrecv FILE in a directory that is not there: exit 3 at once, before listening" {
	run "$RECV" --transport tcp 0 key "$T/no/such/dir/file"
	echo "$output"
	[ "$status" -eq 3 ]
	[[ "$output" == *"No such file or directory"* ]]
}

@test "attack: a stalled receiver (SIGSTOP): rdsend --timeout 2 exits 30 within seconds, one line" {
	local p
	"$RECV" --transport tcp 0 key >/dev/null 2>"$T/recv.err" &
	rpid=$!
	p=$(recv_port "$T/recv.err")
	# bounded, so that a sender that would hang fails the test instead
	timeout 20 "$SEND" --transport tcp --timeout 2 127.0.0.1 "$p" key </dev/zero \
		2>"$T/send.err" &
	local spid=$!
	sleep 1
	kill -STOP "$rpid"
	local t0=$SECONDS rc=0
	wait "$spid" || rc=$?
	local took=$((SECONDS - t0))
	kill -CONT "$rpid"
	cat "$T/send.err"
	[ "$rc" -eq 30 ]
	[ "$took" -le 5 ]
	[ "$(wc -l <"$T/send.err")" -eq 1 ]
	grep -q "nothing moved for 2 s (--timeout): the receiver is stopped or stuck" "$T/send.err"
	wait "$rpid" || true
}

@test "attack: a stalled sender (SIGSTOP): rdrecv --timeout 2 exits 30 within seconds, one line" {
	local p
	timeout 20 "$RECV" --transport tcp --timeout 2 0 key >/dev/null 2>"$T/recv.err" &
	rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" --transport tcp 127.0.0.1 "$p" key </dev/zero 2>/dev/null &
	local spid=$!
	sleep 1
	kill -STOP "$spid"
	local t0=$SECONDS rc=0
	wait "$rpid" || rc=$?
	local took=$((SECONDS - t0))
	kill -CONT "$spid"
	cat "$T/recv.err"
	[ "$rc" -eq 30 ]
	[ "$took" -le 5 ]
	[ "$(recv_lines)" -eq 1 ]
	grep -q "nothing moved for 2 s (--timeout): the sender is stopped or stuck" "$T/recv.err"
	wait "$spid" || true
}

@test "a stalled pipe feeding rdsend is not a stalled peer without --timeout" {
	local p
	start_recv
	(printf a; sleep 3; printf b) | "$SEND" --transport tcp 127.0.0.1 "$p" key
	wait "$rpid"
	[ "$(cat "$T/out")" = ab ]
}

@test "a peer that accepts and never answers: rdsend gives up within its handshake deadline" {
	local p
	python3 "$PEER" silent-listen 0 30 >"$T/peer.out" &
	for _ in $(seq 100); do
		p=$(sed -n 's/^listening on port //p' "$T/peer.out")
		[ -n "$p" ] && break
		sleep 0.05
	done
	local t0=$SECONDS
	run "$SEND" --transport tcp 127.0.0.1 "$p" key /dev/null
	echo "$output"
	[ "$status" -eq 10 ]
	[ $((SECONDS - t0)) -le 8 ]
	[[ "$output" == *"handshake failed"* ]]
}

@test "the reader of rdrecv's output goes away: rdrecv says so and exits 11, rdsend hears why, exits 11" {
	head -c $((16 << 20)) /dev/urandom >"$T/in"
	local p
	( "$RECV" --transport tcp 0 key 2>"$T/recv.err" | head -c 10 >/dev/null
	  echo "${PIPESTATUS[0]}" >"$T/recv.rc" ) &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run "$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	wait "$rpid"
	cat "$T/recv.err"
	[ "$(cat "$T/recv.rc")" -eq 11 ]
	grep -q "the reader of standard output went away after" "$T/recv.err"
	[ "$status" -eq 11 ]
	[[ "$output" == *"the reader of its output went away"* ]]
}

@test "attack: a wrong-key connection to rdcp's data port does not abort the sync (push)" {
	mkdir -p "$T/src" "$T/dst"
	head -c $((3 << 20)) /dev/urandom >"$T/src/big"
	echo small >"$T/src/small"
	# the remote side's output reaches us late, so the attacker finds the
	# data port before the real sender learns of it
	cat >"$T/slow-rsh" <<-EOF
	#!/bin/sh
	shift
	RDCP_ATTACK_TAG=$T "\$@" | python3 -c '
	import os, sys, time
	while True:
	    b = os.read(0, 65536)
	    if not b:
	        break
	    time.sleep(0.5)
	    os.write(1, b)
	'
	EOF
	chmod +x "$T/slow-rsh"
	python3 "$PEER" attack-rdcp "$T" 30 >"$T/attack.out" &
	local apid=$!
	run "$RDCP" -e "$T/slow-rsh" --rdcp-path "$RDCP" --sync "$T/src" "localhost:$T/dst"
	echo "$output"
	kill "$apid" 2>/dev/null || true
	wait "$apid" || true
	cat "$T/attack.out"
	grep -q "attack-rdcp: ports \[[0-9]" "$T/attack.out"
	grep -q "'refused': [1-9]" "$T/attack.out"
	[ "$status" -eq 0 ]
	cmp "$T/src/big" "$T/dst/big"
	cmp "$T/src/small" "$T/dst/small"
}
