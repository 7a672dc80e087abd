/* test_pool.c: unit tests of the pool (src/pool/pool*): create, export and import on memory leaves
 * and on files, datasets, thousands of logged key-value puts over many txgs with a key-value owner
 * (pool_kv.h), log replay after a close without export, dataset destroy returning its space (at
 * once, and in steps across a crash), mirror self-healing and check repairs, the record of the
 * mirror children that missed writes, attaching and detaching leaves (resilver, replace), a lost
 * log device replaced, a vdev added, a dataset's compression changed and a dataset renamed, an
 * unmirrored bad block, a full pool, throttling and the txg history, the txg started at a quarter
 * of the dirty limit, a small cache, the memory bound of the ARC's limit, degraded and refused
 * imports, suspension, properties and the status report. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pool_kv.h"
#include "pool/pool.h"
#include "tap.h"

#define MIB (1024ull * 1024ull)

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The value of key k at version v: its length depends on both (some long enough for a data
 * block), its bytes on both. */
static uint32_t val_len(unsigned k, unsigned v)
{
	uint64_t s = (uint64_t)k * 1000003u + v;
	uint64_t r = rng_next(&s);
	return (r % 8 == 0) ? (uint32_t)(KV_INLINE_MAX + 1 + r % 20000) : (uint32_t)(r % 300);
}

static void val_fill(uint8_t *buf, unsigned k, unsigned v, uint32_t len)
{
	uint64_t s = ((uint64_t)k << 32) ^ v ^ 0x5eed;
	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t r = rng_next(&s);
		memcpy(buf + i, &r, SH_MIN(8u, len - i));
	}
}

static uint32_t key_make(char *key, unsigned k)
{
	return (uint32_t)snprintf(key, KV_KEY_MAX, "key-%06u", k);
}

static void report_print(void *arg, const char *line)
{
	(void)arg;
	printf("#   check: %s\n", line);
}

static int64_t check_pool(struct pool *p)
{
	int64_t n = pool_check(p, report_print, NULL);
	return n;
}

static struct blk_dev *mem_dev(uint64_t bytes)
{
	struct blk_dev *d = NULL;
	VERIFY(blk_dev_create_mem(bytes, &d) == 0);
	return d;
}

static struct pool_open_opts opts_kv(void)
{
	struct pool_open_opts o = {0};
	o.po_attach = kv_attach;
	o.po_txg_interval_ms = 60000; /* tests sync when they say so */
	return o;
}

/* A new pool NAME on the one device d, with a dataset "kv" open as *kv_out. Returns the pool, or
 * NULL (the failure counted) where it could not be created; *kv_out is NULL where the dataset
 * could not be created or opened. */
static struct pool *new_kv_pool(const char *name, struct blk_dev *d, struct pool_open_opts *o,
                                struct kv **kv_out)
{
	struct pool_create_args a = {.pc_name = name, .pc_opts = o};
	struct pool *p = NULL;
	*kv_out = NULL;
	CHECK(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	if (!p)
		return NULL;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	CHECK(kv_open(p, "kv", kv_out) == 0);
	return p;
}

/* A model of a dataset's contents: key k -> version (0 = absent). */
struct model {
	unsigned m_nkeys;
	unsigned *m_ver;
};

static void model_init(struct model *m, unsigned nkeys)
{
	m->m_nkeys = nkeys;
	m->m_ver = calloc(nkeys, sizeof(unsigned));
	VERIFY(m->m_ver != NULL);
}

static void model_fini(struct model *m)
{
	free(m->m_ver);
}

static int put_kv(struct kv *kv, unsigned k, unsigned v, bool logged, uint64_t *lsn)
{
	static uint8_t buf[KV_VAL_MAX];
	char key[KV_KEY_MAX];
	uint32_t klen = key_make(key, k);
	uint32_t len = val_len(k, v);
	val_fill(buf, k, v, len);
	uint64_t l = 0;
	int rc =
	    kv_exec(kv, KV_OP_PUT, key, klen, buf, len, NULL, 0, NULL, logged ? &l : NULL, NULL);
	if (lsn)
		*lsn = l;
	return rc;
}

static int del_kv(struct kv *kv, unsigned k, bool logged, uint64_t *lsn)
{
	char key[KV_KEY_MAX];
	uint32_t klen = key_make(key, k);
	uint64_t l = 0;
	int rc =
	    kv_exec(kv, KV_OP_DEL, key, klen, NULL, 0, NULL, 0, NULL, logged ? &l : NULL, NULL);
	if (lsn)
		*lsn = l;
	return rc;
}

/* 0 when key k holds version v (v 0: absent); else a description of the difference. */
static int verify_key(struct kv *kv, unsigned k, unsigned v, struct kv_stats *ks)
{
	static uint8_t got[KV_VAL_MAX], want[KV_VAL_MAX];
	char key[KV_KEY_MAX];
	uint32_t klen = key_make(key, k);
	uint32_t len = 0;
	int rc = kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, got, sizeof(got), &len, NULL, ks);
	if (v == 0)
		return rc == -ENOENT ? 0 : (rc == 0 ? 1 : rc);
	if (rc != 0)
		return rc;
	uint32_t wlen = val_len(k, v);
	val_fill(want, k, v, wlen);
	return len == wlen && memcmp(got, want, len) == 0 ? 0 : 2;
}

static unsigned verify_model(struct kv *kv, const struct model *m, struct kv_stats *ks)
{
	unsigned bad = 0;
	for (unsigned k = 0; k < m->m_nkeys; k++) {
		int r = verify_key(kv, k, m->m_ver[k], ks);
		if (r != 0 && bad++ < 5)
			printf("#   key %u: want version %u: %d\n", k, m->m_ver[k], r);
	}
	return bad;
}

/* A random workload: puts, overwrites and deletes of nkeys keys, nops operations, a sync every
 * sync_every operations; every operation logged and committed when logged is set. */
static unsigned workload(struct kv *kv, struct model *m, unsigned nops, unsigned sync_every,
                         bool logged, uint64_t seed)
{
	unsigned failures = 0;
	uint64_t last_lsn = 0;
	for (unsigned i = 0; i < nops; i++) {
		unsigned k = (unsigned)(rng_next(&seed) % m->m_nkeys);
		uint64_t lsn = 0;
		int rc;
		if (m->m_ver[k] != 0 && rng_next(&seed) % 4 == 0) {
			rc = del_kv(kv, k, logged, &lsn);
			if (rc == 0)
				m->m_ver[k] = 0;
		} else {
			unsigned v = (unsigned)(rng_next(&seed) % 1000000) + 1;
			rc = put_kv(kv, k, v, logged, &lsn);
			if (rc == 0)
				m->m_ver[k] = v;
		}
		if (rc != 0 && failures++ < 5)
			printf("#   op %u on key %u: %s\n", i, k, sh_strerror(rc));
		if (logged && lsn)
			last_lsn = lsn;
		if (logged && (i % 16 == 15 || i + 1 == nops) && last_lsn) {
			rc = kv_commit(kv, last_lsn);
			if (rc != 0 && failures++ < 5)
				printf("#   commit %" PRIu64 ": %s\n", last_lsn, sh_strerror(rc));
		}
		if (sync_every && i % sync_every == sync_every - 1)
			pool_txg_request_sync(kv->kv_pool);
	}
	return failures;
}

/* ---- tests ---- */

static void test_create_export_import_mem(void)
{
	struct blk_dev *d[2] = {mem_dev(64 * MIB), mem_dev(64 * MIB)};
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {
	    .pc_name = "tank", .pc_layout = POOL_LAYOUT_STRIPE, .pc_opts = &o};
	struct pool *p;
	CHECK(pool_create_on_devs(&a, d, 2, NULL, 0, &p) == 0);
	if (!p)
		return;
	CHECK(strcmp(pool_name(p), "tank") == 0);
	CHECK(pool_synced_txg(p) == 1);
	CHECK(pool_ds_create(p, "data", NULL) == 0);
	CHECK(pool_ds_create(p, "data", NULL) == -EEXIST);
	CHECK(pool_ds_create(p, "bad/name", NULL) == -EINVAL);
	CHECK(pool_ds_create(p, "", NULL) == -EINVAL);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "data", &kv) == 0);
	struct model m;
	model_init(&m, 300);
	CHECK(workload(kv, &m, 1500, 200, false, 1) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	uint64_t guid = pool_guid(p);
	CHECK(pool_export(p) == 0);

	/* Either order of the leaves imports. */
	struct blk_dev *rev[2] = {d[1], d[0]};
	CHECK(pool_import_devs(rev, 2, &o, &p) == 0);
	if (p) {
		CHECK(pool_guid(p) == guid);
		CHECK(kv_open(p, "data", &kv) == 0);
		CHECK(verify_model(kv, &m, NULL) == 0);
		CHECK(workload(kv, &m, 300, 100, false, 2) == 0);
		CHECK(verify_model(kv, &m, NULL) == 0);
		kv_close(kv);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "data", &kv) == 0);
		CHECK(verify_model(kv, &m, NULL) == 0);
		kv_close(kv);
		CHECK(pool_export(p) == 0);
	}
	model_fini(&m);
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
}

/* Logged changes survive a close without export: import replays them. Thousands of operations
 * over many txgs, then more after the import, closed again and replayed again. */
static void test_replay_after_close(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_kv();
	o.po_log_region_bytes = 16 * MIB; /* the tail below fits: no txg is forced by a full log */
	struct kv *kv;
	struct pool *p = new_kv_pool("replay", d, &o, &kv);
	if (!p)
		return;
	struct model m;
	model_init(&m, 400);
	/* many txgs, then a tail of changes only in the log */
	CHECK(workload(kv, &m, 2500, 150, true, 11) == 0);
	/* The syncs the workload asked for are done before the tail starts, so no txg takes in
	 * part of the tail (the tail must live in the log alone). */
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(workload(kv, &m, 700, 0, true, 12) == 0);
	uint64_t synced = pool_synced_txg(p);
	CHECK(synced > 10);
	kv_close(kv);
	pool_close(p);
	uint64_t replayed0 = atomic_load(&kv_replayed_total);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(atomic_load(&kv_replayed_total) - replayed0 >= 700);
	CHECK(pool_synced_txg(p) == synced + 1); /* the txg that made the replay durable */
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	CHECK(workload(kv, &m, 500, 0, true, 13) == 0);
	kv_close(kv);
	pool_close(p);
	/* a second crash: the records before the first import's txg are not replayed again */
	replayed0 = atomic_load(&kv_replayed_total);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	uint64_t n = atomic_load(&kv_replayed_total) - replayed0;
	CHECKF(n >= 500 && n < 1200, "replayed %" PRIu64, n);
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
	/* after an export nothing is left to replay */
	replayed0 = atomic_load(&kv_replayed_total);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (p) {
		CHECK(atomic_load(&kv_replayed_total) == replayed0);
		CHECK(pool_export(p) == 0);
	}
out:
	model_fini(&m);
	blk_dev_close(d);
}

/* Records that do not fit the log wait in memory for the txg that frees space; none is lost. */
static void test_log_full(void)
{
	struct blk_dev *d = mem_dev(96 * MIB), *l = mem_dev(3 * MIB); /* a 2 MiB log region */
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = "logfull", .pc_opts = &o};
	struct pool *p;
	CHECK(pool_create_on_devs(&a, &d, 1, &l, 1, &p) == 0);
	if (!p)
		return;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	static uint8_t big[60000];
	uint64_t lsn = 0;
	for (unsigned i = 0; i < 150; i++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, i);
		val_fill(big, i, 1, sizeof(big));
		CHECK(kv_exec(kv, KV_OP_PUT, key, klen, big, sizeof(big), NULL, 0, NULL, &lsn,
		              NULL) == 0);
	}
	CHECK(kv_commit(kv, lsn) == 0);
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	CHECKF(st->ps_log_stats.is_full > 0, "the log never filled");
	CHECK(st->ps_syncs >= 2); /* the full log asked for txgs */
	mem_free(st);
	kv_close(kv);
	pool_close(p);
	CHECK(pool_import_devs((struct blk_dev *[]){d, l}, 2, &o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "kv", &kv) == 0);
		static uint8_t got[60000];
		for (unsigned i = 0; i < 150; i++) {
			char key[KV_KEY_MAX];
			uint32_t klen = key_make(key, i), len = 0;
			val_fill(big, i, 1, sizeof(big));
			int rc = kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, got, sizeof(got), &len,
			                 NULL, NULL);
			CHECKF(rc == 0 && len == sizeof(big) && memcmp(got, big, len) == 0,
			       "key %u: %d", i, rc);
		}
		kv_close(kv);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	blk_dev_close(d);
	blk_dev_close(l);
}

