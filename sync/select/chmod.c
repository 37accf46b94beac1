/*
 * --chmod=CHMOD, rsync's syntax and meaning: comma-separated items, each
 * an optional D (directories only) or F (everything else) and either an
 * octal mode (set as it is) or [ugoa]*[+-=][rwxXst]*. Without u, g, o or
 * a, the bits are for all three less the umask (the receiver's: rdcp
 * applies --chmod on the receiving side, to the sender's modes, before it
 * compares them, so a second run finds nothing to change). X is x for
 * directories and for what has an x bit already; s is setuid with u,
 * setgid with g (and setuid without either, as rsync); t the sticky bit.
 * Symlinks are left alone (Linux ignores their mode).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sync/select/select.h"

enum { CH_DIRS = 1, CH_FILES = 2, CH_XKEEP = 4 };

struct chmod_rule {
	uint32_t and_mask, or_mask;
	unsigned flags;
};

struct sync_chmod {
	size_t n;
	struct chmod_rule r[];
};

/* One item, p[0..len), into *r; 0 or -EINVAL. */
static int parse_item(const char *p, size_t len, uint32_t umask_bits, struct chmod_rule *r)
{
	size_t i = 0;
	*r = (struct chmod_rule){ 0 };
	for (; i < len && (p[i] == 'D' || p[i] == 'F'); i++) {
		unsigned f = p[i] == 'D' ? CH_DIRS : CH_FILES;
		if (r->flags & (CH_DIRS | CH_FILES) & ~f)
			return -EINVAL;   /* both D and F */
		r->flags |= f;
	}
	if (i < len && p[i] >= '0' && p[i] <= '9') {   /* octal: the mode itself */
		uint32_t v = 0;
		for (; i < len; i++) {
			if (p[i] < '0' || p[i] > '7' || (v = v * 8 + (uint32_t)(p[i] - '0')) > 07777)
				return -EINVAL;
		}
		r->and_mask = 0;
		r->or_mask = v;
		return 0;
	}
	uint32_t where = 0, top = 0, what = 0, topset = 0;
	for (; i < len && strchr("ugoa", p[i]); i++) {
		switch (p[i]) {
		case 'u': where |= 0100; top |= 04000; break;
		case 'g': where |= 0010; top |= 02000; break;
		case 'o': where |= 0001; break;
		case 'a': where |= 0111; break;
		}
	}
	if (i == len || !strchr("+-=", p[i]))
		return -EINVAL;
	char op = p[i++];
	for (; i < len; i++) {
		switch (p[i]) {
		case 'r': what |= 4; break;
		case 'w': what |= 2; break;
		case 'X': r->flags |= CH_XKEEP; what |= 1; break;
		case 'x': what |= 1; break;
		case 's': topset = top ? topset | top : 04000; break;
		case 't': topset |= 01000; break;
		default: return -EINVAL;
		}
	}
	uint32_t bits = where ? where * what : (0111 * what) & ~umask_bits;
	if (!where)
		where = 0111;
	switch (op) {
	case '+':
		r->and_mask = 07777;
		r->or_mask = bits | topset;
		break;
	case '-':
		r->and_mask = 07777 & ~(bits | topset);
		r->or_mask = 0;
		break;
	default:   /* '=': the named classes' rwx cleared, setuid/setgid when given */
		r->and_mask = 07777 & ~(where * 7) & ~(topset ? top : 0);
		r->or_mask = bits | topset;
		break;
	}
	return 0;
}

int sync_chmod_parse(const char *arg, uint32_t umask_bits, struct sync_chmod **out)
{
	size_t n = 1;
	*out = NULL;
	for (const char *c = arg; *c; c++)
		n += *c == ',';
	struct sync_chmod *ch = malloc(sizeof *ch + n * sizeof ch->r[0]);
	if (!ch)
		return -ENOMEM;
	ch->n = 0;
	for (const char *p = arg;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (parse_item(p, len, umask_bits, &ch->r[ch->n++]) < 0) {
			free(ch);
			return -EINVAL;
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	*out = ch;
	return 0;
}

uint32_t sync_chmod_apply(const struct sync_chmod *ch, uint32_t mode, int is_dir)
{
	uint32_t had_x = mode & 0111;
	for (size_t i = 0; ch && i < ch->n; i++) {
		const struct chmod_rule *r = &ch->r[i];
		if (((r->flags & CH_DIRS) && !is_dir) || ((r->flags & CH_FILES) && is_dir))
			continue;
		mode &= r->and_mask;
		if ((r->flags & CH_XKEEP) && !had_x && !is_dir)
			mode |= r->or_mask & ~0111u;
		else
			mode |= r->or_mask;
	}
	return mode & 07777;
}

void sync_chmod_free(struct sync_chmod *ch)
{
	free(ch);
}
