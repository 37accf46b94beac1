# Source me. sshd_start DIR: a private sshd on 127.0.0.1 with generated keys
# (host and user), for tests and benchmarks. Sets SSH_PORT and RSH (the
# ssh command line to use with -e). sshd_stop DIR stops it.
sshd_start() {
	local S=$1
	SSH_PORT=$((20000 + RANDOM % 30000))
	mkdir -p /run/sshd "$S"
	ssh-keygen -q -t ed25519 -N '' -f "$S/host_key" <<<y >/dev/null 2>&1
	ssh-keygen -q -t ed25519 -N '' -f "$S/user_key" <<<y >/dev/null 2>&1
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
	/usr/sbin/sshd -f "$S/sshd_config" -E "$S/sshd.log" || return 1
	for _ in $(seq 50); do
		[ -s "$S/sshd.pid" ] && break
		sleep 0.1
	done
	RSH="ssh -p $SSH_PORT -i $S/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
	export SSH_PORT RSH
	[ -s "$S/sshd.pid" ]
}

sshd_stop() {
	[ -s "$1/sshd.pid" ] && kill "$(cat "$1/sshd.pid")" 2>/dev/null
	return 0
}
