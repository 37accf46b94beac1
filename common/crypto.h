/* The few cryptographic primitives rdcp uses outside the sealing of data
 * messages (transport/seal.c), from OpenSSL's libcrypto: HMAC-SHA-256, keyed
 * BLAKE2b, a constant-time compare, wiping; random bytes come from the
 * kernel (getrandom). One library for everything; these wrappers only fix
 * the calling convention. */
#ifndef RDCP_COMMON_CRYPTO_H
#define RDCP_COMMON_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

/* len random bytes from the kernel's CSPRNG into buf. 0 or -EIO (said). */
int  cr_random(void *buf, size_t len);
/* out = HMAC-SHA-256(key, msg), 32 bytes. */
void cr_hmac_sha256(const uint8_t *key, size_t klen, const void *msg, size_t len,
                    uint8_t out[32]);
/* out = BLAKE2b(msg) of outlen (1..64) bytes keyed with key (1..64 bytes),
 * as RFC 7693 (and libsodium's crypto_generichash) defines it. 0, -ENOMEM,
 * or -ENOSYS when OpenSSL's configuration offers no BLAKE2b (said).
 * Thread-safe; the MAC's context is made once per thread. */
int  cr_blake2b(uint8_t *out, size_t outlen, const void *msg, size_t len,
                const uint8_t *key, size_t klen);
/* 1 when a and b (n bytes each) are equal, in time independent of where
 * they differ. */
int  cr_equal(const void *a, const void *b, size_t n);
/* Zero n bytes at p where the compiler cannot drop it. */
void cr_wipe(void *p, size_t n);

#endif
