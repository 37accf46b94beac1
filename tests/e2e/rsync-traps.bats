#!/usr/bin/env bats
# rsync muscle memory: what an rsync user types by habit, and the exit codes
# rsync gives. Where rsync can run the same case, the test runs it too and
# asserts rdcp's exit code is rsync's (the exit-code table, last test).
# Tests needing root, chattr or sshd FAIL when they cannot run: none skips.
load helpers

LRSH_ABS=$BATS_TEST_DIRNAME/local-rsh
RDCP_BUILD_DIR=$(dirname "$RDCP")

# A private sshd for the ssh_config alias tests (tests/lib/sshd.sh); if it
# cannot start, those tests fail, they are not skipped.
setup_file() {
	export S=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-traps-sshd-XXXXXX")
	source "$BATS_TEST_DIRNAME/../lib/sshd.sh"
	sshd_start "$S" || true
	printf 'Host lh2\n  HostName 127.0.0.1\n' >"$S/ssh_config"
}

teardown_file() {
	source "$BATS_TEST_DIRNAME/../lib/sshd.sh"
	sshd_stop "$S"
	rm -rf "$S"
}

mk_src() {
	mkdir -p "$1/sub"
	echo one >"$1/f"
	echo two >"$1/sub/g"
}

# rc CMD...: run CMD, print its exit code (its output goes to $T/out)
rc() {
	local r=0
	"$@" >"$T/out" 2>&1 || r=$?
	echo "$r"
}

# A fake remote shell whose login prints a banner first (a dirty .bashrc).
dirty_rsh() {
	printf '#!/bin/sh\necho "Welcome to the cluster"\nshift\nexec "$@"\n' >"$T/dirty-rsh"
	chmod +x "$T/dirty-rsh"
}

# --- 1. --sync --delete A backup/ (meant backup/A) --------------------------

# refused RUN-ARGS...: the run is refused (3) with the hint, one line
refused() {
	local r=0
	"$@" >"$T/out" 2>&1 || r=$?
	cat "$T/out"
	[ "$r" -eq 3 ]
	grep -q "refusing --sync --delete" "$T/out"
	grep -q "backup/A'" "$T/out"                      # the DST they meant
	grep -q "write SRC as '.*A/'" "$T/out"             # or A's contents outright
	[ "$(grep -c refusing "$T/out")" -eq 1 ]
}

# backup/ holds its own files, one of them named as one of A's (a)
delete_trap() {
	local mode=$1
	mk_src "$T/A"
	echo mine >"$T/A/a"
	mkdir -p "$T/backup/other"
	echo old >"$T/backup/a"
	echo precious >"$T/backup/important.doc"
	echo notes >"$T/backup/other/notes"
	for del in --delete --delete-after --delete-before; do
		refused sync_in "$mode" --sync $del "$T/A" "$T/backup/"
		refused sync_in "$mode" --sync $del -n "$T/A" "$T/backup"   # a dry run too
	done
	[ "$(cat "$T/backup/important.doc")" = precious ]  # nothing deleted
	[ "$(cat "$T/backup/other/notes")" = notes ]
	[ "$(cat "$T/backup/a")" = old ]                   # nothing written either
	[ ! -e "$T/backup/b" ] && [ ! -e "$T/backup/f" ]
	# nothing in common at all: the same
	rm "$T/backup/a"
	refused sync_in "$mode" --sync --delete "$T/A" "$T/backup/"
	# the ways it suggests work
	sync_in "$mode" --sync --delete "$T/A" "$T/backup/A"
	same "$T/A" "$T/backup/A"
	[ "$(cat "$T/backup/important.doc")" = precious ]
	sync_in "$mode" --sync --delete "$T/A/" "$T/backup/"   # A's contents, as asked
	same "$T/A" "$T/backup"
}

@test "delete trap: A into backup/ sharing one name with it is refused, nothing deleted (local)" {
	delete_trap local
}

@test "delete trap: A into backup/ sharing one name with it is refused, nothing deleted (push)" {
	delete_trap push
}

@test "delete trap: A into backup/ sharing one name with it is refused, nothing deleted (pull)" {
	delete_trap pull
}

