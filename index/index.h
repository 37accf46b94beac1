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

/* Files are hashed in fixed chunks of this size; see docs/index.md. */
#define IDX_CHUNK_SIZE  ((uint64_t)4 << 20)
#define IDX_HASH_LEN    16
/* Longest relative path we accept, from disk or from a peer. */
#define IDX_PATH_MAX    32768
/* Longest symlink target we accept. */
#define IDX_LINK_MAX    4096

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
	uint8_t   hash[IDX_HASH_LEN];  /* content hash (regular files) */
};

/* A list of entries sorted by path (bytewise), parents before children. */
struct idx_manifest {
	struct idx_entry *e;
	size_t            n, cap;
};

struct idx_stats {
	uint64_t entries, files, dirs, symlinks, other;
	uint64_t bytes;           /* sum of regular file sizes */
	uint64_t hashed, hashed_bytes;
	uint64_t reused;          /* regular files whose hash came from the index */
	uint64_t errors;          /* entries that could not be read */
	uint64_t temps;           /* rdcp temp files seen (left by a crash) */
	double   seconds;
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
	 * index is then read but not written: it keeps the whole tree's rows. */
	const struct idx_root *roots;
	size_t      nroots;
	int         roots_optional;   /* a root (or a directory above one) that
	                                 is not there is no error: a destination */
	int         one_fs;       /* 1: directories on another filesystem than
	                             the root are recorded but not descended
	                             into; 2: left out */
};

/* An entry to scan (idx_scan_opts.roots): path relative to the root, ""
 * the root itself; depth: 0 the entry only, 1 and a directory's entries,
 * -1 everything below it. */
struct idx_root {
	const char *path;
	int depth;
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

/* Path of the default index file for root, in a malloc'd string (or NULL). */
char *idx_default_path(const char *root);

/*
 * Store now (sorted; entries with fresh stat data) as the index of root,
 * replacing prev (what the last idx_scan() of root returned). For a receiver
 * that knows the hashes of what it just wrote: the next scan reuses them.
 */
int idx_save(const char *root, const struct idx_scan_opts *opts,
             const struct idx_manifest *prev, const struct idx_manifest *now);

void idx_manifest_free(struct idx_manifest *m);
/* Append a deep copy of e. Returns 0 or -ENOMEM. */
int  idx_manifest_add(struct idx_manifest *m, const struct idx_entry *e);
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
/* Number of chunk digests a file of this size carries (0 for one chunk). */
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

enum {
	IDX_DIFF_OWNER      = 1 << 0, /* uid/gid differences count as metadata */
	IDX_DIFF_MTIME_DIRS = 1 << 1, /* directory mtimes count as metadata */
	IDX_DIFF_QUICK      = 1 << 2, /* regular files: same size and mtime is the
	                                 same content (rsync's quick check); else
	                                 the content hashes are compared */
	IDX_DIFF_NO_PERMS   = 1 << 3, /* modes do not count */
	IDX_DIFF_NO_TIMES   = 1 << 4, /* mtimes do not count as metadata */
};

/*
 * Compare two sorted manifests. Unchanged entries are not listed.
 * Content: a regular file's size and hash (or mtime, with IDX_DIFF_QUICK),
 * a symlink's target, a device's number. Metadata: mode (not of symlinks),
 * mtime (of directories only with IDX_DIFF_MTIME_DIRS), owner when asked.
 * Entries point into src and dst, which must outlive the diff.
 * Returns 0 or -ENOMEM.
 */
int  idx_diff(const struct idx_manifest *src, const struct idx_manifest *dst,
              unsigned flags, struct idx_diff *out);
void idx_diff_free(struct idx_diff *d);
const char *idx_change_name(enum idx_change_kind k);
const char *idx_type_name(enum idx_type t);

#endif
