#!/usr/bin/env bash
# Debug helper: bring rxe0 up in the VM, then run the given shell command.
#   tests/rdma/vm.sh tests/rdma/guest-shell.sh 'rdsend ...'
modprobe -a ib_uverbs rdma_ucm rdma_rxe dummy
ip link add rdma0 type dummy && ip addr add 169.254.77.1/16 dev rdma0 && ip link set rdma0 up
rdma link add rxe0 type rxe netdev rdma0
export PATH=/work/main/build:$PATH A=169.254.77.1
eval "$1"
