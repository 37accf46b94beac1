#!/usr/bin/env bash
# Runs the whole suite: unit tests (cmocka), fuzz corpus replay, end-to-end
# tests (bats) and, when present, the RDMA tests inside the soft-RoCE VM.
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

# run_suite NAME CMD...: run CMD, echo its output, count its TAP lines.
run_suite() {
	local name=$1; shift
	local log; log=$(mktemp)
	echo "== $name"
	local t0=$SECONDS
	"$@" >"$log" 2>&1
	local rc=$?
	local took=$((SECONDS - t0))
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
	echo "   ($name: ${took} s)"
	times+=("$(printf '%5d s  %s' "$took" "$name")")
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] && run_suite "unit $(basename "$t")" "$t"
done
for t in "$BUILD"/tests/fuzz_*; do
	n=$(basename "$t"); n=${n#fuzz_}
	[ -x "$t" ] && run_suite "fuzz replay $n" "$t" "tests/fuzz/corpus/$n"
done
for b in tests/e2e/*.bats; do
	[ -f "$b" ] && run_suite "e2e $(basename "$b" .bats)" bats --tap --timing "$b"
done
# keep benchmarks/ runnable (tiny data; results of these runs are not kept)
BENCH_RESULTS=$(mktemp -d)
run_suite "benchmark smoke" env RDCP_BENCH_RESULTS="$BENCH_RESULTS" tests/bench-smoke.sh
rm -rf "$BENCH_RESULTS"
if [ -x tests/rdma/run.sh ]; then
	run_suite "rdma (soft-RoCE VM)" tests/rdma/run.sh
fi

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
run_suite "hermetic" leak_check

echo
echo "Time per part (longest first), ${SECONDS} s in all:"
printf '%s\n' "${times[@]}" | sort -rn | head -12
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
