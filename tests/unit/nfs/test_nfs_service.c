/* test_nfs_service.c: the NFS and MOUNT programs end to end: a real rpc server on 127.0.0.1, the
 * service over an in-memory back end (memfs.c), and the rpc client sending hand-built calls.
 * Checks the dispatch path (handles, export rules, squashing, ROFS, GARBAGE_ARGS), the reply
 * layouts, READ's bulk data, READDIR paging and size limits, the MOUNT procedures, and a reload of
 * the exports while serving. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memfs.h"
#include "nfs/nfs_impl.h"
#include "tap.h"

#define NEXPORTS 4
static struct nfs_exports *g_exports; /* the service's; gone after test_reload */
static struct memfs *g_fs[NEXPORTS];
static struct memfs *g_fs_new; /* test_reload's new export */
static struct nfs_service *g_svc;
static struct rpc_server *g_srv;
static struct rpc_clnt *g_clnt;
static struct nfs_handle_key g_key;
static char g_state[64];
static uint8_t g_res[1u << 20];
static size_t g_res_len;
static int g_accept, g_auth;
static uint16_t g_port;

static const char *g_exports_text = "/exp 127.0.0.1(rw,insecure)\n"
				    "/ro *(ro,insecure)\n"
				    "/secure 127.0.0.1(rw)\n"
				    "/denied 10.0.0.0/8(rw,insecure)\n";

static int setup(void)
{
	char err[256];
	if (nfs_exports_parse(g_exports_text, strlen(g_exports_text), &g_exports, err, sizeof(err)) < 0) {
		printf("# exports: %s\n", err);
		return -1;
	}
	struct fs *fss[NEXPORTS];
	for (size_t i = 0; i < NEXPORTS; i++) {
		g_fs[i] = memfs_create(nfs_exports_fsid(g_exports, i));
		fss[i] = &g_fs[i]->mf_fs;
	}
	snprintf(g_state, sizeof(g_state), "/tmp/shale-nfs-test-XXXXXX");
	if (!mkdtemp(g_state))
		return -1;
	struct nfs_service_config cfg = {g_state, g_exports, fss};
	if (nfs_service_create(&cfg, &g_svc) < 0)
		return -1;
	struct rpc_server_config rcfg = {.rsc_nloops = 1};
	uint16_t port;
	if (rpc_server_create(&rcfg, &g_srv) < 0 || nfs_service_register(g_svc, g_srv) < 0 ||
	    rpc_server_listen(g_srv, "127.0.0.1", 0, RPC_TCP | RPC_UDP, &port) < 0 ||
	    rpc_server_start(g_srv) < 0)
		return -1;
	g_port = port;
	if (rpc_clnt_create("127.0.0.1", port, RPC_TCP, &g_clnt) < 0)
		return -1;
	/* the key the service created, to build handles the tests cannot get by MNT */
	char path[128];
	snprintf(path, sizeof(path), "%s/handle.key", g_state);
	uint8_t key[NFS_HANDLE_KEY_LEN];
	int fd = open(path, O_RDONLY);
	if (fd < 0 || read(fd, key, sizeof(key)) != (ssize_t)sizeof(key))
		return -1;
	close(fd);
	nfs_handle_key_init(&g_key, key);
	return 0;
}

static void teardown(void)
{
	rpc_clnt_destroy(g_clnt);
	rpc_server_stop(g_srv);
	rpc_server_destroy(g_srv);
	nfs_service_destroy(g_svc);
	for (size_t i = 0; i < NEXPORTS; i++)
		fs_destroy(&g_fs[i]->mf_fs);
	if (g_fs_new)
		fs_destroy(&g_fs_new->mf_fs);
	char path[128];
	snprintf(path, sizeof(path), "%s/handle.key", g_state);
	unlink(path);
	rmdir(g_state);
}

static int do_call(uint32_t prog, uint32_t proc, const struct xdr_enc *args)
{
	g_accept = g_auth = -1;
	return rpc_clnt_call(g_clnt, prog, prog == NFS3_PROGRAM ? NFS3_VERSION : MOUNT_V3, proc,
			     args ? args->xe_buf : NULL, args ? xdr_enc_len(args) : 0, g_res,
			     sizeof(g_res), &g_res_len, 5000, &g_accept, &g_auth);
}

static void set_cred(uint32_t uid, uint32_t gid)
{
	struct rpc_cred c = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = uid, .rcr_gid = gid};
	rpc_clnt_set_cred(g_clnt, &c);
}

