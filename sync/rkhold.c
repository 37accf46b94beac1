/*
 * A ranked run's checks before anything is sent (sync/ranks.c): every
 * rank sees SRC, the same tree; the DSTs named are one tree (a witness
 * file made in the first, looked for in each other); and each rank holds
 * its DST's lock for the whole job, here or through a holder on DST's
 * host (rdcp --ranked-witness=OP:NAME, the far side of both).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "index/index.h"
#include "sync/ranks_int.h"

/* What each rank sees at SRC, before anything starts. */
struct rk_src {
	int32_t err;      /* errno opening it, or 0 */
	uint64_t print;   /* its top level's names and its mtime, hashed */
	char host[HOST_LEN];
};

/* SRC as this rank sees it: can it be read, and its inode and its top
 * level's names and inodes, so that a rank that mounts another tree there
 * is found. */
static void look_at_src(const char *src, struct rk_src *s)
{
	memset(s, 0, sizeof *s);
	gethostname(s->host, sizeof s->host - 1);
	int fd = open(src, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		s->err = errno;
		if (fd >= 0)
			close(fd);
		return;
	}
	/* no mtime: an NFS client may show a directory's for a minute after
	 * it changed */
	uint64_t sum = (uint64_t)st.st_ino;
	if (!S_ISDIR(st.st_mode)) {   /* a file: its inode and size */
		close(fd);
		s->print = sum + (uint64_t)st.st_size;
		return;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		s->err = errno;
		close(fd);
		return;
	}
	/* names and inode numbers in any order: their hashes added */
	for (struct dirent *de; (de = readdir(d));)
		sum += XXH3_64bits_withSeed(de->d_name, strlen(de->d_name), (uint64_t)de->d_ino);
	closedir(d);
	s->print = sum;
}

/* Does every rank see SRC, the same one? 0, or the exit code (said by
 * rank 0). SRC may be written as we look: three looks before a
 * difference counts. */
int rk_check_src(struct ranked *k, const char *src)
{
	struct rk_src mine, *all = calloc((size_t)k->m.size, sizeof *all);
	if (!all)
		k->m.abort(RD_EXIT_FILEIO);
	for (int look = 0; look < 3; look++) {
		if (look)
			nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
		look_at_src(src, &mine);
		if (k->m.allgather(&mine, sizeof mine, all) < 0)
			k->m.abort(RD_EXIT_PROTO);
		int bad = -1;
		for (int i = 0; i < k->m.size && bad < 0; i++)
			if (all[i].err || all[i].print != all[0].print)
				bad = i;
		if (bad < 0) {
			free(all);
			return 0;
		}
		if (!all[bad].err && look < 2)
			continue;
		if (k->m.rank == 0) {
			if (all[bad].err)
				log_err("rank %d (on %.*s) cannot read SRC %s: %s; every rank must see "
				        "SRC at the same path (a shared filesystem)", bad, HOST_LEN,
				        all[bad].host, src, strerror(all[bad].err));
			else
				log_err("rank %d (on %.*s) sees another tree at SRC %s than rank 0 (on "
				        "%.*s): every rank must see the same SRC (a shared filesystem "
				        "mounted at the same path)", bad, HOST_LEN, all[bad].host, src,
				        HOST_LEN, all[0].host);
		}
		free(all);
		return RD_EXIT_SELECT;
	}
	free(all);
	return RD_EXIT_SELECT;
}

/* The witness: a file named as a temp (so scans pass it over and a
 * killed run's is cleaned), made in the first DST and looked for in each
 * other; three words of the far side's own (sync_ranked_witness()). */
/* "make"'s code when it made DST for the witness ("undo" then removes
 * both: the run makes DST itself, and counts it) */
#define WITNESS_MADE_DST 9

static int hold_here(const char *token, const char *dir, struct sync_lock **l);

static int witness_here(const char *op, const char *name, const char *dir)
{
	char path[PATH_MAX];
	if (!strcmp(op, "hold")) {   /* DST's lock, held until stdin ends */
		struct sync_lock *l = NULL;
		int code = hold_here(name, dir, &l);
		if (!code) {
			char b[64];
			printf("held\n");
			fflush(stdout);
			while (fread(b, 1, sizeof b, stdin) > 0)
				;
			sync_unlock(l);
		}
		return code;
	}
	if (!idx_is_temp_name(name) || snprintf(path, sizeof path, "%s/%s", dir, name) >=
	                                   (int)sizeof path)
		return RD_EXIT_USAGE;
	if (!strcmp(op, "make")) {
		/* DST itself, as the run would make it (its parent must be) */
		int made = mkdir(dir, 0700) == 0;
		if (!made && errno != EEXIST) {
			log_err("%s: cannot create: %s", dir, strerror(errno));
			return RD_EXIT_SELECT;
		}
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			log_err("%s: cannot create: %s", path, strerror(errno));
			if (made)
				rmdir(dir);
			return RD_EXIT_SELECT;
		}
		close(fd);
		return made ? WITNESS_MADE_DST : 0;
	}
	if (!strcmp(op, "look"))
		return faccessat(AT_FDCWD, path, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : RD_EXIT_SELECT;
	if (!strcmp(op, "drop") || !strcmp(op, "undo")) {
		if (unlink(path) < 0 && errno != ENOENT)
			return RD_EXIT_FILEIO;
		return !strcmp(op, "undo") && rmdir(dir) < 0 ? RD_EXIT_FILEIO : 0;
	}
	return RD_EXIT_USAGE;
}

