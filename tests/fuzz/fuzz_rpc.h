/* fuzz_rpc.h: seed material the RPC-level targets share: real calls encoded with the client
 * side's own encoder (rpc_msg_put_call) and an NFS handle of the server's own format. Used only
 * when a target writes its seeds (fuzz.h). */
#ifndef SHALE_FUZZ_RPC_H
#define SHALE_FUZZ_RPC_H

#include "fuzz.h"
#include "nfs/nfs_impl.h"
#include "rpc/rpc_impl.h"

/* The key the NFS target checks handles under; the seeds' handles are made with it. */
static const uint8_t fuzz_handle_key_bytes[NFS_HANDLE_KEY_LEN] = "shale-fuzz-key!";

/* A handle as the server makes them: export fsid 7, a 12-byte object id. */
static inline void fuzz_seed_handle(struct nfs_fh *fh)
{
	struct nfs_handle_key key;
	nfs_handle_key_init(&key, fuzz_handle_key_bytes);
	struct fs_obj_id obj = {.foi_len = 12, .foi_bytes = "objid-000042"};
	nfs_handle_encode(&key, 7, &obj, fh);
}

/* Encodes a call header with an AUTH_SYS credential (uid 1000, two groups) into enc. */
static inline void fuzz_seed_call(struct xdr_enc *enc, uint32_t prog, uint32_t vers, uint32_t proc)
{
	struct rpc_cred cred = {.rcr_flavor = RPC_AUTH_SYS,
	                        .rcr_uid = 1000,
	                        .rcr_gid = 1000,
	                        .rcr_ngids = 2,
	                        .rcr_gids = {1000, 27}};
	rpc_msg_put_call(enc, 0x5eed0001u, prog, vers, proc, &cred);
}

/* A GETATTR call of the seed handle: header and arguments, no record mark. Returns its length. */
static inline size_t fuzz_seed_getattr(uint8_t *buf, size_t cap)
{
	struct xdr_enc enc;
	struct nfs_fh fh;
	xdr_enc_init(&enc, buf, cap);
	fuzz_seed_call(&enc, NFS3_PROGRAM, NFS3_VERSION, NFS3PROC_GETATTR);
	fuzz_seed_handle(&fh);
	xdr_put_opaque(&enc, fh.nf_bytes, fh.nf_len);
	return xdr_enc_len(&enc);
}

#endif
