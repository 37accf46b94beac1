#!/usr/bin/env bash
# Runs the whole suite: unit tests (cmocka), fuzz corpus replay, end-to-end
# tests (bats) and, when present, the RDMA tests inside the soft-RoCE VM.
# Every part speaks TAP; this script counts the lines and ends with
#   N passed, N failed, N skipped
# and exits non-zero if anything failed or a suite died without reporting.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export RDCP_BUILD=$PWD/$BUILD
export CMOCKA_MESSAGE_OUTPUT=TAP
export TMPDIR=${TMPDIR:-/tmp}
pass=0 fail=0 skip=0
failed_names=()

# run_suite NAME CMD...: run CMD, echo its output, count its TAP lines.
run_suite() {
	local name=$1; shift
	local log; log=$(mktemp)
	echo "== $name"
	"$@" >"$log" 2>&1
	local rc=$?
	local p=0 f=0 s=0 line
	while IFS= read -r line; do
		case "$line" in
		"ok "*"# skip"*|"ok "*"# SKIP"*|"not ok "*"# SKIP"*|"not ok "*"# skip"*)
			s=$((s + 1)); echo "   SKIPPED: $line" ;;
		"ok "*) p=$((p + 1)); echo "   $line" ;;
		"not ok "*) f=$((f + 1)); echo "   $line"; failed_names+=("$name: $line") ;;
		*) echo "   | $line" ;;
		esac
	done <"$log"
	rm -f "$log"
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		# died (crash, missing tool) without saying which test failed
		f=1; failed_names+=("$name: exited $rc without a failing test line")
		echo "   not ok - $name exited with status $rc"
	fi
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] && run_suite "unit $(basename "$t")" "$t"
done
for t in "$BUILD"/tests/fuzz_*; do
	n=$(basename "$t"); n=${n#fuzz_}
	[ -x "$t" ] && run_suite "fuzz replay $n" "$t" "tests/fuzz/corpus/$n"
done
for b in tests/e2e/*.bats; do
	[ -f "$b" ] && run_suite "e2e $(basename "$b" .bats)" bats --tap "$b"
done
# keep benchmarks/ runnable (tiny data; results of these runs are not kept)
BENCH_RESULTS=$(mktemp -d)
run_suite "benchmark smoke" env RDCP_BENCH_RESULTS="$BENCH_RESULTS" tests/bench-smoke.sh
rm -rf "$BENCH_RESULTS"
if [ -x tests/rdma/run.sh ]; then
	run_suite "rdma (soft-RoCE VM)" tests/rdma/run.sh
fi

if [ "${#failed_names[@]}" -gt 0 ]; then
	echo
	echo "Failures:"
	printf '  %s\n' "${failed_names[@]}"
fi
echo
if [ "$skip" -gt 0 ]; then
	echo "WARNING: $skip tests were SKIPPED (see SKIPPED lines above)"
	echo "$pass passed, $fail failed, $skip skipped"
else
	echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
