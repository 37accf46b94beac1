# Source me. sshd_start DIR: a private sshd on 127.0.0.1 with generated keys
# (host and user), for tests and benchmarks. Sets SSH_PORT and RSH (the
# ssh command line to use with -e). sshd_stop DIR stops it.
#
# The port: sshd cannot listen on port 0 and say which port it got, so it is
# one the kernel says is free (tests/lib/port.sh), and if another process
# takes it meanwhile ("Address already in use" in its log) sshd is started
# again on another, up to 5 times. The remote side runs with the HOME of whoever started sshd (the
# suite's own, in make check: tests/run.sh) and the client's XDG_CACHE_HOME
# (each test's own index cache), never the real ones.
sshd_start() {
	local S=$1 try
	source "$(dirname "${BASH_SOURCE[0]}")/port.sh"
	mkdir -p /run/sshd "$S"
	ssh-keygen -q -t ed25519 -N '' -f "$S/host_key" <<<y >/dev/null 2>&1
	ssh-keygen -q -t ed25519 -N '' -f "$S/user_key" <<<y >/dev/null 2>&1
	cp "$S/user_key.pub" "$S/authorized_keys"
	for try in 1 2 3 4 5; do
		SSH_PORT=$(free_port)
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
SetEnv HOME="$HOME"
AcceptEnv XDG_CACHE_HOME
CFG
		: >"$S/sshd.log"
		rm -f "$S/sshd.pid"
		# it forks before it binds: up once it wrote its pid file
		/usr/sbin/sshd -f "$S/sshd_config" -E "$S/sshd.log" || return 1
		for _ in $(seq 100); do
			[ -s "$S/sshd.pid" ] && break 2
			grep -q "Address already in use" "$S/sshd.log" && break
			sleep 0.1
		done
	done
	RSH="ssh -p $SSH_PORT -i $S/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes -o SendEnv=XDG_CACHE_HOME"
	export SSH_PORT RSH
	[ -s "$S/sshd.pid" ]
}

sshd_stop() {
	[ -s "$1/sshd.pid" ] && kill "$(cat "$1/sshd.pid")" 2>/dev/null
	return 0
}
