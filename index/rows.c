/*
 * The index's rows (db.c opens the database): each entry as a row, read
 * back by the scan (all of them, or those at or below some roots, their
 * ancestors and any racy row), and stored in one transaction per scan,
 * writing only what changed. Every row carries a checksum of its fields so
 * that damage SQLite cannot see (a flipped bit in a hash) costs a rehash,
 * never a wrong answer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/log.h"
#include "common/wire.h"
#include "index/idx_int.h"

#define CHK_VERSION 1           /* what row checksums mix in: rows of versions
                                   1 and 2 stay valid in version 3 */

/* The row checksum's part for what was read of xattrs and ACLs. */
static void chk_extra(XXH3_state_t *st, const struct idx_entry *e)
{
	const struct idx_extra *x = e->x;
	uint8_t head[8] = { e->got };
	if (x) {
		put_u16(head + 2, x->nxattrs);
		put_u16(head + 4, x->nacl);
		put_u16(head + 6, x->ndacl);
	}
	XXH3_64bits_update(st, head, sizeof head);
	if (!x)
		return;
	XXH3_64bits_update(st, x->xattrs, x->xattrs_len);
	for (uint32_t i = 0; i < (uint32_t)x->nacl + x->ndacl; i++) {
		const struct idx_ace *a = i < x->nacl ? &x->acl[i] : &x->dacl[i - x->nacl];
		uint8_t b[6] = { a->tag, a->perm };
		put_u32(b + 2, a->id);
		XXH3_64bits_update(st, b, sizeof b);
	}
}

/* Checksum over every stored field of e, path included. */
static int64_t row_chk(const struct idx_entry *e)
{
	uint8_t fixed[8 * 8 + 6 * 4 + 2];
	uint8_t *p = fixed;
	put_u8(p++, e->type);
	put_u8(p++, 0);
	put_u32(p, e->mode);  p += 4;
	put_u32(p, e->uid);   p += 4;
	put_u32(p, e->gid);   p += 4;
	put_u32(p, e->nlink); p += 4;
	put_u32(p, e->nchunks); p += 4;
	put_u32(p, (uint32_t)strlen(e->path)); p += 4;
	put_u64(p, e->size);  p += 8;
	put_u64(p, (uint64_t)e->mtime_ns); p += 8;
	put_u64(p, (uint64_t)e->ctime_ns); p += 8;
	put_u64(p, e->dev);   p += 8;
	put_u64(p, e->ino);   p += 8;
	put_u64(p, e->rdev);  p += 8;
	put_u64(p, e->link ? strlen(e->link) : 0); p += 8;
	put_u64(p, CHK_VERSION); p += 8;
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, fixed, (size_t)(p - fixed));
	XXH3_64bits_update(&st, e->path, strlen(e->path));
	if (e->link)
		XXH3_64bits_update(&st, e->link, strlen(e->link));
	XXH3_64bits_update(&st, e->hash, IDX_HASH_LEN);
	if (e->nchunks)
		XXH3_64bits_update(&st, e->chunks, (size_t)e->nchunks * IDX_HASH_LEN);
	if (e->got)   /* a row without xattrs or ACLs read sums as in version 1 */
		chk_extra(&st, e);
	if (e->flags & IDX_F_ASSUMED)   /* (and one with every digest read too) */
		XXH3_64bits_update(&st, "assumed", 7);
	return (int64_t)XXH3_64bits_digest(&st);
}

/* The extra column: what was read (got, 1), which sections follow (1), the
 * sections as in a manifest entry (docs/protocol.md). Into e->got and e->x
 * (the caller frees it). 0 or -EBADMSG. */
static int extra_read(sqlite3_stmt *s, struct idx_entry *e)
{
	const uint8_t *b = sqlite3_column_blob(s, 16);
	int n = sqlite3_column_bytes(s, 16);
	struct wire_rd r = { b, b + (n > 0 ? n : 0), 0 };
	uint8_t got = rd_u8(&r), bits = rd_u8(&r);
	const char *why;
	if (r.bad || !got || (got & ~(IDX_GOT_XATTRS | IDX_GOT_XATTRS_ALL | IDX_GOT_ACLS)) ||
	    (bits & ~(IDX_E_XATTRS | IDX_E_ACL | IDX_E_DACL)) ||
	    ((bits & IDX_E_XATTRS) && !(got & IDX_GOT_XATTRS)) ||
	    ((bits & (IDX_E_ACL | IDX_E_DACL)) && !(got & IDX_GOT_ACLS)))
		return -EBADMSG;
	if (idx_extra_get(&r, bits, (got & IDX_GOT_XATTRS_ALL) != 0, &e->x, &why) < 0 ||
	    r.p != r.end) {
		free(e->x);
		e->x = NULL;
		return -EBADMSG;
	}
	e->got = got;
	return 0;
}

