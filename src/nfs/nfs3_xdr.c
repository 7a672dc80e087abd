/* nfs3_xdr.c: XDR codecs for the NFSv3 arguments and results (RFC 1813 sections 2.5, 2.6, 3.3).
 *
 * No procedure logic lives here: decoders turn the call's bytes into union nfs3_args (opaques and
 * strings point into the record, never copied) and encoders write union nfs3_res. Every decoder
 * relies on the cursor's sticky failure (xdr.h) and checks it once at the end; a value outside
 * its enum is a decoding failure, which the caller answers GARBAGE_ARGS. */
#include <errno.h>
#include <string.h>

#include "nfs/nfs_impl.h"

/* ---- decoding ---- */

static inline int nfs3_dec_done(const struct xdr_dec *dec)
{
	return xdr_dec_ok(dec) ? 0 : -EBADMSG;
}

static void nfs3_get_bytes(struct xdr_dec *dec, uint32_t max, struct nfs3_bytes *out)
{
	out->nb_data = xdr_get_opaque(dec, max, &out->nb_len);
}

static void nfs3_get_fh(struct xdr_dec *dec, struct nfs3_bytes *out)
{
	nfs3_get_bytes(dec, NFS3_FH_DECODE_MAX, out);
}

static void nfs3_get_diropargs(struct xdr_dec *dec, struct nfs3_diropargs *out)
{
	nfs3_get_fh(dec, &out->da_dir);
	nfs3_get_bytes(dec, NFS3_NAME_DECODE_MAX, &out->da_name);
}

static void nfs3_get_time(struct xdr_dec *dec, struct fs_time *t)
{
	t->ft_sec = (int64_t)xdr_get_u32(dec);
	t->ft_nsec = xdr_get_u32(dec);
	if (t->ft_nsec >= 1000000000u)
		xdr_dec_fail(dec);
}

static enum fs_time_how nfs3_get_time_how(struct xdr_dec *dec, struct fs_time *t)
{
	uint32_t how = xdr_get_u32(dec);
	switch (how) {
	case FS_TIME_DONT_CHANGE:
	case FS_TIME_SERVER:
		return (enum fs_time_how)how;
	case FS_TIME_CLIENT:
		nfs3_get_time(dec, t);
		return FS_TIME_CLIENT;
	default:
		xdr_dec_fail(dec);
		return FS_TIME_DONT_CHANGE;
	}
}

/* sattr3 (RFC 1813 section 2.6) */
static void nfs3_get_sattr(struct xdr_dec *dec, struct fs_sattr *sa)
{
	memset(sa, 0, sizeof(*sa));
	if ((sa->fs_set_mode = xdr_get_bool(dec)))
		sa->fs_mode = xdr_get_u32(dec) & 07777u;
	if ((sa->fs_set_uid = xdr_get_bool(dec)))
		sa->fs_uid = xdr_get_u32(dec);
	if ((sa->fs_set_gid = xdr_get_bool(dec)))
		sa->fs_gid = xdr_get_u32(dec);
	if ((sa->fs_set_size = xdr_get_bool(dec)))
		sa->fs_size = xdr_get_u64(dec);
	sa->fs_atime_how = nfs3_get_time_how(dec, &sa->fs_atime);
	sa->fs_mtime_how = nfs3_get_time_how(dec, &sa->fs_mtime);
}

int nfs3_dec_void(struct xdr_dec *dec, union nfs3_args *args)
{
	(void)args;
	return nfs3_dec_done(dec);
}

int nfs3_dec_fh(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->fh);
	return nfs3_dec_done(dec);
}

int nfs3_dec_setattr(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->setattr.fh);
	nfs3_get_sattr(dec, &args->setattr.sattr);
	args->setattr.guard = xdr_get_bool(dec);
	if (args->setattr.guard)
		nfs3_get_time(dec, &args->setattr.guard_ctime);
	return nfs3_dec_done(dec);
}

int nfs3_dec_dirop(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_diropargs(dec, &args->dirop);
	return nfs3_dec_done(dec);
}

