/*
 * The SQLite index: one database per tree root, WAL mode, one transaction per
 * scan, prepared statements. This file opens, checks, migrates and closes
 * it (and keeps its notes); rows.c reads and writes its rows. Anything we
 * cannot trust is rebuilt with a warning.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/wire.h"
#include "index/idx_int.h"

#define DB_APP_ID  0x52444358   /* "RDCX" */
#define DB_VERSION 3            /* 2: the extra column (xattrs, ACLs);
                                   3: the assumed column (IDX_F_ASSUMED) */

struct idx_db {
	sqlite3 *h;
	char *path;
	char *root;
	int hold;      /* idx_hold(): no prune removes the file while we use it */
};

static const char schema[] =
	"PRAGMA application_id = 1380205400;"   /* DB_APP_ID */
	"PRAGMA user_version = 3;"
	"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS entries("
	" path BLOB PRIMARY KEY, type INTEGER NOT NULL, mode INTEGER NOT NULL,"
	" uid INTEGER NOT NULL, gid INTEGER NOT NULL, size INTEGER NOT NULL,"
	" mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,"
	" dev INTEGER NOT NULL, ino INTEGER NOT NULL, nlink INTEGER NOT NULL,"
	" rdev INTEGER NOT NULL, link BLOB, hash BLOB NOT NULL, chunks BLOB,"
	" chk INTEGER NOT NULL, extra BLOB, assumed INTEGER) WITHOUT ROWID;";
/* version 1 -> 2: the same rows, none of them with xattrs or ACLs read */
static const char migrate_1[] =
	"ALTER TABLE entries ADD COLUMN extra BLOB;"
	"PRAGMA user_version = 2;";
/* version 2 -> 3: the same rows, every digest of them read */
static const char migrate_2[] =
	"ALTER TABLE entries ADD COLUMN assumed INTEGER;"
	"PRAGMA user_version = 3;";

_Static_assert(DB_APP_ID == 1380205400, "schema literal must match DB_APP_ID");

static void db_remove_files(const char *path)
{
	char aux[4096];
	unlink(path);
	snprintf(aux, sizeof aux, "%s-wal", path);
	unlink(aux);
	snprintf(aux, sizeof aux, "%s-shm", path);
	unlink(aux);
}

int idx_db_int(sqlite3 *h, const char *sql, int64_t *v)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(h, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*v = sqlite3_column_int64(s, 0);
	if (rc == SQLITE_ROW || rc == SQLITE_DONE)   /* no row: *v unchanged */
		rc = SQLITE_OK;
	sqlite3_finalize(s);
	return rc;
}

/* Why an index is not used when another process holds it past the busy
 * timeout: not damage, so never a reason to remove it. */
static const char db_busy[] = "held by another process for 10 s";

static int is_busy(int rc)
{
	return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

/* Why a read that failed with rc did: db_busy, or what it otherwise means. */
static const char *busy_or(int rc, const char *why)
{
	return is_busy(rc) ? db_busy : why;
}

/* Bring an index of version 1 or 2 forward, in one transaction: another
 * process may be doing the same at once (it then finds the version new).
 * The version it has after; -1 when another process held it past the busy
 * timeout (no damage: never a reason to rebuild it). */
static int64_t db_migrate(sqlite3 *h, int64_t ver)
{
	int rc = sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return is_busy(rc) ? -1 : ver;
	int64_t now = ver;
	if (idx_db_int(h, "PRAGMA user_version", &now) == SQLITE_OK) {
		if (now == 1 && sqlite3_exec(h, migrate_1, NULL, NULL, NULL) == SQLITE_OK)
			now = 2;
		if (now == 2 && sqlite3_exec(h, migrate_2, NULL, NULL, NULL) == SQLITE_OK)
			now = DB_VERSION;
	}
	if (now != DB_VERSION || sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
		return ver;
	}
	return now;
}

/* The index file this process last found whole (PRAGMA quick_check reads
 * all of it: 16 ms warm for 50,000 rows, far more cold): a receiver's save
 * right after the scan that checked it, a few seconds before, under the
 * same hold, does not check it again. */
static pthread_mutex_t checked_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_t checked_dev;
static ino_t checked_ino;

static int was_checked(int fd)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return 0;
	pthread_mutex_lock(&checked_mu);
	int yes = checked_ino && st.st_dev == checked_dev && st.st_ino == checked_ino;
	pthread_mutex_unlock(&checked_mu);
	return yes;
}

static void mark_checked(int fd)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return;
	pthread_mutex_lock(&checked_mu);
	checked_dev = st.st_dev;
	checked_ino = st.st_ino;
	pthread_mutex_unlock(&checked_mu);
}