/* Fill e from the current row; 0 if the row is sound, else -EBADMSG. */
int idx_row_read(sqlite3_stmt *s, struct idx_entry *e, char *path, char *link)
{
	int plen = sqlite3_column_bytes(s, 0);
	const void *p = sqlite3_column_blob(s, 0);
	if (plen < 0 || plen > IDX_PATH_MAX || (plen && !p))
		return -EBADMSG;
	if (plen)
		memcpy(path, p, (size_t)plen);
	path[plen] = '\0';
	if (plen && idx_path_check(path, (size_t)plen) < 0)
		return -EBADMSG;
	*e = (struct idx_entry){
		.path = path,
		.type = (uint8_t)sqlite3_column_int(s, 1),
		.mode = (uint32_t)sqlite3_column_int64(s, 2),
		.uid = (uint32_t)sqlite3_column_int64(s, 3),
		.gid = (uint32_t)sqlite3_column_int64(s, 4),
		.size = (uint64_t)sqlite3_column_int64(s, 5),
		.mtime_ns = sqlite3_column_int64(s, 6),
		.ctime_ns = sqlite3_column_int64(s, 7),
		.dev = (uint64_t)sqlite3_column_int64(s, 8),
		.ino = (uint64_t)sqlite3_column_int64(s, 9),
		.nlink = (uint32_t)sqlite3_column_int64(s, 10),
		.rdev = (uint64_t)sqlite3_column_int64(s, 11),
	};
	if (e->type < IDX_REG || e->type > IDX_SOCK)
		return -EBADMSG;
	int llen = sqlite3_column_bytes(s, 12);
	if (sqlite3_column_type(s, 12) != SQLITE_NULL) {
		if (llen <= 0 || llen > IDX_LINK_MAX)
			return -EBADMSG;
		memcpy(link, sqlite3_column_blob(s, 12), (size_t)llen);
		link[llen] = '\0';
		if (strlen(link) != (size_t)llen)
			return -EBADMSG;
		e->link = link;
	}
	if (sqlite3_column_bytes(s, 13) != IDX_HASH_LEN)
		return -EBADMSG;
	memcpy(e->hash, sqlite3_column_blob(s, 13), IDX_HASH_LEN);
	if (e->type == IDX_REG && e->size > IDX_SIZE_MAX)
		return -EBADMSG;
	e->nchunks = e->type == IDX_REG ? idx_nchunks(e->size) : 0;
	if ((size_t)sqlite3_column_bytes(s, 14) != (size_t)e->nchunks * IDX_HASH_LEN)
		return -EBADMSG;
	e->chunks = (uint8_t *)sqlite3_column_blob(s, 14);   /* copied by the caller */
	if (sqlite3_column_type(s, 16) != SQLITE_NULL && extra_read(s, e) < 0)
		return -EBADMSG;
	if (sqlite3_column_int(s, 17) == 1 && e->type == IDX_REG)
		e->flags |= IDX_F_ASSUMED;
	if (row_chk(e) != sqlite3_column_int64(s, 15)) {
		free(e->x);
		e->x = NULL;
		return -EBADMSG;
	}
	return 0;
}

int idx_db_forget(struct idx_db *db, const char *path)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(h, "DELETE FROM entries WHERE path=?1", -1, &s,
	                       NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_blob(s, 1, path, (int)strlen(path), SQLITE_STATIC);
	int rc = sqlite3_step(s) == SQLITE_DONE ? 0 : -EIO;
	sqlite3_finalize(s);
	return rc;
}

/* The meta keys the index itself uses: a note may not take their place. */
static int note_key_ok(const char *key)
{
	return strcmp(key, "root") && strcmp(key, "scan_ns") && strcmp(key, "count");
}

