/*
 * Filter rules as rsync writes them (the common subset), parsed into the
 * one ordered list of struct sync_opts: --exclude/--include (a pattern, or
 * "- PAT", "+ PAT", "!"), --filter (the rule syntax below), -F, and the
 * files of --exclude-from, --include-from and merge rules, which the client
 * reads and turns into rules in place; the far side gets the resulting
 * rules in the HELLO and never reads a file of the client's.
 *
 *   RULE[,MODS] PATTERN   or   R[MODS] PATTERN   (one space or '_' between)
 *   exclude  -    include  +    hide  H (= -s)    show  S (= +s)
 *   protect  P (= -r)   risk  R (= +r)   clear  !   merge  .   dir-merge  :
 *   modifiers: '!' (not matching), 's' (sender only), 'r' (receiver only);
 *   merge and dir-merge also '-', '+' (every line one kind of pattern),
 *   'e' (exclude the merge file's name), dir-merge 'n' (not inherited).
 * Anything else rsync knows ('/', 'C', 'p', 'x', 'w', cvs-exclude) is
 * refused with the rule named, never ignored.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "sync/select/select.h"

#define MERGE_DEPTH 8    /* merge files naming merge files */
#define RULE_MAX    4000 /* bytes in one rule's pattern */

static const struct { const char *name; char c; } names[] = {
	{ "exclude", '-' }, { "include", '+' }, { "hide", 'H' }, { "show", 'S' },
	{ "protect", 'P' }, { "risk", 'R' }, { "clear", '!' }, { "merge", '.' },
	{ "dir-merge", ':' },
};

/* The rule character and where its modifiers start, from a long or short
 * rule name; 0 when text names no rule. */
static char rule_char(const char *text, const char **mods)
{
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		size_t n = strlen(names[i].name);
		if (!strncmp(text, names[i].name, n) &&
		    (text[n] == ',' || text[n] == ' ' || text[n] == '_' || !text[n])) {
			*mods = text + n + (text[n] == ',');
			return names[i].c;
		}
	}
	if (*text && strchr("-+HSPR!.:", *text)) {
		*mods = text + 1;
		return *text;
	}
	return 0;
}

/* Modifier c for rule character k into *m; 0, or -1 if not supported. */
static int take_mod(char k, char c, unsigned *m)
{
	int merge = k == '.' || k == ':';
	switch (c) {
	case '!': if (merge) return -1; *m |= SYNC_RM_NEGATE; return 0;
	case 's': *m |= SYNC_RM_SENDER; return 0;
	case 'r': *m |= SYNC_RM_RECEIVER; return 0;
	case 'n': if (k != ':') return -1; *m |= SYNC_RM_NO_INHERIT; return 0;
	case '-': if (!merge) return -1; *m |= SYNC_RM_EXCLUDES; return 0;
	case '+': if (!merge) return -1; *m |= SYNC_RM_INCLUDES; return 0;
	case 'e': if (!merge) return -1; *m |= SYNC_RM_EXCL_SELF; return 0;
	}
	return -1;
}

