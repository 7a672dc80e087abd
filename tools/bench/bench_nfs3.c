/* bench_nfs3.c: NFSv3 and MOUNT v3 argument encoders and strict result decoders for the load
 * generator (RFC 1813 sections 2.5, 2.6, 3.3 and appendix I). See bench_nfs3.h. */
#include <errno.h>
#include <string.h>

#include "bench_nfs3.h"

/* RFC 1813 section 2.5: a sattr3 "set" arm is a bool followed by the value; time_how 1 sets the
 * server's time. */
#define BENCH_TIME_DONT_CHANGE 0u
#define BENCH_TIME_SET_TO_SERVER 1u
#define BENCH_TIME_SET_TO_CLIENT 2u
#define BENCH_READDIR_MAX_ENTRIES 65536u /* more entries than any sane reply holds */

void bench_nfs3_enc_fh(struct xdr_enc *enc, const struct bench_fh *fh)
{
	xdr_put_opaque(enc, fh->fh_data, fh->fh_len);
}

void bench_nfs3_enc_dirop(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			  size_t name_len)
{
	bench_nfs3_enc_fh(enc, dir);
	xdr_put_opaque(enc, name, (uint32_t)name_len);
}

static void bench_enc_sattr(struct xdr_enc *enc, bool set_mode, uint32_t mode, bool set_size,
			    uint64_t size, bool set_mtime)
{
	xdr_put_bool(enc, set_mode);
	if (set_mode)
		xdr_put_u32(enc, mode);
	xdr_put_bool(enc, false); /* uid */
	xdr_put_bool(enc, false); /* gid */
	xdr_put_bool(enc, set_size);
	if (set_size)
		xdr_put_u64(enc, size);
	xdr_put_u32(enc, BENCH_TIME_DONT_CHANGE); /* atime */
	xdr_put_u32(enc, set_mtime ? BENCH_TIME_SET_TO_SERVER : BENCH_TIME_DONT_CHANGE);
}

void bench_nfs3_enc_setattr(struct xdr_enc *enc, const struct bench_fh *fh, bool set_mode,
			    uint32_t mode, bool set_size, uint64_t size, bool set_mtime)
{
	bench_nfs3_enc_fh(enc, fh);
	bench_enc_sattr(enc, set_mode, mode, set_size, size, set_mtime);
	xdr_put_bool(enc, false); /* no guard */
}

void bench_nfs3_enc_access(struct xdr_enc *enc, const struct bench_fh *fh, uint32_t mask)
{
	bench_nfs3_enc_fh(enc, fh);
	xdr_put_u32(enc, mask);
}

void bench_nfs3_enc_read(struct xdr_enc *enc, const struct bench_fh *fh, uint64_t off,
			 uint32_t count)
{
	bench_nfs3_enc_fh(enc, fh);
	xdr_put_u64(enc, off);
	xdr_put_u32(enc, count);
}

void bench_nfs3_enc_write(struct xdr_enc *enc, const struct bench_fh *fh, uint64_t off,
			  uint32_t count, enum bench_stable stable)
{
	bench_nfs3_enc_fh(enc, fh);
	xdr_put_u64(enc, off);
	xdr_put_u32(enc, count);
	xdr_put_u32(enc, (uint32_t)stable);
	xdr_put_u32(enc, count); /* the opaque's length; its bytes are the bulk segment */
}

void bench_nfs3_enc_create(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			   size_t name_len, bool guarded, uint32_t mode)
{
	bench_nfs3_enc_dirop(enc, dir, name, name_len);
	xdr_put_u32(enc, guarded ? 1u : 0u); /* createmode3: UNCHECKED 0, GUARDED 1 */
	bench_enc_sattr(enc, true, mode, false, 0, false);
}

void bench_nfs3_enc_mkdir(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			  size_t name_len, uint32_t mode)
{
	bench_nfs3_enc_dirop(enc, dir, name, name_len);
	bench_enc_sattr(enc, true, mode, false, 0, false);
}

