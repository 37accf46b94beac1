#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

const char *log_prog = "rdcp";

static unsigned n_errors;   /* log_err() lines; atomic: any thread says them */

unsigned log_errors(void)
{
	return __atomic_load_n(&n_errors, __ATOMIC_SEQ_CST);
}

static int line_shown;   /* log_line_shown(); atomic */

void log_line_shown(int shown)
{
	__atomic_store_n(&line_shown, shown, __ATOMIC_RELAXED);
}

static void vlog(const char *kind, const char *fmt, va_list ap)
{
	char msg[2048];
	/* a live line on the terminal: erased by this message, not glued to it */
	const char *erase = __atomic_load_n(&line_shown, __ATOMIC_RELAXED) ? "\r\033[K" : "";
	int n = snprintf(msg, sizeof msg, "%s%s: %s", erase, log_prog, kind);
	if (n < 0)
		return;
	if ((size_t)n < sizeof msg)
		vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
	size_t len = strnlen(msg, sizeof msg - 2);
	msg[len++] = '\n';
	/* one write() so lines from several threads do not interleave */
	ssize_t w = write(STDERR_FILENO, msg, len);
	(void)w;
}

void log_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("", fmt, ap);
	va_end(ap);
	__atomic_add_fetch(&n_errors, 1, __ATOMIC_SEQ_CST);
}

void log_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("warning: ", fmt, ap);
	va_end(ap);
}

char *log_bytes(char *buf, unsigned long long bytes)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	unsigned u = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, 16, "%llu B", bytes);
	else
		snprintf(buf, 16, "%.2f %s", v, unit[u]);
	return buf;
}

/* Escape n bytes of p into buf (room: cap, which stays >= 1); bytes out. */
static size_t escape(char *buf, size_t cap, const unsigned char *p, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 5 < cap; i++) {
		if (p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\')
			o += (size_t)snprintf(buf + o, cap - o, "\\%03o", p[i]);
		else
			buf[o++] = (char)p[i];
	}
	buf[o] = '\0';
	return o;
}

char *log_path(char *buf, size_t cap, const char *path)
{
	const unsigned char *p = (const unsigned char *)path;
	size_t len = strlen(path);
	if (len <= LOG_PATH_SHOWN || cap < 2 * LOG_PATH_END + 16) {
		escape(buf, cap, p, len);
		return buf;
	}
	/* too long to read: its start and its end, so the message stays one
	 * line and its reason is not cut off */
	size_t o = escape(buf, LOG_PATH_END * 4 + 1, p, LOG_PATH_END);
	o += (size_t)snprintf(buf + o, cap - o, "...(%zu bytes)...", len);
	escape(buf + o, cap - o, p + len - LOG_PATH_END, LOG_PATH_END);
	return buf;
}