# The note that lets a mirror's re-runs --delete (DST's index: "a mirror of
# A") must not be had by a DST that was not empty, nor outlive its DST:
# a run that excluded backup/'s own files (it looked empty through the
# filter) and a backup/ removed and made again under the same path.
delete_trap_note() {
	local mode=$1
	mk_src "$T/A"
	mkdir -p "$T/backup"
	echo precious >"$T/backup/important.doc"
	sync_in "$mode" --sync --exclude '*.doc' "$T/A" "$T/backup/"
	refused sync_in "$mode" --sync --delete "$T/A" "$T/backup/"
	[ "$(cat "$T/backup/important.doc")" = precious ]
	# a mirror made into an empty DST, then DST made again with a file of its own
	rm -rf "$T/backup" && mkdir "$T/backup"
	sync_in "$mode" --sync --delete "$T/A" "$T/backup/"     # new mirror: allowed
	sync_in "$mode" --sync --delete "$T/A" "$T/backup/"     # its re-run: allowed
	rm -rf "$T/backup" && mkdir "$T/backup"
	echo precious >"$T/backup/important.doc"
	refused sync_in "$mode" --sync --delete "$T/A" "$T/backup/"
	[ "$(cat "$T/backup/important.doc")" = precious ]
}

@test "delete trap: the mirror note is not had through a filter, nor by a DST made again (local)" {
	delete_trap_note local
}

@test "delete trap: the mirror note is not had through a filter, nor by a DST made again (push)" {
	delete_trap_note push
}

# What the rule leaves alone: A into a new or empty DST (and its re-runs,
# DST's index remembering the mirror), A into x/A, A/ into anything,
# several SRCs, no --delete.
delete_trap_allowed() {
	local mode=$1
	mk_src "$T/A"
	echo gone >"$T/A/gone"
	sync_in "$mode" --sync "$T/A" "$T/B"                  # a new DST
	rm "$T/A/gone"
	echo extra >"$T/B/extra"
	sync_in "$mode" --sync --delete "$T/A" "$T/B"         # a mirror rdcp made of A
	[ ! -e "$T/B/gone" ] && [ ! -e "$T/B/extra" ]
	same "$T/A" "$T/B"
	mkdir "$T/C"
	sync_in "$mode" --sync --delete "$T/A" "$T/C/"        # an empty one
	echo extra >"$T/C/extra"
	sync_in "$mode" --sync --delete "$T/A" "$T/C/"        # and again
	same "$T/A" "$T/C"
	# a mirror of another SRC's name is not one of A's
	mkdir -p "$T/Z" && echo z >"$T/Z/a"
	sync_in "$mode" --sync "$T/Z" "$T/D"
	local r=0
	sync_in "$mode" --sync --delete "$T/A" "$T/D" >"$T/out" 2>&1 || r=$?
	[ "$r" -eq 3 ] && grep -q refusing "$T/out"
	# A into x/A, non-empty, no index to remember anything
	mkdir -p "$T/x/A" && echo mine >"$T/x/A/mine"
	sync_in "$mode" --sync --delete --no-index "$T/A" "$T/x/A"
	same "$T/A" "$T/x/A"
	# A/ into anything
	mkdir -p "$T/any" && echo mine >"$T/any/mine"
	sync_in "$mode" --sync --delete "$T/A/" "$T/any"
	same "$T/A" "$T/any"
	# without --delete nothing can be lost: A's contents merge in
	mkdir -p "$T/keep" && echo mine >"$T/keep/mine"
	sync_in "$mode" --sync "$T/A" "$T/keep"
	[ "$(cat "$T/keep/mine")" = mine ] && [ "$(cat "$T/keep/f")" = one ]
	# several SRCs each add their name, as rsync: nothing else is deleted
	mkdir -p "$T/multi" && echo mine >"$T/multi/mine"
	mkdir -p "$T/E" && echo e >"$T/E/e"
	if [ "$mode" = pull ]; then
		"$RDCP" -e "$LRSH" --rdcp-path "$RDCP" --sync --delete "localhost:$T/A" \
			"localhost:$T/E" "$T/multi"
	else
		sync_in "$mode" --sync --delete "$T/A" "$T/E" "$T/multi"
	fi
	same "$T/A" "$T/multi/A" && same "$T/E" "$T/multi/E"
	[ "$(cat "$T/multi/mine")" = mine ]
}

@test "delete trap: A into a new, empty or same-named DST, A/, several SRCs still work (local)" {
	delete_trap_allowed local
}

@test "delete trap: A into a new, empty or same-named DST, A/, several SRCs still work (push)" {
	delete_trap_allowed push
}

@test "delete trap: A into a new, empty or same-named DST, A/, several SRCs still work (pull)" {
	delete_trap_allowed pull
}