/* Put the database in WAL mode. Turning a new file to WAL takes an
 * exclusive lock for which SQLite runs no busy handler: runs that open one
 * new index at once (eight first runs from one SRC) find it locked by each
 * other, so this waits and tries again, as the busy timeout would, for up
 * to 10 s. A file already in WAL mode takes no lock here. SQLITE_OK, or
 * SQLite's code. */
static int db_wal(sqlite3 *h)
{
	int rc = SQLITE_BUSY;
	long long end = clock_ms() + 10000;
	for (unsigned ms = 1; clock_ms() < end; ms = ms < 100 ? ms * 2 : 100) {
		sqlite3_stmt *s;
		if ((rc = sqlite3_prepare_v2(h, "PRAGMA journal_mode=WAL", -1, &s, NULL)) == SQLITE_OK) {
			rc = sqlite3_step(s);   /* a row: the mode it is in now */
			if (rc == SQLITE_ROW)
				rc = SQLITE_OK;
			sqlite3_finalize(s);
		}
		if (!is_busy(rc))
			return rc;
		sqlite3_sleep((int)ms);
	}
	return rc;
}

/* The file's application id, version and number of schema objects, read
 * in one statement: one read transaction, so a run that makes the new
 * index meanwhile (db_create()) is seen whole or not at all, never as
 * tables without the id ("not an rdcp index", then removed under it).
 * SQLITE_OK or SQLite's code. */
static int db_head(sqlite3 *h, int64_t *app, int64_t *ver, int64_t *tables)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(h, "SELECT (SELECT application_id FROM pragma_application_id),"
	                            " (SELECT user_version FROM pragma_user_version),"
	                            " (SELECT count(*) FROM sqlite_master)", -1, &s, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*app = sqlite3_column_int64(s, 0);
		*ver = sqlite3_column_int64(s, 1);
		*tables = sqlite3_column_int64(s, 2);
		rc = SQLITE_OK;
	}
	sqlite3_finalize(s);
	return rc;
}

/* Check an opened database: NULL if usable, else why not (static text;
 * db_busy: another process holds it, which is no damage). */
static const char *db_verify(struct idx_db *db, int *fresh)
{
	int64_t app = 0, ver = 0, tables = 0;
	int rc;
	*fresh = 0;
	if ((rc = db_wal(db->h)) != SQLITE_OK || (rc = db_head(db->h, &app, &ver, &tables)) != SQLITE_OK)
		return busy_or(rc, "not a readable SQLite database");
	if (app == 0 && ver == 0 && tables == 0) {
		*fresh = 1;
		return NULL;
	}
	if (app != DB_APP_ID)
		return "not an rdcp index";
	if (ver == 1 || ver == 2)
		ver = db_migrate(db->h, ver);
	if (ver < 0)
		return db_busy;
	if (ver != DB_VERSION)
		return "written by another version of rdcp";
	sqlite3_stmt *s;
	if (!was_checked(db->hold)) {
		if ((rc = sqlite3_prepare_v2(db->h, "PRAGMA quick_check", -1, &s, NULL)) != SQLITE_OK)
			return busy_or(rc, "damaged");
		rc = sqlite3_step(s);
		int ok = rc == SQLITE_ROW &&
		         strcmp((const char *)sqlite3_column_text(s, 0), "ok") == 0;
		sqlite3_finalize(s);
		if (!ok)
			return busy_or(rc, "damaged");
		mark_checked(db->hold);
	}
	if ((rc = sqlite3_prepare_v2(db->h, "SELECT value FROM meta WHERE key='root'", -1, &s,
	                             NULL)) != SQLITE_OK)
		return busy_or(rc, "damaged");
	const char *why = "damaged";
	if ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *r = (const char *)sqlite3_column_text(s, 0);
		why = r && strcmp(r, db->root) == 0 ? NULL : "made for another tree";
	} else if (is_busy(rc)) {
		why = db_busy;
	}
	sqlite3_finalize(s);
	return why;
}

/* Make a fresh index's schema and root row, in one transaction: runs that
 * open the same new index at once (eight first runs from one SRC) each
 * found it empty; the first to take the write lock makes it, the others then
 * find it made. 0: made; 1: another process made it first (verify it
 * again); -EIO (said). */
