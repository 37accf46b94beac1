/* Private to pipe/: what the controller and the segments share. */
#ifndef RDCP_PIPE_INT_H
#define RDCP_PIPE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "pipe/pipe.h"

/* Decode one rdpipe segment message (CTL_SEG_SETUP, CTL_SEG_GO or
 * CTL_SEG_DONE) as its receiver would; 0 if it would take it, else -EPROTO.
 * For the fuzz target. */
int pipe_msg_check(uint8_t type, const uint8_t *buf, size_t len);

#endif
