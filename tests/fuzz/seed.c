/* Writes seed inputs for fuzz_manifest: encodings of real scans of the
 * directories given. Usage: seed OUTDIR DIR... (make fuzz-seed) */
#include <stdio.h>
#include <stdlib.h>

#include "index/index.h"

int main(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		struct idx_manifest m = { 0 };
		struct idx_stats st;
		struct idx_scan_opts o = { .no_index = 1 };
		uint8_t *buf;
		size_t len;
		if (idx_scan(argv[i], &o, &m, &st) < 0 || idx_manifest_encode(&m, &buf, &len) < 0)
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
