#!/usr/bin/env bash
# The README's first command: build, make a sample tree, scan it twice.
# The second scan hashes nothing: the index remembers the first.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
demo=${DEMO_DIR:-/tmp/rdcp-demo}
rm -rf "$demo"
mkdir -p "$demo/src/blobs" "$demo/src/snapshots/rev1"
echo "== making a sample tree in $demo/src (a model cache: blobs, small files, symlinks)"
for i in 1 2; do head -c $((48 << 20)) /dev/urandom >"$demo/src/blobs/blob$i"; done
for i in $(seq 1 2000); do
	mkdir -p "$demo/src/small/d$((i / 100))"
	printf '{"id": %d}\n' "$i" >"$demo/src/small/d$((i / 100))/f$i.json"
done
ln -s ../../blobs/blob1 "$demo/src/snapshots/rev1/model.bin"
ln -s ../../blobs/blob2 "$demo/src/snapshots/rev1/tokenizer.bin"
sleep 0.1
echo "== first scan: every file is hashed"
"$BUILD/rdcp" --scan "$demo/src" --index "$demo/index.db"
echo "== second scan: nothing changed, nothing is hashed"
"$BUILD/rdcp" --scan "$demo/src" --index "$demo/index.db"
echo "== one file changed: one file is hashed"
echo '{"id": "changed"}' >"$demo/src/small/d3/f300.json"
sleep 0.1
"$BUILD/rdcp" --scan "$demo/src" --index "$demo/index.db"
