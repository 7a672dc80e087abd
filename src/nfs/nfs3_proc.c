/* nfs3_proc.c: the NFSv3 procedures (RFC 1813 section 3.3), driven by one table.
 *
 * Request path. The rpc layer parses a call and runs nfs3_dispatch on the loop that owns the
 * connection. nfs3_dispatch, the same for all 22 procedures, does in order:
 *   1. NULL is answered at once. Any other procedure needs AUTH_SYS or AUTH_NONE (the latter runs
 *      as the export's anonymous user, as knfsd does); other flavors get AUTH_ERROR AUTH_TOOWEAK.
 *   2. Takes a per-call state (struct nfs3_call) from the loop's free list.
 *   3. Decodes the arguments with the table's decoder (nfs3_xdr.c); failure -> GARBAGE_ARGS.
 *   4. Sizes the reply buffer (rpc_call_res_init) from the table's maximum (READDIR: from the
 *      client's count).
 *   5. The export check (below) on the first file handle; a modifying procedure on a read-only
 *      export -> NFS3ERR_ROFS.
 *   6. The procedure's start function fills the embedded struct fs_req and submits it; argument
 *      errors it finds (bad names, a second handle of another export) finish the call at once.
 *   7. nfs3_fs_done runs on the same loop when the back end completes (possibly inside fs_submit):
 *      the procedure's done function points the result structure at the fs_req's outputs, the
 *      table's encoder writes the reply, the call is answered and the state goes back to the
 *      free list.
 * Every reply, error replies included, goes through the same encoder, so wcc_data and post-op
 * attributes are always present in the form the RFC requires (absent when unknown).
 *
 * Per-call state. struct nfs3_call is one allocation holding the fs_req, the decoded arguments,
 * the result structure, the squashed credential and the NUL-terminated copies of names that the
 * fs interface needs. Its owner is the loop the call arrived on: taken from and returned to that
 * loop's free list, only ever touched on that loop's thread (the back end hands the fs_req back
 * through fs_req_complete, which runs fr_done on fr_loop). Opaque arguments (handles, WRITE
 * data) point into the call's record, which the rpc call owns until it is answered; READ data is
 * the back end's buffer, sent as the call's bulk segment and released by the rpc layer once sent.
 * Nothing is copied except names (for NUL termination) and the encoded reply.
 *
 * File handle (nfs_handle.c; all integers big-endian):
 *   offset  size  field
 *   0       1     version, 1
 *   1       1     L, length of the back end's fs_obj_id (0..40)
 *   2       8     export fsid (nfs_exports_fsid)
 *   10      L     fs_obj_id bytes
 *   10+L    8     SipHash-2-4 MAC of bytes [0, 10+L), key in state_dir/handle.key
 * A handle that is too short or long (18..58 bytes), of another version, with L inconsistent with
 * its length, or with a wrong MAC is NFS3ERR_BADHANDLE; one with a valid MAC whose fsid no export
 * has (an export removed since) is NFS3ERR_STALE; the back end's ESTALE passes through as STALE.
 *
 * Export check (nfs_service_check in nfs_service.c): the handle's fsid selects the export; the
 * peer address selects the rule (exact host, then network, then `*`), the decision cached per
 * loop; no rule -> NFS3ERR_ACCES; a `secure` rule and a source port >= 1024 -> AUTH_ERROR
 * AUTH_TOOWEAK (knfsd's behaviour, so a kernel client through NAT needs `insecure`); then the
 * credential is squashed per the rule (root_squash, all_squash, anonuid/anongid) into fr_cred. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "nfs/nfs_impl.h"

/* Internal verdict: answer AUTH_ERROR AUTH_TOOWEAK instead of an nfsstat3. */
#define NFS3_STATUS_TOOWEAK 0xffffffffu

struct nfs3_proc_info;

struct nfs3_call {
	struct fs_req nc_req;
	struct rpc_call *nc_rpc;
	struct nfs_service *nc_svc;
	struct nfs_loop_state *nc_ls; /* the free list this state returns to, or NULL */
	const struct nfs3_proc_info *nc_proc;
	struct nfs_table *nc_table; /* the exports the handle was resolved against, held */
	const struct nfs_export_rt *nc_rt;
	const struct nfs_client_rule *nc_rule;
	struct fs_cred nc_cred;
	union nfs3_args nc_args;
	union nfs3_res nc_res;
	bool nc_encoded;        /* the done function wrote the reply itself (READDIR) */
	struct nfs_fh nc_fh;    /* handle returned by LOOKUP/CREATE..., scratch for READDIRPLUS */
	/* READDIR accounting, in wire bytes */
	size_t nc_rd_limit, nc_rd_used;
	size_t nc_rd_dirlimit, nc_rd_dirused;
	uint32_t nc_rd_entries;
	struct nfs3_call *nc_next_free;
	char nc_name[FS_NAME_MAX + 1];
	char nc_name2[FS_NAME_MAX + 1];
	char nc_target[FS_PATH_MAX + 1];
};

struct nfs3_proc_info {
	const char *npi_name;
	nfs3_dec_fn npi_decode;
	/* Fills nc->nc_req (common fields are set) and submits it, returning NFS3_OK; or returns an
	 * nfsstat3 to answer at once without touching the back end. */
	uint32_t (*npi_start)(struct nfs3_call *nc);
	/* Points nc->nc_res at the completed request's outputs. */
	void (*npi_done)(struct nfs3_call *nc);
	nfs3_enc_fn npi_encode;
	size_t npi_res_max; /* 0: computed by nfs3_res_size */
	bool npi_modifies;  /* refused on read-only exports */
};

/* Every argument structure begins with the handle the export check runs on. */
_Static_assert(offsetof(union nfs3_args, setattr.fh) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, dirop.da_dir) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, access.fh) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, read.fh) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, write.fh) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, create.where.da_dir) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, rename.from.da_dir) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, link.fh) == 0, "fh first");
_Static_assert(offsetof(union nfs3_args, readdir.dir) == 0, "fh first");

/* ---- per-call state ---- */

