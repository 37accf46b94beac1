# Source me. Test "hosts" made of network namespaces on one bridge:
#   netns_up N    hosts rdpt-1..rdpt-N at 10.177.0.1..N/24, each with lo up
#                 and a veth to the bridge rdpt-br (10.177.0.254, in the
#                 namespace the tests run in). Sets NETNS_HOSTS (addresses).
#   netns_down    removes them all.
# tests/lib/netns-rsh is the remote shell that runs a command "on" one of
# them: `netns-rsh 10.177.0.2 cmd args` = `ip netns exec rdpt-2 cmd args`.
netns_down() {
	local ns
	for ns in $(ip netns list 2>/dev/null | awk '/^rdpt-/ {print $1}'); do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns"
	done
	ip link del rdpt-br 2>/dev/null
	return 0
}

netns_up() {
	local n=$1 i
	netns_down
	ip link add rdpt-br type bridge || return 1
	ip addr add 10.177.0.254/24 dev rdpt-br
	ip link set rdpt-br up
	NETNS_HOSTS=
	for i in $(seq 1 "$n"); do
		ip netns add "rdpt-$i" || return 1
		ip link add "rdpt-v$i" type veth peer name eth0 netns "rdpt-$i" || return 1
		ip link set "rdpt-v$i" master rdpt-br up
		ip -n "rdpt-$i" addr add "10.177.0.$i/24" dev eth0
		ip -n "rdpt-$i" link set eth0 up
		ip -n "rdpt-$i" link set lo up
		NETNS_HOSTS="$NETNS_HOSTS 10.177.0.$i"
	done
	NETNS_HOSTS=${NETNS_HOSTS# }
	# wait for the links (and the bridge's forwarding) to come up
	for i in $(seq 1 "$n"); do
		for _ in $(seq 50); do
			ip netns exec "rdpt-$i" ping -c1 -W1 10.177.0.254 >/dev/null 2>&1 && break
			sleep 0.1
		done
	done
	export NETNS_HOSTS
}
