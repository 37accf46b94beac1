/*
 * An entry's extended attributes and POSIX ACLs (-X, -A): the container
 * (struct idx_extra, one allocation), and its encoding, shared by the
 * manifest and the index (docs/protocol.md), which takes peer input:
 * every count and length bounded before it is used, sorted and unique,
 * ACLs well formed. Reading them from disk is xattr.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "index/idx_int.h"

struct idx_extra *idx_extra_new(uint16_t nacl, uint16_t ndacl, uint32_t xattrs_len)
{
	size_t aces = ((size_t)nacl + ndacl) * sizeof(struct idx_ace);
	struct idx_extra *x = calloc(1, sizeof *x + aces + xattrs_len);
	if (!x)
		return NULL;
	struct idx_ace *a = (struct idx_ace *)(x + 1);
	x->nacl = nacl;
	x->ndacl = ndacl;
	x->acl = nacl ? a : NULL;
	x->dacl = ndacl ? a + nacl : NULL;
	x->xattrs_len = xattrs_len;
	x->xattrs = xattrs_len ? (uint8_t *)(a + nacl + ndacl) : NULL;
	return x;
}

struct idx_extra *idx_extra_dup(const struct idx_extra *x, int *err)
{
	if (!x)
		return NULL;
	struct idx_extra *c = idx_extra_new(x->nacl, x->ndacl, x->xattrs_len);
	if (!c) {
		*err = -ENOMEM;
		return NULL;
	}
	c->nxattrs = x->nxattrs;
	if (x->nacl)
		memcpy(c->acl, x->acl, x->nacl * sizeof *x->acl);
	if (x->ndacl)
		memcpy(c->dacl, x->dacl, x->ndacl * sizeof *x->dacl);
	if (x->xattrs_len)
		memcpy(c->xattrs, x->xattrs, x->xattrs_len);
	return c;
}

int idx_extra_same_xattrs(const struct idx_extra *a, const struct idx_extra *b)
{
	uint32_t la = a ? a->xattrs_len : 0, lb = b ? b->xattrs_len : 0;
	return la == lb && (!la || !memcmp(a->xattrs, b->xattrs, la));
}

static int same_aces(const struct idx_ace *a, uint16_t na, const struct idx_ace *b,
                     uint16_t nb)
{
	if (na != nb)
		return 0;
	for (uint16_t i = 0; i < na; i++)
		if (a[i].tag != b[i].tag || a[i].perm != b[i].perm || a[i].id != b[i].id)
			return 0;
	return 1;
}

int idx_extra_same_acls(const struct idx_extra *a, const struct idx_extra *b)
{
	static const struct idx_extra none;
	if (!a)
		a = &none;
	if (!b)
		b = &none;
	return same_aces(a->acl, a->nacl, b->acl, b->nacl) &&
	       same_aces(a->dacl, a->ndacl, b->dacl, b->ndacl);
}

int idx_xattr_next(const struct idx_extra *x, uint32_t *off, const char **name,
                   size_t *nlen, const uint8_t **value, uint32_t *vlen)
{
	if (!x || *off >= x->xattrs_len)
		return 0;
	const uint8_t *p = x->xattrs + *off;
	*nlen = p[0];
	*name = (const char *)p + 1;
	*vlen = get_u32(p + 1 + *nlen);
	*value = p + 5 + *nlen;
	*off += 5 + (uint32_t)*nlen + *vlen;
	return 1;
}

int idx_xattr_in_scope(const char *name, int all)
{
	if (!strncmp(name, "user.", 5))
		return 1;
	return all && strncmp(name, "system.", 7) != 0;
}

static int cmp_ace(const void *a, const void *b)
{
	const struct idx_ace *x = a, *y = b;
	if (x->tag != y->tag)
		return x->tag < y->tag ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

void idx_acl_sort(struct idx_ace *a, uint16_t n)
{
	if (n > 1)
		qsort(a, n, sizeof *a, cmp_ace);
}

unsigned idx_extra_bits(const struct idx_extra *x)
{
	if (!x)
		return 0;
	return (x->nxattrs ? IDX_E_XATTRS : 0) | (x->nacl ? IDX_E_ACL : 0) |
	       (x->ndacl ? IDX_E_DACL : 0);
}

static void put_aces(struct wire_wr *w, const struct idx_ace *a, uint16_t n)
{
	wr_u16(w, n);
	for (uint16_t i = 0; i < n; i++) {
		wr_u8(w, a[i].tag);
		wr_u8(w, a[i].perm);
		wr_u32(w, a[i].id);
	}
}

void idx_extra_put(struct wire_wr *w, const struct idx_extra *x, unsigned bits)
{
	if (bits & IDX_E_XATTRS) {
		wr_u16(w, x->nxattrs);
		wr_bytes(w, x->xattrs, x->xattrs_len);
	}
	if (bits & IDX_E_ACL)
		put_aces(w, x->acl, x->nacl);
	if (bits & IDX_E_DACL)
		put_aces(w, x->dacl, x->ndacl);
}

/* --- the encoding (docs/protocol.md) --- */

/* What is wrong with n ACL entries, or NULL. access: the access ACL, which
 * is only sent when it says more than the mode (it has a mask). */
