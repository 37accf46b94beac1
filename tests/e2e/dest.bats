#!/usr/bin/env bats
# What lands and what goes (issue 11): several SRCs, --mkpath, --delete-
# before/after, backups, --link-dest, --bwlimit, --remove-source-files.
# Each test runs rsync with the same flags on the same tree as the
# reference, and compares (rsync -anciH --delete A/ B/ prints nothing when
# B matches A), locally and through the remote shell (push and pull).
load helpers

# run_in MODE OPTS... -- SRC... DST: rdcp with every SRC on the "remote"
# side for pull, DST on it for push
run_in() {
	local mode=$1 opts=() srcs=() a; shift
	while [ "$1" != -- ]; do opts+=("$1"); shift; done
	shift
	while [ $# -gt 1 ]; do srcs+=("$1"); shift; done
	local dst=$1
	case $mode in
	local) "$RDCP" "${opts[@]}" "${srcs[@]}" "$dst" ;;
	push) "$RDCP" -e "$LRSH" --rdcp-path "$RDCP" "${opts[@]}" "${srcs[@]}" "localhost:$dst" ;;
	pull) for a in "${srcs[@]}"; do opts+=("localhost:$a"); done
	      "$RDCP" -e "$LRSH" --rdcp-path "$RDCP" "${opts[@]}" "$dst" ;;
	esac
}

mk_srcs() {
	cd "$T"
	mkdir -p A/sub d1/x/a d2/x/b B d1 d2
	echo a >A/fa; echo s >A/sub/s; echo b >B/fb; echo top >file
	echo one >d1/x/f; echo two >d2/x/f; echo y >d1/y; mkdir d2/y; echo in >d2/y/z
	head -c 200000 /dev/urandom >B/big
	chmod 700 B
	touch -d '2020-01-01' A/fa
}

several() {
	local mode=$1
	mk_srcs
	rsync -a A B/ file d1/x d2/x d1/y d2/y ref
	run run_in "$mode" -a -- A B/ file d1/x d2/x d1/y d2/y out
	echo "$output"
	[ "$status" -eq 0 ]
	same ref out
	# a duplicate name keeps the first SRC's file, a directory over a file
	[ "$(cat out/x/f)" = one ] && [ -d out/y ] && [ -f out/y/z ]
}
@test "several SRC: names and contents merge as rsync's (local)" { several local; }
@test "several SRC: names and contents merge as rsync's (push)" { several push; }
@test "several SRC: names and contents merge as rsync's (pull)" { several pull; }

several_delete() {
	local mode=$1
	mk_srcs
	mkdir -p out/A/old/deep out/other; echo s >out/A/stale; echo s >out/A/old/deep/x
	echo k >out/keep
	cp -a out ref
	rsync -a --delete A file ref/
	run run_in "$mode" -a --delete -- A file out/
	echo "$output"
	[ "$status" -eq 0 ]
	touch -r ref out   # DST's root was not sent: its mtime is whenever each tool wrote
	same ref out
	# only what was sent is mirrored: the rest of DST is not SRC's to delete
	[ -f out/keep ] && [ -d out/other ] && [ ! -e out/A/stale ] && [ ! -e out/A/old ]
	# with a SRC's contents the root is sent, and DST's top is mirrored too
	rsync -a --delete A B/ ref/
	run_in "$mode" -a --delete -- A B/ out/
	same ref out
	[ ! -e out/keep ]
}
@test "several SRC: --delete stays inside what was sent, as rsync (local)" { several_delete local; }
@test "several SRC: --delete stays inside what was sent, as rsync (push)" { several_delete push; }
@test "several SRC: --delete stays inside what was sent, as rsync (pull)" { several_delete pull; }

@test "several SRC: a missing one is said, the others copied, exit 23 as rsync" {
	mk_srcs
	run rsync -a A nothere file ref
	[ "$status" -eq 23 ]
	run "$RDCP" -a A nothere file out
	echo "$output"
	[ "$status" -eq 23 ]
	[[ "$output" == *"nothere: No such file or directory"* ]]
	touch -r ref out   # made by each run, not copied: their mtimes differ by chance
	same ref out
}

