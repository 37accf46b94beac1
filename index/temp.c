/*
 * rdcp's temp file names: IDX_TEMP_PREFIX, 16 random hex digits, and 16 hex
 * digits of a check over them. Only a name whose check holds is rdcp's: a
 * scan leaves it out and a sync may remove it. A user's ".rdcp-tmp-notes"
 * fails the check and is an ordinary file, copied and kept like any other;
 * a name that passes by accident has a chance of 2^-64.
 */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "index/index.h"

#define TEMP_PREFIX_LEN (sizeof IDX_TEMP_PREFIX - 1)
#define TEMP_SEED       0x7264637074656d70ull   /* "rdcptemp" */

static uint64_t check_of(const char *hex16)
{
	return XXH3_64bits_withSeed(hex16, 16, TEMP_SEED);
}

void idx_temp_name(char *buf)
{
	uint64_t r;
	if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
		r = (uint64_t)(uintptr_t)buf ^ 0x5a5a5a5a5a5a5a5aull;   /* O_EXCL still guards */
	idx_temp_name_of(buf, r);
}

void idx_temp_name_of(char *buf, uint64_t r)
{
	char hex[17];
	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r);
	snprintf(buf, IDX_TEMP_NAME_LEN + 1, "%s%s%016llx", IDX_TEMP_PREFIX, hex,
	         (unsigned long long)check_of(hex));
}

int idx_is_temp_name(const char *name)
{
	if (strncmp(name, IDX_TEMP_PREFIX, TEMP_PREFIX_LEN) != 0 ||
	    strlen(name) != IDX_TEMP_NAME_LEN)
		return 0;
	const char *hex = name + TEMP_PREFIX_LEN;
	for (int i = 0; i < 32; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
			return 0;
	char want[17];
	snprintf(want, sizeof want, "%016llx", (unsigned long long)check_of(hex));
	return memcmp(hex + 16, want, 16) == 0;
}
