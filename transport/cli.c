/* Command-line options and reports the programs share (transport/transport.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>

#include "common/log.h"
#include "transport/tp_int.h"

/* KEY '-' with neither $RDCP_KEY nor --key-file: ask on the terminal, as
 * ssh asks for a password (stdin and stdout are the data). 0 with the line
 * in buf, or -1 when there is no terminal or nothing was typed. */
static int tty_key(char *buf, size_t cap)
{
	FILE *tty = fopen("/dev/tty", "r+");
	if (!tty)
		return -1;
	struct termios old, quiet;
	int echo_off = tcgetattr(fileno(tty), &old) == 0;
	if (echo_off) {
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(fileno(tty), TCSAFLUSH, &quiet);
	}
	fprintf(tty, "%s: key (KEY '-', no $RDCP_KEY): ", log_prog);
	fflush(tty);
	int rc = fgets(buf, (int)cap, tty) ? 0 : -1;
	if (echo_off)
		tcsetattr(fileno(tty), TCSAFLUSH, &old);
	fputc('\n', tty);
	fclose(tty);
	if (rc == 0)
		buf[strcspn(buf, "\r\n")] = '\0';
	return rc == 0 && *buf ? 0 : -1;
}

int tp_opt_key(const char *arg, const char *key_file, uint8_t key[TP_KEY_LEN])
{
	char buf[4096];
	const char *secret = arg;
	if (strcmp(arg, "-") == 0 && key_file) {
		FILE *f = fopen(key_file, "r");
		if (!f || !fgets(buf, sizeof buf, f)) {
			log_err("key file %s: %s", key_file, f ? "empty" : strerror(errno));
			if (f)
				fclose(f);
			return -EINVAL;
		}
		fclose(f);
		buf[strcspn(buf, "\r\n")] = '\0';
		secret = buf;
	} else if (strcmp(arg, "-") == 0) {
		secret = getenv("RDCP_KEY");
		if (!secret && tty_key(buf, sizeof buf) == 0)
			secret = buf;
		if (!secret) {
			log_err("KEY is '-' but neither --key-file nor $RDCP_KEY gives a key, and "
			        "there is no terminal to ask on (e.g. RDCP_KEY=s3cret %s ...)",
			        log_prog);
			return -EINVAL;
		}
	}
	if (!*secret) {
		log_err("the key is empty");
		return -EINVAL;
	}
	tp_key_derive(secret, strlen(secret), key);
	explicit_bzero(buf, sizeof buf);
	return 0;
}

int tp_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end || v > (~0ull >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

int tp_parse_kind(const char *s, enum tp_kind *k)
{
	if (strcmp(s, "rdma") == 0)
		*k = TP_RDMA;
	else if (strcmp(s, "tcp") == 0)
		*k = TP_TCP;
	else if (strcmp(s, "auto") == 0)
		*k = TP_AUTO;
	else
		return -EINVAL;
	return 0;
}

int tp_opt_streams(const char *arg, int *streams)
{
	char *end;
	long n = strtol(arg, &end, 10);
	if (*end || n < 1 || n > TP_MAX_STREAMS) {
		log_err("--streams: expected 1..%d, got '%s'", TP_MAX_STREAMS, arg);
		return -EINVAL;
	}
	*streams = (int)n;
	return 0;
}

int tp_opt_transport(const char *arg, enum tp_kind *kind)
{
	if (tp_parse_kind(arg, kind) < 0) {
		log_err("--transport: expected rdma, tcp or auto, got '%s'", arg);
		return -EINVAL;
	}
	return 0;
}

int tp_opt_size(const char *arg, int pool, struct tp_opts *o)
{
	uint64_t v;
	if (tp_parse_size(arg, &v) < 0 || v < 4096 ||
	    (!pool && v > TP_MAX_MSG_SIZE) || (pool && v > (4ull << 30))) {
		log_err("%s: bad size '%s' (4K..%s)", pool ? "--pool" : "--msg-size", arg,
		        pool ? "4G" : "16M");
		return -EINVAL;
	}
	if (pool)
		o->pool_size = v;
	else
		o->msg_size = (uint32_t)v;
	return 0;
}

int tp_opt_seconds(const char *name, const char *arg, int *ms)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < 0 || v > INT_MAX / 1000) {
		log_err("%s: expected whole seconds, 0..%d, got '%s'", name, INT_MAX / 1000, arg);
		return -EINVAL;
	}
	*ms = (int)v * 1000;
	return 0;
}

int tp_opt_port(const char *arg, unsigned min, uint16_t *port)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (*end || end == arg || errno || v < (long)min || v > 65535) {
		log_err("PORT: expected %u..65535, got '%s'", min, arg);
		return -EINVAL;
	}
	*port = (uint16_t)v;
	return 0;
}

int tp_cli_opt(int c, const char *arg, struct tp_opts *o, const char **key_file)
{
	int rc = 0;
	switch (c) {
	case TP_OPT_TRANSPORT: rc = tp_opt_transport(arg, &o->kind); break;
	case TP_OPT_KEYFILE: *key_file = arg; break;
	case TP_OPT_ENCRYPT: o->encrypt = 1; break;
	case TP_OPT_POOL:
	case TP_OPT_MSG: rc = tp_opt_size(arg, c == TP_OPT_POOL, o); break;
	case TP_OPT_TIMEOUT: rc = tp_opt_seconds("--timeout", arg, &o->io_timeout_ms); break;
	default: return 0;
	}
	return rc < 0 ? rc : 1;
}

void tp_report_failure(int rc, uint64_t bytes, const struct tp_session *s, int sender)
{
	char b[16];
	const char *peer = sender ? "receiver" : "sender";
	log_bytes(b, bytes);
	if (s && tp_peer_status(s) == EPIPE)
		log_err("the receiver stopped after %s: the reader of its output went away", b);
	else if (s && tp_peer_status(s))
		log_err("the receiver failed after %s: %s", b, strerror(tp_peer_status(s)));
	else if (rc == -ETIME && s)
		log_err("timed out after %s: nothing moved for %d s (--timeout): the %s is "
		        "stopped or stuck", b, s->io_timeout_ms / 1000, peer);
	else if (rc == -ETIME)
		log_err("timed out after %s: nothing moved for the I/O timeout: the %s is "
		        "stopped or stuck", b, peer);
	else if (rc == -ECONNRESET || rc == -EPIPE)
		log_err("lost the connection to the %s after %s: it went away", peer, b);
	else if (rc == -EPROTO)
		log_err("the %s sent something that is not the rdcp protocol (after %s)", peer, b);
	else
		log_err("transfer failed after %s: %s", b, strerror(-rc));
}

void tp_report_bw(const char *prog, uint64_t bytes, double seconds, const struct tp_session *s)
{
	char b[16], p[16];
	double mbs = seconds > 0 ? (double)bytes / seconds / 1e6 : 0;
	const char *cipher = tp_cipher_name(s);
	fprintf(stderr, "%s: %s in %.3f s: %.1f MB/s (%.2f Gbit/s) over %s, %d stream%s, "
	        "buffer pool %s%s%s\n", prog, log_bytes(b, bytes), seconds, mbs,
	        mbs * 8 / 1000, tp_kind_name(s), tp_streams(s), tp_streams(s) == 1 ? "" : "s",
	        log_bytes(p, tp_pool_bytes(s)), cipher ? ", encrypted with " : "",
	        cipher ? cipher : "");
}
