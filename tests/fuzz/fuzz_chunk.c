/* Fuzz target: the receiver's chunk handling (sync/recv/take.c, take_chunk via
 * recv_fuzz_chunk) against a fixed manifest (recv_fixture.h). The input is
 * a series of messages as the transport would hand them over:
 *   id (8), off (8), len (4), how (1): 0 = len zero bytes (the manifest's
 *   content, so chunks can verify), 1 = the next len bytes of the input,
 *   else len bytes of the value how
 * (len at most SYNC_MSG_SIZE: the transport refuses longer messages;
 * off's kind 3, ASREAD, checks a tag keyed with the fixture's zero key). An input
 * whose last byte is 0xff runs with -S, so sparse messages
 * (off's kind 2) are taken, not refused. Whatever
 * comes, only verified content may land, and only at the manifest's paths.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "tests/fuzz/recv_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fixture f;
	fx_start(&f);
	if (size && data[size - 1] == 0xff)
		f.r.flags |= SYNC_F_SPARSE;
	for (int k = 0; size >= 21 && k < 64; k++) {
		struct tp_msg m = { .id = get_u64(data), .off = get_u64(data + 8) };
		uint32_t len = get_u32(data + 16);
		uint8_t how = data[20];
		data += 21;
		size -= 21;
		if (len > SYNC_MSG_SIZE)
			break;   /* the transport's bound */
		static uint8_t *fill;
		if (!fill && !(fill = malloc(SYNC_MSG_SIZE)))
			abort();
		if (how == 0) {
			m.data = fx_zeros;
		} else if (how != 1) {
			memset(fill, how, len);
			m.data = fill;
		} else {
			len = len < size ? len : (uint32_t)size;
			m.data = (void *)data;
			data += len;
			size -= len;
		}
		m.len = m.cap = len;
		int rc = recv_fuzz_chunk(&f.s, &m);
		if (rc != 0 && rc != -EPROTO && rc != -ENOSPC)
			abort();
		if (rc < 0)
			break;   /* the receiver stops at the first rejection */
	}
	fx_end(&f);
	return 0;
}