/* The whole of the file at path, in *len bytes (NULL on failure). */
static uint8_t *file_bytes(const char *path, size_t *len)
{
	*len = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	uint8_t *buf = NULL;
	if (fseek(f, 0, SEEK_END) == 0) {
		long size = ftell(f);
		if (size > 0 && fseek(f, 0, SEEK_SET) == 0)
			buf = malloc((size_t)size);
		if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size) {
			*len = (size_t)size;
		} else {
			free(buf);
			buf = NULL;
		}
	}
	fclose(f);
	return buf;
}

/* A read-only import of the pool on the files at paths (closed without export, at least
 * `logged` changes only in its log): the records are counted and stay, every change is refused,
 * a second reader may share the leaves and a writer may not, and not one byte of any leaf
 * changes. */
static void check_read_only_import(const char *const *paths, unsigned n,
                                   const struct pool_open_opts *rw, uint64_t logged)
{
	enum { MAX_LEAVES = 4 };
	VERIFY(n <= MAX_LEAVES);
	uint8_t *before[MAX_LEAVES] = {0};
	size_t lens[MAX_LEAVES] = {0};
	for (unsigned i = 0; i < n; i++) {
		before[i] = file_bytes(paths[i], &lens[i]);
		CHECK(before[i] != NULL);
	}
	struct pool_open_opts ro = *rw;
	ro.po_read_only = true;
	struct pool *p = NULL, *reader = NULL, *writer = NULL;
	CHECK(pool_import(paths, n, &ro, &p) == 0);
	if (p) {
		struct pool_status *st = mem_alloc(sizeof(*st));
		VERIFY(st != NULL);
		pool_status(p, st);
		CHECK(st->ps_read_only);
		CHECKF(st->ps_log_unreplayed >= logged, "%" PRIu64 " records newer than the txg",
		       st->ps_log_unreplayed);
		mem_free(st);
		CHECK(pool_import(paths, n, &ro, &reader) == 0);
		if (reader)
			CHECK(pool_export(reader) == 0);
		CHECK(pool_import(paths, n, rw, &writer) == -EBUSY);
		struct kv *kv = NULL;
		CHECK(kv_open(p, "fs", &kv) == -EROFS && kv == NULL);
		CHECK(pool_ds_create(p, "other", NULL) == -EROFS);
		CHECK(pool_ds_rename(p, "fs", "other") == -EROFS);
		CHECK(pool_ds_destroy(p, "fs") == -EROFS);
		CHECK(pool_prop_set(p, "note", "x") == -EROFS);
		CHECK(pool_txg_wait_synced(p, 0) == -EROFS);
		CHECK(check_pool(p) == -EROFS);
		CHECK(pool_export(p) == 0);
	}
	/* leaves the caller opened for writing are not read only */
	struct blk_dev *m = mem_dev(32 * MIB);
	CHECK(pool_import_devs(&m, 1, &ro, &p) == -EINVAL && p == NULL);
	blk_dev_close(m);
	for (unsigned i = 0; i < n; i++) {
		size_t len;
		uint8_t *after = file_bytes(paths[i], &len);
		CHECKF(after && before[i] && len == lens[i] && memcmp(after, before[i], len) == 0,
		       "%s changed under a read-only import", paths[i]);
		free(after);
		free(before[i]);
	}
}

/* On files: a mirror and a log vdev, created by path, exported, imported by path; and imported
 * read only. */
static void test_files(void)
{
	char dir[] = "/tmp/shale-pool-XXXXXX";
	const char *base = getenv("TMPDIR");
	char tmpl[256];
	snprintf(tmpl, sizeof(tmpl), "%s/shale-pool-XXXXXX", base && *base ? base : "/tmp");
	char *dirp = mkdtemp(tmpl);
	CHECK(dirp != NULL);
	if (!dirp)
		return;
	(void)dir;
	char pa[300], pb[300], pl[300];
	snprintf(pa, sizeof(pa), "%s/a", dirp);
	snprintf(pb, sizeof(pb), "%s/b", dirp);
	snprintf(pl, sizeof(pl), "%s/log", dirp);
	const char *paths[] = {pa, pb}, *logs[] = {pl};
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = "files",
	                             .pc_layout = POOL_LAYOUT_MIRROR,
	                             .pc_paths = paths,
	                             .pc_npaths = 2,
	                             .pc_log_paths = logs,
	                             .pc_nlog_paths = 1,
	                             .pc_create_bytes = 48 * MIB,
	                             .pc_opts = &o};
	struct pool *p;
	CHECK(pool_create(&a, &p) == 0);
	struct pool *p2;
	CHECK(pool_create(&a, &p2) == -EEXIST); /* the files exist: never clobbered */
	struct model m;
	model_init(&m, 200);
	if (p) {
		CHECK(pool_ds_create(p, "fs", NULL) == 0);
		struct kv *kv = NULL;
		CHECK(kv_open(p, "fs", &kv) == 0);
		CHECK(workload(kv, &m, 800, 200, true, 21) == 0);
		kv_close(kv);
		CHECK(pool_export(p) == 0);
	}
	const char *all[] = {pl, pb, pa};
	CHECK(pool_import(all, 3, &o, &p) == 0);
	if (p) {
		struct kv *kv = NULL;
		CHECK(kv_open(p, "fs", &kv) == 0);
		CHECK(verify_model(kv, &m, NULL) == 0);
		CHECK(workload(kv, &m, 300, 0, true, 22) == 0);
		kv_close(kv);
		pool_close(p); /* the last changes only in the log on the log file */
	}
	check_read_only_import(all, 3, &o, 300);
	CHECK(pool_import(all, 3, &o, &p) == 0);
	if (p) {
		struct kv *kv = NULL;
		CHECK(kv_open(p, "fs", &kv) == 0);
		CHECK(verify_model(kv, &m, NULL) == 0);
		kv_close(kv);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	model_fini(&m);
	unlink(pa);
	unlink(pb);
	unlink(pl);
	rmdir(dirp);
}

static int list_collect(void *arg, const struct pool_ds_info *info)
{
	char *names = arg;
	strcat(names, info->di_name);
	strcat(names, ",");
	return 0;
}

static uint64_t pool_used(struct pool *p)
{
	uint64_t total, free_b;
	pool_space(p, &total, &free_b, NULL);
	return total - free_b;
}

/* A pool `name` on d with dataset "keep" holding mk's 100 keys after a workload from seed, all
 * durable; NULL when it cannot be made (reported). */
static struct pool *keep_pool(const char *name, struct blk_dev *d, struct pool_open_opts *o,
                              struct model *mk, uint64_t seed)
{
	struct pool_create_args a = {.pc_name = name, .pc_opts = o};
	struct pool *p;
	model_init(mk, 100);
	CHECK(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	if (!p)
		return NULL;
	CHECK(pool_ds_create(p, "keep", NULL) == 0);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "keep", &kv) == 0);
	CHECK(workload(kv, mk, 200, 0, false, seed) == 0);
	kv_close(kv);
	for (int i = 0; i < 2; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	return p;
}

/* Datasets: list in name order; destroy frees every block of the tree and its data. */
static void test_ds_destroy(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_kv();
	struct model mk;
	struct pool *p = keep_pool("ds", d, &o, &mk, 31);
	if (!p) {
		model_fini(&mk);
		blk_dev_close(d);
		return;
	}
	struct kv *kv = NULL;
	uint64_t before = pool_used(p);
	struct pool_ds_props props = {.dp_record_bytes = 65536, .dp_compress = POOL_COMPRESS_ZSTD};
	CHECK(pool_ds_create(p, "gone", &props) == 0);
	CHECK(pool_ds_create(p, "also", NULL) == 0);
	char names[256] = "";
	CHECK(pool_ds_list(p, list_collect, names) == 0);
	CHECK(strcmp(names, "also,gone,keep,") == 0);
	CHECK(kv_open(p, "gone", &kv) == 0);
	CHECK(pool_ds_record_bytes(kv->kv_ds) == 65536 &&
	      pool_ds_compress(kv->kv_ds) == BLK_COMPRESS_ZSTD);
	struct model m;
	model_init(&m, 600);
	CHECK(workload(kv, &m, 1500, 300, false, 32) == 0);
	CHECK(pool_ds_destroy(p, "gone") == -EBUSY); /* open */
	kv_close(kv);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_used(p) > before + 256 * 1024);
	CHECK(check_pool(p) == 0);
	CHECK(pool_ds_destroy(p, "gone") == 0);
	CHECK(pool_ds_destroy(p, "gone") == -ENOENT);
	CHECK(pool_ds_destroy(p, "also") == 0);
	struct pool_ds *ds;
	CHECK(pool_ds_open(p, "gone", &ds) == -ENOENT);
	/* the frees are reusable once their txg is durable, and the allocator's blocks settle */
	for (int i = 0; i < 3; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	uint64_t after = pool_used(p);
	CHECKF(after == before, "used %" PRIu64 " before, %" PRIu64 " after", before, after);
	names[0] = '\0';
	CHECK(pool_ds_list(p, list_collect, names) == 0);
	CHECK(strcmp(names, "keep,") == 0);
	CHECK(check_pool(p) == 0);
	CHECK(pool_ds_create(p, "gone", NULL) == 0); /* the name is free again, with a new id */
	CHECK(kv_open(p, "gone", &kv) == 0);
	CHECK(verify_key(kv, 1, 0, NULL) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "keep", &kv) == 0);
		CHECK(verify_model(kv, &mk, NULL) == 0);
		kv_close(kv);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	model_fini(&m);
	model_fini(&mk);
	blk_dev_close(d);
}

static int entries_of(void *arg, const struct pool_ds_info *info)
{
	if (strcmp(info->di_name, "big") == 0)
		*(uint64_t *)arg = info->di_entries;
	return 0;
}

/* The queued dataset's status line: entries left, or UINT64_MAX when none is being destroyed. */
static uint64_t destroy_left(struct pool *p)
{
	struct pool_status st;
	pool_status(p, &st);
	for (unsigned i = 0; i < st.ps_nloaded; i++)
		if (st.ps_loaded[i].sd_destroying)
			return st.ps_loaded[i].sd_destroy_entries;
	return UINT64_MAX;
}

/* Waits (a txg at a time) until no dataset is being destroyed; false after too many txgs. */
static bool destroy_settle(struct pool *p)
{
	for (int i = 0; i < 20000 && pool_destroy_queued(p) > 0; i++)
		if (pool_txg_wait_synced(p, 0) != 0)
			return false;
	return pool_destroy_queued(p) == 0 && pool_txg_wait_synced(p, 0) == 0;
}

/* Destroy in steps: the name goes at once and may be reused; the blocks are freed a few
 * entries per txg; a crash in the middle loses nothing and leaks nothing (check, mid-way and
 * after), and the next import finishes the job. */
