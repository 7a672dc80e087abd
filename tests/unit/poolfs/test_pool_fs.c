/* test_pool_fs.c: unit tests of the pool's fs.h back end (src/poolfs/pool_fs.c), driven only
 * through fs_submit with fr_loop = NULL: every operation once, durability of acknowledged changes
 * across a close without export and an import that replays through pool_fs_attach, restarts on
 * cache misses with a tiny ARC, the REMOVE of a file whose extent leaves outgrow the cache,
 * ENOSPC on a small pool, a file system's quota (EDQUOT), the dirty-data throttle, and concurrent
 * clients. */
#include <stdatomic.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fs_fixture.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"
#include "pool/pool_impl.h"
#include "tap.h"

#ifndef BIG_NBLOCKS
#define BIG_NBLOCKS 40000u
#endif

/* ---- pools ---- */

static struct pool *pool_new(struct blk_dev *d, const struct pool_open_opts *o)
{
	struct pool_create_args a = {.pc_name = "tank", .pc_opts = o};
	struct pool *p = NULL;
	VERIFY(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	VERIFY(pool_ds_create(p, "fs", NULL) == 0);
	return p;
}

static struct fs *fs_open_ok(struct pool *p)
{
	struct fs *fs = NULL;
	int rc = pool_fs_open(p, "fs", 77, &fs);
	CHECKF(rc == 0, "pool_fs_open: %s", sh_strerror(rc));
	return fs;
}

/* Exports the pool, closes its device and checks that every request completed exactly once. */
static void pool_done(struct pool *p, struct blk_dev *d)
{
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* How pool_reimport lets go of the pool before importing it again. */
enum reimport_how {
	REIMPORT_EXPORT, /* exported: a last txg, as at a clean stop of the server */
	REIMPORT_CRASH,  /* closed without a last txg: a crash after the replies */
};

/* Destroys *fs, lets go of the pool *p on d as how says, imports d again with o into *p and
 * opens "fs" on it into *fs (fs_open_ok). *p is NULL when the import failed (d stays open) and
 * *fs NULL when the import or the open did; the caller closes what is left. */
static void pool_reimport(struct pool **p, struct fs **fs, struct blk_dev *d,
                          const struct pool_open_opts *o, enum reimport_how how)
{
	fs_destroy(*fs);
	*fs = NULL;
	if (how == REIMPORT_EXPORT)
		CHECK(pool_export(*p) == 0);
	else
		pool_close(*p);
	*p = NULL;
	CHECK(pool_import_devs(&d, 1, o, p) == 0);
	if (*p)
		*fs = fs_open_ok(*p);
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
	CHECK(pool_synced_txg(p) == before); /* COMMIT went through the log, not a txg */
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
	CHECK(st.ps_log_commits > 20 && st.ps_txg_waits == 0);
	fs_destroy(fs);
	fs = fs_open_ok(p);
	if (fs) {
		fs_write_verifier(fs, v2);
		CHECK(memcmp(v1, v2, 8) != 0);
		fs_destroy(fs);
	}
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	pool_done(p, d);
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
	/* A 1 MiB FILE_SYNC write: its data is written as blocks of their own and the log names
	 * them (no txg). */
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
	CHECK(synced1 == synced0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "late", NULL, 0, NULL) == 0);
	CHECK(op_write(fs, &ids[3], 0, "late data", 9, FS_FILE_SYNC, NULL) == 0);
	CHECK(op_rename(fs, &root, "r00", &root, "r00-renamed") == 0);
	CHECK(op_write(fs, &ids[6], 0, big, 100000, FS_UNSTABLE, NULL) == 0);
	CHECK(pool_synced_txg(p) == synced1); /* nothing above went into a txg */

	pool_reimport(&p, &fs, d, &o, REIMPORT_CRASH);
	if (!p)
		goto out_dev;
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

/* Sealing (phase 0 of a sync): a writer keeps rewriting files with UNSTABLE writes while syncs
 * run back to back, so buffers are edited while being sealed and after their seal was attached.
 * Every txg must hold the bytes the buffers had when it began: after a final sync, export and
 * import, each file reads back as the writer's model of it, the pool checks clean, blocks were
 * written sealed, and the sealed blocks' memory is all given back. */
enum { SEAL_FILES = 16, SEAL_FILE_BYTES = 192 * 1024 };
struct seal_writer {
	struct fs *sw_fs;
	struct fs_obj_id sw_ids[SEAL_FILES];
	uint8_t (*sw_model)[SEAL_FILE_BYTES];
	atomic_bool sw_stop;
	unsigned sw_writes;
};

static void *seal_writer_main(void *arg)
{
	struct seal_writer *w = arg;
	uint64_t rng = 12345;
	static uint8_t chunk[40000];
	while (!atomic_load(&w->sw_stop) || w->sw_writes < 400) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		unsigned f = (unsigned)(rng >> 33) % SEAL_FILES;
		uint32_t len = 1 + (uint32_t)(rng >> 20) % sizeof(chunk);
		uint32_t off = (uint32_t)(rng >> 40) % (SEAL_FILE_BYTES - len);
		fill(chunk, len, rng);
		if (op_write(w->sw_fs, &w->sw_ids[f], off, chunk, len, FS_UNSTABLE, NULL) != 0) {
			CHECK(false);
			break;
		}
		memcpy(&w->sw_model[f][off], chunk, len);
		w->sw_writes++;
	}
	return NULL;
}

static void test_sealed_sync(void)
{
	struct blk_dev *d = mem_dev(128 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_record_bytes = 32 * KIB;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	static struct seal_writer w;
	static uint8_t model[SEAL_FILES][SEAL_FILE_BYTES], back[SEAL_FILE_BYTES];
	memset(&w, 0, sizeof(w));
	w.sw_fs = fs;
	w.sw_model = model;
	if (!fs)
		goto out;
	struct fs_obj_id root;
	CHECK(fs_root(fs, &root) == 0);
	for (int i = 0; i < SEAL_FILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "s%02d", i);
		CHECK(op_create(fs, FS_OP_CREATE, &root, name, NULL, 0, &w.sw_ids[i]) == 0);
		fill(model[i], SEAL_FILE_BYTES, (uint64_t)i + 500);
		CHECK(op_write(fs, &w.sw_ids[i], 0, model[i], SEAL_FILE_BYTES, FS_UNSTABLE, NULL) == 0);
	}
	pthread_t t;
	VERIFY(pthread_create(&t, NULL, seal_writer_main, &w) == 0);
	unsigned syncs = 0;
	while (w.sw_writes < 400 || syncs < 20) {
		CHECK(pool_txg_wait_synced(p, 0) == 0);
		syncs++;
	}
	atomic_store(&w.sw_stop, true);
	VERIFY(pthread_join(t, NULL) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct pool_status *st = malloc(sizeof(*st));
	VERIFY(st != NULL);
	pool_status(p, st);
	CHECKF(st->ps_sealed_writes > 0, "%" PRIu64 " sealed writes", st->ps_sealed_writes);
	CHECKF(st->ps_sealed_bytes == 0, "%" PRIu64 " bytes still sealed", st->ps_sealed_bytes);
	CHECK(st->ps_build_max_us > 0);
	printf("# %u syncs under %u writes: %" PRIu64 " blocks written sealed\n", syncs, w.sw_writes,
	       st->ps_sealed_writes);
	free(st);
	pool_reimport(&p, &fs, d, &o, REIMPORT_EXPORT);
	if (!p)
		goto out_dev;
	if (!fs)
		goto out;
	for (int i = 0; i < SEAL_FILES; i++) {
		char name[16];
		struct fs_obj_id id;
		uint32_t got = 0;
		snprintf(name, sizeof(name), "s%02d", i);
		CHECK(op_lookup(fs, &root, name, &id, NULL) == 0);
		CHECKF(op_read(fs, &id, 0, SEAL_FILE_BYTES, back, &got, NULL) == 0 &&
		           got == SEAL_FILE_BYTES && memcmp(back, model[i], SEAL_FILE_BYTES) == 0,
		       "file %s", name);
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
	pool_done(p, d);
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

/* After the reaper is done and two txgs: FSSTAT's free space is back to free0 (within a few tree
 * nodes). */
static void check_space_back(struct pool *p, struct fs *fs, const struct fs_obj_id *root,
                             uint64_t free0)
{
	uint64_t free1 = 0;
	CHECK(fs_reap_wait(fs));
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(op_fsstat_free(fs, root, &free1) == 0);
	CHECKF(free1 + 256 * KIB >= free0, "%" PRIu64 " KiB not given back",
	       (uint64_t)(free0 > free1 ? (free0 - free1) / KIB : 0));
}

/* Creates "big" with a 4 KiB block every 128 KiB, nblocks of them, all written by a txg;
 * *free0_out: FSSTAT's free bytes before. */
static void make_big(struct pool *p, struct fs *fs, const struct fs_obj_id *root, uint32_t nblocks,
                     struct fs_obj_id *f, uint64_t *free0_out)
{
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(op_fsstat_free(fs, root, free0_out) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, root, "big", NULL, 0, f) == 0);
	uint8_t data[4096];
	for (uint32_t i = 0; i < nblocks; i++) {
		fill(data, sizeof(data), i);
		CHECK(op_write(fs, f, (uint64_t)i * 128 * KIB, data, sizeof(data), FS_UNSTABLE,
		               NULL) == 0);
		if (i % 4096 == 4095)
			CHECK(pool_txg_wait_synced(p, 0) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
}

/* The REMOVE of a file of 16,000 extents (about 90 extent leaves, 1.4 MiB of them) whose leaves
 * are not in the cache. The name goes at once and the file waits in the dataset's queue of
 * removed files (zpl_reap.c), whose reaper frees it in steps of ZPL_REAP_STEP_EXTENTS: the
 * REMOVE needs no extent leaf, each step holds only its own few (rule F6), and a scan that
 * misses loads the leaves ahead with --arc-max >= 32 MiB. With a 1 MiB cache, smaller than the
 * leaves together, the REMOVE used to fail with EIO; now it and the freeing succeed whatever
 * the cache. Once freed, and a txg later, FSSTAT shows the space back. */
static void remove_big_cold(uint64_t arc_bytes, uint32_t nblocks, uint64_t max_restarts,
                            bool truncate)
{
	struct blk_dev *d = mem_dev(256 * MIB);
	struct pool_open_opts o = opts_fs(arc_bytes);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	uint64_t free0 = 0, free1 = 0;
	make_big(p, fs, &root, nblocks, &f, &free0);
	CHECK(op_fsstat_free(fs, &root, &free1) == 0);
	CHECKF(free0 - free1 >= (uint64_t)nblocks * 4096, "%" PRIu64 " KiB used",
	       (uint64_t)((free0 - free1) / KIB));
	struct pool_fs_stats st0, st1;
	pool_fs_stats(fs, &st0);
	struct fs_attr a;
	if (truncate) {
		CHECK(op_setattr(fs, &f, 0, -1, NULL) == 0);
		CHECK(op_getattr(fs, &f, &a) == 0 && a.fa_size == 0 && a.fa_used_bytes == 0);
		pool_fs_stats(fs, &st1);
		uint64_t restarts = st1.ps_restarts - st0.ps_restarts;
		printf("# cold truncation of %u extents, %" PRIu64 " KiB cache: %" PRIu64
		       " restarts\n", nblocks, (uint64_t)(arc_bytes / KIB), restarts);
		CHECKF(restarts <= max_restarts, "%" PRIu64 " restarts", restarts);
		check_space_back(p, fs, &root, free0);
		goto done;
	}
	int rc = op_remove(fs, FS_OP_REMOVE, &root, "big");
	pool_fs_stats(fs, &st1);
	uint64_t restarts = st1.ps_restarts - st0.ps_restarts;
	CHECK(rc == 0);
	CHECKF(restarts <= 10, "the REMOVE restarted %" PRIu64 " times", restarts);
	CHECK(op_getattr(fs, &f, &a) == -ESTALE);
	CHECK(op_lookup(fs, &root, "big", NULL, NULL) == -ENOENT);
	CHECK(fs_reap_wait(fs));
	pool_fs_stats(fs, &st1);
	uint64_t steps = st1.ps_reap_steps - st0.ps_reap_steps;
	restarts = st1.ps_restarts - st0.ps_restarts;
	printf("# cold REMOVE of %u extents, %" PRIu64 " KiB cache: freed in %" PRIu64
	       " steps, %" PRIu64 " restarts\n", nblocks, (uint64_t)(arc_bytes / KIB), steps,
	       restarts);
	CHECKF(steps >= nblocks / 1024, "%" PRIu64 " steps", steps);
	CHECKF(restarts <= max_restarts, "%" PRIu64 " restarts", restarts);
	/* `shale pool status` tells what the freeing did. */
	struct pool_status *pst = malloc(sizeof(*pst));
	VERIFY(pst != NULL);
	pool_status(p, pst);
	bool seen = false;
	for (unsigned i = 0; i < pst->ps_nloaded; i++) {
		const struct pool_status_ds *sd = &pst->ps_loaded[i];
		if (strcmp(sd->sd_name, "fs") != 0)
			continue;
		seen = true;
		CHECKF(sd->sd_reap_files == 1 && sd->sd_reap_blocks == nblocks && !sd->sd_freeing,
		       "%" PRIu64 " files, %" PRIu64 " blocks freed", sd->sd_reap_files,
		       sd->sd_reap_blocks);
	}
	CHECK(seen);
	free(pst);
	check_space_back(p, fs, &root, free0);
done:
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	pool_done(p, d);
}

static void test_remove_big_cold(void)
{
	remove_big_cold(2 * MIB, 16000, 200, false);
}

static void test_remove_big_cold_small_cache(void)
{
	remove_big_cold(1 * MIB, 16000, 400, false);
}

/* The truncation to 0 of the same file with the 1 MiB cache: made in steps of
 * ZPL_REAP_STEP_EXTENTS (zpl.h, -SH_EPARTIAL), each holding only its own leaves, where one plan
 * of all of them used to fail with EIO. The reply comes once the file is empty. */
static void test_truncate_big_cold(void)
{
	remove_big_cold(1 * MIB, 16000, 400, true);
}

/* With a cache of 48 MiB (the file's 128 KiB blocks pushed its extent leaves out of it), a scan
 * that misses a leaf also loads the (up to 32) leaves after it, and the freeing restarts about
 * once per 32 leaves instead of once per leaf (about 110 of them). */
static void test_remove_big_cold_ahead(void)
{
	remove_big_cold(48 * MIB, 20000, 30, false);
}

/* Crashes around a large REMOVE: right after its reply (the log alone holds it), and while the
 * file is being freed (some steps in a durable txg, later ones lost). Each import replays or
 * keeps the queue, the reaper resumes at open, and in the end the name is gone, the space back,
 * and pool_check finds nothing wrong. */
static void test_remove_big_crash(void)
{
	struct blk_dev *d = mem_dev(256 * MIB);
	struct pool_open_opts o = opts_fs(4 * MIB);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	uint64_t free0 = 0;
	make_big(p, fs, &root, 6000, &f, &free0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &root, "big") == 0);
	/* A crash after the reply (the REMOVE is in the log only), then one after some steps went
	 * into a durable txg. */
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			CHECK(pool_txg_wait_synced(p, 0) == 0);
		pool_reimport(&p, &fs, d, &o, REIMPORT_CRASH);
		if (!p)
			goto out_dev;
		if (!fs)
			goto out;
		CHECK(fs_root(fs, &root) == 0);
		CHECK(op_lookup(fs, &root, "big", NULL, NULL) == -ENOENT);
	}
	check_space_back(p, fs, &root, free0);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	pool_done(p, d);
	return;
out_dev:
	blk_dev_close(d);
}

/* A full pool: WRITE gets ENOSPC, REMOVE works, and writes succeed at once after it: they wait for
 * the txg that makes the removed files' space reusable (pool_space_wait) rather than fail. */
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
	/* Remove half the files: frees space, which a txg makes reusable. */
	for (int i = 0; i < nfiles; i += 2) {
		char name[32];
		snprintf(name, sizeof(name), "big%03d", i);
		CHECK(op_remove(fs, FS_OP_REMOVE, &root, name) == 0);
	}
	struct fs_obj_id f;
	CHECK(op_create(fs, FS_OP_CREATE, &root, "after", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, data, sizeof(data), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_commit(fs, &f) == 0);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	pool_done(p, d);
}

static int quota_of(void *arg, const struct pool_ds_info *info)
{
	if (strcmp(info->di_name, "fs") == 0)
		*(uint64_t *)arg = info->di_quota_bytes;
	return 0;
}

/* A quota (zfs set quota): FSSTAT's free space is what is left under it; writes stop with EDQUOT
 * near it while the pool has room; a remove still works, and its space comes back under the
 * quota after a txg; the quota is durable; without it, the same writes go through; a quota below
 * what the file system holds is refused. */
static void test_quota(void)
{
	struct blk_dev *d = mem_dev(96 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_compress = POOL_COMPRESS_OFF;
	struct pool *p = pool_new(d, &o);
	const uint64_t quota = 6 * MIB;
	CHECK(pool_ds_set_quota(p, "fs", quota) == 0);
	struct fs *fs = fs_open_ok(p);
	static uint8_t data[256 * 1024];
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	uint64_t free_bytes = 0;
	CHECK(op_fsstat_free(fs, &root, &free_bytes) == 0);
	CHECKF(free_bytes > 0 && free_bytes <= quota, "free %" PRIu64 " under a quota of %" PRIu64,
	       free_bytes, quota);
	int rc = 0;
	uint64_t written = 0;
	int nfiles = 0;
	for (; nfiles < 100 && rc == 0; nfiles++) {
		char name[32];
		snprintf(name, sizeof(name), "q%03d", nfiles);
		rc = op_create(fs, FS_OP_CREATE, &root, name, NULL, 0, &f);
		for (int k = 0; k < 4 && rc == 0; k++) {
			fill(data, sizeof(data), (uint64_t)nfiles * 4 + (uint64_t)k);
			rc = op_write(fs, &f, (uint64_t)k * sizeof(data), data, sizeof(data),
			              FS_UNSTABLE, NULL);
			if (rc == 0)
				written += sizeof(data);
		}
		if (rc == 0)
			rc = op_commit(fs, &f);
	}
	CHECKF(rc == -EDQUOT && written >= quota / 2 && written <= quota,
	       "stopped with %s after %" PRIu64 " bytes under a quota of %" PRIu64, sh_strerror(rc),
	       written, quota);
	CHECK(op_fsstat_free(fs, &root, &free_bytes) == 0);
	CHECKF(free_bytes < 1 * MIB, "free %" PRIu64 " at the quota", free_bytes);
	/* a remove is not refused; after a txg its space is under the quota again */
	CHECK(op_remove(fs, FS_OP_REMOVE, &root, "q000") == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "again", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, data, sizeof(data), FS_FILE_SYNC, NULL) == 0);
	fs_destroy(fs);
	CHECK(pool_export(p) == 0);
	p = NULL;
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p) {
		blk_dev_close(d);
		return;
	}
	uint64_t q = 0;
	CHECK(pool_ds_list(p, quota_of, &q) == 0 && q == quota);
	CHECK(pool_ds_set_quota(p, "fs", 0) == 0);
	fs = fs_open_ok(p);
	if (!fs)
		goto out;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "free", NULL, 0, &f) == 0);
	rc = 0;
	for (int k = 0; k < 32 && rc == 0; k++)
		rc = op_write(fs, &f, (uint64_t)k * sizeof(data), data, sizeof(data), FS_UNSTABLE,
		              NULL);
	CHECKF(rc == 0, "8 MiB more without the quota: %s", sh_strerror(rc));
	/* as zfs: no quota below what the file system holds; one above it is taken */
	CHECK(pool_ds_set_quota(p, "fs", MIB) == -ENOSPC);
	CHECK(pool_ds_list(p, quota_of, &q) == 0 && q == 0);
	CHECK(pool_ds_set_quota(p, "fs", 64 * MIB) == 0);
	CHECK(pool_ds_list(p, quota_of, &q) == 0 && q == 64 * MIB);
	CHECK(pool_ds_set_quota(p, "nosuch", MIB) == -ENOENT);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	pool_done(p, d);
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
	pool_done(p, d);
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
	pool_done(p, d);
}

