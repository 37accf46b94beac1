/* Fuzz target: what a transport peer sends before and around the data:
 * message headers, HELLO, AUTH (checked against a fixed key and nonce),
 * AUTH_OK, and a sealed message of an encrypted session (header, payload,
 * tag: never opens). Input: a header, then a payload. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/tp_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t key[TP_KEY_LEN], buf[1 << 17];
	static struct tp_seal seal[2];
	static int init;
	if (!init) {
		tp_key_derive("fuzz", 4, key);
		struct tp_hs hs = { .a = { .streams = 1, .cipher = TP_CIPHER_CHACHA } };
		tp_seal_init(&seal[0], key, &hs, TP_DIR_S2R);
		hs.a.cipher = (tp_seal_offer(1) & TP_HF_AESGCM) ? TP_CIPHER_AESGCM
		                                                   : TP_CIPHER_CHACHA;
		tp_seal_init(&seal[1], key, &hs, TP_DIR_S2R);
		init = 1;
	}
	if (size < TP_HDR_LEN)
		return 0;
	struct tp_hdr h;
	int rc = tp_hdr_get(data, &h);
	if (rc != 0 && rc != -EPROTO)
		abort();
	const uint8_t *p = data + TP_HDR_LEN;
	size_t len = size - TP_HDR_LEN;
	struct tp_hello hello = { .max_msg = 1 << 20, .credits = 8 }, g;
	memset(hello.nonce, 7, sizeof hello.nonce);
	struct tp_auth a;
	uint8_t ok[TP_MAC_LEN];
	rc = tp_hello_get(p, len, &g);
	if (rc == 0 && (g.max_msg < 4096 || g.max_msg > TP_MAX_MSG_SIZE))
		abort();
	rc = tp_hs_check(key, &hello, p, len, &a, ok);
	if (rc == 0)
		abort();   /* forging a MAC by fuzzing: impossible */
	if (rc != -EACCES && rc != -EPROTO)
		abort();
	rc = tp_hs_confirm(key, &hello, &a, p, len);
	if (rc == 0)
		abort();
	/* payload || tag as a sealed message: forging a tag by fuzzing: impossible */
	if (len >= TP_TAG_LEN && len - TP_TAG_LEN <= sizeof buf) {
		uint32_t n = (uint32_t)(len - TP_TAG_LEN);
		for (int c = 0; c < 2; c++) {
			memcpy(buf, p, n);
			if (tp_unseal(&seal[c], data, buf, n, p + n) != -EBADMSG)
				abort();
		}
	}
	return 0;
}
