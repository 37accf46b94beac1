#!/usr/bin/env bash
# Tune SYNC_SMALL (the size under which files travel in the archive stream):
# build rdcp with several thresholds and time a full local sync of a tree of
# mixed sizes (2,000 files of 4 KiB-4 MiB, log-uniform), alternating, REPS
# times. Prints the median per threshold.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
reps=${1:-3}
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-thr-XXXXXX")
trap 'rm -rf "$W"' EXIT
export XDG_CACHE_HOME=$W/cache
python3 - "$W/src" <<'PY'
import math, os, random, sys
r = random.Random(3); root = sys.argv[1]
for i in range(2000):
    d = f"{root}/d{i % 40}"
    os.makedirs(d, exist_ok=True)
    size = int(math.exp(r.uniform(math.log(4096), math.log(4 << 20))))
    with open(f"{d}/f{i}", "wb") as f:
        f.write(r.randbytes(size))
PY
du -sh "$W/src" >&2
thresholds="65536 262144 1048576 4194304"
for t in $thresholds; do
	make -s -C "$top" BUILD="$W/build-$t" MOREFLAGS="-DSYNC_SMALL=$t" "$W/build-$t/rdcp" >/dev/null
done
declare -A T
for r in $(seq "$reps"); do
	for t in $thresholds; do
		rm -rf "$W/dst" "$W/cache"
		a=$(date +%s.%N)
		"$W/build-$t/rdcp" --sync "$W/src" "$W/dst"
		b=$(date +%s.%N)
		T[$t]+="$(echo "$b - $a" | bc -l) "
	done
done
printf '%-12s %10s\n' threshold "median s"
for t in $thresholds; do
	m=$(tr ' ' '\n' <<<"${T[$t]}" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	printf '%-12s %10.3f\n' "$t" "$m"
done
