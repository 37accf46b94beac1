/* The sending side of a sync: scan SRC, send the manifest, read the plan
 * and the chunk lists, open the data session, send the data of what the
 * receiver asks for (sendq.c), then hear its verdict, its lines and its
 * landed count meanwhile. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "common/wire.h"
#include "sync/send/send_int.h"
#include "sync/send/send_int.h"

/* The name of a directory SRC given without a trailing '/' ("A", "x/A"),
 * or NULL: "A/", "A/.", ".", "..", "/" say "its contents" outright. */
static char *mirror_name(const char *src)
{
	size_t len = strlen(src);
	if (!len || src[len - 1] == '/')
		return NULL;
	const char *base = strrchr(src, '/');
	base = base ? base + 1 : src;
	if (!strcmp(base, ".") || !strcmp(base, "..") || strlen(base) > 255)
		return NULL;
	return strdup(base);
}

/* The manifest, with the names of its owners unless --numeric-ids (as
 * rsync), then the sender's count of unreadable entries and the run's
 * archive key (made here, into akey); *bytes: its size. */
static int send_manifest(struct role *r, struct idx_manifest *m, uint64_t errors,
                         uint64_t vanished, struct sync_result *res,
                         uint8_t akey[SYNC_AKEY_LEN], double t0)
{
	struct ctl *c = r->ctl;
	uint8_t *buf;
	size_t len;
	int rc = 0;
	if (!(r->flags & SYNC_F_NUMERIC_IDS) && (r->flags & (SYNC_F_OWNER | SYNC_F_ACLS)))
		rc = sync_names_collect(m);
	m->nohash_below = sync_nohash_below(r);
	if (rc < 0 || (rc = idx_manifest_encode(m, &buf, &len)) < 0)
		return rc;
	double t1 = clock_s();
	res->flist_bytes = len;
	/* as rsync: at least 1 ms, so that 0 means "no file list" */
	res->flist_gen_us = t1 - t0 > 1e-3 ? (uint64_t)((t1 - t0) * 1e6) : 1000;
	for (size_t off = 0; off < len && rc == 0; off += CTL_FRAME_MAX) {
		size_t n = len - off < CTL_FRAME_MAX ? len - off : CTL_FRAME_MAX;
		rc = ctl_send(c, CTL_MANIFEST, buf + off, n);
	}
	free(buf);
	res->flist_xfer_us = (uint64_t)((clock_s() - t1) * 1e6);
	struct manifest_end_msg me = { .errors = errors, .vanished = vanished,
	                               .gen_us = res->flist_gen_us,
	                               .xfer_us = res->flist_xfer_us };
	uint8_t e[MANIFEST_END_LEN];
	if (!rc)
		rc = cr_random(akey, SYNC_AKEY_LEN);
	memcpy(me.akey, akey, SYNC_AKEY_LEN);
	manifest_end_encode(e, &me);
	rc = rc ? rc : ctl_send(c, CTL_MANIFEST_END, e, sizeof e);
	explicit_bzero(e, sizeof e);
	explicit_bzero(me.akey, sizeof me.akey);
	return rc;
}

/* The receiver's frames while we send: its lines (CTL_LOG) printed as they
 * come, its landed count (CTL_PROGRESS) for --progress; any other frame (its
 * DONE or ERROR) is kept in ctl->buf for await_done(). */
#define WATCH_KEEP 4   /* DATA, then DONE or ERROR: never more than two */
struct watch {
	struct role *r;
	struct progress pg;
	uint64_t landed;         /* files the receiver has landed */
	struct kept {            /* frames read early, in order, for next_frame() */
		uint8_t type;
		size_t n;
		uint8_t *buf;    /* payload and its 8 zero bytes */
	} kept[WATCH_KEEP];
	int nkept;
	int stop;                /* the channel failed, or no room to keep more */
	double next;             /* when to look again */
};

/* The receiver's itemized lines (CTL_LOG) on stdout: its control
 * characters other than newlines escaped, so a peer cannot drive our
 * terminal (the receiver's own lines are escaped already). */
static void print_log(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if ((p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f)
			printf("\\%03o", p[i]);
		else
			putchar(p[i]);
	}
}

/* A frame of the receiver's that needs no answer: its lines, its landed
 * count. 1 if it was one (taken), else 0. */
static int take_news(struct watch *w, uint8_t type, size_t n)
{
	if (type == CTL_LOG) {
		print_log(w->r->ctl->buf, n);
		fflush(stdout);
		return 1;
	}
	struct progress_msg pm;
	if (type == CTL_PROGRESS && progress_decode(w->r->ctl->buf, n, &pm) == 0) {
		w->landed = pm.files;
		return 1;
	}
	return 0;
}

