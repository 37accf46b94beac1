# Source me. Test "hosts" made of network namespaces on one bridge:
#   netns_up N    hosts rdpt-1..rdpt-N at 10.177.0.1..N/24, each with lo up
#                 and a veth to the bridge rdpt-br (10.177.0.254, in the
#                 namespace the tests run in). Sets NETNS_HOSTS (addresses).
#   netns_down    removes them all.
# NETNS_PREFIX (default rdpt) and NETNS_NET (default 10.177.0) name another
# set, so that two test files can hold theirs at once (export them: the
# remote shell reads them too).
# tests/lib/netns-rsh is the remote shell that runs a command "on" one of
# them: `netns-rsh 10.177.0.2 cmd args` = `ip netns exec rdpt-2 cmd args`.
netns_down() {
	local ns p=${NETNS_PREFIX:-rdpt}
	for ns in $(ip netns list 2>/dev/null | awk -v p="^$p-" '$1 ~ p {print $1}'); do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" || :
	done
	# a namespace whose last process is still dying keeps its veth a moment
	# (and may take it away between the listing and the del: no error, as
	# bats runs this under set -e)
	for ns in $(ip -o link show 2>/dev/null | awk -F': ' -v p="$p-v" \
		'index($2, p) == 1 { split($2, a, "@"); print a[1] }'); do
		ip link del "$ns" 2>/dev/null || :
	done
	ip link del "$p-br" 2>/dev/null || :
	return 0
}

netns_up() {
	local n=$1 i p=${NETNS_PREFIX:-rdpt} net=${NETNS_NET:-10.177.0}
	netns_down
	ip link add "$p-br" type bridge || return 1
	ip addr add "$net.254/24" dev "$p-br"
	ip link set "$p-br" up
	NETNS_HOSTS=
	for i in $(seq 1 "$n"); do
		ip netns add "$p-$i" || return 1
		ip link add "$p-v$i" type veth peer name eth0 netns "$p-$i" || return 1
		ip link set "$p-v$i" master "$p-br" up
		ip -n "$p-$i" addr add "$net.$i/24" dev eth0
		ip -n "$p-$i" link set eth0 up
		ip -n "$p-$i" link set lo up
		NETNS_HOSTS="$NETNS_HOSTS $net.$i"
	done
	NETNS_HOSTS=${NETNS_HOSTS# }
	# wait for the links (and the bridge's forwarding) to come up
	for i in $(seq 1 "$n"); do
		for _ in $(seq 50); do
			ip netns exec "$p-$i" ping -c1 -W1 "$net.254" >/dev/null 2>&1 && break
			sleep 0.1
		done
	done
	export NETNS_HOSTS
}

# netns_cut N: host N's link goes silent both ways (every packet dropped,
# nothing reset), as a pulled cable or a dead switch port: its bridge port
# goes down (netem and tc filters need modules a test machine may lack).
# netns_mend N: back up.
netns_cut() { ip link set "${NETNS_PREFIX:-rdpt}-v$1" down; }
netns_mend() { ip link set "${NETNS_PREFIX:-rdpt}-v$1" up; }
