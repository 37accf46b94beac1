/*
 * The index cache: the directory the indexes of trees live in
 * ($XDG_CACHE_HOME/rdcp, else $HOME/.cache/rdcp), the hold a run keeps on
 * the index it uses, and what keeps that directory from growing forever:
 * rdcp --index-list, --index-prune and the daily automatic prune. The rules
 * are in docs/index.md, "The index cache".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/log.h"
#include "index/idx_int.h"

#define DAY_S 86400
/* The automatic prune's stamp: its mtime is when it last ran; empty: never. */
#define STAMP "last-prune"

/* --- the directory --- */

static struct {
	pthread_once_t once;
	char dir[4096];
	char why[4096 + 128];   /* when dir cannot be used */
	int ok;
	atomic_int warned;
} cache = { .once = PTHREAD_ONCE_INIT };

/* mkdir -p, mode 0700 for what it makes. 0 or -errno. */
static int make_dirs(char *path)
{
	for (char *p = path + 1;; p++) {
		if (*p && *p != '/')
			continue;
		char c = *p;
		*p = '\0';
		int rc = mkdir(path, 0700);
		*p = c;
		if (rc < 0 && errno != EEXIST)
			return -errno;
		if (!c)
			return 0;
	}
}

/* Decide, once: cache.dir and cache.ok, or cache.why. */
static void resolve(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	struct stat st;
	int n, rc;
	if (xdg && *xdg == '/')
		n = snprintf(cache.dir, sizeof cache.dir, "%s/rdcp", xdg);
	else if (home && *home == '/')
		n = snprintf(cache.dir, sizeof cache.dir, "%s/.cache/rdcp", home);
	else {
		snprintf(cache.why, sizeof cache.why,
		         "index cache $HOME/.cache/rdcp: HOME is not set");
		return;
	}
	if (n < 0 || (size_t)n >= sizeof cache.dir) {
		snprintf(cache.why, sizeof cache.why, "index cache %.200s...: path too long",
		         cache.dir);
		return;
	}
	const char *bad = NULL;
	if ((rc = make_dirs(cache.dir)) < 0 || (rc = stat(cache.dir, &st) < 0 ? -errno : 0) < 0)
		bad = strerror(-rc);
	else if (!S_ISDIR(st.st_mode))
		bad = strerror(ENOTDIR);
	/* what the index says is trusted (a file it lists as unchanged is not
	 * read again): nobody else may write there */
	else if (st.st_uid != geteuid())
		bad = "owned by another user";
	else if (st.st_mode & 022)
		bad = "writable by others";
	else if (access(cache.dir, W_OK | X_OK) < 0)
		bad = strerror(errno);
	if (bad) {
		char shown[1024];
		snprintf(cache.why, sizeof cache.why, "index cache %s: %s",
		         log_path(shown, sizeof shown, cache.dir), bad);
		return;
	}
	cache.ok = 1;
}

const char *idx_cache_dir(const char **why)
{
	pthread_once(&cache.once, resolve);
	if (!cache.ok && why)
		*why = cache.why;
	return cache.ok ? cache.dir : NULL;
}

const char *idx_cache_dir_warn(void)
{
	const char *why, *dir = idx_cache_dir(&why);
	if (!dir && atomic_exchange(&cache.warned, 1) == 0)
		log_warn("%s; going on without an index: every file will be hashed "
		         "(--no-index silences this)", why);
	return dir;
}

int idx_cache_file(const char *key, const char *name, char **out)
{
	*out = NULL;
	const char *dir = idx_cache_dir_warn();
	if (!dir)
		return 0;
	char clean[41];
	size_t n = 0;
	for (; *name && n < sizeof clean - 1; name++)
		clean[n++] = (*name >= 'a' && *name <= 'z') || (*name >= 'A' && *name <= 'Z') ||
		             (*name >= '0' && *name <= '9') || *name == '.' || *name == '-'
		             ? *name : '_';
	clean[n] = '\0';
	if (asprintf(out, "%s/%s-%016llx.db", dir, clean,
	             (unsigned long long)XXH3_64bits(key, strlen(key))) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* --- the hold ---
 * A run holds the index it uses with a shared OFD lock on one byte far
 * beyond anything SQLite locks (it locks bytes from 1 GiB on, with POSIX
 * locks, which OFD locks on other bytes do not disturb); a prune removes a
 * file only under an exclusive lock on that byte. OFD locks belong to the
 * open file, so SQLite closing its own descriptors cannot drop ours. */
#define HOLD_BYTE ((off_t)1 << 40)

/* The files this process holds: a prune in this process must not even open
 * them, as closing any descriptor of a file drops this process's POSIX
 * locks on it, SQLite's included. */
static struct {
	pthread_mutex_t mu;
	struct { dev_t dev; ino_t ino; } f[16];
	int n, overflow;
} held = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int lock_byte(int fd, short type, int wait)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = HOLD_BYTE,
	                    .l_len = 1 };
	int rc;
	while ((rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) < 0 && errno == EINTR)
		;
	return rc < 0 ? -errno : 0;
}

