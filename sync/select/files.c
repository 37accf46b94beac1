/*
 * --files-from: the client reads the list (a file, or '-' for stdin) and
 * normalizes it as rsync does; the far side gets it over the control
 * channel (CTL_FILES, docs/protocol.md), never by reading a file of its
 * own, and decodes it as peer input. Both scans then look at only these
 * paths and the directories above them (idx_scan_opts.roots).
 *
 * An entry is a path relative to SRC ("" for SRC itself), with a trailing
 * "/" when the line had one: the directory's entries are sent too. A
 * window of a large tree (--windows, sync/windows.c) is such a list of
 * "dir/" entries, each taken one level deep even with -r.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/select/select.h"

#define FILES_PART ((size_t)1 << 20)   /* bytes of entries per CTL_FILES frame */

/* rsync's reading of a line: leading "/" dropped, "." components gone,
 * ".." taking away the component before it (none at the top: it cannot
 * rise above SRC), empty components gone; a trailing "/" kept as one.
 * The result is written over line. */
static void normalize(char *line)
{
	size_t len = strlen(line), n = 0;
	int contents = len && line[len - 1] == '/';
	char *out = line;
	for (char *p = line, *c; *p; p = c) {
		c = p;
		while (*c && *c != '/')
			c++;
		size_t l = (size_t)(c - p);
		if (*c)
			c++;
		if (l == 0 || (l == 1 && p[0] == '.'))
			continue;
		if (l == 2 && p[0] == '.' && p[1] == '.') {
			while (n && out[n - 1] != '/')
				n--;
			if (n)
				n--;   /* the slash before it */
			continue;
		}
		if (n)
			out[n++] = '/';
		memmove(out + n, p, l);
		n += l;
	}
	if (contents)
		out[n++] = '/';
	out[n] = '\0';
}

/* Check a normalized entry (from the list or a peer): 0 or -1. */
static int entry_ok(const char *e, size_t len)
{
	if (len && e[len - 1] == '/')
		len--;
	if (len > 4096 || memchr(e, '\0', len))
		return -1;
	return len == 0 || idx_path_check(e, len) == 0 ? 0 : -1;
}

static int add_entry(struct sync_opts *o, const char *e, size_t len)
{
	if (o->nfiles == SYNC_FILES_MAX)
		return -E2BIG;
	if ((o->nfiles & (o->nfiles - 1)) == 0) {   /* at 0, 1, 2, 4...: double */
		char **v = realloc(o->files, (o->nfiles ? 2 * o->nfiles : 1) * sizeof *v);
		if (!v)
			return -ENOMEM;
		o->files = v;
	}
	if (!(o->files[o->nfiles] = strndup(e, len)))
		return -ENOMEM;
	o->nfiles++;
	return 0;
}

int sync_files_read(struct sync_opts *o, const char *path)
{
	char *buf, *p, *line, shown[512];
	size_t len;
	int lineno = 0, rc = 0;
	log_path(shown, sizeof shown, path);
	if (sync_read_list(path, o, &buf, &len) < 0) {
		if (errno == EBUSY)
			log_err("%s: standard input can be read by one --*-from option only", shown);
		else
			log_err("failed to open files-from file %s: %s", shown, strerror(errno));
		return -1;
	}
	if (memchr(buf, '\0', len)) {
		log_err("files-from file %s: has a NUL byte (rdcp reads lines, not --from0 "
		        "lists)", shown);
		free(buf);
		return -1;
	}
	for (p = buf; rc == 0 && (line = sync_next_line(&p, buf + len, &lineno));) {
		normalize(line);
		if (entry_ok(line, strlen(line)) < 0) {
			log_err("files-from file %s line %d: not a path rdcp can send (over 4096 "
			        "bytes, or a component over 255)", shown, lineno);
			rc = -1;
		} else if ((rc = add_entry(o, line, strlen(line))) < 0) {
			log_err("files-from file %s: %s", shown, rc == -E2BIG ? "too many entries"
			        : strerror(-rc));
		}
	}
	free(buf);
	return rc < 0 ? -1 : 0;
}