static struct nfs3_call *nfs3_call_get(struct nfs_service *svc, struct rpc_call *call)
{
	struct nfs_loop_state *ls = nfs_service_loop_state(svc, call);
	struct nfs3_call *nc;
	if (ls && ls->nls_free) {
		nc = ls->nls_free;
		ls->nls_free = nc->nc_next_free;
		ls->nls_nfree--;
	} else {
		nc = mem_alloc(sizeof(*nc));
		if (!nc)
			return NULL;
	}
	nc->nc_rpc = call;
	nc->nc_svc = svc;
	nc->nc_ls = ls;
	nc->nc_table = NULL;
	nc->nc_rt = NULL;
	nc->nc_rule = NULL;
	nc->nc_encoded = false;
	memset(&nc->nc_res, 0, sizeof(nc->nc_res));
	memset(&nc->nc_req, 0, offsetof(struct fs_req, u));
	return nc;
}

static void nfs3_call_put(struct nfs3_call *nc)
{
	nfs_table_rele(nc->nc_table);
	nc->nc_table = NULL;
	struct nfs_loop_state *ls = nc->nc_ls;
	if (ls && ls->nls_nfree < NFS_CALL_FREE_MAX) {
		nc->nc_next_free = ls->nls_free;
		ls->nls_free = nc;
		ls->nls_nfree++;
		return;
	}
	mem_free(nc);
}

void nfs3_call_free_list(struct nfs_loop_state *ls)
{
	while (ls->nls_free) {
		struct nfs3_call *nc = ls->nls_free;
		ls->nls_free = nc->nc_next_free;
		mem_free(nc);
	}
	ls->nls_nfree = 0;
}

/* ---- helpers ---- */

/* Checks the first handle and the caller against its export; on NFS3_OK, fr_obj, fr_fs,
 * nc_rt, nc_rule and nc_cred are set. */
static uint32_t nfs3_resolve(struct nfs3_call *nc, const struct nfs3_bytes *fh)
{
	uint64_t fsid;
	if (nfs_handle_decode(&nc->nc_svc->ns_key, fh->nb_data, fh->nb_len, &fsid,
			      &nc->nc_req.fr_obj) < 0)
		return NFS3ERR_BADHANDLE;
	if (!nc->nc_table)
		nc->nc_table = nfs_table_hold(nc->nc_svc);
	const struct nfs_export_rt *rt = nfs_table_export_by_fsid(nc->nc_table, fsid);
	if (!rt)
		return NFS3ERR_STALE;
	const struct nfs_client_rule *rule;
	switch (nfs_service_check(nc->nc_svc, nc->nc_rpc, rt, &rule)) {
	case NFS_ACCESS_OK:
		break;
	case NFS_ACCESS_INSECURE:
		return NFS3_STATUS_TOOWEAK;
	case NFS_ACCESS_DENIED:
	default:
		return NFS3ERR_ACCES;
	}
	nc->nc_rt = rt;
	nc->nc_rule = rule;
	nfs_squash_cred(rule, &nc->nc_rpc->rc_cred, &nc->nc_cred);
	nc->nc_req.fr_fs = rt->ner_fs;
	return NFS3_OK;
}

/* A second handle (RENAME's target directory, LINK's directory): same export as the first. */
static uint32_t nfs3_resolve_second(struct nfs3_call *nc, const struct nfs3_bytes *fh,
				    struct fs_obj_id *obj)
{
	uint64_t fsid;
	if (nfs_handle_decode(&nc->nc_svc->ns_key, fh->nb_data, fh->nb_len, &fsid, obj) < 0)
		return NFS3ERR_BADHANDLE;
	if (fsid == nc->nc_rt->ner_fsid)
		return NFS3_OK;
	return nfs_table_export_by_fsid(nc->nc_table, fsid) ? NFS3ERR_XDEV : NFS3ERR_STALE;
}

enum nfs3_name_use { NFS3_NAME_LOOKUP, NFS3_NAME_NEW, NFS3_NAME_OLD };

/* Copies a filename3 into buf (NUL-terminated) after checking it as the fs interface requires. */
static uint32_t nfs3_take_name(const struct nfs3_bytes *name, char buf[FS_NAME_MAX + 1],
			       enum nfs3_name_use use)
{
	if (name->nb_len == 0)
		return NFS3ERR_ACCES; /* as Linux's lookup of an empty component */
	if (name->nb_len > FS_NAME_MAX)
		return NFS3ERR_NAMETOOLONG;
	if (memchr(name->nb_data, '/', name->nb_len) || memchr(name->nb_data, '\0', name->nb_len))
		return NFS3ERR_ACCES;
	memcpy(buf, name->nb_data, name->nb_len);
	buf[name->nb_len] = '\0';
	bool dots = strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0;
	if (dots && use == NFS3_NAME_NEW)
		return NFS3ERR_EXIST;
	if (dots && use == NFS3_NAME_OLD)
		return NFS3ERR_INVAL;
	return NFS3_OK;
}

static const struct fs_attr *nfs3_attr_if(bool valid, const struct fs_attr *attr)
{
	return valid ? attr : NULL;
}

static uint32_t nfs3_req_status(const struct nfs3_call *nc)
{
	return nfs3_status_from_errno(nc->nc_req.fr_status);
}

/* Largest READ payload or READDIR reply for this call's transport. */
static uint32_t nfs3_io_max(const struct nfs3_call *nc)
{
	return nc->nc_rpc->rc_transport == RPC_UDP ? NFS3_UDP_IO_MAX : NFS3_IO_MAX;
}

static void nfs3_submit(struct nfs3_call *nc, enum fs_op op)
{
	nc->nc_req.fr_op = op;
	fs_submit(&nc->nc_req);
}

/* ---- the procedures ---- */

static uint32_t nfs3_getattr_start(struct nfs3_call *nc)
{
	nfs3_submit(nc, FS_OP_GETATTR);
	return NFS3_OK;
}

