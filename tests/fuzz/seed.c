/* Writes seed inputs for fuzz_manifest: encodings of real scans of the
 * directories given, with their xattrs and ACLs (-X, -A) and the names of
 * their owners. Usage: seed OUTDIR DIR... Build it by hand:
 *   cc -std=c11 -D_GNU_SOURCE -I. tests/fuzz/seed.c build/librdcp.a \
 *      $(pkg-config --libs libxxhash sqlite3 libarchive libcrypto libibverbs \
 *      librdmacm libacl) -lpthread -o build/seed */
#include <stdio.h>
#include <stdlib.h>

#include "index/index.h"
#include "sync/archive/archive.h"
#include "sync/delta/delta.h"
#include "sync/sync_int.h"

int main(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		struct idx_manifest m = { 0 };
		struct idx_stats st;
		struct idx_scan_opts o = { .no_index = 1, .meta = IDX_SCAN_XATTRS | IDX_SCAN_ACLS };
		uint8_t *buf;
		size_t len;
		if (idx_scan(argv[i], &o, &m, &st) < 0 || sync_names_collect(&m) < 0 ||
		    idx_manifest_encode(&m, &buf, &len) < 0)
			return 1;
		char p[4096];
		snprintf(p, sizeof p, "%s/seed-%d", argv[1], i - 1);
		FILE *f = fopen(p, "wb");
		if (!f || fwrite(buf, 1, len, f) != len || fclose(f))
			return 1;
		free(buf);
		idx_manifest_free(&m);
	}
	return 0;
}
