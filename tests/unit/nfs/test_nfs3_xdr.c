/* test_nfs3_xdr.c: the errno -> nfsstat3 table and NFSv3 XDR codec round trips. */
#include <errno.h>
#include <string.h>

#include "nfs/nfs_impl.h"
#include "tap.h"

static void test_status_table(void)
{
	static const struct {
		int err;
		uint32_t status;
	} cases[] = {
		{0, NFS3_OK},
		{-EPERM, NFS3ERR_PERM},
		{-ENOENT, NFS3ERR_NOENT},
		{-EIO, NFS3ERR_IO},
		{-ENXIO, NFS3ERR_NXIO},
		{-EACCES, NFS3ERR_ACCES},
		{-EEXIST, NFS3ERR_EXIST},
		{-EXDEV, NFS3ERR_XDEV},
		{-ENODEV, NFS3ERR_NODEV},
		{-ENOTDIR, NFS3ERR_NOTDIR},
		{-EISDIR, NFS3ERR_ISDIR},
		{-EINVAL, NFS3ERR_INVAL},
		{-EFBIG, NFS3ERR_FBIG},
		{-ENOSPC, NFS3ERR_NOSPC},
		{-EROFS, NFS3ERR_ROFS},
		{-EMLINK, NFS3ERR_MLINK},
		{-ENAMETOOLONG, NFS3ERR_NAMETOOLONG},
		{-ENOTEMPTY, NFS3ERR_NOTEMPTY},
		{-EDQUOT, NFS3ERR_DQUOT},
		{-ESTALE, NFS3ERR_STALE},
		{-EREMOTE, NFS3ERR_REMOTE},
		{-SH_EBADHANDLE, NFS3ERR_BADHANDLE},
		{-SH_ENOTSYNC, NFS3ERR_NOT_SYNC},
		{-SH_EBADCOOKIE, NFS3ERR_BAD_COOKIE},
		{-SH_ENOTSUPP, NFS3ERR_NOTSUPP},
		{-SH_ETOOSMALL, NFS3ERR_TOOSMALL},
		{-SH_ESERVERFAULT, NFS3ERR_SERVERFAULT},
		{-SH_EBADTYPE, NFS3ERR_BADTYPE},
		{-SH_EJUKEBOX, NFS3ERR_JUKEBOX},
		{-EOPNOTSUPP, NFS3ERR_NOTSUPP},
		{-EAGAIN, NFS3ERR_JUKEBOX},
		{-ENOMEM, NFS3ERR_JUKEBOX},
		{-EPIPE, NFS3ERR_IO}, /* no mapping: IO */
	};
	for (size_t i = 0; i < SH_ARRAY_SIZE(cases); i++)
		CHECKF(nfs3_status_from_errno(cases[i].err) == cases[i].status, "err %d -> %u, want %u",
		       cases[i].err, nfs3_status_from_errno(cases[i].err), cases[i].status);
}

static void put_name(struct xdr_enc *enc, const char *s)
{
	xdr_put_opaque(enc, s, (uint32_t)strlen(s));
}

static void test_decode_lookup(void)
{
	uint8_t buf[256];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	uint8_t fh[26];
	for (unsigned i = 0; i < sizeof(fh); i++)
		fh[i] = (uint8_t)i;
	xdr_put_opaque(&enc, fh, sizeof(fh));
	put_name(&enc, "hello.txt");
	CHECK(xdr_enc_ok(&enc));

	union nfs3_args args;
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_dirop(&dec, &args) == 0);
	CHECK(args.dirop.da_dir.nb_len == sizeof(fh));
	CHECK(args.dirop.da_dir.nb_data == buf + 4); /* zero copy: points into the record */
	CHECK(memcmp(args.dirop.da_dir.nb_data, fh, sizeof(fh)) == 0);
	CHECK(args.dirop.da_name.nb_len == 9 && memcmp(args.dirop.da_name.nb_data, "hello.txt", 9) == 0);

	/* every truncation is a decoding failure */
	bool all_fail = true;
	for (size_t len = 0; len < xdr_enc_len(&enc); len++) {
		xdr_dec_init(&dec, buf, len);
		if (nfs3_dec_dirop(&dec, &args) == 0)
			all_fail = false;
	}
	CHECK(all_fail);
}

