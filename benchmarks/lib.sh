# Source me: the timing helpers the benchmark scripts share.
now() { date +%s.%N; }
# a port free now, picked by the kernel (never a random one: another run may hold it)
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib/port.sh"
port() { free_port; }
# median of the numbers on stdin, one a line
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# medof "1.2 3.4 2.2 ": the median of a space-separated list
medof() { tr ' ' '\n' <<<"$1" | grep . | median; }
# The first lines of a script for the soft-RoCE VM (tests/rdma/vm.sh):
# rxe0 on a dummy interface at 169.254.77.1 (the guest's only RDMA path)
RXE_GUEST_SETUP='set -u
modprobe -a ib_uverbs rdma_ucm rdma_rxe dummy
ip link add rdma0 type dummy; ip addr add 169.254.77.1/16 dev rdma0; ip link set rdma0 up
rdma link add rxe0 type rxe netdev rdma0'
