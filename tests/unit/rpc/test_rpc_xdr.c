/* test_rpc_xdr.c: the XDR primitives the rpc layer builds on: bounds, padding, bool, opaque
 * limits, sticky failure. */
#include <string.h>

#include "rpc/rpc_impl.h"
#include "tap.h"

static void xdr_u32_and_u64_round_trip(void)
{
	uint8_t buf[12];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_u32(&enc, 0xdeadbeefu);
	xdr_put_u64(&enc, 0x0102030405060708ull);
	CHECK(xdr_enc_ok(&enc));
	CHECK(xdr_enc_len(&enc) == 12);
	CHECK(buf[0] == 0xde && buf[3] == 0xef && buf[4] == 0x01 && buf[11] == 0x08);
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, sizeof(buf));
	CHECK(xdr_get_u32(&dec) == 0xdeadbeefu);
	CHECK(xdr_get_u64(&dec) == 0x0102030405060708ull);
	CHECK(xdr_dec_ok(&dec));
	CHECK(xdr_dec_remaining(&dec) == 0);
}

static void xdr_short_buffer_fails_sticky(void)
{
	uint8_t buf[6] = {0, 0, 0, 7, 1, 2};
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, sizeof(buf));
	CHECK(xdr_get_u32(&dec) == 7);
	CHECK(xdr_get_u32(&dec) == 0); /* only 2 bytes left */
	CHECK(!xdr_dec_ok(&dec));
	CHECK(xdr_dec_remaining(&dec) == 0);
	CHECK(xdr_get_u32(&dec) == 0); /* stays failed */
	CHECK(!xdr_dec_ok(&dec));
}

static void xdr_bool_accepts_only_0_and_1(void)
{
	uint8_t buf[12] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, sizeof(buf));
	CHECK(xdr_get_bool(&dec) == true);
	CHECK(xdr_get_bool(&dec) == false);
	CHECK(xdr_dec_ok(&dec));
	(void)xdr_get_bool(&dec);
	CHECK(!xdr_dec_ok(&dec));
}

static void xdr_opaque_padding_and_limit(void)
{
	uint8_t buf[16];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	memset(buf, 0xaa, sizeof(buf));
	xdr_put_opaque(&enc, "abcde", 5);
	CHECK(xdr_enc_ok(&enc));
	CHECK(xdr_enc_len(&enc) == 12); /* 4 length + 5 data + 3 pad */
	CHECK(buf[9] == 0 && buf[10] == 0 && buf[11] == 0);

	struct xdr_dec dec;
	uint32_t len;
	xdr_dec_init(&dec, buf, 12);
	const uint8_t *p = xdr_get_opaque(&dec, 5, &len);
	CHECK(p != NULL && len == 5 && memcmp(p, "abcde", 5) == 0);
	CHECK(xdr_dec_remaining(&dec) == 0);

	xdr_dec_init(&dec, buf, 12);
	p = xdr_get_opaque(&dec, 4, &len); /* above the limit */
	CHECK(p == NULL && len == 0 && !xdr_dec_ok(&dec));

	xdr_dec_init(&dec, buf, 10); /* padding missing */
	p = xdr_get_opaque(&dec, 5, &len);
	CHECK(p == NULL && !xdr_dec_ok(&dec));

	uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
	xdr_dec_init(&dec, huge, sizeof(huge));
	p = xdr_get_opaque(&dec, UINT32_MAX, &len); /* claims 4 GiB */
	CHECK(p == NULL && len == 0 && !xdr_dec_ok(&dec));

	uint8_t empty[4] = {0, 0, 0, 0};
	xdr_dec_init(&dec, empty, sizeof(empty));
	p = xdr_get_opaque(&dec, 0, &len);
	CHECK(p != NULL && len == 0 && xdr_dec_ok(&dec));
}

static void xdr_encoder_overflow_fails(void)
{
	uint8_t buf[8];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_u32(&enc, 1);
	xdr_put_opaque(&enc, "xy", 2); /* needs 8, 4 left */
	CHECK(!xdr_enc_ok(&enc));
	CHECK(xdr_enc_room(&enc) == 0);
	CHECK(xdr_reserve(&enc, 0) == NULL);
}

