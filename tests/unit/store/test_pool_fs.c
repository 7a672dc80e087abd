/* test_pool_fs.c: unit tests of the pool's fs.h back end (src/store/pool_fs.c), driven only
 * through fs_submit with fr_loop = NULL: every operation once, durability of acknowledged changes
 * across a close without export and an import that replays through pool_fs_attach, restarts on
 * cache misses with a tiny ARC, ENOSPC on a small pool, the dirty-data throttle, and concurrent
 * clients. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/pool.h"
#include "store/pool_fs.h"
#include "store/pool_impl.h"
#include "tap.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static const struct fs_cred root_cred = {.fc_uid = 0, .fc_gid = 0};

/* ---- the synchronous driver ---- */

struct call {
	struct fs_req c_req;
	pthread_mutex_t c_lock;
	pthread_cond_t c_cond;
	int c_done; /* completions seen: exactly one is right */
};

static void call_done(struct fs_req *req)
{
	struct call *c = req->fr_done_arg;
	pthread_mutex_lock(&c->c_lock);
	c->c_done++;
	pthread_cond_broadcast(&c->c_cond);
	pthread_mutex_unlock(&c->c_lock);
}

static _Atomic unsigned bad_completions;

static void call_init(struct call *c, struct fs *fs, enum fs_op op, const struct fs_obj_id *obj)
{
	memset(c, 0, sizeof(*c));
	VERIFY(pthread_mutex_init(&c->c_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&c->c_cond, NULL) == 0);
	c->c_req.fr_op = op;
	c->c_req.fr_fs = fs;
	c->c_req.fr_cred = &root_cred;
	c->c_req.fr_loop = NULL;
	c->c_req.fr_done = call_done;
	c->c_req.fr_done_arg = c;
	if (obj)
		c->c_req.fr_obj = *obj;
}

/* Submits and waits for the completion; returns fr_status. */
static int call_run(struct call *c)
{
	fs_submit(&c->c_req);
	pthread_mutex_lock(&c->c_lock);
	while (c->c_done == 0)
		pthread_cond_wait(&c->c_cond, &c->c_lock);
	pthread_mutex_unlock(&c->c_lock);
	return c->c_req.fr_status;
}

static void call_fini(struct call *c)
{
	pthread_mutex_lock(&c->c_lock);
	if (c->c_done != 1)
		bad_completions++;
	pthread_mutex_unlock(&c->c_lock);
	pthread_cond_destroy(&c->c_cond);
	pthread_mutex_destroy(&c->c_lock);
}

/* ---- operations ---- */

static int op_lookup(struct fs *fs, const struct fs_obj_id *dir, const char *name, struct fs_obj_id *out,
		     struct fs_attr *attr)
{
	struct call c;
	call_init(&c, fs, FS_OP_LOOKUP, dir);
	c.c_req.u.lookup.lk_name = name;
	int rc = call_run(&c);
	if (rc == 0 && out)
		*out = c.c_req.u.lookup.lk_obj;
	if (rc == 0 && attr)
		*attr = c.c_req.u.lookup.lk_attr;
	call_fini(&c);
	return rc;
}

static int op_getattr(struct fs *fs, const struct fs_obj_id *obj, struct fs_attr *attr)
{
	struct call c;
	call_init(&c, fs, FS_OP_GETATTR, obj);
	int rc = call_run(&c);
	if (rc == 0)
		*attr = c.c_req.u.getattr.ga_attr;
	call_fini(&c);
	return rc;
}

/* CREATE, MKDIR, SYMLINK (target) or MKNOD (type). */
static int op_create(struct fs *fs, enum fs_op op, const struct fs_obj_id *dir, const char *name,
		     const char *target, enum fs_type type, struct fs_obj_id *out)
{
	struct call c;
	call_init(&c, fs, op, dir);
	c.c_req.u.create.cr_name = name;
	c.c_req.u.create.cr_mode = FS_CREATE_GUARDED;
	c.c_req.u.create.cr_sattr.fs_set_mode = true;
	c.c_req.u.create.cr_sattr.fs_mode = op == FS_OP_MKDIR ? 0755 : 0644;
	c.c_req.u.create.cr_link_target = target;
	c.c_req.u.create.cr_type = type;
	c.c_req.u.create.cr_rdev_major = 1;
	c.c_req.u.create.cr_rdev_minor = 3;
	int rc = call_run(&c);
	if (rc == 0 && out)
		*out = c.c_req.u.create.cr_obj;
	call_fini(&c);
	return rc;
}

