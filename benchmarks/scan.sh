#!/usr/bin/env bash
# Scan speed on a 50,000-file tree (100 B - 16 KiB, 200 directories):
# first scan (everything hashed), second scan (nothing hashed), against
# `find DIR -printf '%s'` (metadata only) as the floor, in the same run.
# Usage: benchmarks/scan.sh [FILES] (default 50000). Warm page cache.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50000}
BUILD=${BUILD:-build}
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-scan-XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "generating $N files in $W/tree ..." >&2
python3 - "$W/tree" "$N" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(42)
for d in range(200):
    os.makedirs(f"{root}/pkg{d:03d}/lib", exist_ok=True)
for i in range(n):
    size = rnd.randint(100, 16384)
    with open(f"{root}/pkg{i % 200:03d}/lib/file{i:06d}.js", "wb") as f:
        f.write(rnd.randbytes(size))
PY
sleep 0.1
source benchmarks/lib.sh
t() { local a b; a=$(now); "$@" >/dev/null; b=$(now); echo "$b - $a" | bc -l; }
find_s=$(t find "$W/tree" -printf '%s')
first=$(t "$BUILD/rdcp" --scan "$W/tree" --index "$W/i.db")
second=$(t "$BUILD/rdcp" --scan "$W/tree" --index "$W/i.db")
out=$("$BUILD/rdcp" --scan "$W/tree" --index "$W/i.db")
hashed=$(sed -n 's/^hashed \([0-9]*\) files.*/\1/p' <<<"$out")
printf '%-28s %9s %12s %10s\n' "run ($N files)" "wall s" "files/s" "÷ find"
for row in "find -printf %s:$find_s" "rdcp --scan (first):$first" "rdcp --scan (second):$second"; do
	name=${row%%:*}; s=${row##*:}
	printf '%-28s %9.3f %12.0f %10.2f\n' "$name" "$s" "$(echo "$N / $s" | bc -l)" "$(echo "$s / $find_s" | bc -l)"
done
echo "files hashed by a third scan: $hashed"
