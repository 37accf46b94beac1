/*
 * Applying the filter rules (sync/select/rules.c parses them) to the paths of a
 * scan, as rsync matches them (the common subset):
 *   - the first rule that matches decides; no match means included;
 *   - a trailing "/" matches directories only;
 *   - a leading "/" anchors the pattern at the root of the transfer (in a
 *     dir-merge file: at that file's directory);
 *   - a pattern with a "/" or "**" is matched against the path (its end,
 *     unless anchored), one without against the last component;
 *   - "*" and "?" do not cross "/", "**" does, "dir/" + "***" is dir and all
 *     below it; [...] classes as fnmatch(3);
 *   - a dir-merge rule stands for the rules of that file in the path's
 *     directory, then in its parents' (deeper first; 'n': its own only; a
 *     "!" in a file ends the list there);
 *   - sides: a rule marked 's' counts on the sender only, 'r' on the
 *     receiver only; plain rules on both, or on the sender only with
 *     --delete-excluded.
 * An excluded directory is not descended into. The walker calls in from
 * several threads: dir-merge files are read once per directory, under a
 * lock, into a table that only grows.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "sync/select/select.h"

#define NBUCKETS 4096

/* A directory's dir-merge files, one rule list per dir-merge rule. */
struct dnode {
	struct dnode *next;       /* in its hash bucket */
	struct dnode *parent;     /* NULL for the root */
	char *path;
	struct dlist { struct sync_rule *r; int n, cleared; } *lists;
};

struct filter {
	const struct sync_rule *rules;
	int nrules, nmerge;
	int side;                 /* SYNC_RM_SENDER or SYNC_RM_RECEIVER */
	int plain_sender;         /* --delete-excluded: plain rules are the sender's */
	int root;                 /* the tree whose dir-merge files are read, -1: none */
	const char *skip_file_dir;   /* a directory whose dir-merge files are not
	                                read ("": the root when only one name of it
	                                is sent), NULL: none */
	pthread_mutex_t mu;
	struct dnode *b[NBUCKETS];
	int code;                 /* the first error's exit code (0: none) */
};

static int match_one(const char *pat, const char *path)
{
	int flags = strstr(pat, "**") ? 0 : FNM_PATHNAME;
	return fnmatch(pat, path, flags) == 0;
}

static int pattern_matches(const char *pat, const char *path, int is_dir)
{
	size_t len = strlen(pat);
	char buf[4096];
	int dir_only = len > 1 && pat[len - 1] == '/';
	int anchored = pat[0] == '/';
	if ((dir_only && !is_dir) || len >= sizeof buf)
		return 0;
	memcpy(buf, pat + anchored, len - anchored - dir_only);
	len -= (size_t)(anchored + dir_only);
	buf[len] = '\0';
	/* "dir/" + "***": the directory itself too, as "dir/" */
	if (len > 4 && !strcmp(buf + len - 4, "/***") && is_dir) {
		char dir[4096];
		snprintf(dir, sizeof dir, "%s%.*s/", anchored ? "/" : "", (int)(len - 4), buf);
		if (pattern_matches(dir, path, 1))
			return 1;
	}
	if (anchored)
		return match_one(buf, path);
	if (!strchr(buf, '/') && !strstr(buf, "**")) {
		const char *base = strrchr(path, '/');
		return match_one(buf, base ? base + 1 : path);
	}
	/* unanchored with a slash: the end of the path, at a component boundary */
	for (const char *p = path; p; p = strchr(p, '/'), p = p ? p + 1 : NULL)
		if (match_one(buf, p))
			return 1;
	return 0;
}

/* Does rule r count on this side? */
static int applies(const struct filter *f, const struct sync_rule *r)
{
	unsigned s = r->mods & (SYNC_RM_SENDER | SYNC_RM_RECEIVER);
	if (!s)
		return f->side == SYNC_RM_SENDER || !f->plain_sender;
	return (s & (unsigned)f->side) != 0;
}

static int rule_matches(const struct sync_rule *r, const char *path, int is_dir)
{
	return pattern_matches(r->pattern, path, is_dir) ^ !!(r->mods & SYNC_RM_NEGATE);
}

/* A dir-merge file that cannot be used: said, and the run fails with code
 * (the first one kept). Called with f->mu held. */
