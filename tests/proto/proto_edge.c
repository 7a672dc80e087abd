/* proto_edge.c: NFSv3 behaviour at the edges, against a private `shale serve`: the duplicate
 * request cache, pipelined requests completing out of order, READ over UDP, directory listing
 * while entries are removed, symbolic links that point out of the export, names with a NUL byte,
 * cross-export LINK/RENAME, size limits, and permission details (EXECUTE for root, chown by a
 * non-owner).
 *
 * Exports used:
 *   exp0  rw, insecure, no_root_squash
 *   exp1  rw, insecure, no_root_squash   (a second file system for XDEV) */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pclient.h"
#include "rawrpc.h"
#include "tap.h"
#include "testserver.h"

#define MNT_PROGRAM 100005
#define NFS_PROGRAM 100003

static struct ts_server srv;
static struct pc_client cl;
static struct pc_fh root, root1;

static int mount_path(const char *path, struct pc_fh *out)
{
	uint8_t fh[64];
	uint32_t len = 0;
	int st = rr_mount(srv.ts_port, path, fh, &len);
	if (st == 0) {
		out->pf_len = len;
		memcpy(out->pf_data, fh, len);
	}
	return st;
}

static uint32_t do_create(struct pc_client *c, struct pc_fh *dir, const char *name, uint32_t mode,
			  struct pc_fh *out)
{
	CREATE3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(dir);
	a.where.name = (char *)name;
	a.how.mode = GUARDED;
	a.how.createhow3_u.obj_attributes = pc_sattr_mode(mode);
	CREATE3res r = {0};
	if (pc_nfs3_create(c, &a, &r) != 0)
		return 0xffffffffu;
	if (r.status == NFS3_OK && out != NULL) {
		if (r.CREATE3res_u.resok.obj.handle_follows)
			pc_fh_set(out, &r.CREATE3res_u.resok.obj.post_op_fh3_u.handle);
		else
			return pc_lookup(c, dir, name, out, NULL);
	}
	return r.status;
}

