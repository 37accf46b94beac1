/* The remote shell launcher (common/rsh.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"

#define RSH_MAX_WORDS 56

int rsh_is_ip(const char *s)
{
	struct in6_addr a6;
	struct in_addr a4;
	return inet_pton(AF_INET, s, &a4) == 1 || inet_pton(AF_INET6, s, &a6) == 1;
}

const char *rsh_server_addr(void)
{
	static char addr[INET6_ADDRSTRLEN + 1];
	const char *sc = getenv("SSH_CONNECTION");
	if (!sc || sscanf(sc, "%*s %*s %46s", addr) != 1 || !rsh_is_ip(addr))
		return "";
	return addr;
}

pid_t rsh_spawn(const char *rsh, const char *host, const char *const *words, int *to,
                int *from, int connect_s)
{
	int tp[2], fp[2];
	char *argv[RSH_MAX_WORDS + 18], cto[48];
	int argc = 0;
	char *cmd = strdup(rsh ? rsh : "ssh");
	if (!cmd)
		return -1;
	/* the remote shell command is split on blanks, as rsync's -e is */
	for (char *t = strtok(cmd, " \t"); t && argc < RSH_MAX_WORDS; t = strtok(NULL, " \t"))
		argv[argc++] = t;
	const char *base = argc ? strrchr(argv[0], '/') : NULL;
	base = base ? base + 1 : argc ? argv[0] : "";
	if (connect_s > 0 && !strcmp(base, "ssh")) {
		snprintf(cto, sizeof cto, "ConnectTimeout=%d", connect_s);
		argv[argc++] = (char *)"-o";
		argv[argc++] = cto;
	}
	argv[argc++] = (char *)host;
	for (int i = 0; words[i] && argc < RSH_MAX_WORDS + 17; i++)
		argv[argc++] = (char *)words[i];
	argv[argc] = NULL;
	if (pipe2(tp, O_CLOEXEC) < 0) {
		free(cmd);
		return -1;
	}
	if (pipe2(fp, O_CLOEXEC) < 0) {
		close(tp[0]);
		close(tp[1]);
		free(cmd);
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		/* the signals a caller's thread waits for are blocked in it; the
		 * remote shell must take them (exec keeps the mask) */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(tp[0], STDIN_FILENO);
		dup2(fp[1], STDOUT_FILENO);
		execvp(argv[0], argv);
		log_err("cannot run the remote shell '%s': %s", argv[0], strerror(errno));
		_exit(RD_EXIT_START);
	}
	int e = errno;
	free(cmd);
	close(tp[0]);
	close(fp[1]);
	if (pid < 0) {
		close(tp[1]);
		close(fp[0]);
		errno = e;
		return -1;
	}
	*to = tp[1];
	*from = fp[0];
	return pid;
}

void rsh_widen_pipe(int fd)
{
	int want = 1 << 20, max = 0;
	if (fcntl(fd, F_SETPIPE_SZ, want) >= 0 || errno != EPERM)
		return;
	FILE *f = fopen("/proc/sys/fs/pipe-max-size", "re");
	if (f) {
		if (fscanf(f, "%d", &max) != 1)
			max = 0;
		fclose(f);
	}
	if (max > 65536 && max < want)
		(void)fcntl(fd, F_SETPIPE_SZ, max);
}

void rsh_narrow_pipe(int fd)
{
	if (fcntl(fd, F_GETPIPE_SZ) > 65536)
		(void)fcntl(fd, F_SETPIPE_SZ, 65536);
}

const char *rsh_bare_host(const char *host)
{
	const char *at = strrchr(host, '@');
	return at ? at + 1 : host;
}