static int op_write(struct fs *fs, const struct fs_obj_id *obj, uint64_t off, const void *data, uint32_t len,
		    enum fs_stable stable, enum fs_stable *committed)
{
	struct call c;
	call_init(&c, fs, FS_OP_WRITE, obj);
	c.c_req.u.write.wr_offset = off;
	c.c_req.u.write.wr_data = data;
	c.c_req.u.write.wr_len = len;
	c.c_req.u.write.wr_stable = stable;
	int rc = call_run(&c);
	if (rc == 0 && c.c_req.u.write.wr_count != len)
		rc = -EIO;
	if (committed)
		*committed = c.c_req.u.write.wr_committed;
	call_fini(&c);
	return rc;
}

/* Reads [off, off + len) into buf (fills with what the file has; *got_out bytes). */
static int op_read(struct fs *fs, const struct fs_obj_id *obj, uint64_t off, uint32_t len, void *buf,
		   uint32_t *got_out, bool *eof_out)
{
	uint32_t got = 0;
	bool eof = false;
	int rc = 0;
	while (got < len && !eof) {
		struct call c;
		call_init(&c, fs, FS_OP_READ, obj);
		c.c_req.u.read.rd_offset = off + got;
		c.c_req.u.read.rd_count = len - got;
		rc = call_run(&c);
		if (rc == 0) {
			struct fs_buf *b = &c.c_req.u.read.rd_buf;
			memcpy((uint8_t *)buf + got, b->fb_data, b->fb_len);
			got += b->fb_len;
			eof = c.c_req.u.read.rd_eof;
			if (b->fb_release)
				b->fb_release(b->fb_release_arg);
			if (b->fb_len == 0)
				eof = true;
		}
		call_fini(&c);
		if (rc != 0)
			break;
	}
	if (got_out)
		*got_out = got;
	if (eof_out)
		*eof_out = eof;
	return rc;
}

static int op_remove(struct fs *fs, enum fs_op op, const struct fs_obj_id *dir, const char *name)
{
	struct call c;
	call_init(&c, fs, op, dir);
	c.c_req.u.remove.rm_name = name;
	int rc = call_run(&c);
	call_fini(&c);
	return rc;
}

static int op_rename(struct fs *fs, const struct fs_obj_id *from_dir, const char *from,
		     const struct fs_obj_id *to_dir, const char *to)
{
	struct call c;
	call_init(&c, fs, FS_OP_RENAME, from_dir);
	c.c_req.u.rename.rn_from_name = from;
	c.c_req.u.rename.rn_to_dir = *to_dir;
	c.c_req.u.rename.rn_to_name = to;
	int rc = call_run(&c);
	call_fini(&c);
	return rc;
}

static int op_commit(struct fs *fs, const struct fs_obj_id *obj)
{
	struct call c;
	call_init(&c, fs, FS_OP_COMMIT, obj);
	int rc = call_run(&c);
	call_fini(&c);
	return rc;
}

/* READDIR(PLUS) of a whole directory: names (of at most 31 bytes) into names[], counting
 * entries; "." and ".." are skipped. Small pages (emit says "full" after per_call entries) make it
 * resume from cookies. Returns 0 or the error; -EEXIST when a name came twice. */
struct rd_state {
	char (*names)[32];
	unsigned max, n, this_call, per_call;
	uint64_t last_cookie;
};

static struct rd_state *rd_cur;

static bool rd_emit_cur(struct fs_req *req, const struct fs_dirent *e)
{
	(void)req;
	struct rd_state *st = rd_cur;
	if (st->this_call == st->per_call)
		return false;
	st->this_call++;
	st->last_cookie = e->fd_cookie;
	if ((e->fd_name_len == 1 && e->fd_name[0] == '.') ||
	    (e->fd_name_len == 2 && e->fd_name[0] == '.' && e->fd_name[1] == '.'))
		return true;
	if (req->u.readdir.rd_plus && (!e->fd_has_obj || !e->fd_has_attr))
		st->max = 0; /* flagged below: READDIRPLUS without ids */
	if (st->n < st->max && e->fd_name_len < 32) {
		memcpy(st->names[st->n], e->fd_name, e->fd_name_len);
		st->names[st->n][e->fd_name_len] = 0;
	}
	st->n++;
	return true;
}

