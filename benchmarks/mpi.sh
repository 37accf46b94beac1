#!/usr/bin/env bash
# Ranked runs (issue 35): `mpirun -np N rdcp --sync -a SRC/ h1:DST ... hN:DST`
# with 1, 2 and 4 ranks, each rank through its own host, against fpsync
# (fpart + rsync) with 4 SSH workers, same data, same links, same run,
# medians. Full copies (DST empty) and no-op re-runs.
#   Hosts: four network namespaces on one bridge (tests/lib/netns.sh); each
#   link shaped with tc tbf to the same rate in both directions (eth0 in the
#   namespace, its veth in the root one), so that N links add bandwidth and
#   the wire, not the two cores, is the limit. They share this machine's
#   filesystem, so every host:DST names one directory (a shared filesystem
#   on the receiving side).
#   rdcp: the ranks run here; rank k's receiver runs in host k (netns-rsh);
#   its data crosses host k's link.
#   fpsync: -n 4 -w 'h1 h2 h3 h4' (one job slot per host), `ssh` a shim that
#   enters the host's namespace; each worker reads SRC (shared) and pushes to
#   an rsync daemon in the root namespace (10.183.0.254): its data crosses
#   its own link. rsync's options: fpsync's default without -v
#   (-lptgoD --numeric-ids; fpsync forbids -a and -r, it recurses itself).
#   Tree: a Hugging Face hub cache: --blobs blobs of --blob-mb MiB, each in
#   its own models--mI (blobs/ and a relative symlink in snapshots/r1), and
#   --files small files (100 B - 8 KB) in directories of 1000.
#   rdcp shares files of 64 MiB and more among the ranks by size (each blob
#   to its own rank), the rest by directory windows: with --blob-mb under
#   64, the blobs go with their directories' windows.
#   Indexes: cleared before every full copy (rdcp pays its hashing, as fpsync
#   has nothing to pay); --warm-index keeps SRC's (scanned once, untimed).
#   fpsync runs twice each rep: as it comes, and with -s 1073741824 (at most
#   1 GiB a job instead of 4, so its blobs spread over the workers); the
#   targets hold rdcp to the faster. --fpsync-opts: more options for both.
#   mpi.sh [--files N] [--blob-mb N] [--blobs N] [--rate-mbit N] [--reps N]
#          [--warm-index] [--fpsync-opts STR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${RDCP_BUILD:-$top/build}
files=200000 blob_mb=1024 blobs=8 rate=400 reps=3 warm=0 fpo=
while [ $# -gt 0 ]; do
	case $1 in
	--files) files=$2; shift ;;
	--blob-mb) blob_mb=$2; shift ;;
	--blobs) blobs=$2; shift ;;
	--rate-mbit) rate=$2; shift ;;
	--reps) reps=$2; shift ;;
	--warm-index) warm=1 ;;
	--fpsync-opts) fpo=$2; shift ;;
	*) echo "usage: $0 [--files N] [--blob-mb N] [--blobs N] [--rate-mbit N] [--reps N]" \
		"[--warm-index] [--fpsync-opts STR]" >&2; exit 1 ;;
	esac
	shift
