/*
 * An index's rows directory by directory, for a ranked run's shards
 * (sync/rkindex.c; docs/index.md, "Shards"): the rows of the regular
 * files directly in one directory, read with a digest over them, written
 * as another node's index gave them, and carried between ranks as bytes.
 *
 * A row is only ever trusted for the fingerprint it holds (type, size,
 * inode, mtime, ctime) and only when those times are before the stamp of
 * the index that vouches for it; so rows move between indexes only with
 * that test made on both sides, and a row of the wrong version of a file
 * is merely not used.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/log.h"
#include "common/wire.h"
#include "index/idx_int.h"

struct idx_dirs {
	struct idx_db *db;
	char *root;
	int64_t stamp;
	sqlite3_stmt *lo, *range, *ins, *del;
	char path[IDX_PATH_MAX + 1], link[IDX_LINK_MAX + 1];
};

int idx_dirs_open(const char *root, struct idx_dirs **out)
{
	struct idx_scan_opts o = { 0 };
	struct idx_dirs *d = calloc(1, sizeof *d);
	*out = NULL;
	if (!d)
		return -ENOMEM;
	int rc = idx_db_open_tree(root, &o, &d->db);
	if (rc == 0 && d->db && !(d->root = strdup(root)))
		rc = -ENOMEM;
	if (rc < 0 || !d->db) {
		idx_db_close(d->db);
		free(d);
		return rc;
	}
	sqlite3 *h = idx_db_handle(d->db);
	idx_db_int(h, "SELECT value FROM meta WHERE key='scan_ns'", &d->stamp);
	if (sqlite3_prepare_v2(h, "SELECT " IDX_ROW_COLS " FROM entries WHERE path>=?1 "
	                       "ORDER BY path", -1, &d->lo, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, "SELECT " IDX_ROW_COLS " FROM entries WHERE path>=?1 "
	                       "AND path<?2 ORDER BY path", -1, &d->range, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, "INSERT OR REPLACE INTO entries(" IDX_ROW_COLS ") VALUES("
	                       "?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,"
	                       "?18)", -1, &d->ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, "DELETE FROM entries WHERE path=?1", -1, &d->del,
	                       NULL) != SQLITE_OK) {
		log_err("index %s: %s", idx_db_path(d->db), sqlite3_errmsg(h));
		idx_dirs_close(d);
		return -EIO;
	}
	*out = d;
	return 0;
}

int64_t idx_dirs_stamp(struct idx_dirs *d)
{
	idx_db_int(idx_db_handle(d->db), "SELECT value FROM meta WHERE key='scan_ns'",
	           &d->stamp);
	return d->stamp;
}

void idx_dirs_close(struct idx_dirs *d)
{
	if (!d)
		return;
	sqlite3_finalize(d->lo);
	sqlite3_finalize(d->range);
	sqlite3_finalize(d->ins);
	sqlite3_finalize(d->del);
	idx_db_close(d->db);
	free(d->root);
	free(d);
}

/* Is e a row d vouches for (and one worth carrying)? */
static int vouched(const struct idx_entry *e, int64_t stamp)
{
	return e->type == IDX_REG && !(e->flags & IDX_F_ASSUMED) && e->mtime_ns < stamp &&
	       e->ctime_ns < stamp;
}

static void digest_add(XXH3_state_t *st, const struct idx_entry *e)
{
	uint8_t b[32];
	put_u64(b, e->size);
	put_u64(b + 8, e->ino);
	put_u64(b + 16, (uint64_t)e->mtime_ns);
	put_u64(b + 24, (uint64_t)e->ctime_ns);
	XXH3_64bits_update(st, e->path, strlen(e->path) + 1);
	XXH3_64bits_update(st, b, sizeof b);
	XXH3_64bits_update(st, e->hash, IDX_HASH_LEN);
}

/*
 * Step through the rows directly in dir, calling each(e) on every sound
 * one: the rows at and below dir are one range of the primary key, and a
 * subdirectory's range ("sub/" .. "sub0": '0' follows '/') is stepped
 * over with one seek, so a directory costs its own entries, not its
 * tree's. 0 or -EIO, or each's error.
 */
