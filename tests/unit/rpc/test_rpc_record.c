/* test_rpc_record.c: TCP record marking: single and multi-fragment records, fragments split
 * across reads at every byte, oversize records refused before allocation; large records in the
 * pool's buffers (rule 4): pool exhaustion, multi-fragment records, direct body reception and a
 * record abandoned midway. */
#include <errno.h>
#include <string.h>

#include "rpc/rpc_impl.h"
#include "tap.h"

/* Appends a fragment header and body to out at *pos. */
static void put_fragment(uint8_t *out, size_t *pos, const void *body, uint32_t len, bool last)
{
	xdr_store_u32(out + *pos, (last ? RPC_RM_LAST : 0u) | len);
	*pos += 4;
	memcpy(out + *pos, body, len);
	*pos += len;
}

static void record_single_fragment(void)
{
	uint8_t stream[64];
	size_t n = 0;
	put_fragment(stream, &n, "hello world!", 12, true);
	struct rpc_rm rm;
	rpc_rm_init(&rm, 1024);
	size_t used;
	uint8_t *rec;
	size_t rec_len;
	int rc = rpc_rm_feed(&rm, stream, n, &used, &rec, &rec_len);
	CHECK(rc == 1);
	CHECK(used == n);
	CHECK(rec_len == 12 && rec && memcmp(rec, "hello world!", 12) == 0);
	CHECK(rpc_rm_idle(&rm) && rpc_rm_buffered(&rm) == 0);
	mem_free(rec);
	rpc_rm_fini(&rm);
}

static void record_multi_fragment_and_back_to_back(void)
{
	uint8_t stream[128];
	size_t n = 0;
	put_fragment(stream, &n, "abc", 3, false);
	put_fragment(stream, &n, "", 0, false);
	put_fragment(stream, &n, "defgh", 5, true);
	put_fragment(stream, &n, "second", 6, true);
	struct rpc_rm rm;
	rpc_rm_init(&rm, 1024);
	size_t used;
	uint8_t *rec;
	size_t rec_len;
	CHECK(rpc_rm_feed(&rm, stream, n, &used, &rec, &rec_len) == 1);
	CHECK(rec_len == 8 && rec && memcmp(rec, "abcdefgh", 8) == 0);
	mem_free(rec);
	size_t off = used;
	CHECK(rpc_rm_feed(&rm, stream + off, n - off, &used, &rec, &rec_len) == 1);
	CHECK(rec_len == 6 && rec && memcmp(rec, "second", 6) == 0);
	CHECK(off + used == n);
	mem_free(rec);
	rpc_rm_fini(&rm);
}

static void record_split_at_every_byte(void)
{
	uint8_t body[300];
	for (size_t i = 0; i < sizeof(body); i++)
		body[i] = (uint8_t)(i * 7);
	uint8_t stream[400];
	size_t n = 0;
	put_fragment(stream, &n, body, 100, false);
	put_fragment(stream, &n, body + 100, 200, true);
	/* Feed one byte at a time: every header and body boundary is crossed mid-read. */
	struct rpc_rm rm;
	rpc_rm_init(&rm, 1024);
	int records = 0;
	for (size_t i = 0; i < n; i++) {
		size_t used;
		uint8_t *rec;
		size_t rec_len;
		int rc = rpc_rm_feed(&rm, stream + i, 1, &used, &rec, &rec_len);
		CHECK(rc >= 0 && used == 1);
		if (rc == 1) {
			records++;
			CHECK(i == n - 1);
			CHECK(rec_len == 300 && memcmp(rec, body, 300) == 0);
			mem_free(rec);
		}
	}
	CHECK(records == 1);
	/* And in chunks of 7 (header bytes split 3/1 and such). */
	int got = 0;
	for (size_t i = 0; i < n; i += 7) {
		size_t chunk = SH_MIN((size_t)7, n - i), used;
		uint8_t *rec;
		size_t rec_len;
		int rc = rpc_rm_feed(&rm, stream + i, chunk, &used, &rec, &rec_len);
		CHECK(rc >= 0 && used == chunk);
		if (rc == 1) {
			got++;
			CHECK(rec_len == 300 && memcmp(rec, body, 300) == 0);
			mem_free(rec);
		}
	}
	CHECK(got == 1);
	rpc_rm_fini(&rm);
}

