/*
 * index: walk a tree, remember every entry in a SQLite index so that a
 * re-scan hashes only what changed, serialise the result as a manifest, and
 * diff two manifests.
 *
 * Conventions: functions return 0 or a negative errno code; they print what
 * failed (with the path and the errno text) to stderr where it failed.
 * Nothing here depends on the rest of rdcp.
 */
#ifndef RDCP_INDEX_H
#define RDCP_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Files are hashed in fixed chunks of this size; see docs/index.md. */
#define IDX_CHUNK_SIZE  ((uint64_t)4 << 20)
#define IDX_HASH_LEN    16
/* The largest file rdcp moves: one whose chunk count fits the 32-bit counts
 * of the manifest, the index and the chunk messages (4 MiB short of 16 PiB).
 * A larger size from a peer is refused where its manifest is decoded, and a
 * larger file on disk is an error of the scan. */
#define IDX_SIZE_MAX    ((uint64_t)UINT32_MAX * IDX_CHUNK_SIZE)
/* Longest relative path we accept, from disk or from a peer. */
#define IDX_PATH_MAX    32768
/* Longest symlink target we accept. */
#define IDX_LINK_MAX    4096
/* Extended attributes (-X): a name of 1..255 bytes (Linux's XATTR_NAME_MAX),
 * a value of at most 64 KiB (XATTR_SIZE_MAX), and names and values of one
 * entry together at most 1 MiB (a bound of ours: an entry over it is an
 * error of the scan, and a peer's manifest with one is refused). */
#define IDX_XATTR_NAME_MAX  255
#define IDX_XATTR_VALUE_MAX 65536
#define IDX_XATTR_TOTAL_MAX (1u << 20)
/* Entries of one POSIX ACL (what fits in one 64 KiB xattr on Linux). */
#define IDX_ACL_MAX     8191

enum idx_type {
	IDX_REG = 1,
	IDX_DIR,
	IDX_LNK,
	IDX_FIFO,
	IDX_CHR,
	IDX_BLK,
	IDX_SOCK,
};

enum {
	IDX_F_UNSTABLE = 1 << 0,  /* changed while we read it: hash not trusted */
	IDX_F_HASHED   = 1 << 1,  /* hashed by this scan (not taken from the index) */
	IDX_F_ASSUMED  = 1 << 2,  /* chunk digests of a grown file's old part taken
	                             from the index unread (trust_prefix): only a
	                             scan that trusts them too reuses its hash;
	                             kept in the index, never sent */
	IDX_F_NOHASH   = 1 << 3,  /* a regular file not read (idx_scan_opts.
	                             lazy_below, or a manifest's nohash_below):
	                             its hash is not known; no index row */
};

/* What of an entry's extended attributes and ACLs was read (idx_entry.got):
 * an entry without IDX_GOT_XATTRS says nothing about its xattrs, one with
 * it and no xattrs in x has none (in the namespaces read). */
enum {
	IDX_GOT_XATTRS     = 1 << 0,  /* xattrs: of the user.* namespace, */
	IDX_GOT_XATTRS_ALL = 1 << 1,  /* with XATTRS: of every namespace but
	                                 system.* (read as root) */
	IDX_GOT_ACLS       = 1 << 2,  /* POSIX ACLs (access; default of directories) */
};

/* One entry of a POSIX ACL. Tags in the order an ACL lists them. */
enum idx_acl_tag {
	IDX_ACL_USER_OBJ = 1,
	IDX_ACL_USER,
	IDX_ACL_GROUP_OBJ,
	IDX_ACL_GROUP,
	IDX_ACL_MASK,
	IDX_ACL_OTHER,
};
struct idx_ace {
	uint32_t id;       /* uid or gid of IDX_ACL_USER / IDX_ACL_GROUP, else 0 */
	uint8_t  tag;      /* enum idx_acl_tag */
	uint8_t  perm;     /* rwx as 4|2|1 */
};

