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
 * AES-256-GCM where both CPUs have AES instructions, else ChaCha20-Poly1305
 * (IETF, 12-byte nonce); both 16-byte tags. OpenSSL's libcrypto (EVP) does
 * the work: its AES-GCM uses VAES and AVX-512 where the CPU has them, several
 * times libsodium's AES-NI code. The wire format did not change with it.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <openssl/evp.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "common/crypto.h"
#include "common/log.h"
#include "common/wire.h"
#include "transport/tp_int.h"

/* AES-GCM at speed needs the CPU's AES and carry-less multiply; without
 * them OpenSSL's constant-time AES is slower than ChaCha20. */
static int have_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#elif defined(__aarch64__) && defined(HWCAP_AES) && defined(HWCAP_PMULL)
	unsigned long hw = getauxval(AT_HWCAP);
	return (hw & HWCAP_AES) && (hw & HWCAP_PMULL);
#else
	return 0;
#endif
}

/* One cipher context per thread, made on first use and freed when the
 * thread ends: a seal is used by one thread at a time, and its key is set
 * with each message's nonce (the key schedule costs well under a
 * microsecond, a message's bytes hundreds). */
static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *c)
{
	EVP_CIPHER_CTX_free(c);
}

static void ctx_key_make(void)
{
	if (pthread_key_create(&ctx_key, ctx_free) != 0)
		abort();   /* no thread keys left at start: nothing to go on with */
}

static EVP_CIPHER_CTX *thread_ctx(void)
{
	pthread_once(&ctx_once, ctx_key_make);
	EVP_CIPHER_CTX *c = pthread_getspecific(ctx_key);
	if (!c) {
		c = EVP_CIPHER_CTX_new();
		if (!c || pthread_setspecific(ctx_key, c) != 0)
			abort();   /* a few hundred bytes: out of memory */
	}
	return c;
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
	uint8_t m[sizeof label + 3 + 2 * TP_NONCE_LEN + 12];
	uint8_t *p = m;
	memcpy(p, label, sizeof label);
	p += sizeof label;
	put_u8(p, (uint8_t)dir);
	put_u16(p + 1, hs->a.cipher);
	p += 3;
	memcpy(p, hs->h.nonce, TP_NONCE_LEN);
	memcpy(p + TP_NONCE_LEN, hs->a.nonce, TP_NONCE_LEN);
	p += 2 * TP_NONCE_LEN;
	put_u64(p, hs->a.session);
	put_u16(p + 8, hs->a.streams);
	put_u16(p + 10, hs->a.index);
	memset(k, 0, sizeof *k);
	cr_hmac_sha256(key, TP_KEY_LEN, m, sizeof m, k->key);
	cr_wipe(m, sizeof m);
	k->cipher = hs->a.cipher;
	k->stream = hs->a.index;
	k->seq = 0;
}

/* Encrypt (enc 1) or decrypt and check (enc 0) p in place, as message
 * number k->seq of k's direction. 0, or -EBADMSG. */
static int crypt_msg(const struct tp_seal *k, int enc, const uint8_t *hdr, uint8_t *p,
                     uint32_t len, uint8_t tag[TP_TAG_LEN])
{
	EVP_CIPHER_CTX *c = thread_ctx();
	const EVP_CIPHER *ci = k->cipher == TP_CIPHER_AESGCM ? EVP_aes_256_gcm()
	                       : EVP_chacha20_poly1305();
	uint8_t n[TP_SEAL_NONCE_LEN];
	int out = 0, ok;
	put_u32(n, k->stream);
	put_u64(n + 4, k->seq);
	/* 12-byte nonces are both ciphers' default length */
	ok = EVP_CipherInit_ex(c, ci, NULL, k->key, n, enc) == 1 &&
	     EVP_CipherUpdate(c, NULL, &out, hdr, TP_HDR_LEN) == 1 &&
	     (!enc || len == 0 || EVP_CipherUpdate(c, p, &out, p, (int)len) == 1) &&
	     (enc || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, TP_TAG_LEN, tag) == 1) &&
	     (enc || len == 0 || EVP_CipherUpdate(c, p, &out, p, (int)len) == 1) &&
	     EVP_CipherFinal_ex(c, p + len, &out) == 1 &&
	     (!enc || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, TP_TAG_LEN, tag) == 1);
	EVP_CIPHER_CTX_reset(c);   /* no expanded key left behind in the thread's context */
	return ok ? 0 : -EBADMSG;
}

void tp_seal(struct tp_seal *k, const uint8_t *hdr, uint8_t *p, uint32_t len,
             uint8_t tag[TP_TAG_LEN])
{
	uint8_t none;
	if (crypt_msg(k, 1, hdr, p ? p : &none, len, tag) < 0)
		abort();   /* encrypting fails only without memory for OpenSSL's state */
	k->seq++;
}

int tp_unseal(struct tp_seal *k, const uint8_t *hdr, uint8_t *p, uint32_t len,
              const uint8_t tag[TP_TAG_LEN])
{
	uint8_t none, t[TP_TAG_LEN];
	memcpy(t, tag, TP_TAG_LEN);   /* (the ctrl call takes it non-const) */
	if (crypt_msg(k, 0, hdr, p ? p : &none, len, t) < 0)
		return -EBADMSG;
	k->seq++;
	return 0;
}

void tp_seal_wipe(struct tp_seal *k)
{
	cr_wipe(k, sizeof *k);
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