@test "several SRC: local and remote SRCs mixed are refused" {
	mk_srcs
	run "$RDCP" -e "$LRSH" --rdcp-path "$RDCP" -a A localhost:B out
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"every SRC must be on the same side"*"'A' and 'localhost:B'"* ]]
	[ ! -e out ]
	run "$RDCP" -e "$LRSH" --rdcp-path "$RDCP" -a h1:A h2:B out
	[ "$status" -eq 1 ]
	[[ "$output" == *"every SRC must be on the same side"* ]]
}

# --mkpath: DST's missing parents are made; without it a missing parent is
# rsync's error with rsync's exit code (11 when DST is a directory to make,
# 3 when DST names the copy). Each case as rsync does it, in ref/.
mkpath() {
	local mode=$1 args want
	mk_srcs
	while read -r want args; do
		rm -rf ref out; mkdir ref out
		local a=($args) srcs=() opts=() k rrc=0
		for ((k = 0; k < ${#a[@]} - 1; k++)); do
			case ${a[k]} in -*) opts+=("${a[k]}") ;; *) srcs+=("$T/${a[k]}") ;; esac
		done
		rsync "${opts[@]}" "${srcs[@]}" "ref/${a[-1]}" 2>/dev/null || rrc=$?
		[ "$rrc" -eq "$want" ]   # the reference itself
		run run_in "$mode" "${opts[@]}" -- "${srcs[@]}" "$T/out/${a[-1]}"
		echo "rdcp $args: $status: $output"
		[ "$status" -eq "$want" ]
		# (the parents made are not part of the copy: their mtimes are now)
		if [ "$want" -eq 0 ]; then [ -z "$(rsync -anciHO --delete ref/ out/)" ]
		else [ -z "$(ls -A out)" ]; fi
		[ "$want" -ne 11 ] || [[ "$output" == *"cannot create: No such file or directory (--mkpath"* ]]
	done <<-'CASES'
	11 -r A new/sub/
	11 -r A/ new/sub
	3 file new/sub/f2
	11 -r A file new/sub
	0 -a --mkpath A new/sub/
	0 -a --mkpath A/ new/sub
	0 -a --mkpath file new/sub/f2
	0 -a --mkpath file new/sub/
	0 -a --mkpath A file new/deeper/sub
	CASES
}
@test "--mkpath makes DST's parents; without it a missing parent fails as rsync (local)" { mkpath local; }
@test "--mkpath makes DST's parents; without it a missing parent fails as rsync (push)" { mkpath push; }
@test "--mkpath makes DST's parents; without it a missing parent fails as rsync (pull)" { mkpath pull; }

# A 1 MiB disk holding 700 KB that SRC no longer has, and SRC's new 700 KB:
# both fit only if the old go first.
small_disk() {
	mkdir -p "$T/src" "$1"
	mount -t tmpfs -o size=1m tmpfs "$1" ||
		skip "SKIPPED: cannot mount a 1 MiB tmpfs (needs root)"
	mkdir "$1/old"
	for i in 1 2 3 4 5 6 7; do head -c 100000 /dev/urandom >"$1/old/f$i"; done
	[ -e "$T/src/n7" ] ||
		for i in 1 2 3 4 5 6 7; do head -c 100000 /dev/urandom >"$T/src/n$i"; done
}

delete_before() {
	local mode=$1
	small_disk "$T/ref"
	rsync -a --delete-before "$T/src/" "$T/ref/"
	small_disk "$T/dst"
	run run_in "$mode" -a --delete-before -- "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	same "$T/src" "$T/dst"
	same "$T/ref" "$T/dst"
}
@test "--delete-before: the old go before the data, so a full disk takes the new (local)" { delete_before local; }
@test "--delete-before: the old go before the data, so a full disk takes the new (push)" { delete_before push; }
@test "--delete-before: the old go before the data, so a full disk takes the new (pull)" { delete_before pull; }

@test "--delete-after and --delete-during: after the data (the full disk fails, exit 11, nothing deleted)" {
	local when
	for when in --delete-after --delete-during --delete; do
		small_disk "$T/dst"
		run "$RDCP" -a "$when" "$T/src/" "$T/dst"
		echo "$when: $output"
		[ "$status" -eq 11 ]
		[[ "$output" == *"No space left on device"* ]]
		[ "$(ls "$T/dst/old" | wc -l)" -eq 7 ]
		umount "$T/dst"; rm -rf "$T/dst"
	done
	run "$RDCP" -a --delete-before --delete-after "$T/src/" "$T/dst"
	[ "$status" -eq 1 ]
	[[ "$output" == *"you may not combine multiple --delete-WHEN options"* ]]
}

mk_backup_src() {
	mkdir -p "$T/src/sub"
	echo v1 >"$T/src/a"; echo v1 >"$T/src/sub/b"; echo v1 >"$T/src/gone"
	head -c 300000 /dev/urandom >"$T/src/big"
	ln -s t1 "$T/src/ln"; echo same >"$T/src/same"; mkdir "$T/src/dir2file"
	echo in >"$T/src/dir2file/x"
}
# v2: a, sub/b, big and ln changed, gone deleted; with --backup-dir
# ($D2F set) dir2file a file now (with -b alone rsync cannot: its NAME~
# backups keep the directory from being removed, and so does rdcp)
change_backup_src() {
	echo v2 >"$T/src/a"; echo v2 >"$T/src/sub/b"; rm "$T/src/gone"
	head -c 300000 /dev/urandom >"$T/src/big"
	ln -sfn t2 "$T/src/ln"
	touch -d '2022-02-02' "$T/src/a" "$T/src/sub/b" "$T/src/big"
	[ -z "$D2F" ] || { rm -r "$T/src/dir2file"; echo f >"$T/src/dir2file"; }
}
# rsync's result in ref, rdcp's in dst; directory times aside (rsync does
# not set a directory's mtime back after making a backup in it; rdcp does)
backup_vs_rsync() {
	local mode=$1; shift
	mk_backup_src
	rsync -a "$T/src/" "$T/ref"
	run_in "$mode" -a -- "$T/src/" "$T/dst"
	change_backup_src
	rsync -a "$@" "$T/src/" "$T/ref"
	run run_in "$mode" -a "$@" -- "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$(rsync -anciHO --delete "$T/ref/" "$T/dst/")" ]
}

