/*
 * libarchive is loaded when the first archive of small files is made or
 * read, not when rdcp starts. It brings ten libraries of its own (ICU,
 * libxml2, libstdc++, nettle and five compressors) that rdcp never calls,
 * and loading them cost every rdcp process 6.5 ms with the page cache
 * warm and 16 ms with it cold (a program linked with rdcp's libraries
 * against the same without libarchive; a sync runs two processes, and a
 * nightly one starts cold). A run that moves no small file, rdsend and
 * rdrecv never load it. systemd loads its optional libraries the same way.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "sync/archive/larchive.h"

#ifndef RDCP_LIBARCHIVE
#define RDCP_LIBARCHIVE "libarchive.so.13"   /* the Makefile reads the soname */
#endif

#define LARCHIVE_DEFINE(f) __typeof__(f) *sym_##f;
LARCHIVE_SYMS(LARCHIVE_DEFINE)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;   /* 0 or -ENOSYS, set once */

static void load(void)
{
	void *h = dlopen(RDCP_LIBARCHIVE, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		log_err("cannot load %s, which small files travel with: %s", RDCP_LIBARCHIVE,
		        dlerror());
		loaded = -ENOSYS;
		return;
	}
	const char *missing = NULL;
	void *p;
	/* (dlsym's object pointer, as the function pointer it is: POSIX) */
#define LARCHIVE_RESOLVE(f) \
	if (!missing && !(p = dlsym(h, #f))) \
		missing = #f; \
	memcpy(&sym_##f, &p, sizeof p);
	LARCHIVE_SYMS(LARCHIVE_RESOLVE)
	if (missing) {
		log_err("%s has no %s: small files cannot travel", RDCP_LIBARCHIVE, missing);
		dlclose(h);
		loaded = -ENOSYS;
	}
	/* else kept loaded to the end of the process */
}

int larchive_load(void)
{
	pthread_once(&once, load);
	return loaded;
}
