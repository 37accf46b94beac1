#!/usr/bin/env bash
# make check's RDMA part: boot the soft-RoCE VM and run the RDMA tests in it.
# If the VM cannot run them, that is a FAILED test, never a pass or a skip.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${RDCP_BUILD:-$top/build}
out=$(mktemp)
"$here/vm.sh" "$here/guest-tests.sh" "$top" "$build" >"$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -eq 125 ] || ! grep -q '^1\.\.' "$out"; then
	echo "not ok - RDMA tests did not run in the soft-RoCE VM (vm.sh exit $rc, see above)"
	rm -f "$out"
	exit 1
fi
rm -f "$out"
exit "$rc"