static struct nfs_fh root_fh_of(size_t export_index)
{
	struct fs_obj_id obj;
	struct nfs_fh fh;
	memfs_obj(0, &obj);
	nfs_handle_encode(&g_key, nfs_exports_fsid(g_exports, export_index), &obj, &fh);
	return fh;
}

static void dec_skip_attr(struct xdr_dec *d)
{
	if (xdr_get_bool(d))
		xdr_get_fixed(d, NFS3_FATTR_BYTES);
}

static void dec_skip_wcc(struct xdr_dec *d)
{
	if (xdr_get_bool(d))
		xdr_get_fixed(d, 24);
	dec_skip_attr(d);
}

static struct nfs_fh g_root;

static void test_mount(void)
{
	uint8_t buf[256];
	struct xdr_enc a;
	struct xdr_dec d;

	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_NULL, NULL) == 0 && g_res_len == 0);
	xdr_enc_init(&a, buf, sizeof(buf));
	xdr_put_opaque(&a, "/exp/", 5);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_MNT, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == MNT3_OK);
	uint32_t fl;
	const uint8_t *fh = xdr_get_opaque(&d, NFS3_FHSIZE, &fl);
	CHECK(fh != NULL);
	if (fh) {
		g_root.nf_len = fl;
		memcpy(g_root.nf_bytes, fh, fl);
	}
	struct nfs_fh want = root_fh_of(0);
	CHECK(fl == want.nf_len && memcmp(fh, want.nf_bytes, fl) == 0);
	CHECK(xdr_get_u32(&d) == 1 && xdr_get_u32(&d) == RPC_AUTH_SYS && xdr_dec_remaining(&d) == 0);

	static const struct {
		const char *path;
		uint32_t status;
	} refused[] = {{"/nope", MNT3ERR_NOENT}, {"/denied", MNT3ERR_ACCES}, {"/secure", MNT3ERR_ACCES}};
	for (size_t i = 0; i < SH_ARRAY_SIZE(refused); i++) {
		xdr_enc_init(&a, buf, sizeof(buf));
		xdr_put_opaque(&a, refused[i].path, (uint32_t)strlen(refused[i].path));
		CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_MNT, &a) == 0);
		xdr_dec_init(&d, g_res, g_res_len);
		CHECKF(xdr_get_u32(&d) == refused[i].status && g_res_len == 4, "MNT %s", refused[i].path);
	}

	/* DUMP lists this client's mount */
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_DUMP, NULL) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	uint32_t hl, pl;
	CHECK(xdr_get_bool(&d));
	const uint8_t *host = xdr_get_opaque(&d, 255, &hl);
	const uint8_t *path = xdr_get_opaque(&d, 1024, &pl);
	CHECK(host && hl == 9 && memcmp(host, "127.0.0.1", 9) == 0);
	CHECK(path && pl == 4 && memcmp(path, "/exp", 4) == 0);
	CHECK(!xdr_get_bool(&d) && xdr_dec_ok(&d));

	/* EXPORT: every export with its client specs */
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_EXPORT, NULL) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	size_t n = 0;
	bool groups_ok = true;
	while (xdr_get_bool(&d) && xdr_dec_ok(&d)) {
		const uint8_t *dir = xdr_get_opaque(&d, 1024, &pl);
		CHECK(dir && pl == strlen(nfs_exports_path(g_exports, n)));
		size_t g = 0;
		while (xdr_get_bool(&d) && xdr_dec_ok(&d)) {
			const uint8_t *grp = xdr_get_opaque(&d, 255, &hl);
			const char *spec = g_exports->nx_exports[n].ne_rules[g].ncr_spec;
			groups_ok = groups_ok && grp && hl == strlen(spec) && memcmp(grp, spec, hl) == 0;
			g++;
		}
		n++;
	}
	CHECK(n == NEXPORTS && groups_ok && xdr_dec_ok(&d));

	/* UMNT removes it */
	xdr_enc_init(&a, buf, sizeof(buf));
	xdr_put_opaque(&a, "/exp", 4);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_UMNT, &a) == 0 && g_res_len == 0);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_DUMP, NULL) == 0 && g_res_len == 4);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_UMNTALL, NULL) == 0 && g_res_len == 0);
}

static void put_fh(struct xdr_enc *a, const struct nfs_fh *fh)
{
	xdr_put_opaque(a, fh->nf_bytes, fh->nf_len);
}

