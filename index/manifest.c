/* The manifest container and its wire encoding (docs/protocol.md). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/mem.h"
#include "common/wire.h"
#include "index/idx_int.h"

#define MF_MAGIC   0x52444d46u   /* "RDMF" */
#define MF_VERSION 1
#define MF_HDR_LEN 20
#define MF_MIN_ENTRY 26          /* smallest possible encoded entry */
/* header flags: a names table follows the header; then IDX_MF_* << 1 */
#define MF_H_NAMES   0x01
#define MF_H_SHIFT   1
#define MF_H_ALL     (MF_H_NAMES | ((IDX_MF_XATTRS | IDX_MF_XATTRS_ALL | IDX_MF_ACLS) << MF_H_SHIFT))
#define MF_NAMES_MAX 65536        /* entries of the names table */
_Static_assert((int)IDX_MF_XATTRS == (int)IDX_GOT_XATTRS &&
               (int)IDX_MF_XATTRS_ALL == (int)IDX_GOT_XATTRS_ALL &&
               (int)IDX_MF_ACLS == (int)IDX_GOT_ACLS, "a manifest's flags are what each entry got");

static void entry_free(struct idx_entry *e)
{
	free(e->path);
	free(e->link);
	free(e->chunks);
	free(e->x);
}

static void names_free(struct idx_manifest *m)
{
	for (size_t i = 0; i < m->nnames; i++)
		free(m->names[i].name);
	free(m->names);
	m->names = NULL;
	m->nnames = 0;
}

void idx_manifest_free(struct idx_manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		entry_free(&m->e[i]);
	free(m->e);
	names_free(m);
	memset(m, 0, sizeof *m);
}

