/* Fuzz target: a partial-file record's chunk column as the receiver reads
 * it back from DST's index (index/partial.c; the index may be damaged).
 * Input: u32 chunk count (bounded here to 4096), then the column. Whatever
 * is accepted is exactly n done flags and n digests; anything else is
 * -EBADMSG. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "index/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	uint32_t n = get_u32(data) % 4096;
	struct idx_partial r = { 0 };
	int rc = idx_partial_decode(data + 4, size - 4, n, &r);
	if (rc == 0 && (size - 4 != (size_t)n * (1 + IDX_HASH_LEN) || r.n != n ||
	                memcmp(r.done, data + 4, n) ||
	                memcmp(r.digest, data + 4 + n, (size_t)n * IDX_HASH_LEN)))
		abort();
	if (rc != 0 && rc != -EBADMSG && rc != -ENOMEM)
		abort();
	if (rc == -EBADMSG && size - 4 == (size_t)n * (1 + IDX_HASH_LEN))
		abort();
	free(r.done);
	free(r.digest);
	return 0;
}
