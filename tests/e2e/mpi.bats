#!/usr/bin/env bats
# Ranked runs (issue 35): mpirun -np 4 rdcp --sync SRC/ host1:DST host2:DST,
# on this machine. The hosts are network namespaces (tests/lib/netns.sh,
# rdmp-1 and rdmp-2) reached with tests/lib/netns-rsh; they share this
# machine's filesystem, so their DSTs are one shared directory, as a
# cluster's data movers write one parallel filesystem. Small windows
# (RDCP_TEST_WINDOW) give each rank several. Needs root (namespaces) and
# Open MPI (mpirun, rdcp-mpi.so): a test that cannot run fails.

load helpers

# (RDCP_MPI_NETNS, RDCP_MPI_NET: another set, for the sanitizer lane's run
# beside the main one's, tests/run.sh)
export NETNS_PREFIX=${RDCP_MPI_NETNS:-rdmp} NETNS_NET=${RDCP_MPI_NET:-10.181.0}

setup_file() {
	source "$BATS_TEST_DIRNAME/../lib/netns.sh"
	netns_up 2 || { echo "# could not make network namespaces (root and iproute2 needed)" >&3; return 1; }
}

teardown_file() {
	source "$BATS_TEST_DIRNAME/../lib/netns.sh"
	netns_down
}

setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-e2e-XXXXXX")
	export XDG_CACHE_HOME=$T/cache RDCP_TEST_SETTLED_S=0 RDCP_TEST_WINDOW=40
	# mpirun refuses root unless told; the tests run as root
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	# no fabric here: shared memory and loopback TCP between ranks
	export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
	# and no PCI devices to place ranks near: hwloc's look at them reads
	# pci.ids by realloc, 10 s a rank under ASan (every copy intercepted)
	export HWLOC_COMPONENTS=-pci
	command -v mpirun >/dev/null || { echo "mpirun not installed (openmpi-bin)"; false; }
	[ -e "$(dirname "$RDCP")/rdcp-mpi.so" ] ||
		{ echo "rdcp-mpi.so was not built (libopenmpi-dev)"; false; }
	RSH=$BATS_TEST_DIRNAME/../lib/netns-rsh
	H1=$NETNS_NET.1 H2=$NETNS_NET.2
}

# ranked NP ARGS...: mpirun -np NP rdcp ARGS (hosts through netns-rsh);
# stdout in $T/out, stderr in $T/err, the exit code in $rc
ranked() {
	local np=$1; shift
	rc=0
	RDCP_NODE_CACHES=$T RDCP_NODE_PROG=$RDCP \
		timeout 300 mpirun --oversubscribe -np "$np" "${RANKED_PROG:-$RDCP}" -e "$RSH" \
		--rdcp-path "$RDCP" "$@" >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err" >&2
}

# as_nodes "A B ...": ranked_as runs rank i as if on node i of the list,
# a machine of its own for SRC's index (its own cache directory
# $T/cache-NAME, RDCP_TEST_NODE its name: tests/lib/mpi-node), as the
# data movers of a cluster
as_nodes() {
	export RDCP_NODES=$1
}

# ranked_as NP ARGS...: as ranked, each rank on its node (as_nodes)
ranked_as() {
	RANKED_PROG=$BATS_TEST_DIRNAME/../lib/mpi-node ranked "$@"
}

# ranks_sum FIELD: FIELD of --json's "ranks", added up
ranks_sum() {
	tail -n 1 "$T/out" | jq --arg f "$1" '[.ranks[][$f]] | add'
}

# rank_field N FIELD: FIELD of rank N in --json's "ranks"
rank_field() {
	tail -n 1 "$T/out" | jq -r --argjson n "$1" --arg f "$2" '.ranks[$n][$f]'
}

# each_rank_sent MIN [MAX]: every rank of the last --json run sent at
# least MIN bytes (and at most MAX)
each_rank_sent() {
	local k b
	for k in 0 1 2 3; do
		b=$(rank_field $k bytes_sent)
		echo "rank $k: $b bytes"
		[ "$b" -ge "$1" ] && [ "$b" -le "${2:-$b}" ]
	done
}

@test "mpi: a plain rdcp does not link MPI; rdcp-mpi.so does" {
	! ldd "$RDCP" | grep -q libmpi
	ldd "$(dirname "$RDCP")/rdcp-mpi.so" | grep -q libmpi
	# and a run outside mpirun does not load it
	mkdir -p "$T/s"; echo x >"$T/s/f"
	strace -f -e trace=openat -o "$T/trace" "$RDCP" --sync -a "$T/s/" "$T/d"
	! grep -q "rdcp-mpi.so\|libmpi" "$T/trace"
}