static uint32_t do_mkdir(struct pc_fh *dir, const char *name, struct pc_fh *out)
{
	MKDIR3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(dir);
	a.where.name = (char *)name;
	a.attributes = pc_sattr_mode(0755);
	MKDIR3res r = {0};
	if (pc_nfs3_mkdir(&cl, &a, &r) != 0)
		return 0xffffffffu;
	if (r.status == NFS3_OK && out != NULL) {
		if (r.MKDIR3res_u.resok.obj.handle_follows)
			pc_fh_set(out, &r.MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
		else
			return pc_lookup(&cl, dir, name, out, NULL);
	}
	return r.status;
}

static uint32_t do_write(struct pc_fh *fh, uint64_t off, const void *data, uint32_t len)
{
	WRITE3args a;
	memset(&a, 0, sizeof(a));
	a.file = pc_fh_arg(fh);
	a.offset = off;
	a.count = len;
	a.stable = FILE_SYNC;
	a.data.data_len = len;
	a.data.data_val = (char *)data;
	WRITE3res r = {0};
	if (pc_nfs3_write(&cl, &a, &r) != 0)
		return 0xffffffffu;
	return r.status;
}

/* A raw NFS call on fd with AUTH_SYS root; the reply's nfsstat3 (first result word), or -1. */
static int raw_nfs_status(int fd, bool tcp, uint32_t xid, uint32_t proc, const struct rr_buf *args)
{
	uint32_t status;
	return rr_nfs_call(fd, tcp, xid, proc, args, &status, NULL, NULL) == 0 ? (int)status : -1;
}

/* ---------------------------------------------------------------- cases */

/* A retransmitted non-idempotent call (same xid, same bytes) must get the first answer again
 * from the duplicate request cache, not the result of executing it twice. */
static void drc_replays(void)
{
	int fd = rr_connect_tcp(srv.ts_port, 0);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	struct rr_buf args;
	rr_buf_init(&args);
	/* CREATE GUARDED "drc-file" mode 0644. */
	rr_put_opaque(&args, root.pf_data, root.pf_len);
	rr_put_string(&args, "drc-file");
	rr_put_u32(&args, 1); /* GUARDED */
	rr_put_u32(&args, 1);
	rr_put_u32(&args, 0644); /* mode */
	for (int i = 0; i < 5; i++)
		rr_put_u32(&args, 0); /* uid gid size atime mtime: don't set */
	int first = raw_nfs_status(fd, true, 0xd0c00001u, 8, &args);
	int again = raw_nfs_status(fd, true, 0xd0c00001u, 8, &args);
	CHECKF(first == NFS3_OK, "CREATE: %d", first);
	CHECKF(again == NFS3_OK, "retransmitted CREATE: %d (EXIST=17 means it ran twice)", again);
	/* A new xid is a new request: EXIST. */
	int fresh = raw_nfs_status(fd, true, 0xd0c00002u, 8, &args);
	CHECKF(fresh == NFS3ERR_EXIST, "CREATE with a new xid: %d", fresh);
	/* REMOVE, retransmitted: OK both times (not NOENT the second). */
	args.rb_len = 0;
	rr_put_opaque(&args, root.pf_data, root.pf_len);
	rr_put_string(&args, "drc-file");
	first = raw_nfs_status(fd, true, 0xd0c00003u, 12, &args);
	again = raw_nfs_status(fd, true, 0xd0c00003u, 12, &args);
	CHECKF(first == NFS3_OK, "REMOVE: %d", first);
	CHECKF(again == NFS3_OK, "retransmitted REMOVE: %d (NOENT=2 means it ran twice)", again);
	close(fd);
	/* The retransmission may come over a new connection after a reconnect (RFC 5531 leaves
	 * this to the server; Linux keys its cache on the address, not the port). */
	fd = rr_connect_tcp(srv.ts_port, 0);
	CHECK(fd >= 0);
	if (fd >= 0) {
		int over_new = raw_nfs_status(fd, true, 0xd0c00003u, 12, &args);
		printf("#   REMOVE retransmitted on a new connection: status %d\n", over_new);
		CHECKF(over_new == NFS3_OK || over_new == NFS3ERR_NOENT, "status %d", over_new);
		close(fd);
	}
	rr_buf_fini(&args);
}

/* 64 WRITEs of distinct blocks sent back to back on one connection, replies collected by xid
 * (they may complete out of order), then the file read back. */
static void pipelined_writes(void)
{
	enum { N = 64, BLOCK = 4096 };
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "pipelined", 0644, &f) == NFS3_OK);
	int fd = rr_connect_tcp(srv.ts_port, 0);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	struct rr_buf all, one;
	rr_buf_init(&all);
	rr_buf_init(&one);
	static uint8_t block[BLOCK];
	for (int i = 0; i < N; i++) {
		one.rb_len = 0;
		rr_put_call(&one, 0x91e00000u + (uint32_t)i, 2, RR_PROG_NFS, 3, 7, RR_CRED_SYS, 0, 0);
		rr_put_opaque(&one, f.pf_data, f.pf_len);
		rr_put_u64(&one, (uint64_t)i * BLOCK);
		rr_put_u32(&one, BLOCK);
		rr_put_u32(&one, i % 2 ? 0 : 2); /* alternate UNSTABLE and FILE_SYNC */
		memset(block, 'A' + i % 26, BLOCK);
		block[0] = (uint8_t)i;
		rr_put_opaque(&one, block, BLOCK);
		rr_put_u32(&all, 0x80000000u | (uint32_t)one.rb_len);
		rr_put_bytes(&all, one.rb_data, one.rb_len);
	}
	bool sent = !all.rb_failed && send(fd, all.rb_data, all.rb_len, MSG_NOSIGNAL) == (ssize_t)all.rb_len;
	CHECK(sent);
	bool got[N];
	memset(got, 0, sizeof(got));
	int ok = 0, in_order = 0, last = -1;
	for (int i = 0; sent && i < N; i++) {
		uint8_t *rec = NULL;
		long n = rr_recv_record(fd, true, &rec, 1 << 20, 10000);
		struct rr_reply rp;
		if (n > 0 && rr_parse_reply(rec, (size_t)n, &rp) == 0 && rp.rp_accept_stat == 0) {
			int idx = (int)(rp.rp_xid - 0x91e00000u);
			if (idx >= 0 && idx < N && !got[idx] && rr_get_u32(&rp.rp_body) == NFS3_OK) {
				got[idx] = true;
				ok++;
				in_order += idx > last;
				last = idx;
			}
		}
		free(rec);
	}
	printf("#   %d of %d WRITE replies, %d in increasing xid order\n", ok, N, in_order);
	CHECK(ok == N);
	close(fd);
	rr_buf_fini(&all);
	rr_buf_fini(&one);
	/* Read it all back. */
	READ3args ra = { .file = pc_fh_arg(&f), .offset = 0, .count = N * BLOCK };
	READ3res rr = {0};
	CHECK(pc_nfs3_read(&cl, &ra, &rr) == 0 && rr.status == NFS3_OK);
	if (rr.status == NFS3_OK && rr.READ3res_u.resok.data.data_len == N * BLOCK) {
		const uint8_t *p = (const uint8_t *)rr.READ3res_u.resok.data.data_val;
		int good = 0;
		for (int i = 0; i < N; i++) {
			const uint8_t *blk = p + (size_t)i * BLOCK;
			bool same = blk[0] == (uint8_t)i;
			for (int j = 1; j < BLOCK && same; j++)
				same = blk[j] == (uint8_t)('A' + i % 26);
			good += same;
		}
		CHECKF(good == N, "%d of %d blocks read back intact", good, N);
	} else {
		CHECKF(false, "read back %u bytes", rr.READ3res_u.resok.data.data_len);
	}
	pc_release(&cl);
}

