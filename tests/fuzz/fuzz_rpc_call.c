/* fuzz_rpc_call.c: libFuzzer target for the RPC call header parser (rpc_msg_parse_call).
 *
 * Covers: the call header (xid, message type, RPC version, program, version, procedure), the
 * credential (AUTH_NONE, AUTH_SYS with its machine name and groups, other flavors refused) and
 * the verifier, as the server parses every record it receives (RFC 5531 sections 8-9, appendix
 * A). The input is one record. Checks beyond "no crash": on OK the argument cursor lies inside
 * the record and an AUTH_SYS credential has at most RPC_AUTH_SYS_MAX_GIDS groups; an AUTH_ERROR
 * carries a reason. */
#include "fuzz_rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rpc_call_hdr hdr;
	struct xdr_dec args;
	enum rpc_auth_stat why;
	enum rpc_parse_result r = rpc_msg_parse_call(data, size, &hdr, &args, &why);
	if (r == RPC_PARSE_OK) {
		if (!xdr_dec_ok(&args) || xdr_dec_remaining(&args) > size)
			__builtin_trap();
		if (hdr.rch_cred.rcr_flavor == RPC_AUTH_SYS &&
		    hdr.rch_cred.rcr_ngids > RPC_AUTH_SYS_MAX_GIDS)
			__builtin_trap();
	} else if (r == RPC_PARSE_AUTH_ERROR && why == RPC_AUTH_OK) {
		__builtin_trap();
	}
	return 0;
}

static void fuzz_write_seeds(const char *dir)
{
	uint8_t buf[1024];
	fuzz_seed(dir, "getattr", buf, fuzz_seed_getattr(buf, sizeof(buf)));

	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	rpc_msg_put_call(&enc, 1, NFS3_PROGRAM, NFS3_VERSION, NFS3PROC_NULL, NULL);
	fuzz_seed(dir, "null-auth-none", buf, xdr_enc_len(&enc));

	/* AUTH_SYS with the most groups allowed */
	struct rpc_cred cred = {.rcr_flavor = RPC_AUTH_SYS, .rcr_ngids = RPC_AUTH_SYS_MAX_GIDS};
	for (uint32_t i = 0; i < RPC_AUTH_SYS_MAX_GIDS; i++)
		cred.rcr_gids[i] = 100 + i;
	xdr_enc_init(&enc, buf, sizeof(buf));
	rpc_msg_put_call(&enc, 2, MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT, &cred);
	xdr_put_opaque(&enc, "/export", 7);
	fuzz_seed(dir, "mnt-16-gids", buf, xdr_enc_len(&enc));

	/* RPC version 3: answered RPC_MISMATCH */
	xdr_enc_init(&enc, buf, sizeof(buf));
	rpc_msg_put_call(&enc, 3, RPC_PMAP_PROG, RPC_PMAP_VERS, 3, NULL);
	xdr_store_u32(buf + 8, 3);
	fuzz_seed(dir, "rpcvers-3", buf, xdr_enc_len(&enc));
}
