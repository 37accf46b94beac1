#!/usr/bin/env bash
# Runs inside the soft-RoCE VM (see vm.sh): brings rxe0 up on a dummy
# interface, then runs the transport end-to-end cases over RDMA (and a TCP
# sanity pass inside the VM). Speaks TAP.
set -u
top=${1:?usage: guest-tests.sh TOP BUILD}
build=${2:?}
export RDCP_BUILD=$build
addr=169.254.77.1

setup() {
	# a name (the init sets none): mpirun refuses a node called "(none)"
	hostname rdcp-vm || return 1
	modprobe -a ib_uverbs rdma_ucm rdma_rxe dummy || return 1
	ip link add rdma0 type dummy || return 1
	ip addr add $addr/16 dev rdma0 || return 1
	ip link set rdma0 up || return 1
	rdma link add rxe0 type rxe netdev rdma0 || return 1
	ibv_devices | grep -q rxe0
}
if ! out=$(setup 2>&1); then
	echo "1..1"
	echo "not ok 1 - soft-RoCE setup in the VM failed: $(echo "$out" | tr '\n' ' ')"
	exit 1
fi
# the issue asks for 1 GiB; RDCP_VM_BIG_MB scales it for quick local runs
export RDCP_BIG_MB=${RDCP_VM_BIG_MB:-1024}
cd "$top"
# rdpipe: every segment on this one VM, each hop over RDMA. 256 MiB: its
# three hops share one emulated device (transport.bats moves the 1 GiB)
export RDPIPE_HOSTS="$addr $addr $addr" RDPIPE_BIG_MB=${RDCP_VM_PIPE_MB:-256}
RDCP_TRANSPORT=rdma RDCP_ADDR=$addr bats --tap --timing tests/e2e/transport.bats tests/rdma/rdma-only.bats \
	tests/rdma/rdma-dos.bats \
	tests/rdma/sync-rdma.bats tests/rdma/delta-rdma.bats tests/e2e/rdpipe.bats
