#!/usr/bin/env bash
# The README's first command: build, make a sample tree (a model cache:
# blobs, small files, relative symlinks), sync it, re-sync it (nothing to
# do), change one file and sync again, then show the index at work.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
demo=${DEMO_DIR:-/tmp/rdcp-demo}
# one stream, so rdcp's messages (stderr) and its listing (stdout) come out
# in the order they happen, even through a pipe; and no sample tree left over
exec 2>&1
rm -rf "$demo"
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/src/blobs" "$demo/src/snapshots/rev1"
echo "== a sample tree in $demo/src: 2 blobs of 48 MiB, 2000 small files, symlinks"
for i in 1 2; do head -c $((48 << 20)) /dev/urandom >"$demo/src/blobs/blob$i"; done
for i in $(seq 1 2000); do
	mkdir -p "$demo/src/small/d$((i / 100))"
	printf '{"id": %d}\n' "$i" >"$demo/src/small/d$((i / 100))/f$i.json"
done
ln -s ../../blobs/blob1 "$demo/src/snapshots/rev1/model.bin"
ln -s ../../blobs/blob2 "$demo/src/snapshots/rev1/tokenizer.bin"
export XDG_CACHE_HOME=$demo/cache
echo "== rdcp --sync: the first run copies everything"
"$BUILD/rdcp" --sync -v "$demo/src" "$demo/dst" 2>&1 | tail -3
echo "== the same command again: nothing to do"
"$BUILD/rdcp" --sync -v "$demo/src" "$demo/dst"
echo "== one file changed: one file is sent"
echo '{"id": "changed"}' >"$demo/src/small/d3/f300.json"
"$BUILD/rdcp" --sync -v "$demo/src" "$demo/dst"
# diff, not rsync: make demo installs only what building and running need
echo "== the trees match (diff -r prints nothing when they do):"
diff -r --no-dereference "$demo/src" "$demo/dst" && echo "(identical)"
echo "== the index: a re-scan hashes nothing"
"$BUILD/rdcp" --scan "$demo/src"
