# Shared by the bats files: binaries from the build, a private scratch dir
# per test, and a private index cache so tests never touch $HOME.
RDCP=${RDCP_BUILD:-$BATS_TEST_DIRNAME/../../build}/rdcp

setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-e2e-XXXXXX")
	export XDG_CACHE_HOME=$T/cache
	# files made a moment ago count as settled (index/walk.c): the scans
	# leave small files unread, as they do those of a real tree
	export RDCP_TEST_SETTLED_S=0
}

teardown() {
	# a test that mounted something under $T (a small disk) and failed
	awk -v t="$T/" 'index($2, t) == 1 { print $2 }' /proc/mounts | sort -r |
		xargs -r -n1 umount -l
	rm -rf "$T"
}

# mk_files DIR N: N small files spread over N/100+1 directories.
mk_files() {
	local dir=$1 n=$2 i
	# one mkdir per directory, not per file: a fork costs ~15 ms on the
	# test machines, and 3000 of them were most of a test's minute
	for ((i = 0; i < n; i += 100)); do echo "$dir/d$((i / 100))"; done | xargs -r mkdir -p
	for ((i = 0; i < n; i++)); do
		printf 'file %d\n' "$i" >"$dir/d$((i / 100))/f$i"
	done
}

# json_field NAME: one field of the last line on stdin, a --json summary
json_field() {
	tail -n 1 | jq -r --arg k "$1" 'if has($k) then .[$k] else error("no field \($k)") end'
}

# settle: step past the filesystem clock tick (see docs/index.md, racy files)
settle() { sleep 0.05; }

# flip FILE OFFSET: invert one byte. Always a change: writing a fixed byte
# over random data leaves it as it was once in 256 runs.
flip() {
	local b; b=$(od -An -tu1 -j "$2" -N1 "$1" 2>/dev/null | tr -d ' ')
	[ -n "$b" ] || { echo "flip: $1 has no byte at $2" >&2; return 1; }
	printf "\\$(printf %03o $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# Ports: never a random one (another test run may hold it). A receiver
# listens on port 0 and says which port the kernel gave it; free_port
# (tests/lib/port.sh) is for a port that must be known before anything
# listens on it.
source "$BATS_TEST_DIRNAME/../lib/port.sh"
# recv_port ERRFILE: the port of an rdrecv started with PORT 0 and its
# stderr in ERRFILE, once it says it listens (10 s; else say why, fail)
recv_port() {
	local i p
	for ((i = 0; i < 200; i++)); do
		p=$(sed -n 's/^rdrecv: listening on port \([0-9]*\)$/\1/p' "$1" 2>/dev/null)
		[ -n "$p" ] && { echo "$p"; return 0; }
		sleep 0.05
	done
	echo "rdrecv did not say which port it listens on:" >&2
	cat "$1" >&2
	return 1
}

# Shared by the sync tests.
LRSH=$BATS_TEST_DIRNAME/local-rsh

# same A B: identical content, perms, times, links, owners, hard links
same() {
	local d; d=$(rsync -anciH --delete "$1/" "$2/")
	if [ -n "$d" ]; then echo "trees differ:"; echo "$d"; return 1; fi
}

# each mode: local, push (local -> "remote"), pull ("remote" -> local)
sync_in() {   # sync_in MODE ARGS... SRC DST
	local mode=$1; shift
	local n=$#; local src=${@:n-1:1} dst=${@:n:1}
	local args=("${@:1:n-2}")
	case $mode in
	local) "$RDCP" "${args[@]}" "$src" "$dst" ;;
	push) "$RDCP" -e "$LRSH" --rdcp-path "$RDCP" "${args[@]}" "$src" "localhost:$dst" ;;
	pull) "$RDCP" -e "$LRSH" --rdcp-path "$RDCP" "${args[@]}" "localhost:$src" "$dst" ;;
	esac
}
