/*
 * Owners by name, as rsync: the sender puts a name beside every uid and
 * gid of its manifest (owners, and the ids of named ACL entries), and the
 * receiver gives each entry the local id of that name, or the number when
 * it has no such name (or the sender had none). --numeric-ids sends no
 * names. uid and gid 0 are never mapped (rsync's rule). Each id, and each
 * name, is looked up once per run: the manifest's table is the cache.
 * --chown USER:GROUP gives every entry that owner instead.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/sync_int.h"

/* getpw*_r / getgr*_r with a buffer that grows as they ask. */
struct lookup_buf {
	char *b;
	size_t cap;
};

static int grow(struct lookup_buf *lb)
{
	size_t cap = lb->cap ? lb->cap * 2 : 4096;
	char *b = cap <= (1u << 20) ? realloc(lb->b, cap) : NULL;
	if (!b)
		return -ENOMEM;
	lb->b = b;
	lb->cap = cap;
	return 0;
}

/* The name of uid or gid `id` (kind IDX_NAME_*) into *name (in lb), or
 * NULL when it has none. 0 or -ENOMEM. */
static int name_of(struct lookup_buf *lb, uint8_t kind, uint32_t id, const char **name)
{
	*name = NULL;
	for (;;) {
		int rc;
		if (!lb->cap && grow(lb) < 0)
			return -ENOMEM;
		if (kind == IDX_NAME_USER) {
			struct passwd pw, *res = NULL;
			rc = getpwuid_r((uid_t)id, &pw, lb->b, lb->cap, &res);
			if (rc == 0 && res)
				*name = res->pw_name;
		} else {
			struct group gr, *res = NULL;
			rc = getgrgid_r((gid_t)id, &gr, lb->b, lb->cap, &res);
			if (rc == 0 && res)
				*name = res->gr_name;
		}
		if (rc != ERANGE)
			return 0;   /* found, or not (any other error: no name) */
		if (grow(lb) < 0)
			return -ENOMEM;
	}
}

/* The local id of name (kind IDX_NAME_*) into *id; 0, 1 when there is no
 * such name, -ENOMEM. */
static int id_of(struct lookup_buf *lb, uint8_t kind, const char *name, uint32_t *id)
{
	for (;;) {
		int rc;
		if (!lb->cap && grow(lb) < 0)
			return -ENOMEM;
		if (kind == IDX_NAME_USER) {
			struct passwd pw, *res = NULL;
			rc = getpwnam_r(name, &pw, lb->b, lb->cap, &res);
			if (rc == 0 && res) {
				*id = res->pw_uid;
				return 0;
			}
		} else {
			struct group gr, *res = NULL;
			rc = getgrnam_r(name, &gr, lb->b, lb->cap, &res);
			if (rc == 0 && res) {
				*id = res->gr_gid;
				return 0;
			}
		}
		if (rc != ERANGE)
			return 1;
		if (grow(lb) < 0)
			return -ENOMEM;
	}
}