/* The receiver's CTL_FAILED (--json), which comes right before its DONE,
 * into r->fails. 0 or -EPROTO (said): malformed, or not asked for. */
static int take_failed(struct role *r, size_t n)
{
	const char *why = "came though --json was not asked for";
	if (!r->fails || sync_fails_take(r->fails, r->ctl->buf, n, &why) < 0) {
		log_err("the receiver's list of failed files %s", why);
		return -EPROTO;
	}
	return 0;
}

/* While sending: what the receiver said meanwhile, without waiting (at most
 * every 20 ms). A frame that is not news is kept for await_done(). */
static void watch_peer(struct watch *w)
{
	double t = clock_s();
	if (!w || w->stop || t < w->next)
		return;
	w->next = t + 0.02;
	uint8_t type;
	size_t n;
	int rc = 0;
	while (w->nkept < WATCH_KEEP && (rc = ctl_poll(w->r->ctl, &type, &n)) == 1) {
		if (take_news(w, type, n))
			continue;
		/* a copy: the lines after it may come before it is wanted */
		struct kept *k = &w->kept[w->nkept];
		if (!(k->buf = malloc(n + 8))) {
			rc = -ENOMEM;
			break;
		}
		memcpy(k->buf, w->r->ctl->buf, n + 8);
		k->type = type;
		k->n = n;
		w->nkept++;
	}
	if (rc < 0 || w->nkept == WATCH_KEEP)   /* the next read sees the failure */
		w->stop = 1;
}

/* The receiver's DONE: its result. 0, or -EPROTO (said). */
static int take_result(const uint8_t *p, struct sync_result *res)
{
	if (result_get(p, res) == 0)
		return 0;
	log_err("the receiver's result has an exit code over 255 (%u)", get_u32(p));
	return -EPROTO;
}

/* The receiver's next frame: the one watch_peer() kept, if any, else the
 * next to come (as sync_recv()). */
static int next_frame(struct watch *w, uint8_t *type, size_t *n)
{
	if (!w->nkept)
		return sync_recv(w->r, "receiver", type, n);
	struct kept k = w->kept[0];
	memmove(w->kept, w->kept + 1, (size_t)--w->nkept * sizeof k);
	*type = k.type;
	*n = k.n;
	memcpy(w->r->ctl->buf, k.buf, k.n + 8);   /* came from it: it only grows */
	free(k.buf);
	return 0;
}

/* CTL_RETRY (peer input): files whose data did not match the list at the
 * receiver (changed as we sent them), onto r->retry for another round.
 * Only when we offered rounds, each index one of m's regular files, once,
 * ascending. 0 or -EPROTO (said). */
static int retry_take(struct role *r, const struct idx_manifest *m, const uint8_t *b, size_t n,
                      int64_t *last)
{
	if (!r->rounds || !m) {   /* (before the data: no list to check against) */
		log_err("the receiver asked to be sent files again, which was not offered");
		return -EPROTO;
	}
	if (n < 4 || n % 4 || (n - 4) / 4 != get_u32(b)) {
		log_err("the receiver's list of files to send again is malformed (%zu bytes)", n);
		return -EPROTO;
	}
	int64_t prev = *last;
	for (uint32_t k = 0, cnt = get_u32(b); k < cnt; k++) {   /* all checked first */
		uint32_t i = get_u32(b + 4 + 4 * k);
		if (i >= m->n || (int64_t)i <= prev || m->e[i].type != IDX_REG) {
			log_err("the receiver asks for entry %u again, which is not a file of the "
			        "list, or not in order", i);
			return -EPROTO;
		}
		prev = i;
	}
	for (uint32_t k = 0, cnt = get_u32(b); k < cnt; k++) {
		uint32_t i = get_u32(b + 4 + 4 * k);
		*last = i;
		char shown[4096];
		if (!r->retry)   /* (no rounds after all: SRC is not what it was) */
			log_warn("%s: changed while being sent; not sent",
			         log_path(shown, sizeof shown, m->e[i].path));
		else
			sync_paths_add(r->retry, m->e[i].path);   /* (no memory: marked lost) */
	}
	return 0;
}

/* Read CTL_LOG lines (printing them), CTL_LANDED (removing what it
 * names, rm) and CTL_RETRY until the receiver's CTL_DONE; w (may be NULL):
 * frames watch_peer() kept come first. */
