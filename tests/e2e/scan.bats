#!/usr/bin/env bats
# rdcp --scan: the user-visible face of the index.
load helpers

@test "--help teaches the scan and exits 0" {
	run "$RDCP" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--scan DIR"* ]]
	[[ "$output" == *"Exit status"* ]]
}

@test "unknown option: usage error, exit 1" {
	run "$RDCP" --no-such-option
	[ "$status" -eq 1 ]
	[[ "$output" == *"Try 'rdcp --help'"* ]]
}

@test "missing directory: error names it, exit 3" {
	run "$RDCP" --scan "$T/nope"
	[ "$status" -eq 3 ]
	[[ "$output" == *"$T/nope: No such file or directory"* ]]
}

@test "a file is not a tree: exit 3" {
	echo x >"$T/file"
	run "$RDCP" --scan "$T/file"
	[ "$status" -eq 3 ]
	[[ "$output" == *"not a directory"* ]]
}

@test "second scan hashes nothing, a touched file is the only rehash" {
	mk_files "$T/tree" 2000
	settle
	run "$RDCP" --scan "$T/tree"
	[ "$status" -eq 0 ]
	[[ "$output" == *"2000 files"* ]]
	[[ "$output" == *"hashed 2000 files"* ]]
	run "$RDCP" --scan "$T/tree"
	[ "$status" -eq 0 ]
	[[ "$output" == *"hashed 0 files (0 B), reused 2000"* ]]
	echo changed >>"$T/tree/d7/f777"
	settle
	run "$RDCP" --scan "$T/tree"
	[[ "$output" == *"hashed 1 files"* ]]
	[[ "$output" == *"reused 1999"* ]]
}

# The index loads on a thread of its own while the walk runs; files met
# before it is there wait in their open directories (RDCP_TEST_INDEX_LATE
# holds the load back; RDCP_TEST_PARK_MAX bounds the directories kept open).
@test "an index that loads late: the same answer, only the changed files hashed" {
	mk_files "$T/tree" 1000
	head -c $((9 << 20)) /dev/urandom >"$T/tree/d3/big"
	ln -s d1/f150 "$T/tree/link"
	settle
	run "$RDCP" --scan "$T/tree"
	[[ "$output" == *"hashed 1001 files"* ]]
	echo changed >>"$T/tree/d7/f777"
	printf 'XY' | dd of="$T/tree/d3/big" bs=1 seek=$((5 << 20)) conv=notrunc status=none
	settle
	"$RDCP" --scan "$T/tree" --no-index -v >"$T/fresh"
	for park in "" 1 0; do
		RDCP_TEST_INDEX_LATE=400 RDCP_TEST_PARK_MAX=$park run "$RDCP" --scan "$T/tree" -v
		[ "$status" -eq 0 ]
		# the first run hashes the two changed files; later ones reuse all
		if [ -z "$park" ]; then
			[[ "$output" == *"hashed 2 files"* ]]
			[[ "$output" == *"reused 999"* ]]
		else
			[[ "$output" == *"hashed 0 files (0 B), reused 1001"* ]]
		fi
		grep -v '^hashed\|^tree' "$T/fresh" >"$T/want"
		printf '%s\n' "$output" | grep -v '^hashed\|^tree' >"$T/got"
		diff "$T/want" "$T/got"
	done
	want=$(xxhsum -H2 "$T/tree/d7/f777" | cut -d' ' -f1)
	grep -q "$want d7/f777" "$T/got"
}

@test "a changed file that vanishes while it waits for the index: named, left out" {
	mk_files "$T/tree" 300
	settle
	"$RDCP" --scan "$T/tree" >/dev/null
	echo changed >>"$T/tree/d2/f250"
	settle
	RDCP_TEST_INDEX_LATE=1500 "$RDCP" --scan "$T/tree" -v >"$T/out" 2>&1 &
	pid=$!
	sleep 0.7   # walked: d2/f250 waits for the index
	rm "$T/tree/d2/f250"
	rc=0
	wait $pid || rc=$?
	[ "$rc" -eq 24 ]   # an entry vanished, as rsync's (not unreadable: 23)
	grep -q "d2/f250: vanished during the scan" "$T/out"
	! grep -q " d2/f250$" "$T/out"
	grep -q " d2/f249$" "$T/out"
	grep -q "hashed 0 files (0 B), reused 299" "$T/out"
}

@test "the index lives outside the tree, in XDG_CACHE_HOME" {
	mk_files "$T/tree" 10
	run "$RDCP" --scan "$T/tree"
	[ "$status" -eq 0 ]
	[ -z "$(find "$T/tree" -name '*.db*')" ]
	ls "$XDG_CACHE_HOME"/rdcp/tree-*.db
}

@test "--index PATH is honoured; --no-index writes none" {
	mk_files "$T/tree" 10
	run "$RDCP" --scan "$T/tree" --index "$T/my.db"
	[ "$status" -eq 0 ]
	[ -s "$T/my.db" ]
	run "$RDCP" --scan "$T/tree" --no-index
	[ "$status" -eq 0 ]
	[ ! -d "$XDG_CACHE_HOME/rdcp" ]
}

@test "a corrupt index: one warning line, correct answer, exit 0" {
	mk_files "$T/tree" 50
	settle
	"$RDCP" --scan "$T/tree" --index "$T/i.db" >/dev/null
	head -c 3000 /dev/urandom >"$T/i.db"
	run "$RDCP" --scan "$T/tree" --index "$T/i.db"
	[ "$status" -eq 0 ]
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	[[ "$output" == *"rebuilding"* ]]
	[[ "$output" == *"hashed 50 files"* ]]
	run "$RDCP" --scan "$T/tree" --index "$T/i.db"
	[[ "$output" == *"hashed 0 files"* ]]
}

@test "-v lists entries with hashes that match xxhsum -H2, odd names escaped" {
	mkdir -p "$T/tree/sub"
	printf 'hello\n' >"$T/tree/sub/a b"
	printf 'x' >"$T/tree/$(printf 'new\nline')"
	ln -s "sub/a b" "$T/tree/link"
	run "$RDCP" --scan "$T/tree" -v
	[ "$status" -eq 0 ]
	want=$(xxhsum -H2 "$T/tree/sub/a b" | cut -d' ' -f1)
	[[ "$output" == *"$want sub/a b"* ]]
	[[ "$output" == *'new\012line'* ]]
	[[ "$output" == *"link -> sub/a b"* ]]
}

@test "the README's form 'rdcp --scan -v DIR' lists the entries (and --scan DIR -v)" {
	mkdir -p "$T/tree/a"
	echo x >"$T/tree/a/f"
	run "$RDCP" --scan -v "$T/tree"
	[ "$status" -eq 0 ]
	[[ "$output" == *" a/f"* ]]
	run "$RDCP" --scan "$T/tree" -v
	[ "$status" -eq 0 ]
	[[ "$output" == *" a/f"* ]]
	run "$RDCP" --scan
	[ "$status" -eq 1 ]
	[[ "$output" == *"--scan takes one directory"* ]]
}