static void put_sattr_mode(struct xdr_enc *a, uint32_t mode)
{
	xdr_put_bool(a, true);
	xdr_put_u32(a, mode);
	for (int i = 0; i < 3; i++)
		xdr_put_bool(a, false);
	xdr_put_u32(a, 0);
	xdr_put_u32(a, 0);
}

static uint32_t getattr_status(const struct nfs_fh *fh)
{
	uint8_t buf[128];
	struct xdr_enc a;
	xdr_enc_init(&a, buf, sizeof(buf));
	xdr_put_opaque(&a, fh->nf_bytes, fh->nf_len);
	if (do_call(NFS3_PROGRAM, NFS3PROC_GETATTR, &a) != 0)
		return 0xdead;
	struct xdr_dec d;
	xdr_dec_init(&d, g_res, g_res_len);
	return xdr_get_u32(&d);
}

static void test_handles_and_rules(void)
{
	set_cred(1000, 1000);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_NULL, NULL) == 0 && g_res_len == 0);
	CHECK(getattr_status(&g_root) == NFS3_OK && g_res_len == 4 + NFS3_FATTR_BYTES);

	struct nfs_fh bad = g_root;
	bad.nf_bytes[bad.nf_len - 1] ^= 1;
	CHECK(getattr_status(&bad) == NFS3ERR_BADHANDLE && g_res_len == 4);
	bad = g_root;
	bad.nf_len = 60; /* oversized for this layout, still <= 64 */
	CHECK(getattr_status(&bad) == NFS3ERR_BADHANDLE);

	uint8_t big[200];
	memset(big, 1, sizeof(big));
	struct xdr_enc a;
	uint8_t buf[300];
	xdr_enc_init(&a, buf, sizeof(buf));
	xdr_put_opaque(&a, big, 100); /* above NFS3_FHSIZE */
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_GETATTR, &a) == 0 && g_res_len == 4 &&
	      g_res[3] == (NFS3ERR_BADHANDLE & 0xff));

	/* a valid MAC over an fsid no export has: STALE */
	struct fs_obj_id obj;
	memfs_obj(0, &obj);
	struct nfs_fh gone;
	nfs_handle_encode(&g_key, 0x123456789ull, &obj, &gone);
	CHECK(getattr_status(&gone) == NFS3ERR_STALE);
	/* the back end's ESTALE passes through */
	memfs_obj(77, &obj);
	nfs_handle_encode(&g_key, nfs_exports_fsid(g_exports, 0), &obj, &gone);
	CHECK(getattr_status(&gone) == NFS3ERR_STALE);

	/* export rules: a client no rule matches, a secure export from an unprivileged port */
	struct nfs_fh denied = root_fh_of(3), secure = root_fh_of(2);
	CHECK(getattr_status(&denied) == NFS3ERR_ACCES);
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &secure);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_GETATTR, &a) == -EPROTO && g_auth == RPC_AUTH_TOOWEAK);

	/* the loop's decision cache holds this client for export 0 (allowed) and 3 (refused), and
	 * finished calls' states wait on the loop's free list */
	CHECK(g_svc->ns_nloops == 1);
	unsigned allowed = 0, refused = 0;
	for (unsigned i = 0; i < NFS_CLIENT_CACHE_SLOTS; i++) {
		const struct nfs_client_cache_slot *s = &g_svc->ns_loops[0].nls_cache[i];
		allowed += s->ncs_export == 1 && s->ncs_rule == 0;
		refused += s->ncs_export == 4 && s->ncs_rule == -1;
	}
	CHECK(allowed == 1 && refused == 1);
	CHECK(g_svc->ns_loops[0].nls_nfree >= 1);

	/* truncated arguments */
	xdr_enc_init(&a, buf, sizeof(buf));
	xdr_put_u32(&a, 40);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_GETATTR, &a) == -EPROTO && g_accept == RPC_GARBAGE_ARGS);
}

static struct nfs_fh g_file;

