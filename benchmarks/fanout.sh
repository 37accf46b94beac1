#!/usr/bin/env bash
# Fan-out (issue 14): one model tree onto 1, 2, 4 and 8 hosts with one
# `rdcp --sync SRC h1:DST ... hN:DST`, against `rdcp --sync` and `rsync -a`
# run host after host, same data, same run, medians. Then one host killed
# halfway, and mixed host states.
#   Hosts: network namespaces on one bridge (tests/lib/netns.sh); each one's
#   link shaped with tc tbf to the same rate (egress), so the wire, not the
#   two cores, is the limit. The source is a namespace too. DSTs on tmpfs.
#   VM (unless --no-vm): in the soft-RoCE VM, a fan-out to three "hosts"
#   (three DSTs behind the one rxe device), every hop over RDMA, against a
#   single push of the same tree.
#   fanout.sh [--size-mb N] [--rate-mbit N] [--reps N] [--max-hosts N]
#             [--vm-mb N] [--no-vm] [--no-seq] [--kill N]
#   --no-seq: leave out the host-after-host runs of rdcp and rsync (the
#   longest part), e.g. to measure the killed-host case alone.
#   --kill N: which host of four is killed halfway (default 2; 1 is fed by
#   the source itself, which does not re-link: its case is a second round).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${RDCP_BUILD:-$top/build}
size_mb=256 rate=800 reps=3 maxh=8 vm=1 vm_mb=64 seq=1 kill=2
while [ $# -gt 0 ]; do
	case $1 in
	--size-mb) size_mb=$2; shift ;;
	--rate-mbit) rate=$2; shift ;;
	--reps) reps=$2; shift ;;
	--max-hosts) maxh=$2; shift ;;
	--vm-mb) vm_mb=$2; shift ;;
	--no-vm) vm=0 ;;
	--no-seq) seq=0 ;;
	--kill) kill=$2; shift ;;
	*) echo "usage: $0 [--size-mb N] [--rate-mbit N] [--reps N] [--max-hosts N]" \
		"[--vm-mb N] [--no-vm] [--no-seq] [--kill N]" >&2; exit 1 ;;
	esac
	shift
