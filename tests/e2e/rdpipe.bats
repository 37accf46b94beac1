#!/usr/bin/env bats
# rdpipe end to end. On the host: three "hosts" made of network namespaces
# (tests/lib/netns.sh: 10.177.0.1-3 on a bridge), the remote shell
# tests/lib/netns-rsh running each segment inside its namespace, data over
# TCP between the namespaces. Inside the soft-RoCE VM (tests/rdma/
# guest-tests.sh sets RDPIPE_HOSTS and RDCP_TRANSPORT=rdma): every segment
# on the VM's rxe address, over RDMA.
load helpers
bats_require_minimum_version 1.5.0
RDPIPE=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdpipe
TR=${RDCP_TRANSPORT:-tcp}
BIG_MB=${RDPIPE_BIG_MB:-1024}

setup_file() {
	if [ -z "${RDPIPE_HOSTS:-}" ]; then
		source "$BATS_TEST_DIRNAME/../lib/netns.sh"
		netns_up 3 || { echo "# could not make network namespaces (root and iproute2 needed)" >&3; return 1; }
		export RDPIPE_HOSTS=$NETNS_HOSTS RDPIPE_RSH=$BATS_TEST_DIRNAME/../lib/netns-rsh
		export RDPIPE_NETNS=1
	fi
}

teardown_file() {
	if [ "${RDPIPE_NETNS:-}" = 1 ]; then
		source "$BATS_TEST_DIRNAME/../lib/netns.sh"
		netns_down
	fi
}

setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-e2e-XXXXXX")
	read -r H1 H2 H3 <<<"$RDPIPE_HOSTS"
	RSH=${RDPIPE_RSH:-$BATS_TEST_DIRNAME/local-rsh}
	# every process of this test's pipelines carries TOKEN in its command line:
	# the segments run as $T/rdpipe-TOKEN, the test commands name it too
	TOKEN=rdpt$$x$RANDOM
	ln -s "$(cd "$(dirname "$RDPIPE")" && pwd)/rdpipe" "$T/rdpipe-$TOKEN"
	printf '#!/bin/sh\nsleep 300\n' >"$T/sleeper-$TOKEN"
	chmod +x "$T/sleeper-$TOKEN"
}

rp() { "$RDPIPE" -e "$RSH" --rdpipe-path "$T/rdpipe-$TOKEN" --transport "$TR" "$@"; }

# Nothing of this test's pipeline may be left running, on any "host".
no_survivors() {
	local left=
	for _ in $(seq 20); do
		left=$(pgrep -af "$TOKEN" || true)
		if [ "${RDPIPE_NETNS:-}" = 1 ]; then
			for ns in rdpt-1 rdpt-2 rdpt-3; do
				left+=$(ip netns pids "$ns" | xargs -r ps -o pid=,args= -p)
			done
		fi
		[ -z "$left" ] && return 0
		sleep 0.1
	done
	echo "still running after the pipeline ended:"
	echo "$left"
	return 1
}

@test "rdpipe: README: echo hello | rdpipe h1:'tr [:lower:] [:upper:]' h2:'rev' -> OLLEH" {
	echo hello >"$T/in"
	run rp "$H1:tr [:lower:] [:upper:]" "$H2:rev" <"$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = OLLEH ]
}

@test "rdpipe: README: rdpipe other_host:'sha1sum' < myfile" {
	head -c 3000000 /dev/urandom >"$T/myfile"
	run rp "$H2:sha1sum" <"$T/myfile"
	[ "$status" -eq 0 ]
	[ "${output%% *}" = "$(sha1sum <"$T/myfile" | cut -d' ' -f1)" ]
}

@test "rdpipe: README: fs1:'< textfile' CAPS:'tr [:lower:] [:upper:]' fs2:'> TEXTFILE'" {
	printf 'some text\nmore text\n' >"$T/textfile"
	run rp "$H1:< $T/textfile" "$H2:tr [:lower:] [:upper:]" "$H3:> $T/TEXTFILE" </dev/null
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	[ "$(cat "$T/TEXTFILE")" = "$(printf 'SOME TEXT\nMORE TEXT')" ]
}

@test "rdpipe: README: a remote producer piped on locally (zfs send ... | pv | zfs recv shape)" {
	head -c 5000000 /dev/urandom >"$T/snap"
	rp "$H3:cat $T/snap" </dev/null | cat >"$T/recv"
	cmp "$T/snap" "$T/recv"
}

@test "rdpipe: one host appears three times in one pipeline (own port per hop)" {
	echo hello >"$T/in"
	run rp "$H1:tr [:lower:] [:upper:]" "$H2:rev" "$H1:tr H X" "$H1:cat" <"$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = OLLEX ]
}

@test "rdpipe: $BIG_MB MiB of random bytes through a 3-segment chain, cmp identical, -v per hop" {
	head -c $((BIG_MB << 20)) /dev/urandom >"$T/big"
	# compared as it comes out (the VM's /tmp is RAM: no room for a copy)
	set -o pipefail
	rp -v "$H1:cat" "$H2:cat" "$H3:cat" <"$T/big" 2>"$T/err" | cmp "$T/big" - ||
		{ cat "$T/err"; false; }
	cat "$T/err"
	for k in 0 1 2 3; do
		grep -E "^rdpipe: hop $k .*: [0-9.]+ [KMGT]?i?B in [0-9.]+ s, [0-9.]+ MB/s over $TR" "$T/err"
	done
	no_survivors
}