static int held_here(const struct stat *st)
{
	pthread_mutex_lock(&held.mu);
	int found = held.overflow;
	for (int i = 0; i < held.n && !found; i++)
		found = held.f[i].dev == st->st_dev && held.f[i].ino == st->st_ino;
	pthread_mutex_unlock(&held.mu);
	return found;
}

int idx_hold(const char *path)
{
	for (int tries = 0; tries < 10; tries++) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0 && (errno == EACCES || errno == EROFS))
			fd = open(path, O_RDONLY | O_CLOEXEC);   /* read it, at least */
		if (fd < 0)
			return -errno;
		/* no OFD locks here (an old kernel, some filesystems): go on
		 * unlocked; a prune will not remove what it cannot lock either */
		int rc = lock_byte(fd, F_RDLCK, 1);
		struct stat a, b;
		if (fstat(fd, &a) < 0 || (rc < 0 && rc != -EINVAL && rc != -ENOLCK &&
		                          rc != -EOPNOTSUPP)) {
			rc = rc < 0 ? rc : -errno;
			close(fd);
			return rc;
		}
		/* a prune may have removed the file between our open and our lock */
		if (stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			pthread_mutex_lock(&held.mu);
			if (held.n < (int)(sizeof held.f / sizeof *held.f)) {
				held.f[held.n].dev = a.st_dev;
				held.f[held.n++].ino = a.st_ino;
			} else {
				held.overflow = 1;
			}
			pthread_mutex_unlock(&held.mu);
			return fd;
		}
		close(fd);
	}
	return -EAGAIN;
}

void idx_unhold(int fd)
{
	struct stat st;
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0) {
		pthread_mutex_lock(&held.mu);
		for (int i = 0; i < held.n; i++)
			if (held.f[i].dev == st.st_dev && held.f[i].ino == st.st_ino) {
				held.f[i] = held.f[--held.n];
				break;
			}
		pthread_mutex_unlock(&held.mu);
	}
	close(fd);
}

/* --- what is in the cache --- */

enum { TREE_UNKNOWN, TREE_EXISTS, TREE_GONE };

struct info {
	char    *name;       /* file name in the cache directory */
	char    *tree;       /* the tree it indexes, as index/scan.c keys it (a
	                        real path, or "parent//name" for one entry sent
	                        by name); NULL: it does not say */
	uint64_t bytes;      /* with its -wal and -shm */
	int64_t  entries;    /* -1: unknown */
	time_t   used;       /* last used (the last scan stored); 0: unknown */
	time_t   mtime;      /* newest change of the file or its -wal */
	int      tree_state;
};

/* An index file's name: anything, '-', 16 hex digits, ".db". */
static int is_index_name(const char *name)
{
	size_t n = strlen(name);
	if (n < 21 || strcmp(name + n - 3, ".db") != 0 || name[n - 20] != '-')
		return 0;
	for (size_t i = n - 19; i < n - 3; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

/* Sizes and the newest mtime of the file and its companions. */
static void sizes(const char *dir, struct info *in)
{
	static const char *const sfx[] = { "", "-wal", "-shm" };
	for (int i = 0; i < 3; i++) {
		char p[8192];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s%s", dir, in->name, sfx[i]);
		if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		in->bytes += (uint64_t)st.st_size;
		if (i < 2 && st.st_mtime > in->mtime)
			in->mtime = st.st_mtime;
	}
}

/* What the file says: its tree, last use, entries (if count). */
static void peek(const char *dir, struct info *in, int count)
{
	char p[8192], *key = NULL;
	int64_t used_ns = 0, entries = -1;
	snprintf(p, sizeof p, "%s/%s", dir, in->name);
	in->entries = -1;
	if (idx_db_peek(p, &key, &used_ns, count ? &entries : NULL) < 0)
		return;
	in->entries = entries;
	in->used = (time_t)(used_ns / 1000000000);
	if (!(in->tree = key))
		return;
	/* "parent//name" is parent/name (a real path has no "//") */
	char *path = strdup(key), *sep = path ? strstr(path, "//") : NULL;
	struct stat st;
	if (sep)
		memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
	if (path && lstat(path, &st) == 0)
		in->tree_state = TREE_EXISTS;
	else if (path && (errno == ENOENT || errno == ENOTDIR))
		in->tree_state = TREE_GONE;
	free(path);
}

static void infos_free(struct info *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].tree);
	}
	free(v);
}

