/*
 * What a sync prints for its user, in rsync's formats: the itemized change
 * codes (-i, "YXcstpoguax"), numbers as rsync prints them (1,234,567; -h
 * 1.23M; -hh in powers of 1024), the -v summary, --stats and --json. The
 * receiver builds the lines (land.c, plan.c); the client prints the rest
 * here, once the run is over (sync_report()).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "sync/sync_int.h"

char *sync_num(char buf[SYNC_NUM_LEN], uint64_t n, int human)
{
	if (human >= 1) {   /* rsync -h: 1000s, -hh: 1024s, with K M G T P E */
		unsigned mult = human == 1 ? 1000 : 1024;
		if (n >= mult) {
			static const char units[] = "KMGTPE";
			double d = (double)n / mult;
			int u = 0;
			while (d >= mult && units[u + 1]) {
				d /= mult;
				u++;
			}
			snprintf(buf, SYNC_NUM_LEN, "%.2f%c", d, units[u]);
			return buf;
		}
		snprintf(buf, SYNC_NUM_LEN, "%llu", (unsigned long long)n);
		return buf;
	}
	/* rsync's default: digits in groups of three */
	char raw[24];
	int len = snprintf(raw, sizeof raw, "%llu", (unsigned long long)n), o = 0;
	for (int i = 0; i < len; i++) {
		if (i && (len - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = raw[i];
	}
	buf[o] = '\0';
	return buf;
}

/* A rate or other fraction: "1,234.56", or with -h as sync_num() does. */
static char *dnum(char buf[SYNC_NUM_LEN], double d, int human)
{
	if (!(d >= 0 && d < 1e18))   /* negative, NaN, absurd */
		d = 0;
	if (human >= 1)
		return sync_num(buf, (uint64_t)d, human);
	char whole[SYNC_NUM_LEN];
	uint64_t w = (uint64_t)d;
	unsigned cents = (unsigned)((d - (double)w) * 100 + 0.5);
	if (cents >= 100) {
		w++;
		cents -= 100;
	}
	snprintf(buf, SYNC_NUM_LEN, "%s.%02u", sync_num(whole, w, 0), cents);
	return buf;
}

/* Microseconds as rsync prints seconds in --stats: "1,234.567". */
static char *secs(char buf[SYNC_NUM_LEN], uint64_t us)
{
	char whole[SYNC_NUM_LEN];
	uint64_t ms = us / 1000 + (us % 1000 >= 500);
	snprintf(buf, SYNC_NUM_LEN, "%s.%03u", sync_num(whole, ms / 1000, 0),
	         (unsigned)(ms % 1000));
	return buf;
}

char *sync_item_code(char out[SYNC_ITEM_LEN], char how, char type, unsigned bits)
{
	if (bits & SYNC_ITEM_NEW) {
		snprintf(out, SYNC_ITEM_LEN, "%c%c+++++++++", how, type);
		return out;
	}
	out[0] = how;
	out[1] = type;
	out[2] = bits & SYNC_ITEM_SUM ? 'c' : '.';
	out[3] = bits & SYNC_ITEM_SIZE ? 's' : '.';
	out[4] = bits & SYNC_ITEM_TIME ? 't' : bits & SYNC_ITEM_TIME_NOW ? 'T' : '.';
	out[5] = bits & SYNC_ITEM_PERMS ? 'p' : '.';
	out[6] = bits & SYNC_ITEM_OWNER ? 'o' : '.';
	out[7] = bits & SYNC_ITEM_GROUP ? 'g' : '.';
	out[8] = '.';   /* u: access/creation times, which rdcp does not keep */
	out[9] = bits & SYNC_ITEM_ACL ? 'a' : '.';
	out[10] = bits & SYNC_ITEM_XATTR ? 'x' : '.';
	out[11] = '\0';
	return out;
}

char sync_item_type(int idx_type)
{
	switch (idx_type) {
	case IDX_REG: return 'f';
	case IDX_DIR: return 'd';
	case IDX_LNK: return 'L';
	case IDX_CHR: case IDX_BLK: return 'D';
	default: return 'S';   /* fifos and sockets: rsync's "special" */
	}
}

unsigned sync_item_bits(const struct idx_entry *e, const struct idx_entry *d, unsigned flags,
                        int own, int sent)
{
	if (!d)
		return SYNC_ITEM_NEW;
	unsigned b = 0;
	if (e->type == IDX_REG && e->size != d->size)
		b |= SYNC_ITEM_SIZE;
	if (e->type == IDX_REG && (flags & SYNC_F_CHECKSUM) && sent &&
	    memcmp(e->hash, d->hash, IDX_HASH_LEN))
		b |= SYNC_ITEM_SUM;
	if (e->type == IDX_LNK && (!e->link || !d->link || strcmp(e->link, d->link)))
		b |= SYNC_ITEM_SUM;
	if ((e->type == IDX_CHR || e->type == IDX_BLK) && e->rdev != d->rdev)
		b |= SYNC_ITEM_SUM;
	if (flags & SYNC_F_TIMES) {
		if (e->mtime_ns != d->mtime_ns)
			b |= SYNC_ITEM_TIME;
	} else if (sent) {
		b |= SYNC_ITEM_TIME_NOW;   /* the file gets the time it lands at */
	}
	if ((flags & SYNC_F_PERMS) && e->type != IDX_LNK &&
	    (e->mode & 07777) != (d->mode & 07777))
		b |= SYNC_ITEM_PERMS;
	if (own && e->uid != d->uid)
		b |= SYNC_ITEM_OWNER;
	if (own && e->gid != d->gid)
		b |= SYNC_ITEM_GROUP;
	return b;
}

int sync_kind(int idx_type)
{
	switch (idx_type) {
	case IDX_REG: return SYNC_K_REG;
	case IDX_DIR: return SYNC_K_DIR;
	case IDX_LNK: return SYNC_K_LINK;
	case IDX_CHR: case IDX_BLK: return SYNC_K_DEV;
	default: return SYNC_K_SPECIAL;
	}
}

void sync_count_entries(struct sync_result *res, const struct idx_manifest *m, int skip_root)
{
	for (size_t i = 0; i < m->n; i++) {
		const struct idx_entry *e = &m->e[i];
		if (skip_root && !*e->path)
			continue;
		res->entries[sync_kind(e->type)]++;
		if (e->type == IDX_REG)
			res->total_size += e->size;
		else if (e->type == IDX_LNK && e->link)   /* as rsync: a link's target */
			res->total_size += strlen(e->link);
	}
}

static uint64_t sum(const uint64_t *v)
{
	uint64_t t = 0;
	for (int k = 0; k < SYNC_KINDS; k++)
		t += v[k];
	return t;
}

/* rsync's "N (reg: 3, dir: 2, link: 1)" of a count by kind. */
static void by_kind(const char *what, const uint64_t *v, int human)
{
	static const char *name[SYNC_KINDS] = { "reg", "dir", "link", "dev", "special" };
	char b[SYNC_NUM_LEN];
	const char *sep = " (";
	printf("%s: %s", what, sync_num(b, sum(v), human));
	for (int k = 0; k < SYNC_KINDS; k++)
		if (v[k]) {
			printf("%s%s: %s", sep, name[k], sync_num(b, v[k], human));
			sep = ", ";
		}
	printf("%s\n", *sep == ',' ? ")" : "");
}

/* What the client sent and received: the control channel, and file data
 * in the direction it went (transport headers are not counted). */
static void totals(const struct sync_opts *o, const struct sync_result *res, uint64_t *tx,
                   uint64_t *rx)
{
	(void)o;
	/* a fan-out's bytes are every host's; the source sent them once */
	*tx = res->ctl_tx + (res->hosts ? res->wire : res->we_sent ? res->bytes : 0);
	*rx = res->ctl_rx + (res->we_sent ? 0 : res->bytes);
}

static void stats(const struct sync_opts *o, const struct sync_result *res)
{
	int h = o->human;
	char b[SYNC_NUM_LEN];
	uint64_t tx, rx;
	totals(o, res, &tx, &rx);
	printf("\n");
	by_kind("Number of files", res->entries, h);
	by_kind("Number of created files", res->created, h);
	by_kind("Number of deleted files", res->removed, h);
	printf("Number of regular files transferred: %s\n", sync_num(b, res->files, h));
	printf("Total file size: %s bytes\n", sync_num(b, res->total_size, h));
	printf("Total transferred file size: %s bytes\n",
	       sync_num(b, res->bytes + res->matched, h));
	printf("Literal data: %s bytes\n", sync_num(b, res->bytes, h));
	printf("Matched data: %s bytes\n", sync_num(b, res->matched, h));
	printf("File list size: %s\n", sync_num(b, res->flist_bytes, h));
	/* the sender's, measured where it ran (MANIFEST_END brings them to a
	 * client that pulls); as rsync, only when there was a file list */
	if (res->flist_gen_us) {
		printf("File list generation time: %s seconds\n", secs(b, res->flist_gen_us));
		printf("File list transfer time: %s seconds\n", secs(b, res->flist_xfer_us));
	}
	printf("Total bytes sent: %s\n", sync_num(b, tx, h));
	printf("Total bytes received: %s\n", sync_num(b, rx, h));
}

/* rsync -v's last two lines. */
static void summary(const struct sync_opts *o, const struct sync_result *res, double secs)
{
	int h = o->human;
	char b1[SYNC_NUM_LEN], b2[SYNC_NUM_LEN], b3[SYNC_NUM_LEN], b4[SYNC_NUM_LEN];
	uint64_t tx, rx;
	totals(o, res, &tx, &rx);
	printf("\nsent %s bytes  received %s bytes  %s bytes/sec\n", sync_num(b1, tx, h),
	       sync_num(b2, rx, h), dnum(b3, secs > 0 ? (double)(tx + rx) / secs : 0, h));
	char b5[SYNC_NUM_LEN];   /* rsync: the speedup always with commas */
	printf("total size is %s  speedup is %s%s\n", sync_num(b4, res->total_size, h),
	       dnum(b5, tx + rx ? (double)res->total_size / (double)(tx + rx) : 0.0, 0),
	       (o->flags & SYNC_F_DRYRUN) ? " (DRY RUN)" : "");
}

/* s as a JSON string: quotes, backslashes and control characters escaped,
 * bytes that are not UTF-8 as U+FFFD (JSON text must be UTF-8). */
void sync_json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	fputc('"', f);
	while (*p) {
		unsigned c = *p;
		int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
		        : (c & 0xf8) == 0xf0 ? 4 : 0;
		int ok = n > 0 && !(n == 2 && c < 0xc2) && !(n == 4 && c > 0xf4);
		for (int k = 1; ok && k < n; k++)
			ok = (p[k] & 0xc0) == 0x80;
		if (ok && n == 3)   /* no overlong forms, no surrogates */
			ok = !(c == 0xe0 && p[1] < 0xa0) && !(c == 0xed && p[1] >= 0xa0);
		if (ok && n == 4)
			ok = !(c == 0xf0 && p[1] < 0x90) && !(c == 0xf4 && p[1] >= 0x90);
		if (!ok) {
			fputs("\\ufffd", f);
			p++;
		} else if (c == '"' || c == '\\') {
			fprintf(f, "\\%c", c);
			p++;
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\u%04x", c);
			p++;
		} else {
			fwrite(p, 1, (size_t)n, f);
			p += n;
		}
	}
	fputc('"', f);
}

