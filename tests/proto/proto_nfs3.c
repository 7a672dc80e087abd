/* proto_nfs3.c: every NFSv3 procedure (RFC 1813 section 3.3) against a private `shale serve`,
 * through libnfs's raw RPC calls so each argument is under the test's control.
 *
 * Exports used:
 *   exp0  rw, insecure, no_root_squash   most cases
 *   exp1  ro, insecure, no_root_squash   NFS3ERR_ROFS
 *   exp2  rw, insecure, root_squash      NFS3ERR_ACCES for a squashed root
 * Each case names what it checks against the RFC; a failing CHECK prints the status received. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pclient.h"
#include "tap.h"
#include "testserver.h"

#define MNT_PROGRAM 100005
#define NFS_PROGRAM 100003
#define ONE_MIB 1048576u

static struct ts_server srv;
static struct pc_client cl;     /* uid 0 on exp0 */
static struct pc_fh root;       /* exp0's root */
static bool have_root;

/* ---------------------------------------------------------------- helpers */

static int mount_path(const char *path, struct pc_fh *out, uint32_t *status_out)
{
	struct pc_client mc;
	if (pc_connect(&mc, srv.ts_port, MNT_PROGRAM, 3, 0, 0) != 0) {
		printf("# mount connect: %s\n", pc_last_error(&mc));
		return -1;
	}
	mountres3 mr;
	int rc = pc_mount3_mnt(&mc, path, &mr);
	if (rc == 0) {
		*status_out = mr.fhs_status;
		if (mr.fhs_status == MNT3_OK) {
			struct pc_fh fh;
			fh.pf_len = mr.mountres3_u.mountinfo.fhandle.fhandle3_len;
			if (fh.pf_len > PC_FH_MAX)
				fh.pf_len = PC_FH_MAX;
			memcpy(fh.pf_data, mr.mountres3_u.mountinfo.fhandle.fhandle3_val, fh.pf_len);
			*out = fh;
		}
	} else {
		printf("# MNT %s: %s\n", path, pc_last_error(&mc));
	}
	pc_disconnect(&mc);
	return rc;
}

static uint32_t do_getattr(struct pc_client *c, struct pc_fh *fh, fattr3 *attr)
{
	GETATTR3args a = { .object = pc_fh_arg(fh) };
	GETATTR3res r = {0};
	if (pc_nfs3_getattr(c, &a, &r) != 0) {
		printf("# GETATTR failed: %s\n", pc_last_error(c));
		return 0xffffffffu;
	}
	if (r.status == NFS3_OK && attr != NULL)
		*attr = r.GETATTR3res_u.resok.obj_attributes;
	return r.status;
}

/* CREATE (UNCHECKED or GUARDED) with a mode; the new handle into out. */
static uint32_t do_create(struct pc_client *c, struct pc_fh *dir, const char *name, createmode3 how,
			  uint32_t mode, struct pc_fh *out, CREATE3res *res_out)
{
	CREATE3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(dir);
	a.where.name = (char *)name;
	a.how.mode = how;
	a.how.createhow3_u.obj_attributes = pc_sattr_mode(mode);
	CREATE3res r = {0};
	if (pc_nfs3_create(c, &a, &r) != 0) {
		printf("# CREATE %s failed: %s\n", name, pc_last_error(c));
		return 0xffffffffu;
	}
	if (r.status == NFS3_OK && out != NULL) {
		if (r.CREATE3res_u.resok.obj.handle_follows)
			pc_fh_set(out, &r.CREATE3res_u.resok.obj.post_op_fh3_u.handle);
		else if (pc_lookup(c, dir, name, out, NULL) != NFS3_OK)
			return 0xfffffffeu;
	}
	if (res_out != NULL)
		*res_out = r;
	return r.status;
}