backup_suffix() {
	backup_vs_rsync "$1" -b --delete
	[ "$(cat "$T/dst/a~")" = v1 ] && [ "$(cat "$T/dst/sub/b~")" = v1 ]
	[ "$(cat "$T/dst/gone~")" = v1 ] && [ "$(readlink "$T/dst/ln~")" = t1 ]
	[ -z "$(rsync -anciHO --delete --exclude='*~' "$T/src/" "$T/dst/")" ]
	# again: the backups are replaced, and --delete leaves *~ alone (rsync's
	# protect rule)
	echo v3 >"$T/src/a"; touch -d '2023-03-03' "$T/src/a"
	rsync -a -b --delete "$T/src/" "$T/ref"
	run_in "$1" -a -b --delete -- "$T/src/" "$T/dst"
	[ "$(cat "$T/dst/a~")" = v2 ] && [ -e "$T/dst/gone~" ]
	[ -z "$(rsync -anciHO --delete "$T/ref/" "$T/dst/")" ]
}
@test "-b: what is replaced or deleted is kept as NAME~, as rsync (local)" { backup_suffix local; }
@test "-b: what is replaced or deleted is kept as NAME~, as rsync (push)" { backup_suffix push; }
@test "-b: what is replaced or deleted is kept as NAME~, as rsync (pull)" { backup_suffix pull; }