static int each_row(struct idx_dirs *d, const char *dir,
                    int (*each)(struct idx_dirs *d, const struct idx_entry *e, void *ctx),
                    void *ctx)
{
	size_t dl = strlen(dir), pre = dl ? dl + 1 : 0;
	char *lo = malloc(IDX_PATH_MAX + 2), *hi = malloc(dl + 2);
	int rc = -ENOMEM;
	if (!lo || !hi)
		goto out;
	memcpy(lo, dir, dl);
	lo[dl] = '/';   /* the range of dir's rows: "dir/" .. "dir0" */
	memcpy(hi, dir, dl);
	hi[dl] = '0';
	size_t lol = pre;
	sqlite3_stmt *s = dl ? d->range : d->lo;
	/* the stamp now: a scan may have stored since the last look */
	idx_db_int(idx_db_handle(d->db), "SELECT value FROM meta WHERE key='scan_ns'",
	           &d->stamp);
	for (;;) {
		sqlite3_reset(s);
		sqlite3_bind_blob(s, 1, lo, (int)lol, SQLITE_STATIC);
		if (dl)
			sqlite3_bind_blob(s, 2, hi, (int)dl + 1, SQLITE_STATIC);
		int step = SQLITE_DONE, seek = 0;
		while (!seek && (step = sqlite3_step(s)) == SQLITE_ROW) {
			const char *p = sqlite3_column_blob(s, 0);
			int pl = sqlite3_column_bytes(s, 0);
			if (pl <= (int)pre)
				continue;   /* (the root's own row) */
			const char *sl = memchr(p + pre, '/', (size_t)pl - pre);
			if (sl) {   /* a subdirectory's rows: past them */
				lol = (size_t)(sl - p) + 1;
				if (lol > IDX_PATH_MAX + 1)
					break;
				memcpy(lo, p, lol);
				lo[lol - 1] = '0';
				seek = 1;
				continue;
			}
			struct idx_entry e;
			if (idx_row_read(s, &e, d->path, d->link) < 0)
				continue;   /* unsound: as a scan, not used */
			rc = vouched(&e, d->stamp) ? each(d, &e, ctx) : 0;
			free(e.x);
			if (rc < 0)
				goto out;
		}
		if (!seek) {
			rc = step == SQLITE_DONE || step == SQLITE_ROW ? 0 : -EIO;
			break;
		}
	}
out:
	if (d->range)
		sqlite3_reset(d->range);
	if (d->lo)
		sqlite3_reset(d->lo);
	free(lo);
	free(hi);
	return rc;
}

struct rows_ctx {
	XXH3_state_t st;
	struct idx_manifest *out;
	uint64_t n;
};

static int take_row(struct idx_dirs *d, const struct idx_entry *e, void *ctx)
{
	struct rows_ctx *c = ctx;
	(void)d;
	digest_add(&c->st, e);
	c->n++;
	if (!c->out)
		return 0;
	struct idx_entry k = *e;
	k.x = NULL;   /* extras stay with their index */
	k.got = 0;
	return idx_manifest_add(c->out, &k);
}

int idx_dirs_rows(struct idx_dirs *d, const char *dir, struct idx_manifest *out,
                  uint64_t *digest)
{
	struct rows_ctx c = { .out = out };
	XXH3_INITSTATE(&c.st);
	XXH3_64bits_reset(&c.st);
	int rc = each_row(d, dir, take_row, &c);
	*digest = c.n ? XXH3_64bits_digest(&c.st) : 0;
	return rc;
}

static int by_path(const void *a, const void *b)
{
	return strcmp((*(const struct idx_entry *const *)a)->path,
	              (*(const struct idx_entry *const *)b)->path);
}

/* Is path directly in dir? */
static int directly_in(const char *path, const char *dir)
{
	size_t dl = strlen(dir);
	if (dl && (strncmp(path, dir, dl) || path[dl] != '/'))
		return 0;
	const char *name = path + (dl ? dl + 1 : 0);
	return *name && !strchr(name, '/');
}

/* Is a a later version of a file than b (its ctime, then its mtime)? */
static int later(const struct idx_entry *a, const struct idx_entry *b)
{
	return a->ctime_ns != b->ctime_ns ? a->ctime_ns > b->ctime_ns : a->mtime_ns > b->mtime_ns;
}

