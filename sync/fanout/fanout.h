/*
 * sync/fanout/: one SRC onto many hosts, the client's side (fanout.c the
 * run, hub.c the chain's plan and rounds). A fan-out host's own part, the
 * relay that forwards what it receives, is the receiving room's
 * (recv/relay.c). The client includes this.
 */
#ifndef RDCP_SYNC_FANOUT_H
#define RDCP_SYNC_FANOUT_H

#include "sync/sync_int.h"

/* fanout.c: rdcp SRC... host1:DST host2:DST ... (DSTs from operand
 * first_dst on, srcs[first_dst..nsrc-1] then dst), or --hosts=FILE:DST
 * (every operand a SRC). The exit code. */
struct fan_target {
	char *label;       /* host:path, for messages */
	char *host, *path; /* [user@]host; the path there */
	char *data_addr;   /* --hosts' second column, or NULL */
	char ip[64];       /* what the name (or data_addr) resolves to, or "" */
	int skip;          /* 1: named twice; 2: SRC itself */
};
int  sync_fanout(struct sync_opts *o, int first_dst);

#endif
