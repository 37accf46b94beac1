#!/usr/bin/env bats
# A hostile or broken far side (issue "a hostile or broken peer gets
# silence"). tests/lib/fakepeer.py plays the remote rdcp: a sender or a
# receiver that knows the run's key but lies, or a remote shell that prints
# a banner. Each test is named after its attack and checks: the exit code,
# exactly one line on stderr naming the side and what was wrong, DST's
# files unchanged, and nothing written beside DST.
load helpers
FAKE=$BATS_TEST_DIRNAME/../lib/fakepeer-rsh

setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rdcp-e2e-XXXXXX")
	export XDG_CACHE_HOME=$T/cache FAKEPEER_LOG=$T/fake.log
	W=$T/w   # DST and its neighbours
	mkdir -p "$W/dst/sub" "$T/src/d"
	echo keep >"$W/dst/keep"
	echo old >"$W/dst/sub/old"
	# what the fake sender's "b" is (size and mtime): not asked for
	head -c 100000 /dev/zero >"$W/dst/b"
	touch -d @1000000000 "$W/dst/b"
	echo "next to DST" >"$W/beside"
	# the source of the push tests
	echo hello >"$T/src/f"
	head -c 200000 /dev/urandom >"$T/src/d/big"
	snapshot >"$T/before"
}

# every file under DST and SRC with its checksum, and every path beside DST
snapshot() {
	(cd "$W/dst" && find . -type f -exec sha256sum {} + | sort -k2)
	(cd "$T/src" && find . -type f -exec sha256sum {} + | sort -k2)
	(cd "$W" && find . -path ./dst -prune -o -print | sort && sha256sum beside)
}

# attack MODE SCENARIO CODE TEXT: run rdcp against the fake playing
# SCENARIO (pull: it sends; push: it receives); check what came of it.
attack() {
	local mode=$1 scenario=$2 code=$3 text=$4 rc=0
	if [ "$mode" = pull ]; then
		"$RDCP" ${ATTACK_ARGS:-} -e "$FAKE $scenario" --sync host:src "$W/dst" >"$T/out" \
			2>"$T/err" || rc=$?
	else
		"$RDCP" -e "$FAKE $scenario" --sync "$T/src" host:dst >"$T/out" 2>"$T/err" || rc=$?
	fi
	echo "exit $rc; stderr:"; cat "$T/err"
	echo "fake peer's trace:"; cat "$T/fake.log" 2>/dev/null || true
	! grep -q Traceback "$T/fake.log"            # the fake did what it meant to
	[ "$rc" -eq "$code" ]
	[ "$(wc -l <"$T/err")" -eq 1 ]               # one line, and it says what
	grep -qF -- "$text" "$T/err"
	# DST's files as they were and no others (but the sender's new files
	# a, c, s, t, which may have landed whole and verified), SRC as it was,
	# nothing new or changed beside DST
	snapshot | grep -v '  \./[acst]$' >"$T/after"
	diff "$T/before" "$T/after"
}

# --- a sender's file list (manifest) that breaks the rules ---

@test "attack: a file list without the hash of a large file" {
	attack pull manifest-nohash-large 12 "the sender's file list has no hashes of files under 128 KiB (only small files may go without)"
}

@test "attack: a file list with an xattr value over 64 KiB" {
	attack pull manifest-xattr-oversized 12 "the sender's file list has an xattr value over 64 KiB: 'a'"
}

@test "attack: a file list with a trusted.* xattr from a sender that read user.* only" {
	attack pull manifest-xattr-namespace 12 "the sender's file list has an xattr of a namespace it does not send: 'a'"
}

@test "attack: a file list entry '../x', outside the tree" {
	attack pull manifest-dotdot 12 "rdcp: the sender's file list has an entry outside the tree: '../x'"
}
@test "attack: a file list entry with an absolute path" {
	attack pull manifest-absolute 12 "the sender's file list has an absolute path: '/tmp/x'"
}
@test "attack: a file list with the same entry twice" {
	attack pull manifest-duplicate 12 "the sender's file list has an entry twice: 'a'"
}
@test "attack: an unsorted file list" {
	attack pull manifest-unsorted 12 "the sender's file list is not sorted (an entry after a greater one): 'a'"
}
@test "attack: a file list claiming an absurd number of entries" {
	attack pull manifest-absurd-count 12 "the sender's file list claims 4611686018427387904 entries in 101 bytes"
}
# Issue 36, item 1: a size whose chunk count wrapped in 32 bits made the
# receiver allocate 2 chunks' worth and then write at chunk 100000 (SIGSEGV,
# or silent heap corruption); 2^60 bytes counted as one chunk and landed a
# 4 MiB file with exit 0.
@test "attack: a file of 2^54 + 8 MiB whose chunk count wraps, then chunk 100000" {
	attack pull manifest-size-wraps 12 "the sender's file list has a file over rdcp's limit of 16 PiB (18014398517870592 bytes): 'a'"
	[ ! -e "$W/dst/a" ]
}
@test "attack: a file of exactly 2^60 bytes, sent as one 4 MiB chunk" {
	attack pull manifest-size-2p60 12 "the sender's file list has a file over rdcp's limit of 16 PiB (1152921504606846976 bytes): 'a'"
	[ ! -e "$W/dst/a" ]
}