@test "mpi: 4 ranks onto 2 hosts write one DST; one summary; a re-run sends nothing" {
	mk_files "$T/src" 1500
	mkdir -p "$T/src/deep/a/b/c" && echo deep >"$T/src/deep/a/b/c/f"
	ln -s ../d0/f0 "$T/src/deep/link"
	ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	# one JSON object, for the whole run
	[ "$(wc -l <"$T/out")" -eq 1 ]
	[ "$(json_field files_sent <"$T/out")" -eq 1501 ]
	[ "$(json_field files_considered <"$T/out")" -eq \
		"$(find "$T/src" -mindepth 0 | wc -l)" ]
	[ "$(tail -n 1 "$T/out" | jq '.ranks | length')" -eq 4 ]
	local sum=0 k
	for k in 0 1 2 3; do
		[ "$(rank_field $k windows)" -ge 1 ]
		[ "$(rank_field $k files)" -ge 1 ]
		[ "$(rank_field $k exit_code)" -eq 0 ]
		sum=$((sum + $(rank_field $k files)))
	done
	[ "$sum" -eq 1501 ]
	# ranks 0 and 2 wrote through host 1, 1 and 3 through host 2
	[ "$(rank_field 0 dst)" = "$H1:$T/dst" ] && [ "$(rank_field 1 dst)" = "$H2:$T/dst" ]
	[ "$(rank_field 2 dst)" = "$H1:$T/dst" ] && [ "$(rank_field 3 dst)" = "$H2:$T/dst" ]
	# again, with 3 ranks: nothing to send, the index reused
	ranked 3 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 0 ]
	[ "$(json_field meta_updated <"$T/out")" -eq 0 ]
	same "$T/src" "$T/dst"
}

@test "mpi: the big files of one directory are spread over the ranks by size" {
	mkdir -p "$T/src/models--m/blobs" "$T/src/models--m/snapshots/r1" "$T/src/small"
	local i
	for i in 1 2 3 4 5 6 7 8; do
		head -c $((2 + i % 2))M /dev/urandom >"$T/src/models--m/blobs/b$i"
		ln -s "../../blobs/b$i" "$T/src/models--m/snapshots/r1/shard$i"
	done
	mk_files "$T/src/small" 300
	# files of 1 MiB and more count as big here (64 MiB in a real run)
	RDCP_TEST_BIG=1048576 ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	# 20 MiB of blobs: each rank sent two of them (5 MiB), give or take
	each_rank_sent $((4 << 20)) $((7 << 20))
	[ "$(json_field files_sent <"$T/out")" -eq 308 ]
	[ "$(json_field files_created <"$T/out")" -eq "$(find "$T/src" -mindepth 0 | wc -l)" ]
	# a re-run: nothing
	RDCP_TEST_BIG=1048576 ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 0 ]
	[ "$(json_field meta_updated <"$T/out")" -eq 0 ]
}