static const char *aces_problem(const struct idx_ace *a, uint16_t n, int access)
{
	unsigned seen = 0, named = 0;
	for (uint16_t i = 0; i < n; i++) {
		if (a[i].tag < IDX_ACL_USER_OBJ || a[i].tag > IDX_ACL_OTHER)
			return "an ACL entry of unknown tag";
		if (a[i].perm > 7)
			return "an ACL entry with permission bits beyond rwx";
		int is_named = a[i].tag == IDX_ACL_USER || a[i].tag == IDX_ACL_GROUP;
		if (!is_named && a[i].id)
			return "an ACL entry with an id where none belongs";
		if (i && (a[i].tag < a[i - 1].tag ||
		          (a[i].tag == a[i - 1].tag && a[i].id <= a[i - 1].id)))
			return "an ACL not sorted, or with an entry twice";
		seen |= 1u << a[i].tag;
		named |= (unsigned)is_named;
	}
	unsigned base = 1u << IDX_ACL_USER_OBJ | 1u << IDX_ACL_GROUP_OBJ | 1u << IDX_ACL_OTHER;
	if ((seen & base) != base)
		return "an ACL without its owner, group or other entry";
	if ((named || access) && !(seen & (1u << IDX_ACL_MASK)))
		return access ? "an access ACL that says no more than the mode"
		              : "an ACL with named entries but no mask";
	return NULL;
}

/* An ACL section: count (2), then per entry tag (1), perm (1), id (4);
 * the bytes left in *p, *n entries. */
static const char *take_aces(struct wire_rd *r, const uint8_t **p, uint16_t *n)
{
	*n = rd_u16(r);
	*p = rd_take(r, (size_t)*n * 6);
	if (r->bad)
		return NULL;   /* the caller says where it ended */
	if (*n == 0 || *n > IDX_ACL_MAX)
		return "an ACL of no or over 8191 entries";
	return NULL;
}

static void fill_aces(struct idx_ace *a, const uint8_t *p, uint16_t n)
{
	for (uint16_t i = 0; i < n; i++, p += 6)
		a[i] = (struct idx_ace){ .tag = p[0], .perm = p[1], .id = get_u32(p + 2) };
}

/* An xattr section: count (2, at least 1), then per xattr name length
 * (1, at least 1), name, value length (4), value; the items' bytes in *p,
 * *len. Names sorted, unique, of the namespaces read. */
static const char *take_xattrs(struct wire_rd *r, int all_ns, const uint8_t **p,
                               uint32_t *len, uint16_t *count)
{
	*count = rd_u16(r);
	*p = r->p;
	const uint8_t *prev = NULL;
	size_t prevlen = 0, total = 0;
	char name[IDX_XATTR_NAME_MAX + 1];
	if (!r->bad && *count == 0)
		return "an empty list of xattrs";
	for (uint16_t i = 0; i < *count && !r->bad; i++) {
		size_t nlen = rd_u8(r);
		const uint8_t *nm = rd_take(r, nlen);
		uint32_t vlen = rd_u32(r);
		rd_take(r, vlen);
		if (r->bad)
			return NULL;
		if (nlen == 0 || memchr(nm, 0, nlen))
			return "an xattr name that is empty or has a NUL byte";
		memcpy(name, nm, nlen);
		name[nlen] = '\0';
		if (!idx_xattr_in_scope(name, all_ns))
			return "an xattr of a namespace it does not send";
		if (vlen > IDX_XATTR_VALUE_MAX)
			return "an xattr value over 64 KiB";
		total += nlen + vlen;
		if (total > IDX_XATTR_TOTAL_MAX)
			return "xattrs over 1 MiB on one entry";
		if (prev) {
			int c = memcmp(prev, nm, prevlen < nlen ? prevlen : nlen);
			if (c > 0 || (c == 0 && prevlen >= nlen))
				return "xattrs not sorted, or one twice";
		}
		prev = nm;
		prevlen = nlen;
	}
	*len = (uint32_t)(r->p - *p);
	return NULL;
}

int idx_extra_get(struct wire_rd *r, unsigned bits, int all_ns, struct idx_extra **x,
                  const char **why)
{
	const uint8_t *xp = NULL, *ap = NULL, *dp = NULL;
	uint32_t xlen = 0;
	uint16_t nx = 0, na = 0, nd = 0;
	*x = NULL;
	*why = NULL;
	bits &= IDX_E_XATTRS | IDX_E_ACL | IDX_E_DACL;
	if (bits & IDX_E_XATTRS)
		*why = take_xattrs(r, all_ns, &xp, &xlen, &nx);
	if (!*why && (bits & IDX_E_ACL))
		*why = take_aces(r, &ap, &na);
	if (!*why && (bits & IDX_E_DACL))
		*why = take_aces(r, &dp, &nd);
	if (*why)
		return -EBADMSG;
	if (r->bad || !bits)
		return 0;   /* the caller says where the bytes ended */
	if (!(*x = idx_extra_new(na, nd, xlen)))
		return -ENOMEM;
	(*x)->nxattrs = nx;
	if (xlen)
		memcpy((*x)->xattrs, xp, xlen);
	fill_aces((*x)->acl, ap, na);
	fill_aces((*x)->dacl, dp, nd);
	if (na)
		*why = aces_problem((*x)->acl, na, 1);
	if (nd && !*why)
		*why = aces_problem((*x)->dacl, nd, 0);
	if (*why) {
		free(*x);
		*x = NULL;
		return -EBADMSG;
	}
	return 0;
}