# --- --max-delete ------------------------------------------------------------

mk_extra() {   # a DST with 8 entries SRC does not have (deepest: y/z/2)
	rm -rf "$1"
	mkdir -p "$1/x" "$1/y/z"
	touch "$1/a" "$1/b" "$1/c" "$1/x/1" "$1/y/z/2"
	echo keep >"$1/keep"
}

@test "--max-delete=N: at most N deletions, as rsync, then exit 25 (local, push, pull, dry run)" {
	mkdir "$T/S"
	echo keep >"$T/S/keep"
	for n in 0 1 3 10; do
		mk_extra "$T/want"
		local want=0
		rsync -r --delete --max-delete=$n "$T/S/" "$T/want/" >/dev/null 2>&1 || want=$?
		for mode in local push pull; do
			mk_extra "$T/D"
			local got=0
			sync_in "$mode" --sync --delete --max-delete=$n "$T/S/" "$T/D/" \
				>"$T/out" 2>&1 || got=$?
			echo "n=$n $mode: rdcp $got, rsync $want"
			cat "$T/out"
			[ "$got" -eq "$want" ]
			[ "$(cd "$T/D" && find . | sort)" = "$(cd "$T/want" && find . | sort)" ]
			if [ "$want" -eq 25 ]; then
				grep -q "Deletions stopped due to --max-delete limit" "$T/out"
			fi
		done
		# a dry run reports the same code and deletes nothing
		mk_extra "$T/D"
		local dry=0
		"$RDCP" --sync --delete -n --max-delete=$n "$T/S/" "$T/D/" >"$T/out" 2>&1 || dry=$?
		[ "$dry" -eq "$want" ]
		[ -e "$T/D/y/z/2" ] && [ -e "$T/D/a" ]
	done
	[ "$want" -eq 0 ]   # the last round (10) was under the limit
}

# --- 2. rdcp -r A afile ----------------------------------------------------

@test "trap: rdcp -r DIR onto an existing file is refused as rsync does (3), the file untouched" {
	mk_src "$T/A"
	echo mine >"$T/afile"
	local want=0
	rsync -r "$T/A" "$T/afile" 2>/dev/null || want=$?
	[ "$want" -eq 3 ]
	[ "$(cat "$T/afile")" = mine ]
	for mode in local push; do
		local got=0
		sync_in "$mode" -r "$T/A" "$T/afile" >"$T/out" 2>&1 || got=$?
		cat "$T/out"
		[ "$got" -eq "$want" ]
		grep -q "afile: not a directory" "$T/out"
		[ -f "$T/afile" ] && [ "$(cat "$T/afile")" = mine ]
	done
	# a file onto a file is a copy, as with rsync and cp
	"$RDCP" "$T/A/f" "$T/afile"
	[ "$(cat "$T/afile")" = one ]
}

# --- 3. exit codes ---------------------------------------------------------

@test "exit 20: SIGINT, SIGTERM or SIGHUP to the client stops the far side (local, pull)" {
	mk_src "$T/A"
	head -c 300000 /dev/urandom >"$T/A/big"
	for sig in INT TERM HUP; do
		for mode in local pull; do
			rm -rf "$T/D" "$T/pause"
			# exec: $! is rdcp itself (a background job's SIGINT starts out
			# ignored; rdcp takes it anyway, as rsync does)
			if [ "$mode" = local ]; then
				(RDCP_TEST_PAUSE=$T/pause exec "$RDCP" --sync "$T/A" "$T/D" 2>"$T/err") &
			else
				(RDCP_TEST_PAUSE=$T/pause exec "$RDCP" -e "$LRSH_ABS" --rdcp-path "$RDCP" \
					--sync "localhost:$T/A" "$T/D" 2>"$T/err") &
			fi
			local pid=$!
			for _ in $(seq 400); do [ -e "$T/pause" ] && break; sleep 0.025; done
			[ -e "$T/pause" ]
			local kids; kids=$(pgrep -P "$pid")
			[ -n "$kids" ]
			kill -"$sig" "$pid"
			local got=0
			wait "$pid" || got=$?
			echo "$sig $mode: exit $got"; cat "$T/err"
			[ "$got" -eq 20 ]
			grep -q "interrupted by $sig" "$T/err"
			for k in $kids; do ! kill -0 "$k" 2>/dev/null; done   # the far side is gone
			[ -z "$(find "$T/D" -name '.rdcp-tmp-*' 2>/dev/null)" ]
			[ ! -e "$T/D/big" ]
			rm -f "$T/pause"
		done
	done
	# and the next run completes
	"$RDCP" --sync "$T/A" "$T/D"
	same "$T/A" "$T/D"
}