static void nfs3_getattr_done(struct nfs3_call *nc)
{
	nc->nc_res.attrstat.status = nfs3_req_status(nc);
	nc->nc_res.attrstat.attr = &nc->nc_req.u.getattr.ga_attr;
}

static uint32_t nfs3_setattr_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.setattr, 0, sizeof(req->u.setattr));
	req->u.setattr.sa_sattr = nc->nc_args.setattr.sattr;
	req->u.setattr.sa_guard = nc->nc_args.setattr.guard;
	req->u.setattr.sa_guard_ctime = nc->nc_args.setattr.guard_ctime;
	nfs3_submit(nc, FS_OP_SETATTR);
	return NFS3_OK;
}

static void nfs3_setattr_done(struct nfs3_call *nc)
{
	nc->nc_res.wccstat.status = nfs3_req_status(nc);
	nc->nc_res.wccstat.wcc = &nc->nc_req.u.setattr.sa_wcc;
}

static uint32_t nfs3_lookup_start(struct nfs3_call *nc)
{
	uint32_t st = nfs3_take_name(&nc->nc_args.dirop.da_name, nc->nc_name, NFS3_NAME_LOOKUP);
	if (st != NFS3_OK)
		return st;
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.lookup, 0, sizeof(req->u.lookup));
	req->u.lookup.lk_name = nc->nc_name;
	nfs3_submit(nc, FS_OP_LOOKUP);
	return NFS3_OK;
}

static void nfs3_lookup_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	nc->nc_res.lookup.status = nfs3_req_status(nc);
	if (nc->nc_res.lookup.status == NFS3_OK) {
		nfs_handle_encode(&nc->nc_svc->ns_key, nc->nc_rt->ner_fsid, &req->u.lookup.lk_obj,
				  &nc->nc_fh);
		nc->nc_res.lookup.fh = &nc->nc_fh;
		nc->nc_res.lookup.obj_attr = &req->u.lookup.lk_attr;
	}
	nc->nc_res.lookup.dir_attr =
		nfs3_attr_if(req->u.lookup.lk_dir_attr_valid, &req->u.lookup.lk_dir_attr);
}

static uint32_t nfs3_access_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.access, 0, sizeof(req->u.access));
	req->u.access.ac_want = nc->nc_args.access.access & 0x3fu; /* the six ACCESS3 bits */
	nfs3_submit(nc, FS_OP_ACCESS);
	return NFS3_OK;
}

static void nfs3_access_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	uint32_t granted = req->u.access.ac_granted & req->u.access.ac_want;
	if (!(nc->nc_rule->ncr_flags & NFS_EXP_RW))
		granted &= ~(uint32_t)(FS_ACCESS_MODIFY | FS_ACCESS_EXTEND | FS_ACCESS_DELETE);
	nc->nc_res.access.status = nfs3_req_status(nc);
	nc->nc_res.access.attr = nfs3_attr_if(req->u.access.ac_attr_valid, &req->u.access.ac_attr);
	nc->nc_res.access.access = granted;
}

static uint32_t nfs3_readlink_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	req->u.readlink.rl_len = 0;
	req->u.readlink.rl_target[0] = '\0';
	req->u.readlink.rl_attr_valid = false;
	nfs3_submit(nc, FS_OP_READLINK);
	return NFS3_OK;
}

static void nfs3_readlink_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	nc->nc_res.readlink.status = nfs3_req_status(nc);
	nc->nc_res.readlink.attr =
		nfs3_attr_if(req->u.readlink.rl_attr_valid, &req->u.readlink.rl_attr);
	nc->nc_res.readlink.target = req->u.readlink.rl_target;
	nc->nc_res.readlink.len = SH_MIN(req->u.readlink.rl_len, (uint32_t)FS_PATH_MAX);
}

static uint32_t nfs3_read_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.read, 0, sizeof(req->u.read));
	req->u.read.rd_offset = nc->nc_args.read.offset;
	/* RFC 1813 3.3.6: the server may return less than asked; never more than rtmax */
	req->u.read.rd_count = SH_MIN(nc->nc_args.read.count, nfs3_io_max(nc));
	/* Over TCP the data may come in a pipe, spliced to the socket without a copy. */
	req->u.read.rd_pipe_ok = nc->nc_rpc->rc_transport == RPC_TCP;
	nfs3_submit(nc, FS_OP_READ);
	return NFS3_OK;
}

_Static_assert(FS_BUF_SEGS_MAX <= RPC_BULK_IOVS_MAX, "a READ's pieces fit one reply");

static void nfs3_read_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	struct fs_buf *buf = &req->u.read.rd_buf;
	struct rpc_call *call = nc->nc_rpc;
	nc->nc_res.read.status = nfs3_req_status(nc);
	nc->nc_res.read.attr = nfs3_attr_if(req->u.read.rd_attr_valid, &req->u.read.rd_attr);
	if (nc->nc_res.read.status == NFS3_OK && buf->fb_len > 0) {
		nc->nc_res.read.count = buf->fb_len;
		nc->nc_res.read.eof = req->u.read.rd_eof;
		if (buf->fb_piped) {
			ASSERT(req->u.read.rd_pipe_ok);
			call->rc_bulk.iov_len = buf->fb_len;
			call->rc_bulk_piped = true;
			call->rc_bulk_pipe_fd = buf->fb_pipe_fd;
		} else if (buf->fb_nsegs > 0) {
			call->rc_bulk_iov = buf->fb_segs;
			call->rc_bulk_iovcnt = buf->fb_nsegs;
		} else {
			call->rc_bulk.iov_base = (void *)(uintptr_t)buf->fb_data;
			call->rc_bulk.iov_len = buf->fb_len;
		}
		call->rc_bulk_release = buf->fb_release;
		call->rc_bulk_arg = buf->fb_release_arg;
		call->rc_bulk_pad = (uint32_t)(xdr_padded_len(buf->fb_len) - buf->fb_len);
		return;
	}
	nc->nc_res.read.count = 0;
	nc->nc_res.read.eof = req->u.read.rd_eof;
	if (buf->fb_release)
		buf->fb_release(buf->fb_release_arg);
}

