#!/usr/bin/env bats
# rdcp through a real sshd on 127.0.0.1 (keys generated here), both ways.
# If sshd cannot start, these tests FAIL: they are not skipped.
load helpers

setup_file() {
	export S=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-sshd-XXXXXX")
	source "$BATS_TEST_DIRNAME/../lib/sshd.sh"
	sshd_start "$S" || true   # the first test reports it
}

teardown_file() {
	source "$BATS_TEST_DIRNAME/../lib/sshd.sh"
	sshd_stop "$S"
	rm -rf "$S"
}

mk() {
	mkdir -p "$1/sub"
	head -c $((5 << 20)) /dev/urandom >"$1/sub/blob"
	echo small >"$1/small"
	ln -s sub/blob "$1/link"
}

@test "sshd is up" {
	[ -s "$S/sshd.pid" ] || { cat "$S/sshd.log"; false; }
	run $RSH 127.0.0.1 true
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "local -> remote through ssh, then a no-op re-run" {
	mk "$T/src"
	"$RDCP" --sync -e "$RSH" --rdcp-path "$RDCP" "$T/src" "127.0.0.1:$T/dst"
	same "$T/src" "$T/dst"
	run "$RDCP" --sync --stats -e "$RSH" --rdcp-path "$RDCP" "$T/src" "root@127.0.0.1:$T/dst"
	[ "$status" -eq 0 ]
	[[ "$output" == *"Number of regular files transferred: 0"* ]]
}

@test "remote -> local through ssh (the data connects back to us)" {
	mk "$T/src"
	"$RDCP" --sync --streams 2 -e "$RSH" --rdcp-path "$RDCP" "127.0.0.1:$T/src" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "fan-out through ssh: two destinations, each host's data address from its ssh connection" {
	mk "$T/src"
	mkdir -p "$T/d2"
	"$RDCP" --sync -e "$RSH" --rdcp-path "$RDCP" "$T/src" "$T/d2"
	echo changed >"$T/src/small"
	"$RDCP" --sync --json -e "$RSH" --rdcp-path "$RDCP" "$T/src" "127.0.0.1:$T/d1" \
		"$(id -un)@127.0.0.1:$T/d2" >"$T/json"
	cat "$T/json"
	same "$T/src" "$T/d1"
	same "$T/src" "$T/d2"
	[ "$(json_field exit_code <"$T/json")" -eq 0 ]
	# d2 lacked one small file: the source sent the tree once
	[ "$(json_field bytes_total_sent <"$T/json")" -lt $((6 << 20)) ]
}

@test "no rdcp on the remote side: a clear error, non-zero exit" {
	run "$RDCP" --sync -e "$RSH" --rdcp-path /nonexistent/rdcp "$T" "127.0.0.1:$T/x"
	echo "$output"
	[ "$status" -eq 5 ]
	[[ "$output" == *"rdcp-path"* ]]
}

@test "the remote side keeps its index in this test's cache, never in the real HOME" {
	mk "$T/src"
	"$RDCP" --sync -e "$RSH" --rdcp-path "$RDCP" "$T/src" "127.0.0.1:$T/dst"
	# dst's index is the remote receiver's: it got XDG_CACHE_HOME through ssh
	ls "$XDG_CACHE_HOME"/rdcp/dst-*.db
	run $RSH 127.0.0.1 'echo "$HOME"'
	[ "$output" = "$HOME" ]
}
