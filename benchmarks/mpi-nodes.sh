#!/usr/bin/env bash
# One index over the nodes (issue 35; docs/sync.md, "One index over the
# nodes"): what a re-run costs when the ranks' windows land on other nodes
# than last time, with the index's shards, against the same run with no
# rows for the moved windows (what each node's own index gave before the
# shards: every moved window read again), and what the shards cost when
# nothing moved.
#   Nodes: four ranks on this machine, each given a node name and a cache
#   directory of its own per name (RDCP_TEST_NODE, XDG_CACHE_HOME), as
#   two data movers with two ranks each. DST is local (one directory).
#   Tree: --dirs directories of --per files of --kb KiB (random data).
#   Each case: a full copy as "A B A B" (untimed), then, caches dropped
#   (SRC is read from disk, as from a parallel filesystem), the timed run:
#     moved, shards     "B A B A": every window on the other node
#     moved, no rows    the same, both nodes' indexes cleared first
#     same nodes        "A B A B" again: the digests asked, no rows move
#     one node          "A A A A" after "A A A A": nothing asked
#   Medians of --reps, alternated; the bytes the scans read (hashed_bytes).
#   mpi-nodes.sh [--dirs N] [--per N] [--kb N] [--reps N]
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${RDCP_BUILD:-$top/build}
dirs=40 per=100 kb=256 reps=3
while [ $# -gt 0 ]; do
	case $1 in
	--dirs) dirs=$2; shift ;;
	--per) per=$2; shift ;;
	--kb) kb=$2; shift ;;
	--reps) reps=$2; shift ;;
	*) echo "usage: $0 [--dirs N] [--per N] [--kb N] [--reps N]" >&2; exit 1 ;;
	esac
	shift
done
command -v mpirun >/dev/null || { echo "mpi-nodes.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
[ -e "$B/rdcp-mpi.so" ] || { echo "mpi-nodes.sh: $B/rdcp-mpi.so not built" >&2; exit 1; }
source "$here/lib.sh"
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-nodes-XXXXXX")
pr=/sys/module/page_reporting/parameters
held=()
cleanup() {
	local kv
	for kv in "${held[@]}"; do echo "${kv#*=}" >"$pr/${kv%%=*}" 2>/dev/null; done
	rm -rf "$W"
}
trap cleanup EXIT
# hold the guest's free-page reporting (../shared/notes/measuring.md)
for k in min_free_ms max_waiting_mib; do
	[ -w "$pr/$k" ] && held+=("$k=$(cat "$pr/$k")")
done
[ -w "$pr/min_free_ms" ] && echo 60000 >"$pr/min_free_ms"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
	RDCP_TEST_SETTLED_S=0
src=$W/src dst=$W/dst
printf 'making %d x %d files of %d KiB\n' "$dirs" "$per" "$kb" >&2
for d in $(seq 1 "$dirs"); do
	mkdir -p "$src/d$d"
	for f in $(seq 1 "$per"); do
		head -c $((kb << 10)) /dev/urandom >"$src/d$d/f$f"
	done
done
bytes=$((dirs * per * kb * 1024))
# run NODES: mpirun -np 4 as those nodes; the JSON in $W/out
run() {
	RDCP_NODES=$1 RDCP_NODE_CACHES=$W RDCP_NODE_PROG=$B/rdcp timeout 1800 \
		mpirun --oversubscribe -np 4 "$top/tests/lib/mpi-node" --sync -a \
		--json "$src/" "$dst" >"$W/out" 2>"$W/err" ||
		{ echo "mpi-nodes.sh: the run as '$1' failed:" >&2; cat "$W/err" >&2; exit 1; }
}
read_bytes() { tail -n 1 "$W/out" | jq '[.ranks[].hashed_bytes] | add'; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
declare -A T R
one() {   # one CASE: prepare, then the timed run
	local c=$1 first=$2 then=$3 s a
	rm -rf "$dst" "$W"/cache-*
	run "$first"
	[ "$c" = cold ] && rm -rf "$W"/cache-*
	drop
	a=$(now)
	run "$then"
	s=$(echo "$(now) - $a" | bc -l)
	T[$c]+="$s "
	R[$c]+="$(read_bytes) "
}
cases="moved cold same one"
for r in $(seq 1 "$reps"); do
	order=$cases
	[ $((r % 2)) = 0 ] && order="one same cold moved"
	for c in $order; do
		printf 'rep %d/%d: %s      \r' "$r" "$reps" "$c" >&2
		case $c in
		moved) one moved "A B A B" "B A B A" ;;
		cold) one cold "A B A B" "B A B A" ;;
		same) one same "A B A B" "A B A B" ;;
		one) one one "A A A A" "A A A A" ;;
		esac
	done
done
echo >&2
printf '%d files of %d KiB (%d MiB), 4 ranks, SRC read cold, %d reps, medians:\n' \
	"$((dirs * per))" "$kb" "$((bytes >> 20))" "$reps"
printf '%-46s %9s %9s %9s %12s\n' case seconds min max "MiB read"
row() {
	local v=$(tr ' ' '\n' <<<"${T[$1]}" | grep . | sort -g)
	printf '%-46s %9.2f %9.2f %9.2f %12.1f\n' "$2" "$(medof "${T[$1]}")" \
		"$(head -n 1 <<<"$v")" "$(tail -n 1 <<<"$v")" \
		"$(echo "$(medof "${R[$1]}") / 1048576" | bc -l)"
}
row moved "moved to the other node, with the shards"
row cold "moved to the other node, no rows (as before)"
row same "same nodes (digests asked, no rows moved)"
row one "one node (nothing asked)"
printf 'moved with shards / without: %.2fx the time\n' \
	"$(echo "$(medof "${T[moved]}") / $(medof "${T[cold]}")" | bc -l)"
printf 'same nodes / one node: %.2fx the time\n' \
	"$(echo "$(medof "${T[same]}") / $(medof "${T[one]}")" | bc -l)"
