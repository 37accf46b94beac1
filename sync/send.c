/* The sending side of a sync: scan SRC, send the manifest, then the data of
 * what the receiver asks for, one message per 4 MiB chunk. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/sync_int.h"

/* Split SRC into the root to scan and, unless its contents are meant, the
 * one name to send. */
static int source_root(const struct role *r, char **root, char **only, int *is_dir)
{
	const char *src = r->path;
	size_t len = strlen(src);
	struct stat st;
	if (stat(src, &st) < 0) {
		log_err("%s: %s", src, strerror(errno));
		return -errno;
	}
	*is_dir = S_ISDIR(st.st_mode);
	if (*is_dir && !(r->flags & (SYNC_F_RECURSIVE | SYNC_F_MIRROR))) {
		log_err("%s: is a directory (use -r)", src);
		return -EISDIR;
	}
	int contents = *is_dir && ((r->flags & SYNC_F_MIRROR) || src[len - 1] == '/' ||
	               (len >= 2 && !strcmp(src + len - 2, "/.")) || !strcmp(src, "."));
	*only = NULL;
	if (contents) {
		*root = strdup(src);
		return *root ? 0 : -ENOMEM;
	}
	char *copy = strdup(src);
	if (!copy)
		return -ENOMEM;
	while (len > 1 && copy[len - 1] == '/')
		copy[--len] = '\0';
	char *cut = strrchr(copy, '/');
	*only = strdup(cut ? cut + 1 : copy);
	*root = cut == copy ? strdup("/") : cut ? (*cut = '\0', strdup(copy)) : strdup(".");
	free(copy);
	return *only && *root ? 0 : -ENOMEM;
}

static int send_manifest(struct ctl *c, const struct idx_manifest *m, uint64_t errors)
{
	uint8_t *buf;
	size_t len;
	int rc = idx_manifest_encode(m, &buf, &len);
	if (rc < 0)
		return rc;
	for (size_t off = 0; off < len && rc == 0; off += CTL_FRAME_MAX) {
		size_t n = len - off < CTL_FRAME_MAX ? len - off : CTL_FRAME_MAX;
		rc = ctl_send(c, CTL_MANIFEST, buf + off, n);
	}
	free(buf);
	uint8_t e[8];
	put_u64(e, errors);
	return rc ? rc : ctl_send(c, CTL_MANIFEST_END, e, sizeof e);
}