/*
 * An entry's extended attributes and ACLs, when it has any; one allocation
 * (free() frees it), made by idx_extra_new(). xattrs holds nxattrs items
 * sorted bytewise by name, each: name length (1), name (no NUL), value
 * length (4, big-endian), value. acl is the access ACL, only when it says
 * more than the mode (it has a mask entry); dacl a directory's default
 * ACL. Both list every entry, sorted by (tag, id).
 */
struct idx_extra {
	uint8_t        *xattrs;
	struct idx_ace *acl, *dacl;
	uint32_t        xattrs_len;
	uint16_t        nxattrs, nacl, ndacl;
};

/*
 * One entry of a tree. path is relative to the root, '/'-separated, without
 * a leading "./"; the root itself is "". Strings are owned by the manifest.
 */
struct idx_entry {
	char     *path;
	char     *link;        /* symlink target, else NULL */
	uint8_t  *chunks;      /* nchunks * IDX_HASH_LEN digests when nchunks > 1 */
	uint64_t  size;
	int64_t   mtime_ns;
	int64_t   ctime_ns;
	uint64_t  dev, ino, rdev;
	uint32_t  nlink;
	uint32_t  mode;        /* permission bits incl. setuid/setgid/sticky */
	uint32_t  uid, gid;
	uint32_t  nchunks;
	uint32_t  hlink;       /* hardlink group: 1-based index of the group's
	                          first entry in the manifest, 0 for none */
	uint8_t   type;        /* enum idx_type */
	uint8_t   flags;       /* IDX_F_* */
	uint8_t   got;         /* IDX_GOT_*: what of x was read */
	uint8_t   hash[IDX_HASH_LEN];  /* content hash (regular files) */
	struct idx_extra *x;   /* xattrs and ACLs, NULL when none (or not read) */
};

/* A name for a uid or gid of the manifest (rsync's user and group lists):
 * the sender's names, for the receiver to map ids by name. */
enum { IDX_NAME_USER = 1, IDX_NAME_GROUP = 2 };
struct idx_name {
	uint32_t id;
	uint8_t  kind;        /* IDX_NAME_USER or IDX_NAME_GROUP */
	char    *name;        /* 1..255 bytes */
};

/* What a manifest's entries carry besides what every manifest has. */
enum {
	IDX_MF_XATTRS     = 1 << 0,  /* xattrs were read: of user.* only, */
	IDX_MF_XATTRS_ALL = 1 << 1,  /* or of every namespace but system.* */
	IDX_MF_ACLS       = 1 << 2,  /* ACLs were read */
};

/* A list of entries sorted by path (bytewise), parents before children. */
struct idx_manifest {
	struct idx_entry *e;
	size_t            n, cap;
	unsigned          flags;     /* IDX_MF_*: what was read of every entry */
	struct idx_name  *names;     /* sorted by (kind, id), each once */
	size_t            nnames;
	uint32_t          nohash_below;  /* encoded without their hash (they get
	                                    IDX_F_NOHASH when decoded): regular
	                                    files of fewer bytes; a multiple of
	                                    1024, at most IDX_NOHASH_MAX */
};
#define IDX_NOHASH_MAX (65535u << 10)
/* A file whose ctime is older than this many seconds is settled: no write
 * in progress (one stalls for less), no dirty page of a shared mapping
 * waiting to stamp it (the kernel writes them back within 35 s), and on a
 * filesystem of whole-second timestamps, any write now stamps it anew. */
#define IDX_SETTLED_S 60

struct idx_stats {
	uint64_t entries, files, dirs, symlinks, other;
	uint64_t bytes;           /* sum of regular file sizes */
	uint64_t hashed, hashed_bytes;
	uint64_t reused;          /* regular files whose hash came from the index */
	uint64_t extra_read;      /* entries whose xattrs/ACLs were read (-X, -A);
	                             the others' came from the index */
	uint64_t errors;          /* entries that could not be read */
	uint64_t vanished;        /* entries gone while the scan looked at them
	                             (said): no error, but what the scan saw of
	                             their directory may be short of it */
	uint64_t temps;           /* rdcp temp files seen (left by a crash) */
	int      stored;          /* 1: the index now holds what the scan saw (a
	                             later idx_save() may start from its result) */
	double   seconds;
	int64_t  stamp_ns;        /* the scan's stamp: a file changed at or after
	                             it gets no row in the index */
};