backup_dir() {
	D2F=1 backup_vs_rsync "$1" --delete --backup-dir=bk --suffix=.old
	[ "$(cat "$T/dst/bk/a.old")" = v1 ] && [ "$(cat "$T/dst/bk/sub/b.old")" = v1 ]
	[ "$(cat "$T/dst/bk/dir2file/x.old")" = in ] && [ -f "$T/dst/dir2file" ]
	[ "$(cat "$T/dst/bk/gone.old")" = v1 ] && [ ! -e "$T/dst/a.old" ]
	# an absolute --backup-dir outside DST, no suffix
	echo v3 >"$T/src/a"; touch -d '2023-03-03' "$T/src/a"
	run_in "$1" -a --backup-dir="$T/bk2" -- "$T/src/" "$T/dst"
	[ "$(cat "$T/bk2/a")" = v2 ] && [ "$(cat "$T/dst/a")" = v3 ]
	[ -z "$(ls -A "$T/bk2" | grep -v '^a$')" ]
}
@test "--backup-dir (relative to DST, kept from --delete), --suffix, as rsync (local)" { backup_dir local; }
@test "--backup-dir (relative to DST, kept from --delete), --suffix, as rsync (push)" { backup_dir push; }
@test "--backup-dir (relative to DST, kept from --delete), --suffix, as rsync (pull)" { backup_dir pull; }

@test "-b: an entry whose backup fails is not replaced (a file the sender has as a symlink): said once, exit 23; the next run backs it up" {
	mkdir -p "$T/src/sub" "$T/dst/sub" "$T/bd"
	echo target >"$T/src/sub/t"
	ln -s t "$T/src/sub/x"
	echo precious >"$T/dst/sub/x"
	echo target >"$T/dst/sub/t"
	touch -r "$T/src/sub/t" "$T/dst/sub/t"   # the same file: nothing to back up
	echo notadir >"$T/bd/sub"   # bd/sub/x cannot be made
	run "$RDCP" -a --sync -b --backup-dir="$T/bd" "$T/src/" "$T/dst/"
	echo "$output"
	[ "$status" -eq 23 ]
	[ "$(cat "$T/dst/sub/x")" = precious ] && [ ! -L "$T/dst/sub/x" ]
	[ "$(grep -c 'sub/x: cannot back up' <<<"$output")" -eq 1 ]
	rm "$T/bd/sub"
	"$RDCP" -a --sync -b --backup-dir="$T/bd" "$T/src/" "$T/dst/"
	[ -L "$T/dst/sub/x" ]
	[ "$(cat "$T/bd/sub/x")" = precious ]
}

@test "-b --delete: an entry whose backup fails is not deleted: said once, exit 23; the next run backs it up and deletes it" {
	mkdir -p "$T/src/sub" "$T/dst/sub" "$T/bd"
	echo target >"$T/src/sub/t"
	echo target >"$T/dst/sub/t"
	# the same file, mtime too (two writes a clock tick apart, on a loaded
	# machine, made t a file to send, whose backup failed as well)
	touch -r "$T/src/sub/t" "$T/dst/sub/t"
	echo precious >"$T/dst/sub/gone"
	echo notadir >"$T/bd/sub"   # bd/sub/gone cannot be made
	run "$RDCP" -a --sync --delete -b --backup-dir="$T/bd" "$T/src/" "$T/dst/"
	echo "$output"
	[ "$status" -eq 23 ]
	[ "$(cat "$T/dst/sub/gone")" = precious ]
	[ "$(grep -c 'sub/gone: cannot back up' <<<"$output")" -eq 1 ]
	# a re-run with the index as it left it still sees the file
	run "$RDCP" -a --sync --delete -b --backup-dir="$T/bd" "$T/src/" "$T/dst/"
	[ "$status" -eq 23 ]
	[ "$(cat "$T/dst/sub/gone")" = precious ]
	rm "$T/bd/sub"
	"$RDCP" -a --sync --delete -b --backup-dir="$T/bd" "$T/src/" "$T/dst/"
	[ ! -e "$T/dst/sub/gone" ]
	[ "$(cat "$T/bd/sub/gone")" = precious ]
}

@test "--suffix: empty without --backup-dir, or with a '/', refused as rsync" {
	mkdir "$T/src"
	run "$RDCP" -r -b --suffix= "$T/src/" "$T/dst"
	[ "$status" -eq 1 ] && [[ "$output" == *"--suffix cannot be empty without --backup-dir"* ]]
	run "$RDCP" -r -b --suffix=a/b "$T/src/" "$T/dst"
	[ "$status" -eq 1 ] && [[ "$output" == *"--suffix cannot contain slashes"* ]]
	[ ! -e "$T/dst" ]
}