/* ---- COMMIT through the intent log ---- */

/* What a file must look like after the crash: its data and the attributes a replay restores. */
struct expect_file {
	const char *ef_name;
	struct fs_obj_id ef_id;
	uint8_t *ef_data;
	uint32_t ef_size;
	struct fs_attr ef_attr;
};

/* Applies a write to the model of a file's contents (cap bytes). */
static void model_write(uint8_t *model, uint32_t *size, uint32_t off, const uint8_t *data,
                        uint32_t len)
{
	memcpy(model + off, data, len);
	if (off + len > *size)
		*size = off + len;
}

static void model_truncate(uint8_t *model, uint32_t *size, uint32_t cap, uint32_t new_size)
{
	if (new_size < *size)
		memset(model + new_size, 0, cap - new_size);
	*size = new_size;
}

/* Reads the file back and compares data, size, mode and times with what was saved. */
static void expect_check(struct fs *fs, const struct fs_obj_id *root, const struct expect_file *ef)
{
	struct fs_obj_id id;
	struct fs_attr a = {0};
	int rc = op_lookup(fs, root, ef->ef_name, &id, &a);
	CHECKF(rc == 0, "%s: %s", ef->ef_name, sh_strerror(rc));
	if (rc != 0)
		return;
	CHECKF(id.foi_len == ef->ef_id.foi_len &&
	           memcmp(id.foi_bytes, ef->ef_id.foi_bytes, id.foi_len) == 0,
	       "%s: another object", ef->ef_name);
	CHECKF(a.fa_size == ef->ef_size, "%s: size %" PRIu64 ", committed %u", ef->ef_name,
	       a.fa_size, ef->ef_size);
	CHECKF(a.fa_mode == ef->ef_attr.fa_mode, "%s: mode %o, committed %o", ef->ef_name,
	       a.fa_mode, ef->ef_attr.fa_mode);
	CHECKF(a.fa_nlink == ef->ef_attr.fa_nlink, "%s: nlink %u, committed %u", ef->ef_name,
	       a.fa_nlink, ef->ef_attr.fa_nlink);
	CHECKF(a.fa_mtime.ft_sec == ef->ef_attr.fa_mtime.ft_sec &&
	           a.fa_mtime.ft_nsec == ef->ef_attr.fa_mtime.ft_nsec,
	       "%s: mtime differs from the committed one", ef->ef_name);
	CHECKF(a.fa_ctime.ft_sec == ef->ef_attr.fa_ctime.ft_sec &&
	           a.fa_ctime.ft_nsec == ef->ef_attr.fa_ctime.ft_nsec,
	       "%s: ctime differs from the committed one", ef->ef_name);
	uint8_t *back = malloc(ef->ef_size + 1);
	VERIFY(back != NULL);
	uint32_t got = 0;
	rc = op_read(fs, &id, 0, ef->ef_size, back, &got, NULL);
	CHECKF(rc == 0 && got == ef->ef_size && memcmp(back, ef->ef_data, ef->ef_size) == 0,
	       "%s: the data differs from the committed data", ef->ef_name);
	free(back);
}

