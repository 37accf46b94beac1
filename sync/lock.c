/*
 * The lock that keeps runs apart: no two runs write one tree, or one tree
 * inside another, and no run reads a tree that another is writing into, or
 * that holds or lies inside one being written. Trees are known by their
 * directories' (device, inode), never by a path, so a symlink or a ".."
 * does not make one tree two.
 *
 * Multiple-granularity locking (Gray's IS/IX/S/X) on the tree's root and
 * each of its ancestors up to /:
 *   - flock(2) on each directory itself: a writer exclusive on its root,
 *     everyone else shared (on a reader's root, on every ancestor). So a
 *     writer meets anyone at its root or below it (they all hold its root
 *     shared), and anyone meets a writer at or above them.
 *   - "writer below" and "reader here" marks, shared byte-range locks in
 *     the host's lock file at an offset made from (device, inode): flock has
 *     no mode that lets two writers share an ancestor and two readers share a
 *     root yet keeps a reader from a tree that a writer is writing inside.
 *     Each side first holds its mark, then looks (F_OFD_GETLK) for the
 *     other's, so of two runs starting at once at least one sees the other.
 * A ranked run's receivers (several processes, one run: sync/ranks.c) each
 * take DST as a writer does but share its flock, and hold "writer here" on
 * it for the exclusive flock they do not take (as a local run's writer
 * whose own other side holds the flock): every other run is kept from DST,
 * above it and inside it; they do not see each other. Each also holds its
 * job's mark (job_mark()), and looks for another job's: two ranked runs
 * into one DST at once meet there.
 * Both kinds go with the open file, so a killed run's locks go with it. The
 * marks are OFD locks on one open of the lock file per run (a local run's
 * two sides share it, sync_lock_share()), so a run does not meet itself
 * there: `rdcp --sync / /mnt/backup` reads the tree it writes inside. A
 * flock in the way with no other run's "run here" mark is the run's own
 * other side (`rdcp dir/sub/f dir/`, as rsync allows): see take_flocks().
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/sync_int.h"

/* One lock file per host, the same path for every user: the first directory
 * of these that anyone may create files in (sticky, world-writable). */
static const char *const lock_dirs[] = { "/run/lock", "/tmp" };
#define LOCK_FILE "rdcp.lock"

struct node {
	int fd;      /* the directory, open for its flock; -1: not readable */
	dev_t dev;
	ino_t ino;
};

struct sync_lock {
	struct node *n;   /* n[0]: the tree's root, then each parent up to / */
	size_t nn;
	int file;         /* the host's lock file (the marks), or -1 */
	int marked_ex;    /* MARK_WRITER_HERE held for the root's exclusive flock */
	uint64_t job;     /* SYNC_LOCK_RANKED: the job's token (0: none) */
};

static int shared_file = -1;   /* sync_lock_share(): this run's open */

/* A local run's two sides (one process forked from the other after
 * sync_lock_share()) list here, in memory they share, every directory they
 * are about to flock, before they take it: a flock in the way is the run's
 * own other side only when it is listed. No mark in a lock file can prove
 * that, since a run on another host, in another container (another
 * /run/lock) or without the lock file leaves no mark this run can see. */
#define OWN_MAX 1024
struct own {
	uint32_t n;   /* entries in use (atomic) */
	uint32_t said_foreign;   /* a lock not rdcp's was said (by either side) */
	struct { uint64_t dev, ino, pid; } e[OWN_MAX];   /* pid: the side's */
};
static struct own *own;

/* List l's directories as this run's (all or none: a list cut short would
 * prove nothing about what it left out). */
static void own_add(const struct sync_lock *l)
{
	if (!own)
		return;
	uint32_t at = __atomic_fetch_add(&own->n, (uint32_t)l->nn, __ATOMIC_SEQ_CST);
	for (size_t i = 0; i < l->nn && at + i < OWN_MAX; i++) {
		__atomic_store_n(&own->e[at + i].pid, (uint64_t)getpid(), __ATOMIC_SEQ_CST);
		__atomic_store_n(&own->e[at + i].dev, (uint64_t)l->n[i].dev, __ATOMIC_SEQ_CST);
		__atomic_store_n(&own->e[at + i].ino, (uint64_t)l->n[i].ino, __ATOMIC_SEQ_CST);
	}
}