# Two nightly snapshots: the second links what did not change from the
# first (same inode), and gets its own copy of what did; as rsync's.
link_dest() {
	local mode=$1; shift
	mkdir -p "$T/src/sub" "$T/snap" "$T/rsnap"
	echo same >"$T/src/same"; echo same >"$T/src/sub/same2"; : >"$T/src/empty"
	head -c 300000 /dev/urandom >"$T/src/big"
	echo old >"$T/src/changed"; echo old >"$T/src/mode"; chmod 644 "$T/src/mode"
	run_in "$mode" -a "$@" -- "$T/src/" "$T/snap/day1"
	rsync -a "$@" "$T/src/" "$T/rsnap/day1"
	echo new! >"$T/src/changed"; chmod 600 "$T/src/mode"; echo add >"$T/src/added"
	run run_in "$mode" -a "$@" --link-dest=../day1 -- "$T/src/" "$T/snap/day2"
	echo "$output"
	[ "$status" -eq 0 ]
	rsync -a "$@" --link-dest=../day1 "$T/src/" "$T/rsnap/day2"
	same "$T/src" "$T/snap/day2"
	local f i1 i2
	for f in same sub/same2 empty big; do
		i1=$(stat -c %i "$T/snap/day1/$f"); i2=$(stat -c %i "$T/snap/day2/$f")
		[ "$i1" = "$i2" ] || { echo "$f not linked"; return 1; }
	done
	for f in changed mode; do   # content, or a kept attribute, differs
		i1=$(stat -c %i "$T/snap/day1/$f"); i2=$(stat -c %i "$T/snap/day2/$f")
		[ "$i1" != "$i2" ] || { echo "$f linked"; return 1; }
	done
	[ "$(cat "$T/snap/day1/changed")" = old ]
	# the same files are links in rsync's snapshots
	diff <(cd "$T/rsnap/day2" && find . -type f -links 2 | sort) \
	     <(cd "$T/snap/day2" && find . -type f -links 2 | sort)
}
@test "--link-dest: nightly snapshots share unchanged files' inodes, as rsync's (local)" { link_dest local; }
@test "--link-dest: nightly snapshots share unchanged files' inodes, as rsync's (push)" { link_dest push; }
@test "--link-dest: nightly snapshots share unchanged files' inodes, as rsync's (pull)" { link_dest pull; }
@test "--link-dest with -c: content decides (mtime kept aside without -t)" {
	mkdir -p "$T/src"
	echo same >"$T/src/f"; echo diff >"$T/src/g"
	"$RDCP" -r "$T/src/" "$T/day1"
	echo DIFF >"$T/day1/g"
	run "$RDCP" -r -c --link-dest="$T/day1" "$T/src/" "$T/day2"
	[ "$status" -eq 0 ]
	[ "$(stat -c %i "$T/day1/f")" = "$(stat -c %i "$T/day2/f")" ]
	[ "$(stat -c %i "$T/day1/g")" != "$(stat -c %i "$T/day2/g")" ]
	[ "$(cat "$T/day2/g")" = diff ]
	rsync -r -c --link-dest="$T/day1" "$T/src/" "$T/rday2"
	[ "$(stat -c %h "$T/rday2/f")" -eq 3 ] && [ "$(stat -c %h "$T/rday2/g")" -eq 1 ]
}
@test "--link-dest: a DIR that does not exist is said and left out" {
	mkdir -p "$T/src"; echo x >"$T/src/f"
	run "$RDCP" -a --link-dest=../nothere "$T/src/" "$T/day2"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"--link-dest "*"nothere: No such file or directory (not used)"* ]]
	cmp "$T/src/f" "$T/day2/f"
}