static void record_oversize_fragment_refused_without_allocating(void)
{
	struct rpc_rm rm;
	rpc_rm_init(&rm, 1u << 20);
	uint8_t hdr[4];
	xdr_store_u32(hdr, RPC_RM_LAST | 0x7fffffffu); /* 2 GiB */
	size_t used;
	uint8_t *rec;
	size_t rec_len;
	/* With every allocation failing, a refusal that allocated would show up as -ENOMEM. */
	mem_fail_after(0);
	int rc = rpc_rm_feed(&rm, hdr, sizeof(hdr), &used, &rec, &rec_len);
	mem_fail_after(-1);
	CHECK(rc == -EMSGSIZE);
	CHECK(rpc_rm_buffered(&rm) == 0);
	rpc_rm_fini(&rm);
}

static void record_limit_applies_to_whole_record(void)
{
	struct rpc_rm rm;
	rpc_rm_init(&rm, 100);
	uint8_t body[60] = {0};
	uint8_t stream[200];
	size_t n = 0;
	put_fragment(stream, &n, body, 60, false);
	put_fragment(stream, &n, body, 60, true); /* 120 in total > 100 */
	size_t used;
	uint8_t *rec;
	size_t rec_len;
	int rc = rpc_rm_feed(&rm, stream, n, &used, &rec, &rec_len);
	CHECK(rc == -EMSGSIZE);
	CHECK(used == 68); /* refused at the second header, before its body */
	rpc_rm_fini(&rm);

	rpc_rm_init(&rm, 120);
	rc = rpc_rm_feed(&rm, stream, n, &used, &rec, &rec_len);
	CHECK(rc == 1 && rec_len == 120);
	mem_free(rec);
	rpc_rm_fini(&rm);
}

static void record_allocation_follows_arrival(void)
{
	struct rpc_rm rm;
	rpc_rm_init(&rm, 1u << 20);
	uint8_t stream[4 + 10];
	xdr_store_u32(stream, RPC_RM_LAST | (1u << 20)); /* announces 1 MiB */
	memset(stream + 4, 1, 10);
	size_t used;
	uint8_t *rec;
	size_t rec_len;
	CHECK(rpc_rm_feed(&rm, stream, sizeof(stream), &used, &rec, &rec_len) == 0);
	CHECK(rpc_rm_buffered(&rm) > 0 && rpc_rm_buffered(&rm) <= 4096);
	CHECK(!rpc_rm_idle(&rm));
	rpc_rm_fini(&rm);
}

/* ---- the large-record pool (rule 4) ---- */

/* Fills buf with a pattern that differs for every (seed, offset). */
static void fill_pattern(uint8_t *buf, size_t len, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1u;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
}

/* Feeds stream to rm in chunks of at most chunk bytes (like reads into a scratch buffer);
 * returns the one record it completes (or NULL) and checks that it completes at the end. */
static uint8_t *feed_chunks(struct rpc_rm *rm, const uint8_t *stream, size_t n, size_t chunk,
                            size_t *rec_len_out, bool *pooled_out)
{
	uint8_t *out = NULL;
	int records = 0;
	*rec_len_out = 0;
	for (size_t off = 0; off < n;) {
		size_t used;
		uint8_t *rec;
		size_t rec_len;
		int rc =
		    rpc_rm_feed(rm, stream + off, SH_MIN(chunk, n - off), &used, &rec, &rec_len);
		CHECKF(rc >= 0, "feed: %d", rc);
		if (rc < 0)
			return out;
		off += used;
		if (rc == 1) {
			records++;
			CHECK(off == n);
			out = rec;
			*rec_len_out = rec_len;
			*pooled_out = rm->rm_out_pool != NULL;
		}
	}
	CHECK(records == 1);
	return out;
}