/* Small UNSTABLE writes then COMMIT: no txg, one log commit per COMMIT, and after a crash (close
 * without export) and the replay, every committed file has its data and attributes exactly as
 * they were, through truncation, overwrites, more ranges than an object keeps, links, removes,
 * renames over a file with pending writes and a write that clears the set-user-id bit. */
static void test_commit_through_log(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_log_region_bytes = 16 * MIB;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	enum { CAP = 96 * 1024, NEXP = 6 };
	static uint8_t models[NEXP][CAP], data[64 * 1024];
	struct expect_file ef[NEXP];
	memset(ef, 0, sizeof(ef));
	for (int i = 0; i < NEXP; i++)
		ef[i].ef_data = models[i];
	if (!fs)
		goto out;
	struct fs_obj_id root, gone, r1;
	CHECK(fs_root(fs, &root) == 0);
	static const char *names[NEXP] = {"append", "ranges", "trunc", "setuid", "linked", "r2"};
	for (int i = 0; i < NEXP; i++) {
		ef[i].ef_name = names[i];
		CHECK(op_create(fs, FS_OP_CREATE, &root, names[i], NULL, 0, &ef[i].ef_id) == 0);
	}
	CHECK(op_create(fs, FS_OP_CREATE, &root, "gone", NULL, 0, &gone) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "r1", NULL, 0, &r1) == 0);
	struct pool_fs_stats s0, s1;
	pool_fs_stats(fs, &s0);
	uint64_t synced0 = pool_synced_txg(p);
	unsigned commits = 0;

	/* varmail's append flow: 1..16 KiB UNSTABLE appends, COMMIT, twice */
	for (int round = 0; round < 2; round++) {
		for (int k = 0; k < 4; k++) {
			uint32_t len = 1024u * (uint32_t)(1 + (round * 4 + k) * 2);
			fill(data, len, (uint64_t)(round * 10 + k));
			uint32_t off = ef[0].ef_size;
			CHECK(op_write(fs, &ef[0].ef_id, off, data, len, FS_UNSTABLE, NULL) == 0);
			model_write(models[0], &ef[0].ef_size, off, data, len);
		}
		CHECK(op_commit(fs, &ef[0].ef_id) == 0);
		commits++;
	}
	/* 20 ranges with gaps (more than an object keeps: merged across gaps), overwrites */
	for (int k = 0; k < 20; k++) {
		uint32_t off = (uint32_t)(k * 4000 + (k % 3) * 100), len = 700u + (uint32_t)k * 13u;
		fill(data, len, 100u + (uint64_t)k);
		CHECK(op_write(fs, &ef[1].ef_id, off, data, len, FS_UNSTABLE, NULL) == 0);
		model_write(models[1], &ef[1].ef_size, off, data, len);
	}
	fill(data, 3000, 200);
	CHECK(op_write(fs, &ef[1].ef_id, 3500, data, 3000, FS_UNSTABLE, NULL) == 0);
	model_write(models[1], &ef[1].ef_size, 3500, data, 3000);
	/* a logged change after the writes: their records must come first, or the replayed mtime
	 * would be the change's time */
	CHECK(op_setattr(fs, &ef[1].ef_id, -1, 0600, NULL) == 0);
	CHECK(op_commit(fs, &ef[1].ef_id) == 0);
	commits++;
	/* truncation between UNSTABLE writes, then a FILE_SYNC write over pending bytes */
	fill(data, 20000, 300);
	CHECK(op_write(fs, &ef[2].ef_id, 0, data, 20000, FS_UNSTABLE, NULL) == 0);
	model_write(models[2], &ef[2].ef_size, 0, data, 20000);
	CHECK(op_setattr(fs, &ef[2].ef_id, 5000, -1, NULL) == 0);
	model_truncate(models[2], &ef[2].ef_size, CAP, 5000);
	fill(data, 1000, 301);
	CHECK(op_write(fs, &ef[2].ef_id, 8000, data, 1000, FS_UNSTABLE, NULL) == 0);
	model_write(models[2], &ef[2].ef_size, 8000, data, 1000);
	fill(data, 300, 302);
	CHECK(op_write(fs, &ef[2].ef_id, 8500, data, 300, FS_FILE_SYNC, NULL) == 0);
	model_write(models[2], &ef[2].ef_size, 8500, data, 300);
	fill(data, 100, 303);
	CHECK(op_write(fs, &ef[2].ef_id, 100, data, 100, FS_UNSTABLE, NULL) == 0);
	model_write(models[2], &ef[2].ef_size, 100, data, 100);
	CHECK(op_commit(fs, &ef[2].ef_id) == 0);
	commits++;
	/* a write by someone else clears the set-user-id bit; replay must clear it too */
	CHECK(op_setattr(fs, &ef[3].ef_id, -1, 04766, NULL) == 0);
	{
		static const struct fs_cred other = {.fc_uid = 1000, .fc_gid = 1000};
		struct call c;
		fill(data, 5000, 400);
		call_init(&c, fs, FS_OP_WRITE, &ef[3].ef_id);
		c.c_req.fr_cred = &other;
		c.c_req.u.write.wr_data = data;
		c.c_req.u.write.wr_len = 5000;
		c.c_req.u.write.wr_stable = FS_UNSTABLE;
		CHECK(call_run(&c) == 0 && c.c_req.u.write.wr_count == 5000);
		call_fini(&c);
		model_write(models[3], &ef[3].ef_size, 0, data, 5000);
	}
	CHECK(op_commit(fs, &ef[3].ef_id) == 0);
	commits++;
	/* a LINK (logged) between UNSTABLE writes */
	fill(data, 6000, 500);
	CHECK(op_write(fs, &ef[4].ef_id, 0, data, 6000, FS_UNSTABLE, NULL) == 0);
	model_write(models[4], &ef[4].ef_size, 0, data, 6000);
	CHECK(op_link(fs, &ef[4].ef_id, &root, "linked2") == 0);
	fill(data, 2000, 501);
	CHECK(op_write(fs, &ef[4].ef_id, 5000, data, 2000, FS_UNSTABLE, NULL) == 0);
	model_write(models[4], &ef[4].ef_size, 5000, data, 2000);
	CHECK(op_commit(fs, &ef[4].ef_id) == 0);
	commits++;
	/* pending writes of a file removed with its last link, and of one renamed over */
	fill(data, 9000, 600);
	CHECK(op_write(fs, &gone, 0, data, 9000, FS_UNSTABLE, NULL) == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &root, "gone") == 0);
	CHECK(op_commit(fs, &gone) == -ESTALE);
	CHECK(op_write(fs, &r1, 0, data, 9000, FS_UNSTABLE, NULL) == 0);
	fill(data, 7000, 601);
	CHECK(op_write(fs, &ef[5].ef_id, 0, data, 7000, FS_UNSTABLE, NULL) == 0);
	model_write(models[5], &ef[5].ef_size, 0, data, 7000);
	CHECK(op_rename(fs, &root, "r2", &root, "r1") == 0);
	ef[5].ef_name = "r1";
	CHECK(op_commit(fs, &ef[5].ef_id) == 0);
	commits++;
	CHECK(op_commit(fs, &r1) == -ESTALE);
	/* nothing pending: the log alone answers */
	CHECK(op_commit(fs, &ef[5].ef_id) == 0);
	commits++;
	/* a directory has no data to commit (NFS3ERR_ISDIR, as knfsd) */
	CHECK(op_commit(fs, &root) == -EISDIR);

	pool_fs_stats(fs, &s1);
	CHECKF(s1.ps_txg_waits == s0.ps_txg_waits, "%" PRIu64 " txg waits",
	       s1.ps_txg_waits - s0.ps_txg_waits);
	CHECKF(s1.ps_log_commits - s0.ps_log_commits >= commits,
	       "%" PRIu64 " log commits for %u COMMITs and the changes",
	       s1.ps_log_commits - s0.ps_log_commits, commits);
	CHECK(pool_synced_txg(p) == synced0); /* all of it lives in the log alone */
	for (int i = 0; i < NEXP; i++)
		CHECK(op_getattr(fs, &ef[i].ef_id, &ef[i].ef_attr) == 0);
	CHECK(ef[3].ef_attr.fa_mode == 0766);
	CHECK(ef[4].ef_attr.fa_nlink == 2);
	for (int i = 0; i < NEXP; i++)
		expect_check(fs, &root, &ef[i]); /* the model itself is right before the crash */
	/* UNSTABLE writes after the last COMMIT: not committed, either content is allowed */
	CHECK(op_write(fs, &ef[0].ef_id, 0, data, 100, FS_UNSTABLE, NULL) == 0);

	pool_reimport(&p, &fs, d, &o, REIMPORT_CRASH);
	if (!p)
		goto out_dev;
	if (!fs)
		goto out;
	for (int i = 1; i < NEXP; i++)
		expect_check(fs, &root, &ef[i]);
	{
		struct fs_attr a = {0};
		uint32_t got = 0;
		static uint8_t back[CAP];
		CHECK(op_getattr(fs, &ef[0].ef_id, &a) == 0 && a.fa_size == ef[0].ef_size);
		CHECK(op_read(fs, &ef[0].ef_id, 0, ef[0].ef_size, back, &got, NULL) == 0 &&
		      got == ef[0].ef_size &&
		      memcmp(back + 100, models[0] + 100, ef[0].ef_size - 100) == 0);
	}
	CHECK(op_lookup(fs, &root, "gone", NULL, NULL) == -ENOENT);
	CHECK(op_lookup(fs, &root, "r2", NULL, NULL) == -ENOENT);
	CHECK(op_lookup(fs, &root, "linked2", NULL, NULL) == 0);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