static int await_done(struct role *r, struct sync_result *res, struct src_remover *rm,
                      struct watch *w)
{
	struct watch none = { .r = r };
	int64_t retry_last = -1;
	if (!w)
		w = &none;
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = next_frame(w, &type, &n);
		if (rc < 0)
			return rc;
		if (take_news(w, type, n))
			continue;
		if (type == CTL_LANDED) {
			if ((rc = landed_take(rm, r->ctl->buf, n)) < 0)
				return rc;
			continue;
		}
		if (type == CTL_RETRY) {
			if ((rc = retry_take(r, rm->m, r->ctl->buf, n, &retry_last)) < 0)
				return rc;
			continue;
		}
		if (type == CTL_ERROR) {
			res->code = sync_peer_error(r->ctl, n, "");
			return -ECANCELED;
		}
		if (type == CTL_FAILED) {   /* --json: the receiver's list, then DONE */
			if ((rc = take_failed(r, n)) < 0)
				return rc;
			continue;
		}
		if (type != CTL_DONE || n != RESULT_LEN) {
			log_err("the receiver's final result is malformed (type %u, %zu bytes)", type, n);
			return -EPROTO;
		}
		uint64_t vanished = res->errors;
		if ((rc = take_result(r->ctl->buf, res)) < 0)
			return rc;
		if (vanished && !res->code)
			res->code = RD_EXIT_VANISHED;
		fflush(stdout);
		return 0;
	}
}

/* The sender's run. */
struct sstate {
	struct role *r;
	struct sync_result *res;
	struct idx_manifest m;
	int64_t stamp_ns;        /* the scan's (idx_stats.stamp_ns) */
	char *root, *only;       /* where SRC is scanned; the one name sent */
	struct srcset ss;        /* several SRCs (ss.n > 1), else ss.n is 0 */
	uint32_t *plan, nplan;   /* what the receiver asked for */
	struct chunk_map *maps;  /* per plan position: which chunks (CTL_CHUNKS) */
	struct watch w;          /* the receiver, while we send */
	struct tp_session *ts;
	struct sync_lock *lock;  /* SRC's, for the run */
	uint8_t *sent;           /* --remove-source-files: index -> sent whole */
	struct src_remover rm;
	struct filter *filter;   /* the filter rules, on our side */
	struct idx_root *roots;  /* --files-from */
	size_t nroots;
	uint8_t akey[SYNC_AKEY_LEN];   /* the run's archive key (MANIFEST_END) */
	int keep_ts;             /* the round ended in the stream: ts is kept */
};

/* The scan's options: filter rules, --files-from, -x. 0 or -ENOMEM. */
static int scan_opts(struct sstate *s, struct idx_scan_opts *so)
{
	const struct sync_opts *o = s->r->o;
	int rc;
	so->only = s->only;
	so->one_fs = o->one_fs;
	so->meta = sync_scan_meta(s->r->flags);
	so->trust_prefix = sync_trust_prefix(s->r->flags);
	if (so->trust_prefix && o->grown)
		so->grown_hint = o->grown;
	so->lazy_below = sync_nohash_below(s->r);
	so->no_index = o->no_index;   /* --no-index: both sides */
	so->known = o->known;
	if (o->nrules) {
		int fd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = fd < 0 ? -errno : sync_filter_open(&s->filter, o, SYNC_RM_SENDER, fd,
		                                        s->only ? "" : NULL);
		if (fd >= 0)
			close(fd);
		if (rc < 0)
			return rc;
		so->skip = sync_filter_skip;
		so->skip_ctx = s->filter;
	}
	if (o->files_from) {
		if ((rc = sync_files_roots(o, &s->roots, &s->nroots)) < 0)
			return rc;
		so->roots = s->roots;
		so->nroots = s->nroots;
		/* a --watch round's path may be gone since its event: its absence
		 * is the change (the receiver deletes it, with --delete) */
		so->roots_optional = o->round;
	}
	return 0;
}

/* Several SRCs: READY for a directory's contents, then their entries,
 * merged (sources.c), as one manifest. */
static int scan_many(struct sstate *s)
{
	uint64_t errors = 0;
	const struct ready_msg rm = { .kind = READY_CONTENTS, .is_dir = 1 };
	s->r->retry = NULL;   /* rounds of changed files: one SRC's contents only */
	uint8_t ready[4 + READY_NAME_MAX];
	double t0 = clock_s();
	int rc = ctl_send(s->r->ctl, CTL_READY, ready, ready_encode(ready, &rm));
	if (rc == 0 && (rc = srcs_scan(s->r, &s->ss, &s->m, &errors)) < 0) {
		int code = rc == -EWOULDBLOCK ? RD_EXIT_LOCKED : RD_EXIT_SELECT;
		ctl_error(s->r->ctl, code, rc == -EWOULDBLOCK ? "a source is being written by "
		          "another rdcp" : "the sources cannot be scanned");
		s->res->code = code;
		return rc;
	}
	if (rc == 0)
		sync_count_entries(s->res, &s->m, 0);   /* --stats, --json */
	return rc ? rc : send_manifest(s->r, &s->m, errors, 0, s->res, s->akey, t0);
}

