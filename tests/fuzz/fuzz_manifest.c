/* Fuzz target: the manifest decoder (peer input). With clang
 * -fsanitize=fuzzer this is a libFuzzer target (make fuzz); otherwise it is
 * linked with replay.c and make check replays the stored corpus. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "index/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idx_manifest m = { 0 };
	struct idx_why why;
	int rc = idx_manifest_decode(data, size, &m, &why);
	if (rc < 0) {
		/* a rejection says why, on one printable line */
		if ((rc != -EBADMSG && rc != -ENOMEM) || !why.text[0])
			abort();
		for (const char *c = why.text; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				abort();
	}
	if (rc == 0) {
		/* every entry's xattr items walk to the end of their bytes, and a
		 * manifest differs from itself in nothing, by every rule */
		for (size_t i = 0; i < m.n; i++) {
			const struct idx_extra *x = m.e[i].x;
			uint32_t off = 0, vlen, n = 0;
			const char *name;
			size_t nlen;
			const uint8_t *v;
			while (idx_xattr_next(x, &off, &name, &nlen, &v, &vlen))
				n++;
			if (x && (off != x->xattrs_len || n != x->nxattrs))
				abort();
		}
		struct idx_diff d;
		unsigned all = IDX_DIFF_OWNER | IDX_DIFF_MTIME_DIRS | IDX_DIFF_XATTRS | IDX_DIFF_ACLS;
		if (idx_diff(&m, &m, all, &d) == 0) {
			if (d.n)
				abort();
			idx_diff_free(&d);
		}
		/* whatever decodes must encode back to the same bytes */
		uint8_t *buf;
		size_t len;
		if (idx_manifest_encode(&m, &buf, &len) != 0 || len != size)
			abort();
		for (size_t i = 0; i < len; i++)
			if (buf[i] != data[i])
				abort();
		free(buf);
	}
	idx_manifest_free(&m);
	return 0;
}