@test "mpi: --hosts=FILE:DST names one host by two data addresses; each rank uses its own" {
	# host 1 gets a second link, straight to this namespace, on a net of
	# its own
	local x=${NETNS_NET%.*}.$(( ${NETNS_NET##*.} + 100 )) ns=$NETNS_PREFIX-1
	ip link add "$NETNS_PREFIX-x1" type veth peer name eth1 netns "$ns"
	ip addr add "$x.254/24" dev "$NETNS_PREFIX-x1"
	ip link set "$NETNS_PREFIX-x1" up
	ip -n "$ns" addr add "$x.1/24" dev eth1
	ip -n "$ns" link set eth1 up
	mkdir -p "$T/src/a" "$T/src/b"
	head -c 3M /dev/urandom >"$T/src/a/blob"
	head -c 3M /dev/urandom >"$T/src/b/blob"
	printf '# one host, two ways in\n%s %s\n%s %s\n' "$H1" "$H1" "$H1" "$x.1" >"$T/hosts"
	local before; before=$(ip -n "$ns" -s -j link show eth1 | jq '.[0].stats64.rx.bytes')
	RDCP_TEST_BIG=1048576 ranked 2 --sync -a --json --hosts="$T/hosts:$T/dst" "$T/src/"
	local after; after=$(ip -n "$ns" -s -j link show eth1 | jq '.[0].stats64.rx.bytes')
	ip link del "$NETNS_PREFIX-x1"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	[ "$(rank_field 0 dst)" = "$H1:$T/dst" ] && [ "$(rank_field 1 dst)" = "$H1:$T/dst" ]
	# rank 1's blob came in on the second link, rank 0's did not
	echo "second link: $((after - before)) bytes in"
	[ "$((after - before))" -ge $((3 << 20)) ] && [ "$((after - before))" -lt $((5 << 20)) ]
	# a bad line: said once (by rank 0), exit 1, nothing started
	printf '%s %s extra\n' "$H1" "$H1" >"$T/hosts"
	ranked 2 --sync -a --hosts="$T/hosts:$T/dst2" "$T/src/"
	[ "$rc" -eq 1 ]
	[ "$(grep -c "line 1: expected '\[user@\]host \[data-address\]'" "$T/err")" -eq 1 ]
	[ ! -e "$T/dst2" ]
}

@test "mpi: a full directory where SRC has a file gives way in pass 2 (--delete), not before" {
	mk_files "$T/src" 300
	echo file >"$T/src/x"
	mkdir -p "$T/dst/x/inner"
	echo in >"$T/dst/x/inner/f"
	echo extra >"$T/dst/extra"
	ranked 2 --sync -a -i --delete "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	# without --delete it stays, said, as a single run says it (exit 23)
	rm -r "$T/dst/x" && mkdir -p "$T/dst/x/inner" && echo in >"$T/dst/x/inner/f"
	ranked 2 --sync -a "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 23 ]
	grep -q "x: is a non-empty directory here" "$T/err"
}

@test "mpi: DSTs that are not one directory are refused before anything is sent" {
	mk_files "$T/src" 300
	ranked 2 --sync -a "$T/src/" "$H1:$T/dA" "$H2:$T/dB"
	[ "$rc" -eq 3 ]
	grep -q "$H2:$T/dB is not the directory $H1:$T/dA is .*: under mpirun every DST must be one shared tree; to copy the tree onto each host, run rdcp without mpirun (a fan-out)" "$T/err"
	[ "$(grep -c 'is not the directory' "$T/err")" -eq 1 ]
	[ ! -e "$T/dB" ] && [ ! -e "$T/dA" ]
	[ -z "$(find "$T" -maxdepth 1 -name '.rdcp-tmp-*')" ]   # (the mark left no trace)
	# DSTs that exist and differ: the same
	mkdir "$T/dA" "$T/dB"
	ranked 2 --sync -a "$T/src/" "$H1:$T/dA" "$H2:$T/dB"
	[ "$rc" -eq 3 ]
	[ -z "$(ls -A "$T/dA")" ] && [ -z "$(ls -A "$T/dB")" ]
}

@test "mpi: --partial with big files on several ranks in one directory: each its own temp" {
	mkdir -p "$T/src/blobs"
	local i
	for i in 1 2 3 4; do head -c 2M /dev/urandom >"$T/src/blobs/b$i"; done
	mk_files "$T/src/small" 200
	RDCP_TEST_BIG=1048576 ranked 2 --sync -a -P --bwlimit=4M "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
}

@test "mpi: a ranked run keeps other runs from its DST; they say so (exit 7)" {
	mkdir -p "$T/src/a" "$T/src/b" "$T/other"
	head -c 4M /dev/urandom >"$T/src/a/blob"
	head -c 4M /dev/urandom >"$T/src/b/blob"
	(RDCP_TEST_BIG=1048576 timeout 300 mpirun --oversubscribe -np 2 "$RDCP" -e "$RSH" \
		--rdcp-path "$RDCP" --sync -a --bwlimit=1M "$T/src/" "$H1:$T/dst" "$H2:$T/dst" \
		>"$T/out" 2>"$T/err"; echo $? >"$T/rc") &
	local i
	for ((i = 0; i < 100; i++)); do   # its receivers hold DST
		[ "$(pgrep -fc -- "--server")" -ge 2 ] && [ -d "$T/dst/a" ] && break
		sleep 0.1
	done
	sleep 0.5
	run "$RDCP" --sync -a "$T/other/" "$T/dst"   # a writer
	echo "$output"
	[ "$status" -eq 7 ]
	run "$RDCP" --sync -a "$T/dst/" "$T/copy"    # a reader
	echo "$output"
	[ "$status" -eq 7 ]
	[[ $output == *"another rdcp is writing into this tree now"* ]]
	run "$RDCP" --sync -a "$T/other/" "$T/dst/a"   # a writer inside
	[ "$status" -eq 7 ]
	wait
	cat "$T/err"
	[ "$(cat "$T/rc")" -eq 0 ]
	same "$T/src" "$T/dst"
}

@test "mpi: two ranked jobs into one DST at once: the second is kept out (exit 7)" {
	mkdir -p "$T/src/a" "$T/src/b" "$T/src2/c"
	head -c 4M /dev/urandom >"$T/src/a/blob"
	head -c 4M /dev/urandom >"$T/src/b/blob"
	echo other >"$T/src2/c/f"
	mkdir "$T/dst"   # held by the first job's ranks from its start (hold_dst())
	(RDCP_TEST_BIG=1048576 timeout 300 mpirun --oversubscribe -np 2 "$RDCP" -e "$RSH" \
		--rdcp-path "$RDCP" --sync -a --bwlimit=1M "$T/src/" "$H1:$T/dst" "$H2:$T/dst" \
		>"$T/out1" 2>"$T/err1"; echo $? >"$T/rc1") &
	local i
	for ((i = 0; i < 100; i++)); do   # it has begun sending
		[ -d "$T/dst/a" ] && break
		sleep 0.1
	done
	# the same DST, another job: its own token, so it meets the first
	ranked 2 --sync -a "$T/src2/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 7 ]
	grep -q "another rdcp is writing into this tree now, in another mpirun job" "$T/err"
	grep -q "could not hold it for the run (exit 7); nothing was sent" "$T/err"
	[ ! -e "$T/dst/c" ]
	wait
	cat "$T/err1"
	[ "$(cat "$T/rc1")" -eq 0 ]
	same "$T/src" "$T/dst"
	# one job after the other: both land
	ranked 2 --sync -a "$T/src2/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	[ "$(cat "$T/dst/c/f")" = other ]
}

@test "mpi: --watch under mpirun is refused; a program a rank starts is no rank" {
	mkdir -p "$T/src" && echo x >"$T/src/f"
	ranked 2 --sync -a --watch "$T/src/" "$T/dst"
	[ "$rc" -eq 1 ]
	grep -q "run it without mpirun" "$T/err"
	# rdcp started by a shell that mpirun started: a plain run (one summary, no ranks)
	rc=0
	timeout 60 mpirun --oversubscribe -np 1 sh -c '"$1" --sync -a --json "$2" "$3"; exit $?' sh \
		"$RDCP" "$T/src/" "$T/dst" >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ "$(tail -n 1 "$T/out" | jq 'has("ranks")')" = false ]
	# RDCP_MPI=1: a rank all the same (a wrapper script between mpirun and rdcp)
	rm -r "$T/dst"
	timeout 60 mpirun --oversubscribe -np 1 -x RDCP_MPI=1 sh -c '"$1" --sync -a --json "$2" "$3"; exit $?' \
		sh "$RDCP" "$T/src/" "$T/dst" >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ "$(tail -n 1 "$T/out" | jq '.ranks | length')" -eq 1 ]
	same "$T/src" "$T/dst"
}

@test "mpi: --delete deletes once every rank is done, each extra once" {
	mk_files "$T/src" 800
	ranked 4 --sync -a "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	mkdir -p "$T/dst/gone/deeper" "$T/dst/d3/sub"
	touch "$T/dst/gone/deeper/x" "$T/dst/d3/sub/y" "$T/dst/d5/z" "$T/dst/top"
	rm "$T/src/d2/f250"
	ranked 4 --sync -a -i --stats --delete "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	cat "$T/out"
	same "$T/src" "$T/dst"
	# gone/ deeper/ x, d3/sub/ y, d5/z, top, d2/f250: each once
	[ "$(grep -c '^\*deleting' "$T/out")" -eq 8 ]
	[ "$(sort "$T/out" | uniq -d | grep -c '^\*deleting')" -eq 0 ]
	grep -q "^Number of deleted files: 8 (reg: 5, dir: 3)$" "$T/out"
	# the directories above a rank's windows are not named by every rank
	[ "$(grep -c '^\.d\.\.t\.\.\.\.\.\. \./$' "$T/out")" -le 1 ]
}

@test "mpi: an error on one rank means no deletes on any" {
	[ "$(id -u)" -eq 0 ] || { echo "needs root (chattr +i)"; false; }
	mk_files "$T/src" 800
	ranked 4 --sync -a "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	touch "$T/dst/d1/extra" "$T/dst/d7/extra"
	echo new >"$T/src/d4/new"
	chattr +i "$T/dst/d4" || { echo "chattr +i does not work here: this test cannot run"; false; }
	ranked 4 --sync -a --json --delete "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	chattr -i "$T/dst/d4"
	[ "$rc" -eq 23 ]
	grep -q "not deleting: rank [0-3] (on .*) ended with code 23" "$T/err"
	[ -e "$T/dst/d1/extra" ] && [ -e "$T/dst/d7/extra" ]
	[ "$(json_field deleted <"$T/out")" -eq 0 ]
	[ "$(json_field exit_code <"$T/out")" -eq 23 ]
	# --json's "failed" lists every rank's: a new file in each of the 8
	# directories (windows on all 4 ranks), none of them writable
	local d
	for d in 0 1 2 3 4 5 6 7; do echo new >"$T/src/d$d/new"; chattr +i "$T/dst/d$d"; done
	ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	for d in 0 1 2 3 4 5 6 7; do chattr -i "$T/dst/d$d"; done
	[ "$rc" -eq 23 ]
	# (each directory is listed too: its times could not be set)
	tail -n 1 "$T/out" | jq -r '.failed[].path' | grep /new | sort >"$T/failed"
	cat "$T/failed"
	[ "$(printf 'd%d/new\n' 0 1 2 3 4 5 6 7)" = "$(cat "$T/failed")" ]
	[ "$(json_field failed_omitted <"$T/out")" -eq 0 ]
	# mended: the next run lands the file and deletes
	ranked 4 --sync -a --delete "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
}

@test "mpi: a rank killed mid-run fails the run: no deletes, no part-files; the next run finishes" {
	mkdir -p "$T/src"
	for i in 0 1 2 3 4 5 6 7; do
		mkdir "$T/src/b$i"
		head -c 3M /dev/urandom >"$T/src/b$i/blob"
	done
	mkdir -p "$T/dst/b0" && touch "$T/dst/b0/extra"
	rc=0
	(RDCP_TEST_WINDOW=2 timeout 300 mpirun --oversubscribe -np 4 "$RDCP" -e "$RSH" \
		--rdcp-path "$RDCP" --sync -a --delete --bwlimit=1M "$T/src/" "$H1:$T/dst" \
		"$H2:$T/dst" >"$T/out" 2>"$T/err") &
	local job=$! pid="" i
	for ((i = 0; i < 100; i++)); do   # a rank that is sending
		sleep 0.1
		pid=$(pgrep -f -- "^$RDCP -e .*--bwlimit=1M $T/src/" | head -n 1)
		[ -z "$pid" ] || break
	done
	[ -n "$pid" ] || { cat "$T/err"; false; }
	# killed as it sends, not before: once the windows make their
	# directories in DST (the checks before them leave a mark in DST,
	# named as a temp, that the next run removes)
	for ((i = 0; i < 150; i++)); do
		compgen -G "$T/dst/b[1-7]" >/dev/null && break
		sleep 0.1
	done
	sleep 0.5
	kill -9 "$pid"
	wait "$job" || rc=$?
	cat "$T/err"
	[ "$rc" -ne 0 ]
	# nothing deleted, and every file whole or absent
	[ -e "$T/dst/b0/extra" ]
	for i in 0 1 2 3 4 5 6 7; do
		[ ! -e "$T/dst/b$i/blob" ] || cmp "$T/src/b$i/blob" "$T/dst/b$i/blob"
	done
	# no rdcp of that run is left on any host: each receiver sees its
	# control channel end, removes its temps and exits (after mpirun
	# does: wait for them, up to 10 s; the hosts' namespaces hold only
	# this test's processes), and no part-file (looked for again for up
	# to 5 s: a remote shell a dying rank had started may still be on
	# its way into a host)
	for ((i = 0; i < 100; i++)); do
		[ -z "$(ip netns pids "$NETNS_PREFIX-1"; ip netns pids "$NETNS_PREFIX-2")" ] && break
		sleep 0.1
	done
	[ -z "$(ip netns pids "$NETNS_PREFIX-1"; ip netns pids "$NETNS_PREFIX-2")" ]
	! pgrep -f -- "--bwlimit=1M $T/src/"
	local left
	for ((i = 0; i < 50; i++)); do
		left=$(find "$T/dst" -name '.rdcp*' -o -name '*.tmp*')
		[ -z "$left" ] && break
		sleep 0.1
	done
	echo "left in DST: ${left:-nothing}"
	[ -z "$left" ]
	ranked 4 --sync -a --delete "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
}

@test "mpi: a rank that cannot see SRC, or sees another tree there, stops the run before it starts" {
	mk_files "$T/s/src" 300
	# rank 3 in a mount namespace of its own: a tmpfs over $T/s
	rc=0
	timeout 120 mpirun --oversubscribe -np 3 "$RDCP" --sync -a "$T/s/src/" "$T/dst" : \
		-np 1 unshare -m sh -c 'mount -t tmpfs none "$1" && shift && exec "$@"' sh \
		"$T/s" "$RDCP" --sync -a "$T/s/src/" "$T/dst" >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 3 ]
	grep -q "rank 3 (on .*) cannot read SRC $T/s/src/: No such file or directory; every rank must see SRC" "$T/err"
	[ ! -e "$T/dst" ]
	# another tree at that path: an empty one
	rc=0
	timeout 120 mpirun --oversubscribe -np 3 "$RDCP" --sync -a "$T/s/src/" "$T/dst" : \
		-np 1 unshare -m sh -c 'mount -t tmpfs none "$1" && shift && exec "$@"' sh \
		"$T/s/src" "$RDCP" --sync -a "$T/s/src/" "$T/dst" >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 3 ]
	grep -q "rank 3 (on .*) sees another tree at SRC" "$T/err"
	[ ! -e "$T/dst" ]
}