static void test_ds_destroy_steps(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_kv();
	o.po_destroy_step = 7;
	struct model mk;
	struct pool *p = keep_pool("dq", d, &o, &mk, 41);
	if (!p) {
		model_fini(&mk);
		blk_dev_close(d);
		return;
	}
	struct kv *kv = NULL;
	uint64_t before = pool_used(p);
	/* A dataset of some hundreds of entries, an eighth of them with a data block. */
	CHECK(pool_ds_create(p, "big", NULL) == 0);
	CHECK(kv_open(p, "big", &kv) == 0);
	struct model m;
	model_init(&m, 2000);
	CHECK(workload(kv, &m, 3000, 500, false, 42) == 0);
	kv_close(kv);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	uint64_t entries = 0;
	CHECK(pool_ds_list(p, entries_of, &entries) == 0);
	CHECKF(entries > 500, "%" PRIu64 " entries", entries);
	uint64_t txg0 = pool_synced_txg(p);

	CHECK(pool_ds_destroy_start(p, "big", false) == 0);
	struct pool_ds *ds;
	CHECK(pool_ds_open(p, "big", &ds) == -ENOENT); /* the name went at once */
	CHECK(pool_ds_destroy(p, "big") == -ENOENT);
	CHECK(pool_destroy_queued(p) == 1);
	/* a few steps, then a crash */
	for (int i = 0; i < 3; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	uint64_t left = destroy_left(p);
	CHECKF(left != UINT64_MAX && left < entries && left > 0,
	       "%" PRIu64 " of %" PRIu64 " entries left", left, entries);
	char out[4096];
	FILE *f = fmemopen(out, sizeof(out), "w");
	CHECK(pool_status_print(p, f) == 0);
	fclose(f);
	CHECK(strstr(out, "tree entries left to free (freeing in the background)") != NULL);
	pool_close(p);

	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p) {
		model_fini(&m);
		model_fini(&mk);
		blk_dev_close(d);
		return;
	}
	CHECK(check_pool(p) == 0); /* mid-way: the queued dataset's blocks are counted */
	char names[256] = "";
	CHECK(pool_ds_list(p, list_collect, names) == 0);
	CHECK(strcmp(names, "keep,") == 0);
	/* the name is free again, with a new id, while the old dataset is being freed */
	CHECK(pool_ds_create(p, "big", NULL) == 0);
	CHECK(kv_open(p, "big", &kv) == 0);
	CHECK(verify_key(kv, 1, 0, NULL) == 0);
	CHECK(put_kv(kv, 1, 7, false, NULL) == 0);
	kv_close(kv);
	CHECK(destroy_settle(p));
	CHECKF(pool_synced_txg(p) - txg0 >= entries / 7,
	       "%" PRIu64 " txgs for %" PRIu64 " entries in steps of 7", pool_synced_txg(p) - txg0,
	       entries);
	CHECK(destroy_left(p) == UINT64_MAX);
	printf("#   %" PRIu64 " entries, %" PRIu64 " left at the crash, freed in %" PRIu64
	       " txgs\n",
	       entries, left, pool_synced_txg(p) - txg0);
	/* the new one, destroyed and waited for */
	CHECK(pool_ds_destroy(p, "big") == 0);
	CHECK(pool_destroy_queued(p) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	uint64_t after = pool_used(p);
	CHECKF(after == before, "used %" PRIu64 " before, %" PRIu64 " after", before, after);
	CHECK(check_pool(p) == 0);
	CHECK(kv_open(p, "keep", &kv) == 0);
	CHECK(verify_model(kv, &mk, NULL) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (p) {
		CHECK(pool_destroy_queued(p) == 0);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	model_fini(&m);
	model_fini(&mk);
	blk_dev_close(d);
}

/* Child c of top-level vdev t (t == UINT32_MAX: the log vdev): 'S' stale, 'F' faulted, 'M'
 * missing, 'O' online; and the pool's state. */
static char child_state(struct pool *p, unsigned t, unsigned c, enum pool_state *state)
{
	struct pool_status *st = mem_alloc(sizeof(*st));
	VERIFY(st != NULL);
	pool_status(p, st);
	const struct pool_status_leaf *sl =
	    &(t == UINT32_MAX ? &st->ps_log : &st->ps_tops[t])->sv_children[c];
	char r = !sl->sl_present           ? 'M'
	         : sl->sl_stats.vs_faulted ? 'F'
	         : sl->sl_stats.vs_stale   ? 'S'
	                                   : 'O';
	if (state)
		*state = st->ps_state;
	mem_free(st);
	return r;
}

static unsigned g_repaired_lines;

static void report_count_repairs(void *arg, const char *line)
{
	(void)arg;
	if (strncmp(line, "repaired:", 9) == 0 || strncmp(line, "resilvered:", 11) == 0)
		g_repaired_lines++;
	else
		printf("#   check: %s\n", line);
}

/* A check that repairs something, then one that finds everything repaired by the first. */
static void check_repairs_all(struct pool *p)
{
	g_repaired_lines = 0;
	CHECK(pool_check(p, report_count_repairs, NULL) == 0);
	CHECK(g_repaired_lines > 0);
	g_repaired_lines = 0;
	CHECK(pool_check(p, report_count_repairs, NULL) == 0);
	CHECK(g_repaired_lines == 0);
}

/* A mirror of d[0] and d[1] with a kv dataset that nops of workload (seed) filled, exported,
 * the whole data area of d[0] then scribbled over (labels and uberblocks stay), and imported
 * again. NULL (after a failed CHECK) if any step failed. */
static struct pool *mirror_kv_damaged(const char *name, struct blk_dev *d[2],
                                      struct pool_open_opts *o, struct model *m, unsigned nops,
                                      unsigned sync_every, uint64_t seed, uint64_t scribble_seed)
{
	struct pool_create_args a = {
	    .pc_name = name, .pc_layout = POOL_LAYOUT_MIRROR, .pc_opts = o};
	struct pool *p = NULL;
	struct kv *kv = NULL;
	CHECK(pool_create_on_devs(&a, d, 2, NULL, 0, &p) == 0);
	if (!p)
		return NULL;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	CHECK(kv_open(p, "kv", &kv) == 0);
	if (kv) {
		CHECK(workload(kv, m, nops, sync_every, true, seed) == 0);
		kv_close(kv);
	}
	CHECK(pool_export(p) == 0);
	uint8_t *bytes = blk_dev_mem_bytes(d[0]);
	uint64_t size = blk_dev_size(d[0]);
	uint64_t end = size - BLK_LABEL_AREA_BYTES;
	for (uint64_t off = BLK_LABEL_AREA_BYTES; off + 8 <= end; off += 8) {
		uint64_t r = rng_next(&scribble_seed);
		memcpy(bytes + off, &r, 8);
	}
	p = NULL;
	CHECK(pool_import_devs(d, 2, o, &p) == 0);
	return p;
}

/* A mirror with one side of every block damaged: reads are right and repair; a check repairs
 * every copy; then the damaged side alone holds the whole pool, and the side left out meanwhile
 * comes back STALE until a check. */
static void test_mirror_repair(void)
{
	struct blk_dev *d[2] = {mem_dev(48 * MIB), mem_dev(48 * MIB)};
	struct pool_open_opts o = opts_kv();
	struct kv *kv = NULL;
	struct model m;
	model_init(&m, 300);
	struct pool *p = mirror_kv_damaged("mir", d, &o, &m, 900, 300, 41, 99);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	struct blk_vdev_stats vs;
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	vs = st->ps_tops[0].sv_children[0].sl_stats;
	CHECK(vs.vs_checksum_errors > 0 && vs.vs_repairs > 0);
	mem_free(st);
	check_repairs_all(p);
	CHECK(pool_export(p) == 0);
	/* leaf 0 alone: degraded, complete */
	CHECK(pool_import_devs(d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	CHECK(st->ps_state == POOL_STATE_DEGRADED);
	mem_free(st);
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	CHECK(workload(kv, &m, 200, 100, true, 42) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
	/* leaf 1 missed those writes: back, it is stale until a check rewrites its copies */
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (!p)
		goto out;
	enum pool_state ps;
	CHECK(child_state(p, 0, 0, NULL) == 'O' && child_state(p, 0, 1, &ps) == 'S' &&
	      ps == POOL_STATE_DEGRADED);
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	check_repairs_all(p);
	CHECK(child_state(p, 0, 1, &ps) == 'O' && ps == POOL_STATE_ONLINE);
	CHECK(pool_export(p) == 0);
out:
	model_fini(&m);
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
}

struct scrub_run {
	struct pool *sr_pool;
	int64_t sr_result;
	unsigned long long sr_blocks; /* from its last line */
	unsigned long long sr_resilvered; /* from its "resilvered:" line */
	bool sr_current;                  /* that line said the stale leaves are current now */
};

static void scrub_report(void *arg, const char *line)
{
	struct scrub_run *sr = arg;
	if (sscanf(line, "resilvered: %llu copies", &sr->sr_resilvered) == 1)
		sr->sr_current = strstr(line, "; they are current now") != NULL;
	else if (sscanf(line, "scrubbed %llu blocks", &sr->sr_blocks) != 1)
		report_count_repairs(NULL, line);
}

static void *scrub_thread(void *arg)
{
	struct scrub_run *sr = arg;
	/* small slices, so that many interleave with the workload */
	struct pool_scrub_opts o = {.so_slice_bytes = 64 * 1024, .so_pause_ms = 1};
	sr->sr_result = pool_scrub(sr->sr_pool, &o, scrub_report, sr);
	return NULL;
}

static bool status_has(struct pool *p, const char *what)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	VERIFY(f != NULL);
	CHECK(pool_status_print(p, f) == 0);
	fclose(f);
	bool has = text && strstr(text, what) != NULL;
	if (!has && text)
		printf("#   status has no \"%s\":\n%s", what, text);
	free(text);
	return has;
}

/* The online scrub: a mirror with one side of every block damaged, scrubbed while a workload
 * keeps changing, syncing and logging: the scrub repairs without reporting a problem (no copy is
 * taken for bad because the trees moved on), every value stays right, and a check afterwards
 * finds nothing left to repair. A scrub started on its thread can be cancelled, and an export
 * stops one that runs. */
static void test_scrub_online(void)
{
	struct blk_dev *d[2] = {mem_dev(48 * MIB), mem_dev(48 * MIB)};
	struct pool_open_opts o = opts_kv();
	struct kv *kv = NULL;
	struct model m;
	model_init(&m, 3000);
	struct pool *p = mirror_kv_damaged("scr", d, &o, &m, 5000, 1000, 51, 7);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	g_repaired_lines = 0;
	struct scrub_run sr = {.sr_pool = p, .sr_result = -1};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, scrub_thread, &sr) == 0);
	CHECK(workload(kv, &m, 3000, 200, true, 52) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECKF(sr.sr_result == 0, "scrub: %" PRId64, sr.sr_result);
	CHECKF(g_repaired_lines > 0, "the scrub repaired nothing");
	/* far more than one 64 KiB slice holds: the walk resumed many times */
	CHECKF(sr.sr_blocks > 200, "the scrub saw %llu blocks", sr.sr_blocks);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	CHECK(status_has(p, "  scan: last scrub "));
	g_repaired_lines = 0;
	CHECK(pool_check(p, report_count_repairs, NULL) == 0);
	CHECKF(g_repaired_lines == 0, "the check after the scrub repaired %u", g_repaired_lines);
	/* On its thread, in 64 KiB slices 100 ms apart (seconds for this pool): running, a second
	 * start refused, cancelled (it records nothing); then one left running when the pool
	 * exports. */
	char before[POOL_PROP_VALUE_MAX + 1], after[POOL_PROP_VALUE_MAX + 1];
	CHECK(pool_prop_get(p, "last_check", before, sizeof(before)) == 0);
	const struct pool_scrub_opts slow = {.so_slice_bytes = 64 * 1024, .so_pause_ms = 100};
	CHECK(pool_scrub_start(p, &slow) == 0);
	CHECK(pool_scrub_running(p));
	CHECK(pool_scrub_start(p, &slow) == -EALREADY);
	CHECK(status_has(p, "  scan: scrub in progress since "));
	CHECK(pool_scrub_cancel(p) == 0);
	for (int i = 0; i < 5000 && pool_scrub_running(p); i++)
		usleep(1000);
	CHECK(!pool_scrub_running(p));
	CHECK(pool_scrub_cancel(p) == -ENOENT);
	CHECK(pool_prop_get(p, "last_check", after, sizeof(after)) == 0 &&
	      strcmp(before, after) == 0);
	CHECK(pool_scrub_start(p, &slow) == 0);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
out:
	model_fini(&m);
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
}

/* A mirror child that fails every write at run time (and a log mirror child that is pulled) is
 * faulted and written around: the pool keeps taking logged and synced changes, reports itself
 * DEGRADED, and after a crash imports with the stale children back (marked STALE from the
 * pool's record, and read after their partners), replays the log from the good log child, and a
 * check rewrites every stale copy and makes them ONLINE for good, so that the once faulted leaves
 * alone then hold the whole pool. */
/* The first part of test_mirror_write_around: a mirror pool with a mirrored log whose second
 * children fail (faulted, written around) under a workload, then a crash (the pool is closed
 * without an export) and the failed children mended. Returns whether the pool was created. */
static bool write_around_crash(struct blk_dev *d[2], struct blk_dev *l[2],
			       const struct pool_open_opts *o, struct model *m)
{
	struct pool_create_args a = {
	    .pc_name = "wa", .pc_layout = POOL_LAYOUT_MIRROR, .pc_opts = o};
	struct pool *p;
	CHECK(pool_create_on_devs(&a, d, 2, l, 2, &p) == 0);
	if (!p)
		return false;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(workload(kv, m, 600, 200, true, 51) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	blk_dev_inject_errors(d[1], -1, 1 << 30);
	blk_dev_set_pulled(l[1], true);
	/* synced and logged changes go on */
	CHECK(workload(kv, m, 900, 150, true, 52) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(!pool_is_suspended(p));
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	CHECK(st->ps_state == POOL_STATE_DEGRADED);
	CHECK(!st->ps_tops[0].sv_children[0].sl_stats.vs_faulted &&
	      st->ps_tops[0].sv_children[1].sl_stats.vs_faulted);
	CHECK(st->ps_has_log && !st->ps_log.sv_children[0].sl_stats.vs_faulted &&
	      st->ps_log.sv_children[1].sl_stats.vs_faulted);
	mem_free(st);
	char out[4096];
	FILE *f = fmemopen(out, sizeof(out), "w");
	CHECK(pool_status_print(p, f) == 0);
	fclose(f);
	CHECK(strstr(out, "state: DEGRADED") != NULL && strstr(out, "FAULTED") != NULL);
	CHECK(check_pool(p) == 0); /* the faulted child is not counted against the pool */
	/* a tail that lives in the log only, then a crash */
	CHECK(workload(kv, m, 300, 0, true, 53) == 0);
	kv_close(kv);
	pool_close(p);
	/* the stale children come back */
	blk_dev_inject_errors(d[1], -1, -1);
	blk_dev_set_pulled(l[1], false);
	return true;
}

static void release_write_around(struct blk_dev *d[2], struct blk_dev *l[2], struct model *m)
{
	model_fini(m);
	for (int i = 0; i < 2; i++) {
		blk_dev_close(d[i]);
		blk_dev_close(l[i]);
	}
}

/* The end of the write-around tests: the once faulted leaves d[1] and l[1] alone import and hold
 * everything; then the devices and the model are released. */
static void alone_hold_all_and_close(struct blk_dev *d[2], struct blk_dev *l[2],
				     const struct pool_open_opts *o, struct model *m)
{
	struct pool *p = NULL;
	struct kv *kv = NULL;
	CHECK(pool_import_devs((struct blk_dev *[]){d[1], l[1]}, 2, o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "kv", &kv) == 0);
		CHECK(verify_model(kv, m, NULL) == 0);
		kv_close(kv);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	release_write_around(d, l, m);
}

static void test_mirror_write_around(void)
{
	struct blk_dev *d[2] = {mem_dev(48 * MIB), mem_dev(48 * MIB)};
	struct blk_dev *l[2] = {mem_dev(8 * MIB), mem_dev(8 * MIB)};
	struct pool_open_opts o = opts_kv();
	struct pool *p = NULL;
	struct kv *kv = NULL;
	struct model m;
	model_init(&m, 300);
	char out[4096];
	FILE *f;
	if (!write_around_crash(d, l, &o, &m))
		goto out;
	CHECK(pool_import_devs((struct blk_dev *[]){d[0], d[1], l[0], l[1]}, 4, &o, &p) == 0);
	if (!p)
		goto out;
	/* the faults were recorded: the children that missed writes come back stale */
	enum pool_state ps;
	CHECK(child_state(p, 0, 0, NULL) == 'O' && child_state(p, 0, 1, &ps) == 'S' &&
	      ps == POOL_STATE_DEGRADED);
	CHECK(child_state(p, UINT32_MAX, 0, NULL) == 'O' &&
	      child_state(p, UINT32_MAX, 1, NULL) == 'S');
	f = fmemopen(out, sizeof(out), "w");
	CHECK(pool_status_print(p, f) == 0);
	fclose(f);
	CHECK(strstr(out, "STALE") != NULL);
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	/* reads went to the current child first: the stale one was not read into errors */
	struct pool_status *st2 = mem_alloc(sizeof(*st2));
	pool_status(p, st2);
	CHECK(st2->ps_tops[0].sv_children[1].sl_stats.vs_checksum_errors == 0);
	mem_free(st2);
	check_repairs_all(p);
	CHECK(child_state(p, 0, 1, &ps) == 'O' && ps == POOL_STATE_ONLINE);
	CHECK(child_state(p, UINT32_MAX, 1, NULL) == 'O');
	CHECK(pool_export(p) == 0);
	/* the check's verdict is durable */
	CHECK(pool_import_devs((struct blk_dev *[]){d[0], d[1], l[0], l[1]}, 4, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(child_state(p, 0, 1, &ps) == 'O' && ps == POOL_STATE_ONLINE);
	CHECK(pool_export(p) == 0);
	/* resilvered */
	alone_hold_all_and_close(d, l, &o, &m);
	return;
out:
	release_write_around(d, l, &m);
}

/* The online resilver: the same stale children, but made current by a scrub that runs in slices
 * while a workload changes the pool, instead of by an offline check. Afterwards the once faulted
 * leaves alone hold everything, as after the check. */
static void test_scrub_resilver(void)
{
	struct blk_dev *d[2] = {mem_dev(48 * MIB), mem_dev(48 * MIB)};
	struct blk_dev *l[2] = {mem_dev(8 * MIB), mem_dev(8 * MIB)};
	struct pool_open_opts o = opts_kv();
	struct pool *p = NULL;
	struct kv *kv = NULL;
	struct model m;
	model_init(&m, 3000);
	if (!write_around_crash(d, l, &o, &m))
		goto out;
	CHECK(pool_import_devs((struct blk_dev *[]){d[0], d[1], l[0], l[1]}, 4, &o, &p) == 0);
	if (!p)
		goto out;
	enum pool_state ps;
	CHECK(child_state(p, 0, 1, &ps) == 'S' && ps == POOL_STATE_DEGRADED);
	CHECK(child_state(p, UINT32_MAX, 1, NULL) == 'S');
	CHECK(kv_open(p, "kv", &kv) == 0);
	g_repaired_lines = 0;
	struct scrub_run sr = {.sr_pool = p, .sr_result = -1};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, scrub_thread, &sr) == 0);
	CHECK(workload(kv, &m, 2000, 200, true, 54) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECKF(sr.sr_result == 0, "scrub: %" PRId64, sr.sr_result);
	/* This pool holds about 150 blocks (more while the workload adds some); a 64 KiB slice
	 * verifies about 16 copies of 4 KiB, 8 blocks of this mirror: more than 64 blocks means
	 * the walk resumed many times. */
	CHECKF(sr.sr_blocks > 64, "the scrub saw %llu blocks", sr.sr_blocks);
	CHECK(child_state(p, 0, 1, &ps) == 'O' && ps == POOL_STATE_ONLINE);
	CHECK(child_state(p, UINT32_MAX, 1, NULL) == 'O');
	CHECKF(sr.sr_resilvered > 0 && sr.sr_current, "resilvered %llu, current %d",
	       sr.sr_resilvered, sr.sr_current);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	/* a check finds nothing left to resilver or repair */
	g_repaired_lines = 0;
	CHECK(pool_check(p, report_count_repairs, NULL) == 0);
	CHECKF(g_repaired_lines == 0, "the check after the scrub repaired %u", g_repaired_lines);
	CHECK(pool_export(p) == 0);
	alone_hold_all_and_close(d, l, &o, &m);
	return;
out:
	release_write_around(d, l, &m);
}

/* The guid of child c of top-level vdev t, as a decimal leaf name. */
static void leaf_name(struct pool *p, unsigned t, unsigned c, char *out, size_t cap)
{
	struct pool_status *st = mem_alloc(sizeof(*st));
	VERIFY(st != NULL);
	pool_status(p, st);
	snprintf(out, cap, "%" PRIu64, st->ps_tops[t].sv_children[c].sl_guid);
	mem_free(st);
}

/* Top-level vdev 0's shape: its child count, and whether it is a mirror. */
static bool top0_is(struct pool *p, unsigned nchildren, bool mirror)
{
	struct pool_status *st = mem_alloc(sizeof(*st));
	VERIFY(st != NULL);
	pool_status(p, st);
	bool r = st->ps_tops[0].sv_nchildren == nchildren && st->ps_tops[0].sv_mirror == mirror;
	mem_free(st);
	return r;
}

/* A pool `name` on leaf d with dataset "kv" holding m's 300 keys after nops logged operations
 * from seed; NULL when it cannot be made (reported). */
static struct pool *kv_pool(const char *name, struct blk_dev *d, struct pool_open_opts *o,
                            struct model *m, unsigned nops, uint64_t seed)
{
	model_init(m, 300);
	struct kv *kv;
	struct pool *p = new_kv_pool(name, d, o, &kv);
	if (p && kv) {
		CHECK(workload(kv, m, nops, nops / 3, true, seed) == 0);
		kv_close(kv);
	}
	return p;
}

/* Imports devs, checks that the dataset holds m, runs a check (its result returned), exports. */
static int64_t verify_pool(struct blk_dev *const *devs, unsigned n, struct pool_open_opts *o,
                           const struct model *m)
{
	struct pool *p = NULL;
	int rc = pool_import_devs(devs, n, o, &p);
	CHECK(rc == 0);
	if (rc != 0)
		return rc;
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	if (kv) {
		CHECK(verify_model(kv, m, NULL) == 0);
		kv_close(kv);
	}
	int64_t problems = check_pool(p);
	CHECK(pool_export(p) == 0);
	return problems;
}

#define LABEL_HEADER_BYTES (16u * 1024u) /* the part of a label its configuration is in */

/* The four label headers of a memory leaf of size bytes, saved into or put back from buf. */
static void label_headers(struct blk_dev *d, uint64_t size, uint8_t *buf, bool save)
{
	uint8_t *bytes = blk_dev_mem_bytes(d);
	const uint64_t at[4] = {0, BLK_LABEL_BYTES, size - 2 * BLK_LABEL_BYTES,
	                        size - BLK_LABEL_BYTES};
	for (unsigned i = 0; i < 4; i++) {
		if (save)
			memcpy(buf + i * LABEL_HEADER_BYTES, bytes + at[i], LABEL_HEADER_BYTES);
		else
			memcpy(bytes + at[i], buf + i * LABEL_HEADER_BYTES, LABEL_HEADER_BYTES);
	}
}

/* Attach, resilver and detach (zpool attach/detach; `shale pool replace` is the three): a plain
 * disk becomes a mirror whose new side is STALE until a check has copied every block onto it,
 * after which it alone holds the pool; the old side is detached and its labels wiped; detaches
 * that would leave no complete copy are refused; and each change cut short between two label
 * writes imports whole: an older configuration's leaf is brought up to date, a detached leaf
 * whose labels were not wiped yet is left out. */
static void test_vdev_attach_detach(void)
{
	const uint64_t size = 48 * MIB;
	struct blk_dev *d[3] = {mem_dev(size), mem_dev(size), mem_dev(size)};
	struct blk_dev *small = mem_dev(32 * MIB);
	uint8_t *saved = mem_alloc(4 * LABEL_HEADER_BYTES);
	struct pool_open_opts o = opts_kv();
	struct model m;
	char err[1024], name0[24], name1[24], name2[24];
	struct kv *kv = NULL;
	struct pool *p = kv_pool("att", d[0], &o, &m, 900, 51);
	if (!p || !saved)
		goto out;
	leaf_name(p, 0, 0, name0, sizeof(name0));
	CHECK(pool_export(p) == 0);
	/* refusals: no such leaf, a leaf too small, the only leaf */
	CHECK(pool_vdev_attach(d, 1, &o, "12345", d[1], false, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, name0) != NULL); /* the message lists the leaves */
	CHECK(pool_vdev_attach(d, 1, &o, name0, small, false, err, sizeof(err)) == -EINVAL);
	CHECK(pool_vdev_detach(d, 1, &o, name0, err, sizeof(err)) == -EINVAL);
	/* attach d1 beside d0, as if cut short after d1's labels: d0 keeps its old ones */
	label_headers(d[0], size, saved, true);
	CHECK(pool_vdev_attach(d, 1, &o, name0, d[1], false, err, sizeof(err)) == 0);
	label_headers(d[0], size, saved, false);
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (!p)
		goto out;
	enum pool_state ps;
	CHECK(top0_is(p, 2, true));
	CHECK(child_state(p, 0, 0, NULL) == 'O' && child_state(p, 0, 1, &ps) == 'S' &&
	      ps == POOL_STATE_DEGRADED);
	leaf_name(p, 0, 1, name1, sizeof(name1));
	CHECK(pool_export(p) == 0);
	/* d0's labels were brought up to date: the new configuration from d0 alone */
	CHECK(pool_import_devs(d, 1, &o, &p) == 0);
	if (p) {
		CHECK(top0_is(p, 2, true) && child_state(p, 0, 1, NULL) == 'M');
		CHECK(pool_export(p) == 0);
	}
	/* before the resilver, d0 cannot go: d1 is stale; attaching d1 again is no change */
	CHECK(pool_vdev_detach(d, 2, &o, name0, err, sizeof(err)) == -EBUSY);
	CHECK(pool_vdev_attach(d, 2, &o, name0, d[1], false, err, sizeof(err)) == -EALREADY);
	/* the resilver: a check copies every block; the second finds nothing to do */
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(child_state(p, 0, 1, NULL) == 'S');
	check_repairs_all(p);
	CHECK(child_state(p, 0, 1, &ps) == 'O' && ps == POOL_STATE_ONLINE);
	CHECK(pool_export(p) == 0);
	/* detach d0, as if cut short before its wipe: left out by the newer configuration */
	label_headers(d[0], size, saved, true);
	CHECK(pool_vdev_detach(d, 2, &o, name0, err, sizeof(err)) == 0);
	CHECK(pool_import_devs(d, 1, &o, &p) == -ENOENT); /* wiped: no pool label */
	label_headers(d[0], size, saved, false);
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (p) {
		CHECK(top0_is(p, 1, false));
		struct pool_status *st = mem_alloc(sizeof(*st));
		pool_status(p, st);
		CHECK(st->ps_state == POOL_STATE_ONLINE && st->ps_tops[0].sv_children[0].sl_present);
		mem_free(st);
		CHECK(pool_export(p) == 0);
	}
	/* d1 alone holds the whole pool, a plain disk now; more changes on it */
	CHECK(verify_pool(&d[1], 1, &o, &m) == 0);
	CHECK(pool_import_devs(&d[1], 1, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(workload(kv, &m, 300, 100, true, 52) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	/* replace d1 with d2: attach, resilver, detach (d1 given by guid) */
	CHECK(pool_vdev_attach(&d[1], 1, &o, name1, d[2], false, err, sizeof(err)) == 0);
	CHECK(pool_import_devs(&d[1], 2, &o, &p) == 0);
	if (!p)
		goto out;
	leaf_name(p, 0, 1, name2, sizeof(name2));
	CHECK(child_state(p, 0, 1, NULL) == 'S');
	check_repairs_all(p);
	CHECK(pool_export(p) == 0);
	CHECK(pool_vdev_detach(&d[1], 2, &o, name1, err, sizeof(err)) == 0);
	CHECK(verify_pool(&d[2], 1, &o, &m) == 0);
	/* a pool's own leaf is refused as a new one; another pool's without force */
	CHECK(pool_vdev_attach(&d[2], 1, &o, name2, d[2], false, err, sizeof(err)) == -EALREADY);
	struct pool_create_args other = {.pc_name = "other", .pc_opts = &o};
	CHECK(pool_create_on_devs(&other, &d[0], 1, NULL, 0, &p) == 0);
	if (p)
		CHECK(pool_export(p) == 0);
	CHECK(pool_vdev_attach(&d[2], 1, &o, name2, d[0], false, err, sizeof(err)) == -EBUSY);
	CHECK(pool_vdev_attach(&d[2], 1, &o, name2, d[0], true, err, sizeof(err)) == 0);
	CHECK(pool_import_devs((struct blk_dev *[]){d[2], d[0]}, 2, &o, &p) == 0);
	if (p) {
		check_repairs_all(p);
		CHECK(pool_export(p) == 0);
	}
	CHECK(verify_pool(&d[0], 1, &o, &m) == 0); /* the resilvered side alone */
out:
	model_fini(&m);
	mem_free(saved);
	for (int i = 0; i < 3; i++)
		blk_dev_close(d[i]);
	blk_dev_close(small);
}

/* A pool whose only log device is lost cannot be imported (the log may hold acknowledged
 * changes); replacing the log device with a blank one, discarding the lost one's records, brings
 * it back: every change of the last txg is there and the changes only the lost log held are not,
 * a check is clean, the new log replays what it logs after a crash, and the old log device, back,
 * is left out. */
static void test_vdev_lost_log(void)
{
	struct blk_dev *d = mem_dev(48 * MIB), *l = mem_dev(8 * MIB), *l2 = mem_dev(8 * MIB);
	struct blk_dev *small = mem_dev(4 * MIB);
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = "ll", .pc_opts = &o};
	struct model m, synced;
	model_init(&m, 300);
	model_init(&synced, 300);
	char err[1024], lname[24], dname[24];
	struct pool *p;
	CHECK(pool_create_on_devs(&a, &d, 1, &l, 1, &p) == 0);
	if (!p)
		goto out;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(workload(kv, &m, 300, 0, false, 61) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	memcpy(synced.m_ver, m.m_ver, 300 * sizeof(unsigned));
	CHECK(workload(kv, &m, 200, 0, true, 62) == 0); /* acknowledged, in the log only */
	kv_close(kv);
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	snprintf(lname, sizeof(lname), "%" PRIu64, st->ps_log.sv_children[0].sl_guid);
	snprintf(dname, sizeof(dname), "%" PRIu64, st->ps_tops[0].sv_children[0].sl_guid);
	mem_free(st);
	pool_close(p); /* a crash */
	/* the log device is lost */
	CHECK(pool_import_devs(&d, 1, &o, &p) == -ENXIO);
	CHECK(pool_vdev_replace_lost_log(&d, 1, dname, l2, false, err, sizeof(err)) == -EINVAL);
	CHECK(pool_vdev_replace_lost_log(&d, 1, lname, small, false, err, sizeof(err)) == -EINVAL);
	CHECK(pool_vdev_replace_lost_log((struct blk_dev *[]){d, l}, 2, lname, l2, false, err,
	                                 sizeof(err)) == -EBUSY);
	CHECK(pool_vdev_replace_lost_log(&d, 1, lname, l2, false, err, sizeof(err)) == 0);
	struct blk_dev *now[2] = {d, l2};
	CHECK(pool_import_devs(now, 2, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &synced, NULL) == 0); /* the lost log's changes are not there */
	CHECK(workload(kv, &synced, 200, 0, true, 63) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	pool_close(p); /* a crash: the new log holds the last changes */
	CHECK(pool_import_devs(now, 2, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &synced, NULL) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
	/* the old log device back: not the pool's any more */
	CHECK(pool_import_devs((struct blk_dev *[]){d, l2, l}, 3, &o, &p) == 0);
	if (p) {
		st = mem_alloc(sizeof(*st));
		pool_status(p, st);
		CHECK(st->ps_has_log && st->ps_log.sv_nchildren == 1 &&
		      st->ps_log.sv_children[0].sl_present && st->ps_state == POOL_STATE_ONLINE);
		mem_free(st);
		CHECK(pool_export(p) == 0);
	}
out:
	model_fini(&m);
	model_fini(&synced);
	blk_dev_close(d);
	blk_dev_close(l);
	blk_dev_close(l2);
	blk_dev_close(small);
}

/* Adding a top-level vdev (zpool add): the pool grows by the new vdev's space and writes onto
 * it; the new leaf carries the configuration first, so an add cut short after its labels imports
 * whole; without the new vdev the pool does not import; a vdev whose redundancy differs from the
 * pool's is refused unless forced, as is one too small or one of the pool's own leaves. */
static void test_vdev_add(void)
{
	const uint64_t size = 48 * MIB;
	struct blk_dev *d[4] = {mem_dev(size), mem_dev(size), mem_dev(size), mem_dev(size)};
	struct blk_dev *tiny = mem_dev(16 * MIB);
	uint8_t *saved = mem_alloc(4 * LABEL_HEADER_BYTES);
	struct pool_open_opts o = opts_kv();
	struct model m;
	char err[1024];
	struct kv *kv = NULL;
	struct pool *p = kv_pool("grow", d[0], &o, &m, 600, 71);
	if (!p || !saved)
		goto out;
	uint64_t total0 = 0, free0 = 0;
	pool_space(p, &total0, &free0, NULL);
	CHECK(pool_export(p) == 0);
	/* refusals */
	CHECK(pool_vdev_add(d, 1, &o, &tiny, 1, false, err, sizeof(err)) == -EINVAL);
	CHECK(pool_vdev_add(d, 1, &o, &d[2], 2, false, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "redundancy") != NULL);
	CHECK(pool_vdev_add(d, 1, &o, &d[0], 1, false, err, sizeof(err)) == -EEXIST);
	/* add d1, as if cut short after its labels: d0 keeps its old ones */
	label_headers(d[0], size, saved, true);
	CHECK(pool_vdev_add(d, 1, &o, &d[1], 1, false, err, sizeof(err)) == 0);
	label_headers(d[0], size, saved, false);
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (!p)
		goto out;
	uint64_t total1 = 0, free1 = 0;
	pool_space(p, &total1, &free1, NULL);
	CHECK(total1 > total0 + 40 * MIB && free1 > free0 + 40 * MIB);
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	CHECK(workload(kv, &m, 1500, 300, true, 72) == 0);
	kv_close(kv);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	CHECK(st->ps_ntops == 2 && !st->ps_tops[1].sv_mirror &&
	      st->ps_tops[1].sv_children[0].sl_stats.vs_writes > 0); /* written onto */
	mem_free(st);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
	/* the new vdev is a part of the pool now: not without it */
	CHECK(pool_import_devs(d, 1, &o, &p) == -ENXIO);
	CHECK(verify_pool(d, 2, &o, &m) == 0);
	/* a mirror beside plain disks only with force */
	CHECK(pool_vdev_add(d, 2, &o, &d[2], 2, true, err, sizeof(err)) == 0);
	CHECK(pool_import_devs(d, 4, &o, &p) == 0);
	if (p) {
		st = mem_alloc(sizeof(*st));
		pool_status(p, st);
		CHECK(st->ps_ntops == 3 && st->ps_tops[2].sv_mirror &&
		      st->ps_tops[2].sv_nchildren == 2 && st->ps_state == POOL_STATE_ONLINE);
		mem_free(st);
		CHECK(pool_export(p) == 0);
	}
	CHECK(verify_pool(d, 4, &o, &m) == 0);
out:
	model_fini(&m);
	mem_free(saved);
	for (int i = 0; i < 4; i++)
		blk_dev_close(d[i]);
	blk_dev_close(tiny);
}

static int list_info(void *arg, const struct pool_ds_info *info)
{
	if (strcmp(info->di_name, "kv") == 0)
		*(struct pool_ds_info *)arg = *info;
	return 0;
}

static int used_of(void *arg, const struct pool_ds_info *info)
{
	if (strcmp(info->di_name, "kv") == 0)
		*(uint64_t *)arg = info->di_used_bytes;
	return 0;
}

/* The "kv" dataset's used bytes after a txg. */
static uint64_t kv_used(struct pool *p)
{
	uint64_t used = 0;
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_ds_list(p, used_of, &used) == 0);
	return used;
}

/* Changing a dataset's compression (zfs set compression): blocks written afterwards take the new
 * one (a compressible value costs its full size uncompressed, a fraction under zstd), the ones
 * written before stay readable, and the setting survives export and import. */
static void test_ds_set_compress(void)
{
	struct blk_dev *d = mem_dev(48 * MIB);
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = "comp", .pc_opts = &o};
	struct pool *p = NULL;
	CHECK(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	if (!p)
		goto out;
	struct pool_ds_props off = {.dp_compress = POOL_COMPRESS_OFF};
	CHECK(pool_ds_create(p, "kv", &off) == 0);
	static uint8_t val[64 * 1024], got[64 * 1024];
	memset(val, 'z', sizeof(val));
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	uint64_t u0 = kv_used(p);
	CHECK(kv_exec(kv, KV_OP_PUT, "a", 1, val, sizeof(val), NULL, 0, NULL, NULL, NULL) == 0);
	uint64_t u1 = kv_used(p);
	CHECK(pool_ds_set_compress(p, "kv", POOL_COMPRESS_ZSTD) == 0);
	CHECK(pool_ds_set_compress(p, "kv", POOL_COMPRESS_DEFAULT) == -EINVAL);
	CHECK(pool_ds_set_compress(p, "nope", POOL_COMPRESS_LZ4) == -ENOENT);
	CHECK(kv_exec(kv, KV_OP_PUT, "b", 1, val, sizeof(val), NULL, 0, NULL, NULL, NULL) == 0);
	uint64_t u2 = kv_used(p);
	/* b's 64 KiB would have added as much uncompressed; the tree's node, rewritten, now shrinks
	 * too (it is compressed as the dataset's blocks are) */
	CHECKF(u1 - u0 >= sizeof(val) && u2 < u1 + sizeof(val) / 4,
	       "used %" PRIu64 " -> %" PRIu64 " -> %" PRIu64, u0, u1, u2);
	uint32_t len = 0;
	CHECK(kv_exec(kv, KV_OP_GET, "a", 1, NULL, 0, got, sizeof(got), &len, NULL, NULL) == 0 &&
	      len == sizeof(val) && memcmp(got, val, len) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	struct pool_ds_info info;
	memset(&info, 0, sizeof(info));
	CHECK(pool_ds_list(p, list_info, &info) == 0 && info.di_compress == BLK_COMPRESS_ZSTD);
	CHECK(pool_export(p) == 0);
out:
	blk_dev_close(d);
}

/* Renaming a dataset (zfs rename): its contents under the new name, the old name free for a new
 * dataset, durable across export and import; refused for an open dataset, a taken name, a
 * missing dataset or a bad name. */
static void test_ds_rename(void)
{
	struct blk_dev *d = mem_dev(48 * MIB);
	struct pool_open_opts o = opts_kv();
	struct model m;
	struct pool *p = kv_pool("ren", d, &o, &m, 400, 91);
	struct kv *kv = NULL;
	if (!p)
		goto out;
	CHECK(pool_ds_rename(p, "kv", "kv2") == 0);
	CHECK(kv_open(p, "kv", &kv) == -ENOENT);
	CHECK(kv_open(p, "kv2", &kv) == 0);
	if (kv) {
		CHECK(verify_model(kv, &m, NULL) == 0);
		CHECK(pool_ds_rename(p, "kv2", "kv3") == -EBUSY); /* open */
		kv_close(kv);
	}
	CHECK(pool_ds_create(p, "other", NULL) == 0);
	CHECK(pool_ds_rename(p, "kv2", "other") == -EEXIST);
	CHECK(pool_ds_rename(p, "nope", "x") == -ENOENT);
	CHECK(pool_ds_rename(p, "kv2", "bad name") == -EINVAL);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv2", &kv) == 0);
	if (kv) {
		CHECK(verify_model(kv, &m, NULL) == 0);
		kv_close(kv);
	}
	CHECK(pool_ds_create(p, "kv", NULL) == 0); /* the old name is free */
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
out:
	model_fini(&m);
	blk_dev_close(d);
}

/* An unmirrored block that fails its checksum: -EIO for its key alone, the pool keeps working. */
static void test_bad_block(void)
{
	struct blk_dev *d = mem_dev(48 * MIB);
	struct pool_open_opts o = opts_kv();
	struct kv *kv;
	struct pool *p = new_kv_pool("bad", d, &o, &kv);
	if (!p)
		return;
	struct model m;
	model_init(&m, 100);
	CHECK(workload(kv, &m, 300, 0, false, 51) == 0);
	/* a key with its value in a data block */
	unsigned victim = UINT32_MAX;
	for (unsigned k = 0; k < m.m_nkeys && victim == UINT32_MAX; k++)
		if (m.m_ver[k] && val_len(k, m.m_ver[k]) > KV_INLINE_MAX)
			victim = k;
	CHECK(victim != UINT32_MAX);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p || victim == UINT32_MAX)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	char key[KV_KEY_MAX];
	uint32_t klen = key_make(key, victim);
	uint8_t ent[256];
	uint32_t elen = 0;
	struct blk_ptr bp, missing;
	uint32_t blen;
	int rc;
	do {
		pool_lock(p);
		rc = btree_lookup(pool_ds_tree(kv->kv_ds), key, klen, ent, sizeof(ent), &elen,
		                  &missing);
		pool_unlock(p);
	} while (rc == -SH_ENEEDBLOCK && pool_block_read_sync(p, &missing) == 0);
	CHECK(rc == 0 && kv_entry_block(ent, elen, &bp, &blen) == 0);
	/* not in the cache yet (a fresh import): damage it on the leaf */
	blk_dev_mem_bytes(d)[bp.bp_offset + 100] ^= 0xff;
	CHECK(verify_key(kv, victim, m.m_ver[victim], NULL) == -EIO);
	CHECK(verify_key(kv, victim, m.m_ver[victim], NULL) == -EIO); /* every time */
	m.m_ver[victim] = 0;
	for (unsigned k = 0; k < m.m_nkeys; k++) {
		if (k != victim) {
			int r = verify_key(kv, k, m.m_ver[k], NULL);
			CHECKF(r == 0, "key %u: %d", k, r);
		}
	}
	kv_close(kv);
	CHECK(check_pool(p) == 1); /* the bad block */
	/* the pool keeps working; replacing the value frees the bad block */
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(put_kv(kv, victim, 7, true, NULL) == 0);
	m.m_ver[victim] = 7;
	CHECK(workload(kv, &m, 200, 50, true, 52) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
out:
	model_fini(&m);
	blk_dev_close(d);
}

/* A full pool refuses new data with ENOSPC, still removes and commits, stays consistent and
 * usable. */
static void test_full_pool(void)
{
	struct blk_dev *d = mem_dev(32 * MIB);
	struct pool_open_opts o = opts_kv();
	struct kv *kv;
	struct pool *p = new_kv_pool("full", d, &o, &kv);
	if (!p)
		return;
	kv->kv_check_space = true;
	static uint8_t big[60000];
	unsigned n = 0;
	int rc = 0;
	uint64_t lsn = 0;
	for (; n < 2000; n++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, n);
		val_fill(big, n, 1, sizeof(big));
		rc = kv_exec(kv, KV_OP_PUT, key, klen, big, sizeof(big), NULL, 0, NULL, &lsn, NULL);
		if (rc != 0)
			break;
		if (n % 32 == 31)
			pool_txg_request_sync(p);
	}
	CHECKF(rc == -ENOSPC && n > 50, "stopped after %u puts: %s", n, sh_strerror(rc));
	CHECK(kv_commit(kv, lsn) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	uint64_t total, free_b, avail;
	pool_space(p, &total, &free_b, &avail);
	CHECKF(avail < 2 * sizeof(big) + 2 * MIB, "avail %" PRIu64 " of %" PRIu64, avail, total);
	/* removes work and commit */
	for (unsigned k = 0; k < n; k += 2) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, k);
		CHECK(kv_exec(kv, KV_OP_DEL, key, klen, NULL, 0, NULL, 0, NULL, &lsn, NULL) == 0);
	}
	CHECK(kv_commit(kv, lsn) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(!pool_is_suspended(p));
	kv_close(kv);
	CHECK(check_pool(p) == 0);
	/* and there is room again */
	CHECK(kv_open(p, "kv", &kv) == 0);
	kv->kv_check_space = true;
	for (unsigned k = 0; k < 10; k++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, k * 2);
		val_fill(big, k * 2, 2, sizeof(big));
		CHECK(kv_exec(kv, KV_OP_PUT, key, klen, big, sizeof(big), NULL, 0, NULL, &lsn,
		              NULL) == 0);
	}
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (p) {
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	blk_dev_close(d);
}

/* Dirty data above twice the limit defers the caller until a txg is written. */
static void test_throttle(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_kv();
	o.po_dirty_max_bytes = 256 * 1024;
	struct kv *kv;
	struct pool *p = new_kv_pool("thr", d, &o, &kv);
	if (!p)
		return;
	struct kv_wait w;
	kv_wait_init(&w);
	w.kw_pw.pw_done = kv_throttle_cb;
	static uint8_t big[40000];
	uint64_t synced = pool_synced_txg(p);
	bool throttled = false;
	unsigned puts = 0;
	/* in one locked section the sync thread cannot run: dirty data only grows */
	pool_lock(p);
	for (unsigned i = 0; i < 100 && !throttled; i++) {
		int rc = pool_tx_throttle(p, &w.kw_pw);
		if (rc == POOL_THROTTLED) {
			throttled = true;
			break;
		}
		CHECK(rc == 0);
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, i);
		val_fill(big, i, 1, sizeof(big));
		CHECK(kv_put(kv, key, klen, big, sizeof(big), NULL) == 0);
		puts++;
	}
	uint64_t dirty = pool_dirty_bytes(p);
	pool_unlock(p);
	CHECK(throttled);
	CHECKF(dirty > 2 * o.po_dirty_max_bytes && puts >= 12, "dirty %" PRIu64 " after %u puts",
	       dirty, puts);
	CHECK(kv_wait_for(&w) == 0); /* released after the next txg */
	CHECK(pool_synced_txg(p) > synced);
	/* the history: that txg was the dirty limit's, and carried the puts; its phases add up */
	struct pool_txg_stat *hist = mem_alloc(POOL_TXG_HISTORY * sizeof(*hist));
	unsigned nh = hist ? pool_txg_history(p, hist) : 0;
	const struct pool_txg_stat *by_dirty = NULL;
	for (unsigned i = 0; i < nh; i++) {
		CHECK(i == 0 || hist[i].ts_txg == hist[i - 1].ts_txg + 1);
		if (hist[i].ts_txg > synced && hist[i].ts_cause == POOL_TXG_DIRTY && !by_dirty)
			by_dirty = &hist[i];
	}
	CHECKF(by_dirty != NULL, "%u txgs in the history, none of the dirty limit's", nh);
	if (by_dirty) {
		const struct pool_txg_stat *ts = by_dirty;
		CHECKF(ts->ts_dirty_bytes > 2 * o.po_dirty_max_bytes &&
		           ts->ts_written_bytes >= (uint64_t)puts * sizeof(big) && ts->ts_blocks >= puts,
		       "dirty %" PRIu64 ", written %" PRIu64 " in %" PRIu64 " blocks", ts->ts_dirty_bytes,
		       ts->ts_written_bytes, ts->ts_blocks);
		CHECK(ts->ts_build_us > 0 && ts->ts_write_us > 0 && ts->ts_commit_us > 0);
		CHECK(ts->ts_total_us >= ts->ts_seal_us + ts->ts_build_us + ts->ts_write_us +
		                             ts->ts_flush_us + ts->ts_commit_us);
	}
	pool_lock(p);
	dirty = pool_dirty_bytes(p);
	int rc = pool_tx_throttle(p, &w.kw_pw);
	pool_unlock(p);
	CHECKF(dirty <= o.po_dirty_max_bytes, "dirty %" PRIu64 " after the txg", dirty);
	CHECK(rc == 0);
	/* a txg a caller waits for, below the limit, is the waiter's */
	{
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, 999);
		pool_lock(p);
		CHECK(kv_put(kv, key, klen, "x", 1, NULL) == 0);
		pool_unlock(p);
		CHECK(pool_txg_wait_synced(p, 0) == 0);
		nh = hist ? pool_txg_history(p, hist) : 0;
		CHECK(nh > 0 && hist[nh - 1].ts_txg == pool_synced_txg(p) &&
		      hist[nh - 1].ts_cause == POOL_TXG_WAITER && hist[nh - 1].ts_blocks > 0);
	}
	mem_free(hist);
	/* the driver's own loop: many puts, throttled and released along the way */
	struct kv_stats ks = {0};
	for (unsigned i = 0; i < 120; i++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, 1000 + i);
		val_fill(big, i, 3, sizeof(big));
		CHECK(kv_exec(kv, KV_OP_PUT, key, klen, big, sizeof(big), NULL, 0, NULL, NULL,
		              &ks) == 0);
	}
	pool_lock(p);
	dirty = pool_dirty_bytes(p);
	pool_unlock(p);
	CHECKF(dirty <= 2 * o.po_dirty_max_bytes + sizeof(big) + 64 * 1024, "dirty %" PRIu64,
	       dirty);
	kv_wait_fini(&w);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
}

/* A txg starts at a quarter of the dirty limit (po_dirty_sync_bytes), below the limit, once the
 * sync thread has been idle as long as its last txg took (before that, only at the
 * limit); the interval is 60 s, so only the dirty bytes can start it. */
static void test_dirty_sync(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_kv();
	o.po_dirty_max_bytes = 8 * MIB;
	struct kv *kv;
	struct pool *p = new_kv_pool("dsync", d, &o, &kv);
	if (!p)
		return;
	uint64_t sync_at = p->p_opts.po_dirty_sync_bytes;
	CHECKF(sync_at == o.po_dirty_max_bytes / POOL_DIRTY_SYNC_DIVISOR, "%" PRIu64, sync_at);
	static uint8_t val[8000];
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	uint64_t before = pool_synced_txg(p);
	pool_lock(p);
	for (unsigned i = 0; i < 1000 && pool_dirty_bytes(p) < sync_at; i++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_make(key, i);
		val_fill(val, i, 5, sizeof(val));
		CHECK(kv_put(kv, key, klen, val, sizeof(val), NULL) == 0);
	}
	uint64_t at = pool_dirty_bytes(p);
	CHECK(pool_synced_txg(p) == before);
	/* the last txg took long and ended just now: not yet */
	p->p_sync_ended_ns = clock_monotonic_ns();
	p->p_sync_took_ns = 60000000000ull;
	CHECK(pool_tx_throttle(p, NULL) == 0);
	pthread_mutex_lock(&p->p_state_lock);
	bool requested = p->p_sync_requested > p->p_synced_txg;
	pthread_mutex_unlock(&p->p_state_lock);
	CHECK(!requested);
	/* idle as long as it took: now */
	p->p_sync_took_ns = 0;
	CHECK(pool_tx_throttle(p, NULL) == 0);
	pool_unlock(p);
	CHECKF(at >= sync_at && at < o.po_dirty_max_bytes, "dirty %" PRIu64, at);
	for (int t = 0; t < 500 && pool_synced_txg(p) == before; t++)
		usleep(10000);
	struct pool_txg_stat *hist = mem_alloc(POOL_TXG_HISTORY * sizeof(*hist));
	unsigned nh = hist ? pool_txg_history(p, hist) : 0;
	CHECK(nh > 0 && hist[nh - 1].ts_txg == before + 1 &&
	      hist[nh - 1].ts_cause == POOL_TXG_DIRTY && hist[nh - 1].ts_dirty_bytes >= sync_at);
	mem_free(hist);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
}

/* Memory outside the cache, as the pool declares it to the ARC (pool.c's memory model). */
static uint64_t mem_outside_arc(struct pool *p)
{
	return pool_dirty_bytes(p) + p->p_sync_bytes + ilog_buffer_bytes(p->p_log);
}

/* The memory model: the dirty limit is derived from the ARC's limit, and cached blocks plus dirty
 * data, the syncing txg's buffers and the log's stay within that limit while a writer goes far
 * beyond it; the writer is throttled, never failed, and every value it wrote reads back. */
struct mem_sample {
	uint64_t ms_max_total, ms_max_outside, ms_min_target;
	unsigned ms_count;
};

/* Under the lock (the sync thread is not in phase 1: the state is stable). */
static void mem_sample_take(struct pool *p, struct mem_sample *ms)
{
	struct arc_stats as;
	arc_stats(p->p_arc, &as);
	uint64_t outside = mem_outside_arc(p);
	ms->ms_max_total = SH_MAX(ms->ms_max_total, as.as_size_bytes + outside);
	ms->ms_max_outside = SH_MAX(ms->ms_max_outside, outside);
	ms->ms_min_target = SH_MIN(ms->ms_min_target, as.as_target_bytes);
	ms->ms_count++;
}

static void test_memory_bound(void)
{
	/* Large enough that the log's few idle 1 MiB buffers fit in its share (pool.c). */
	const uint64_t c = 64 * MIB;
	struct blk_dev *d = mem_dev(384 * MIB);
	struct pool_open_opts o = opts_kv();
	o.po_arc_max_bytes = c;
	struct kv *kv;
	struct pool *p = new_kv_pool("mem", d, &o, &kv);
	if (!p)
		return;
	CHECK(p->p_opts.po_dirty_max_bytes == c / POOL_DIRTY_ARC_DIVISOR);
	static uint8_t big[40000], got[40000];
	const unsigned nkeys = 2000; /* 80 MB of values: more than the limit */
	struct kv_stats ks = {0};
	struct mem_sample ms = {.ms_min_target = UINT64_MAX};
	uint64_t lsn = 0;
	char key[KV_KEY_MAX];
	uint32_t klen, len;
	/* Pass 1: logged puts, each in its own locked section, racing the sync thread. */
	for (unsigned k = 0; k < nkeys; k++) {
		klen = key_make(key, k);
		val_fill(big, k, 1, sizeof(big));
		int rc =
		    kv_exec(kv, KV_OP_PUT, key, klen, big, sizeof(big), NULL, 0, NULL, &lsn, &ks);
		CHECKF(rc == 0, "put %u: %s", k, sh_strerror(rc));
		if (rc != 0)
			break;
		pool_lock(p);
		mem_sample_take(p, &ms);
		pool_unlock(p);
	}
	CHECK(kv_commit(kv, lsn) == 0);
	/* Reading every value fills the cache with clean blocks. */
	for (unsigned k = 0; k < nkeys; k++) {
		klen = key_make(key, k);
		CHECK(kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, got, sizeof(got), &len, NULL,
		              &ks) == 0);
	}
	struct arc_stats as;
	arc_stats(p->p_arc, &as);
	CHECKF(as.as_size_bytes >= c / 2, "the reads left %" PRIu64 " cached", as.as_size_bytes);
	/* Pass 2: as many new keys (after the others: their tree path stays dirty, in memory) in
	 * one locked section, which the sync thread cannot enter, so dirty data pile up until the
	 * throttle defers the writer; it then lets go of the lock until its callback (after the
	 * next txg) and carries on. */
	struct kv_wait w;
	kv_wait_init(&w);
	w.kw_pw.pw_done = kv_throttle_cb;
	unsigned throttled = 0;
	pool_lock(p);
	for (unsigned k = 0; k < nkeys;) {
		int rc = pool_tx_throttle(p, &w.kw_pw);
		if (rc == POOL_THROTTLED) {
			throttled++;
			pool_unlock(p);
			CHECK(kv_wait_for(&w) == 0);
			pool_lock(p);
			continue;
		}
		CHECK(rc == 0);
		klen = key_make(key, nkeys + k);
		val_fill(big, nkeys + k, 2, sizeof(big));
		struct blk_ptr missing;
		rc = kv_put(kv, key, klen, big, sizeof(big), &missing);
		/* A node the shrunken cache let go: the driver loads it. */
		if (rc == -SH_ENEEDBLOCK) {
			pool_unlock(p);
			rc = kv_exec(kv, KV_OP_PUT, key, klen, big, sizeof(big), NULL, 0, NULL,
			             NULL, &ks);
			pool_lock(p);
		}
		CHECKF(rc == 0, "pass 2 put %u: %s", k, sh_strerror(rc));
		if (rc != 0)
			break;
		mem_sample_take(p, &ms);
		k++;
	}
	pool_unlock(p);
	kv_wait_fini(&w);
	printf("# %u puts: cached + outside at most %" PRIu64 " KiB of %" PRIu64
	       " KiB, outside at most %" PRIu64 " KiB, target down to %" PRIu64
	       " KiB, throttled %u times\n",
	       ms.ms_count, ms.ms_max_total >> 10, c >> 10, ms.ms_max_outside >> 10,
	       ms.ms_min_target >> 10, throttled);
	/* The bound holds up to what one put adds between two throttle checks (a value, the nodes
	 * it dirties, a new log block) and the reservation's rounding. */
	const uint64_t slack =
	    sizeof(big) + 4 * POOL_DS_NODE_BYTES + ILOG_BLOCK_MAX + ARC_RESERVE_QUANTUM;
	CHECKF(ms.ms_max_total <= c + slack, "cached + outside reached %" PRIu64 " of %" PRIu64,
	       ms.ms_max_total, c);
	/* The outside part stays within what the model gives it (4 D plus the log), below c / 2. */
	CHECKF(ms.ms_max_outside <= c / 2, "outside the cache: %" PRIu64, ms.ms_max_outside);
	/* The cache gave way to the dirty data instead of staying at its limit. */
	CHECKF(ms.ms_min_target < c - 8 * MIB, "the target never fell below %" PRIu64,
	       ms.ms_min_target);
	/* The writer went beyond the limit, was throttled, and completed. */
	CHECKF(throttled >= 5, "%u samples, throttled %u times", ms.ms_count, throttled);
	for (unsigned k = 0; k < 2 * nkeys; k += 7) {
		klen = key_make(key, k);
		val_fill(big, k, k < nkeys ? 1 : 2, sizeof(big));
		CHECK(kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, got, sizeof(got), &len, NULL,
		              &ks) == 0 &&
		      len == sizeof(big) && memcmp(got, big, len) == 0);
	}
	CHECK(arc_check(p->p_arc) == 0);
	kv_close(kv);
	CHECK(check_pool(p) == 0); /* (which records its outcome in a property: a change) */
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	/* Everything written: nothing is reserved for dirty or syncing data any more. */
	pool_lock(p);
	uint64_t left = pool_dirty_bytes(p) + p->p_sync_bytes;
	pool_unlock(p);
	CHECK(left == 0);
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
}

/* A cache far smaller than the trees: misses are loaded asynchronously and retried. */
static void test_small_arc(void)
{
	struct blk_dev *d = mem_dev(64 * MIB);
	struct pool_open_opts o = opts_kv();
	struct kv *kv;
	struct pool *p = new_kv_pool("arc", d, &o, &kv);
	if (!p)
		return;
	struct model m;
	model_init(&m, 3000);
	CHECK(workload(kv, &m, 5000, 1000, false, 61) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	o.po_arc_max_bytes = 64 * 1024; /* four nodes */
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	struct kv_stats ks = {0};
	CHECK(verify_model(kv, &m, &ks) == 0);
	CHECK(workload(kv, &m, 1000, 250, false, 62) == 0);
	CHECK(verify_model(kv, &m, &ks) == 0);
	kv_close(kv);
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	CHECKF(ks.ks_loads > 100 && st->ps_arc.as_evictions > 100 && st->ps_arc.as_misses > 100,
	       "loads %" PRIu64 " evictions %" PRIu64, ks.ks_loads, st->ps_arc.as_evictions);
	CHECK(st->ps_arc.as_size_bytes <= 64 * 1024 + BLK_MAX_BLOCK_BYTES);
	mem_free(st);
	CHECK(check_pool(p) == 0);
	CHECK(pool_export(p) == 0);
out:
	model_fini(&m);
	blk_dev_close(d);
}

/* Imports that must be refused, and a degraded one. */
static void test_import_errors(void)
{
	struct blk_dev *blank = mem_dev(16 * MIB);
	struct pool_open_opts o = opts_kv();
	struct pool *p;
	CHECK(pool_import_devs(&blank, 1, &o, &p) == -ENOENT);
	struct blk_dev *s[2] = {mem_dev(16 * MIB), mem_dev(16 * MIB)};
	struct pool_create_args a = {.pc_name = "s", .pc_opts = &o};
	CHECK(pool_create_on_devs(&a, s, 2, NULL, 0, &p) == 0);
	if (p)
		CHECK(pool_export(p) == 0);
	struct blk_dev *m[3] = {mem_dev(16 * MIB), mem_dev(16 * MIB), mem_dev(8 * MIB)};
	struct pool_create_args b = {
	    .pc_name = "m", .pc_layout = POOL_LAYOUT_MIRROR, .pc_opts = &o};
	CHECK(pool_create_on_devs(&b, m, 2, m + 2, 1, &p) == 0);
	if (p)
		CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(s, 1, &o, &p) == -ENXIO); /* a stripe without a top-level vdev */
	CHECK(pool_import_devs(m, 2, &o, &p) == -ENXIO); /* without its log */
	CHECK(pool_import_devs((struct blk_dev *[]){s[0], m[0]}, 2, &o, &p) ==
	      -EINVAL);                                                            /* two pools */
	CHECK(pool_import_devs((struct blk_dev *[]){m[1], m[2]}, 2, &o, &p) == 0); /* degraded */
	if (p) {
		struct pool_status *st = mem_alloc(sizeof(*st));
		pool_status(p, st);
		CHECK(st->ps_state == POOL_STATE_DEGRADED);
		CHECK(st->ps_ntops == 1 && st->ps_tops[0].sv_mirror &&
		      !st->ps_tops[0].sv_children[0].sl_present &&
		      st->ps_tops[0].sv_children[1].sl_present && st->ps_has_log);
		mem_free(st);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	CHECK(pool_import_devs(m, 3, &o, &p) == 0);
	if (p)
		CHECK(pool_export(p) == 0);
	/* bad arguments */
	struct pool_create_args c = {.pc_name = "bad name", .pc_opts = &o};
	CHECK(pool_create_on_devs(&c, s, 2, NULL, 0, &p) == -EINVAL);
	struct pool_create_args e = {
	    .pc_name = "odd", .pc_layout = POOL_LAYOUT_MIRROR, .pc_mirror_width = 2, .pc_opts = &o};
	CHECK(pool_create_on_devs(&e, m, 3, NULL, 0, &p) == -EINVAL);
	blk_dev_close(blank);
	for (int i = 0; i < 2; i++)
		blk_dev_close(s[i]);
	for (int i = 0; i < 3; i++)
		blk_dev_close(m[i]);
}

/* A txg that cannot be written suspends the pool: changes get -EIO, reads work, and the pool
 * imports afterwards with every committed change. */
static void test_suspend(void)
{
	struct blk_dev *d = mem_dev(48 * MIB), *l = mem_dev(8 * MIB);
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = "susp", .pc_opts = &o};
	struct pool *p;
	CHECK(pool_create_on_devs(&a, &d, 1, &l, 1, &p) == 0);
	if (!p)
		return;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	struct model m;
	model_init(&m, 100);
	CHECK(workload(kv, &m, 300, 100, true, 71) == 0);
	/* No txg may be in flight when the disk starts failing, or it (not the one below) is what
	 * suspends the pool, before the put this test expects to succeed in memory. */
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	/* the data leaf fails every write: the next txg, which has blocks to write, cannot be
	 * written (its uberblock alone would still reach the log leaf) */
	blk_dev_inject_errors(d, 0, 1000000);
	unsigned old2 = m.m_ver[2];
	CHECK(put_kv(kv, 2, 9, false, NULL) == 0); /* in memory only: not logged */
	m.m_ver[2] = 9;
	CHECK(pool_txg_wait_synced(p, 0) == -EIO);
	CHECK(pool_is_suspended(p));
	CHECK(put_kv(kv, 1, 5, true, NULL) == -EIO);
	CHECK(verify_model(kv, &m, NULL) == 0); /* reads keep working */
	m.m_ver[2] = old2;                      /* what import will find */
	char out[4096];
	FILE *f = fmemopen(out, sizeof(out), "w");
	CHECK(pool_status_print(p, f) == 0);
	fclose(f);
	CHECK(strstr(out, "SUSPENDED") != NULL);
	kv_close(kv);
	CHECK(pool_export(p) == -EIO);
	blk_dev_inject_errors(d, 0, 0);
	CHECK(pool_import_devs((struct blk_dev *[]){d, l}, 2, &o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "kv", &kv) == 0);
		CHECK(verify_model(kv, &m, NULL) == 0);
		kv_close(kv);
		CHECK(check_pool(p) == 0);
		CHECK(pool_export(p) == 0);
	}
	model_fini(&m);
	blk_dev_close(d);
	blk_dev_close(l);
}

static void test_props_and_status(void)
{
	struct blk_dev *d[3] = {mem_dev(32 * MIB), mem_dev(32 * MIB), mem_dev(8 * MIB)};
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {
	    .pc_name = "st", .pc_layout = POOL_LAYOUT_MIRROR, .pc_opts = &o};
	struct pool *p;
	CHECK(pool_create_on_devs(&a, d, 2, d + 2, 1, &p) == 0);
	if (!p)
		return;
	char buf[64];
	CHECK(pool_prop_get(p, "comment", buf, sizeof(buf)) == -ENOENT);
	CHECK(pool_prop_set(p, "comment", "the test pool") == 0);
	CHECK(pool_prop_set(p, "Bad", "x") == -EINVAL);
	CHECK(pool_prop_get(p, "comment", buf, sizeof(buf)) == 0 &&
	      strcmp(buf, "the test pool") == 0);
	CHECK(pool_prop_get(p, "comment", buf, 4) == -EOVERFLOW);
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	struct kv *kv = NULL;
	CHECK(kv_open(p, "kv", &kv) == 0);
	struct model m;
	model_init(&m, 100);
	CHECK(workload(kv, &m, 300, 100, true, 81) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(d, 3, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(pool_prop_get(p, "comment", buf, sizeof(buf)) == 0 &&
	      strcmp(buf, "the test pool") == 0);
	CHECK(pool_prop_set(p, "comment", NULL) == 0);
	CHECK(pool_prop_get(p, "comment", buf, sizeof(buf)) == -ENOENT);
	CHECK(kv_open(p, "kv", &kv) == 0);
	CHECK(verify_model(kv, &m, NULL) == 0);
	kv_close(kv);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	CHECK(pool_status_print(p, f) == 0);
	fclose(f);
	printf("%s", ""); /* the report, indented as TAP comments: */
	for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		printf("#   | %.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
	}
	CHECK(strstr(out, "pool: st") && strstr(out, "state: ONLINE") && strstr(out, "mirror-0") &&
	      strstr(out, "logs") && strstr(out, "space:") && strstr(out, "arc:") &&
	      strstr(out, "log:") && strstr(out, "datasets: 1") &&
	      strstr(out, "No known data errors"));
	CHECK(strstr(out, "scan:") == NULL); /* never checked */
	free(out);
	/* a check records its outcome (zpool status's scan line) */
	CHECK(check_pool(p) == 0);
	char last[POOL_PROP_VALUE_MAX + 1];
	CHECK(pool_prop_get(p, "last_check", last, sizeof(last)) == 0 && strstr(last, " UTC, ") &&
	      strstr(last, "0 copies repaired") && strstr(last, ", 0 problems"));
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(p, st);
	CHECK(st->ps_state == POOL_STATE_ONLINE && st->ps_ntops == 1 &&
	      st->ps_tops[0].sv_nchildren == 2);
	CHECK(st->ps_arc.as_hits + st->ps_arc.as_misses > 0);
	CHECK(st->ps_total_bytes > st->ps_avail_bytes && st->ps_free_bytes >= st->ps_avail_bytes);
	CHECK(st->ps_nloaded == 1 && strcmp(st->ps_loaded[0].sd_name, "kv") == 0);
	mem_free(st);
	/* The live status socket: served, refused to a second server while the first answers,
	 * gone after stop; a directory whose path does not fit a socket address is refused. */
	char dir[] = "/tmp/shale-statsock.XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	struct pool_statsock *ss = NULL, *ss2 = NULL;
	CHECK(pool_status_serve_start(p, dir, &ss) == 0 && ss != NULL);
	CHECK(pool_status_serve_start(p, dir, &ss2) == -EADDRINUSE && ss2 == NULL);
	out = NULL;
	len = 0;
	f = open_memstream(&out, &len);
	CHECK(pool_status_remote(dir, "st", f) == 0);
	fclose(f);
	CHECK(out && strstr(out, "(live: from the process serving the pool") &&
	      strstr(out, "pool: st") && strstr(out, "datasets: 1 (1 in memory)") &&
	      strstr(out, "  scan: last check "));
	free(out);
	pool_status_serve_stop(ss);
	f = fopen("/dev/null", "w");
	CHECK(pool_status_remote(dir, "st", f) == -ENOENT);
	fclose(f);
	CHECK(rmdir(dir) == 0); /* the socket file went with the stop */
	char longdir[200];
	memset(longdir, 'd', sizeof(longdir) - 1);
	longdir[sizeof(longdir) - 1] = '\0';
	CHECK(pool_status_serve_start(p, longdir, &ss) == -ENAMETOOLONG);
	CHECK(pool_export(p) == 0);
out:
	model_fini(&m);
	for (int i = 0; i < 3; i++)
		blk_dev_close(d[i]);
}

/* The block interface itself: hostile pointers are refused, loads report POOL_LOADED once the
 * block is cached, pool_block_read_sync and pool_block_get agree. */
static void load_cb(void *arg, int status)
{
	kv_wait_signal(arg, status);
}

static void test_block_api(void)
{
	struct blk_dev *d = mem_dev(32 * MIB);
	struct pool_open_opts o = opts_kv();
	struct kv *kv;
	struct pool *p = new_kv_pool("blk", d, &o, &kv);
	if (!p)
		return;
	CHECK(put_kv(kv, 1, 1, false, NULL) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (!p)
		goto out;
	CHECK(kv_open(p, "kv", &kv) == 0);
	/* the tree's root, not cached after the import */
	struct blk_ptr root = kv->kv_ds->ds_root;
	CHECK(!blk_ptr_is_hole(&root));
	struct blk_ptr bad = root;
	bad.bp_vdev = 7;
	const void *img;
	void *hold;
	CHECK(pool_block_get(p, &bad, &img, &hold) == -EIO);
	CHECK(pool_block_load(p, &bad, load_cb, NULL) == -EIO);
	bad = root;
	bad.bp_offset = 4096; /* inside the label area */
	CHECK(pool_block_get(p, &bad, &img, &hold) == -EIO);
	CHECK(pool_block_read_sync(p, &bad) == -EIO);
	struct blk_ptr hole = {0};
	CHECK(pool_block_get(p, &hole, &img, &hold) == -EIO);
	bad = root;
	bad.bp_cksum[0] ^= 1; /* a pointer whose checksum the block does not have */
	bad.bp_birth_txg += 1000;
	CHECK(pool_block_read_sync(p, &bad) == -EIO);
	struct kv_wait w;
	kv_wait_init(&w);
	int rc = pool_block_load(p, &root, load_cb, &w);
	CHECK(rc == 0 || rc == POOL_LOADED);
	if (rc == 0)
		CHECK(kv_wait_for(&w) == 0);
	CHECK(pool_block_load(p, &root, load_cb, &w) == POOL_LOADED);
	CHECK(pool_block_get(p, &root, &img, &hold) == 0);
	if (hold) {
		CHECK(memcmp(img, "SHBT", 4) == 0); /* a tree node's magic */
		pool_block_release(p, hold);
	}
	CHECK(pool_block_read_sync(p, &root) == 0);
	kv_wait_fini(&w);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
out:
	blk_dev_close(d);
}

/* pool_check finds what it exists to find: a leak, a double reference, a damaged tree node. */
static void test_check_finds_damage(void)
{
	struct blk_dev *d = mem_dev(32 * MIB);
	struct pool_open_opts o = opts_kv();
	struct kv *kv;
	struct pool *p = new_kv_pool("dmg", d, &o, &kv);
	if (!p)
		return;
	struct model m;
	model_init(&m, 200);
	CHECK(workload(kv, &m, 600, 0, false, 91) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(check_pool(p) == 0);
	/* a leak: space allocated that nothing references */
	uint32_t vdev;
	uint64_t off;
	pool_lock(p);
	CHECK(space_alloc(p->p_space, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, 8192, &vdev, &off) == 0);
	pool_unlock(p);
	CHECK(pool_check(p, NULL, NULL) == 1);
	pool_lock(p);
	CHECK(space_free(p->p_space, p->p_open_txg, vdev, off, 8192) == 0);
	pool_unlock(p);
	CHECK(pool_check(p, NULL, NULL) == 0);
	/* a double reference: one key's entry names another key's data block */
	unsigned k1 = UINT32_MAX, k2 = UINT32_MAX;
	for (unsigned k = 0; k < m.m_nkeys && k2 == UINT32_MAX; k++) {
		if (!m.m_ver[k] || val_len(k, m.m_ver[k]) <= KV_INLINE_MAX)
			continue;
		if (k1 == UINT32_MAX)
			k1 = k;
		else
			k2 = k;
	}
	CHECK(k1 != UINT32_MAX && k2 != UINT32_MAX);
	if (k1 != UINT32_MAX && k2 != UINT32_MAX) {
		char key1[KV_KEY_MAX], key2[KV_KEY_MAX];
		uint32_t kl1 = key_make(key1, k1), kl2 = key_make(key2, k2), l1 = 0, l2 = 0;
		uint8_t e1[128], e2[128];
		struct blk_ptr miss;
		int rc;
		do {
			pool_lock(p);
			rc = btree_lookup(pool_ds_tree(kv->kv_ds), key1, kl1, e1, sizeof(e1), &l1,
			                  &miss);
			if (rc == 0)
				rc = btree_lookup(pool_ds_tree(kv->kv_ds), key2, kl2, e2,
				                  sizeof(e2), &l2, &miss);
			if (rc == 0) {
				struct blk_ptr b2;
				uint32_t bl;
				CHECK(kv_entry_block(e2, l2, &b2, &bl) == 0);
				/* k1's block is now leaked and k2's named twice */
				rc = btree_put(pool_ds_tree(kv->kv_ds), key1, kl1, e2, l2,
				               BTREE_PUT_REPLACE, &miss);
			}
			pool_unlock(p);
		} while (rc == -SH_ENEEDBLOCK && pool_block_read_sync(p, &miss) == 0);
		CHECK(rc == 0);
		CHECK(pool_check(p, NULL, NULL) == 2); /* the double reference and the leak */
		/* undo */
		do {
			pool_lock(p);
			rc = btree_put(pool_ds_tree(kv->kv_ds), key1, kl1, e1, l1,
			               BTREE_PUT_REPLACE, &miss);
			pool_unlock(p);
		} while (rc == -SH_ENEEDBLOCK && pool_block_read_sync(p, &miss) == 0);
		CHECK(pool_check(p, NULL, NULL) == 0);
	}
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	/* a damaged tree node: its checksum fails, and so does its tree's check */
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "kv", &kv) == 0);
		struct blk_ptr root = kv->kv_ds->ds_root;
		kv_close(kv);
		blk_dev_mem_bytes(d)[root.bp_offset + 10] ^= 0x55;
		CHECK(pool_check(p, NULL, NULL) >= 2);
		blk_dev_mem_bytes(d)[root.bp_offset + 10] ^= 0x55;
		CHECK(pool_check(p, NULL, NULL) == 0);
		CHECK(pool_export(p) == 0);
	}
	model_fini(&m);
	blk_dev_close(d);
}

int main(void)
{
	log_set_level(
	    LOG_ERROR); /* the refused imports, damaged blocks and suspension below log errors */
	TAP_RUN(test_create_export_import_mem);
	TAP_RUN(test_replay_after_close);
	TAP_RUN(test_log_full);
	TAP_RUN(test_files);
	TAP_RUN(test_ds_destroy);
	TAP_RUN(test_ds_destroy_steps);
	TAP_RUN(test_mirror_repair);
	TAP_RUN(test_scrub_online);
	TAP_RUN(test_scrub_resilver);
	TAP_RUN(test_mirror_write_around);
	TAP_RUN(test_vdev_attach_detach);
	TAP_RUN(test_vdev_lost_log);
	TAP_RUN(test_vdev_add);
	TAP_RUN(test_ds_set_compress);
	TAP_RUN(test_ds_rename);
	TAP_RUN(test_bad_block);
	TAP_RUN(test_full_pool);
	TAP_RUN(test_throttle);
	TAP_RUN(test_dirty_sync);
	TAP_RUN(test_small_arc);
	TAP_RUN(test_memory_bound);
	TAP_RUN(test_import_errors);
	TAP_RUN(test_suspend);
	TAP_RUN(test_props_and_status);
	TAP_RUN(test_block_api);
	TAP_RUN(test_check_finds_damage);
	return tap_finish();
}