/* Delete path's row; *gone counts it if there was one. 0 or -EIO. */
static int drop_row(struct idx_dirs *d, const char *path, int64_t *gone)
{
	sqlite3_bind_blob(d->del, 1, path, (int)strlen(path), SQLITE_STATIC);
	int st = sqlite3_step(d->del);
	sqlite3_reset(d->del);
	*gone += st == SQLITE_DONE && sqlite3_changes(idx_db_handle(d->db)) > 0;
	return st == SQLITE_DONE ? 0 : -EIO;
}

/* The rows of have that given (ng, sorted) does not name whose files are
 * gone from the tree, into *out (*nout; malloc'd). 0 or -ENOMEM. */
static int gone_from_tree(struct idx_dirs *d, const struct idx_manifest *have,
                          const struct idx_entry **given, size_t ng, char ***out, size_t *nout)
{
	int root = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	*out = NULL;
	*nout = 0;
	if (root < 0)
		return 0;   /* (then nothing is known gone) */
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < have->n; i++) {
		const struct idx_entry key = { .path = have->e[i].path }, *kp = &key;
		struct stat st;
		if (ng && bsearch(&kp, given, ng, sizeof *given, by_path))
			continue;
		if (fstatat(root, have->e[i].path, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
			continue;
		char **v = realloc(*out, (*nout + 1) * sizeof *v);
		if (!v || !(v[*nout] = strdup(have->e[i].path))) {
			if (v)
				*out = v;
			rc = -ENOMEM;
			break;
		}
		*out = v;
		(*nout)++;
	}
	close(root);
	return rc;
}

int idx_dirs_put(struct idx_dirs *d, const char *dir, const struct idx_entry *rows,
                 size_t n, int64_t stamp)
{
	sqlite3 *h = idx_db_handle(d->db);
	const struct idx_entry **given = malloc((n ? n : 1) * sizeof *given);
	struct idx_manifest have = { 0 };
	size_t ng = 0;
	int rc = -ENOMEM, began = 0;
	if (!given)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (directly_in(rows[i].path, dir))
			given[ng++] = &rows[i];
	qsort(given, ng, sizeof *given, by_path);
	/* the rows of dir the giver did not name whose files are gone, found
	 * before the transaction (a stat may be slow: a network filesystem;
	 * the others wait for our write lock) */
	uint64_t dg;
	char **gone_paths = NULL;
	size_t ngone = 0;
	if ((rc = idx_dirs_rows(d, dir, &have, &dg)) < 0 ||
	    (rc = gone_from_tree(d, &have, given, ng, &gone_paths, &ngone)) < 0)
		goto fail;
	idx_manifest_free(&have);
	rc = -EIO;
	if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	began = 1;
	/* the stamp again, in the transaction: another process may have
	 * stored since; an index with none takes the giver's */
	int64_t mine = 0;
	if (idx_db_int(h, "SELECT value FROM meta WHERE key='scan_ns'", &mine) != SQLITE_OK)
		goto fail;
	if (mine <= 0) {
		char sql[96];
		snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO meta VALUES('scan_ns', %lld)",
		         (long long)stamp);
		if (sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK)
			goto fail;
	}
	if ((rc = idx_dirs_rows(d, dir, &have, &dg)) < 0)
		goto fail;
	idx_manifest_sort(&have);
	int64_t added = 0, gone = 0, before = stamp < d->stamp ? stamp : d->stamp;
	rc = -EIO;
	/* a given row takes the place of this index's when it is of a later
	 * version of the file, or this index vouches for none (a row it has
	 * but does not vouch for, racy or of digests assumed, is worth no
	 * more than none) */
	for (size_t i = 0; i < ng; i++) {
		const struct idx_entry *e = given[i], *o = idx_manifest_find(&have, e->path);
		if ((i && !strcmp(e->path, given[i - 1]->path)) || !vouched(e, before) ||
		    (o && !later(e, o)))
			continue;
		if (drop_row(d, e->path, &gone) < 0)
			goto fail;
		if ((rc = idx_row_bind(d->ins, e)) < 0)
			goto fail;
		added++;
	}
	/* a row of dir the giver did not name goes only with its file: the
	 * giver may not have stored all it saw */
	rc = -EIO;
	for (size_t i = 0; i < ngone; i++)
		if (drop_row(d, gone_paths[i], &gone) < 0)
			goto fail;
	int64_t count = 0;
	idx_db_int(h, "SELECT value FROM meta WHERE key='count'", &count);
	count += added - gone;
	char sql[96];
	snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO meta VALUES('count', %lld)",
	         (long long)(count > 0 ? count : 0));
	if (sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	rc = 0;
	goto out;
fail:
	if (rc == -ENOMEM)
		log_err("index %s: cannot update: out of memory", idx_db_path(d->db));
	else
		log_warn("index %s: rows of another node's not kept: %s", idx_db_path(d->db),
		         sqlite3_errmsg(h));
	if (began)
		sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
	rc = rc < 0 ? rc : -EIO;
out:
	idx_db_unclean(d->db);
	idx_manifest_free(&have);
	for (size_t i = 0; i < ngone; i++)
		free(gone_paths[i]);
	free(gone_paths);
	free(given);
	return rc;
}

