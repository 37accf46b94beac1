/*
 * Fuzz target: the receiver whole, stage after stage, as one hostile
 * sender drives it (input: tests/fuzz/receiver_input.h): its manifest
 * decoded and checked as read_manifest() does (recv_fuzz_manifest), DST's
 * old files scanned, the plan (recv_plan) with its chunk maps, the
 * CTL_CHUNKS frames it sends read back by the sender's decoder, the data
 * messages (recv_fuzz_chunk) and the small-file archive
 * (recv_fuzz_archive), then links, --delete and metadata (finish.c).
 *
 * The per-decoder targets check each stage against a fixed manifest; the
 * bugs between stages (a size the decoder takes that the plan's geometry
 * cannot hold, then a chunk index the plan never allocated) need all of
 * them on one input. What must hold whatever comes:
 *   - no memory error (ASan, in make fuzz and make check's sanitizer stage);
 *   - the sender's decoder accepts every CTL_CHUNKS frame the receiver sends,
 *     and reads back the receiver's own maps;
 *   - DST holds only entries of the manifest or DST's old ones, and every
 *     regular file that landed has exactly the manifest's size and content
 *     (--inplace: DST's old files may hold a mix; issue 36 item 8).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ctl.h"
#include "common/wire.h"
#include "sync/recv/recv_int.h"
#include "tests/fuzz/receiver_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A landed file larger than this cannot have come from one input. */
#define LANDED_MAX ((uint64_t)64 << 20)

static void die(const char *why, const char *path)
{
	fprintf(stderr, "fuzz_receiver: %s: %s\n", path, why);
	abort();
}

struct run {
	char dir[256];
	struct role r;
	struct sync_args args;
	struct sync_result res;
	struct rstate s;
	struct ctl ctl;
};

/* The manifest section: decoded into s->sm by the receiver's own checks.
 * 0, or the receiver refused it (the run ends there, as it would). */
static int take_manifest(struct run *x, unsigned flags, const uint8_t **p, size_t *left)
{
	uint8_t *enc = NULL;
	size_t len = 0;
	int rc;
	if (flags & RI_F_RAW) {
		if (*left < 4)
			return -1;
		len = get_u32(*p);
		*p += 4, *left -= 4;
		len = len < *left ? len : *left;
		rc = recv_fuzz_manifest(&x->s, *p, len);
		*p += len, *left -= len;
	} else {
		static struct ri_entry ents[RI_MAX_ENTRIES];
		size_t n = ri_entries(p, left, ents);
		if (ri_manifest(ents, n, sync_nohash_below(&x->r), &enc, &len) < 0)
			abort();
		rc = recv_fuzz_manifest(&x->s, enc, len);
		free(enc);
	}
	if (rc < 0 && rc != -EPROTO && rc != -ENOMEM)
		abort();
	if (rc == -EPROTO && !x->s.rejected)
		abort();   /* a refusal is said */
	return rc;
}

/* DST's old files (zeros, sparse) at the paths of manifest entries, then
 * DST scanned as the receiver scans it. */
