/* fuzz_mount_pmap.c: libFuzzer target for the argument decoders of MOUNT v3 (mount3.c) and of
 * the builtin portmapper (rpc_portmap.c).
 *
 * Input: byte 0 even: the rest is a MOUNT dirpath, the argument of MNT and UMNT
 * (mount3_dec_path: string<MNTPATHLEN>, normalised); odd: a portmapper mapping, the argument of
 * SET, UNSET and GETPORT (rpc_pmap_get_mapping). The other procedures of both programs take no
 * arguments. Checks beyond "no crash": a decoded path is NUL-terminated at its length, at most
 * MNT3_PATHLEN, holds no NUL before it, without repeated slashes and without a trailing one
 * (unless it is "/"). */
#include "fuzz_rpc.h"

static void fuzz_check_path(const char *path, size_t len)
{
	if (len > MNT3_PATHLEN || path[len] != '\0' || strlen(path) != len)
		__builtin_trap();
	for (size_t i = 1; i < len; i++)
		if (path[i] == '/' && path[i - 1] == '/')
			__builtin_trap();
	if (len > 1 && path[len - 1] == '/')
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	struct xdr_dec dec;
	xdr_dec_init(&dec, data + 1, size - 1);
	if ((data[0] & 1) == 0) {
		char path[MNT3_PATHLEN + 1];
		size_t len;
		if (mount3_dec_path(&dec, path, &len))
			fuzz_check_path(path, len);
	} else {
		struct rpc_pmap_mapping m;
		(void)rpc_pmap_get_mapping(&dec, &m);
	}
	return 0;
}

static void fuzz_write_seeds(const char *dir)
{
	static const char *const paths[] = {"/srv/export", "//tank//home/", "/"};
	uint8_t buf[2048];
	struct xdr_enc enc;
	for (size_t i = 0; i < SH_ARRAY_SIZE(paths); i++) {
		char name[32];
		buf[0] = 0;
		xdr_enc_init(&enc, buf + 1, sizeof(buf) - 1);
		xdr_put_opaque(&enc, paths[i], (uint32_t)strlen(paths[i]));
		snprintf(name, sizeof(name), "mnt-path-%zu", i);
		fuzz_seed(dir, name, buf, 1 + xdr_enc_len(&enc));
	}
	buf[0] = 1;
	xdr_enc_init(&enc, buf + 1, sizeof(buf) - 1);
	xdr_put_u32(&enc, NFS3_PROGRAM);
	xdr_put_u32(&enc, NFS3_VERSION);
	xdr_put_u32(&enc, RPC_IPPROTO_TCP);
	xdr_put_u32(&enc, 2049);
	fuzz_seed(dir, "pmap-getport-nfs", buf, 1 + xdr_enc_len(&enc));
}