static void test_create_write_read(void)
{
	uint8_t buf[512];
	struct xdr_enc a;
	struct xdr_dec d;
	set_cred(0, 0); /* root, squashed by the default root_squash */

	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "file", 4);
	xdr_put_u32(&a, FS_CREATE_GUARDED);
	put_sattr_mode(&a, 0640);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_CREATE, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	CHECK(xdr_get_bool(&d));
	uint32_t fl;
	const uint8_t *fh = xdr_get_opaque(&d, NFS3_FHSIZE, &fl);
	if (fh) {
		g_file.nf_len = fl;
		memcpy(g_file.nf_bytes, fh, fl);
	}
	CHECK(xdr_get_bool(&d) && xdr_get_u32(&d) == FS_REG && xdr_get_u32(&d) == 0640);
	xdr_get_fixed(&d, NFS3_FATTR_BYTES - 8);
	CHECK(xdr_get_bool(&d)); /* dir pre-op attrs */
	xdr_get_fixed(&d, 24);
	CHECK(xdr_get_bool(&d)); /* dir post-op attrs */
	xdr_get_fixed(&d, NFS3_FATTR_BYTES);
	CHECK(xdr_dec_ok(&d) && xdr_dec_remaining(&d) == 0);
	CHECK(g_fs[0]->mf_last_cred.fc_uid == 65534 && g_fs[0]->mf_last_cred.fc_gid == 65534);

	/* GUARDED again: EXIST, with the directory's wcc data */
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_CREATE, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3ERR_EXIST && g_res_len == 4 + NFS3_WCC_MAX);

	/* EXCLUSIVE: the verifier reaches the back end */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "excl", 4);
	xdr_put_u32(&a, FS_CREATE_EXCLUSIVE);
	xdr_put_fixed(&a, "V3RIFIER", 8);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_CREATE, &a) == 0 && g_res[3] == NFS3_OK);
	CHECK(memcmp(g_fs[0]->mf_last_verf, "V3RIFIER", 8) == 0);

	/* WRITE: count, committed, verifier */
	set_cred(1000, 1000);
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_file);
	xdr_put_u64(&a, 0);
	xdr_put_u32(&a, 11);
	xdr_put_u32(&a, FS_UNSTABLE);
	xdr_put_opaque(&a, "hello world", 11);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_WRITE, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	dec_skip_wcc(&d);
	CHECK(xdr_get_u32(&d) == 11 && xdr_get_u32(&d) == FS_FILE_SYNC);
	const uint8_t *verf = xdr_get_fixed(&d, 8);
	CHECK(verf && memcmp(verf, "WVERF-01", 8) == 0 && xdr_dec_remaining(&d) == 0);
	CHECK(g_fs[0]->mf_last_cred.fc_uid == 1000);

	/* READ: data from the bulk segment, padded */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_file);
	xdr_put_u64(&a, 6);
	xdr_put_u32(&a, 100);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_READ, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	dec_skip_attr(&d);
	CHECK(xdr_get_u32(&d) == 5 && xdr_get_bool(&d) == true);
	uint32_t dl;
	const uint8_t *data = xdr_get_opaque(&d, 100, &dl);
	CHECK(data && dl == 5 && memcmp(data, "world", 5) == 0 && xdr_dec_remaining(&d) == 0);

	/* LOOKUP returns the same handle; a missing name: NOENT with the dir attributes */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "file", 4);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_LOOKUP, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	fh = xdr_get_opaque(&d, NFS3_FHSIZE, &fl);
	CHECK(fh && fl == g_file.nf_len && memcmp(fh, g_file.nf_bytes, fl) == 0);
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "nothere", 7);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_LOOKUP, &a) == 0);
	CHECK(g_res[3] == NFS3ERR_NOENT && g_res_len == 4 + NFS3_POST_OP_ATTR_MAX);
	/* a name with a slash never reaches the back end */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "a/b", 3);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_LOOKUP, &a) == 0 && g_res[3] == NFS3ERR_ACCES);
}