static void test_decode_write(void)
{
	uint8_t buf[256];
	struct xdr_enc enc;
	union nfs3_args args;
	struct xdr_dec dec;
	static const uint8_t data[5] = {1, 2, 3, 4, 5};

	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fhfhfhfh", 8);
	xdr_put_u64(&enc, 4096);
	xdr_put_u32(&enc, 5);
	xdr_put_u32(&enc, FS_FILE_SYNC);
	xdr_put_opaque(&enc, data, 5);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_write(&dec, &args) == 0);
	CHECK(args.write.offset == 4096 && args.write.count == 5 && args.write.stable == FS_FILE_SYNC);
	CHECK(args.write.data.nb_len == 5 && args.write.data.nb_data == buf + 4 + 8 + 8 + 4 + 4 + 4);

	/* count disagreeing with the data length */
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fhfhfhfh", 8);
	xdr_put_u64(&enc, 0);
	xdr_put_u32(&enc, 6);
	xdr_put_u32(&enc, FS_UNSTABLE);
	xdr_put_opaque(&enc, data, 5);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_write(&dec, &args) == -EBADMSG);

	/* stable_how out of range */
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fhfhfhfh", 8);
	xdr_put_u64(&enc, 0);
	xdr_put_u32(&enc, 5);
	xdr_put_u32(&enc, 3);
	xdr_put_opaque(&enc, data, 5);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_write(&dec, &args) == -EBADMSG);
}

static void test_decode_setattr_create(void)
{
	uint8_t buf[256];
	struct xdr_enc enc;
	union nfs3_args args;
	struct xdr_dec dec;

	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fh", 2);
	xdr_put_bool(&enc, true);
	xdr_put_u32(&enc, 0644);
	xdr_put_bool(&enc, false);
	xdr_put_bool(&enc, true);
	xdr_put_u32(&enc, 50);
	xdr_put_bool(&enc, true);
	xdr_put_u64(&enc, 1ull << 40);
	xdr_put_u32(&enc, FS_TIME_SERVER);
	xdr_put_u32(&enc, FS_TIME_CLIENT);
	xdr_put_u32(&enc, 1234567);
	xdr_put_u32(&enc, 89);
	xdr_put_bool(&enc, true);
	xdr_put_u32(&enc, 1000);
	xdr_put_u32(&enc, 2000);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_setattr(&dec, &args) == 0);
	const struct fs_sattr *sa = &args.setattr.sattr;
	CHECK(sa->fs_set_mode && sa->fs_mode == 0644 && !sa->fs_set_uid && sa->fs_set_gid &&
	      sa->fs_gid == 50 && sa->fs_set_size && sa->fs_size == 1ull << 40);
	CHECK(sa->fs_atime_how == FS_TIME_SERVER && sa->fs_mtime_how == FS_TIME_CLIENT);
	CHECK(sa->fs_mtime.ft_sec == 1234567 && sa->fs_mtime.ft_nsec == 89);
	CHECK(args.setattr.guard && args.setattr.guard_ctime.ft_sec == 1000);

	/* time_how 3 is not a valid enum value */
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fh", 2);
	for (int i = 0; i < 4; i++)
		xdr_put_bool(&enc, false);
	xdr_put_u32(&enc, 3);
	xdr_put_u32(&enc, 0);
	xdr_put_bool(&enc, false);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_setattr(&dec, &args) == -EBADMSG);

	/* exclusive CREATE carries its verifier */
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "dirhandle", 9);
	put_name(&enc, "new");
	xdr_put_u32(&enc, FS_CREATE_EXCLUSIVE);
	xdr_put_fixed(&enc, "VERIFIER", 8);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_create(&dec, &args) == 0);
	CHECK(args.create.mode == FS_CREATE_EXCLUSIVE && memcmp(args.create.verf, "VERIFIER", 8) == 0);
	CHECK(args.create.where.da_name.nb_len == 3);

	/* a bool that is neither 0 nor 1 */
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fh", 2);
	xdr_put_u32(&enc, 2);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_setattr(&dec, &args) == -EBADMSG);

	/* MKNOD of a regular file decodes (answered BADTYPE later); type 9 does not */
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fh", 2);
	put_name(&enc, "n");
	xdr_put_u32(&enc, FS_REG);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_mknod(&dec, &args) == 0 && args.create.type == FS_REG);
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "fh", 2);
	put_name(&enc, "n");
	xdr_put_u32(&enc, 9);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_mknod(&dec, &args) == -EBADMSG);
}

