#!/usr/bin/env bats
# rdsend | rdrecv end to end. The same cases run over TCP on the host and,
# inside the soft-RoCE VM (tests/rdma/), over RDMA:
#   RDCP_TRANSPORT=tcp|rdma   RDCP_ADDR=address of this machine to use
load helpers

TRANSPORT=${RDCP_TRANSPORT:-tcp}
ADDR=${RDCP_ADDR:-127.0.0.1}
SEND=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdsend
RECV=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdrecv
# 1 GiB by default; the VM run may scale it (RDCP_BIG_MB)
BIG_MB=${RDCP_BIG_MB:-1024}

# pipe_case SIZE_BYTES [STREAMS]: random data through rdsend|rdrecv, cmp.
pipe_case() {
	local size=$1 streams=${2:-1} p
	head -c "$size" /dev/urandom >"$T/in"
	"$RECV" -v --transport "$TRANSPORT" 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run "$SEND" -v -P "$streams" --transport "$TRANSPORT" "$ADDR" "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	wait "$rpid"
	cat "$T/recv.err"
	cmp "$T/in" "$T/out"
	[[ "$output" == *"over $TRANSPORT"* ]]
}

@test "$TRANSPORT: 0 bytes" {
	pipe_case 0
}

@test "$TRANSPORT: 1 byte" {
	pipe_case 1
}

@test "$TRANSPORT: 1 byte through pipes on both ends" {
	local p
	("$RECV" --transport "$TRANSPORT" 0 key >"$T/out" 2>"$T/recv.err") &
	p=$(recv_port "$T/recv.err")
	printf 'x' | "$SEND" --transport "$TRANSPORT" "$ADDR" "$p" key
	wait $!
	[ "$(cat "$T/out")" = x ]
}

@test "$TRANSPORT: $BIG_MB MiB of random data, stdin to stdout, cmp identical" {
	local p
	head -c $((BIG_MB << 20)) /dev/urandom >"$T/in"
	("$RECV" -v --transport "$TRANSPORT" 0 key 2>"$T/recv.err" | cmp - "$T/in" &&
		touch "$T/same") &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" -v --transport "$TRANSPORT" "$ADDR" "$p" key <"$T/in"
	wait "$rpid"
	[ -e "$T/same" ]
}

@test "$TRANSPORT: 4 parallel streams, file to file" {
	pipe_case $((96 << 20)) 4
	grep -q "4 streams" "$T/recv.err"
}

@test "$TRANSPORT: a file read with fewer buffers than reads ahead (--msg-size 4M: 8 in the pool) does not hang" {
	local p
	head -c $((40 << 20)) /dev/urandom >"$T/in"
	"$RECV" --msg-size 4M --transport "$TRANSPORT" 0 key "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run timeout 60 "$SEND" --msg-size 4M --transport "$TRANSPORT" "$ADDR" "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]   # 124: it hung
	wait "$rpid"
	cmp "$T/in" "$T/out"
	# and a pool of 2 messages, the least there is
	"$RECV" --transport "$TRANSPORT" 0 key "$T/out2" 2>"$T/recv2.err" &
	rpid=$!
	p=$(recv_port "$T/recv2.err")
	run timeout 60 "$SEND" --pool 2M --msg-size 1M --transport "$TRANSPORT" "$ADDR" "$p" key "$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	wait "$rpid"
	cmp "$T/in" "$T/out2"
}

@test "$TRANSPORT: 4 streams into a pipe keep the byte order" {
	local p
	head -c $((40 << 20)) /dev/urandom >"$T/in"
	("$RECV" --transport "$TRANSPORT" 0 key 2>"$T/recv.err" | cmp - "$T/in" &&
		touch "$T/same") &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" -P 4 --msg-size 64K --transport "$TRANSPORT" "$ADDR" "$p" key <"$T/in"
	wait "$rpid"
	[ -e "$T/same" ]
}

@test "$TRANSPORT: wrong key: the sender is refused, rdrecv reports it, keeps waiting, takes the right one" {
	local p
	echo payload >"$T/in"
	"$RECV" --transport "$TRANSPORT" 0 right "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	run "$SEND" --transport "$TRANSPORT" "$ADDR" "$p" wrong "$T/in"
	echo "sender: $output"
	[ "$status" -eq 15 ]
	[[ "$output" == *"authentication failed"* ]]
	kill -0 "$rpid"        # a stranger does not end the wait
	[ ! -e "$T/out" ]      # FILE is made only for an authenticated sender
	run "$SEND" --transport "$TRANSPORT" "$ADDR" "$p" right "$T/in"
	[ "$status" -eq 0 ]
	wait "$rpid"
	cat "$T/recv.err"
	grep -q "does not know the key" "$T/recv.err"
	cmp "$T/in" "$T/out"
}

@test "$TRANSPORT: key from \$RDCP_KEY and from --key-file, never on the command line" {
	local p
	echo hi >"$T/in"
	echo "file-secret" >"$T/keyfile"
	RDCP_KEY=env-secret "$RECV" --transport "$TRANSPORT" 0 - "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	RDCP_KEY=env-secret "$SEND" --transport "$TRANSPORT" "$ADDR" "$p" - "$T/in"
	wait "$rpid"
	cmp "$T/in" "$T/out"
	"$RECV" --transport "$TRANSPORT" --key-file "$T/keyfile" 0 - "$T/out2" 2>"$T/recv2.err" &
	rpid=$!
	p=$(recv_port "$T/recv2.err")
	"$SEND" --transport "$TRANSPORT" --key-file "$T/keyfile" "$ADDR" "$p" - "$T/in"
	wait "$rpid"
	cmp "$T/in" "$T/out2"
	# no terminal to ask on (setsid: none, whoever runs the suite)
	run setsid -w "$SEND" "$ADDR" "$p" -
	[ "$status" -eq 1 ]
	[[ "$output" == *"RDCP_KEY"*"no terminal to ask on"* ]]
}

