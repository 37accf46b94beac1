/* Wire messages of the transport and the authentication handshake (which
 * also settles whether the streams are sealed, and with what: seal.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/crypto.h"
#include "common/wire.h"
#include "transport/tp_int.h"

_Static_assert(TP_HELLO_LEN == 48, "HELLO payload layout");
_Static_assert(TP_AUTH_LEN == 80, "AUTH payload layout");
_Static_assert(TP_AUTH_LEN <= TP_CTRL_MAX, "control messages fit a control slot");

void tp_hdr_put(uint8_t *p, const struct tp_hdr *h)
{
	put_u8(p, h->type);
	put_u8(p + 1, 0);
	put_u16(p + 2, 0);
	put_u32(p + 4, h->len);
	put_u64(p + 8, h->id);
	put_u64(p + 16, h->off);
	put_u32(p + 24, h->credits);
	put_u32(p + 28, 0);
}

int tp_hdr_get(const uint8_t *p, struct tp_hdr *h)
{
	h->type = p[0];
	h->len = get_u32(p + 4);
	h->id = get_u64(p + 8);
	h->off = get_u64(p + 16);
	h->credits = get_u32(p + 24);
	if (p[1] || get_u16(p + 2) || get_u32(p + 28))
		return -EPROTO;
	switch (h->type) {
	case TP_DATA:
		return 0;
	case TP_CREDIT: case TP_END: case TP_VERDICT: case TP_AUTH_FAIL:
		return h->len == 0 ? 0 : -EPROTO;
	case TP_HELLO:
		return h->len == TP_HELLO_LEN ? 0 : -EPROTO;
	case TP_AUTH:
		return h->len == TP_AUTH_LEN ? 0 : -EPROTO;
	case TP_AUTH_OK:
		return h->len == TP_AUTHOK_LEN ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}

void tp_hello_put(uint8_t *p, const struct tp_hello *h)
{
	put_u32(p, TP_PROTO_MAGIC);
	put_u16(p + 4, TP_PROTO_VER);
	put_u16(p + 6, h->flags);
	put_u32(p + 8, h->max_msg);
	put_u32(p + 12, h->credits);
	memcpy(p + 16, h->nonce, TP_NONCE_LEN);
}

int tp_hello_get(const uint8_t *p, size_t len, struct tp_hello *h)
{
	if (len != TP_HELLO_LEN || get_u32(p) != TP_PROTO_MAGIC)
		return -EPROTO;
	if (get_u16(p + 4) != TP_PROTO_VER)
		return -EPROTO;
	h->flags = get_u16(p + 6);
	if ((h->flags & ~(TP_HF_ENCRYPT | TP_HF_AESGCM)) ||
	    ((h->flags & TP_HF_AESGCM) && !(h->flags & TP_HF_ENCRYPT)))
		return -EPROTO;
	h->max_msg = get_u32(p + 8);
	h->credits = get_u32(p + 12);
	if (h->max_msg < 4096 || h->max_msg > TP_MAX_MSG_SIZE || h->credits > 4096)
		return -EPROTO;
	memcpy(h->nonce, p + 16, TP_NONCE_LEN);
	return 0;
}

void tp_auth_put(uint8_t *p, const struct tp_auth *a)
{
	put_u16(p, TP_PROTO_VER);
	put_u16(p + 2, a->streams);
	put_u16(p + 4, a->index);
	put_u16(p + 6, a->cipher);
	put_u64(p + 8, a->session);
	memcpy(p + 16, a->nonce, TP_NONCE_LEN);
	memcpy(p + 16 + TP_NONCE_LEN, a->mac, TP_MAC_LEN);
}

int tp_auth_get(const uint8_t *p, size_t len, struct tp_auth *a)
{
	if (len != TP_AUTH_LEN || get_u16(p) != TP_PROTO_VER || get_u16(p + 6) > TP_CIPHER_CHACHA)
		return -EPROTO;
	a->streams = get_u16(p + 2);
	a->index = get_u16(p + 4);
	a->cipher = get_u16(p + 6);
	a->hflags = 0;
	a->session = get_u64(p + 8);
	if (a->streams < 1 || a->streams > TP_MAX_STREAMS || a->index >= a->streams)
		return -EPROTO;
	memcpy(a->nonce, p + 16, TP_NONCE_LEN);
	memcpy(a->mac, p + 16 + TP_NONCE_LEN, TP_MAC_LEN);
	return 0;
}

/* MAC(key, label || n1 || n2 || session || streams || index [|| HELLO flags
 * || cipher]): the last two only when either is not 0, so a session that
 * does not encrypt has the MACs it always had. */