int sync_rule_parse(const char *text, int dflt, unsigned inherit, struct sync_rule *r,
                    char *why, size_t cap)
{
	const char *mods = text, *pat;
	char k;
	*r = (struct sync_rule){ 0 };
	if (dflt == 'E' || dflt == 'I') {   /* merge '-' or '+': the line is the pattern */
		k = dflt == 'E' ? '-' : '+';
		pat = text;
		mods = NULL;
	} else if (dflt) {   /* a pattern, unless it starts with "- " or "+ " (or is "!") */
		if (!strcmp(text, "!")) {
			r->kind = SYNC_R_CLEAR;
			return 0;
		}
		k = (text[0] == '-' || text[0] == '+') && text[1] == ' ' ? text[0] : (char)dflt;
		pat = k == text[0] && text[1] == ' ' ? text + 2 : text;
		mods = NULL;
	} else {
		if (!(k = rule_char(text, &mods))) {
			snprintf(why, cap, "unknown filter rule");
			return -1;
		}
		for (pat = mods; *pat && *pat != ' ' && *pat != '_'; pat++)
			if (take_mod(k, *pat, &r->mods) < 0) {
				snprintf(why, cap, "the modifier '%c' is not supported by rdcp", *pat);
				return -1;
			}
		if (k == '!') {
			if (*pat) {
				snprintf(why, cap, "clear takes no pattern");
				return -1;
			}
			r->kind = SYNC_R_CLEAR;
			return 0;
		}
		if (*pat)
			pat++;
	}
	if (!*pat || strlen(pat) > RULE_MAX) {
		snprintf(why, cap, *pat ? "the pattern is over %d bytes" : "the pattern is missing",
		         RULE_MAX);
		return -1;
	}
	switch (k) {
	case 'H': k = '-'; r->mods |= SYNC_RM_SENDER; break;
	case 'S': k = '+'; r->mods |= SYNC_RM_SENDER; break;
	case 'P': k = '-'; r->mods |= SYNC_RM_RECEIVER; break;
	case 'R': k = '+'; r->mods |= SYNC_RM_RECEIVER; break;
	}
	if ((r->mods & SYNC_RM_SENDER) && (r->mods & SYNC_RM_RECEIVER))
		r->mods &= ~(unsigned)(SYNC_RM_SENDER | SYNC_RM_RECEIVER);   /* both: as none */
	r->mods |= inherit;
	r->kind = k == '-' ? SYNC_R_EXCLUDE : k == '+' ? SYNC_R_INCLUDE
	        : k == ':' ? SYNC_R_DIRMERGE : SYNC_R_MERGE;
	if (r->kind == SYNC_R_DIRMERGE && strchr(pat + (*pat == '/'), '/')) {
		snprintf(why, cap, "a dir-merge file is one name in each directory");
		return -1;
	}
	r->pattern = strdup(r->kind == SYNC_R_DIRMERGE && *pat == '/' ? pat + 1 : pat);
	if (!r->pattern) {
		snprintf(why, cap, "%s", strerror(ENOMEM));
		return -1;
	}
	return 0;
}

const char *sync_rule_text(const struct sync_rule *r, char *buf, size_t cap)
{
	static const struct { unsigned m; char c; } mc[] = {
		{ SYNC_RM_NEGATE, '!' }, { SYNC_RM_SENDER, 's' }, { SYNC_RM_RECEIVER, 'r' },
		{ SYNC_RM_NO_INHERIT, 'n' }, { SYNC_RM_EXCLUDES, '-' }, { SYNC_RM_INCLUDES, '+' },
		{ SYNC_RM_EXCL_SELF, 'e' },
	};
	char mods[8];
	size_t n = 0;
	if (r->kind == SYNC_R_CLEAR)
		return "!";
	for (size_t i = 0; i < sizeof mc / sizeof mc[0]; i++)
		if (r->mods & mc[i].m)
			mods[n++] = mc[i].c;
	mods[n] = '\0';
	snprintf(buf, cap, "%c%s %s", r->kind == SYNC_R_EXCLUDE ? '-' : r->kind == SYNC_R_INCLUDE
	         ? '+' : r->kind == SYNC_R_DIRMERGE ? ':' : '.', mods, r->pattern);
	return buf;
}

/* Append r to o (taking its pattern), or clear the list. 0 or -1 (said). */
static int push(struct sync_opts *o, struct sync_rule *r, int far)
{
	char text[RULE_MAX + 16];
	if (r->kind == SYNC_R_CLEAR) {
		for (int i = 0; i < o->nrules; i++)
			free(o->rules[i].pattern);
		o->nrules = 0;
	} else {
		if (o->nrules == SYNC_MAX_RULES) {
			log_err("at most %d filter rules", SYNC_MAX_RULES);
			free(r->pattern);
			return -1;
		}
		struct sync_rule *v = realloc(o->rules, (size_t)(o->nrules + 1) * sizeof *v);
		if (!v) {
			free(r->pattern);
			return -1;
		}
		o->rules = v;
		v[o->nrules++] = *r;
	}
	/* the far side gets the rule itself, never the file it came from */
	return far ? 0 : sync_opts_forward_rule(o, sync_rule_text(r, text, sizeof text));
}

static int add_text(struct sync_opts *o, const char *text, int dflt, unsigned inherit,
                    const char *from, int far, int depth);

/* A merge rule on the client: the file's rules in place ('e': its name
 * excluded first). */
