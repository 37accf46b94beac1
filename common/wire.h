/*
 * Big-endian field helpers for everything rdcp puts on the wire. Messages are
 * encoded and decoded field by field with these, never by copying structs.
 * The reader keeps a bound: a get past the end sets r->bad and returns 0, so
 * a decoder can read a whole record and check r->bad once.
 */
#ifndef RDCP_COMMON_WIRE_H
#define RDCP_COMMON_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void put_u8(uint8_t *p, uint8_t v) { p[0] = v; }
static inline void put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void put_u32(uint8_t *p, uint32_t v)
{
	put_u16(p, (uint16_t)(v >> 16));
	put_u16(p + 2, (uint16_t)v);
}
static inline void put_u64(uint8_t *p, uint64_t v)
{
	put_u32(p, (uint32_t)(v >> 32));
	put_u32(p + 4, (uint32_t)v);
}
static inline uint16_t get_u16(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}
static inline uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)get_u16(p) << 16 | get_u16(p + 2);
}
static inline uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

/* A bounded reader over peer input. */
struct wire_rd {
	const uint8_t *p, *end;
	int bad;
};

static inline const uint8_t *rd_take(struct wire_rd *r, size_t n)
{
	if (r->bad || (size_t)(r->end - r->p) < n) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *q = r->p;
	r->p += n;
	return q;
}
static inline uint8_t rd_u8(struct wire_rd *r)
{
	const uint8_t *q = rd_take(r, 1);
	return q ? q[0] : 0;
}
static inline uint16_t rd_u16(struct wire_rd *r)
{
	const uint8_t *q = rd_take(r, 2);
	return q ? get_u16(q) : 0;
}
static inline uint32_t rd_u32(struct wire_rd *r)
{
	const uint8_t *q = rd_take(r, 4);
	return q ? get_u32(q) : 0;
}
static inline uint64_t rd_u64(struct wire_rd *r)
{
	const uint8_t *q = rd_take(r, 8);
	return q ? get_u64(q) : 0;
}

/* A growing writer; on allocation failure w->bad is set and writes stop. */
struct wire_wr {
	uint8_t *buf;
	size_t len, cap;
	int bad;
};

uint8_t *wr_room(struct wire_wr *w, size_t n);

static inline void wr_u8(struct wire_wr *w, uint8_t v)
{
	uint8_t *p = wr_room(w, 1);
	if (p)
		put_u8(p, v);
}
static inline void wr_u16(struct wire_wr *w, uint16_t v)
{
	uint8_t *p = wr_room(w, 2);
	if (p)
		put_u16(p, v);
}
static inline void wr_u32(struct wire_wr *w, uint32_t v)
{
	uint8_t *p = wr_room(w, 4);
	if (p)
		put_u32(p, v);
}
static inline void wr_u64(struct wire_wr *w, uint64_t v)
{
	uint8_t *p = wr_room(w, 8);
	if (p)
		put_u64(p, v);
}
static inline void wr_bytes(struct wire_wr *w, const void *s, size_t n)
{
	uint8_t *p = wr_room(w, n);
	if (p && n)
		memcpy(p, s, n);
}

/* A string as u16 length + bytes (no NUL); NULL or longer than 65535: bad. */
static inline void wr_str16(struct wire_wr *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!s || n > UINT16_MAX) {
		w->bad = 1;
		return;
	}
	wr_u16(w, (uint16_t)n);
	wr_bytes(w, s, n);
}
/* Its reader: a malloc'd NUL-terminated copy; NULL (r->bad set) if the
 * bytes run past the end or hold a NUL. */
char *rd_str16(struct wire_rd *r);

#endif