static void free_record(struct rpc_buf_pool *pool, uint8_t *rec, bool pooled)
{
	if (pooled)
		rpc_buf_pool_put(pool, rec);
	else
		mem_free(rec);
}

#define POOL_REC_MAX (300u * 1024u)

/* A record larger than RPC_RM_POOL_MIN lands in a pool buffer, a record of exactly that size
 * or less on the heap; contents intact either way; buffers go back to the pool for reuse. */
static void record_pool_large_records(void)
{
	struct rpc_buf_pool pool;
	CHECK(rpc_buf_pool_init(&pool, POOL_REC_MAX, 2) == 0);
	struct rpc_rm rm;
	rpc_rm_init(&rm, POOL_REC_MAX);
	rpc_rm_set_pools(&rm, &pool, NULL);
	uint8_t *body = mem_alloc(POOL_REC_MAX);
	uint8_t *stream = mem_alloc(POOL_REC_MAX + 64);
	VERIFY(body && stream);
	const size_t sizes[] = {1000, RPC_RM_POOL_MIN, RPC_RM_POOL_MIN + 1, 200001, POOL_REC_MAX};
	const bool want_pooled[] = {false, false, true, true, true};
	for (size_t k = 0; k < SH_ARRAY_SIZE(sizes); k++) {
		fill_pattern(body, sizes[k], (uint32_t)k + 1);
		size_t n = 0;
		put_fragment(stream, &n, body, (uint32_t)sizes[k], true);
		size_t rec_len = 0;
		bool pooled = false;
		uint8_t *rec = feed_chunks(&rm, stream, n, 65536, &rec_len, &pooled);
		CHECKF(rec && rec_len == sizes[k] && memcmp(rec, body, sizes[k]) == 0,
		       "record of %zu bytes", sizes[k]);
		CHECKF(pooled == want_pooled[k], "record of %zu bytes pooled %d", sizes[k], pooled);
		CHECK(rpc_rm_idle(&rm) && rpc_rm_buffered(&rm) == 0);
		if (rec)
			free_record(&pool, rec, pooled);
	}
	/* The three pooled records reused one buffer: each went back before the next came. */
	CHECKF(pool.bp_allocated == 1 && pool.bp_nfree == 1, "allocated %u free %u",
	       pool.bp_allocated, pool.bp_nfree);
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&pool);
	mem_free(body);
	mem_free(stream);
}

/* Small records (rule 5): a record whose first fragment fits a small buffer takes one, and
 * gives it back; one that outgrows it in a later fragment moves to the heap intact; a larger
 * first fragment never takes one; with every small buffer held, the next record uses the heap. */
static void record_pool_small_records(void)
{
	struct rpc_buf_pool large, small;
	CHECK(rpc_buf_pool_init(&large, POOL_REC_MAX, 2) == 0);
	CHECK(rpc_buf_pool_init(&small, 512, 2) == 0);
	struct rpc_rm rm;
	rpc_rm_init(&rm, POOL_REC_MAX);
	rpc_rm_set_pools(&rm, &large, &small);
	uint8_t body[3000], stream[3200];
	uint8_t *held[3];
	/* 1: two 200-byte records take the two small buffers, the third uses the heap */
	for (int k = 0; k < 3; k++) {
		fill_pattern(body, 200, 70u + (uint32_t)k);
		size_t n = 0, rec_len = 0;
		put_fragment(stream, &n, body, 200, true);
		bool pooled = false;
		held[k] = feed_chunks(&rm, stream, n, 7, &rec_len, &pooled);
		CHECK(held[k] && rec_len == 200 && memcmp(held[k], body, 200) == 0);
		CHECK(rm.rm_out_pool == (k < 2 ? &small : NULL));
	}
	CHECK(small.bp_allocated == 2 && small.bp_nfree == 0);
	rpc_buf_pool_put(&small, held[0]);
	rpc_buf_pool_put(&small, held[1]);
	mem_free(held[2]);
	/* 2: a first fragment of 300 bytes, then one of 2000: the record leaves its small buffer */
	fill_pattern(body, 2300, 80);
	size_t n = 0, rec_len = 0;
	put_fragment(stream, &n, body, 300, false);
	put_fragment(stream, &n, body + 300, 2000, true);
	bool pooled = true;
	uint8_t *rec = feed_chunks(&rm, stream, n, 100, &rec_len, &pooled);
	CHECK(rec && rec_len == 2300 && memcmp(rec, body, 2300) == 0 && !pooled);
	CHECK(small.bp_nfree == 2); /* the small buffer went back */
	mem_free(rec);
	/* 3: a first fragment above 512 bytes starts on the heap */
	n = 0;
	put_fragment(stream, &n, body, 513, true);
	rec = feed_chunks(&rm, stream, n, 4096, &rec_len, &pooled);
	CHECK(rec && rec_len == 513 && memcmp(rec, body, 513) == 0 && !pooled);
	mem_free(rec);
	CHECK(small.bp_allocated == 2 && small.bp_nfree == 2);
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&small);
	rpc_buf_pool_fini(&large);
}

