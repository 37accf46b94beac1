#!/usr/bin/env bats
# --inplace, --append, --append-verify (sync/recv/inplace.c), as rsync's: DST's
# file is written where it is; only changed (or, with --append, new) chunks
# cross the wire, each verified before it is written. Results compared with
# cmp and rsync -anciH --delete; behaviour with rsync's on the same trees.
load helpers

MiB=$((1 << 20))

poke() { flip "$1" "$2"; }

inplace_keeps_inode() {
	local mode=$1
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	head -c 1000 /dev/urandom >"$T/src/small"
	sync_in "$mode" --sync -a "$T/src" "$T/dst"
	local ino sino
	ino=$(stat -c %i "$T/dst/f")
	sino=$(stat -c %i "$T/dst/small")
	poke "$T/src/f" $((5 * MiB))
	poke "$T/src/small" 10
	sync_in "$mode" --sync -a --inplace --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	cmp "$T/src/small" "$T/dst/small"
	same "$T/src" "$T/dst"
	[ "$(stat -c %i "$T/dst/f")" = "$ino" ]
	[ "$(stat -c %i "$T/dst/small")" = "$sino" ]
	# one 64 KiB block of the changed chunk (blocks.c), the small file whole
	[ "$(json_field bytes_sent <"$T/json")" -eq $((65536 + 1000)) ]
	[ "$(json_field bytes_matched <"$T/json")" -eq $((12 * MiB - 65536)) ]
}

@test "--inplace: the same inode, only the changed block sent (local)" {
	inplace_keeps_inode local
}
@test "--inplace: the same inode, only the changed block sent (push)" {
	inplace_keeps_inode push
}
@test "--inplace: the same inode, only the changed block sent (pull)" {
	inplace_keeps_inode pull
}

@test "--inplace: a file that shrank is cut to its new size" {
	mkdir "$T/src"
	head -c $((10 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	truncate -s $((6 * MiB + 5)) "$T/src/f"
	sync_in push --sync -a --inplace "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
}

@test "--append: a grown file sends only its tail (and the chunk holding the old end)" {
	mkdir "$T/src"
	head -c $((20 * MiB + 300)) /dev/urandom >"$T/src/f"
	sync_in push --sync -a "$T/src" "$T/dst"
	local ino; ino=$(stat -c %i "$T/dst/f")
	head -c $((3 * MiB)) /dev/urandom >>"$T/src/f"
	sync_in push --sync -a --append --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(stat -c %i "$T/dst/f")" = "$ino" ]
	# from the old end's chunk (20 MiB) to the new end
	[ "$(json_field bytes_sent <"$T/json")" -eq $((3 * MiB + 300)) ]
}

# The chunk holding DST's old end goes as blocks: a recording that grew
# from mid-chunk costs its new bytes and at most one 64 KiB block more, not
# the chunk again (--watch appends every fraction of a second); a small
# file that grew comes whole, in the archive (it once got a chunk list the
# sender refused: exit 12).
@test "--append: a grown file's old end chunk goes as blocks (new bytes + < 1 block); a grown small file whole (push, local)" {
	local mode
	for mode in push local; do
		rm -rf "$T/src" "$T/dst"
		mkdir "$T/src"
		head -c $((21 * MiB + 300)) /dev/urandom >"$T/src/f"
		echo small >"$T/src/s"
		sync_in "$mode" --sync -a "$T/src" "$T/dst"
		head -c $((3 * MiB)) /dev/urandom >>"$T/src/f"
		echo more >>"$T/src/s"
		sync_in "$mode" --sync -a --append --json "$T/src" "$T/dst" >"$T/json"
		cat "$T/json"
		[ "$(json_field exit_code <"$T/json")" -eq 0 ]
		cmp "$T/src/f" "$T/dst/f"
		cmp "$T/src/s" "$T/dst/s"
		local sent; sent=$(json_field bytes_sent <"$T/json")
		[ "$sent" -ge $((3 * MiB)) ] && [ "$sent" -le $((3 * MiB + 64 * 1024 + 300 + 11)) ]
	done
}

# The sender under --append reads only what was appended, as rsync: the
# old part's digests come from its index, marked there as taken unread, so
# that a run that does not trust them (a default run to another DST) reads
# the file again instead of vouching for an old part it never read.
@test "--append: the sender reads only the tail; a later default run trusts none of it" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	sync_in local --sync -a "$T/src" "$T/dst2"
	poke "$T/src/f" 100   # the old part changed: --append does not look
	head -c $MiB /dev/urandom >>"$T/src/f"
	cp -a "$T/dst/f" "$T/ref"
	rsync -a --append "$T/src/f" "$T/ref"
	sync_in push --sync -a --append --json "$T/src" "$T/dst" >"$T/json"
	[ "$(json_field bytes_sent <"$T/json")" -eq $MiB ]
	cmp "$T/ref" "$T/dst/f"   # as rsync --append: the old part kept
	# one row in all the indexes says its digests were taken unread: SRC's
	python3 - "$XDG_CACHE_HOME/rdcp" <<-'EOF'
		import glob, sqlite3, sys
		n = sum(sqlite3.connect(db).execute(
		    "SELECT count(*) FROM entries WHERE assumed = 1 AND path = CAST('f' AS BLOB)"
		).fetchone()[0] for db in glob.glob(sys.argv[1] + "/*.db"))
		sys.exit(0 if n == 1 else f"{n} rows taken unread, want 1")
	EOF
	sync_in push --sync -a "$T/src" "$T/dst2"
	cmp "$T/src/f" "$T/dst2/f"
	same "$T/src" "$T/dst2"
	sync_in push --sync -a -c "$T/src" "$T/dst"   # and -c mends the first, as rsync -c
	cmp "$T/src/f" "$T/dst/f"
}

# A DST that lacks the file asks for the chunks whose digests SRC took
# unread: the sender reads and checks them, and says what it found rather
# than send digests the receiver would refuse, run after run.
# The sender finds the old part --append took unread changed: SRC's index
# forgets the row, and a round of its own reads and sends the file whole,
# exit 0 (pulling: the far sender lists it for the client's round).
appended_old_part_changed() {
	local mode=$1
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"   # SRC's index has its row
	poke "$T/src/f" $((5 * MiB))
	head -c $MiB /dev/urandom >>"$T/src/f"
	local rc=0
	sync_in "$mode" --sync -a --append "$T/src" "$T/new" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ ! -s "$T/err" ]
	cmp "$T/src/f" "$T/new/f"
	same "$T/src" "$T/new"
}
@test "--append: SRC's old part changed and DST lacks the file: a round of its own sends it whole, exit 0 (push)" {
	appended_old_part_changed push
}
@test "--append: SRC's old part changed and DST lacks the file: a round of its own sends it whole, exit 0 (pull)" {
	appended_old_part_changed pull
}