static void mac_of(const uint8_t key[TP_KEY_LEN], const char *label,
                   const uint8_t *n1, const uint8_t *n2, const struct tp_auth *a,
                   uint8_t out[TP_MAC_LEN])
{
	uint8_t m[32 + 2 * TP_NONCE_LEN + 16];
	size_t l = strlen(label) + 1;   /* with its NUL */
	if (l > 32)
		abort();   /* (the labels are ours: "rdcp v1 sender", "... receiver") */
	memcpy(m, label, l);
	memcpy(m + l, n1, TP_NONCE_LEN);
	memcpy(m + l + TP_NONCE_LEN, n2, TP_NONCE_LEN);
	uint8_t *ident = m + l + 2 * TP_NONCE_LEN;
	size_t n = 12;
	put_u64(ident, a->session);
	put_u16(ident + 8, a->streams);
	put_u16(ident + 10, a->index);
	if (a->hflags || a->cipher) {
		put_u16(ident + 12, a->hflags);
		put_u16(ident + 14, a->cipher);
		n = 16;
	}
	cr_hmac_sha256(key, TP_KEY_LEN, m, l + 2 * TP_NONCE_LEN + n, out);
}

void tp_auth_mac(const uint8_t key[TP_KEY_LEN], const uint8_t ns[TP_NONCE_LEN],
                 const struct tp_auth *a, uint8_t out[TP_MAC_LEN])
{
	mac_of(key, "rdcp v1 sender", ns, a->nonce, a, out);
}

void tp_authok_mac(const uint8_t key[TP_KEY_LEN], const uint8_t ns[TP_NONCE_LEN],
                   const struct tp_auth *a, uint8_t out[TP_MAC_LEN])
{
	mac_of(key, "rdcp v1 receiver", a->nonce, ns, a, out);
}

int tp_mac_verify(const uint8_t a[TP_MAC_LEN], const uint8_t b[TP_MAC_LEN])
{
	return cr_equal(a, b, TP_MAC_LEN) ? 0 : -EACCES;
}

void tp_random(void *buf, size_t len)
{
	if (cr_random(buf, len) < 0)
		abort();   /* no keys or nonces without randomness */
}

void tp_key_derive(const char *secret, size_t len, uint8_t key[TP_KEY_LEN])
{
	static const uint8_t ctx[] = "rdcp transport key v1";
	if (cr_blake2b(key, TP_KEY_LEN, secret, len, ctx, sizeof ctx - 1) < 0)
		abort();   /* (only without memory for OpenSSL's MAC state) */
}

void tp_hs_hello(struct tp_hello *h, uint32_t max_msg, uint32_t credits)
{
	h->max_msg = max_msg;
	h->credits = credits;
	h->flags = 0;
	tp_random(h->nonce, TP_NONCE_LEN);
}

int tp_hs_answer(const uint8_t key[TP_KEY_LEN], const uint8_t *hello, size_t len,
                 uint64_t session, int streams, int index, int encrypt,
                 struct tp_hello *h, struct tp_auth *a, uint8_t out[TP_AUTH_LEN])
{
	if (tp_hello_get(hello, len, h) < 0)
		return -EPROTO;
	a->session = session;
	a->streams = (uint16_t)streams;
	a->index = (uint16_t)index;
	a->hflags = h->flags;
	a->cipher = (uint16_t)(encrypt ? tp_seal_pick(h->flags) : TP_CIPHER_NONE);
	tp_random(a->nonce, TP_NONCE_LEN);
	tp_auth_mac(key, h->nonce, a, a->mac);
	tp_auth_put(out, a);
	return 0;
}

int tp_hs_check(const uint8_t key[TP_KEY_LEN], const struct tp_hello *h,
                const uint8_t *auth, size_t len, struct tp_auth *a,
                uint8_t okmac[TP_MAC_LEN])
{
	uint8_t want[TP_MAC_LEN];
	if (tp_auth_get(auth, len, a) < 0)
		return -EPROTO;
	a->hflags = h->flags;
	tp_auth_mac(key, h->nonce, a, want);
	if (tp_mac_verify(want, a->mac) < 0)
		return -EACCES;
	int rc = tp_hs_agree(h->flags, a->cipher);
	if (rc < 0)
		return rc;
	tp_authok_mac(key, h->nonce, a, okmac);
	return 0;
}

int tp_hs_confirm(const uint8_t key[TP_KEY_LEN], const struct tp_hello *h,
                  const struct tp_auth *a, const uint8_t *ok, size_t len)
{
	uint8_t want[TP_MAC_LEN];
	if (len != TP_AUTHOK_LEN)
		return -EPROTO;
	tp_authok_mac(key, h->nonce, a, want);
	return tp_mac_verify(want, ok);
}

int tp_hs_agree(uint16_t hflags, uint16_t cipher)
{
	if (!(hflags & TP_HF_ENCRYPT) != (cipher == TP_CIPHER_NONE))
		return -EPROTONOSUPPORT;
	if (cipher == TP_CIPHER_AESGCM && !(hflags & TP_HF_AESGCM))
		return -EPROTO;   /* not offered: the receiver's CPU lacks it */
	return 0;
}
