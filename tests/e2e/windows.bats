#!/usr/bin/env bats
# Windows (sync/windows.c): a tree larger than a window goes in rounds of
# whole directories, each one level deep, over the one login. The tests
# make the window small (RDCP_TEST_WINDOW entries) so a tree of a few
# hundred entries takes several.
load helpers

# tree DIR: 4 x 3 directories of 6 files, a file at each level, a symlink
tree() {
	local a b i
	for a in 0 1 2 3; do
		for b in 0 1 2; do
			mkdir -p "$1/a$a/b$b"
			for i in 1 2 3 4 5 6; do echo "$a $b $i" >"$1/a$a/b$b/f$i"; done
		done
		echo "top of a$a" >"$1/a$a/top"
	done
	echo root >"$1/rootfile"
	ln -s a0/top "$1/link"
}

windows_whole() {
	local mode=$1
	tree "$T/src"
	RDCP_TEST_WINDOW=25 run sync_in "$mode" -a -vv --stats "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	same "$T/src" "$T/dst"
	# several windows, each said with -vv (the first is the run's own)
	[ "$(grep -c '^window [0-9]*: ' <<<"$output")" -ge 3 ]
	# each entry counted once, as a run without windows counts them
	grep -q '^Number of files: 95 (reg: 77, dir: 17, link: 1)' <<<"$output"
	# a re-run sends nothing and says nothing
	RDCP_TEST_WINDOW=25 run sync_in "$mode" -a -i "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "windows: a tree larger than a window lands whole, in several, counted once; a re-run sends nothing (local)" {
	windows_whole local
}
@test "windows: a tree larger than a window lands whole, in several, counted once; a re-run sends nothing (push)" {
	windows_whole push
}

windows_delete() {
	local mode=$1
	tree "$T/src"
	RDCP_TEST_WINDOW=25 sync_in "$mode" -a "$T/src/" "$T/dst"
	# gone from SRC at each depth, with what is below; more in DST only
	rm -rf "$T/src/a1/b2" "$T/src/a3" "$T/src/a0/b0/f3"
	mkdir -p "$T/dst/a2/extra/deep/er" "$T/dst/a0/b1/keepme"
	echo x >"$T/dst/a2/extra/deep/er/y"
	echo z >"$T/dst/a0/b1/zz"
	echo p >"$T/dst/a0/b1/keepme/protected"
	echo n >"$T/src/a2/b0/new"
	# -n first: says all of it, changes nothing
	RDCP_TEST_WINDOW=25 run sync_in "$mode" -a --delete -n -i -f 'P keepme/***' "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -qx '\*deleting   a2/extra/deep/er/y' <<<"$output"
	grep -qx '\*deleting   a3/b1/f4' <<<"$output"
	[ -e "$T/dst/a3/b1/f4" ]
	RDCP_TEST_WINDOW=25 run sync_in "$mode" -a --delete -i -f 'P keepme/***' "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	for p in a2/extra/deep/er/y a2/extra/deep/er/ a2/extra/ a3/b1/f4 a3/ a1/b2/ a0/b1/zz \
	         a0/b0/f3; do
		grep -qx "\*deleting   $p" <<<"$output"
	done
	! grep -q keepme <<<"$output"
	[ "$(cat "$T/dst/a0/b1/keepme/protected")" = p ]   # protected: kept
	rm -r "$T/dst/a0/b1/keepme"
	touch -r "$T/src/a0/b1" "$T/dst/a0/b1"   # (its mtime as the run left it)
	same "$T/src" "$T/dst"
}

@test "windows: --delete removes what is gone at every depth, with all below it; -n says it first; protected stays (local)" {
	windows_delete local
}
@test "windows: --delete removes what is gone at every depth, with all below it; -n says it first; protected stays (push)" {
	windows_delete push
}

