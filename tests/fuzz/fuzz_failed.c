/* Fuzz target: CTL_FAILED, the list of what failed that a client decodes
 * from its far side (--json's "failed"): whatever it accepts is at most
 * SYNC_FAILS_MAX entries, each a non-empty path and a reason within their
 * bounds, without NUL bytes; every refusal says why. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sync/sync_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sync_fails *f = sync_fails_new();
	const char *why;
	if (!f)
		return 0;
	int rc = sync_fails_take(f, data, size, &why);
	if (rc < 0 ? !why || !*why : !!why)
		abort();   /* a refusal says why; an acceptance does not */
	if (rc < 0 && rc != -EPROTO && rc != -ENOMEM)
		abort();
	if (f->n > SYNC_FAILS_MAX)
		abort();
	for (unsigned i = 0; i < f->n; i++) {
		size_t pl = strlen(f->e[i].path), wl = strlen(f->e[i].why);
		if (!pl || pl > SYNC_FAIL_PATH_MAX || wl > SYNC_FAIL_WHY_MAX || f->e[i].vanished > 1)
			abort();
	}
	sync_fails_free(f);
	return 0;
}
