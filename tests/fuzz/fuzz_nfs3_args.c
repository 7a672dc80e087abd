/* fuzz_nfs3_args.c: libFuzzer target for every NFSv3 argument decoder (nfs3_xdr.c) and the file
 * handle decoder (nfs_handle.c).
 *
 * Input: byte 0 picks the procedure (modulo NFS3PROC_COUNT); the rest is its arguments, decoded
 * with the decoder the procedure table gives it (nfs3_proc_decoder), as nfs3_dispatch does. A
 * decoded handle then goes through nfs_handle_decode under a fixed key, as the server checks
 * every handle it is given. Checks beyond "no crash": a decoder returns 0 or -EBADMSG; on success
 * every opaque (handles, names, WRITE data, symlink target) lies inside the input and within its
 * bound, and WRITE's count equals its data's length. */
#include "fuzz_rpc.h"

static const uint8_t *fuzz_in_start, *fuzz_in_end;

static void fuzz_check_bytes(const struct nfs3_bytes *b, uint32_t max)
{
	if (b->nb_len > max)
		__builtin_trap();
	if (b->nb_len && (b->nb_data < fuzz_in_start || b->nb_data + b->nb_len > fuzz_in_end))
		__builtin_trap();
}

/* The handle check every procedure's first argument goes through. */
static void fuzz_check_handle(const struct nfs3_bytes *fh)
{
	static struct nfs_handle_key key;
	static bool key_set;
	if (!key_set) {
		nfs_handle_key_init(&key, fuzz_handle_key_bytes);
		key_set = true;
	}
	fuzz_check_bytes(fh, NFS3_FH_DECODE_MAX);
	uint64_t fsid;
	struct fs_obj_id obj;
	if (nfs_handle_decode(&key, fh->nb_data, fh->nb_len, &fsid, &obj) == 0 &&
	    obj.foi_len > FS_OBJ_ID_MAX)
		__builtin_trap();
}

static void fuzz_check_dirop(const struct nfs3_diropargs *d)
{
	fuzz_check_handle(&d->da_dir);
	fuzz_check_bytes(&d->da_name, NFS3_NAME_DECODE_MAX);
}