int idx_db_note_get(struct idx_db *db, const char *key, char **val)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *s;
	*val = NULL;
	if (!note_key_ok(key))
		return -EINVAL;
	if (sqlite3_prepare_v2(h, "SELECT value FROM meta WHERE key=?1", -1, &s,
	                       NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	int rc = 0;
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_TEXT &&
	    !(*val = strdup((const char *)sqlite3_column_text(s, 0))))
		rc = -ENOMEM;
	sqlite3_finalize(s);
	return rc;
}

int idx_db_note_set(struct idx_db *db, const char *key, const char *val)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *s;
	if (!note_key_ok(key))
		return -EINVAL;
	if (sqlite3_prepare_v2(h, "INSERT OR REPLACE INTO meta VALUES(?1, ?2)", -1, &s,
	                       NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, val, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s) == SQLITE_DONE ? 0 : -EIO;
	sqlite3_finalize(s);
	return rc;
}

/* The rows of s (prepared, bound) into out. 0, -ENOMEM or -EIO; *bad
 * counts the rows that could not be read. */
static int load_rows(sqlite3_stmt *s, struct idx_manifest *out, char *path, char *link,
                     uint64_t *bad)
{
	int step, rc;
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		struct idx_entry e;
		if (idx_row_read(s, &e, path, link) < 0) {
			(*bad)++;
			continue;
		}
		rc = idx_manifest_add(out, &e);
		free(e.x);
		if (rc < 0)
			return rc;
	}
	return step == SQLITE_DONE ? 0 : -EIO;
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * The index files this process stored last, each with the stamp it stored
 * (meta scan_ns). Such a store leaves no racy row when its stamp is not
 * before the one it replaced: every row it writes is older than its
 * stamp, every row it keeps older than the old one. While the file's
 * scan_ns is still that stamp nobody has stored since (or with the same
 * stamp, whose rows are older than it too), so a load of some roots skips
 * the pass over the table that looks for racy rows: a large tree's
 * windows load ten to a hundred times a run (docs/sync.md, "Windows").
 */
#define CLEAN_MAX 4
static struct { char *path; int64_t ns; } clean[CLEAN_MAX];
static pthread_mutex_t clean_mu = PTHREAD_MUTEX_INITIALIZER;

/* ns < 0: path is no longer known clean. */
static void clean_set(const char *path, int64_t ns)
{
	pthread_mutex_lock(&clean_mu);
	int k = -1;
	for (int i = 0; i < CLEAN_MAX; i++)
		if (clean[i].path && !strcmp(clean[i].path, path))
			k = i;
	if (k < 0 && ns >= 0) {   /* a free slot, else the first's */
		for (int i = CLEAN_MAX; i-- > 0;)
			if (!clean[i].path)
				k = i;
		if (k < 0)
			k = 0;
		free(clean[k].path);
		clean[k].path = strdup(path);   /* (NULL: not remembered) */
	}
	if (k >= 0 && ns < 0) {
		free(clean[k].path);
		clean[k].path = NULL;
	} else if (k >= 0) {
		clean[k].ns = ns;
	}
	pthread_mutex_unlock(&clean_mu);
}

void idx_db_unclean(struct idx_db *db)
{
	clean_set(idx_db_path(db), -1);
}

static int clean_is(const char *path, int64_t ns)
{
	int yes = 0;
	pthread_mutex_lock(&clean_mu);
	for (int i = 0; i < CLEAN_MAX; i++)
		yes |= clean[i].path && !strcmp(clean[i].path, path) && clean[i].ns == ns;
	pthread_mutex_unlock(&clean_mu);
	return yes;
}

/* The rows the last store could not vouch for (its mtime or ctime at or
 * after scan_ns: another process stored an earlier stamp after it), those
 * out's roots did not bring, into out: the scan of some roots drops them
 * (docs/index.md). Usually none; SQLite reads the table, nothing is
 * allocated per row. 0, -ENOMEM, -EIO. */
