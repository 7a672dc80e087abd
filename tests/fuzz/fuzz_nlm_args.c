/* fuzz_nlm_args.c: libFuzzer target for the lock manager's argument decoders (nlm_xdr.c): NLM
 * versions 1, 3 and 4 and NSM version 1.
 *
 * Input: byte 0 picks the program and version (NLM 1, 3, 4 or NSM 1), byte 1 the procedure
 * (modulo its count); the rest is the arguments. Checks beyond "no crash": every decoded string
 * and opaque lies inside the input and within its bound, SHARE's mode and access are enums of
 * four values, and what the server then encodes from them (the result with the cookie and a
 * holder, a GRANTED call's arguments with the whole lock) fits the sizes nlm_xdr.h reserves. */
#include "fuzz.h"
#include "nlm/nlm_xdr.h"

static const uint8_t *fuzz_in_start, *fuzz_in_end;

static void fuzz_check_bytes(const struct nlm_bytes *b, uint32_t max)
{
	if (b->nb_len > max)
		__builtin_trap();
	if (b->nb_len && (b->nb_data < fuzz_in_start || b->nb_data + b->nb_len > fuzz_in_end))
		__builtin_trap();
}

static void fuzz_check_nlm(uint32_t vers, uint32_t proc, const struct nlm_args *a)
{
	fuzz_check_bytes(&a->na_cookie, NLM_COOKIE_MAX);
	fuzz_check_bytes(&a->na_lock.nl_caller, NLM_NAME_MAX);
	fuzz_check_bytes(&a->na_lock.nl_fh, NLM_FH_MAX);
	fuzz_check_bytes(&a->na_lock.nl_oh, NLM_OH_MAX);
	fuzz_check_bytes(&a->na_name, NLM_NAME_MAX + 1);
	if ((proc == NLM_SHARE || proc == NLM_UNSHARE) &&
	    (a->na_share_mode > 3 || a->na_share_access > 3))
		__builtin_trap();
	if (vers < NLM_VERS4 && (a->na_lock.nl_offset > UINT32_MAX || a->na_lock.nl_len > UINT32_MAX))
		__builtin_trap();
	/* what the server sends back from them must fit what it reserves */
	static uint8_t buf[NLM_XDR_GRANTED_MAX];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, NLM_XDR_RES_MAX);
	struct nlm_holder h = {.nh_exclusive = true, .nh_svid = 1, .nh_offset = 2, .nh_len = 3};
	nlm_xdr_enc_testres(&enc, vers, &a->na_cookie, NLM_STAT_DENIED, &h);
	if (!xdr_enc_ok(&enc))
		__builtin_trap();
	xdr_enc_init(&enc, buf, NLM_XDR_GRANTED_MAX);
	nlm_xdr_enc_granted(&enc, vers, &a->na_cookie, a->na_exclusive, &a->na_lock);
	if (!xdr_enc_ok(&enc))
		__builtin_trap();
}

static void fuzz_check_nsm(const struct nsm_args *a)
{
	fuzz_check_bytes(&a->sa_mon_name, NLM_NAME_MAX);
	fuzz_check_bytes(&a->sa_my_name, NLM_NAME_MAX);
	if (a->sa_priv && (a->sa_priv < fuzz_in_start || a->sa_priv + NSM_PRIV_LEN > fuzz_in_end))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	static const uint32_t versions[4] = {NLM_VERS1, NLM_VERS3, NLM_VERS4, 0 /* NSM */};
	uint32_t vers = versions[data[0] % 4];
	fuzz_in_start = data + 2;
	fuzz_in_end = data + size;
	struct xdr_dec dec;
	xdr_dec_init(&dec, data + 2, size - 2);
	if (vers == 0) {
		struct nsm_args a;
		if (nsm_xdr_dec_args(&dec, data[1] % NSM_NPROCS, &a))
			fuzz_check_nsm(&a);
		return 0;
	}
	uint32_t proc = data[1] % NLM_NPROCS;
	struct nlm_args a;
	if (nlm_xdr_dec_args(&dec, vers, proc, &a))
		fuzz_check_nlm(vers, proc, &a);
	return 0;
}

/* ---- seeds: each procedure's arguments as a kernel client sends them ---- */

static void fuzz_put_lock(struct xdr_enc *enc, uint32_t vers)
{
	static const uint8_t fh[28] = "a-file-handle-of-28-bytes..";
	xdr_put_opaque(enc, "client-1", 8);
	xdr_put_opaque(enc, fh, sizeof(fh));
	xdr_put_opaque(enc, "1234@client-1", 13);
	xdr_put_u32(enc, 1234);
	if (vers == NLM_VERS4) {
		xdr_put_u64(enc, 1ull << 32);
		xdr_put_u64(enc, 0);
	} else {
		xdr_put_u32(enc, 4096);
		xdr_put_u32(enc, 0);
	}
}