static void fail(struct filter *f, int code, const char *file, const char *why,
                 const char *line)
{
	char sf[512], sl[512];
	if (!f->code)
		f->code = code;
	if (line)
		log_err("%s: %s: '%s'", log_path(sf, sizeof sf, file), why,
		        log_path(sl, sizeof sl, line));
	else
		log_err("%s: %s", log_path(sf, sizeof sf, file), why);
}

/* One line of the dir-merge file `file` (rule m) in directory dir. */
static int dir_rule(struct filter *f, const struct sync_rule *m, const char *dir,
                    const char *file, char *line, struct dlist *l)
{
	struct sync_rule r;
	char why[128];
	int dflt = (m->mods & SYNC_RM_EXCLUDES) ? 'E' : (m->mods & SYNC_RM_INCLUDES) ? 'I' : 0;
	if (sync_rule_parse(line, dflt, m->mods & (SYNC_RM_SENDER | SYNC_RM_RECEIVER), &r, why,
	                    sizeof why) < 0 ||
	    ((r.kind == SYNC_R_MERGE || r.kind == SYNC_R_DIRMERGE) &&
	     snprintf(why, sizeof why, "rdcp does not take merge rules in a dir-merge file") > 0)) {
		free(r.pattern);
		fail(f, RD_EXIT_USAGE, file, why, line);
		return -1;
	}
	if (r.kind == SYNC_R_CLEAR) {   /* what came before in this list is gone */
		for (int i = 0; i < l->n; i++)
			free(l->r[i].pattern);
		l->n = 0;
		l->cleared = 1;
		return 0;
	}
	if (r.pattern[0] == '/' && *dir) {   /* anchored at the file's directory */
		char *p = NULL;
		if (asprintf(&p, "/%s%s", dir, r.pattern) < 0)
			p = NULL;
		free(r.pattern);
		if (!(r.pattern = p))
			return -1;
	}
	struct sync_rule *v = realloc(l->r, (size_t)(l->n + 1) * sizeof *v);
	if (!v) {
		free(r.pattern);
		return -1;
	}
	l->r = v;
	v[l->n++] = r;
	return 0;
}

/* Read the dir-merge file of rule m in dir into l (none: empty). */
static void load_list(struct filter *f, const struct sync_rule *m, const char *dir,
                      struct dlist *l)
{
	char *path = NULL, *buf = NULL;
	if (f->root < 0)
		return;   /* a dry run into a DST that is not there */
	if (asprintf(&path, "%s%s%s", dir, *dir ? "/" : "", m->pattern) < 0)
		return;
	int fd = sync_open_beneath(f->root, path, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			fail(f, RD_EXIT_FILEIO, path, strerror(errno), NULL);
		free(path);
		return;
	}
	size_t cap = 1 << 16, n = 0;
	ssize_t got = 1;
	while ((buf = buf ? buf : malloc(cap + 1)) && n < cap &&
	       (got = read(fd, buf + n, cap - n)) > 0)
		n += (size_t)got;
	close(fd);
	if (!buf || got < 0 || n == cap || memchr(buf, '\0', n)) {
		fail(f, RD_EXIT_FILEIO, path, "cannot read this dir-merge file (unreadable, "
		     "over 64 KiB, or with a NUL byte)", NULL);
	} else {
		char *p = buf, *line, from[4200];
		int lineno = 0;
		while ((line = sync_next_line(&p, buf + n, &lineno))) {
			snprintf(from, sizeof from, "%s line %d", path, lineno);
			if (dir_rule(f, m, dir, from, line, l) < 0)
				break;
		}
	}
	free(buf);
	free(path);
}

static unsigned hash_path(const char *p)
{
	unsigned h = 2166136261u;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h % NBUCKETS;
}

/* The node of directory dir (made, with its parents, on first use). Called
 * with f->mu held. */
static struct dnode *node_of(struct filter *f, const char *dir, size_t len)
{
	char *p = strndup(dir, len);
	if (!p)
		return NULL;
	unsigned h = hash_path(p);
	for (struct dnode *d = f->b[h]; d; d = d->next)
		if (!strcmp(d->path, p)) {
			free(p);
			return d;
		}
	struct dnode *d = calloc(1, sizeof *d);
	if (!d || !(d->lists = calloc((size_t)f->nmerge, sizeof *d->lists))) {
		free(d);
		free(p);
		return NULL;
	}
	d->path = p;
	if (len) {
		const char *slash = memrchr(dir, '/', len);
		d->parent = node_of(f, dir, slash ? (size_t)(slash - dir) : 0);
	}
	if (!f->skip_file_dir || strcmp(p, f->skip_file_dir) != 0)
		for (int i = 0, k = 0; i < f->nrules; i++)
			if (f->rules[i].kind == SYNC_R_DIRMERGE)
				load_list(f, &f->rules[i], p, &d->lists[k++]);
	d->next = f->b[h];
	f->b[h] = d;
	return d;
}

