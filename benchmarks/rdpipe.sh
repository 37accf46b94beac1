#!/usr/bin/env bash
# rdpipe: a 3-segment chain against a 1-segment pipeline and a bare
# rdsend -> rdrecv hop, same data, same run, alternating, medians.
#   Host: three network-namespace hosts (tests/lib/netns.sh), TCP.
#   VM (unless --no-vm): every segment in the soft-RoCE VM, RDMA.
#   rdpipe.sh [--size-mb N] [--reps N] [--vm-mb N] [--no-vm]
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${RDCP_BUILD:-$top/build}
size_mb=1024 reps=3 vm_mb=256 vm=1
while [ $# -gt 0 ]; do
	case $1 in
	--size-mb) size_mb=$2; shift ;;
	--reps) reps=$2; shift ;;
	--vm-mb) vm_mb=$2; shift ;;
	--no-vm) vm=0 ;;
	*) echo "usage: $0 [--size-mb N] [--reps N] [--vm-mb N] [--no-vm]" >&2; exit 1 ;;
	esac
	shift
done
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-pipe-XXXXXX")
source "$top/tests/lib/netns.sh"
trap 'netns_down; rm -rf "$W"' EXIT
netns_up 3 || { echo "rdpipe.sh: cannot make network namespaces (root needed)" >&2; exit 1; }
read -r H1 H2 H3 <<<"$NETNS_HOSTS"
results=${RDCP_BENCH_RESULTS:-$here/results}
mkdir -p "$results"
csv=$results/rdpipe.csv
echo "where,contender,rep,seconds,MBps" >"$csv"
RSH=$top/tests/lib/netns-rsh

head -c $((size_mb << 20)) /dev/urandom >"$W/f"
cat "$W/f" >/dev/null
bytes=$((size_mb << 20))
source "$here/lib.sh"
rp() { "$B/rdpipe" -e "$RSH" --rdpipe-path "$B/rdpipe" --transport tcp "$@" <"$W/f" >/dev/null; }
run_hop() {   # one bare hop between two namespaces (its receiver already up)
	ip netns exec rdpt-1 "$B/rdsend" --transport tcp "$H2" 7300 k "$W/f"; wait; }
run_one() { rp "$H1:cat"; }
run_three() { rp "$H1:cat" "$H2:cat" "$H3:cat"; }

declare -A T
for r in $(seq 1 "$reps"); do
	for c in hop one three; do
		printf 'host rep %d/%d: %-6s\r' "$r" "$reps" "$c" >&2
		if [ $c = hop ]; then
			ip netns exec rdpt-2 "$B/rdrecv" --transport tcp 7300 k >/dev/null &
			sleep 0.3
		fi
		a=$(now); run_$c || { echo "rdpipe.sh: $c failed" >&2; exit 1; }; b=$(now)
		s=$(echo "$b - $a" | bc -l)
		T[$c]+="$s "
		echo "host,$c,$r,$s,$(echo "$bytes / $s / 1000000" | bc -l)" >>"$csv"
	done
done
echo >&2
printf '\nrdpipe, %d MiB, network-namespace hosts over TCP (veth), %d reps, medians:\n' \
	"$size_mb" "$reps"
printf '%-52s %8s %9s %14s\n' contender s MB/s "3-seg speed ÷ its"
three=$(medof "${T[three]}")
for c in hop one three; do
	m=$(medof "${T[$c]}")
	name=$(case $c in hop) echo "rdsend -> rdrecv, one hop h1 -> h2";;
		one) echo "rdpipe h1:cat (2 hops: in, out)";;
		three) echo "rdpipe h1:cat h2:cat h3:cat (4 hops)";; esac)
	printf '%-52s %8.3f %9.0f %14.2f\n' "$name" "$m" "$(echo "$bytes / $m / 1000000" | bc -l)" \
		"$(echo "$m / $three" | bc -l)"
done

[ "$vm" = 1 ] || exit 0
echo "VM: booting soft-RoCE (${vm_mb} MiB per run)..." >&2
cat >"$W/guest.sh" <<GUEST
$RXE_GUEST_SETUP
A=169.254.77.1; B=$B; L=$top/tests/e2e/local-rsh
head -c $((vm_mb << 20)) /dev/urandom >/tmp/f
rp() { \$B/rdpipe -e \$L --rdpipe-path \$B/rdpipe --transport rdma "\$@" </tmp/f >/dev/null; }
for r in \$(seq $reps); do
	\$B/rdrecv --transport rdma 7300 k >/dev/null & sleep 0.5
	a=\$(date +%s.%N); \$B/rdsend --transport rdma \$A 7300 k /tmp/f; wait; b=\$(date +%s.%N)
	echo "hop \$r \$(echo "\$b - \$a" | bc -l)"
	a=\$(date +%s.%N); rp \$A:cat || echo FAILED; b=\$(date +%s.%N)
	echo "one \$r \$(echo "\$b - \$a" | bc -l)"
	a=\$(date +%s.%N); rp \$A:cat \$A:cat \$A:cat || echo FAILED; b=\$(date +%s.%N)
	echo "three \$r \$(echo "\$b - \$a" | bc -l)"
done
GUEST
"$top/tests/rdma/vm.sh" "$W/guest.sh" >"$W/vm.out" 2>&1 || { cat "$W/vm.out"; exit 1; }
! grep -q FAILED "$W/vm.out" || { cat "$W/vm.out"; exit 1; }
vbytes=$((vm_mb << 20))
printf '\nrdpipe in the soft-RoCE VM (rxe, QEMU TCG, 2 vCPUs), %d MiB, RDMA, %d reps, medians:\n' \
	"$vm_mb" "$reps"
printf '%-52s %8s %9s %14s\n' contender s MB/s "3-seg speed ÷ its"
vthree=$(awk '$1 == "three" {print $3}' "$W/vm.out" | median)
for c in hop one three; do
	awk -v c="$c" -v b="$vbytes" '$1 == c {print "vm," c "," $2 "," $3 "," b / $3 / 1e6}' \
		"$W/vm.out" >>"$csv"
	m=$(awk -v c="$c" '$1 == c {print $3}' "$W/vm.out" | median)
	name=$(case $c in hop) echo "rdsend -> rdrecv, one hop";;
		one) echo "rdpipe A:cat (2 hops)";; three) echo "rdpipe A:cat A:cat A:cat (4 hops)";; esac)
	printf '%-52s %8.3f %9.1f %14.2f\n' "$name" "$m" "$(echo "$vbytes / $m / 1000000" | bc -l)" \
		"$(echo "$m / $vthree" | bc -l)"
done
echo "raw results: $csv"
