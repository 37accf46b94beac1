/* Fuzz target: a CTL_FILES payload (--files-from's list) as a server
 * decodes it from its client: whatever it accepts is a list of relative
 * paths inside SRC (no "..", no absolute path, no empty component), each
 * with at most one trailing '/'. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sync/select/select.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sync_opts o;
	const char *why;
	int rc = sync_files_decode(data, size, &o, &why);
	if (rc == -EPROTO && !why)
		abort();   /* every refusal says why */
	for (size_t i = 0; i < o.nfiles; i++) {
		const char *e = o.files[i];
		size_t l = strlen(e);
		if (l && e[l - 1] == '/')
			l--;
		if (l && idx_path_check(e, l) != 0)
			abort();
	}
	if (rc < 0 && rc != -EPROTO && rc != -ENOMEM)
		abort();
	sync_opts_free(&o);
	return 0;
}