int sync_ranked_witness(const char *arg)
{
	char op[8], dir[PATH_MAX + 1];
	const char *colon = strchr(arg, ':');
	if (!colon || colon - arg >= (long)sizeof op) {
		log_err("--ranked-witness: expected OP:NAME, got '%s'", arg);
		return RD_EXIT_USAGE;
	}
	memcpy(op, arg, (size_t)(colon - arg));
	op[colon - arg] = '\0';
	if (!fgets(dir, sizeof dir, stdin) || !strchr(dir, '\n')) {
		log_err("--ranked-witness: no directory on stdin");
		return RD_EXIT_USAGE;
	}
	dir[strcspn(dir, "\n")] = '\0';
	return witness_here(op, colon + 1, *dir ? dir : ".");
}

/* rdcp --ranked-witness=OP:NAME on host, DST's path on its stdin: its pid
 * with *to (stdin, open) and *from (stdout), or -1. */
static pid_t witness_spawn(const struct sync_opts *o, const char *host, const char *op,
                           const char *name, const char *path, int *to, int *from)
{
	char word[128];
	snprintf(word, sizeof word, "--ranked-witness=%s:%s", op, name);
	const char *words[] = { o->rdcp_path ? o->rdcp_path : "rdcp", word, NULL };
	pid_t pid = rsh_spawn(o->rsh, host, words, to, from, o->contimeout > 0 ? o->contimeout : 0);
	if (pid > 0)
		dprintf(*to, "%s\n", path);
	return pid;
}

/* OP on DST's witness, here or through the remote shell: its exit code
 * (the remote shell's when it could not run rdcp). */
static int witness(const struct sync_opts *o, const char *dst, const char *op,
                   const char *name)
{
	char *host, *path;
	if (sync_parse_endpoint(dst, &host, &path) < 0)
		return RD_EXIT_FILEIO;
	int code;
	if (!host) {
		code = witness_here(op, name, path);
	} else {
		int to = -1, from = -1, status = 0;
		pid_t pid = witness_spawn(o, host, op, name, path, &to, &from);
		code = RD_EXIT_START;
		if (pid > 0) {
			char b[256];
			close(to);
			while (read(from, b, sizeof b) > 0)
				;   /* (says nothing: a login's banner, if any) */
			close(from);
			if (waitpid(pid, &status, 0) == pid && WIFEXITED(status))
				code = WEXITSTATUS(status);
		}
	}
	free(host);
	free(path);
	return code;
}

/* DST's lock as the job's receivers take it (SYNC_LOCK_RANKED, the job's
 * token in 16 hex digits): 0 with *l (NULL when DST is not there yet: the
 * receivers make it, and their marks keep another job out while they
 * run), or the exit code (said). */
static int hold_here(const char *token, const char *dir, struct sync_lock **l)
{
	uint64_t job = 0;
	char *end;
	errno = 0;
	if (strlen(token) == 16 && strspn(token, "0123456789abcdef") == 16)
		job = strtoull(token, &end, 16);
	if (!job || errno) {
		log_err("--ranked-witness=hold: expected a job's token, got '%s'", token);
		return RD_EXIT_USAGE;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0) {
		log_err("%s: cannot open: %s", dir, strerror(errno));
		return RD_EXIT_FILEIO;
	}
	int rc = sync_lock(fd, dir, SYNC_LOCK_RANKED, job, l);
	close(fd);
	return rc == -EWOULDBLOCK ? RD_EXIT_LOCKED : rc < 0 ? RD_EXIT_SELECT : 0;
}

/* Each rank holds its DST's lock for the whole job, as its receivers take
 * it: another job, and every other run, is kept out between passes too
 * (the receivers come and go), and one already there stops this job
 * before anything is sent. A remote DST: a holder there (rdcp
 * --ranked-witness=hold:TOKEN, DST on stdin), kept while stdin is open.
 * 0, or the worst rank's code (rank 0 said which) on every rank. */