done
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-fan-XXXXXX")
source "$top/tests/lib/netns.sh"
source "$here/lib.sh"
cleanup() { netns_down; umount "$W/t" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
netns_up $((maxh + 1)) || { echo "fanout.sh: cannot make network namespaces (root needed)" >&2; exit 1; }
for i in $(seq 1 $((maxh + 1))); do
	ip netns exec "rdpt-$i" tc qdisc add dev eth0 root tbf rate "${rate}mbit" \
		burst 256kb latency 100ms || { echo "fanout.sh: tc tbf failed" >&2; exit 1; }
done
read -r -a H <<<"$NETNS_HOSTS"   # H[0]: the source; H[1..]: the hosts
RSH=$top/tests/lib/netns-rsh
results=${RDCP_BENCH_RESULTS:-$here/results}
mkdir -p "$results" "$W/t"
csv=$results/fanout.csv
echo "case,hosts,rep,seconds" >"$csv"
mount -t tmpfs -o size=$(((maxh + 2) * size_mb * 2 + 64))m tmpfs "$W/t"
export XDG_CACHE_HOME=$W/t/cache

# a model tree: a few large blobs, many small files, relative symlinks
src=$W/t/src
mkdir -p "$src/blobs" "$src/snapshots/r1"
blob=$((size_mb * 9 / 10 / 3))
for b in 1 2 3; do head -c $((blob << 20)) /dev/urandom >"$src/blobs/b$b"; done
for i in $(seq 1 2000); do head -c $((RANDOM % 8000 + 100)) /dev/urandom >"$src/snapshots/r1/f$i"; done
for b in 1 2 3; do ln -s "../../blobs/b$b" "$src/snapshots/r1/model-$b"; done
bytes=$(du -sb --apparent-size "$src" | cut -f1)

in_src() { ip netns exec rdpt-1 "$@"; }
dsts() { local n=$1 i; for i in $(seq 1 "$n"); do echo "${H[$i]}:$W/t/d$i"; done; }
clear() { rm -rf "$W"/t/d*; }
fan() { in_src "$B/rdcp" -e "$RSH" --rdcp-path "$B/rdcp" --sync "$@" >/dev/null; }
timed() { local a b; a=$(now); "$@" || return 1; b=$(now); echo "$b - $a" | bc -l; }

# rsync's data must cross the shaped links too (over a remote shell it
# would ride the shell's local pipe): an rsync daemon on every host
for i in $(seq 1 "$maxh"); do
	cat >"$W/rsyncd$i.conf" <<-EOF
	pid file = $W/rsyncd$i.pid
	[d]
	path = $W/t/d$i
	read only = false
	use chroot = false
	munge symlinks = false
	uid = root
	gid = root
	EOF
	(ip netns exec "rdpt-$((i + 1))" rsync --daemon --no-detach --config="$W/rsyncd$i.conf" &)
done
sleep 0.5

declare -A T
counts="1 2 4 8"
[ "$maxh" -lt 8 ] && counts=$(seq 1 "$maxh" | tr '\n' ' ')
for r in $(seq 1 "$reps"); do
	for n in $counts; do
		[ "$n" -le "$maxh" ] || continue
		clear
		printf 'rep %d/%d: fan-out to %d\r' "$r" "$reps" "$n" >&2
		s=$(timed fan "$src/" $(dsts "$n")) || { echo "fanout.sh: fan-out to $n failed" >&2; exit 1; }
		for i in $(seq 1 "$n"); do
			[ -z "$(rsync -anciH --delete "$src/" "$W/t/d$i/")" ] ||
				{ echo "fanout.sh: host $i differs" >&2; exit 1; }
		done
		T[fan$n]+="$s "
		echo "fanout,$n,$r,$s" >>"$csv"
	done
	[ "$seq" = 1 ] || continue
	clear
	printf 'rep %d/%d: rdcp host after host\r' "$r" "$reps" >&2
	s=$(timed bash -c "for d in $(dsts "$maxh" | tr '\n' ' '); do \
		ip netns exec rdpt-1 '$B/rdcp' -e '$RSH' --rdcp-path '$B/rdcp' --sync '$src/' \$d >/dev/null || exit 1; done") ||
		{ echo "fanout.sh: sequential rdcp failed" >&2; exit 1; }
	T[seq]+="$s "
	echo "rdcp-sequential,$maxh,$r,$s" >>"$csv"
	clear
	printf 'rep %d/%d: rsync host after host\r' "$r" "$reps" >&2
	for i in $(seq 1 "$maxh"); do mkdir -p "$W/t/d$i"; done
	s=$(timed bash -c "for i in \$(seq 1 $maxh); do \
		ip netns exec rdpt-1 rsync -a --delete '$src/' rsync://10.177.0.\$((i + 1))/d/ || exit 1; done") ||
		{ echo "fanout.sh: rsync failed" >&2; exit 1; }
	for i in $(seq 1 "$maxh"); do
		[ -z "$(rsync -anciH --delete "$src/" "$W/t/d$i/")" ] ||
			{ echo "fanout.sh: rsync's host $i differs" >&2; exit 1; }
	done
	T[rsync]+="$s "
	echo "rsync-sequential,$maxh,$r,$s" >>"$csv"
done

# one host of four killed halfway (-P keeps its chunks for the second round)
kn=$((maxh < 4 ? maxh : 4))
for r in $(seq 1 "$reps"); do
	[ "$kn" -ge 3 ] || break
	clear
	printf 'rep %d/%d: host %d of %d killed halfway\r' "$r" "$reps" "$kill" "$kn" >&2
	one=$(medof "${T[fan$kn]}")
	a=$(now)
	in_src "$B/rdcp" -e "$RSH" --rdcp-path "$B/rdcp" --sync -P "$src/" $(dsts "$kn") \
		>/dev/null 2>"$W/kill.err" &
	pid=$!
	sleep "$(echo "$one / 2" | bc -l)"
	ip netns pids "rdpt-$((kill + 1))" | xargs -r kill -9
	wait "$pid"
	b=$(now)
	s=$(echo "$b - $a" | bc -l)
	for i in $(seq 1 "$kn"); do
		[ "$i" = "$kill" ] && continue
		[ -z "$(rsync -anciH --delete "$src/" "$W/t/d$i/")" ] ||
			{ cat "$W/kill.err"; echo "fanout.sh: host $i differs after the kill" >&2; exit 1; }
	done
	T[kill]+="$s "
	echo "killed,$kn,$r,$s" >>"$csv"
	# how the others got the rest: the chain re-linked, a second round
	grep -q 'going on with the host after it' "$W/kill.err" && relinked=$((${relinked:-0} + 1))
	grep -q 'lost the data when a host before' "$W/kill.err" && round2=$((${round2:-0} + 1))
done

# mixed states: empty, complete, 1% modified, half resumed (as many of
# these as there are hosts, up to four); one run
mh=$((maxh < 4 ? maxh : 4))
clear
for i in $(seq 2 "$mh"); do [ "$i" -le 3 ] && mkdir -p "$W/t/d$i" && cp -a "$src/." "$W/t/d$i/"; done
if [ "$mh" -ge 3 ]; then
	for f in $(find "$W/t/d3/snapshots" -type f | head -20); do echo x >>"$f"; done
	dd if=/dev/urandom of="$W/t/d3/blobs/b1" bs=4096 count=1 seek=300 conv=notrunc status=none
fi
if [ "$mh" -ge 4 ]; then
	half=$(echo "$size_mb / 2 / ($rate / 16)" | bc -l)   # s, at the rate below
	(in_src "$B/rdcp" -e "$RSH" --rdcp-path "$B/rdcp" --sync -P --bwlimit "$((rate / 16))M" \
		"$src/" "${H[4]}:$W/t/d4" >/dev/null 2>&1 &
		p=$!; sleep "$half"; kill -9 $p $(ip netns pids rdpt-5) 2>/dev/null; wait) 2>/dev/null
fi
in_src "$B/rdcp" -e "$RSH" --rdcp-path "$B/rdcp" --sync -P --json "$src/" \
	$(dsts "$mh") >"$W/mixed.json" || { echo "fanout.sh: mixed states failed" >&2; exit 1; }
for i in $(seq 1 "$mh"); do
	[ -z "$(rsync -anciH --delete "$src/" "$W/t/d$i/")" ] ||
		{ echo "fanout.sh: host $i differs after the mixed run" >&2; exit 1; }
done
echo >&2

printf '\nfan-out of a %d MiB model tree (3 blobs, 2000 small files), hosts on\n' "$size_mb"
printf 'network namespaces, every link %d Mbit/s (tc tbf), %d reps, medians:\n' "$rate" "$reps"
printf '%-44s %9s %14s\n' case seconds "÷ 1 host"
f1=$(medof "${T[fan1]}")
for n in $counts; do
	m=$(medof "${T[fan$n]}")
	printf '%-44s %9.2f %14.2f\n' "rdcp fan-out to $n host$([ "$n" = 1 ] || echo s)" "$m" \
		"$(echo "$m / $f1" | bc -l)"
done
if [ "$seq" = 1 ]; then
	m=$(medof "${T[seq]}")
	printf '%-44s %9.2f %14.2f\n' "rdcp --sync to $maxh hosts, one after another" "$m" "$(echo "$m / $f1" | bc -l)"
	m=$(medof "${T[rsync]}")
	printf '%-44s %9.2f %14.2f\n' "rsync -a (daemon) to $maxh hosts, one by one" "$m" "$(echo "$m / $f1" | bc -l)"
fi
if [ -n "${T[kill]:-}" ]; then
	m=$(medof "${T[kill]}")
	k=$(medof "${T[fan$kn]}")
	printf '%-44s %9.2f %14s\n' "$kn hosts, host $kill killed halfway (-P)" "$m" \
		"$(printf '%.2f x no-failure' "$(echo "$m / $k" | bc -l)")"
	printf '  (per-run s: %s; re-linked in %d of %d runs, a second round in %d)\n' \
		"${T[kill]% }" "${relinked:-0}" "$reps" "${round2:-0}"
fi
python3 - "$W/mixed.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("mixed states (empty / complete / 1%% changed / half resumed), one run: "
      "source sent %d bytes" % d["bytes_total_sent"])
