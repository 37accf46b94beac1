#!/bin/sh
# Install every missing build/test dependency with apt-get (Debian 12).
# Idempotent and silent when everything is already there.
set -eu
PKGS="build-essential pkg-config
libxxhash-dev libsqlite3-dev libarchive-dev libssl-dev libacl1-dev
libibverbs-dev librdmacm-dev libcmocka-dev
bats bc jq python3 rsync attr acl openssh-server openssh-client netcat-openbsd iperf3 xxhash
time openssl iproute2 procps util-linux e2fsprogs xfsprogs exfat-fuse exfatprogs
qemu-system-x86 linux-image-amd64 busybox-static kmod cpio
rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest"

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