static void fuzz_write_seeds(const char *dir)
{
	uint8_t buf[1024];
	char name[64];
	for (unsigned v = 0; v < 3; v++) {
		uint32_t vers = v == 0 ? NLM_VERS1 : v == 1 ? NLM_VERS3 : NLM_VERS4;
		for (uint32_t proc = 0; proc < NLM_NPROCS; proc++) {
			struct xdr_enc enc;
			buf[0] = (uint8_t)v;
			buf[1] = (uint8_t)proc;
			xdr_enc_init(&enc, buf + 2, sizeof(buf) - 2);
			switch (proc) {
			case NLM_TEST:
			case NLM_TEST_MSG:
			case NLM_GRANTED:
			case NLM_GRANTED_MSG:
				xdr_put_opaque(&enc, "cookie", 6);
				xdr_put_bool(&enc, true);
				fuzz_put_lock(&enc, vers);
				break;
			case NLM_LOCK:
			case NLM_LOCK_MSG:
			case NLM_NM_LOCK:
				xdr_put_opaque(&enc, "cookie", 6);
				xdr_put_bool(&enc, true);
				xdr_put_bool(&enc, true);
				fuzz_put_lock(&enc, vers);
				xdr_put_bool(&enc, false);
				xdr_put_i32(&enc, 3);
				break;
			case NLM_CANCEL:
			case NLM_CANCEL_MSG:
				xdr_put_opaque(&enc, "cookie", 6);
				xdr_put_bool(&enc, true);
				xdr_put_bool(&enc, false);
				fuzz_put_lock(&enc, vers);
				break;
			case NLM_UNLOCK:
			case NLM_UNLOCK_MSG:
				xdr_put_opaque(&enc, "cookie", 6);
				fuzz_put_lock(&enc, vers);
				break;
			case NLM_TEST_RES:
				xdr_put_opaque(&enc, "cookie", 6);
				xdr_put_u32(&enc, NLM_STAT_DENIED);
				xdr_put_bool(&enc, false);
				xdr_put_i32(&enc, 77);
				xdr_put_opaque(&enc, "oh", 2);
				xdr_put_u32(&enc, 0);
				xdr_put_u32(&enc, 0);
				if (vers == NLM_VERS4) {
					xdr_put_u32(&enc, 0);
					xdr_put_u32(&enc, 0);
				}
				break;
			case NLM_LOCK_RES:
			case NLM_CANCEL_RES:
			case NLM_UNLOCK_RES:
			case NLM_GRANTED_RES:
				xdr_put_opaque(&enc, "cookie", 6);
				xdr_put_u32(&enc, NLM_STAT_GRANTED);
				break;
			case NLM_SHARE:
			case NLM_UNSHARE:
				xdr_put_opaque(&enc, "cookie", 6);
				xdr_put_opaque(&enc, "client-1", 8);
				xdr_put_opaque(&enc, "a-file-handle", 13);
				xdr_put_opaque(&enc, "owner", 5);
				xdr_put_u32(&enc, 2);
				xdr_put_u32(&enc, 1);
				xdr_put_bool(&enc, false);
				break;
			case NLM_FREE_ALL:
				xdr_put_opaque(&enc, "client-1", 8);
				xdr_put_i32(&enc, 5);
				break;
			default:
				if (proc != NLM_NULL)
					continue;
				break;
			}
			snprintf(name, sizeof(name), "nlm%u-%u", vers, proc);
			fuzz_seed(dir, name, buf, 2 + xdr_enc_len(&enc));
		}
	}
	for (uint32_t proc = 0; proc < NSM_NPROCS; proc++) {
		struct xdr_enc enc;
		buf[0] = 3;
		buf[1] = (uint8_t)proc;
		xdr_enc_init(&enc, buf + 2, sizeof(buf) - 2);
		static const uint8_t priv[NSM_PRIV_LEN] = "private-16-byte";
		switch (proc) {
		case NSM_STAT: xdr_put_opaque(&enc, "client-1", 8); break;
		case NSM_MON:
		case NSM_UNMON:
			xdr_put_opaque(&enc, "client-1", 8);
			xdr_put_opaque(&enc, "localhost", 9);
			xdr_put_u32(&enc, NLM_PROG);
			xdr_put_u32(&enc, NLM_VERS4);
			xdr_put_u32(&enc, 16);
			if (proc == NSM_MON)
				xdr_put_fixed(&enc, priv, sizeof(priv));
			break;
		case NSM_UNMON_ALL:
			xdr_put_opaque(&enc, "localhost", 9);
			xdr_put_u32(&enc, NLM_PROG);
			xdr_put_u32(&enc, NLM_VERS4);
			xdr_put_u32(&enc, 16);
			break;
		case NSM_NOTIFY:
			xdr_put_opaque(&enc, "client-1", 8);
			xdr_put_i32(&enc, 7);
			break;
		default: break;
		}
		snprintf(name, sizeof(name), "nsm-%u", proc);
		fuzz_seed(dir, name, buf, 2 + xdr_enc_len(&enc));
	}
}