static uint32_t nfs3_write_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.write, 0, sizeof(req->u.write));
	req->u.write.wr_offset = nc->nc_args.write.offset;
	req->u.write.wr_data = nc->nc_args.write.data.nb_data; /* into the record: no copy */
	req->u.write.wr_len = nc->nc_args.write.data.nb_len;
	req->u.write.wr_stable = (enum fs_stable)nc->nc_args.write.stable;
	nfs3_submit(nc, FS_OP_WRITE);
	return NFS3_OK;
}

static void nfs3_write_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	nc->nc_res.write.status = nfs3_req_status(nc);
	nc->nc_res.write.wcc = &req->u.write.wr_wcc;
	nc->nc_res.write.count = req->u.write.wr_count;
	nc->nc_res.write.committed = (uint32_t)req->u.write.wr_committed;
	fs_write_verifier(req->fr_fs, nc->nc_res.write.verf);
}

static uint32_t nfs3_create_common(struct nfs3_call *nc)
{
	uint32_t st = nfs3_take_name(&nc->nc_args.create.where.da_name, nc->nc_name, NFS3_NAME_NEW);
	if (st != NFS3_OK)
		return st;
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.create, 0, sizeof(req->u.create));
	req->u.create.cr_name = nc->nc_name;
	req->u.create.cr_mode = (enum fs_create_mode)nc->nc_args.create.mode;
	req->u.create.cr_sattr = nc->nc_args.create.sattr;
	memcpy(req->u.create.cr_verf, nc->nc_args.create.verf, sizeof(req->u.create.cr_verf));
	return NFS3_OK;
}

static uint32_t nfs3_create_start(struct nfs3_call *nc)
{
	uint32_t st = nfs3_create_common(nc);
	if (st == NFS3_OK)
		nfs3_submit(nc, FS_OP_CREATE);
	return st;
}

static uint32_t nfs3_mkdir_start(struct nfs3_call *nc)
{
	uint32_t st = nfs3_create_common(nc);
	if (st == NFS3_OK)
		nfs3_submit(nc, FS_OP_MKDIR);
	return st;
}

static uint32_t nfs3_symlink_start(struct nfs3_call *nc)
{
	const struct nfs3_bytes *target = &nc->nc_args.create.target;
	if (target->nb_len > FS_PATH_MAX)
		return NFS3ERR_NAMETOOLONG;
	if (target->nb_len == 0 || memchr(target->nb_data, '\0', target->nb_len))
		return NFS3ERR_INVAL;
	uint32_t st = nfs3_create_common(nc);
	if (st != NFS3_OK)
		return st;
	memcpy(nc->nc_target, target->nb_data, target->nb_len);
	nc->nc_target[target->nb_len] = '\0';
	nc->nc_req.u.create.cr_link_target = nc->nc_target;
	nfs3_submit(nc, FS_OP_SYMLINK);
	return NFS3_OK;
}

static uint32_t nfs3_mknod_start(struct nfs3_call *nc)
{
	uint32_t type = nc->nc_args.create.type;
	if (type != FS_CHR && type != FS_BLK && type != FS_SOCK && type != FS_FIFO)
		return NFS3ERR_BADTYPE;
	uint32_t st = nfs3_create_common(nc);
	if (st != NFS3_OK)
		return st;
	nc->nc_req.u.create.cr_type = (enum fs_type)type;
	nc->nc_req.u.create.cr_rdev_major = nc->nc_args.create.major;
	nc->nc_req.u.create.cr_rdev_minor = nc->nc_args.create.minor;
	nfs3_submit(nc, FS_OP_MKNOD);
	return NFS3_OK;
}

static void nfs3_create_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	nc->nc_res.create.status = nfs3_req_status(nc);
	if (nc->nc_res.create.status == NFS3_OK) {
		nfs_handle_encode(&nc->nc_svc->ns_key, nc->nc_rt->ner_fsid, &req->u.create.cr_obj,
				  &nc->nc_fh);
		nc->nc_res.create.fh = &nc->nc_fh;
		nc->nc_res.create.attr =
			nfs3_attr_if(req->u.create.cr_attr_valid, &req->u.create.cr_attr);
	}
	nc->nc_res.create.dir_wcc = &req->u.create.cr_dir_wcc;
}

static uint32_t nfs3_remove_common(struct nfs3_call *nc, enum fs_op op)
{
	uint32_t st = nfs3_take_name(&nc->nc_args.dirop.da_name, nc->nc_name, NFS3_NAME_OLD);
	if (st != NFS3_OK)
		return st;
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.remove, 0, sizeof(req->u.remove));
	req->u.remove.rm_name = nc->nc_name;
	nfs3_submit(nc, op);
	return NFS3_OK;
}

static uint32_t nfs3_remove_start(struct nfs3_call *nc)
{
	return nfs3_remove_common(nc, FS_OP_REMOVE);
}

static uint32_t nfs3_rmdir_start(struct nfs3_call *nc)
{
	return nfs3_remove_common(nc, FS_OP_RMDIR);
}

static void nfs3_remove_done(struct nfs3_call *nc)
{
	nc->nc_res.wccstat.status = nfs3_req_status(nc);
	nc->nc_res.wccstat.wcc = &nc->nc_req.u.remove.rm_dir_wcc;
}

static uint32_t nfs3_rename_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.rename, 0, sizeof(req->u.rename));
	uint32_t st = nfs3_resolve_second(nc, &nc->nc_args.rename.to.da_dir, &req->u.rename.rn_to_dir);
	if (st == NFS3_OK)
		st = nfs3_take_name(&nc->nc_args.rename.from.da_name, nc->nc_name, NFS3_NAME_OLD);
	if (st == NFS3_OK)
		st = nfs3_take_name(&nc->nc_args.rename.to.da_name, nc->nc_name2, NFS3_NAME_OLD);
	if (st != NFS3_OK)
		return st;
	req->u.rename.rn_from_name = nc->nc_name;
	req->u.rename.rn_to_name = nc->nc_name2;
	nfs3_submit(nc, FS_OP_RENAME);
	return NFS3_OK;
}