int nfs3_dec_access(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->access.fh);
	args->access.access = xdr_get_u32(dec);
	return nfs3_dec_done(dec);
}

int nfs3_dec_read(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->read.fh);
	args->read.offset = xdr_get_u64(dec);
	args->read.count = xdr_get_u32(dec);
	return nfs3_dec_done(dec);
}

int nfs3_dec_commit(struct xdr_dec *dec, union nfs3_args *args)
{
	return nfs3_dec_read(dec, args); /* same shape: fh, offset, count */
}

int nfs3_dec_write(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->write.fh);
	args->write.offset = xdr_get_u64(dec);
	args->write.count = xdr_get_u32(dec);
	args->write.stable = xdr_get_u32(dec);
	if (args->write.stable > FS_FILE_SYNC)
		xdr_dec_fail(dec);
	nfs3_get_bytes(dec, NFS3_IO_MAX, &args->write.data);
	/* RFC 1813 3.3.7: count is the data's length; a mismatch is a malformed call */
	if (xdr_dec_ok(dec) && args->write.data.nb_len != args->write.count)
		xdr_dec_fail(dec);
	return nfs3_dec_done(dec);
}

static void nfs3_create_common_init(union nfs3_args *args)
{
	memset(&args->create, 0, sizeof(args->create));
}

int nfs3_dec_create(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_create_common_init(args);
	nfs3_get_diropargs(dec, &args->create.where);
	args->create.mode = xdr_get_u32(dec);
	switch (args->create.mode) {
	case FS_CREATE_UNCHECKED:
	case FS_CREATE_GUARDED:
		nfs3_get_sattr(dec, &args->create.sattr);
		break;
	case FS_CREATE_EXCLUSIVE: {
		const uint8_t *verf = xdr_get_fixed(dec, NFS3_CREATEVERFSIZE);
		if (verf)
			memcpy(args->create.verf, verf, NFS3_CREATEVERFSIZE);
		break;
	}
	default:
		xdr_dec_fail(dec);
	}
	return nfs3_dec_done(dec);
}

int nfs3_dec_mkdir(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_create_common_init(args);
	nfs3_get_diropargs(dec, &args->create.where);
	nfs3_get_sattr(dec, &args->create.sattr);
	return nfs3_dec_done(dec);
}

int nfs3_dec_symlink(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_create_common_init(args);
	nfs3_get_diropargs(dec, &args->create.where);
	nfs3_get_sattr(dec, &args->create.sattr);
	nfs3_get_bytes(dec, NFS3_NAME_DECODE_MAX, &args->create.target);
	return nfs3_dec_done(dec);
}

int nfs3_dec_mknod(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_create_common_init(args);
	nfs3_get_diropargs(dec, &args->create.where);
	args->create.type = xdr_get_u32(dec);
	switch (args->create.type) {
	case FS_CHR:
	case FS_BLK:
		nfs3_get_sattr(dec, &args->create.sattr);
		args->create.major = xdr_get_u32(dec);
		args->create.minor = xdr_get_u32(dec);
		break;
	case FS_SOCK:
	case FS_FIFO:
		nfs3_get_sattr(dec, &args->create.sattr);
		break;
	case FS_REG:
	case FS_DIR:
	case FS_LNK:
		break; /* valid ftype3 with a void arm; the procedure answers NFS3ERR_BADTYPE */
	default:
		xdr_dec_fail(dec);
	}
	return nfs3_dec_done(dec);
}

int nfs3_dec_rename(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_diropargs(dec, &args->rename.from);
	nfs3_get_diropargs(dec, &args->rename.to);
	return nfs3_dec_done(dec);
}

int nfs3_dec_link(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->link.fh);
	nfs3_get_diropargs(dec, &args->link.link);
	return nfs3_dec_done(dec);
}

static void nfs3_get_readdir_head(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_fh(dec, &args->readdir.dir);
	args->readdir.cookie = xdr_get_u64(dec);
	const uint8_t *verf = xdr_get_fixed(dec, NFS3_COOKIEVERFSIZE);
	if (verf)
		memcpy(args->readdir.verf, verf, NFS3_COOKIEVERFSIZE);
}

