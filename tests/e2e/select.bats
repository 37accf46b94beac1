#!/usr/bin/env bats
# File selection, against rsync: each test runs rsync and rdcp with the same
# flags on the same tree (DST prepared the same) and the two results must
# be the same tree (rsync -anciH --delete prints nothing); locally, and
# through the test's remote shell both ways (push, pull).

load helpers

# a tree with something for every rule below
mk_tree() {
	local s=$1
	mkdir -p "$s"/a/b "$s"/logs "$s"/keep "$s"/node_modules/x "$s"/sub/deep
	echo one >"$s"/a/one.c; echo obj >"$s"/a/one.o; echo b >"$s"/a/b/two.c
	echo log >"$s"/logs/x.log; echo keep >"$s"/keep/k.log; echo junk >"$s"/node_modules/x/j.js
	echo top >"$s"/top.log; echo t >"$s"/top.txt; echo s >"$s"/sub/s.txt
	echo d >"$s"/sub/deep/d.txt; echo tmp >"$s"/sub/deep/d.tmp
	seq 1000 >"$s"/a/big.bin; : >"$s"/a/empty
	ln -s one.c "$s"/a/link
}

# vs_rsync MODE ARGS...: rsync ARGS src/ r/ and rdcp ARGS src/ d/ (in MODE);
# r and d start as copies of $T/dst0 when it exists. Then r == d. With
# SAME_ROOT_TIME set, both roots get one mtime first (rsync leaves DST's
# own untouched with --files-from: it is when the run wrote into it).
vs_rsync() {
	local mode=$1; shift
	rm -rf "$T/r" "$T/d"
	if [ -d "$T/dst0" ]; then cp -a "$T/dst0" "$T/r"; cp -a "$T/dst0" "$T/d"; fi
	(cd "$T" && rsync "$@" "$T/src/" "$T/r/") || { echo "rsync failed"; return 1; }
	(cd "$T" && sync_in "$mode" "$@" "$T/src/" "$T/d/") || { echo "rdcp failed: $?"; return 1; }
	if [ -n "$SAME_ROOT_TIME" ]; then
		[ "$(stat -c %Y "$T/d")" != "$(stat -c %Y "$T/src")" ] || { echo "root time set"; return 1; }
		touch -d '2002-02-02' "$T/r" "$T/d"
	fi
	same "$T/r" "$T/d"
}

@test "--filter: rsync's rules in order with --exclude/--include, clear, negation" {
	mk_tree "$T/src"
	for mode in local push pull; do
		vs_rsync $mode -a --include='keep/***' --filter='- *.log' --exclude='node_modules/' \
			--filter='+ */' --filter='exclude,! *.c'
		[ ! -e "$T/d/top.log" ] && [ -e "$T/d/keep/k.log" ] && [ -e "$T/d/a/one.c" ]
		[ ! -e "$T/d/a/one.o" ]   # '-! *.c': what is not *.c goes (dirs kept by order)
		[ ! -e "$T/d/node_modules" ] && [ -d "$T/d/sub/deep" ] && [ ! -e "$T/d/sub/s.txt" ]
		vs_rsync $mode -a --exclude='*.log' --filter='!' --exclude='/a'
		[ -e "$T/d/top.log" ] && [ ! -e "$T/d/a" ]   # '!' cleared *.log
		vs_rsync $mode -a --filter='- /sub/deep/' --filter='- a/b/**' --filter='- /a/*.o'
		[ -d "$T/d/sub" ] && [ ! -e "$T/d/sub/deep" ] && [ -d "$T/d/a/b" ]
	done
}

@test "-F: a .rsync-filter in a subdirectory (anchored there), -FF hides them (local, push, pull)" {
	mk_tree "$T/src"
	printf -- '- *.txt\n+ keep/\n' >"$T/src/.rsync-filter"
	printf -- '# deeper rules first\n+ s.txt\n- /deep/*.tmp\n' >"$T/src/sub/.rsync-filter"
	for mode in local push pull; do
		vs_rsync $mode -a -F
		[ -e "$T/d/sub/s.txt" ] && [ ! -e "$T/d/top.txt" ] && [ ! -e "$T/d/sub/deep/d.tmp" ]
		[ -e "$T/d/sub/.rsync-filter" ]
		vs_rsync $mode -a -F -F
		[ ! -e "$T/d/sub/.rsync-filter" ] && [ ! -e "$T/d/.rsync-filter" ]
		vs_rsync $mode -a --filter=':n- .rsync-filter'   # no inherit, excludes only
	done
}