static void nfs3_rename_done(struct nfs3_call *nc)
{
	nc->nc_res.rename.status = nfs3_req_status(nc);
	nc->nc_res.rename.from_wcc = &nc->nc_req.u.rename.rn_from_wcc;
	nc->nc_res.rename.to_wcc = &nc->nc_req.u.rename.rn_to_wcc;
}

static uint32_t nfs3_link_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.link, 0, sizeof(req->u.link));
	uint32_t st = nfs3_resolve_second(nc, &nc->nc_args.link.link.da_dir, &req->u.link.ln_dir);
	if (st == NFS3_OK)
		st = nfs3_take_name(&nc->nc_args.link.link.da_name, nc->nc_name, NFS3_NAME_NEW);
	if (st != NFS3_OK)
		return st;
	req->u.link.ln_name = nc->nc_name;
	nfs3_submit(nc, FS_OP_LINK);
	return NFS3_OK;
}

static void nfs3_link_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	nc->nc_res.link.status = nfs3_req_status(nc);
	nc->nc_res.link.attr = nfs3_attr_if(req->u.link.ln_attr_valid, &req->u.link.ln_attr);
	nc->nc_res.link.dir_wcc = &req->u.link.ln_dir_wcc;
}

/* READDIR and READDIRPLUS. Entries are encoded straight into the reply as the back end emits
 * them, after a hole of NFS3_READDIR_HEAD_MAX bytes for the head (status, directory attributes,
 * cookie verifier), which is only known at completion. Sizes are counted as the RFC encodes them:
 * the whole resok (head at its largest, entries, list terminator and eof) stays within count
 * (READDIRPLUS: maxcount), and for READDIRPLUS the entries' directory part (fileid, name, cookie)
 * within dircount. */
static bool nfs3_readdir_emit(struct fs_req *req, const struct fs_dirent *entry)
{
	struct nfs3_call *nc = SH_CONTAINER_OF(req, struct nfs3_call, nc_req);
	struct xdr_enc *enc = &nc->nc_rpc->rc_res;
	size_t dir_bytes = nfs3_entry_bytes(entry->fd_name_len);
	size_t bytes = dir_bytes;
	const struct nfs_fh *fh = NULL;
	const struct fs_attr *attr = NULL;
	if (entry->fd_name_len > FS_NAME_MAX)
		return false;
	if (req->u.readdir.rd_plus) {
		if (entry->fd_has_obj) {
			nfs_handle_encode(&nc->nc_svc->ns_key, nc->nc_rt->ner_fsid, &entry->fd_obj,
					  &nc->nc_fh);
			fh = &nc->nc_fh;
		}
		attr = nfs3_attr_if(entry->fd_has_attr, &entry->fd_attr);
		bytes = nfs3_entryplus_bytes(entry->fd_name_len, fh, attr != NULL);
	}
	if (nc->nc_rd_used + bytes > nc->nc_rd_limit ||
	    nc->nc_rd_dirused + dir_bytes > nc->nc_rd_dirlimit)
		return false;
	size_t before = xdr_enc_len(enc);
	if (req->u.readdir.rd_plus)
		nfs3_enc_entryplus(enc, entry->fd_fileid, entry->fd_name, entry->fd_name_len,
				   entry->fd_cookie, attr, fh);
	else
		nfs3_enc_entry(enc, entry->fd_fileid, entry->fd_name, entry->fd_name_len,
			       entry->fd_cookie);
	VERIFY(!xdr_enc_ok(enc) || xdr_enc_len(enc) - before == bytes);
	nc->nc_rd_used += bytes;
	nc->nc_rd_dirused += dir_bytes;
	nc->nc_rd_entries++;
	return true;
}

static uint32_t nfs3_readdir_common(struct nfs3_call *nc, bool plus)
{
	struct fs_req *req = &nc->nc_req;
	nc->nc_rd_limit = SH_MIN(nc->nc_args.readdir.count, nfs3_io_max(nc));
	nc->nc_rd_dirlimit = nc->nc_args.readdir.dircount;
	nc->nc_rd_used = NFS3_READDIR_HEAD_MAX + NFS3_READDIR_TAIL_BYTES;
	nc->nc_rd_dirused = 0;
	nc->nc_rd_entries = 0;
	if (nc->nc_rd_limit < nc->nc_rd_used)
		return NFS3ERR_TOOSMALL;
	if (!xdr_reserve(&nc->nc_rpc->rc_res, NFS3_READDIR_HEAD_MAX))
		return NFS3ERR_SERVERFAULT;
	memset(&req->u.readdir, 0, sizeof(req->u.readdir));
	req->u.readdir.rd_cookie = nc->nc_args.readdir.cookie;
	memcpy(req->u.readdir.rd_verf, nc->nc_args.readdir.verf, sizeof(req->u.readdir.rd_verf));
	req->u.readdir.rd_plus = plus;
	req->u.readdir.rd_emit = nfs3_readdir_emit;
	nfs3_submit(nc, FS_OP_READDIR);
	return NFS3_OK;
}

static uint32_t nfs3_readdir_start(struct nfs3_call *nc)
{
	return nfs3_readdir_common(nc, false);
}

static uint32_t nfs3_readdirplus_start(struct nfs3_call *nc)
{
	return nfs3_readdir_common(nc, true);
}

static void nfs3_readdir_done(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	struct xdr_enc *enc = &nc->nc_rpc->rc_res;
	uint32_t st = nfs3_req_status(nc);
	const struct fs_attr *dir_attr =
		nfs3_attr_if(req->u.readdir.rd_attr_valid, &req->u.readdir.rd_attr);
	if (st == NFS3_OK && nc->nc_rd_entries == 0 && !req->u.readdir.rd_eof)
		st = NFS3ERR_TOOSMALL; /* not even one entry fit */
	if (st == NFS3_OK) {
		nfs3_enc_readdir_tail(enc, req->u.readdir.rd_eof);
		nfs3_enc_readdir_head(enc, dir_attr, req->u.readdir.rd_verf_out);
		nc->nc_encoded = true;
		return;
	}
	/* drop any entries already encoded: the failure arm has none */
	xdr_enc_init(enc, enc->xe_buf, enc->xe_cap);
	nc->nc_res.readdir.status = st;
	nc->nc_res.readdir.dir_attr = dir_attr;
}