struct idx_scan_opts {
	const char *index_path;   /* NULL: default under $XDG_CACHE_HOME/rdcp */
	int         no_index;     /* 1: do not read or write an index at all */
	int         threads;      /* 0: one per online CPU */
	int         verbose;
	const char *only;         /* record only this name of the root (and what
	                             is below it); the index is then kept per
	                             root/only */
	/* Optional: return nonzero to leave path (and, for a directory, all
	 * below it) out of the scan. Called from several threads at once. */
	int       (*skip)(const char *path, int is_dir, void *ctx);
	void       *skip_ctx;
	/* Optional: scan only these entries (and the directories above them,
	 * which are recorded but not descended into nor given to skip). The
	 * index keeps the whole tree's rows: only those of what was scanned
	 * are brought up to date (and any the last scan could not vouch for
	 * are dropped, see docs/index.md). */
	const struct idx_root *roots;
	size_t      nroots;
	int         roots_optional;   /* a root (or a directory above one) that
	                                 is not there (or is no longer a
	                                 directory) is no error: a destination,
	                                 a --watch round */
	int         one_fs;       /* 1: directories on another filesystem than
	                             the root are recorded but not descended
	                             into; 2: left out */
	unsigned    meta;         /* IDX_SCAN_*: what else to read of each entry */
	int         trust_prefix; /* 1 (rsync's --append): a file that grew, same
	                             inode, keeps the digests of the old size's
	                             whole chunks from the index unread; only the
	                             rest is hashed (IDX_F_ASSUMED) */
	const struct idx_manifest *grown_hint;   /* sorted, optional: under
	                             trust_prefix, also the rows an earlier scan
	                             in this process made of files the index kept
	                             no row of (written as they were read: a
	                             recording under --watch), for the same rule */
	uint64_t    lazy_below;   /* regular files of fewer bytes whose hash the
	                             index does not have, settled (ctime over
	                             IDX_SETTLED_S ago), are not read: they get
	                             IDX_F_NOHASH (a sync hashes them as it sends
	                             them); 0: every file is hashed */
	int         lazy_all;     /* 1: no regular file the index has no hash
	                             of is read, whatever its size (IDX_F_NOHASH):
	                             a ranked run's look at the files it splits,
	                             which its ranks hash a part each */
	const struct idx_manifest *known;   /* sorted, optional: rows another
	                             index vouched for (a ranked run's shards,
	                             idx_dirs_rows()): a regular file with no
	                             usable row of its own whose type, size,
	                             inode, mtime and ctime match one takes its
	                             digests from it unread */
	int         lazy_any;     /* 1: lazy_below applies to every such file,
	                             settled or not, on any filesystem (a sync's
	                             receiver without -c, which compares small
	                             files by size and mtime alone) */
};

/* An entry to scan (idx_scan_opts.roots): path relative to the root, ""
 * the root itself; depth: 0 the entry only, 1 and a directory's entries,
 * -1 everything below it. */
struct idx_root {
	const char *path;
	int depth;
};

/* Read extended attributes (of user.* only, or as root of every namespace
 * but system.*) and POSIX ACLs. An unchanged entry (by the index's rule for
 * hashes) takes them from the index. */
enum {
	IDX_SCAN_XATTRS = 1 << 0,
	IDX_SCAN_ACLS   = 1 << 1,
};

/* rdcp's temp files are named IDX_TEMP_PREFIX + 16 random hex digits + 16
 * hex digits of a check over them (index/temp.c). Only names that pass the
 * check are rdcp's: never recorded by a scan (counted in stats.temps), and
 * removed by the next sync; any other name, ".rdcp-tmp-notes" included, is
 * a user's file like any other. */