int nfs3_dec_readdir(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_readdir_head(dec, args);
	args->readdir.count = xdr_get_u32(dec);
	args->readdir.dircount = args->readdir.count;
	return nfs3_dec_done(dec);
}

int nfs3_dec_readdirplus(struct xdr_dec *dec, union nfs3_args *args)
{
	nfs3_get_readdir_head(dec, args);
	args->readdir.dircount = xdr_get_u32(dec);
	args->readdir.count = xdr_get_u32(dec);
	return nfs3_dec_done(dec);
}

/* ---- encoding ---- */

static void nfs3_put_time(struct xdr_enc *enc, const struct fs_time *t)
{
	/* nfstime3 seconds are unsigned 32-bit; times before 1970 are clamped to 0 */
	xdr_put_u32(enc, t->ft_sec < 0 ? 0u : (uint32_t)t->ft_sec);
	xdr_put_u32(enc, t->ft_nsec);
}

void nfs3_enc_fattr(struct xdr_enc *enc, const struct fs_attr *a)
{
	uint8_t *p = xdr_reserve(enc, NFS3_FATTR_BYTES);
	if (!p)
		return;
	struct xdr_enc sub;
	xdr_enc_init(&sub, p, NFS3_FATTR_BYTES);
	xdr_put_u32(&sub, (uint32_t)a->fa_type);
	xdr_put_u32(&sub, a->fa_mode & 07777u);
	xdr_put_u32(&sub, a->fa_nlink);
	xdr_put_u32(&sub, a->fa_uid);
	xdr_put_u32(&sub, a->fa_gid);
	xdr_put_u64(&sub, a->fa_size);
	xdr_put_u64(&sub, a->fa_used_bytes);
	xdr_put_u32(&sub, a->fa_rdev_major);
	xdr_put_u32(&sub, a->fa_rdev_minor);
	xdr_put_u64(&sub, a->fa_fsid);
	xdr_put_u64(&sub, a->fa_fileid);
	nfs3_put_time(&sub, &a->fa_atime);
	nfs3_put_time(&sub, &a->fa_mtime);
	nfs3_put_time(&sub, &a->fa_ctime);
	VERIFY(xdr_enc_ok(&sub) && xdr_enc_len(&sub) == NFS3_FATTR_BYTES);
}

void nfs3_enc_post_op_attr(struct xdr_enc *enc, const struct fs_attr *attr)
{
	xdr_put_bool(enc, attr != NULL);
	if (attr)
		nfs3_enc_fattr(enc, attr);
}

void nfs3_enc_wcc(struct xdr_enc *enc, const struct fs_wcc *wcc)
{
	if (!wcc) {
		xdr_put_bool(enc, false);
		xdr_put_bool(enc, false);
		return;
	}
	xdr_put_bool(enc, wcc->fw_pre_valid);
	if (wcc->fw_pre_valid) {
		xdr_put_u64(enc, wcc->fw_pre_size);
		nfs3_put_time(enc, &wcc->fw_pre_mtime);
		nfs3_put_time(enc, &wcc->fw_pre_ctime);
	}
	nfs3_enc_post_op_attr(enc, wcc->fw_post_valid ? &wcc->fw_post : NULL);
}

static void nfs3_put_fh(struct xdr_enc *enc, const struct nfs_fh *fh)
{
	xdr_put_opaque(enc, fh->nf_bytes, fh->nf_len);
}

static void nfs3_put_post_op_fh(struct xdr_enc *enc, const struct nfs_fh *fh)
{
	xdr_put_bool(enc, fh != NULL);
	if (fh)
		nfs3_put_fh(enc, fh);
}

void nfs3_enc_void(struct xdr_enc *enc, const union nfs3_res *res)
{
	(void)enc;
	(void)res;
}