@test "attack: a file list with junk after its last entry" {
	attack pull manifest-trailing-junk 12 "the sender's file list has 4 bytes after its last entry"
}
@test "attack: a file list entry under a symlink of the list" {
	attack pull manifest-symlink-parent 12 "the sender's file list has an entry under a symlink: 'l/x'"
}
@test "attack: a file list entry under a file of the list" {
	attack pull manifest-parent-not-dir 12 "the sender's file list has an entry under something that is not a directory: 'f/x'"
}
@test "attack: a file list entry whose parent is not in the list" {
	attack pull manifest-parent-missing 12 "the sender's file list has an entry whose parent directory it does not have: 'd/x'"
}
@test "attack: a hard-link group pointing to a later entry" {
	attack pull manifest-hardlink-forward 12 "the sender's file list has a hard link to a later entry (3): 'a'"
}
@test "attack: a hard link to an entry that leads no group" {
	attack pull manifest-hardlink-not-leader 12 "the sender's file list has a hard link to an entry that does not lead a group (2): 'b'"
}

# --- READY: the name the sender sends ---

@test "attack: READY naming '..'" {
	attack pull ready-dotdot 12 "the sender's top name is not one plain name: '..'"
}
@test "attack: READY naming 'a/b'" {
	attack pull ready-slash 12 "the sender's top name is not one plain name: 'a/b'"
}
@test "attack: READY saying it names an entry, with an empty name" {
	attack pull ready-empty-named 12 "the sender's READY says it sends one entry but names none"
}
@test "attack: READY with a name over 255 bytes" {
	attack pull ready-overlong 12 "the sender's top name is over 255 bytes: 'xxxx"
}
@test "attack: READY of a kind that does not exist (3)" {
	attack pull ready-kind-3 12 "the sender's READY has flags out of range"
}
@test "attack: READY of a --sync mirror naming '..'" {
	attack pull ready-mirror-dotdot 12 "the sender's top name is not one plain name: '..'"
}
@test "attack: READY of a --sync mirror naming nothing" {
	attack pull ready-mirror-empty 12 "the sender's READY says it sends one entry but names none"
}
@test "attack: READY whose name length is longer than the message" {
	attack pull ready-length-lies 12 "the sender's READY is malformed (5 bytes)"
}

# --- a remote shell that is not clean (rsync: "is your shell clean?", exit 2) ---

@test "a remote shell that prints a banner on stdout (pull): rsync's hint, exit 2" {
	attack pull banner 2 "rdcp: protocol error: the remote shell printed something before rdcp started (is your shell clean? e.g. a banner or echo in .bashrc): 'Welcome to fakehost!\\n\\e[1mHave a nice day\\n'"
}
@test "a remote shell that prints a banner on stdout (push): rsync's hint, exit 2" {
	attack push banner 2 "(is your shell clean? e.g. a banner or echo in .bashrc): 'Welcome to fakehost!\\n\\e[1mHave a nice day\\n'"
}

# --- a sender that knows the key and lies in the data session ---