void bench_nfs3_enc_symlink(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			    size_t name_len, const char *target)
{
	bench_nfs3_enc_dirop(enc, dir, name, name_len);
	bench_enc_sattr(enc, true, 0777, false, 0, false);
	xdr_put_opaque(enc, target, (uint32_t)strlen(target));
}

void bench_nfs3_enc_readdir(struct xdr_enc *enc, const struct bench_fh *dir, uint64_t cookie,
			    uint64_t verf, uint32_t count)
{
	bench_nfs3_enc_fh(enc, dir);
	xdr_put_u64(enc, cookie);
	xdr_put_u64(enc, verf);
	xdr_put_u32(enc, count);
}

void bench_nfs3_enc_readdirplus(struct xdr_enc *enc, const struct bench_fh *dir, uint64_t cookie,
				uint64_t verf, uint32_t dircount, uint32_t maxcount)
{
	bench_nfs3_enc_fh(enc, dir);
	xdr_put_u64(enc, cookie);
	xdr_put_u64(enc, verf);
	xdr_put_u32(enc, dircount);
	xdr_put_u32(enc, maxcount);
}

void bench_nfs3_enc_commit(struct xdr_enc *enc, const struct bench_fh *fh, uint64_t off,
			   uint32_t count)
{
	bench_nfs3_enc_fh(enc, fh);
	xdr_put_u64(enc, off);
	xdr_put_u32(enc, count);
}

void bench_mount_enc_mnt(struct xdr_enc *enc, const char *path)
{
	xdr_put_opaque(enc, path, (uint32_t)strlen(path));
}

/* ---- decoders ---- */

static void bench_dec_fh(struct xdr_dec *dec, struct bench_fh *fh)
{
	uint32_t len;
	const uint8_t *p = xdr_get_opaque(dec, BENCH_FH_MAX, &len);
	if (p && len > 0) {
		memcpy(fh->fh_data, p, len);
		fh->fh_len = len;
	} else {
		xdr_dec_fail(dec); /* an empty handle is no handle */
		fh->fh_len = 0;
	}
}

/* fattr3: 84 bytes (RFC 1813 section 2.5). */
static void bench_dec_fattr(struct xdr_dec *dec, struct bench_fattr *fa)
{
	fa->fa_type = xdr_get_u32(dec);
	fa->fa_mode = xdr_get_u32(dec);
	(void)xdr_get_u32(dec); /* nlink */
	(void)xdr_get_u32(dec); /* uid */
	(void)xdr_get_u32(dec); /* gid */
	fa->fa_size = xdr_get_u64(dec);
	(void)xdr_get_u64(dec); /* used */
	(void)xdr_get_u64(dec); /* rdev */
	(void)xdr_get_u64(dec); /* fsid */
	fa->fa_fileid = xdr_get_u64(dec);
	for (int i = 0; i < 6; i++)
		(void)xdr_get_u32(dec); /* atime, mtime, ctime */
	if (fa->fa_type < 1 || fa->fa_type > 7)
		xdr_dec_fail(dec);
}

static void bench_dec_post_op_attr(struct xdr_dec *dec, struct bench_nfs3_res *res)
{
	if (xdr_get_bool(dec)) {
		bench_dec_fattr(dec, &res->nr_attr);
		res->nr_has_attr = true;
	}
}

/* Attributes of something other than the result's object (a directory): decoded, not kept. */
static void bench_dec_skip_post_op_attr(struct xdr_dec *dec)
{
	if (xdr_get_bool(dec)) {
		struct bench_fattr fa;
		bench_dec_fattr(dec, &fa);
	}
}

static void bench_dec_wcc(struct xdr_dec *dec, struct bench_nfs3_res *res)
{
	if (xdr_get_bool(dec)) {
		(void)xdr_get_u64(dec); /* size */
		for (int i = 0; i < 4; i++)
			(void)xdr_get_u32(dec); /* mtime, ctime */
	}
	bench_dec_post_op_attr(dec, res);
}