out_dev:
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* A file with more pending bytes than the log takes per COMMIT falls back to a txg; so does a
 * file whose write the full table of pending writes could not hold. Once those txgs are durable,
 * COMMITs go through the log again. */
static void test_commit_falls_back(void)
{
	struct blk_dev *d = mem_dev(96 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_log_region_bytes = 40 * MIB; /* each of the 4100 creates below takes a log block */
	o.po_dirty_max_bytes = 256 * MIB; /* no txg unless asked for */
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	static uint8_t data[512 * 1024], back[2 * 1024 * 1024];
	if (!fs)
		goto out;
	struct fs_obj_id root, big, small;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "big", NULL, 0, &big) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "small", NULL, 0, &small) == 0);
	struct pool_fs_stats s0, s1;
	pool_fs_stats(fs, &s0);
	uint64_t synced0 = pool_synced_txg(p);
	for (int k = 0; k < 4; k++) {
		fill(data, sizeof(data), 700u + (uint64_t)k);
		CHECK(op_write(fs, &big, (uint64_t)k * sizeof(data), data, sizeof(data),
		               FS_UNSTABLE, NULL) == 0);
	}
	CHECK(op_commit(fs, &big) == 0);
	pool_fs_stats(fs, &s1);
	CHECK(s1.ps_txg_waits == s0.ps_txg_waits + 1);
	CHECK(pool_synced_txg(p) > synced0);
	/* small again: through the log */
	uint64_t synced1 = pool_synced_txg(p);
	fill(data, 4096, 710);
	CHECK(op_write(fs, &big, 100, data, 4096, FS_UNSTABLE, NULL) == 0);
	CHECK(op_commit(fs, &big) == 0);
	pool_fs_stats(fs, &s1);
	CHECK(s1.ps_txg_waits == s0.ps_txg_waits + 1);
	CHECK(pool_synced_txg(p) == synced1);

	/* A full table of pending writes (4096 objects): the file left out waits for a txg. */
	enum { NF = 4100 };
	struct fs_obj_id dir, last;
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "many", NULL, 0, &dir) == 0);
	int failures = 0;
	uint64_t synced2 = pool_synced_txg(p);
	pool_fs_stats(fs, &s0);
	for (int i = 0; i < NF && failures < 5; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%04d", i);
		if (op_create(fs, FS_OP_CREATE, &dir, name, NULL, 0, &last) != 0 ||
		    op_write(fs, &last, 0, "x", 1, FS_UNSTABLE, NULL) != 0)
			failures++;
	}
	CHECK(failures == 0);
	CHECKF(pool_synced_txg(p) == synced2, "a txg ran while the table filled");
	/* the objects left out scanned the full table once: nothing more is durable since */
	pool_fs_stats(fs, &s1);
	CHECKF(s1.ps_pend_scans - s0.ps_pend_scans <= 1, "%" PRIu64 " scans of the full table",
	       s1.ps_pend_scans - s0.ps_pend_scans);

	pool_fs_stats(fs, &s0);
	CHECK(op_commit(fs, &last) == 0);
	pool_fs_stats(fs, &s1);
	CHECK(s1.ps_txg_waits == s0.ps_txg_waits + 1);
	/* everything pending is durable now: the table empties and the log is used again */
	fill(data, 8192, 720);
	CHECK(op_write(fs, &small, 0, data, 8192, FS_UNSTABLE, NULL) == 0);
	CHECK(op_commit(fs, &small) == 0);
	pool_fs_stats(fs, &s0);
	CHECK(s0.ps_txg_waits == s1.ps_txg_waits);

	pool_reimport(&p, &fs, d, &o, REIMPORT_CRASH);
	if (!p)
		goto out_dev;
	if (!fs)
		goto out;
	uint32_t got = 0;
	CHECK(op_read(fs, &big, 0, sizeof(back), back, &got, NULL) == 0 && got == 4 * sizeof(data));
	for (int k = 0; k < 4; k++) {
		fill(data, sizeof(data), 700u + (uint64_t)k);
		if (k == 0) {
			uint8_t patch[4096];
			fill(patch, sizeof(patch), 710);
			memcpy(data + 100, patch, sizeof(patch));
		}
		CHECKF(memcmp(back + (size_t)k * sizeof(data), data, sizeof(data)) == 0,
		       "big: part %d differs", k);
	}
	fill(data, 8192, 720);
	CHECK(op_read(fs, &small, 0, 8192, back, &got, NULL) == 0 && got == 8192 &&
	      memcmp(back, data, 8192) == 0);
	CHECK(op_read(fs, &last, 0, 10, back, &got, NULL) == 0 && got == 1 && back[0] == 'x');
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
out_dev:
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* Large FILE_SYNC writes go to the log by block pointers: no txg is waited for, the blocks are
 * counted by pool_check while their records are live and freed by the txg that holds the
 * writes, and after a crash replay restores every byte (on one disk, and with a log device,
 * where the data vdev is flushed separately). */
static void indirect_writes(bool log_dev)
{
	struct blk_dev *d = mem_dev(64 * MIB), *ld = log_dev ? mem_dev(16 * MIB) : NULL;
	struct pool_open_opts o = opts_fs(0);
	o.po_dirty_max_bytes = 256 * MIB; /* no txg unless asked for */
	struct pool_create_args a = {.pc_name = "tank", .pc_opts = &o};
	struct pool *p = NULL;
	VERIFY(pool_create_on_devs(&a, &d, 1, &ld, log_dev ? 1 : 0, &p) == 0);
	VERIFY(pool_ds_create(p, "fs", NULL) == 0);
	struct fs *fs = fs_open_ok(p);
	enum { FILE_BYTES = 4 * 1024 * 1024 };
	static uint8_t model[FILE_BYTES], data[1024 * 1024], back[FILE_BYTES];
	memset(model, 0, sizeof(model));
	uint64_t size = 0;
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, &f) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct pool_fs_stats s0, s1;
	pool_fs_stats(fs, &s0);
	uint64_t synced0 = pool_synced_txg(p);
	/* 1 MiB at an unaligned offset */
	enum fs_stable cm = FS_UNSTABLE;
	fill(data, sizeof(data), 900);
	CHECK(op_write(fs, &f, 12388, data, sizeof(data), FS_FILE_SYNC, &cm) == 0 &&
	      cm == FS_FILE_SYNC);
	memcpy(model + 12388, data, sizeof(data));
	size = 12388 + sizeof(data);
	pool_fs_stats(fs, &s1);
	CHECK(s1.ps_txg_waits == s0.ps_txg_waits && s1.ps_txg_waited_reqs == s0.ps_txg_waited_reqs);
	CHECK(s1.ps_log_commits == s0.ps_log_commits + 1);
	CHECK(pool_synced_txg(p) == synced0);
	/* the blocks are live (a record names them) and accounted for */
	CHECK(pool_check(p, report_print, NULL) == 0);
	uint64_t free_live;
	pool_space(p, NULL, &free_live, NULL);
	/* the txg holding the write frees them */
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	uint64_t free_after;
	pool_space(p, NULL, &free_after, NULL);
	CHECKF(free_after + 64 * KIB >= free_live, "free %" PRIu64 " then %" PRIu64, free_live,
	       free_after);
	/* 1 MiB of whole records at a record boundary: the txg adopts the eight blocks instead
	 * of writing the data a second time */
	struct pool_status *ps = mem_alloc(sizeof(*ps));
	pool_status(p, ps);
	uint64_t written0 = ps->ps_tops[0].sv_children[0].sl_stats.vs_write_bytes;
	pool_fs_stats(fs, &s0);
	fill(data, sizeof(data), 904);
	CHECK(op_write(fs, &f, 2 * MIB, data, sizeof(data), FS_FILE_SYNC, NULL) == 0);
	memcpy(model + 2 * MIB, data, sizeof(data));
	size = 3 * MIB;
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	pool_fs_stats(fs, &s1);
	pool_status(p, ps);
	uint64_t written = ps->ps_tops[0].sv_children[0].sl_stats.vs_write_bytes - written0;
	mem_free(ps);
	CHECKF(s1.ps_adopted_blocks == s0.ps_adopted_blocks + 8, "%" PRIu64 " adopted",
	       s1.ps_adopted_blocks - s0.ps_adopted_blocks);
	CHECKF(written < MIB + MIB / 2, "%" PRIu64 " bytes written for 1 MiB", written);
	CHECK(pool_check(p, report_print, NULL) == 0);
	uint32_t got0 = 0;
	CHECK(op_read(fs, &f, 0, (uint32_t)size, back, &got0, NULL) == 0 && got0 == size &&
	      memcmp(back, model, size) == 0);
	/* more that only the log holds: an overlapping 1 MiB, a growing 200 KiB, a small one */
	uint64_t synced1 = pool_synced_txg(p);
	pool_fs_stats(fs, &s0);
	fill(data, sizeof(data), 901);
	CHECK(op_write(fs, &f, 512 * KIB, data, sizeof(data), FS_FILE_SYNC, NULL) == 0);
	memcpy(model + 512 * KIB, data, sizeof(data));
	fill(data, 200 * KIB, 902);
	CHECK(op_write(fs, &f, 3 * MIB + 5, data, 200 * KIB, FS_FILE_SYNC, NULL) == 0);
	memcpy(model + 3 * MIB + 5, data, 200 * KIB);
	size = 3 * MIB + 5 + 200 * KIB;
	fill(data, 100, 903);
	CHECK(op_write(fs, &f, 700 * KIB, data, 100, FS_FILE_SYNC, NULL) == 0);
	memcpy(model + 700 * KIB, data, 100);
	pool_fs_stats(fs, &s1);
	CHECK(s1.ps_txg_waits == s0.ps_txg_waits && s1.ps_log_commits == s0.ps_log_commits + 3);
	CHECK(pool_synced_txg(p) == synced1);
	fs_destroy(fs);
	pool_close(p); /* a crash after the replies */

	p = NULL;
	struct blk_dev *devs[2] = {d, ld};
	CHECK(pool_import_devs(devs, log_dev ? 2 : 1, &o, &p) == 0);
	if (!p)
		goto out_dev;
	CHECK(pool_log_bad_blocks(p) == 0);
	fs = fs_open_ok(p);
	if (!fs)
		goto out;
	struct fs_attr at;
	CHECK(op_getattr(fs, &f, &at) == 0 && at.fa_size == size);
	uint32_t got = 0;
	CHECK(op_read(fs, &f, 0, (uint32_t)size, back, &got, NULL) == 0 && got == size);
	CHECK(memcmp(back, model, size) == 0);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