# --bwlimit: a lower bound only, with a wide margin (8 MiB at 4 MiB/s is
# 2 s paced; a loaded machine may take longer, never shorter).
bwlimit() {
	mkdir -p "$T/src"
	head -c $((6 << 20)) /dev/urandom >"$T/src/big"
	for i in $(seq 32); do head -c 65536 /dev/urandom >"$T/src/s$i"; done   # 2 MiB archive
	local t0 t1
	t0=$(date +%s%N)
	run run_in "$1" -a --bwlimit=4M -- "$T/src/" "$T/dst"
	t1=$(date +%s%N)
	echo "$output; $(( (t1 - t0) / 1000000 )) ms"
	[ "$status" -eq 0 ]
	same "$T/src" "$T/dst"
	[ $(( (t1 - t0) / 1000000 )) -ge 1500 ]
}
@test "--bwlimit=4M: 8 MiB take at least 1.5 s (local)" { bwlimit local; }
@test "--bwlimit=4M: 8 MiB take at least 1.5 s (pull: the far side paces)" { bwlimit pull; }
@test "--bwlimit: rsync's syntax; a bad rate refused" {
	mkdir "$T/src"
	run "$RDCP" -r --bwlimit=4X "$T/src/" "$T/dst"
	[ "$status" -eq 1 ] && [[ "$output" == *"--bwlimit: expected a rate in KiB/s"*"got '4X'"* ]]
	[ ! -e "$T/dst" ]
	for r in 0 100 1.5M 4MB 4MiB 2g 512b; do "$RDCP" -r --bwlimit=$r "$T/src/" "$T/dst"; done
}

# --remove-source-files: what landed goes from SRC (files, symlinks; not
# directories), what DST already had goes too; as rsync's.
remove_source() {
	local mode=$1
	mkdir -p "$T/src/sub/deep" "$T/dst"
	echo a >"$T/src/a"; echo b >"$T/src/sub/b"; ln -s a "$T/src/ln"
	head -c 300000 /dev/urandom >"$T/src/sub/big"; echo u >"$T/src/unch"
	cp -a "$T/src/unch" "$T/dst/"
	cp -a "$T/src" "$T/rsrc"; cp -a "$T/dst" "$T/ref"
	rsync -a --remove-source-files "$T/rsrc/" "$T/ref/"
	cp -a "$T/src" "$T/orig"
	run run_in "$mode" -a --remove-source-files -- "$T/src/" "$T/dst"
	echo "$output"
	[ "$status" -eq 0 ]
	same "$T/orig" "$T/dst"
	same "$T/ref" "$T/dst"
	diff <(cd "$T/rsrc" && find . | sort) <(cd "$T/src" && find . | sort)
	[ -d "$T/src/sub/deep" ] && [ -z "$(find "$T/src" ! -type d)" ]
}
@test "--remove-source-files: what landed leaves SRC, directories stay, as rsync (local)" { remove_source local; }
@test "--remove-source-files: what landed leaves SRC, directories stay, as rsync (push)" { remove_source push; }
@test "--remove-source-files: what landed leaves SRC, directories stay, as rsync (pull)" { remove_source pull; }

# A file that changed after the scan is removed from SRC only once it
# landed as it is: big, rewritten at its size, goes again in a round of its
# own and then goes; changing, which grew, lands the part the scan saw and
# stays (its stat is not the one that was sent). Pulling, the same (the
# far sender lists big for the client's round).
@test "--remove-source-files: a file changed after the scan stays in SRC until it landed as it is" {
	mkdir -p "$T/src"
	echo keep >"$T/src/changing"; head -c 300000 /dev/urandom >"$T/src/big"; echo ok >"$T/src/ok"
	RDCP_TEST_PAUSE=$T/pause "$RDCP" -a --remove-source-files "$T/src/" "$T/dst" 2>"$T/err" &
	local pid=$! i
	for i in $(seq 500); do [ -e "$T/pause" ] && break; sleep 0.02; done
	echo "changed, longer" >"$T/src/changing"; head -c 300000 /dev/urandom >"$T/src/big"
	cp "$T/src/big" "$T/big.new"
	rm "$T/pause"
	local rc=0; wait $pid || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ -e "$T/src/changing" ] && [ ! -e "$T/src/big" ] && [ ! -e "$T/src/ok" ]
	cmp "$T/big.new" "$T/dst/big"
	[ "$(cat "$T/dst/ok")" = ok ]
	# pulling
	rm -rf "$T/src" "$T/dst" && mkdir -p "$T/src"
	echo keep >"$T/src/changing"; head -c 300000 /dev/urandom >"$T/src/big"; echo ok >"$T/src/ok"
	RDCP_TEST_PAUSE=$T/pause "$RDCP" -a --remove-source-files -e "$LRSH" --rdcp-path "$RDCP" \
		"localhost:$T/src/" "$T/dst" 2>"$T/err" &
	pid=$!
	for i in $(seq 500); do [ -e "$T/pause" ] && break; sleep 0.02; done
	echo "changed, longer" >"$T/src/changing"; head -c 300000 /dev/urandom >"$T/src/big"
	cp "$T/src/big" "$T/big.new"
	rm "$T/pause"
	rc=0; wait $pid || rc=$?
	cat "$T/err"
	[ "$rc" -eq 0 ]
	[ -e "$T/src/changing" ] && [ ! -e "$T/src/big" ] && [ ! -e "$T/src/ok" ]
	cmp "$T/big.new" "$T/dst/big"
	[ "$(cat "$T/dst/ok")" = ok ]
}

