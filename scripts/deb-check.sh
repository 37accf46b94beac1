#!/usr/bin/env bash
# make deb-check: the package on a machine without the build dependencies.
# A minimal Debian 12 (debootstrap --variant=minbase, from $DEB_MIRROR,
# default the configured deb.debian.org; about 6 minutes the first time,
# then kept in $BUILD/chroot-base) is copied; in the copy, apt installs
# ./rdcp_*.deb (bringing only the runtime libraries), then rdcp --sync
# runs locally and through a remote shell, and rdsend | rdrecv moves a file.
# Needs root (chroot, mount). Ends with "deb-check: ok" or fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VERSION=${VERSION:?}
ARCH=$(dpkg --print-architecture)
deb=$BUILD/rdcp_${VERSION}_${ARCH}.deb
mirror=${DEB_MIRROR:-http://deb.debian.org/debian}
base=$BUILD/chroot-base
root=$BUILD/chroot-test
[ "$(id -u)" -eq 0 ] || { echo "deb-check: needs root (chroot)" >&2; exit 1; }
[ -f "$deb" ] || { echo "deb-check: $deb missing (make deb)" >&2; exit 1; }

if [ ! -x "$base/usr/bin/apt-get" ]; then
	echo "deb-check: debootstrap --variant=minbase bookworm ($mirror), once"
	rm -rf "$base"
	debootstrap --variant=minbase bookworm "$base" "$mirror" >"$BUILD/debootstrap.log" 2>&1 ||
		{ tail -20 "$BUILD/debootstrap.log"; exit 1; }
fi
cleanup() {
	umount "$root/proc" 2>/dev/null || true
	umount "$root/dev" 2>/dev/null || true
	rm -rf --one-file-system "$root"
}
trap cleanup EXIT
cleanup
cp -a "$base" "$root"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

echo "deb-check: apt install ./$(basename "$deb") in a minimal Debian 12"
in_root sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	--no-install-recommends ./tmp/rdcp_*.deb >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }'
# no build dependency came with it
if in_root sh -c 'command -v cc || command -v gcc || dpkg -l | grep -E "^ii +[^ ]+-dev[ :]"'; then
	echo "deb-check: a build dependency is installed in the chroot" >&2
	exit 1
fi
in_root rdcp --version
in_root sh -ec '
	test -f /usr/share/man/man1/rdcp.1.gz
	test -f /usr/lib/systemd/system/rdcp-sync@.timer
	test -f /usr/share/bash-completion/completions/rdcp
	mkdir -p /tmp/src/sub
	for i in 1 2 3; do echo "file $i" >/tmp/src/f$i; done
	head -c 300000 /dev/urandom >/tmp/src/sub/big
	ln -s f1 /tmp/src/link
	rdcp --sync /tmp/src /tmp/dst
	diff -r --no-dereference /tmp/src /tmp/dst
	out=$(rdcp --sync --json /tmp/src /tmp/dst)
	echo "$out"
	case $out in *"\"files_sent\":0,"*"\"exit_code\":0}") ;; *) exit 1 ;; esac
	# the far side through a remote shell (the way ssh starts it)
	printf "#!/bin/sh\nshift\nexec \"\$@\"\n" >/tmp/rsh && chmod +x /tmp/rsh
	rdcp --sync -e /tmp/rsh /tmp/src 127.0.0.1:/tmp/dst2
	diff -r --no-dereference /tmp/src /tmp/dst2
	# rdsend | rdrecv (the syncs above packed the small files with
	# libarchive: the package brought it, though nothing links it)
	export RDCP_KEY=k
	rdrecv 0 - /tmp/big.copy 2>/tmp/recv.err &
	for i in $(seq 100); do grep -q "listening on port" /tmp/recv.err && break; sleep 0.05; done
	port=$(sed -n "s/.*listening on port \([0-9]*\)$/\1/p" /tmp/recv.err)
	rdsend 127.0.0.1 "$port" - /tmp/src/sub/big 2>/dev/null
	wait
	cmp /tmp/src/sub/big /tmp/big.copy
'
echo "deb-check: ok"