@test "exit 0 every run: --delete and a directory holding only excluded files (as rsync)" {
	mkdir -p "$T/S" "$T/D/keep" "$T/R/keep"
	echo x >"$T/D/keep/.o"
	echo x >"$T/R/keep/.o"
	for run in 1 2; do
		local want=0 got=0
		rsync -r --delete --exclude .o "$T/S/" "$T/R/" >/dev/null 2>&1 || want=$?
		"$RDCP" --sync --delete --exclude .o "$T/S/" "$T/D/" >"$T/out" 2>&1 || got=$?
		cat "$T/out"
		echo "run $run: rdcp $got, rsync $want"
		[ "$want" -eq 0 ] && [ "$got" -eq 0 ]
		[ -e "$T/D/keep/.o" ]
		! grep -q "cannot delete" "$T/out"
	done
	# what is not excluded still goes
	mkdir "$T/D/empty"
	"$RDCP" --sync --delete --exclude .o "$T/S/" "$T/D/"
	[ ! -e "$T/D/empty" ] && [ -e "$T/D/keep/.o" ]
}

@test "exit 2: a remote shell that prints before rdcp starts ('is your shell clean?'), as rsync" {
	mk_src "$T/A"
	dirty_rsh
	local want=0 got=0
	rsync -r -e "$T/dirty-rsh" "$T/A" "localhost:$T/r" >/dev/null 2>&1 || want=$?
	"$RDCP" -r -e "$T/dirty-rsh" --rdcp-path "$RDCP" "$T/A" "localhost:$T/d" >"$T/out" 2>&1 ||
		got=$?
	cat "$T/out"
	[ "$want" -eq 2 ] && [ "$got" -eq 2 ]
	grep -q "is your shell clean" "$T/out"
	# the text the shell printed, escaped as C does; not rdcp's own bytes
	# after it (a pull's sender starts at once: they came as \000\000...)
	grep -q "bashrc): 'Welcome to the cluster\\\\n'$" "$T/out"
	got=0
	"$RDCP" -r -e "$T/dirty-rsh" --rdcp-path "$RDCP" "localhost:$T/A" "$T/p" >"$T/out" 2>&1 ||
		got=$?
	cat "$T/out"
	[ "$got" -eq 2 ]
	grep -q "bashrc): 'Welcome to the cluster\\\\n'$" "$T/out"
}

@test "exit 11: DST that cannot be created (missing parent, read-only with chattr +i), as rsync" {
	[ "$(id -u)" -eq 0 ] || { echo "needs root (chattr +i)"; false; }
	mk_src "$T/A"
	mkdir "$T/ro"
	chattr +i "$T/ro" || { echo "chattr +i does not work here: this test cannot run"; false; }
	local want got
	for dst in ro/new nodir/deep; do
		want=$(rc rsync -r "$T/A" "$T/$dst")
		got=$(rc "$RDCP" -r "$T/A" "$T/$dst")
		cat "$T/out"
		echo "$dst: rdcp $got, rsync $want"
		[ "$want" -eq 11 ] && [ "$got" -eq 11 ]
		grep -q "cannot create: " "$T/out"
	done
	got=$(rc "$RDCP" -r -e "$LRSH_ABS" --rdcp-path "$RDCP" "$T/A" "localhost:$T/ro/new")
	chattr -i "$T/ro"
	[ "$got" -eq 11 ]
	[ -z "$(ls -A "$T/ro")" ]
}

@test "exit 1: an empty SRC or DST (''), as rsync" {
	mk_src "$T/A"
	[ "$(rc rsync -r "$T/A" '')" -eq 1 ]
	[ "$(rc "$RDCP" -r "$T/A" '')" -eq 1 ]
	grep -q "DST is empty" "$T/out"
	[ "$(rc rsync -r '' "$T/x")" -eq 1 ]
	[ "$(rc "$RDCP" -r '' "$T/x")" -eq 1 ]
	grep -q "SRC is empty" "$T/out"
	[ ! -e "$T/x" ]
}