/* --json: one object, a fixed schema (docs/rdcp.1, OUTPUT). "errors" is
 * every entry that failed or vanished, so it is 0 exactly when no entry
 * did (exit 0, or a failure of the whole run) and "vanished" is the part
 * of it that makes exit 24. */
static void json(const struct sync_opts *o, const struct sync_result *res, int code,
                 double secs, const char *key, const char *members)
{
	uint64_t tx, rx;
	totals(o, res, &tx, &rx);
	printf("{\"rdcp\":1,\"src\":");
	sync_json_str(stdout, o->src);
	printf(",\"dst\":");
	sync_json_str(stdout, o->dst);
	printf(",\"dry_run\":%s,\"files_considered\":%llu,\"bytes_considered\":%llu,"
	       "\"files_sent\":%llu,\"bytes_sent\":%llu,\"bytes_matched\":%llu,"
	       "\"files_created\":%llu,"
	       "\"meta_updated\":%llu,\"deleted\":%llu,\"errors\":%llu,\"vanished\":%llu,"
	       "\"bytes_total_sent\":%llu,\"bytes_total_received\":%llu,\"seconds\":%.3f,"
	       "\"flist_generation_seconds\":%.3f,\"flist_transfer_seconds\":%.3f,"
	       , (o->flags & SYNC_F_DRYRUN) ? "true" : "false",
	       (unsigned long long)sum(res->entries), (unsigned long long)res->total_size,
	       (unsigned long long)res->files, (unsigned long long)res->bytes,
	       (unsigned long long)res->matched, (unsigned long long)sum(res->created), (unsigned long long)res->meta,
	       (unsigned long long)res->deleted, (unsigned long long)(res->errors + res->vanished),
	       (unsigned long long)res->vanished,
	       (unsigned long long)tx, (unsigned long long)rx, secs,
	       (double)res->flist_gen_us / 1e6, (double)res->flist_xfer_us / 1e6);
	/* the first SYNC_FAILS_MAX failures with their paths; the others
	 * (beyond the bound, or with no path to give) only counted */
	uint64_t errors = res->errors + res->vanished, listed = res->fails ? res->fails->n : 0;
	printf("\"failed\":");
	sync_fails_json(stdout, res->fails);
	printf(",\"failed_omitted\":%llu,\"sent_as_read\":[",
	       (unsigned long long)(errors > listed ? errors - listed : 0));
	for (size_t i = 0; res->as_read && i < res->as_read->n; i++) {
		if (i)
			putchar(',');
		sync_json_str(stdout, res->as_read->v[i]);
	}
	printf("],\"transport\":");
	/* always a name: "none" when no data connection was made (nothing to
	 * send, a dry run, a run that failed before it) */
	sync_json_str(stdout, res->transport ? res->transport : "none");
	if (members)
		printf(",\"%s\":%s", key, members);
	if (o->watch) {
		printf(",\"round\":%u,\"whole\":%s,\"lag_seconds\":", res->round,
		       res->whole ? "true" : "false");
		if (res->lag_s >= 0)
			printf("%.3f", res->lag_s);
		else
			printf("null");
	}
	printf(",\"exit_code\":%d}\n", code);
}

double sync_report_begin(const struct sync_opts *o, int client_sends)
{
	if (o->verbose && !o->quiet && !o->json) {
		/* rsync's first line; rdcp's file list is sent whole, not incrementally */
		printf("%s file list\n", client_sends ? "sending" : "receiving");
		fflush(stdout);
	}
	return clock_s();
}

int sync_report(const struct sync_opts *o, const struct sync_result *res, int code, double t0)
{
	return sync_report_hosts(o, res, code, t0, NULL, NULL);
}

int sync_report_hosts(const struct sync_opts *o, const struct sync_result *res, int code,
                      double t0, const char *key, const char *members)
{
	double secs = clock_s() - t0;
	if (o->json) {
		json(o, res, code, secs, key, members);
	} else if (!o->quiet) {
		if (o->stats)
			stats(o, res);
		if (o->stats || o->verbose)
			summary(o, res, secs);
	}
	fflush(stdout);
	return code;
}