/* Rows on the wire between ranks: count (4), then per row: path length
 * (2), path, size, mtime, ctime, dev, ino (8 each), mode, uid, gid, nlink
 * (4 each), hash (16), its chunk digests (16 each, as many as its size
 * has chunks; none for one chunk). */
int idx_rows_encode(const struct idx_entry *rows, size_t n, uint8_t **buf, size_t *len)
{
	struct wire_wr w = { 0 };
	if (n > UINT32_MAX)
		return -EINVAL;
	wr_u32(&w, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		const struct idx_entry *e = &rows[i];
		size_t pl = strlen(e->path);
		if (e->type != IDX_REG || !pl || pl > 0xffff || e->size > IDX_SIZE_MAX ||
		    e->nchunks != idx_nchunks(e->size) || (e->nchunks && !e->chunks)) {
			free(w.buf);
			return -EINVAL;
		}
		wr_u16(&w, (uint16_t)pl);
		wr_bytes(&w, e->path, pl);
		wr_u64(&w, e->size);
		wr_u64(&w, (uint64_t)e->mtime_ns);
		wr_u64(&w, (uint64_t)e->ctime_ns);
		wr_u64(&w, e->dev);
		wr_u64(&w, e->ino);
		wr_u32(&w, e->mode);
		wr_u32(&w, e->uid);
		wr_u32(&w, e->gid);
		wr_u32(&w, e->nlink);
		wr_bytes(&w, e->hash, IDX_HASH_LEN);
		wr_bytes(&w, e->chunks, (size_t)e->nchunks * IDX_HASH_LEN);
	}
	if (w.bad) {
		free(w.buf);
		return -ENOMEM;
	}
	*buf = w.buf;
	*len = w.len;
	return 0;
}

int idx_rows_decode(const uint8_t *buf, size_t len, struct idx_manifest *out)
{
	struct wire_rd r = { buf, buf + len, 0 };
	char *path = malloc(0x10000);
	uint32_t n = rd_u32(&r);
	int rc = path ? 0 : -ENOMEM;
	/* each row takes at least 75 bytes: a count beyond what is there is
	 * a lie, not a reason to allocate */
	if (!rc && (r.bad || n > len / 75))
		rc = -EBADMSG;
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		struct idx_entry e = { .type = IDX_REG, .path = path };
		uint16_t pl = rd_u16(&r);
		const uint8_t *p = rd_take(&r, pl);
		e.size = rd_u64(&r);
		e.mtime_ns = (int64_t)rd_u64(&r);
		e.ctime_ns = (int64_t)rd_u64(&r);
		e.dev = rd_u64(&r);
		e.ino = rd_u64(&r);
		e.mode = rd_u32(&r);
		e.uid = rd_u32(&r);
		e.gid = rd_u32(&r);
		e.nlink = rd_u32(&r);
		const uint8_t *h = rd_take(&r, IDX_HASH_LEN);
		if (r.bad || !pl || e.size > IDX_SIZE_MAX) {
			rc = -EBADMSG;
			break;
		}
		memcpy(path, p, pl);
		path[pl] = '\0';
		memcpy(e.hash, h, IDX_HASH_LEN);
		e.nchunks = idx_nchunks(e.size);
		e.chunks = (uint8_t *)rd_take(&r, (size_t)e.nchunks * IDX_HASH_LEN);
		if (r.bad || idx_path_check(path, pl) < 0)
			rc = -EBADMSG;
		else
			rc = idx_manifest_add(out, &e);
	}
	if (rc == 0 && r.p != r.end)
		rc = -EBADMSG;
	free(path);
	return rc;
}
