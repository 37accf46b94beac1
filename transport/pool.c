/*
 * The buffer pool of a session, shared by both backends: nbufs payload
 * buffers (page-aligned, from one anonymous mapping, so file data can be read
 * straight into them and RDMA can register them once) and their header slots.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/mem.h"
#include "transport/tp_int.h"

int tp_pool_count(const struct tp_opts *o, int streams, uint32_t msg_size)
{
	size_t pool = o->pool_size ? o->pool_size : TP_DEF_POOL_SIZE;
	size_t n = pool / msg_size;
	if (n < (size_t)streams * 2)
		n = (size_t)streams * 2;   /* at least two in flight per stream */
	if (n > 4096)
		n = 4096;
	return (int)n;
}

int tp_pool_init(struct tp_session *s, int nbufs, uint32_t msg_size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t stride = ((size_t)msg_size + page - 1) / page * page;
	s->mem_len = stride * (size_t)nbufs;
	/* anonymous mmap: page-aligned (O_DIRECT, registration) and zeroed */
	s->mem = mmap(NULL, s->mem_len, PROT_READ | PROT_WRITE,
	              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->mem != MAP_FAILED)
		mem_hint_huge(s->mem, s->mem_len);   /* written through at once */
	s->hdrs = calloc((size_t)nbufs, TP_HDR_LEN);
	s->bufs = calloc((size_t)nbufs, sizeof *s->bufs);
	if (s->mem == MAP_FAILED || !s->hdrs || !s->bufs) {
		if (s->mem == MAP_FAILED)
			s->mem = NULL;
		tp_pool_free(s);
		return -ENOMEM;
	}
	s->nbufs = nbufs;
	s->msg_size = msg_size;
	for (int i = 0; i < nbufs; i++) {
		s->bufs[i].m.data = s->mem + stride * (size_t)i;
		s->bufs[i].m.cap = msg_size;
		s->bufs[i].hdr = s->hdrs + (size_t)i * TP_HDR_LEN;
		s->bufs[i].next = -1;
	}
	return 0;
}

void tp_pool_free(struct tp_session *s)
{
	if (s->mem)
		munmap(s->mem, s->mem_len);
	free(s->hdrs);
	free(s->bufs);
	s->mem = NULL;
	s->hdrs = NULL;
	s->bufs = NULL;
}