static int db_create(struct idx_db *db)
{
	char *err = NULL;
	int64_t tables = 0;
	sqlite3_stmt *s = NULL;
	if (sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, &err) != SQLITE_OK)
		goto fail;
	if (idx_db_int(db->h, "SELECT count(*) FROM sqlite_master", &tables) != SQLITE_OK)
		goto fail;
	if (tables) {   /* made while we waited for the lock */
		sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
		return 1;
	}
	if (sqlite3_exec(db->h, schema, NULL, NULL, &err) != SQLITE_OK)
		goto fail;
	if (sqlite3_prepare_v2(db->h, "INSERT INTO meta VALUES('root', ?1)", -1, &s,
	                       NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_text(s, 1, db->root, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc != SQLITE_DONE || sqlite3_exec(db->h, "COMMIT", NULL, NULL, &err) != SQLITE_OK)
		goto fail;
	return 0;
fail:
	log_err("index %s: cannot create: %s", db->path, err ? err : sqlite3_errmsg(db->h));
	sqlite3_free(err);
	sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
	return -EIO;
}

/* A fresh index made, by us or by a concurrent run: 0, or -EIO (said). */
static int db_make(struct idx_db *db)
{
	int fresh, rc = db_create(db);
	if (rc <= 0)
		return rc;
	const char *why = db_verify(db, &fresh);
	if (!why && !fresh)
		return 0;
	log_err("index %s: made by another run as this one started, and %s", db->path,
	        why ? why : "empty");
	return -EIO;
}

static int db_connect(struct idx_db *db)
{
	int rc = sqlite3_open_v2(db->path, &db->h,
	                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
	                         SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_err("index %s: cannot open: %s", db->path,
		        db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
		sqlite3_close(db->h);
		db->h = NULL;
		return -EIO;
	}
	sqlite3_busy_timeout(db->h, 10000);
	sqlite3_exec(db->h, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
	return 0;
}

int idx_db_reset(struct idx_db *db, const char *why)
{
	int fresh;
	log_warn("index %s: %s; rebuilding it (every file will be hashed)", db->path, why);
	sqlite3_close(db->h);
	db->h = NULL;
	db_remove_files(db->path);
	idx_unhold(db->hold);
	if ((db->hold = idx_hold(db->path)) < 0) {
		log_err("index %s: cannot open: %s", db->path, strerror(-db->hold));
		return -EIO;
	}
	if (db_connect(db) < 0 || db_verify(db, &fresh))
		return -EIO;
	return fresh ? db_make(db) : 0;   /* !fresh: made by a concurrent reset */
}

int idx_db_open(const char *path, const char *root, struct idx_db **out)
{
	struct idx_db *db = calloc(1, sizeof *db);
	if (db)
		db->hold = -1;
	if (!db || !(db->path = strdup(path)) || !(db->root = strdup(root))) {
		idx_db_close(db);
		return -ENOMEM;
	}
	int fresh;
	if ((db->hold = idx_hold(path)) < 0) {
		log_err("index %s: cannot open: %s", path, strerror(-db->hold));
		goto fail;
	}
	/* All of it is read (the check, the load): ask for it in one go, not
	 * page by page as SQLite would from a cold cache. */
	posix_fadvise(db->hold, 0, 0, POSIX_FADV_WILLNEED);
	if (db_connect(db) < 0)
		goto fail;
	const char *why = db_verify(db, &fresh);
	if (why == db_busy) {   /* in use, not damaged: never removed for it */
		log_err("index %s: %s", path, why);
		goto fail;
	}
	if (why) {
		if (idx_db_reset(db, why) < 0)
			goto fail;
	} else if (fresh && db_make(db) < 0) {
		goto fail;
	}
	*out = db;
	return 0;
fail:
	idx_db_close(db);
	return -EIO;
}

const char *idx_db_path(const struct idx_db *db)
{
	return db->path;
}

sqlite3 *idx_db_handle(struct idx_db *db)
{
	return db->h;
}

void idx_db_close(struct idx_db *db)
{
	if (!db)
		return;
	sqlite3_close(db->h);
	idx_unhold(db->hold);   /* after SQLite: see idx_hold() */
	free(db->path);
	free(db->root);
	free(db);
}

int idx_db_peek(const char *path, char **root, int64_t *used_ns, int64_t *entries)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *s = NULL;
	int64_t app = 0;
	int rc = -EIO;
	*root = NULL;
	*used_ns = 0;
	/* read-write (never create) so that closing it tidies the -wal and
	 * -shm as any last connection does; a read-only one would leave them */
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		sqlite3_close(h);
		h = NULL;
		if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
		    SQLITE_OK)
			goto out;
	}
	sqlite3_busy_timeout(h, 2000);
	if (idx_db_int(h, "PRAGMA application_id", &app) != SQLITE_OK || app != DB_APP_ID)
		goto out;
	/* each part may be missing (an index from before it was kept) */
	idx_db_int(h, "SELECT value FROM meta WHERE key='scan_ns'", used_ns);
	if (entries && idx_db_int(h, "SELECT count(*) FROM entries", entries) != SQLITE_OK)
		*entries = -1;
	if (sqlite3_prepare_v2(h, "SELECT value FROM meta WHERE key='root'", -1, &s,
	                       NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
	    sqlite3_column_text(s, 0)) {
		*root = strdup((const char *)sqlite3_column_text(s, 0));
		if (!*root) {
			rc = -ENOMEM;
			goto out;
		}
	}
	rc = 0;
out:
	sqlite3_finalize(s);
	sqlite3_close(h);
	return rc;
}