@test "attack: a chunk at an offset past the end of its file" {
	attack pull chunk-past-end 12 "the sender sent a chunk of 'a' at offset 33554432, past its end"
}
@test "attack: a message longer than the receiver's buffers" {
	attack pull chunk-len-past-buffer 12 "the sender's data connection broke the protocol (a message over 4 MiB"
}
@test "attack: a chunk whose length is not the chunk's" {
	attack pull chunk-len-not-chunk 12 "the sender sent chunk 0 of 'a' with 5000 bytes, not 100000"
}
@test "attack: a chunk for a file id out of range" {
	attack pull chunk-id-out-of-range 12 "the sender sent data for file id 1000, which its file list does not have"
}
@test "attack: a chunk of a file that was not asked for" {
	attack pull chunk-not-requested 12 "the sender sent a chunk of 'b', which was not asked for"
}
@test "attack: the same chunk of a file twice" {
	attack pull chunk-twice 12 "the sender sent chunk 0 of 'a' twice"
	cmp <(printf 'a-content.%.0s' $(seq 10000)) "$W/dst/a"   # the first, verified
}
@test "attack: a chunk by blocks that was not asked for by blocks" {
	attack pull blocks-unasked 12 "the sender sent chunk 0 of 'a' by blocks, which was not asked for"
}
@test "attack: a sparse message to a receiver without -S" {
	attack pull sparse-without-S 12 "the sender sent chunk 0 of 'a' as a message of unknown kind 2"
}
@test "attack: a sparse message with a block past the chunk's end (-S)" {
	ATTACK_ARGS=-S attack pull sparse-mask-past 12 "the sender sent chunk 0 of 'a' as a sparse message whose blocks do not add up (65544 bytes)"
}
@test "attack: a sparse message shorter than its mask says (-S)" {
	ATTACK_ARGS=-S attack pull sparse-bad-len 12 "the sender sent chunk 0 of 'a' as a sparse message whose blocks do not add up (1008 bytes)"
}
@test "attack: a sparse message whose zeros do not verify: the file is left as it was, exit 23 (-S)" {
	ATTACK_ARGS=-S attack pull sparse-bad-hash 23 "rdcp: a: chunk 0 does not match the sender's hash"
	[ ! -e "$W/dst/a" ]
}
@test "attack: a chunk whose hash does not match: the file is left as it was, exit 23" {
	attack pull chunk-bad-hash 23 "rdcp: a: chunk 0 does not match the sender's hash"
	[ ! -e "$W/dst/a" ]
	[ -f "$W/dst/c" ] && [ -f "$W/dst/s" ] && [ -f "$W/dst/t" ]   # the rest came
}
@test "attack: a chunk sent as read with a tag made without the key: refused, exit 23" {
	attack pull asread-forged-tag 23 "rdcp: a: chunk 0 does not match the tag it came with (damaged or altered in transit)"
	[ ! -e "$W/dst/a" ]
	[ -f "$W/dst/c" ] && [ -f "$W/dst/s" ] && [ -f "$W/dst/t" ]   # the rest came
}
@test "attack: a hard link's leader sent as read (its links would keep the list's hash): exit 12" {
	ATTACK_ARGS=-H attack pull asread-hardlink 12 "the sender sent chunk 0 of 'a', a hard link, as read"
	[ ! -e "$W/dst/a" ]
}
@test "attack: a chunk sent as read a byte short of its tag: exit 12" {
	attack pull asread-short 12 "the sender sent chunk 0 of 'a' as read with 100015 bytes, not 100016"
	[ ! -e "$W/dst/a" ]
}
# Pulling, the sender lists after SENT the files it will send again in the
# client's next round (CTL_RETRY); a list that lies is refused.
@test "attack: a pulled sender's list to send again names a directory" {
	attack pull retry-list-not-file 12 "the sender lists entry 0 to send again, which is not a file of its list, or not in order"
}
@test "attack: a pulled sender's list to send again names an entry out of range" {
	attack pull retry-list-out-of-range 12 "the sender lists entry 99 to send again"
}
@test "attack: a pulled sender's list to send again out of order" {
	attack pull retry-list-unordered 12 "the sender lists entry 1 to send again"
}
@test "attack: a pulled sender lists more files to send again than it did not send" {
	attack pull retry-list-more-than-unsent 12 "the sender's report after the data is malformed (type 14, 32 bytes)"
}
@test "attack: a pulled sender's list to send again is longer than it said" {
	attack pull retry-list-longer 12 "the sender's list of files to send again is malformed"
}
@test "attack: a pulled sender names a directory as sent as read" {
	attack pull asread-list-not-file 12 "the sender lists entry 0 sent as read, which is not a file of its list, or not in order"
}
@test "attack: a pulled sender says it sent more files as read than were planned" {
	attack pull asread-list-more-than-planned 12 "the sender says it sent 9 files as read, of 4 planned"
}
@test "attack: an archive entry of an absurd size" {
	attack pull archive-absurd-size 12 "the sender's archive has an entry of 1099511627776 bytes for file 4"
}
@test "attack: an archive entry for a large file" {
	attack pull archive-large-file 12 "the sender's archive has an entry for the large file 'c'"
}
@test "attack: the same archive entry twice" {
	attack pull archive-twice 12 "the sender's archive has 's' twice"
}
@test "attack: a truncated archive" {
	attack pull archive-truncated 12 "the sender's archive of small files is damaged: Truncated tar archive"
}
@test "attack: an archive entry for a file that was not asked for" {
	attack pull archive-not-requested 12 "the sender's archive has an entry for 'b', which was not asked for"
}
@test "attack: an archive entry named by a path, not an index" {
	attack pull archive-bad-name 12 "the sender's archive has an entry that is not named by a file index and tag: '../../x'"
}
@test "attack: an archive entry named by its index without the tag of its data" {
	attack pull archive-no-hash 12 "the sender's archive has an entry that is not named by a file index and tag: '4'"
}
@test "attack: a small file whose data does not match the tag it came with: left as it was, exit 23" {
	attack pull archive-bad-hash 23 "rdcp: t: does not match the tag it came with (damaged or altered in transit)"
	[ ! -e "$W/dst/t" ]
	[ "$(cat "$W/dst/s")" = "$(printf 's%.0s' $(seq 100))" ]   # the rest came
	[ -f "$W/dst/a" ] && [ -f "$W/dst/c" ]
}
@test "attack: on the data path, a small file rewritten with a tag made without the run's key: left as it was, exit 23" {
	attack pull archive-forged-tag 23 "rdcp: t: does not match the tag it came with (damaged or altered in transit)"
	[ ! -e "$W/dst/t" ]
	[ -f "$W/dst/s" ]
}
@test "attack: a small file whose data and name agree but not the manifest's hash: exit 23" {
	attack pull archive-lied-hash 23 "rdcp: t: does not match the sender's hash"
	[ ! -e "$W/dst/t" ]
	[ -f "$W/dst/s" ]
}