static void make_dst(struct run *x, const uint8_t **p, size_t *left)
{
	struct rstate *s = &x->s;
	if (*left >= 1 && s->sm.n > 1) {
		size_t d = (*p)[0] % 9;
		(*p)++, (*left)--;
		for (size_t k = 0; k < d && *left >= 2; k++) {
			const struct idx_entry *e = &s->sm.e[1 + (*p)[0] % (s->sm.n - 1)];
			uint64_t sz = ri_sizes[(*p)[1] % RI_NSIZES];
			*p += 2, *left -= 2;
			if (sz > RI_DST_MAX || strchr(e->path, '/'))
				continue;   /* top level only: the plan makes directories */
			int fd = openat(s->root, e->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			if (fd < 0)
				continue;   /* twice */
			if (ftruncate(fd, (off_t)sz) < 0)
				abort();
			close(fd);
		}
	}
	s->so.no_index = 1;   /* the suite's cache stays clean */
	s->so.lazy_below = sync_nohash_below(&x->r);
	s->so.lazy_any = 1;
	struct idx_stats st;
	if (idx_scan(x->dir, &s->so, &s->dm, &st) < 0)
		abort();
}

/* The CTL_CHUNKS frames the receiver sends for its plan, read back as the
 * sender reads them: every one accepted, the maps the receiver's own. */
static void check_chunks(struct run *x)
{
	struct rstate *s = &x->s;
	int fd = memfd_create("chunks", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	x->ctl = (struct ctl){ .in = fd, .out = fd };
	x->r.ctl = &x->ctl;
	if (recv_send_chunks(s, s->nwant) < 0 || lseek(fd, 0, SEEK_SET) != 0)
		abort();
	struct chunk_map *maps = calloc(s->nwant ? s->nwant : 1, sizeof *maps);
	const char *why = NULL;
	uint8_t type = 0;
	size_t n;
	int rc;
	if (!maps)
		abort();
	while ((rc = ctl_recv(&x->ctl, &type, &n)) == 0 && type == CTL_CHUNKS)
		if (chunks_decode(x->ctl.buf, n, &s->sm, s->want, s->nwant, maps, &why) < 0)
			die(why, "the sender refuses the receiver's CTL_CHUNKS");
	if (rc < 0 || type != CTL_CHUNKS_END || chunks_complete(maps, s->nwant, &why) < 0)
		die(why ? why : "no CHUNKS_END", "the receiver's CTL_CHUNKS");
	for (uint32_t k = 0; k < s->nwant; k++) {
		const struct chunk_map *mine = &s->files[s->fetch[s->want[k]]].map;
		if (mine->how && (maps[k].n != mine->n || memcmp(maps[k].how, mine->how, mine->n)))
			die("a map read back differs", s->sm.e[s->want[k]].path);
		if (!mine->how && maps[k].n)
			die("a map the receiver did not send", s->sm.e[s->want[k]].path);
		chunk_map_free(&maps[k]);
	}
	free(maps);
	ctl_free(&x->ctl);
	close(fd);
	x->r.ctl = NULL;
}

/* The data stream: chunk messages as they come, archive pieces gathered
 * and unpacked at the stream's end (take_all's order: the unpacker
 * finishes after the last message). */
static void take_data(struct run *x, const uint8_t *p, size_t left)
{
	static uint8_t *fill;
	uint8_t *archive = NULL;
	size_t alen = 0;
	int stopped = 0;
	if (!fill && !(fill = malloc(IDX_CHUNK_SIZE)))
		abort();
	for (int k = 0; k < RI_MAX_MSGS && left >= 1 && !stopped; k++) {
		uint8_t op = *p++;
		left--;
		if (op >= 0x80) {
			if (left < 2)
				break;
			size_t n = get_u16(p);
			p += 2, left -= 2;
			n = n < left ? n : left;
			uint8_t *a = realloc(archive, alen + n + 1);
			if (!a)
				abort();
			archive = a;
			memcpy(archive + alen, p, n);
			alen += n;
			p += n, left -= n;
			continue;
		}
		if (left < 21)
			break;
		struct tp_msg m = { .id = get_u64(p), .off = get_u64(p + 8) };
		uint32_t len = get_u32(p + 16);
		uint8_t how = p[20];
		p += 21, left -= 21;
		if (len > IDX_CHUNK_SIZE)
			break;   /* the transport's bound */
		if (how == 0) {
			memset(fill, 0, len);
			m.data = fill;
		} else if (how != 1) {
			memset(fill, how, len);
			m.data = fill;
		} else {
			len = len < left ? len : (uint32_t)left;
			m.data = (void *)p;
			p += len, left -= len;
		}
		m.len = m.cap = len;
		int rc = recv_fuzz_chunk(&x->s, &m);
		if (rc != 0 && rc != -EPROTO && rc != -ENOSPC && rc != -EDQUOT && rc != -ENOMEM)
			abort();
		stopped = rc < 0;   /* the receiver stops at the first rejection */
	}
	if (alen && !stopped) {
		int rc = recv_fuzz_archive(&x->s, archive, alen);
		if (rc != 0 && rc != -EPROTO && rc != -ENOMEM && rc != -ENOSPC &&
		    rc != -ECONNRESET)
			abort();
	}
	free(archive);
}

static const struct rstate *chk_s;
static size_t chk_base;

/* Every entry is the manifest's or DST's old one; a regular file that is
 * not DST's old one landed, and holds the manifest's content. */
static int check_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	const char *rel = path + chk_base;
	if (*rel == '/')
		rel++;
	if (!*rel)
		return 0;
	const struct idx_entry *e = idx_manifest_find(&chk_s->sm, rel);
	const struct idx_entry *d = idx_manifest_find(&chk_s->dm, rel);
	if (d && d->ino == st->st_ino &&
	    (d->size == (uint64_t)st->st_size || (chk_s->r->flags & SYNC_F_INPLACE)))
		return 0;   /* DST's, left as it was (--inplace: or written into) */
	if (!e)
		die("written where the manifest has nothing (a temp left?)", rel);
	if (S_ISDIR(st->st_mode) != (e->type == IDX_DIR))
		die("of another type than the manifest's", rel);
	if (!S_ISREG(st->st_mode))
		return 0;
	if (e->type != IDX_REG || (uint64_t)st->st_size != e->size) {
		fprintf(stderr, "fuzz_receiver: %s: %llu bytes, the manifest's %llu (DST's "
		        "old: %lld)\n", rel, (unsigned long long)st->st_size,
		        (unsigned long long)e->size, d ? (long long)d->size : -1ll);
		die("landed with a size other than the manifest's", rel);
	}
	if (e->size > LANDED_MAX)
		die("landed, of a size no input can fill", rel);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint32_t n = e->nchunks ? e->nchunks : 1;
	uint8_t *buf = malloc(IDX_CHUNK_SIZE), *chunks = malloc((size_t)n * IDX_HASH_LEN);
	uint8_t h[IDX_HASH_LEN];
	if (fd < 0 || !buf || !chunks)
		abort();
	for (uint32_t k = 0; k < n; k++) {
		ssize_t got = pread(fd, buf, IDX_CHUNK_SIZE, (off_t)k * (off_t)IDX_CHUNK_SIZE);
		if (got < 0)
			abort();
		idx_hash_buf(buf, (size_t)got, chunks + (size_t)k * IDX_HASH_LEN);
	}
	if (e->nchunks)
		idx_hash_combine(chunks, n, h);
	else
		memcpy(h, chunks, IDX_HASH_LEN);
	/* a small file's hash came with its data: the archive's tag checks it */
	if (!(e->flags & IDX_F_NOHASH) && memcmp(h, e->hash, IDX_HASH_LEN))
		die("landed with content the manifest does not have", rel);
	close(fd);
	free(buf);
	free(chunks);
	return 0;
}

static int opened;

static int open_up(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if ((flag == FTW_D || flag == FTW_DNR) && (st->st_mode & 0700) != 0700 &&
	    chmod(path, 0700) == 0)
		opened++;   /* a directory the sender made unwritable or unreadable */
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void run_free(struct run *x)
{
	struct rstate *s = &x->s;
	for (uint32_t k = 0; s->files && k < s->nfiles; k++) {
		struct rfile *f = &s->files[k];
		if (f->fd >= 0 || f->dirfd >= 0 || f->bfd >= 0)
			recv_drop_file(f);
		free(f->seen);
		free(f->bhave);
		free(f->intemp);
		chunk_map_free(&f->map);
	}
	free(s->want);
	free(s->fetch);
	free(s->files);
	free(s->written);
	free(s->change);
	free(s->scratch);
	free(s->moved);      /* (moved.c's table: a renamed file's basis) */
	free(s->mismatch);   /* (take.c's RETRY list) */
	idx_diff_free(&s->diff);
	recv_dircache_free(&s->dirc);
	idx_manifest_free(&s->sm);
	idx_manifest_free(&s->dm);
	if (s->root >= 0)
		close(s->root);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->fail_mu);
	pthread_mutex_destroy(&s->log_mu);
	pthread_mutex_destroy(&s->ctl_mu);
	/* directories first made writable, then all removed */
	for (int pass = 0; pass < 8; pass++) {   /* again below each one opened */
		opened = 0;
		nftw(x->dir, open_up, 16, FTW_PHYS);
		if (!opened)
			break;
	}
	nftw(x->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);   /* x->dir too */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct run x;
	if (size < 1)
		return 0;
	unsigned flags = data[0];
	const uint8_t *p = data + 1;
	size_t left = size - 1;

	memset(&x, 0, sizeof x);
	snprintf(x.dir, sizeof x.dir, "%s/rdcp-fuzz-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(x.dir))
		abort();
	sync_args_init(&x.args);
	unsigned f = SYNC_F_RECURSIVE;
	f |= (flags & RI_F_SPARSE) ? SYNC_F_SPARSE : 0;
	f |= (flags & RI_F_WHOLE) ? SYNC_F_WHOLE : 0;
	f |= (flags & RI_F_DELETE) ? SYNC_F_DELETE : 0;
	f |= (flags & RI_F_CHECKSUM) ? SYNC_F_CHECKSUM : 0;
	f |= (flags & RI_F_INPLACE) ? SYNC_F_INPLACE : 0;
	x.args.o.flags = f;
	x.args.o.relay = !!(flags & RI_F_RELAY);
	x.r.flags = f;
	x.r.o = &x.args.o;
	x.r.path = x.dir;
	struct rstate *s = &x.s;
	s->r = &x.r;
	s->res = &x.res;
	s->root = -1;
	s->bfd = -1;
	s->dirc.fd = -1;
	s->umask = 022;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->fail_mu, NULL);
	pthread_mutex_init(&s->log_mu, NULL);
	pthread_mutex_init(&s->ctl_mu, NULL);
	s->root = open(x.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->root < 0)
		abort();

	if (take_manifest(&x, flags, &p, &left) == 0) {
		if (flags & RI_F_DST)
			make_dst(&x, &p, &left);
		int rc = recv_prepare_meta(s);
		if (rc == 0)
			rc = recv_plan(s, &s->want, &s->nwant);
		if (rc != 0 && rc != -ENOMEM && rc != -EIO)
			abort();
		if (rc == 0) {
			check_chunks(&x);
			take_data(&x, p, left);
			for (uint32_t k = 0; k < s->nwant; k++) {   /* the stream's end */
				struct rfile *rf = &s->files[s->fetch[s->want[k]]];
				if (!rf->done && !rf->failed)
					recv_drop_file(rf);
			}
			recv_make_links(s);
			if (f & SYNC_F_DELETE)
				recv_delete_extra(s);
			recv_fix_meta(s);
			chk_s = s;
			chk_base = strlen(x.dir);
			nftw(x.dir, check_one, 16, FTW_PHYS);
			if (getenv("FUZZ_RECEIVER_SHOW"))   /* what a seed reaches */
				fprintf(stderr, "fuzz_receiver: %u planned, %llu landed, %llu bytes, "
				        "%llu errors\n", s->nwant, (unsigned long long)x.res.files,
				        (unsigned long long)x.res.bytes, (unsigned long long)x.res.errors);
		}
	}
	run_free(&x);
	return 0;
}
