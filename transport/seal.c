/*
 * Sealing: authenticated encryption of the messages of a TCP session
 * (tp_opts.encrypt). Each direction of each stream has its own key, derived
 * from the session key and both nonces of that connection's handshake, so a
 * recorded session opens under no other. Every message is sealed with the
 * next nonce of its direction, stream index || sequence number, and its
 * header is authenticated with it: a message replayed, dropped, reordered,
 * moved to another stream or another session, or changed in any bit, fails
 * its tag. Pure functions, no I/O; the wire format is in docs/protocol.md.
 *
 * AES-256-GCM where both CPUs have AES-NI (libsodium's only AES-GCM), else
 * ChaCha20-Poly1305 (IETF, 12-byte nonce). Both have 16-byte tags.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "transport/tp_int.h"

_Static_assert(crypto_aead_aes256gcm_KEYBYTES == TP_KEY_LEN, "AES key size");
_Static_assert(crypto_aead_chacha20poly1305_ietf_KEYBYTES == TP_KEY_LEN, "ChaCha key size");
_Static_assert(crypto_aead_aes256gcm_NPUBBYTES == TP_SEAL_NONCE_LEN, "AES nonce size");
_Static_assert(crypto_aead_chacha20poly1305_ietf_NPUBBYTES == TP_SEAL_NONCE_LEN,
               "ChaCha nonce size");
_Static_assert(crypto_aead_aes256gcm_ABYTES == TP_TAG_LEN, "AES tag size");
_Static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == TP_TAG_LEN, "ChaCha tag size");

/* AES-256-GCM needs AES-NI and PCLMUL, which sodium_init() detects. */
static int have_aes(void)
{
	return sodium_init() >= 0 && crypto_aead_aes256gcm_is_available();
}

uint16_t tp_seal_offer(int encrypt)
{
	if (!encrypt)
		return 0;
	return (uint16_t)(TP_HF_ENCRYPT | (have_aes() ? TP_HF_AESGCM : 0));
}

int tp_seal_pick(uint16_t hflags)
{
	return (hflags & TP_HF_AESGCM) && have_aes() ? TP_CIPHER_AESGCM : TP_CIPHER_CHACHA;
}

const char *tp_cipher_str(int cipher)
{
	switch (cipher) {
	case TP_CIPHER_AESGCM: return "AES-256-GCM";
	case TP_CIPHER_CHACHA: return "ChaCha20-Poly1305";
	default: return NULL;
	}
}

/* key = HMAC-SHA-256(session key, "rdcp v1 seal\0" || dir || cipher ||
 *       HELLO.nonce || AUTH.nonce || session || streams || index) */
void tp_seal_init(struct tp_seal *k, const uint8_t key[TP_KEY_LEN],
                  const struct tp_hs *hs, enum tp_dir dir)
{
	static const char label[] = "rdcp v1 seal";
	crypto_auth_hmacsha256_state st;
	uint8_t ctx[3], ident[12], dk[TP_KEY_LEN];
	put_u8(ctx, (uint8_t)dir);
	put_u16(ctx + 1, hs->a.cipher);
	put_u64(ident, hs->a.session);
	put_u16(ident + 8, hs->a.streams);
	put_u16(ident + 10, hs->a.index);
	crypto_auth_hmacsha256_init(&st, key, TP_KEY_LEN);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof label);
	crypto_auth_hmacsha256_update(&st, ctx, sizeof ctx);
	crypto_auth_hmacsha256_update(&st, hs->h.nonce, TP_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, hs->a.nonce, TP_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, ident, sizeof ident);
	crypto_auth_hmacsha256_final(&st, dk);
	memset(k, 0, sizeof *k);
	k->cipher = hs->a.cipher;
	k->stream = hs->a.index;
	k->seq = 0;
	if (k->cipher == TP_CIPHER_AESGCM)
		crypto_aead_aes256gcm_beforenm(&k->k.aes, dk);
	else
		memcpy(k->k.raw, dk, sizeof dk);
	sodium_memzero(dk, sizeof dk);
	sodium_memzero(&st, sizeof st);
}

static void nonce_of(const struct tp_seal *k, uint8_t n[TP_SEAL_NONCE_LEN])
{
	put_u32(n, k->stream);
	put_u64(n + 4, k->seq);
}

void tp_seal(struct tp_seal *k, const uint8_t *hdr, uint8_t *p, uint32_t len,
             uint8_t tag[TP_TAG_LEN])
{
	uint8_t n[TP_SEAL_NONCE_LEN], none;
	if (!p)
		p = &none;   /* END, VERDICT: libsodium's pointers are nonnull */
	nonce_of(k, n);
	k->seq++;
	if (k->cipher == TP_CIPHER_AESGCM)
		crypto_aead_aes256gcm_encrypt_detached_afternm(p, tag, NULL, p, len, hdr,
		                                                TP_HDR_LEN, NULL, n, &k->k.aes);
	else
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(p, tag, NULL, p, len, hdr,
		                                                   TP_HDR_LEN, NULL, n, k->k.raw);
}

int tp_unseal(struct tp_seal *k, const uint8_t *hdr, uint8_t *p, uint32_t len,
              const uint8_t tag[TP_TAG_LEN])
{
	uint8_t n[TP_SEAL_NONCE_LEN], none;
	int rc;
	if (!p)
		p = &none;
	nonce_of(k, n);
	if (k->cipher == TP_CIPHER_AESGCM)
		rc = crypto_aead_aes256gcm_decrypt_detached_afternm(p, NULL, p, len, tag, hdr,
		                                                    TP_HDR_LEN, n, &k->k.aes);
	else
		rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(p, NULL, p, len, tag, hdr,
		                                                        TP_HDR_LEN, n, k->k.raw);
	if (rc != 0)
		return -EBADMSG;
	k->seq++;
	return 0;
}

void tp_seal_wipe(struct tp_seal *k)
{
	sodium_memzero(k, sizeof *k);
}

void tp_seal_mismatch(const char *peer, int we)
{
	if (we)
		log_err("%s does not encrypt, this side does (--encrypt): give --encrypt to "
		        "both sides or to neither", peer);
	else
		log_err("%s encrypts (--encrypt), this side does not: give --encrypt to "
		        "both sides or to neither", peer);
}