@test "exit 5: a remote shell that does not exist, a host that does not resolve (rdcp, rdpipe)" {
	mk_src "$T/A"
	[ "$(rc "$RDCP" -r -e nosuchshell "$T/A" "host:$T/x")" -eq 5 ]
	grep -q "cannot run the remote shell 'nosuchshell'" "$T/out"
	local ssh="ssh -o BatchMode=yes -o ConnectTimeout=5"
	[ "$(rc "$RDCP" -r -e "$ssh" "$T/A" "nosuchhost.invalid:x")" -eq 5 ]
	grep -q "could not start rdcp on nosuchhost.invalid" "$T/out"
	local got=0
	echo hi | "$RDCP_BUILD_DIR/rdpipe" -e "$ssh" 'nosuchhost.invalid:cat' >"$T/out" 2>&1 || got=$?
	cat "$T/out"
	[ "$got" -eq 5 ]
	grep -q "could not start rdpipe on nosuchhost.invalid" "$T/out"
}

# --- 5. host:~/x -------------------------------------------------------------

@test "host:~/x and host:~user/x: the far side expands ~, as a login shell does for rsync" {
	mk_src "$T/A"
	mkdir "$T/home"
	HOME=$T/home "$RDCP" -a -e "$LRSH_ABS" --rdcp-path "$RDCP" "$T/A" "localhost:~/x"
	same "$T/A" "$T/home/x"
	HOME=$T/home "$RDCP" -a -e "$LRSH_ABS" --rdcp-path "$RDCP" "localhost:~/x/" "$T/back"
	same "$T/A" "$T/back"
	# ~user: that user's home from the password file (ours, a unique name)
	local me home name=rdcp-traps-$$-$RANDOM
	me=$(id -un); home=$(getent passwd "$me" | cut -d: -f6)
	[ -d "$home" ]
	"$RDCP" -a -e "$LRSH_ABS" --rdcp-path "$RDCP" "$T/A" "localhost:~$me/$name"
	local ok=0; same "$T/A" "$home/$name" || ok=$?
	rm -rf "${home:?}/$name"
	[ "$ok" -eq 0 ]
	[ "$(rc "$RDCP" -a -e "$LRSH_ABS" --rdcp-path "$RDCP" "$T/A" "localhost:~nosuchuser9/x")" -eq 3 ]
	grep -q "no such user" "$T/out"
}

# --- 6. --index, --no-index ------------------------------------------------

@test "--no-index: neither side keeps an index (local, push); --index PATH with a sync is refused" {
	mk_src "$T/A"
	for mode in local push; do
		sync_in "$mode" --sync --no-index "$T/A" "$T/D-$mode"
		same "$T/A" "$T/D-$mode"
		[ -z "$(find "$T/cache" -name '*.db' 2>/dev/null)" ]
	done
	"$RDCP" --sync "$T/A" "$T/D-local"
	[ -n "$(find "$T/cache" -name '*.db')" ]   # without it, there are indexes
	[ "$(rc "$RDCP" --sync --index "$T/i.db" "$T/A" "$T/E")" -eq 1 ]
	grep -q "a sync has two trees" "$T/out"
	[ ! -e "$T/E" ] && [ ! -e "$T/i.db" ]
}

@test "rdcp --scan DIR -v: options after the operand work" {
	mk_src "$T/A"
	run "$RDCP" --scan "$T/A" -v
	[ "$status" -eq 0 ]
	[[ "$output" == *"file "*" sub/g"* ]]
	[[ "$output" == *"3 entries"* || "$output" == *"4 entries"* ]]
}

# --- 4. an ssh_config alias ------------------------------------------------

@test "ssh_config alias (Host lh2, HostName 127.0.0.1): push and pull dial the address ssh reached" {
	[ -s "$S/sshd.pid" ] || { cat "$S/sshd.log"; echo "sshd did not start"; false; }
	mk_src "$T/A"
	head -c 300000 /dev/urandom >"$T/A/big"
	local rsh="$RSH -F $S/ssh_config"
	"$RDCP" --sync -e "$rsh" --rdcp-path "$RDCP" "$T/A" "lh2:$T/pushed" 2>"$T/err" ||
		{ cat "$T/err"; false; }
	same "$T/A" "$T/pushed"
	! grep -q "lh2 port" "$T/err"
	"$RDCP" --sync -e "$rsh" --rdcp-path "$RDCP" "lh2:$T/A" "$T/pulled"
	same "$T/A" "$T/pulled"
	# --data-addr still wins, and a bad one is named in the message
	local got=0
	"$RDCP" --sync -e "$rsh" --rdcp-path "$RDCP" --data-addr nosuchhost.invalid "$T/A" \
		"lh2:$T/bad" >"$T/out" 2>&1 || got=$?
	cat "$T/out"
	[ "$got" -ne 0 ]
	grep -q "cannot open the data connection to nosuchhost.invalid" "$T/out"
	grep -q -- "--data-addr" "$T/out"
}