/* With every pool buffer held by a record not yet freed, the next large record grows on the
 * heap as before; a failed pool allocation also falls back to the heap without counting a
 * buffer that does not exist. */
static void record_pool_exhausted_uses_heap(void)
{
	struct rpc_buf_pool pool;
	CHECK(rpc_buf_pool_init(&pool, POOL_REC_MAX, 2) == 0);
	struct rpc_rm rm;
	rpc_rm_init(&rm, POOL_REC_MAX);
	rpc_rm_set_pools(&rm, &pool, NULL);
	uint8_t *body = mem_alloc(POOL_REC_MAX);
	uint8_t *stream = mem_alloc(POOL_REC_MAX + 64);
	VERIFY(body && stream);
	uint8_t *held[4];
	bool held_pooled[4];
	for (int k = 0; k < 4; k++) {
		size_t len = 100000u + (size_t)k * 1111u;
		fill_pattern(body, len, 40u + (uint32_t)k);
		size_t n = 0;
		put_fragment(stream, &n, body, (uint32_t)len, true);
		size_t rec_len = 0;
		held_pooled[k] = false;
		held[k] = feed_chunks(&rm, stream, n, 65536, &rec_len, &held_pooled[k]);
		CHECK(held[k] && rec_len == len && memcmp(held[k], body, len) == 0);
	}
	CHECK(held_pooled[0] && held_pooled[1] && !held_pooled[2] && !held_pooled[3]);
	CHECK(pool.bp_allocated == 2 && pool.bp_nfree == 0);
	/* The held records are intact after the later ones were received. */
	for (int k = 0; k < 4; k++) {
		size_t len = 100000u + (size_t)k * 1111u;
		fill_pattern(body, len, 40u + (uint32_t)k);
		CHECK(held[k] && memcmp(held[k], body, len) == 0);
		if (held[k])
			free_record(&pool, held[k], held_pooled[k]);
	}
	CHECK(pool.bp_allocated == 2 && pool.bp_nfree == 2);
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&pool);

	/* A pool whose allocation fails: the record is received on the heap. */
	CHECK(rpc_buf_pool_init(&pool, POOL_REC_MAX, 2) == 0);
	rpc_rm_init(&rm, POOL_REC_MAX);
	rpc_rm_set_pools(&rm, &pool, NULL);
	fill_pattern(body, 150000, 99);
	size_t n = 0;
	put_fragment(stream, &n, body, 150000, true);
	mem_fail_after(0); /* the next allocation (the pool's) fails, the heap's then succeeds */
	size_t rec_len = 0;
	bool pooled = true;
	uint8_t *rec = feed_chunks(&rm, stream, n, n, &rec_len, &pooled);
	mem_fail_after(-1);
	CHECK(rec && rec_len == 150000 && !pooled && memcmp(rec, body, 150000) == 0);
	CHECK(pool.bp_allocated == 0 && pool.bp_nfree == 0);
	if (rec)
		free_record(&pool, rec, pooled);
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&pool);
	mem_free(body);
	mem_free(stream);
}

