/*
 * The listener's gate, shared by both backends: which peers may even start a
 * handshake (the allow-list of one address, tp_opts.peer_addr), and how
 * connections that are dropped are reported: the first few one line each,
 * the rest only counted, so a flood of strangers cannot fill a log or a cron
 * mail. tp_listener_free() prints the count.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "transport/tp_int.h"

/* Any address as 16 bytes: IPv6 as is, IPv4 as v4-mapped (::ffff:a.b.c.d),
 * so that a v4 peer on a dual-stack socket matches a v4 allow-list entry. */
static int addr16(const struct sockaddr *sa, uint8_t out[16])
{
	if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	if (sa->sa_family == AF_INET) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	return -EAFNOSUPPORT;
}

int tp_gate_init(struct tp_gate *g, const char *peer_addr)
{
	memset(g, 0, sizeof *g);
	if (!peer_addr)
		return 0;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST }, *res;
	if (getaddrinfo(peer_addr, NULL, &hints, &res) != 0) {
		log_err("allowed peer '%s': not a numeric IPv4 or IPv6 address", peer_addr);
		return -EINVAL;
	}
	int rc = addr16(res->ai_addr, g->peer);
	freeaddrinfo(res);
	if (rc < 0) {
		log_err("allowed peer '%s': not an IPv4 or IPv6 address", peer_addr);
		return -EINVAL;
	}
	g->restricted = 1;
	return 0;
}

int tp_gate_allows(const struct tp_gate *g, const struct sockaddr *sa)
{
	uint8_t a[16];
	if (!g->restricted)
		return 1;
	return addr16(sa, a) == 0 && memcmp(a, g->peer, 16) == 0;
}

void tp_addr_name(const struct sockaddr *sa, char *buf, size_t cap)
{
	char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
	socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
	                                          : sizeof(struct sockaddr_in);
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
		getnameinfo(sa, len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV);
	/* a v4 peer on the dual-stack socket: say 10.0.0.1, not ::ffff:10.0.0.1 */
	const char *host = strncmp(h, "::ffff:", 7) == 0 && strchr(h + 7, '.') ? h + 7 : h;
	snprintf(buf, cap, "%s port %s", host, p);
}

void tp_gate_drop(struct tp_gate *g, const char *fmt, ...)
{
	if (g->logged >= TP_GATE_LOG_MAX) {
		g->quiet++;
		return;
	}
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	g->logged++;
	if (g->logged == TP_GATE_LOG_MAX)
		log_warn("%s (further dropped connections are only counted)", line);
	else
		log_warn("%s", line);
}

void tp_gate_done(struct tp_gate *g)
{
	if (g->quiet)
		log_warn("%u more connection%s dropped (not rdcp, wrong key, not allowed, or "
		         "too slow)", g->quiet, g->quiet == 1 ? " was" : "s were");
	g->quiet = 0;
}