for h, state in zip(d["hosts"], ["empty", "complete", "1% changed", "half resumed"]):
    print("  %-14s %-8s %12d bytes written" % (state, h["status"], h["bytes_sent"]))
PY
target=$(echo "$(medof "${T[fan$maxh]}") / $f1" | bc -l)
printf 'target: %d hosts <= 1.25 x 1 host: %.2f (%s)\n' "$maxh" "$target" \
	"$(echo "$target <= 1.25" | bc -l | sed 's/1/met/;s/0/NOT met/')"
echo "raw results: $csv"

[ "$vm" = 1 ] || exit 0
echo "VM: booting soft-RoCE (${vm_mb} MiB per run)..." >&2
cat >"$W/guest.sh" <<GUEST
$RXE_GUEST_SETUP
ulimit -l unlimited
A=169.254.77.1; B=$B; L=$top/tests/e2e/local-rsh
export XDG_CACHE_HOME=/tmp/cache
mkdir -p /tmp/s/blobs /tmp/s/small
head -c \$(( $vm_mb * 9 / 10 << 20 )) /dev/urandom >/tmp/s/blobs/b
for i in \$(seq 200); do echo \$i >/tmp/s/small/f\$i; done
r() { \$B/rdcp -e \$L --rdcp-path \$B/rdcp --transport rdma --sync /tmp/s/ "\$@" >/dev/null; }
for k in \$(seq $reps); do
	rm -rf /tmp/d*
	a=\$(date +%s.%N); r \$A:/tmp/d0 || echo FAILED; b=\$(date +%s.%N)
	echo "one \$k \$(echo "\$b - \$a" | bc -l)"
	rm -rf /tmp/d*
	a=\$(date +%s.%N); r \$A:/tmp/d1 \$A:/tmp/d2 \$A:/tmp/d3 || echo FAILED; b=\$(date +%s.%N)
	echo "three \$k \$(echo "\$b - \$a" | bc -l)"
	for d in d1 d2 d3; do [ -z "\$(rsync -anci --delete /tmp/s/ /tmp/\$d/)" ] || echo FAILED; done
done
GUEST
"$top/tests/rdma/vm.sh" "$W/guest.sh" >"$W/vm.out" 2>&1 || { cat "$W/vm.out"; exit 1; }
! grep -q FAILED "$W/vm.out" || { cat "$W/vm.out"; exit 1; }
printf '\nfan-out in the soft-RoCE VM (rxe, QEMU TCG, 2 vCPUs), %d MiB, RDMA, %d reps, medians:\n' \
	"$vm_mb" "$reps"
one=$(awk '$1 == "one" {print $3}' "$W/vm.out" | median)
for c in one three; do
	awk -v c="$c" '$1 == c {print "vm-" c "," (c == "one" ? 1 : 3) "," $2 "," $3}' \
		"$W/vm.out" >>"$csv"
	m=$(awk -v c="$c" '$1 == c {print $3}' "$W/vm.out" | median)
	printf '%-44s %9.2f %14.2f\n' "$([ $c = one ] && echo "rdcp --sync to one host" ||
		echo "rdcp fan-out to three hosts (a chain)")" "$m" "$(echo "$m / $one" | bc -l)"
done