static uint32_t nfs3_fsstat_start(struct nfs3_call *nc)
{
	memset(&nc->nc_req.u.fsstat, 0, sizeof(nc->nc_req.u.fsstat));
	nfs3_submit(nc, FS_OP_FSSTAT);
	return NFS3_OK;
}

static void nfs3_fsstat_done(struct nfs3_call *nc)
{
	const struct fs_req *req = &nc->nc_req;
	nc->nc_res.fsstat.status = nfs3_req_status(nc);
	nc->nc_res.fsstat.attr = nfs3_attr_if(req->u.fsstat.st_attr_valid, &req->u.fsstat.st_attr);
	nc->nc_res.fsstat.tbytes = req->u.fsstat.st_total_bytes;
	nc->nc_res.fsstat.fbytes = req->u.fsstat.st_free_bytes;
	nc->nc_res.fsstat.abytes = req->u.fsstat.st_avail_bytes;
	nc->nc_res.fsstat.tfiles = req->u.fsstat.st_total_files;
	nc->nc_res.fsstat.ffiles = req->u.fsstat.st_free_files;
	nc->nc_res.fsstat.afiles = req->u.fsstat.st_avail_files;
	nc->nc_res.fsstat.invarsec = req->u.fsstat.st_invarsec;
}

/* FSINFO and PATHCONF: static properties from fs_info, plus the object's attributes. */
static void nfs3_fsinfo_done(struct nfs3_call *nc)
{
	struct fs_info info;
	memset(&info, 0, sizeof(info));
	fs_info(nc->nc_req.fr_fs, &info);
	nc->nc_res.fsinfo.status = nfs3_req_status(nc);
	nc->nc_res.fsinfo.attr = nc->nc_res.fsinfo.status == NFS3_OK ?
					 &nc->nc_req.u.getattr.ga_attr : NULL;
	/* 1 MiB over TCP; over UDP what fits one datagram, so a client that follows the advice
	 * never asks for a reply that cannot be sent. */
	uint32_t io_max = nfs3_io_max(nc);
	nc->nc_res.fsinfo.rtmax = io_max;
	nc->nc_res.fsinfo.rtpref = io_max;
	nc->nc_res.fsinfo.rtmult = 4096u;
	nc->nc_res.fsinfo.wtmax = io_max;
	nc->nc_res.fsinfo.wtpref = io_max;
	nc->nc_res.fsinfo.wtmult = 4096u;
	nc->nc_res.fsinfo.dtpref = NFS3_DTPREF;
	nc->nc_res.fsinfo.maxfilesize = info.fi_max_file_size;
	nc->nc_res.fsinfo.time_delta = info.fi_time_delta;
	nc->nc_res.fsinfo.properties = NFS3_FSF_HOMOGENEOUS |
				       (info.fi_has_links ? NFS3_FSF_LINK : 0u) |
				       (info.fi_has_symlinks ? NFS3_FSF_SYMLINK : 0u) |
				       (info.fi_can_set_time ? NFS3_FSF_CANSETTIME : 0u);
}

static void nfs3_pathconf_done(struct nfs3_call *nc)
{
	struct fs_info info;
	memset(&info, 0, sizeof(info));
	fs_info(nc->nc_req.fr_fs, &info);
	nc->nc_res.pathconf.status = nfs3_req_status(nc);
	nc->nc_res.pathconf.attr = nc->nc_res.pathconf.status == NFS3_OK ?
					   &nc->nc_req.u.getattr.ga_attr : NULL;
	nc->nc_res.pathconf.linkmax = info.fi_link_max;
	nc->nc_res.pathconf.name_max = info.fi_name_max;
	nc->nc_res.pathconf.no_trunc = info.fi_no_trunc;
	nc->nc_res.pathconf.chown_restricted = info.fi_chown_restricted;
	nc->nc_res.pathconf.case_insensitive = info.fi_case_insensitive;
	nc->nc_res.pathconf.case_preserving = info.fi_case_preserving;
}

static uint32_t nfs3_commit_start(struct nfs3_call *nc)
{
	struct fs_req *req = &nc->nc_req;
	memset(&req->u.commit, 0, sizeof(req->u.commit));
	req->u.commit.cm_offset = nc->nc_args.read.offset;
	req->u.commit.cm_count = nc->nc_args.read.count;
	nfs3_submit(nc, FS_OP_COMMIT);
	return NFS3_OK;
}

static void nfs3_commit_done(struct nfs3_call *nc)
{
	nc->nc_res.write.status = nfs3_req_status(nc);
	nc->nc_res.write.wcc = &nc->nc_req.u.commit.cm_wcc;
	fs_write_verifier(nc->nc_req.fr_fs, nc->nc_res.write.verf);
}

