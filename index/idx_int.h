/* Private to index/: shared between the walker, the database and the scan. */
#ifndef RDCP_INDEX_INT_H
#define RDCP_INDEX_INT_H

#include <sqlite3.h>
#include <string.h>

#include "common/wire.h"
#include "index/index.h"

/*
 * Hash len bytes of fd from off with pread into buf (cap bytes), XXH3-128
 * canonical into out. *got is how many bytes were actually there (less than
 * len if the file shrank). Returns 0 or -errno.
 */
int idx_hash_range(int fd, uint64_t off, uint64_t len, uint8_t *buf, size_t cap,
                   uint8_t out[IDX_HASH_LEN], uint64_t *got);

/*
 * The previous index, as the walker gets it: load() fills old (sorted) and
 * trust_before_ns (rows stamped at or after it are not trusted: the start
 * of the scan that wrote them); 0 or -ENOMEM. The walker runs it on a
 * thread of its own while it walks; load NULL: old is as given.
 */
struct idx_prev {
	struct idx_manifest old;
	uint64_t total;          /* the rows in the index: old's, or more when
	                            only some roots' rows were loaded */
	int64_t trust_before_ns;
	int (*load)(struct idx_prev *prev);
};

/*
 * Walk the tree under root_fd into out (unsorted). Regular files whose
 * fingerprint (size, mtime, ctime, inode) matches their entry in prev->old
 * and that are older than prev->trust_before_ns take their hash from it;
 * all others are hashed. Uses `threads` threads.
 */
int idx_walk(int root_fd, struct idx_prev *prev, int threads,
             const struct idx_scan_opts *opts, struct idx_manifest *out,
             struct idx_stats *st);
/* A new entry at the end of m, zeroed (its strings are the caller's to
 * set, and then m's); NULL when out of memory. */
struct idx_entry *idx_manifest_push(struct idx_manifest *m);
/* m sorted by path: each path once (the later entries of a path freed).
 * The count dropped. */
size_t idx_manifest_drop_dups(struct idx_manifest *m);

/*
 * Read the xattrs and ACLs (want: IDX_SCAN_*) of the entry `name` in dfd
 * (NULL: dfd itself) into e->x, replacing what was there, and set e->got.
 * e->type and e->ino must be set (from the walker's stat). 0 or -errno:
 * -E2BIG when the entry is over the bounds of index.h.
 */
int  idx_read_extra(int dfd, const char *name, struct idx_entry *e, unsigned want);
/* The IDX_GOT_* bits a scan for want (IDX_SCAN_*) sets, for this process. */
unsigned idx_got_for(unsigned want);
/* Sort n ACL entries by (tag, id). */
void idx_acl_sort(struct idx_ace *a, uint16_t n);

/*
 * The encoding of an entry's extras, shared by the manifest and the index
 * (docs/protocol.md): idx_extra_bits() says which sections x has (IDX_E_*
 * bits of an entry's flags byte), idx_extra_put() writes those of bits, and
 * idx_extra_get() reads the sections bits names, checking them as peer
 * input (sorted, unique, bounded, xattr names of the namespaces of
 * all_ns (see idx_xattr_in_scope()), ACLs well formed) into *x (malloc'd,
 * NULL when bits is 0). get: 0, or -EBADMSG with a phrase that follows
 * "has" in *why (static text); -ENOMEM.
 */
enum {
	IDX_E_XATTRS = 1 << 1,   /* the entry's flags on the wire */
	IDX_E_ACL    = 1 << 2,
	IDX_E_DACL   = 1 << 3,
	IDX_E_UNREAD = 1 << 4,   /* they could not be read (no sections) */
};
unsigned idx_extra_bits(const struct idx_extra *x);
void idx_extra_put(struct wire_wr *w, const struct idx_extra *x, unsigned bits);
int  idx_extra_get(struct wire_rd *r, unsigned bits, int all_ns, struct idx_extra **x,
                   const char **why);

struct idx_db;
/* Open (creating or rebuilding as needed) the index at path for root. */
int  idx_db_open(const char *path, const char *root, struct idx_db **out);
/* Load every trustworthy row (with roots: those at or below one of them),
 * sorted by path; *scan_ns: when it was taken; *total: the index's rows. */
int  idx_db_load(struct idx_db *db, struct idx_manifest *out, int64_t *scan_ns,
                 uint64_t *total, const struct idx_root *roots, size_t nroots);
