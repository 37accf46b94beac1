/*
 * sync/select/: what a run takes: rsync's filter rules (rules.c), their use
 * on a tree being scanned (filter.c), --files-from (files.c) and --chmod
 * (chmod.c). Options, the sender and the receiver include this.
 */
#ifndef RDCP_SYNC_SELECT_H
#define RDCP_SYNC_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "sync/sync_int.h"

/* chmod.c: --chmod (rsync's syntax). parse: 0, -EINVAL for a string
 * rsync would refuse, -ENOMEM; umask_bits: for items without u/g/o/a.
 * apply: the mode (07777 bits) of an entry, a directory or not. */
struct sync_chmod;
int  sync_chmod_parse(const char *arg, uint32_t umask_bits, struct sync_chmod **out);
uint32_t sync_chmod_apply(const struct sync_chmod *ch, uint32_t mode, int is_dir);
void sync_chmod_free(struct sync_chmod *ch);

/* rules.c: rsync's filter rule syntax. */
/* Parse one rule. dflt '-' or '+': text is a pattern of --exclude or
 * --include (or "- PAT", "+ PAT", "!"); 'E' or 'I': an exclude or include
 * pattern as it is (a merge file's line under '-' or '+'); 0: the full
 * --filter syntax.
 * inherit: SYNC_RM_* given to the rule (a merge file's sides). 0, or -1
 * with why; r->pattern is then NULL. A merge rule is SYNC_R_MERGE. */
int  sync_rule_parse(const char *text, int dflt, unsigned inherit, struct sync_rule *r,
                     char *why, size_t cap);
/* The rule as --filter text that parses back to it (into buf). */
const char *sync_rule_text(const struct sync_rule *r, char *buf, size_t cap);
/* Add rule text to o's list (a clear empties it). The client (far 0) reads
 * merge files here and forwards each resulting rule (sync/opts.c); the far
 * side refuses merge rules. from names the source in messages. 0 or -1
 * (said, with the rule). */
int  sync_rules_add(struct sync_opts *o, const char *text, int dflt, const char *from,
                    int far);
/* Every line of the file at path ('-': stdin, once) as a rule; *code: the
 * exit code after a failure (11 when it cannot be read, as rsync). */
int  sync_rules_file(struct sync_opts *o, const char *path, int dflt, unsigned inherit,
                     int far, int depth, int *code);
/* The whole file ('-': stdin, once per run: else errno EBUSY) in a malloc'd
 * NUL-terminated buffer. 0, or -1 with errno. */
int  sync_read_list(const char *path, struct sync_opts *o, char **buf, size_t *len);
/* The next line of [*p, end) that is not empty or a '#'/';' comment, NUL
 * terminated in place (NL, CR or CR LF end a line); NULL at the end.
 * *lineno counts the lines passed. */
char *sync_next_line(char **p, char *end, int *lineno);
/* hosts.c: --hosts=FILE:DST (o->hosts), each line given to each(): its
 * host, DST's path, its data address (NULL: none); each returns 0, or -1
 * (out of memory). 0, or the exit code (said): 1 a bad argument or line,
 * or no host; 3 the file cannot be read; 11 each() failed. */
typedef int sync_host_fn(void *ctx, const char *host, const char *path, const char *addr);
int  sync_hosts_read(struct sync_opts *o, sync_host_fn *each, void *ctx);
/* files.c: --files-from. */
#define SYNC_FILES_MAX ((size_t)1 << 24)   /* entries in a list */
/* The client: read the list at path ('-': stdin), normalized as rsync
 * does, into o->files. 0 or -1 (said, naming the file). */
int  sync_files_read(struct sync_opts *o, const char *path);
/* The client: o->files as CTL_FILES frames, the last one empty. */
int  sync_files_send(struct ctl *c, const struct sync_opts *o);
/* One CTL_FILES payload (peer input) appended to o->files: 1 when it had
 * entries, 0 for the empty one that ends the list, -EPROTO with *why when
 * malformed (or -ENOMEM). */
int  sync_files_decode(const uint8_t *buf, size_t len, struct sync_opts *o, const char **why);
/* The server: the client's whole list into o->files. 0 or an error (said). */
int  sync_files_recv(struct role *r, struct sync_opts *o);
/* The sender's SRC with --files-from: a directory, scanned as a whole
 * (its contents are sent). 0 or an error (said). */
int  sync_files_root(const char *src, char **root, int *is_dir);
/* The scan's roots for o->files (depth from -r and each trailing "/");
 * free with sync_files_roots_free(). 0 or -ENOMEM. */
int  sync_files_roots(const struct sync_opts *o, struct idx_root **roots, size_t *n);
void sync_files_roots_free(struct idx_root *roots, size_t n);

/* filter.c: the rules applied to a tree's paths during a scan. */
struct filter;
/* side: SYNC_RM_SENDER or SYNC_RM_RECEIVER; root: the tree whose dir-merge
 * files are read (an fd, dup'ed; -1: none); skip_file_dir: a directory
 * whose dir-merge files are not read (NULL: none). 0 or -ENOMEM. */
int  sync_filter_open(struct filter **f, const struct sync_opts *o, int side, int root,
                      const char *skip_file_dir);
/* idx_scan_opts.skip (ctx: a struct filter): 1 when path is excluded.
 * Thread-safe. */
int  sync_filter_skip(const char *path, int is_dir, void *ctx);
/* 1 when path, or a directory above it, is excluded on f's side (for
 * --delete: kept). */
int  sync_filter_protects(struct filter *f, const char *path, int is_dir);
/* The exit code of the first dir-merge file that could not be used
 * (said), 0 when none. */
int  sync_filter_error(const struct filter *f);
void sync_filter_free(struct filter *f);
/* 1 when both sides exclude exactly the same paths (no dir-merge file, no
 * side modifiers, no --delete-excluded): the receiver may then leave
 * excluded paths out of its scan of DST. */
int  sync_filter_simple(const struct sync_opts *o);

#endif