/* READY, the scan of SRC and the manifest. */
static int scan_and_send(struct sstate *s)
{
	struct role *r = s->r;
	struct idx_scan_opts so = { 0 };
	struct idx_stats st;
	int is_dir = 0, rc;
	if (r->nsrc > 1)
		return scan_many(s);
	rc = r->o->files_from ? sync_files_root(r->path, &s->root, &is_dir)
	                      : src_split(r->path, r->flags, &s->root, &s->only, &is_dir);
	if (rc < 0) {
		/* as rsync: a SRC that cannot be stat'ed is a file that failed
		 * (23); one that is not what the options need is unusable (3) */
		uint32_t code = r->o->files_from || rc == -EISDIR || rc == -ENOMEM
		                ? RD_EXIT_SELECT : RD_EXIT_PARTIAL;
		/* we said why; a far receiver prints nothing more (no text) */
		ctl_error(r->ctl, (int)code, r->is_client ? "" : "the source cannot be used "
		          "(see above)");
		s->res->code = code;
		if (code == RD_EXIT_PARTIAL) {   /* --json: the entry that failed */
			s->res->errors = 1;
			sync_fails_add(s->res->fails, r->path, strerror(-rc), 0);
		}
		return rc;
	}
	if (s->only || !is_dir)
		r->retry = NULL;   /* rounds of changed files: a directory's contents only */
	/* --sync of a directory named without a trailing '/': its contents,
	 * but its name goes along (READY_MIRROR) so that a receiver told to
	 * --delete can refuse a DST that has nothing in common with it */
	char *base = NULL;
	if (!s->only && is_dir && (r->flags & SYNC_F_MIRROR))
		base = mirror_name(r->path);
	const char *name = s->only ? s->only : base ? base : "";
	size_t tl = strlen(name);
	struct ready_msg rm = { .kind = s->only ? READY_NAMED : base ? READY_MIRROR
	                                                          : READY_CONTENTS,
	                        .is_dir = (uint8_t)is_dir,
	                        .name_len = (uint16_t)(tl > READY_NAME_MAX ? READY_NAME_MAX : tl) };
	memcpy(rm.name, name, rm.name_len);
	free(base);
	uint8_t ready[4 + READY_NAME_MAX];
	if ((rc = ctl_send(r->ctl, CTL_READY, ready, ready_encode(ready, &rm))) < 0)
		return rc;
	/* not while another run writes into SRC: what we read would be a mix */
	int lockfd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lockfd >= 0 && s->only && is_dir) {   /* one named entry: its own tree */
		int fd = sync_open_beneath(lockfd, s->only, O_RDONLY | O_DIRECTORY);
		close(lockfd);
		lockfd = fd;
	}
	if (lockfd >= 0) {   /* a named file: the directory it is read from */
		rc = sync_lock(lockfd, s->root, s->only && !is_dir ? SYNC_LOCK_INSIDE :
		               SYNC_LOCK_READ, 0, &s->lock);
		close(lockfd);
	}
	if (lockfd >= 0 && rc < 0) {
		int code = rc == -EWOULDBLOCK ? RD_EXIT_LOCKED : RD_EXIT_SELECT;
		ctl_error(r->ctl, code, rc == -EWOULDBLOCK ? "the source is being written "
		          "(see above)" : "the source cannot be locked (see above)");
		s->res->code = code;
		return rc;
	}
	double t0 = clock_s();
	if ((rc = scan_opts(s, &so)) < 0 || (rc = idx_scan(s->root, &so, &s->m, &st)) < 0) {
		ctl_error(r->ctl, RD_EXIT_SELECT, "the source cannot be scanned");
		s->res->code = RD_EXIT_SELECT;
		return rc;
	}
	if ((rc = sync_filter_error(s->filter)) != 0) {   /* a dir-merge file (said) */
		ctl_error(r->ctl, rc, "the sender could not use a dir-merge filter file "
		          "(see above)");
		s->res->code = (uint32_t)rc;
		return -ECANCELED;
	}
	/* --windows: a directory of the window that is gone since SRC's
	 * directories were listed (moved away, maybe back after the scan) is
	 * a vanished entry: the receiver deletes nothing in this window */
	for (size_t i = 0; r->o->windows && i < so.nroots; i++)
		if (so.roots[i].depth == 1 && !idx_manifest_find(&s->m, so.roots[i].path)) {
			char shown[4096];
			log_warn("%s: vanished since SRC's directories were listed",
			         *so.roots[i].path ? log_path(shown, sizeof shown, so.roots[i].path)
			                           : ".");
			sync_fails_add(r->fails, so.roots[i].path, "vanished since the scan", 1);
			st.vanished++;
		}
	s->res->hashed = st.hashed_bytes;
	s->res->gone = st.vanished;   /* (with rounds: the run's 24 stays) */
	s->stamp_ns = st.stamp_ns;
	if (so.grown_hint)
		send_remember_grown(r->o->grown, &s->m, st.stamp_ns, so.roots, so.nroots);
	sync_count_entries(s->res, &s->m, s->only != NULL);   /* --stats, --json */
	return send_manifest(r, &s->m, st.errors, st.vanished, s->res, s->akey, t0);
}