/* Bring the stored rows from old to now, in one transaction; kept: the
 * rows in neither that stay (a scan of some roots), for the count, or
 * IDX_DB_KEPT_REST: all but old's, as many as the last count had (a save
 * after a scan of some roots, whose old is that scan's result). */
#define IDX_DB_KEPT_REST UINT64_MAX
int  idx_db_store(struct idx_db *db, const struct idx_manifest *old,
                  const struct idx_manifest *now, uint64_t kept, int64_t scan_ns);
/* The columns of a row, in the order idx_row_read() reads them. */
#define IDX_ROW_COLS "path,type,mode,uid,gid,size,mtime_ns,ctime_ns,dev,ino,nlink," \
                     "rdev,link,hash,chunks,chk,extra,assumed"
/* The current row of s (IDX_ROW_COLS) into e, its path and link into the
 * buffers (IDX_PATH_MAX + 1, IDX_LINK_MAX + 1 bytes), its chunks SQLite's
 * (valid until the next step), its extras e->x malloc'd: 0, or -EBADMSG
 * when the row is not sound. bind: e as the 18 parameters of an INSERT
 * of IDX_ROW_COLS, stepped: 0 or -EIO (-ENOMEM). */
int  idx_row_read(sqlite3_stmt *s, struct idx_entry *e, char *path, char *link);
int  idx_row_bind(sqlite3_stmt *s, const struct idx_entry *e);
/* Rows were written outside a scan's store: no longer known free of racy
 * rows (a load then looks for them). */
void idx_db_unclean(struct idx_db *db);
/* Remove path's row (none: 0). 0 or -EIO. */
int  idx_db_forget(struct idx_db *db, const char *path);
/* A note of the tree kept with its index (a key of the meta table that the
 * index does not use itself): *val malloc'd, NULL when there is none.
 * 0, -EINVAL (a key of the index's own), -ENOMEM or -EIO. */
int  idx_db_note_get(struct idx_db *db, const char *key, char **val);
int  idx_db_note_set(struct idx_db *db, const char *key, const char *val);
/* Throw the stored index away (with a warning) and start an empty one. */
int  idx_db_reset(struct idx_db *db, const char *why);
void idx_db_close(struct idx_db *db);
/* The index of the tree at root as idx_scan() would open it (opts: its
 * index_path, only, no_index); 0 with *db NULL when there is none to use. */
int  idx_db_open_tree(const char *root, const struct idx_scan_opts *opts, struct idx_db **db);
/* The open database handle (index/partial.c keeps a table of its own). */
sqlite3 *idx_db_handle(struct idx_db *db);
/* Its file's path (for messages). */
const char *idx_db_path(const struct idx_db *db);
/* The integer the query sql answers into *v (left as it was when there is
 * no row): SQLITE_OK, or SQLite's code. */
int idx_db_int(sqlite3 *h, const char *sql, int64_t *v);
/*
 * What an index file says about itself: the tree it indexes (*root, the key
 * given to idx_db_open(), malloc'd; NULL if it does not say), when it was
 * last used (*used_ns: the start of the last scan stored; 0 if unknown), and
 * when entries is not NULL its row count (-1 if unknown). Changes nothing.
 * 0, -EIO when it is not a readable rdcp index, or -ENOMEM.
 */
int  idx_db_peek(const char *path, char **root, int64_t *used_ns, int64_t *entries);

/* --- index/cache.c --- */
/*
 * The default index file of a tree identified by key (its real path), named
 * after name for people looking in the cache directory: *out, malloc'd, or
 * NULL when the cache directory cannot be used (warned once, see
 * idx_cache_dir_warn()). 0 or -ENOMEM.
 */
int  idx_cache_file(const char *key, const char *name, char **out);
/*
 * Hold the index file at path (created if missing) for as long as it is
 * used: no prune removes a held file. Returns the descriptor that holds it,
 * or a negative errno. Release with idx_unhold() only after SQLite has
 * closed the file: closing a descriptor drops this process's POSIX locks
 * on the file, SQLite's among them (so a prune here never opens a file this
 * process holds).
 */
int  idx_hold(const char *path);
void idx_unhold(int fd);   /* -1: nothing */
/*
 * The automatic prune (docs/index.md): at most once a day per cache
 * directory, by a timestamp file, remove the indexes whose tree is gone or
 * that were unused for IDX_PRUNE_DAYS days; quiet. Costs one stat when it
 * has run within the day.
 */
void idx_cache_autoprune(void);

#endif