static int merge(struct sync_opts *o, const struct sync_rule *m, const char *from, int far,
                 int depth)
{
	int code;
	if (far) {
		log_err("%s: a merge rule reads a file of the client's; the client sends its "
		        "rules instead", from);
		return -1;
	}
	if (depth >= MERGE_DEPTH) {
		log_err("%s: merge files nested over %d deep", from, MERGE_DEPTH);
		return -1;
	}
	if (m->mods & SYNC_RM_EXCL_SELF) {
		const char *base = strrchr(m->pattern, '/');
		struct sync_rule ex = { SYNC_R_EXCLUDE, 0, strdup(base ? base + 1 : m->pattern) };
		if (!ex.pattern || push(o, &ex, far) < 0)
			return -1;
	}
	int dflt = (m->mods & SYNC_RM_EXCLUDES) ? 'E' : (m->mods & SYNC_RM_INCLUDES) ? 'I' : 0;
	return sync_rules_file(o, m->pattern, dflt, m->mods & (SYNC_RM_SENDER | SYNC_RM_RECEIVER),
	                       far, depth + 1, &code);
}

static int add_text(struct sync_opts *o, const char *text, int dflt, unsigned inherit,
                    const char *from, int far, int depth)
{
	struct sync_rule r;
	char why[128];
	if (sync_rule_parse(text, dflt, inherit, &r, why, sizeof why) < 0) {
		log_err("%s: %s: '%s'", from, why, text);
		return -1;
	}
	if (r.kind != SYNC_R_MERGE) {
		if (r.kind == SYNC_R_DIRMERGE && (r.mods & SYNC_RM_EXCL_SELF)) {
			struct sync_rule ex = { SYNC_R_EXCLUDE, 0, strdup(r.pattern) };
			if (!ex.pattern || push(o, &ex, far) < 0) {
				free(r.pattern);
				return -1;
			}
			r.mods &= ~(unsigned)SYNC_RM_EXCL_SELF;
		}
		return push(o, &r, far);
	}
	int rc = merge(o, &r, from, far, depth);
	free(r.pattern);
	return rc;
}

int sync_rules_add(struct sync_opts *o, const char *text, int dflt, const char *from, int far)
{
	return add_text(o, text, dflt, 0, from, far, 0);
}

int sync_read_list(const char *path, struct sync_opts *o, char **buf, size_t *len)
{
	int fd = STDIN_FILENO;
	if (strcmp(path, "-") != 0) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
	} else if (o->stdin_taken++) {
		errno = EBUSY;   /* said by the caller as "stdin is read once" */
		return -1;
	}
	if (fd < 0)
		return -1;
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1);
	ssize_t got = 0;
	while (b && (got = read(fd, b + n, cap - n)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			break;
		n += (size_t)got;
		if (n == cap) {
			char *nb = n < ((size_t)1 << 30) ? realloc(b, 2 * cap + 1) : NULL;
			if (!nb) {
				errno = n < ((size_t)1 << 30) ? ENOMEM : EFBIG;
				got = -1;
				break;
			}
			b = nb;
			cap *= 2;
		}
	}
	int err = !b ? ENOMEM : errno;
	if (fd != STDIN_FILENO)
		close(fd);
	if (!b || got < 0) {
		free(b);
		errno = err;
		return -1;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

char *sync_next_line(char **p, char *end, int *lineno)
{
	while (*p < end) {
		char *line = *p, *e = line;
		++*lineno;
		while (e < end && *e != '\n' && *e != '\r')
			e++;
		*p = e < end && *e == '\r' && e + 1 < end && e[1] == '\n' ? e + 2 : e + 1;
		*e = '\0';
		if (*line && *line != '#' && *line != ';')
			return line;
	}
	return NULL;
}

int sync_rules_file(struct sync_opts *o, const char *path, int dflt, unsigned inherit, int far,
                    int depth, int *code)
{
	char *buf, shown[512];
	size_t len;
	log_path(shown, sizeof shown, path);
	if (sync_read_list(path, o, &buf, &len) < 0) {
		if (errno == EBUSY)
			log_err("%s: standard input can be read by one --*-from option only", shown);
		else
			log_err("failed to open filter file %s: %s", shown, strerror(errno));
		*code = errno == EBUSY ? RD_EXIT_USAGE : RD_EXIT_FILEIO;   /* rsync's 11 */
		return -1;
	}
	int rc = 0, lineno = 0;
	char from[600], *p = buf, *line;
	*code = RD_EXIT_USAGE;
	if (memchr(buf, '\0', len)) {
		log_err("%s: has a NUL byte (rdcp reads lines, not --from0 lists)", shown);
		free(buf);
		return -1;
	}
	while (rc == 0 && (line = sync_next_line(&p, buf + len, &lineno))) {
		snprintf(from, sizeof from, "%s line %d", shown, lineno);
		rc = add_text(o, line, dflt, inherit, from, far, depth);
	}
	free(buf);
	return rc;
}
