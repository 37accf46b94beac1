#!/usr/bin/env bash
# Runs the whole suite: unit tests (cmocka), fuzz corpus replay, end-to-end
# tests (bats), the hostile-peer suites and every fuzz corpus again under
# ASan + UBSan (build-asan), and, when present, the RDMA tests inside the
# soft-RoCE VM. Independent parts run side by side in three lanes (see
# lanes() below); each part's output is printed whole when it ends.
# Every part speaks TAP; this script counts the lines and ends with
#   N passed, N failed, N skipped
# and exits non-zero if anything failed or a suite died without reporting.
# Hermetic: TMPDIR, HOME and XDG_CACHE_HOME point into one temp directory of
# its own, and its last test (leak_check) fails if anything was left outside.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export RDCP_BUILD=$PWD/$BUILD
export CMOCKA_MESSAGE_OUTPUT=TAP
pass=0 fail=0 skip=0
failed_names=()
times=()

# Hermetic: the suite's temp files, HOME and index cache are its own, under
# one directory removed at the end (the remote side through the test sshd
# gets them too: tests/lib/sshd.sh). The real ones are only looked at, by
# leak_check below.
real_tmp=${TMPDIR:-/tmp}
real_cache=${XDG_CACHE_HOME:-}
[ "${real_cache#/}" != "$real_cache" ] || real_cache=${HOME:-/nonexistent}/.cache
SUITE=$(mktemp -d "$real_tmp/rdcp-suite-XXXXXX") || exit 1
trap 'rm -rf --one-file-system "$SUITE"' EXIT
mkdir -p "$SUITE/tmp" "$SUITE/home" "$SUITE/cache"
# as /tmp is: tests that run a step as another user (meta.bats) need to
# reach their files through the suite's directory
chmod 755 "$SUITE" "$SUITE/home" && chmod 1777 "$SUITE/tmp"
touch "$SUITE/start"
export TMPDIR=$SUITE/tmp HOME=$SUITE/home XDG_CACHE_HOME=$SUITE/cache

# What the suite could leave at the top of the real temp directory if
# something in it ignored TMPDIR: the fixed names an index cache takes there
# (HOME=/tmp, XDG_CACHE_HOME=/tmp/cache) and rdcp-* names, except the
# per-test directories that any bats file run by hand makes there now
# (those vanish with their test; they are not a sign of this suite).
ours='^(\.cache|cache|rdcp-.*)$'
theirs='^rdcp-(e2e|sshd|suite|vm|test|cache)-[A-Za-z0-9]{6}$'
tmp_names() {
	ls -A "$real_tmp" 2>/dev/null | grep -E "$ours" | grep -Ev "$theirs" | sort
}
tmp_before=$(tmp_names)