static int cmp_ace(const void *a, const void *b)
{
	const struct idx_ace *x = a, *y = b;
	if (x->tag != y->tag)
		return x->tag < y->tag ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

void sync_acl_canon(struct idx_ace *a, uint16_t *n)
{
	if (*n > 1)
		qsort(a, *n, sizeof *a, cmp_ace);
	uint16_t k = 0;
	for (uint16_t i = 0; i < *n; i++)
		if (!k || cmp_ace(&a[k - 1], &a[i]) != 0)
			a[k++] = a[i];
	*n = k;
}

/* An id to name: kind in the top bits, so one sort groups users, groups. */
static uint64_t key(uint8_t kind, uint32_t id)
{
	return (uint64_t)kind << 32 | id;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Every id of m to name (owners, named ACL entries; never 0), each once,
 * into *keys (malloc'd, sorted, unique), *n of them. 0 or -ENOMEM. */
static int ids_of(const struct idx_manifest *m, uint64_t **keys, size_t *n)
{
	size_t cap = 2 * m->n + 1, k = 0;
	uint64_t *v = malloc(cap * sizeof *v);
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < m->n; i++) {
		const struct idx_entry *e = &m->e[i];
		const struct idx_extra *x = e->x;
		size_t need = 2 + (x ? (size_t)x->nacl + x->ndacl : 0);
		if (k + need > cap) {
			cap = 2 * cap + need;
			uint64_t *nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		/* runs of one owner are the common case: keep one of each run */
		if (!k || v[k - 1] != key(IDX_NAME_USER, e->uid))
			v[k++] = key(IDX_NAME_USER, e->uid);
		v[k++] = key(IDX_NAME_GROUP, e->gid);
		for (int t = 0; x && t < 2; t++) {
			const struct idx_ace *a = t ? x->dacl : x->acl;
			for (uint16_t j = 0; j < (t ? x->ndacl : x->nacl); j++)
				if (a[j].tag == IDX_ACL_USER || a[j].tag == IDX_ACL_GROUP)
					v[k++] = key(a[j].tag == IDX_ACL_USER ? IDX_NAME_USER
					             : IDX_NAME_GROUP, a[j].id);
		}
	}
	qsort(v, k, sizeof *v, cmp_u64);
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		if (!u || v[i] != v[u - 1])
			v[u++] = v[i];
	*keys = v;
	*n = u;
	return 0;
}

int sync_names_collect(struct idx_manifest *m)
{
	struct lookup_buf lb = { 0 };
	uint64_t *keys = NULL;
	size_t n = 0;
	int rc = ids_of(m, &keys, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		uint8_t kind = (uint8_t)(keys[i] >> 32);
		uint32_t id = (uint32_t)keys[i];
		const char *name;
		if (id == 0 || id == IDX_ID_NONE)
			continue;   /* root is root everywhere (rsync's rule) */
		rc = name_of(&lb, kind, id, &name);
		if (rc == 0 && name && *name && strlen(name) <= 255)
			rc = idx_manifest_name(m, kind, id, name);
	}
	free(keys);
	free(lb.b);
	return rc;
}

/* --- the receiver --- */

/* The sender's ids mapped to ours: for table entry k of sm->names,
 * map[k]. Unnamed ids stay as they are. */
struct idmap {
	const struct idx_manifest *m;
	uint32_t *map;
};

static uint32_t map_id(const struct idmap *im, uint8_t kind, uint32_t id)
{
	if (!im->map || id == 0)
		return id;   /* --numeric-ids, or root: never by name */
	size_t lo = 0, hi = im->m->nnames;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct idx_name *n = &im->m->names[mid];
		if (n->kind == kind && n->id == id)
			return im->map[mid];
		if (n->kind < kind || (n->kind == kind && n->id < id))
			lo = mid + 1;
		else
			hi = mid;
	}
	return id;
}

/* One lookup per name of the table. 0 or -ENOMEM. */
static int build_map(struct idmap *im, struct lookup_buf *lb)
{
	const struct idx_manifest *m = im->m;
	if (!m->nnames)
		return 0;
	if (!(im->map = malloc(m->nnames * sizeof *im->map)))
		return -ENOMEM;
	for (size_t k = 0; k < m->nnames; k++) {
		im->map[k] = m->names[k].id;   /* no such name here: the number */
		int rc = id_of(lb, m->names[k].kind, m->names[k].name, &im->map[k]);
		if (rc < 0)
			return rc;
		if (rc == 1)
			im->map[k] = m->names[k].id;
	}
	return 0;
}

/* Is gid ours to give (the receiver is not root): our groups. */
static int member_of(const gid_t *groups, int n, uint32_t gid)
{
	if (gid == getegid())
		return 1;
	for (int i = 0; i < n; i++)
		if ((uint32_t)groups[i] == gid)
			return 1;
	return 0;
}

/* "USER:GROUP" of --chown (either may be empty): each part's id into
 * *uid / *gid, IDX_ID_NONE when empty. A name is looked up here, a number
 * taken as it is. 0, or -EINVAL (said). */
static int chown_ids(const char *arg, struct lookup_buf *lb, uint32_t *uid, uint32_t *gid)
{
	const char *colon = strchr(arg, ':');
	size_t ul = colon ? (size_t)(colon - arg) : strlen(arg);
	*uid = *gid = IDX_ID_NONE;
	for (int part = 0; part < 2; part++) {
		char name[256];
		const char *p = part ? (colon ? colon + 1 : "") : arg;
		size_t l = part ? strlen(p) : ul;
		if (!l)
			continue;
		if (l >= sizeof name) {
			log_err("--chown: a name over 255 bytes");
			return -EINVAL;
		}
		memcpy(name, p, l);
		name[l] = '\0';
		uint32_t *out = part ? gid : uid;
		char *end;
		unsigned long n = strtoul(name, &end, 10);
		if (!*end && n < IDX_ID_NONE) {
			*out = (uint32_t)n;
			continue;
		}
		int rc = id_of(lb, part ? IDX_NAME_GROUP : IDX_NAME_USER, name, out);
		if (rc != 0) {
			if (rc == 1)
				log_err("--chown: no %s '%s' on the receiving side",
				        part ? "group" : "user", name);
			return rc < 0 ? rc : -EINVAL;
		}
	}
	return 0;
}

int sync_map_ids(struct idx_manifest *sm, unsigned f, const char *chown_arg, int *set_uid,
                 int *set_gid)
{
	struct lookup_buf lb = { 0 };
	struct idmap im = { sm, NULL };
	gid_t *groups = NULL;
	int ngroups = 0, rc = 0;
	uint32_t cu = IDX_ID_NONE, cg = IDX_ID_NONE;
	if (chown_arg && (rc = chown_ids(chown_arg, &lb, &cu, &cg)) < 0)
		goto out;
	if (!(f & SYNC_F_NUMERIC_IDS) && (rc = build_map(&im, &lb)) < 0)
		goto out;
	int root = geteuid() == 0;
	*set_uid = root && ((f & SYNC_F_OWNER) || cu != IDX_ID_NONE);
	*set_gid = (f & SYNC_F_OWNER) || cg != IDX_ID_NONE;
	if (!root && *set_gid) {
		/* not root: only groups we are in, as rsync; others are left as
		 * the new file gets them (IDX_ID_NONE: never a difference) */
		ngroups = getgroups(0, NULL);
		if (ngroups > 0 && !(groups = malloc((size_t)ngroups * sizeof *groups))) {
			rc = -ENOMEM;
			goto out;
		}
		if (ngroups > 0)
			ngroups = getgroups(ngroups, groups);
	}
	for (size_t i = 0; i < sm->n; i++) {
		struct idx_entry *e = &sm->e[i];
		e->uid = cu != IDX_ID_NONE ? cu : map_id(&im, IDX_NAME_USER, e->uid);
		e->gid = cg != IDX_ID_NONE ? cg : map_id(&im, IDX_NAME_GROUP, e->gid);
		if (!root && e->gid != IDX_ID_NONE && !member_of(groups, ngroups, e->gid))
			e->gid = IDX_ID_NONE;
		for (int t = 0; e->x && t < 2; t++) {
			struct idx_ace *a = t ? e->x->dacl : e->x->acl;
			uint16_t n = t ? e->x->ndacl : e->x->nacl;
			for (uint16_t k = 0; k < n; k++)
				if (a[k].tag == IDX_ACL_USER || a[k].tag == IDX_ACL_GROUP)
					a[k].id = map_id(&im, a[k].tag == IDX_ACL_USER ? IDX_NAME_USER
					                 : IDX_NAME_GROUP, a[k].id);
			/* two names may map to one id: the ACL would be invalid; the
			 * first entry of an id wins, as setfacl's last-one-wins
			 * would be as arbitrary */
			if (n)
				sync_acl_canon(a, t ? &e->x->ndacl : &e->x->nacl);
		}
	}
out:
	free(im.map);
	free(lb.b);
	free(groups);
	return rc;
}