/* Is d listed by this run's other side (so the flock in the way may be
 * its)? Entries are written pid, dev, ino, in that order: a half-written
 * one shows an old or zero inode, never a wrong match. */
static int own_has(const struct node *d)
{
	if (!own)
		return 0;
	uint64_t me = (uint64_t)getpid();
	uint32_t n = __atomic_load_n(&own->n, __ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i < n && i < OWN_MAX; i++)
		if (__atomic_load_n(&own->e[i].pid, __ATOMIC_SEQ_CST) != me &&
		    __atomic_load_n(&own->e[i].ino, __ATOMIC_SEQ_CST) == (uint64_t)d->ino &&
		    __atomic_load_n(&own->e[i].dev, __ATOMIC_SEQ_CST) == (uint64_t)d->dev)
			return 1;
	return 0;
}

/* A run's marks: "writer below" on a writer's ancestors, "reader here" on a
 * reader's root, "run here" on all its directories (so a directory's flock
 * held with no one else's "run here" on it is this run's own other side),
 * and "writer here" on a writer's root when its own other side holds that
 * flock shared (the exclusive flock it stands for). */
enum mark { MARK_WRITER_BELOW, MARK_READER_HERE, MARK_RUN_HERE, MARK_WRITER_HERE, MARKS };

/* The byte of a directory's mark: a 64-bit mix of (device, inode) cut to 61
 * bits, so the offset and its end fit in an off_t. */
static off_t mark_at(const struct node *d, enum mark m)
{
	uint64_t x = (uint64_t)d->dev * 0x9e3779b97f4a7c15ull ^ (uint64_t)d->ino;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (off_t)((x >> 3) * MARKS + (uint64_t)m);
}

/* F_SETLK on the mark (shared, held) or F_GETLK (is anyone else's there?).
 * 0: taken, or nobody's there; 1: someone's there; or -errno. */
static int mark(int file, const struct node *d, enum mark m, int look)
{
	struct flock fl = { .l_type = look ? F_WRLCK : F_RDLCK, .l_whence = SEEK_SET,
	                    .l_start = mark_at(d, m), .l_len = 1 };
	if (fcntl(file, look ? F_OFD_GETLK : F_OFD_SETLK, &fl) < 0)
		return -errno;
	if (look && fl.l_type != F_UNLCK && (fl.l_len == 0 || fl.l_len > MARKS)) {
		/* not rdcp's: its marks are single bytes, which the kernel
		 * merges into one lock only for one directory's few adjacent
		 * marks; a lock to the end of the file or over more would make
		 * every run meet it. Passed over, said once; the directories'
		 * flocks still hold */
		static int said;
		if (!said++ && !(own && __atomic_exchange_n(&own->said_foreign, 1, __ATOMIC_SEQ_CST)))
			log_warn("rdcp's lock file holds a lock that is not rdcp's (a byte range "
			         "of %lld at %lld, process %d): passed over", (long long)fl.l_len,
			         (long long)fl.l_start, (int)fl.l_pid);
		return 0;
	}
	return look && fl.l_type != F_UNLCK;
}

/* A ranked job's mark on its DST: one byte of JOB_SLOTS that the root's
 * (device, inode) place apart from every directory's marks (they meet only
 * by a chance of about 2^-50), the byte its token picks. A job holds its
 * byte and looks for anyone at the others: two jobs meet unless their
 * tokens pick one byte (1 in JOB_SLOTS). look 0: take it; 1: is another
 * job's there? 0, 1 (there is), or -errno. */
