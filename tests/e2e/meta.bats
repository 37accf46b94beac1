#!/usr/bin/env bats
# Metadata beyond modes and times (issue 11): -X (xattrs), -A (POSIX ACLs),
# owners by name or --numeric-ids, --chown, --chmod. Where rsync has the
# feature, rsync and rdcp run on the same tree and what they made must
# agree, attribute for attribute (getfattr, getfacl) and entry for entry
# (`rsync -anciH`). Each sync test runs locally and through the local
# remote shell (push and pull), and checks that a second run changes
# nothing.
load helpers

setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-e2e-XXXXXX")
	export XDG_CACHE_HOME=$T/cache
	touch "$T/probe"
	if ! setfattr -n user.probe -v 1 "$T/probe" 2>/dev/null ||
	   ! setfacl -m u:0:r "$T/probe" 2>/dev/null; then
		skip "SKIPPED LOUDLY: $T's filesystem (or this machine) has no user xattrs or ACLs, or getfattr/setfacl are missing (apt-get install attr acl)"
	fi
}

as_root() {
	[ "$(id -u)" -eq 0 ] || skip "SKIPPED LOUDLY: needs root (owners, trusted.* and security.* xattrs, other users' groups)"
}

# every xattr (all namespaces this user sees) and ACL under DIR, by path
meta_of() {
	(cd "$1" && find . | LC_ALL=C sort | while IFS= read -r f; do
		getfattr -h -d -m - -- "$f" 2>/dev/null
		[ -L "$f" ] || getfacl -p -n -- "$f" 2>/dev/null
	done)
}

# same_meta REF GOT: the same entries and the same xattrs and ACLs
same_meta() {
	same "$1" "$2"
	meta_of "$1" >"$T/meta.ref"
	meta_of "$2" >"$T/meta.got"
	diff "$T/meta.ref" "$T/meta.got"
}

# the tree: xattrs of every size on files and directories (an empty
# value, a binary one, one of 3 KiB: ext4 keeps an inode's xattrs in one
# block; the 64 KiB bound is tests/unit/test_manifest.c's), access ACLs, a directory's default
# ACL, and as root trusted.* and security.* (on a symlink too)
mk_meta_tree() {
	local d=$1
	mkdir -p "$d/dir/sub" "$d/dflt"
	printf 'one\n' >"$d/f"
	printf 'two\n' >"$d/dir/g"
	head -c 100000 /dev/urandom >"$d/dir/big"
	printf 'plain\n' >"$d/plain"
	ln -s f "$d/link"
	setfattr -n user.a -v "alpha" "$d/f"
	setfattr -n user.empty -v "" "$d/f"
	setfattr -n user.bin -v 0x00ff10ee "$d/dir/g"
	setfattr -n user.large -v "$(head -c 3000 /dev/zero | tr '\0' x)" "$d/dir/big"
	setfattr -n user.dir -v "d" "$d/dir"
	setfattr -n user.root -v "r" "$d"                   # the root's own
	setfacl -m u:daemon:rx "$d"
	setfacl -m u:daemon:rw,g:adm:r "$d/dir/g"
	setfacl -m u:bin:rx "$d/dir/sub"
	setfacl -d -m u:daemon:rwx,g:adm:rx "$d/dflt"
	if [ "$(id -u)" -eq 0 ]; then
		setfattr -n trusted.t -v "T" "$d/f"
		setfattr -n security.s -v "S" "$d/dir"
		setfattr -h -n trusted.l -v "L" "$d/link"
	fi
}

# the itemized lines (-i) in FILE: what changed, rsync's YXcstpoguax
items() { grep -E '^([<>ch.][fdLDS]|\*deleting)' "$1" || true; }