@test "--exclude-from/--include-from and merge: comments, blank lines, CRLF, stdin; read by the client" {
	mk_tree "$T/src"
	printf '# comment\n; comment too\n\n*.o\r\n+ keep.log\n/logs\n' >"$T/ex"
	printf 'keep/\nkeep/**\n' >"$T/in"
	printf -- '- *.tmp\n+ keep.log\n- *.log\n' >"$T/merge"
	for mode in local push pull; do
		vs_rsync $mode -a --exclude-from="$T/ex"
		[ ! -e "$T/d/a/one.o" ] && [ ! -e "$T/d/logs" ] && [ -e "$T/d/top.log" ]
		vs_rsync $mode -a --include-from="$T/in" --exclude='*'
		[ -e "$T/d/keep/k.log" ] && [ ! -e "$T/d/a" ]
		vs_rsync $mode -a --filter="merge $T/merge"
		[ ! -e "$T/d/sub/deep/d.tmp" ] && [ ! -e "$T/d/top.log" ]
		rm -rf "$T/r" "$T/d"
		rsync -a --exclude-from=- "$T/src/" "$T/r/" <"$T/ex"
		sync_in $mode -a --exclude-from=- "$T/src/" "$T/d/" <"$T/ex"
		same "$T/r" "$T/d"
	done
}

@test "--delete-excluded: excluded DST files deleted too, protect (P) keeps them" {
	mk_tree "$T/src"
	mk_tree "$T/dst0"; echo extra >"$T/dst0/a/extra.log"; echo mine >"$T/dst0/mine.log"
	find "$T/dst0" ! -type l -exec touch -d '2001-01-01' {} +
	for mode in local push pull; do
		vs_rsync $mode -a --delete --exclude='*.log'
		[ -e "$T/d/mine.log" ] && [ -e "$T/d/a/extra.log" ]   # excluded: kept
		vs_rsync $mode -a --delete --delete-excluded --exclude='*.log' --exclude='node_modules'
		[ ! -e "$T/d/mine.log" ] && [ ! -e "$T/d/logs/x.log" ] && [ ! -e "$T/d/node_modules" ]
		vs_rsync $mode -a --delete --delete-excluded --exclude='*.log' --filter='P mine.log'
		[ -e "$T/d/mine.log" ] && [ ! -e "$T/d/a/extra.log" ]
	done
}

@test "--min-size/--max-size: files out of range are not sent, and not deleted (rsync's units)" {
	mkdir -p "$T/src"
	for n in 0 1000 1023 1024 1025 1536; do head -c $n /dev/zero >"$T/src/f$n"; done
	mkdir -p "$T/dst0"; echo old >"$T/dst0/f1536"; echo stale >"$T/dst0/gone"
	for mode in local push pull; do
		for s in 1K 1K-1 1K+1 1KB 1.5K 1.5 0 1kib; do
			vs_rsync $mode -a --delete --min-size=$s
			vs_rsync $mode -a --delete --max-size=$s
		done
		vs_rsync $mode -a --delete --max-size=1K
		[ "$(cat "$T/d/f1536")" = old ] && [ ! -e "$T/d/f1025" ] && [ -e "$T/d/f1024" ]
		[ ! -e "$T/d/gone" ]
	done
	run "$RDCP" -a --max-size=1.5Q "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [[ "$output" == *"--max-size=1.5Q is invalid"* ]]
	run "$RDCP" -a --min-size=-5 "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [ ! -e "$T/x" ]
}

@test "-u and --ignore-existing: newer or existing DST files left alone" {
	mk_tree "$T/src"
	mkdir -p "$T/dst0/a"
	echo newer >"$T/dst0/a/one.c"; touch -d '+1 hour' "$T/dst0/a/one.c"
	touch -d '-1 hour' "$T/src/a/one.c"
	echo older >"$T/dst0/a/one.o"; touch -d '-1 day' "$T/dst0/a/one.o"
	echo exists >"$T/dst0/top.txt"; mkdir "$T/dst0/a/link"   # a dir where SRC has a link
	touch -d '-2 hours' "$T/dst0/top.txt"
	for mode in local push pull; do
		vs_rsync $mode -a -u
		[ "$(cat "$T/d/a/one.c")" = newer ] && [ "$(cat "$T/d/a/one.o")" = obj ]
		vs_rsync $mode -a --ignore-existing
		[ "$(cat "$T/d/a/one.o")" = older ] && [ "$(cat "$T/d/top.txt")" = exists ]
		[ -d "$T/d/a/link" ] && [ -e "$T/d/a/b/two.c" ]
	done
}