/* After the plan: which chunks of the files DST has an old version of
 * (CTL_CHUNKS), until CTL_CHUNKS_END. 0 or an error. */
static int read_chunks(struct sstate *s)
{
	struct ctl *c = s->r->ctl;
	const char *why = NULL;
	if (!(s->maps = calloc(s->nplan ? s->nplan : 1, sizeof *s->maps)))
		return -ENOMEM;
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = sync_recv(s->r, "receiver", &type, &n);
		if (rc < 0)
			return rc;
		if (type == CTL_CHUNKS_END && n == 0)
			rc = chunks_complete(s->maps, s->nplan, &why);
		else if (type == CTL_CHUNKS)
			rc = chunks_decode(c->buf, n, &s->m, s->plan, s->nplan, s->maps, &why);
		else
			rc = -EPROTO, why = "is missing: another message came instead";
		if (rc == -EPROTO)
			log_err("the receiver's list of chunks to send %s", why);
		if (rc < 0 || type == CTL_CHUNKS_END)
			return rc;
	}
}

/* The receiver's plan: which entries to send. 0, 1 when the receiver gave
 * up before the data (its result is in res), or an error. */
static int read_plan(struct sstate *s)
{
	struct ctl *c = s->r->ctl;
	uint8_t type;
	size_t n;
	int rc = sync_recv(s->r, "receiver", &type, &n);
	if (rc < 0)
		return rc;
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(c, n, "");
		return 1;
	}
	if (type == CTL_DONE && n == RESULT_LEN)
		return (rc = take_result(c->buf, s->res)) < 0 ? rc : 1;
	if (type == CTL_LOG || type == CTL_FAILED) {   /* its reasons, then its DONE */
		if (type == CTL_LOG)
			print_log(c->buf, n);
		else if ((rc = take_failed(s->r, n)) < 0)
			return rc;
		rc = await_done(s->r, s->res, &s->rm, NULL);
		return rc < 0 ? rc : 1;
	}
	if (type != CTL_PLAN || n < 4 || (n - 4) / 4 != get_u32(c->buf) || n % 4) {
		log_err("the receiver's plan is malformed (type %u, %zu bytes)", type, n);
		return -EPROTO;
	}
	s->nplan = get_u32(c->buf);
	s->plan = malloc((size_t)(s->nplan ? s->nplan : 1) * 4);
	if (!s->plan)
		return -ENOMEM;
	for (uint32_t k = 0; k < s->nplan; k++) {
		uint32_t i = s->plan[k] = get_u32(c->buf + 4 + 4 * k);
		char shown[300];
		if (i >= s->m.n)
			log_err("the receiver's plan asks for entry %u of a file list of %zu", i,
			        s->m.n);
		else if (s->m.e[i].type != IDX_REG)
			log_err("the receiver's plan asks for entry %u ('%s'), which is not a "
			        "regular file", i, log_path(shown, sizeof shown, s->m.e[i].path));
		else if (k && i <= s->plan[k - 1])   /* once each: no file sent twice */
			log_err("the receiver's plan asks for entry %u again or out of order "
			        "(after %u)", i, s->plan[k - 1]);
		else
			continue;
		return -EPROTO;
	}
	rc = read_chunks(s);
	rsh_narrow_pipe(s->r->ctl->in);   /* what comes now is small */
	return rc;
}

/* Where and how to connect, from the receiver (or why it cannot); then the
 * data session. 0, 1 when the receiver failed before the data, or an error. */
