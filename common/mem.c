#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/mem.h"

void mem_hint_huge(void *p, size_t len)
{
	if (!p || len < MEM_HUGE_MIN)
		return;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	/* outward to whole pages: a block that malloc mapped on its own is
	 * then advised whole, one mapping still (advice on part of it would
	 * split it) */
	uintptr_t a = (uintptr_t)p & ~(page - 1);
	uintptr_t b = ((uintptr_t)p + len + page - 1) & ~(page - 1);
	if (b > a)
		(void)madvise((void *)a, b - a, MADV_HUGEPAGE);   /* advice only */
}

void *mem_grow(void *p, size_t len)
{
	if (len < MEM_HUGE_MIN || len > MEM_COPY_MAX) {
		void *n = realloc(p, len);
		if (n)
			mem_hint_huge(n, len);
		return n;
	}
	size_t whole = (len + MEM_HUGE_MIN - 1) & ~(size_t)(MEM_HUGE_MIN - 1);
	void *n = aligned_alloc(MEM_HUGE_MIN, whole);
	if (!n)
		return NULL;
	(void)madvise(n, whole, MADV_HUGEPAGE);   /* advice only */
	if (p) {
		size_t had = malloc_usable_size(p);
		memcpy(n, p, had < len ? had : len);
	}
	free(p);
	return n;
}