@test "mpi: what cannot be shared runs on rank 0 alone, and says why" {
	mk_files "$T/src" 200
	ln "$T/src/d0/f0" "$T/src/d1/hard"
	ranked 3 --sync -a -H --json "$T/src/" "$H1:$T/dst"
	[ "$rc" -eq 0 ]
	grep -q "under mpirun, -H (a hard-link group crosses directories) is not shared: rank 0 runs this alone, the other ranks wait" "$T/err"
	same "$T/src" "$T/dst"
	[ "$(rank_field 0 files)" -ge 200 ]
	[ "$(rank_field 0 files)" -eq "$(json_field files_sent <"$T/out")" ]
	[ "$(rank_field 1 files)" -eq 0 ] && [ "$(rank_field 2 files)" -eq 0 ]
}

@test "mpi: --ranked is rdcp's own; typed, it is refused" {
	run "$RDCP" --sync --ranked "$T" "$T/x"
	[ "$status" -eq 1 ]
	[[ $output == *"--ranked is rdcp's own option for its far side"* ]]
}

# Not as root, a read-only directory (a Go module cache's 0555) set by its
# parent's window would keep another rank's window from making its
# entries in it: pass 1 gives directories u+wx, a pass 2 their modes
# (without --delete too, without -p too), and -i does not say those
# modes twice.
@test "mpi: not as root, read-only directories: every rank's entries land, the modes end as SRC's" {
	local p s f
	for p in $(seq 1 24); do
		for s in 1 2 3; do
			mkdir -p "$T/src/mod/p$p/s$s/deep"
			for f in 1 2 3; do echo "$p.$s.$f" >"$T/src/mod/p$p/s$s/f$f"; done
			echo d >"$T/src/mod/p$p/s$s/deep/x"
		done
	done
	# and a big file, split among the ranks (below), in a read-only directory
	head -c $((16 << 20)) /dev/urandom >"$T/src/mod/p7/s2/big"
	find "$T/src/mod" -type d -exec chmod 555 {} +
	mkdir -p "$T/u"
	chown -R 4243:4243 "$T/src" "$T/u"
	chmod 755 "$T"   # (mktemp -d made it 700, root's)
	local U=(setpriv --reuid=4243 --regid=4243 --clear-groups env HOME="$T/u"
	         XDG_CACHE_HOME="$T/u/cache" TMPDIR="$T/u" RDCP_TEST_BIG=1048576
	         RDCP_TEST_SPLIT=4194304)
	local opts
	# (-rt: no -p; each window's pass 2 still gives its directories their
	# modes, SRC's less the umask, 022: SRC's here)
	for opts in "-a" "-a --delete" "-rt --delete"; do
		[ ! -d "$T/u/dst" ] || chmod -R u+w "$T/u/dst"
		rm -rf "$T/u/dst"
		rc=0
		"${U[@]}" sh -c 'umask 022; exec "$@"' sh timeout 300 mpirun --oversubscribe -np 4 \
			"$RDCP" --sync -i $opts "$T/src/" "$T/u/dst" >"$T/out" 2>"$T/err" || rc=$?
		cat "$T/err"
		[ "$rc" -eq 0 ]
		same "$T/src" "$T/u/dst"
		[ "$(stat -c %a "$T/u/dst/mod/p7/s2")" = 555 ]
		# made once (by the big file's part runs); its metadata set by its
		# parent's window and its own (each says so), and pass 2's mode
		# for it not said
		[ "$(grep -c '^cd+++++++++ mod/p7/s2/$' "$T/out")" -eq 1 ]
		[ "$(grep -c ' mod/p7/s2/$' "$T/out")" -le 3 ]
	done
	# a re-run changes nothing
	"${U[@]}" timeout 300 mpirun --oversubscribe -np 4 "$RDCP" --sync -a --delete --json \
		"$T/src/" "$T/u/dst" >"$T/out"
	[ "$(json_field files_sent <"$T/out")" -eq 0 ]
	# the big file changed, in a directory DST holds read only: its range's
	# rank writes the temp there, the join renames it in
	printf 'changed' | dd of="$T/src/mod/p7/s2/big" bs=1 seek=$((3 * 4194304)) conv=notrunc \
		2>/dev/null
	rc=0
	"${U[@]}" timeout 300 mpirun --oversubscribe -np 4 "$RDCP" --sync -a --delete --json \
		"$T/src/" "$T/u/dst" >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 1 ]
	same "$T/src" "$T/u/dst"
	chmod -R u+w "$T/u/dst"
}

