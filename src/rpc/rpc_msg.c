/* rpc_msg.c: the RPC message header (RFC 5531 sections 8 and 9, appendix A): parsing calls and
 * their credentials, encoding reply headers.
 *
 * Call header layout (each field 4 bytes, XDR):
 *   xid | mtype=CALL(0) | rpcvers=2 | prog | vers | proc | cred{flavor, len, body<=400} |
 *   verf{flavor, len, body<=400} | procedure arguments...
 *
 * AUTH_SYS credential body (appendix A):
 *   stamp | machinename<255> | uid | gid | gids<16>
 *
 * Decisions:
 *   - Too short to hold xid and mtype, or mtype != CALL: dropped (there is nothing sensible to
 *     answer, and answering garbage would make us a reflector).
 *   - rpcvers != 2: MSG_DENIED RPC_MISMATCH(2, 2), checked before anything else after mtype.
 *   - A credential body over 400 bytes, a truncated header, a malformed AUTH_SYS body (machine
 *     name over 255, more than 16 gids, trailing or missing bytes): AUTH_BADCRED.
 *   - A well-formed credential of a flavor we do not accept (AUTH_SHORT, AUTH_DH, RPCSEC_GSS, or
 *     any other number): AUTH_REJECTEDCRED. BADCRED means "this credential is broken", while
 *     REJECTEDCRED tells the client that the credential was understood but will not be accepted,
 *     so it should try again with another flavor; that is the honest answer for a flavor this
 *     server does not implement.
 *   - The verifier must be AUTH_NONE (AUTH_SYS has no verifier of its own) with a body of at most
 *     400 bytes; anything else is AUTH_BADVERF. */
#include <string.h>

#include "rpc/rpc_impl.h"

static bool rpc_msg_parse_sys(const uint8_t *body, uint32_t len, struct rpc_cred *cred)
{
	struct xdr_dec dec;
	xdr_dec_init(&dec, body, len);
	(void)xdr_get_u32(&dec); /* stamp: arbitrary, unused */
	uint32_t name_len;
	(void)xdr_get_opaque(&dec, RPC_AUTH_SYS_MAX_MACHINE, &name_len);
	cred->rcr_uid = xdr_get_u32(&dec);
	cred->rcr_gid = xdr_get_u32(&dec);
	uint32_t ngids = xdr_get_u32(&dec);
	if (ngids > RPC_AUTH_SYS_MAX_GIDS)
		xdr_dec_fail(&dec);
	for (uint32_t i = 0; xdr_dec_ok(&dec) && i < ngids; i++)
		cred->rcr_gids[i] = xdr_get_u32(&dec);
	if (!xdr_dec_ok(&dec) || xdr_dec_remaining(&dec) != 0)
		return false;
	cred->rcr_ngids = ngids;
	cred->rcr_flavor = RPC_AUTH_SYS;
	return true;
}

enum rpc_parse_result rpc_msg_parse_call(const uint8_t *msg, size_t len, struct rpc_call_hdr *hdr,
					 struct xdr_dec *args_out, enum rpc_auth_stat *auth_stat_out)
{
	struct xdr_dec dec;
	memset(hdr, 0, sizeof(*hdr));
	*auth_stat_out = RPC_AUTH_OK;
	xdr_dec_init(&dec, msg, len);
	hdr->rch_xid = xdr_get_u32(&dec);
	uint32_t mtype = xdr_get_u32(&dec);
	if (!xdr_dec_ok(&dec) || mtype != RPC_MSG_CALL)
		return RPC_PARSE_DROP;
	hdr->rch_rpcvers = xdr_get_u32(&dec);
	if (!xdr_dec_ok(&dec))
		return RPC_PARSE_DROP;
	if (hdr->rch_rpcvers != RPC_VERSION)
		return RPC_PARSE_RPC_MISMATCH;
	hdr->rch_prog = xdr_get_u32(&dec);
	hdr->rch_vers = xdr_get_u32(&dec);
	hdr->rch_proc = xdr_get_u32(&dec);

	uint32_t cred_flavor = xdr_get_u32(&dec);
	uint32_t cred_len;
	const uint8_t *cred_body = xdr_get_opaque(&dec, RPC_AUTH_BODY_MAX, &cred_len);
	if (!xdr_dec_ok(&dec)) {
		*auth_stat_out = RPC_AUTH_BADCRED;
		return RPC_PARSE_AUTH_ERROR;
	}
	uint32_t verf_flavor = xdr_get_u32(&dec);
	uint32_t verf_len;
	(void)xdr_get_opaque(&dec, RPC_AUTH_BODY_MAX, &verf_len);
	if (!xdr_dec_ok(&dec) || verf_flavor != RPC_AUTH_NONE) {
		*auth_stat_out = RPC_AUTH_BADVERF;
		return RPC_PARSE_AUTH_ERROR;
	}

