/*
 * sync/archive/: small files as one tar stream over the transport, packed
 * by the sender (packer_*) and unpacked by the receiver (unpacker_*), with
 * libarchive loaded on first use (larchive.h). Both sides include this.
 */
#ifndef RDCP_SYNC_ARCHIVE_H
#define RDCP_SYNC_ARCHIVE_H

#include <stdint.h>

#include "sync/sync_int.h"

struct packer;
/* keyed BLAKE2b-128 of the entry's manifest index, size and XXH3-128 */
void sync_entry_tag(const uint8_t key[SYNC_AKEY_LEN], uint64_t index, uint64_t size,
                    const uint8_t hash[IDX_HASH_LEN], uint8_t tag[SYNC_TAG_LEN]);
int  packer_open(struct packer **p, struct tp_session *ts, const uint8_t key[SYNC_AKEY_LEN]);
int  packer_add(struct packer *p, uint32_t index, const void *data, uint64_t size,
                const uint8_t hash[IDX_HASH_LEN]);
uint64_t packer_bytes(const struct packer *p);
/* Send what the current message holds now, full or not. 0 or -errno. */
int  packer_flush(struct packer *p);
/* ok: finish the archive and send the rest; else just drop it */
int  packer_close(struct packer *p, int ok);

struct unpack_ops {
	/* entry `index` of size bytes: an fd to write it to, -1 to skip it,
	 * -EPROTO if the entry cannot be one the sender should send */
	int  (*open)(void *ctx, uint64_t index, uint64_t size);
	/* written: err 0 when all of it was, EPROTO for a malformed entry,
	 * EBADMSG when what came does not match the tag it came with, else
	 * the write's errno; hash of what came; got bytes. A negative return
	 * (e.g. -ENOSPC) stops the unpacker: the rest is dropped. */
	int  (*close)(void *ctx, uint64_t index, int err, const uint8_t *hash, uint64_t got);
	/* the stream is not what the sender should send: msg, one line */
	void (*damaged)(void *ctx, const char *msg);
	/* optional: a writer thread is done (after its last close) */
	void (*writer_end)(void *ctx);
};
struct unpacker;
/* ts NULL (tests): messages are not released, they stay the caller's. */
int  unpacker_start(struct unpacker **u, struct tp_session *ts,
                    const uint8_t key[SYNC_AKEY_LEN], const struct unpack_ops *ops,
                    void *ctx);
/* Main thread: a message of the archive stream (the unpacker releases it). */
void unpacker_push(struct unpacker *u, struct tp_msg *m);
/* Main thread: the unpacker's error so far (0 while all is well). */
int  unpacker_error(struct unpacker *u);
/* After the last message: wait for the unpacker; 0 or an error. */
int  unpacker_finish(struct unpacker *u);
/* Main thread: the stream lost data before the archive was whole: the
 * reader stops where the hole begins, quietly; the entries it read whole
 * are still written, the rest left for the next run (unpacker_finish():
 * -ECONNRESET; nothing changes once it has ended). */
void unpacker_abandon(struct unpacker *u);

#endif