# A file larger than a rank's share of the big files is split (sync/
# split.c, recv/split.c): each rank sends a range of its chunks into one
# shared temp, which lands once every range is in.
@test "mpi: a file larger than a rank's share goes in ranges, one a rank; it lands once; a changed chunk goes from its range's rank" {
	mkdir -p "$T/src/models--m/blobs" "$T/src/models--m/snapshots/r1"
	# 16 chunks of 4 MiB (the last one short): 4 a rank
	head -c $(((64 << 20) - 1000)) /dev/urandom >"$T/src/models--m/blobs/big"
	ln -s ../../blobs/big "$T/src/models--m/snapshots/r1/model.bin"
	mk_files "$T/src/small" 200
	export RDCP_TEST_BIG=1048576 RDCP_TEST_SPLIT=4194304
	ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	each_rank_sent $(((16 << 20) - 1000))
	[ "$(json_field files_sent <"$T/out")" -eq 201 ]
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
	# a re-run sends nothing
	ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 0 ]
	# chunk 9 changed: in rank 2's range (chunks 8-11); only it sends, and
	# the others take their ranges from DST's old file
	printf 'changed' | dd of="$T/src/models--m/blobs/big" bs=1 seek=$((9 * 4194304 + 100)) \
		conv=notrunc 2>/dev/null
	ranked 4 --sync -a -i --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	local k
	for k in 0 1 3; do [ "$(rank_field $k bytes_sent)" -eq 0 ]; done
	[ "$(rank_field 2 bytes_sent)" -eq 4194304 ]
	[ "$(json_field files_sent <"$T/out")" -eq 1 ]
	# its mode alone changed: set and said once (the join's), no data
	chmod 600 "$T/src/models--m/blobs/big"
	ranked 4 --sync -a -i --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	[ "$(json_field meta_updated <"$T/out")" -eq 1 ]
	[ "$(json_field bytes_sent <"$T/out")" -eq 0 ]
	# no index anywhere: each rank hashes its range (SRC), and nothing goes
	rm -rf "$XDG_CACHE_HOME"
	ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 0 ]
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
}