#define IDX_TEMP_PREFIX ".rdcp-tmp-"
#define IDX_TEMP_NAME_LEN (sizeof IDX_TEMP_PREFIX - 1 + 32)
/* A fresh temp name into buf (IDX_TEMP_NAME_LEN + 1 bytes). */
void idx_temp_name(char *buf);
/* The temp name of seed into buf: the same for the same seed (a ranked
 * run's split file, whose receivers all write one temp). */
void idx_temp_name_of(char *buf, uint64_t seed);
/* 1 when name is one idx_temp_name() could have made, else 0. */
int  idx_is_temp_name(const char *name);

/*
 * Scan the directory tree at root into *out (which must be zeroed or freed).
 * Unchanged regular files take their hash from the index; the rest are
 * hashed. The index is then brought up to date in one transaction.
 * A missing, corrupt or foreign index is rebuilt with a one-line warning.
 * Entries that cannot be read are counted in stats->errors and reported;
 * the scan goes on. Returns 0, or a negative errno if the root is unusable.
 */
int idx_scan(const char *root, const struct idx_scan_opts *opts,
             struct idx_manifest *out, struct idx_stats *stats);

/* Path of the default index file for root, in a malloc'd string (or NULL,
 * also when the cache directory cannot be used). */
char *idx_default_path(const char *root);

/*
 * The index cache (index/cache.c; the rules: docs/index.md): the directory
 * of the default index files, $XDG_CACHE_HOME/rdcp, else $HOME/.cache/rdcp,
 * one file per tree ever scanned, and how it is kept from growing forever.
 */
#define IDX_PRUNE_DAYS 90   /* the automatic prune's age limit */

/*
 * The cache directory, created (mode 0700) if missing; NULL when it cannot
 * be used (HOME unset, read-only, not a directory, another user's, writable
 * by others), and then *why (if not NULL) says so in a phrase naming it.
 * Decided once per process and kept: a forked child inherits the decision.
 * Thread-safe; the strings are static.
 */
const char *idx_cache_dir(const char **why);
/* The same for a run that wants an index: the first time in this process
 * that the directory cannot be used, one warning line says why, that every
 * file will be hashed and that --no-index silences it. A run that forks its
 * other side calls it first, so that the run warns once. */
const char *idx_cache_dir_warn(void);
/* One line per index file of the cache directory on out: last used, whether
 * its tree still exists, size, entries, the tree; then a total line.
 * 0, or a negative errno (said on stderr) when the directory is unusable. */
int idx_cache_list(FILE *out);

struct idx_prune_result {
	uint64_t removed, bytes;   /* index files removed, bytes freed */
	uint64_t kept;             /* left: tree there and used recently */
	uint64_t busy;             /* left: a running rdcp holds them */
	uint64_t errors;           /* could not be removed (said on stderr) */
};
/*
 * Remove the index files of the cache directory whose tree is gone or that
 * were last used more than days days ago (0: all), never one that a running
 * rdcp holds; one line per file removed or held on report (NULL: quiet).
 * 0, or a negative errno (said on stderr) when the directory is unusable.
 */
int idx_cache_prune(int days, FILE *report, struct idx_prune_result *res);

/*
 * Remove the row of path from the index of root (opts as for idx_scan():
 * index_path, only, no_index), so that the next scan reads the file: for a
 * sender that found a file other than its row said (a row of digests taken
 * unread, IDX_F_ASSUMED). 0 (also when there is no index or no row) or
 * -errno.
 */
int idx_forget(const char *root, const struct idx_scan_opts *opts, const char *path);

/*
 * An index's rows directory by directory: what a ranked run's ranks on
 * other nodes give each other (index/shard.c, docs/index.md "Shards").
 * Only regular files' rows that the index vouches for are read or
 * written: those whose mtime and ctime are before its stamp.
 *
 * open: the index of root (as a sync's scan opens it; created if there is
 * none), *out NULL when no index can be used (said). stamp: the time its
 * rows are trusted before (0: it has none). rows: the rows of the regular
 * files directly in dir ("" the root) into out (NULL: not wanted), and
 * *digest, an XXH3-64 over their paths, fingerprints and hashes (0 for
 * none). put: rows (n; those directly in dir) that another index
 * vouched for before stamp, each kept in place of this index's row of
 * its path when it is of a later version of the file (ctime, then mtime)
 * or there is none, and its times are before both stamps (an index with
 * no stamp takes stamp); a row of dir not among them is deleted only when
 * its file is gone from the tree; one transaction. 0 or -errno.
 */
