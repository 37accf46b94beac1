#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

const char *log_prog = "rdcp";

static void vlog(const char *kind, const char *fmt, va_list ap)
{
	char msg[2048];
	int n = snprintf(msg, sizeof msg, "%s: %s", log_prog, kind);
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

char *log_path(char *buf, size_t cap, const char *path)
{
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)path; *p && o + 5 < cap; p++) {
		if (*p < 0x20 || *p == 0x7f || *p == '\\')
			o += (size_t)snprintf(buf + o, cap - o, "\\%03o", *p);
		else
			buf[o++] = (char)*p;
	}
	buf[o] = '\0';
	return buf;
}
