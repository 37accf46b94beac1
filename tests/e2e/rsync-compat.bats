#!/usr/bin/env bats
# rsync's options, side by side: each test runs rsync and rdcp with the same
# flags on the same source and the same starting destination, then checks
# that the two destinations agree (`rsync -anciH --delete` between them
# prints nothing) and, where asked, that the itemized lines are the same.
# docs/rsync.md names the test that backs each "same" row.
load helpers

# mk_tree DIR: small and chunked files, dirs, a relative symlink, a hard
# link pair, odd modes, an old mtime, files a filter might take.
mk_tree() {
	local d=$1
	mkdir -p "$d/sub/deep" "$d/empty" "$d/build"
	printf 'alpha\n' >"$d/a.txt"
	printf 'int x;\n' >"$d/sub/x.c"
	printf 'obj' >"$d/sub/x.o"
	printf 'tmp' >"$d/build/t.tmp"
	head -c 300000 /dev/urandom >"$d/sub/deep/big.bin"
	head -c 3000 /dev/urandom >"$d/sub/mid.bin"
	ln -s ../a.txt "$d/sub/link"
	ln "$d/a.txt" "$d/hard"
	chmod 600 "$d/sub/x.c"
	chmod 750 "$d/sub/deep"
	touch -d '2020-01-02 03:04:05' "$d/sub/mid.bin"
}

# stale DIR: what an earlier copy left: a changed file of the same size, an
# extra file and dir, a missing file, a changed mode, an excluded leftover.
mk_stale() {
	local src=$1 d=$2
	cp -a "$src/." "$d/"
	# same size, another second (rsync compares whole seconds, rdcp ns)
	printf 'ALPHA\n' >"$d/a.txt.new" && mv "$d/a.txt.new" "$d/a.txt"
	touch -d '2031-05-06 07:08:09' "$d/a.txt"
	printf 'extra' >"$d/extra"
	mkdir -p "$d/olddir/x" && printf 'o' >"$d/olddir/x/f"
	rm -f "$d/sub/x.o"
	chmod 644 "$d/sub/x.c"
	printf 'left' >"$d/build/old.tmp"
	touch -d '2030-01-01' "$d/sub/mid.bin"
}

# compat START FLAGS...: rsync FLAGS src/ ref/ and rdcp FLAGS src/ got/, both
# from START ("empty" or "stale"); the destinations must agree.
compat() {
	local start=$1; shift
	rm -rf "$T/ref" "$T/got"
	mkdir -p "$T/ref" "$T/got"
	if [ "$start" = stale ]; then   # one stale tree, two identical copies
		rm -rf "$T/stale" && mkdir "$T/stale" && mk_stale "$T/src" "$T/stale"
		cp -a "$T/stale/." "$T/ref/" && cp -a "$T/stale/." "$T/got/"
	fi
	local rc_rsync=0 rc_rdcp=0
	rsync "$@" "$T/src/" "$T/ref/" >"$T/rsync.out" 2>&1 || rc_rsync=$?
	"$RDCP" "$@" "$T/src/" "$T/got/" >"$T/rdcp.out" 2>&1 || rc_rdcp=$?
	echo "rsync $* -> $rc_rsync"; cat "$T/rsync.out"
	echo "rdcp $* -> $rc_rdcp"; cat "$T/rdcp.out"
	[ "$rc_rsync" -eq "$rc_rdcp" ]
	if [ -n "${NOTIMES:-}" ]; then   # without -t, each tool stamps its own time
		local d; d=$(rsync -anciH --delete "$T/ref/" "$T/got/" | grep -v '^\.[fdL]\.\.[tT]\.\.\.\.\.\. ' || true)
		[ -z "$d" ] || { echo "trees differ:"; echo "$d"; return 1; }
	else
		same "$T/ref" "$T/got"
	fi
}

setup_file() { :; }

setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-e2e-XXXXXX")
	export XDG_CACHE_HOME=$T/cache
	mkdir -p "$T/src"
	mk_tree "$T/src"
}

@test "rsync -a, into an empty and a stale destination" {
	compat empty -a
	compat stale -a
}

@test "rsync -rl (no -a): content and links, modes from the source less the umask" {
	NOTIMES=1 compat empty -rl
	NOTIMES=1 compat stale -rl
}

@test "rsync -a --delete" {
	compat stale -a --delete
}

@test "rsync -aH: hard links kept" {
	compat empty -aH
	compat stale -aH --delete
}

@test "rsync -ac: content compared, same-size same-mtime change found" {
	compat stale -ac
}

@test "rsync -a --exclude, --include order" {
	compat stale -a --delete --exclude='*.o' --exclude=/build/
	compat empty -a --include='*/' --include='*.c' --exclude='*'
}

@test "rsync -rlptgoD (the letters of -a) and -W" {
	compat stale -rlptgoD
	compat empty -aW
}

@test "rsync -n changes nothing" {
	compat stale -an --delete
}