static int load_racy(struct idx_db *db, int64_t scan_ns, struct idx_manifest *out,
                     char *path, char *link, uint64_t *bad)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *s = NULL;
	struct idx_manifest r = { 0 };
	int rc = -EIO;
	if (sqlite3_prepare_v2(h,
	        "SELECT path,type,mode,uid,gid,size,mtime_ns,ctime_ns,dev,ino,nlink,"
	        "rdev,link,hash,chunks,chk,extra,assumed FROM entries "
	        "WHERE mtime_ns>=?1 OR ctime_ns>=?1", -1, &s, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(s, 1, scan_ns);
	if ((rc = load_rows(s, &r, path, link, bad)) < 0 || !r.n)
		goto out;
	/* which are not in out yet, asked before any is added (out's search
	 * needs it sorted) */
	uint8_t *take = malloc(r.n);
	rc = -ENOMEM;
	if (!take)
		goto out;
	idx_manifest_sort(out);
	for (size_t i = 0; i < r.n; i++)
		take[i] = !idx_manifest_find(out, r.e[i].path);
	rc = 0;
	for (size_t i = 0; rc == 0 && i < r.n; i++)
		if (take[i])
			rc = idx_manifest_add(out, &r.e[i]);
	free(take);
out:
	sqlite3_finalize(s);
	idx_manifest_free(&r);
	return rc;
}

/* Add each directory above path (its parent, ..., "" the root) to the
 * list *v of *n (grown as needed). 0 or -ENOMEM. */
static int add_above(const char *path, char ***v, size_t *n, size_t *cap)
{
	for (const char *sl = strrchr(path, '/');; sl = memrchr(path, '/', (size_t)(sl - path))) {
		size_t l = sl ? (size_t)(sl - path) : 0;
		if (*n == *cap) {
			size_t c = *cap ? 2 * *cap : 64;
			char **g = realloc(*v, c * sizeof *g);
			if (!g)
				return -ENOMEM;
			*v = g;
			*cap = c;
		}
		if (!((*v)[*n] = strndup(path, l)))
			return -ENOMEM;
		(*n)++;
		if (!sl)
			return 0;
	}
}

/* The rows of the directories above the roots (the scan records them:
 * their rows are brought up to date, not written again each round), each
 * once. 0, -ENOMEM, -EIO. */
static int load_above(sqlite3_stmt *s, const char *const *roots, size_t nroots,
                      struct idx_manifest *out, char *path, char *link, uint64_t *bad)
{
	char **v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < nroots; i++)
		rc = add_above(roots[i], &v, &n, &cap);
	if (rc == 0)
		qsort(v, n, sizeof *v, path_cmp);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (i && !strcmp(v[i], v[i - 1]))
			continue;
		sqlite3_reset(s);
		sqlite3_bind_blob(s, 1, v[i], (int)strlen(v[i]), SQLITE_STATIC);
		sqlite3_bind_blob(s, 2, "", 0, SQLITE_STATIC);   /* no range: '' <= p < '' */
		sqlite3_bind_blob(s, 3, "", 0, SQLITE_STATIC);
		rc = load_rows(s, out, path, link, bad);
	}
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return rc;
}

static int root_cmp(const void *a, const void *b)
{
	return strcmp(((const struct idx_root *)a)->path, ((const struct idx_root *)b)->path);
}

/* Is path below a root of the n sorted in r that takes everything below
 * it (depth -1)? */
static int below_deep(const char *path, const struct idx_root *r, size_t n)
{
	char up[IDX_PATH_MAX + 1];
	snprintf(up, sizeof up, "%s", path);
	for (char *sl; (sl = strrchr(up, '/'));) {
		*sl = '\0';
		const struct idx_root *f = bsearch(&(struct idx_root){ .path = up }, r, n, sizeof *r,
		                                   root_cmp);
		if (f && f->depth == -1)
			return 1;
	}
	return 0;
}

/* A root and a directory of depth 1 above it both bring its row: once. */
static void drop_twice(struct idx_manifest *m)
{
	idx_manifest_sort(m);
	idx_manifest_drop_dups(m);
}

/* The rows each root covers (a --files-from scan, a --watch round, a
 * window): the root's own, and with depth 1 its entries', with -1 all
 * below it. A round costs the rows it looks at, not the tree's: a window
 * of directories taken one level each loads their entries only, never
 * the subtrees under them (SQLite filters them: nothing is allocated per
 * row it passes over). 0, -ENOMEM, -EIO. */