out_dev:
	blk_dev_close(d);
	if (ld)
		blk_dev_close(ld);
	CHECK(bad_completions == 0);
}

static void test_indirect_writes(void)
{
	indirect_writes(false);
}

static void test_indirect_writes_log_dev(void)
{
	indirect_writes(true);
}

/* A block a replayed record names that fails its checksum: the import reports and counts it,
 * skips that record and goes on; the pool is sound afterwards. */
static void test_indirect_bad_block(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	static uint8_t data[512 * 1024], back[4096];
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, "kept", 4, FS_FILE_SYNC, NULL) == 0);
	fill(data, sizeof(data), 950);
	CHECK(op_write(fs, &f, 4096, data, sizeof(data), FS_FILE_SYNC, NULL) == 0);
	fs_destroy(fs);
	pool_close(p);

	/* the only copy of the data on disk is the indirect block (no txg wrote it) */
	uint8_t *bytes = blk_dev_mem_bytes(d);
	uint8_t *at = memmem(bytes, 64 * MIB, data, 4096);
	CHECK(at != NULL);
	if (at)
		at[100] ^= 0x5a;
	p = NULL;
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out_dev;
	CHECK(pool_log_bad_blocks(p) == 1);
	fs = fs_open_ok(p);
	if (!fs)
		goto out;
	struct fs_attr a;
	uint32_t got = 0;
	CHECK(op_getattr(fs, &f, &a) == 0 && a.fa_size == 4);
	CHECK(op_read(fs, &f, 0, sizeof(back), back, &got, NULL) == 0 && got == 4 &&
	      memcmp(back, "kept", 4) == 0);
	fs_destroy(fs);
	CHECK(pool_check(p, report_print, NULL) == 0);
out:
	CHECK(pool_export(p) == 0);
out_dev:
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

/* Snapshots of a served file system: one taken while the file system is open holds its
 * UNSTABLE data (not committed) as well as its stable changes, and none of the changes made
 * after; opened as a file system of its own (POOL/FS@SNAP, as an export line names it) it reads
 * byte-exact and answers every change with EROFS; it is not destroyed while open; the zpl's
 * blocks add up to every USED and REFER (pool_check). */
static void test_snapshot_served(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	static uint8_t a1[300 * KIB], a2[100 * KIB], b1[40 * KIB], got[300 * KIB];
	fill(a1, sizeof(a1), 1);
	fill(a2, sizeof(a2), 2);
	fill(b1, sizeof(b1), 3);
	struct fs_obj_id root, fa, fb, dir, fc;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "a", NULL, 0, &fa) == 0);
	CHECK(op_write(fs, &fa, 0, a1, sizeof(a1), FS_UNSTABLE, NULL) == 0); /* not committed */
	CHECK(op_create(fs, FS_OP_CREATE, &root, "b", NULL, 0, &fb) == 0);
	CHECK(op_write(fs, &fb, 0, b1, sizeof(b1), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "d", NULL, 0, &dir) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &dir, "c", NULL, 0, &fc) == 0);
	const char *name = "fs@s1";
	char err[200];
	CHECK(pool_snapshot_create(p, &name, 1, err, sizeof(err)) == 0);
	/* after it: an overwrite, a remove, a create */
	CHECK(op_write(fs, &fa, 0, a2, sizeof(a2), FS_UNSTABLE, NULL) == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &root, "b") == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "late", NULL, 0, NULL) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct fs *snap = NULL;
	CHECK(pool_fs_open(p, "fs@s1", 78, &snap) == 0);
	if (snap) {
		struct fs_obj_id sroot, sa, sb, sd;
		struct fs_attr at;
		uint32_t n = 0;
		bool eof = false;
		CHECK(fs_root(snap, &sroot) == 0);
		CHECK(op_lookup(snap, &sroot, "a", &sa, &at) == 0 && at.fa_size == sizeof(a1));
		CHECK(op_read(snap, &sa, 0, sizeof(got), got, &n, &eof) == 0 && n == sizeof(a1) &&
		      memcmp(got, a1, sizeof(a1)) == 0);
		CHECK(op_lookup(snap, &sroot, "b", &sb, NULL) == 0);
		CHECK(op_read(snap, &sb, 0, sizeof(got), got, &n, &eof) == 0 && n == sizeof(b1) &&
		      memcmp(got, b1, sizeof(b1)) == 0);
		CHECK(op_lookup(snap, &sroot, "d", &sd, NULL) == 0);
		CHECK(op_lookup(snap, &sd, "c", NULL, NULL) == 0);
		CHECK(op_lookup(snap, &sroot, "late", NULL, NULL) == -ENOENT);
		char names[8][32];
		unsigned nn = 0;
		CHECK(op_readdir_all(snap, &sroot, true, names, 8, &nn) == 0);
		/* read only */
		CHECK(op_write(snap, &sa, 0, a2, 4096, FS_FILE_SYNC, NULL) == -EROFS);
		CHECK(op_create(snap, FS_OP_CREATE, &sroot, "x", NULL, 0, NULL) == -EROFS);
		CHECK(op_remove(snap, FS_OP_REMOVE, &sroot, "a") == -EROFS);
		CHECK(op_setattr(snap, &sa, 0, -1, NULL) == -EROFS);
		CHECK(op_lookup(snap, &sroot, "x", NULL, NULL) == -ENOENT);
		/* open: not destroyed */
		CHECK(pool_snapshot_destroy(p, name, err, sizeof(err)) == -EBUSY);
		fs_destroy(snap);
	}
	/* the file system itself goes on */
	CHECK(op_read(fs, &fa, 0, sizeof(a2), got, NULL, NULL) == 0 &&
	      memcmp(got, a2, sizeof(a2)) == 0);
	CHECK(op_lookup(fs, &root, "b", NULL, NULL) == -ENOENT);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(pool_snapshot_destroy(p, name, err, sizeof(err)) == 0);
	for (int i = 0; i < 1000 && pool_snap_free_queued(p) > 0; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	fs_destroy(fs);
out:
	pool_done(p, d);
}

