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