/* The rules of dir-merge rule number k for path in directory node d:
 * 1 excluded, 0 included, -1 no rule matched. */
static int merged(struct filter *f, const struct sync_rule *m, int k, struct dnode *d,
                  const char *path, int is_dir)
{
	for (struct dnode *n = d; n; n = n->parent) {
		if (n != d && (m->mods & SYNC_RM_NO_INHERIT))
			break;
		const struct dlist *l = &n->lists[k];
		for (int i = 0; i < l->n; i++)
			if (applies(f, &l->r[i]) && rule_matches(&l->r[i], path, is_dir))
				return l->r[i].kind == SYNC_R_EXCLUDE;
		if (l->cleared)
			break;
	}
	return -1;
}

int sync_filter_skip(const char *path, int is_dir, void *ctx)
{
	struct filter *f = ctx;
	struct dnode *d = NULL;
	for (int i = 0, k = 0; i < f->nrules; i++) {
		const struct sync_rule *r = &f->rules[i];
		if (r->kind == SYNC_R_DIRMERGE) {
			if (!d) {
				const char *slash = strrchr(path, '/');
				pthread_mutex_lock(&f->mu);
				d = node_of(f, path, slash ? (size_t)(slash - path) : 0);
				pthread_mutex_unlock(&f->mu);
				if (!d)
					return 1;   /* no memory: the run fails (the scan says so) */
			}
			int x = merged(f, r, k++, d, path, is_dir);
			if (x >= 0)
				return x;
		} else if (applies(f, r) && rule_matches(r, path, is_dir)) {
			return r->kind == SYNC_R_EXCLUDE;
		}
	}
	return 0;
}

int sync_filter_protects(struct filter *f, const char *path, int is_dir)
{
	char *p = strdup(path);
	int hit = 0;
	if (!p)
		return 1;
	/* an excluded directory was never looked into: all below it is kept */
	for (char *s = strchr(p, '/'); s && !hit; s = strchr(s + 1, '/')) {
		*s = '\0';
		hit = sync_filter_skip(p, 1, f);
		*s = '/';
	}
	hit = hit || sync_filter_skip(p, is_dir, f);
	free(p);
	return hit;
}

int sync_filter_simple(const struct sync_opts *o)
{
	if (o->flags & SYNC_F_DELETE_EXCLUDED)
		return 0;
	for (int i = 0; i < o->nrules; i++)
		if (o->rules[i].kind == SYNC_R_DIRMERGE ||
		    (o->rules[i].mods & (SYNC_RM_SENDER | SYNC_RM_RECEIVER)))
			return 0;
	return 1;
}

int sync_filter_open(struct filter **out, const struct sync_opts *o, int side, int root,
                     const char *skip_file_dir)
{
	struct filter *f = calloc(1, sizeof *f);
	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->rules = o->rules;
	f->nrules = o->nrules;
	for (int i = 0; i < o->nrules; i++)
		f->nmerge += o->rules[i].kind == SYNC_R_DIRMERGE;
	f->side = side;
	f->plain_sender = (o->flags & SYNC_F_DELETE_EXCLUDED) != 0;
	f->root = root >= 0 ? dup(root) : -1;
	f->skip_file_dir = skip_file_dir;
	pthread_mutex_init(&f->mu, NULL);
	*out = f;
	return 0;
}

int sync_filter_error(const struct filter *f)
{
	return f ? f->code : 0;
}

void sync_filter_free(struct filter *f)
{
	if (!f)
		return;
	for (int h = 0; h < NBUCKETS; h++)
		for (struct dnode *d = f->b[h], *next; d; d = next) {
			next = d->next;
			for (int k = 0; k < f->nmerge; k++) {
				for (int i = 0; i < d->lists[k].n; i++)
					free(d->lists[k].r[i].pattern);
				free(d->lists[k].r);
			}
			free(d->lists);
			free(d->path);
			free(d);
		}
	if (f->root >= 0)
		close(f->root);
	pthread_mutex_destroy(&f->mu);
	free(f);
}
