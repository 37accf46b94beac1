#!/usr/bin/env bash
# rdcp --sync vs rsync -a, both through the same local sshd (127.0.0.1),
# same data, alternating, REPS times; medians and ratios (rdcp time ÷ rsync
# time). Data sets: `small` (50,000 files of 100 B-16 KiB in 200 dirs) and
# `big` (4 x 1 GiB). Scenarios: full sync into an empty DST, no-op re-sync.
#   sync.sh [--scale F] [--reps N]     (--scale 0.1: a tenth of the data)
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${RDCP_BUILD:-$top/build}
scale=1 reps=3
while [ $# -gt 0 ]; do
	case $1 in
	--scale) scale=$2; shift ;;
	--reps) reps=$2; shift ;;
	*) echo "usage: $0 [--scale F] [--reps N]" >&2; exit 1 ;;
	esac
	shift
done
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-sync-XXXXXX")
source "$top/tests/lib/sshd.sh"
trap 'sshd_stop "$W/sshd"; rm -rf "$W"' EXIT
sshd_start "$W/sshd" || { echo "sshd did not start" >&2; exit 1; }
export XDG_CACHE_HOME=$W/cache
results=${RDCP_BENCH_RESULTS:-$here/results}
csv=$results/sync.csv
mkdir -p "$results"
echo "set,scenario,contender,rep,seconds" >"$csv"

nsmall=$(python3 -c "print(max(1, int(50000 * $scale)))")
bigmb=$(python3 -c "print(max(1, int(1024 * $scale)))")
echo "generating: small = $nsmall files, big = 4 x $bigmb MiB ..." >&2
python3 - "$W/small" "$nsmall" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
r = random.Random(42)
for d in range(200):
    os.makedirs(f"{root}/pkg{d:03d}/lib", exist_ok=True)
for i in range(n):
    with open(f"{root}/pkg{i % 200:03d}/lib/file{i:06d}.js", "wb") as f:
        f.write(r.randbytes(r.randint(100, 16384)))
PY
mkdir -p "$W/big"
for i in 1 2 3 4; do head -c $((bigmb << 20)) /dev/urandom >"$W/big/blob$i"; done
sleep 0.1

now() { date +%s.%N; }
timeit() { local a; a=$(now); "$@" >/dev/null 2>&1 || echo "FAILED: $*" >&2; echo "$(now) - $a" | bc -l; }
rdcp_run() { timeit "$B/rdcp" --sync -e "$RSH" --rdcp-path "$B/rdcp" "$W/$1" "127.0.0.1:$2"; }
rsync_run() { timeit rsync -a -e "$RSH" "$W/$1/" "127.0.0.1:$2/"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A T
for set in small big; do
	for r in $(seq 1 "$reps"); do
		for c in rdcp rsync; do
			printf '%s rep %d/%d: %s full   \r' "$set" "$r" "$reps" "$c" >&2
			rm -rf "$W/dst-$c"
			sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null || true
			cat "$W/$set"/blob* >/dev/null 2>&1 || true   # warm source
			s=$(${c}_run "$set" "$W/dst-$c")
			T[$set,full,$c]+="$s "; echo "$set,full,$c,$r,$s" >>"$csv"
			printf '%s rep %d/%d: %s no-op  \r' "$set" "$r" "$reps" "$c" >&2
			s=$(${c}_run "$set" "$W/dst-$c")
			T[$set,noop,$c]+="$s "; echo "$set,noop,$c,$r,$s" >>"$csv"
		done
		d=$(rsync -anci --delete "$W/$set/" "$W/dst-rdcp/")
		[ -z "$d" ] || { echo "rdcp's copy differs from the source:" >&2; echo "$d" | head >&2; exit 1; }
	done
done
echo >&2
printf '\nrdcp --sync vs rsync -a, same sshd on 127.0.0.1, %d reps, medians:\n' "$reps"
printf '%-8s %-9s %10s %10s %14s\n' set scenario "rdcp s" "rsync s" "rdcp ÷ rsync"
for set in small big; do
	for sc in full noop; do
		a=$(tr ' ' '\n' <<<"${T[$set,$sc,rdcp]}" | grep . | median)
		b=$(tr ' ' '\n' <<<"${T[$set,$sc,rsync]}" | grep . | median)
		printf '%-8s %-9s %10.3f %10.3f %14.2f\n' "$set" "$sc" "$a" "$b" "$(echo "$a / $b" | bc -l)"
	done
done
echo "(small: $nsmall files; big: 4 x $bigmb MiB; raw: $csv)"