	switch (cred_flavor) {
	case RPC_AUTH_NONE:
		/* The body should be empty (RFC 5531 section 10.1); a non-empty one within the
		 * 400-byte bound carries no meaning and is ignored, as other servers do. */
		hdr->rch_cred.rcr_flavor = RPC_AUTH_NONE;
		break;
	case RPC_AUTH_SYS:
		if (!rpc_msg_parse_sys(cred_body, cred_len, &hdr->rch_cred)) {
			*auth_stat_out = RPC_AUTH_BADCRED;
			return RPC_PARSE_AUTH_ERROR;
		}
		break;
	default:
		*auth_stat_out = RPC_AUTH_REJECTEDCRED; /* see the decisions above */
		return RPC_PARSE_AUTH_ERROR;
	}
	*args_out = dec;
	return RPC_PARSE_OK;
}

size_t rpc_msg_put_accepted(uint8_t *p, uint32_t xid, uint32_t accept_stat)
{
	xdr_store_u32(p, xid);
	xdr_store_u32(p + 4, RPC_MSG_REPLY);
	xdr_store_u32(p + 8, RPC_MSG_ACCEPTED);
	xdr_store_u32(p + 12, RPC_AUTH_NONE);
	xdr_store_u32(p + 16, 0);
	xdr_store_u32(p + 20, accept_stat);
	return RPC_ACCEPTED_HDR_BYTES;
}

size_t rpc_msg_put_prog_mismatch(uint8_t *p, uint32_t xid, uint32_t low, uint32_t high)
{
	size_t n = rpc_msg_put_accepted(p, xid, RPC_PROG_MISMATCH);
	xdr_store_u32(p + n, low);
	xdr_store_u32(p + n + 4, high);
	return n + 8;
}

size_t rpc_msg_put_rpc_mismatch(uint8_t *p, uint32_t xid)
{
	xdr_store_u32(p, xid);
	xdr_store_u32(p + 4, RPC_MSG_REPLY);
	xdr_store_u32(p + 8, RPC_MSG_DENIED);
	xdr_store_u32(p + 12, RPC_REJECT_MISMATCH);
	xdr_store_u32(p + 16, RPC_VERSION);
	xdr_store_u32(p + 20, RPC_VERSION);
	return 24;
}

size_t rpc_msg_put_auth_error(uint8_t *p, uint32_t xid, uint32_t auth_stat)
{
	xdr_store_u32(p, xid);
	xdr_store_u32(p + 4, RPC_MSG_REPLY);
	xdr_store_u32(p + 8, RPC_MSG_DENIED);
	xdr_store_u32(p + 12, RPC_REJECT_AUTH_ERROR);
	xdr_store_u32(p + 16, auth_stat);
	return 20;
}

void rpc_msg_put_call(struct xdr_enc *enc, uint32_t xid, uint32_t prog, uint32_t vers,
		      uint32_t proc, const struct rpc_cred *cred)
{
	xdr_put_u32(enc, xid);
	xdr_put_u32(enc, RPC_MSG_CALL);
	xdr_put_u32(enc, RPC_VERSION);
	xdr_put_u32(enc, prog);
	xdr_put_u32(enc, vers);
	xdr_put_u32(enc, proc);
	if (cred && cred->rcr_flavor == RPC_AUTH_SYS) {
		static const char machine[] = "shale";
		uint32_t ngids = SH_MIN(cred->rcr_ngids, (uint32_t)RPC_AUTH_SYS_MAX_GIDS);
		uint32_t body_len = 4 + 4 + (uint32_t)xdr_padded_len(sizeof(machine) - 1) + 4 + 4 + 4 +
				    4 * ngids;
		xdr_put_u32(enc, RPC_AUTH_SYS);
		xdr_put_u32(enc, body_len);
		xdr_put_u32(enc, 0); /* stamp */
		xdr_put_opaque(enc, machine, sizeof(machine) - 1);
		xdr_put_u32(enc, cred->rcr_uid);
		xdr_put_u32(enc, cred->rcr_gid);
		xdr_put_u32(enc, ngids);
		for (uint32_t i = 0; i < ngids; i++)
			xdr_put_u32(enc, cred->rcr_gids[i]);
	} else {
		xdr_put_u32(enc, RPC_AUTH_NONE);
		xdr_put_u32(enc, 0);
	}
	xdr_put_u32(enc, RPC_AUTH_NONE);
	xdr_put_u32(enc, 0);
}