# noop MODE FLAGS...: a second run of src into got changes nothing: no
# itemized line (a metadata update has one too), nothing sent or made
noop() {
	local mode=$1; shift
	sync_in "$mode" -i --stats "$@" "$T/src/" "$T/got/" >"$T/again.out" 2>"$T/again.err"
	cat "$T/again.out" "$T/again.err"
	[ -z "$(items "$T/again.out")" ]
	grep -qx 'Number of regular files transferred: 0' "$T/again.out"
	grep -qx 'Number of created files: 0' "$T/again.out"
}

# agree MODE: rsync -aAX and rdcp --sync -AX of src, then a second run
agree_aAX() {
	local mode=$1
	rm -rf "$T/ref" "$T/got"
	rsync -aAX "$T/src/" "$T/ref/"
	sync_in "$mode" --sync -AX "$T/src" "$T/got"
	same_meta "$T/ref" "$T/got"
	noop "$mode" --sync -AX
}

@test "rsync -aAX and rdcp --sync -AX: the same xattrs and ACLs (local)" {
	mk_meta_tree "$T/src"
	agree_aAX local
	grep -q 'user.large' "$T/meta.got"             # the checks saw something
	grep -q 'default:user:' "$T/meta.got"
	[ "$(getfattr --only-values -n user.root "$T/got")" = r ]
}

@test "rsync -aAX and rdcp --sync -AX: the same xattrs and ACLs (push)" {
	mk_meta_tree "$T/src"
	agree_aAX push
}

@test "rsync -aAX and rdcp --sync -AX: the same xattrs and ACLs (pull)" {
	mk_meta_tree "$T/src"
	agree_aAX pull
}

# change MODE: xattrs and ACLs changed, nothing else: no data, the
# attributes fixed, as rsync; then nothing
xattr_only_change() {
	local mode=$1
	mk_meta_tree "$T/src"
	sync_in "$mode" --sync -AX "$T/src" "$T/got"
	rsync -aAX "$T/src/" "$T/ref/"
	local ino; ino=$(stat -c %i "$T/got/f")
	settle
	setfattr -n user.a -v "ALPHA" "$T/src/f"               # changed
	setfattr -x user.empty "$T/src/f"                      # removed
	setfattr -n user.new -v "n" "$T/src/dir/big"           # added
	setfattr -n user.d2 -v "2" "$T/src/dir"                # a directory's
	setfacl -x u:daemon "$T/src/dir/g"                     # an ACL entry less
	setfacl -k "$T/src/dflt"                               # a default ACL gone
	rsync -aAXi "$T/src/" "$T/ref/" >"$T/rsync.items"
	sync_in "$mode" -i --stats --sync -AX "$T/src" "$T/got" >"$T/out" 2>"$T/err"
	cat "$T/out" "$T/err"
	echo "rsync:"; cat "$T/rsync.items"
	same_meta "$T/ref" "$T/got"
	grep -qx 'Number of regular files transferred: 0' "$T/out"   # no data
	[ "$(stat -c %i "$T/got/f")" = "$ino" ]                # not sent again
	# the letters as rsync's (files; directories are the itemizer's)
	grep -qx '.f........x f' "$T/out"
	grep -qx '.f........x dir/big' "$T/out"
	grep -qx "$(grep ' dir/g$' "$T/rsync.items")" "$T/out"
	noop "$mode" --sync -AX
}

@test "an xattr-only change: no data, the attribute fixed, then a no-op (local)" {
	xattr_only_change local
}

@test "an xattr-only change: no data, the attribute fixed, then a no-op (push)" {
	xattr_only_change push
}

@test "an xattr-only change: no data, the attribute fixed, then a no-op (pull)" {
	xattr_only_change pull
}