static int load_roots(struct idx_db *db, const struct idx_root *roots, size_t nroots,
                      struct idx_manifest *out, char *path, char *link, uint64_t *bad)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *s = NULL, *one = NULL, *top = NULL;
	struct idx_root *r = malloc((nroots ? nroots : 1) * sizeof *r);
	const char **v = malloc((nroots ? nroots : 1) * sizeof *v);
	char lo[IDX_PATH_MAX + 2], hi[IDX_PATH_MAX + 2];
	size_t n = 0, nv = 0;
	int rc = -ENOMEM;
	if (!r || !v)
		goto out;
	/* sorted, each path once with the widest of its depths */
	if (nroots) {
		memcpy(r, roots, nroots * sizeof *r);
		qsort(r, nroots, sizeof *r, root_cmp);
	}
	for (size_t i = 0; i < nroots; i++) {
		if (n && !strcmp(r[n - 1].path, r[i].path)) {
			int d = r[i].depth, w = r[n - 1].depth;
			r[n - 1].depth = d == -1 || w == -1 ? -1 : d > w ? d : w;
		} else {
			r[n++] = r[i];
		}
	}
	rc = -EIO;
#define ROW_COLS "SELECT path,type,mode,uid,gid,size,mtime_ns,ctime_ns,dev,ino,nlink," \
	         "rdev,link,hash,chunks,chk,extra,assumed FROM entries "
	if (sqlite3_prepare_v2(h, ROW_COLS "WHERE path=?1 OR (path>=?2 AND path<?3)", -1, &s,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, ROW_COLS "WHERE path=?1 OR (path>=?2 AND path<?3 AND "
	                       "instr(substr(path,?4),'/')=0)", -1, &one, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, ROW_COLS "WHERE instr(path,'/')=0", -1, &top, NULL) != SQLITE_OK)
		goto out;
#undef ROW_COLS
	rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		size_t l = strlen(r[i].path);
		if (l > IDX_PATH_MAX || below_deep(r[i].path, r, n))
			continue;   /* loaded with the root above it */
		v[nv++] = r[i].path;
		if (!l && r[i].depth == 1) {   /* the top and its entries */
			sqlite3_reset(top);
			rc = load_rows(top, out, path, link, bad);
			continue;
		}
		/* below it: from "root/" up to "root0" ('0' follows '/'); with
		 * depth 0 no range at all ('' <= p < '') */
		sqlite3_stmt *q = r[i].depth == 1 ? one : s;
		size_t rl = r[i].depth ? l + 1 : 0;
		memcpy(lo, r[i].path, l);
		memcpy(hi, r[i].path, l);
		lo[l] = '/';
		hi[l] = '0';
		sqlite3_reset(q);
		sqlite3_bind_blob(q, 1, r[i].path, (int)l, SQLITE_STATIC);
		sqlite3_bind_blob(q, 2, lo, (int)rl, SQLITE_STATIC);
		sqlite3_bind_blob(q, 3, hi, (int)rl, SQLITE_STATIC);
		if (q == one)
			sqlite3_bind_int64(q, 4, (sqlite3_int64)l + 2);   /* 1-based, after "root/" */
		rc = load_rows(q, out, path, link, bad);
	}
	if (rc == 0)
		rc = load_above(s, v, nv, out, path, link, bad);
	if (rc == 0)
		drop_twice(out);
out:
	sqlite3_finalize(s);
	sqlite3_finalize(one);
	sqlite3_finalize(top);
	free(r);
	free(v);
	return rc;
}