# A part that fails means no join: the file goes whole in its directory's
# window, and that window removes the temp the parts wrote.
@test "mpi: a split file whose part failed goes whole in its window; no temp stays" {
	mkdir -p "$T/src/d"
	head -c $((32 << 20)) /dev/urandom >"$T/src/d/big"
	echo small >"$T/src/d/small"
	RDCP_TEST_BIG=1048576 RDCP_TEST_SPLIT=4194304 RDCP_TEST_SPLIT_FAIL=1 \
		ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 23 ]
	grep -q "split files: rank 1's parts ended with code 23; each goes whole in its directory's window" "$T/err"
	same "$T/src" "$T/dst"
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
}

# A file written as the ranks look at it is not split: its window sends
# it as a single run would (what was scanned lands, exit 0).
@test "mpi: a split file that grows during the run is sent whole by its window, its scanned part" {
	mkdir -p "$T/src/d"
	head -c $((32 << 20)) /dev/urandom >"$T/src/d/rec"
	python3 - "$T/src/d/rec" "$T/stop" <<-'PY' &
	import os, sys, time
	end = time.monotonic() + 60
	with open(sys.argv[1], "ab", buffering=0) as f:
	    while time.monotonic() < end and not os.path.exists(sys.argv[2]):
	        f.write(os.urandom(4096))
	        time.sleep(0.001)
	PY
	local wr=$!
	sleep 0.3
	RDCP_TEST_BIG=1048576 RDCP_TEST_SPLIT=4194304 \
		ranked 4 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	touch "$T/stop"
	wait "$wr"
	[ "$rc" -eq 0 ]
	local n
	n=$(stat -c %s "$T/dst/d/rec")
	[ "$n" -ge $((32 << 20)) ]
	cmp -n "$n" "$T/src/d/rec" "$T/dst/d/rec"
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
}