int rk_hold_dst(struct ranked *k, const struct sync_opts *o)
{
	const char *dst = k->dst[k->m.rank % k->ndst];
	char *host, *path, token[17];
	int32_t code = RD_EXIT_FILEIO;
	snprintf(token, sizeof token, "%016" PRIx64, k->job);
	k->hold_fd = -1;
	if (sync_parse_endpoint(dst, &host, &path) == 0) {
		if (!host) {
			code = hold_here(token, path, &k->held);
		} else {
			int to = -1, from = -1, status = 0;
			pid_t pid = witness_spawn(o, host, "hold", token, path, &to, &from);
			code = RD_EXIT_START;
			if (pid > 0) {
				/* "held", or its end (a login's banner comes before) */
				FILE *f = fdopen(from, "r");
				char line[256];
				while (f && fgets(line, sizeof line, f) && strcmp(line, "held\n"))
					;
				if (f && !feof(f) && !ferror(f)) {
					k->holder = pid;
					k->hold_fd = to;   /* open: the holder holds */
					code = 0;
				} else {
					close(to);
					if (waitpid(pid, &status, 0) == pid && WIFEXITED(status))
						code = WEXITSTATUS(status);
					if (code == 0 || code == 126 || code == 127 || code == 255)
						code = RD_EXIT_START;
				}
				if (f)
					fclose(f);
				else
					close(from);
			}
		}
		free(host);
		free(path);
	}
	int32_t *all = calloc((size_t)k->m.size, sizeof *all);
	if (!all || k->m.allgather(&code, sizeof code, all) < 0)
		k->m.abort(RD_EXIT_PROTO);
	int bad = 0;
	while (bad < k->m.size && !all[bad])
		bad++;
	code = bad < k->m.size ? all[bad] : 0;
	if (code && k->m.rank == 0)
		log_err("%s: rank %d could not hold it for the run (exit %d)%s", k->dst[bad % k->ndst],
		        bad, (int)code, code == RD_EXIT_LOCKED ? "; nothing was sent" : "");
	free(all);
	return code;
}

/* The job's end: this rank's hold goes. */
void rk_hold_end(struct ranked *k)
{
	sync_unlock(k->held);
	k->held = NULL;
	if (k->holder > 0) {
		int status;
		close(k->hold_fd);   /* the holder sees its stdin end, and goes */
		waitpid(k->holder, &status, 0);
		k->holder = 0;
	}
}

/* Are the DSTs one tree? A witness made in the first, looked for in each
 * other (each by its rank, at once), then removed: 0, or exit 3 (rank 0
 * says which DST). Several host:DST are one tree under mpirun; one who
 * meant a copy on each host (a fan-out) is stopped here, before anything
 * is written but the first DST's witness. */
int rk_check_dst(struct ranked *k, const struct sync_opts *o)
{
	char name[IDX_TEMP_NAME_LEN + 1] = "";
	int32_t made = 0, mine = 0;
	if (k->ndst < 2)
		return 0;
	int undo = 0;
	if (k->m.rank == 0) {
		idx_temp_name(name);
		made = witness(o, k->dst[0], "make", name);
		if (made == WITNESS_MADE_DST)
			made = 0, undo = 1;
	}
	if (k->m.bcast(&made, sizeof made, 0) < 0 || k->m.bcast(name, sizeof name, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (made == 126 || made == 127 || made == 255)
		made = RD_EXIT_START;   /* the remote shell's: rdcp or the host not there */
	if (made) {
		if (k->m.rank == 0)
			log_err("%s: cannot leave a mark in DST (exit %d), to check that every DST is "
			        "the same directory", k->dst[0], (int)made);
		return made == RD_EXIT_START ? RD_EXIT_START : RD_EXIT_SELECT;
	}
	if (k->m.rank > 0 && k->m.rank < k->ndst && strcmp(k->dst[k->m.rank], k->dst[0]))
		mine = witness(o, k->dst[k->m.rank], "look", name);
	int32_t *all = calloc((size_t)k->m.size, sizeof *all);
	if (!all || k->m.allgather(&mine, sizeof mine, all) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (k->m.rank == 0)
		witness(o, k->dst[0], undo ? "undo" : "drop", name);
	int bad = 0;
	while (bad < k->m.size && !all[bad])
		bad++;
	int code = bad < k->m.size ? RD_EXIT_SELECT : 0;
	if (code && k->m.rank == 0)
		log_err("%s is not the directory %s is (a file made in the one is not in the "
		        "other%s): under mpirun every DST must be one shared tree; to copy the "
		        "tree onto each host, run rdcp without mpirun (a fan-out)", k->dst[bad],
		        k->dst[0], all[bad] == RD_EXIT_SELECT ? "" : ", or the host could not be "
		        "reached");
	free(all);
	return code;
}
