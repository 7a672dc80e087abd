/* xdr.h: XDR (RFC 4506) primitives on bounded cursors.
 *
 * Model: a decoder is a cursor over bytes that came from the network; every read checks bounds and
 * on any violation (short buffer, a length above its limit, a bool that is neither 0 nor 1) the
 * cursor becomes failed and every later read returns zeros/NULL. A codec reads a whole structure
 * and checks xdr_dec_ok() once at the end: a sticky error keeps codecs short without letting a bad
 * length through, because no pointer from a failed cursor is ever used (the NULL it returns is
 * checked by xdr_dec_ok first). Variable-length data is returned as a pointer into the buffer
 * being decoded (zero copy); it lives as long as that buffer.
 *
 * An encoder writes into a caller-owned fixed-capacity buffer; running out of room marks it
 * failed rather than writing past the end. Callers size buffers from the protocol's maxima.
 * All integers are big-endian, all items padded to 4 bytes (RFC 4506 section 3). */
#ifndef SHALE_XDR_H
#define SHALE_XDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define XDR_UNIT 4u
/* Bytes an opaque of len bytes takes on the wire, padding included. */
static inline size_t xdr_padded_len(size_t len)
{
	return (len + 3u) & ~(size_t)3u;
}

struct xdr_dec {
	const uint8_t *xd_pos;
	const uint8_t *xd_end;
	bool xd_failed;
};

static inline void xdr_dec_init(struct xdr_dec *dec, const void *buf, size_t len)
{
	dec->xd_pos = (const uint8_t *)buf;
	dec->xd_end = dec->xd_pos + len;
	dec->xd_failed = false;
}
static inline bool xdr_dec_ok(const struct xdr_dec *dec)
{
	return !dec->xd_failed;
}
static inline size_t xdr_dec_remaining(const struct xdr_dec *dec)
{
	return dec->xd_failed ? 0 : (size_t)(dec->xd_end - dec->xd_pos);
}
static inline void xdr_dec_fail(struct xdr_dec *dec)
{
	dec->xd_failed = true;
	dec->xd_pos = dec->xd_end;
}

static inline uint32_t xdr_get_u32(struct xdr_dec *dec)
{
	if ((size_t)(dec->xd_end - dec->xd_pos) < 4u) {
		xdr_dec_fail(dec);
		return 0;
	}
	const uint8_t *p = dec->xd_pos;
	dec->xd_pos += 4;
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline int32_t xdr_get_i32(struct xdr_dec *dec)
{
	return (int32_t)xdr_get_u32(dec);
}
static inline uint64_t xdr_get_u64(struct xdr_dec *dec)
{
	uint64_t hi = xdr_get_u32(dec);
	return (hi << 32) | xdr_get_u32(dec);
}
/* XDR bool: exactly 0 or 1; anything else fails the cursor. */
static inline bool xdr_get_bool(struct xdr_dec *dec)
{
	uint32_t v = xdr_get_u32(dec);
	if (v > 1u)
		xdr_dec_fail(dec);
	return v == 1u;
}
/* Fixed-length opaque of len bytes plus padding; returns a pointer into the buffer or NULL. */
static inline const uint8_t *xdr_get_fixed(struct xdr_dec *dec, uint32_t len)
{
	size_t padded = xdr_padded_len(len);
	if ((size_t)(dec->xd_end - dec->xd_pos) < padded) {
		xdr_dec_fail(dec);
		return NULL;
	}
	const uint8_t *p = dec->xd_pos;
	dec->xd_pos += padded;
	return p;
}
/* Variable-length opaque (or string) of at most max_len bytes. Sets *len_out and returns a
 * pointer into the buffer; on a length above max_len or a short buffer the cursor fails and
 * NULL is returned with *len_out = 0. A zero-length item returns a valid non-NULL pointer. */
static inline const uint8_t *xdr_get_opaque(struct xdr_dec *dec, uint32_t max_len, uint32_t *len_out)
{
	uint32_t len = xdr_get_u32(dec);
	if (len > max_len)
		xdr_dec_fail(dec);
	const uint8_t *p = xdr_dec_ok(dec) ? xdr_get_fixed(dec, len) : NULL;
	*len_out = p ? len : 0;
	return p;
}

struct xdr_enc {
	uint8_t *xe_buf;
	size_t xe_len;
	size_t xe_cap;
	bool xe_failed;
};

static inline void xdr_enc_init(struct xdr_enc *enc, void *buf, size_t cap)
{
	enc->xe_buf = (uint8_t *)buf;
	enc->xe_len = 0;
	enc->xe_cap = cap;
	enc->xe_failed = false;
}
static inline bool xdr_enc_ok(const struct xdr_enc *enc)
{
	return !enc->xe_failed;
}
static inline size_t xdr_enc_len(const struct xdr_enc *enc)
{
	return enc->xe_len;
}
static inline size_t xdr_enc_room(const struct xdr_enc *enc)
{
	return enc->xe_failed ? 0 : enc->xe_cap - enc->xe_len;
}
/* Reserves n bytes (n a multiple of 4 for XDR items) and returns where to write them, or NULL
 * (and the encoder fails) if they do not fit. Used to back-patch counts and by the put helpers. */
static inline uint8_t *xdr_reserve(struct xdr_enc *enc, size_t n)
{
	if (enc->xe_failed || enc->xe_cap - enc->xe_len < n) {
		enc->xe_failed = true;
		return NULL;
	}
	uint8_t *p = enc->xe_buf + enc->xe_len;
	enc->xe_len += n;
	return p;
}
static inline void xdr_store_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}
static inline void xdr_put_u32(struct xdr_enc *enc, uint32_t v)
{
	uint8_t *p = xdr_reserve(enc, 4);
	if (p)
		xdr_store_u32(p, v);
}
static inline void xdr_put_i32(struct xdr_enc *enc, int32_t v)
{
	xdr_put_u32(enc, (uint32_t)v);
}
static inline void xdr_put_u64(struct xdr_enc *enc, uint64_t v)
{
	uint8_t *p = xdr_reserve(enc, 8);
	if (p) {
		xdr_store_u32(p, (uint32_t)(v >> 32));
		xdr_store_u32(p + 4, (uint32_t)v);
	}
}
static inline void xdr_put_bool(struct xdr_enc *enc, bool v)
{
	xdr_put_u32(enc, v ? 1u : 0u);
}
/* Fixed-length opaque: len bytes then zero padding to a multiple of 4. */
static inline void xdr_put_fixed(struct xdr_enc *enc, const void *data, size_t len)
{
	size_t padded = xdr_padded_len(len);
	uint8_t *p = xdr_reserve(enc, padded);
	if (p) {
		if (len)
			memcpy(p, data, len);
		memset(p + len, 0, padded - len);
	}
}
/* Variable-length opaque or string: a u32 length, the bytes, padding. */
static inline void xdr_put_opaque(struct xdr_enc *enc, const void *data, uint32_t len)
{
	xdr_put_u32(enc, len);
	xdr_put_fixed(enc, data, len);
}

#endif