static void msg_reply_headers_encode(void)
{
	uint8_t p[32];
	struct xdr_dec dec;
	CHECK(rpc_msg_put_rpc_mismatch(p, 77) == 24);
	xdr_dec_init(&dec, p, 24);
	CHECK(xdr_get_u32(&dec) == 77);
	CHECK(xdr_get_u32(&dec) == RPC_MSG_REPLY);
	CHECK(xdr_get_u32(&dec) == RPC_MSG_DENIED);
	CHECK(xdr_get_u32(&dec) == RPC_REJECT_MISMATCH);
	CHECK(xdr_get_u32(&dec) == 2 && xdr_get_u32(&dec) == 2);
	CHECK(rpc_msg_put_prog_mismatch(p, 5, 3, 4) == 32);
	xdr_dec_init(&dec, p, 32);
	for (int i = 0; i < 5; i++)
		(void)xdr_get_u32(&dec);
	CHECK(xdr_get_u32(&dec) == RPC_PROG_MISMATCH);
	CHECK(xdr_get_u32(&dec) == 3 && xdr_get_u32(&dec) == 4);
}

static void msg_parse_auth_sys_bounds(void)
{
	struct rpc_cred cred = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = 1000, .rcr_gid = 100, .rcr_ngids = 2,
				.rcr_gids = {4, 5}};
	uint8_t buf[600];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	rpc_msg_put_call(&enc, 9, 100003, 3, 1, &cred);
	xdr_put_u32(&enc, 0xabcdef01u); /* an argument */
	CHECK(xdr_enc_ok(&enc));
	struct rpc_call_hdr hdr;
	struct xdr_dec args;
	enum rpc_auth_stat why;
	CHECK(rpc_msg_parse_call(buf, xdr_enc_len(&enc), &hdr, &args, &why) == RPC_PARSE_OK);
	CHECK(hdr.rch_xid == 9 && hdr.rch_prog == 100003 && hdr.rch_vers == 3 && hdr.rch_proc == 1);
	CHECK(hdr.rch_cred.rcr_flavor == RPC_AUTH_SYS && hdr.rch_cred.rcr_uid == 1000);
	CHECK(hdr.rch_cred.rcr_ngids == 2 && hdr.rch_cred.rcr_gids[1] == 5);
	CHECK(xdr_get_u32(&args) == 0xabcdef01u && xdr_dec_remaining(&args) == 0);

	/* Hand-made AUTH_SYS bodies: 17 gids, a 256-byte machine name, a trailing word. */
	static const struct {
		uint32_t name_len, ngids, extra;
		enum rpc_parse_result want;
	} cases[] = {
		{5, 16, 0, RPC_PARSE_OK},     {5, 17, 0, RPC_PARSE_AUTH_ERROR},
		{255, 0, 0, RPC_PARSE_OK},    {256, 0, 0, RPC_PARSE_AUTH_ERROR},
		{5, 1, 1, RPC_PARSE_AUTH_ERROR},
	};
	for (size_t c = 0; c < SH_ARRAY_SIZE(cases); c++) {
		uint8_t name[260] = {0};
		uint32_t body = 4 + 4 + (uint32_t)xdr_padded_len(cases[c].name_len) + 8 + 4 +
				4 * cases[c].ngids + 4 * cases[c].extra;
		xdr_enc_init(&enc, buf, sizeof(buf));
		xdr_put_u32(&enc, 1);
		xdr_put_u32(&enc, RPC_MSG_CALL);
		xdr_put_u32(&enc, 2);
		xdr_put_u32(&enc, 100003);
		xdr_put_u32(&enc, 3);
		xdr_put_u32(&enc, 0);
		xdr_put_u32(&enc, RPC_AUTH_SYS);
		xdr_put_u32(&enc, body);
		xdr_put_u32(&enc, 0);
		xdr_put_opaque(&enc, name, cases[c].name_len);
		xdr_put_u32(&enc, 0);
		xdr_put_u32(&enc, 0);
		xdr_put_u32(&enc, cases[c].ngids);
		for (uint32_t i = 0; i < cases[c].ngids + cases[c].extra; i++)
			xdr_put_u32(&enc, i);
		xdr_put_u32(&enc, RPC_AUTH_NONE);
		xdr_put_u32(&enc, 0);
		CHECK(xdr_enc_ok(&enc));
		enum rpc_parse_result r = rpc_msg_parse_call(buf, xdr_enc_len(&enc), &hdr, &args, &why);
		CHECKF(r == cases[c].want, "case %zu: got %d", c, (int)r);
		if (r == RPC_PARSE_AUTH_ERROR)
			CHECK(why == RPC_AUTH_BADCRED);
	}
}

int main(void)
{
	TAP_RUN(xdr_u32_and_u64_round_trip);
	TAP_RUN(xdr_short_buffer_fails_sticky);
	TAP_RUN(xdr_bool_accepts_only_0_and_1);
	TAP_RUN(xdr_opaque_padding_and_limit);
	TAP_RUN(xdr_encoder_overflow_fails);
	TAP_RUN(msg_reply_headers_encode);
	TAP_RUN(msg_parse_auth_sys_bounds);
	return tap_finish();
}