# report NAME LOG RC TOOK: print a part's output (LOG, buffered while it
# ran), count its TAP lines, and note its time.
declare -A lane_s=()
report() {
	local name=$1 log=$2 rc=$3 took=$4 lane=${5:-}
	local p=0 f=0 s=0 plan=0 line
	echo "== $name"
	while IFS= read -r line; do
		case "$line" in
		1..[0-9]*) plan=$((plan + ${line#1..})); echo "   | $line" ;;
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
	elif [ $((p + f + s)) -lt "$plan" ]; then
		# planned more tests than it reported: it stopped part-way
		local got=$((p + f + s))
		f=$((f + 1)); failed_names+=("$name: planned $plan tests, reported $got")
		echo "   not ok - $name planned $plan tests and reported $got"
	fi
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
	echo "   ($name: ${took} s)"
	[ -n "$lane" ] && lane_s[$lane]=$(( ${lane_s[$lane]:-0} + took ))
	times+=("$(printf '%5d s  %s' "$took" "$name")")
}

# part NAME CMD...: run CMD (in lane $LANE, below) with its output into a
# log of its own; then one line for report(): name, log, status, seconds,
# lane.
LOGS=$SUITE/logs
mkdir -p "$LOGS"
part() {
	local name=$1; shift
	local log; log=$(mktemp "$LOGS/part-XXXXXX")
	local t0=$SECONDS
	"$@" >"$log" 2>&1 </dev/null
	local rc=$?
	printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$log" "$rc" "$((SECONDS - t0))" "$LANE"
}

bench_smoke() {   # keep benchmarks/ runnable (tiny data; results not kept)
	local res rc; res=$(mktemp -d)
	RDCP_BENCH_RESULTS=$res tests/bench-smoke.sh
	rc=$?
	rm -rf "$res"
	return "$rc"
}

# The sanitizer part: the hostile-peer suites and every fuzz corpus again,
# built with ASan + UBSan (build-asan, as make asan). A report fails the
# part even when the process it killed was expected to fail anyway (a
# hostile test that wants a refusal would pass on a crash): every report
# goes to a file of its own (log_path), and after each run the files are
# printed and counted as a failing test. halt_on_error and
# -fno-sanitize-recover: the first error ends the process, non-zero.
# allocator_may_return_null: a hostile size that asks for terabytes gets
# NULL, as from libc (the code's -ENOMEM path), not an ASan abort.
# Leaks: checked in the fuzz replays (one process, every input's memory
# must come back); not in the e2e programs, whose local runs fork their
# other side without exec: the child's exit would report the parent's
# live heap as leaked.
ASAN_BUILD=build-asan
ASAN_E2E="hostile transport-dos hardening watch live windows mpi"
asan_build() {
	echo "1..1"
	if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -j2 asan-build \
		>"$LOGS/asan-build.out" 2>&1; then
		echo "ok 1 - $ASAN_BUILD built (ASan + UBSan)"
	else
		tail -30 "$LOGS/asan-build.out"
		echo "not ok 1 - $ASAN_BUILD did not build (make asan-build)"
	fi
}
# asan_run LEAKS CMD...: CMD under the sanitizer options, then one TAP line
# more: no report, or each report printed and a failure.
asan_run() {
	local leaks=$1; shift
	local d; d=$(mktemp -d "$LOGS/asan-XXXXXX")
	chmod 1777 "$d"
	local common="halt_on_error=1:exitcode=86:print_stacktrace=1"
	ASAN_OPTIONS="log_path=$d/asan:$common:abort_on_error=0:detect_leaks=$leaks:allocator_may_return_null=1:handle_abort=1" \
	UBSAN_OPTIONS="log_path=$d/ubsan:$common" \
	RDCP_BUILD=$PWD/$ASAN_BUILD "$@"
	local rc=$? n=0 r
	for r in "$d"/*; do
		[ -f "$r" ] || continue
		n=$((n + 1))
		echo "# sanitizer report $(basename "$r"):"
		sed 's/^/#   /' "$r" | head -60
	done
	if [ "$n" -eq 0 ]; then
		echo "ok - no sanitizer report"
	else
		echo "not ok - $n sanitizer reports (above)"
	fi
	rm -rf "$d"
	return "$rc"
}

# The lanes: parts that share nothing run side by side; each lane runs its
# own parts one after another. The main lane holds every part that could
# meet another on a fixed name (rdpipe.bats's network namespaces rdpt-*,
# the benchmarks' lock and namespaces); the VM lane mostly waits on QEMU;
# the sanitizer lane builds and runs from its own build directory. Two
# runs of one bats file at once (hostile.bats here and under ASan) are
# safe: each test has its own temp directory, ports come from the kernel
# (tests/lib/port.sh). The plain build's e2e files all stay in the main
# lane: hardening.bats and sync.bats find their far side by its command
# line (pgrep -f "$RDCP --server"), which would find, stop and kill another
# file's (tried in session 28: three watch.bats tests failed so; the
# sanitizer lane's files run build-asan/rdcp, which that does not match).
# RDCP_SUITE_SERIAL=1 runs the lanes one by one;
# RDCP_SUITE_LANES="asan" (say) runs only those lanes, to measure or
# debug one.
lane_main() {
	local t b n LANE=main
	for t in "$BUILD"/tests/test_*; do
		[ -x "$t" ] && part "unit $(basename "$t")" "$t"
	done
	for t in "$BUILD"/tests/fuzz_*; do
		n=$(basename "$t"); n=${n#fuzz_}
		[ -x "$t" ] && part "fuzz replay $n" "$t" "tests/fuzz/corpus/$n"
	done
	for b in tests/e2e/*.bats; do
		[ -f "$b" ] && part "e2e $(basename "$b" .bats)" bats --tap --timing "$b"
	done
	part "benchmark smoke" bench_smoke
}
lane_rdma() {
	local LANE=rdma
	if [ -x tests/rdma/run.sh ]; then
		part "rdma (soft-RoCE VM)" tests/rdma/run.sh
	fi
}
lane_asan() {
	local t n b LANE=asan
	# mpi.bats's network namespaces, not the main lane's (rdmp-*)
	export RDCP_MPI_NETNS=rdmq RDCP_MPI_NET=10.182.0
	if [ "$BUILD" = "$ASAN_BUILD" ]; then
		return 0   # make asan: the whole suite is the sanitizer part
	fi
	part "asan build" asan_build
	[ -x "$ASAN_BUILD/rdcp" ] || return 0   # (its failure is counted)
	for t in "$ASAN_BUILD"/tests/fuzz_*; do
		n=$(basename "$t"); n=${n#fuzz_}
		[ -x "$t" ] && part "asan fuzz replay $n" asan_run 1 "$t" "tests/fuzz/corpus/$n"
	done
	for b in $ASAN_E2E; do
		part "asan e2e $b" asan_run 0 bats --tap --timing "tests/e2e/$b.bats"
	done
}
# Each lane ends with a line of its own ("@lane-done"): a lane that died
# part-way (killed, a shell error) is missing it, and is a failure, not a
# shorter list of passes.
LANES_ASKED=${RDCP_SUITE_LANES:-main rdma asan}
lane_done() {
	"lane_$1"
	printf '@lane-done\t-\t0\t0\t%s\n' "$1"   # (not reached if the lane died)
}
# The soft-RoCE VM runs last, on its own: its tests wait on emulated time
# (TCG), and starved by the other lanes they missed their windows (CI,
# session 19: a fan-out kill that never found its victim in 10 s, a
# terminal prompt past its 20 s).
lanes() {
	local l
	for l in asan main; do
		case " $LANES_ASKED " in *" $l "*) ;; *) continue ;; esac
		if [ -n "${RDCP_SUITE_SERIAL:-}" ]; then
			lane_done "$l"
		else
			lane_done "$l" &
		fi
	done
	wait
	case " $LANES_ASKED " in *" rdma "*) lane_done rdma ;; esac
}
declare -A lane_ok=()
while IFS=$'\t' read -r name log rc took lane; do
	if [ "$name" = "@lane-done" ]; then
		lane_ok[$lane]=1
		continue
	fi
	report "$name" "$log" "$rc" "$took" "$lane"
done < <(lanes)
for l in $LANES_ASKED; do
	if [ -z "${lane_ok[$l]:-}" ]; then
		fail=$((fail + 1)); failed_names+=("lane $l: ended before its last part (died?)")
		echo "== lane $l"
		echo "   not ok - lane $l ended before its last part"
	fi
done

# leak_check: the suite wrote nothing outside its directory. An index file
# in a real cache, written since the suite started, that names a tree of
# this suite (they all live under $SUITE) is ours, whoever else runs rdcp
# meanwhile; in the real temp directory, a name of ours that was not there
# before and still is.
leak_check() {
	local n=0 f
	echo "1..1"
	while IFS= read -r f; do
		grep -aqF "$SUITE" "$f" 2>/dev/null &&
			{ echo "# left in the real index cache: $f"; n=$((n + 1)); }
	done < <(find "$real_cache/rdcp" "$real_tmp/.cache/rdcp" -maxdepth 1 -type f \
	         -newer "$SUITE/start" 2>/dev/null)
	while IFS= read -r f; do
		[ -n "$f" ] && [ -e "$real_tmp/$f" ] &&
			{ echo "# left in $real_tmp: $f"; n=$((n + 1)); }
	done < <(comm -13 <(echo "$tmp_before") <(tmp_names))
	if [ "$n" -eq 0 ]; then
		echo "ok 1 - nothing left outside the suite's temp dirs"
	else
		echo "not ok 1 - the suite left $n files or directories outside its temp dirs (above)"
	fi
}
log=$(mktemp "$LOGS/part-XXXXXX")
t0=$SECONDS
leak_check >"$log" 2>&1
report "hermetic" "$log" "$?" "$((SECONDS - t0))"

echo
echo "Time per part (longest first; the lanes ran side by side), ${SECONDS} s in all:"
printf '%s\n' "${times[@]}" | sort -rn | head -15
echo "Lanes (side by side):$(for l in "${!lane_s[@]}"; do printf ' %s %d s,' "$l" "${lane_s[$l]}"; done) ${SECONDS} s from start to end"
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