/* Reply body bounds (the sizes in nfs_impl.h; RFC 1813 section 3.3 result layouts). */
#define NFS3_RES_ATTRSTAT (4u + NFS3_FATTR_BYTES)
#define NFS3_RES_WCCSTAT (4u + NFS3_WCC_MAX)
#define NFS3_RES_LOOKUP (4u + 4u + NFS3_FHSIZE + 2u * NFS3_POST_OP_ATTR_MAX)
#define NFS3_RES_ACCESS (4u + NFS3_POST_OP_ATTR_MAX + 4u)
#define NFS3_RES_READLINK (4u + NFS3_POST_OP_ATTR_MAX + 4u + FS_PATH_MAX + 4u)
#define NFS3_RES_READ (4u + NFS3_POST_OP_ATTR_MAX + 12u)
#define NFS3_RES_WRITE (4u + NFS3_WCC_MAX + 8u + NFS3_WRITEVERFSIZE)
#define NFS3_RES_CREATE (4u + NFS3_POST_OP_FH_MAX + NFS3_POST_OP_ATTR_MAX + NFS3_WCC_MAX)
#define NFS3_RES_RENAME (4u + 2u * NFS3_WCC_MAX)
#define NFS3_RES_LINK (4u + NFS3_POST_OP_ATTR_MAX + NFS3_WCC_MAX)
#define NFS3_RES_FSSTAT (4u + NFS3_POST_OP_ATTR_MAX + 6u * 8u + 4u)
#define NFS3_RES_FSINFO (4u + NFS3_POST_OP_ATTR_MAX + 7u * 4u + 8u + 8u + 4u)
#define NFS3_RES_PATHCONF (4u + NFS3_POST_OP_ATTR_MAX + 6u * 4u)
#define NFS3_RES_COMMIT (4u + NFS3_WCC_MAX + NFS3_WRITEVERFSIZE)

static const struct nfs3_proc_info nfs3_procs[NFS3PROC_COUNT] = {
	[NFS3PROC_NULL] = {"NULL", nfs3_dec_void, NULL, NULL, nfs3_enc_void, 0, false},
	[NFS3PROC_GETATTR] = {"GETATTR", nfs3_dec_fh, nfs3_getattr_start, nfs3_getattr_done,
			      nfs3_enc_getattr, NFS3_RES_ATTRSTAT, false},
	[NFS3PROC_SETATTR] = {"SETATTR", nfs3_dec_setattr, nfs3_setattr_start, nfs3_setattr_done,
			      nfs3_enc_wccstat, NFS3_RES_WCCSTAT, true},
	[NFS3PROC_LOOKUP] = {"LOOKUP", nfs3_dec_dirop, nfs3_lookup_start, nfs3_lookup_done,
			     nfs3_enc_lookup, NFS3_RES_LOOKUP, false},
	[NFS3PROC_ACCESS] = {"ACCESS", nfs3_dec_access, nfs3_access_start, nfs3_access_done,
			     nfs3_enc_access, NFS3_RES_ACCESS, false},
	[NFS3PROC_READLINK] = {"READLINK", nfs3_dec_fh, nfs3_readlink_start, nfs3_readlink_done,
			       nfs3_enc_readlink, NFS3_RES_READLINK, false},
	[NFS3PROC_READ] = {"READ", nfs3_dec_read, nfs3_read_start, nfs3_read_done, nfs3_enc_read,
			   NFS3_RES_READ, false},
	[NFS3PROC_WRITE] = {"WRITE", nfs3_dec_write, nfs3_write_start, nfs3_write_done,
			    nfs3_enc_write, NFS3_RES_WRITE, true},
	[NFS3PROC_CREATE] = {"CREATE", nfs3_dec_create, nfs3_create_start, nfs3_create_done,
			     nfs3_enc_create, NFS3_RES_CREATE, true},
	[NFS3PROC_MKDIR] = {"MKDIR", nfs3_dec_mkdir, nfs3_mkdir_start, nfs3_create_done,
			    nfs3_enc_create, NFS3_RES_CREATE, true},
	[NFS3PROC_SYMLINK] = {"SYMLINK", nfs3_dec_symlink, nfs3_symlink_start, nfs3_create_done,
			      nfs3_enc_create, NFS3_RES_CREATE, true},
	[NFS3PROC_MKNOD] = {"MKNOD", nfs3_dec_mknod, nfs3_mknod_start, nfs3_create_done,
			    nfs3_enc_create, NFS3_RES_CREATE, true},
	[NFS3PROC_REMOVE] = {"REMOVE", nfs3_dec_dirop, nfs3_remove_start, nfs3_remove_done,
			     nfs3_enc_wccstat, NFS3_RES_WCCSTAT, true},
	[NFS3PROC_RMDIR] = {"RMDIR", nfs3_dec_dirop, nfs3_rmdir_start, nfs3_remove_done,
			    nfs3_enc_wccstat, NFS3_RES_WCCSTAT, true},
	[NFS3PROC_RENAME] = {"RENAME", nfs3_dec_rename, nfs3_rename_start, nfs3_rename_done,
			     nfs3_enc_rename, NFS3_RES_RENAME, true},
	[NFS3PROC_LINK] = {"LINK", nfs3_dec_link, nfs3_link_start, nfs3_link_done, nfs3_enc_link,
			   NFS3_RES_LINK, true},
	[NFS3PROC_READDIR] = {"READDIR", nfs3_dec_readdir, nfs3_readdir_start, nfs3_readdir_done,
			      nfs3_enc_readdir_fail, 0, false},
	[NFS3PROC_READDIRPLUS] = {"READDIRPLUS", nfs3_dec_readdirplus, nfs3_readdirplus_start,
				  nfs3_readdir_done, nfs3_enc_readdir_fail, 0, false},
	[NFS3PROC_FSSTAT] = {"FSSTAT", nfs3_dec_fh, nfs3_fsstat_start, nfs3_fsstat_done,
			     nfs3_enc_fsstat, NFS3_RES_FSSTAT, false},
	[NFS3PROC_FSINFO] = {"FSINFO", nfs3_dec_fh, nfs3_getattr_start, nfs3_fsinfo_done,
			     nfs3_enc_fsinfo, NFS3_RES_FSINFO, false},
	[NFS3PROC_PATHCONF] = {"PATHCONF", nfs3_dec_fh, nfs3_getattr_start, nfs3_pathconf_done,
			       nfs3_enc_pathconf, NFS3_RES_PATHCONF, false},
	[NFS3PROC_COMMIT] = {"COMMIT", nfs3_dec_commit, nfs3_commit_start, nfs3_commit_done,
			     nfs3_enc_commit, NFS3_RES_COMMIT, false},
};

nfs3_dec_fn nfs3_proc_decoder(uint32_t proc)
{
	return proc < NFS3PROC_COUNT ? nfs3_procs[proc].npi_decode : NULL;
}