@test "--append: a DST file as long or longer is left alone, as rsync" {
	mkdir "$T/src" "$T/ref"
	head -c $((6 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	head -c $((7 * MiB)) /dev/urandom >"$T/dst/f"
	cp -a "$T/dst/f" "$T/ref/f"
	rsync -a --append "$T/src/" "$T/ref/"
	sync_in push --sync -a --append --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/ref/f" "$T/dst/f"   # rsync left it alone too
	[ "$(json_field bytes_sent <"$T/json")" -eq 0 ]
	[ "$(json_field exit_code <"$T/json")" -eq 0 ]
}

@test "--append-verify: a changed prefix is refused (exit 23, file left), a good one appended" {
	mkdir "$T/src"
	head -c $((9 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	head -c $((2 * MiB)) /dev/urandom >>"$T/src/f"
	cp "$T/src/f" "$T/good"
	poke "$T/src/f" 100
	cp "$T/dst/f" "$T/before"
	local rc=0
	sync_in push --sync -a --append-verify "$T/src" "$T/dst" 2>"$T/err" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	grep -q "f: its first 9437184 bytes in DST differ from the sender's (chunk 0): not appended" "$T/err"
	cmp "$T/before" "$T/dst/f"
	cp "$T/good" "$T/src/f"
	sync_in push --sync -a --append-verify --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	# the 2 MiB appended, and not more than one block of the old end's chunk
	local sent; sent=$(json_field bytes_sent <"$T/json")
	[ "$sent" -ge $((2 * MiB)) ] && [ "$sent" -le $((2 * MiB + 64 * 1024 + 16)) ]
}

# --append keeps DST's start unread, as rsync. DST's index must then hold
# the digests of what is on disk, not the sender's: else a -c run, and
# rdcp --scan, vouch for bytes nobody compared, run after run.
append_poison() {
	local mode=$1
	mkdir "$T/src" "$T/dst"
	head -c 20000000 /dev/urandom >"$T/src/X"
	head -c 9000000 /dev/urandom >"$T/dst/X"
	cp "$T/dst/X" "$T/mine"
	sync_in "$mode" --sync --append "$T/src/" "$T/dst/"
	cmp -n 8388608 "$T/mine" "$T/dst/X"             # DST's own start kept
	cmp -i 9000000 "$T/src/X" "$T/dst/X"            # SRC's tail
	local real
	real=$("$RDCP" --scan --no-index -v "$T/dst" | awk '$NF == "X" { print $5 }')
	[ -n "$real" ]
	# the index vouches for what is on disk, not for SRC's hash
	[ "$("$RDCP" --scan -v "$T/dst" | awk '$NF == "X" { print $5 }')" = "$real" ]
	[ "$("$RDCP" --scan -v "$T/src" | awk '$NF == "X" { print $5 }')" != "$real" ]
	# -c sees the difference and mends it; then all is well, for real
	sync_in "$mode" --sync -c -i "$T/src/" "$T/dst/" >"$T/out"
	cat "$T/out"
	grep -q '^[<>]fc' "$T/out"
	cmp "$T/src/X" "$T/dst/X"
	sync_in "$mode" --sync -c -i "$T/src/" "$T/dst/" >"$T/out"
	[ ! -s "$T/out" ]
}

@test "--append into a different DST prefix does not poison DST's index: -c and --scan see it (local)" {
	append_poison local
}

@test "--append into a different DST prefix does not poison DST's index: -c and --scan see it (push)" {
	append_poison push
}

@test "--append into a different DST prefix does not poison DST's index: -c and --scan see it (pull)" {
	append_poison pull
}

# Where DST's start is SRC's, the row --append stores (DST's digests for
# it) is SRC's own: the next run is a no-op that reads nothing.
@test "--append onto SRC's own prefix: the re-run is a no-op, -c too, nothing hashed again" {
	mkdir "$T/src" "$T/dst"
	head -c 20000000 /dev/urandom >"$T/src/X"
	head -c 9000000 "$T/src/X" >"$T/dst/X"
	sync_in push --sync --append --json "$T/src/" "$T/dst/" >"$T/json"
	# what lies past DST's end, and at most the block holding it
	local sent; sent=$(json_field bytes_sent <"$T/json")
	[ "$sent" -ge 11000000 ] && [ "$sent" -le $((11000000 + 64 * 1024 + 16)) ]
	cmp "$T/src/X" "$T/dst/X"
	run "$RDCP" --scan "$T/dst"
	echo "$output"
	[[ "$output" == *"hashed 0 files"* ]]
	for opt in --append -c; do
		sync_in push --sync -i $opt --json "$T/src/" "$T/dst/" >"$T/json"
		[ "$(json_field bytes_sent <"$T/json")" -eq 0 ]
	done
}

@test "--inplace never writes through a symlink planted in DST after the scan" {
	mkdir "$T/src"
	head -c $((9 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	poke "$T/src/f" 7
	echo precious >"$T/victim"
	local rc=0
	RDCP_TEST_PAUSE=$T/pause "$RDCP" --sync -a --inplace "$T/src" "$T/dst" 2>"$T/err" &
	local pid=$! i
	for ((i = 0; i < 200; i++)); do [ -e "$T/pause" ] && break; sleep 0.05; done
	[ -e "$T/pause" ]
	rm "$T/dst/f"
	ln -s "$T/victim" "$T/dst/f"
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	[ "$(cat "$T/victim")" = precious ]
	[ -L "$T/dst/f" ]
}

@test "--inplace with -b is refused before anything is done" {
	mkdir "$T/src"
	echo x >"$T/src/f"
	run "$RDCP" --sync -a --inplace -b "$T/src" "$T/dst"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--inplace with -b/--backup-dir is not supported"* ]]
	[ ! -e "$T/dst" ]
}

@test "--inplace: a chunk that does not verify after others were written says the file is damaged, not left as it was" {
	mkdir "$T/src"
	head -c $((12 * MiB)) /dev/urandom >"$T/src/f"
	sync_in local --sync -a "$T/src" "$T/dst"
	cp "$T/dst/f" "$T/old"
	poke "$T/src/f" 100                   # chunk 0: written in place
	poke "$T/src/f" $((9 * MiB))          # chunk 2: changed again while sent
	local rc=0
	# one stream: chunk 0 comes (and is written) before chunk 2
	RDCP_TEST_PAUSE=$T/pause "$RDCP" --sync -a --inplace --streams 1 "$T/src" "$T/dst" \
		2>"$T/err" &
	local pid=$! i
	for ((i = 0; i < 200; i++)); do [ -e "$T/pause" ] && break; sleep 0.05; done
	[ -e "$T/pause" ]
	poke "$T/src/f" $((9 * MiB + 1))
	rm "$T/pause"
	wait "$pid" || rc=$?
	cat "$T/err"
	[ "$rc" -eq 23 ]
	grep -q "f: chunk 2 does not match the sender's hash" "$T/err"
	# what it says is what DST holds
	if cmp -s "$T/old" "$T/dst/f"; then
		grep -q "it is left as it was" "$T/err"
	else
		! grep -q "left as it was" "$T/err"
		grep -q "DST's file was partly rewritten in place and is now damaged; re-run to repair" "$T/err"
	fi
	! cmp -s "$T/old" "$T/dst/f"          # chunk 0 went first: it is not as it was
	# the index does not vouch for it: a -c run finds and repairs it
	"$RDCP" --sync -a -c --inplace "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
}