int sync_files_send(struct ctl *c, const struct sync_opts *o)
{
	uint8_t *b = malloc(4 + FILES_PART + 2 + 4097);
	size_t i = 0;
	int rc = b ? 0 : -ENOMEM;
	while (rc == 0) {
		size_t n = 4;
		uint32_t count = 0;
		for (; i < o->nfiles && n < 4 + FILES_PART; i++, count++) {
			size_t l = strlen(o->files[i]);
			put_u16(b + n, (uint16_t)l);
			memcpy(b + n + 2, o->files[i], l);
			n += 2 + l;
		}
		put_u32(b, count);
		rc = ctl_send(c, CTL_FILES, b, n);
		if (count == 0)
			break;   /* the empty part ends the list */
	}
	free(b);
	return rc;
}

int sync_files_decode(const uint8_t *buf, size_t len, struct sync_opts *o, const char **why)
{
	struct wire_rd r = { buf, buf + len, 0 };
	uint32_t count = rd_u32(&r);
	*why = NULL;
	if (r.bad) {
		*why = "is shorter than its count";
		return -EPROTO;
	}
	for (uint32_t k = 0; k < count; k++) {
		size_t l = rd_u16(&r);
		const uint8_t *e = rd_take(&r, l);
		if (r.bad) {
			*why = "has fewer entries than its count";
			return -EPROTO;
		}
		if (entry_ok((const char *)e, l) < 0) {
			*why = "has an entry that is not a relative path inside SRC";
			return -EPROTO;
		}
		int rc = add_entry(o, (const char *)e, l);
		if (rc == -E2BIG)
			*why = "has too many entries";
		if (rc < 0)
			return rc == -E2BIG ? -EPROTO : rc;
	}
	if (r.p != r.end) {
		*why = "has bytes after its entries";
		return -EPROTO;
	}
	return count ? 1 : 0;
}

int sync_files_recv(struct role *r, struct sync_opts *o)
{
	for (;;) {
		uint8_t type;
		size_t n;
		const char *why;
		int rc = sync_recv(r, "client", &type, &n);
		if (rc < 0)
			return rc;
		if (type != CTL_FILES) {
			log_err("the client sent a message of type %u in its --files-from list", type);
			return -EPROTO;
		}
		rc = sync_files_decode(r->ctl->buf, n, o, &why);
		if (rc == 0)
			return 0;
		if (rc < 0) {
			if (why)
				log_err("the client's --files-from list %s", why);
			return rc;
		}
	}
}

int sync_files_root(const char *src, char **root, int *is_dir)
{
	struct stat st;
	if (stat(src, &st) < 0 || !S_ISDIR(st.st_mode)) {
		log_err("%s: %s", src, errno && !S_ISREG(st.st_mode) ? strerror(errno)
		        : "not a directory (--files-from lists paths inside SRC)");
		return -ENOTDIR;
	}
	*is_dir = 1;
	*root = strdup(src);
	return *root ? 0 : -ENOMEM;
}

int sync_files_roots(const struct sync_opts *o, struct idx_root **roots, size_t *n)
{
	int recurse = (o->flags & SYNC_F_RECURSIVE) != 0;
	*roots = calloc(o->nfiles ? o->nfiles : 1, sizeof **roots);
	*n = 0;
	if (!*roots)
		return -ENOMEM;
	for (size_t i = 0; i < o->nfiles; i++) {
		char *e = o->files[i];
		size_t l = strlen(e);
		int contents = l && e[l - 1] == '/';
		char *path = strndup(e, l - (size_t)contents);
		if (!path) {
			sync_files_roots_free(*roots, *n);
			*roots = NULL;
			return -ENOMEM;
		}
		(*roots)[(*n)++] = (struct idx_root){ path, contents && o->windows ? 1
		                                            : recurse ? -1 : contents };
	}
	return 0;
}

void sync_files_roots_free(struct idx_root *roots, size_t n)
{
	for (size_t i = 0; roots && i < n; i++)
		free((char *)roots[i].path);
	free(roots);
}