/* READ over UDP: a reply must fit in a datagram, so FSINFO over UDP must advertise an rtmax that
 * fits, and a larger count is answered short (RFC 1813 3.3.6 lets READ return fewer bytes) or
 * with an error, never silently dropped. */
static void udp_read(void)
{
	enum { LEN = 200000 };
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "udp-read", 0644, &f) == NFS3_OK);
	uint8_t *data = malloc(LEN);
	CHECK(data != NULL);
	if (data == NULL)
		return;
	for (int i = 0; i < LEN; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	CHECK(do_write(&f, 0, data, LEN) == NFS3_OK);
	int fd = rr_connect_udp(srv.ts_port);
	CHECK(fd >= 0);
	/* FSINFO asked over UDP: rtmax must be a size a READ over UDP can actually return. */
	uint32_t udp_rtmax = 0;
	if (fd >= 0) {
		struct rr_buf b;
		struct rr_reply rp;
		uint8_t *rec = NULL;
		rr_buf_init(&b);
		rr_put_call(&b, 0x0dd0f000u, 2, RR_PROG_NFS, 3, 19, RR_CRED_SYS, 0, 0);
		rr_put_opaque(&b, f.pf_data, f.pf_len);
		if (rr_call(fd, false, &b, 0x0dd0f000u, &rp, &rec, 3000) == 0 && rp.rp_accept_stat == 0 &&
		    rr_get_u32(&rp.rp_body) == NFS3_OK) {
			if (rr_get_u32(&rp.rp_body) == 1)
				rr_skip(&rp.rp_body, 84);
			udp_rtmax = rr_get_u32(&rp.rp_body);
		}
		free(rec);
		rr_buf_fini(&b);
		printf("#   FSINFO over UDP: rtmax %u\n", udp_rtmax);
		CHECKF(udp_rtmax > 0 && udp_rtmax < 65536, "FSINFO over UDP advertises rtmax %u", udp_rtmax);
	}
	uint32_t counts[] = { 1000, 32768, udp_rtmax ? udp_rtmax : 1048576, 1048576 };
	for (size_t k = 0; fd >= 0 && k < sizeof(counts) / sizeof(counts[0]); k++) {
		struct rr_buf b;
		struct rr_reply rp;
		uint8_t *rec = NULL;
		uint32_t xid = 0x0dd00000u + (uint32_t)k;
		rr_buf_init(&b);
		rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 6, RR_CRED_SYS, 0, 0);
		rr_put_opaque(&b, f.pf_data, f.pf_len);
		rr_put_u64(&b, 100);
		rr_put_u32(&b, counts[k]);
		int rc = rr_call(fd, false, &b, xid, &rp, &rec, 3000);
		CHECKF(rc == 0, "READ of %u bytes over UDP: no reply (%d)", counts[k], rc);
		if (rc == 0 && rp.rp_accept_stat == 0) {
			uint32_t st = rr_get_u32(&rp.rp_body);
			if (st == NFS3_OK) {
				if (rr_get_u32(&rp.rp_body) == 1) /* post_op_attr follows: fattr3 is 84 bytes */
					rr_skip(&rp.rp_body, 84);
				uint32_t count = rr_get_u32(&rp.rp_body);
				rr_get_u32(&rp.rp_body); /* eof */
				uint32_t dlen = 0;
				const uint8_t *d = rr_get_opaque(&rp.rp_body, 1u << 20, &dlen);
				CHECKF(d != NULL && dlen == count && count <= counts[k] && count > 0 &&
				       memcmp(d, data + 100, count) == 0,
				       "READ %u over UDP: count %u, data length %u", counts[k], count, dlen);
				if (counts[k] <= 32768)
					CHECKF(count == counts[k], "READ %u over UDP returned %u", counts[k], count);
			} else {
				printf("#   READ %u over UDP: status %u\n", counts[k], st);
				CHECK(counts[k] > 32768); /* only the oversized request may fail */
			}
		}
		free(rec);
		rr_buf_fini(&b);
	}
	if (fd >= 0)
		close(fd);
	free(data);
}

