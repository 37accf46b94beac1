/*
 * --exclude / --include, as rsync reads them (the common subset):
 *   - the first rule that matches decides; no match means included;
 *   - a trailing "/" matches directories only;
 *   - a leading "/" anchors the pattern at the root of the transfer;
 *   - a pattern with a "/" is matched against the path (its end, unless
 *     anchored), one without against the last component;
 *   - "*" and "?" do not cross "/", "**" does; [...] classes as fnmatch(3).
 * An excluded directory is not descended into.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "sync/sync_int.h"

static int match_one(const char *pat, const char *path)
{
	int flags = strstr(pat, "**") ? 0 : FNM_PATHNAME;
	return fnmatch(pat, path, flags) == 0;
}

static int rule_matches(const struct sync_rule *r, const char *path, int is_dir)
{
	const char *pat = r->pattern;
	size_t len = strlen(pat);
	char buf[4096];
	int dir_only = len > 1 && pat[len - 1] == '/';
	int anchored = pat[0] == '/';
	if (dir_only && !is_dir)
		return 0;
	if (len >= sizeof buf)
		return 0;
	memcpy(buf, pat + anchored, len - anchored - dir_only);
	buf[len - anchored - dir_only] = '\0';
	if (anchored)
		return match_one(buf, path);
	if (!strchr(buf, '/')) {
		const char *base = strrchr(path, '/');
		return match_one(buf, base ? base + 1 : path);
	}
	/* unanchored with a slash: the end of the path, at a component boundary */
	for (const char *p = path; p; p = strchr(p, '/'), p = p ? p + 1 : NULL)
		if (match_one(buf, p))
			return 1;
	return 0;
}

int sync_filter_skip(const char *path, int is_dir, void *ctx)
{
	const struct role *r = ctx;
	for (int i = 0; i < r->nrules; i++)
		if (rule_matches(&r->rules[i], path, is_dir))
			return !r->rules[i].include;
	return 0;
}