@test "rdpipe: a middle segment exits 1 -> non-zero exit naming it; nothing survives anywhere" {
	run rp "$H1:yes $TOKEN" "$H2:head -c 100000 >/dev/null; exit 1" "$H3:$T/sleeper-$TOKEN" \
		</dev/null
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"segment 2 ($H2: head -c 100000 >/dev/null; exit 1): exited with status 1"* ]]
	no_survivors
}

# start_spinning [setsid]: a pipeline that runs until stopped, in the background
start_spinning() {
	${1:-} "$RDPIPE" -e "$RSH" --rdpipe-path "$T/rdpipe-$TOKEN" --transport "$TR" \
		"$H1:yes $TOKEN" "$H2:cat" "$H3:$T/sleeper-$TOKEN" </dev/null >/dev/null 2>"$T/err" &
	pid=$!
	sleep 2
}

# stopped_by KILL-ARGS...: rdpipe exits 20 and leaves nothing behind
stopped_by() {
	kill "$@"
	local st=0
	wait "$pid" || st=$?
	cat "$T/err"
	[ "$st" -eq 20 ]
	no_survivors
}

@test "rdpipe: Ctrl-C (SIGINT to its process group) tears the pipeline down on every host; no key on any command line" {
	start_spinning setsid   # a process group of its own, as a terminal's foreground job
	# the segments run as `rdpipe --segment`: the key came over the remote shell
	pgrep -af "^$T/rdpipe-$TOKEN" >"$T/ps"
	cat "$T/ps"
	[ "$(grep -c -- ' --segment$' "$T/ps")" -eq 3 ]
	[ "$(wc -l <"$T/ps")" -eq 3 ]
	stopped_by -INT -- "-$pid"
}

@test "rdpipe: SIGTERM to rdpipe alone also stops every segment" {
	start_spinning
	stopped_by -TERM "$pid"
}

@test "rdpipe: '<' in the middle drains the input, then sends the file on" {
	printf '12345678' >"$T/eight"
	seq 100000 >"$T/in"
	run rp "$H1:cat" "$H2:< $T/eight" "$H3:wc -c" <"$T/in"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = 8 ]
}

@test "rdpipe: '>' in the middle writes the file and sends an empty stream on; '>>' appends" {
	echo data >"$T/in"
	run rp "$H1:tr a-z A-Z" "$H2:> $T/mid" "$H3:wc -c" <"$T/in"
	[ "$status" -eq 0 ]
	[ "$output" = 0 ]
	[ "$(cat "$T/mid")" = DATA ]
	echo more | rp "$H1:>> $T/mid" "$H2:cat" >/dev/null
	[ "$(cat "$T/mid")" = "$(printf 'DATA\nmore')" ]
}

@test "rdpipe: a '>' segment that receives no input makes an empty file ('>>' just touches)" {
	echo old >"$T/kept"
	echo old >"$T/emptied"
	run rp "$H1:> $T/first" "$H2:> $T/emptied" "$H3:>> $T/kept" <"$T/kept"
	[ "$status" -eq 0 ]
	[ "$(cat "$T/first")" = old ]
	[ -f "$T/emptied" ] && [ ! -s "$T/emptied" ]
	[ "$(cat "$T/kept")" = old ]
	rp "$H1:< $T/kept" "$H2:> $T/new" </dev/null
	[ "$(cat "$T/new")" = old ]
}

@test "rdpipe: file names after an operator are read as the shell would (quotes, ~, \$VAR)" {
	echo quoted >"$T/a file"
	run rp "$H1:< '$T/a file'" </dev/null
	[ "$status" -eq 0 ]
	[ "$output" = quoted ]
	run rp "$H1:< \$HOME/$(realpath -m --relative-to="$HOME" "$T")/a\\ file" </dev/null
	[ "$output" = quoted ]
	run rp "$H1:< $T/a file" </dev/null
	[ "$status" -ne 0 ]
	[[ "$output" == *"is not one file name"* ]]
}

@test "rdpipe: -n prints each segment and runs nothing" {
	run rp -n "$H1:cat" "$H2:> $T/never" "$H3:wc -c"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"segment 2 on $H2: input written to the file $T/never"* ]]
	[[ "$output" == *"segment 3 on $H3: input | wc -c | output"* ]]
	[ ! -e "$T/never" ]
}

@test "rdpipe: rdpipe missing on the host -> exit 5 naming the host" {
	run "$RDPIPE" -e "$RSH" --rdpipe-path /nonexistent/rdpipe --transport "$TR" "$H2:cat" </dev/null
	echo "$output"
	[ "$status" -eq 5 ]
	[[ "$output" == *"could not start rdpipe on $H2"* ]]
}

@test "rdpipe: usage errors say what is wrong (exit 1)" {
	run "$RDPIPE" "no-colon-here"
	[ "$status" -eq 1 ]
	[[ "$output" == *"names no host"* ]]
	run "$RDPIPE" "$H1:"
	[ "$status" -eq 1 ]
	[[ "$output" == *"the command is empty"* ]]
	run "$RDPIPE" "$H1:>"
	[ "$status" -eq 1 ]
	[[ "$output" == *"needs a file name"* ]]
	run "$RDPIPE"
	[ "$status" -eq 1 ]
	[[ "$output" == *"Usage: rdpipe"* ]]
}

@test "rdpipe: a command that is not found fails with 127, named" {
	run -127 rp "$H1:cat" "$H2:no-such-command-$TOKEN" </dev/null
	echo "$output"
	[ "$status" -eq 127 ]
	[[ "$output" == *"segment 2 ($H2: no-such-command-$TOKEN): exited with status 127"* ]]
	no_survivors
}