#define JOB_SLOTS 4096
static int job_mark(int file, const struct node *d, uint64_t job, int look)
{
	struct node j = { .dev = d->dev ^ 0x6a6f6273 /* "jobs" */, .ino = d->ino };
	/* (halved: the region's end stays far from the largest off_t) */
	off_t base = (mark_at(&j, 0) / 2) & ~(off_t)(JOB_SLOTS - 1);
	off_t slot = (off_t)(job % JOB_SLOTS);
	if (!look) {
		struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET,
		                    .l_start = base + slot, .l_len = 1 };
		return fcntl(file, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
	}
	off_t from[2] = { base, base + slot + 1 }, len[2] = { slot, JOB_SLOTS - slot - 1 };
	for (int i = 0; i < 2; i++) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = from[i],
		                    .l_len = len[i] };
		if (!len[i])
			continue;   /* (0 would be: to the end of the file) */
		if (fcntl(file, F_OFD_GETLK, &fl) < 0)
			return -errno;
		/* a lock reaching out of the region is not rdcp's: passed over,
		 * as mark() does */
		if (fl.l_type != F_UNLCK && fl.l_len > 0 && fl.l_start >= base &&
		    fl.l_start + fl.l_len <= base + JOB_SLOTS)
			return 1;
	}
	return 0;
}

/* The host's lock file, opened for reading (shared locks need no more); -1
 * when there is none to be had (said once: the marks are then not kept). */
static int open_lock_file(void)
{
	static int said;
	char path[PATH_MAX] = "/run/lock, /tmp";
	int fd = -1, err = ENOENT;
	/* tests: a directory of the suite's own, so a test may poison it */
	const char *test_dir = getenv("RDCP_TEST_LOCK_DIR");
	const char *dirs[2] = { lock_dirs[0], lock_dirs[1] };
	size_t ndirs = 2;
	if (test_dir && *test_dir) {
		dirs[0] = test_dir;
		ndirs = 1;
	}
	for (size_t i = 0; i < ndirs && fd < 0; i++) {
		struct stat st;
		if (stat(dirs[i], &st) < 0 || !S_ISDIR(st.st_mode) ||
		    (st.st_mode & (S_ISVTX | S_IWOTH)) != (S_ISVTX | S_IWOTH))
			continue;
		snprintf(path, sizeof path, "%s/%s", dirs[i], LOCK_FILE);
		/* not O_CREAT first: in a sticky directory a file that another user
		 * made cannot be opened with it (fs.protected_regular); O_NONBLOCK:
		 * a FIFO planted there must not hang us */
		int fl = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
		fd = open(path, fl);
		if (fd < 0 && errno == ENOENT) {
			fd = open(path, fl | O_CREAT | O_EXCL, 0644);
			if (fd >= 0)
				fchmod(fd, 0644);   /* whatever the umask: every user reads it */
			else if (errno == EEXIST)
				fd = open(path, fl);
		}
		err = fd < 0 ? errno : 0;
		/* a file of another user's (not root's) may be theirs, not rdcp's */
		if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		                (st.st_uid != 0 && st.st_uid != geteuid()))) {
			close(fd);
			fd = -1;
			err = EPERM;
		}
		break;   /* the first such directory is the host's, whatever happens */
	}
	if (fd < 0 && !said++)
		log_warn("%s: cannot open rdcp's lock file: %s; runs in nested trees are "
		         "kept apart only by the directories' locks", path, strerror(err));
	return fd;
}

void sync_lock_share(void)
{
	if (shared_file < 0)
		shared_file = open_lock_file();
	if (!own) {
		void *p = mmap(NULL, sizeof *own, PROT_READ | PROT_WRITE,
		               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		own = p == MAP_FAILED ? NULL : p;   /* NULL: no exemption, only "busy" */
	}
}

void sync_unlock(struct sync_lock *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nn; i++)
		if (l->n[i].fd >= 0)
			close(l->n[i].fd);
	if (l->file >= 0)
		close(l->file);
	free(l->n);
	free(l);
}

/* The directory at dirfd and its ancestors up to /, each opened for its
 * flock where it can be read (an unreadable ancestor is passed over). */
