#!/usr/bin/env bash
# Transport throughput, rdsend->rdrecv against the peers in the same run.
#   Host, TCP loopback: a page-cached file (default 2 GiB) through
#     rdsend FILE | rdrecv >/dev/null, rdsend <FILE, iperf3 -n, nc;
#     and rdsend FILE -> rdrecv with and without --encrypt at 1, 2 and 4
#     streams (median, min and max; --encrypt throughput / plain).
#   Soft-RoCE VM: rdsend->rdrecv over RDMA vs ib_write_bw -R and
#     ib_send_bw -R with the same 1 MiB messages.
# Runs alternate, REPS times each; prints medians and ratios (rdsend
# throughput / peer throughput) and writes benchmarks/results/transport.csv.
# A run that fails stops the benchmark (a failed run would look fast).
#   transport.sh [--size-mb N] [--reps N] [--vm-mb N] [--no-vm]
#                [--enc-only] [--no-enc]
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${RDCP_BUILD:-$top/build}
size_mb=2048 reps=3 vm_mb=256 vm=1 base=1 enc=1
while [ $# -gt 0 ]; do
	case $1 in
	--size-mb) size_mb=$2; shift ;;
	--reps) reps=$2; shift ;;
	--vm-mb) vm_mb=$2; shift ;;
	--no-vm) vm=0 ;;
	--enc-only) base=0 vm=0 ;;
	--no-enc) enc=0 ;;
	*) echo "usage: $0 [--size-mb N] [--reps N] [--vm-mb N] [--no-vm] [--enc-only] [--no-enc]" >&2
	   exit 1 ;;
	esac
	shift
done
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-tp-XXXXXX")
trap 'rm -rf "$W"' EXIT
results=${RDCP_BENCH_RESULTS:-$here/results}
csv=$results/transport.csv
mkdir -p "$results"
echo "where,contender,rep,seconds,MBps" >"$csv"

source "$here/lib.sh"

echo "host: making a ${size_mb} MiB file and reading it into the page cache..." >&2
head -c $((size_mb << 20)) /dev/urandom >"$W/f"
cat "$W/f" >/dev/null
bytes=$((size_mb << 20))

# run_rdx STREAMS [--encrypt]: rdsend FILE -> rdrecv >/dev/null, seconds
run_rdx() { local p; p=$(port); "$B/rdrecv" ${2:-} --transport tcp "$p" k >/dev/null & local r=$!
	sleep 0.2
	local a; a=$(now)
	"$B/rdsend" ${2:-} -P "$1" --transport tcp 127.0.0.1 "$p" k "$W/f" || { wait; return 1; }
	wait "$r" || return 1
	echo "$(now) - $a" | bc -l; }
run_rd_file() { run_rdx 1; }
run_plain2() { run_rdx 2; }
run_plain4() { run_rdx 4; }
run_enc1() { run_rdx 1 --encrypt; }
run_enc2() { run_rdx 2 --encrypt; }
run_enc4() { run_rdx 4 --encrypt; }
run_rd_stdin() { local p; p=$(port); "$B/rdrecv" --transport tcp "$p" k >/dev/null & sleep 0.2
	local a; a=$(now); "$B/rdsend" --transport tcp 127.0.0.1 "$p" k <"$W/f"; wait; echo "$(now) - $a" | bc -l; }
run_nc() { local p; p=$(port); nc -l -p "$p" >/dev/null & sleep 0.2
	local a; a=$(now); nc -N 127.0.0.1 "$p" <"$W/f"; wait; echo "$(now) - $a" | bc -l; }
run_iperf() { local p; p=$(port); iperf3 -s -1 -p "$p" >/dev/null 2>&1 & sleep 0.3
	iperf3 -c 127.0.0.1 -p "$p" -n "$bytes" -J 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["seconds"])'
	wait; }

contenders=""
[ "$base" = 1 ] && contenders="rd_file rd_stdin iperf nc"
[ "$enc" = 1 ] && contenders+=" enc1 plain2 enc2 plain4 enc4"
[ "$base" = 1 ] || contenders="rd_file$contenders"
declare -A T
for r in $(seq 1 "$reps"); do
	for c in $contenders; do
		printf 'host rep %d/%d: %-9s\r' "$r" "$reps" "$c" >&2
		s=$(run_$c 2>"$W/err") || { echo; echo "host: $c failed:"; cat "$W/err"; exit 1; } >&2
		T[$c]+="$s "
		echo "host,$c,$r,$s,$(echo "$bytes / $s / 1000000" | bc -l)" >>"$csv"
	done