@test "default ACLs: a directory's made, changed and removed; files under a default ACL get the source's" {
	mkdir -p "$T/src/d" "$T/got/d" "$T/ref/d"
	printf 'x' >"$T/src/d/f"
	setfacl -d -m g:adm:rwx "$T/src/d"
	# DST's directory already has another default ACL: new files there
	# would inherit it; -A gives them the source's (none)
	setfacl -d -m u:daemon:rwx "$T/got/d" "$T/ref/d"
	rsync -aA "$T/src/" "$T/ref/"
	"$RDCP" -aA "$T/src/" "$T/got/"
	same_meta "$T/ref" "$T/got"
	getfacl -p "$T/got/d" | grep -q '^default:group:adm:rwx'
	! getfacl -p "$T/got/d" | grep -q 'default:user:daemon'
	! getfacl -p "$T/got/d/f" | grep -q 'user:daemon'
	settle
	setfacl -k "$T/src/d"
	rsync -aA "$T/src/" "$T/ref/"
	"$RDCP" -aA "$T/src/" "$T/got/"
	same_meta "$T/ref" "$T/got"
	! getfacl -p "$T/got/d" | grep -q '^default:'
}

@test "-A implies -p, as rsync" {
	mkdir -p "$T/src"
	printf 'x' >"$T/src/f"
	chmod 640 "$T/src/f"
	setfacl -m u:daemon:r "$T/src/f"
	(umask 077; rsync -rA "$T/src/" "$T/ref/"; "$RDCP" -rA "$T/src/" "$T/got/")
	meta_of "$T/ref" >"$T/meta.ref"
	meta_of "$T/got" >"$T/meta.got"
	diff "$T/meta.ref" "$T/meta.got"
	[ "$(stat -c %a "$T/got/f")" = "$(stat -c %a "$T/ref/f")" ]
	[ "$(stat -c %a "$T/got/f")" = 640 ]
}

@test "without -X and -A, DST's xattrs and ACLs are left alone" {
	mkdir -p "$T/src/d" "$T/got/d"
	printf 'same\n' >"$T/src/f"
	printf 'new\n' >"$T/src/d/changed"
	cp -a "$T/src/f" "$T/got/f"
	printf 'old!\n' >"$T/got/d/changed"
	setfattr -n user.keep -v 1 "$T/got/f"
	setfattr -n user.keepdir -v 1 "$T/got/d"
	setfacl -m u:daemon:r "$T/got/f"
	setfattr -n user.src -v 1 "$T/src/f"
	"$RDCP" --sync "$T/src" "$T/got"
	getfattr -n user.keep "$T/got/f"
	getfattr -n user.keepdir "$T/got/d"
	getfacl -p "$T/got/f" | grep -q 'user:daemon:r'
	! getfattr -n user.src "$T/got/f"
	# with -X, they are made the source's
	"$RDCP" --sync -X "$T/src" "$T/got"
	! getfattr -n user.keep "$T/got/f"
	getfattr -n user.src "$T/got/f"
	getfacl -p "$T/got/f" | grep -q 'user:daemon:r'   # ACLs are -A's
}

@test "as root, trusted.* and security.* of files, directories and symlinks cross; as a user, user.* only" {
	as_root
	mk_meta_tree "$T/src"
	"$RDCP" --sync -X "$T/src" "$T/got"
	[ "$(getfattr --only-values -n trusted.t "$T/got/f")" = T ]
	[ "$(getfattr --only-values -n security.s "$T/got/dir")" = S ]
	[ "$(getfattr -h --only-values -n trusted.l "$T/got/link")" = L ]
	# a user's run reads and writes user.* only: DST's trusted.* stays
	chown -R 4242:4242 "$T/src" "$T/got"
	chmod 755 "$T"
	setfattr -n trusted.mine -v M "$T/got/f"
	settle
	setfattr -n user.a -v "changed" "$T/src/f"
	setpriv --reuid=4242 --regid=4242 --clear-groups env XDG_CACHE_HOME="$T/ucache" \
		"$RDCP" --sync -X "$T/src" "$T/got"
	[ "$(getfattr --only-values -n user.a "$T/got/f")" = changed ]
	[ "$(getfattr --only-values -n trusted.mine "$T/got/f")" = M ]
}

# --- owners: by name (rsync's default) or by number ---