static int connect_data(struct sstate *s)
{
	struct role *r = s->r;
	uint8_t type;
	size_t n;
	int rc;
	while ((rc = next_frame(&s->w, &type, &n)) == 0 && take_news(&s->w, type, n))
		;
	if (rc < 0)
		return rc;
	if (type == CTL_DONE && n == RESULT_LEN)
		return (rc = take_result(r->ctl->buf, s->res)) < 0 ? rc : 1;
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(r->ctl, n, "");
		return 1;
	}
	if (type == CTL_FAILED) {   /* --json: what failed, then its DONE */
		if ((rc = take_failed(r, n)) < 0 || (rc = await_done(r, s->res, &s->rm, &s->w)) < 0)
			return rc;
		return 1;
	}
	struct ctl_data cd;
	if (type != CTL_DATA) {
		log_err("the receiver sent a message of type %u instead of where to connect", type);
		return -EPROTO;
	}
	if (n == 2 && get_u16(r->ctl->buf) == 0) {   /* the last round's session goes on */
		if (!r->keep || !*r->keep) {
			log_err("the receiver asked to go on with a data connection there is none of");
			return -EPROTO;
		}
		s->ts = *r->keep;
		*r->keep = NULL;
		if (r->verbose > 1 && r->o && !r->o->json && !r->o->quiet)
			printf("the data connection of the round before goes on\n");
		return 0;
	}
	if (r->keep && *r->keep) {   /* a new one instead: the old goes */
		tp_close(*r->keep);
		*r->keep = NULL;
	}
	if (ctl_data_decode(r->ctl->buf, n, &cd) < 0) {
		log_err("the receiver's data-connection message %s", cd.why);
		return -EPROTO;
	}
	/* the client: its --data-addr, else the address the server says its
	 * ssh was reached on (an IP literal, nothing else: peer input), else
	 * the ssh host. The server: the client's --data-addr, else its own idea. */
	const char *addr = *cd.addr ? cd.addr : r->connect_addr;
	if (r->is_client && r->o && r->o->data_addr) {
		addr = r->connect_addr;
	} else if (r->is_client && *cd.addr && !rsh_is_ip(cd.addr)) {
		char shown[300];
		log_err("the receiver's data-connection message has an address that is not an "
		        "IP address: '%s'", log_path(shown, sizeof shown, cd.addr));
		return -EPROTO;
	}
	struct tp_opts o = r->tp;
	tp_key_derive(cd.key, 32, o.key);
	explicit_bzero(cd.key, sizeof cd.key);
	o.msg_size = SYNC_MSG_SIZE;
	o.pool_size = SYNC_POOL_SIZE;
	o.io_timeout_ms = r->timeout * 1000;
	if (r->o && r->o->contimeout > 0)   /* else the transport's 10 s */
		o.connect_timeout_ms = r->o->contimeout * 1000;
	o.rate = r->o ? r->o->bwlimit : 0;   /* --bwlimit: paced over all streams */
	o.gone = ctl_gone;   /* a receiver that ended will not listen: no retrying */
	o.gone_arg = r->ctl;
	rc = tp_connect(addr, cd.port, &o, &s->ts);
	if (rc == -ETIMEDOUT && r->timeout > 0)
		rc = -ETIME;   /* it listened, then went silent: --timeout's case */
	if (rc == 0 && tp_msg_cap(s->ts) < SYNC_MSG_SIZE) {
		/* a chunk (and an as-read chunk's tag) is read into one buffer */
		log_err("the receiver takes data messages of %u bytes, less than a chunk's %u",
		        tp_msg_cap(s->ts), SYNC_MSG_SIZE);
		ctl_error(r->ctl, RD_EXIT_PROTO, "the sender needs data messages of a whole chunk");
		return -EPROTO;
	}
	if (rc < 0) {
		char why[400];
		snprintf(why, sizeof why, "cannot open the data connection to %s port %u", addr,
		         cd.port);
		/* the one we can fix: the address (a receiver that answered and
		 * then closed was reached: the transport said why, in one line;
		 * one that ended before we reached it, killed or tired of
		 * waiting, is said here, once, in a watch's round too) */
		if (r->is_client && rc == -ECONNABORTED)   /* (o.gone: said by nobody yet) */
			log_err("the receiver at %s ended before the data connection was made", addr);
		else if (r->is_client && rc != -ETIME && rc != -ECONNRESET)
			log_err("%s: %s (if the far side is reached at another address, such as "
			        "its IPoIB or RoCE address, give it with --data-addr)", why,
			        strerror(-rc));
		ctl_error(r->ctl, rd_exit_code(rc), why);
	}
	return rc;
}

/* For tests: with $RDCP_TEST_PAUSE naming a path, create it and wait until
 * it is removed (60 s at most), so a test can change SRC between the scan
 * and the reads, as a busy tree does. Nothing else reads the variable. */
static void test_pause(struct watch *w)
{
	const char *p = getenv("RDCP_TEST_PAUSE");
	int fd = p && *p ? open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) : -1;
	if (fd < 0)
		return;
	close(fd);
	for (int i = 0; i < 6000 && access(p, F_OK) == 0; i++) {
		usleep(10000);
		watch_peer(w);   /* the receiver's lines meanwhile */
	}
}

/* sendq_run()'s hooks: --progress from the plan's size, and while the
 * data goes, the receiver's lines and landed count. */
static void data_start(void *ctx, uint64_t total, uint32_t files)
{
	struct sstate *s = ctx;
	progress_start(&s->w.pg, s->r, total, files);
}

