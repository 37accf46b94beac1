/*
 * Partial files: the sync receiver's records of temp files cut off mid-way
 * (rdcp --partial), in a table of the tree's own index. The table is made
 * when first needed and is no part of the scan's rows: an index without it
 * is simply one with no partial files.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "index/idx_int.h"

struct idx_partials {
	struct idx_db *db;
};

static const char table[] =
	"CREATE TABLE IF NOT EXISTS partial(path BLOB PRIMARY KEY, tmp TEXT NOT NULL,"
	" ino INTEGER NOT NULL, size INTEGER NOT NULL, chunks BLOB NOT NULL) WITHOUT ROWID;";

int idx_partials_open(const char *root, const struct idx_scan_opts *opts,
                      struct idx_partials **out)
{
	struct idx_db *db;
	*out = NULL;
	int rc = idx_db_open_tree(root, opts, &db);
	if (rc < 0 || !db)
		return rc;
	if (sqlite3_exec(idx_db_handle(db), table, NULL, NULL, NULL) != SQLITE_OK) {
		log_warn("index of %s: cannot keep partial files: %s", root,
		         sqlite3_errmsg(idx_db_handle(db)));
		idx_db_close(db);
		return -EIO;
	}
	if (!(*out = malloc(sizeof **out))) {
		idx_db_close(db);
		return -ENOMEM;
	}
	(*out)->db = db;
	return 0;
}

void idx_partials_close(struct idx_partials *p)
{
	if (!p)
		return;
	idx_db_close(p->db);
	free(p);
}

int idx_partial_decode(const uint8_t *b, size_t len, uint32_t n, struct idx_partial *r)
{
	if (len != (size_t)n * (1 + IDX_HASH_LEN))
		return -EBADMSG;
	r->n = n;
	r->done = malloc(n ? n : 1);
	r->digest = malloc(n ? (size_t)n * IDX_HASH_LEN : 1);
	if (!r->done || !r->digest)
		return -ENOMEM;
	memcpy(r->done, b, n);
	memcpy(r->digest, b + n, (size_t)n * IDX_HASH_LEN);
	return 0;
}

/* One row into r; 0, -EBADMSG (not a record we wrote), -ENOMEM. */
static int row_get(sqlite3_stmt *s, struct idx_partial *r)
{
	const char *tmp = (const char *)sqlite3_column_text(s, 1);
	int64_t size = sqlite3_column_int64(s, 3);
	int plen = sqlite3_column_bytes(s, 0);
	memset(r, 0, sizeof *r);
	if (!tmp || strlen(tmp) != IDX_TEMP_NAME_LEN || !idx_is_temp_name(tmp) || size <= 0 ||
	    plen <= 0 || (uint64_t)size > (UINT64_C(1) << 50))
		return -EBADMSG;
	if (!(r->path = strndup(sqlite3_column_blob(s, 0), (size_t)plen)))
		return -ENOMEM;
	memcpy(r->tmp, tmp, IDX_TEMP_NAME_LEN + 1);
	r->ino = (uint64_t)sqlite3_column_int64(s, 2);
	r->size = (uint64_t)size;
	uint32_t n = (uint32_t)((r->size + IDX_CHUNK_SIZE - 1) / IDX_CHUNK_SIZE);
	return idx_partial_decode(sqlite3_column_blob(s, 4), (size_t)sqlite3_column_bytes(s, 4),
	                          n, r);
}

int idx_partials_load(struct idx_partials *p, struct idx_partial **recs, size_t *n)
{
	sqlite3_stmt *s;
	size_t cap = 0;
	int rc = 0;
	*recs = NULL;
	*n = 0;
	if (sqlite3_prepare_v2(idx_db_handle(p->db), "SELECT path, tmp, ino, size, chunks "
	                       "FROM partial", -1, &s, NULL) != SQLITE_OK)
		return -EIO;
	while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			struct idx_partial *g = realloc(*recs, cap * sizeof *g);
			if (!g) {
				rc = -ENOMEM;
				break;
			}
			*recs = g;
		}
		int got = row_get(s, &(*recs)[*n]);
		if (got == 0) {
			(*n)++;
		} else {   /* not one of ours: dropped (its temp, if any, is cleaned) */
			idx_partials_free_list(&(*recs)[*n], 1);
			rc = got == -ENOMEM ? got : 0;
		}
	}
	sqlite3_finalize(s);
	return rc;
}

void idx_partials_free_list(struct idx_partial *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(recs[i].path);
		free(recs[i].done);
		free(recs[i].digest);
		recs[i].path = NULL;
		recs[i].done = recs[i].digest = NULL;
	}
}

int idx_partial_put(struct idx_partials *p, const struct idx_partial *r)
{
	sqlite3_stmt *s;
	size_t len = (size_t)r->n * (1 + IDX_HASH_LEN);
	uint8_t *b = malloc(len ? len : 1);
	if (!b)
		return -ENOMEM;
	memcpy(b, r->done, r->n);
	memcpy(b + r->n, r->digest, (size_t)r->n * IDX_HASH_LEN);
	int rc = sqlite3_prepare_v2(idx_db_handle(p->db), "INSERT OR REPLACE INTO partial "
	                            "VALUES(?1, ?2, ?3, ?4, ?5)", -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_blob(s, 1, r->path, (int)strlen(r->path), SQLITE_STATIC);
		sqlite3_bind_text(s, 2, r->tmp, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, (int64_t)r->ino);
		sqlite3_bind_int64(s, 4, (int64_t)r->size);
		sqlite3_bind_blob(s, 5, b, (int)len, SQLITE_STATIC);
		rc = sqlite3_step(s);
		sqlite3_finalize(s);
	}
	free(b);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

int idx_partial_del(struct idx_partials *p, const char *path)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(idx_db_handle(p->db), "DELETE FROM partial WHERE path=?1",
	                            -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_blob(s, 1, path, (int)strlen(path), SQLITE_STATIC);
		rc = sqlite3_step(s);
		sqlite3_finalize(s);
	}
	return rc == SQLITE_DONE ? 0 : -EIO;
}