int idx_db_load(struct idx_db *db, struct idx_manifest *out, int64_t *scan_ns,
                uint64_t *total, const struct idx_root *roots, size_t nroots)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *s = NULL;
	char *path = malloc(IDX_PATH_MAX + 1), link[IDX_LINK_MAX + 1];
	uint64_t bad = 0;
	int rc = -ENOMEM;
	*scan_ns = 0;
	*total = 0;
	if (!path)
		goto out;
	rc = -EIO;
	if (idx_db_int(h, "SELECT value FROM meta WHERE key='scan_ns'", scan_ns) != SQLITE_OK)
		goto out;
	for (size_t i = 0; roots && i < nroots; i++)
		if (!*roots[i].path && roots[i].depth == -1)
			roots = NULL;   /* the whole tree */
	if (roots) {
		int64_t rows = 0;
		rc = load_roots(db, roots, nroots, out, path, link, &bad);
		if (rc == 0)
			rc = clean_is(idx_db_path(db), *scan_ns)
			     ? 0 : load_racy(db, *scan_ns, out, path, link, &bad);
		if (idx_db_int(h, "SELECT value FROM meta WHERE key='count'", &rows) == SQLITE_OK &&
		    rows > 0)
			*total = (uint64_t)rows;
		goto loaded;
	}
	/* the rows' count as last stored: the array at once, not grown by
	 * doubling through 4 KiB page faults. A hint only: absent before it
	 * was kept, stale after an older rdcp stored, never trusted past what
	 * the file could hold (a row takes more than 16 bytes), and a reserve
	 * that fails costs nothing but the doubling */
	int64_t rows = 0, pages = 0, page = 0;
	if (idx_db_int(h, "SELECT value FROM meta WHERE key='count'", &rows) == SQLITE_OK &&
	    idx_db_int(h, "PRAGMA page_count", &pages) == SQLITE_OK &&
	    idx_db_int(h, "PRAGMA page_size", &page) == SQLITE_OK && rows > 1 &&
	    pages > 0 && page > 0 && rows <= pages * (page / 16) && rows < (int64_t)1 << 32)
		(void)idx_manifest_reserve(out, (size_t)rows);
	/* One pass over every page: a small page cache does, and the default
	 * (2 MB) would be that much more memory touched for the first time
	 * (docs/index.md, "Memory"); the writes get the default back. */
	sqlite3_exec(h, "PRAGMA cache_size=-256", NULL, NULL, NULL);
	if (sqlite3_prepare_v2(h,
	        "SELECT path,type,mode,uid,gid,size,mtime_ns,ctime_ns,dev,ino,nlink,"
	        "rdev,link,hash,chunks,chk,extra,assumed FROM entries", -1, &s,
	        NULL) != SQLITE_OK)
		goto out;
	rc = load_rows(s, out, path, link, &bad);
loaded:
	if (rc == 0 && bad)
		log_warn("index %s: %llu damaged rows ignored (their files will be hashed again)",
		         idx_db_path(db), (unsigned long long)bad);
out:
	sqlite3_finalize(s);
	sqlite3_exec(h, "PRAGMA cache_size=-2000", NULL, NULL, NULL);
	free(path);
	if (rc == 0)
		idx_manifest_sort(out);
	else
		idx_manifest_free(out);
	if (*total < out->n)
		*total = out->n;
	return rc;
}