static void bench_dec_skip_wcc(struct xdr_dec *dec)
{
	struct bench_nfs3_res scratch;
	bench_dec_wcc(dec, &scratch);
}

static void bench_dec_post_op_fh(struct xdr_dec *dec, struct bench_nfs3_res *res)
{
	if (xdr_get_bool(dec)) {
		bench_dec_fh(dec, &res->nr_fh);
		res->nr_has_fh = true;
	}
}

/* entry3 / entryplus3 (RFC 1813 sections 3.3.16 and 3.3.17), after its "value follows" bool. */
static void bench_dec_dirent(struct xdr_dec *dec, bool plus, struct bench_dirent *de)
{
	de->de_fileid = xdr_get_u64(dec);
	de->de_name = xdr_get_opaque(dec, BENCH_NAME_MAX, &de->de_name_len);
	if (de->de_name && de->de_name_len == 0)
		xdr_dec_fail(dec);
	de->de_cookie = xdr_get_u64(dec);
	de->de_has_fh = false;
	if (plus) {
		bench_dec_skip_post_op_attr(dec);
		if (xdr_get_bool(dec)) {
			struct bench_fh fh;
			bench_dec_fh(dec, &fh);
			de->de_has_fh = true;
		}
	}
}

int bench_nfs3_dirent_next(struct xdr_dec *dec, bool plus, struct bench_dirent *de)
{
	if (!xdr_get_bool(dec))
		return xdr_dec_ok(dec) ? 0 : -EBADMSG;
	bench_dec_dirent(dec, plus, de);
	return xdr_dec_ok(dec) ? 1 : -EBADMSG;
}

static void bench_dec_readdir(struct xdr_dec *dec, struct bench_nfs3_res *res, bool plus)
{
	res->nr_verf = xdr_get_u64(dec); /* cookieverf */
	res->nr_entries = dec->xd_pos;
	uint32_t n = 0;
	while (xdr_get_bool(dec)) {
		struct bench_dirent de;
		bench_dec_dirent(dec, plus, &de);
		res->nr_cookie = de.de_cookie;
		if (++n > BENCH_READDIR_MAX_ENTRIES)
			xdr_dec_fail(dec);
		if (!xdr_dec_ok(dec))
			break;
	}
	/* The list up to and including its terminating FALSE. */
	res->nr_entries_len = xdr_dec_ok(dec) ? (size_t)(dec->xd_pos - res->nr_entries) : 0;
	res->nr_count = n;
	res->nr_eof = xdr_get_bool(dec);
}