void nfs3_enc_getattr(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->attrstat.status);
	if (res->attrstat.status == NFS3_OK) {
		VERIFY(res->attrstat.attr);
		nfs3_enc_fattr(enc, res->attrstat.attr);
	}
}

void nfs3_enc_wccstat(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->wccstat.status);
	nfs3_enc_wcc(enc, res->wccstat.wcc);
}

void nfs3_enc_lookup(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->lookup.status);
	if (res->lookup.status == NFS3_OK) {
		VERIFY(res->lookup.fh);
		nfs3_put_fh(enc, res->lookup.fh);
		nfs3_enc_post_op_attr(enc, res->lookup.obj_attr);
	}
	nfs3_enc_post_op_attr(enc, res->lookup.dir_attr);
}

void nfs3_enc_access(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->access.status);
	nfs3_enc_post_op_attr(enc, res->access.attr);
	if (res->access.status == NFS3_OK)
		xdr_put_u32(enc, res->access.access);
}

void nfs3_enc_readlink(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->readlink.status);
	nfs3_enc_post_op_attr(enc, res->readlink.attr);
	if (res->readlink.status == NFS3_OK)
		xdr_put_opaque(enc, res->readlink.target, res->readlink.len);
}

void nfs3_enc_read(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->read.status);
	nfs3_enc_post_op_attr(enc, res->read.attr);
	if (res->read.status == NFS3_OK) {
		xdr_put_u32(enc, res->read.count);
		xdr_put_bool(enc, res->read.eof);
		xdr_put_u32(enc, res->read.count); /* data<>'s length; the bytes go as bulk */
	}
}

void nfs3_enc_write(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->write.status);
	nfs3_enc_wcc(enc, res->write.wcc);
	if (res->write.status == NFS3_OK) {
		xdr_put_u32(enc, res->write.count);
		xdr_put_u32(enc, res->write.committed);
		xdr_put_fixed(enc, res->write.verf, NFS3_WRITEVERFSIZE);
	}
}

void nfs3_enc_commit(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->write.status);
	nfs3_enc_wcc(enc, res->write.wcc);
	if (res->write.status == NFS3_OK)
		xdr_put_fixed(enc, res->write.verf, NFS3_WRITEVERFSIZE);
}

void nfs3_enc_create(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->create.status);
	if (res->create.status == NFS3_OK) {
		nfs3_put_post_op_fh(enc, res->create.fh);
		nfs3_enc_post_op_attr(enc, res->create.attr);
	}
	nfs3_enc_wcc(enc, res->create.dir_wcc);
}

void nfs3_enc_rename(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->rename.status);
	nfs3_enc_wcc(enc, res->rename.from_wcc);
	nfs3_enc_wcc(enc, res->rename.to_wcc);
}

void nfs3_enc_link(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->link.status);
	nfs3_enc_post_op_attr(enc, res->link.attr);
	nfs3_enc_wcc(enc, res->link.dir_wcc);
}

void nfs3_enc_readdir_fail(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->readdir.status);
	nfs3_enc_post_op_attr(enc, res->readdir.dir_attr);
}

void nfs3_enc_fsstat(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->fsstat.status);
	nfs3_enc_post_op_attr(enc, res->fsstat.attr);
	if (res->fsstat.status != NFS3_OK)
		return;
	xdr_put_u64(enc, res->fsstat.tbytes);
	xdr_put_u64(enc, res->fsstat.fbytes);
	xdr_put_u64(enc, res->fsstat.abytes);
	xdr_put_u64(enc, res->fsstat.tfiles);
	xdr_put_u64(enc, res->fsstat.ffiles);
	xdr_put_u64(enc, res->fsstat.afiles);
	xdr_put_u32(enc, res->fsstat.invarsec);
}