static pthread_mutex_t rd_lock = PTHREAD_MUTEX_INITIALIZER;

static int op_readdir_all(struct fs *fs, const struct fs_obj_id *dir, bool plus, char (*names)[32], unsigned max,
			  unsigned *n_out)
{
	pthread_mutex_lock(&rd_lock);
	struct rd_state st = {.names = names, .max = max, .per_call = 7};
	rd_cur = &st;
	uint64_t cookie = 0;
	uint8_t verf[8] = {0};
	int rc = 0;
	for (int guard = 0; guard < 100000; guard++) {
		struct call c;
		call_init(&c, fs, FS_OP_READDIR, dir);
		c.c_req.u.readdir.rd_cookie = cookie;
		memcpy(c.c_req.u.readdir.rd_verf, verf, 8);
		c.c_req.u.readdir.rd_plus = plus;
		c.c_req.u.readdir.rd_emit = rd_emit_cur;
		st.this_call = 0;
		st.last_cookie = cookie;
		rc = call_run(&c);
		bool eof = c.c_req.u.readdir.rd_eof;
		memcpy(verf, c.c_req.u.readdir.rd_verf_out, 8);
		call_fini(&c);
		if (rc != 0 || eof)
			break;
		if (st.last_cookie == cookie) {
			rc = -EIO; /* no progress */
			break;
		}
		cookie = st.last_cookie;
	}
	rd_cur = NULL;
	pthread_mutex_unlock(&rd_lock);
	*n_out = st.n;
	if (rc == 0 && plus && st.max == 0 && max != 0)
		return -EPROTO;
	if (rc == 0) {
		unsigned m = SH_MIN(st.n, max);
		for (unsigned i = 0; i < m; i++)
			for (unsigned j = i + 1; j < m; j++)
				if (strcmp(names[i], names[j]) == 0)
					return -EEXIST;
	}
	return rc;
}

/* ---- pools ---- */

static struct blk_dev *mem_dev(uint64_t bytes)
{
	struct blk_dev *d = NULL;
	VERIFY(blk_dev_create_mem(bytes, &d) == 0);
	return d;
}

static struct pool_open_opts opts_fs(uint64_t arc_max)
{
	struct pool_open_opts o = {0};
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 60000; /* tests sync when they say so */
	o.po_arc_max_bytes = arc_max;
	return o;
}

static struct pool *pool_new(struct blk_dev *d, const struct pool_open_opts *o)
{
	struct pool_create_args a = {.pc_name = "tank", .pc_opts = o};
	struct pool *p = NULL;
	VERIFY(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	VERIFY(pool_ds_create(p, "fs", NULL) == 0);
	return p;
}

static void report_print(void *arg, const char *line)
{
	(void)arg;
	printf("#   check: %s\n", line);
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		buf[i] = (uint8_t)s;
	}
}

static struct fs *fs_open_ok(struct pool *p)
{
	struct fs *fs = NULL;
	int rc = pool_fs_open(p, "fs", 77, &fs);
	CHECKF(rc == 0, "pool_fs_open: %s", sh_strerror(rc));
	return fs;
}

/* ---- tests ---- */