@test "rsync: a full directory where SRC has a file gives way only to --delete or --force (23 without)" {
	mk_full_dir() { mkdir -p "$T/stale/a.txt/in"; echo x >"$T/stale/a.txt/in/f"; }
	rm -rf "$T/stale"; mkdir "$T/stale"; mk_full_dir
	full_compat() {
		rm -rf "$T/ref" "$T/got"; mkdir "$T/ref" "$T/got"
		cp -a "$T/stale/." "$T/ref/"; cp -a "$T/stale/." "$T/got/"
		local r1=0 r2=0
		rsync "$@" "$T/src/" "$T/ref/" >"$T/o1" 2>&1 || r1=$?
		"$RDCP" "$@" "$T/src/" "$T/got/" >"$T/o2" 2>&1 || r2=$?
		cat "$T/o1" "$T/o2"; echo "rsync $r1 rdcp $r2"
		[ "$r1" -eq "$r2" ]
		same "$T/ref" "$T/got"
	}
	full_compat -a
	[ -f "$T/got/a.txt/in/f" ]
	grep -q "a.txt: is a non-empty directory here" "$T/o2"
	full_compat -a --force
	[ -f "$T/got/a.txt" ]
	full_compat -a --delete
}

# --- exit codes where rsync has the case: both tools, the same code ---

# both_exit WANT ARGS...: rsync ARGS and rdcp ARGS exit WANT, each
# (with -e, the local-rsh stands for ssh: rsync's far side is rsync)
# (both_exit WANT as_user ARGS...: both run as an ordinary user)
both_exit() {
	local want=$1 user=(); shift
	[ "$1" = as_user ] && { user=(as_user); shift; }
	local r1=0 r2=0
	"${user[@]}" rsync "$@" >"$T/rsync.out" 2>&1 || r1=$?
	"${user[@]}" "$RDCP" --rdcp-path "$RDCP" "$@" >"$T/rdcp.out" 2>&1 || r2=$?
	echo "rsync $* -> $r1"; cat "$T/rsync.out"
	echo "rdcp $* -> $r2"; cat "$T/rdcp.out"
	[ "$r1" -eq "$want" ] && [ "$r2" -eq "$want" ]
}

@test "exit code: a missing SRC is rsync's 23 (local, push, pull), not 3" {
	both_exit 23 -a "$T/nosuch" "$T/d1"
	both_exit 23 -a "$T/nosuch/" "$T/d2"
	both_exit 23 -a -e "$LRSH" "$T/nosuch" "localhost:$T/d3"
	both_exit 23 -a -e "$LRSH" "localhost:$T/nosuch" "$T/d4"
	# --sync, which rsync does not have, the same
	local rc=0
	"$RDCP" --sync "$T/nosuch" "$T/d5" 2>"$T/err" || rc=$?
	[ "$rc" -eq 23 ]
	# --json: one error, which failed names when the client is the sender
	rc=0
	"$RDCP" -a --json "$T/nosuch" "$T/d6" >"$T/j" 2>/dev/null || rc=$?
	[ "$rc" -eq 23 ]
	[ "$(jq -c '[.errors, .failed, .failed_omitted]' "$T/j")" = \
	  "[1,[{\"path\":\"$T/nosuch\",\"reason\":\"No such file or directory\",\"vanished\":false}],0]" ]
	rc=0
	"$RDCP" -a --json -e "$LRSH" --rdcp-path "$RDCP" "localhost:$T/nosuch" "$T/d7" >"$T/j" 2>/dev/null || rc=$?
	[ "$rc" -eq 23 ]
	[ "$(jq -c '[.errors, .failed, .failed_omitted]' "$T/j")" = '[1,[],1]' ]
}

@test "a missing SRC on a push is said once, by the local side: no 'rdcp (remote)' line" {
	local rc=0
	"$RDCP" -a -e "$LRSH" --rdcp-path "$RDCP" "$T/nosuch" "localhost:$T/d" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	grep -qx "rdcp: $T/nosuch: No such file or directory" "$T/err"
	! grep -q 'remote' "$T/err"
	[ "$(wc -l <"$T/err")" -eq 1 ]
}

# as_user CMD...: CMD as an ordinary user (root reads and writes anywhere,
# so a permission test run by root runs its tools as uid 4242)
as_user() {
	if [ "$(id -u)" = 0 ]; then
		setpriv --reuid=4242 --regid=4242 --clear-groups env XDG_CACHE_HOME="$T/ucache" "$@"
	else
		"$@"
	fi
}

@test "exit code: permission denied at DST is rsync's: 3 when DST cannot be looked at, 11 when it cannot be made" {
	chmod 755 "$T"
	chmod -R a+rX "$T/src"
	mkdir -p "$T/ucache" "$T/shut/inside" "$T/ro"
	chmod 777 "$T/ucache"
	chmod 600 "$T/shut"   # DST's parent cannot be searched: stat fails
	chmod 555 "$T/ro"     # DST's parent cannot be written: mkdir fails
	local dst
	for dst in "$T/shut/inside" "$T/shut/inside/" "$T/shut/new"; do
		both_exit 3 as_user -a "$T/src/" "$dst"
		grep -q "$dst: cannot stat destination: Permission denied" "$T/rdcp.out"
	done
	both_exit 11 as_user -a "$T/src/" "$T/ro/x"
	grep -q "$T/ro/x: cannot create: Permission denied" "$T/rdcp.out"
}

@test "-V is --version, as rsync's -V" {
	run "$RDCP" -V
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^rdcp\ [0-9]+\.[0-9]+ ]]
	[ "$output" = "$("$RDCP" --version)" ]
	rsync -V >/dev/null   # rsync takes it too
}
