#!/usr/bin/env bats
# rdsend --encrypt | rdrecv --encrypt over TCP: the data arrives, a mismatch
# fails clearly on both ends, and a man in the middle (tests/lib/mitm.py, a
# proxy that reads the framing) can neither read the data nor change, replay,
# drop, reorder, splice or forge a message without both ends failing. Each
# attack also runs without --encrypt where that shows the proxy really did
# it (the attack then works: that is what --encrypt is for).
load helpers

SEND=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdsend
RECV=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdrecv
MITM=$BATS_TEST_DIRNAME/../lib/mitm.py
BIG_MB=${RDCP_BIG_MB:-1024}
AUTH_MSG="a data message failed authentication (tampered with, or not from the sender)"

# 8 MiB (8 messages of 1 MiB) of random data with a marker inside
mk_input() {
	head -c $((8 << 20)) /dev/urandom >"$T/in"
	for i in $(seq 500); do printf 'top secret: zq7-plaintext-marker-41c9 %d\n' "$i"; done |
		dd of="$T/in" bs=1 seek=$((3 << 20)) conv=notrunc status=none
}

# through_mitm ENC STREAMS MITM_ARGS...: rdrecv, the proxy in front of it,
# rdsend through the proxy; ENC is --encrypt or "". Sets ss, rs (exit
# statuses of rdsend, rdrecv) and leaves send.err, recv.err, report in $T.
through_mitm() {
	local enc=$1 streams=$2 p; shift 2
	rm -f "$T/pport" "$T/report"
	# --contimeout bounds the wait for a sender (--timeout is the I/O timeout;
	# RECV_TIMEOUT: shorter where the attack leaves the receiver waiting)
	"$RECV" $enc --transport tcp --timeout "${RECV_TIMEOUT:-30}" --contimeout 30 0 key "$T/out" \
		2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	python3 "$MITM" --upstream "$p" --port-file "$T/pport" --report "$T/report" \
		--conns "$streams" --timeout 30 --marker zq7-plaintext-marker-41c9 "$@" \
		2>"$T/mitm.err" &
	local mpid=$!
	for _ in $(seq 100); do [ -s "$T/pport" ] && break; sleep 0.05; done
	ss=0 rs=0
	"$SEND" $enc -P "$streams" --transport tcp 127.0.0.1 "$(cat "$T/pport")" key "$T/in" \
		2>"$T/send.err" || ss=$?
	wait "$rpid" || rs=$?
	wait "$mpid" || true
	echo "rdsend exit $ss:"; cat "$T/send.err"
	echo "rdrecv exit $rs:"; cat "$T/recv.err"
	echo "mitm:"; cat "$T/mitm.err" "$T/report"
}

# the attack found its message, and both ends failed without claiming success
both_fail() {
	grep -qx 'attacked 1' "$T/report"
	[ "$ss" -ne 0 ]
	[ "$rs" -ne 0 ]
	! cmp -s "$T/in" "$T/out"
}

@test "encrypt: $BIG_MB MiB of random data, file to file, cmp identical, cipher reported" {
	local p
	head -c $((BIG_MB << 20)) /dev/urandom >"$T/in"
	"$RECV" -v --encrypt --transport tcp 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run "$SEND" -v --encrypt --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	wait "$rpid"
	cat "$T/recv.err"
	cmp "$T/in" "$T/out"
	[[ "$output" == *"encrypted with AES-256-GCM"* || "$output" == *"encrypted with ChaCha20-Poly1305"* ]]
	grep -q "encrypted with" "$T/recv.err"
}

@test "encrypt: 4 streams into a pipe keep the byte order" {
	local p
	head -c $((40 << 20)) /dev/urandom >"$T/in"
	("$RECV" --encrypt --transport tcp 0 key 2>"$T/recv.err" | cmp - "$T/in" && touch "$T/same") &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" --encrypt -P 4 --msg-size 64K --transport tcp 127.0.0.1 "$p" key <"$T/in"
	wait "$rpid"
	[ -e "$T/same" ]
}

