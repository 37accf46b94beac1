/* Advice for large arrays that are written through soon after they are
 * allocated (a manifest's entries, the receiver's per-file state). */
#ifndef RDCP_COMMON_MEM_H
#define RDCP_COMMON_MEM_H

#include <stddef.h>

/* Ask for transparent huge pages under [p, p + len) where the kernel has
 * them in "madvise" mode; below MEM_HUGE_MIN bytes, or where it cannot,
 * nothing happens. Each first touch of a 4 KiB page is a fault, and in a
 * paravirtualized guest one cost 19 us: 34,700 of them were 0.65 s of CPU
 * in a 50,000-file copy. For a block allocated once (arrays that grow:
 * mem_grow()). p may come from malloc: the advice goes out to whole pages,
 * which for a block malloc mapped on its own is the mapping, kept one
 * mapping (advice on part of it would split it). A block from the heap or
 * an arena (after a free, malloc maps blocks of up to 32 MiB there) gets
 * the advice with its neighbours: a flag, no data changes. The cost is
 * memory: a 2 MiB page partly used is resident whole (up to 2 MiB more
 * per array, and per pool a transfer touches). */
#define MEM_HUGE_MIN (2u << 20)
void mem_hint_huge(void *p, size_t len);

/* realloc(p, len) for an array that is about to be written through,
 * advised as mem_hint_huge(). Up to MEM_COPY_MAX, a new block aligned to
 * and sized in 2 MiB, what p held copied and p freed: every 2 MiB of it
 * can be a huge page (a block malloc maps by itself starts 16 bytes past
 * a page, and blocks under 32 MiB may come from the heap), and a copy of
 * a few MB costs less than the page faults it saves (a 50,000-file copy:
 * 8,700-9,000 faults with realloc() alone, 6,200-7,200 so). Past it,
 * realloc(): glibc grows a block that large with mremap(), copying
 * nothing, so a manifest of a million entries (128 MB) is never held
 * twice. NULL (p untouched)
 * without memory. The result is free()d as any block. */
#define MEM_COPY_MAX (32u << 20)
void *mem_grow(void *p, size_t len);

#endif