/* Listing a directory in pages while entries are removed between pages: every entry that exists
 * throughout is returned exactly once, and nothing is returned twice. */
static void readdir_while_removing(void)
{
	enum { N = 200 };
	struct pc_fh d;
	CHECK(do_mkdir(&root, "shrinking", &d) == NFS3_OK);
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "s%03d", i);
		CHECK(do_create(&cl, &d, name, 0644, NULL) == NFS3_OK);
		if (i % 50 == 0)
			pc_release(&cl);
	}
	int seen[N];
	bool removed[N];
	memset(seen, 0, sizeof(seen));
	memset(removed, 0, sizeof(removed));
	uint64_t cookie = 0;
	char verf[NFS3_COOKIEVERFSIZE] = { 0 };
	bool eof = false;
	int pages = 0, removals = 0;
	uint32_t last_status = 0;
	while (!eof && pages < 500) {
		READDIR3args a;
		memset(&a, 0, sizeof(a));
		a.dir = pc_fh_arg(&d);
		a.cookie = cookie;
		memcpy(a.cookieverf, verf, sizeof(verf));
		a.count = 600;
		READDIR3res r = {0};
		if (pc_nfs3_readdir(&cl, &a, &r) != 0 || r.status != NFS3_OK) {
			last_status = r.status;
			break;
		}
		pages++;
		memcpy(verf, r.READDIR3res_u.resok.cookieverf, sizeof(verf));
		eof = r.READDIR3res_u.resok.reply.eof;
		for (entry3 *e = r.READDIR3res_u.resok.reply.entries; e != NULL; e = e->nextentry) {
			cookie = e->cookie;
			int idx;
			if (sscanf(e->name, "s%03d", &idx) == 1 && idx >= 0 && idx < N)
				seen[idx]++;
		}
		pc_release(&cl);
		/* Remove two names: one already listed, one perhaps not yet. */
		for (int k = 0; k < 2; k++) {
			int victim = (pages * 37 + k * 101) % N;
			if (removed[victim])
				continue;
			char name[32];
			snprintf(name, sizeof(name), "s%03d", victim);
			REMOVE3args ra = { .object = { .dir = pc_fh_arg(&d), .name = name } };
			REMOVE3res rr = {0};
			if (pc_nfs3_remove(&cl, &ra, &rr) == 0 && rr.status == NFS3_OK) {
				removed[victim] = true;
				removals++;
			}
		}
	}
	int dup = 0, missing = 0;
	for (int i = 0; i < N; i++) {
		if (seen[i] > 1)
			dup++;
		if (!removed[i] && seen[i] == 0)
			missing++;
	}
	printf("#   %d pages, %d removals during the listing, %d duplicated, %d surviving names missing\n",
	       pages, removals, dup, missing);
	CHECKF(last_status == 0, "listing stopped with status %u", last_status);
	CHECK(eof);
	CHECK(dup == 0);
	CHECK(missing == 0);
}

/* A symbolic link that points out of the export (absolute or by ".."): the server must never
 * follow it, so LOOKUP through it fails with NOTDIR. */