# --- a receiver that lies ---

@test "attack: a plan with an index out of range" {
	attack push plan-out-of-range 12 "the receiver's plan asks for entry 1004 of a file list of 4"
}
@test "attack: a plan asking for a directory" {
	attack push plan-not-a-file 12 "the receiver's plan asks for entry 0 (''), which is not a regular file"
}
@test "attack: a plan asking for a file twice" {
	attack push plan-twice 12 "the receiver's plan asks for entry 2 again or out of order"
}
# --rounds: a receiver may ask for files to be sent again (RETRY), only
# files of the list, each once, and only when the client offered rounds
@test "attack: a RETRY for a directory" {
	attack push retry-dir 12 "the receiver asks for entry 0 again, which is not a file of the list, or not in order"
}
@test "attack: a RETRY with an index out of range" {
	attack push retry-out-of-range 12 "the receiver asks for entry 11 again, which is not a file of the list, or not in order"
}
@test "attack: a RETRY naming a file twice" {
	attack push retry-twice 12 "not a file of the list, or not in order"
}
@test "attack: a RETRY when no rounds were offered (SRC sent by name)" {
	local rc=0
	"$RDCP" -e "$FAKE retry-unoffered" -r "$T/src" host:dst >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/err"
	! grep -q Traceback "$T/fake.log"
	[ "$rc" -eq 12 ]
	grep -qF "the receiver asked to be sent files again, which was not offered" "$T/err"
}
@test "attack: a chunk list for a file that was not planned" {
	attack push chunks-unplanned 12 "the receiver's list of chunks to send names a file that was not planned"
}
@test "attack: a chunk list for a small file" {
	attack push chunks-small 12 "the receiver's list of chunks to send names a small file"
}
@test "attack: a chunk list giving a file twice" {
	attack push chunks-twice 12 "the receiver's list of chunks to send describes a file twice"
}
@test "attack: a chunk list with an unknown kind" {
	attack push chunks-bad-kind 12 "the receiver's list of chunks to send has an unknown chunk kind"
}
@test "attack: a chunk list longer than it says" {
	attack push chunks-overlong 12 "the receiver's list of chunks to send has a length that does not match"
}
@test "attack: a chunk list that never ends" {
	attack push chunks-missing-end 12 "the receiver's list of chunks to send is missing"
}
@test "attack: a data-connection message with an address over 255 bytes" {
	attack push data-overlong-addr 12 "the receiver's data-connection message has an address over 255 bytes"
}
@test "attack: a data-connection message with port 0" {
	attack push data-port-zero 12 "the receiver's data-connection message has port 0"
}
@test "attack: a result with an exit code over 255 (would exit 0)" {
	attack push done-bad-code 12 "the receiver's result has an exit code over 255 (256)"
}