@test "ssh_config alias: rdpipe's hops dial the address ssh reached" {
	[ -s "$S/sshd.pid" ] || { cat "$S/sshd.log"; echo "sshd did not start"; false; }
	run bash -c "echo hello | '$RDCP_BUILD_DIR/rdpipe' -e '$RSH -F $S/ssh_config' \
		--rdpipe-path '$RDCP_BUILD_DIR/rdpipe' 'lh2:tr a-z A-Z' 'lh2:rev'"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *OLLEH* ]]
	[[ "$output" != *"cannot resolve lh2"* ]]
}

# --- 7. rdsend, rdrecv, rdpipe, make demo ----------------------------------

@test "rdsend, rdrecv, rdpipe --version; rdsend HOST PORT says the KEY is missing" {
	for p in rdsend rdrecv rdpipe rdcp; do
		run "$RDCP_BUILD_DIR/$p" --version
		[ "$status" -eq 0 ]
		[[ "$output" =~ ^$p\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
	done
	run "$RDCP_BUILD_DIR/rdsend" localhost 1234
	[ "$status" -eq 1 ]
	[[ "$output" == *"KEY is missing"* ]]
	[ "${#lines[@]}" -le 2 ]   # not the whole usage
	run "$RDCP_BUILD_DIR/rdrecv" 1234
	[ "$status" -eq 1 ]
	[[ "$output" == *"KEY is missing"* ]]
}

@test "README: the rdsend -v -P 4 ... - big.img example works as typed" {
	local line recv send port; port=$(free_port)
	recv=$(grep -m1 'hostB\$ RDCP_KEY=.* rdrecv 12345 - big.img' "$BATS_TEST_DIRNAME/../../README.md")
	send=$(grep -m1 'hostA\$ RDCP_KEY=.* rdsend -v -P 4 hostB 12345 - big.img' \
		"$BATS_TEST_DIRNAME/../../README.md")
	[ -n "$recv" ] && [ -n "$send" ]
	head -c 3000000 /dev/urandom >"$T/big.img"
	mkdir "$T/b"
	# the README's words, with our binaries, this host and a free port
	recv=${recv#*\$ }; send=${send#*\$ }
	recv=${recv/rdrecv/$RDCP_BUILD_DIR/rdrecv}; send=${send/rdsend/$RDCP_BUILD_DIR/rdsend}
	recv=${recv/12345/$port}; send=${send/12345/$port}; send=${send/hostB/127.0.0.1}
	(cd "$T/b" && eval "$recv") &
	local pid=$!
	(cd "$T" && eval "$send")
	wait "$pid"
	cmp "$T/big.img" "$T/b/big.img"
}

@test "make demo: its lines in order through a pipe, nothing left behind" {
	DEMO_DIR=$T/demo BUILD=$RDCP_BUILD_DIR "$BATS_TEST_DIRNAME/../../scripts/demo.sh" \
		>"$T/out" 2>&1
	cat "$T/out"
	[ ! -e "$T/demo" ]
	# each "==" heading of a sync comes before that sync's own lines (its
	# summary, "sent N bytes"), and after the previous one's
	local order
	order=$(grep -E '^== (rdcp --sync|the same command|one file changed|the trees)|^sent ' \
		"$T/out" | cut -c1-4 | tr '\n' ' ')
	echo "order: $order"
	[ "$order" = "== r sent == t sent == o sent == t " ]
}

# --- the exit-code table: each case with rdcp and with rsync ---------------

# row NAME WANT_RSYNC WANT_RDCP -- RSYNC_ARGS... -- RDCP_ARGS...: both run
# (WANT_RSYNC may be "a|b" where rsync's own code depends on timing)
# in a fresh $T/w holding A (a tree), afile (a file) and ro (chattr +i).
row() {
	local name=$1 wr=$2 wd=$3; shift 3
	[ "$1" = -- ] && shift
	local ra=() da=()
	while [ "$1" != -- ]; do ra+=("$1"); shift; done
	shift
	da=("$@")
	local r d
	r=$(cd "$T/w" && rc rsync "${ra[@]}")
	d=$(cd "$T/w" && rc "$RDCP" "${da[@]}")
	printf '| %s | %s | %s |\n' "$name" "$r" "$d" >>"$T/table"
	if [[ "|$wr|" != *"|$r|"* ]] || [ "$d" -ne "$wd" ]; then
		echo "$name: rsync $r (want $wr), rdcp $d (want $wd)"; cat "$T/out"; return 1
	fi
}

@test "exit-code table: rdcp's code is rsync's for each case rsync can run" {
	[ "$(id -u)" -eq 0 ] || { echo "needs root (chattr +i)"; false; }
	mkdir -p "$T/w/A/sub" "$T/w/ro" "$T/w/S" "$T/w/X/keep" "$T/w/M1" "$T/w/M2"
	echo x >"$T/w/A/f"; echo y >"$T/w/A/sub/g"; echo file >"$T/w/afile"
	echo o >"$T/w/X/keep/.o"
	touch "$T/w/M1/a" "$T/w/M1/b" "$T/w/M2/a" "$T/w/M2/b"
	chattr +i "$T/w/ro" || { echo "chattr +i does not work here"; false; }
	dirty_rsh
	local L="$LRSH_ABS" P=(--rdcp-path "$RDCP")
	local ok=0
	row "success" 0 0 -- -r A ok1 -- -r A ok2 || ok=1
	row "DST is a file, SRC a directory (-r A afile)" 3 3 -- -r A afile -- -r A afile || ok=1
	row "DST is a file, named as a directory (A/ afile/)" 3 3 -- -r A/ afile/ -- -r A/ afile/ || ok=1
	row "DST's parent missing (-r A nodir/deep)" 11 11 -- -r A nodir/deep -- -r A nodir/deep || ok=1
	row "DST not creatable: read-only (chattr +i) parent" 11 11 -- -r A ro/new -- -r A ro/new || ok=1
	row "DST exists, read-only: nothing can be written" 23 23 -- -r A/ ro/ -- -r A/ ro/ || ok=1
	row "DST is ''" 1 1 -- -r A '' -- -r A '' || ok=1
	row "SRC is ''" 1 1 -- -r '' x -- -r '' x || ok=1
	row "SRC missing" 23 23 -- -r nosuch y -- -r nosuch y || ok=1
	row "SRC missing, pushed" 23 23 -- -r -e "$L" nosuch localhost:"$T/w/y1" \
		-- -r -e "$L" "${P[@]}" nosuch localhost:"$T/w/y2" || ok=1
	row "DST cannot be looked at (stat: not a directory)" 3 3 -- -r A afile/deep \
		-- -r A afile/deep || ok=1
	# a documented difference: 5 (remote side not started) where rsync
	# says 14 (IPC)
	row "unclean remote shell (banner on stdout)" 2 2 -- -r -e "$T/dirty-rsh" A localhost:r1 \
		-- -r -e "$T/dirty-rsh" "${P[@]}" A localhost:r2 || ok=1
	row "remote shell not found (-e nosuchshell)" "14|12" 5 -- -r -e nosuchshell A h:x \
		-- -r -e nosuchshell A h:x || ok=1
	row "--delete, a directory of excluded files" 0 0 -- -r --delete --exclude .o S/ X/ \
		-- --sync --delete --exclude .o S/ X/ || ok=1
	row "--max-delete=1 with 2 to delete" 25 25 -- -r --delete --max-delete=1 S/ M1/ \
		-- --sync --delete --max-delete=1 S/ M2/ || ok=1
	row "unknown option" 1 1 -- --no-such-option A z -- --no-such-option A z || ok=1
	chattr -i "$T/w/ro"
	cat "$T/table"
	[ "$ok" -eq 0 ]
}

@test "rsync habits: -h alone is the help, -P is --partial --progress, -z is refused with the reason" {
	run "$RDCP" -h
	[ "$status" -eq 0 ]
	[[ "$output" == Usage:* ]]
	mk_src "$T/A"
	run "$RDCP" -a -P "$T/A" "$T/B"
	[ "$status" -eq 0 ]
	same "$T/A" "$T/B"
	run "$RDCP" -r -z "$T/A" "$T/C"
	[ "$status" -eq 1 ]
	[[ "$output" == *"-z/--compress is not supported"* ]]
	[ ! -e "$T/C" ]
}