int idx_row_bind(sqlite3_stmt *s, const struct idx_entry *e)
{
	sqlite3_bind_blob(s, 1, e->path, (int)strlen(e->path), SQLITE_STATIC);
	sqlite3_bind_int(s, 2, e->type);
	sqlite3_bind_int64(s, 3, e->mode);
	sqlite3_bind_int64(s, 4, e->uid);
	sqlite3_bind_int64(s, 5, e->gid);
	sqlite3_bind_int64(s, 6, (int64_t)e->size);
	sqlite3_bind_int64(s, 7, e->mtime_ns);
	sqlite3_bind_int64(s, 8, e->ctime_ns);
	sqlite3_bind_int64(s, 9, (int64_t)e->dev);
	sqlite3_bind_int64(s, 10, (int64_t)e->ino);
	sqlite3_bind_int64(s, 11, e->nlink);
	sqlite3_bind_int64(s, 12, (int64_t)e->rdev);
	if (e->link)
		sqlite3_bind_blob(s, 13, e->link, (int)strlen(e->link), SQLITE_STATIC);
	else
		sqlite3_bind_null(s, 13);
	sqlite3_bind_blob(s, 14, e->hash, IDX_HASH_LEN, SQLITE_STATIC);
	if (e->nchunks)
		sqlite3_bind_blob(s, 15, e->chunks, (int)(e->nchunks * IDX_HASH_LEN),
		                  SQLITE_STATIC);
	else
		sqlite3_bind_null(s, 15);
	sqlite3_bind_int64(s, 16, row_chk(e));
	struct wire_wr w = { 0 };
	if (e->got) {
		unsigned bits = idx_extra_bits(e->x);
		wr_u8(&w, e->got);
		wr_u8(&w, (uint8_t)bits);
		idx_extra_put(&w, e->x, bits);
		if (w.bad)
			return -ENOMEM;
		sqlite3_bind_blob(s, 17, w.buf, (int)w.len, SQLITE_STATIC);
	} else {
		sqlite3_bind_null(s, 17);
	}
	if (e->flags & IDX_F_ASSUMED)
		sqlite3_bind_int(s, 18, 1);
	else
		sqlite3_bind_null(s, 18);
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	free(w.buf);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

static int del_row(sqlite3_stmt *s, const char *path)
{
	sqlite3_bind_blob(s, 1, path, (int)strlen(path), SQLITE_STATIC);
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

/* An entry of old that was never read has no row to delete or keep (old
 * is then a scan's result, which the scan stored: idx_stats.stored). */
#define NOROW IDX_F_NOHASH

int idx_db_store(struct idx_db *db, const struct idx_manifest *old,
                 const struct idx_manifest *now, uint64_t kept, int64_t scan_ns)
{
	sqlite3 *h = idx_db_handle(db);
	sqlite3_stmt *ins = NULL, *del = NULL, *meta = NULL;
	int rc = -EIO;
	int64_t before = INT64_MAX;   /* the stamp this store replaces */
	clean_set(idx_db_path(db), -1);
	if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	if (idx_db_int(h, "SELECT value FROM meta WHERE key='scan_ns'", &before) != SQLITE_OK)
		before = 0;   /* none: a new index */
	if (kept == IDX_DB_KEPT_REST) {
		/* old's rows are those its scan stored: read, and older than that
		 * scan's stamp (the one stored now) */
		int64_t had = 0, at = INT64_MAX;
		uint64_t mine = 0;
		idx_db_int(h, "SELECT value FROM meta WHERE key='scan_ns'", &at);
		for (size_t k = 0; k < old->n; k++) {
			const struct idx_entry *o = &old->e[k];
			mine += !(o->flags & (NOROW | IDX_F_UNSTABLE)) && o->mtime_ns < at &&
			        o->ctime_ns < at;
		}
		kept = idx_db_int(h, "SELECT value FROM meta WHERE key='count'", &had) == SQLITE_OK &&
		       had > 0 && (uint64_t)had > mine ? (uint64_t)had - mine : 0;
	}
	if (sqlite3_prepare_v2(h, "INSERT OR REPLACE INTO entries(path,type,mode,uid,"
	        "gid,size,mtime_ns,ctime_ns,dev,ino,nlink,rdev,link,hash,chunks,chk,extra,"
	        "assumed) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,"
	        "?17,?18)", -1, &ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, "DELETE FROM entries WHERE path=?1", -1, &del,
	        NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, "INSERT OR REPLACE INTO meta VALUES('scan_ns', ?1), "
	        "('count', ?2)", -1, &meta, NULL) != SQLITE_OK)
		goto fail;
	/* Merge the two sorted lists: write only what changed. */
	size_t i = 0, j = 0;
	uint64_t rows = kept;
	while (i < old->n || j < now->n) {
		int c = i == old->n ? 1 : j == now->n ? -1
		        : strcmp(old->e[i].path, now->e[j].path);
		if (c < 0) {   /* gone, or not in now (a file now without a row) */
			if (!(old->e[i].flags & NOROW) && del_row(del, old->e[i].path) < 0)
				goto fail;
			i++;
			continue;
		}
		const struct idx_entry *e = &now->e[j++];
		const struct idx_entry *o = c == 0 ? &old->e[i++] : NULL;
		if ((e->flags & (IDX_F_UNSTABLE | IDX_F_NOHASH)) || e->mtime_ns >= scan_ns ||
		    e->ctime_ns >= scan_ns) {
			/* changed while we read it, or not read: no hash to keep;
			 * or changed in or after the clock tick of this stamp: a
			 * later write in that tick would not show in its stat, so
			 * no scan would trust the row, and no later store (another
			 * process's, of some roots only, stamping a later time) may
			 * find it stored and vouch for it */
			if (o && !(o->flags & NOROW) && del_row(del, e->path) < 0)
				goto fail;
			continue;
		}
		rows++;
		if (o && !(o->flags & NOROW) && row_chk(o) == row_chk(e))
			continue;
		if (idx_row_bind(ins, e) < 0)
			goto fail;
	}
	sqlite3_bind_int64(meta, 1, scan_ns);
	sqlite3_bind_int64(meta, 2, (int64_t)rows);
	if (sqlite3_step(meta) != SQLITE_DONE)
		goto fail;
	if (sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	if (scan_ns >= before)
		clean_set(idx_db_path(db), scan_ns);   /* no racy row left */
	rc = 0;
	goto out;
fail:
	log_err("index %s: cannot update: %s", idx_db_path(db), sqlite3_errmsg(h));
	sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
out:
	sqlite3_finalize(ins);
	sqlite3_finalize(del);
	sqlite3_finalize(meta);
	return rc;
}