static void test_ro_and_misc(void)
{
	uint8_t buf[512];
	struct xdr_enc a;
	struct xdr_dec d;
	struct nfs_fh ro = root_fh_of(1);
	set_cred(1000, 1000);

	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &ro);
	xdr_put_opaque(&a, "x", 1);
	xdr_put_u32(&a, FS_CREATE_UNCHECKED);
	put_sattr_mode(&a, 0644);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_CREATE, &a) == 0);
	CHECK(g_res[3] == NFS3ERR_ROFS && g_res_len == 4 + 8); /* wcc both absent */

	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &ro);
	xdr_put_u32(&a, 0x3f);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_ACCESS, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	dec_skip_attr(&d);
	CHECK(xdr_get_u32(&d) == (FS_ACCESS_READ | FS_ACCESS_LOOKUP | FS_ACCESS_EXECUTE));

	/* FSINFO */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_FSINFO, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	dec_skip_attr(&d);
	CHECK(xdr_get_u32(&d) == 1048576 && xdr_get_u32(&d) == 1048576);
	xdr_get_u32(&d);
	CHECK(xdr_get_u32(&d) == 1048576 && xdr_get_u32(&d) == 1048576);
	xdr_get_u32(&d);
	CHECK(xdr_get_u32(&d) == 65536 && xdr_get_u64(&d) == 1ull << 40);
	CHECK(xdr_get_u32(&d) == 0 && xdr_get_u32(&d) == 1);
	CHECK(xdr_get_u32(&d) == (NFS3_FSF_SYMLINK | NFS3_FSF_HOMOGENEOUS | NFS3_FSF_CANSETTIME));
	CHECK(xdr_dec_ok(&d) && xdr_dec_remaining(&d) == 0);

	/* FSSTAT, PATHCONF, COMMIT layouts */
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_FSSTAT, &a) == 0 && g_res[3] == NFS3_OK &&
	      g_res_len == 4 + NFS3_POST_OP_ATTR_MAX + 48 + 4);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_PATHCONF, &a) == 0 && g_res[3] == NFS3_OK &&
	      g_res_len == 4 + NFS3_POST_OP_ATTR_MAX + 24);
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_file);
	xdr_put_u64(&a, 0);
	xdr_put_u32(&a, 0);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_COMMIT, &a) == 0 && g_res[3] == NFS3_OK &&
	      g_res_len == 4 + NFS3_WCC_MAX + 8 && memcmp(g_res + g_res_len - 8, "WVERF-01", 8) == 0);

	/* RENAME into another export: XDEV */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "file", 4);
	put_fh(&a, &ro);
	xdr_put_opaque(&a, "file", 4);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_RENAME, &a) == 0 && g_res[3] == NFS3ERR_XDEV &&
	      g_res_len == 4 + 16);

	/* LINK: the back end's EMLINK, with file attributes and directory wcc */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_file);
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "file2", 5);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_LINK, &a) == 0 && g_res[3] == NFS3ERR_MLINK &&
	      g_res_len == 4 + NFS3_POST_OP_ATTR_MAX + 8);

	/* MKNOD of a regular file: BADTYPE; SYMLINK + READLINK */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "node", 4);
	xdr_put_u32(&a, FS_REG);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_MKNOD, &a) == 0 && g_res[3] == (NFS3ERR_BADTYPE & 0xff));
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "lnk", 3);
	put_sattr_mode(&a, 0777);
	xdr_put_opaque(&a, "target/path", 11);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_SYMLINK, &a) == 0 && g_res[3] == NFS3_OK);
	xdr_dec_init(&d, g_res + 4, g_res_len - 4);
	uint32_t fl;
	const uint8_t *fh = xdr_get_bool(&d) ? xdr_get_opaque(&d, NFS3_FHSIZE, &fl) : NULL;
	CHECK(fh != NULL);
	if (fh) {
		xdr_enc_init(&a, buf, sizeof(buf));
		xdr_put_opaque(&a, fh, fl);
		CHECK(do_call(NFS3_PROGRAM, NFS3PROC_READLINK, &a) == 0);
		xdr_dec_init(&d, g_res, g_res_len);
		CHECK(xdr_get_u32(&d) == NFS3_OK);
		dec_skip_attr(&d);
		uint32_t tl;
		const uint8_t *t = xdr_get_opaque(&d, 4096, &tl);
		CHECK(t && tl == 11 && memcmp(t, "target/path", 11) == 0);
	}
	/* SETATTR with a guard that does not match: NOT_SYNC with wcc */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_file);
	put_sattr_mode(&a, 0600);
	xdr_put_bool(&a, true);
	xdr_put_u32(&a, 999999);
	xdr_put_u32(&a, 0);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_SETATTR, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3ERR_NOT_SYNC && g_res_len == 4 + NFS3_WCC_MAX);
}

