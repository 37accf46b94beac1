#!/usr/bin/env bash
# Boot Debian's kernel under QEMU (TCG) with soft-RoCE (rdma_rxe) and run a
# script inside. The guest sees this machine's / read-only (so it runs the
# binaries just built, with this machine's libraries) and a read-write job
# directory at /tmp/job. Facts behind the choices: ../shared/notes/soft-roce-vm.md
#
#   vm.sh SCRIPT [ARGS...]
# Prints what SCRIPT printed, exits with SCRIPT's status, or 125 with the
# reason (and the console) when the VM could not run it.
#   RDCP_VM_KERNEL  kernel version to boot (default: the installed one that
#                   has rdma_rxe; pinned, never "the newest" by accident)
#   VM_TIMEOUT      seconds before the VM is killed (default 2100: the emulated CPU drifts)
#   VM_MEM          guest memory (default 4G)
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
script=${1:?usage: vm.sh SCRIPT [ARGS...]}
shift
die() { echo "vm: $*" >&2; exit 125; }

for tool in qemu-system-x86_64 cpio modprobe; do
	command -v "$tool" >/dev/null || die "$tool is missing (make deps installs it)"
done
[ -x /bin/busybox ] || die "/bin/busybox is missing (busybox-static)"

kver=${RDCP_VM_KERNEL:-}
if [ -z "$kver" ]; then
	for v in $(ls /lib/modules 2>/dev/null | sort -V); do
		if [ -e "/boot/vmlinuz-$v" ] && \
		   find "/lib/modules/$v" -name 'rdma_rxe.ko*' | grep -q .; then
			kver=$v
		fi
	done
fi
[ -n "$kver" ] || die "no kernel with rdma_rxe under /boot and /lib/modules (linux-image-amd64)"
[ -e "/boot/vmlinuz-$kver" ] || die "/boot/vmlinuz-$kver is missing"
[ -r "/boot/vmlinuz-$kver" ] || die "/boot/vmlinuz-$kver is not readable"
case $top in *[[:space:]]*) die "the repository path has a space: $top" ;; esac

# The initramfs: busybox, the 9p/virtio modules, an init that mounts the
# shares and switch_roots into this machine's /. Cached per kernel version.
cache=$top/build/vm
initrd=$cache/initrd-$kver.cpio.gz
if [ ! -s "$initrd" ] || [ "$initrd" -ot "$0" ]; then
	mkdir -p "$cache"
	ir=$(mktemp -d)
	mkdir -p "$ir"/{bin,mods,proc,sys,dev,newroot}
	cp /bin/busybox "$ir/bin/busybox"
	: >"$ir/mods/order"
	for m in virtio_pci 9pnet_virtio 9p; do
		modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
	done | awk '!seen[$0]++' | while read -r ko; do
		name=$(basename "$ko")
		case "$name" in
		*.xz) xz -dc "$ko" >"$ir/mods/${name%.xz}"; name=${name%.xz} ;;
		*.zst) zstd -qdc "$ko" >"$ir/mods/${name%.zst}"; name=${name%.zst} ;;
		*) cp "$ko" "$ir/mods/$name" ;;
		esac
		echo "$name" >>"$ir/mods/order"
	done
	cat >"$ir/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m; done
fail() { echo "vm-init: $*"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /newroot || fail "mount hostroot"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
ln -sf /proc/self/fd /newroot/dev/fd
ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout
ln -sf /proc/self/fd/2 /newroot/dev/stderr
for d in /tmp /run /var/tmp; do mount -t tmpfs tmpfs /newroot$d; done
mkdir -p /newroot/tmp/job
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /newroot/tmp/job || fail "mount job"
# the repository (with the fresh build) at its own path: it may live under
# /tmp, which the tmpfs above hides
repo=$(sed -n 's/.*rdcp_repo=\([^ ]*\).*/\1/p' /proc/cmdline)
if [ -n "$repo" ]; then
	mkdir -p "/newroot$repo" 2>/dev/null
	mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 repo "/newroot$repo" ||
		fail "mount repo"
fi
# switch_root, not chroot: module autoloading (crc32 for rdma_rxe) needs it
exec switch_root /newroot /bin/sh /tmp/job/guest-init
INIT
	chmod +x "$ir/init"
	(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp" && mv "$initrd.tmp" "$initrd"
	rm -rf "$ir"
fi

job=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-vm-XXXXXX")
trap 'rm -rf "$job"' EXIT
cp "$script" "$job/script"
printf '%q ' "$@" >"$job/args"
cat >"$job/guest-init" <<'GUEST'
#!/bin/sh
# PID 1 in the guest: never exit (that panics the kernel); power off instead.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp TMPDIR=/tmp
cd /tmp
ulimit -l unlimited
ip link set lo up 2>/dev/null
ulimit -n 65536
(
	eval "set -- $(cat /tmp/job/args)"
	bash /tmp/job/script "$@"
) >/tmp/job/log 2>&1 </dev/null
echo $? >/tmp/job/rc
sync
busybox poweroff -f
GUEST

timeout "${VM_TIMEOUT:-2100}" qemu-system-x86_64 \
	-accel tcg,thread=multi -cpu max -smp 2 -m "${VM_MEM:-4G}" \
	-nodefaults -no-user-config -display none -serial "file:$job/console" \
	-monitor none -nic none -no-reboot \
	-kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
	-append "console=ttyS0 quiet panic=-1 rdcp_repo=$top" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-virtfs "local,path=$job,mount_tag=job,security_model=none,multidevs=remap" \
	-virtfs "local,path=$top,mount_tag=repo,security_model=none,readonly=on,multidevs=remap" \
	</dev/null
qrc=$?
[ -e "$job/log" ] && cat "$job/log"
if [ ! -s "$job/rc" ]; then
	echo "vm: the guest did not report a result (qemu exit $qrc$([ $qrc = 124 ] && echo ', timed out'))" >&2
	echo "vm: console of kernel $kver:" >&2
	tail -40 "$job/console" >&2 2>/dev/null
	exit 125
fi
exit "$(cat "$job/rc")"
