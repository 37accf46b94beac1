#!/usr/bin/env bash
# make check's guard against benchmark rot: every script in benchmarks/ runs
# end to end on tiny data (seconds), results to a temp dir. Speaks TAP.
# (threshold.sh, which builds four variants, is left to manual tuning runs;
# the soft-RoCE parts run in the VM suite's time budget only in full runs.)
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
echo "1..7"
check "benchmarks/scan.sh on 500 files" "$here/benchmarks/scan.sh" 500
check "benchmarks/transport.sh, 16 MiB, TCP only" \
	"$here/benchmarks/transport.sh" --size-mb 16 --reps 1 --no-vm
res=$(mktemp -d)
check "make bench's harness (benchmarks/bench.py) at 1/2000 scale, every contender" \
	python3 "$here/benchmarks/bench.py" --scale 0.0005 --reps 1 --no-vm --results "$res"
check "benchmarks/rdpipe.sh, 8 MiB" "$here/benchmarks/rdpipe.sh" --size-mb 8 --no-vm
res=$(mktemp -d)
check "benchmarks/fanout.sh, 8 MiB, 3 hosts" env RDCP_BENCH_RESULTS="$res" \
	"$here/benchmarks/fanout.sh" --size-mb 8 --reps 1 --max-hosts 3 --no-vm
rm -rf "$res"
res=$(mktemp -d)
live="watch,rsync-loop,rdcp-loop"
command -v lsyncd >/dev/null && live="$live,lsyncd"
check "benchmarks/live.py, 2 s, 300 small files, $live; idle: 2000 files, 2 s" \
	python3 "$here/benchmarks/live.py" --secs 2 --small 300 --contenders "$live" \
	--idle 2000 --idle-secs 2 --work "$res/work" --results "$res"
rm -rf "$res"
res=$(mktemp -d)
check "benchmarks/cost.py at 1/100 scale (500 small files, 2 x 10 MiB)" \
	python3 "$here/benchmarks/cost.py" --scale 0.01 --reps 1 --results "$res"
rm -rf "$res"
exit $fail