done
command -v mpirun >/dev/null || { echo "mpi.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
command -v fpsync >/dev/null || { echo "mpi.sh: fpsync not found (fpart)" >&2; exit 1; }
[ -e "$B/rdcp-mpi.so" ] || { echo "mpi.sh: $B/rdcp-mpi.so not built" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-bench-mpi-XXXXXX")
export NETNS_PREFIX=rdmb NETNS_NET=10.183.0
source "$top/tests/lib/netns.sh"
source "$here/lib.sh"
daemon=
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	netns_down
	umount "$W/t" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
nh=4
netns_up "$nh" || { echo "mpi.sh: cannot make network namespaces (root needed)" >&2; exit 1; }
for i in $(seq 1 "$nh"); do
	# eth0: the host's egress (fpsync's data, rdcp's replies); rdmb-vI: its
	# ingress (rdcp's data)
	if ! ip netns exec "rdmb-$i" tc qdisc add dev eth0 root tbf rate "${rate}mbit" \
		burst 256kb latency 100ms ||
		! tc qdisc add dev "rdmb-v$i" root tbf rate "${rate}mbit" burst 256kb latency 100ms; then
		echo "mpi.sh: tc tbf failed" >&2
		exit 1
	fi
done
read -r -a H <<<"$NETNS_HOSTS"   # H[0..3]: the hosts
RSH=$top/tests/lib/netns-rsh
results=${RDCP_BENCH_RESULTS:-$here/results}
mkdir -p "$results" "$W/t"
csv=$results/mpi.csv
echo "case,ranks,rep,seconds" >"$csv"
# SRC + DST (small files take whole pages on tmpfs) + the indexes
tree_mb=$((blobs * blob_mb + files * 8 / 1024 + 16))
mount -t tmpfs -o size=$((2 * tree_mb + 512))m tmpfs "$W/t" ||
	{ echo "mpi.sh: cannot mount a tmpfs" >&2; exit 1; }
export XDG_CACHE_HOME=$W/t/cache RDCP_TEST_SETTLED_S=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none

src=$W/t/src dst=$W/t/dst
echo "mpi.sh: making the tree ($blobs x $blob_mb MiB, $files small files)..." >&2
mkdir -p "$src"
for i in $(seq 1 "$blobs"); do
	name=$(printf 'm%d' "$i" | sha256sum | cut -c1-64)
	mkdir -p "$src/models--m$i/blobs" "$src/models--m$i/snapshots/r1"
	head -c $((blob_mb << 20)) /dev/urandom >"$src/models--m$i/blobs/$name"
	ln -s "../../blobs/$name" "$src/models--m$i/snapshots/r1/model.bin"
done
python3 - "$src" "$files" <<'PY' || { echo "mpi.sh: cannot make the small files" >&2; exit 1; }
import os, random, sys
src, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(35)
pool = os.urandom(1 << 20)
for k in range(n):
    if k % 1000 == 0:   # ten directories of 1000 per dataset
        d = os.path.join(src, "datasets--d%d" % (k // 10000), "snapshots", "r1", "s%d" % (k // 1000))
        os.makedirs(d, exist_ok=True)
    size = rnd.randint(100, 8000)
    off = rnd.randrange(len(pool) - size)
    with open(os.path.join(d, "f%d" % k), "wb") as f:
        f.write(pool[off:off + size])
PY
bytes=$(du -sb --apparent-size "$src" | cut -f1)
nfiles=$(find "$src" | wc -l)

hosts() { local n=$1 i; for i in $(seq 0 $((n - 1))); do echo "${H[$i]}:$dst"; done; }
clear() { rm -rf "$dst" && mkdir -p "$dst"; }
cold() { [ "$warm" = 1 ] || rm -rf "$XDG_CACHE_HOME"; }
timed() { local a b; a=$(now); "$@" || return 1; b=$(now); echo "$b - $a" | bc -l; }
same() { [ -z "$(rsync -anciH --delete "$src/" "$dst/" | tee "$W/diff")" ]; }
# shellcheck disable=SC2046 # hosts: one operand a line
ranked() {
	mpirun --oversubscribe -np "$1" "$B/rdcp" -e "$RSH" --rdcp-path "$B/rdcp" \
		--sync -a --json "$src/" $(hosts "$1") >"$W/rdcp.json" 2>"$W/rdcp.err"
}
fail() {   # what went wrong, with what the tool said
	echo >&2
	echo "mpi.sh: $1" >&2
	[ -s "${2:-/dev/null}" ] && tail -n 30 "$2" >&2
	[ -s "$W/diff" ] && { echo "differences (rsync -anciH --delete, first 20):" >&2; head -20 "$W/diff" >&2; }
	exit 1
}

# fpsync's workers: `ssh [opts] [user@]10.183.0.K CMD...` runs CMD in rdmb-K
mkdir -p "$W/bin" "$W/t/fpshared" "$W/fptmp"
cat >"$W/bin/ssh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in
	-[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
host=${1#*@}
shift
case $host in
"$NETNS_NET".*) exec ip netns exec "$NETNS_PREFIX-${host#"$NETNS_NET".}" /bin/sh -c "$*" ;;
*) echo "ssh (mpi.sh): $host is not a test host" >&2; exit 255 ;;
esac
EOF
chmod +x "$W/bin/ssh"
rport=$(port)
cat >"$W/rsyncd.conf" <<EOF
pid file = $W/rsyncd.pid
[d]
path = $dst
read only = false
use chroot = false
munge symlinks = false
numeric ids = true
uid = root
gid = root
EOF
mkdir -p "$dst"
rsync --daemon --no-detach --config="$W/rsyncd.conf" --address="$NETNS_NET.254" \
	--port="$rport" &
daemon=$!
sleep 0.5
fps() {   # fps [MORE-OPTIONS]
	# shellcheck disable=SC2086 # $fpo, $1: options, split
	PATH=$W/bin:$PATH fpsync -n "$nh" -w "${H[*]}" -d "$W/t/fpshared" -t "$W/fptmp" $fpo ${1:-} \
		-o "-lptgoD --numeric-ids" "$src/" "rsync://$NETNS_NET.254:$rport/d/" \
		>"$W/fpsync.out" 2>&1
}
fps_err() {   # fpsync's worker logs, for a failure
	cat "$W/fpsync.out"
	find "$W/t/fpshared/log" -name '*.stderr' ! -size 0 -exec cat {} + 2>/dev/null | head -30
}

if [ "$warm" = 1 ]; then
	"$B/rdcp" --scan "$src" >/dev/null || fail "rdcp --scan failed"
fi
declare -A T
rdcp_reps() {
	local n s
	for n in 1 2 4; do
		clear; cold
		printf 'rep %d/%d: rdcp, %d rank(s), full copy   \r' "$r" "$reps" "$n" >&2
		s=$(timed ranked "$n") || fail "mpirun -np $n rdcp failed" "$W/rdcp.err"
		same || fail "rdcp with $n ranks: DST differs from SRC" "$W/rdcp.err"
		T[full$n]+="$s "
		[ "$n" = 4 ] && cp "$W/rdcp.json" "$W/full4.json"
		echo "rdcp-full,$n,$r,$s" >>"$csv"
	done
	printf 'rep %d/%d: rdcp, 4 ranks, no-op re-run   \r' "$r" "$reps" >&2
	s=$(timed ranked 4) || fail "mpirun -np 4 rdcp (no-op) failed" "$W/rdcp.err"
	same || fail "rdcp no-op re-run: DST differs from SRC" "$W/rdcp.err"
	T[noop]+="$s "
	echo "rdcp-noop,4,$r,$s" >>"$csv"
}
# fpsync twice: as it comes (jobs of at most 2000 files and 4 GiB), and
# tuned for large files (-s 1 GiB: a blob a job, so the blobs spread over
# the workers); rdcp is held to the faster of the two
fpsync_reps() {
	local s v more
	for v in fp fpt; do
		more=; [ "$v" = fpt ] && more="-s 1073741824"
		clear
		rm -rf "$W/t/fpshared"/* "$W/fptmp"/*
		printf 'rep %d/%d: fpsync -n 4 %s, full copy        \r' "$r" "$reps" "$more" >&2
		s=$(timed fps "$more") || { fps_err >"$W/fps.err"; fail "fpsync failed" "$W/fps.err"; }
		same || fail "fpsync: DST differs from SRC"
		T[${v}full]+="$s "
		echo "$v-full,4,$r,$s" >>"$csv"
		printf 'rep %d/%d: fpsync -n 4 %s, no-op re-run     \r' "$r" "$reps" "$more" >&2
		s=$(timed fps "$more") || { fps_err >"$W/fps.err"; fail "fpsync (no-op) failed" "$W/fps.err"; }
		same || fail "fpsync no-op re-run: DST differs from SRC"
		T[${v}noop]+="$s "
		echo "$v-noop,4,$r,$s" >>"$csv"
	done
}
for r in $(seq 1 "$reps"); do
	if [ $((r % 2)) = 1 ]; then rdcp_reps; fpsync_reps; else fpsync_reps; rdcp_reps; fi
done
echo >&2

mb() { echo "$bytes / 1048576 / $1" | bc -l; }
printf '\nranked runs: %d MiB in %d entries (%d x %d MiB blobs, %d small files), hosts on\n' \
	"$((bytes >> 20))" "$nfiles" "$blobs" "$blob_mb" "$files"
printf 'network namespaces, every link %d Mbit/s each way (tc tbf), %d reps, medians%s:\n' \
	"$rate" "$reps" "$([ "$warm" = 1 ] && echo ", SRC's index warm" || echo ", indexes cold")"
[ "$blob_mb" -ge 64 ] ||
	echo "(blobs under 64 MiB: rdcp sends them with their directories' windows, not by size)"
printf '%-40s %9s %9s %12s\n' case seconds MiB/s "÷ 1 rank"
f1=$(medof "${T[full1]}")
for n in 1 2 4; do
	m=$(medof "${T[full$n]}")
	printf '%-40s %9.2f %9.1f %12s\n' "rdcp, $n rank$([ "$n" = 1 ] || echo s), full copy" "$m" \
		"$(mb "$m")" "$(printf '%.2fx tput' "$(echo "$f1 / $m" | bc -l)")"
done
f4=$(medof "${T[full4]}") no=$(medof "${T[noop]}")
ff=$(medof "${T[fpfull]}") fn=$(medof "${T[fpnoop]}")
tf=$(medof "${T[fptfull]}") tn=$(medof "${T[fptnoop]}")
printf '%-40s %9.2f %9.1f\n' "fpsync -n 4 (4 SSH workers), full copy" "$ff" "$(mb "$ff")"
printf '%-40s %9.2f %9.1f\n' "fpsync -n 4 -s 1GiB, full copy" "$tf" "$(mb "$tf")"
printf '%-40s %9.2f\n' "rdcp, 4 ranks, no-op re-run" "$no"
printf '%-40s %9.2f\n' "fpsync -n 4, no-op re-run" "$fn"
printf '%-40s %9.2f\n' "fpsync -n 4 -s 1GiB, no-op re-run" "$tn"
# the faster fpsync of the two, each way
[ "$(echo "$tf < $ff" | bc -l)" = 1 ] && ff=$tf
[ "$(echo "$tn < $fn" | bc -l)" = 1 ] && fn=$tn
[ -z "$fpo" ] || echo "(fpsync with $fpo)"
printf '(links: %d x %d Mbit/s = %.1f MiB/s at most)\n' "$nh" "$rate" \
	"$(echo "$nh * $rate * 1000000 / 8 / 1048576" | bc -l)"
verdict() { echo "$1" | bc -l | sed 's/1/met/;s/0/NOT met/'; }
x=$(echo "$f1 / $f4" | bc -l)
printf 'target: 4 ranks >= 3.4x one rank'"'"'s throughput: %.2fx (%s)\n' "$x" "$(verdict "$x >= 3.4")"
x=$(echo "$f4 / $ff" | bc -l)
printf 'target: rdcp 4 ranks <= 0.5x the faster fpsync'"'"'s time, full copy: %.2fx (%s)\n' "$x" \
	"$(verdict "$x <= 0.5")"
x=$(echo "$no / $fn" | bc -l)
printf 'target: rdcp <= 0.5x the faster fpsync'"'"'s time, no-op re-run: %.2fx (%s)\n' "$x" "$(verdict "$x <= 0.5")"
python3 - "$W/full4.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("rdcp's 4 ranks, last full copy: " + "; ".join(
    "rank %d %d files %.1f MiB %.1f s" % (r["rank"], r["files"], r["bytes_sent"] / 1048576,
                                           r["seconds"]) for r in d["ranks"]))
PY
echo "raw results: $csv"
