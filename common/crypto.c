/* common/crypto.h over OpenSSL 3's libcrypto. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <string.h>
#include <sys/random.h>

#include "common/crypto.h"
#include "common/log.h"

/* Before any other call into libcrypto: no atexit() cleanup. A program
 * may exit while a thread of it still ends (rdpipe's segment returns from
 * main as its hop threads, whose last act was to say so, go through their
 * own exit), and OpenSSL 3's atexit OPENSSL_cleanup() then frees the
 * thread-local state those threads free too: glibc's "double free or
 * corruption", seen once in ten runs in the soft-RoCE VM, and ASan's
 * "attempting double-free" in that segment's hop thread. The process's
 * memory goes with it anyway. This sets up no provider (that comes with
 * the first fetch), so a run that moves no data still pays nothing. */
__attribute__((constructor)) static void cr_no_atexit(void)
{
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

/* From the kernel's CSPRNG (getrandom(2), as libsodium's randombytes and
 * OpenSSL's own seeding read it), not OpenSSL's DRBG: the first call into
 * libcrypto sets up its providers, 12 million instructions (3-4 ms of a
 * core), which a run that moves no data (a no-op) then never pays. */
int cr_random(void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			log_err("cannot read random bytes (getrandom): %s", strerror(errno));
			return -EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void cr_hmac_sha256(const uint8_t *key, size_t klen, const void *msg, size_t len,
                    uint8_t out[32])
{
	unsigned olen = 32;
	if (!HMAC(EVP_sha256(), key, (int)klen, msg, len, out, &olen))
		abort();   /* only without memory for a digest context */
}

/* The BLAKE2b MAC, fetched once; a context per thread (freed with it),
 * which keeps the last key and size: a run MACs with one key (a tag per
 * small file, on both ends), and setting them anew was half of each MAC. */
struct b2_tls {
	EVP_MAC_CTX *c;
	size_t klen, outlen;   /* what c was last set up with (klen 0: nothing) */
	uint8_t key[64];
};
static EVP_MAC *b2_mac;
static pthread_key_t b2_key;
static pthread_once_t b2_once = PTHREAD_ONCE_INIT;

static void b2_tls_free(void *p)
{
	struct b2_tls *t = p;
	EVP_MAC_CTX_free(t->c);
	OPENSSL_cleanse(t, sizeof *t);
	free(t);
}

static void b2_make(void)
{
	b2_mac = EVP_MAC_fetch(NULL, "BLAKE2BMAC", NULL);
	if (pthread_key_create(&b2_key, b2_tls_free) != 0)
		b2_mac = NULL;
}

int cr_blake2b(uint8_t *out, size_t outlen, const void *msg, size_t len,
               const uint8_t *key, size_t klen)
{
	pthread_once(&b2_once, b2_make);
	if (!b2_mac) {
		log_err("OpenSSL offers no BLAKE2b MAC (BLAKE2BMAC): is its default "
		        "provider disabled (a FIPS-only openssl.cnf)?");
		return -ENOSYS;
	}
	struct b2_tls *t = pthread_getspecific(b2_key);
	if (!t) {
		if (!(t = calloc(1, sizeof *t)) || !(t->c = EVP_MAC_CTX_new(b2_mac))) {
			free(t);
			return -ENOMEM;
		}
		if (pthread_setspecific(b2_key, t) != 0) {
			b2_tls_free(t);
			return -ENOMEM;
		}
	}
	OSSL_PARAM p[] = { OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &outlen),
	                   OSSL_PARAM_construct_end() };
	/* the same key and size as last time: the context has them */
	int same = klen && klen == t->klen && outlen == t->outlen && klen <= sizeof t->key &&
	           CRYPTO_memcmp(key, t->key, klen) == 0;
	size_t got = 0;
	if ((same ? EVP_MAC_init(t->c, NULL, 0, NULL) : EVP_MAC_init(t->c, key, klen, p)) != 1) {
		t->klen = 0;
		return -ENOMEM;
	}
	if (!same && klen <= sizeof t->key) {
		memcpy(t->key, key, klen);
		t->klen = klen;
		t->outlen = outlen;
	}
	if (EVP_MAC_update(t->c, msg, len) != 1 || EVP_MAC_final(t->c, out, &got, outlen) != 1 ||
	    got != outlen)
		return -ENOMEM;
	return 0;
}

int cr_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

void cr_wipe(void *p, size_t n)
{
	OPENSSL_cleanse(p, n);
}