static uint32_t do_mkdir(struct pc_client *c, struct pc_fh *dir, const char *name, uint32_t mode,
			 struct pc_fh *out)
{
	MKDIR3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(dir);
	a.where.name = (char *)name;
	a.attributes = pc_sattr_mode(mode);
	MKDIR3res r = {0};
	if (pc_nfs3_mkdir(c, &a, &r) != 0) {
		printf("# MKDIR %s failed: %s\n", name, pc_last_error(c));
		return 0xffffffffu;
	}
	if (r.status == NFS3_OK && out != NULL) {
		if (r.MKDIR3res_u.resok.obj.handle_follows)
			pc_fh_set(out, &r.MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
		else if (pc_lookup(c, dir, name, out, NULL) != NFS3_OK)
			return 0xfffffffeu;
	}
	return r.status;
}

static uint32_t do_write(struct pc_client *c, struct pc_fh *fh, uint64_t off, const void *data,
			 uint32_t len, stable_how how, WRITE3res *res_out)
{
	WRITE3args a;
	memset(&a, 0, sizeof(a));
	a.file = pc_fh_arg(fh);
	a.offset = off;
	a.count = len;
	a.stable = how;
	a.data.data_len = len;
	a.data.data_val = (char *)data;
	WRITE3res r = {0};
	if (pc_nfs3_write(c, &a, &r) != 0) {
		printf("# WRITE failed: %s\n", pc_last_error(c));
		return 0xffffffffu;
	}
	if (res_out != NULL)
		*res_out = r;
	return r.status;
}

static uint32_t do_read(struct pc_client *c, struct pc_fh *fh, uint64_t off, uint32_t count,
			READ3res *res_out)
{
	READ3args a = { .file = pc_fh_arg(fh), .offset = off, .count = count };
	if (pc_nfs3_read(c, &a, res_out) != 0) {
		printf("# READ failed: %s\n", pc_last_error(c));
		return 0xffffffffu;
	}
	return res_out->status;
}

static uint32_t do_remove(struct pc_client *c, struct pc_fh *dir, const char *name, REMOVE3res *res_out)
{
	REMOVE3args a = { .object = { .dir = pc_fh_arg(dir), .name = (char *)name } };
	REMOVE3res r = {0};
	if (pc_nfs3_remove(c, &a, &r) != 0) {
		printf("# REMOVE failed: %s\n", pc_last_error(c));
		return 0xffffffffu;
	}
	if (res_out != NULL)
		*res_out = r;
	return r.status;
}

static uint32_t do_rmdir(struct pc_client *c, struct pc_fh *dir, const char *name)
{
	RMDIR3args a = { .object = { .dir = pc_fh_arg(dir), .name = (char *)name } };
	RMDIR3res r = {0};
	if (pc_nfs3_rmdir(c, &a, &r) != 0) {
		printf("# RMDIR failed: %s\n", pc_last_error(c));
		return 0xffffffffu;
	}
	return r.status;
}

static bool time_le(nfstime3 a, nfstime3 b)
{
	return a.seconds < b.seconds || (a.seconds == b.seconds && a.nseconds <= b.nseconds);
}

/* RFC 1813 section 2.6: wcc_data should carry both pre- and post-operation attributes for a
 * server that can supply them; the post-op times never go backwards. */
static bool wcc_sane(const wcc_data *w, const char *what)
{
	if (!w->before.attributes_follow || !w->after.attributes_follow) {
		printf("#   %s: wcc before=%u after=%u (want both present)\n", what,
		       w->before.attributes_follow, w->after.attributes_follow);
		return false;
	}
	const wcc_attr *pre = &w->before.pre_op_attr_u.attributes;
	const fattr3 *post = &w->after.post_op_attr_u.attributes;
	if (!time_le(pre->mtime, post->mtime) || !time_le(pre->ctime, post->ctime)) {
		printf("#   %s: wcc times went backwards: mtime %u.%09u -> %u.%09u\n", what,
		       pre->mtime.seconds, pre->mtime.nseconds, post->mtime.seconds, post->mtime.nseconds);
		return false;
	}
	return true;
}

static void fill_pattern(uint8_t *buf, size_t len, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
}

/* ---------------------------------------------------------------- cases */

static void nfs_null(void)
{
	CHECK(pc_nfs3_null(&cl) == 0);
}

static void getattr_root(void)
{
	fattr3 a = {0};
	CHECK(have_root);
	uint32_t st = do_getattr(&cl, &root, &a);
	CHECKF(st == NFS3_OK, "status %u", st);
	if (st == NFS3_OK) {
		CHECKF(a.type == NF3DIR, "type %u", a.type);
		CHECKF(a.nlink >= 2, "nlink %u", a.nlink);
		CHECK((a.mode & 0777) == 0777); /* the test created it 0777 */
	}
}

static void fsinfo_limits(void)
{
	FSINFO3args a = { .fsroot = pc_fh_arg(&root) };
	FSINFO3res r = {0};
	CHECK(pc_nfs3_fsinfo(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status != NFS3_OK)
		return;
	FSINFO3resok *ok = &r.FSINFO3res_u.resok;
	CHECKF(ok->rtmax == ONE_MIB, "rtmax %u", ok->rtmax);
	CHECKF(ok->wtmax == ONE_MIB, "wtmax %u", ok->wtmax);
	CHECKF(ok->rtpref > 0 && ok->rtpref <= ok->rtmax, "rtpref %u", ok->rtpref);
	CHECKF(ok->wtpref > 0 && ok->wtpref <= ok->wtmax, "wtpref %u", ok->wtpref);
	CHECKF(ok->dtpref > 0, "dtpref %u", ok->dtpref);
	CHECKF(ok->maxfilesize >= (1ull << 32), "maxfilesize %llu", (unsigned long long)ok->maxfilesize);
	CHECK(ok->time_delta.seconds <= 1);
	CHECK(ok->obj_attributes.attributes_follow);
}

static void fsstat_sane(void)
{
	FSSTAT3args a = { .fsroot = pc_fh_arg(&root) };
	FSSTAT3res r = {0};
	CHECK(pc_nfs3_fsstat(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status != NFS3_OK)
		return;
	FSSTAT3resok *ok = &r.FSSTAT3res_u.resok;
	CHECK(ok->tbytes > 0);
	CHECK(ok->fbytes <= ok->tbytes);
	CHECK(ok->abytes <= ok->fbytes);
	CHECK(ok->ffiles <= ok->tfiles);
	CHECK(ok->afiles <= ok->ffiles);
}

static void pathconf_sane(void)
{
	PATHCONF3args a = { .object = pc_fh_arg(&root) };
	PATHCONF3res r = {0};
	CHECK(pc_nfs3_pathconf(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status != NFS3_OK)
		return;
	PATHCONF3resok *ok = &r.PATHCONF3res_u.resok;
	CHECKF(ok->name_max >= 255, "name_max %u", ok->name_max);
	CHECK(ok->linkmax >= 2);
	CHECK(ok->no_trunc); /* long names are refused, not truncated: see name_too_long */
	CHECK(ok->case_preserving);
}

static void create_and_getattr(void)
{
	struct pc_fh fh;
	CREATE3res r = {0};
	fattr3 before = {0};
	CHECK(do_getattr(&cl, &root, &before) == NFS3_OK);
	uint32_t st = do_create(&cl, &root, "created", UNCHECKED, 0640, &fh, &r);
	CHECKF(st == NFS3_OK, "status %u", st);
	if (st != NFS3_OK)
		return;
	CREATE3resok *ok = &r.CREATE3res_u.resok;
	CHECK(ok->obj.handle_follows);
	CHECK(ok->obj_attributes.attributes_follow);
	CHECK(wcc_sane(&ok->dir_wcc, "CREATE dir_wcc"));
	if (ok->dir_wcc.before.attributes_follow)
		CHECK(ok->dir_wcc.before.pre_op_attr_u.attributes.size == before.size);
	fattr3 a = {0};
	CHECK(do_getattr(&cl, &fh, &a) == NFS3_OK);
	CHECKF(a.type == NF3REG, "type %u", a.type);
	CHECKF((a.mode & 07777) == 0640, "mode %o", a.mode);
	CHECK(a.size == 0);
	CHECK(a.nlink == 1);
	CHECK(a.uid == 0);
	/* LOOKUP finds the same object. */
	struct pc_fh fh2;
	fattr3 la = {0};
	CHECK(pc_lookup(&cl, &root, "created", &fh2, &la) == NFS3_OK);
	CHECK(la.fileid == a.fileid);
	/* UNCHECKED on an existing file succeeds (RFC 1813 3.3.8). */
	st = do_create(&cl, &root, "created", UNCHECKED, 0640, NULL, NULL);
	CHECKF(st == NFS3_OK, "re-create UNCHECKED status %u", st);
}

static void lookup_noent(void)
{
	LOOKUP3args a = { .what = { .dir = pc_fh_arg(&root), .name = "no-such-name" } };
	LOOKUP3res r = {0};
	CHECK(pc_nfs3_lookup(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_NOENT, "status %u", r.status);
	if (r.status == NFS3ERR_NOENT)
		CHECK(r.LOOKUP3res_u.resfail.dir_attributes.attributes_follow);
	/* "." and ".." of the root resolve to directories (RFC 1813 3.3.3 lets the server decide on
	 * ".." of the root; it must not escape the export). */
	fattr3 ra = {0}, da = {0};
	CHECK(do_getattr(&cl, &root, &ra) == NFS3_OK);
	uint32_t st = pc_lookup(&cl, &root, "..", NULL, &da);
	CHECKF(st == NFS3_OK || st == NFS3ERR_ACCES || st == NFS3ERR_NOENT, "'..' status %u", st);
	if (st == NFS3_OK)
		CHECKF(da.fileid == ra.fileid, "'..' of the root has fileid %llu, root %llu",
		       (unsigned long long)da.fileid, (unsigned long long)ra.fileid);
}

static void write_read_unstable(void)
{
	enum { LEN = 100000 };
	static uint8_t data[LEN];
	fill_pattern(data, LEN, 1);
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "wr", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	WRITE3res w = {0};
	uint32_t st = do_write(&cl, &fh, 0, data, LEN, UNSTABLE, &w);
	CHECKF(st == NFS3_OK, "status %u", st);
	if (st != NFS3_OK)
		return;
	WRITE3resok *ok = &w.WRITE3res_u.resok;
	CHECKF(ok->count == LEN, "count %u", ok->count);
	CHECK(ok->committed <= FILE_SYNC);
	CHECK(wcc_sane(&ok->file_wcc, "WRITE file_wcc"));
	if (ok->file_wcc.before.attributes_follow)
		CHECKF(ok->file_wcc.before.pre_op_attr_u.attributes.size == 0, "pre size %llu",
		       (unsigned long long)ok->file_wcc.before.pre_op_attr_u.attributes.size);
	if (ok->file_wcc.after.attributes_follow)
		CHECKF(ok->file_wcc.after.post_op_attr_u.attributes.size == LEN, "post size %llu",
		       (unsigned long long)ok->file_wcc.after.post_op_attr_u.attributes.size);
	fattr3 a = {0};
	CHECK(do_getattr(&cl, &fh, &a) == NFS3_OK);
	CHECKF(a.size == LEN, "size %llu", (unsigned long long)a.size);

	READ3res rr = {0};
	CHECK(do_read(&cl, &fh, 0, LEN, &rr) == NFS3_OK);
	if (rr.status == NFS3_OK) {
		READ3resok *rok = &rr.READ3res_u.resok;
		CHECKF(rok->count == LEN, "read count %u", rok->count);
		CHECK(rok->data.data_len == LEN);
		CHECK(rok->data.data_len == LEN && memcmp(rok->data.data_val, data, LEN) == 0);
		CHECK(rok->eof);
		CHECK(rok->file_attributes.attributes_follow);
	}
	/* A read in the middle returns exactly that slice, not at eof. */
	CHECK(do_read(&cl, &fh, 4096, 1000, &rr) == NFS3_OK);
	if (rr.status == NFS3_OK) {
		CHECK(rr.READ3res_u.resok.count == 1000);
		CHECK(!rr.READ3res_u.resok.eof);
		CHECK(rr.READ3res_u.resok.data.data_len == 1000 &&
		      memcmp(rr.READ3res_u.resok.data.data_val, data + 4096, 1000) == 0);
	}
	/* Reading past the end: count 0 and eof (RFC 1813 3.3.6). */
	CHECK(do_read(&cl, &fh, LEN + 5000, 100, &rr) == NFS3_OK);
	if (rr.status == NFS3_OK) {
		CHECK(rr.READ3res_u.resok.count == 0);
		CHECK(rr.READ3res_u.resok.eof);
	}
	/* A write at an offset beyond the end extends the file with a hole that reads as zeros. */
	CHECK(do_write(&cl, &fh, LEN + 10000, "tail", 4, UNSTABLE, NULL) == NFS3_OK);
	CHECK(do_read(&cl, &fh, LEN, 10004, &rr) == NFS3_OK);
	if (rr.status == NFS3_OK && rr.READ3res_u.resok.data.data_len == 10004) {
		const char *p = rr.READ3res_u.resok.data.data_val;
		bool zeros = true;
		for (int i = 0; i < 10000; i++)
			zeros = zeros && p[i] == 0;
		CHECK(zeros);
		CHECK(memcmp(p + 10000, "tail", 4) == 0);
	} else {
		CHECK(false);
	}
	pc_release(&cl);
}

static void write_verifier_and_commit(void)
{
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "verf", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	WRITE3res w1 = {0}, w2 = {0};
	CHECK(do_write(&cl, &fh, 0, "first", 5, UNSTABLE, &w1) == NFS3_OK);
	CHECK(do_write(&cl, &fh, 5, "second", 6, UNSTABLE, &w2) == NFS3_OK);
	if (w1.status != NFS3_OK || w2.status != NFS3_OK)
		return;
	CHECK(memcmp(w1.WRITE3res_u.resok.verf, w2.WRITE3res_u.resok.verf, NFS3_WRITEVERFSIZE) == 0);
	COMMIT3args ca = { .file = pc_fh_arg(&fh), .offset = 0, .count = 0 };
	COMMIT3res cr = {0};
	CHECK(pc_nfs3_commit(&cl, &ca, &cr) == 0);
	CHECKF(cr.status == NFS3_OK, "COMMIT status %u", cr.status);
	if (cr.status == NFS3_OK) {
		CHECK(memcmp(cr.COMMIT3res_u.resok.verf, w1.WRITE3res_u.resok.verf, NFS3_WRITEVERFSIZE) == 0);
		CHECK(cr.COMMIT3res_u.resok.file_wcc.after.attributes_follow);
		if (cr.COMMIT3res_u.resok.file_wcc.after.attributes_follow)
			CHECK(cr.COMMIT3res_u.resok.file_wcc.after.post_op_attr_u.attributes.size == 11);
	}
	/* COMMIT of a range (offset 3, 4 bytes) is fine as well. */
	ca.offset = 3;
	ca.count = 4;
	CHECK(pc_nfs3_commit(&cl, &ca, &cr) == 0 && cr.status == NFS3_OK);
	READ3res rr = {0};
	CHECK(do_read(&cl, &fh, 0, 100, &rr) == NFS3_OK);
	CHECK(rr.status == NFS3_OK && rr.READ3res_u.resok.count == 11 &&
	      memcmp(rr.READ3res_u.resok.data.data_val, "firstsecond", 11) == 0);
	pc_release(&cl);
}

static void write_file_sync(void)
{
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "sync", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	WRITE3res w = {0};
	CHECK(do_write(&cl, &fh, 0, "stable data", 11, FILE_SYNC, &w) == NFS3_OK);
	if (w.status == NFS3_OK) {
		CHECKF(w.WRITE3res_u.resok.committed == FILE_SYNC, "committed %u",
		       w.WRITE3res_u.resok.committed);
		CHECK(w.WRITE3res_u.resok.count == 11);
	}
	CHECK(do_write(&cl, &fh, 11, "!", 1, DATA_SYNC, &w) == NFS3_OK);
	if (w.status == NFS3_OK)
		CHECKF(w.WRITE3res_u.resok.committed >= DATA_SYNC, "DATA_SYNC committed %u",
		       w.WRITE3res_u.resok.committed);
}

static void write_read_one_mib(void)
{
	uint8_t *data = malloc(ONE_MIB);
	CHECK(data != NULL);
	if (data == NULL)
		return;
	fill_pattern(data, ONE_MIB, 7);
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "big", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	WRITE3res w = {0};
	CHECK(do_write(&cl, &fh, 0, data, ONE_MIB, UNSTABLE, &w) == NFS3_OK);
	if (w.status == NFS3_OK)
		CHECKF(w.WRITE3res_u.resok.count == ONE_MIB, "count %u", w.WRITE3res_u.resok.count);
	READ3res r = {0};
	CHECK(do_read(&cl, &fh, 0, ONE_MIB, &r) == NFS3_OK);
	if (r.status == NFS3_OK) {
		CHECKF(r.READ3res_u.resok.count == ONE_MIB, "read count %u", r.READ3res_u.resok.count);
		CHECK(r.READ3res_u.resok.data.data_len == ONE_MIB &&
		      memcmp(r.READ3res_u.resok.data.data_val, data, ONE_MIB) == 0);
	}
	free(data);
	pc_release(&cl);
}

static void setattr_cases(void)
{
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "attrs", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	static uint8_t data[5000];
	fill_pattern(data, sizeof(data), 3);
	CHECK(do_write(&cl, &fh, 0, data, sizeof(data), FILE_SYNC, NULL) == NFS3_OK);

	/* Truncate: wcc shows the size before and after. */
	SETATTR3args a;
	memset(&a, 0, sizeof(a));
	a.object = pc_fh_arg(&fh);
	a.new_attributes.size.set_it = 1;
	a.new_attributes.size.set_size3_u.size = 10;
	SETATTR3res r = {0};
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "truncate status %u", r.status);
	if (r.status == NFS3_OK) {
		wcc_data *w = &r.SETATTR3res_u.resok.obj_wcc;
		CHECK(wcc_sane(w, "SETATTR obj_wcc"));
		if (w->before.attributes_follow)
			CHECK(w->before.pre_op_attr_u.attributes.size == sizeof(data));
		if (w->after.attributes_follow)
			CHECK(w->after.post_op_attr_u.attributes.size == 10);
	}
	/* Mode and a client-chosen mtime. */
	memset(&a, 0, sizeof(a));
	a.object = pc_fh_arg(&fh);
	a.new_attributes = pc_sattr_mode(0600);
	a.new_attributes.mtime.set_it = SET_TO_CLIENT_TIME;
	a.new_attributes.mtime.set_mtime_u.mtime.seconds = 1000000000u;
	a.new_attributes.mtime.set_mtime_u.mtime.nseconds = 5000;
	a.new_attributes.atime.set_it = SET_TO_CLIENT_TIME;
	a.new_attributes.atime.set_atime_u.atime.seconds = 999999999u;
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "mode/mtime status %u", r.status);
	fattr3 fa = {0};
	CHECK(do_getattr(&cl, &fh, &fa) == NFS3_OK);
	CHECKF((fa.mode & 07777) == 0600, "mode %o", fa.mode);
	CHECKF(fa.mtime.seconds == 1000000000u, "mtime %u", fa.mtime.seconds);
	CHECKF(fa.atime.seconds == 999999999u, "atime %u", fa.atime.seconds);
	CHECK(fa.size == 10);
	/* Growing with SETATTR reads back zeros past the old end. */
	memset(&a, 0, sizeof(a));
	a.object = pc_fh_arg(&fh);
	a.new_attributes.size.set_it = 1;
	a.new_attributes.size.set_size3_u.size = 20;
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0 && r.status == NFS3_OK);
	READ3res rr = {0};
	CHECK(do_read(&cl, &fh, 0, 100, &rr) == NFS3_OK);
	if (rr.status == NFS3_OK) {
		static const uint8_t zeros[10];
		CHECK(rr.READ3res_u.resok.count == 20);
		CHECK(rr.READ3res_u.resok.data.data_len == 20 &&
		      memcmp(rr.READ3res_u.resok.data.data_val, data, 10) == 0 &&
		      memcmp(rr.READ3res_u.resok.data.data_val + 10, zeros, 10) == 0);
	}
	/* Guard: a ctime that does not match gives NOT_SYNC and changes nothing (3.3.2). */
	CHECK(do_getattr(&cl, &fh, &fa) == NFS3_OK);
	memset(&a, 0, sizeof(a));
	a.object = pc_fh_arg(&fh);
	a.new_attributes = pc_sattr_mode(0604);
	a.guard.check = 1;
	a.guard.sattrguard3_u.obj_ctime.seconds = fa.ctime.seconds - 100;
	a.guard.sattrguard3_u.obj_ctime.nseconds = fa.ctime.nseconds;
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_NOT_SYNC, "guard status %u", r.status);
	fattr3 fb = {0};
	CHECK(do_getattr(&cl, &fh, &fb) == NFS3_OK);
	CHECK((fb.mode & 07777) == 0600);
	/* ... and the matching ctime lets it through. */
	a.guard.sattrguard3_u.obj_ctime = fb.ctime;
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "matching guard status %u", r.status);
	CHECK(do_getattr(&cl, &fh, &fb) == NFS3_OK && (fb.mode & 07777) == 0604);
	/* SETATTR of a size on a directory is refused. */
	memset(&a, 0, sizeof(a));
	a.object = pc_fh_arg(&root);
	a.new_attributes.size.set_it = 1;
	a.new_attributes.size.set_size3_u.size = 0;
	CHECK(pc_nfs3_setattr(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_ISDIR || r.status == NFS3ERR_INVAL, "dir truncate status %u", r.status);
}

static void access_cases(void)
{
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "access", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	uint32_t all = ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE |
		       ACCESS3_EXECUTE;
	ACCESS3args a = { .object = pc_fh_arg(&fh), .access = all };
	ACCESS3res r = {0};
	CHECK(pc_nfs3_access(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status == NFS3_OK) {
		uint32_t got = r.ACCESS3res_u.resok.access;
		CHECKF((got & ~all) == 0, "granted bits not asked for: %#x", got);
		CHECK(got & ACCESS3_READ);
		CHECK(got & ACCESS3_MODIFY);
		CHECK(r.ACCESS3res_u.resok.obj_attributes.attributes_follow);
	}
	/* A user other than the owner gets READ but not MODIFY on a 0644 file. */
	struct pc_client other;
	CHECK(pc_connect(&other, srv.ts_port, NFS_PROGRAM, 3, 4321, 4321) == 0);
	a.access = ACCESS3_READ | ACCESS3_MODIFY;
	CHECK(pc_nfs3_access(&other, &a, &r) == 0);
	if (r.status == NFS3_OK) {
		CHECK(r.ACCESS3res_u.resok.access & ACCESS3_READ);
		CHECK(!(r.ACCESS3res_u.resok.access & ACCESS3_MODIFY));
	} else {
		CHECKF(false, "status %u for uid 4321", r.status);
	}
	/* ... and a WRITE by that user is refused with ACCES. */
	uint32_t st = do_write(&other, &fh, 0, "x", 1, UNSTABLE, NULL);
	CHECKF(st == NFS3ERR_ACCES || st == NFS3ERR_PERM, "write by non-owner status %u", st);
	/* On a directory, LOOKUP is granted to the owner. */
	a.object = pc_fh_arg(&root);
	a.access = ACCESS3_LOOKUP | ACCESS3_MODIFY;
	CHECK(pc_nfs3_access(&cl, &a, &r) == 0 && r.status == NFS3_OK &&
	      (r.ACCESS3res_u.resok.access & ACCESS3_LOOKUP));
	pc_disconnect(&other);
}

static void mkdir_rmdir(void)
{
	struct pc_fh d;
	fattr3 before = {0}, after = {0};
	CHECK(do_getattr(&cl, &root, &before) == NFS3_OK);
	MKDIR3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(&root);
	a.where.name = "subdir";
	a.attributes = pc_sattr_mode(0755);
	MKDIR3res r = {0};
	CHECK(pc_nfs3_mkdir(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status != NFS3_OK)
		return;
	CHECK(r.MKDIR3res_u.resok.obj.handle_follows);
	pc_fh_set(&d, &r.MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
	CHECK(wcc_sane(&r.MKDIR3res_u.resok.dir_wcc, "MKDIR dir_wcc"));
	fattr3 da = {0};
	CHECK(do_getattr(&cl, &d, &da) == NFS3_OK);
	CHECK(da.type == NF3DIR);
	CHECKF((da.mode & 07777) == 0755, "mode %o", da.mode);
	CHECK(da.nlink == 2);
	CHECK(do_getattr(&cl, &root, &after) == NFS3_OK);
	CHECKF(after.nlink == before.nlink + 1, "parent nlink %u -> %u", before.nlink, after.nlink);
	/* The same name again: EXIST. */
	CHECK(pc_nfs3_mkdir(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_EXIST, "second MKDIR status %u", r.status);
	/* RMDIR removes it; LOOKUP then says NOENT; the old handle is STALE. */
	CHECK(do_rmdir(&cl, &root, "subdir") == NFS3_OK);
	CHECK(pc_lookup(&cl, &root, "subdir", NULL, NULL) == NFS3ERR_NOENT);
	uint32_t st = do_getattr(&cl, &d, NULL);
	CHECKF(st == NFS3ERR_STALE, "GETATTR of removed dir: status %u", st);
	/* RMDIR of a missing name, and of a file. */
	CHECK(do_rmdir(&cl, &root, "subdir") == NFS3ERR_NOENT);
	CHECK(do_create(&cl, &root, "plainfile", UNCHECKED, 0644, NULL, NULL) == NFS3_OK);
	st = do_rmdir(&cl, &root, "plainfile");
	CHECKF(st == NFS3ERR_NOTDIR, "RMDIR of a file: status %u", st);
	/* RMDIR of "." is refused (RFC 1813 3.3.13: INVAL or ACCES... never success). */
	st = do_rmdir(&cl, &root, ".");
	CHECKF(st != NFS3_OK, "RMDIR '.': status %u", st);
}

static void symlink_readlink(void)
{
	SYMLINK3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(&root);
	a.where.name = "link";
	a.symlink.symlink_attributes = pc_sattr_mode(0777);
	a.symlink.symlink_data = "some/target/../path";
	SYMLINK3res r = {0};
	CHECK(pc_nfs3_symlink(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status != NFS3_OK)
		return;
	CHECK(wcc_sane(&r.SYMLINK3res_u.resok.dir_wcc, "SYMLINK dir_wcc"));
	struct pc_fh fh;
	if (r.SYMLINK3res_u.resok.obj.handle_follows)
		pc_fh_set(&fh, &r.SYMLINK3res_u.resok.obj.post_op_fh3_u.handle);
	else
		CHECK(pc_lookup(&cl, &root, "link", &fh, NULL) == NFS3_OK);
	fattr3 fa = {0};
	CHECK(do_getattr(&cl, &fh, &fa) == NFS3_OK);
	CHECKF(fa.type == NF3LNK, "type %u", fa.type);
	CHECK(fa.size == strlen("some/target/../path"));
	READLINK3args ra = { .symlink = pc_fh_arg(&fh) };
	READLINK3res rr = {0};
	CHECK(pc_nfs3_readlink(&cl, &ra, &rr) == 0);
	CHECKF(rr.status == NFS3_OK, "READLINK status %u", rr.status);
	if (rr.status == NFS3_OK)
		CHECK(strcmp(rr.READLINK3res_u.resok.data, "some/target/../path") == 0);
	/* READLINK of a regular file: INVAL (3.3.5). */
	struct pc_fh file;
	CHECK(do_create(&cl, &root, "notalink", UNCHECKED, 0644, &file, NULL) == NFS3_OK);
	ra.symlink = pc_fh_arg(&file);
	CHECK(pc_nfs3_readlink(&cl, &ra, &rr) == 0);
	CHECKF(rr.status == NFS3ERR_INVAL, "READLINK of a file: status %u", rr.status);
	/* LOOKUP of the link returns the link itself, never its target. */
	fattr3 la = {0};
	CHECK(pc_lookup(&cl, &root, "link", NULL, &la) == NFS3_OK && la.type == NF3LNK);
}

static void mknod_cases(void)
{
	MKNOD3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(&root);
	a.where.name = "fifo";
	a.what.type = NF3FIFO;
	a.what.mknoddata3_u.pipe_attributes = pc_sattr_mode(0640);
	MKNOD3res r = {0};
	CHECK(pc_nfs3_mknod(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "FIFO status %u", r.status);
	if (r.status == NFS3_OK) {
		CHECK(wcc_sane(&r.MKNOD3res_u.resok.dir_wcc, "MKNOD dir_wcc"));
		fattr3 fa = {0};
		CHECK(pc_lookup(&cl, &root, "fifo", NULL, &fa) == NFS3_OK);
		CHECKF(fa.type == NF3FIFO, "type %u", fa.type);
		CHECKF((fa.mode & 07777) == 0640, "mode %o", fa.mode);
	}
	/* A socket too. */
	a.where.name = "sock";
	a.what.type = NF3SOCK;
	a.what.mknoddata3_u.sock_attributes = pc_sattr_mode(0600);
	CHECK(pc_nfs3_mknod(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "SOCK status %u", r.status);
	/* MKNOD of a regular file or directory type: BADTYPE (3.3.11). */
	a.where.name = "notnode";
	a.what.type = NF3REG;
	CHECK(pc_nfs3_mknod(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_BADTYPE, "MKNOD NF3REG status %u", r.status);
	CHECK(pc_lookup(&cl, &root, "notnode", NULL, NULL) == NFS3ERR_NOENT);
	/* Existing name: EXIST. */
	a.where.name = "fifo";
	a.what.type = NF3FIFO;
	a.what.mknoddata3_u.pipe_attributes = pc_sattr_mode(0640);
	CHECK(pc_nfs3_mknod(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_EXIST, "MKNOD existing status %u", r.status);
}

static void remove_and_stale(void)
{
	struct pc_fh fh;
	CHECK(do_create(&cl, &root, "doomed", GUARDED, 0644, &fh, NULL) == NFS3_OK);
	REMOVE3res r = {0};
	uint32_t st = do_remove(&cl, &root, "doomed", &r);
	CHECKF(st == NFS3_OK, "status %u", st);
	if (st == NFS3_OK)
		CHECK(wcc_sane(&r.REMOVE3res_u.resok.dir_wcc, "REMOVE dir_wcc"));
	CHECK(pc_lookup(&cl, &root, "doomed", NULL, NULL) == NFS3ERR_NOENT);
	st = do_getattr(&cl, &fh, NULL);
	CHECKF(st == NFS3ERR_STALE, "GETATTR of removed file: status %u", st);
	st = do_write(&cl, &fh, 0, "x", 1, UNSTABLE, NULL);
	CHECKF(st == NFS3ERR_STALE, "WRITE to removed file: status %u", st);
	/* REMOVE of a missing name. */
	st = do_remove(&cl, &root, "doomed", NULL);
	CHECKF(st == NFS3ERR_NOENT, "second REMOVE status %u", st);
}

static void rename_cases(void)
{
	struct pc_fh d1, d2;
	CHECK(do_mkdir(&cl, &root, "rn1", 0755, &d1) == NFS3_OK);
	CHECK(do_mkdir(&cl, &root, "rn2", 0755, &d2) == NFS3_OK);
	fattr3 orig = {0};
	struct pc_fh f;
	CHECK(do_create(&cl, &d1, "a", GUARDED, 0644, &f, NULL) == NFS3_OK);
	CHECK(do_getattr(&cl, &f, &orig) == NFS3_OK);
	RENAME3args a = { .from = { .dir = pc_fh_arg(&d1), .name = "a" },
			  .to = { .dir = pc_fh_arg(&d2), .name = "b" } };
	RENAME3res r = {0};
	CHECK(pc_nfs3_rename(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status == NFS3_OK) {
		CHECK(wcc_sane(&r.RENAME3res_u.resok.fromdir_wcc, "RENAME fromdir_wcc"));
		CHECK(wcc_sane(&r.RENAME3res_u.resok.todir_wcc, "RENAME todir_wcc"));
	}
	fattr3 moved = {0};
	CHECK(pc_lookup(&cl, &d1, "a", NULL, NULL) == NFS3ERR_NOENT);
	CHECK(pc_lookup(&cl, &d2, "b", NULL, &moved) == NFS3_OK);
	CHECK(moved.fileid == orig.fileid);
	/* The handle still works after the rename (handles name objects, not paths). */
	CHECK(do_getattr(&cl, &f, NULL) == NFS3_OK);
	/* Rename over an existing file replaces it. */
	struct pc_fh victim;
	CHECK(do_create(&cl, &d2, "c", GUARDED, 0644, &victim, NULL) == NFS3_OK);
	RENAME3args a2 = { .from = { .dir = pc_fh_arg(&d2), .name = "b" },
			   .to = { .dir = pc_fh_arg(&d2), .name = "c" } };
	CHECK(pc_nfs3_rename(&cl, &a2, &r) == 0);
	CHECKF(r.status == NFS3_OK, "replace status %u", r.status);
	fattr3 c = {0};
	CHECK(pc_lookup(&cl, &d2, "c", NULL, &c) == NFS3_OK && c.fileid == orig.fileid);
	CHECK(pc_lookup(&cl, &d2, "b", NULL, NULL) == NFS3ERR_NOENT);
	CHECKF(do_getattr(&cl, &victim, NULL) == NFS3ERR_STALE, "replaced file's handle not STALE");
	/* Missing source: NOENT. */
	CHECK(pc_nfs3_rename(&cl, &a2, &r) == 0);
	CHECKF(r.status == NFS3ERR_NOENT, "missing source status %u", r.status);
	/* A directory onto a non-empty directory: EXIST or NOTEMPTY (3.3.14). */
	struct pc_fh sub;
	CHECK(do_mkdir(&cl, &d1, "full", 0755, &sub) == NFS3_OK);
	CHECK(do_create(&cl, &sub, "x", GUARDED, 0644, NULL, NULL) == NFS3_OK);
	RENAME3args a3 = { .from = { .dir = pc_fh_arg(&root), .name = "rn2" },
			   .to = { .dir = pc_fh_arg(&d1), .name = "full" } };
	CHECK(pc_nfs3_rename(&cl, &a3, &r) == 0);
	CHECKF(r.status == NFS3ERR_EXIST || r.status == NFS3ERR_NOTEMPTY, "dir over non-empty: %u",
	       r.status);
	/* A file onto a directory: EXIST or ISDIR. */
	RENAME3args a4 = { .from = { .dir = pc_fh_arg(&d2), .name = "c" },
			   .to = { .dir = pc_fh_arg(&d1), .name = "full" } };
	CHECK(pc_nfs3_rename(&cl, &a4, &r) == 0);
	CHECKF(r.status == NFS3ERR_EXIST || r.status == NFS3ERR_ISDIR, "file over dir: %u", r.status);
	/* A directory into its own subdirectory: INVAL. */
	RENAME3args a5 = { .from = { .dir = pc_fh_arg(&root), .name = "rn1" },
			   .to = { .dir = pc_fh_arg(&sub), .name = "loop" } };
	CHECK(pc_nfs3_rename(&cl, &a5, &r) == 0);
	CHECKF(r.status == NFS3ERR_INVAL, "dir into its own child: %u", r.status);
}

static void link_cases(void)
{
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "orig", GUARDED, 0644, &f, NULL) == NFS3_OK);
	LINK3args a = { .file = pc_fh_arg(&f), .link = { .dir = pc_fh_arg(&root), .name = "hard" } };
	LINK3res r = {0};
	CHECK(pc_nfs3_link(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "status %u", r.status);
	if (r.status == NFS3_OK) {
		CHECK(r.LINK3res_u.resok.file_attributes.attributes_follow);
		if (r.LINK3res_u.resok.file_attributes.attributes_follow)
			CHECKF(r.LINK3res_u.resok.file_attributes.post_op_attr_u.attributes.nlink == 2,
			       "nlink in reply %u",
			       r.LINK3res_u.resok.file_attributes.post_op_attr_u.attributes.nlink);
		CHECK(wcc_sane(&r.LINK3res_u.resok.linkdir_wcc, "LINK linkdir_wcc"));
	}
	fattr3 fa = {0}, la = {0};
	CHECK(do_getattr(&cl, &f, &fa) == NFS3_OK);
	CHECKF(fa.nlink == 2, "nlink %u", fa.nlink);
	CHECK(pc_lookup(&cl, &root, "hard", NULL, &la) == NFS3_OK && la.fileid == fa.fileid);
	/* Linking to an existing name: EXIST. */
	CHECK(pc_nfs3_link(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_EXIST, "existing name status %u", r.status);
	/* A hard link to a directory is refused (ISDIR or PERM... never OK). */
	struct pc_fh d;
	CHECK(do_mkdir(&cl, &root, "linkdir", 0755, &d) == NFS3_OK);
	LINK3args ad = { .file = pc_fh_arg(&d), .link = { .dir = pc_fh_arg(&root), .name = "dirlink" } };
	CHECK(pc_nfs3_link(&cl, &ad, &r) == 0);
	CHECKF(r.status == NFS3ERR_ISDIR || r.status == NFS3ERR_PERM || r.status == NFS3ERR_INVAL,
	       "LINK of a directory: status %u", r.status);
	/* Removing one name leaves the other; nlink drops to 1. */
	CHECK(do_remove(&cl, &root, "orig", NULL) == NFS3_OK);
	CHECK(do_getattr(&cl, &f, &fa) == NFS3_OK && fa.nlink == 1);
}

/* READDIR over a directory of a few hundred names in small pages, following cookies. */
static void readdir_paged(void)
{
	enum { N = 300 };
	struct pc_fh d;
	CHECK(do_mkdir(&cl, &root, "many", 0755, &d) == NFS3_OK);
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "entry-%04d", i);
		if (do_create(&cl, &d, name, GUARDED, 0644, NULL, NULL) != NFS3_OK) {
			CHECKF(false, "create %s", name);
			return;
		}
		if (i % 64 == 0)
			pc_release(&cl);
	}
	int seen[N];
	memset(seen, 0, sizeof(seen));
	int dots = 0, others = 0, pages = 0;
	uint64_t cookie = 0;
	char verf[NFS3_COOKIEVERFSIZE];
	memset(verf, 0, sizeof(verf));
	bool eof = false;
	while (!eof && pages < 1000) {
		READDIR3args a;
		memset(&a, 0, sizeof(a));
		a.dir = pc_fh_arg(&d);
		a.cookie = cookie;
		memcpy(a.cookieverf, verf, sizeof(verf));
		a.count = 512; /* a handful of entries per page */
		READDIR3res r = {0};
		if (pc_nfs3_readdir(&cl, &a, &r) != 0 || r.status != NFS3_OK) {
			CHECKF(false, "READDIR page %d: status %u (%s)", pages, r.status, pc_last_error(&cl));
			return;
		}
		pages++;
		memcpy(verf, r.READDIR3res_u.resok.cookieverf, sizeof(verf));
		int in_page = 0;
		for (entry3 *e = r.READDIR3res_u.resok.reply.entries; e != NULL; e = e->nextentry) {
			in_page++;
			cookie = e->cookie;
			int idx;
			if (strcmp(e->name, ".") == 0 || strcmp(e->name, "..") == 0)
				dots++;
			else if (sscanf(e->name, "entry-%04d", &idx) == 1 && idx >= 0 && idx < N)
				seen[idx]++;
			else
				others++;
		}
		eof = r.READDIR3res_u.resok.reply.eof;
		if (in_page == 0 && !eof) {
			CHECKF(false, "empty page without eof");
			return;
		}
		pc_release(&cl);
	}
	int once = 0, dup = 0, missing = 0;
	for (int i = 0; i < N; i++) {
		if (seen[i] == 1)
			once++;
		else if (seen[i] == 0)
			missing++;
		else
			dup++;
	}
	printf("#   %d pages, %d names once, %d duplicated, %d missing, %d dot entries\n", pages, once,
	       dup, missing, dots);
	CHECK(eof);
	CHECK(once == N);
	CHECK(others == 0);
	CHECK(dots <= 2);
	CHECK(pages > 10); /* count 512 cannot fit 300 names in few pages */

	/* TOOSMALL: a count too small for even one entry (3.3.16). */
	READDIR3args t;
	memset(&t, 0, sizeof(t));
	t.dir = pc_fh_arg(&d);
	t.count = 8;
	READDIR3res tr = {0};
	CHECK(pc_nfs3_readdir(&cl, &t, &tr) == 0);
	CHECKF(tr.status == NFS3ERR_TOOSMALL, "count 8: status %u", tr.status);
	/* READDIR of a file: NOTDIR. */
	struct pc_fh f;
	CHECK(pc_lookup(&cl, &d, "entry-0000", &f, NULL) == NFS3_OK);
	t.dir = pc_fh_arg(&f);
	t.count = 4096;
	CHECK(pc_nfs3_readdir(&cl, &t, &tr) == 0);
	CHECKF(tr.status == NFS3ERR_NOTDIR, "READDIR of a file: status %u", tr.status);
}

static void readdirplus_handles(void)
{
	struct pc_fh d;
	CHECK(do_mkdir(&cl, &root, "plus", 0755, &d) == NFS3_OK);
	enum { N = 40 };
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "p%02d", i);
		CHECK(do_create(&cl, &d, name, GUARDED, 0600 + (uint32_t)(i % 8), NULL, NULL) == NFS3_OK);
	}
	pc_release(&cl);
	int found = 0, checked = 0, pages = 0;
	uint64_t cookie = 0;
	char verf[NFS3_COOKIEVERFSIZE] = { 0 };
	bool eof = false;
	while (!eof && pages < 200) {
		READDIRPLUS3args a;
		memset(&a, 0, sizeof(a));
		a.dir = pc_fh_arg(&d);
		a.cookie = cookie;
		memcpy(a.cookieverf, verf, sizeof(verf));
		a.dircount = 256;
		a.maxcount = 4096;
		READDIRPLUS3res r = {0};
		if (pc_nfs3_readdirplus(&cl, &a, &r) != 0 || r.status != NFS3_OK) {
			CHECKF(false, "READDIRPLUS: status %u (%s)", r.status, pc_last_error(&cl));
			return;
		}
		pages++;
		memcpy(verf, r.READDIRPLUS3res_u.resok.cookieverf, sizeof(verf));
		eof = r.READDIRPLUS3res_u.resok.reply.eof;
		for (entryplus3 *e = r.READDIRPLUS3res_u.resok.reply.entries; e != NULL; e = e->nextentry) {
			cookie = e->cookie;
			if (e->name[0] != 'p')
				continue;
			found++;
			if (!e->name_handle.handle_follows || !e->name_attributes.attributes_follow) {
				CHECKF(false, "%s: handle %u attrs %u", e->name, e->name_handle.handle_follows,
				       e->name_attributes.attributes_follow);
				continue;
			}
			const fattr3 *ea = &e->name_attributes.post_op_attr_u.attributes;
			CHECK(ea->fileid == e->fileid);
			struct pc_fh h;
			pc_fh_set(&h, &e->name_handle.post_op_fh3_u.handle);
			/* The handle must be one GETATTR accepts, naming the same object (this page's
			 * result stays valid until pc_release below). */
			GETATTR3args ga = { .object = pc_fh_arg(&h) };
			GETATTR3res gr = {0};
			gr.status = 0xffffffffu;
			if (pc_nfs3_getattr(&cl, &ga, &gr) == 0 && gr.status == NFS3_OK &&
			    gr.GETATTR3res_u.resok.obj_attributes.fileid == e->fileid &&
			    gr.GETATTR3res_u.resok.obj_attributes.type == NF3REG)
				checked++;
			else
				CHECKF(false, "%s: GETATTR of its handle: status %u", e->name, gr.status);
		}
		pc_release(&cl);
	}
	CHECK(eof);
	CHECKF(found == N, "found %d of %d", found, N);
	CHECK(checked == N);
	CHECK(pages > 1); /* maxcount 4096 with attributes and handles cannot hold 40 entries */
}

static void bad_cookie(void)
{
	/* A cookie verifier the server never issued, with a non-zero cookie: the server cannot
	 * honour it (RFC 1813 3.3.16: NFS3ERR_BAD_COOKIE). */
	struct pc_fh d;
	CHECK(pc_lookup(&cl, &root, "many", &d, NULL) == NFS3_OK);
	READDIR3args a;
	memset(&a, 0, sizeof(a));
	a.dir = pc_fh_arg(&d);
	a.count = 4096;
	READDIR3res r = {0};
	CHECK(pc_nfs3_readdir(&cl, &a, &r) == 0 && r.status == NFS3_OK);
	if (r.status != NFS3_OK || r.READDIR3res_u.resok.reply.entries == NULL)
		return;
	uint64_t good_cookie = r.READDIR3res_u.resok.reply.entries->cookie;
	char good_verf[NFS3_COOKIEVERFSIZE];
	memcpy(good_verf, r.READDIR3res_u.resok.cookieverf, sizeof(good_verf));

	a.cookie = good_cookie;
	memcpy(a.cookieverf, good_verf, sizeof(good_verf));
	for (size_t i = 0; i < sizeof(good_verf); i++)
		a.cookieverf[i] = (char)(a.cookieverf[i] ^ 0x5a);
	CHECK(pc_nfs3_readdir(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_BAD_COOKIE, "wrong verifier: status %u", r.status);
	/* A cookie far past the end of the directory, with the right verifier. */
	a.cookie = 0x7fffffffffffff00ull;
	memcpy(a.cookieverf, good_verf, sizeof(good_verf));
	CHECK(pc_nfs3_readdir(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3ERR_BAD_COOKIE ||
	       (r.status == NFS3_OK && r.READDIR3res_u.resok.reply.entries == NULL &&
		r.READDIR3res_u.resok.reply.eof),
	       "cookie past the end: status %u", r.status);
	/* The right verifier and cookie continue normally. */
	a.cookie = good_cookie;
	CHECK(pc_nfs3_readdir(&cl, &a, &r) == 0);
	CHECKF(r.status == NFS3_OK, "good cookie: status %u", r.status);
	pc_release(&cl);
}

static void bad_handle(void)
{
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "victim", UNCHECKED, 0644, &f, NULL) == NFS3_OK);
	CHECK(do_getattr(&cl, &f, NULL) == NFS3_OK);
	/* Alter one byte at a time at a few positions: never accepted as another object. */
	uint32_t positions[] = { 0, f.pf_len / 2, f.pf_len - 1 };
	for (size_t i = 0; i < sizeof(positions) / sizeof(positions[0]); i++) {
		struct pc_fh bad = f;
		bad.pf_data[positions[i]] ^= 0x01;
		uint32_t st = do_getattr(&cl, &bad, NULL);
		CHECKF(st == NFS3ERR_BADHANDLE || (positions[i] == 0 && st == NFS3ERR_STALE),
		       "byte %u altered: status %u", positions[i], st);
	}
	/* The last byte is under the MAC; BADHANDLE is the answer the brief asks for. */
	struct pc_fh bad = f;
	bad.pf_data[f.pf_len - 1] ^= 0x80;
	CHECKF(do_getattr(&cl, &bad, NULL) == NFS3ERR_BADHANDLE, "last byte altered");
	/* Too short and empty handles. */
	bad = f;
	bad.pf_len = 4;
	CHECKF(do_getattr(&cl, &bad, NULL) == NFS3ERR_BADHANDLE, "4-byte handle");
	bad.pf_len = 0;
	CHECKF(do_getattr(&cl, &bad, NULL) == NFS3ERR_BADHANDLE, "empty handle");
	/* A bad directory handle in LOOKUP and CREATE. */
	bad = root;
	bad.pf_data[root.pf_len - 1] ^= 0x10;
	CHECK(pc_lookup(&cl, &bad, "victim", NULL, NULL) == NFS3ERR_BADHANDLE);
	uint32_t st = do_create(&cl, &bad, "never", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3ERR_BADHANDLE, "CREATE under a bad handle: status %u", st);
	CHECK(pc_lookup(&cl, &root, "never", NULL, NULL) == NFS3ERR_NOENT);
}

static void notdir_isdir(void)
{
	struct pc_fh f;
	CHECK(do_create(&cl, &root, "afile", UNCHECKED, 0644, &f, NULL) == NFS3_OK);
	uint32_t st = pc_lookup(&cl, &f, "x", NULL, NULL);
	CHECKF(st == NFS3ERR_NOTDIR, "LOOKUP in a file: status %u", st);
	st = do_create(&cl, &f, "x", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3ERR_NOTDIR, "CREATE in a file: status %u", st);
	st = do_mkdir(&cl, &f, "x", 0755, NULL);
	CHECKF(st == NFS3ERR_NOTDIR, "MKDIR in a file: status %u", st);

	struct pc_fh d;
	CHECK(do_mkdir(&cl, &root, "adir", 0755, &d) == NFS3_OK);
	READ3res rr = {0};
	st = do_read(&cl, &d, 0, 100, &rr);
	CHECKF(st == NFS3ERR_ISDIR || st == NFS3ERR_INVAL, "READ of a directory: status %u", st);
	st = do_write(&cl, &d, 0, "x", 1, UNSTABLE, NULL);
	CHECKF(st == NFS3ERR_ISDIR || st == NFS3ERR_INVAL, "WRITE to a directory: status %u", st);
	st = do_remove(&cl, &root, "adir", NULL);
	CHECKF(st == NFS3ERR_ISDIR || st == NFS3ERR_PERM || st == NFS3ERR_ACCES || st == NFS3ERR_NOTEMPTY,
	       "REMOVE of a directory: status %u", st);
	CHECK(do_getattr(&cl, &d, NULL) == NFS3_OK); /* still there */
}

static void name_too_long(void)
{
	char name[257];
	memset(name, 'n', 256);
	name[256] = '\0';
	uint32_t st = do_create(&cl, &root, name, UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3ERR_NAMETOOLONG, "CREATE 256-byte name: status %u", st);
	st = pc_lookup(&cl, &root, name, NULL, NULL);
	CHECKF(st == NFS3ERR_NAMETOOLONG, "LOOKUP 256-byte name: status %u", st);
	st = do_mkdir(&cl, &root, name, 0755, NULL);
	CHECKF(st == NFS3ERR_NAMETOOLONG, "MKDIR 256-byte name: status %u", st);
	/* 255 bytes is the limit and works. */
	name[255] = '\0';
	st = do_create(&cl, &root, name, UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3_OK, "CREATE 255-byte name: status %u", st);
	/* Names with a slash, and "." / "..", are not valid new names. */
	st = do_create(&cl, &root, "a/b", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st != NFS3_OK, "CREATE 'a/b': status %u", st);
	st = do_create(&cl, &root, "..", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st != NFS3_OK, "CREATE '..': status %u", st);
	st = do_create(&cl, &root, "", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st != NFS3_OK, "CREATE '': status %u", st);
}

static void guarded_exist_notempty(void)
{
	CHECK(do_create(&cl, &root, "guarded", GUARDED, 0644, NULL, NULL) == NFS3_OK);
	uint32_t st = do_create(&cl, &root, "guarded", GUARDED, 0644, NULL, NULL);
	CHECKF(st == NFS3ERR_EXIST, "GUARDED over existing: status %u", st);
	struct pc_fh d;
	CHECK(do_mkdir(&cl, &root, "nonempty", 0755, &d) == NFS3_OK);
	CHECK(do_create(&cl, &d, "inside", GUARDED, 0644, NULL, NULL) == NFS3_OK);
	st = do_rmdir(&cl, &root, "nonempty");
	CHECKF(st == NFS3ERR_NOTEMPTY || st == NFS3ERR_EXIST, "RMDIR non-empty: status %u", st);
	CHECK(do_getattr(&cl, &d, NULL) == NFS3_OK);
}

static uint32_t create_exclusive(const char *name, const char verf[NFS3_CREATEVERFSIZE], struct pc_fh *out)
{
	CREATE3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = pc_fh_arg(&root);
	a.where.name = (char *)name;
	a.how.mode = EXCLUSIVE;
	memcpy(a.how.createhow3_u.verf, verf, NFS3_CREATEVERFSIZE);
	CREATE3res r = {0};
	if (pc_nfs3_create(&cl, &a, &r) != 0)
		return 0xffffffffu;
	if (r.status == NFS3_OK && out != NULL) {
		if (r.CREATE3res_u.resok.obj.handle_follows)
			pc_fh_set(out, &r.CREATE3res_u.resok.obj.post_op_fh3_u.handle);
		else if (pc_lookup(&cl, &root, name, out, NULL) != NFS3_OK)
			return 0xfffffffeu;
	}
	return r.status;
}

static void exclusive_create(void)
{
	const char v1[NFS3_CREATEVERFSIZE] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const char v2[NFS3_CREATEVERFSIZE] = { 8, 7, 6, 5, 4, 3, 2, 1 };
	struct pc_fh h1, h2;
	uint32_t st = create_exclusive("excl", v1, &h1);
	CHECKF(st == NFS3_OK, "first EXCLUSIVE: status %u", st);
	/* A retransmission with the same verifier succeeds with the same object. */
	st = create_exclusive("excl", v1, &h2);
	CHECKF(st == NFS3_OK, "retry, same verifier: status %u", st);
	if (st == NFS3_OK) {
		fattr3 a1 = {0}, a2 = {0};
		CHECK(do_getattr(&cl, &h1, &a1) == NFS3_OK && do_getattr(&cl, &h2, &a2) == NFS3_OK &&
		      a1.fileid == a2.fileid);
		CHECK(pc_fh_equal(&h1, &h2));
	}
	/* A different verifier means a different client: EXIST. */
	st = create_exclusive("excl", v2, NULL);
	CHECKF(st == NFS3ERR_EXIST, "different verifier: status %u", st);
	/* After the client sets attributes (as RFC 1813 3.3.8 asks), the file is usable. */
	SETATTR3args sa;
	memset(&sa, 0, sizeof(sa));
	sa.object = pc_fh_arg(&h1);
	sa.new_attributes = pc_sattr_mode(0644);
	sa.new_attributes.mtime.set_it = SET_TO_SERVER_TIME;
	sa.new_attributes.atime.set_it = SET_TO_SERVER_TIME;
	SETATTR3res sr = {0};
	CHECK(pc_nfs3_setattr(&cl, &sa, &sr) == 0 && sr.status == NFS3_OK);
	CHECK(do_write(&cl, &h1, 0, "ok", 2, FILE_SYNC, NULL) == NFS3_OK);
	/* EXCLUSIVE on a name that exists as an ordinary file: EXIST. */
	CHECK(do_create(&cl, &root, "plain-excl", GUARDED, 0644, NULL, NULL) == NFS3_OK);
	st = create_exclusive("plain-excl", v1, NULL);
	CHECKF(st == NFS3ERR_EXIST, "EXCLUSIVE over a plain file: status %u", st);
}

static void read_only_export(void)
{
	/* "ro-file" was placed in the read-only export before the server started (a fixture). */
	struct pc_fh ro;
	uint32_t mst = 0;
	CHECK(mount_path(srv.ts_export_path[1], &ro, &mst) == 0 && mst == MNT3_OK);
	if (mst != MNT3_OK)
		return;
	struct pc_fh f;
	CHECK(pc_lookup(&cl, &ro, "ro-file", &f, NULL) == NFS3_OK);
	READ3res rr = {0};
	CHECK(do_read(&cl, &f, 0, 100, &rr) == NFS3_OK && rr.READ3res_u.resok.count == 8);
	uint32_t st = do_write(&cl, &f, 0, "x", 1, FILE_SYNC, NULL);
	CHECKF(st == NFS3ERR_ROFS, "WRITE: status %u", st);
	st = do_create(&cl, &ro, "new", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3ERR_ROFS, "CREATE: status %u", st);
	st = do_mkdir(&cl, &ro, "newdir", 0755, NULL);
	CHECKF(st == NFS3ERR_ROFS, "MKDIR: status %u", st);
	st = do_remove(&cl, &ro, "ro-file", NULL);
	CHECKF(st == NFS3ERR_ROFS, "REMOVE: status %u", st);
	SETATTR3args sa;
	memset(&sa, 0, sizeof(sa));
	sa.object = pc_fh_arg(&f);
	sa.new_attributes = pc_sattr_mode(0600);
	SETATTR3res sr = {0};
	CHECK(pc_nfs3_setattr(&cl, &sa, &sr) == 0);
	CHECKF(sr.status == NFS3ERR_ROFS, "SETATTR: status %u", sr.status);
	/* ACCESS on a read-only export never grants MODIFY (3.3.4). */
	ACCESS3args aa = { .object = pc_fh_arg(&f), .access = ACCESS3_READ | ACCESS3_MODIFY };
	ACCESS3res ar = {0};
	CHECK(pc_nfs3_access(&cl, &aa, &ar) == 0 && ar.status == NFS3_OK);
	if (ar.status == NFS3_OK) {
		CHECK(ar.ACCESS3res_u.resok.access & ACCESS3_READ);
		CHECK(!(ar.ACCESS3res_u.resok.access & ACCESS3_MODIFY));
	}
	/* Nothing changed: as the server tells it, and (posix back end) on the host. */
	fattr3 fa;
	CHECK(do_getattr(&cl, &f, &fa) == NFS3_OK && fa.size == 8 && (fa.mode & 07777) == 0644);
	struct pc_fh nf;
	CHECK(pc_lookup(&cl, &ro, "new", &nf, NULL) == NFS3ERR_NOENT);
	CHECK(pc_lookup(&cl, &ro, "newdir", &nf, NULL) == NFS3ERR_NOENT);
	if (!ts_pool_mode()) {
		char path[400];
		struct stat stbuf;
		snprintf(path, sizeof(path), "%s/ro-file", srv.ts_export_path[1]);
		CHECK(stat(path, &stbuf) == 0 && stbuf.st_size == 8 &&
		      (stbuf.st_mode & 07777) == 0644);
		snprintf(path, sizeof(path), "%s/new", srv.ts_export_path[1]);
		CHECK(access(path, F_OK) != 0);
	}
}

static void root_squash_acces(void)
{
	struct pc_fh sq;
	uint32_t mst = 0;
	CHECK(mount_path(srv.ts_export_path[2], &sq, &mst) == 0 && mst == MNT3_OK);
	if (mst != MNT3_OK)
		return;
	/* uid 1234 makes a 0755 directory it owns. */
	struct pc_client user;
	CHECK(pc_connect(&user, srv.ts_port, NFS_PROGRAM, 3, 1234, 1234) == 0);
	struct pc_fh owned;
	uint32_t st = do_mkdir(&user, &sq, "owned", 0755, &owned);
	CHECKF(st == NFS3_OK, "MKDIR as uid 1234: status %u", st);
	fattr3 oa = {0};
	CHECK(do_getattr(&user, &owned, &oa) == NFS3_OK && oa.uid == 1234);
	/* Root, squashed to the anonymous uid, cannot create in it. */
	st = do_create(&cl, &owned, "by-root", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3ERR_ACCES, "CREATE as squashed root: status %u", st);
	/* The owner can. */
	st = do_create(&user, &owned, "by-owner", UNCHECKED, 0644, NULL, NULL);
	CHECKF(st == NFS3_OK, "CREATE as owner: status %u", st);
	/* A file root creates in the world-writable export root belongs to the anonymous uid. */
	struct pc_fh rf;
	st = do_create(&cl, &sq, "root-made", UNCHECKED, 0644, &rf, NULL);
	CHECKF(st == NFS3_OK, "CREATE in 0777 dir as squashed root: status %u", st);
	fattr3 ra = {0};
	if (st == NFS3_OK && do_getattr(&cl, &rf, &ra) == NFS3_OK)
		CHECKF(ra.uid == 65534, "owner uid %u, want 65534", ra.uid);
	pc_disconnect(&user);
}

/* ---------------------------------------------------------------- main */

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *lines[] = {
		"%s *(rw,insecure,no_root_squash)",
		"%s *(ro,insecure,no_root_squash)",
		"%s *(rw,insecure,root_squash)",
	};
	const struct ts_fixture fixtures[] = {{1, "ro-file", "readonly", 0644}};
	if (!tap_check(ts_start_with(&srv, lines, 3, fixtures, 1) == 0, "server starts"))
		return tap_finish();
	uint32_t mst = 0;
	have_root = mount_path(srv.ts_export_path[0], &root, &mst) == 0 && mst == MNT3_OK;
	if (!tap_check(have_root, "MNT of the rw export gives a handle (status %u)", mst) ||
	    !tap_check(pc_connect(&cl, srv.ts_port, NFS_PROGRAM, 3, 0, 0) == 0, "NFS connect")) {
		ts_stop(&srv);
		return tap_finish();
	}

	TAP_RUN(nfs_null);
	TAP_RUN(getattr_root);
	TAP_RUN(fsinfo_limits);
	TAP_RUN(fsstat_sane);
	TAP_RUN(pathconf_sane);
	TAP_RUN(create_and_getattr);
	TAP_RUN(lookup_noent);
	TAP_RUN(write_read_unstable);
	TAP_RUN(write_verifier_and_commit);
	TAP_RUN(write_file_sync);
	TAP_RUN(write_read_one_mib);
	TAP_RUN(setattr_cases);
	TAP_RUN(access_cases);
	TAP_RUN(mkdir_rmdir);
	TAP_RUN(symlink_readlink);
	TAP_RUN(mknod_cases);
	TAP_RUN(remove_and_stale);
	TAP_RUN(rename_cases);
	TAP_RUN(link_cases);
	TAP_RUN(readdir_paged);
	TAP_RUN(readdirplus_handles);
	TAP_RUN(bad_cookie);
	TAP_RUN(bad_handle);
	TAP_RUN(notdir_isdir);
	TAP_RUN(name_too_long);
	TAP_RUN(guarded_exist_notempty);
	TAP_RUN(exclusive_create);
	TAP_RUN(read_only_export);
	TAP_RUN(root_squash_acces);

	pc_disconnect(&cl);
	tap_check(ts_alive(&srv), "server still running after all cases");
	tap_check(ts_stop(&srv) == 0, "server exits cleanly on SIGTERM");
	return tap_finish();
}
