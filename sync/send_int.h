/* Private to the sending side of a sync (send.c, sendq.c): the data of a
 * plan, read and sent. The receiving side never includes this. */
#ifndef RDCP_SYNC_SEND_INT_H
#define RDCP_SYNC_SEND_INT_H

#include <stdint.h>

#include "index/index.h"

struct tp_session;
struct srcset;
struct sync_result;
struct chunk_map;

struct sendq_args {
	struct tp_session *ts;
	int root;                      /* SRC's directory (one SRC), else -1 */
	const struct srcset *ss;       /* several SRCs: each entry's own root */
	const struct idx_manifest *m;  /* what the scan saw, as sent */
	struct sync_result *res;       /* bytes sent, --json's failures */
	uint8_t *sent;                 /* --remove-source-files: index -> sent whole */
	int sparse;                    /* -S: zero blocks as a mask, holes not read */
	int append;                    /* --append: a grown file's last chunk as
	                                  the blocks past DST's end, never whole */
	int files;                     /* the transport sends file ranges (plain TCP) */
	const char *root_path;         /* SRC (one SRC): its index, to forget a row */
	const uint8_t *akey;           /* the archive key: entry tags */
	struct idx_scan_opts iso;      /* how SRC's index was opened */
	/* the caller's: the plan's bytes and files at the start, then the
	 * bytes sent so far after each step */
	void (*start)(void *ctx, uint64_t total, uint32_t files);
	void (*tick)(void *ctx, uint64_t bytes);
	void *ctx;
};

/* Send the nplan planned files (manifest indexes, each with its chunk
 * map) over a->ts. *changed: those not sent because they vanished or
 * changed since the scan (each said); *failed: those that could not be
 * read. 0 or an error (the transport's, or -ENOMEM). */
int sendq_run(const struct sendq_args *a, const uint32_t *plan, const struct chunk_map *maps,
              uint32_t nplan, uint64_t *changed, uint64_t *failed);

#endif