static void symlink_escape(void)
{
	const char *targets[] = { "/etc", "../../../../../../etc" };
	for (int i = 0; i < 2; i++) {
		char name[32];
		snprintf(name, sizeof(name), "escape%d", i);
		SYMLINK3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = pc_fh_arg(&root);
		a.where.name = name;
		a.symlink.symlink_attributes = pc_sattr_mode(0777);
		a.symlink.symlink_data = (char *)targets[i];
		SYMLINK3res r = {0};
		CHECK(pc_nfs3_symlink(&cl, &a, &r) == 0 && r.status == NFS3_OK);
		struct pc_fh l;
		fattr3 la = {0};
		CHECK(pc_lookup(&cl, &root, name, &l, &la) == NFS3_OK);
		CHECKF(la.type == NF3LNK, "%s: type %u", name, la.type);
		uint32_t st = pc_lookup(&cl, &l, "passwd", NULL, NULL);
		CHECKF(st == NFS3ERR_NOTDIR, "LOOKUP passwd through %s -> %s: status %u", name, targets[i], st);
		READ3args ra = { .file = pc_fh_arg(&l), .offset = 0, .count = 100 };
		READ3res rr = {0};
		CHECK(pc_nfs3_read(&cl, &ra, &rr) == 0);
		CHECKF(rr.status != NFS3_OK, "READ of the link %s succeeded", name);
		READDIR3args da;
		memset(&da, 0, sizeof(da));
		da.dir = pc_fh_arg(&l);
		da.count = 4096;
		READDIR3res dr = {0};
		CHECK(pc_nfs3_readdir(&cl, &da, &dr) == 0);
		CHECKF(dr.status == NFS3ERR_NOTDIR, "READDIR of the link %s: status %u", name, dr.status);
	}
	/* ".." from a subdirectory is its parent, and ".." of the root is the root. */
	struct pc_fh sub;
	CHECK(do_mkdir(&root, "sub", &sub) == NFS3_OK);
	fattr3 ra = {0}, pa = {0}, rpa = {0};
	GETATTR3args ga = { .object = pc_fh_arg(&root) };
	GETATTR3res gr = {0};
	CHECK(pc_nfs3_getattr(&cl, &ga, &gr) == 0 && gr.status == NFS3_OK);
	ra = gr.GETATTR3res_u.resok.obj_attributes;
	CHECK(pc_lookup(&cl, &sub, "..", NULL, &pa) == NFS3_OK && pa.fileid == ra.fileid);
	struct pc_fh up;
	if (pc_lookup(&cl, &root, "..", &up, &rpa) == NFS3_OK)
		CHECKF(rpa.fileid == ra.fileid, "'..' of the root left the export");
	pc_release(&cl);
}

/* Names containing a NUL byte are not valid file names; the server must refuse them and must
 * not create the prefix before the NUL. */
static void nul_in_name(void)
{
	int fd = rr_connect_tcp(srv.ts_port, 0);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	struct rr_buf args;
	rr_buf_init(&args);
	rr_put_opaque(&args, root.pf_data, root.pf_len);
	rr_put_opaque(&args, "nul\0tail", 8);
	rr_put_u32(&args, 0); /* UNCHECKED */
	for (int i = 0; i < 6; i++)
		rr_put_u32(&args, 0);
	int st = raw_nfs_status(fd, true, 0x4e554c01u, 8, &args);
	CHECKF(st != NFS3_OK, "CREATE of \"nul\\0tail\": status %d", st);
	CHECK(pc_lookup(&cl, &root, "nul", NULL, NULL) == NFS3ERR_NOENT);
	/* LOOKUP of such a name must not find "nul" either. */
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "nul", 0644, &f) == NFS3_OK);
	args.rb_len = 0;
	rr_put_opaque(&args, root.pf_data, root.pf_len);
	rr_put_opaque(&args, "nul\0tail", 8);
	st = raw_nfs_status(fd, true, 0x4e554c02u, 3, &args);
	CHECKF(st != NFS3_OK, "LOOKUP of \"nul\\0tail\" found something: status %d", st);
	rr_buf_fini(&args);
	close(fd);
}