# A receiver that lies in its list of what landed (tests/lib/fakepeer.py):
# refused in one line, exit 12, and nothing it named is removed.
landed_lie() {
	local scenario=$1 text=$2 opt=${3---remove-source-files}
	mkdir -p "$T/src/sub"
	echo a >"$T/src/a"; echo b >"$T/src/sub/b"; echo c >"$T/src/c"
	run "$RDCP" -e "$BATS_TEST_DIRNAME/../lib/fakepeer-rsh $scenario" --sync $opt \
		"$T/src" host:dst
	echo "$output"
	[ "$status" -eq 12 ]
	[[ "$output" == *"$text"* ]]
	[ -d "$T/src/sub" ] && [ -e "$T/src/a" ] && [ -e "$T/src/c" ]
	# (only the twice-named entry's first naming was taken: DST had it)
	[ -e "$T/src/sub/b" ] || [ "$scenario" = landed-twice ]
}
@test "attack: a receiver says a directory landed (--remove-source-files)" {
	landed_lie landed-dir "the receiver says the directory '' landed (directories are not removed)"
}
@test "attack: a receiver says an entry landed that the file list does not have" {
	landed_lie landed-out-of-range "the receiver says entry 12 landed, of a file list of 5"
}
@test "attack: a receiver says a file landed twice" {
	landed_lie landed-twice "the receiver says entry 4 landed again or out of order"
}
@test "attack: a receiver says files landed without --remove-source-files" {
	landed_lie landed-unasked "which was not asked for (no --remove-source-files, or a dry run)" " "
}
@test "attack: a receiver says files landed in a dry run (-n --remove-source-files): nothing removed" {
	landed_lie landed-unasked "which was not asked for (no --remove-source-files, or a dry run)" \
		"-n --remove-source-files"
}
@test "attack: a sender's symlink where --backup-dir will be is not followed: nothing written outside DST" {
	mkdir -p "$T/src" "$T/outside"
	echo old >"$T/src/f"
	ln -s "$T/outside" "$T/src/bak"
	"$RDCP" -a "$T/src/" "$T/dst/"
	[ -L "$T/dst/bak" ]
	echo newer >"$T/src/f"; touch -d '2030-01-01' "$T/src/f"
	run "$RDCP" -a -b --backup-dir=bak "$T/src/" "$T/dst/"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"cannot open the backup directory"*"symlink on the way, not followed"* ]]
	[ -z "$(ls -A "$T/outside")" ]
	[ "$(cat "$T/dst/f")" = old ]   # not replaced without its backup
}
@test "attack: a sender's symlink where --link-dest points is not followed" {
	mkdir -p "$T/src" "$T/other"
	echo g >"$T/other/g"
	ln -s "$T/other" "$T/src/prev"
	"$RDCP" -a "$T/src/" "$T/dst/"   # plants dst/prev -> other
	cp -a "$T/other/g" "$T/src/g"    # a new file, just as other/g
	run "$RDCP" -a --link-dest=prev "$T/src/" "$T/dst/"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"/prev: Not a directory (not used)"* ]]
	[ "$(stat -c %i "$T/dst/g")" != "$(stat -c %i "$T/other/g")" ]
}