static int open_beneath(int dirfd, const char *path, int flags)
{
	struct open_how how = { .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
	                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* The directory of the last file sent, kept open: files go directory by
 * directory, so most opens are one component. */
struct dircache {
	char *dir;
	int fd;
};

static int open_file(struct dircache *c, int root, const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return open_beneath(root, path, O_RDONLY);
	size_t n = (size_t)(slash - path);
	if (!c->dir || strlen(c->dir) != n || strncmp(c->dir, path, n)) {
		free(c->dir);
		if (c->fd >= 0)
			close(c->fd);
		c->dir = strndup(path, n);
		c->fd = c->dir ? open_beneath(root, c->dir, O_RDONLY | O_DIRECTORY) : -1;
	}
	return c->fd < 0 ? -1 : open_beneath(c->fd, slash + 1, O_RDONLY);
}

/* Open a planned file and check it is still what the scan saw; -1 (with a
 * warning) if it vanished or changed. */
static int open_planned(struct dircache *dc, int root, const struct idx_entry *e)
{
	char shown[4096];
	int fd = open_file(dc, root, e->path);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == e->size)
		return fd;
	if (fd < 0 && errno == ENOENT)
		log_warn("%s: vanished since the scan", log_path(shown, sizeof shown, e->path));
	else
		log_warn("%s: %s", log_path(shown, sizeof shown, e->path),
		         fd < 0 ? strerror(errno) : "changed since the scan; not sent");
	if (fd >= 0)
		close(fd);
	return -1;
}

static uint32_t read_full(int fd, uint8_t *buf, uint32_t want, uint64_t off)
{
	uint32_t got = 0;
	while (got < want) {
		ssize_t n = pread(fd, buf + got, want - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (uint32_t)n;
	}
	return got;
}

/* What is being sent: small files into the archive, large ones chunk by
 * chunk, interleaved so both kinds are on the wire at the same time. */
struct sendq {
	struct tp_session *ts;
	struct dircache dc;
	int root;
	const struct idx_manifest *m;
	struct sync_result *res;
	uint64_t changed, big_bytes;
	int big_fd;              /* the large file being sent, -1 between files */
	uint64_t big_off;
};

/* One chunk of large file i (opening it on the first). 0 or an error. */
static int send_chunk(struct sendq *q, uint32_t i, int *file_done)
{
	const struct idx_entry *e = &q->m->e[i];
	char shown[4096];
	*file_done = 0;
	if (q->big_fd < 0) {
		q->big_fd = open_planned(&q->dc, q->root, e);
		q->big_off = 0;
		if (q->big_fd < 0) {
			q->changed++;
			*file_done = 1;
			return 0;
		}
		posix_fadvise(q->big_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	struct tp_msg *msg;
	int rc = tp_msg_get(q->ts, &msg);
	if (rc < 0)
		return rc;
	uint64_t off = q->big_off;
	uint32_t want = (uint32_t)(e->size - off < IDX_CHUNK_SIZE ? e->size - off : IDX_CHUNK_SIZE);
	if (read_full(q->big_fd, msg->data, want, off) != want) {
		tp_msg_put(q->ts, msg);
		log_warn("%s: shrank while being sent; not sent", log_path(shown, sizeof shown, e->path));
		q->changed++;
		close(q->big_fd);
		q->big_fd = -1;
		*file_done = 1;
		return 0;
	}
	msg->len = want;
	msg->id = (uint64_t)i + 1;
	msg->off = off;
	if ((rc = tp_msg_send(q->ts, msg)) < 0)
		return rc;
	q->res->bytes += want;
	q->big_bytes += want;
	q->big_off += want;
	if (q->big_off == e->size) {
		close(q->big_fd);
		q->big_fd = -1;
		*file_done = 1;
	}
	return 0;
}

/* One small file into the archive. 0 or an error. */
static int pack_one(struct sendq *q, struct packer *pk, uint32_t i, uint8_t *buf)
{
	const struct idx_entry *e = &q->m->e[i];
	char shown[4096];
	int fd = open_planned(&q->dc, q->root, e);
	if (fd < 0) {
		q->changed++;
		return 0;
	}
	uint32_t got = read_full(fd, buf, (uint32_t)e->size, 0);
	close(fd);
	if (got != e->size) {
		log_warn("%s: shrank while being sent; not sent", log_path(shown, sizeof shown, e->path));
		q->changed++;
		return 0;
	}
	int rc = packer_add(pk, i, buf, e->size);
	if (rc == 0)
		q->res->bytes += e->size;
	return rc;
}

static int send_all(struct sendq *q, const uint32_t *plan, uint32_t nplan, struct role *r)
{
	uint32_t *small = malloc((size_t)(nplan ? nplan : 1) * 4);
	uint32_t *big = malloc((size_t)(nplan ? nplan : 1) * 4);
	uint8_t *buf = malloc(SYNC_SMALL);
	uint32_t ns = 0, nb = 0, si = 0, bi = 0;
	uint64_t total = 0;
	struct packer *pk = NULL;
	struct progress pg;
	int rc = 0;
	if (!small || !big || !buf)
		rc = -ENOMEM;
	for (uint32_t k = 0; k < nplan && rc == 0; k++) {
		const struct idx_entry *e = &q->m->e[plan[k]];
		total += e->size;
		if (e->size < SYNC_SMALL)
			small[ns++] = plan[k];
		else
			big[nb++] = plan[k];
	}
	if (rc == 0 && ns)
		rc = packer_open(&pk, q->ts);
	progress_start(&pg, r->progress, total, nplan);
	while (rc == 0 && (si < ns || bi < nb)) {
		if (si < ns && (bi >= nb || packer_bytes(pk) <= q->big_bytes)) {
			rc = pack_one(q, pk, small[si++], buf);
		} else {
			int done;
			rc = send_chunk(q, big[bi], &done);
			bi += (uint32_t)done;
		}
		progress_update(&pg, q->res->bytes, si + bi, 0);
	}
	if (pk) {
		int prc = packer_close(pk, rc == 0);
		if (rc == 0)
			rc = prc;
	}
	progress_update(&pg, q->res->bytes, si + bi, 1);
	if (q->big_fd >= 0)
		close(q->big_fd);
	free(small);
	free(big);
	free(buf);
	return rc;
}

/* Read CTL_LOG lines (printing them) until the receiver's CTL_DONE. */
static int await_done(struct role *r, struct sync_result *res)
{
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = ctl_recv(r->ctl, &type, &n);
		if (rc < 0)
			return rc;
		if (type == CTL_LOG) {
			fwrite(r->ctl->buf, 1, n, stdout);
			continue;
		}
		if (type == CTL_ERROR) {
			log_err("%s", (char *)r->ctl->buf + 4);
			res->code = n >= 4 ? get_u32(r->ctl->buf) : RD_EXIT_PROTO;
			return -ECANCELED;
		}
		if (type != CTL_DONE || n != RESULT_LEN)
			return -EPROTO;
		uint64_t vanished = res->errors;
		result_get(r->ctl->buf, res);
		if (vanished && !res->code)
			res->code = RD_EXIT_VANISHED;
		fflush(stdout);
		return 0;
	}
}

int sync_sender(struct role *r, struct sync_result *res)
{
	struct idx_manifest m = { 0 };
	struct idx_stats st;
	struct idx_scan_opts so = { 0 };
	char *root = NULL, *only = NULL;
	uint32_t *plan = NULL, nplan = 0;
	int is_dir = 0, rootfd = -1, rc;
	struct tp_session *ts = NULL;
	const char *transport = NULL;
	memset(res, 0, sizeof *res);

	if ((rc = source_root(r, &root, &only, &is_dir)) < 0) {
		ctl_error(r->ctl, RD_EXIT_SELECT, "the source cannot be used (see above)");
		res->code = RD_EXIT_SELECT;
		goto out;
	}
	size_t tl = only ? strlen(only) : 0;
	uint8_t ready[4 + 256];
	ready[0] = only != NULL;
	ready[1] = (uint8_t)is_dir;
	put_u16(ready + 2, (uint16_t)tl);
	memcpy(ready + 4, only ? only : "", tl > 255 ? 255 : tl);
	if ((rc = ctl_send(r->ctl, CTL_READY, ready, 4 + (tl > 255 ? 255 : tl))) < 0)
		goto out;
	so.only = only;
	if (r->nrules) {
		so.skip = sync_filter_skip;
		so.skip_ctx = r;
	}
	if ((rc = idx_scan(root, &so, &m, &st)) < 0) {
		ctl_error(r->ctl, RD_EXIT_SELECT, "the source cannot be scanned");
		res->code = RD_EXIT_SELECT;
		goto out;
	}
	if ((rc = send_manifest(r->ctl, &m, st.errors)) < 0)
		goto out;

	/* the plan: which entries to send */
	uint8_t type;
	size_t n;
	if ((rc = ctl_recv(r->ctl, &type, &n)) < 0)
		goto out;
	if (type == CTL_ERROR || type == CTL_DONE || type == CTL_LOG) {
		/* the receiver gave up before the data: its reasons follow */
		if (type == CTL_ERROR) {
			log_err("%s", (char *)r->ctl->buf + 4);
			res->code = n >= 4 ? get_u32(r->ctl->buf) : RD_EXIT_PROTO;
		} else if (type == CTL_DONE && n == RESULT_LEN) {
			result_get(r->ctl->buf, res);
		} else {
			fwrite(r->ctl->buf, 1, n, stdout);
			rc = await_done(r, res);
		}
		goto out;
	}
	if (type != CTL_PLAN || n < 4 || (n - 4) / 4 != get_u32(r->ctl->buf) || n % 4) {
		rc = -EPROTO;
		goto out;
	}
	nplan = get_u32(r->ctl->buf);
	plan = malloc((size_t)(nplan ? nplan : 1) * 4);
	if (!plan) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < nplan; k++) {
		plan[k] = get_u32(r->ctl->buf + 4 + 4 * k);
		if (plan[k] >= m.n || m.e[plan[k]].type != IDX_REG) {
			rc = -EPROTO;
			goto out;
		}
	}
	if (nplan) {
		/* where and how to connect, from the receiver (or why it cannot) */
		while ((rc = ctl_recv(r->ctl, &type, &n)) == 0 && type == CTL_LOG)
			fwrite(r->ctl->buf, 1, n, stdout);
		if (rc < 0)
			goto out;
		if (type == CTL_DONE && n == RESULT_LEN) {
			result_get(r->ctl->buf, res);   /* it failed before the data */
			goto out;
		}
		if (type == CTL_ERROR && n >= 4) {
			log_err("%s", (char *)r->ctl->buf + 4);
			res->code = get_u32(r->ctl->buf);
			goto out;
		}
		struct ctl_data cd;
		if (type != CTL_DATA || ctl_data_decode(r->ctl->buf, n, &cd) < 0) {
			rc = -EPROTO;
			goto out;
		}
		struct tp_opts o = r->tp;
		uint16_t port = cd.port;
		tp_key_derive(cd.key, 32, o.key);
		explicit_bzero(cd.key, sizeof cd.key);
		const char *addr = cd.addr;
		size_t al = strlen(addr);
		o.msg_size = SYNC_MSG_SIZE;
		o.pool_size = SYNC_POOL_SIZE;
		if ((rc = tp_connect(al ? addr : r->connect_addr, port, &o, &ts)) < 0) {
			char why[400];
			snprintf(why, sizeof why, "cannot open the data connection to %s port %u",
			         al ? addr : r->connect_addr, port);
			ctl_error(r->ctl, rd_exit_code(rc), why);
			goto out;
		}
		transport = tp_kind_name(ts);
		if ((rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			rc = -errno;
			goto out;
		}
		struct sendq q = { .ts = ts, .dc = { NULL, -1 }, .root = rootfd, .m = &m,
		                   .res = res, .big_fd = -1 };
		rc = send_all(&q, plan, nplan, r);
		uint64_t changed = q.changed;
		free(q.dc.dir);
		if (q.dc.fd >= 0)
			close(q.dc.fd);
		if (rc == 0)
			rc = tp_finish(ts);
		if (rc < 0) {
			tp_report_failure(rc, res->bytes, ts, 1);
			goto out;
		}
		res->errors = changed;   /* await_done turns this into exit 24 */
	}
	rc = await_done(r, res);
	res->transport = transport;
out:
	if (rc < 0 && !res->code)
		res->code = rd_exit_code(rc);
	tp_close(ts);
	if (rootfd >= 0)
		close(rootfd);
	free(plan);
	free(root);
	free(only);
	idx_manifest_free(&m);
	return res->code;
}