@test "windows: a directory of more entries than a window is one window; -vv shows it" {
	mkdir -p "$T/src/flat" "$T/src/other"
	for i in $(seq 60); do echo "$i" >"$T/src/flat/f$i"; done
	echo o >"$T/src/other/o"
	RDCP_TEST_WINDOW=10 run "$RDCP" -a -vv "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^window [0-9]*: 1 directories, 61 entries' <<<"$output"
	same "$T/src" "$T/dst"
}

@test "windows: excluded directories are neither entered nor sent; --delete leaves them in DST" {
	tree "$T/src"
	mkdir -p "$T/dst/a1/b0"
	echo mine >"$T/dst/a1/b0/f1"
	RDCP_TEST_WINDOW=20 run "$RDCP" -a --delete -i --exclude b0/ "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	! grep -q 'b0/' <<<"$output"
	[ ! -e "$T/dst/a0/b0" ]
	[ "$(cat "$T/dst/a1/b0/f1")" = mine ]
	[ -e "$T/dst/a0/b1/f6" ]
}

@test "windows: -H copies in one round (a hard-link group crosses directories): links kept" {
	tree "$T/src"
	ln "$T/src/a0/b0/f1" "$T/src/a3/b2/hard"
	RDCP_TEST_WINDOW=20 run "$RDCP" -a -H -vv "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	! grep -q '^window ' <<<"$output"
	[ "$(stat -c %i "$T/dst/a0/b0/f1")" = "$(stat -c %i "$T/dst/a3/b2/hard")" ]
	same "$T/src" "$T/dst"
}

@test "windows: --json adds up the windows: files, bytes, deleted" {
	tree "$T/src"
	run env RDCP_TEST_WINDOW=25 "$RDCP" -a --json "$T/src/" "$T/dst"
	[ "$status" -eq 0 ]
	[ "$(json_field files_sent <<<"$output")" -eq 77 ]
	[ "$(json_field bytes_sent <<<"$output")" -eq "$(cat "$T"/src/a*/b*/f* "$T"/src/a*/top "$T/src/rootfile" | wc -c)" ]
	rm -rf "$T/src/a2"
	run env RDCP_TEST_WINDOW=25 "$RDCP" -a --delete --json "$T/src/" "$T/dst"
	[ "$status" -eq 0 ]
	[ "$(json_field deleted <<<"$output")" -eq 23 ]
	same "$T/src" "$T/dst"
}

@test "windows: a file rewritten all through its window goes again in rounds of its own, exit 0" {
	tree "$T/src"
	head -c $((6 << 20)) /dev/urandom >"$T/src/a0/b1/big"
	# a writer rewrites big in place for 5 s, as a busy file is: its window
	# (an early one) reads it changing, and so do the rounds after it;
	# the windows after those go on as windows
	( end=$((SECONDS + 5)); while [ "$SECONDS" -lt "$end" ]; do
		head -c $((6 << 20)) /dev/urandom |
			dd of="$T/src/a0/b1/big" conv=notrunc status=none; done ) &
	local w=$!
	sleep 0.3
	RDCP_TEST_WINDOW=25 run "$RDCP" -a --delete -vv "$T/src/" "$T/dst"
	wait "$w"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^window ' <<<"$output"
	grep -q 'changed as they were read: sending them again' <<<"$output"
	# a window after the rounds: a3/b2's (the last) landed
	sed -n '/changed as they were read/,$p' <<<"$output" | grep -q '^a3/b2/f6$'
	cmp "$T/src/a3/b2/f6" "$T/dst/a3/b2/f6"
	[ "$(stat -c %s "$T/dst/a0/b1/big")" -eq $((6 << 20)) ]
	# at rest, the next run makes DST whole
	RDCP_TEST_WINDOW=25 "$RDCP" -a --delete "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "windows: the delete trap refuses once, before anything changes, and no window follows (exit 3)" {
	tree "$T/src"
	mkdir -p "$T/dst"
	echo precious >"$T/dst/precious"
	RDCP_TEST_WINDOW=25 run "$RDCP" --sync --delete "$T/src" "$T/dst"
	echo "$output"
	[ "$status" -eq 3 ]
	[ "$(grep -c 'refusing --sync --delete' <<<"$output")" -eq 1 ]
	[ "$(ls "$T/dst")" = precious ]
}