# exfat_disk DIR: a 64 MiB exFAT filesystem through FUSE (exfat-fuse) on a
# loop device: no O_TMPFILE, mtimes kept to the second, and an mtime set
# without its atime (UTIME_OMIT) dropped. The loop device is detached at
# once: it goes when the filesystem is unmounted (teardown does).
exfat_disk() {
	command -v mkfs.exfat >/dev/null && command -v mount.exfat-fuse >/dev/null ||
		skip "SKIPPED LOUDLY: exfat-fuse and exfatprogs missing (scripts/deps.sh installs them)"
	[ -c /dev/fuse ] || skip "SKIPPED LOUDLY: no /dev/fuse"
	truncate -s 64M "$T/exfat.img"
	mkfs.exfat "$T/exfat.img" >/dev/null
	local dev
	dev=$(losetup -f --show "$T/exfat.img") || skip "SKIPPED LOUDLY: no loop device (needs root)"
	mkdir -p "$1"
	if ! mount.exfat-fuse "$dev" "$1" 2>"$T/mount.err"; then
		cat "$T/mount.err"; losetup -d "$dev"
		skip "SKIPPED LOUDLY: cannot mount exFAT through FUSE"
	fi
	losetup -d "$dev"
}

# a tree whose times have nanoseconds: small files, a large one, a
# multi-chunk one, a directory
times_src() {
	mkdir -p "$T/src/sub"
	echo small >"$T/src/small"
	echo s2 >"$T/src/sub/s2"
	head -c 300000 /dev/urandom >"$T/src/big"
	head -c $((9 << 20)) /dev/urandom >"$T/src/huge"
	touch -d '2020-01-02 03:04:05.123456789' "$T/src/small" "$T/src/big" "$T/src/huge" \
		"$T/src/sub/s2" "$T/src/sub"
}

@test "exFAT over FUSE (no O_TMPFILE, whole seconds): mtimes kept, a re-run sends nothing" {
	exfat_disk "$T/mnt"
	times_src
	run "$RDCP" -a -i "$T/src/" "$T/mnt/d"
	echo "$output"
	[ "$status" -eq 0 ]
	local f
	for f in small big huge sub/s2 sub; do   # the second, as exFAT keeps it
		[ "$(stat -c %Y "$T/mnt/d/$f")" = "$(stat -c %Y "$T/src/$f")" ]
	done
	# again: nothing sent, no time differs (the modes exFAT cannot keep
	# are itemized each time, as rsync -a does on the same mount)
	run "$RDCP" -a -i "$T/src/" "$T/mnt/d"
	echo "$output"
	[ "$status" -eq 0 ]
	! echo "$output" | grep -E '^[<>]f|^[.<>cd][fdL]..t'
	rsync -a "$T/src/" "$T/mnt/r"
	diff <(rsync -ai "$T/src/" "$T/mnt/r" | awk '{print $1}' | sort | uniq -c) \
		<(echo "$output" | awk '{print $1}' | sort | uniq -c)
	run "$RDCP" -a --json "$T/src/" "$T/mnt/d"
	[ "$(echo "$output" | json_field bytes_sent)" -eq 0 ]
	# without modes (-rt): a re-run says nothing at all
	run "$RDCP" -rt -i "$T/src/" "$T/mnt/t"
	[ "$status" -eq 0 ]
	run "$RDCP" -rt -i "$T/src/" "$T/mnt/t"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "named temp files (no O_TMPFILE) on tmpfs: mtimes kept, a re-run says nothing" {
	mkdir -p "$T/dst"
	mount -t tmpfs -o size=64m tmpfs "$T/dst" || skip "SKIPPED LOUDLY: cannot mount a tmpfs (needs root)"
	times_src
	RDCP_TEST_NO_TMPFILE=1 run "$RDCP" -a -i "$T/src/" "$T/dst/d"
	[ "$status" -eq 0 ]
	same "$T/src" "$T/dst/d"
	RDCP_TEST_NO_TMPFILE=1 run "$RDCP" -a -i "$T/src/" "$T/dst/d"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}