struct idx_dirs;
int     idx_dirs_open(const char *root, struct idx_dirs **out);
int64_t idx_dirs_stamp(struct idx_dirs *d);
int     idx_dirs_rows(struct idx_dirs *d, const char *dir, struct idx_manifest *out,
                      uint64_t *digest);
int     idx_dirs_put(struct idx_dirs *d, const char *dir, const struct idx_entry *rows,
                     size_t n, int64_t stamp);
void    idx_dirs_close(struct idx_dirs *d);
/* Rows (regular files, each with its fingerprint, hash, digests, owner,
 * mode, dev and nlink; no extras) as bytes between two ranks of one job,
 * and back: decode checks them as peer input (paths, sizes, counts);
 * -EBADMSG, -ENOMEM. */
int     idx_rows_encode(const struct idx_entry *rows, size_t n, uint8_t **buf, size_t *len);
int     idx_rows_decode(const uint8_t *buf, size_t len, struct idx_manifest *out);

/*
 * A short note about the tree at root kept in its index (opts as for
 * idx_scan()), e.g. what a sync made it a mirror of. get: *val malloc'd,
 * NULL when there is none, no index, or --no-index. 0 or -errno (the
 * index's own meta keys are -EINVAL).
 */
int idx_note_get(const char *root, const struct idx_scan_opts *opts, const char *key,
                 char **val);
int idx_note_set(const char *root, const struct idx_scan_opts *opts, const char *key,
                 const char *val);

/*
 * Store now (sorted; entries with fresh stat data) as the index of root,
 * replacing prev (what the last idx_scan() of root returned, with the same
 * opts: after a scan of some roots only their rows change, and the rows'
 * count carries over). For a receiver that knows the hashes of what it
 * just wrote: the next scan reuses them.
 */
int idx_save(const char *root, const struct idx_scan_opts *opts,
             const struct idx_manifest *prev, const struct idx_manifest *now);

/*
 * Partial files (index/partial.c): a sync receiver's record of a temp file
 * it was writing when the run was cut off (rdcp --partial), kept in the
 * tree's index so the next run can find it (never by name alone) and
 * reuse the chunks it had verified. One record per path of the tree.
 */
struct idx_partial {
	char    *path;                         /* the file's path in the tree */
	char     tmp[IDX_TEMP_NAME_LEN + 1];   /* its temp file, same directory */
	uint64_t ino;                          /* the temp file's inode */
	uint64_t size;                         /* the size it was being written to */
	uint32_t n;                            /* chunks of that size */
	uint8_t *done;                         /* n: 1 when chunk k verified */
	uint8_t *digest;                       /* n * IDX_HASH_LEN: what it matched */
};
struct idx_partials;
/* The records of the tree at root, in its index (opts as for idx_scan());
 * 0 with *out NULL when the run has no index. 0 or a negative errno. */
int  idx_partials_open(const char *root, const struct idx_scan_opts *opts,
                       struct idx_partials **out);
/* Every record, malloc'd (idx_partials_free_list()); a row that does not
 * decode is dropped. 0 or -ENOMEM/-EIO. */
int  idx_partials_load(struct idx_partials *p, struct idx_partial **recs, size_t *n);
void idx_partials_free_list(struct idx_partial *recs, size_t n);
/* Store (replace) or remove the record of r->path / path. 0 or -EIO. */
int  idx_partial_put(struct idx_partials *p, const struct idx_partial *r);
int  idx_partial_del(struct idx_partials *p, const char *path);
void idx_partials_close(struct idx_partials *p);
/* A record's chunk column: n bytes of done, then n digests. decode: 0, or
 * -EBADMSG when len is not that (a damaged index). For the fuzz target. */