static void fuzz_check_args(uint32_t proc, const union nfs3_args *a)
{
	switch (proc) {
	case NFS3PROC_NULL: break;
	case NFS3PROC_SETATTR: fuzz_check_handle(&a->setattr.fh); break;
	case NFS3PROC_LOOKUP:
	case NFS3PROC_REMOVE:
	case NFS3PROC_RMDIR: fuzz_check_dirop(&a->dirop); break;
	case NFS3PROC_ACCESS: fuzz_check_handle(&a->access.fh); break;
	case NFS3PROC_READ:
	case NFS3PROC_COMMIT: fuzz_check_handle(&a->read.fh); break;
	case NFS3PROC_WRITE:
		fuzz_check_handle(&a->write.fh);
		fuzz_check_bytes(&a->write.data, NFS3_IO_MAX);
		if (a->write.count != a->write.data.nb_len)
			__builtin_trap();
		break;
	case NFS3PROC_CREATE:
	case NFS3PROC_MKDIR:
	case NFS3PROC_MKNOD: fuzz_check_dirop(&a->create.where); break;
	case NFS3PROC_SYMLINK:
		fuzz_check_dirop(&a->create.where);
		fuzz_check_bytes(&a->create.target, UINT32_MAX);
		break;
	case NFS3PROC_RENAME:
		fuzz_check_dirop(&a->rename.from);
		fuzz_check_dirop(&a->rename.to);
		break;
	case NFS3PROC_LINK:
		fuzz_check_handle(&a->link.fh);
		fuzz_check_dirop(&a->link.link);
		break;
	case NFS3PROC_READDIR:
	case NFS3PROC_READDIRPLUS: fuzz_check_handle(&a->readdir.dir); break;
	default: fuzz_check_handle(&a->fh); break; /* GETATTR READLINK FSSTAT FSINFO PATHCONF */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint32_t proc = data[0] % NFS3PROC_COUNT;
	fuzz_in_start = data + 1;
	fuzz_in_end = data + size;
	struct xdr_dec dec;
	xdr_dec_init(&dec, data + 1, size - 1);
	union nfs3_args args;
	memset(&args, 0, sizeof(args));
	int rc = nfs3_proc_decoder(proc)(&dec, &args);
	if (rc != 0 && rc != -EBADMSG)
		__builtin_trap();
	if (rc == 0)
		fuzz_check_args(proc, &args);
	return 0;
}

/* ---- seeds: the arguments of each procedure as a client sends them ---- */

static void fuzz_put_fh(struct xdr_enc *enc)
{
	struct nfs_fh fh;
	fuzz_seed_handle(&fh);
	xdr_put_opaque(enc, fh.nf_bytes, fh.nf_len);
}

static void fuzz_put_dirop(struct xdr_enc *enc, const char *name)
{
	fuzz_put_fh(enc);
	xdr_put_opaque(enc, name, (uint32_t)strlen(name));
}

/* sattr3: mode 0644, uid and gid unset, size 4096, atime the server's, mtime the client's. */
static void fuzz_put_sattr(struct xdr_enc *enc)
{
	xdr_put_bool(enc, true);
	xdr_put_u32(enc, 0644);
	xdr_put_bool(enc, false);
	xdr_put_bool(enc, false);
	xdr_put_bool(enc, true);
	xdr_put_u64(enc, 4096);
	xdr_put_u32(enc, FS_TIME_SERVER);
	xdr_put_u32(enc, FS_TIME_CLIENT);
	xdr_put_u32(enc, 1700000000u);
	xdr_put_u32(enc, 999999999u);
}

static void fuzz_write_seeds(const char *dir)
{
	static const char *const names[NFS3PROC_COUNT] = {
	    "null",   "getattr", "setattr",  "lookup", "access",  "readlink",
	    "read",   "write",   "create",   "mkdir",  "symlink", "mknod",
	    "remove", "rmdir",   "rename",   "link",   "readdir", "readdirplus",
	    "fsstat", "fsinfo",  "pathconf", "commit"};
	static const uint8_t verf[8] = "verifier";
	uint8_t buf[2048];
	for (uint32_t proc = 0; proc < NFS3PROC_COUNT; proc++) {
		struct xdr_enc enc;
		buf[0] = (uint8_t)proc;
		xdr_enc_init(&enc, buf + 1, sizeof(buf) - 1);
		switch (proc) {
		case NFS3PROC_NULL: break;
		case NFS3PROC_SETATTR:
			fuzz_put_fh(&enc);
			fuzz_put_sattr(&enc);
			xdr_put_bool(&enc, true); /* guard on ctime */
			xdr_put_u32(&enc, 1700000000u);
			xdr_put_u32(&enc, 0);
			break;
		case NFS3PROC_LOOKUP:
		case NFS3PROC_REMOVE:
		case NFS3PROC_RMDIR: fuzz_put_dirop(&enc, "a-name"); break;
		case NFS3PROC_ACCESS:
			fuzz_put_fh(&enc);
			xdr_put_u32(&enc, 0x3f);
			break;
		case NFS3PROC_READ:
		case NFS3PROC_COMMIT:
			fuzz_put_fh(&enc);
			xdr_put_u64(&enc, 8192);
			xdr_put_u32(&enc, 4096);
			break;
		case NFS3PROC_WRITE:
			fuzz_put_fh(&enc);
			xdr_put_u64(&enc, 0);
			xdr_put_u32(&enc, 13);
			xdr_put_u32(&enc, FS_FILE_SYNC);
			xdr_put_opaque(&enc, "hello, world\n", 13);
			break;
		case NFS3PROC_CREATE:
			fuzz_put_dirop(&enc, "new-file");
			xdr_put_u32(&enc, 2); /* EXCLUSIVE */
			xdr_put_fixed(&enc, verf, sizeof(verf));
			break;
		case NFS3PROC_MKDIR:
			fuzz_put_dirop(&enc, "new-dir");
			fuzz_put_sattr(&enc);
			break;
		case NFS3PROC_SYMLINK:
			fuzz_put_dirop(&enc, "link");
			fuzz_put_sattr(&enc);
			xdr_put_opaque(&enc, "../target/path", 14);
			break;
		case NFS3PROC_MKNOD:
			fuzz_put_dirop(&enc, "dev");
			xdr_put_u32(&enc, 3); /* NF3CHR */
			fuzz_put_sattr(&enc);
			xdr_put_u32(&enc, 1);
			xdr_put_u32(&enc, 3);
			break;
		case NFS3PROC_RENAME:
			fuzz_put_dirop(&enc, "from");
			fuzz_put_dirop(&enc, "to");
			break;
		case NFS3PROC_LINK:
			fuzz_put_fh(&enc);
			fuzz_put_dirop(&enc, "hard-link");
			break;
		case NFS3PROC_READDIR:
		case NFS3PROC_READDIRPLUS:
			fuzz_put_fh(&enc);
			xdr_put_u64(&enc, 42);
			xdr_put_fixed(&enc, verf, sizeof(verf));
			xdr_put_u32(&enc, 4096);
			if (proc == NFS3PROC_READDIRPLUS)
				xdr_put_u32(&enc, 32768);
			break;
		default: fuzz_put_fh(&enc); break;
		}
		fuzz_seed(dir, names[proc], buf, 1 + xdr_enc_len(&enc));
	}
}