# passwd/group files in which the test user and group have the given ids
mk_ids() {   # mk_ids DIR UID
	mkdir -p "$1"
	cp /etc/passwd "$1/passwd"
	cp /etc/group "$1/group"
	echo "rdcpmeta:x:$2:$2::/nonexistent:/bin/false" >>"$1/passwd"
	echo "rdcpmeta:x:$2:" >>"$1/group"
	# the other side's id is taken by another name here
	echo "rdcpother:x:$(( $2 == 5601 ? 5602 : 5601 )):$(( $2 == 5601 ? 5602 : 5601 ))::/:/bin/false" >>"$1/passwd"
}

# A remote shell whose far side sees its own passwd and group files (a
# mount namespace), and a wrapper that runs a command in another: two
# "machines" that know one user by two uids, without touching /etc.
mk_ns_rsh() {
	cat >"$T/ns-run" <<-'EOF'
	#!/bin/sh
	# ns-run IDS_DIR CMD...: CMD seeing IDS_DIR/passwd and IDS_DIR/group
	ids=$1; shift
	exec unshare -m sh -c 'mount --bind "$0/passwd" /etc/passwd &&
		mount --bind "$0/group" /etc/group && exec "$@"' "$ids" "$@"
	EOF
	printf '#!/bin/sh\nshift\nexec %s %s "$@"\n' "$T/ns-run" "$T/ids-b" >"$T/ns-rsh"
	chmod +x "$T/ns-run" "$T/ns-rsh"
}

@test "owners by name unless --numeric-ids (push and pull, as rsync)" {
	as_root
	command -v unshare >/dev/null || skip "SKIPPED LOUDLY: unshare (util-linux) is missing"
	mk_ids "$T/ids-a" 5601   # this side: rdcpmeta is 5601
	mk_ids "$T/ids-b" 5602   # the far side: rdcpmeta is 5602
	mk_ns_rsh
	mkdir -p "$T/src/d"
	printf 'x' >"$T/src/f"
	printf 'y' >"$T/src/d/g"
	printf 'z' >"$T/src/unnamed"
	chown 5601:5601 "$T/src/f" "$T/src/d"
	chown 7777:7777 "$T/src/unnamed"            # no name: the number crosses
	setfacl -m u:5601:r,g:5601:w "$T/src/d/g"   # ACL entries are mapped too
	local A=("$T/ns-run" "$T/ids-a")
	for how in names numeric; do
		local opt=(); [ $how = numeric ] && opt=(--numeric-ids)
		"${A[@]}" "$RDCP" -e "$T/ns-rsh" --rdcp-path "$RDCP" -aA "${opt[@]}" \
			"$T/src/" "localhost:$T/push-$how/"
		"${A[@]}" rsync -e "$T/ns-rsh" -aA "${opt[@]}" "$T/src/" "localhost:$T/rsync-$how/"
		"${A[@]}" "$RDCP" -e "$T/ns-rsh" --rdcp-path "$RDCP" -aA "${opt[@]}" \
			"localhost:$T/push-$how/" "$T/pull-$how/"
	done
	[ "$(stat -c %u:%g "$T/push-names/f")" = 5602:5602 ]
	[ "$(stat -c %u:%g "$T/push-numeric/f")" = 5601:5601 ]
	[ "$(stat -c %u "$T/push-names/unnamed")" = 7777 ]
	getfacl -n -p "$T/push-names/d/g" | grep -q '^user:5602:r--'
	getfacl -n -p "$T/push-numeric/d/g" | grep -q '^user:5601:r--'
	for how in names numeric; do
		same_meta "$T/rsync-$how" "$T/push-$how"
	done
	# pulled back by name: 5602 on the far side is rdcpmeta, 5601 here
	same_meta "$T/src" "$T/pull-names"
	[ "$(stat -c %u:%g "$T/pull-numeric/f")" = 5601:5601 ]
	# a second run is a no-op
	"${A[@]}" "$RDCP" -e "$T/ns-rsh" --rdcp-path "$RDCP" -i -aA "$T/src/" \
		"localhost:$T/push-names/" >"$T/out" 2>"$T/err"
	cat "$T/out" "$T/err"
	[ -z "$(items "$T/out")" ]
}