int  idx_partial_decode(const uint8_t *b, size_t len, uint32_t n, struct idx_partial *r);

void idx_manifest_free(struct idx_manifest *m);
/* Append a deep copy of e. Returns 0 or -ENOMEM. */
int  idx_manifest_add(struct idx_manifest *m, const struct idx_entry *e);
/* Room for n entries in all (m->cap >= n after it; more can still be
 * added), in one block that huge pages can back (common/mem.h); 0 or
 * -ENOMEM. */
int  idx_manifest_reserve(struct idx_manifest *m, size_t n);
/* Add a name for id of kind to m->names, keeping them sorted and unique
 * (an id named already keeps its first name). 0 or -ENOMEM. */
int  idx_manifest_name(struct idx_manifest *m, uint8_t kind, uint32_t id, const char *name);
/* The name m has for id of kind, or NULL. */
const char *idx_manifest_name_of(const struct idx_manifest *m, uint8_t kind, uint32_t id);

/* A zeroed idx_extra with room for nacl + ndacl ACL entries and xattrs_len
 * bytes of xattr items, its pointers set (NULL where a count is 0); the
 * caller fills it. NULL without memory. */
struct idx_extra *idx_extra_new(uint16_t nacl, uint16_t ndacl, uint32_t xattrs_len);
/* A copy of x (NULL for NULL); *err set to -ENOMEM when that failed. */
struct idx_extra *idx_extra_dup(const struct idx_extra *x, int *err);
/* 1 when a and b (either may be NULL: none) hold the same xattrs; the same
 * ACLs. */
int  idx_extra_same_xattrs(const struct idx_extra *a, const struct idx_extra *b);
int  idx_extra_same_acls(const struct idx_extra *a, const struct idx_extra *b);
/* The xattrs and ACLs (meta: IDX_SCAN_*) of the open file or directory fd
 * into e->x and e->got, as a scan reads them (e->type and e->ino must be
 * set). 0 or -errno (-E2BIG: over the bounds above). */
int  idx_read_extra_fd(int fd, struct idx_entry *e, unsigned meta);
/* 1 when an xattr of this name is one -X carries: of user.*, or with all
 * (read as root) of every namespace but system.* (ACLs are -A's). */
int  idx_xattr_in_scope(const char *name, int all);
/* Walk x's xattrs: *off starts at 0; each call gives the next name (nlen
 * bytes, not NUL-terminated) and value; 0 at the end. */
int  idx_xattr_next(const struct idx_extra *x, uint32_t *off, const char **name,
                    size_t *nlen, const uint8_t **value, uint32_t *vlen);
/* Sort by path, then set hlink for regular files sharing (dev, ino). */
void idx_manifest_sort(struct idx_manifest *m);
/* Binary search; NULL when absent. m must be sorted. */
const struct idx_entry *idx_manifest_find(const struct idx_manifest *m,
                                          const char *path);

/*
 * Wire encoding (docs/protocol.md). encode returns a malloc'd buffer in
 * *buf / *len. decode treats its input as hostile: every length is bounded,
 * paths are checked (no absolute path, no "..", no empty component, sorted
 * and unique), and -EBADMSG is returned on anything malformed; then, if why
 * is not NULL, why->text says what was wrong as a phrase that follows "the
 * file list", e.g. "has an entry outside the tree: '../x'" (the path escaped
 * with log_path() and cut to fit), for the caller to print with its side.
 * (-ENOMEM: why->text says so too.) decode prints nothing itself.
 */
struct idx_why {
	char text[320];
};
int idx_manifest_encode(const struct idx_manifest *m, uint8_t **buf, size_t *len);
int idx_manifest_decode(const uint8_t *buf, size_t len, struct idx_manifest *out,
                        struct idx_why *why);
/* 0 when path is a safe relative path as defined above, else -EINVAL. */
int idx_path_check(const char *path, size_t len);