/* Reads a directory in pages of `count` bytes; returns the entries seen or -1 on a bad reply. */
static long readdir_all(bool plus, uint32_t dircount, uint32_t count, uint32_t *status_out)
{
	uint64_t cookie = 0;
	uint8_t verf[8] = {0};
	long total = 0;
	for (int page = 0; page < 1000; page++) {
		uint8_t buf[256];
		struct xdr_enc a;
		xdr_enc_init(&a, buf, sizeof(buf));
		put_fh(&a, &g_root);
		xdr_put_u64(&a, cookie);
		xdr_put_fixed(&a, verf, 8);
		if (plus)
			xdr_put_u32(&a, dircount);
		xdr_put_u32(&a, count);
		if (do_call(NFS3_PROGRAM, plus ? NFS3PROC_READDIRPLUS : NFS3PROC_READDIR, &a) != 0)
			return -1;
		if (g_res_len > count) {
			printf("#   reply of %zu bytes exceeds count %u\n", g_res_len, count);
			return -1;
		}
		struct xdr_dec d;
		xdr_dec_init(&d, g_res, g_res_len);
		*status_out = xdr_get_u32(&d);
		if (*status_out != NFS3_OK)
			return total;
		dec_skip_attr(&d);
		const uint8_t *v = xdr_get_fixed(&d, 8);
		if (v)
			memcpy(verf, v, 8);
		size_t dirbytes = 0;
		while (xdr_get_bool(&d) && xdr_dec_ok(&d)) {
			xdr_get_u64(&d);
			uint32_t nl;
			xdr_get_opaque(&d, 255, &nl);
			cookie = xdr_get_u64(&d);
			dirbytes += nfs3_entry_bytes(nl);
			if (plus) {
				dec_skip_attr(&d);
				if (xdr_get_bool(&d))
					xdr_get_opaque(&d, NFS3_FHSIZE, &nl);
			}
			total++;
		}
		bool eof = xdr_get_bool(&d);
		if (!xdr_dec_ok(&d) || xdr_dec_remaining(&d) != 0 || (plus && dirbytes > dircount))
			return -1;
		if (eof)
			return total;
	}
	return -1;
}

static void test_readdir(void)
{
	uint8_t buf[512];
	struct xdr_enc a;
	set_cred(1000, 1000);
	/* 3 entries exist (file, excl, lnk); add 60 more */
	for (int i = 0; i < 60; i++) {
		char name[32];
		snprintf(name, sizeof(name), "entry-number-%02d", i);
		xdr_enc_init(&a, buf, sizeof(buf));
		put_fh(&a, &g_root);
		xdr_put_opaque(&a, name, (uint32_t)strlen(name));
		put_sattr_mode(&a, 0755);
		CHECK(do_call(NFS3_PROGRAM, NFS3PROC_MKDIR, &a) == 0 && g_res[3] == NFS3_OK);
	}
	uint32_t st = 0xdead;
	CHECK(readdir_all(false, 0, 65536, &st) == 63 && st == NFS3_OK);
	CHECK(readdir_all(false, 0, 400, &st) == 63 && st == NFS3_OK);
	CHECK(readdir_all(true, 65536, 65536, &st) == 63 && st == NFS3_OK);
	CHECK(readdir_all(true, 200, 65536, &st) == 63 && st == NFS3_OK);
	CHECK(readdir_all(true, 65536, 900, &st) == 63 && st == NFS3_OK);
	/* too small for the head plus one entry */
	CHECK(readdir_all(false, 0, 120, &st) == 0 && st == NFS3ERR_TOOSMALL);
	CHECK(readdir_all(true, 8, 65536, &st) == 0 && st == NFS3ERR_TOOSMALL);
	CHECK(readdir_all(false, 0, 50, &st) == 0 && st == NFS3ERR_TOOSMALL);

	/* a cookie with a stale verifier: the back end's BAD_COOKIE */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_u64(&a, 5);
	xdr_put_fixed(&a, "oldverf!", 8);
	xdr_put_u32(&a, 4096);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_READDIR, &a) == 0);
	CHECK(g_res_len == 4 + NFS3_POST_OP_ATTR_MAX && g_res[3] == (NFS3ERR_BAD_COOKIE & 0xff));

	/* REMOVE and RMDIR */
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "entry-number-00", 15);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_REMOVE, &a) == 0 && g_res[3] == NFS3ERR_ISDIR &&
	      g_res_len == 4 + NFS3_WCC_MAX);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_RMDIR, &a) == 0 && g_res[3] == NFS3_OK);
	CHECK(readdir_all(false, 0, 8192, &st) == 62);
}

static uint32_t mnt_status(const char *path, struct nfs_fh *fh_out)
{
	uint8_t buf[1200];
	struct xdr_enc a;
	xdr_enc_init(&a, buf, sizeof(buf));
	xdr_put_opaque(&a, path, (uint32_t)strlen(path));
	if (do_call(MOUNT_PROGRAM, MOUNTPROC3_MNT, &a) != 0)
		return 0xdead;
	struct xdr_dec d;
	xdr_dec_init(&d, g_res, g_res_len);
	uint32_t st = xdr_get_u32(&d);
	if (st == MNT3_OK && fh_out) {
		const uint8_t *fh = xdr_get_opaque(&d, NFS3_FHSIZE, &fh_out->nf_len);
		if (fh)
			memcpy(fh_out->nf_bytes, fh, fh_out->nf_len);
	}
	return st;
}