@test "$TRANSPORT: KEY '-' without \$RDCP_KEY asks on the terminal, echo off, as ssh does (the README's 'rdsend ... -' typed without it)" {
	local p
	echo hi >"$T/in"
	RDCP_KEY=tty-secret "$RECV" --transport "$TRANSPORT" 0 - "$T/out" 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	# a pseudo-terminal (script) on which the key is typed once the prompt
	# is there: rdsend flushes what was typed before it turned echo off, as
	# ssh does (a fixed delay lost that race in the slow VM)
	mkfifo "$T/kbd"
	env -u RDCP_KEY timeout 60 script -qec \
		"$SEND --transport $TRANSPORT $ADDR $p - $T/in" /dev/null <"$T/kbd" >"$T/tty.out" &
	local spid=$! i src=0 kb
	exec {kb}>"$T/kbd"
	for i in $(seq 600); do
		grep -q "key (KEY '-'" "$T/tty.out" && break
		sleep 0.1
	done
	printf 'tty-secret\n' >&"$kb"
	wait "$spid" || { src=$?; kill "$rpid"; }   # (rdrecv must not outlive a failed sender)
	exec {kb}>&-
	[ "$src" -eq 0 ]
	wait "$rpid"
	cmp "$T/in" "$T/out"
	cat "$T/tty.out"
	grep -q "rdsend: key (KEY '-', no \$RDCP_KEY):" "$T/tty.out"
	! grep -q tty-secret "$T/tty.out"   # not echoed
}

@test "$TRANSPORT: rdsend waits for a late rdrecv" {
	local p; p=$(free_port)   # the sender needs it before rdrecv is there
	echo late >"$T/in"
	("$SEND" --transport "$TRANSPORT" "$ADDR" "$p" key "$T/in"; echo $? >"$T/send.rc") &
	sleep 2
	"$RECV" --transport "$TRANSPORT" "$p" key "$T/out"
	wait
	[ "$(cat "$T/send.rc")" -eq 0 ]
	cmp "$T/in" "$T/out"
}

@test "$TRANSPORT: nobody listening: rdsend gives up with exit 10" {
	run "$SEND" --contimeout 1 --transport "$TRANSPORT" "$ADDR" "$(free_port)" key /dev/null
	echo "$output"
	[ "$status" -eq 10 ]
	[[ "$output" == *"connect"* ]]
}

# The killed-mid-way tests: the receiver's output, its first MiB kept in
# $T/first; data_flows waits (up to 60 s) until that MiB has come, so the
# kill lands mid-data however slow the connect (the VM's emulated RDMA).
first_mib() { head -c $((1 << 20)) >"$T/first"; cat >/dev/null; }
data_flows() {
	local i
	for i in $(seq 1200); do
		[ "$(stat -c %s "$T/first" 2>/dev/null || echo 0)" -ge $((1 << 20)) ] && return 0
		sleep 0.05
	done
	echo "no data reached the receiver within 60 s"; return 1
}

@test "$TRANSPORT: receiver killed mid-way: sender fails with a clear error" {
	local p
	"$RECV" --transport "$TRANSPORT" --contimeout 60 0 key > >(first_mib) 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" --transport "$TRANSPORT" "$ADDR" "$p" key </dev/zero 2>"$T/send.err" &
	local spid=$!
	data_flows
	kill -9 "$rpid"
	local rc=0
	wait "$spid" || rc=$?
	cat "$T/send.err"
	[ "$rc" -eq 10 ]
	grep -q "receiver" "$T/send.err"
}

@test "$TRANSPORT: sender killed mid-way: receiver fails with a clear error" {
	local p
	"$RECV" --transport "$TRANSPORT" --contimeout 60 0 key > >(first_mib) 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	"$SEND" --transport "$TRANSPORT" "$ADDR" "$p" key </dev/zero 2>/dev/null &
	local spid=$!
	data_flows
	kill -9 "$spid"
	local rc=0
	wait "$rpid" || rc=$?
	cat "$T/recv.err"
	[ "$rc" -eq 10 ]
	grep -q "sender" "$T/recv.err"
}

@test "$TRANSPORT: receiver cannot write: sender hears why and fails" {
	[ -w /dev/full ] || skip "no /dev/full"
	local p
	"$RECV" --transport "$TRANSPORT" 0 key >/dev/full 2>"$T/recv.err" &
	local rpid=$!
	p=$(recv_port "$T/recv.err")
	head -c $((8 << 20)) /dev/zero >"$T/in"
	run "$SEND" --transport "$TRANSPORT" "$ADDR" "$p" key "$T/in"
	echo "$output"
	local rc=0
	wait "$rpid" || rc=$?
	cat "$T/recv.err"
	[ "$status" -eq 11 ]
	[[ "$output" == *"No space left on device"* ]]
	[ "$rc" -eq 11 ]
	grep -q "No space left on device" "$T/recv.err"
}