static void cross_export(void)
{
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "xdev-src", 0644, &f) == NFS3_OK);
	LINK3args la = { .file = pc_fh_arg(&f), .link = { .dir = pc_fh_arg(&root1), .name = "xdev-link" } };
	LINK3res lr = {0};
	CHECK(pc_nfs3_link(&cl, &la, &lr) == 0);
	CHECKF(lr.status == NFS3ERR_XDEV, "LINK across exports: status %u", lr.status);
	RENAME3args ra = { .from = { .dir = pc_fh_arg(&root), .name = "xdev-src" },
			   .to = { .dir = pc_fh_arg(&root1), .name = "xdev-moved" } };
	RENAME3res rr = {0};
	CHECK(pc_nfs3_rename(&cl, &ra, &rr) == 0);
	CHECKF(rr.status == NFS3ERR_XDEV, "RENAME across exports: status %u", rr.status);
	CHECK(pc_lookup(&cl, &root, "xdev-src", NULL, NULL) == NFS3_OK);
	CHECK(pc_lookup(&cl, &root1, "xdev-moved", NULL, NULL) == NFS3ERR_NOENT);
	/* The two exports report different fsids. */
	GETATTR3args g0 = { .object = pc_fh_arg(&root) }, g1 = { .object = pc_fh_arg(&root1) };
	GETATTR3res r0 = {0}, r1 = {0};
	CHECK(pc_nfs3_getattr(&cl, &g0, &r0) == 0 && pc_nfs3_getattr(&cl, &g1, &r1) == 0);
	if (r0.status == NFS3_OK && r1.status == NFS3_OK)
		CHECK(r0.GETATTR3res_u.resok.obj_attributes.fsid != r1.GETATTR3res_u.resok.obj_attributes.fsid);
	pc_release(&cl);
}

static void size_limits(void)
{
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "huge", 0644, &f) == NFS3_OK);
	/* SETATTR to a size no file system holds: FBIG (or INVAL), and the size is unchanged. */
	SETATTR3args a;
	memset(&a, 0, sizeof(a));
	a.object = pc_fh_arg(&f);
	a.new_attributes.size.set_it = 1;
	a.new_attributes.size.set_size3_u.size = 1ull << 63;
	SETATTR3res r = {0};
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_FBIG || r.status == NFS3ERR_INVAL, "SETATTR size 2^63: status %u",
	       r.status);
	/* WRITE at an offset whose end overflows 64 bits. */
	WRITE3args w;
	memset(&w, 0, sizeof(w));
	w.file = pc_fh_arg(&f);
	w.offset = ~0ull - 2;
	w.count = 8;
	w.stable = FILE_SYNC;
	w.data.data_len = 8;
	w.data.data_val = "overflow";
	WRITE3res wr = {0};
	CHECK(pc_nfs3_write(&cl, &w, &wr) == 0);
	CHECKF(wr.status == NFS3ERR_FBIG || wr.status == NFS3ERR_INVAL, "WRITE at 2^64-3: status %u",
	       wr.status);
	/* READ far beyond the end: OK, 0 bytes, eof. */
	READ3args ra = { .file = pc_fh_arg(&f), .offset = ~0ull - 10, .count = 100 };
	READ3res rr = {0};
	CHECK(pc_nfs3_read(&cl, &ra, &rr) == 0);
	CHECKF(rr.status == NFS3_OK && rr.READ3res_u.resok.count == 0 && rr.READ3res_u.resok.eof,
	       "READ at 2^64-11: status %u", rr.status);
	GETATTR3args ga = { .object = pc_fh_arg(&f) };
	GETATTR3res gr = {0};
	CHECK(pc_nfs3_getattr(&cl, &ga, &gr) == 0 && gr.status == NFS3_OK &&
	      gr.GETATTR3res_u.resok.obj_attributes.size == 0);
	/* WRITE whose count disagrees with the data length: refused (INVAL or GARBAGE_ARGS), or
	 * only the bytes actually sent are written; never more. */
	memset(&w, 0, sizeof(w));
	w.file = pc_fh_arg(&f);
	w.count = 1000;
	w.stable = FILE_SYNC;
	w.data.data_len = 10;
	w.data.data_val = "0123456789";
	int rc = pc_nfs3_write(&cl, &w, &wr);
	if (rc == 0 && wr.status == NFS3_OK)
		CHECKF(wr.WRITE3res_u.resok.count <= 10, "WRITE count 1000 with 10 bytes wrote %u",
		       wr.WRITE3res_u.resok.count);
	CHECK(pc_nfs3_getattr(&cl, &ga, &gr) == 0 && gr.status == NFS3_OK &&
	      gr.GETATTR3res_u.resok.obj_attributes.size <= 10);
	pc_release(&cl);
}

