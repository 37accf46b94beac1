/* Fuzz target: the rdpipe segment messages. SEG_SETUP is what a segment
 * decodes from its controller; SEG_GO too; SEG_DONE is what the controller
 * decodes from a segment (a remote host). The first byte picks which. */
#include <stdint.h>
#include <stdlib.h>

#include "common/ctl.h"
#include "pipe/pipe_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t types[] = { CTL_SEG_SETUP, CTL_SEG_GO, CTL_SEG_DONE };
	if (size < 1)
		return 0;
	pipe_msg_check(types[data[0] % 3], data + 1, size - 1);
	return 0;
}