/* A record of many fragments: small ones first (on the heap), then one that takes the record
 * past RPC_RM_POOL_MIN; what arrived before moves into the pool buffer intact. */
static void record_pool_multi_fragment(void)
{
	struct rpc_buf_pool pool;
	CHECK(rpc_buf_pool_init(&pool, POOL_REC_MAX, 1) == 0);
	struct rpc_rm rm;
	rpc_rm_init(&rm, POOL_REC_MAX);
	rpc_rm_set_pools(&rm, &pool, NULL);
	uint8_t *body = mem_alloc(POOL_REC_MAX);
	uint8_t *stream = mem_alloc(POOL_REC_MAX + 256);
	VERIFY(body && stream);
	const uint32_t frags[] = {1, 0, 5000, 3, 120000, 0, 16383, 70001, 7};
	size_t total = 0;
	for (size_t i = 0; i < SH_ARRAY_SIZE(frags); i++)
		total += frags[i];
	fill_pattern(body, total, 7);
	size_t n = 0, off = 0;
	for (size_t i = 0; i < SH_ARRAY_SIZE(frags); i++) {
		put_fragment(stream, &n, body + off, frags[i], i + 1 == SH_ARRAY_SIZE(frags));
		off += frags[i];
	}
	/* Fed in odd chunk sizes so that headers and bodies split across "reads". */
	const size_t chunks[] = {1, 3, 7, 4096, 65536, n};
	for (size_t c = 0; c < SH_ARRAY_SIZE(chunks); c++) {
		size_t rec_len = 0;
		bool pooled = false;
		uint8_t *rec = feed_chunks(&rm, stream, n, chunks[c], &rec_len, &pooled);
		CHECKF(rec && rec_len == total && memcmp(rec, body, total) == 0, "chunk %zu",
		       chunks[c]);
		CHECKF(pooled, "chunk %zu: not pooled", chunks[c]);
		if (rec)
			free_record(&pool, rec, pooled);
	}
	CHECK(pool.bp_allocated == 1 && pool.bp_nfree == 1);
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&pool);
	mem_free(body);
	mem_free(stream);
}

/* Direct reception: after the header, the body is written straight into the record's pool
 * buffer through rpc_rm_body_space / rpc_rm_body_commit; the room offered never runs past the
 * fragment, and the tail shorter than the minimum goes through rpc_rm_feed. */
static void record_pool_direct_body(void)
{
	struct rpc_buf_pool pool;
	CHECK(rpc_buf_pool_init(&pool, POOL_REC_MAX, 1) == 0);
	struct rpc_rm rm;
	rpc_rm_init(&rm, POOL_REC_MAX);
	rpc_rm_set_pools(&rm, &pool, NULL);
	const size_t len = 250000, min = 16384;
	uint8_t *body = mem_alloc(len);
	VERIFY(body);
	fill_pattern(body, len, 5);
	uint8_t hdr[4 + 10];
	xdr_store_u32(hdr, RPC_RM_LAST | (uint32_t)len);
	memcpy(hdr + 4, body, 10);
	size_t used, got = 10, space = 0;
	uint8_t *rec = NULL;
	size_t rec_len = 0;
	int err = 0;
	CHECK(rpc_rm_feed(&rm, hdr, sizeof(hdr), &used, &rec, &rec_len) == 0 &&
	      used == sizeof(hdr));
	bool overran = false;
	int direct = 0;
	for (;;) {
		uint8_t *dst = rpc_rm_body_space(&rm, min, &space, &err);
		CHECK(err == 0);
		if (!dst)
			break;
		if (space > len - got)
			overran = true;
		size_t take = SH_MIN(SH_MIN(space, (size_t)30000), len - got); /* a short read */
		memcpy(dst, body + got, take);
		got += take;
		direct++;
		int rc = rpc_rm_body_commit(&rm, take, &rec, &rec_len);
		CHECK(rc == (got == len ? 1 : 0));
		if (rc == 1)
			break;
	}
	CHECK(!overran && direct > 1);
	CHECK(rm.rm_buf_pool == &pool || rec != NULL);
	if (got < len) {
		/* Fewer than min bytes left: the reassembler asks to be fed. */
		CHECK(len - got < min);
		CHECK(rpc_rm_feed(&rm, body + got, len - got, &used, &rec, &rec_len) == 1);
	}
	bool pooled = rm.rm_out_pool == &pool;
	CHECK(rec && rec_len == len && pooled && memcmp(rec, body, len) == 0);
	if (rec)
		free_record(&pool, rec, pooled);
	CHECK(rpc_rm_body_space(&rm, min, &space, &err) == NULL && err == 0); /* idle */
	CHECK(pool.bp_allocated == 1 && pool.bp_nfree == 1);
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&pool);
	mem_free(body);
}