static size_t nfs3_res_size(const struct nfs3_call *nc)
{
	if (nc->nc_proc->npi_res_max)
		return nc->nc_proc->npi_res_max;
	/* READDIR(PLUS): the client's count, bounded, and never below the failure arm */
	size_t n = SH_MIN(nc->nc_args.readdir.count, nfs3_io_max(nc));
	return SH_MAX(n, (size_t)NFS3_READDIR_HEAD_MAX + NFS3_READDIR_TAIL_BYTES);
}

/* Encodes nc_res (unless already encoded), answers and recycles the state. */
static void nfs3_finish(struct nfs3_call *nc)
{
	struct rpc_call *call = nc->nc_rpc;
	if (!nc->nc_encoded)
		nc->nc_proc->npi_encode(&call->rc_res, &nc->nc_res);
	nfs3_call_put(nc);
	rpc_reply_success(call);
}

static void nfs3_fail(struct nfs3_call *nc, uint32_t status)
{
	memset(&nc->nc_res, 0, sizeof(nc->nc_res));
	nc->nc_res.common.status = status;
	nc->nc_encoded = false;
	nfs3_finish(nc);
}

static void nfs3_fs_done(struct fs_req *req)
{
	struct nfs3_call *nc = SH_CONTAINER_OF(req, struct nfs3_call, nc_req);
	nc->nc_proc->npi_done(nc);
	nfs3_finish(nc);
}

static void nfs3_dispatch(struct rpc_call *call)
{
	struct nfs_service *svc = call->rc_prog_ctx;
	if (call->rc_proc == NFS3PROC_NULL) {
		if (rpc_call_res_init(call, 0) < 0)
			rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		else
			rpc_reply_success(call);
		return;
	}
	if (call->rc_proc >= NFS3PROC_COUNT) {
		rpc_reply_accept_error(call, RPC_PROC_UNAVAIL);
		return;
	}
	if (call->rc_cred.rcr_flavor != RPC_AUTH_SYS && call->rc_cred.rcr_flavor != RPC_AUTH_NONE) {
		rpc_reply_auth_error(call, RPC_AUTH_TOOWEAK);
		return;
	}
	struct nfs3_call *nc = nfs3_call_get(svc, call);
	if (!nc) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	nc->nc_proc = &nfs3_procs[call->rc_proc];
	if (nc->nc_proc->npi_decode(&call->rc_args, &nc->nc_args) < 0) {
		nfs3_call_put(nc);
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	if (rpc_call_res_init(call, nfs3_res_size(nc)) < 0) {
		nfs3_call_put(nc);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	uint32_t st = nfs3_resolve(nc, &nc->nc_args.fh);
	if (st == NFS3_STATUS_TOOWEAK) {
		nfs3_call_put(nc);
		rpc_reply_auth_error(call, RPC_AUTH_TOOWEAK);
		return;
	}
	if (st == NFS3_OK && nc->nc_proc->npi_modifies && !(nc->nc_rule->ncr_flags & NFS_EXP_RW))
		st = NFS3ERR_ROFS;
	if (st != NFS3_OK) {
		nfs3_fail(nc, st);
		return;
	}
	struct fs_req *req = &nc->nc_req;
	req->fr_cred = &nc->nc_cred;
	req->fr_loop = call->rc_loop;
	req->fr_done = nfs3_fs_done;
	req->fr_done_arg = nc;
	st = nc->nc_proc->npi_start(nc);
	/* on NFS3_OK the request is the back end's now (and may already be answered) */
	if (st != NFS3_OK)
		nfs3_fail(nc, st);
}

/* Non-idempotent procedures go through the duplicate request cache, as knfsd caches them. */
#define NFS3_DESC(name, non_idem) {name, nfs3_dispatch, non_idem}
static const struct rpc_proc_desc nfs3_proc_descs[NFS3PROC_COUNT] = {
	[NFS3PROC_NULL] = NFS3_DESC("NULL", false),
	[NFS3PROC_GETATTR] = NFS3_DESC("GETATTR", false),
	[NFS3PROC_SETATTR] = NFS3_DESC("SETATTR", true),
	[NFS3PROC_LOOKUP] = NFS3_DESC("LOOKUP", false),
	[NFS3PROC_ACCESS] = NFS3_DESC("ACCESS", false),
	[NFS3PROC_READLINK] = NFS3_DESC("READLINK", false),
	[NFS3PROC_READ] = NFS3_DESC("READ", false),
	[NFS3PROC_WRITE] = NFS3_DESC("WRITE", false),
	[NFS3PROC_CREATE] = NFS3_DESC("CREATE", true),
	[NFS3PROC_MKDIR] = NFS3_DESC("MKDIR", true),
	[NFS3PROC_SYMLINK] = NFS3_DESC("SYMLINK", true),
	[NFS3PROC_MKNOD] = NFS3_DESC("MKNOD", true),
	[NFS3PROC_REMOVE] = NFS3_DESC("REMOVE", true),
	[NFS3PROC_RMDIR] = NFS3_DESC("RMDIR", true),
	[NFS3PROC_RENAME] = NFS3_DESC("RENAME", true),
	[NFS3PROC_LINK] = NFS3_DESC("LINK", true),
	[NFS3PROC_READDIR] = NFS3_DESC("READDIR", false),
	[NFS3PROC_READDIRPLUS] = NFS3_DESC("READDIRPLUS", false),
	[NFS3PROC_FSSTAT] = NFS3_DESC("FSSTAT", false),
	[NFS3PROC_FSINFO] = NFS3_DESC("FSINFO", false),
	[NFS3PROC_PATHCONF] = NFS3_DESC("PATHCONF", false),
	[NFS3PROC_COMMIT] = NFS3_DESC("COMMIT", false),
};

static const struct rpc_version_desc nfs3_versions[] = {
	{NFS3_VERSION, nfs3_proc_descs, NFS3PROC_COUNT},
};

const struct rpc_program_desc nfs3_program = {
	"nfs", NFS3_PROGRAM, nfs3_versions, SH_ARRAY_SIZE(nfs3_versions),
};