@test "encrypt: 0 bytes" {
	local p
	: >"$T/in"
	"$RECV" --encrypt --transport auto 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" --encrypt --transport auto 127.0.0.1 "$p" key "$T/in"
	wait "$rpid"
	cmp "$T/in" "$T/out"
}

@test "encrypt on the sender only: both ends fail clearly, nothing written" {
	local p
	echo payload >"$T/in"
	"$RECV" --transport tcp 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run "$SEND" --encrypt --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "sender: $output"
	[ "$status" -eq 12 ]
	[[ "$output" == *"does not encrypt, this side does (--encrypt): give --encrypt to both sides or to neither"* ]]
	local rs=0
	wait "$rpid" || rs=$?
	echo "receiver ($rs): $(cat "$T/recv.err")"
	[ "$rs" -eq 12 ]
	grep -q "the sender at .* encrypts (--encrypt), this side does not" "$T/recv.err"
	[ ! -s "$T/out" ]
}

@test "encrypt on the receiver only: both ends fail clearly, nothing written" {
	local p
	echo payload >"$T/in"
	"$RECV" --encrypt --transport tcp 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run "$SEND" --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "sender: $output"
	[ "$status" -eq 12 ]
	[[ "$output" == *"encrypts (--encrypt), this side does not: give --encrypt to both sides or to neither"* ]]
	local rs=0
	wait "$rpid" || rs=$?
	echo "receiver ($rs): $(cat "$T/recv.err")"
	[ "$rs" -eq 12 ]
	grep -q "the sender at .* does not encrypt, this side does" "$T/recv.err"
	[ ! -s "$T/out" ]
}

@test "encrypt with --timeout 2: 64 MiB arrive; a stopped receiver (SIGSTOP) mid-way makes the sender exit 30" {
	local p
	head -c $((64 << 20)) /dev/urandom >"$T/in"
	"$RECV" -v --encrypt --timeout 2 --transport tcp 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run timeout 60 "$SEND" -v --encrypt --timeout 2 --transport tcp 127.0.0.1 "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	wait "$rpid"
	cmp "$T/in" "$T/out"
	[[ "$output" == *"encrypted with"* ]]

	# the second run: half the data, then the receiver is stopped, then the rest
	rm -f "$T/out"
	mkfifo "$T/fifo"
	"$RECV" --encrypt --timeout 2 --transport tcp 0 key "$T/out" 2>"$T/recv.err" &
	rpid=$!
	p=$(recv_port "$T/recv.err")
	(head -c $((32 << 20)) "$T/in"
	 while [ ! -e "$T/stopped" ]; do sleep 0.05; done
	 tail -c +$(((32 << 20) + 1)) "$T/in") >"$T/fifo" 2>/dev/null &
	local fpid=$!
	# bounded, so that a sender that would hang fails the test instead
	timeout 30 "$SEND" --encrypt --timeout 2 --transport tcp 127.0.0.1 "$p" key \
		<"$T/fifo" 2>"$T/send.err" &
	local spid=$!
	for _ in $(seq 400); do
		[ "$(stat -c %s "$T/out" 2>/dev/null || echo 0)" -ge $((32 << 20)) ] && break
		sleep 0.05
	done
	[ "$(stat -c %s "$T/out")" -ge $((32 << 20)) ]
	kill -STOP "$rpid"
	touch "$T/stopped"
	local t0=$SECONDS rc=0
	wait "$spid" || rc=$?
	local took=$((SECONDS - t0))
	kill -CONT "$rpid"
	kill "$rpid" 2>/dev/null || true
	wait "$rpid" || true
	kill "$fpid" 2>/dev/null || true
	wait "$fpid" || true
	echo "rdsend exit $rc after $took s:"; cat "$T/send.err"
	[ "$rc" -eq 30 ]
	[ "$took" -le 10 ]
	grep -q "nothing moved for 2 s (--timeout): the receiver is stopped or stuck" "$T/send.err"
	[ "$(stat -c %s "$T/out")" -lt $((64 << 20)) ] || ! cmp -s "$T/in" "$T/out"
}

