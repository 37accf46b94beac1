#!/usr/bin/env bash
# make check's guard against benchmark rot: every script in benchmarks/ runs
# end to end on tiny data (seconds), results to a temp dir. Speaks TAP.
# (threshold.sh, which builds four variants, is left to manual tuning runs.)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
n=0 fail=0
check() {   # check NAME CMD...
	local name=$1; shift
	local out; out=$(mktemp)
	n=$((n + 1))
	if "$@" >"$out" 2>&1; then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name"
		sed 's/^/# /' "$out" | tail -20
		fail=1
	fi
	rm -f "$out"
}
echo "1..3"
check "benchmarks/scan.sh on 500 files" "$here/benchmarks/scan.sh" 500
check "benchmarks/transport.sh, 16 MiB, TCP only" \
	"$here/benchmarks/transport.sh" --size-mb 16 --reps 1 --no-vm
check "benchmarks/sync.sh at 1/5000 scale" "$here/benchmarks/sync.sh" --scale 0.0002 --reps 1
exit $fail
