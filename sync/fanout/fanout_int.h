/* Private to sync/: a fan-out's state, shared by fanout.c (the rounds),
 * hosts.c (the hosts, the report), hub.c (the hub and the hosts' agents)
 * and live.c (--watch's loop). */
#ifndef RDCP_SYNC_FANOUT_INT_H
#define RDCP_SYNC_FANOUT_INT_H

#include <pthread.h>
#include <sys/types.h>

#include "sync/delta/delta.h"
#include "sync/fanout/fanout.h"
#include "sync/select/select.h"
#include "sync/sync_int.h"
#include "sync/wire/proto.h"

struct sync_watch;

/* A host's stage in a round, as its agent reaches it. */
enum { H_START, H_PLANNED, H_DATA, H_END };

struct fhost {
	const struct fan_target *t;
	struct fan *fan;
	char addr[256];            /* where its data connections go (IP literal) */
	pid_t pid;
	int reaped;                /* pid waited for: not ours to signal */
	struct ctl c;
	struct role r;             /* for sync_recv(): frames counted */
	pthread_mutex_t wmu;       /* writes to c once the agent reads only */
	pthread_t th;
	int stage, pos;            /* H_*; its place in the chain (-1: none) */
	uint32_t *plan, nplan;     /* what it lacks: manifest indices, increasing */
	struct chunk_map *maps;    /* per plan position, its CTL_CHUNKS (how NULL:
	                              the whole file) */
	struct ctl_data cd;        /* its CTL_DATA */
	int planned;               /* its plan and chunk maps came whole */
	int next;                  /* the host it forwards to (-1: last) */
	int relay_said, relay_rc;  /* its CTL_RELAY answer came: 0 or -errno */
	int th_ok;                 /* its agent thread runs (to be joined) */
	struct sync_result res;
	int got_result, dead;      /* a DONE or ERROR came; the channel died first */
	int bad_links;             /* its links to the hosts beside it that could
	                              not be made: a second round puts the hosts
	                              with the most last */
	int no_answer;             /* nothing came within the login limit: its
	                              remote shell is killed at once */
	int src_failed;            /* not run: the source failed first (said) */
	int code;                  /* exit code of this round (0: all well) */
	char why[256];             /* what went wrong, one phrase */
	/* --watch: kept from round to round */
	int out;                   /* not in this round: no agent, stage H_END */
	int live;                  /* its login stays up: its rdcp waits in
	                              rounds() (server.c) for the next ROUND */
	int down;                  /* its login was lost (said once): tried
	                              again with a backoff */
};

struct fan {
	const struct sync_opts *o;
	struct fhost *h;
	int n;
	int login_s;               /* a host's first word within this (0: wait) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct frame { uint8_t type; size_t n; uint8_t *p; } *fr;   /* the sender's,
	                             READY to MANIFEST_END, for every host */
	int nfr, fr_state;         /* 0 not yet, 1 all there, -1 the sender failed */
	struct idx_manifest m;     /* the sender's file list, decoded */
	int linked;                /* the chain is set: agents send CTL_RELAY */
	int feed_lost;             /* the sender's data session failed: the first
	                              host of the chain lost its feed */
	int *chain, nchain;
	struct ctl sc;             /* the hub's end of the sender's channel */
	pthread_mutex_t smu;       /* writes to sc (agents send PROGRESS) */
	int progress_host;         /* whose landed count the sender shows */
	char first_addr[256];      /* the chain's first host, for the sender */
	struct sync_watch *w;      /* --watch: held while a remote shell forks */
	int keep;                  /* --watch: a host that answered keeps its login */
};

/* fanout.c: one round of the sender, the hub and h[0..n-1] (those not
 * out; a live one is sent ROUND, the others are logged in); res: the
 * sender's. Then the hosts to run again (their feed was cut) into which,
 * their count returned. */
void fan_run_round(struct fan *f, struct fhost *h, int n, const char *const *paths,
                   int nsrc, struct sync_result *res);
int  fan_retry_set(struct fhost *h, int n, int feed_lost, int *which);
/* Close a host's login and wait for its remote shell (failed: 5 s, then
 * SIGKILL). */
void fan_host_close(struct fhost *h, int failed);
/* The interrupt thread under --watch: a signal while not busy ends the
 * watch w (exit 0); while busy it stops the round as in a run (exit 20).
 * fan_intr_busy() returns the signal that is ending the watch, or 0 (and
 * then sets busy). */
void fan_intr_watch(struct sync_watch *w);
int  fan_intr_busy(int busy);

/* hosts.c: the destinations from the operands (from first_dst on) or
 * --hosts, and SRC's paths[0..nsrc-1] (each malloc'd). 0 or an exit code
 * (said). */
int  fan_targets(struct sync_opts *o, int first_dst, const char **paths, int nsrc,
                 struct fan_target **t, int *nt);
/* Leave out a destination named twice (the same address and path, under
 * two names), and SRC itself (this machine, the same directory). */
void fan_dedupe(struct fan_target *t, int n, const char *src);
/* The per-host report: a line each on stdout with -v (quiet without, as
 * rsync: a cron job's mail is its errors); the failed ones on stderr,
 * with why, always (not a watched host that is down: said once). */
void fan_report_hosts(const struct sync_opts *o, const struct fan_target *t, int nt,
                      const struct fhost *last);
/* --json's "hosts": one object per destination. Returns a malloc'd text. */
char *fan_hosts_json(const struct fan_target *t, int nt, const struct fhost *last);

/* live.c: rdcp --sync --watch SRC/ host1:DST host2:DST ...: t[0..nt-1]
 * watched into from src. The exit code (0 when a signal ended it). */
int  fan_watch(struct sync_opts *o, struct fan_target *t, int nt, const char *src);

/* hub.c. The threads of a round: one agent per host (arg: its fhost),
 * the hub (arg: the fan). */
void *fan_agent_main(void *arg);
void *fan_hub_main(void *arg);
/* hub.c, pure (for tests): one frame of a host's plan into h: PLAN first
 * (h->plan NULL), then CHUNKS*, CHUNKS_END, checked against f->m as the
 * sender checks them. 0 for more, 1 when the plan is whole, -EPROTO with
 * *why (a phrase), -ENOMEM. */
int  fan_plan_take(const struct fan *f, struct fhost *h, uint8_t type, const uint8_t *b,
                   size_t n, const char **why);
/* The union of the plans of the hosts with pos >= 0 as the frames the
 * sender reads (PLAN, CHUNKS*, CHUNKS_END), each given to emit; *count:
 * the files. 0, or emit's error, or -ENOMEM. */
int  fan_union(const struct fan *f, int (*emit)(void *ctx, uint8_t type, const uint8_t *p,
                                                 size_t n),
               void *ctx, uint32_t *count);
/* hub.c, pure (for tests): the I/O timeout, in ms, of the hop from the
 * host at chain position pos (0: the first) of nchain to the next one,
 * under --timeout timeout_s: timeout * (2 nchain - 1 - pos) / (2 nchain),
 * at least 200 ms, so that each hop's is shorter than the one before it
 * (the sender's, to the first host, is the whole timeout): when a link
 * goes silent, the host right before it gives up first and re-links before
 * the ones before it do. Never under half the timeout: a next host that is
 * only slow (its disk) is not cut out much sooner than before. 0: no
 * timeout, or pos is the last. */
uint32_t fan_hop_ms(int timeout_s, int pos, int nchain);
/* h failed with code (the first failure stays) because of why. */
void fan_fail(struct fhost *h, int code, const char *why);

#endif