static int walk_up(struct sync_lock *l, int dirfd)
{
	int cur = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC), rc = 0;
	size_t cap = 0;
	while (cur >= 0) {
		struct stat st;
		if (fstat(cur, &st) < 0) {
			rc = -errno;
			break;
		}
		if (l->nn && l->n[l->nn - 1].dev == st.st_dev && l->n[l->nn - 1].ino == st.st_ino)
			break;   /* "/": its ".." is itself */
		if (l->nn == cap) {
			struct node *n = realloc(l->n, (cap = cap ? 2 * cap : 16) * sizeof *n);
			if (!n) {
				rc = -ENOMEM;
				break;
			}
			l->n = n;
		}
		int fd = openat(cur, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 && (l->nn == 0 || errno != EACCES)) {
			rc = -errno;
			break;
		}
		l->n[l->nn++] = (struct node){ .fd = fd, .dev = st.st_dev, .ino = st.st_ino };
		/* a parent we may not reach ends the walk, as an unreadable one
		 * is passed over: no run fails for want of a lock above its tree */
		int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		close(cur);
		cur = up;
	}
	if (cur >= 0)
		close(cur);
	return rc;
}

/* Who is in the way at node i; the message names the tree, whose path is
 * the one the kernel knows for the directory (no symlink, no ".."). */
static void say_busy(const struct sync_lock *l, size_t i, const char *path,
                     enum sync_lock_mode mode, const char *what)
{
	char shown[4096], other[PATH_MAX], link[64];
	log_path(shown, sizeof shown, path);
	if (i == 0) {
		log_err("%s: another rdcp is %s; try again when it has finished", shown, what);
		return;
	}
	snprintf(link, sizeof link, "/proc/self/fd/%d", l->n[i].fd);
	ssize_t k = l->n[i].fd >= 0 ? readlink(link, other, sizeof other - 1) : -1;
	other[k > 0 ? k : 0] = '\0';
	char oshown[4096];
	log_path(oshown, sizeof oshown, k > 0 ? other : "a directory above it");
	log_err("%s: another rdcp is %s %s, which holds this %s; try again when it has "
	        "finished", shown, what, oshown,
	        mode == SYNC_LOCK_WRITE || mode == SYNC_LOCK_RANKED ? "tree" : "source");
}

/* The marks held for the run (before the flocks: whoever holds a flock
 * has its marks). One that cannot be kept is passed over: the flocks still
 * hold. */
static void take_marks(struct sync_lock *l, enum sync_lock_mode mode)
{
	if (l->file < 0)
		return;
	for (size_t i = 0; i < l->nn; i++) {
		mark(l->file, &l->n[i], MARK_RUN_HERE, 0);
		if ((mode == SYNC_LOCK_WRITE || mode == SYNC_LOCK_RANKED) && i > 0)
			mark(l->file, &l->n[i], MARK_WRITER_BELOW, 0);
		if (mode == SYNC_LOCK_READ && i == 0)
			mark(l->file, &l->n[i], MARK_READER_HERE, 0);
		/* a ranked run's writers share the root's flock: "writer here"
		 * stands for the exclusive one, as for a run's own other side */
		if (mode == SYNC_LOCK_RANKED && i == 0)
			mark(l->file, &l->n[i], MARK_WRITER_HERE, 0);
		if (mode == SYNC_LOCK_RANKED && i == 0 && l->job)
			job_mark(l->file, &l->n[0], l->job, 0);
	}
}

/* The flocks: the root exclusive for a writer, all else shared. 0, or
 * -EWOULDBLOCK (said), or another error (said). */