@test "a non-root receiver sets the groups it is in, leaves the others (as rsync)" {
	as_root
	mkdir -p "$T/src" "$T/got" "$T/ref"
	for g in 5611 5612 5613; do printf '%s' $g >"$T/src/f$g"; chown 5610:$g "$T/src/f$g"; done
	chown 5610:5610 "$T/got" "$T/ref" "$T/src"
	chmod 755 "$T"
	local U=(setpriv --reuid=5610 --regid=5610 --groups=5611,5612 env XDG_CACHE_HOME="$T/ucache")
	"${U[@]}" rsync -a "$T/src/" "$T/ref/"
	"${U[@]}" "$RDCP" -a "$T/src/" "$T/got/"
	same "$T/ref" "$T/got"
	[ "$(stat -c %g "$T/got/f5611")" = 5611 ]
	[ "$(stat -c %g "$T/got/f5613")" = 5610 ]   # not ours: the user's own
	"${U[@]}" "$RDCP" -ai "$T/src/" "$T/got/" >"$T/out" 2>"$T/err"
	cat "$T/out" "$T/err"
	[ -z "$(items "$T/out")" ]
}

# New files are made unnamed with their permission bits, and owner and mode
# are set only where the new inode differs (sync/recv/land.c): each way it can
# differ, against rsync -aH. The second round adds files to DST's setgid
# directory, where a new inode takes the directory's group, not ours.
new_inode_meta() {
	local mode=$1
	mkdir -p "$T/src/gdir"
	for f in suid sgid sticky none wide plain; do printf '%s' $f >"$T/src/$f"; done
	chown 5610:5611 "$T/src/suid"; chmod 4755 "$T/src/suid"   # (a chown clears it)
	chown 0:5612 "$T/src/sgid"; chmod 2755 "$T/src/sgid"
	chmod 1644 "$T/src/sticky"
	chmod 0000 "$T/src/none"
	chmod 0666 "$T/src/wide"
	chown 5610:5610 "$T/src/plain"
	chgrp 5613 "$T/src/gdir"; chmod 2775 "$T/src/gdir"
	printf 'f' >"$T/src/gdir/f"; chmod 640 "$T/src/gdir/f"
	ln -s plain "$T/src/link"
	ln "$T/src/plain" "$T/src/hard"
	rm -rf "$T/ref" "$T/got"
	(umask 022; rsync -aH "$T/src/" "$T/ref/"; sync_in "$mode" --sync -aH "$T/src/" "$T/got/")
	same "$T/ref" "$T/got"
	[ "$(stat -c %a:%u:%g "$T/got/suid")" = 4755:5610:5611 ]
	[ "$(stat -c %a "$T/got/wide")" = 666 ]
	[ "$(stat -c %a "$T/got/none")" = 0 ]
	[ "$(stat -c %i "$T/got/plain")" = "$(stat -c %i "$T/got/hard")" ]
	[ "$(readlink "$T/got/link")" = plain ]
	# round 2: new entries into the setgid directory DST now has
	printf 'g' >"$T/src/gdir/g"; chown 0:0 "$T/src/gdir/g"; chmod 4710 "$T/src/gdir/g"
	printf 'h' >"$T/src/gdir/h"; chown 5610:0 "$T/src/gdir/h"
	ln -s ../plain "$T/src/gdir/l"
	(umask 022; rsync -aH "$T/src/" "$T/ref/"; sync_in "$mode" --sync -aH "$T/src/" "$T/got/")
	same "$T/ref" "$T/got"
	[ "$(stat -c %a:%g "$T/got/gdir/g")" = 4710:0 ]   # not the directory's 5613
	[ "$(stat -c %u:%g "$T/got/gdir/h")" = 5610:0 ]
	! ls -A "$T/got" "$T/got/gdir" | grep -q '^\.rdcp-tmp-'
	noop "$mode" --sync -aH
}