# --- text a peer sends to be printed, and the server's side of HELLO ---

@test "attack: an ERROR whose text holds terminal escapes: printed escaped" {
	attack pull error-escapes 23 "rdcp: \\033]0;pwned\\007 no such file"
	! grep -q $'\033' "$T/err"
}
@test "attack: itemized lines holding terminal escapes: printed escaped" {
	local rc=0
	"$RDCP" -e "$FAKE log-escapes" --sync "$T/src" host:dst >"$T/out" 2>"$T/err" || rc=$?
	cat "$T/out" "$T/err"
	[ "$rc" -eq 0 ]
	[ "$(cat "$T/out")" = '\033[2J>f+++++++++ f' ]
}

# hello VERSION [OPTION...]: a client's HELLO frame (receiver role, path "dst")
hello() {
	python3 -c 'import struct,sys
s = lambda x: struct.pack(">H", len(x.encode())) + x.encode()
p = struct.pack(">IBB", 0x52444353, int(sys.argv[1]), 2) + s("dst") + s("")
p += struct.pack(">H", len(sys.argv) - 2) + b"".join(s(a) for a in sys.argv[2:])
sys.stdout.buffer.write(struct.pack(">IB", len(p), 1) + p)' "$@"
}
# the ERROR frame the server answered: "CODE TEXT" (after its first word,
# a NOOP, docs/protocol.md)
error_of() {
	python3 -c 'import struct,sys
b = sys.stdin.buffer.read()
n, t = struct.unpack(">IB", b[:5])
while t == 15:
    b = b[5 + n:]
    n, t = struct.unpack(">IB", b[:5])
assert t == 3, t
print(struct.unpack(">I", b[5:9])[0], b[9:5 + n].decode())'
}

@test "attack: a client's hello with an option not for the server (--rsh): the server says why, exit 12" {
	local rc=0
	hello 11 --recursive '--rsh=touch /tmp/pwned' | "$RDCP" --server >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" -eq 12 ]
	[ "$(error_of <"$T/out")" = "12 the server refused the hello: it has an option that is not for the server: '--rsh=touch /tmp/pwned'" ]
	[ ! -s "$T/err" ]   # the client is the one to print it
	hello 11 --no-such-option | "$RDCP" --server >"$T/out" 2>"$T/err" || rc=$?
	[[ "$(error_of <"$T/out")" == "12 the server refused the hello: it has an option that is not for the server: '--no-such-option'" ]]
}
@test "attack: a client's hello with a bad --ranked token: refused, exit 12; a good one is taken" {
	local rc v
	for v in zz later:0000000000000000 later:0123456789ABCDEF 0123456789abcdef0 later: \
	         later:0123456789abcde part:4/4:0123456789abcdef part:1/0:0123456789abcdef \
	         part:-1/4:0123456789abcdef part:0/65537:0123456789abcdef part:1/4 \
	         part:1/4: part:1/4:later: join: join:later join:later:0 \
	         part:99999999999/4:0123456789abcdef; do
		rc=0
		hello 11 --recursive "--ranked=$v" | "$RDCP" --server >"$T/out" 2>"$T/err" || rc=$?
		echo "$v: $rc"
		[ "$rc" -eq 12 ]
		[ "$(error_of <"$T/out")" = "12 the server refused the hello: --ranked takes 'later', a job's token (16 hex digits), or 'later:', 'part:K/N:' or 'join:' and a token" ]
	done
	# a good one passes the hello (the server then waits for a manifest
	# this client never sends: it ends when stdin does, not with 12)
	for v in later later:0123456789abcdef 0123456789abcdef part:3/4:0123456789abcdef \
	         join:0123456789abcdef part:0/2:later:0123456789abcdef \
	         join:later:0123456789abcdef; do
		rc=0
		hello 11 --recursive "--ranked=$v" | timeout 20 "$RDCP" --server >"$T/out" 2>"$T/err" ||
			rc=$?
		echo "$v: $rc"
		[ "$rc" -ne 12 ] && [ "$rc" -ne 124 ]
	done
}
@test "a client of another protocol version: the server says so, exit 2 (as rsync)" {
	local rc=0
	hello 12 | "$RDCP" --server >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" -eq 2 ]
	[[ "$(error_of <"$T/out")" == "2 rdcp versions differ: this rdcp speaks protocol 11" ]]
}