@test "encrypt with --transport rdma is a usage error on both programs" {
	run "$SEND" --encrypt --transport rdma 127.0.0.1 1 key /dev/null
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--encrypt works over TCP only"* ]]
	run "$RECV" --encrypt --transport rdma 1 key /dev/null
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--encrypt works over TCP only"* ]]
}

@test "eavesdropper: a marker in the file never crosses the wire with --encrypt" {
	mk_input
	through_mitm --encrypt 2
	[ "$ss" -eq 0 ] && [ "$rs" -eq 0 ]
	cmp "$T/in" "$T/out"
	grep -qx 'sealed 1' "$T/report"
	grep -qx 'marker_hits 0' "$T/report"
	# without --encrypt the same proxy sees it (so its search works)
	through_mitm "" 2
	[ "$ss" -eq 0 ] && [ "$rs" -eq 0 ]
	grep -qx 'sealed 0' "$T/report"
	[ "$(awk '$1 == "marker_hits" {print $2}' "$T/report")" -ge 500 ]
}

@test "man in the middle flips one byte of a data message: both ends fail, the receiver says why" {
	mk_input
	through_mitm --encrypt 1 --flip 3:1234
	both_fail
	[ "$rs" -eq 12 ]
	grep -qF "$AUTH_MSG" "$T/recv.err"
	# without --encrypt the flipped byte lands in the file and both exit 0
	through_mitm "" 1 --flip 3:1234
	grep -qx 'attacked 1' "$T/report"
	[ "$ss" -eq 0 ] && [ "$rs" -eq 0 ]
	! cmp -s "$T/in" "$T/out"
}

@test "man in the middle changes a data message's header (its offset): rejected" {
	mk_input
	through_mitm --encrypt 1 --flip-header 2
	both_fail
	grep -qF "$AUTH_MSG" "$T/recv.err"
}

@test "man in the middle replays a data message (sends it twice): rejected" {
	mk_input
	through_mitm --encrypt 1 --dup 2
	both_fail
	grep -qF "$AUTH_MSG" "$T/recv.err"
}

@test "man in the middle reorders two data messages: rejected" {
	mk_input
	through_mitm --encrypt 1 --swap 2
	both_fail
	grep -qF "$AUTH_MSG" "$T/recv.err"
}

@test "man in the middle drops a data message: rejected" {
	mk_input
	through_mitm --encrypt 1 --drop 2
	both_fail
	grep -qF "$AUTH_MSG" "$T/recv.err"
}

@test "man in the middle splices a data message from stream 0 into stream 1: rejected" {
	mk_input
	through_mitm --encrypt 2 --steal 1
	both_fail
	grep -qF "$AUTH_MSG" "$T/recv.err"
}

@test "man in the middle replays a recorded session into a new one: rejected" {
	mk_input
	through_mitm --encrypt 1 --record "$T/rec"
	[ "$ss" -eq 0 ] && [ "$rs" -eq 0 ]
	[ "$(stat -c %s "$T/rec")" -gt $((8 << 20)) ]
	rm -f "$T/out"
	through_mitm --encrypt 1 --replay "$T/rec"
	grep -qx 'attacked 1' "$T/report"
	[ "$rs" -eq 12 ]
	grep -qF "$AUTH_MSG" "$T/recv.err"
	[ "$ss" -ne 0 ]
	[ ! -s "$T/out" ]
}

@test "man in the middle forges the receiver's verdict: the sender does not exit 0" {
	mk_input
	# the receiver, missing the dropped data, waits until its --timeout
	local RECV_TIMEOUT=5
	through_mitm --encrypt 1 --forge-verdict 4
	both_fail
	grep -q "the receiver's verdict failed authentication (tampered with, or not from the receiver)" \
		"$T/send.err"
	[ "$ss" -eq 12 ]
	# without --encrypt the forged verdict is believed: the sender exits 0
	# although the receiver got half the data and failed
	through_mitm "" 1 --forge-verdict 4
	grep -qx 'attacked 1' "$T/report"
	[ "$ss" -eq 0 ]
	[ "$rs" -ne 0 ]
}