/* MNT below an export walks the path through the back end. */
static void test_mount_subdir(void)
{
	uint8_t buf[256];
	struct xdr_enc a;
	struct nfs_fh fh;
	memset(&fh, 0, sizeof(fh));
	CHECK(mnt_status("/exp/entry-number-05", &fh) == MNT3_OK);
	xdr_enc_init(&a, buf, sizeof(buf));
	put_fh(&a, &g_root);
	xdr_put_opaque(&a, "entry-number-05", 15);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_LOOKUP, &a) == 0 && g_res[3] == NFS3_OK);
	CHECK(g_res_len > 8 && fh.nf_len == g_res[7] && memcmp(g_res + 8, fh.nf_bytes, fh.nf_len) == 0);
	CHECK(mnt_status("/exp//entry-number-05/", NULL) == MNT3_OK);
	CHECK(mnt_status("/exp/file", NULL) == MNT3ERR_NOTDIR);
	CHECK(mnt_status("/exp/missing/x", NULL) == MNT3ERR_NOENT);
	CHECK(mnt_status("/exp/..", NULL) == MNT3ERR_NOENT);
	CHECK(mnt_status("/exp/./entry-number-05", NULL) == MNT3ERR_NOENT);
	CHECK(mnt_status("/expfoo", NULL) == MNT3ERR_NOENT);
	CHECK(mnt_status("/denied/sub", NULL) == MNT3ERR_ACCES);
	/* the list holds the subdirectory as mounted; UMNTALL clears it */
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_DUMP, NULL) == 0);
	CHECK(g_res_len == 4 + (4 + 12 + 4 + 20) + 4);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_UMNTALL, NULL) == 0);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_DUMP, NULL) == 0 && g_res_len == 4);
}

/* The same programs over UDP: READ replies are capped to fit a datagram. */
static void test_udp(void)
{
	struct rpc_clnt *udp = NULL;
	/* the server listens on the same port number for both transports */
	CHECK(rpc_clnt_create("127.0.0.1", g_port, RPC_UDP, &udp) == 0);
	if (!udp)
		return;
	struct rpc_cred c = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = 1000, .rcr_gid = 1000};
	rpc_clnt_set_cred(udp, &c);

	/* a 100 KB file, read with count 1 MiB over UDP */
	uint8_t *big = malloc(100000);
	uint8_t *args = malloc(100200);
	CHECK(big && args);
	if (!big || !args)
		goto out;
	for (size_t i = 0; i < 100000; i++)
		big[i] = (uint8_t)(i * 13);
	struct xdr_enc a;
	xdr_enc_init(&a, args, 100200);
	put_fh(&a, &g_file);
	xdr_put_u64(&a, 0);
	xdr_put_u32(&a, 100000);
	xdr_put_u32(&a, FS_FILE_SYNC);
	xdr_put_opaque(&a, big, 100000);
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_WRITE, &a) == 0 && g_res[3] == NFS3_OK);

	xdr_enc_init(&a, args, 256);
	put_fh(&a, &g_file);
	xdr_put_u64(&a, 1);
	xdr_put_u32(&a, 1u << 20);
	int accept = -1, auth = -1;
	int rc = rpc_clnt_call(udp, NFS3_PROGRAM, NFS3_VERSION, NFS3PROC_READ, args, xdr_enc_len(&a),
			       g_res, sizeof(g_res), &g_res_len, 5000, &accept, &auth);
	CHECK(rc == 0);
	struct xdr_dec d;
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	dec_skip_attr(&d);
	CHECK(xdr_get_u32(&d) == NFS3_UDP_IO_MAX && xdr_get_bool(&d) == false);
	uint32_t dl;
	const uint8_t *data = xdr_get_opaque(&d, 1u << 20, &dl);
	CHECK(data && dl == NFS3_UDP_IO_MAX && memcmp(data, big + 1, dl) == 0);

	/* and a 1 MiB-count READ over TCP returns the whole rest of the file in one reply */
	CHECK(do_call(NFS3_PROGRAM, NFS3PROC_READ, &a) == 0);
	xdr_dec_init(&d, g_res, g_res_len);
	CHECK(xdr_get_u32(&d) == NFS3_OK);
	dec_skip_attr(&d);
	CHECK(xdr_get_u32(&d) == 99999 && xdr_get_bool(&d) == true);
	data = xdr_get_opaque(&d, 1u << 20, &dl);
	CHECK(data && dl == 99999 && memcmp(data, big + 1, dl) == 0 && xdr_dec_remaining(&d) == 0);
