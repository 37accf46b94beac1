/*
 * A fan-out's destinations (fanout.c runs them): the operands or the
 * --hosts file, each resolved once; a destination named twice, or SRC
 * itself, left out; and the per-host report, as lines and as --json.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "sync/fanout/fanout_int.h"

/* The address a host's name (or its --hosts address) resolves to, for data
 * connections and to tell one host from another; "" when it does not. */
static void resolve(const char *name, char ip[64])
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	ip[0] = 0;
	if (getaddrinfo(name, NULL, &hints, &ai) != 0 || !ai)
		return;
	getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, 64, NULL, 0, NI_NUMERICHOST);
	freeaddrinfo(ai);
}

/* 1 when ip is an address of this machine. */
static int is_local(const char *ip)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICHOST },
	                *ai = NULL;
	if (!*ip || getaddrinfo(ip, NULL, &hints, &ai) != 0)
		return 0;
	int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int local = fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return local;
}

static int add_target(struct fan_target **t, int *n, const char *host, const char *path,
                      const char *data_addr)
{
	struct fan_target *nt = realloc(*t, (size_t)(*n + 1) * sizeof *nt);
	if (!nt)
		return -ENOMEM;
	*t = nt;
	struct fan_target *x = &nt[(*n)++];
	*x = (struct fan_target){ .host = strdup(host), .path = strdup(*path ? path : "."),
	                          .data_addr = data_addr ? strdup(data_addr) : NULL };
	if (!x->host || !x->path || (data_addr && !x->data_addr) ||
	    asprintf(&x->label, "%s:%s", host, path) < 0) {
		x->label = NULL;
		return -ENOMEM;
	}
	resolve(rsh_bare_host(data_addr ? data_addr : host), x->ip);
	return 0;
}

struct targets {
	struct fan_target **t;
	int *n;
};

static int each_host(void *ctx, const char *host, const char *path, const char *addr)
{
	struct targets *x = ctx;
	return add_target(x->t, x->n, host, path, addr);
}

/* t's path as this machine would see it if t were this machine: the
 * remote shell starts in $HOME, where a relative path (or "~/") begins;
 * trailing '/' dropped. NULL for "~user" (not ours to guess: compared as
 * typed) or no memory. */
static char *local_view(const struct fan_target *t)
{
	const char *p = t->path, *home = getenv("HOME");
	char *s = NULL;
	if (p[0] == '~' && p[1] && p[1] != '/')
		return NULL;
	if (p[0] == '~')
		p += p[1] ? 2 : 1;
	if (p[0] == '/' ? !(s = strdup(p))
	    : asprintf(&s, "%s/%s", home ? home : "", p) < 0)
		return NULL;
	for (size_t n = strlen(s); n > 1 && s[n - 1] == '/';)
		s[--n] = 0;
	return s;
}

void fan_dedupe(struct fan_target *t, int n, const char *src)
{
	char *s = realpath(src, NULL);
	char **view = calloc((size_t)(n ? n : 1), sizeof *view);
	for (int k = 0; view && k < n; k++)
		view[k] = local_view(&t[k]);
	for (int k = 0; view && k < n; k++) {
		const char *key = view[k] ? view[k] : t[k].path;
		for (int j = 0; j < k && !t[k].skip; j++) {
			int same = !t[j].skip && !strcmp(key, view[j] ? view[j] : t[j].path) &&
			           (*t[k].ip ? !strcmp(t[k].ip, t[j].ip)
			                     : !strcmp(t[k].host, t[j].host));
			if (same) {
				log_warn("%s is %s again (%s): copied once", t[k].label, t[j].label,
				         *t[k].ip ? t[k].ip : t[k].host);
				t[k].skip = 1;
			}
		}
		if (!t[k].skip && s && view[k] && is_local(t[k].ip)) {
			char *d = realpath(view[k], NULL);
			if (d && !strcmp(d, s))
				t[k].skip = 2;   /* said with -v */
			free(d);
		}
	}
	for (int k = 0; view && k < n; k++)
		free(view[k]);
	free(view);
	free(s);
}

int fan_targets(struct sync_opts *o, int first_dst, const char **paths, int nsrc,
                struct fan_target **t, int *nt)
{
	int code = 0;
	for (int k = 0; !code && k < nsrc; k++) {
		char *host = NULL, *path = NULL;
		if (sync_parse_endpoint(o->srcs[k], &host, &path) < 0 || host) {
			log_err("a fan-out sends from this machine: SRC '%s' must be local",
			        o->srcs[k]);
			code = RD_EXIT_USAGE;
		}
		free(host);
		paths[k] = path;
	}
	if (!code && o->hosts)
		return sync_hosts_read(o, each_host, &(struct targets){ t, nt });
	for (int k = first_dst; !code && k <= o->nsrc; k++) {
		const char *arg = k < o->nsrc ? o->srcs[k] : o->dst;
		char *host = NULL, *path = NULL;
		if (sync_parse_endpoint(arg, &host, &path) < 0 || !host) {
			log_err("every DST of a fan-out is remote (host:path): '%s' is not", arg);
			code = RD_EXIT_USAGE;
		} else if (add_target(t, nt, host, path, NULL) < 0) {
			code = RD_EXIT_FILEIO;
		}
		free(host);
		free(path);
	}
	return code;
}

void fan_report_hosts(const struct sync_opts *o, const struct fan_target *t, int nt,
                         const struct fhost *last)
{
	char a[SYNC_NUM_LEN], b[SYNC_NUM_LEN];
	for (int k = 0; k < nt; k++) {
		const struct fhost *h = &last[k];
		if (t[k].skip == 1 || (t[k].skip == 2 && (!o->verbose || o->quiet)) || h->src_failed ||
		    h->out || h->down)
			continue;   /* said already (the source's failure, once; a watched
			               host's outage, once), or not in this round */
		if (t[k].skip == 2) {
			printf("%s: left out: it is SRC itself\n", t[k].label);
		} else if (h->code) {
			log_err("%s: failed (exit %d): %s", t[k].label, h->code,
			        h->why[0] ? h->why : "see above");
		} else if (o->verbose && !o->quiet && !o->json) {
			printf("%s: ok: %s files, %s bytes received, %llu deleted\n", t[k].label,
			       sync_num(a, h->res.files, o->human), sync_num(b, h->res.bytes, o->human),
			       (unsigned long long)h->res.deleted);
		}
	}
	fflush(stdout);
}

char *fan_hosts_json(const struct fan_target *t, int nt, const struct fhost *last)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fputc('[', f);
	for (int k = 0; k < nt; k++) {
		const struct fhost *h = &last[k];
		fputs(k ? ",{\"dst\":" : "{\"dst\":", f);
		sync_json_str(f, t[k].label);
		fprintf(f, ",\"status\":\"%s\",\"exit_code\":%d,\"files_sent\":%llu,"
		        "\"bytes_sent\":%llu,\"deleted\":%llu,\"error\":",
		        t[k].skip ? "skipped" : h->down ? "down" : h->out ? "idle"
		        : h->src_failed ? "not run" : h->code ? "failed" : "ok",
		        t[k].skip ? 0 : h->code,
		        (unsigned long long)h->res.files, (unsigned long long)h->res.bytes,
		        (unsigned long long)h->res.deleted);
		if (h->src_failed)
			sync_json_str(f, "the source failed");
		else if (h->code && !t[k].skip)
			sync_json_str(f, h->why);
		else
			fputs("null", f);
		fputc('}', f);
	}
	fputc(']', f);
	fclose(f);
	return buf;
}
