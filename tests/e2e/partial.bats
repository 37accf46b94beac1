#!/usr/bin/env bats
# --partial (sync/recv/partial.c, index/partial.c): a large file cut off
# mid-transfer keeps its temp file, recorded in DST's index; the next run
# with --partial sends only the chunks that are not in it yet (or that the
# source changed since). Without --partial no temp file is left. Results
# compared with cmp and rsync -anciH --delete.
load helpers

MiB=$((1 << 20))
SIZE=$((64 * MiB))

temps() { find "$T/dst" -name '.rdcp-tmp-*' 2>/dev/null; }

# start_push ARGS...: a slow push of $T/src into $T/dst, in the background
# ($pid); returns once DST's temp file holds about half of the data.
start_push() {
	mkdir -p "$T/dst"
	"$RDCP" --sync -a --bwlimit=16M -e "$LRSH" --rdcp-path "$RDCP" "$@" \
		"$T/src" "localhost:$T/dst" 2>"$T/first.err" &
	pid=$!
	local i t blocks
	for ((i = 0; i < 400; i++)); do
		t=$(temps | head -1)
		blocks=$([ -n "$t" ] && stat -c %b "$t" || echo 0)
		[ $((blocks * 512)) -ge $((SIZE / 2)) ] && return 0
		sleep 0.02
	done
	echo "the temp file never got to half"; return 1
}

# kill_push: kill -9 the push started in the background ($pid), then wait
# for its server (local-rsh execs it as the push's child) to notice and
# exit. Until then DST is still locked and its temp file still written: a
# run started at once would be refused ("another rdcp is using this tree").
kill_push() {
	local spids s i alive
	spids=$(pgrep -P "$pid" -f -- --server || true)
	kill -9 "$pid"
	wait "$pid" || true
	for ((i = 0; i < 500; i++)); do
		alive=
		for s in $spids; do   # a zombie has exited: its state is Z
			if [ -r "/proc/$s/stat" ] && [ "$(cut -d' ' -f3 "/proc/$s/stat")" != Z ]; then
				alive=1
			fi
		done
		[ -z "$alive" ] && return 0
		sleep 0.02
	done
	echo "the killed push's server ($spids) was still running 10 s later"; return 1
}

mk_src() {
	mkdir "$T/src"
	head -c "$SIZE" /dev/urandom >"$T/src/f"
	echo small >"$T/src/s"
}

@test "--partial: kill -9 of the sender at half, the next run sends about the other half" {
	mk_src
	start_push --partial
	kill_push
	[ -n "$(temps)" ]   # kept for the next run
	sync_in push --sync -a --partial --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	[ -z "$(temps)" ]
	[ "$(json_field bytes_sent <"$T/json")" -le $((SIZE * 55 / 100)) ]
	[ "$(json_field bytes_matched <"$T/json")" -ge $((SIZE * 45 / 100)) ]
}

@test "--partial: kill -9 of the receiving side at half, the next run sends about the other half" {
	mk_src
	start_push --partial
	# the server is this push's own child (local-rsh execs it); a pattern
	# alone would also kill the servers of other runs on the machine
	pkill -9 -P "$pid" -f -- --server
	wait "$pid" || true
	sleep 0.5
	sync_in push --sync -a --partial --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	[ -z "$(temps)" ]
	# what the receiver verified in its last half second was not recorded
	[ "$(json_field bytes_sent <"$T/json")" -le $((SIZE * 65 / 100)) ]
}

@test "--partial: chunks the source changed since are sent again" {
	mk_src
	start_push --partial
	kill_push
	# rewrite the first chunk, which the cut-off run had verified
	head -c 4096 /dev/urandom | dd of="$T/src/f" bs=4096 seek=10 conv=notrunc status=none
	sync_in push --sync -a --partial --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	[ -z "$(temps)" ]
}

@test "--partial: a temp file replaced by another inode is not trusted" {
	mk_src
	start_push --partial
	kill_push
	local t; t=$(temps | head -1)
	[ -n "$t" ]
	# the same name and content, another inode: not the recorded file
	cp "$t" "$T/copy"
	head -c $((4 * MiB)) /dev/zero | dd of="$T/copy" bs=1M conv=notrunc status=none
	mv "$T/copy" "$t"
	sync_in push --sync -a --partial --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ "$(json_field bytes_sent <"$T/json")" -eq $((SIZE + 6)) ]
	[ -z "$(temps)" ]
}

@test "--partial: a verified chunk overwritten in the temp file (same inode) does not survive" {
	mk_src
	start_push --partial
	kill_push
	local t; t=$(temps | head -1)
	[ -n "$t" ]
	# chunk 0 had verified and is recorded; scribble on it where it is
	head -c $((1 * MiB)) /dev/zero | dd of="$t" bs=1M seek=1 conv=notrunc status=none
	sync_in push --sync -a --partial --json "$T/src" "$T/dst" >"$T/json"
	cat "$T/json"
	cmp "$T/src/f" "$T/dst/f"
	same "$T/src" "$T/dst"
	[ -z "$(temps)" ]
}

@test "--partial: a run without it removes the kept temp file, by its record" {
	mk_src
	start_push --partial
	kill_push
	[ -n "$(temps)" ]
	echo "not ours" >"$T/dst/.rdcp-tmp-notes"   # a user's file: not a temp name
	sync_in push --sync -a --json "$T/src" "$T/dst" >"$T/json"
	cmp "$T/src/f" "$T/dst/f"
	[ -z "$(temps | grep -v notes)" ]
	[ "$(cat "$T/dst/.rdcp-tmp-notes")" = "not ours" ]
	[ "$(json_field bytes_sent <"$T/json")" -eq $((SIZE + 6)) ]
}

@test "without --partial: a killed sender leaves no temp file behind" {
	mk_src
	mkdir -p "$T/dst"
	"$RDCP" --sync -a --bwlimit=16M -e "$LRSH" --rdcp-path "$RDCP" "$T/src" \
		"localhost:$T/dst" 2>/dev/null &
	pid=$!
	sleep 1.5
	kill_push
	[ -z "$(temps)" ]
	[ ! -e "$T/dst/f" ]
	sync_in push --sync -a "$T/src" "$T/dst"
	cmp "$T/src/f" "$T/dst/f"
	[ -z "$(temps)" ]
}