out:
	free(big);
	free(args);
	rpc_clnt_destroy(udp);
}

/* A reload (exportfs -r) while serving: /exp stays (same path, same fsid, same file system) but
 * now admits only 10.0.0.0/8, /secure and /denied go, /exp2 comes. The client's cached decision
 * for /exp does not outlive the reload; the gone export's handles are stale; the kept /ro's
 * handle still works; the new export mounts; the old generation is freed once no call holds it.
 * Runs last: g_exports is freed with its generation. */
static void test_reload(void)
{
	set_cred(0, 0);
	struct nfs_fh exp_root = root_fh_of(0), ro_root = root_fh_of(1);
	struct nfs_fh secure_root = root_fh_of(2);
	CHECK(getattr_status(&exp_root) == NFS3_OK); /* the decision is cached now */
	CHECK(getattr_status(&ro_root) == NFS3_OK);
	const char *text = "/exp 10.0.0.0/8(rw,insecure)\n"
			   "/ro *(ro,insecure)\n"
			   "/exp2 127.0.0.1(rw,insecure)\n";
	struct nfs_exports *xs = NULL;
	char err[256];
	CHECK(nfs_exports_parse(text, strlen(text), &xs, err, sizeof(err)) == 0);
	if (!xs)
		return;
	g_fs_new = memfs_create(nfs_exports_fsid(xs, 2));
	struct fs *fss[3] = {&g_fs[0]->mf_fs, &g_fs[1]->mf_fs, &g_fs_new->mf_fs};
	/* as a call still running would, this holds the first generation */
	struct nfs_table *held = nfs_table_hold(g_svc);
	CHECK(nfs_service_reload(g_svc, xs, fss) == 0);
	g_exports = NULL;
	CHECK(getattr_status(&exp_root) == NFS3ERR_ACCES);
	CHECK(mnt_status("/exp", NULL) == MNT3ERR_ACCES);
	CHECK(getattr_status(&secure_root) == NFS3ERR_STALE);
	CHECK(mnt_status("/secure", NULL) == MNT3ERR_NOENT);
	struct nfs_fh fh;
	memset(&fh, 0, sizeof(fh));
	CHECK(getattr_status(&ro_root) == NFS3_OK);
	CHECK(mnt_status("/ro", &fh) == MNT3_OK && fh.nf_len == ro_root.nf_len &&
	      memcmp(fh.nf_bytes, ro_root.nf_bytes, fh.nf_len) == 0);
	CHECK(mnt_status("/exp2", &fh) == MNT3_OK);
	CHECK(getattr_status(&fh) == NFS3_OK);
	/* EXPORT lists the new set */
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_EXPORT, NULL) == 0);
	struct xdr_dec d;
	xdr_dec_init(&d, g_res, g_res_len);
	size_t n = 0;
	while (xdr_get_bool(&d) && xdr_dec_ok(&d)) {
		uint32_t pl;
		const uint8_t *dir = xdr_get_opaque(&d, 1024, &pl);
		CHECK(dir && pl == strlen(nfs_exports_path(xs, n)) &&
		      memcmp(dir, nfs_exports_path(xs, n), pl) == 0);
		while (xdr_get_bool(&d) && xdr_dec_ok(&d))
			(void)xdr_get_opaque(&d, 255, &pl);
		n++;
	}
	CHECK(n == 3 && xdr_dec_ok(&d));
	/* the first generation stays while held, and goes at the reap after */
	nfs_service_reap(g_svc);
	CHECK(g_svc->ns_retired == held);
	nfs_table_rele(held);
	nfs_service_reap(g_svc);
	CHECK(g_svc->ns_retired == NULL);
	CHECK(do_call(MOUNT_PROGRAM, MOUNTPROC3_UMNTALL, NULL) == 0);
}

int main(void)
{
	if (setup() < 0) {
		tap_check(false, "service setup");
		return tap_finish();
	}
	TAP_RUN(test_mount);
	TAP_RUN(test_handles_and_rules);
	TAP_RUN(test_create_write_read);
	TAP_RUN(test_ro_and_misc);
	TAP_RUN(test_readdir);
	TAP_RUN(test_mount_subdir);
	TAP_RUN(test_udp);
	TAP_RUN(test_reload);
	teardown();
	return tap_finish();
}
