/*
 * Messages to stderr, prefixed with the program name ("rdcp: ...").
 * log_err() and log_warn() are thread-safe (one write per message).
 */
#ifndef RDCP_COMMON_LOG_H
#define RDCP_COMMON_LOG_H

#include <stddef.h>

extern const char *log_prog;   /* set by main(); default "rdcp" */

void log_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* How many log_err() lines this process has written so far: a caller that
 * must say why a run failed says so only if nothing has been said since it
 * took the count (one clear line, not two). */
unsigned log_errors(void);
/* A live line (a status line) is on the terminal (1) or not (0): while it
 * is, each message starts by erasing it, so it stands on a line of its own
 * (the live line's owner draws it again after). */
void log_line_shown(int shown);

/* Render bytes as "1.23 GiB" into buf (at least 16 bytes); returns buf. */
char *log_bytes(char *buf, unsigned long long bytes);
/* Render a path for a message: control characters and invalid bytes as \ooo.
 * A path longer than LOG_PATH_SHOWN bytes is shown as its first and last
 * LOG_PATH_END bytes around "...(N bytes)...", so a message stays readable
 * and ends with its reason. */
#define LOG_PATH_SHOWN 400
#define LOG_PATH_END   120
char *log_path(char *buf, size_t cap, const char *path);

#endif
