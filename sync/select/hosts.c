/*
 * --hosts=FILE:DST: the host list of a fan-out (sync/fanout/hosts.c) and of
 * a ranked run (sync/ranks.c). One host a line, '[user@]host', then
 * optionally the address its data connections use; '#' and ';' comments
 * and blank lines skipped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "sync/select/select.h"

int sync_hosts_read(struct sync_opts *o, sync_host_fn *each, void *ctx)
{
	const char *colon = strrchr(o->hosts, ':');
	if (!colon || colon == o->hosts || !colon[1]) {
		log_err("--hosts=FILE:DST: expected a host list file and the destination path "
		        "on every host, e.g. --hosts=workers.txt:/data/models (got '%s')", o->hosts);
		return RD_EXIT_USAGE;
	}
	char *file = strndup(o->hosts, (size_t)(colon - o->hosts)), *buf = NULL;
	size_t len;
	if (!file || sync_read_list(file, o, &buf, &len) < 0) {
		log_err("--hosts: cannot read %s: %s", file ? file : "?", strerror(errno));
		free(file);
		return RD_EXIT_SELECT;
	}
	char *p = buf, *line;
	int lineno = 0, code = 0, n = 0;
	while (!code && (line = sync_next_line(&p, buf + len, &lineno))) {
		char host[256], addr[256], extra[2];
		int got = sscanf(line, " %255s %255s %1s", host, addr, extra);
		if (got < 1 || got > 2 || strchr(host, ':') || strchr(host, '/')) {
			log_err("--hosts: %s line %d: expected '[user@]host [data-address]', got '%s'",
			        file, lineno, line);
			code = RD_EXIT_USAGE;
		} else if (each(ctx, host, colon + 1, got == 2 ? addr : NULL) < 0) {
			code = RD_EXIT_FILEIO;
		} else {
			n++;
		}
	}
	if (!code && !n) {
		log_err("--hosts: %s names no host", file);
		code = RD_EXIT_USAGE;
	}
	free(buf);
	free(file);
	return code;
}