# One logical index (issue 35): each node keeps its own index of SRC,
# each directory has a home node by its path; a window scanned on another
# node takes its rows from the home, and gives them back after. Files of
# 100 kB: the scan hashes them (64 KiB and more) when no index has them.
@test "mpi: one index over the nodes: a window scanned on another node reads no file its home knows" {
	local i j total=$((12 * 5 * 100000))
	for i in $(seq 1 12); do
		mkdir -p "$T/src/d$i"
		for j in 1 2 3 4 5; do head -c 100000 /dev/urandom >"$T/src/d$i/f$j"; done
	done
	set -- --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	# 2 ranks on nodes A and B: every file read once
	as_nodes "A B"
	ranked_as 2 "$@"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	[ "$(ranks_sum hashed_bytes)" -eq "$total" ]
	# the nodes swapped: each window is scanned on the other node
	as_nodes "B A"
	ranked_as 2 "$@"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 0 ]
	echo "read: $(ranks_sum hashed_bytes), rows in: $(ranks_sum index_rows_in)"
	[ "$(ranks_sum hashed_bytes)" -eq 0 ]
	[ "$(ranks_sum index_rows_in)" -gt 0 ]
	# 3 ranks, other windows: nothing read
	as_nodes "A B A"
	ranked_as 3 "$@"
	[ "$rc" -eq 0 ]
	[ "$(ranks_sum hashed_bytes)" -eq 0 ]
	# node C joins (its index empty): the directories it is now home to
	# come from their homes before; nothing read
	as_nodes "C B A C"
	ranked_as 4 "$@"
	[ "$rc" -eq 0 ]
	echo "read: $(ranks_sum hashed_bytes)"
	[ "$(ranks_sum hashed_bytes)" -eq 0 ]
	# one file changed: it alone is read, once
	settle
	head -c 100000 /dev/urandom >"$T/src/d7/f3"
	as_nodes "B A C"
	ranked_as 3 "$@"
	[ "$rc" -eq 0 ]
	[ "$(json_field files_sent <"$T/out")" -eq 1 ]
	[ "$(ranks_sum hashed_bytes)" -eq 100000 ]
	same "$T/src" "$T/dst"
	# --no-index: no index, and no rows from another node's: all read
	as_nodes "A B"
	ranked_as 2 --sync -a --json --no-index "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	[ "$(ranks_sum hashed_bytes)" -eq "$total" ]
	[ "$(ranks_sum index_rows_in)" -eq 0 ]
}

# A big file goes from the rank it is given to, and its directory's
# window, on another node, looks at it after: the rows go with it.
@test "mpi: one index over the nodes: a big file's rows go to its directory's window; each file is read once" {
	local i
	mkdir -p "$T/src/blobs"
	for i in 1 2 3 4; do head -c $((2 << 20)) /dev/urandom >"$T/src/blobs/b$i"; done
	mk_files "$T/src/blobs" 20
	as_nodes "A B"
	RDCP_TEST_BIG=1048576 ranked_as 2 --sync -a --json "$T/src/" "$H1:$T/dst" "$H2:$T/dst"
	[ "$rc" -eq 0 ]
	same "$T/src" "$T/dst"
	# two blobs a rank; one rank's window scans their directory after
	echo "sent: $(rank_field 0 bytes_sent) and $(rank_field 1 bytes_sent);" \
		"read: $(ranks_sum hashed_bytes), rows in: $(ranks_sum index_rows_in)"
	[ "$(ranks_sum hashed_bytes)" -eq $((8 << 20)) ]
	[ "$(ranks_sum index_rows_in)" -eq 2 ]
}
