#!/usr/bin/env bats
# rdcp through a real sshd on 127.0.0.1 (keys generated here), both ways.
# If sshd cannot start, these tests FAIL: they are not skipped.
load helpers

setup_file() {
	export S=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-sshd-XXXXXX")
	export SSH_PORT=$((20000 + RANDOM % 30000))
	mkdir -p /run/sshd
	ssh-keygen -q -t ed25519 -N '' -f "$S/host_key"
	ssh-keygen -q -t ed25519 -N '' -f "$S/user_key"
	cp "$S/user_key.pub" "$S/authorized_keys"
	cat >"$S/sshd_config" <<CFG
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $S/host_key
AuthorizedKeysFile $S/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
StrictModes no
UsePAM no
PidFile $S/sshd.pid
CFG
	/usr/sbin/sshd -f "$S/sshd_config" -E "$S/sshd.log"
	for _ in $(seq 50); do
		[ -s "$S/sshd.pid" ] && break
		sleep 0.1
	done
	export RSH="ssh -p $SSH_PORT -i $S/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
}

teardown_file() {
	[ -s "$S/sshd.pid" ] && kill "$(cat "$S/sshd.pid")" 2>/dev/null
	rm -rf "$S"
}

same() {
	local d; d=$(rsync -anciH --delete "$1/" "$2/")
	if [ -n "$d" ]; then echo "trees differ:"; echo "$d"; return 1; fi
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
	run "$RDCP" --sync -v -e "$RSH" --rdcp-path "$RDCP" "$T/src" "root@127.0.0.1:$T/dst"
	[ "$status" -eq 0 ]
	[[ "$output" == *"0 files (0 B) transferred"* ]]
}

@test "remote -> local through ssh (the data connects back to us)" {
	mk "$T/src"
	"$RDCP" --sync -P 2 -e "$RSH" --rdcp-path "$RDCP" "127.0.0.1:$T/src" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "no rdcp on the remote side: a clear error, non-zero exit" {
	run "$RDCP" --sync -e "$RSH" --rdcp-path /nonexistent/rdcp "$T" "127.0.0.1:$T/x"
	echo "$output"
	[ "$status" -eq 5 ]
	[[ "$output" == *"rdcp-path"* ]]
}