static bool names_have(char (*names)[32], unsigned n, const char *name)
{
	for (unsigned i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

struct destroy_arg {
	struct pool *da_pool;
	const char *da_name;
	int da_rc;
	char da_err[200];
	atomic_bool da_done;
};

static void *destroy_main(void *arg)
{
	struct destroy_arg *da = arg;
	da->da_rc = pool_snapshot_destroy(da->da_pool, da->da_name, da->da_err,
	                                  sizeof(da->da_err));
	atomic_store(&da->da_done, true);
	return NULL;
}

/* .zfs/snapshot: every snapshot browsed through the file system itself, read only; the
 * directory's listing and attributes follow the snapshots; a destroyed snapshot's handles are
 * stale; handles stay valid across an export and import. */
static void test_snapdir(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	static uint8_t a[40 * KIB], b[40 * KIB], got[40 * KIB];
	fill(a, sizeof(a), 11);
	fill(b, sizeof(b), 12);
	struct fs_obj_id root, f, dir, zfs, sdir, s1root, sf, sdd, up, s2f;
	struct fs_attr at, at2;
	char names[64][32];
	unsigned n = 0;
	char err[200];
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, a, sizeof(a), FS_UNSTABLE, NULL) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "d", NULL, 0, &dir) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &dir, "g", NULL, 0, NULL) == 0);
	const char *s1 = "fs@s1";
	CHECK(pool_snapshot_create(p, &s1, 1, err, sizeof(err)) == 0);
	CHECK(op_write(fs, &f, 0, b, sizeof(b), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &dir, "g") == 0);

	/* hidden by default: not listed, but found */
	CHECK(op_readdir_all(fs, &root, true, names, 64, &n) == 0 && n == 2 &&
	      !names_have(names, n, ".zfs"));
	CHECK(op_lookup(fs, &root, ".zfs", &zfs, &at) == 0 && at.fa_type == FS_DIR &&
	      at.fa_fsid == 77 && (at.fa_mode & 0222) == 0);
	CHECK(op_lookup(fs, &zfs, "snapshot", &sdir, &at) == 0 && at.fa_type == FS_DIR &&
	      at.fa_size == 1);
	CHECK(op_readdir_all(fs, &zfs, true, names, 64, &n) == 0 && n == 1 &&
	      strcmp(names[0], "snapshot") == 0);
	CHECK(op_readdir_all(fs, &sdir, false, names, 64, &n) == 0 && n == 1 &&
	      strcmp(names[0], "s1") == 0);
	CHECK(op_lookup(fs, &sdir, "s1", &s1root, &at) == 0 && at.fa_type == FS_DIR &&
	      at.fa_fsid != 77 && s1root.foi_len == 24);
	CHECK(op_lookup(fs, &sdir, "nope", NULL, NULL) == -ENOENT);
	/* the snapshot as it was */
	uint32_t got_n = 0;
	CHECK(op_lookup(fs, &s1root, "f", &sf, &at) == 0 && at.fa_size == sizeof(a) &&
	      at.fa_fsid != 77);
	CHECK(op_read(fs, &sf, 0, sizeof(got), got, &got_n, NULL) == 0 && got_n == sizeof(a) &&
	      memcmp(got, a, sizeof(a)) == 0);
	CHECK(op_lookup(fs, &s1root, "d", &sdd, NULL) == 0);
	CHECK(op_lookup(fs, &sdd, "g", NULL, NULL) == 0);
	CHECK(op_readdir_all(fs, &s1root, true, names, 64, &n) == 0 && n == 2 &&
	      names_have(names, n, "f") && names_have(names, n, "d"));
	/* the file system as it is */
	CHECK(op_read(fs, &f, 0, sizeof(got), got, NULL, NULL) == 0 &&
	      memcmp(got, b, sizeof(b)) == 0);
	CHECK(op_lookup(fs, &dir, "g", NULL, NULL) == -ENOENT);
	/* read only, and .zfs cannot be made */
	CHECK(op_write(fs, &sf, 0, b, 4096, FS_FILE_SYNC, NULL) == -EROFS);
	CHECK(op_create(fs, FS_OP_CREATE, &s1root, "x", NULL, 0, NULL) == -EROFS);
	CHECK(op_create(fs, FS_OP_MKDIR, &sdir, "s9", NULL, 0, NULL) == -EROFS);
	CHECK(op_remove(fs, FS_OP_REMOVE, &s1root, "f") == -EROFS);
	CHECK(op_setattr(fs, &sf, 0, -1, NULL) == -EROFS);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, ".zfs", NULL, 0, NULL) == -EEXIST);
	CHECK(op_link(fs, &f, &sdd, "h") == -EXDEV);
	/* up: the snapshot's root, .zfs/snapshot, .zfs, the root */
	CHECK(op_lookup(fs, &s1root, "..", &up, NULL) == 0 && up.foi_len == sdir.foi_len &&
	      memcmp(up.foi_bytes, sdir.foi_bytes, sdir.foi_len) == 0);
	CHECK(op_lookup(fs, &sdir, "..", &up, NULL) == 0 && up.foi_len == zfs.foi_len &&
	      memcmp(up.foi_bytes, zfs.foi_bytes, zfs.foi_len) == 0);
	CHECK(op_lookup(fs, &zfs, "..", &up, &at) == 0 && up.foi_len == root.foi_len &&
	      memcmp(up.foi_bytes, root.foi_bytes, root.foi_len) == 0 && at.fa_type == FS_DIR);
	CHECK(op_lookup(fs, &sdd, "..", &up, NULL) == 0 && up.foi_len == s1root.foi_len &&
	      memcmp(up.foi_bytes, s1root.foi_bytes, s1root.foi_len) == 0);

	/* a new snapshot changes the directory's attributes */
	CHECK(op_getattr(fs, &sdir, &at) == 0);
	const char *s2 = "fs@s2";
	CHECK(pool_snapshot_create(p, &s2, 1, err, sizeof(err)) == 0);
	CHECK(op_getattr(fs, &sdir, &at2) == 0 && at2.fa_size == 2 &&
	      (at2.fa_mtime.ft_sec != at.fa_mtime.ft_sec ||
	       at2.fa_mtime.ft_nsec != at.fa_mtime.ft_nsec));
	CHECK(op_lookup(fs, &sdir, "s2", &up, NULL) == 0);
	CHECK(op_lookup(fs, &up, "f", &s2f, NULL) == 0);
	CHECK(op_read(fs, &s2f, 0, sizeof(got), got, NULL, NULL) == 0 &&
	      memcmp(got, b, sizeof(b)) == 0);

	/* visible: listed once, wherever the pages fall */
	CHECK(pool_ds_set_snapdir(p, "fs", true) == 0);
	CHECK(op_readdir_all(fs, &root, true, names, 64, &n) == 0 && n == 3 &&
	      names_have(names, n, ".zfs"));
	CHECK(op_readdir_all(fs, &root, false, names, 64, &n) == 0 && n == 3);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "more1", NULL, 0, NULL) == 0);
	for (int i = 0; i < 12; i++) {
		char nm[16];
		snprintf(nm, sizeof(nm), "e%02d", i);
		CHECK(op_create(fs, FS_OP_CREATE, &root, nm, NULL, 0, NULL) == 0);
	}
	CHECK(op_readdir_all(fs, &root, true, names, 64, &n) == 0 && n == 16 &&
	      names_have(names, n, ".zfs"));
	CHECK(pool_ds_set_snapdir(p, "fs", false) == 0);
	CHECK(op_readdir_all(fs, &root, false, names, 64, &n) == 0 && n == 15);

	/* more snapshots than are kept open: each browsed, the listing paged */
	for (int i = 3; i <= 40; i++) {
		char nm[32];
		snprintf(nm, sizeof(nm), "fs@s%d", i);
		const char *one = nm;
		CHECK(pool_snapshot_create(p, &one, 1, err, sizeof(err)) == 0);
	}
	unsigned readable = 0;
	for (int i = 2; i <= 40; i++) {
		char nm[16];
		struct fs_obj_id r, ff;
		snprintf(nm, sizeof(nm), "s%d", i);
		if (op_lookup(fs, &sdir, nm, &r, NULL) == 0 && op_lookup(fs, &r, "f", &ff, NULL) == 0 &&
		    op_read(fs, &ff, 0, sizeof(got), got, NULL, NULL) == 0 &&
		    memcmp(got, b, sizeof(b)) == 0)
			readable++;
	}
	CHECK(readable == 39);
	CHECK(op_readdir_all(fs, &sdir, false, names, 64, &n) == 0 && n == 40);

	/* a destroyed snapshot: its handles are stale, its name gone, at once; the destroy waits
	 * for a READ buffer a reader holds (here let go of 200 ms later) */
	struct call held;
	call_init(&held, fs, FS_OP_READ, &sf);
	held.c_req.u.read.rd_count = 4096;
	CHECK(call_run(&held) == 0 && held.c_req.u.read.rd_buf.fb_len == 4096);
	struct destroy_arg da = {.da_pool = p, .da_name = s1};
	pthread_t destroyer;
	CHECK(pthread_create(&destroyer, NULL, destroy_main, &da) == 0);
	usleep(200000);
	CHECK(!atomic_load(&da.da_done)); /* waiting for the buffer */
	held.c_req.u.read.rd_buf.fb_release(held.c_req.u.read.rd_buf.fb_release_arg);
	call_fini(&held);
	pthread_join(destroyer, NULL);
	CHECKF(da.da_rc == 0, "%s", da.da_err);
	CHECK(op_getattr(fs, &sf, &at) == -ESTALE);
	CHECK(op_getattr(fs, &s1root, &at) == -ESTALE);
	CHECK(op_lookup(fs, &sdir, "s1", NULL, NULL) == -ENOENT);
	CHECK(op_readdir_all(fs, &sdir, false, names, 64, &n) == 0 && n == 39 &&
	      !names_have(names, n, "s1"));
	/* a bad handle */
	struct fs_obj_id bad = s2f;
	bad.foi_len = 23;
	CHECK(op_getattr(fs, &bad, &at) == -SH_EBADHANDLE);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);

	/* across an export and import: the same handles */
	pool_reimport(&p, &fs, d, &o, REIMPORT_EXPORT);
	if (!p)
		goto out_dev;
	if (!fs)
		goto out;
	CHECK(op_read(fs, &s2f, 0, sizeof(got), got, NULL, NULL) == 0 &&
	      memcmp(got, b, sizeof(b)) == 0);
	CHECK(op_getattr(fs, &sf, &at) == -ESTALE);
	fs_destroy(fs);
out:
	pool_done(p, d);
	return;
out_dev:
	blk_dev_close(d);
}

/* A thread making and reading files while a rollback happens under it. */
struct churn_arg {
	struct fs *ca_fs;
	atomic_bool ca_stop;
	unsigned ca_ops, ca_unexpected;
};

static void *churn_main(void *arg)
{
	struct churn_arg *ca = arg;
	struct fs_obj_id root, f;
	uint8_t data[8192], got[8192];
	if (fs_root(ca->ca_fs, &root) != 0)
		return NULL;
	for (unsigned i = 0; !atomic_load(&ca->ca_stop); i++) {
		char nm[32];
		snprintf(nm, sizeof(nm), "churn%u", i);
		fill(data, sizeof(data), 1000 + i);
		int rc = op_create(ca->ca_fs, FS_OP_CREATE, &root, nm, NULL, 0, &f);
		if (rc == 0) {
			/* the rollback may come between any two calls: the file is then gone */
			rc = op_write(ca->ca_fs, &f, 0, data, sizeof(data),
			              i % 2 ? FS_FILE_SYNC : FS_UNSTABLE, NULL);
			uint32_t n = 0;
			if (rc == 0)
				rc = op_read(ca->ca_fs, &f, 0, sizeof(got), got, &n, NULL);
			if (rc == 0 && (n != sizeof(data) || memcmp(got, data, n) != 0))
				ca->ca_unexpected++;
		}
		if (rc != 0 && rc != -ESTALE)
			ca->ca_unexpected++;
		ca->ca_ops++;
	}
	return NULL;
}

