/* test_rpc_record.c: TCP record marking: single and multi-fragment records, fragments split
 * across reads at every byte, oversize records refused before allocation. */
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

int main(void)
{
	TAP_RUN(record_single_fragment);
	TAP_RUN(record_multi_fragment_and_back_to_back);
	TAP_RUN(record_split_at_every_byte);
	TAP_RUN(record_oversize_fragment_refused_without_allocating);
	TAP_RUN(record_limit_applies_to_whole_record);
	TAP_RUN(record_allocation_follows_arrival);
	return tap_finish();
}