/*
 * Content hashes, as defined in docs/index.md: XXH3-128 in canonical
 * (big-endian) byte order. A file of at most IDX_CHUNK_SIZE bytes hashes to
 * idx_hash_buf(content); a larger one to idx_hash_combine(chunk digests),
 * where chunk i covers bytes [i*IDX_CHUNK_SIZE, (i+1)*IDX_CHUNK_SIZE).
 */
void idx_hash_buf(const void *buf, size_t len, uint8_t out[IDX_HASH_LEN]);
void idx_hash_combine(const uint8_t *chunks, uint32_t n, uint8_t out[IDX_HASH_LEN]);
/* Number of chunk digests a file of this size carries (0 for one chunk).
 * size must be at most IDX_SIZE_MAX (the count would not fit). */
uint32_t idx_nchunks(uint64_t size);

enum idx_change_kind {
	IDX_NEW = 1,       /* only in src */
	IDX_CONTENT,       /* same type, content differs (or symlink target) */
	IDX_META,          /* same content, metadata differs */
	IDX_REMOVED,       /* only in dst */
	IDX_TYPE,          /* type differs */
};

struct idx_change {
	enum idx_change_kind kind;
	const struct idx_entry *src;   /* NULL for IDX_REMOVED */
	const struct idx_entry *dst;   /* NULL for IDX_NEW */
};

struct idx_diff {
	struct idx_change *c;
	size_t             n, cap;
};

/* A uid or gid that means "leave it as it is" (chown(2)'s -1): never a
 * difference, never set. */
#define IDX_ID_NONE UINT32_MAX

enum {
	IDX_DIFF_UID        = 1 << 0, /* uid differences count as metadata */
	IDX_DIFF_MTIME_DIRS = 1 << 1, /* directory mtimes count as metadata */
	IDX_DIFF_QUICK      = 1 << 2, /* regular files: same size and mtime is the
	                                 same content (rsync's quick check); else
	                                 the content hashes are compared */
	IDX_DIFF_NO_PERMS   = 1 << 3, /* modes do not count */
	IDX_DIFF_NO_TIMES   = 1 << 4, /* mtimes do not count as metadata */
	IDX_DIFF_GID        = 1 << 5, /* gid differences count as metadata */
	IDX_DIFF_XATTRS     = 1 << 6, /* xattrs count (of src entries that have them read) */
	IDX_DIFF_ACLS       = 1 << 7, /* ACLs count (likewise) */
	IDX_DIFF_OWNER      = IDX_DIFF_UID | IDX_DIFF_GID,
};

/* What differs in an entry's metadata (idx_meta_changes()), as rsync's
 * itemized letters t, p, o, g, a, x. */
enum {
	IDX_M_TIME  = 1 << 0,
	IDX_M_PERMS = 1 << 1,
	IDX_M_UID   = 1 << 2,
	IDX_M_GID   = 1 << 3,
	IDX_M_ACL   = 1 << 4,
	IDX_M_XATTR = 1 << 5,
};

/*
 * Compare two sorted manifests. Unchanged entries are not listed.
 * Content: a regular file's size and hash (or mtime, with IDX_DIFF_QUICK),
 * a symlink's target, a device's number. Metadata: mode (not of symlinks),
 * mtime (of directories only with IDX_DIFF_MTIME_DIRS), uid and gid when
 * asked (a src id of IDX_ID_NONE never differs), xattrs and ACLs when asked
 * and src has them read (dst without them read differs).
 * Entries point into src and dst, which must outlive the diff.
 * Returns 0 or -ENOMEM.
 */
int  idx_diff(const struct idx_manifest *src, const struct idx_manifest *dst,
              unsigned flags, struct idx_diff *out);
void idx_diff_free(struct idx_diff *d);
/* The IDX_M_* bits of what differs between two entries of one type, by
 * idx_diff()'s rules for metadata and flags. */
unsigned idx_meta_changes(const struct idx_entry *src, const struct idx_entry *dst,
                          unsigned flags);
const char *idx_change_name(enum idx_change_kind k);
const char *idx_type_name(enum idx_type t);

#endif