@test "windows: attack: a directory renamed away before a window's scan and back after it is not deleted (24)" {
	mkdir -p "$T/src/dirA" "$T/src/keep"
	for i in 1 2 3; do echo "a$i" >"$T/src/dirA/f$i"; done
	for i in 1 2 3 4 5 6; do echo "k$i" >"$T/src/keep/k$i"; done
	RDCP_TEST_WINDOW=7 "$RDCP" --sync "$T/src/" "$T/dst"
	mv "$T/src/dirA" "$T/src/dirZ"
	echo new >"$T/src/newtop"   # the first window has data: its sender pauses
	RDCP_TEST_WINDOW=7 RDCP_TEST_PAUSE=$T/pause "$RDCP" --sync --delete -vv "$T/src/" \
		"$T/dst" >"$T/out" 2>"$T/err" &
	local pid=$! rc=0
	for _ in $(seq 400); do [ -e "$T/pause" ] && break; sleep 0.025; done
	[ -e "$T/pause" ]
	mv "$T/src/dirZ" "$T/src/dirA"   # back, after the first window's scan
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/out" "$T/err"
	# dirZ, listed, is gone by its own window: vanished (24), and that
	# window deletes nothing; DST's dirA, which the first window's
	# receiver would have deleted, is in SRC again: kept
	[ "$rc" -eq 24 ]
	grep -q '^window ' "$T/out"
	grep -q "dirZ: vanished since SRC's directories were listed" "$T/err"
	for i in 1 2 3; do [ "$(cat "$T/dst/dirA/f$i")" = "a$i" ]; done
	! grep -q 'deleting.*dirA' "$T/out"
	# at rest, the next run completes the mirror
	RDCP_TEST_WINDOW=7 "$RDCP" --sync --delete "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "windows: --windows is rdcp's own, for its far side: typed, it is refused (exit 1)" {
	mkdir -p "$T/src"
	run "$RDCP" --windows -a "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--windows is rdcp's own option for its far side; it is not typed"* ]]
	[ ! -e "$T/dst" ]
}

@test "windows: a window's directory moved away before its window: vanished (24), that window deletes nothing" {
	mkdir -p "$T/src/aa" "$T/src/dirA"
	for i in 1 2 3; do echo "a$i" >"$T/src/aa/f$i"; echo "d$i" >"$T/src/dirA/f$i"; done
	RDCP_TEST_WINDOW=7 "$RDCP" -a "$T/src/" "$T/dst"
	echo changed >"$T/src/aa/f1"   # the first window has data: its sender pauses
	RDCP_TEST_WINDOW=7 RDCP_TEST_PAUSE=$T/pause "$RDCP" -a --delete -vv "$T/src/" "$T/dst" \
		>"$T/out" 2>"$T/err" &
	local pid=$! rc=0
	for _ in $(seq 400); do [ -e "$T/pause" ] && break; sleep 0.025; done
	[ -e "$T/pause" ]
	mv "$T/src/dirA" "$T/src/dirZ"   # after the listing, before dirA's window
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/out" "$T/err"
	[ "$rc" -eq 24 ]
	grep -q "dirA: vanished since SRC's directories were listed" "$T/err"
	for i in 1 2 3; do [ "$(cat "$T/dst/dirA/f$i")" = "d$i" ]; done
	RDCP_TEST_WINDOW=7 "$RDCP" -a --delete "$T/src/" "$T/dst"
	same "$T/src" "$T/dst"
}