static void permission_details(void)
{
	/* Root is granted EXECUTE on a file only if some execute bit is set. */
	struct pc_fh f, fx;
	CHECK(do_create(&cl, &root, "noexec", 0644, &f) == NFS3_OK);
	CHECK(do_create(&cl, &root, "exec", 0744, &fx) == NFS3_OK);
	ACCESS3args a = { .object = pc_fh_arg(&f), .access = ACCESS3_EXECUTE | ACCESS3_READ };
	ACCESS3res r = {0};
	CHECK(pc_nfs3_access(&cl, &a, &r) == 0 && r.status == NFS3_OK);
	if (r.status == NFS3_OK)
		CHECKF(!(r.ACCESS3res_u.resok.access & ACCESS3_EXECUTE), "root got EXECUTE on a 0644 file");
	a.object = pc_fh_arg(&fx);
	CHECK(pc_nfs3_access(&cl, &a, &r) == 0 && r.status == NFS3_OK);
	if (r.status == NFS3_OK)
		CHECKF(r.ACCESS3res_u.resok.access & ACCESS3_EXECUTE, "root denied EXECUTE on a 0744 file");
	/* A non-owner may not chown; the owner may not give the file away either (no_root_squash
	 * applies only to uid 0). */
	struct pc_client user;
	CHECK(pc_connect(&user, srv.ts_port, NFS_PROGRAM, 3, 1234, 1234) == 0);
	struct pc_fh mine;
	CHECK(do_create(&user, &root, "owned-by-1234", 0644, &mine) == NFS3_OK);
	SETATTR3args sa;
	memset(&sa, 0, sizeof(sa));
	sa.object = pc_fh_arg(&mine);
	sa.new_attributes.uid.set_it = 1;
	sa.new_attributes.uid.set_uid3_u.uid = 0;
	SETATTR3res sr = {0};
	CHECK(pc_nfs3_setattr(&user, &sa, &sr) == 0);
	CHECKF(sr.status == NFS3ERR_PERM, "chown to 0 by uid 1234: status %u", sr.status);
	/* uid 1234 cannot change the mode of root's file. */
	memset(&sa, 0, sizeof(sa));
	sa.object = pc_fh_arg(&f);
	sa.new_attributes = pc_sattr_mode(0777);
	CHECK(pc_nfs3_setattr(&user, &sa, &sr) == 0);
	CHECKF(sr.status == NFS3ERR_PERM || sr.status == NFS3ERR_ACCES, "chmod of root's file by 1234: %u",
	       sr.status);
	/* ... nor remove a file from a directory it cannot write. */
	struct pc_fh d;
	CHECK(do_mkdir(&root, "root-dir", &d) == NFS3_OK);
	CHECK(do_create(&cl, &d, "keep", 0666, NULL) == NFS3_OK);
	REMOVE3args ra = { .object = { .dir = pc_fh_arg(&d), .name = "keep" } };
	REMOVE3res rr = {0};
	CHECK(pc_nfs3_remove(&user, &ra, &rr) == 0);
	CHECKF(rr.status == NFS3ERR_ACCES, "REMOVE in root's 0755 dir by 1234: %u", rr.status);
	pc_disconnect(&user);
	pc_release(&cl);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *lines[] = {
		"%s *(rw,insecure,no_root_squash)",
		"%s *(rw,insecure,no_root_squash)",
	};
	if (!tap_check(ts_start(&srv, lines, 2) == 0, "server starts"))
		return tap_finish();
	bool ready = tap_check(mount_path(srv.ts_export_path[0], &root) == 0 &&
				       mount_path(srv.ts_export_path[1], &root1) == 0,
			       "both exports mount") &&
		     tap_check(pc_connect(&cl, srv.ts_port, NFS_PROGRAM, 3, 0, 0) == 0, "NFS connect");
	if (ready) {
		TAP_RUN(drc_replays);
		TAP_RUN(pipelined_writes);
		TAP_RUN(udp_read);
		TAP_RUN(readdir_while_removing);
		TAP_RUN(symlink_escape);
		TAP_RUN(nul_in_name);
		TAP_RUN(cross_export);
		TAP_RUN(size_limits);
		TAP_RUN(permission_details);
		pc_disconnect(&cl);
	}
	tap_check(ts_alive(&srv), "server still running");
	tap_check(ts_stop(&srv) == 0, "server exits cleanly on SIGTERM");
	return tap_finish();
}