static void data_tick(void *ctx, uint64_t bytes)
{
	struct sstate *s = ctx;
	watch_peer(&s->w);
	progress_update(&s->w.pg, bytes, s->w.landed, 0);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Pulled with rounds: the files listed to go again, or sent as read (each
 * one of m's regular files), as manifest indices, ascending, each once:
 * *out (to free), their count. The receiver, our client, takes them. */
static uint32_t path_indices(const struct idx_manifest *m, const struct sync_paths *p,
                             uint32_t **out)
{
	uint32_t n = 0, *v = p->n ? malloc(p->n * sizeof *v) : NULL;
	for (size_t k = 0; v && k < p->n; k++) {
		const struct idx_entry *e = idx_manifest_find(m, p->v[k]);
		if (e)
			v[n++] = (uint32_t)(e - m->e);
	}
	if (n)
		qsort(v, n, sizeof *v, cmp_u32);
	uint32_t u = 0;
	for (uint32_t k = 0; k < n; k++)
		if (!u || v[u - 1] != v[k])
			v[u++] = v[k];
	*out = v;
	return u;
}

/* ... and over the control channel, as frames of type (CTL_RETRY,
 * CTL_ASREAD). 0 or an error. */
static int send_index_list(struct ctl *c, uint8_t type, const uint32_t *v, uint32_t n)
{
	const uint32_t per = (CTL_FRAME_MAX - 4) / 4;
	uint8_t *b = malloc(4 + (size_t)per * 4);
	if (!b)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t k = 0; rc == 0 && k < n; k += per) {
		uint32_t cnt = n - k < per ? n - k : per;
		put_u32(b, cnt);
		for (uint32_t j = 0; j < cnt; j++)
			put_u32(b + 4 + 4 * j, v[k + j]);
		rc = ctl_send(c, type, b, 4 + (size_t)cnt * 4);
	}
	free(b);
	return rc;
}

/* The planned files over the data session, then SENT: what could not be
 * sent, before the receiver decides on deletions. */
static int send_data(struct sstate *s)
{
	int rootfd = s->ss.n ? -1 : open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0 && !s->ss.n)
		return -errno;
	const struct sendq_args a = {
		.ts = s->ts, .root = rootfd, .ss = &s->ss, .m = &s->m, .res = s->res,
		.sent = s->sent, .sparse = (s->r->flags & SYNC_F_SPARSE) != 0,
		.append = (s->r->flags & SYNC_F_APPEND) != 0,
		.files = tp_sends_files(s->ts), .root_path = s->root, .akey = s->akey,
		.grown = s->r->o->grown, .retry = s->r->retry, .as_read = s->r->as_read,
		.iso = { .only = s->only, .no_index = s->r->o->no_index },
		.start = data_start, .tick = data_tick, .ctx = s };
	uint64_t changed = 0, failed = 0;
	int rc = sendq_run(&a, s->plan, s->maps, s->nplan, &changed, &failed);
	if (rootfd >= 0)
		close(rootfd);
	if (rc == 0 && s->r->keep && tp_streams(s->ts) == 1) {
		/* --watch: the round's end in the stream, which stays open (one
		 * stream keeps its order); the receiver's DONE says how it went */
		struct tp_msg *m;
		if ((rc = tp_msg_get(s->ts, &m)) == 0) {
			m->id = SYNC_ROUND_END_ID;
			m->off = 0;
			m->len = 0;
			rc = tp_msg_send(s->ts, m);
		}
		s->keep_ts = rc == 0;
	} else if (rc == 0) {
		rc = tp_finish(s->ts);
	}
	if (rc < 0) {
		/* a receiver whose disk is full has said so, naming the file:
		 * once is enough */
		int full = tp_peer_status(s->ts) == ENOSPC || tp_peer_status(s->ts) == EDQUOT;
		if (!full)
			tp_report_failure(rc, s->res->bytes, s->ts, 1);
		return rc;
	}
	/* what could not be sent, before the receiver decides on deletions */
	uint8_t sent[SENT_LEN];
	uint64_t retried = s->r->retry && !s->r->retry->lost ? s->r->retry->n : 0;
	uint32_t *again = NULL, *asr = NULL, nasr = 0;   /* pulled: the client's lists */
	if (retried && !s->r->is_client)
		retried = path_indices(&s->m, s->r->retry, &again);
	if (s->r->as_read && !s->r->is_client)
		nasr = path_indices(&s->m, s->r->as_read, &asr);
	s->res->gone += changed - (retried < changed ? retried : changed);
	sent_encode(sent, &(struct sent_msg){ .unsent = changed + failed, .unreadable = failed,
	                                      .retried = retried, .as_read = nasr });
	s->res->errors = changed;   /* await_done turns this into exit 24 */
	s->res->vanished = changed;   /* --json's: the receiver's DONE has no such count */
	s->res->wire = s->res->bytes;   /* before the receiver's count replaces it */
	rc = ctl_send(s->r->ctl, CTL_SENT, sent, sizeof sent);
	if (rc == 0 && retried && !s->r->is_client)   /* pulled: the client's next round */
		rc = send_index_list(s->r->ctl, CTL_RETRY, again, (uint32_t)retried);
	if (rc == 0 && nasr)   /* ... and what it names for -v, --json */
		rc = send_index_list(s->r->ctl, CTL_ASREAD, asr, nasr);
	free(again);
	free(asr);
	if (rc == 0 && s->r->fails && !s->r->is_client) {   /* --json: what failed here */
		size_t n;
		uint8_t *b = sync_fails_encode(s->r->fails, &n);
		rc = b ? ctl_send(s->r->ctl, CTL_FAILED, b, n) : -ENOMEM;
		free(b);
	}
	return rc;
}