/* A rollback of a file system being served: the open file system follows it at once, handles of
 * what the snapshot holds stay valid, those of later objects are stale and are never handed out
 * again, later snapshots browsed through .zfs go (-r), and a crash after the rollback replays
 * only what came after it. The write verifier stays across the rollback, as knfsd's does over
 * ZFS (clients do not send the dropped writes again); the file system opened after the crash has
 * a new one (a restart: clients send their uncommitted writes again). */
static void test_rollback_served(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	o.po_log_region_bytes = 16 * MIB;
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	static uint8_t a[40 * KIB], b[96 * KIB], c[12 * KIB], got[96 * KIB];
	fill(a, sizeof(a), 21);
	fill(b, sizeof(b), 22);
	fill(c, sizeof(c), 23);
	struct fs_obj_id root, keep, dir, late, sdir, s2root, s2late, fresh, fdir;
	struct fs_attr at;
	char names[64][32];
	unsigned n = 0;
	uint32_t got_n = 0;
	char err[200];
	uint8_t verf0[8], verf[8];
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "keep", NULL, 0, &keep) == 0);
	CHECK(op_write(fs, &keep, 0, a, sizeof(a), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "d", NULL, 0, &dir) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &dir, "g", NULL, 0, NULL) == 0);
	const char *s1 = "fs@s1", *s2 = "fs@s2";
	CHECK(pool_snapshot_create(p, &s1, 1, err, sizeof(err)) == 0);
	/* after it: a large stable write (its own blocks, logged), an UNSTABLE one, a create, a
	 * remove; a second snapshot, browsed through .zfs */
	CHECK(op_write(fs, &keep, 0, b, sizeof(b), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_write(fs, &keep, 4096, c, sizeof(c), FS_UNSTABLE, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "late", NULL, 0, &late) == 0);
	CHECK(op_write(fs, &late, 0, c, sizeof(c), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &dir, "g") == 0);
	CHECK(pool_snapshot_create(p, &s2, 1, err, sizeof(err)) == 0);
	CHECK(op_lookup(fs, &root, ".zfs", &sdir, NULL) == 0);
	CHECK(op_lookup(fs, &sdir, "snapshot", &sdir, NULL) == 0);
	CHECK(op_lookup(fs, &sdir, "s2", &s2root, NULL) == 0);
	CHECK(op_lookup(fs, &s2root, "late", &s2late, NULL) == 0);
	CHECK(op_write(fs, &late, 0, a, sizeof(a), FS_UNSTABLE, NULL) == 0);
	fs_write_verifier(fs, verf0);

	/* refused without -r, naming the later snapshot; then made while served and browsed */
	CHECK(pool_fs_rollback(p, s1, false, err, sizeof(err)) == -ENOTEMPTY &&
	      strstr(err, "fs@s2") != NULL);
	struct churn_arg ca = {.ca_fs = fs};
	pthread_t churner;
	CHECK(pthread_create(&churner, NULL, churn_main, &ca) == 0);
	usleep(50000);
	int rc = pool_fs_rollback(p, s1, true, err, sizeof(err));
	CHECKF(rc == 0, "%s", err);
	/* the write verifier stays: a new one would have clients send the dropped writes again */
	fs_write_verifier(fs, verf);
	CHECK(memcmp(verf, verf0, sizeof(verf)) == 0);
	usleep(50000);
	atomic_store(&ca.ca_stop, true);
	pthread_join(churner, NULL);
	CHECKF(ca.ca_ops > 0 && ca.ca_unexpected == 0, "%u ops, %u unexpected", ca.ca_ops,
	       ca.ca_unexpected);

	/* the snapshot's state, through the handles clients held */
	CHECK(op_getattr(fs, &keep, &at) == 0 && at.fa_size == sizeof(a));
	/* and once a request opened the zpl on the rolled-back tree */
	fs_write_verifier(fs, verf);
	CHECK(memcmp(verf, verf0, sizeof(verf)) == 0);
	CHECK(op_read(fs, &keep, 0, sizeof(got), got, &got_n, NULL) == 0 && got_n == sizeof(a) &&
	      memcmp(got, a, sizeof(a)) == 0);
	CHECK(op_lookup(fs, &dir, "g", NULL, NULL) == 0);
	CHECK(op_getattr(fs, &late, &at) == -ESTALE);
	CHECK(op_lookup(fs, &root, "late", NULL, NULL) == -ENOENT);
	CHECK(op_getattr(fs, &s2late, &at) == -ESTALE);
	CHECK(op_getattr(fs, &s2root, &at) == -ESTALE);
	CHECK(op_readdir_all(fs, &sdir, false, names, 64, &n) == 0 && n == 1 &&
	      strcmp(names[0], "s1") == 0);
	/* new objects never take a dropped one's handle */
	CHECK(op_create(fs, FS_OP_CREATE, &root, "fresh", NULL, 0, &fresh) == 0);
	CHECK(fresh.foi_len != late.foi_len ||
	      memcmp(fresh.foi_bytes, late.foi_bytes, late.foi_len) != 0);
	CHECK(op_getattr(fs, &late, &at) == -ESTALE);
	CHECK(op_write(fs, &fresh, 0, c, sizeof(c), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "fdir", NULL, 0, &fdir) == 0);
	CHECK(op_write(fs, &keep, 0, c, 4096, FS_FILE_SYNC, NULL) == 0);

	pool_reimport(&p, &fs, d, &o, REIMPORT_CRASH);
	if (!p)
		goto out_dev;
	if (!fs)
		goto out;
	/* a restart: a new verifier, so clients send their uncommitted writes again */
	fs_write_verifier(fs, verf);
	CHECK(memcmp(verf, verf0, sizeof(verf)) != 0);
	CHECK(op_read(fs, &fresh, 0, sizeof(got), got, &got_n, NULL) == 0 && got_n == sizeof(c) &&
	      memcmp(got, c, sizeof(c)) == 0);
	CHECK(op_getattr(fs, &fdir, &at) == 0 && at.fa_type == FS_DIR);
	CHECK(op_read(fs, &keep, 0, sizeof(got), got, &got_n, NULL) == 0 && got_n == sizeof(a) &&
	      memcmp(got, c, 4096) == 0 && memcmp(got + 4096, a + 4096, sizeof(a) - 4096) == 0);
	CHECK(op_getattr(fs, &late, &at) == -ESTALE);
	CHECK(op_lookup(fs, &root, "late", NULL, NULL) == -ENOENT);
	CHECK(op_lookup(fs, &dir, "g", NULL, NULL) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	for (int i = 0; i < 1000 && (pool_snap_free_queued(p) > 0 || pool_destroy_queued(p) > 0); i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	fs_destroy(fs);
out:
	pool_done(p, d);
	return;
out_dev:
	blk_dev_close(d);
}

/* A rollback of a served file system to a snapshot taken before anything formatted it: the open
 * file system formats it again at its next request, with the same root, and goes on. */
static void test_rollback_served_unformatted(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	char err[200];
	CHECK(pool_ds_create(p, "blank", NULL) == 0);
	const char *s0 = "blank@s0";
	CHECK(pool_snapshot_create(p, &s0, 1, err, sizeof(err)) == 0);
	struct fs *fs = NULL;
	CHECK(pool_fs_open(p, "blank", 78, &fs) == 0);
	if (!fs)
		goto out;
	struct fs_obj_id root, f, root2;
	struct fs_attr at;
	char names[4][32];
	unsigned n = 9;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, "data", 4, FS_FILE_SYNC, NULL) == 0);
	CHECKF(pool_fs_rollback(p, s0, false, err, sizeof(err)) == 0, "%s", err);
	CHECK(op_getattr(fs, &root, &at) == 0 && at.fa_type == FS_DIR);
	CHECK(op_readdir_all(fs, &root, false, names, 4, &n) == 0 && n == 0);
	CHECK(op_getattr(fs, &f, &at) == -ESTALE);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "g", NULL, 0, NULL) == 0);
	fs_destroy(fs);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	fs = NULL;
	CHECK(pool_fs_open(p, "blank", 78, &fs) == 0);
	if (fs) {
		CHECK(fs_root(fs, &root2) == 0 && root2.foi_len == root.foi_len &&
		      memcmp(root2.foi_bytes, root.foi_bytes, root.foi_len) == 0);
		CHECK(op_lookup(fs, &root2, "g", NULL, NULL) == 0);
		fs_destroy(fs);
	}
out:
	pool_done(p, d);
}

/* What one power-cut image of test_rollback_served_crash must hold. */
struct rbc_model {
	uint64_t rm_rollback_ack;      /* pool_fs_rollback returned */
	uint64_t rm_post_ack[8];       /* each post%d file's FILE_SYNC write acknowledged */
	uint8_t rm_keep_before[8192];  /* keep's first bytes before the rollback and at s1 */
	uint8_t rm_keep_at_s1[8192];
	uint8_t rm_post[8][4096];
};

/* Imports the image of leaf at cut g and checks it (clean, and as rm says): the rollback either
 * not there (only before its acknowledgement) or whole, and every post file acknowledged before
 * the cut there with its bytes. *rolled counts the images that show it rolled back. */
static bool rbc_verify(struct blk_dev *leaf, uint64_t g, enum blk_fault_mode mode, uint64_t seed,
                       const struct rbc_model *rm, unsigned *rolled)
{
	struct pool_open_opts o = opts_fs(0);
	struct blk_dev *img = NULL;
	struct pool *p = NULL;
	bool ok = crash_cut_import(&leaf, 1, g, mode, seed, &o, &img, &p);
	struct fs *fs = NULL;
	if (ok && pool_fs_open(p, "fs", 77, &fs) != 0)
		ok = false;
	if (ok) {
		static uint8_t got[8192];
		struct fs_obj_id root, keep, x;
		uint32_t n = 0;
		bool late = false;
		ok = fs_root(fs, &root) == 0 && op_lookup(fs, &root, "keep", &keep, NULL) == 0 &&
		     op_read(fs, &keep, 0, sizeof(got), got, &n, NULL) == 0 && n == sizeof(got);
		late = ok && op_lookup(fs, &root, "late", NULL, NULL) == 0;
		if (ok && late) {
			/* not rolled back: only a cut before the command returned may show that */
			ok = g < rm->rm_rollback_ack && memcmp(got, rm->rm_keep_before, n) == 0;
		} else if (ok) {
			(*rolled)++;
			ok = memcmp(got, rm->rm_keep_at_s1, n) == 0;
			for (unsigned i = 0; ok && i < 8; i++) {
				char nm[16];
				snprintf(nm, sizeof(nm), "post%u", i);
				int rc = op_lookup(fs, &root, nm, &x, NULL);
				if (rm->rm_post_ack[i] > g)
					continue; /* not acknowledged before the cut: either way */
				ok = rc == 0 && op_read(fs, &x, 0, 4096, got, &n, NULL) == 0 && n == 4096 &&
				     memcmp(got, rm->rm_post[i], 4096) == 0;
			}
		}
		if (!ok)
			printf("#   cut %" PRIu64 " mode %d: %s\n", g, mode,
			       late ? "the rollback is missing after it returned"
			            : "an acknowledged change is missing or wrong");
	}
	if (fs)
		fs_destroy(fs);
	if (p)
		pool_close(p);
	blk_dev_close(img);
	return ok;
}