@test "-x: a filesystem mounted inside SRC: its mount point copied empty; -xx leaves it out" {
	[ "$(id -u)" = 0 ] || skip "LOUD SKIP: needs root to mount a tmpfs"
	mk_tree "$T/src"
	mkdir "$T/src/mnt"
	mount -t tmpfs -o size=1m tmpfs "$T/src/mnt" || skip "LOUD SKIP: cannot mount a tmpfs"
	echo inside >"$T/src/mnt/f"; mkdir "$T/src/mnt/d"; chmod 750 "$T/src/mnt"
	for mode in local push pull; do
		vs_rsync $mode -a -x
		[ -d "$T/d/mnt" ] && [ -z "$(ls -A "$T/d/mnt")" ] && [ -e "$T/d/a/one.c" ]
		[ "$(stat -c %a "$T/d/mnt")" = 750 ]   # the mounted root's mode, as rsync
		vs_rsync $mode -a -xx
		[ ! -e "$T/d/mnt" ]
		vs_rsync $mode -a
		[ -e "$T/d/mnt/f" ]
	done
	umount "$T/src/mnt"
}

@test "--files-from: listed paths and their parents, trailing slash, -r explicit (local, push, pull)" {
	mk_tree "$T/src"
	touch -d '2001-01-01' "$T/src"
	printf 'a/b/two.c\n/top.txt\n# not this\nsub/\n../keep/k.log\nlogs\n' >"$T/list"
	export SAME_ROOT_TIME=1
	for mode in local push pull; do
		vs_rsync $mode -a --files-from="$T/list"
		[ -e "$T/d/a/b/two.c" ] && [ ! -e "$T/d/a/one.c" ] && [ -e "$T/d/sub/s.txt" ]
		[ -d "$T/d/sub/deep" ] && [ ! -e "$T/d/sub/deep/d.txt" ] && [ -d "$T/d/logs" ]
		[ ! -e "$T/d/logs/x.log" ] && [ -e "$T/d/keep/k.log" ]
		vs_rsync $mode -a -r --files-from="$T/list"
		[ -e "$T/d/sub/deep/d.txt" ] && [ -e "$T/d/logs/x.log" ]
		vs_rsync $mode -a -r --files-from="$T/list" --exclude='*.tmp'
		[ ! -e "$T/d/sub/deep/d.tmp" ]
		rm -rf "$T/r" "$T/d"
		rsync -a --files-from=- "$T/src/" "$T/r/" <"$T/list"
		sync_in $mode -a --files-from=- "$T/src/" "$T/d/" <"$T/list"
		touch -d '2002-02-02' "$T/r" "$T/d"
		same "$T/r" "$T/d"
	done
	run "$RDCP" -a --delete --files-from="$T/list" "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [[ "$output" == *"--delete with --files-from is not supported"* ]]
}

@test "bad input: a missing --exclude-from (11, as rsync), a bad rule (1, named), a bad .rsync-filter (nothing deleted)" {
	mk_tree "$T/src"
	run "$RDCP" -a --exclude-from="$T/nope" "$T/src/" "$T/x/"
	[ "$status" -eq 11 ] && [[ "$output" == *"failed to open filter file $T/nope: No such file"* ]]
	run rsync -a --exclude-from="$T/nope" "$T/src/" "$T/x/"
	[ "$status" -eq 11 ]
	run "$RDCP" -a --filter='bogus foo' "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [[ "$output" == *"--filter: unknown filter rule: 'bogus foo'"* ]]
	run "$RDCP" -a --filter='-/ foo' "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [[ "$output" == *"the modifier '/' is not supported by rdcp"* ]]
	printf -- '- ok\nnonsense here\n' >"$T/ex"
	run "$RDCP" -a --filter="merge $T/ex" "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [[ "$output" == *"$T/ex line 2: unknown filter rule: 'nonsense here'"* ]]
	run "$RDCP" -a --files-from="$T/nope" "$T/src/" "$T/x/"
	[ "$status" -eq 1 ] && [[ "$output" == *"failed to open files-from file $T/nope"* ]]
	[ ! -e "$T/x" ]
	# a malformed per-directory file in SRC: the run fails, DST loses nothing
	mk_tree "$T/dst"; echo extra >"$T/dst/extra"
	printf -- '- *.o\nwhat is this\n' >"$T/src/sub/.rsync-filter"
	for mode in local push pull; do
		run sync_in $mode -a -F --delete "$T/src/" "$T/dst/"
		[ "$status" -eq 1 ]
		[[ "$output" == *"sub/.rsync-filter line 2: unknown filter rule: 'what is this'"* ]]
		[ -e "$T/dst/extra" ]
	done
}