/* Where (kind, id) is or would go in m->names. */
static size_t name_slot(const struct idx_manifest *m, uint8_t kind, uint32_t id, int *found)
{
	size_t lo = 0, hi = m->nnames;
	*found = 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct idx_name *n = &m->names[mid];
		if (n->kind == kind && n->id == id) {
			*found = 1;
			return mid;
		}
		if (n->kind < kind || (n->kind == kind && n->id < id))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int idx_manifest_name(struct idx_manifest *m, uint8_t kind, uint32_t id, const char *name)
{
	int found;
	size_t at = name_slot(m, kind, id, &found);
	if (found)
		return 0;
	struct idx_name *v = realloc(m->names, (m->nnames + 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	m->names = v;
	char *copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	memmove(v + at + 1, v + at, (m->nnames - at) * sizeof *v);
	v[at] = (struct idx_name){ id, kind, copy };
	m->nnames++;
	return 0;
}

const char *idx_manifest_name_of(const struct idx_manifest *m, uint8_t kind, uint32_t id)
{
	int found;
	size_t at = name_slot(m, kind, id, &found);
	return found ? m->names[at].name : NULL;
}

int idx_manifest_reserve(struct idx_manifest *m, size_t n)
{
	if (n <= m->cap)
		return 0;
	if (n > SIZE_MAX / sizeof *m->e)
		return -ENOMEM;
	struct idx_entry *e = mem_grow(m->e, n * sizeof *e);
	if (!e)
		return -ENOMEM;
	m->e = e;
	m->cap = n;
	return 0;
}

struct idx_entry *idx_manifest_push(struct idx_manifest *m)
{
	if (m->n == m->cap && idx_manifest_reserve(m, m->cap ? m->cap * 2 : 256) < 0)
		return NULL;
	struct idx_entry *e = &m->e[m->n++];
	memset(e, 0, sizeof *e);
	return e;
}

int idx_manifest_add(struct idx_manifest *m, const struct idx_entry *src)
{
	struct idx_entry *e = idx_manifest_push(m);
	if (!e)
		return -ENOMEM;
	int err = 0;
	*e = *src;
	e->path = strdup(src->path);
	e->link = src->link ? strdup(src->link) : NULL;
	e->x = idx_extra_dup(src->x, &err);
	e->chunks = NULL;
	if (src->chunks && src->nchunks) {
		e->chunks = malloc((size_t)src->nchunks * IDX_HASH_LEN);
		if (e->chunks)
			memcpy(e->chunks, src->chunks, (size_t)src->nchunks * IDX_HASH_LEN);
	}
	if (!e->path || (src->link && !e->link) || (src->chunks && src->nchunks && !e->chunks) ||
	    err) {
		entry_free(e);
		m->n--;
		return -ENOMEM;
	}
	return 0;
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(((const struct idx_entry *)a)->path,
	              ((const struct idx_entry *)b)->path);
}

struct hl_key {
	uint64_t dev, ino;
	size_t idx;
};

static int cmp_hl(const void *a, const void *b)
{
	const struct hl_key *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Group regular files with nlink > 1 by (dev, ino); the first in path order
 * leads. Without memory for the keys, hardlinks are simply not grouped. */
static void manifest_link_groups(struct idx_manifest *m)
{
	size_t n = 0;
	for (size_t i = 0; i < m->n; i++) {
		m->e[i].hlink = 0;
		if (m->e[i].type == IDX_REG && m->e[i].nlink > 1)
			n++;
	}
	if (n < 2)
		return;
	struct hl_key *k = malloc(n * sizeof *k);
	if (!k)
		return;
	n = 0;
	for (size_t i = 0; i < m->n; i++)
		if (m->e[i].type == IDX_REG && m->e[i].nlink > 1)
			k[n++] = (struct hl_key){ m->e[i].dev, m->e[i].ino, i };
	qsort(k, n, sizeof *k, cmp_hl);
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		while (j < n && k[j].dev == k[i].dev && k[j].ino == k[i].ino)
			j++;
		if (j - i > 1)
			for (size_t g = i; g < j; g++)
				m->e[k[g].idx].hlink = (uint32_t)(k[i].idx + 1);
		i = j;
	}
	free(k);
}

size_t idx_manifest_drop_dups(struct idx_manifest *m)
{
	size_t k = 0, n = m->n;
	for (size_t i = 0; i < m->n; i++) {
		if (k && !strcmp(m->e[k - 1].path, m->e[i].path)) {
			free(m->e[i].path);
			free(m->e[i].link);
			free(m->e[i].chunks);
			free(m->e[i].x);
			continue;
		}
		m->e[k++] = m->e[i];
	}
	m->n = k;
	return n - k;
}

void idx_manifest_sort(struct idx_manifest *m)
{
	/* an index's rows and a peer's manifest come in order already (one
	 * pass, not n log n compares and moves of 100-byte entries) */
	size_t i = 1;
	while (i < m->n && strcmp(m->e[i - 1].path, m->e[i].path) < 0)
		i++;
	if (i < m->n)
		qsort(m->e, m->n, sizeof *m->e, cmp_path);
	manifest_link_groups(m);
}

const struct idx_entry *idx_manifest_find(const struct idx_manifest *m,
                                          const char *path)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(m->e[mid].path, path);
		if (c == 0)
			return &m->e[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* What is wrong with path as a relative path of a tree, or NULL: a phrase
 * that follows "has" in a message. */
static const char *path_problem(const char *path, size_t len)
{
	if (len == 0)
		return "an empty path";
	if (len > IDX_PATH_MAX)
		return "a path over 32768 bytes";
	if (memchr(path, '\0', len))
		return "a path with a NUL byte";
	if (path[0] == '/')
		return "an absolute path";
	if (path[len - 1] == '/')
		return "a path ending in '/'";
	const char *p = path, *end = path + len;
	while (p < end) {
		const char *s = memchr(p, '/', (size_t)(end - p));
		size_t n = s ? (size_t)(s - p) : (size_t)(end - p);
		if (n == 0)
			return "a path with an empty component";
		if (n > 255)
			return "a path with a component over 255 bytes";
		if (n == 1 && p[0] == '.')
			return "a path with a '.' component";
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return "an entry outside the tree";
		p += n + 1;
	}
	return NULL;
}

int idx_path_check(const char *path, size_t len)
{
	return path_problem(path, len) ? -EINVAL : 0;
}

/* The names table (header flag MF_H_NAMES): count (4), then per name kind
 * (1), id (4), length (1), name. */
static void put_names(struct wire_wr *w, const struct idx_manifest *m)
{
	wr_u32(w, (uint32_t)m->nnames);
	for (size_t i = 0; i < m->nnames; i++) {
		size_t l = strlen(m->names[i].name);
		wr_u8(w, m->names[i].kind);
		wr_u32(w, m->names[i].id);
		wr_u8(w, (uint8_t)l);
		wr_bytes(w, m->names[i].name, l);
	}
}

/* What the manifest m can encode of its names and extras: header flags,
 * or -EINVAL for something no decoder would take back. */
static int header_flags(const struct idx_manifest *m)
{
	if ((m->flags & ~(unsigned)(IDX_MF_XATTRS | IDX_MF_XATTRS_ALL | IDX_MF_ACLS)) ||
	    ((m->flags & IDX_MF_XATTRS_ALL) && !(m->flags & IDX_MF_XATTRS)) ||
	    m->nnames > MF_NAMES_MAX || m->nohash_below % 1024 || m->nohash_below > IDX_NOHASH_MAX)
		return -EINVAL;
	for (size_t i = 0; i < m->nnames; i++) {
		size_t l = strlen(m->names[i].name);
		if (!l || l > 255 || (i && (m->names[i].kind < m->names[i - 1].kind ||
		    (m->names[i].kind == m->names[i - 1].kind && m->names[i].id <= m->names[i - 1].id))))
			return -EINVAL;
	}
	return (m->nnames ? MF_H_NAMES : 0) | (int)(m->flags << MF_H_SHIFT);
}

/* The extras sections entry e carries in a manifest of flags mf, or
 * IDX_E_UNREAD when it lacks what the manifest says was read. */
static unsigned entry_bits(const struct idx_entry *e, unsigned mf)
{
	if ((e->got & mf) != mf)
		return IDX_E_UNREAD;
	unsigned bits = idx_extra_bits(e->x);
	if (!(mf & IDX_MF_XATTRS))
		bits &= ~(unsigned)IDX_E_XATTRS;
	if (!(mf & IDX_MF_ACLS) || e->type == IDX_LNK)
		bits &= ~(unsigned)(IDX_E_ACL | IDX_E_DACL);
	if (e->type != IDX_DIR)
		bits &= ~(unsigned)IDX_E_DACL;
	return bits;
}

int idx_manifest_encode(const struct idx_manifest *m, uint8_t **buf, size_t *len)
{
	struct wire_wr w = { 0 };
	int hflags = header_flags(m);
	if (hflags < 0)
		return hflags;
	wr_u32(&w, MF_MAGIC);
	wr_u8(&w, MF_VERSION);
	wr_u8(&w, (uint8_t)hflags);
	wr_u16(&w, (uint16_t)(m->nohash_below >> 10));
	wr_u32(&w, (uint32_t)IDX_CHUNK_SIZE);
	wr_u64(&w, m->n);
	if (hflags & MF_H_NAMES)
		put_names(&w, m);
	const char *prev = "";
	for (size_t i = 0; i < m->n; i++) {
		const struct idx_entry *e = &m->e[i];
		size_t plen = strlen(e->path), pre = 0;
		while (prev[pre] && prev[pre] == e->path[pre] && pre < 0xffff)
			pre++;
		unsigned bits = entry_bits(e, m->flags);
		wr_u8(&w, e->type);
		wr_u8(&w, (uint8_t)((e->flags & IDX_F_UNSTABLE) | bits));
		wr_u16(&w, (uint16_t)pre);
		wr_u16(&w, (uint16_t)(plen - pre));
		wr_bytes(&w, e->path + pre, plen - pre);
		wr_u32(&w, e->mode & 07777);
		wr_u32(&w, e->uid);
		wr_u32(&w, e->gid);
		wr_u64(&w, (uint64_t)e->mtime_ns);
		switch (e->type) {
		case IDX_REG:
			wr_u64(&w, e->size);
			if (e->size >= m->nohash_below && (e->flags & IDX_F_NOHASH)) {
				free(w.buf);   /* a hash it does not have */
				return -EINVAL;
			}
			if (e->size >= m->nohash_below)
				wr_bytes(&w, e->hash, IDX_HASH_LEN);
			wr_u32(&w, e->hlink);
			if (e->size > IDX_SIZE_MAX || e->nchunks != idx_nchunks(e->size) ||
			    (e->nchunks && !e->chunks)) {
				free(w.buf);
				return -EINVAL;
			}
			wr_bytes(&w, e->chunks, (size_t)e->nchunks * IDX_HASH_LEN);
			break;
		case IDX_LNK: {
			size_t l = e->link ? strlen(e->link) : 0;
			wr_u16(&w, (uint16_t)l);
			wr_bytes(&w, e->link, l);
			break;
		}
		case IDX_CHR:
		case IDX_BLK:
			wr_u64(&w, e->rdev);
			break;
		default:
			break;
		}
		idx_extra_put(&w, e->x, bits);
		prev = e->path;
	}
	if (w.bad) {
		free(w.buf);
		return -ENOMEM;
	}
	*buf = w.buf;
	*len = w.len;
	return 0;
}

/* Say why a decode failed (when the caller asked): fmt, then the path of
 * the entry at fault, escaped and cut to fit. Returns -EBADMSG. */
__attribute__((format(printf, 3, 4)))
static int why_bad(struct idx_why *why, const char *path, const char *fmt, ...)
{
	if (!why)
		return -EBADMSG;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(why->text, sizeof why->text, fmt, ap);
	va_end(ap);
	if (path && n >= 0 && (size_t)n + 8 < sizeof why->text) {
		char shown[200];
		snprintf(why->text + n, sizeof why->text - (size_t)n, ": '%s'",
		         log_path(shown, sizeof shown, path));
	}
	return -EBADMSG;
}


/* The head of entry `index`: type, flags and path. The path is a prefix of
 * the previous one (pathbuf, *prevlen bytes) plus a suffix; it must be
 * checked, canonically encoded and after the previous entry's. Leaves the
 * path in pathbuf and its length in *prevlen, the extras sections the
 * entry has in *ebits (of allowed, what the header says was read).
 * 0 or -EBADMSG (why said). */
static int decode_head(struct wire_rd *r, const struct idx_manifest *out, size_t index,
                       struct idx_entry *e, char *pathbuf, size_t *prevlen,
                       unsigned allowed, unsigned *ebits, struct idx_why *why)
{
	e->type = rd_u8(r);
	uint8_t flags = rd_u8(r);
	size_t pre = rd_u16(r), slen = rd_u16(r);
	const uint8_t *suffix = rd_take(r, slen);
	if (r->bad)
		return why_bad(why, NULL, "ends in the middle of entry %zu", index);
	if (e->type < IDX_REG || e->type > IDX_SOCK)
		return why_bad(why, NULL, "has an entry of unknown type %u", e->type);
	if (flags & ~(IDX_F_UNSTABLE | allowed))
		return why_bad(why, NULL, "has an entry with unknown flags 0x%02x", flags);
	*ebits = flags & allowed;
	if ((*ebits & IDX_E_UNREAD) && (*ebits & ~(unsigned)IDX_E_UNREAD))
		return why_bad(why, NULL, "has an entry with xattrs or ACLs it could not read "
		               "(entry %zu)", index);
	if ((*ebits & (IDX_E_ACL | IDX_E_DACL) && e->type == IDX_LNK) ||
	    ((*ebits & IDX_E_DACL) && e->type != IDX_DIR))
		return why_bad(why, NULL, "has an ACL on an entry of type %s (entry %zu)",
		               idx_type_name(e->type), index);
	flags &= IDX_F_UNSTABLE;
	if (pre > *prevlen || pre + slen > IDX_PATH_MAX)
		return why_bad(why, NULL, "has a path that shares more than the previous one "
		               "or is over 32768 bytes (entry %zu)", index);
	/* the prefix must be the whole common prefix: one canonical encoding */
	if (slen && pre < 0xffff && pre < *prevlen && pathbuf[pre] == suffix[0])
		return why_bad(why, NULL, "has a path not encoded canonically (entry %zu)", index);
	memcpy(pathbuf + pre, suffix, slen);
	size_t plen = pre + slen;
	pathbuf[plen] = '\0';
	const char *problem;
	if (index == 0 && plen == 0) {
		if (e->type != IDX_DIR)   /* only the root may have the empty path */
			return why_bad(why, NULL, "has a root that is not a directory");
	} else if ((problem = path_problem(pathbuf, plen))) {
		return why_bad(why, pathbuf, "has %s", problem);
	}
	/* strictly increasing: sorted and unique */
	int order = index > 0 ? strcmp(out->e[index - 1].path, pathbuf) : -1;
	if (order == 0)
		return why_bad(why, pathbuf, "has an entry twice");
	if (order > 0)
		return why_bad(why, pathbuf, "is not sorted (an entry after a greater one)");
	*prevlen = plen;
	e->flags = flags;
	return 0;
}

/* A file's hard-link group: a leader points to itself, a follower back to
 * an earlier leader. 0 or -EBADMSG (why said). */
static int check_hlink(const struct idx_manifest *out, size_t index,
                       const struct idx_entry *e, const char *path, struct idx_why *why)
{
	if (e->hlink > index + 1)
		return why_bad(why, path, "has a hard link to a later entry (%u)", e->hlink);
	if (e->hlink && e->hlink <= index) {
		const struct idx_entry *l = &out->e[e->hlink - 1];
		if (l->type != IDX_REG || l->hlink != e->hlink)
			return why_bad(why, path, "has a hard link to an entry that does not "
			               "lead a group (%u)", e->hlink);
	}
	return 0;
}

/* The fields of entry `index` that depend on its type: a file's size, hash,
 * hard-link group and chunk digests (*chunks, pointing into r's buffer), a
 * symlink's target (*target, *tlen bytes, likewise), a device's number.
 * 0 or -EBADMSG (why said); the caller still checks r->bad. */
static int decode_type_fields(struct wire_rd *r, const struct idx_manifest *out,
                              size_t index, struct idx_entry *e, const char *path,
                              const uint8_t **chunks, const uint8_t **target, size_t *tlen,
                              struct idx_why *why)
{
	switch (e->type) {
	case IDX_REG: {
		e->size = rd_u64(r);
		int nohash = e->size < out->nohash_below;
		const uint8_t *h = nohash ? NULL : rd_take(r, IDX_HASH_LEN);
		e->hlink = rd_u32(r);
		if (r->bad)
			return 0;
		if (e->size > IDX_SIZE_MAX)   /* its chunk count would not fit */
			return why_bad(why, path, "has a file over rdcp's limit of 16 PiB "
			               "(%llu bytes)", (unsigned long long)e->size);
		if (nohash)
			e->flags |= IDX_F_NOHASH;   /* (its hash comes with its data) */
		else
			memcpy(e->hash, h, IDX_HASH_LEN);
		e->nchunks = idx_nchunks(e->size);
		*chunks = rd_take(r, (size_t)e->nchunks * IDX_HASH_LEN);
		if (r->bad)
			return 0;
		/* a large file's hash is its chunks' (idx_hash_combine()): one
		 * that is not would be stored in DST's index beside content its
		 * chunks verified (fuzz_receiver's find, seed hash-not-chunks) */
		if (!nohash && e->nchunks) {
			uint8_t h2[IDX_HASH_LEN];
			idx_hash_combine(*chunks, e->nchunks, h2);
			if (memcmp(h2, e->hash, IDX_HASH_LEN))
				return why_bad(why, path, "has a file hash that is not the one of "
				               "its chunk digests");
		}
		return check_hlink(out, index, e, path, why);
	}
	case IDX_LNK:
		*tlen = rd_u16(r);
		*target = rd_take(r, *tlen);
		if (r->bad)
			return 0;
		if (*tlen == 0 || *tlen > IDX_LINK_MAX || memchr(*target, '\0', *tlen))
			return why_bad(why, path, "has a symlink target that is empty, over 4096 "
			               "bytes or with a NUL byte");
		break;
	case IDX_CHR:
	case IDX_BLK:
		e->rdev = rd_u64(r);
		break;
	default:
		break;
	}
	return 0;
}

/* Decode entry `index` and append it to out. On -ENOMEM the entry may be
 * in out half-made: the caller frees out. */
static int decode_entry(struct wire_rd *r, struct idx_manifest *out, size_t index,
                        char *pathbuf, size_t *prevlen, struct idx_why *why)
{
	struct idx_entry e = { 0 };
	unsigned allowed = ((out->flags & IDX_MF_XATTRS) ? IDX_E_XATTRS : 0) |
	                   ((out->flags & IDX_MF_ACLS) ? IDX_E_ACL | IDX_E_DACL : 0) |
	                   (out->flags ? IDX_E_UNREAD : 0);
	unsigned ebits = 0;
	if (decode_head(r, out, index, &e, pathbuf, prevlen, allowed, &ebits, why) < 0)
		return -EBADMSG;
	/* IDX_MF_* are the IDX_GOT_* bits; an unread entry got nothing */
	e.got = (ebits & IDX_E_UNREAD) ? 0 : (uint8_t)out->flags;
	e.mode = rd_u32(r);
	e.uid = rd_u32(r);
	e.gid = rd_u32(r);
	e.mtime_ns = (int64_t)rd_u64(r);
	if (!r->bad && (e.mode & ~07777u))
		return why_bad(why, pathbuf, "has mode bits beyond 07777 (0%o)", e.mode);
	const uint8_t *chunks = NULL;
	const uint8_t *target = NULL;
	size_t tlen = 0;
	if (!r->bad && decode_type_fields(r, out, index, &e, pathbuf, &chunks, &target, &tlen,
	                                  why) < 0)
		return -EBADMSG;
	const char *bad = NULL;
	int rc = r->bad ? 0 : idx_extra_get(r, ebits, (out->flags & IDX_MF_XATTRS_ALL) != 0,
	                                    &e.x, &bad);
	if (rc == -EBADMSG)
		return why_bad(why, pathbuf, "has %s", bad);
	if (rc < 0)
		return rc;
	if (r->bad)
		return why_bad(why, pathbuf, "ends in the middle of an entry");
	struct idx_entry *d = idx_manifest_push(out);
	if (!d) {
		free(e.x);
		return -ENOMEM;
	}
	*d = e;
	d->path = strdup(pathbuf);
	if (target && (d->link = malloc(tlen + 1))) {
		memcpy(d->link, target, tlen);
		d->link[tlen] = '\0';
	}
	if (e.nchunks && (d->chunks = malloc((size_t)e.nchunks * IDX_HASH_LEN)))
		memcpy(d->chunks, chunks, (size_t)e.nchunks * IDX_HASH_LEN);
	if (!d->path || (target && !d->link) || (e.nchunks && !d->chunks))
		return -ENOMEM;
	return 0;
}

/* The names table (MF_H_NAMES) into out->names. 0, -ENOMEM or -EBADMSG
 * (why said). */
static int decode_names(struct wire_rd *r, struct idx_manifest *out, struct idx_why *why)
{
	uint32_t n = rd_u32(r);
	if (r->bad)
		return why_bad(why, NULL, "ends in its table of names");
	if (n == 0 || n > MF_NAMES_MAX || n > (size_t)(r->end - r->p) / 7)
		return why_bad(why, NULL, "has a table of %u names (1..65536 that fit)", n);
	if (!(out->names = calloc(n, sizeof *out->names)))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t kind = rd_u8(r);
		uint32_t id = rd_u32(r);
		size_t l = rd_u8(r);
		const uint8_t *p = rd_take(r, l);
		if (r->bad)
			return why_bad(why, NULL, "ends in its table of names");
		if (kind != IDX_NAME_USER && kind != IDX_NAME_GROUP)
			return why_bad(why, NULL, "has a name of unknown kind %u", kind);
		const struct idx_name *pv = i ? &out->names[i - 1] : NULL;
		if (pv && (kind < pv->kind || (kind == pv->kind && id <= pv->id)))
			return why_bad(why, NULL, "has a table of names not sorted, or with an id "
			               "twice");
		if (l == 0 || memchr(p, 0, l))
			return why_bad(why, NULL, "has a name that is empty or has a NUL byte");
		if (!(out->names[i].name = strndup((const char *)p, l)))
			return -ENOMEM;
		out->names[i].kind = kind;
		out->names[i].id = id;
		out->nnames = i + 1;
	}
	return 0;
}

/* The 20-byte header; *count out, out->flags. 0 or -EBADMSG (why said). */
static int decode_header(struct wire_rd *r, size_t len, uint64_t *count,
                         struct idx_manifest *out, struct idx_why *why)
{
	uint32_t magic = rd_u32(r);
	uint8_t version = rd_u8(r), flags = rd_u8(r);
	uint16_t nohash_kib = rd_u16(r);
	uint32_t chunk = rd_u32(r);
	*count = rd_u64(r);
	if (r->bad || magic != MF_MAGIC)
		return why_bad(why, NULL, "is not a file list (%zu bytes, no RDMF header)", len);
	if (version != MF_VERSION)
		return why_bad(why, NULL, "is of version %u, not %u", version, MF_VERSION);
	if (flags & ~MF_H_ALL)
		return why_bad(why, NULL, "has reserved header fields that are not zero");
	out->flags = flags >> MF_H_SHIFT;
	out->nohash_below = (uint32_t)nohash_kib << 10;
	if ((out->flags & IDX_MF_XATTRS_ALL) && !(out->flags & IDX_MF_XATTRS))
		return why_bad(why, NULL, "says it has xattrs of all namespaces but none");
	if (chunk != IDX_CHUNK_SIZE)
		return why_bad(why, NULL, "has a chunk size of %u bytes, not 4 MiB", chunk);
	if (*count > (len - MF_HDR_LEN) / MF_MIN_ENTRY)
		return why_bad(why, NULL, "claims %llu entries in %zu bytes",
		               (unsigned long long)*count, len);
	return (flags & MF_H_NAMES) ? decode_names(r, out, why) : 0;
}

int idx_manifest_decode(const uint8_t *buf, size_t len, struct idx_manifest *out,
                        struct idx_why *why)
{
	struct wire_rd r = { buf, buf + len, 0 };
	uint64_t count;
	memset(out, 0, sizeof *out);
	if (why)
		why->text[0] = '\0';
	int rc = decode_header(&r, len, &count, out, why);
	/* count is at most one entry per 26 bytes received */
	if (!rc && count > 1)
		rc = idx_manifest_reserve(out, (size_t)count);
	char *pathbuf = rc ? NULL : malloc(IDX_PATH_MAX + 1);
	if (!rc && !pathbuf)
		rc = -ENOMEM;
	size_t prevlen = 0;
	for (uint64_t i = 0; i < count && rc == 0; i++)
		rc = decode_entry(&r, out, (size_t)i, pathbuf, &prevlen, why);
	if (rc == 0 && r.p != r.end)   /* trailing garbage */
		rc = why_bad(why, NULL, "has %zu bytes after its last entry", (size_t)(r.end - r.p));
	if (rc == -ENOMEM && why)
		snprintf(why->text, sizeof why->text, "is too large for this machine's memory");
	if (rc == -EBADMSG && why && !why->text[0])
		snprintf(why->text, sizeof why->text, "is malformed");
	free(pathbuf);
	if (rc)
		idx_manifest_free(out);
	return rc;
}
