/*
 * The remote shell: `rsh host word...` with the child's stdin and stdout on
 * pipes, as rsync does it. One launcher for rdcp's server (sync/) and
 * rdpipe's segments (pipe/).
 */
#ifndef RDCP_COMMON_RSH_H
#define RDCP_COMMON_RSH_H

#include <sys/types.h>

/*
 * Run `rsh host words...` (rsh split on blanks as rsync's -e is; NULL means
 * "ssh"), words NULL-terminated. *to is a pipe to its stdin, *from one from
 * its stdout, both close-on-exec. connect_s > 0: when the shell is ssh, it
 * gets `-o ConnectTimeout=connect_s` (after the words of rsh, so a value
 * given there wins). Returns its pid, or -1 with errno. A shell that cannot
 * be executed exits RD_EXIT_START after one line on stderr.
 */
pid_t rsh_spawn(const char *rsh, const char *host, const char *const *words, int *to,
                int *from, int connect_s);

/*
 * On the far side of a remote shell: the address the client's ssh connected
 * to, the third field of $SSH_CONNECTION ("client port server port"), when
 * it is an IP literal; else "" (not started by ssh). The client may not know
 * it: it dialled an ssh_config alias, or through a ProxyJump. Static storage.
 */
const char *rsh_server_addr(void);
/*
 * Make the pipe fd (either end) hold 1 MiB, or the most the system lets a
 * user have (/proc/sys/fs/pipe-max-size) if that is less; on failure (not
 * a pipe, the user's pipe quota spent) it stays as it was. For the pipes
 * between rdcp and ssh that carry the bulk of the control channel: ssh
 * writes what it receives into a full 64 KiB pipe only as the reader
 * drains it, and keeps the rest in a buffer that it grows by copying the
 * whole of it, 32 KiB at a time. A 3 MB file list then took 0.9 s to pass
 * through a fresh connection here, 0.34 s with a 1 MiB pipe (docs/sync.md).
 */
void rsh_widen_pipe(int fd);
/* Back to the default 64 KiB once the bulk has passed: every widened pipe
 * counts against the user's pipe quota (/proc/sys/fs/pipe-user-pages-soft,
 * 64 MiB), past which the user's new pipes get 8 KiB. Harmless on any fd
 * (a pipe holding more than 64 KiB just stays as it is). */
void rsh_narrow_pipe(int fd);
/* A remote shell's host without "user@" (what data connections dial). */
const char *rsh_bare_host(const char *host);
/* 1 if s is an IPv4 or IPv6 address literal (no host name, no scope). */
int rsh_is_ip(const char *s);

#endif