@test "new files' modes and owners: setuid, setgid, sticky, 0000, 0666 past the umask, another owner, a setgid directory, links made in place (local)" {
	as_root
	new_inode_meta local
}

@test "new files' modes and owners: setuid, setgid, sticky, 0000, 0666 past the umask, another owner, a setgid directory, links made in place (push)" {
	as_root
	new_inode_meta push
}

# --- --chown and --chmod ---

chown_chmod() {
	local mode=$1
	mk_meta_tree "$T/src"
	chmod 600 "$T/src/plain"
	chmod 751 "$T/src/dir/sub"
	for args in "--chmod=D2750,F640" "--chmod=Fu+x,g=rX,o-rwx --chown=daemon:adm" \
	            "--chmod=a+rX,og-w --chown=:bin" "--chown=bin"; do
		rm -rf "$T/ref" "$T/got"
		# shellcheck disable=SC2086
		rsync -a $args "$T/src/" "$T/ref/"
		# shellcheck disable=SC2086
		sync_in "$mode" -a $args "$T/src/" "$T/got/"
		echo "$args"
		same "$T/ref" "$T/got"
		# shellcheck disable=SC2086
		noop "$mode" -a $args
	done
	[ "$(stat -c %U:%G "$T/got/f")" = bin:root ]
}

@test "--chown and --chmod as rsync, then a no-op (local)" {
	as_root
	chown_chmod local
}

@test "--chown and --chmod as rsync, then a no-op (push)" {
	as_root
	chown_chmod push
}

@test "--chmod and --chown that rsync refuses are refused (exit 1)" {
	mkdir -p "$T/src"
	for bad in "--chmod=u+r-w" "--chmod=" "--chmod=u644" "--chmod=DF+x" "--chmod=17777" \
	           "--chmod=a+r," "--chown=:" "--chown=a:b:c"; do
		run "$RDCP" -a "$bad" "$T/src/" "$T/got/"
		echo "$bad -> $status: $output"
		[ "$status" -eq 1 ]
		[ "${#lines[@]}" -eq 1 ]
	done
	run "$RDCP" -a --chown=no-such-user-here "$T/src/" "$T/got/"
	[ "$status" -eq 1 ]
	[[ $output == *"no user 'no-such-user-here' on the receiving side"* ]]
}

@test "--link-dest with -X: a file whose xattrs differ is copied, not linked (the old snapshot keeps its own)" {
	mkdir -p "$T/src"
	printf 'same\n' >"$T/src/f"
	printf 'same too\n' >"$T/src/g"
	setfattr -n user.a -v 1 "$T/src/f" "$T/src/g"
	"$RDCP" -aX "$T/src/" "$T/snap1/"
	rsync -aX "$T/src/" "$T/rsnap1/"
	settle
	setfattr -n user.a -v 2 "$T/src/g"
	"$RDCP" -aX --link-dest=../snap1 "$T/src/" "$T/snap2/"
	rsync -aX --link-dest=../rsnap1 "$T/src/" "$T/rsnap2/"
	[ "$(stat -c %i "$T/snap2/f")" = "$(stat -c %i "$T/snap1/f")" ]    # linked
	[ "$(stat -c %i "$T/snap2/g")" != "$(stat -c %i "$T/snap1/g")" ]   # copied
	[ "$(getfattr --only-values -n user.a "$T/snap1/g")" = 1 ]
	[ "$(getfattr --only-values -n user.a "$T/snap2/g")" = 2 ]
	# as rsync: the same links
	[ "$(stat -c %h "$T/snap2/f")" = "$(stat -c %h "$T/rsnap2/f")" ]
	[ "$(stat -c %h "$T/snap2/g")" = "$(stat -c %h "$T/rsnap2/g")" ]
	same_meta "$T/rsnap2" "$T/snap2"
}