static int take_flocks(struct sync_lock *l, const char *path, enum sync_lock_mode mode)
{
	for (size_t i = 0; i < l->nn; i++) {
		int ex = i == 0 && mode == SYNC_LOCK_WRITE;
		if (l->n[i].fd < 0 || flock(l->n[i].fd, (ex ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0)
			continue;
		int err = errno;
		if (err != EWOULDBLOCK && i > 0)
			continue;   /* an ancestor that cannot be locked: no one locks it */
		char shown[4096];
		if (err != EWOULDBLOCK) {
			log_err("%s: cannot lock: %s", log_path(shown, sizeof shown, path),
			        strerror(err));
			return -err;
		}
		if (own_has(&l->n[i]) &&
		    (l->file < 0 || mark(l->file, &l->n[i], MARK_RUN_HERE, 1) == 0)) {
			/* the flock is our own other side's (a local run whose SRC is
			 * at or inside its DST, as rsync allows): a reader leaves the
			 * directory to its writer's exclusive flock; a writer marks
			 * it "writer here", looked for by all, and shares the flock */
			if (!ex)
				continue;
			mark(l->file, &l->n[0], MARK_WRITER_HERE, 0);
			l->marked_ex = 1;
			if (flock(l->n[0].fd, LOCK_SH | LOCK_NB) == 0)
				continue;
		}
		int below = l->file >= 0 && mark(l->file, &l->n[0], MARK_WRITER_BELOW, 1) == 1;
		say_busy(l, i, path, mode,
		         i > 0 ? "writing into" :
		         mode == SYNC_LOCK_WRITE && below ? "writing into a tree inside this one now" :
		         mode == SYNC_LOCK_WRITE ? "using this tree now" :
		         "writing into this tree now");
		return -EWOULDBLOCK;
	}
	return 0;
}

/* The other kinds of mark looked for, the run's own held: a writer looks
 * for a reader of a tree above, a reader for a writer inside, everyone for
 * a "writer here" at or above, and a writer that marked its root for anyone
 * else there. 0, or -EWOULDBLOCK (said). */
static int look_marks(struct sync_lock *l, const char *path, enum sync_lock_mode mode)
{
	if (l->file < 0)
		return 0;
	int g = mode == SYNC_LOCK_RANKED;   /* a writer among the run's others */
	int w = mode == SYNC_LOCK_WRITE || g, r = mode == SYNC_LOCK_READ;
	for (size_t i = 0; i < l->nn; i++) {
		const char *what =
			!(g && i == 0) && mark(l->file, &l->n[i], MARK_WRITER_HERE, 1) == 1 ?
				(i > 0 ? "writing into" : w ? "using this tree now" :
				 "writing into this tree now") :
			w && i > 0 && mark(l->file, &l->n[i], MARK_READER_HERE, 1) == 1 ? "reading" :
			g && i == 0 && mark(l->file, &l->n[0], MARK_READER_HERE, 1) == 1 ?
				"reading this tree now" :
			(r || g) && i == 0 && mark(l->file, &l->n[0], MARK_WRITER_BELOW, 1) == 1 ?
				"writing into a tree inside this one now" :
			l->marked_ex && i == 0 && mark(l->file, &l->n[0], MARK_RUN_HERE, 1) == 1 ?
				"using this tree now" :
			g && i == 0 && l->job && job_mark(l->file, &l->n[0], l->job, 1) == 1 ?
				"writing into this tree now, in another mpirun job" : NULL;
		if (what) {
			say_busy(l, i, path, mode, what);
			return -EWOULDBLOCK;
		}
	}
	return 0;
}

int sync_lock(int dirfd, const char *path, enum sync_lock_mode mode, uint64_t job,
              struct sync_lock **out)
{
	struct sync_lock *l = calloc(1, sizeof *l);
	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->job = job;
	l->file = shared_file >= 0 ? dup(shared_file) : open_lock_file();
	int rc = walk_up(l, dirfd);
	if (rc < 0) {
		char shown[4096];
		log_err("%s: cannot lock: %s", log_path(shown, sizeof shown, path), strerror(-rc));
	}
	if (rc == 0) {
		own_add(l);
		take_marks(l, mode);
		rc = take_flocks(l, path, mode);
	}
	if (rc == 0)
		rc = look_marks(l, path, mode);
	if (rc < 0) {
		sync_unlock(l);
		return rc;
	}
	*out = l;
	return 0;
}