int bench_nfs3_decode(uint32_t proc, struct xdr_dec *dec, struct bench_nfs3_res *res)
{
	memset(res, 0, sizeof(*res));
	res->nr_status = xdr_get_u32(dec);
	bool ok = res->nr_status == BENCH_NFS3_OK;
	uint32_t len;
	switch (proc) {
	case BENCH_NFS3_NULL:
		break;
	case BENCH_NFS3_GETATTR:
		if (ok) {
			bench_dec_fattr(dec, &res->nr_attr);
			res->nr_has_attr = true;
		}
		break;
	case BENCH_NFS3_SETATTR:
	case BENCH_NFS3_REMOVE:
	case BENCH_NFS3_RMDIR:
		bench_dec_wcc(dec, res);
		break;
	case BENCH_NFS3_LOOKUP:
		if (ok) {
			bench_dec_fh(dec, &res->nr_fh);
			res->nr_has_fh = true;
			bench_dec_post_op_attr(dec, res);
		}
		bench_dec_skip_post_op_attr(dec);
		break;
	case BENCH_NFS3_ACCESS:
		bench_dec_post_op_attr(dec, res);
		if (ok)
			res->nr_access = xdr_get_u32(dec);
		break;
	case BENCH_NFS3_READLINK:
		bench_dec_post_op_attr(dec, res);
		if (ok) {
			res->nr_data = xdr_get_opaque(dec, BENCH_PATH_MAX, &len);
			res->nr_count = len;
		}
		break;
	case BENCH_NFS3_READ:
		bench_dec_post_op_attr(dec, res);
		if (ok) {
			res->nr_count = xdr_get_u32(dec);
			res->nr_eof = xdr_get_bool(dec);
			res->nr_data = xdr_get_opaque(dec, UINT32_MAX, &len);
			if (len != res->nr_count)
				xdr_dec_fail(dec);
		}
		break;
	case BENCH_NFS3_WRITE:
		bench_dec_wcc(dec, res);
		if (ok) {
			res->nr_count = xdr_get_u32(dec);
			res->nr_committed = xdr_get_u32(dec);
			res->nr_verf = xdr_get_u64(dec);
			if (res->nr_committed > BENCH_FILE_SYNC)
				xdr_dec_fail(dec);
		}
		break;
	case BENCH_NFS3_CREATE:
	case BENCH_NFS3_MKDIR:
	case BENCH_NFS3_SYMLINK:
		if (ok) {
			bench_dec_post_op_fh(dec, res);
			bench_dec_post_op_attr(dec, res);
		}
		bench_dec_skip_wcc(dec);
		break;
	case BENCH_NFS3_READDIR:
	case BENCH_NFS3_READDIRPLUS:
		bench_dec_skip_post_op_attr(dec);
		if (ok)
			bench_dec_readdir(dec, res, proc == BENCH_NFS3_READDIRPLUS);
		break;
	case BENCH_NFS3_FSSTAT:
		bench_dec_post_op_attr(dec, res);
		if (ok) {
			(void)xdr_get_u64(dec); /* tbytes */
			res->nr_fbytes = xdr_get_u64(dec);
			for (int i = 0; i < 4; i++)
				(void)xdr_get_u64(dec); /* abytes, tfiles, ffiles, afiles */
			(void)xdr_get_u32(dec); /* invarsec */
		}
		break;
	case BENCH_NFS3_FSINFO:
		bench_dec_post_op_attr(dec, res);
		if (ok) {
			res->nr_rtmax = xdr_get_u32(dec);
			(void)xdr_get_u32(dec); /* rtpref */
			(void)xdr_get_u32(dec); /* rtmult */
			res->nr_wtmax = xdr_get_u32(dec);
			(void)xdr_get_u32(dec); /* wtpref */
			(void)xdr_get_u32(dec); /* wtmult */
			res->nr_dtpref = xdr_get_u32(dec);
			(void)xdr_get_u64(dec); /* maxfilesize */
			(void)xdr_get_u64(dec); /* time_delta */
			(void)xdr_get_u32(dec); /* properties */
		}
		break;
	case BENCH_NFS3_COMMIT:
		bench_dec_wcc(dec, res);
		if (ok)
			res->nr_verf = xdr_get_u64(dec);
		break;
	default:
		return -EBADMSG;
	}
	if (!xdr_dec_ok(dec) || xdr_dec_remaining(dec) != 0)
		return -EBADMSG;
	return 0;
}

int bench_mount_decode_mnt(struct xdr_dec *dec, struct bench_nfs3_res *res)
{
	memset(res, 0, sizeof(*res));
	res->nr_status = xdr_get_u32(dec);
	if (res->nr_status == 0) {
		bench_dec_fh(dec, &res->nr_fh);
		res->nr_has_fh = true;
		uint32_t n = xdr_get_u32(dec);
		if (n > 64)
			xdr_dec_fail(dec);
		for (uint32_t i = 0; i < n && xdr_dec_ok(dec); i++)
			(void)xdr_get_u32(dec);
	}
	if (!xdr_dec_ok(dec) || xdr_dec_remaining(dec) != 0)
		return -EBADMSG;
	return 0;
}

const char *bench_nfs3_proc_name(uint32_t proc)
{
	static const char *const names[BENCH_NFS3_NPROCS] = {
		"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE",
		"CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK",
		"READDIR", "READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT",
	};
	return proc < BENCH_NFS3_NPROCS ? names[proc] : "?";
}