done
echo >&2
mbs() { echo "$bytes / $1 / 1000000" | bc -l; }
if [ "$enc" = 1 ]; then
	printf '\nEncryption, TCP loopback, rdsend FILE -> rdrecv >/dev/null, %d MiB page-cached, %d reps:\n' \
		"$size_mb" "$reps"
	printf '%-7s %-10s %9s %17s %9s %18s\n' streams "" "median s" "min-max s" "MB/s" "--encrypt ÷ plain"
	for n in 1 2 4; do
		pc=plain$n; [ "$n" = 1 ] && pc=rd_file
		pm=$(medof "${T[$pc]}") em=$(medof "${T[enc$n]}")
		for c in "$pc" "enc$n"; do
			m=$(medof "${T[$c]}")
			lo=$(tr ' ' '\n' <<<"${T[$c]}" | grep . | sort -g | head -1)
			hi=$(tr ' ' '\n' <<<"${T[$c]}" | grep . | sort -g | tail -1)
			ratio=""; [ "$c" = "enc$n" ] && ratio=$(printf '%.2f' "$(echo "$pm / $em" | bc -l)")
			printf '%-7s %-10s %9.3f %8.3f-%-8.3f %9.0f %18s\n' "$n" \
				"$([ "$c" = "enc$n" ] && echo --encrypt || echo plain)" "$m" "$lo" "$hi" \
				"$(mbs "$m")" "$ratio"
		done
	done
fi
[ "$base" = 1 ] || exit 0
printf '\nHost TCP loopback, %d MiB page-cached, %d reps, medians:\n' "$size_mb" "$reps"
printf '%-28s %9s %10s %12s\n' contender "s" "MB/s" "rdsend(file) ÷"
rdm=$(medof "${T[rd_file]}")
for c in rd_file rd_stdin iperf nc; do
	m=$(medof "${T[$c]}")
	name=$(case $c in rd_file) echo "rdsend FILE -> rdrecv";; rd_stdin) echo "rdsend <FILE -> rdrecv";;
		iperf) echo "iperf3 -n";; nc) echo "nc | nc";; esac)
	printf '%-28s %9.3f %10.0f %12.2f\n' "$name" "$m" "$(echo "$bytes / $m / 1000000" | bc -l)" \
		"$(echo "$m / $rdm" | bc -l)"
done

[ "$vm" = 1 ] || exit 0
echo "VM: booting soft-RoCE (${vm_mb} MiB per run)..." >&2
cat >"$W/guest.sh" <<GUEST
$RXE_GUEST_SETUP
A=169.254.77.1; B=$B; mb=$vm_mb; reps=$reps
n=\$mb   # 1 MiB messages
head -c \$((mb << 20)) /dev/urandom >/tmp/f
for r in \$(seq 1 \$reps); do
	ib_write_bw -R -d rxe0 -s 1048576 -n \$n >/dev/null 2>&1 & sleep 1
	echo "write_bw \$r \$(ib_write_bw -R -d rxe0 -s 1048576 -n \$n \$A 2>/dev/null | awk '\$1 == 1048576 {print \$4}')"
	wait
	ib_send_bw -R -d rxe0 -s 1048576 -n \$n >/dev/null 2>&1 & sleep 1
	echo "send_bw \$r \$(ib_send_bw -R -d rxe0 -s 1048576 -n \$n \$A 2>/dev/null | awk '\$1 == 1048576 {print \$4}')"
	wait
	for t in rdma tcp; do
		\$B/rdrecv --transport \$t 7100 k >/dev/null & sleep 0.5
		a=\$(date +%s.%N); \$B/rdsend --transport \$t \$A 7100 k /tmp/f; b=\$(date +%s.%N); wait
		echo "rdsend_\$t \$r \$(echo "\$((mb << 20)) / (\$b - \$a) / 1048576" | bc -l)"
	done
done
GUEST
"$top/tests/rdma/vm.sh" "$W/guest.sh" >"$W/vm.out" 2>&1 || { cat "$W/vm.out"; exit 1; }
# perftest reports MB/sec with MB = 2^20 bytes; rdsend is converted the same way
printf '\nSoft-RoCE VM (rxe, 2 vCPU TCG), %d MiB, 1 MiB messages, %d reps, medians (MiB/s):\n' "$vm_mb" "$reps"
printf '%-26s %10s %14s\n' contender "MiB/s" "rdsend(rdma) ÷"
med() { awk -v k="$1" '$1 == k {print $3}' "$W/vm.out" | median; }
rd=$(med rdsend_rdma)
for k in rdsend_rdma rdsend_tcp write_bw send_bw; do
	awk -v k="$k" '$1 == k {print "vm," k "," $2 ",," $3 * 1.048576}' "$W/vm.out" >>"$csv"
	m=$(med "$k")
	name=$(case $k in rdsend_rdma) echo "rdsend -> rdrecv (rdma)";; rdsend_tcp) echo "rdsend -> rdrecv (tcp)";;
		write_bw) echo "ib_write_bw -R";; send_bw) echo "ib_send_bw -R";; esac)
	printf '%-26s %10.1f %14.2f\n' "$name" "$m" "$(echo "$rd / $m" | bc -l)"
done
echo
echo "raw results: $csv"