static int sender_run(struct sstate *s)
{
	int rc = scan_and_send(s);
	if (rc == -ECONNRESET && read_plan(s) == 1)
		return 1;   /* the receiver stopped early: its reason came first */
	if (rc < 0 || (rc = read_plan(s)) != 0)
		return rc;
	/* --remove-source-files: what the receiver may say landed (remove.c) */
	/* never in a dry run: a receiver that says otherwise is refused */
	s->rm = (struct src_remover){ .on = (s->r->flags & SYNC_F_REMOVE_SOURCE) &&
	                                    !(s->r->flags & SYNC_F_DRYRUN),
	                              .m = &s->m, .plan = s->plan, .nplan = s->nplan,
	                              .root = -1, .ss = &s->ss, .last = -1 };
	if (s->rm.on && !s->ss.n)
		s->rm.root = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->rm.on && !(s->rm.sent = s->sent = calloc(s->m.n ? s->m.n : 1, 1)))
		return -ENOMEM;
	if (s->nplan) {
		if (!s->r->o->round)   /* (a round of changed files: no pause again) */
			test_pause(&s->w);
		if ((rc = connect_data(s)) != 0)
			return rc;
		if ((rc = send_data(s)) < 0) {
			int st = s->ts ? tp_peer_status(s->ts) : 0;
			/* --watch: a receiver whose disk filled ends its round with
			 * its list and DONE, which the next round must not find */
			if (s->r->o && s->r->o->watch && (st == ENOSPC || st == EDQUOT))
				(void)await_done(s->r, s->res, &s->rm, &s->w);
			return rc;
		}
	}
	/* --windows: before the receiver deletes, what appeared meanwhile */
	unsigned del = s->r->flags & (SYNC_F_DELETE | SYNC_F_DELETE_BEFORE);
	if (s->r->o->windows && del == SYNC_F_DELETE &&
	    (rc = send_wcheck(s->r->ctl, s->root, &s->m, s->stamp_ns, s->roots, s->nroots)) < 0)
		return rc;
	rc = await_done(s->r, s->res, &s->rm, &s->w);
	progress_update(&s->w.pg, s->res->bytes, s->res->files, 1);
	s->res->transport = s->ts ? tp_kind_name(s->ts) : NULL;
	if (s->rm.errors && !s->res->code)
		s->res->code = RD_EXIT_PARTIAL;   /* a source file could not be removed */
	return rc;
}

int sync_sender(struct role *r, struct sync_result *res)
{
	struct sstate s = { .r = r, .res = res, .rm = { .root = -1 },
	                    .w = { .r = r } };
	memset(res, 0, sizeof *res);
	res->fails = r->fails;
	int rc = sender_run(&s);
	res->we_sent = 1;
	res->ctl_tx = r->ctl->tx_bytes;
	res->ctl_rx = r->ctl->rx_bytes;
	if (rc < 0 && !res->code)
		res->code = rd_exit_code(rc);
	if (s.keep_ts && rc >= 0 && r->keep && !*r->keep)
		*r->keep = s.ts;   /* --watch: for the next round */
	else
		tp_close(s.ts);
	for (int k = 0; k < s.w.nkept; k++)
		free(s.w.kept[k].buf);
	sync_unlock(s.lock);
	for (uint32_t k = 0; s.maps && k < s.nplan; k++)
		chunk_map_free(&s.maps[k]);
	free(s.maps);
	free(s.plan);
	free(s.sent);
	if (s.rm.root >= 0)
		close(s.rm.root);
	free(s.root);
	free(s.only);
	sync_filter_free(s.filter);
	sync_files_roots_free(s.roots, s.nroots);
	srcs_free(&s.ss);
	explicit_bzero(s.akey, sizeof s.akey);
	idx_manifest_free(&s.m);
	return res->code;
}
