#!/bin/sh
# Install every missing dependency with apt-get (Debian 12). Idempotent and
# silent when everything is already there.
#   deps.sh          what building and running rdcp need (make demo, make)
#   deps.sh --test   that, and the test stack (make check): bats, rsync to
#                    compare with, sshd, the soft-RoCE VM (QEMU, a kernel),
#                    perftest, ...
#   deps.sh --deb    that, and what make deb / make deb-check use
set -eu
# building and running: a compiler, the libraries' headers, ssh (the remote
# shell), Open MPI (mpirun, and the headers of rdcp-mpi.so: ranked runs)
BUILD="build-essential pkg-config
libxxhash-dev libsqlite3-dev libarchive-dev libssl-dev libacl1-dev
libibverbs-dev librdmacm-dev openssh-client openmpi-bin libopenmpi-dev"
# the test stack
TEST="libcmocka-dev
bats bc jq python3 rsync attr acl openssh-server netcat-openbsd iperf3 xxhash
time openssl iproute2 procps util-linux e2fsprogs xfsprogs exfat-fuse exfatprogs
qemu-system-x86 linux-image-amd64 busybox-static kmod cpio
rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
systemd dpkg-dev debootstrap lsyncd fpart strace"
# packaging (make deb: dpkg-shlibdeps is in dpkg-dev)
DEB="dpkg-dev"

case "${1:-}" in
"") PKGS=$BUILD ;;
--test) PKGS="$BUILD $TEST" ;;
--deb) PKGS="$BUILD $DEB" ;;
*) echo "usage: deps.sh [--test|--deb]" >&2; exit 1 ;;
esac

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' \
        || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "deps: installing:$missing"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: not root; run as root: apt-get install$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: done"
