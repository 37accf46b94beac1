/* Private to the TCP backend: what tcp_conn.c (connect and the sender's
 * handshake) and tcp_listen.c (the listener and the receiver's handshakes)
 * use of tcp_data.c (framing, the session and its threads), and share. */
#ifndef RDCP_TCP_INT_H
#define RDCP_TCP_INT_H

#include <stdint.h>

#include "transport/tp_int.h"

/* Send one control message: header + len bytes of payload (may be 0). */
int  tp_tcp_send_ctl(int fd, uint8_t type, uint64_t id, uint64_t off,
                     const void *payload, uint32_t len);
/* Read one control message (header + at most TP_CTRL_MAX bytes of payload);
 * -EPROTO for DATA or an oversized one, -ETIMEDOUT on a receive timeout. */
int  tp_tcp_read_ctl(int fd, struct tp_hdr *h, uint8_t *payload);
/* Receive and send timeouts of fd (SO_RCVTIMEO, SO_SNDTIMEO) in ms; 0: none. */
void tp_tcp_set_timeout(int fd, int ms);
/* Every data connection: no Nagle delay, 4 MiB socket buffers (tcp_listen.c). */
void tp_tcp_tune(int fd);
/* Make the session for the authenticated connections fds[0..n), whose
 * handshakes settled hs[0..n), and start its threads. Streams whose AUTH
 * named a cipher are sealed (keys from o->key and hs). The session owns the
 * fds from then on, also on failure. */
int  tp_tcp_session(const int *fds, const struct tp_hs *hs, int n, int sender,
                    uint32_t msg_size, const struct tp_opts *o, struct tp_session **out);

#endif