static struct fs_attr sample_attr(void)
{
	struct fs_attr a;
	memset(&a, 0, sizeof(a));
	a.fa_type = FS_REG;
	a.fa_mode = 0640;
	a.fa_nlink = 2;
	a.fa_uid = 10;
	a.fa_gid = 20;
	a.fa_size = 12345;
	a.fa_fileid = 99;
	a.fa_mtime.ft_sec = 1700000000;
	return a;
}

static void test_encode_sizes(void)
{
	uint8_t buf[512];
	struct xdr_enc enc;
	struct fs_attr attr = sample_attr();
	union nfs3_res res;

	memset(&res, 0, sizeof(res));
	res.attrstat.attr = &attr;
	xdr_enc_init(&enc, buf, sizeof(buf));
	nfs3_enc_getattr(&enc, &res);
	CHECK(xdr_enc_ok(&enc) && xdr_enc_len(&enc) == 4 + NFS3_FATTR_BYTES);
	/* fattr3 field order: type, mode, nlink, uid, gid, size at offset 24 (after status) */
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(xdr_get_u32(&dec) == NFS3_OK && xdr_get_u32(&dec) == FS_REG &&
	      xdr_get_u32(&dec) == 0640 && xdr_get_u32(&dec) == 2 && xdr_get_u32(&dec) == 10 &&
	      xdr_get_u32(&dec) == 20 && xdr_get_u64(&dec) == 12345);

	/* an error reply with absent wcc data: status + two false bools */
	memset(&res, 0, sizeof(res));
	res.wccstat.status = NFS3ERR_ACCES;
	xdr_enc_init(&enc, buf, sizeof(buf));
	nfs3_enc_wccstat(&enc, &res);
	CHECK(xdr_enc_len(&enc) == 12);

	/* full wcc data */
	struct fs_wcc wcc;
	memset(&wcc, 0, sizeof(wcc));
	wcc.fw_pre_valid = true;
	wcc.fw_post_valid = true;
	wcc.fw_post = attr;
	memset(&res, 0, sizeof(res));
	res.write.wcc = &wcc;
	res.write.count = 5;
	res.write.committed = FS_FILE_SYNC;
	xdr_enc_init(&enc, buf, sizeof(buf));
	nfs3_enc_write(&enc, &res);
	CHECK(xdr_enc_len(&enc) == 4 + NFS3_WCC_MAX + 4 + 4 + 8);

	/* LOOKUP failure: status + dir attributes only */
	memset(&res, 0, sizeof(res));
	res.lookup.status = NFS3ERR_NOENT;
	res.lookup.dir_attr = &attr;
	xdr_enc_init(&enc, buf, sizeof(buf));
	nfs3_enc_lookup(&enc, &res);
	CHECK(xdr_enc_len(&enc) == 4 + NFS3_POST_OP_ATTR_MAX);
}