void nfs3_enc_fsinfo(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->fsinfo.status);
	nfs3_enc_post_op_attr(enc, res->fsinfo.attr);
	if (res->fsinfo.status != NFS3_OK)
		return;
	xdr_put_u32(enc, res->fsinfo.rtmax);
	xdr_put_u32(enc, res->fsinfo.rtpref);
	xdr_put_u32(enc, res->fsinfo.rtmult);
	xdr_put_u32(enc, res->fsinfo.wtmax);
	xdr_put_u32(enc, res->fsinfo.wtpref);
	xdr_put_u32(enc, res->fsinfo.wtmult);
	xdr_put_u32(enc, res->fsinfo.dtpref);
	xdr_put_u64(enc, res->fsinfo.maxfilesize);
	nfs3_put_time(enc, &res->fsinfo.time_delta);
	xdr_put_u32(enc, res->fsinfo.properties);
}

void nfs3_enc_pathconf(struct xdr_enc *enc, const union nfs3_res *res)
{
	xdr_put_u32(enc, res->pathconf.status);
	nfs3_enc_post_op_attr(enc, res->pathconf.attr);
	if (res->pathconf.status != NFS3_OK)
		return;
	xdr_put_u32(enc, res->pathconf.linkmax);
	xdr_put_u32(enc, res->pathconf.name_max);
	xdr_put_bool(enc, res->pathconf.no_trunc);
	xdr_put_bool(enc, res->pathconf.chown_restricted);
	xdr_put_bool(enc, res->pathconf.case_insensitive);
	xdr_put_bool(enc, res->pathconf.case_preserving);
}

/* ---- READDIR / READDIRPLUS, encoded entry by entry ---- */

size_t nfs3_entry_bytes(uint32_t name_len)
{
	/* value_follows + fileid3 + filename3 + cookie3 */
	return 4u + 8u + 4u + xdr_padded_len(name_len) + 8u;
}

size_t nfs3_entryplus_bytes(uint32_t name_len, const struct nfs_fh *fh, bool has_attr)
{
	size_t n = nfs3_entry_bytes(name_len);
	n += has_attr ? NFS3_POST_OP_ATTR_MAX : 4u;
	n += fh ? 4u + 4u + xdr_padded_len(fh->nf_len) : 4u;
	return n;
}

void nfs3_enc_readdir_head(struct xdr_enc *enc, const struct fs_attr *dir_attr,
			   const uint8_t verf[NFS3_COOKIEVERFSIZE])
{
	if (!xdr_enc_ok(enc) || enc->xe_len < NFS3_READDIR_HEAD_MAX) {
		enc->xe_failed = true;
		return;
	}
	struct xdr_enc head;
	xdr_enc_init(&head, enc->xe_buf, NFS3_READDIR_HEAD_MAX);
	xdr_put_u32(&head, NFS3_OK);
	nfs3_enc_post_op_attr(&head, dir_attr);
	xdr_put_fixed(&head, verf, NFS3_COOKIEVERFSIZE);
	size_t gap = NFS3_READDIR_HEAD_MAX - xdr_enc_len(&head);
	if (gap) {
		/* absent attributes: close the hole left for them */
		memmove(enc->xe_buf + xdr_enc_len(&head), enc->xe_buf + NFS3_READDIR_HEAD_MAX,
			enc->xe_len - NFS3_READDIR_HEAD_MAX);
		enc->xe_len -= gap;
	}
}

void nfs3_enc_entry(struct xdr_enc *enc, uint64_t fileid, const char *name, uint32_t name_len,
		    uint64_t cookie)
{
	xdr_put_bool(enc, true);
	xdr_put_u64(enc, fileid);
	xdr_put_opaque(enc, name, name_len);
	xdr_put_u64(enc, cookie);
}

void nfs3_enc_entryplus(struct xdr_enc *enc, uint64_t fileid, const char *name, uint32_t name_len,
			uint64_t cookie, const struct fs_attr *attr, const struct nfs_fh *fh)
{
	nfs3_enc_entry(enc, fileid, name, name_len, cookie);
	nfs3_enc_post_op_attr(enc, attr);
	nfs3_put_post_op_fh(enc, fh);
}

void nfs3_enc_readdir_tail(struct xdr_enc *enc, bool eof)
{
	xdr_put_bool(enc, false);
	xdr_put_bool(enc, eof);
}