@test "windows: not as root, a read-only directory takes its entries in its own window; its mode stays" {
	mkdir -p "$T/src/aa" "$T/src/ro" "$T/u"
	for i in 1 2 3; do echo "a$i" >"$T/src/aa/f$i"; echo "r$i" >"$T/src/ro/f$i"; done
	chmod 555 "$T/src/ro"
	chown -R 4243:4243 "$T/src" "$T/u"
	chmod 755 "$T"   # (mktemp -d made it 700, root's)
	local U=(setpriv --reuid=4243 --regid=4243 --clear-groups env XDG_CACHE_HOME="$T/u/cache"
	         RDCP_TEST_WINDOW=7)
	run "${U[@]}" "$RDCP" -a -vv "$T/src/" "$T/u/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q '^window ' <<<"$output"
	[ "$(stat -c %a "$T/u/dst/ro")" = 555 ]
	# a file added later lands in it too, and the mode stays
	chmod u+w "$T/src/ro"; echo r4 >"$T/src/ro/f4"; chown 4243:4243 "$T/src/ro/f4"
	chmod 555 "$T/src/ro"
	run "${U[@]}" "$RDCP" -a "$T/src/" "$T/u/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(cat "$T/u/dst/ro/f4")" = r4 ]
	[ "$(stat -c %a "$T/u/dst/ro")" = 555 ]
	same "$T/src" "$T/u/dst"
}

# A directory is an entry of its parent's window and the top of its own:
# the parent's window makes it, sets its metadata and says so (or says why
# it could not); its own window sets them again only when it wrote in it,
# silently. A failure is said once, and -i names the directory once.
@test "windows: a directory whose metadata cannot be set is said once, not once a window (local, push)" {
	[ "$(id -u)" -eq 0 ] || { echo "needs root (chattr +i)"; false; }
	local mode
	for mode in local push; do
		rm -rf "$T/src" "$T/dst"
		tree "$T/src"
		RDCP_TEST_WINDOW=25 sync_in "$mode" -a "$T/src/" "$T/dst"
		# a2 and a1/b1 are their windows' tops, their parents' windows
		# others; a0 and a0/b0 share the first window with their parents
		touch -d 2019-01-01 "$T/src/a1/b1" "$T/src/a2" "$T/src/a0"
		chmod 700 "$T/src/a0/b0"
		chattr +i "$T/dst/a1/b1" || { echo "chattr +i does not work here: this test cannot run"; false; }
		local rc=0
		RDCP_TEST_WINDOW=25 sync_in "$mode" -a -i "$T/src/" "$T/dst" >"$T/out" 2>"$T/err" || rc=$?
		chattr -i "$T/dst/a1/b1"
		echo "$mode: exit $rc"; cat "$T/out" "$T/err"
		[ "$rc" -eq 23 ]
		[ "$(wc -l <"$T/err")" -eq 1 ]
		grep -Eqx 'rdcp( \(remote\))?: a1/b1: cannot set times: Operation not permitted' "$T/err"
		[ "$(grep -c '^\.d\.\.t\.\.\.\.\.\. a1/b1/$' "$T/out")" -eq 1 ]
		[ "$(grep -c '^\.d\.\.t\.\.\.\.\.\. a2/$' "$T/out")" -eq 1 ]
		[ "$(grep -c '^\.d\.\.t\.\.\.\.\.\. a0/$' "$T/out")" -eq 1 ]
		[ "$(grep -c '^\.d\.\.\.p\.\.\.\.\. a0/b0/$' "$T/out")" -eq 1 ]
		[ "$(wc -l <"$T/out")" -eq 4 ]
		# those that could be set are
		[ "$(stat -c %Y "$T/dst/a2")" = "$(stat -c %Y "$T/src/a2")" ]
		[ "$(stat -c %Y "$T/dst/a0")" = "$(stat -c %Y "$T/src/a0")" ]
		[ "$(stat -c %a "$T/dst/a0/b0")" = 700 ]
	done
}