/* The index files of dir, by name: *out (n of them). 0 or -errno. */
static int list_names(const char *dir, struct info **out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 0;
	*out = NULL;
	*n = 0;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (!is_index_name(de->d_name))
			continue;
		if (*n == cap) {
			struct info *v = realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof *v);
			if (!v)
				goto nomem;
			*out = v;
		}
		(*out)[*n] = (struct info){ .name = strdup(de->d_name) };
		if (!(*out)[(*n)++].name)
			goto nomem;
	}
	closedir(d);
	return 0;
nomem:
	closedir(d);
	infos_free(*out, *n);
	*out = NULL;
	*n = 0;
	return -ENOMEM;
}

static int by_tree(const void *a, const void *b)
{
	const struct info *x = a, *y = b;
	if (!x->tree || !y->tree)
		return x->tree ? -1 : y->tree ? 1 : strcmp(x->name, y->name);
	int c = strcmp(x->tree, y->tree);
	return c ? c : strcmp(x->name, y->name);
}

static const char *date(char *buf, size_t cap, time_t t)
{
	struct tm tm;
	if (!t || !localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M", &tm))
		snprintf(buf, cap, "unknown");
	return buf;
}

/* The cache directory for a command (list, prune), or NULL after an error
 * line saying why not. */
static const char *dir_for_command(void)
{
	const char *why, *dir = idx_cache_dir(&why);
	if (!dir)
		log_err("%s", why);
	return dir;
}

/* --index-list, --index-prune: the cache dir and its index files (said
 * when they cannot be listed). */
static int command_list(const char **dir, struct info **v, size_t *n)
{
	char shown[1024];
	if (!(*dir = dir_for_command()))
		return -ENOENT;
	int rc = list_names(*dir, v, n);
	if (rc < 0)
		log_err("%s: %s", log_path(shown, sizeof shown, *dir), strerror(-rc));
	return rc;
}

int idx_cache_list(FILE *out)
{
	const char *dir;
	struct info *v;
	size_t n;
	uint64_t total = 0;
	char shown[1024], b[16], when[32];
	int rc = command_list(&dir, &v, &n);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		sizes(dir, &v[i]);
		peek(dir, &v[i], 1);
		total += v[i].bytes;
	}
	qsort(v, n, sizeof *v, by_tree);
	static const char *const state[] = { "?", "exists", "gone" };
	fprintf(out, "%-16s  %-6s  %10s  %9s  %s\n", "last used", "tree", "size", "entries",
	        "path");
	for (size_t i = 0; i < n; i++) {
		const struct info *in = &v[i];
		char ent[24] = "?";
		if (in->entries >= 0)
			snprintf(ent, sizeof ent, "%lld", (long long)in->entries);
		fprintf(out, "%-16s  %-6s  %10s  %9s  ", date(when, sizeof when, in->used),
		        state[in->tree_state], log_bytes(b, in->bytes), ent);
		if (in->tree)
			fprintf(out, "%s\n", log_path(shown, sizeof shown, in->tree));
		else
			fprintf(out, "(not an rdcp index, or it does not say: %s)\n",
			        log_path(shown, sizeof shown, in->name));
	}
	fprintf(out, "%zu index file%s, %s, in %s\n", n, n == 1 ? "" : "s",
	        log_bytes(b, total), log_path(shown, sizeof shown, dir));
	infos_free(v, n);
	return 0;
}

enum { PR_KEPT, PR_REMOVED, PR_BUSY };

/* Remove one index file of dir if its tree is gone or it was last used
 * before cutoff (days 0: in any case), unless a run holds it: PR_*, or -errno when it could not
 * be looked at or removed (said on stderr). */