/* Builds a READDIRPLUS reply the way the procedure does and decodes it back. */
static void readdir_round_trip(bool with_dir_attr)
{
	uint8_t buf[4096];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	CHECK(xdr_reserve(&enc, NFS3_READDIR_HEAD_MAX) != NULL);
	struct fs_attr attr = sample_attr();
	struct nfs_handle_key key = {1, 2};
	struct fs_obj_id obj = {.foi_len = 3, .foi_bytes = {7, 8, 9}};
	struct nfs_fh fh;
	nfs_handle_encode(&key, 5, &obj, &fh);
	static const char *names[] = {".", "..", "a", "name-of-five", "xyzw"};
	size_t expect = NFS3_READDIR_HEAD_MAX;
	for (size_t i = 0; i < SH_ARRAY_SIZE(names); i++) {
		uint32_t nl = (uint32_t)strlen(names[i]);
		bool has = i % 2 == 0;
		size_t before = xdr_enc_len(&enc);
		nfs3_enc_entryplus(&enc, 100 + i, names[i], nl, 1000 + i, has ? &attr : NULL,
				   has ? &fh : NULL);
		size_t got = xdr_enc_len(&enc) - before;
		CHECKF(got == nfs3_entryplus_bytes(nl, has ? &fh : NULL, has), "entry %zu: %zu bytes", i,
		       got);
		expect += got;
	}
	nfs3_enc_readdir_tail(&enc, true);
	expect += NFS3_READDIR_TAIL_BYTES;
	uint8_t verf[8] = {'c', 'o', 'o', 'k', 'i', 'e', 'v', 'f'};
	nfs3_enc_readdir_head(&enc, with_dir_attr ? &attr : NULL, verf);
	if (!with_dir_attr)
		expect -= NFS3_FATTR_BYTES;
	CHECK(xdr_enc_ok(&enc));
	CHECKF(xdr_enc_len(&enc) == expect, "len %zu expect %zu", xdr_enc_len(&enc), expect);

	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(xdr_get_u32(&dec) == NFS3_OK);
	CHECK(xdr_get_bool(&dec) == with_dir_attr);
	if (with_dir_attr) {
		CHECK(xdr_get_u32(&dec) == FS_REG);
		xdr_get_fixed(&dec, NFS3_FATTR_BYTES - 4);
	}
	const uint8_t *v = xdr_get_fixed(&dec, 8);
	CHECK(v && memcmp(v, verf, 8) == 0);
	size_t n = 0;
	while (xdr_get_bool(&dec) && xdr_dec_ok(&dec)) {
		CHECK(xdr_get_u64(&dec) == 100 + n);
		uint32_t nl;
		const uint8_t *name = xdr_get_opaque(&dec, 255, &nl);
		CHECK(name && n < SH_ARRAY_SIZE(names) && nl == strlen(names[n]) &&
		      memcmp(name, names[n], nl) == 0);
		CHECK(xdr_get_u64(&dec) == 1000 + n);
		bool has_attr = xdr_get_bool(&dec);
		CHECK(has_attr == (n % 2 == 0));
		if (has_attr)
			xdr_get_fixed(&dec, NFS3_FATTR_BYTES);
		if (xdr_get_bool(&dec)) {
			uint32_t fl;
			const uint8_t *f = xdr_get_opaque(&dec, NFS3_FHSIZE, &fl);
			CHECK(f && fl == fh.nf_len && memcmp(f, fh.nf_bytes, fl) == 0);
		}
		n++;
	}
	CHECK(n == SH_ARRAY_SIZE(names));
	CHECK(xdr_get_bool(&dec) == true); /* eof */
	CHECK(xdr_dec_ok(&dec) && xdr_dec_remaining(&dec) == 0);
}

static void test_readdir_encoding(void)
{
	readdir_round_trip(true);
	readdir_round_trip(false);
	/* entry3 size per RFC 1813: value_follows 4 + fileid 8 + name (4 + padded) + cookie 8 */
	CHECK(nfs3_entry_bytes(1) == 4 + 8 + 4 + 4 + 8);
	CHECK(nfs3_entry_bytes(4) == 4 + 8 + 4 + 4 + 8);
	CHECK(nfs3_entry_bytes(5) == 4 + 8 + 4 + 8 + 8);
	CHECK(nfs3_entryplus_bytes(5, NULL, false) == nfs3_entry_bytes(5) + 4 + 4);
}

static void test_decode_readdirplus(void)
{
	uint8_t buf[128];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf, sizeof(buf));
	xdr_put_opaque(&enc, "dirfh", 5);
	xdr_put_u64(&enc, 77);
	xdr_put_fixed(&enc, "12345678", 8);
	xdr_put_u32(&enc, 4096);
	xdr_put_u32(&enc, 32768);
	union nfs3_args args;
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc));
	CHECK(nfs3_dec_readdirplus(&dec, &args) == 0);
	CHECK(args.readdir.cookie == 77 && memcmp(args.readdir.verf, "12345678", 8) == 0);
	CHECK(args.readdir.dircount == 4096 && args.readdir.count == 32768);
	xdr_dec_init(&dec, buf, xdr_enc_len(&enc) - 4);
	CHECK(nfs3_dec_readdirplus(&dec, &args) == -EBADMSG);
}

int main(void)
{
	TAP_RUN(test_status_table);
	TAP_RUN(test_decode_lookup);
	TAP_RUN(test_decode_write);
	TAP_RUN(test_decode_setattr_create);
	TAP_RUN(test_encode_sizes);
	TAP_RUN(test_readdir_encoding);
	TAP_RUN(test_decode_readdirplus);
	return tap_finish();
}