static void test_every_op(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	struct fs_obj_id root, f, dir, sl, nod, g;
	CHECK(fs_root(fs, &root) == 0);
	struct fs_info info;
	fs_info(fs, &info);
	CHECK(info.fi_name_max == FS_NAME_MAX && info.fi_has_links && info.fi_has_symlinks);
	uint8_t v1[8], v2[8];
	fs_write_verifier(fs, v1);

	struct fs_attr a = {0};
	CHECK(op_getattr(fs, &root, &a) == 0 && a.fa_type == FS_DIR && a.fa_mode == 0755 && a.fa_uid == 0 &&
	      a.fa_fsid == 77);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "file", NULL, 0, &f) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "file", NULL, 0, NULL) == -EEXIST);
	CHECK(op_lookup(fs, &root, "file", &g, &a) == 0 && a.fa_type == FS_REG && a.fa_mode == 0644);
	CHECK(g.foi_len == f.foi_len && memcmp(g.foi_bytes, f.foi_bytes, f.foi_len) == 0);
	CHECK(op_lookup(fs, &root, "nope", NULL, NULL) == -ENOENT);

	/* writes: FILE_SYNC, UNSTABLE, COMMIT; read back */
	static uint8_t data[300 * 1024], back[300 * 1024];
	fill(data, sizeof(data), 1);
	enum fs_stable cm = FS_UNSTABLE;
	CHECK(op_write(fs, &f, 0, data, 4096, FS_FILE_SYNC, &cm) == 0 && cm == FS_FILE_SYNC);
	CHECK(op_write(fs, &f, 4096, data + 4096, 4096, FS_DATA_SYNC, &cm) == 0 && cm == FS_FILE_SYNC);
	cm = FS_FILE_SYNC;
	CHECK(op_write(fs, &f, 8192, data + 8192, sizeof(data) - 8192, FS_UNSTABLE, &cm) == 0 && cm == FS_UNSTABLE);
	uint64_t before = pool_synced_txg(p);
	CHECK(op_commit(fs, &f) == 0);
	CHECK(pool_synced_txg(p) > before); /* COMMIT waited for a txg */
	uint32_t got = 0;
	bool eof = false;
	CHECK(op_read(fs, &f, 0, sizeof(back), back, &got, &eof) == 0 && got == sizeof(back));
	CHECK(memcmp(back, data, sizeof(back)) == 0);
	CHECK(op_getattr(fs, &f, &a) == 0 && a.fa_size == sizeof(data));

	/* directories, readdir and readdirplus */
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "dir", NULL, 0, &dir) == 0);
	for (int i = 0; i < 20; i++) {
		char name[32];
		snprintf(name, sizeof(name), "e%02d", i);
		CHECK(op_create(fs, FS_OP_CREATE, &dir, name, NULL, 0, NULL) == 0);
	}
	char names[64][32];
	unsigned n = 0;
	CHECK(op_readdir_all(fs, &dir, false, names, 64, &n) == 0 && n == 20);
	CHECK(op_readdir_all(fs, &dir, true, names, 64, &n) == 0 && n == 20);

	/* rename, link, symlink and readlink, mknod */
	CHECK(op_rename(fs, &root, "file", &dir, "moved") == 0);
	CHECK(op_lookup(fs, &root, "file", NULL, NULL) == -ENOENT);
	CHECK(op_lookup(fs, &dir, "moved", &g, NULL) == 0);
	{
		struct call c;
		call_init(&c, fs, FS_OP_LINK, &g);
		c.c_req.u.link.ln_dir = root;
		c.c_req.u.link.ln_name = "hard";
		CHECK(call_run(&c) == 0);
		call_fini(&c);
	}
	CHECK(op_getattr(fs, &g, &a) == 0 && a.fa_nlink == 2);
	CHECK(op_create(fs, FS_OP_SYMLINK, &root, "sl", "some/target", 0, &sl) == 0);
	{
		struct call c;
		call_init(&c, fs, FS_OP_READLINK, &sl);
		CHECK(call_run(&c) == 0);
		CHECK(c.c_req.u.readlink.rl_len == 11 && strcmp(c.c_req.u.readlink.rl_target, "some/target") == 0);
		call_fini(&c);
	}
	CHECK(op_create(fs, FS_OP_MKNOD, &root, "nod", NULL, FS_CHR, &nod) == 0);
	CHECK(op_getattr(fs, &nod, &a) == 0 && a.fa_type == FS_CHR && a.fa_rdev_major == 1 && a.fa_rdev_minor == 3);

	/* setattr: mode and truncate */
	{
		struct call c;
		call_init(&c, fs, FS_OP_SETATTR, &g);
		c.c_req.u.setattr.sa_sattr.fs_set_mode = true;
		c.c_req.u.setattr.sa_sattr.fs_mode = 0600;
		c.c_req.u.setattr.sa_sattr.fs_set_size = true;
		c.c_req.u.setattr.sa_sattr.fs_size = 5000;
		CHECK(call_run(&c) == 0);
		call_fini(&c);
	}
	CHECK(op_getattr(fs, &g, &a) == 0 && a.fa_mode == 0600 && a.fa_size == 5000);
	CHECK(op_read(fs, &g, 0, sizeof(back), back, &got, &eof) == 0 && got == 5000 && eof);
	CHECK(memcmp(back, data, 5000) == 0);

	/* access for another user */
	{
		struct fs_cred other = {.fc_uid = 1000, .fc_gid = 1000};
		struct call c;
		call_init(&c, fs, FS_OP_ACCESS, &g);
		c.c_req.fr_cred = &other;
		c.c_req.u.access.ac_want = FS_ACCESS_READ | FS_ACCESS_MODIFY;
		CHECK(call_run(&c) == 0 && c.c_req.u.access.ac_granted == 0);
		call_fini(&c);
		call_init(&c, fs, FS_OP_ACCESS, &g);
		c.c_req.u.access.ac_want = FS_ACCESS_READ | FS_ACCESS_MODIFY;
		CHECK(call_run(&c) == 0 && c.c_req.u.access.ac_granted == (FS_ACCESS_READ | FS_ACCESS_MODIFY));
		call_fini(&c);
	}

	/* fsstat shows the pool's space */
	{
		struct call c;
		call_init(&c, fs, FS_OP_FSSTAT, &root);
		CHECK(call_run(&c) == 0);
		uint64_t total, fre, avail;
		pool_space(p, &total, &fre, &avail);
		CHECK(c.c_req.u.fsstat.st_total_bytes == total);
		CHECK(c.c_req.u.fsstat.st_total_bytes > 32 * MIB && c.c_req.u.fsstat.st_avail_bytes > 0 &&
		      c.c_req.u.fsstat.st_avail_bytes <= c.c_req.u.fsstat.st_free_bytes);
		call_fini(&c);
	}

	/* remove and rmdir */
	CHECK(op_remove(fs, FS_OP_RMDIR, &root, "dir") == -ENOTEMPTY);
	CHECK(op_remove(fs, FS_OP_REMOVE, &dir, "moved") == 0);
	for (int i = 0; i < 20; i++) {
		char name[32];
		snprintf(name, sizeof(name), "e%02d", i);
		CHECK(op_remove(fs, FS_OP_REMOVE, &dir, name) == 0);
	}
	CHECK(op_remove(fs, FS_OP_RMDIR, &root, "dir") == 0);
	CHECK(op_getattr(fs, &dir, &a) == -ESTALE);
	CHECK(op_getattr(fs, &g, &a) == 0 && a.fa_nlink == 1); /* still linked as "hard" */

	struct pool_fs_stats st;
	pool_fs_stats(fs, &st);
	CHECK(st.ps_log_commits > 20 && st.ps_txg_waits >= 1);
	fs_destroy(fs);
	fs = fs_open_ok(p);
	if (fs) {
		fs_write_verifier(fs, v2);
		CHECK(memcmp(v1, v2, 8) != 0);
		fs_destroy(fs);
	}
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* Acknowledged changes survive a close without export (a crash after the replies). */
static void test_durability(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_log_region_bytes = 16 * MIB;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	static uint8_t big[1024 * 1024], buf[1024 * 1024];
	enum { NF = 40 };
	if (!fs)
		goto out;
	struct fs_obj_id root, dir, ids[NF], uf;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "d", NULL, 0, &dir) == 0);
	uint64_t synced0 = pool_synced_txg(p);
	for (int i = 0; i < NF; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%02d", i);
		CHECK(op_create(fs, FS_OP_CREATE, &dir, name, NULL, 0, &ids[i]) == 0);
		uint8_t data[6000];
		fill(data, sizeof(data), (uint64_t)i);
		CHECK(op_write(fs, &ids[i], 0, data, (uint32_t)(1000 + 100 * i), FS_FILE_SYNC, NULL) == 0);
	}
	for (int i = 0; i < NF; i += 4)
		CHECK(op_rename(fs, &dir, (char[8]){'f', (char)('0' + i / 10), (char)('0' + i % 10), 0}, &root,
				(char[8]){'r', (char)('0' + i / 10), (char)('0' + i % 10), 0}) == 0);
	for (int i = 1; i < NF; i += 4)
		CHECK(op_remove(fs, FS_OP_REMOVE, &dir, (char[8]){'f', (char)('0' + i / 10), (char)('0' + i % 10), 0}) ==
		      0);
	/* An oversize FILE_SYNC write (durable through a txg, not the log). */
	fill(big, sizeof(big), 99);
	enum fs_stable cm = FS_UNSTABLE;
	CHECK(op_write(fs, &ids[2], 0, big, sizeof(big), FS_FILE_SYNC, &cm) == 0 && cm == FS_FILE_SYNC);
	/* UNSTABLE writes then COMMIT. */
	CHECK(op_create(fs, FS_OP_CREATE, &root, "unstable", NULL, 0, &uf) == 0);
	for (int i = 0; i < 8; i++)
		CHECK(op_write(fs, &uf, (uint64_t)i * 65536, big + i * 65536, 65536, FS_UNSTABLE, NULL) == 0);
	CHECK(op_commit(fs, &uf) == 0);
	/* Then more stable changes that only the log holds, and UNSTABLE writes without COMMIT. */
	uint64_t synced1 = pool_synced_txg(p);
	CHECK(synced1 > synced0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "late", NULL, 0, NULL) == 0);
	CHECK(op_write(fs, &ids[3], 0, "late data", 9, FS_FILE_SYNC, NULL) == 0);
	CHECK(op_rename(fs, &root, "r00", &root, "r00-renamed") == 0);
	CHECK(op_write(fs, &ids[6], 0, big, 100000, FS_UNSTABLE, NULL) == 0);
	CHECK(pool_synced_txg(p) == synced1); /* nothing above went into a txg */
	fs_destroy(fs);
	pool_close(p); /* no last txg: a crash after the replies */

	p = NULL;
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out_dev;
	fs = fs_open_ok(p);
	if (!fs)
		goto out;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_lookup(fs, &root, "late", NULL, NULL) == 0);
	CHECK(op_lookup(fs, &root, "r00", NULL, NULL) == -ENOENT);
	for (int i = 0; i < NF; i++) {
		char name[32];
		struct fs_obj_id id;
		struct fs_attr a = {0};
		int rc;
		if (i % 4 == 0) {
			snprintf(name, sizeof(name), i == 0 ? "r00-renamed" : "r%02d", i);
			rc = op_lookup(fs, &root, name, &id, &a);
			CHECK(op_lookup(fs, &dir, name + 0, NULL, NULL) == -ENOENT);
		} else {
			snprintf(name, sizeof(name), "f%02d", i);
			rc = op_lookup(fs, &dir, name, &id, &a);
		}
		if (i % 4 == 1) {
			CHECKF(rc == -ENOENT, "%s: %s", name, sh_strerror(rc));
			continue;
		}
		CHECKF(rc == 0, "%s: %s", name, sh_strerror(rc));
		if (rc != 0)
			continue;
		CHECK(id.foi_len == ids[i].foi_len && memcmp(id.foi_bytes, ids[i].foi_bytes, id.foi_len) == 0);
		uint8_t want[6000];
		fill(want, sizeof(want), (uint64_t)i);
		uint32_t len = (uint32_t)(1000 + 100 * i), got = 0;
		if (i == 6)
			continue; /* UNSTABLE without COMMIT: either content is allowed */
		if (i == 2) {
			CHECK(a.fa_size == sizeof(big));
			CHECK(op_read(fs, &id, 0, sizeof(buf), buf, &got, NULL) == 0 && got == sizeof(big) &&
			      memcmp(buf, big, sizeof(big)) == 0);
			continue;
		}
		if (i == 3)
			memcpy(want, "late data", 9);
		CHECK(a.fa_size == len);
		CHECK(op_read(fs, &id, 0, len, buf, &got, NULL) == 0 && got == len && memcmp(buf, want, len) == 0);
	}
	{
		struct fs_attr a = {0};
		uint32_t got = 0;
		CHECK(op_lookup(fs, &root, "unstable", &uf, &a) == 0 && a.fa_size == 8 * 65536);
		CHECK(op_read(fs, &uf, 0, 8 * 65536, buf, &got, NULL) == 0 && got == 8 * 65536 &&
		      memcmp(buf, big, 8 * 65536) == 0);
	}
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
out_dev:
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* A tiny cache: operations keep missing and restarting, and all succeed. */
static void misses_with_arc(uint64_t arc_bytes)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(arc_bytes);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	enum { NF = 300 };
	static char names[NF + 8][32];
	if (!fs)
		goto out;
	struct fs_obj_id root, dir;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "many", NULL, 0, &dir) == 0);
	uint8_t data[8192];
	for (int i = 0; i < NF; i++) {
		char name[32];
		snprintf(name, sizeof(name), "file-with-a-longer-name-%04d", i);
		struct fs_obj_id f;
		CHECK(op_create(fs, FS_OP_CREATE, &dir, name, NULL, 0, &f) == 0);
		fill(data, sizeof(data), (uint64_t)i + 1000);
		CHECK(op_write(fs, &f, 0, data, sizeof(data), i % 2 ? FS_UNSTABLE : FS_FILE_SYNC, NULL) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0); /* the data into blocks, out of dirty buffers */
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	unsigned n = 0;
	CHECK(op_readdir_all(fs, &dir, true, names, NF + 8, &n) == 0 && n == NF);
	for (int i = 0; i < NF; i += 7) {
		char name[32];
		snprintf(name, sizeof(name), "file-with-a-longer-name-%04d", i);
		struct fs_obj_id f;
		uint8_t back[8192];
		uint32_t got = 0;
		CHECK(op_lookup(fs, &dir, name, &f, NULL) == 0);
		fill(data, sizeof(data), (uint64_t)i + 1000);
		CHECK(op_read(fs, &f, 0, sizeof(back), back, &got, NULL) == 0 && got == sizeof(back) &&
		      memcmp(back, data, sizeof(data)) == 0);
	}
	struct pool_fs_stats st;
	pool_fs_stats(fs, &st);
	CHECKF(st.ps_restarts > 0, "restarts %" PRIu64, st.ps_restarts);
	printf("# misses with a %" PRIu64 " KiB cache: %" PRIu64 " restarts, %" PRIu64 " contexts allocated\n",
	       (uint64_t)(arc_bytes / KIB), st.ps_restarts, st.ps_slow_ctx_allocs);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

static void test_misses(void)
{
	misses_with_arc(256 * KIB); /* 16 tree nodes; the files take 2.4 MiB */
}

/* A cache of 4 tree nodes, smaller than what one READDIRPLUS of the directory touches: without
 * the pins of rule F6 in pool_fs.c, each load evicted a block the retry needed and the request
 * restarted forever. */
static void test_misses_tiny_cache(void)
{
	misses_with_arc(64 * KIB);
}

/* A full pool: WRITE gets ENOSPC, REMOVE works, writes succeed after the next txg. */
static void test_enospc(void)
{
	struct blk_dev *d = mem_dev(24 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_log_region_bytes = 4 * MIB;
	o.po_compress = POOL_COMPRESS_OFF;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	static uint8_t data[256 * 1024];
	if (!fs)
		goto out;
	struct fs_obj_id root;
	CHECK(fs_root(fs, &root) == 0);
	int rc = 0;
	int nfiles = 0;
	for (; nfiles < 200 && rc == 0; nfiles++) {
		char name[32];
		snprintf(name, sizeof(name), "big%03d", nfiles);
		struct fs_obj_id f;
		rc = op_create(fs, FS_OP_CREATE, &root, name, NULL, 0, &f);
		if (rc != 0)
			break;
		fill(data, sizeof(data), (uint64_t)nfiles);
		for (int k = 0; k < 4 && rc == 0; k++)
			rc = op_write(fs, &f, (uint64_t)k * sizeof(data), data, sizeof(data), FS_UNSTABLE, NULL);
		if (rc == 0)
			rc = op_commit(fs, &f);
	}
	CHECKF(rc == -ENOSPC && nfiles > 3, "stopped after %d files: %s", nfiles, sh_strerror(rc));
	/* Remove half the files: frees space, then a txg makes it reusable. */
	for (int i = 0; i < nfiles; i += 2) {
		char name[32];
		snprintf(name, sizeof(name), "big%03d", i);
		CHECK(op_remove(fs, FS_OP_REMOVE, &root, name) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct fs_obj_id f;
	CHECK(op_create(fs, FS_OP_CREATE, &root, "after", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, data, sizeof(data), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_commit(fs, &f) == 0);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* Dirty data far above the limit: UNSTABLE writes are throttled until a txg, and all land. */
static void test_throttle(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_dirty_max_bytes = 256 * KIB;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	static uint8_t data[4 * MIB], back[4 * MIB];
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "t", NULL, 0, &f) == 0);
	fill(data, sizeof(data), 5);
	for (uint32_t off = 0; off < sizeof(data); off += 64 * KIB)
		CHECK(op_write(fs, &f, off, data + off, 64 * KIB, FS_UNSTABLE, NULL) == 0);
	uint32_t got = 0;
	CHECK(op_read(fs, &f, 0, sizeof(back), back, &got, NULL) == 0 && got == sizeof(back) &&
	      memcmp(back, data, sizeof(data)) == 0);
	struct pool_fs_stats st;
	pool_fs_stats(fs, &st);
	CHECKF(st.ps_throttled > 0, "throttled %" PRIu64, st.ps_throttled);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* Four clients, each in its own directory. */
struct worker {
	struct fs *w_fs;
	struct fs_obj_id w_root;
	int w_index;
	int w_errors;
	int w_ops;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char dname[32];
	snprintf(dname, sizeof(dname), "w%d", w->w_index);
	struct fs_obj_id dir;
	if (op_create(w->w_fs, FS_OP_MKDIR, &w->w_root, dname, NULL, 0, &dir) != 0) {
		w->w_errors++;
		return NULL;
	}
	uint8_t data[3000], back[3000];
	for (int i = 0; i < 500; i++) {
		char name[32];
		snprintf(name, sizeof(name), "c%d", i % 5);
		struct fs_obj_id f;
		uint32_t got = 0;
		fill(data, sizeof(data), (uint64_t)(w->w_index * 1000 + i));
		int rc = op_create(w->w_fs, FS_OP_CREATE, &dir, name, NULL, 0, &f);
		if (rc == 0)
			rc = op_write(w->w_fs, &f, 0, data, sizeof(data), i % 3 ? FS_UNSTABLE : FS_FILE_SYNC, NULL);
		if (rc == 0)
			rc = op_read(w->w_fs, &f, 0, sizeof(back), back, &got, NULL);
		if (rc == 0 && (got != sizeof(back) || memcmp(back, data, sizeof(data)) != 0))
			rc = -EIO;
		/* keep the last five files */
		if (rc == 0 && i < 495)
			rc = op_remove(w->w_fs, FS_OP_REMOVE, &dir, name);
		if (rc != 0) {
			w->w_errors++;
			printf("# worker %d op %d: %s\n", w->w_index, i, sh_strerror(rc));
		}
		w->w_ops++;
	}
	return NULL;
}

static void test_concurrency(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_dirty_max_bytes = 1 * MIB; /* syncs and some throttling while they run */
	o.po_txg_interval_ms = 50;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	struct worker w[4];
	pthread_t t[4];
	struct fs_obj_id root;
	CHECK(fs_root(fs, &root) == 0);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){.w_fs = fs, .w_root = root, .w_index = i};
		VERIFY(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].w_errors == 0 && w[i].w_ops == 500);
	}
	struct pool_fs_stats st;
	pool_fs_stats(fs, &st);
	printf("# concurrency: %" PRIu64 " log commits, %" PRIu64 " throttled, %" PRIu64 " restarts\n",
	       st.ps_log_commits, st.ps_throttled, st.ps_restarts);
	CHECK(st.ps_log_commits >= 4 * (500 + 500 / 3 + 495));
	for (int i = 0; i < 4; i++) {
		char dname[32], names[16][32];
		unsigned n = 0;
		struct fs_obj_id dir;
		snprintf(dname, sizeof(dname), "w%d", i);
		CHECK(op_lookup(fs, &root, dname, &dir, NULL) == 0);
		CHECK(op_readdir_all(fs, &dir, false, names, 16, &n) == 0 && n == 5);
		for (int k = 495; k < 500; k++) {
			char name[32];
			uint8_t data[3000], back[3000];
			uint32_t got = 0;
			struct fs_obj_id f;
			snprintf(name, sizeof(name), "c%d", k % 5);
			fill(data, sizeof(data), (uint64_t)(i * 1000 + k));
			CHECK(op_lookup(fs, &dir, name, &f, NULL) == 0);
			CHECK(op_read(fs, &f, 0, sizeof(back), back, &got, NULL) == 0 && got == sizeof(back) &&
			      memcmp(back, data, sizeof(data)) == 0);
		}
	}
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

int main(void)
{
	TAP_RUN(test_every_op);
	TAP_RUN(test_durability);
	TAP_RUN(test_misses);
	TAP_RUN(test_misses_tiny_cache);
	TAP_RUN(test_enospc);
	TAP_RUN(test_throttle);
	TAP_RUN(test_concurrency);
	return tap_finish();
}
