/* Fuzz target: CTL_RELAY, which a fan-out host decodes from its client:
 * the next host and the one after it (where to re-link), and maybe the
 * hop's timeout. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sync/wire/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A decoded host is what ctl_data_decode() promises, and has an address. */
static void check(const struct ctl_data *d)
{
	if (!d->port || strlen(d->key) != 32 || !d->addr[0] || strlen(d->addr) > 255)
		abort();
	for (int i = 0; i < 32; i++)
		if (!strchr("0123456789abcdef", d->key[i]))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct relay_msg m;
	const char *why;
	int rc = relay_msg_decode(data, size, &m, &why);
	if (rc < 0 ? !why || !*why : !!why)
		abort();   /* a rejection says why; an acceptance does not */
	if (rc < 0)
		return 0;
	if ((m.flags & ~(RELAY_F_REJOIN | RELAY_F_HOP_MS)) || (m.has_alt && !m.has_next))
		abort();
	/* a hop timeout comes with its flag, for a host that forwards, bounded */
	if (!(m.flags & RELAY_F_HOP_MS) != !m.hop_ms ||
	    (m.hop_ms && (!m.has_next || m.hop_ms > (uint32_t)SYNC_TIMEOUT_MAX * 1000)))
		abort();
	if (m.has_next)
		check(&m.next);
	if (m.has_alt)
		check(&m.alt);
	/* accepted bytes are exactly flags + two length-prefixed parts (+ the
	 * hop timeout's 4) */
	size_t n1 = (size_t)data[1] << 8 | data[2], hop = m.hop_ms ? 4 : 0;
	if (size < 5 + n1 || size != 5 + n1 + ((size_t)data[3 + n1] << 8 | data[4 + n1]) + hop)
		abort();
	return 0;
}