/* A connection that closes mid-record: rpc_rm_fini gives the partial record's pool buffer
 * back, whether it was filled by rpc_rm_feed or by direct reception. */
static void record_pool_fini_mid_record(void)
{
	struct rpc_buf_pool pool;
	CHECK(rpc_buf_pool_init(&pool, POOL_REC_MAX, 1) == 0);
	uint8_t *stream = mem_alloc(POOL_REC_MAX);
	VERIFY(stream);
	for (int how = 0; how < 2; how++) {
		struct rpc_rm rm;
		rpc_rm_init(&rm, POOL_REC_MAX);
		rpc_rm_set_pools(&rm, &pool, NULL);
		xdr_store_u32(stream, RPC_RM_LAST | 200000u);
		fill_pattern(stream + 4, 100000, 3);
		size_t used;
		uint8_t *rec;
		size_t rec_len;
		if (how == 0) {
			CHECK(rpc_rm_feed(&rm, stream, 4 + 100000, &used, &rec, &rec_len) == 0);
		} else {
			size_t space;
			int err;
			CHECK(rpc_rm_feed(&rm, stream, 4, &used, &rec, &rec_len) == 0);
			uint8_t *dst = rpc_rm_body_space(&rm, 16384, &space, &err);
			CHECK(dst != NULL && space >= 100000);
			if (dst) {
				memcpy(dst, stream + 4, 100000);
				CHECK(rpc_rm_body_commit(&rm, 100000, &rec, &rec_len) == 0);
			}
		}
		CHECKF(rm.rm_buf_pool == &pool && pool.bp_nfree == 0, "how %d", how);
		CHECK(!rpc_rm_idle(&rm));
		/* Counted against the limits: the bytes received, not the record-sized buffer. */
		CHECKF(rpc_rm_buffered(&rm) == 100000, "how %d: %zu buffered", how,
		       rpc_rm_buffered(&rm));
		rpc_rm_fini(&rm);
		CHECKF(pool.bp_allocated == 1 && pool.bp_nfree == 1, "how %d: allocated %u free %u",
		       how, pool.bp_allocated, pool.bp_nfree);
	}
	rpc_buf_pool_fini(&pool);
	mem_free(stream);
}

int main(void)
{
	TAP_RUN(record_single_fragment);
	TAP_RUN(record_multi_fragment_and_back_to_back);
	TAP_RUN(record_split_at_every_byte);
	TAP_RUN(record_oversize_fragment_refused_without_allocating);
	TAP_RUN(record_limit_applies_to_whole_record);
	TAP_RUN(record_allocation_follows_arrival);
	TAP_RUN(record_pool_large_records);
	TAP_RUN(record_pool_small_records);
	TAP_RUN(record_pool_exhausted_uses_heap);
	TAP_RUN(record_pool_multi_fragment);
	TAP_RUN(record_pool_direct_body);
	TAP_RUN(record_pool_fini_mid_record);
	return tap_finish();
}