/* Power cuts around a rollback of a served file system (a fault-injecting leaf): every image
 * imports and checks clean; one cut after the command returned has the rollback, and every
 * stable change acknowledged after it (new files made through the same open file system) is
 * there. */
static void test_rollback_served_crash(void)
{
	struct blk_dev *leaf = NULL;
	VERIFY(blk_dev_create_fault(96 * MIB, &leaf) == 0);
	struct pool_open_opts o = opts_fs(0);
	o.po_log_region_bytes = 16 * MIB;
	struct pool *p = pool_new(leaf, &o);
	struct fs *fs = fs_open_ok(p);
	static struct rbc_model rm;
	if (!fs)
		goto out;
	struct fs_obj_id root, keep, late, post;
	char err[200];
	fill(rm.rm_keep_at_s1, sizeof(rm.rm_keep_at_s1), 41);
	fill(rm.rm_keep_before, sizeof(rm.rm_keep_before), 42);
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "keep", NULL, 0, &keep) == 0);
	CHECK(op_write(fs, &keep, 0, rm.rm_keep_at_s1, sizeof(rm.rm_keep_at_s1), FS_FILE_SYNC,
	               NULL) == 0);
	const char *s1 = "fs@s1";
	CHECK(pool_snapshot_create(p, &s1, 1, err, sizeof(err)) == 0);
	CHECK(op_write(fs, &keep, 0, rm.rm_keep_before, sizeof(rm.rm_keep_before), FS_FILE_SYNC,
	               NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "late", NULL, 0, &late) == 0);
	CHECK(op_write(fs, &late, 0, rm.rm_keep_before, 4096, FS_FILE_SYNC, NULL) == 0);
	uint64_t start = blk_fault_global_seq();
	CHECKF(pool_fs_rollback(p, s1, false, err, sizeof(err)) == 0, "%s", err);
	rm.rm_rollback_ack = blk_fault_global_seq();
	for (unsigned i = 0; i < 8; i++) {
		char nm[16];
		snprintf(nm, sizeof(nm), "post%u", i);
		fill(rm.rm_post[i], 4096, 100 + i);
		rm.rm_post_ack[i] = ACK_NONE;
		CHECK(op_create(fs, FS_OP_CREATE, &root, nm, NULL, 0, &post) == 0);
		CHECK(op_write_ack(fs, &post, 0, rm.rm_post[i], 4096, FS_FILE_SYNC, NULL,
		                   &rm.rm_post_ack[i]) == 0);
		if (i == 3)
			CHECK(pool_txg_wait_synced(p, 0) == 0); /* half of them in a txg */
	}
	fs_destroy(fs);
	pool_close(p); /* the crash */
	p = NULL;
	struct crash_plan plan;
	crash_plan_init(&plan, &leaf, 1, start, 24, 0x7b11);
	unsigned images = 0, failed = 0, rolled = 0;
	for (unsigned c = 0; c < plan.cp_ncuts && failed <= 4; c++) {
		uint64_t g = crash_plan_cut(&plan, c);
		for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER; mode++) {
			images++;
			failed += !rbc_verify(leaf, g, (enum blk_fault_mode)mode, c * 5 + (uint64_t)mode,
			                      &rm, &rolled);
		}
	}
	CHECKF(failed == 0, "%u of %u images failed", failed, images);
	CHECKF(rolled > 0 && rolled < images, "%u of %u images rolled back", rolled, images);
	printf("#   %u cut points (%zu flush events), %u images, %u of them rolled back\n",
	       plan.cp_ncuts, plan.cp_nflush, images, rolled);
	crash_plan_fini(&plan);
out:
	if (p)
		pool_close(p);
	blk_dev_close(leaf);
}

/* A destroy of a snapshot whose READ buffer a reader holds past the wait (PFS_SD_RELEASE_WAIT_S,
 * 10 s): refused with EBUSY, saying why, the snapshot whole and readable; once the buffer is let
 * go, the destroy goes through. */
static void test_snapdir_busy(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	static uint8_t a[40 * KIB], got[40 * KIB];
	fill(a, sizeof(a), 31);
	struct fs_obj_id root, f, sdir, sroot, sf;
	char err[200];
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, a, sizeof(a), FS_FILE_SYNC, NULL) == 0);
	const char *s1 = "fs@s1";
	CHECK(pool_snapshot_create(p, &s1, 1, err, sizeof(err)) == 0);
	CHECK(op_lookup(fs, &root, ".zfs", &sdir, NULL) == 0);
	CHECK(op_lookup(fs, &sdir, "snapshot", &sdir, NULL) == 0);
	CHECK(op_lookup(fs, &sdir, "s1", &sroot, NULL) == 0);
	CHECK(op_lookup(fs, &sroot, "f", &sf, NULL) == 0);
	struct call held;
	call_init(&held, fs, FS_OP_READ, &sf);
	held.c_req.u.read.rd_count = 4096;
	CHECK(call_run(&held) == 0 && held.c_req.u.read.rd_buf.fb_len == 4096);
	uint64_t t0 = clock_monotonic_ns();
	int rc = pool_snapshot_destroy(p, s1, err, sizeof(err));
	uint64_t waited_ms = (clock_monotonic_ns() - t0) / 1000000u;
	CHECKF(rc == -EBUSY && strstr(err, "being read") != NULL && waited_ms >= 9000 &&
	       waited_ms < 30000,
	       "%d after %" PRIu64 " ms: %s", rc, waited_ms, err);
	/* nothing changed: listed, readable through the handles held */
	char names[4][32];
	unsigned n = 0;
	uint32_t got_n = 0;
	CHECK(op_readdir_all(fs, &sdir, false, names, 4, &n) == 0 && n == 1 &&
	      strcmp(names[0], "s1") == 0);
	CHECK(op_read(fs, &sf, 0, sizeof(got), got, &got_n, NULL) == 0 && got_n == sizeof(a) &&
	      memcmp(got, a, sizeof(a)) == 0);
	held.c_req.u.read.rd_buf.fb_release(held.c_req.u.read.rd_buf.fb_release_arg);
	call_fini(&held);
	CHECKF(pool_snapshot_destroy(p, s1, err, sizeof(err)) == 0, "%s", err);
	struct fs_attr at;
	CHECK(op_getattr(fs, &sf, &at) == -ESTALE);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	fs_destroy(fs);
out:
	pool_done(p, d);
}

/* .zfs/snapshot with 2,000 snapshots: READDIR pages through them (seven entries a reply) with
 * cookies that are unique and in order, every page resumed where the last stopped, none missing
 * or twice; one destroyed leaves the listing. */
static void test_snapdir_many(void)
{
	enum { SNAPS = 2000 };
	struct blk_dev *d = mem_dev(128 * MIB);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(d, &o);
	struct fs *fs = fs_open_ok(p);
	if (!fs)
		goto out;
	char err[200];
	struct fs_obj_id root, zfs, sdir;
	CHECK(fs_root(fs, &root) == 0);
	for (int i = 0; i < SNAPS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "fs@n%04d", i);
		const char *one = name;
		if (pool_snapshot_create(p, &one, 1, err, sizeof(err)) != 0) {
			CHECKF(false, "%s: %s", name, err);
			break;
		}
	}
	CHECK(op_lookup(fs, &root, ".zfs", &zfs, NULL) == 0);
	CHECK(op_lookup(fs, &zfs, "snapshot", &sdir, NULL) == 0);
	static char names[SNAPS + 8][32];
	unsigned n = 0;
	CHECK(op_readdir_all(fs, &sdir, false, names, SNAPS + 8, &n) == 0 && n == SNAPS);
	bool in_order = true;
	for (unsigned i = 0; i < n && i < SNAPS; i++) {
		char want[32];
		snprintf(want, sizeof(want), "n%04u", i);
		in_order = in_order && strcmp(names[i], want) == 0;
	}
	CHECK(in_order);
	/* a destroyed one leaves the listing, the rest still there once each */
	CHECK(pool_snapshot_destroy(p, "fs@n1000", err, sizeof(err)) == 0);
	CHECK(op_readdir_all(fs, &sdir, false, names, SNAPS + 8, &n) == 0 && n == SNAPS - 1);
	CHECK(op_lookup(fs, &sdir, "n1999", NULL, NULL) == 0);
	fs_destroy(fs);
out:
	pool_done(p, d);
}

int main(void)
{
	TAP_RUN(test_every_op);
	TAP_RUN(test_durability);
	TAP_RUN(test_misses);
	TAP_RUN(test_misses_tiny_cache);
	TAP_RUN(test_remove_big_cold);
	TAP_RUN(test_remove_big_cold_small_cache);
	TAP_RUN(test_remove_big_cold_ahead);
	TAP_RUN(test_remove_big_crash);
	TAP_RUN(test_truncate_big_cold);
	TAP_RUN(test_enospc);
	TAP_RUN(test_quota);
	TAP_RUN(test_throttle);
	TAP_RUN(test_concurrency);
	TAP_RUN(test_commit_through_log);
	TAP_RUN(test_commit_falls_back);
	TAP_RUN(test_indirect_writes);
	TAP_RUN(test_indirect_writes_log_dev);
	TAP_RUN(test_indirect_bad_block);
	TAP_RUN(test_sealed_sync);
	TAP_RUN(test_snapshot_served);
	TAP_RUN(test_snapdir);
	TAP_RUN(test_snapdir_busy);
	TAP_RUN(test_snapdir_many);
	TAP_RUN(test_rollback_served);
	TAP_RUN(test_rollback_served_unformatted);
	TAP_RUN(test_rollback_served_crash);
	return tap_finish();
}