static int prune_one(const char *dir, struct info *in, int days, time_t cutoff)
{
	char p[8192], shown[1024];
	struct stat a, b;
	snprintf(p, sizeof p, "%s/%s", dir, in->name);
	if (lstat(p, &a) < 0 || !S_ISREG(a.st_mode))
		return PR_KEPT;               /* gone already, or not ours to judge */
	if (held_here(&a))
		return PR_BUSY;
	int fd = open(p, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), rc = PR_KEPT;
	if (fd < 0) {
		if (errno == ENOENT)
			return PR_KEPT;
		rc = -errno;
		log_err("%s: %s", log_path(shown, sizeof shown, p), strerror(errno));
		return rc;
	}
	/* held by a run; without OFD locks here nothing is removed */
	if ((rc = lock_byte(fd, F_WRLCK, 0)) < 0) {
		if (rc != -EAGAIN)
			log_err("%s: cannot lock: %s", log_path(shown, sizeof shown, p), strerror(-rc));
		rc = rc == -EAGAIN ? PR_BUSY : rc;
		goto out;
	}
	rc = PR_KEPT;
	if (fstat(fd, &a) < 0 || stat(p, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		goto out;                     /* replaced meanwhile */
	sizes(dir, in);
	peek(dir, in, 0);
	/* an index that does not say when it was used: when it was written */
	time_t last = in->used ? in->used : in->mtime;
	if (in->tree_state != TREE_GONE && last >= cutoff && days)
		goto out;
	static const char *const sfx[] = { "-wal", "-shm", "" };
	for (int i = 0; i < 3; i++) {
		char q[8192];
		snprintf(q, sizeof q, "%s%s", p, sfx[i]);
		if (unlink(q) < 0 && errno != ENOENT) {
			rc = -errno;
			log_err("%s: cannot remove: %s", log_path(shown, sizeof shown, q), strerror(errno));
			goto out;
		}
	}
	rc = PR_REMOVED;
out:
	close(fd);
	return rc;
}

int idx_cache_prune(int days, FILE *report, struct idx_prune_result *res)
{
	const char *dir;
	struct info *v;
	size_t n;
	char shown[1024], file[1024], b[16], when[32];
	memset(res, 0, sizeof *res);
	int rc = command_list(&dir, &v, &n);
	if (rc < 0)
		return rc;
	time_t cutoff = time(NULL) - (time_t)days * DAY_S;
	for (size_t i = 0; i < n; i++) {
		struct info *in = &v[i];
		int r = prune_one(dir, in, days, cutoff);
		const char *tree = in->tree ? log_path(shown, sizeof shown, in->tree)
		                   : "(tree unknown)";
		log_path(file, sizeof file, in->name);
		if (r == PR_REMOVED) {
			res->removed++;
			res->bytes += in->bytes;
			if (report && in->tree_state == TREE_GONE)
				fprintf(report, "removed %s: %s, tree gone (%s)\n", file, tree,
				        log_bytes(b, in->bytes));
			else if (report)
				fprintf(report, "removed %s: %s, last used %s (%s)\n", file, tree,
				        date(when, sizeof when, in->used ? in->used : in->mtime),
				        log_bytes(b, in->bytes));
		} else if (r == PR_BUSY) {
			res->busy++;
			if (report)
				fprintf(report, "kept %s: in use by a running rdcp\n", file);
		} else if (r < 0) {
			res->errors++;
		} else {
			res->kept++;
		}
	}
	infos_free(v, n);
	if (report)
		fprintf(report, "freed %s (%llu bytes): %llu index file%s removed, %llu kept%s%s\n",
		        log_bytes(b, res->bytes), (unsigned long long)res->bytes,
		        (unsigned long long)res->removed, res->removed == 1 ? "" : "s",
		        (unsigned long long)(res->kept + res->busy + res->errors),
		        res->busy ? " (some in use)" : "", res->errors ? " (some could not be removed)" : "");
	return 0;
}

/* Is a prune due by the stamp? Due when it was never stamped (empty: a
 * stamp is one byte once a prune ran) or its mtime is not within a day. */
static int prune_due(const struct stat *st, time_t now)
{
	return st->st_size == 0 || st->st_mtime > now || now - st->st_mtime >= DAY_S;
}

void idx_cache_autoprune(void)
{
	const char *dir = idx_cache_dir(NULL);
	char stamp[4200];
	struct stat st;
	time_t now = time(NULL);
	if (!dir)
		return;
	snprintf(stamp, sizeof stamp, "%s/" STAMP, dir);
	/* the common case: one stat */
	if (stat(stamp, &st) == 0 && !prune_due(&st, now))
		return;
	int fd = open(stamp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	/* one prune at a time: whoever holds the stamp's lock and still finds
	 * it due stamps it, then prunes (a run that dies mid-way does not make
	 * the next ones all try again) */
	if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && prune_due(&st, now) &&
	    pwrite(fd, "\n", 1, 0) == 1 && futimens(fd, NULL) == 0) {
		struct idx_prune_result res;
		idx_cache_prune(IDX_PRUNE_DAYS, NULL, &res);
	}
	close(fd);
}
