#!/usr/bin/env bats
# The index cache ($XDG_CACHE_HOME/rdcp): --index-list, --index-prune, the
# daily automatic prune, and a cache directory that cannot be used (one
# warning, the run still succeeds; none with --no-index). docs/index.md,
# "The index cache". That a prune never removes an index a running rdcp
# holds is tests/unit/test_cache.c.
load helpers

C() { echo "$XDG_CACHE_HOME/rdcp"; }

# index_of TREE: the index file of TREE in the cache (exactly one)
index_of() {
	local f; f=$(grep -l -- "$(realpath "$1")" "$(C)"/*.db 2>/dev/null)
	[ "$(wc -l <<<"$f")" -eq 1 ] && [ -n "$f" ] && echo "$f"
}

# age INDEX DAYS: make INDEX look last used DAYS days ago (its meta table)
age() {
	python3 - "$1" "$2" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
ns = int((time.time() - int(sys.argv[2]) * 86400) * 1e9)
n = db.execute("UPDATE meta SET value = ? WHERE key = 'scan_ns'", (ns,)).rowcount
db.commit()
db.close()
sys.exit(0 if n == 1 else 1)
PY
}

# two trees a (10 files) and b (3 files), both scanned
two_trees() {
	mk_files "$T/a" 10
	mk_files "$T/b" 3
	"$RDCP" --scan "$T/a" >/dev/null
	"$RDCP" --scan "$T/b" >/dev/null
}

@test "--index-list: one line per index: last used, tree there or gone, size, entries, tree" {
	two_trees
	export TZ=UTC
	run "$RDCP" --index-list
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "last used         tree          size    entries  path" ]
	local today; today=$(date -u +%Y-%m-%d)
	[[ "${lines[1]}" == "$today "*" exists "*" 12  $(realpath "$T/a")" ]]
	[[ "${lines[2]}" == "$today "*" exists "*"  5  $(realpath "$T/b")" ]]
	[[ "${lines[3]}" == "2 index files, "*" in $(C)" ]]
	[ "${#lines[@]}" -eq 4 ]
	rm -rf "$T/b"
	age "$(index_of "$T/a")" 100
	run "$RDCP" --index-list
	echo "$output"
	[[ "${lines[1]}" == "$(date -u -d '100 days ago' +%Y-%m-%d) "*" exists "* ]]
	[[ "${lines[2]}" == *" gone "*"$(realpath "$T")/b" ]]
}

@test "--index-list: a tree sent by name has its own index, shown as parent//name" {
	mk_files "$T/a" 3
	"$RDCP" -r "$T/a" "$T/copy"
	run "$RDCP" --index-list
	echo "$output"
	[[ "$output" == *" exists "*"$(realpath "$T")//a"* ]]
	[[ "$output" == *" exists "*"$(realpath "$T")//copy"* ]]
}

@test "--index-list with no cache yet: an empty list, exit 0" {
	run "$RDCP" --index-list
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"0 index files, 0 B, in $(C)"* ]]
}

@test "--index-prune: the index of a tree that is gone is removed, the bytes freed said" {
	two_trees
	local ib; ib=$(index_of "$T/b")
	local bytes; bytes=$(stat -c %s "$ib")
	rm -rf "$T/b"
	run "$RDCP" --index-prune
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "removed $(basename "$ib"): $(realpath "$T")/b, tree gone ("* ]]
	[[ "${lines[1]}" == "freed "*" ($bytes bytes): 1 index file removed, 1 kept" ]]
	[ ! -e "$ib" ]
	index_of "$T/a"
	# and the next scan of a still takes its hashes from its index
	run "$RDCP" --scan "$T/a"
	[[ "$output" == *"hashed 0 files"* ]]
}

@test "--index-prune[=DAYS]: by last use (90 days by default)" {
	two_trees
	local ia ib; ia=$(index_of "$T/a"); ib=$(index_of "$T/b")
	age "$ia" 100
	age "$ib" 30
	run "$RDCP" --index-prune=200
	echo "$output"
	[[ "$output" == *"0 index files removed, 2 kept"* ]]
	run "$RDCP" --index-prune
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"removed $(basename "$ia"): $(realpath "$T/a"), last used $(date -d '100 days ago' +%Y-%m-%d)"* ]]
	[[ "$output" == *"1 index file removed, 1 kept"* ]]
	[ ! -e "$ia" ] && [ -e "$ib" ]
	run "$RDCP" --index-prune=29
	[[ "$output" == *"1 index file removed, 0 kept"* ]]
	[ ! -e "$ib" ]
	[ -z "$(ls "$(C)" | grep -v '^last-prune$')" ]   # no -wal, no -shm left
}

@test "--index-prune: an index that does not say when it was used ages by its file's time" {
	mk_files "$T/a" 3
	"$RDCP" --scan "$T/a" >/dev/null
	local ia; ia=$(index_of "$T/a")
	python3 -c 'import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute("DELETE FROM meta WHERE key=?", ("scan_ns",)); d.commit()' "$ia"
	run "$RDCP" --index-list
	echo "$output"
	[[ "${lines[1]}" == "unknown "*" exists "* ]]
	run "$RDCP" --index-prune
	[[ "$output" == *"0 index files removed, 1 kept"* ]]
	touch -d '100 days ago' "$ia"
	run "$RDCP" --index-prune
	echo "$output"
	[[ "$output" == *"1 index file removed"* ]]
	[ ! -e "$ia" ]
}

@test "--index-prune and --index-list: bad DAYS or an operand is a usage error" {
	run "$RDCP" --index-prune=soon
	[ "$status" -eq 1 ]
	[[ "$output" == *"--index-prune: expected a number 0..100000, got 'soon'"* ]]
	run "$RDCP" --index-list "$T"
	[ "$status" -eq 1 ]
}

@test "automatic prune: at most once a day, when a run opens an index" {
	two_trees
	mk_files "$T/c" 2
	"$RDCP" --scan "$T/c" >/dev/null
	local ia ib ic; ia=$(index_of "$T/a"); ib=$(index_of "$T/b"); ic=$(index_of "$T/c")
	[ -s "$(C)/last-prune" ]   # the first run pruned (nothing) and stamped
	age "$ib" 100
	"$RDCP" --scan "$T/a" >/dev/null
	[ -e "$ib" ]               # pruned today already: not again
	touch -d '25 hours ago' "$(C)/last-prune"
	run "$RDCP" --scan "$T/a"
	[ "$status" -eq 0 ]
	[[ "$output" != *removed* ]]   # quiet
	[ ! -e "$ib" ]
	[ -e "$ia" ] && [ -e "$ic" ]
	[ "$(( $(date +%s) - $(stat -c %Y "$(C)/last-prune") ))" -lt 60 ]
	# never stamped (a cache from before, or the stamp deleted): due at once;
	# and a tree that is gone, in a sync run
	rm -rf "$T/c" "$(C)/last-prune"
	"$RDCP" -r "$T/a" "$T/copy"
	[ ! -e "$ic" ]
	[ -e "$ia" ]
	[ -s "$(C)/last-prune" ]
}

@test "HOME unset: one warning line naming the cause and --no-index, the run succeeds" {
	mk_files "$T/src" 20
	run env -u HOME -u XDG_CACHE_HOME "$RDCP" --scan "$T/src"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	[[ "$output" == *"rdcp: warning: index cache \$HOME/.cache/rdcp: HOME is not set; going on without an index: every file will be hashed (--no-index silences this)"* ]]
	[[ "$output" == *"hashed 20 files"* ]]
	# a local run: two processes (the far side forked), still one line
	run env -u HOME -u XDG_CACHE_HOME "$RDCP" --sync "$T/src" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	same "$T/src" "$T/dst"
}

@test "--no-index: no warning at all, and no index written by either side" {
	mk_files "$T/src" 20
	run env -u HOME -u XDG_CACHE_HOME "$RDCP" --scan --no-index "$T/src"
	[ "$status" -eq 0 ]
	[[ "$output" != *warning* ]]
	run env -u HOME -u XDG_CACHE_HOME "$RDCP" --no-index --sync "$T/src" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	same "$T/src" "$T/dst"
	# with a usable cache: nothing lands in it, pushing through the remote path too
	run sync_in push --no-index --sync "$T/src" "$T/dst2"
	echo "$output"
	[ "$status" -eq 0 ]
	same "$T/src" "$T/dst2"
	[ ! -e "$(C)" ] || [ -z "$(ls "$(C)")" ]
}

@test "read-only cache directory: one warning, the run succeeds, nothing written" {
	mkdir -p "$T/ro/rdcp"
	if [ "$(id -u)" -eq 0 ]; then
		mount -t tmpfs -o ro,size=1m tmpfs "$T/ro" ||
			skip "SKIPPED LOUDLY: root cannot mount a read-only tmpfs here (no other way to deny root writes)"
	else
		chmod 555 "$T/ro/rdcp"
	fi
	export XDG_CACHE_HOME=$T/ro
	mk_files "$T/src" 5
	run "$RDCP" --sync "$T/src" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	[[ "$output" == *"warning: index cache $T/ro/rdcp: "*"; going on without an index"*"(--no-index silences this)"* ]]
	same "$T/src" "$T/dst"
	[ -z "$(ls -A "$T/ro/rdcp" 2>/dev/null)" ]
	run "$RDCP" --index-list
	[ "$status" -eq 3 ]
	[[ "$output" == *"index cache $T/ro/rdcp"* ]]
}

@test "a cache directory that cannot be made: one warning naming the cause" {
	echo file >"$T/notadir"
	export XDG_CACHE_HOME=$T/notadir
	mk_files "$T/src" 5
	run "$RDCP" --scan "$T/src"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	[[ "$output" == *"index cache $T/notadir/rdcp: Not a directory; going on without an index"* ]]
}

@test "attack: a cache directory others can write is not trusted (one warning, no index)" {
	mkdir -p "$(C)"
	chmod 777 "$(C)"
	mk_files "$T/src" 5
	run "$RDCP" --scan "$T/src"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"index cache $(C): writable by others; going on without an index"* ]]
	[ -z "$(ls -A "$(C)")" ]
}

# Eight first runs from one SRC at once all open its new index: each found
# it empty, and each but one used to fail making its tables ("table meta
# already exists") and go on without an index. index/db.c makes it in one
# transaction; those that waited find it made.
@test "race: eight first runs from one SRC at once: no warning, all exit 0, one usable index" {
	mkdir -p "$T/src"
	local i pids=() rc=0
	for i in 1 2 3 4; do head -c 1100000 /dev/urandom >"$T/src/f$i"; done
	for i in $(seq 8); do
		"$RDCP" --sync "$T/src" "$T/dst$i" 2>"$T/err$i" &
		pids+=($!)
	done
	for i in $(seq 8); do
		wait "${pids[i-1]}" || { rc=$?; echo "run $i: exit $rc"; }
	done
	cat "$T"/err*
	[ "$rc" -eq 0 ]
	[ -z "$(cat "$T"/err*)" ]   # no "going on without an index", no warning at all
	for i in $(seq 8); do same "$T/src" "$T/dst$i"; done
	index_of "$T/src"
	# the index holds every file's hash: a scan reads none of them again
	run "$RDCP" --scan "$T/src"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"hashed 0 files (0 B), reused 4 from the index"* ]]
}
