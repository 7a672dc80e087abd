/* test_zpl.c: unit tests of the file-system object layer (src/zpl/zpl*): every operation with
 * its results, attributes, wcc data and errors, POSIX permissions, sparse and large files, dirty
 * data and zpl_sync, directories of 100,000 entries (1,000,000 with ZPL_TEST_BIG=1), forced hash
 * collisions, READDIR under concurrent change, log records replayed into a second dataset that
 * must come out identical, zpl_check on sound and damaged trees, hostile records and tree
 * contents, and zpl_diff over a tree whose entries no longer hang together.
 *
 * Blocks live in an in-memory store that can forget every image it holds (a cold cache): the
 * operation then misses and the test loads the named block and runs it again, exactly as the pool
 * will. Each such restart is checked to have changed nothing visible. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zpl/zpl.h"
#include "tap.h"

/* ---------------------------------------------------------------------------------------------
 * The block store: block id i is at byte offset i * 4096 of vdev 0. */

struct mblock {
	uint8_t *mb_img;
	uint32_t mb_len;
	uint32_t mb_holds;
	uint8_t mb_type; /* 1 tree node, 2 data block */
	bool mb_cached;
	bool mb_freed;
};

struct mstore {
	struct mblock *ms_blocks; /* index = id - 1 */
	size_t ms_n, ms_cap;
	uint64_t ms_txg;
	uint64_t ms_holds; /* holds outstanding */
	uint64_t ms_loads;
	uint64_t ms_data_writes;
	uint64_t ms_frees;
	uint64_t ms_data_frees;
	int ms_fail_writes; /* > 0: that many data writes fail with -ENOSPC */
	bool ms_bad;        /* a use of a freed block, a double free, an unknown pointer */
	char ms_why[160];
};

static void ms_bad(struct mstore *ms, const char *why, const struct blk_ptr *bp)
{
	if (!ms->ms_bad)
		snprintf(ms->ms_why, sizeof(ms->ms_why), "%s (offset %llu)", why,
		         (unsigned long long)bp->bp_offset);
	ms->ms_bad = true;
}

static struct mblock *ms_find(struct mstore *ms, const struct blk_ptr *bp)
{
	uint64_t id = bp->bp_offset / 4096;
	if (bp->bp_offset % 4096 != 0 || id == 0 || id > ms->ms_n)
		return NULL;
	return &ms->ms_blocks[id - 1];
}

static int ms_store(struct mstore *ms, const void *img, uint32_t len, uint8_t type,
                    struct blk_ptr *bp)
{
	if (ms->ms_n == ms->ms_cap) {
		size_t cap = ms->ms_cap ? ms->ms_cap * 2 : 1024;
		struct mblock *b = realloc(ms->ms_blocks, sizeof(*b) * cap);
		if (b == NULL)
			return -ENOMEM;
		ms->ms_blocks = b;
		ms->ms_cap = cap;
	}
	struct mblock *mb = &ms->ms_blocks[ms->ms_n++];
	memset(mb, 0, sizeof(*mb));
	mb->mb_img = malloc(len);
	if (mb->mb_img == NULL)
		return -ENOMEM;
	memcpy(mb->mb_img, img, len);
	mb->mb_len = len;
	mb->mb_type = type;
	mb->mb_cached = true;
	memset(bp, 0, sizeof(*bp));
	bp->bp_offset = (uint64_t)ms->ms_n * 4096;
	bp->bp_lsize = bp->bp_psize = len;
	bp->bp_asize = (len + 4095) / 4096 * 4096;
	bp->bp_compress = BLK_COMPRESS_OFF;
	bp->bp_checksum = BLK_CHECKSUM_XXH3_128;
	bp->bp_type = type;
	bp->bp_birth_txg = ms->ms_txg;
	return 0;
}

static int ms_get(struct mstore *ms, const struct blk_ptr *bp, const void **image, void **hold)
{
	struct mblock *mb = ms_find(ms, bp);
	if (mb == NULL || mb->mb_len != bp->bp_lsize) {
		ms_bad(ms, "get of an unknown block", bp);
		return -EIO;
	}
	if (mb->mb_freed) {
		ms_bad(ms, "get of a freed block", bp);
		return -EIO;
	}
	if (!mb->mb_cached)
		return -SH_ENEEDBLOCK;
	mb->mb_holds++;
	ms->ms_holds++;
	*image = mb->mb_img;
	*hold = mb;
	return 0;
}

static void ms_release(struct mstore *ms, void *hold)
{
	struct mblock *mb = hold;
	mb->mb_holds--;
	ms->ms_holds--;
	if (mb->mb_freed && mb->mb_holds == 0) {
		free(mb->mb_img);
		mb->mb_img = NULL;
	}
}

static void ms_free(struct mstore *ms, const struct blk_ptr *bp)
{
	struct mblock *mb = ms_find(ms, bp);
	if (mb == NULL || mb->mb_freed) {
		ms_bad(ms, mb == NULL ? "free of an unknown block" : "double free", bp);
		return;
	}
	mb->mb_freed = true;
	ms->ms_frees++;
	if (mb->mb_holds == 0) {
		free(mb->mb_img);
		mb->mb_img = NULL;
	}
}

static int ms_load(struct mstore *ms, const struct blk_ptr *bp)
{
	struct mblock *mb = ms_find(ms, bp);
	if (mb == NULL || mb->mb_freed) {
		ms_bad(ms, "load of a freed or unknown block", bp);
		return -EIO;
	}
	if (mb->mb_cached) {
		ms_bad(ms, "a miss on a block in memory", bp);
		return -EIO;
	}
	mb->mb_cached = true;
	ms->ms_loads++;
	return 0;
}

static void ms_forget(struct mstore *ms)
{
	for (size_t i = 0; i < ms->ms_n; i++)
		ms->ms_blocks[i].mb_cached = false;
}

/* Data blocks not freed: blocks no file references any more must all have been freed. */
static uint64_t ms_live_data(const struct mstore *ms)
{
	uint64_t n = 0;
	for (size_t i = 0; i < ms->ms_n; i++)
		n += !ms->ms_blocks[i].mb_freed && ms->ms_blocks[i].mb_type == 2;
	return n;
}

static void ms_fini(struct mstore *ms)
{
	for (size_t i = 0; i < ms->ms_n; i++)
		free(ms->ms_blocks[i].mb_img);
	free(ms->ms_blocks);
	memset(ms, 0, sizeof(*ms));
}

/* tree callbacks */
static int st_get(void *ctx, const struct blk_ptr *bp, const void **image, void **hold)
{
	return ms_get(ctx, bp, image, hold);
}
static void st_release(void *ctx, void *hold)
{
	ms_release(ctx, hold);
}
static int st_write(void *ctx, const void *image, uint32_t bytes, uint8_t level, uint64_t fill,
                    struct blk_ptr *bp)
{
	(void)level;
	(void)fill;
	return ms_store(ctx, image, bytes, 1, bp);
}
static void st_free(void *ctx, const struct blk_ptr *bp)
{
	ms_free(ctx, bp);
}
static int st_load(void *arg, const struct blk_ptr *bp)
{
	struct mstore *ms = arg;
	struct mblock *mb = ms_find(ms, bp);
	if (mb != NULL && mb->mb_cached && !mb->mb_freed)
		return 0;
	return ms_load(ms, bp);
}

/* ---------------------------------------------------------------------------------------------
 * The test environment: one dataset */

struct tenv {
	struct mstore e_st;
	struct btree_config e_cfg;
	struct btree *e_tree;
	struct zpl *e_z;
	struct zpl_env e_env;
	struct blk_ptr e_root;
	uint32_t e_record;
	int64_t e_clock_ns;           /* the fake clock: advances 1 us per reading */
	const struct fs_cred *e_cred; /* used by the helpers */
	bool e_forget;                /* forget every image before each operation */
	uint64_t e_restarts;
	uint64_t e_space_total;
	/* the log: records of every successful change, when e_logging */
	bool e_logging;
	uint64_t e_partials; /* steps of large truncations (-SH_EPARTIAL) */
	uint8_t **e_recs;
	size_t *e_rec_lens;
	size_t e_nrecs, e_caprecs;
};

static const struct fs_cred root_cred = {0, 0, 0, {0}};
static const struct fs_cred user1 = {1001, 100, 1, {200}}; /* in groups 100 and 200 */
static const struct fs_cred user2 = {1002, 300, 0, {0}};

static int env_get_block(void *ctx, const struct blk_ptr *bp, const void **image, void **hold)
{
	struct tenv *e = ctx;
	return ms_get(&e->e_st, bp, image, hold);
}
static void env_release(void *ctx, void *hold)
{
	struct tenv *e = ctx;
	ms_release(&e->e_st, hold);
}
static int env_write_block(void *ctx, const void *data, uint32_t lsize, struct blk_ptr *bp)
{
	struct tenv *e = ctx;
	if (lsize == 0 || lsize % 4096 != 0 || lsize > BLK_MAX_BLOCK_BYTES) {
		ms_bad(&e->e_st, "a data block of a bad size", bp);
		return -EINVAL;
	}
	if (e->e_st.ms_fail_writes > 0) {
		e->e_st.ms_fail_writes--;
		return -ENOSPC;
	}
	e->e_st.ms_data_writes++;
	return ms_store(&e->e_st, data, lsize, 2, bp);
}
static void env_free_block(void *ctx, const struct blk_ptr *bp)
{
	struct tenv *e = ctx;
	e->e_st.ms_data_frees++;
	ms_free(&e->e_st, bp);
}
static int env_space(void *ctx, uint64_t *total, uint64_t *free_bytes, uint64_t *avail)
{
	struct tenv *e = ctx;
	*total = e->e_space_total;
	*free_bytes = e->e_space_total / 2;
	*avail = e->e_space_total / 4;
	return 0;
}
static void env_now(void *ctx, struct fs_time *now)
{
	struct tenv *e = ctx;
	e->e_clock_ns += 1000;
	now->ft_sec = e->e_clock_ns / 1000000000;
	now->ft_nsec = (uint32_t)(e->e_clock_ns % 1000000000);
}

static const uint64_t test_salt = 0x5a5a1234abcd9876ull;

static void env_setup_tree(struct tenv *e, uint32_t node_bytes)
{
	memset(&e->e_cfg, 0, sizeof(e->e_cfg));
	e->e_cfg.bc_node_bytes = node_bytes;
	e->e_cfg.bc_key_max = ZPL_KEY_MAX;
	e->e_cfg.bc_val_max = ZPL_VAL_MAX;
	e->e_cfg.bc_type = ZPL_BTREE_TYPE;
	e->e_cfg.bc_store.bs_ctx = &e->e_st;
	e->e_cfg.bc_store.bs_get = st_get;
	e->e_cfg.bc_store.bs_release = st_release;
	e->e_cfg.bc_store.bs_write = st_write;
	e->e_cfg.bc_store.bs_free = st_free;
}

/* A formatted, open dataset. */
static struct tenv *env_new_ex(uint32_t node_bytes, uint32_t record)
{
	struct tenv *e = calloc(1, sizeof(*e));
	VERIFY(e != NULL);
	e->e_st.ms_txg = 1;
	e->e_clock_ns = 1700000000ll * 1000000000ll;
	e->e_cred = &root_cred;
	e->e_record = record;
	e->e_space_total = 1ull << 40;
	env_setup_tree(e, node_bytes);
	e->e_env =
	    (struct zpl_env){e,         env_get_block, env_release, env_write_block, env_free_block,
	                     env_space, env_now,       0x1234};
	VERIFY(btree_open(&e->e_cfg, NULL, &e->e_tree) == 0);
	VERIFY(zpl_format(e->e_tree, &e->e_env, &root_cred, 0755, &test_salt, NULL) == 0);
	VERIFY(zpl_open(e->e_tree, &e->e_env, record, &e->e_z, NULL) == 0);
	return e;
}

static struct tenv *env_new(void)
{
	return env_new_ex(16384, 0);
}

static void env_free(struct tenv *e)
{
	zpl_close(e->e_z);
	btree_close(e->e_tree);
	for (size_t i = 0; i < e->e_nrecs; i++)
		free(e->e_recs[i]);
	free(e->e_recs);
	free(e->e_rec_lens);
	ms_fini(&e->e_st);
	free(e);
}

/* Writes dirty data and the tree out; the root moves on. */
static int env_sync(struct tenv *e)
{
	uint64_t n;
	int rc = zpl_sync(e->e_z, &n);
	if (rc != 0)
		return rc;
	rc = btree_sync(e->e_tree, &e->e_root);
	e->e_st.ms_txg++;
	return rc;
}

/* Syncs, then closes and reopens tree and zpl at the new root, with every image forgotten. */
static void env_reopen(struct tenv *e)
{
	VERIFY(env_sync(e) == 0);
	zpl_close(e->e_z);
	btree_close(e->e_tree);
	ms_forget(&e->e_st);
	VERIFY(btree_open(&e->e_cfg, &e->e_root, &e->e_tree) == 0);
	struct blk_ptr missing;
	int rc;
	while ((rc = zpl_open(e->e_tree, &e->e_env, e->e_record, &e->e_z, &missing)) ==
	       -SH_ENEEDBLOCK)
		VERIFY(ms_load(&e->e_st, &missing) == 0);
	VERIFY(rc == 0);
}

static void env_log(struct tenv *e, const struct fs_req *req)
{
	size_t cap = zpl_record_bytes(req), len = 0;
	uint8_t *buf = malloc(cap);
	VERIFY(buf != NULL);
	int rc = zpl_record_encode(req, buf, cap, &len);
	CHECKF(rc == 0 && len <= cap, "record of op %d: %d", req->fr_op, rc);
	if (rc != 0) {
		free(buf);
		return;
	}
	if (e->e_nrecs == e->e_caprecs) {
		e->e_caprecs = e->e_caprecs ? e->e_caprecs * 2 : 256;
		e->e_recs = realloc(e->e_recs, sizeof(*e->e_recs) * e->e_caprecs);
		e->e_rec_lens = realloc(e->e_rec_lens, sizeof(*e->e_rec_lens) * e->e_caprecs);
		VERIFY(e->e_recs != NULL && e->e_rec_lens != NULL);
	}
	e->e_recs[e->e_nrecs] = buf;
	e->e_rec_lens[e->e_nrecs++] = len;
}

/* Runs req to completion, loading every block it misses; checks that a restart changed nothing
 * visible. Returns req->fr_status. */
/* Set: every operation of every dataset starts with a cold cache (the scenarios run again). */
static bool g_cold;

static int env_run(struct tenv *e, struct fs_req *req)
{
	if (e->e_forget || g_cold)
		ms_forget(&e->e_st);
	for (int attempts = 0;; attempts++) {
		struct btree_stats before, after;
		btree_stats(e->e_tree, &before);
		uint64_t dirty = zpl_dirty_bytes(e->e_z);
		struct blk_ptr missing;
		memset(&missing, 0, sizeof(missing));
		int rc = zpl_execute(e->e_z, req, &missing);
		if (rc == 0)
			break;
		if (rc == -SH_EPARTIAL) {
			e->e_partials++;
			continue; /* a step of a large truncation, committed: run it again */
		}
		VERIFY(rc == -SH_ENEEDBLOCK);
		btree_stats(e->e_tree, &after);
		CHECKF(before.bst_entries == after.bst_entries &&
		           before.bst_dirty_nodes == after.bst_dirty_nodes &&
		           dirty == zpl_dirty_bytes(e->e_z),
		       "op %d changed state before missing", req->fr_op);
		if (ms_load(&e->e_st, &missing) != 0 || attempts > 100000) {
			CHECKF(false, "op %d: a bad miss: %s", req->fr_op, e->e_st.ms_why);
			req->fr_status = -EIO;
			return -EIO;
		}
		e->e_restarts++;
	}
	if (req->fr_status == 0 && e->e_logging && fs_op_changes(req->fr_op))
		env_log(e, req);
	return req->fr_status;
}

static void req_init(struct fs_req *req, enum fs_op op, const struct tenv *e,
                     const struct fs_obj_id *obj)
{
	memset(req, 0, sizeof(*req));
	req->fr_op = op;
	req->fr_cred = e->e_cred;
	if (obj != NULL)
		req->fr_obj = *obj;
}

/* ---- helpers, one per operation ---- */

static struct fs_obj_id t_root(const struct tenv *e)
{
	struct fs_obj_id id;
	zpl_root(e->e_z, &id);
	return id;
}

static int t_getattr(struct tenv *e, const struct fs_obj_id *id, struct fs_attr *attr)
{
	struct fs_req req;
	if (attr != NULL)
		memset(attr, 0, sizeof(*attr));
	req_init(&req, FS_OP_GETATTR, e, id);
	int rc = env_run(e, &req);
	if (rc == 0 && attr != NULL)
		*attr = req.u.getattr.ga_attr;
	return rc;
}

static int t_lookup(struct tenv *e, const struct fs_obj_id *dir, const char *name,
                    struct fs_obj_id *id, struct fs_attr *attr)
{
	struct fs_req req;
	if (id != NULL)
		memset(id, 0, sizeof(*id));
	if (attr != NULL)
		memset(attr, 0, sizeof(*attr));
	req_init(&req, FS_OP_LOOKUP, e, dir);
	req.u.lookup.lk_name = name;
	int rc = env_run(e, &req);
	if (rc == 0 && id != NULL)
		*id = req.u.lookup.lk_obj;
	if (rc == 0 && attr != NULL)
		*attr = req.u.lookup.lk_attr;
	return rc;
}

static int t_create_ex(struct tenv *e, enum fs_op op, const struct fs_obj_id *dir, const char *name,
                       enum fs_create_mode how, const struct fs_sattr *sa, const uint8_t *verf,
                       struct fs_obj_id *id, struct fs_req *out)
{
	struct fs_req req;
	if (id != NULL)
		memset(id, 0, sizeof(*id));
	req_init(&req, op, e, dir);
	req.u.create.cr_name = name;
	req.u.create.cr_mode = how;
	if (sa != NULL)
		req.u.create.cr_sattr = *sa;
	if (verf != NULL)
		memcpy(req.u.create.cr_verf, verf, 8);
	int rc = env_run(e, &req);
	if (rc == 0 && id != NULL)
		*id = req.u.create.cr_obj;
	if (out != NULL)
		*out = req;
	return rc;
}

static int t_create(struct tenv *e, const struct fs_obj_id *dir, const char *name, uint32_t mode,
                    struct fs_obj_id *id)
{
	struct fs_sattr sa = {.fs_set_mode = true, .fs_mode = mode};
	return t_create_ex(e, FS_OP_CREATE, dir, name, FS_CREATE_UNCHECKED, &sa, NULL, id, NULL);
}

static int t_mkdir(struct tenv *e, const struct fs_obj_id *dir, const char *name, uint32_t mode,
                   struct fs_obj_id *id)
{
	struct fs_sattr sa = {.fs_set_mode = true, .fs_mode = mode};
	return t_create_ex(e, FS_OP_MKDIR, dir, name, FS_CREATE_UNCHECKED, &sa, NULL, id, NULL);
}

static int t_symlink(struct tenv *e, const struct fs_obj_id *dir, const char *name,
                     const char *target, struct fs_obj_id *id)
{
	struct fs_req req;
	req_init(&req, FS_OP_SYMLINK, e, dir);
	req.u.create.cr_name = name;
	req.u.create.cr_link_target = target;
	int rc = env_run(e, &req);
	if (rc == 0 && id != NULL)
		*id = req.u.create.cr_obj;
	return rc;
}

static int t_mknod(struct tenv *e, const struct fs_obj_id *dir, const char *name, enum fs_type type,
                   uint32_t major, uint32_t minor, struct fs_obj_id *id)
{
	struct fs_req req;
	req_init(&req, FS_OP_MKNOD, e, dir);
	req.u.create.cr_name = name;
	req.u.create.cr_type = type;
	req.u.create.cr_rdev_major = major;
	req.u.create.cr_rdev_minor = minor;
	int rc = env_run(e, &req);
	if (rc == 0 && id != NULL)
		*id = req.u.create.cr_obj;
	return rc;
}

static int t_readlink(struct tenv *e, const struct fs_obj_id *id, char *out, uint32_t *len)
{
	static struct fs_req req; /* rl_target is 4 KiB */
	req_init(&req, FS_OP_READLINK, e, id);
	int rc = env_run(e, &req);
	if (rc == 0) {
		memcpy(out, req.u.readlink.rl_target, req.u.readlink.rl_len + 1);
		*len = req.u.readlink.rl_len;
	}
	return rc;
}

static int t_remove_ex(struct tenv *e, enum fs_op op, const struct fs_obj_id *dir, const char *name,
                       struct fs_wcc *wcc)
{
	struct fs_req req;
	req_init(&req, op, e, dir);
	req.u.remove.rm_name = name;
	int rc = env_run(e, &req);
	if (wcc != NULL)
		*wcc = req.u.remove.rm_dir_wcc;
	return rc;
}

static int t_remove(struct tenv *e, const struct fs_obj_id *dir, const char *name)
{
	return t_remove_ex(e, FS_OP_REMOVE, dir, name, NULL);
}

static int t_rmdir(struct tenv *e, const struct fs_obj_id *dir, const char *name)
{
	return t_remove_ex(e, FS_OP_RMDIR, dir, name, NULL);
}

static int t_rename(struct tenv *e, const struct fs_obj_id *fdir, const char *fname,
                    const struct fs_obj_id *tdir, const char *tname)
{
	struct fs_req req;
	req_init(&req, FS_OP_RENAME, e, fdir);
	req.u.rename.rn_from_name = fname;
	req.u.rename.rn_to_dir = *tdir;
	req.u.rename.rn_to_name = tname;
	return env_run(e, &req);
}

static int t_link(struct tenv *e, const struct fs_obj_id *file, const struct fs_obj_id *dir,
                  const char *name)
{
	struct fs_req req;
	req_init(&req, FS_OP_LINK, e, file);
	req.u.link.ln_dir = *dir;
	req.u.link.ln_name = name;
	return env_run(e, &req);
}

static int t_write(struct tenv *e, const struct fs_obj_id *id, uint64_t off, const void *data,
                   uint32_t len)
{
	struct fs_req req;
	req_init(&req, FS_OP_WRITE, e, id);
	req.u.write.wr_offset = off;
	req.u.write.wr_data = data;
	req.u.write.wr_len = len;
	req.u.write.wr_stable = FS_FILE_SYNC;
	int rc = env_run(e, &req);
	if (rc == 0) {
		CHECK(req.u.write.wr_count == len);
		CHECK(req.u.write.wr_committed == FS_UNSTABLE);
	}
	return rc;
}

/* Reads into out (count bytes available); *n gets the bytes read. */
static int t_read(struct tenv *e, const struct fs_obj_id *id, uint64_t off, uint32_t count,
                  void *out, uint32_t *n, bool *eof)
{
	struct fs_req req;
	req_init(&req, FS_OP_READ, e, id);
	req.u.read.rd_offset = off;
	req.u.read.rd_count = count;
	int rc = env_run(e, &req);
	if (rc == 0) {
		const struct fs_buf *fb = &req.u.read.rd_buf;
		CHECK(fb->fb_len <= count);
		CHECK(fs_buf_copy_out(fb, 0, out, fb->fb_len) == fb->fb_len);
		if (n != NULL)
			*n = fb->fb_len;
		if (eof != NULL)
			*eof = req.u.read.rd_eof;
		CHECK(fb->fb_release != NULL);
		fb->fb_release(fb->fb_release_arg);
	}
	return rc;
}

static int t_setattr(struct tenv *e, const struct fs_obj_id *id, const struct fs_sattr *sa,
                     struct fs_wcc *wcc)
{
	struct fs_req req;
	req_init(&req, FS_OP_SETATTR, e, id);
	req.u.setattr.sa_sattr = *sa;
	int rc = env_run(e, &req);
	if (wcc != NULL)
		*wcc = req.u.setattr.sa_wcc;
	return rc;
}

static int t_truncate(struct tenv *e, const struct fs_obj_id *id, uint64_t size)
{
	struct fs_sattr sa = {.fs_set_size = true, .fs_size = size};
	return t_setattr(e, id, &sa, NULL);
}

static int t_chmod(struct tenv *e, const struct fs_obj_id *id, uint32_t mode)
{
	struct fs_sattr sa = {.fs_set_mode = true, .fs_mode = mode};
	return t_setattr(e, id, &sa, NULL);
}

static uint32_t t_access(struct tenv *e, const struct fs_obj_id *id, uint32_t want)
{
	struct fs_req req;
	req_init(&req, FS_OP_ACCESS, e, id);
	req.u.access.ac_want = want;
	int rc = env_run(e, &req);
	CHECK(rc == 0);
	return rc == 0 ? req.u.access.ac_granted : 0;
}

/* READDIR: collected entries */
struct rd_entry {
	char name[FS_NAME_MAX + 1];
	uint64_t cookie;
	uint64_t fileid;
	bool has_obj;
	struct fs_obj_id obj;
	struct fs_attr attr;
};

struct rd_ctx {
	struct fs_req req; /* first: the emit callback gets it */
	struct rd_entry *ents;
	size_t n, cap;
	size_t page_max; /* entries accepted per call */
	size_t in_page;
};

static bool rd_emit(struct fs_req *req, const struct fs_dirent *d)
{
	struct rd_ctx *c = (struct rd_ctx *)(void *)req;
	if (c->in_page == c->page_max)
		return false;
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 64;
		c->ents = realloc(c->ents, sizeof(*c->ents) * c->cap);
		VERIFY(c->ents != NULL);
	}
	struct rd_entry *x = &c->ents[c->n++];
	memset(x, 0, sizeof(*x));
	VERIFY(d->fd_name_len <= FS_NAME_MAX);
	memcpy(x->name, d->fd_name, d->fd_name_len);
	x->cookie = d->fd_cookie;
	x->fileid = d->fd_fileid;
	x->has_obj = d->fd_has_obj;
	x->obj = d->fd_obj;
	if (d->fd_has_attr)
		x->attr = d->fd_attr;
	c->in_page++;
	return true;
}

/* One READDIR call from cookie into c (entries appended). */
static int t_readdir_page(struct tenv *e, const struct fs_obj_id *dir, uint64_t cookie,
                          const uint8_t verf[8], bool plus, struct rd_ctx *c, uint8_t verf_out[8],
                          bool *eof)
{
	req_init(&c->req, FS_OP_READDIR, e, dir);
	c->req.u.readdir.rd_cookie = cookie;
	if (verf != NULL)
		memcpy(c->req.u.readdir.rd_verf, verf, 8);
	c->req.u.readdir.rd_plus = plus;
	c->req.u.readdir.rd_emit = rd_emit;
	size_t n0 = c->n;
	int rc;
	for (;;) {
		c->in_page = 0;
		c->n = n0;
		/* env_run restarts after a miss: the entries of an attempt that missed are dropped,
		 * as a real caller drops its unfinished reply. */
		struct blk_ptr missing;
		if (e->e_forget)
			ms_forget(&e->e_st);
		e->e_forget = false;
		rc = zpl_execute(e->e_z, &c->req, &missing);
		if (rc == -SH_ENEEDBLOCK) {
			CHECK(c->n == n0); /* nothing emitted by an attempt that missed */
			VERIFY(ms_load(&e->e_st, &missing) == 0);
			e->e_restarts++;
			continue;
		}
		break;
	}
	rc = c->req.fr_status;
	if (rc == 0) {
		if (verf_out != NULL)
			memcpy(verf_out, c->req.u.readdir.rd_verf_out, 8);
		*eof = c->req.u.readdir.rd_eof;
	}
	return rc;
}

/* The whole directory, in pages of page_max entries. */
static int t_readdir_all(struct tenv *e, const struct fs_obj_id *dir, bool plus, size_t page_max,
                         struct rd_ctx *c, bool forget_each_page)
{
	uint64_t cookie = 0;
	uint8_t verf[8] = {0};
	memset(c, 0, sizeof(*c));
	c->page_max = page_max;
	for (int pages = 0; pages < 10000000; pages++) {
		bool eof = false;
		size_t n0 = c->n;
		e->e_forget = forget_each_page;
		int rc = t_readdir_page(e, dir, cookie, verf, plus, c, verf, &eof);
		if (rc != 0)
			return rc;
		if (eof)
			return 0;
		if (c->n == n0)
			return -EIO; /* no progress without eof */
		cookie = c->ents[c->n - 1].cookie;
	}
	return -EIO;
}

static int t_check(struct tenv *e, char *report, size_t report_bytes)
{
	return zpl_check(e->e_z, st_load, &e->e_st, NULL, 0, report, report_bytes);
}

#define CHECK_SOUND(e)                                                                             \
	do {                                                                                       \
		char report_[256];                                                                 \
		int check_rc_ = t_check((e), report_, sizeof(report_));                            \
		CHECKF(check_rc_ == 0, "zpl_check: %d %s", check_rc_, report_);                    \
		CHECKF(!(e)->e_st.ms_bad, "store: %s", (e)->e_st.ms_why);                          \
	} while (0)

static uint64_t id_objid(const struct fs_obj_id *id)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | id->foi_bytes[i];
	return v;
}

static bool time_eq(struct fs_time a, struct fs_time b)
{
	return a.ft_sec == b.ft_sec && a.ft_nsec == b.ft_nsec;
}

static bool time_lt(struct fs_time a, struct fs_time b)
{
	return a.ft_sec < b.ft_sec || (a.ft_sec == b.ft_sec && a.ft_nsec < b.ft_nsec);
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* ---------------------------------------------------------------------------------------------
 * Cases */

static void test_format_open(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), bad;
	struct fs_attr a;
	CHECK(root.foi_len == ZPL_OBJ_ID_BYTES && id_objid(&root) == ZPL_ROOT_OBJID);
	CHECK(t_getattr(e, &root, &a) == 0);
	CHECK(a.fa_type == FS_DIR && a.fa_mode == 0755 && a.fa_nlink == 2 && a.fa_uid == 0 &&
	      a.fa_gid == 0);
	CHECK(a.fa_fileid == ZPL_ROOT_OBJID && a.fa_fsid == 0x1234);
	/* Ids: short, reserved (bad handles), beyond the counters (stale). */
	bad = root;
	bad.foi_len = 8;
	CHECK(t_getattr(e, &bad, NULL) == -SH_EBADHANDLE);
	bad = root;
	bad.foi_bytes[0] = 1;
	CHECK(t_getattr(e, &bad, NULL) == -SH_EBADHANDLE);
	/* beyond the counters: a state the dataset left (a rollback's), so stale */
	bad = root;
	bad.foi_bytes[0] = 200;
	CHECK(t_getattr(e, &bad, NULL) == -ESTALE);
	bad = root;
	bad.foi_bytes[8] = 77;
	CHECK(t_getattr(e, &bad, NULL) == -ESTALE);
	/* Format refuses a tree that is not empty. */
	CHECK(zpl_format(e->e_tree, &e->e_env, &root_cred, 0755, NULL, NULL) == -EEXIST);
	struct zpl *z2;
	CHECK(zpl_open(e->e_tree, &e->e_env, 3000, &z2, NULL) == -EINVAL);
	struct fs_info fi;
	zpl_info(e->e_z, &fi);
	CHECK(fi.fi_link_max == ZPL_LINK_MAX && fi.fi_name_max == FS_NAME_MAX &&
	      fi.fi_max_file_size == INT64_MAX);
	/* Persistence across sync and a cold reopen. */
	struct fs_obj_id f;
	CHECK(t_create(e, &root, "a", 0640, &f) == 0);
	env_reopen(e);
	CHECK(t_lookup(e, &root, "a", NULL, &a) == 0 && a.fa_mode == 0640);
	CHECK(e->e_st.ms_loads > 0);
	/* An unformatted tree. */
	struct btree *t;
	CHECK(btree_open(&e->e_cfg, NULL, &t) == 0);
	CHECK(zpl_open(t, &e->e_env, 0, &z2, NULL) == -ENOENT);
	btree_close(t);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_create_lookup(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f, g, x;
	struct fs_attr a, b, d0;
	struct fs_req req;
	CHECK(t_getattr(e, &root, &d0) == 0);
	struct fs_sattr sa = {.fs_set_mode = true, .fs_mode = 0640};
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "file", FS_CREATE_GUARDED, &sa, NULL, &f, &req) ==
	      0);
	a = req.u.create.cr_attr;
	CHECK(req.u.create.cr_attr_valid && a.fa_type == FS_REG && a.fa_mode == 0640 &&
	      a.fa_nlink == 1);
	CHECK(a.fa_size == 0 && a.fa_uid == 0 && a.fa_gid == 0 && a.fa_fileid == id_objid(&f));
	CHECK(time_eq(a.fa_mtime, a.fa_ctime) && time_lt(d0.fa_mtime, a.fa_ctime));
	/* The directory's wcc: before = its old attributes, after = changed times. */
	const struct fs_wcc *w = &req.u.create.cr_dir_wcc;
	CHECK(w->fw_pre_valid && w->fw_post_valid && time_eq(w->fw_pre_mtime, d0.fa_mtime));
	CHECK(time_eq(w->fw_post.fa_mtime, a.fa_ctime) && w->fw_post.fa_size > w->fw_pre_size);
	CHECK(t_lookup(e, &root, "file", &g, &b) == 0);
	CHECK(memcmp(&f, &g, sizeof(f)) == 0 && b.fa_mode == 0640);
	CHECK(t_lookup(e, &root, "nope", NULL, NULL) == -ENOENT);
	CHECK(t_lookup(e, &root, "", NULL, NULL) == -ENOENT);
	CHECK(t_lookup(e, &root, ".", &x, NULL) == 0 && memcmp(&x, &root, sizeof(x)) == 0);
	CHECK(t_lookup(e, &root, "..", &x, NULL) == 0 && memcmp(&x, &root, sizeof(x)) == 0);
	/* GUARDED over an existing name; UNCHECKED over a file applies only the size. */
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "file", FS_CREATE_GUARDED, &sa, NULL, NULL,
	                  NULL) == -EEXIST);
	CHECK(t_write(e, &f, 0, "hello world", 11) == 0);
	struct fs_sattr sz = {
	    .fs_set_size = true, .fs_size = 5, .fs_set_mode = true, .fs_mode = 0777};
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "file", FS_CREATE_UNCHECKED, &sz, NULL, &x,
	                  NULL) == 0);
	CHECK(memcmp(&x, &f, sizeof(x)) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == 5 && a.fa_mode == 0640);
	/* Names. */
	char longname[FS_NAME_MAX + 2];
	memset(longname, 'n', sizeof(longname));
	longname[FS_NAME_MAX + 1] = '\0';
	CHECK(t_create(e, &root, longname, 0644, NULL) == -ENAMETOOLONG);
	CHECK(t_lookup(e, &root, longname, NULL, NULL) == -ENAMETOOLONG);
	longname[FS_NAME_MAX] = '\0';
	CHECK(t_create(e, &root, longname, 0644, &x) == 0);
	CHECK(t_lookup(e, &root, longname, &g, NULL) == 0 && memcmp(&x, &g, sizeof(x)) == 0);
	CHECK(t_create(e, &root, "a/b", 0644, NULL) == -EINVAL);
	CHECK(t_create(e, &root, ".", 0644, NULL) == -EEXIST);
	CHECK(t_create(e, &root, "..", 0644, NULL) == -EEXIST);
	CHECK(t_mkdir(e, &root, "file", 0755, NULL) == -EEXIST);
	/* Not a directory. */
	CHECK(t_create(e, &f, "x", 0644, NULL) == -ENOTDIR);
	CHECK(t_lookup(e, &f, "x", NULL, NULL) == -ENOTDIR);
	/* Sattr on create: times and size. */
	struct fs_sattr st = {.fs_set_size = true,
	                      .fs_size = 100000,
	                      .fs_mtime_how = FS_TIME_CLIENT,
	                      .fs_mtime = {12345, 678},
	                      .fs_atime_how = FS_TIME_CLIENT,
	                      .fs_atime = {222, 1}};
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "sized", FS_CREATE_UNCHECKED, &st, NULL, &x,
	                  &req) == 0);
	a = req.u.create.cr_attr;
	CHECK(a.fa_size == 100000 && a.fa_mode == 0644 && a.fa_mtime.ft_sec == 12345 &&
	      a.fa_atime.ft_sec == 222);
	uint8_t buf[16];
	uint32_t n;
	bool eof;
	CHECK(t_read(e, &x, 99990, 16, buf, &n, &eof) == 0 && n == 10 && eof && buf[0] == 0 &&
	      buf[9] == 0);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_exclusive(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f, g;
	const uint8_t v1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v2[8] = {8, 7, 6, 5, 4, 3, 2, 1};
	struct fs_req req;
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "x", FS_CREATE_EXCLUSIVE, NULL, v1, &f, &req) ==
	      0);
	CHECK(req.u.create.cr_attr.fa_mode == 0600);
	/* A retransmission with the same verifier gets the same file; another verifier EEXIST. */
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "x", FS_CREATE_EXCLUSIVE, NULL, v1, &g, NULL) ==
	      0);
	CHECK(memcmp(&f, &g, sizeof(f)) == 0);
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "x", FS_CREATE_EXCLUSIVE, NULL, v2, NULL, NULL) ==
	      -EEXIST);
	/* The client's SETATTR afterwards; the verifier still matches a late retransmission. */
	CHECK(t_chmod(e, &f, 0644) == 0);
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "x", FS_CREATE_EXCLUSIVE, NULL, v1, &g, NULL) ==
	      0);
	/* A file made by UNCHECKED has no verifier. */
	CHECK(t_create(e, &root, "y", 0644, NULL) == 0);
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "y", FS_CREATE_EXCLUSIVE, NULL, v1, NULL, NULL) ==
	      -EEXIST);
	CHECK(t_mkdir(e, &root, "d", 0755, NULL) == 0);
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "d", FS_CREATE_UNCHECKED, NULL, NULL, NULL,
	                  NULL) == -EEXIST);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_mkdir_rmdir(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), d, sub, f;
	struct fs_attr a;
	CHECK(t_mkdir(e, &root, "d", 0750, &d) == 0);
	CHECK(t_getattr(e, &d, &a) == 0 && a.fa_type == FS_DIR && a.fa_nlink == 2 &&
	      a.fa_mode == 0750);
	CHECK(t_getattr(e, &root, &a) == 0 && a.fa_nlink == 3);
	CHECK(t_mkdir(e, &d, "sub", 0755, &sub) == 0);
	CHECK(t_getattr(e, &d, &a) == 0 && a.fa_nlink == 3);
	struct fs_obj_id x;
	CHECK(t_lookup(e, &sub, "..", &x, NULL) == 0 && memcmp(&x, &d, sizeof(x)) == 0);
	CHECK(t_create(e, &d, "f", 0644, &f) == 0);
	CHECK(t_rmdir(e, &root, "d") == -ENOTEMPTY);
	CHECK(t_rmdir(e, &d, "f") == -ENOTDIR);
	CHECK(t_remove(e, &d, "sub") == -EISDIR);
	CHECK(t_rmdir(e, &d, "nope") == -ENOENT);
	CHECK(t_rmdir(e, &d, ".") == -EINVAL);
	CHECK(t_rmdir(e, &d, "..") == -ENOTEMPTY);
	CHECK(t_rmdir(e, &d, "sub") == 0);
	CHECK(t_getattr(e, &d, &a) == 0 && a.fa_nlink == 2);
	CHECK(t_getattr(e, &sub, NULL) == -ESTALE);
	CHECK(t_lookup(e, &d, "sub", NULL, NULL) == -ENOENT);
	CHECK(t_remove(e, &d, "f") == 0);
	CHECK(t_getattr(e, &f, NULL) == -ESTALE);
	struct fs_wcc w;
	CHECK(t_remove_ex(e, FS_OP_RMDIR, &root, "d", &w) == 0);
	CHECK(w.fw_pre_valid && w.fw_post_valid && w.fw_post.fa_nlink == 2);
	CHECK(t_getattr(e, &d, NULL) == -ESTALE);
	/* Ids are not reused, and a new object has a new generation. */
	CHECK(t_mkdir(e, &root, "d", 0750, &x) == 0 && id_objid(&x) > id_objid(&d));
	CHECK_SOUND(e);
	env_free(e);
}

/* Plants a value for the inode of id (damaging or preparing the tree behind the zpl's back). */
static void plant_inode_nlink(struct tenv *e, const struct fs_obj_id *id, uint32_t nlink)
{
	uint8_t key[9], val[ZPL_VAL_MAX];
	uint32_t vlen;
	uint64_t objid = id_objid(id);
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)(objid >> (56 - 8 * i));
	key[8] = 1;
	ms_forget(&e->e_st);
	int rc;
	struct blk_ptr missing;
	while ((rc = btree_lookup(e->e_tree, key, 9, val, sizeof(val), &vlen, &missing)) ==
	       -SH_ENEEDBLOCK)
		VERIFY(ms_load(&e->e_st, &missing) == 0);
	VERIFY(rc == 0);
	for (int i = 0; i < 4; i++)
		val[8 + i] = (uint8_t)(nlink >> (8 * i));
	VERIFY(btree_put(e->e_tree, key, 9, val, vlen, BTREE_PUT_REPLACE, NULL) == 0);
	zpl_cache_forget(e->e_z);
}

static void test_link(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), d, f;
	struct fs_attr a;
	CHECK(t_mkdir(e, &root, "d", 0755, &d) == 0);
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	CHECK(t_write(e, &f, 0, "data", 4) == 0);
	struct fs_req req;
	req_init(&req, FS_OP_LINK, e, &f);
	req.u.link.ln_dir = d;
	req.u.link.ln_name = "g";
	CHECK(env_run(e, &req) == 0);
	CHECK(req.u.link.ln_attr_valid && req.u.link.ln_attr.fa_nlink == 2);
	CHECK(req.u.link.ln_dir_wcc.fw_pre_valid && req.u.link.ln_dir_wcc.fw_post_valid);
	CHECK(t_link(e, &f, &d, "g") == -EEXIST);
	CHECK(t_link(e, &d, &root, "dd") == -EISDIR); /* knfsd: NFS3ERR_ISDIR */
	CHECK(t_link(e, &f, &f, "x") == -ENOTDIR);
	CHECK(t_remove(e, &root, "f") == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_nlink == 1);
	char buf[8];
	uint32_t n;
	CHECK(t_read(e, &f, 0, 8, buf, &n, NULL) == 0 && n == 4 && memcmp(buf, "data", 4) == 0);
	CHECK_SOUND(e);
	/* The link limit (planted: making 65000 links takes long). */
	plant_inode_nlink(e, &f, ZPL_LINK_MAX);
	CHECK(t_link(e, &f, &d, "h") == -EMLINK);
	plant_inode_nlink(e, &f, 1);
	CHECK(t_remove(e, &d, "g") == 0);
	CHECK(t_getattr(e, &f, NULL) == -ESTALE);
	CHECK(zpl_dirty_bytes(e->e_z) == 0); /* the removed file's dirty buffer went with it */
	CHECK_SOUND(e);
	env_free(e);
}

static void test_symlink(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), l;
	static char target[FS_PATH_MAX + 2], out[FS_PATH_MAX + 1];
	uint32_t len;
	struct fs_attr a;
	const uint32_t sizes[] = {1, 10, 1023, 1024, 1025, 3000, 4096};
	for (size_t i = 0; i < SH_ARRAY_SIZE(sizes); i++) {
		char name[16];
		for (uint32_t j = 0; j < sizes[i]; j++)
			target[j] = (char)('a' + (j * 7 + i) % 26);
		target[sizes[i]] = '\0';
		snprintf(name, sizeof(name), "l%u", sizes[i]);
		CHECK(t_symlink(e, &root, name, target, &l) == 0);
		CHECK(t_readlink(e, &l, out, &len) == 0 && len == sizes[i] &&
		      strcmp(out, target) == 0);
		CHECK(t_getattr(e, &l, &a) == 0 && a.fa_type == FS_LNK && a.fa_size == sizes[i] &&
		      a.fa_mode == 0777);
	}
	/* Long targets live in a data block: still there after a sync and a cold reopen. */
	env_reopen(e);
	CHECK(t_lookup(e, &root, "l4096", &l, NULL) == 0);
	CHECK(t_readlink(e, &l, out, &len) == 0 && len == 4096 && strcmp(out, target) == 0);
	memset(target, 'x', FS_PATH_MAX + 1);
	target[FS_PATH_MAX + 1] = '\0';
	CHECK(t_symlink(e, &root, "toolong", target, NULL) == -ENAMETOOLONG);
	CHECK(t_symlink(e, &root, "empty", "", NULL) == -ENOENT);
	CHECK(t_symlink(e, &root, "l10", "x", NULL) == -EEXIST);
	struct fs_obj_id f;
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	CHECK(t_readlink(e, &f, out, &len) == -EINVAL);
	CHECK(t_read(e, &l, 0, 10, out, NULL, NULL) == -EINVAL);
	CHECK_SOUND(e);
	uint64_t frees = e->e_st.ms_data_frees;
	CHECK(t_remove(e, &root, "l4096") == 0);
	CHECK(e->e_st.ms_data_frees == frees + 1); /* its data block */
	CHECK_SOUND(e);
	env_free(e);
}

static void test_mknod(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), x;
	struct fs_attr a;
	CHECK(t_mknod(e, &root, "chr", FS_CHR, 4, 64, &x) == 0);
	CHECK(t_getattr(e, &x, &a) == 0 && a.fa_type == FS_CHR && a.fa_rdev_major == 4 &&
	      a.fa_rdev_minor == 64);
	CHECK(a.fa_mode == 0644 && a.fa_size == 0);
	CHECK(t_mknod(e, &root, "blk", FS_BLK, 8, 1, &x) == 0);
	CHECK(t_getattr(e, &x, &a) == 0 && a.fa_type == FS_BLK && a.fa_rdev_major == 8 &&
	      a.fa_rdev_minor == 1);
	CHECK(t_mknod(e, &root, "sock", FS_SOCK, 0, 0, &x) == 0);
	CHECK(t_getattr(e, &x, &a) == 0 && a.fa_type == FS_SOCK);
	CHECK(t_mknod(e, &root, "fifo", FS_FIFO, 9, 9, &x) == 0);
	CHECK(t_getattr(e, &x, &a) == 0 && a.fa_type == FS_FIFO && a.fa_rdev_major == 0);
	CHECK(t_mknod(e, &root, "reg", FS_REG, 0, 0, NULL) == -SH_EBADTYPE);
	CHECK(t_mknod(e, &root, "dir", FS_DIR, 0, 0, NULL) == -SH_EBADTYPE);
	CHECK(t_mknod(e, &root, "lnk", FS_LNK, 0, 0, NULL) == -SH_EBADTYPE);
	CHECK(t_read(e, &x, 0, 1, NULL, NULL, NULL) == -EINVAL);
	CHECK(t_write(e, &x, 0, "a", 1) == -EINVAL);
	CHECK(t_truncate(e, &x, 1) == -EINVAL);
	CHECK(t_remove(e, &root, "fifo") == 0 && t_getattr(e, &x, NULL) == -ESTALE);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_rename(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), a, b, d1, d2, sub, x, f1, f2;
	struct fs_attr at;
	CHECK(t_mkdir(e, &root, "d1", 0755, &d1) == 0);
	CHECK(t_mkdir(e, &root, "d2", 0755, &d2) == 0);
	CHECK(t_create(e, &d1, "a", 0644, &a) == 0);
	CHECK(t_create(e, &d1, "b", 0644, &b) == 0);
	CHECK(t_write(e, &b, 0, "bbbb", 4) == 0);
	/* File over file: the replaced file goes (its last link), its data with it. */
	CHECK(t_rename(e, &d1, "a", &d1, "b") == 0);
	CHECK(t_lookup(e, &d1, "a", NULL, NULL) == -ENOENT);
	CHECK(t_lookup(e, &d1, "b", &x, NULL) == 0 && memcmp(&x, &a, sizeof(x)) == 0);
	CHECK(t_getattr(e, &b, NULL) == -ESTALE);
	CHECK(t_getattr(e, &d1, &at) == 0 && at.fa_size == 3 * 32);
	/* Across directories; the same link twice is a no-op; hard links to the same file too. */
	CHECK(t_rename(e, &d1, "b", &d2, "c") == 0);
	CHECK(t_lookup(e, &d2, "c", &x, NULL) == 0 && memcmp(&x, &a, sizeof(x)) == 0);
	CHECK(t_rename(e, &d2, "c", &d2, "c") == 0);
	CHECK(t_link(e, &a, &d2, "c2") == 0);
	CHECK(t_rename(e, &d2, "c", &d2, "c2") == 0);
	CHECK(t_lookup(e, &d2, "c", NULL, NULL) == 0 && t_lookup(e, &d2, "c2", NULL, NULL) == 0);
	CHECK(t_getattr(e, &a, &at) == 0 && at.fa_nlink == 2);
	/* A file over a file with another link: that one keeps living with nlink - 1. */
	CHECK(t_create(e, &d2, "e", 0644, &f1) == 0);
	CHECK(t_rename(e, &d2, "e", &d2, "c") == 0);
	CHECK(t_getattr(e, &a, &at) == 0 && at.fa_nlink == 1);
	CHECK(t_lookup(e, &d2, "c", &x, NULL) == 0 && memcmp(&x, &f1, sizeof(x)) == 0);
	/* Directories: over an empty one, not over a non-empty one, not into their own subtree. */
	CHECK(t_mkdir(e, &d1, "sub", 0755, &sub) == 0);
	CHECK(t_mkdir(e, &sub, "deep", 0755, NULL) == 0);
	CHECK(t_mkdir(e, &d2, "empty", 0755, &x) == 0);
	CHECK(t_getattr(e, &d1, &at) == 0 && at.fa_nlink == 3);
	CHECK(t_getattr(e, &d2, &at) == 0 && at.fa_nlink == 3);
	CHECK(t_rename(e, &d1, "sub", &sub, "x") == -EINVAL);
	CHECK(t_lookup(e, &sub, "deep", &f2, NULL) == 0);
	CHECK(t_rename(e, &d1, "sub", &f2, "x") == -EINVAL);
	CHECK(t_rename(e, &root, "d1", &f2, "x") == -EINVAL);
	CHECK(t_rename(e, &d1, "sub", &d2, "c") == -ENOTDIR);
	CHECK(t_rename(e, &d2, "c", &d2, "empty") == -EISDIR);
	CHECK(t_rename(e, &d2, "empty", &d1, "sub") == -ENOTEMPTY);
	CHECK(t_rename(e, &d1, "sub", &d2, "empty") == 0);
	CHECK(t_getattr(e, &x, NULL) == -ESTALE);
	CHECK(t_getattr(e, &d1, &at) == 0 && at.fa_nlink == 2);
	CHECK(t_getattr(e, &d2, &at) == 0 && at.fa_nlink == 3);
	CHECK(t_lookup(e, &sub, "..", &x, NULL) == 0 && memcmp(&x, &d2, sizeof(x)) == 0);
	/* A directory moved to a new name in a new parent without replacing. */
	CHECK(t_rename(e, &d2, "empty", &root, "moved") == 0);
	CHECK(t_getattr(e, &d2, &at) == 0 && at.fa_nlink == 2);
	CHECK(t_getattr(e, &root, &at) == 0 && at.fa_nlink == 5);
	CHECK(t_lookup(e, &sub, "..", &x, NULL) == 0 && memcmp(&x, &root, sizeof(x)) == 0);
	/* Errors. */
	CHECK(t_rename(e, &d1, "nope", &d2, "x") == -ENOENT);
	CHECK(t_rename(e, &d1, ".", &d2, "x") == -EINVAL);
	CHECK(t_rename(e, &root, "moved", &root, "..") == -EINVAL);
	CHECK(t_rename(e, &f1, "a", &d2, "x") == -ENOTDIR);
	struct fs_obj_id stale = d1;
	CHECK(t_rmdir(e, &root, "d1") == 0);
	CHECK(t_rename(e, &stale, "a", &d2, "x") == -ESTALE);
	CHECK(t_rename(e, &d2, "c", &stale, "x") == -ESTALE);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_readdir(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), d, x;
	struct rd_ctx c;
	CHECK(t_mkdir(e, &root, "d", 0755, &d) == 0);
	CHECK(t_readdir_all(e, &d, true, 1000, &c, false) == 0);
	CHECK(c.n == 2 && strcmp(c.ents[0].name, ".") == 0 && strcmp(c.ents[1].name, "..") == 0);
	CHECK(c.ents[0].cookie == 1 && c.ents[1].cookie == 2);
	CHECK(c.ents[0].fileid == id_objid(&d) && c.ents[1].fileid == ZPL_ROOT_OBJID);
	CHECK(c.ents[1].has_obj && memcmp(&c.ents[1].obj, &root, sizeof(root)) == 0 &&
	      c.ents[1].attr.fa_type == FS_DIR);
	free(c.ents);
	/* ".." of the root is the root. */
	CHECK(t_readdir_all(e, &root, false, 1000, &c, false) == 0);
	CHECK(c.n == 3 && c.ents[1].fileid == ZPL_ROOT_OBJID && !c.ents[1].has_obj);
	free(c.ents);
	char name[32];
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "entry-%d", i);
		CHECK(t_create(e, &d, name, 0644, NULL) == 0);
	}
	/* Pages of 7 entries, cold every page: each entry once, cookies increasing, eof at the end.
	 */
	CHECK(t_readdir_all(e, &d, true, 7, &c, true) == 0);
	CHECK(c.n == 302);
	bool seen[300] = {false};
	for (size_t i = 2; i < c.n; i++) {
		int k = -1;
		CHECK(sscanf(c.ents[i].name, "entry-%d", &k) == 1 && k >= 0 && k < 300 && !seen[k]);
		if (k >= 0 && k < 300)
			seen[k] = true;
		CHECK(c.ents[i].cookie > c.ents[i - 1].cookie && c.ents[i].cookie < (1ull << 63));
		CHECK(c.ents[i].has_obj && c.ents[i].attr.fa_type == FS_REG &&
		      c.ents[i].attr.fa_fileid == c.ents[i].fileid);
		CHECK(t_lookup(e, &d, c.ents[i].name, &x, NULL) == 0 &&
		      memcmp(&x, &c.ents[i].obj, sizeof(x)) == 0);
	}
	/* Verifier and cookie checks; a cookie of a removed entry resumes after its place. */
	uint8_t verf[8], bad[8] = {9, 9, 9, 9, 9, 9, 9, 9};
	bool eof;
	struct rd_ctx c2;
	memset(&c2, 0, sizeof(c2));
	c2.page_max = 1000;
	CHECK(t_readdir_page(e, &d, 0, NULL, false, &c2, verf, &eof) == 0 && eof && c2.n == 302);
	c2.n = 0;
	CHECK(t_readdir_page(e, &d, c.ents[100].cookie, bad, false, &c2, NULL, &eof) ==
	      -SH_EBADCOOKIE);
	CHECK(t_readdir_page(e, &d, 1ull << 63, verf, false, &c2, NULL, &eof) == -SH_EBADCOOKIE);
	CHECK(t_remove(e, &d, c.ents[100].name) == 0);
	c2.n = 0;
	CHECK(t_readdir_page(e, &d, c.ents[100].cookie, verf, false, &c2, NULL, &eof) == 0 && eof);
	CHECK(c2.n == 201 && strcmp(c2.ents[0].name, c.ents[101].name) == 0);
	c2.n = 0;
	uint8_t zero[8] = {0};
	CHECK(t_readdir_page(e, &d, 1, zero, false, &c2, NULL, &eof) == 0 && eof && c2.n == 300);
	CHECK(strcmp(c2.ents[0].name, "..") == 0);
	/* Not a directory; no read permission. */
	CHECK(t_create(e, &root, "f", 0644, &x) == 0);
	c2.n = 0;
	CHECK(t_readdir_page(e, &x, 0, NULL, false, &c2, NULL, &eof) == -ENOTDIR);
	CHECK(t_chmod(e, &d, 0311) == 0);
	e->e_cred = &user1;
	CHECK(t_readdir_page(e, &d, 0, NULL, false, &c2, NULL, &eof) == -EACCES);
	e->e_cred = &root_cred;
	free(c2.ents);
	free(c.ents);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_setattr(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f, l, d;
	struct fs_attr a;
	struct fs_wcc w;
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	CHECK(t_getattr(e, &f, &a) == 0);
	struct fs_req req;
	req_init(&req, FS_OP_SETATTR, e, &f);
	req.u.setattr.sa_sattr.fs_set_mode = true;
	req.u.setattr.sa_sattr.fs_mode = 0600;
	req.u.setattr.sa_guard = true;
	req.u.setattr.sa_guard_ctime = (struct fs_time){a.fa_ctime.ft_sec, a.fa_ctime.ft_nsec + 1};
	CHECK(env_run(e, &req) == -SH_ENOTSYNC);
	CHECK(req.u.setattr.sa_wcc.fw_pre_valid && req.u.setattr.sa_wcc.fw_post_valid);
	req.u.setattr.sa_guard_ctime = a.fa_ctime;
	CHECK(env_run(e, &req) == 0);
	w = req.u.setattr.sa_wcc;
	CHECK(time_eq(w.fw_pre_ctime, a.fa_ctime) && time_lt(a.fa_ctime, w.fw_post.fa_ctime) &&
	      w.fw_post.fa_mode == 0600);
	CHECK(time_eq(w.fw_post.fa_mtime, a.fa_mtime)); /* a mode change leaves mtime */
	/* Size: extension, truncation, and the types it applies to. */
	CHECK(t_write(e, &f, 0, "0123456789", 10) == 0);
	struct fs_sattr sa = {.fs_set_size = true, .fs_size = 4};
	CHECK(t_setattr(e, &f, &sa, &w) == 0 && w.fw_pre_size == 10 && w.fw_post.fa_size == 4);
	CHECK(time_eq(w.fw_post.fa_mtime, w.fw_post.fa_ctime));
	CHECK(t_truncate(e, &f, 8) == 0);
	char buf[16];
	uint32_t n;
	CHECK(t_read(e, &f, 0, 16, buf, &n, NULL) == 0 && n == 8 &&
	      memcmp(buf, "0123\0\0\0\0", 8) == 0);
	CHECK(t_truncate(e, &f, (uint64_t)INT64_MAX + 1) == -EFBIG);
	CHECK(t_mkdir(e, &root, "d", 0755, &d) == 0);
	CHECK(t_truncate(e, &d, 0) == -EISDIR);
	CHECK(t_symlink(e, &root, "l", "target", &l) == 0);
	CHECK(t_truncate(e, &l, 0) == -EINVAL);
	/* Times: explicit and server. */
	struct fs_sattr ts = {
	    .fs_atime_how = FS_TIME_CLIENT, .fs_atime = {100, 5}, .fs_mtime_how = FS_TIME_SERVER};
	CHECK(t_setattr(e, &f, &ts, &w) == 0);
	CHECK(w.fw_post.fa_atime.ft_sec == 100 && w.fw_post.fa_atime.ft_nsec == 5);
	CHECK(time_eq(w.fw_post.fa_mtime, w.fw_post.fa_ctime));
	ts.fs_atime.ft_nsec = 1000000000;
	CHECK(t_setattr(e, &f, &ts, NULL) == -EINVAL);
	/* An empty SETATTR changes nothing, not even ctime. */
	struct fs_sattr none = {0};
	CHECK(t_getattr(e, &f, &a) == 0);
	CHECK(t_setattr(e, &f, &none, &w) == 0 && time_eq(w.fw_post.fa_ctime, a.fa_ctime));
	/* Owner and group by root; a chown clears setuid and (with group exec) setgid. */
	CHECK(t_chmod(e, &f, 06755) == 0);
	struct fs_sattr own = {
	    .fs_set_uid = true, .fs_uid = 1001, .fs_set_gid = true, .fs_gid = 100};
	CHECK(t_setattr(e, &f, &own, &w) == 0 && w.fw_post.fa_uid == 1001 &&
	      w.fw_post.fa_gid == 100);
	CHECK(w.fw_post.fa_mode == 0755);
	CHECK(t_chmod(e, &f, 06745) == 0);
	own.fs_uid = 1002;
	CHECK(t_setattr(e, &f, &own, &w) == 0 &&
	      w.fw_post.fa_mode == 02745); /* no group exec: setgid stays */
	CHECK(t_chmod(e, &d, 02755) == 0);
	CHECK(t_setattr(e, &d, &own, &w) == 0 &&
	      w.fw_post.fa_mode == 02755); /* directories keep theirs */
	CHECK_SOUND(e);
	env_free(e);
}

/* Reads the whole of [off, off + len) through READs of at most 64 KiB. */
static bool read_all(struct tenv *e, const struct fs_obj_id *id, uint64_t off, uint8_t *out,
                     uint64_t len)
{
	uint64_t done = 0;
	while (done < len) {
		uint32_t want = (uint32_t)SH_MIN(len - done, (uint64_t)65536), n = 0;
		bool eof = false;
		if (t_read(e, id, off + done, want, out + done, &n, &eof) != 0 || n == 0)
			return false;
		done += n;
	}
	return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

static void test_sparse_large(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f;
	struct fs_attr a;
	uint8_t buf[8192], data[5000];
	uint32_t n;
	bool eof;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13 + 1);
	CHECK(t_create(e, &root, "sparse", 0644, &f) == 0);
	const uint64_t tib = 1ull << 40;
	CHECK(t_write(e, &f, tib, data, sizeof(data)) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == tib + sizeof(data));
	CHECK(a.fa_used_bytes == 128 * 1024); /* one record */
	CHECK(t_read(e, &f, 0, 4096, buf, &n, &eof) == 0 && n == 4096 && !eof && all_zero(buf, n));
	CHECK(t_read(e, &f, tib - 100, 200, buf, &n, &eof) == 0 && n == 200 && all_zero(buf, 100));
	CHECK(memcmp(buf + 100, data, 100) == 0);
	CHECK(t_read(e, &f, tib + 4990, 100, buf, &n, &eof) == 0 && n == 10 && eof);
	CHECK(memcmp(buf, data + 4990, 10) == 0);
	CHECK(t_read(e, &f, tib + 5000, 100, buf, &n, &eof) == 0 && n == 0 && eof);
	CHECK(t_read(e, &f, UINT64_MAX, 100, buf, &n, &eof) == 0 && n == 0 && eof);
	env_reopen(e);
	CHECK(t_read(e, &f, tib - 100, 200, buf, &n, &eof) == 0 && n == 200 && all_zero(buf, 100));
	CHECK(memcmp(buf + 100, data, 100) == 0);
	/* The largest offsets: a byte at 2^63 - 2 fits, two do not. */
	const uint64_t max = (uint64_t)INT64_MAX;
	CHECK(t_write(e, &f, max - 1, "z", 1) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == max);
	CHECK(t_write(e, &f, max - 1, "zz", 2) == -EFBIG);
	CHECK(t_write(e, &f, max, "z", 1) == -EFBIG);
	CHECK(t_write(e, &f, UINT64_MAX, "z", 1) == -EFBIG);
	CHECK(t_read(e, &f, max - 1, 10, buf, &n, &eof) == 0 && n == 1 && eof && buf[0] == 'z');
	CHECK_SOUND(e);
	env_reopen(e);
	CHECK(t_read(e, &f, max - 3, 10, buf, &n, &eof) == 0 && n == 3 && buf[0] == 0 &&
	      buf[2] == 'z');
	/* Truncation drops the far blocks and frees them. */
	uint64_t frees = e->e_st.ms_data_frees;
	CHECK(t_truncate(e, &f, tib + 10) == 0);
	CHECK(e->e_st.ms_data_frees == frees + 1);
	CHECK(t_truncate(e, &f, max) == 0);
	CHECK(t_read(e, &f, tib, 100, buf, &n, &eof) == 0 && n == 100 &&
	      memcmp(buf, data, 10) == 0);
	CHECK(all_zero(buf + 10, 90));
	CHECK(t_read(e, &f, max - 1, 10, buf, &n, &eof) == 0 && n == 1 && buf[0] == 0);
	CHECK(t_truncate(e, &f, 0) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == 0 && a.fa_used_bytes == 0);
	CHECK_SOUND(e);
	env_free(e);
}

/* A small file grows in one block, copy on write, then past the record size into records. */
static void test_growth(void)
{
	struct tenv *e = env_new_ex(16384, 64 * 1024);
	struct fs_obj_id root = t_root(e), f;
	struct fs_attr a;
	static uint8_t ref[300000], buf[300000];
	for (size_t i = 0; i < sizeof(ref); i++)
		ref[i] = (uint8_t)(rnd() >> 20);
	CHECK(t_create(e, &root, "g", 0644, &f) == 0);
	CHECK(t_write(e, &f, 0, ref, 100) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_used_bytes == 4096);
	CHECK(env_sync(e) == 0);
	CHECK(t_write(e, &f, 100, ref + 100, 10000 - 100) == 0); /* block 0 grows to 12 KiB */
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_used_bytes == 12288 && a.fa_size == 10000);
	env_reopen(e);
	CHECK(read_all(e, &f, 0, buf, 10000) && memcmp(buf, ref, 10000) == 0);
	/* Extended by truncation (the short image reads as zeros beyond), then written past 64 KiB.
	 */
	CHECK(t_truncate(e, &f, 30000) == 0);
	CHECK(read_all(e, &f, 0, buf, 30000) && memcmp(buf, ref, 10000) == 0 &&
	      all_zero(buf + 10000, 20000));
	memset(ref + 10000, 0, 20000);
	CHECK(t_write(e, &f, 30000, ref + 30000, 270000) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == 300000 && a.fa_used_bytes == 5 * 65536);
	CHECK(read_all(e, &f, 0, buf, 300000) && memcmp(buf, ref, 300000) == 0);
	env_reopen(e);
	CHECK(read_all(e, &f, 0, buf, 300000) && memcmp(buf, ref, 300000) == 0);
	/* Partial writes of blocks that are only on disk: read-modify-write after misses. */
	e->e_forget = true;
	uint64_t loads = e->e_st.ms_loads;
	CHECK(t_write(e, &f, 65536 + 10, "PARTIAL", 7) == 0);
	memcpy(ref + 65536 + 10, "PARTIAL", 7);
	CHECK(e->e_st.ms_loads > loads);
	e->e_forget = false;
	CHECK(read_all(e, &f, 0, buf, 300000) && memcmp(buf, ref, 300000) == 0);
	CHECK_SOUND(e);
	env_free(e);
}

/* A truncation that drops many extents is made in steps of ZPL_REAP_STEP_EXTENTS (the
 * operation returns -SH_EPARTIAL after each but the last), so its plan never grows past what the
 * zpl keeps between operations; a plan that does grow past that (the REMOVE of a file of exactly
 * ZPL_REAP_INLINE_MAX extents, freed inline: one more mutation for its dirent) is given back when
 * its operation ends. A small operation keeps its arrays. */
static void test_plan_shrinks(void)
{
	struct tenv *e = env_new_ex(16384, 4096);
	struct fs_obj_id root = t_root(e), f, g, h;
	struct zpl_cache_stats cs;
	static uint8_t block[4096];
	memset(block, 0x5a, sizeof(block));
	const uint32_t nblocks = 3000;
	CHECK(t_create(e, &root, "many", 0644, &f) == 0);
	CHECK(t_create(e, &root, "edge", 0644, &h) == 0);
	for (uint32_t i = 0; i < nblocks; i++) {
		CHECK(t_write(e, &f, (uint64_t)i * sizeof(block), block, sizeof(block)) == 0);
		if (i < ZPL_REAP_INLINE_MAX)
			CHECK(t_write(e, &h, (uint64_t)i * sizeof(block), block, sizeof(block)) == 0);
	}
	CHECK(env_sync(e) == 0);
	CHECK(t_create(e, &root, "few", 0644, &g) == 0);
	CHECK(t_write(e, &g, 0, block, sizeof(block)) == 0);
	zpl_cache_stats(e->e_z, &cs);
	uint64_t small_plan = cs.zcs_plan_bytes;
	CHECK(small_plan > 0 && small_plan < 1024 * 1024);
	uint64_t frees = e->e_st.ms_data_frees, partials = e->e_partials;
	CHECK(t_truncate(e, &f, 1000) == 0);
	CHECKF(e->e_partials == partials + 2, "%llu steps", /* 1,024 + 1,024, then 951 */
	       (unsigned long long)(e->e_partials - partials));
	CHECKF(e->e_st.ms_data_frees == frees + nblocks - 1, "%llu frees", /* block 0 stays */
	       (unsigned long long)(e->e_st.ms_data_frees - frees));
	struct fs_attr a;
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == 1000 && a.fa_used_bytes == 4096);
	zpl_cache_stats(e->e_z, &cs);
	uint64_t step_plan = cs.zcs_plan_bytes;
	CHECKF(step_plan <= 512 * 1024, "%llu bytes", (unsigned long long)step_plan);
	CHECK_SOUND(e);
	frees = e->e_st.ms_data_frees;
	CHECK(t_remove(e, &root, "edge") == 0); /* inline: 1,024 extents and the dirent */
	CHECK(e->e_st.ms_data_frees == frees + ZPL_REAP_INLINE_MAX);
	zpl_cache_stats(e->e_z, &cs);
	CHECK(cs.zcs_plan_bytes <= step_plan);
	CHECK(t_remove(e, &root, "few") == 0);
	zpl_cache_stats(e->e_z, &cs);
	CHECK(cs.zcs_plan_bytes > 0); /* a small plan keeps its arrays */
	CHECK_SOUND(e);
	env_free(e);
}

/* Random writes and truncations against a reference buffer, with syncs, cold caches and reopens
 * in between; small records so a file spans many blocks. */
static void test_random_data(void)
{
	struct tenv *e = env_new_ex(8192, 16384);
	struct fs_obj_id root = t_root(e), f[3];
	enum { FILE_MAX = 600000 };
	static uint8_t ref[3][FILE_MAX], buf[FILE_MAX], chunk[70000];
	uint64_t size[3] = {0, 0, 0};
	memset(ref, 0, sizeof(ref));
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof(name), "r%d", i);
		CHECK(t_create(e, &root, name, 0644, &f[i]) == 0);
	}
	bool ok = true;
	for (int step = 0; step < 400 && ok; step++) {
		int i = (int)(rnd() % 3);
		uint64_t r = rnd() % 100;
		e->e_forget = rnd() % 4 == 0;
		if (r < 70) {
			uint32_t len = (uint32_t)(rnd() % (r < 10 ? 70000 : 5000)) + 1;
			uint64_t off = rnd() % (FILE_MAX - len);
			for (uint32_t k = 0; k < len; k++)
				chunk[k] = (uint8_t)rnd();
			ok = t_write(e, &f[i], off, chunk, len) == 0;
			memcpy(ref[i] + off, chunk, len);
			size[i] = SH_MAX(size[i], off + len);
		} else if (r < 85) {
			uint64_t ns = rnd() % FILE_MAX;
			ok = t_truncate(e, &f[i], ns) == 0;
			if (ns < size[i])
				memset(ref[i] + ns, 0, size[i] - ns);
			size[i] = ns;
		} else if (r < 95) {
			ok = env_sync(e) == 0;
		} else {
			env_reopen(e);
		}
		e->e_forget = false;
		/* A random range, then now and then the whole file. */
		uint64_t off = size[i] ? rnd() % size[i] : 0,
		         len = SH_MIN(size[i] - off, (uint64_t)100000);
		if (len > 0 &&
		    (!read_all(e, &f[i], off, buf, len) || memcmp(buf, ref[i] + off, len) != 0)) {
			CHECKF(false, "step %d: file %d differs in [%llu, +%llu)", step, i,
			       (unsigned long long)off, (unsigned long long)len);
			ok = false;
		}
		if (step % 50 == 49) {
			struct fs_attr a;
			for (int j = 0; j < 3 && ok; j++) {
				ok = t_getattr(e, &f[j], &a) == 0 && a.fa_size == size[j];
				ok = ok && (size[j] == 0 || (read_all(e, &f[j], 0, buf, size[j]) &&
				                             memcmp(buf, ref[j], size[j]) == 0));
				CHECKF(ok, "step %d: file %d", step, j);
			}
			CHECK_SOUND(e);
		}
	}
	CHECK(ok);
	env_reopen(e);
	for (int j = 0; j < 3; j++)
		CHECK(size[j] == 0 ||
		      (read_all(e, &f[j], 0, buf, size[j]) && memcmp(buf, ref[j], size[j]) == 0));
	CHECK(zpl_dirty_bytes(e->e_z) == 0);
	CHECK(e->e_st.ms_holds == 0);
	CHECK_SOUND(e);
	/* Emptied, every data block is freed (none leaked, none freed twice). */
	for (int j = 0; j < 3; j++)
		CHECK(t_truncate(e, &f[j], 0) == 0);
	CHECK(env_sync(e) == 0 && ms_live_data(&e->e_st) == 0 && !e->e_st.ms_bad);
	env_free(e);
}

/* READ hands out pointers into dirty buffers and cached images; they stay valid and unchanged
 * while held, through later writes, syncs and truncation. */
static void test_read_refs(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f;
	static uint8_t data[200000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i % 251);
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	CHECK(t_write(e, &f, 0, data, sizeof(data)) == 0);
	struct fs_req r1, r2, r3;
	req_init(&r1, FS_OP_READ, e, &f);
	r1.u.read.rd_offset = 100;
	r1.u.read.rd_count = 1000;
	CHECK(env_run(e, &r1) == 0 && r1.u.read.rd_buf.fb_len == 1000);
	/* Dirty buffer, held: a write to the same block copies it. */
	const uint8_t *p1 = r1.u.read.rd_buf.fb_data;
	uint8_t xs[110];
	memset(xs, 'X', sizeof(xs));
	CHECK(t_write(e, &f, 0, xs, sizeof(xs)) == 0);
	CHECK(memcmp(p1, data + 100, 1000) == 0);
	uint8_t buf[1000];
	uint32_t n;
	CHECK(t_read(e, &f, 100, 20, buf, &n, NULL) == 0 && n == 20 &&
	      memcmp(buf, "XXXXXXXXXX", 10) == 0);
	CHECK(env_sync(e) == 0);
	CHECK(memcmp(p1, data + 100, 1000) == 0);
	/* A cached image, held: truncation frees the block, the image stays for the reader. */
	req_init(&r2, FS_OP_READ, e, &f);
	r2.u.read.rd_offset = 131072 + 5;
	r2.u.read.rd_count = 500;
	CHECK(env_run(e, &r2) == 0 && r2.u.read.rd_buf.fb_len == 500);
	CHECK(e->e_st.ms_holds == 1);
	CHECK(t_truncate(e, &f, 1000) == 0);
	CHECK(env_sync(e) == 0);
	CHECK(r2.u.read.rd_buf.fb_nsegs == 1); /* the image itself, as one piece */
	CHECK(fs_buf_copy_out(&r2.u.read.rd_buf, 0, buf, 500) == 500);
	CHECK(memcmp(buf, data + 131072 + 5, 500) == 0);
	/* Across two blocks: two pieces, the dirty buffers themselves, unchanged by a later write. */
	CHECK(t_write(e, &f, 0, data, sizeof(data)) == 0);
	req_init(&r3, FS_OP_READ, e, &f);
	r3.u.read.rd_offset = 131000;
	r3.u.read.rd_count = 200;
	CHECK(env_run(e, &r3) == 0 && r3.u.read.rd_buf.fb_len == 200);
	CHECK(r3.u.read.rd_buf.fb_nsegs == 2 && r3.u.read.rd_buf.fb_segs[0].iov_len == 72 &&
	      r3.u.read.rd_buf.fb_segs[1].iov_len == 128);
	CHECK(t_write(e, &f, 131000, xs, sizeof(xs)) == 0);
	CHECK(fs_buf_copy_out(&r3.u.read.rd_buf, 0, buf, 200) == 200);
	CHECK(memcmp(buf, data + 131000, 200) == 0);
	r1.u.read.rd_buf.fb_release(r1.u.read.rd_buf.fb_release_arg);
	r2.u.read.rd_buf.fb_release(r2.u.read.rd_buf.fb_release_arg);
	r3.u.read.rd_buf.fb_release(r3.u.read.rd_buf.fb_release_arg);
	CHECK(e->e_st.ms_holds == 0);
	/* A hole and a zero-byte read. */
	CHECK(t_truncate(e, &f, 10000000) == 0);
	CHECK(t_read(e, &f, 5000000, 1000, buf, &n, NULL) == 0 && n == 1000 && all_zero(buf, n));
	CHECK(t_read(e, &f, 5000000, 0, buf, &n, NULL) == 0 && n == 0);
	/* A READ handed out after close stays valid. */
	req_init(&r1, FS_OP_READ, e, &f);
	r1.u.read.rd_offset = 0;
	r1.u.read.rd_count = 100;
	CHECK(env_run(e, &r1) == 0 && r1.u.read.rd_buf.fb_len == 100);
	CHECK_SOUND(e);
	zpl_close(e->e_z);
	CHECK(fs_buf_copy_out(&r1.u.read.rd_buf, 0, buf, 100) == 100 && memcmp(buf, data, 100) == 0);
	r1.u.read.rd_buf.fb_release(r1.u.read.rd_buf.fb_release_arg);
	VERIFY(zpl_open(e->e_tree, &e->e_env, 0, &e->e_z, NULL) == 0);
	env_free(e);
}

/* A READ over several blocks hands out the cached images as pieces, without a copy: zeros for a
 * hole and for the tail of a short block, each image held until the release; one needing more
 * than FS_BUF_SEGS_MAX pieces is copied instead. */
static void test_read_pieces(void)
{
	struct tenv *e = env_new_ex(16384, 16384);
	struct fs_obj_id root = t_root(e), f, g;
	static uint8_t data[5 * 16384], got[1024 * 1024];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i % 253 + 1);
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	/* Blocks 0, 1, 3 and 4 written; 2 a hole. */
	CHECK(t_write(e, &f, 0, data, 2 * 16384) == 0);
	CHECK(t_write(e, &f, 3 * 16384, data + 3 * 16384, 2 * 16384) == 0);
	CHECK(env_sync(e) == 0);
	struct fs_req r;
	req_init(&r, FS_OP_READ, e, &f);
	r.u.read.rd_offset = 100;
	r.u.read.rd_count = 5 * 16384;
	CHECK(env_run(e, &r) == 0);
	const struct fs_buf *fb = &r.u.read.rd_buf;
	CHECK(fb->fb_len == 5 * 16384 - 100 && r.u.read.rd_eof);
	/* block 0 (from 100), block 1, the hole, block 3, block 4 */
	CHECK(fb->fb_nsegs == 5 && fb->fb_segs[2].iov_len == 16384);
	CHECK(e->e_st.ms_holds == 4);
	CHECK(fs_buf_copy_out(fb, 0, got, fb->fb_len) == fb->fb_len);
	CHECK(memcmp(got, data + 100, 2 * 16384 - 100) == 0);
	CHECK(all_zero(got + 2 * 16384 - 100, 16384));
	CHECK(memcmp(got + 3 * 16384 - 100, data + 3 * 16384, 2 * 16384) == 0);
	CHECK(fs_buf_copy_out(fb, 2 * 16384 - 110, got, 30) == 30 &&
	      memcmp(got, data + 2 * 16384 - 10, 10) == 0 && all_zero(got + 10, 20));
	/* The images stay as they were while held, through an overwrite, a sync and a truncation. */
	uint8_t xs[3 * 16384];
	memset(xs, 'X', sizeof(xs));
	CHECK(t_write(e, &f, 0, xs, sizeof(xs)) == 0);
	CHECK(t_truncate(e, &f, 0) == 0);
	CHECK(env_sync(e) == 0);
	CHECK(fs_buf_copy_out(fb, 0, got, fb->fb_len) == fb->fb_len);
	CHECK(memcmp(got, data + 100, 2 * 16384 - 100) == 0);
	CHECK(memcmp(got + 3 * 16384 - 100, data + 3 * 16384, 2 * 16384) == 0);
	fb->fb_release(fb->fb_release_arg);
	CHECK(e->e_st.ms_holds == 0);
	/* Past FS_BUF_SEGS_MAX blocks: one copied buffer. */
	CHECK(t_create(e, &root, "g", 0644, &g) == 0);
	for (uint32_t b = 0; b < 64; b++)
		CHECK(t_write(e, &g, (uint64_t)b * 16384, data, 16384) == 0);
	CHECK(env_sync(e) == 0);
	req_init(&r, FS_OP_READ, e, &g);
	r.u.read.rd_offset = 0;
	r.u.read.rd_count = 64 * 16384;
	CHECK(env_run(e, &r) == 0 && fb->fb_len == 64 * 16384 && fb->fb_nsegs == 0);
	CHECK(e->e_st.ms_holds == 0);
	for (uint32_t b = 0; b < 64; b++)
		CHECK(memcmp((const uint8_t *)fb->fb_data + b * 16384, data, 16384) == 0);
	fb->fb_release(fb->fb_release_arg);
	/* A short block 0 (written while the file was 5000 bytes long): its image, then zeros for
	 * the rest of it and the hole after it, in one piece. */
	struct fs_obj_id h;
	CHECK(t_create(e, &root, "h", 0644, &h) == 0);
	CHECK(t_write(e, &h, 0, data, 5000) == 0);
	CHECK(env_sync(e) == 0);
	CHECK(t_write(e, &h, 2 * 16384, data, 100) == 0);
	CHECK(env_sync(e) == 0);
	req_init(&r, FS_OP_READ, e, &h);
	r.u.read.rd_offset = 0;
	r.u.read.rd_count = 2 * 16384 + 100;
	CHECK(env_run(e, &r) == 0 && fb->fb_len == 2 * 16384 + 100);
	CHECK(fb->fb_nsegs == 3 && fb->fb_segs[0].iov_len == 8192 && /* 5000 rounded to 4 KiB */
	      fb->fb_segs[1].iov_len == 2 * 16384 - 8192);
	CHECK(fs_buf_copy_out(fb, 0, got, fb->fb_len) == fb->fb_len);
	CHECK(memcmp(got, data, 5000) == 0 && all_zero(got + 5000, 2 * 16384 - 5000) &&
	      memcmp(got + 2 * 16384, data, 100) == 0);
	fb->fb_release(fb->fb_release_arg);
	/* Exactly FS_BUF_SEGS_MAX blocks: pieces. */
	req_init(&r, FS_OP_READ, e, &g);
	r.u.read.rd_offset = 16384;
	r.u.read.rd_count = FS_BUF_SEGS_MAX * 16384;
	CHECK(env_run(e, &r) == 0 && fb->fb_nsegs == FS_BUF_SEGS_MAX);
	CHECK(e->e_st.ms_holds == FS_BUF_SEGS_MAX);
	CHECK(fs_buf_copy_out(fb, 5 * 16384, got, 16384) == 16384 && memcmp(got, data, 16384) == 0);
	fb->fb_release(fb->fb_release_arg);
	CHECK(e->e_st.ms_holds == 0);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_sync_errors(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f;
	static uint8_t data[400000];
	memset(data, 7, sizeof(data));
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	CHECK(t_write(e, &f, 0, data, sizeof(data)) == 0);
	uint64_t dirty = zpl_dirty_bytes(e->e_z), n = 99;
	CHECK(dirty == 4 * 131072);
	e->e_st.ms_fail_writes = 1;
	CHECK(zpl_sync(e->e_z, &n) == -ENOSPC && n == 0 && zpl_dirty_bytes(e->e_z) == dirty);
	e->e_st.ms_fail_writes = 0;
	CHECK(zpl_sync(e->e_z, &n) == 0 && n == 4 && zpl_dirty_bytes(e->e_z) == 0);
	CHECK(btree_sync(e->e_tree, &e->e_root) == 0);
	uint8_t buf[100];
	uint32_t got;
	CHECK(t_read(e, &f, 399950, 100, buf, &got, NULL) == 0 && got == 50 && buf[0] == 7);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_fsstat_commit_access(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), f, d;
	struct fs_req req;
	req_init(&req, FS_OP_FSSTAT, e, &root);
	CHECK(env_run(e, &req) == 0);
	CHECK(req.u.fsstat.st_total_bytes == 1ull << 40 && req.u.fsstat.st_free_bytes == 1ull
	                                                                                     << 39);
	CHECK(req.u.fsstat.st_avail_bytes == 1ull << 38 && req.u.fsstat.st_attr_valid);
	CHECK(req.u.fsstat.st_total_files == 1 + req.u.fsstat.st_free_files);
	CHECK(t_create(e, &root, "f", 0640, &f) == 0);
	CHECK(t_mkdir(e, &root, "d", 0750, &d) == 0);
	req_init(&req, FS_OP_COMMIT, e, &f);
	CHECK(env_run(e, &req) == 0 && req.u.commit.cm_wcc.fw_pre_valid &&
	      req.u.commit.cm_wcc.fw_post_valid);
	const uint32_t all = 0x3f;
	CHECK(t_access(e, &f, all) == (FS_ACCESS_READ | FS_ACCESS_MODIFY | FS_ACCESS_EXTEND));
	CHECK(t_access(e, &d, all) == (FS_ACCESS_READ | FS_ACCESS_LOOKUP | FS_ACCESS_MODIFY |
	                               FS_ACCESS_EXTEND | FS_ACCESS_DELETE));
	CHECK(t_chmod(e, &f, 0641) == 0);
	CHECK(t_access(e, &f, all) ==
	      (FS_ACCESS_READ | FS_ACCESS_MODIFY | FS_ACCESS_EXTEND | FS_ACCESS_EXECUTE));
	CHECK(t_access(e, &f, FS_ACCESS_READ) == FS_ACCESS_READ);
	e->e_cred = &user1; /* group 100 is not the file's (0): other bits */
	CHECK(t_access(e, &f, all) == FS_ACCESS_EXECUTE);
	CHECK(t_access(e, &d, all) == 0);
	e->e_cred = &root_cred;
	struct fs_sattr sa = {.fs_set_gid = true, .fs_gid = 200};
	CHECK(t_setattr(e, &f, &sa, NULL) == 0 && t_setattr(e, &d, &sa, NULL) == 0);
	e->e_cred = &user1; /* a supplementary group: group bits */
	CHECK(t_access(e, &f, all) == FS_ACCESS_READ);
	CHECK(t_access(e, &d, all) == (FS_ACCESS_READ | FS_ACCESS_LOOKUP));
	e->e_cred = &root_cred;
	CHECK(t_chmod(e, &f, 0600) == 0);
	CHECK(t_access(e, &f, all) ==
	      (FS_ACCESS_READ | FS_ACCESS_MODIFY | FS_ACCESS_EXTEND)); /* root: no x bit */
	CHECK_SOUND(e);
	env_free(e);
}

/* Every permission rule, each with a case that passes and one that fails. */
static void test_permissions(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), pub, priv, f, g, sticky, sg, x, y;
	struct fs_attr a;
	CHECK(t_chmod(e, &root, 0777) == 0);
	e->e_cred = &user1;
	CHECK(t_mkdir(e, &root, "pub", 0777, &pub) == 0);
	CHECK(t_mkdir(e, &root, "priv", 0700, &priv) == 0);
	CHECK(t_create(e, &priv, "f", 0600, &f) == 0);
	/* Search, read and write on directories. */
	e->e_cred = &user2;
	CHECK(t_lookup(e, &priv, "f", NULL, NULL) == -EACCES);
	CHECK(t_create(e, &priv, "g", 0644, NULL) == -EACCES);
	CHECK(t_remove(e, &priv, "f") == -EACCES);
	CHECK(t_mkdir(e, &priv, "g", 0755, NULL) == -EACCES);
	CHECK(t_rename(e, &priv, "f", &pub, "f") == -EACCES);
	CHECK(t_link(e, &f, &priv, "f2") == -EACCES);
	/* A directory one may search but not write: the name is looked up first, as the kernel
	 * does, so a missing name is ENOENT, and an existing one EEXIST or (CREATE UNCHECKED)
	 * the file, before write permission is asked (rm -f of a missing file stays silent). */
	struct fs_obj_id ro;
	e->e_cred = &user1;
	CHECK(t_mkdir(e, &root, "ro", 0755, &ro) == 0);
	CHECK(t_create(e, &ro, "f", 0644, NULL) == 0);
	e->e_cred = &user2;
	CHECK(t_remove(e, &ro, "missing") == -ENOENT);
	CHECK(t_remove(e, &ro, "f") == -EACCES);
	CHECK(t_create(e, &ro, "f", 0644, NULL) == 0); /* UNCHECKED: as open(O_CREAT) of it */
	CHECK(t_create(e, &ro, "new", 0644, NULL) == -EACCES);
	CHECK(t_mkdir(e, &ro, "f", 0755, NULL) == -EEXIST);
	CHECK(t_rename(e, &ro, "missing", &pub, "x") == -ENOENT);
	CHECK(t_rename(e, &ro, "f", &pub, "x") == -EACCES);
	/* Files: other bits, no access; root reads and writes anything. */
	CHECK(t_read(e, &f, 0, 1, NULL, NULL, NULL) == -EACCES);
	CHECK(t_write(e, &f, 0, "a", 1) == -EACCES);
	CHECK(t_truncate(e, &f, 0) == -EACCES);
	e->e_cred = &root_cred;
	CHECK(t_write(e, &f, 0, "abc", 3) == 0);
	CHECK(t_lookup(e, &priv, "f", NULL, NULL) == 0);
	/* The owner reads and writes its own file whatever the mode (as knfsd). */
	CHECK(t_chmod(e, &f, 0000) == 0);
	e->e_cred = &user1;
	CHECK(t_write(e, &f, 3, "d", 1) == 0);
	char buf[8];
	uint32_t n;
	CHECK(t_read(e, &f, 0, 8, buf, &n, NULL) == 0 && n == 4);
	/* Group bits through a supplementary group; execute-only lets READ through. */
	e->e_cred = &root_cred;
	CHECK(t_chmod(e, &priv, 0755) == 0);
	struct fs_sattr grp = {
	    .fs_set_gid = true, .fs_gid = 300, .fs_set_mode = true, .fs_mode = 0060};
	CHECK(t_setattr(e, &f, &grp, NULL) == 0);
	e->e_cred = &user2;
	CHECK(t_write(e, &f, 0, "e", 1) == 0 && t_read(e, &f, 0, 8, buf, &n, NULL) == 0);
	e->e_cred = &root_cred;
	CHECK(t_chmod(e, &f, 0010) == 0);
	e->e_cred = &user2;
	CHECK(t_read(e, &f, 0, 8, buf, &n, NULL) == 0);
	CHECK(t_write(e, &f, 0, "e", 1) == -EACCES);
	/* chown only by root; chgrp by the owner to its own groups; chmod by the owner or root. */
	e->e_cred = &root_cred;
	struct fs_sattr own = {
	    .fs_set_uid = true, .fs_uid = 1001, .fs_set_gid = true, .fs_gid = 100};
	CHECK(t_setattr(e, &f, &own, NULL) == 0);
	e->e_cred = &user1;
	struct fs_sattr cu = {.fs_set_uid = true, .fs_uid = 1002};
	CHECK(t_setattr(e, &f, &cu, NULL) == -EPERM);
	cu.fs_uid = 1001; /* to itself: allowed */
	CHECK(t_setattr(e, &f, &cu, NULL) == 0);
	struct fs_sattr cg = {.fs_set_gid = true, .fs_gid = 200};
	CHECK(t_setattr(e, &f, &cg, NULL) == 0);
	cg.fs_gid = 300;
	CHECK(t_setattr(e, &f, &cg, NULL) == -EPERM);
	CHECK(t_chmod(e, &f, 02644) == 0 && t_getattr(e, &f, &a) == 0 && a.fa_mode == 02644);
	e->e_cred = &root_cred;
	cg.fs_gid = 300;
	CHECK(t_setattr(e, &f, &cg, NULL) == 0);
	e->e_cred = &user1; /* not in group 300: its setgid bit is dropped */
	CHECK(t_chmod(e, &f, 02644) == 0 && t_getattr(e, &f, &a) == 0 && a.fa_mode == 0644);
	e->e_cred = &user2;
	CHECK(t_chmod(e, &f, 0777) == -EPERM);
	/* Times: to now with write access; explicit ones only by the owner or root. */
	struct fs_sattr now = {.fs_mtime_how = FS_TIME_SERVER, .fs_atime_how = FS_TIME_SERVER};
	struct fs_sattr expl = {.fs_mtime_how = FS_TIME_CLIENT, .fs_mtime = {5, 0}};
	CHECK(t_setattr(e, &f, &now, NULL) == -EACCES); /* 0644, other: no write */
	e->e_cred = &user1;
	CHECK(t_chmod(e, &f, 0664) == 0); /* user2 is in the file's group 300 */
	e->e_cred = &user2;
	CHECK(t_setattr(e, &f, &now, NULL) == 0);
	CHECK(t_setattr(e, &f, &expl, NULL) == -EPERM);
	e->e_cred = &user1;
	CHECK(t_setattr(e, &f, &expl, NULL) == 0);
	/* A write by anyone but root, the owner included, clears setuid, and setgid with group
	 * execute (write(2) without CAP_FSETID); root's does not. */
	e->e_cred = &root_cred;
	cg.fs_gid = 200;
	CHECK(t_setattr(e, &f, &cg, NULL) == 0);
	e->e_cred = &user1;
	CHECK(t_chmod(e, &f, 06777) == 0);
	CHECK(t_write(e, &f, 0, "o", 1) == 0 && t_getattr(e, &f, &a) == 0 && a.fa_mode == 0777);
	CHECK(t_chmod(e, &f, 06777) == 0);
	e->e_cred = &root_cred;
	CHECK(t_write(e, &f, 0, "o", 1) == 0 && t_getattr(e, &f, &a) == 0 && a.fa_mode == 06777);
	/* So does a truncation (truncate(2)), even to the size the file has. */
	e->e_cred = &user1;
	CHECK(t_getattr(e, &f, &a) == 0 && t_truncate(e, &f, a.fa_size) == 0);
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_mode == 0777);
	CHECK(t_chmod(e, &f, 06777) == 0);
	e->e_cred = &user2;
	CHECK(t_write(e, &f, 0, "o", 1) == 0 && t_getattr(e, &f, &a) == 0 && a.fa_mode == 0777);
	e->e_cred = &user1;
	CHECK(t_chmod(e, &f, 06767) == 0);
	e->e_cred = &user2;
	CHECK(t_write(e, &f, 0, "o", 1) == 0 && t_getattr(e, &f, &a) == 0 && a.fa_mode == 02767);
	/* Sticky directory: only the owner of the entry's object, of the directory, or root. */
	e->e_cred = &root_cred;
	CHECK(t_mkdir(e, &root, "tmp", 01777, &sticky) == 0);
	e->e_cred = &user1;
	CHECK(t_create(e, &sticky, "mine", 0666, &x) == 0);
	CHECK(t_create(e, &sticky, "mine2", 0666, &y) == 0);
	e->e_cred = &user2;
	CHECK(t_remove(e, &sticky, "mine") == -EPERM);
	CHECK(t_rename(e, &sticky, "mine", &pub, "stolen") == -EPERM);
	CHECK(t_create(e, &sticky, "theirs", 0666, NULL) == 0);
	CHECK(t_rename(e, &sticky, "theirs", &sticky, "mine") ==
	      -EPERM); /* would replace user1's */
	CHECK(t_remove(e, &sticky, "theirs") == 0);
	e->e_cred = &user1;
	CHECK(t_remove(e, &sticky, "mine") == 0);
	e->e_cred = &root_cred;
	CHECK(t_remove(e, &sticky, "mine2") == 0);
	/* Setgid directory: new objects take its group, new directories its setgid bit. */
	CHECK(t_mkdir(e, &root, "sg", 0777, &sg) == 0);
	struct fs_sattr sgs = {
	    .fs_set_gid = true, .fs_gid = 555, .fs_set_mode = true, .fs_mode = 02777};
	CHECK(t_setattr(e, &sg, &sgs, NULL) == 0);
	e->e_cred = &user1;
	CHECK(t_create(e, &sg, "file", 02755, &g) == 0);
	CHECK(t_getattr(e, &g, &a) == 0 && a.fa_gid == 555 && a.fa_uid == 1001 &&
	      a.fa_mode == 0755);
	CHECK(t_mkdir(e, &sg, "dir", 0755, &x) == 0);
	CHECK(t_getattr(e, &x, &a) == 0 && a.fa_gid == 555 && a.fa_mode == 02755);
	/* Attributes a non-root creator may not give. */
	struct fs_sattr bad = {.fs_set_uid = true, .fs_uid = 0};
	CHECK(t_create_ex(e, FS_OP_CREATE, &pub, "u0", FS_CREATE_UNCHECKED, &bad, NULL, NULL,
	                  NULL) == -EPERM);
	CHECK(t_lookup(e, &pub, "u0", NULL, NULL) == -ENOENT);
	/* Moving a directory to another parent needs write on it (its ".."). */
	e->e_cred = &root_cred;
	CHECK(t_mkdir(e, &pub, "rootdir", 0755, &x) == 0);
	e->e_cred = &user1;
	CHECK(t_rename(e, &pub, "rootdir", &root, "rootdir") == -EACCES);
	CHECK(t_rename(e, &pub, "rootdir", &pub, "renamed") == 0);
	/* Root: execute only where some x bit is set. */
	e->e_cred = &root_cred;
	CHECK(t_chmod(e, &f, 0666) == 0);
	CHECK(t_access(e, &f, FS_ACCESS_EXECUTE) == 0);
	CHECK(t_chmod(e, &priv, 0000) == 0);
	CHECK(t_lookup(e, &priv, "f", NULL, NULL) == 0); /* root searches any directory */
	CHECK_SOUND(e);
	env_free(e);
}

static uint64_t hash_const(const void *name, size_t len, uint64_t salt)
{
	(void)name;
	(void)len;
	(void)salt;
	return 0x123456789abc0000ull;
}

static uint64_t hash_zero(const void *name, size_t len, uint64_t salt)
{
	(void)name;
	(void)len;
	(void)salt;
	return 0;
}

/* All names hash alike: collision indexes 0, 1, 2..., the first free one reused. */
static void test_collisions(void)
{
	struct tenv *e = env_new();
	zpl_test_set_hash(e->e_z, hash_const);
	struct fs_obj_id root = t_root(e), d, ids[40], x;
	const uint64_t base = 0x123456789abc0000ull;
	char name[16];
	CHECK(t_mkdir(e, &root, "d", 0755, &d) == 0); /* index 0 in the root */
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		CHECK(t_create(e, &d, name, 0644, &ids[i]) == 0);
	}
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		CHECK(t_lookup(e, &d, name, &x, NULL) == 0 && memcmp(&x, &ids[i], sizeof(x)) == 0);
	}
	CHECK(t_lookup(e, &d, "n40", NULL, NULL) == -ENOENT);
	CHECK(t_create_ex(e, FS_OP_CREATE, &d, "n7", FS_CREATE_GUARDED, NULL, NULL, NULL, NULL) ==
	      -EEXIST);
	struct rd_ctx c;
	CHECK(t_readdir_all(e, &d, false, 9, &c, true) == 0 && c.n == 42);
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		CHECK(strcmp(c.ents[i + 2].name, name) == 0 &&
		      c.ents[i + 2].cookie == (base | (uint64_t)i));
	}
	free(c.ents);
	CHECK(t_remove(e, &d, "n5") == 0 && t_remove(e, &d, "n17") == 0);
	CHECK(t_lookup(e, &d, "n5", NULL, NULL) == -ENOENT &&
	      t_lookup(e, &d, "n6", NULL, NULL) == 0);
	CHECK(t_create(e, &d, "new", 0644, NULL) == 0); /* takes index 5 */
	CHECK(t_rename(e, &d, "n3", &d, "n3b") == 0);   /* the new name takes 17, then 3 is free */
	CHECK(t_link(e, &ids[0], &d, "n0-link") == 0);  /* index 3 */
	CHECK(t_readdir_all(e, &d, true, 1000, &c, false) == 0 && c.n == 42);
	CHECK(strcmp(c.ents[2 + 3].name, "n0-link") == 0 && c.ents[2 + 3].cookie == (base | 3));
	CHECK(strcmp(c.ents[2 + 5].name, "new") == 0 && c.ents[2 + 5].cookie == (base | 5));
	CHECK(strcmp(c.ents[2 + 17].name, "n3b") == 0 && c.ents[2 + 17].cookie == (base | 17));
	free(c.ents);
	CHECK_SOUND(e);
	/* A hash whose base is zero moves above the cookies of "." and "..". */
	struct tenv *e2 = env_new();
	zpl_test_set_hash(e2->e_z, hash_zero);
	struct fs_obj_id r2 = t_root(e2);
	CHECK(t_create(e2, &r2, "a", 0644, NULL) == 0 && t_create(e2, &r2, "b", 0644, NULL) == 0);
	CHECK(t_readdir_all(e2, &r2, false, 1000, &c, false) == 0 && c.n == 4);
	CHECK(c.ents[2].cookie == 65536 && c.ents[3].cookie == 65537);
	free(c.ents);
	CHECK_SOUND(e2);
	/* All 2^16 indexes of a hash taken: ENOSPC (planted: 65536 creates would scan
	 * quadratically). */
	uint8_t key[17], val[12];
	for (uint32_t i = 0; i < 65536; i++) {
		uint64_t h = 65536 + i;
		for (int k = 0; k < 8; k++) {
			key[k] = (uint8_t)((uint64_t)ZPL_ROOT_OBJID >> (56 - 8 * k));
			key[9 + k] = (uint8_t)(h >> (56 - 8 * k));
		}
		key[8] = 2;
		memset(val, 0, sizeof(val));
		val[0] = ZPL_ROOT_OBJID;
		val[8] = FS_DIR;
		val[9] = 2;
		val[10] = (uint8_t)('a' + i % 26);
		val[11] = (uint8_t)('a' + i / 26 % 26);
		VERIFY(btree_put(e2->e_tree, key, 17, val, 12, BTREE_PUT_UPSERT, NULL) == 0);
	}
	CHECK(t_create(e2, &r2, "c", 0644, NULL) == -ENOSPC);
	env_free(e2);
	env_free(e);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory of many entries: create, look up each, READDIR in pages while entries are removed
 * and added between pages: every entry present throughout is listed exactly once. */
static void big_dir(uint32_t n)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), d;
	char name[32];
	CHECK(t_mkdir(e, &root, "big", 0755, &d) == 0);
	bool ok = true;
	for (uint32_t i = 0; i < n && ok; i++) {
		snprintf(name, sizeof(name), "f%07u", i);
		ok = t_create(e, &d, name, 0644, NULL) == 0;
		if (i % 50000 == 49999)
			ok = ok && env_sync(e) == 0;
	}
	CHECK(ok);
	env_reopen(e);
	for (uint32_t i = 0; i < n && ok; i++) {
		snprintf(name, sizeof(name), "f%07u", i);
		ok = t_lookup(e, &d, name, NULL, NULL) == 0;
	}
	CHECK(ok);
	struct fs_attr a;
	CHECK(t_getattr(e, &d, &a) == 0 && a.fa_size == (n + 2ull) * 32);
	/* removed[i]: entry i was removed during the listing */
	bool *removed = calloc(n, sizeof(bool));
	struct rd_ctx c;
	memset(&c, 0, sizeof(c));
	c.page_max = 1000;
	uint64_t cookie = 0;
	uint8_t verf[8] = {0};
	uint32_t added = 0;
	for (int pages = 0; ok; pages++) {
		bool eof = false;
		size_t n0 = c.n;
		ok = t_readdir_page(e, &d, cookie, verf, pages % 7 == 0, &c, verf, &eof) == 0;
		if (!ok || eof)
			break;
		ok = c.n > n0;
		cookie = c.ents[c.n - 1].cookie;
		for (int k = 0; k < 100 && ok; k++) {
			uint32_t i = (uint32_t)(rnd() % n);
			if (removed[i])
				continue;
			snprintf(name, sizeof(name), "f%07u", i);
			ok = t_remove(e, &d, name) == 0;
			removed[i] = true;
		}
		for (int k = 0; k < 100 && ok; k++) {
			snprintf(name, sizeof(name), "g%07u", added++);
			ok = t_create(e, &d, name, 0644, NULL) == 0;
		}
		if (pages % 20 == 19)
			ok = ok && env_sync(e) == 0;
	}
	CHECK(ok);
	/* No name twice; every entry never removed listed. */
	char **names = malloc(sizeof(char *) * (c.n + 1));
	for (size_t i = 0; i < c.n; i++)
		names[i] = c.ents[i].name;
	qsort(names, c.n, sizeof(char *), cmp_str);
	bool dup = false;
	for (size_t i = 1; i < c.n; i++)
		dup = dup || strcmp(names[i - 1], names[i]) == 0;
	CHECK(!dup);
	uint32_t present = 0, listed = 0;
	for (size_t i = 0; i < c.n; i++) {
		unsigned k;
		if (sscanf(c.ents[i].name, "f%7u", &k) == 1 && k < n && !removed[k])
			listed++;
	}
	for (uint32_t i = 0; i < n; i++)
		present += !removed[i];
	CHECKF(listed == present, "listed %u of the %u entries present throughout", listed,
	       present);
	free(names);
	free(c.ents);
	free(removed);
	CHECK_SOUND(e);
	env_free(e);
}

static void test_big_dir(void)
{
	const char *big = getenv("ZPL_TEST_BIG");
	big_dir(big != NULL && big[0] == '1' ? 1000000 : 100000);
}

/* ---- replay ---- */

struct kv {
	uint8_t key[ZPL_KEY_MAX];
	uint32_t klen;
	uint8_t *val;
	uint32_t vlen;
};

struct kv_list {
	struct kv *v;
	size_t n, cap;
};

static bool kv_visit(void *arg, const void *key, uint32_t klen, const void *val, uint32_t vlen)
{
	struct kv_list *l = arg;
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 1024;
		l->v = realloc(l->v, sizeof(*l->v) * l->cap);
		VERIFY(l->v != NULL);
	}
	struct kv *x = &l->v[l->n++];
	VERIFY(klen <= ZPL_KEY_MAX);
	memcpy(x->key, key, klen);
	x->klen = klen;
	x->val = malloc(vlen + 1);
	VERIFY(x->val != NULL);
	memcpy(x->val, val, vlen);
	x->vlen = vlen;
	return true;
}

/* Every record of the tree, loading what the store lacks. */
static void kv_collect(struct tenv *e, struct kv_list *l)
{
	memset(l, 0, sizeof(*l));
	for (;;) {
		struct blk_ptr missing;
		bool any = l->n > 0;
		int rc = btree_scan(e->e_tree, any ? l->v[l->n - 1].key : NULL,
		                    any ? l->v[l->n - 1].klen : 0, any, kv_visit, l, &missing);
		if (rc == -SH_ENEEDBLOCK) {
			VERIFY(ms_load(&e->e_st, &missing) == 0);
			continue;
		}
		VERIFY(rc == 0);
		return;
	}
}

static void kv_free(struct kv_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].val);
	free(l->v);
}

static uint64_t le_at(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Compares two datasets record by record: meta, inodes and dirents byte for byte, the same set of
 * extents, and the data of every extent read through each dataset. */
static bool same_datasets(struct tenv *a, struct tenv *b)
{
	struct kv_list la, lb;
	kv_collect(a, &la);
	kv_collect(b, &lb);
	bool same = la.n == lb.n;
	CHECKF(same, "%zu records against %zu", la.n, lb.n);
	static uint8_t ba[1 << 20], bb[1 << 20];
	const struct kv *ino = NULL;
	for (size_t i = 0; same && i < la.n; i++) {
		const struct kv *x = &la.v[i], *y = &lb.v[i];
		if (x->klen != y->klen || memcmp(x->key, y->key, x->klen) != 0) {
			CHECKF(false, "record %zu: keys differ", i);
			same = false;
			break;
		}
		uint8_t kind = x->key[8];
		if (kind == 1)
			ino = x;
		if (kind != 3) {
			if (x->vlen != y->vlen || memcmp(x->val, y->val, x->vlen) != 0) {
				CHECKF(false, "record %zu (kind %u, object %llu): values differ", i,
				       kind, (unsigned long long)le_at(x->key, 0) + 0 * i);
				same = false;
			}
			continue;
		}
		/* An extent: read its block's bytes below the size through both. */
		VERIFY(ino != NULL && memcmp(ino->key, x->key, 8) == 0);
		uint64_t objid = 0, blk = 0;
		for (int k = 0; k < 8; k++) {
			objid = objid << 8 | x->key[k];
			blk = blk << 8 | x->key[9 + k];
		}
		uint32_t bsize = (uint32_t)le_at(ino->val + 28, 4);
		uint64_t size = le_at(ino->val + 32, 8), gen = le_at(ino->val + 88, 8);
		if (ino->val[0] != FS_REG)
			continue; /* a long symlink's block: READLINK compared it through the
			             inode's size */
		struct fs_obj_id id = {.foi_len = 16};
		for (int k = 0; k < 8; k++) {
			id.foi_bytes[k] = (uint8_t)(objid >> (8 * k));
			id.foi_bytes[8 + k] = (uint8_t)(gen >> (8 * k));
		}
		uint64_t off = blk * bsize, len = SH_MIN((uint64_t)bsize, size - off);
		const struct fs_cred *ca = a->e_cred, *cb = b->e_cred;
		a->e_cred = b->e_cred = &root_cred;
		bool ra = read_all(a, &id, off, ba, len), rb = read_all(b, &id, off, bb, len);
		a->e_cred = ca;
		b->e_cred = cb;
		if (!ra || !rb || memcmp(ba, bb, len) != 0) {
			CHECKF(false, "object %llu block %llu: data differs",
			       (unsigned long long)objid, (unsigned long long)blk);
			same = false;
		}
	}
	kv_free(&la);
	kv_free(&lb);
	return same;
}

#define NAMES 24
#define DIRS 5

/* A random operation on e among a few directories and names; returns its status. */
static int random_op(struct tenv *e, struct fs_obj_id *dirs, int *ndirs)
{
	static const struct fs_cred *creds[] = {&root_cred, &root_cred, &root_cred, &user1, &user2};
	static uint8_t data[200000];
	static char target[FS_PATH_MAX + 1];
	char name[16], name2[16];
	struct fs_obj_id *dir = &dirs[rnd() % (uint64_t)*ndirs],
	                 *dir2 = &dirs[rnd() % (uint64_t)*ndirs], id;
	snprintf(name, sizeof(name), "n%d", (int)(rnd() % NAMES));
	snprintf(name2, sizeof(name2), "n%d", (int)(rnd() % NAMES));
	e->e_cred = creds[rnd() % SH_ARRAY_SIZE(creds)];
	struct fs_sattr sa = {0};
	switch (rnd() % 16) {
	case 0:
	case 1: {
		sa.fs_set_mode = rnd() % 2;
		sa.fs_mode = (uint32_t)(rnd() % 010000);
		sa.fs_set_size = rnd() % 4 == 0;
		sa.fs_size = rnd() % 100000;
		uint8_t verf[8] = {(uint8_t)rnd(), 1, 2, 3, 4, 5, 6, 7};
		return t_create_ex(e, FS_OP_CREATE, dir, name, (enum fs_create_mode)(rnd() % 3),
		                   &sa, verf, NULL, NULL);
	}
	case 2: {
		int rc = t_mkdir(e, dir, name, rnd() % 4 == 0 ? 02777 : 0777, &id);
		if (rc == 0 && *ndirs < DIRS)
			dirs[(*ndirs)++] = id;
		return rc;
	}
	case 3: {
		uint32_t len =
		    rnd() % 3 == 0 ? 1000 + (uint32_t)(rnd() % 3000) : 1 + (uint32_t)(rnd() % 50);
		for (uint32_t i = 0; i < len; i++)
			target[i] = (char)('a' + rnd() % 26);
		target[len] = '\0';
		return t_symlink(e, dir, name, target, NULL);
	}
	case 4: return t_mknod(e, dir, name, (enum fs_type)(FS_BLK + rnd() % 2), 7, 9, NULL);
	case 5:
	case 6:
	case 7:
	case 8: {
		if (t_lookup(e, dir, name, &id, NULL) != 0)
			return -ENOENT;
		uint32_t len = (uint32_t)(rnd() % (rnd() % 5 == 0 ? sizeof(data) : 3000)) + 1;
		uint64_t off = rnd() % 10 == 0 ? (1ull << 33) + rnd() % 100000 : rnd() % 300000;
		for (uint32_t i = 0; i < len; i++)
			data[i] = (uint8_t)rnd();
		return t_write(e, &id, off, data, len);
	}
	case 9:
		if (t_lookup(e, dir, name, &id, NULL) != 0)
			return -ENOENT;
		return t_truncate(e, &id, rnd() % 2 ? rnd() % 200000 : rnd() % 20000000000ull);
	case 10:
		if (t_lookup(e, dir, name, &id, NULL) != 0)
			return -ENOENT;
		sa.fs_set_mode = rnd() % 2;
		sa.fs_mode = (uint32_t)(rnd() % 010000);
		sa.fs_set_uid = rnd() % 4 == 0;
		sa.fs_uid = 1000 + (uint32_t)(rnd() % 3);
		sa.fs_set_gid = rnd() % 4 == 0;
		sa.fs_gid = rnd() % 2 ? 100 : 300;
		sa.fs_atime_how = (enum fs_time_how)(rnd() % 3);
		sa.fs_atime = (struct fs_time){(int64_t)(rnd() % 100000), 5};
		sa.fs_mtime_how = (enum fs_time_how)(rnd() % 3);
		sa.fs_mtime = (struct fs_time){(int64_t)(rnd() % 100000), 7};
		return t_setattr(e, &id, &sa, NULL);
	case 11: return t_remove(e, dir, name);
	case 12: return t_rmdir(e, dir, name);
	case 13:
	case 14: return t_rename(e, dir, name, dir2, name2);
	default:
		if (t_lookup(e, dir, name, &id, NULL) != 0)
			return -ENOENT;
		return t_link(e, &id, dir2, name2);
	}
}

/* Replays e's log into a fresh dataset formatted alike. */
static struct tenv *replay_into_fresh(struct tenv *a, bool cold)
{
	struct tenv *b = env_new_ex(a->e_cfg.bc_node_bytes, a->e_record);
	for (size_t i = 0; i < a->e_nrecs; i++) {
		if (cold && rnd() % 3 == 0)
			ms_forget(&b->e_st);
		int rc;
		struct blk_ptr missing;
		while ((rc = zpl_replay(b->e_z, a->e_recs[i], a->e_rec_lens[i], &missing)) ==
		           -SH_ENEEDBLOCK ||
		       rc == -SH_EPARTIAL)
			VERIFY(rc == -SH_EPARTIAL || ms_load(&b->e_st, &missing) == 0);
		CHECKF(rc == 0, "record %zu (op %u): %d", i, a->e_recs[i][5], rc);
		if (rc != 0)
			break;
		if (rnd() % 40 == 0)
			VERIFY(env_sync(b) == 0);
	}
	return b;
}

static void test_replay(void)
{
	struct tenv *a = env_new_ex(8192, 32768);
	struct fs_obj_id dirs[DIRS];
	int ndirs = 1;
	dirs[0] = t_root(a);
	a->e_logging = true;
	CHECK(t_chmod(a, &dirs[0], 0777) == 0);
	int ok_ops = 0;
	for (int step = 0; step < 1500; step++) {
		a->e_forget = rnd() % 3 == 0;
		if (random_op(a, dirs, &ndirs) == 0)
			ok_ops++;
		a->e_forget = false;
		if (rnd() % 50 == 0)
			VERIFY(env_sync(a) == 0);
		if (rnd() % 300 == 0)
			env_reopen(a);
	}
	a->e_cred = &root_cred;
	CHECKF(a->e_nrecs > 300 && a->e_restarts > 100, "%zu records, %llu restarts", a->e_nrecs,
	       (unsigned long long)a->e_restarts);
	CHECK_SOUND(a);
	struct tenv *b = replay_into_fresh(a, true);
	CHECK(same_datasets(a, b));
	CHECK_SOUND(b);
	/* And after both are written out and reopened cold. */
	env_reopen(a);
	env_reopen(b);
	CHECK(same_datasets(a, b));
	env_free(b);

	/* Hostile records: every truncation, and random corruption, fail cleanly or apply to a
	 * dataset that stays sound. */
	struct tenv *c = env_new_ex(8192, 32768);
	size_t rejected = 0, applied = 0;
	for (size_t i = 0; i < a->e_nrecs; i++) {
		const uint8_t *rec = a->e_recs[i];
		size_t len = a->e_rec_lens[i];
		struct blk_ptr missing;
		for (size_t cut = 0; cut < len; cut += 1 + cut / 4)
			CHECK(zpl_replay(c->e_z, rec, cut, &missing) == -EINVAL);
		uint8_t *bad = malloc(len);
		for (int k = 0; k < 8; k++) {
			memcpy(bad, rec, len);
			size_t pos = rnd() % SH_MIN(len, (size_t)400);
			bad[pos] ^= (uint8_t)(1u << (rnd() % 8));
			int rc;
			while ((rc = zpl_replay(c->e_z, bad, len, &missing)) == -SH_ENEEDBLOCK)
				VERIFY(ms_load(&c->e_st, &missing) == 0);
			CHECK(rc != -EIO); /* nothing it applies damages the dataset */
			if (rc == 0)
				applied++;
			else
				rejected++;
		}
		free(bad);
		/* The record itself, mostly failing on a dataset that is not its own. */
		int rc;
		while ((rc = zpl_replay(c->e_z, rec, len, &missing)) == -SH_ENEEDBLOCK)
			VERIFY(ms_load(&c->e_st, &missing) == 0);
	}
	CHECKF(rejected > 0, "%zu rejected, %zu applied", rejected, applied);
	CHECK(zpl_replay(c->e_z, NULL, 0, NULL) == -EINVAL);
	CHECK_SOUND(c);
	env_free(c);
	env_free(a);
}

/* A truncation dropping more than ZPL_REAP_STEP_EXTENTS extents, in steps (-SH_EPARTIAL): the
 * bytes kept are intact, those dropped read as zeros when the file grows again, the dataset is
 * sound, and the log replays to the same state (the replay takes the same steps). CREATE
 * UNCHECKED with size 0 over a large file steps the same way. */
static void test_truncate_steps(void)
{
	struct tenv *e = env_new_ex(16384, 4096);
	e->e_logging = true;
	struct fs_obj_id root = t_root(e), f, g;
	const uint32_t nblocks = 3000;
	const uint64_t keep = 1500ull * 4096 + 100, total = (uint64_t)nblocks * 4096;
	uint8_t *ref = malloc(total), *buf = malloc(total);
	VERIFY(ref != NULL && buf != NULL);
	for (uint64_t i = 0; i < total; i++)
		ref[i] = (uint8_t)(i * 31 + i / 4096);
	CHECK(t_create(e, &root, "t", 0644, &f) == 0);
	CHECK(t_create(e, &root, "u", 0644, &g) == 0);
	for (uint32_t i = 0; i < nblocks; i++) {
		CHECK(t_write(e, &f, (uint64_t)i * 4096, ref + (uint64_t)i * 4096, 4096) == 0);
		CHECK(t_write(e, &g, (uint64_t)i * 4096, ref + (uint64_t)i * 4096, 4096) == 0);
	}
	CHECK(env_sync(e) == 0);
	uint64_t partials = e->e_partials;
	e->e_forget = true; /* cold: each step loads its leaves */
	CHECK(t_truncate(e, &f, keep) == 0);
	e->e_forget = false;
	CHECKF(e->e_partials == partials + 1, "%llu steps", /* 1,024, then 475 */
	       (unsigned long long)(e->e_partials - partials));
	struct fs_attr a;
	CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == keep && a.fa_used_bytes == 1501ull * 4096);
	CHECK(t_truncate(e, &f, total) == 0);
	memset(ref + keep, 0, total - keep);
	CHECK(read_all(e, &f, 0, buf, total) && memcmp(buf, ref, total) == 0);
	CHECK_SOUND(e);
	struct fs_sattr sa = {.fs_set_size = true, .fs_size = 0};
	partials = e->e_partials;
	CHECK(t_create_ex(e, FS_OP_CREATE, &root, "u", FS_CREATE_UNCHECKED, &sa, NULL, NULL, NULL) ==
	      0);
	CHECK(e->e_partials == partials + 2);
	CHECK(t_getattr(e, &g, &a) == 0 && a.fa_size == 0 && a.fa_used_bytes == 0);
	CHECK_SOUND(e);
	struct tenv *b = replay_into_fresh(e, true);
	CHECK(same_datasets(e, b));
	CHECK_SOUND(b);
	env_reopen(e);
	CHECK(read_all(e, &f, 0, buf, total) && memcmp(buf, ref, total) == 0);
	CHECK_SOUND(e);
	env_free(b);
	env_free(e);
	free(ref);
	free(buf);
}

/* Runs zpl_reap until the queue of removed files is empty, loading what it misses; returns the
 * calls that changed something, or -1. */
static int t_reap_all(struct tenv *e)
{
	int steps = 0;
	for (int attempts = 0; attempts < 100000; attempts++) {
		bool more = false;
		struct blk_ptr missing;
		int rc = zpl_reap(e->e_z, &more, &missing);
		if (rc == -SH_ENEEDBLOCK) {
			if (ms_load(&e->e_st, &missing) != 0)
				return -1;
			continue;
		}
		if (rc != 0)
			return -1;
		if (!more)
			return steps;
		steps++;
	}
	return -1;
}

/* The REMOVE of a file of more than ZPL_REAP_INLINE_MAX extents takes its name and queues it
 * (zpl_reap.c): no block is freed yet, its handle is stale, the dataset is sound (R9), also
 * after a sync and reopen cold; zpl_reap then frees every block in steps and deletes the inode.
 * Replaying the log queues it alike. A RENAME over such a file queues it too. */
static void test_remove_queued(void)
{
	struct tenv *e = env_new_ex(16384, 4096);
	e->e_logging = true;
	struct fs_obj_id root = t_root(e), f, g, h;
	static uint8_t block[4096];
	memset(block, 0x3c, sizeof(block));
	const uint32_t nblocks = 3000; /* three steps of ZPL_REAP_STEP_EXTENTS */
	CHECK(t_create(e, &root, "big", 0644, &f) == 0);
	CHECK(t_create(e, &root, "other", 0644, &g) == 0);
	for (uint32_t i = 0; i < nblocks; i++) {
		CHECK(t_write(e, &f, (uint64_t)i * sizeof(block), block, sizeof(block)) == 0);
		CHECK(t_write(e, &g, (uint64_t)i * sizeof(block), block, sizeof(block)) == 0);
	}
	CHECK(env_sync(e) == 0);
	/* Dirty buffers too: the last blocks rewritten after the sync. */
	for (uint32_t i = nblocks - 10; i < nblocks; i++)
		CHECK(t_write(e, &f, (uint64_t)i * sizeof(block), block, 100) == 0);
	uint64_t frees = e->e_st.ms_data_frees;
	CHECK(t_remove(e, &root, "big") == 0);
	CHECK(e->e_st.ms_data_frees == frees);
	struct fs_attr a;
	CHECK(t_getattr(e, &f, &a) == -ESTALE);
	CHECK(t_write(e, &f, 0, block, 10) == -ESTALE);
	CHECK(t_lookup(e, &root, "big", &h, NULL) == -ENOENT);
	CHECK_SOUND(e);
	env_reopen(e);
	CHECK_SOUND(e);
	CHECK(t_getattr(e, &f, &a) == -ESTALE);
	e->e_forget = true; /* cold: each step loads its leaves */
	ms_forget(&e->e_st);
	int steps = t_reap_all(e);
	e->e_forget = false;
	CHECKF(steps == 3, "%d steps", steps);
	/* Every block, and the first copies of the 10 rewritten ones, replaced by the reopen's
	 * sync. */
	CHECKF(e->e_st.ms_data_frees == frees + nblocks + 10, "%llu frees",
	       (unsigned long long)(e->e_st.ms_data_frees - frees));
	CHECK_SOUND(e);
	CHECK(t_reap_all(e) == 0);
	/* RENAME over a large file queues it as well. */
	CHECK(t_create(e, &root, "new", 0644, &h) == 0);
	frees = e->e_st.ms_data_frees;
	CHECK(t_rename(e, &root, "new", &root, "other") == 0);
	CHECK(e->e_st.ms_data_frees == frees);
	CHECK(t_getattr(e, &g, &a) == -ESTALE);
	CHECK_SOUND(e);
	/* R9 catches an unlinked inode the queue does not name, and an entry naming a live file. */
	uint8_t qkey[17], hkey[17], qval[8];
	uint32_t qlen = 0;
	char report[256];
	memset(qkey, 0, sizeof(qkey));
	qkey[8] = 4;
	memcpy(hkey, qkey, sizeof(hkey));
	for (int i = 0; i < 8; i++) {
		qkey[9 + i] = (uint8_t)(id_objid(&g) >> (56 - 8 * i));
		hkey[9 + i] = (uint8_t)(id_objid(&h) >> (56 - 8 * i));
	}
	VERIFY(btree_lookup(e->e_tree, qkey, 17, qval, sizeof(qval), &qlen, NULL) == 0 && qlen == 8);
	VERIFY(btree_delete(e->e_tree, qkey, 17, NULL) == 0);
	CHECK(t_check(e, report, sizeof(report)) == -EIO && strstr(report, "R9") != NULL);
	VERIFY(btree_put(e->e_tree, qkey, 17, qval, 8, BTREE_PUT_NEW, NULL) == 0);
	CHECK_SOUND(e);
	VERIFY(btree_put(e->e_tree, hkey, 17, qval, 8, BTREE_PUT_NEW, NULL) == 0);
	CHECK(t_check(e, report, sizeof(report)) == -EIO && strstr(report, "R9") != NULL);
	VERIFY(btree_delete(e->e_tree, hkey, 17, NULL) == 0);
	CHECK_SOUND(e);
	/* The log replayed into a fresh dataset queues both files alike: reaped, the two are the
	 * same. */
	struct tenv *b = replay_into_fresh(e, false);
	CHECK_SOUND(b);
	CHECK(t_reap_all(b) == 6);
	CHECK_SOUND(b);
	CHECK(t_reap_all(e) == 3);
	CHECK(e->e_st.ms_data_frees == frees + nblocks);
	CHECK(same_datasets(e, b));
	env_reopen(e);
	CHECK_SOUND(e);
	env_free(b);
	env_free(e);
}


/* Records that are not successful changes cannot be encoded. */
static void test_record_encode(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e);
	struct fs_req req;
	uint8_t buf[1024];
	size_t len;
	req_init(&req, FS_OP_GETATTR, e, &root);
	CHECK(env_run(e, &req) == 0 && zpl_record_encode(&req, buf, sizeof(buf), &len) == -EINVAL);
	req_init(&req, FS_OP_MKDIR, e, &root);
	req.u.create.cr_name = "d";
	CHECK(env_run(e, &req) == 0);
	CHECK(zpl_record_encode(&req, buf, 10, &len) == -EOVERFLOW && len > 10 &&
	      len <= zpl_record_bytes(&req));
	CHECK(zpl_record_encode(&req, buf, sizeof(buf), &len) == 0);
	CHECK(env_run(e, &req) == -EEXIST &&
	      zpl_record_encode(&req, buf, sizeof(buf), &len) == -EINVAL);
	/* Replaying a create whose object id the dataset has already passed: refused. */
	struct blk_ptr missing;
	CHECK(zpl_replay(e->e_z, buf, 0, &missing) == -EINVAL);
	env_free(e);
}

/* ---- damage ---- */

/* Finds the key of name's dirent in dir (scan of the directory's range). */
struct find_name {
	const char *name;
	uint8_t key[17];
	bool found;
};

static bool find_name_visit(void *arg, const void *key, uint32_t klen, const void *val,
                            uint32_t vlen)
{
	struct find_name *f = arg;
	const uint8_t *v = val;
	if (klen == 17 && vlen >= 10 && v[9] == strlen(f->name) &&
	    memcmp(v + 10, f->name, v[9]) == 0) {
		memcpy(f->key, key, 17);
		f->found = true;
		return false;
	}
	return true;
}

static void find_dirent(struct tenv *e, const struct fs_obj_id *dir, const char *name,
                        uint8_t key[17])
{
	struct find_name f = {.name = name};
	uint8_t start[9];
	uint64_t objid = id_objid(dir);
	for (int i = 0; i < 8; i++)
		start[i] = (uint8_t)(objid >> (56 - 8 * i));
	start[8] = 2;
	ms_forget(&e->e_st);
	struct blk_ptr missing;
	int rc;
	while ((rc = btree_scan(e->e_tree, start, 9, false, find_name_visit, &f, &missing)) ==
	       -SH_ENEEDBLOCK)
		VERIFY(ms_load(&e->e_st, &missing) == 0);
	VERIFY(rc == 0 && f.found);
	memcpy(key, f.key, 17);
}

static void test_check_damage(void)
{
	char report[256];
	/* Wrong nlink. */
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), d, f, g;
	CHECK(t_mkdir(e, &root, "d", 0755, &d) == 0);
	CHECK(t_create(e, &d, "f", 0644, &f) == 0);
	CHECK(t_create(e, &d, "victim", 0644, &g) == 0);
	CHECK(t_write(e, &f, 0, "abc", 3) == 0);
	CHECK_SOUND(e);
	plant_inode_nlink(e, &f, 2);
	CHECK(t_check(e, report, sizeof(report)) == -EIO && strstr(report, "R3") != NULL);
	plant_inode_nlink(e, &f, 1);
	CHECK_SOUND(e);
	plant_inode_nlink(e, &d, 3);
	CHECK(t_check(e, report, sizeof(report)) == -EIO && strstr(report, "R3") != NULL);
	plant_inode_nlink(e, &d, 2);
	CHECK_SOUND(e);
	/* A dangling dirent: its object's inode deleted behind the zpl's back. */
	uint8_t ikey[9];
	uint64_t gobj = id_objid(&g);
	for (int i = 0; i < 8; i++)
		ikey[i] = (uint8_t)(gobj >> (56 - 8 * i));
	ikey[8] = 1;
	uint8_t dkey[17];
	find_dirent(e, &d, "victim", dkey);
	uint8_t saved[ZPL_VAL_MAX];
	uint32_t saved_len;
	VERIFY(btree_lookup(e->e_tree, ikey, 9, saved, sizeof(saved), &saved_len, NULL) == 0);
	VERIFY(btree_delete(e->e_tree, ikey, 9, NULL) == 0);
	zpl_cache_forget(e->e_z);
	CHECK(t_check(e, report, sizeof(report)) == -EIO && strstr(report, "R") != NULL);
	CHECK(t_lookup(e, &d, "victim", NULL, NULL) == -EIO);
	VERIFY(btree_put(e->e_tree, ikey, 9, saved, saved_len, BTREE_PUT_NEW, NULL) == 0);
	zpl_cache_forget(e->e_z);
	CHECK_SOUND(e);
	/* A dirent whose value is cut short: clean errors everywhere. */
	const uint8_t shortval[5] = {1, 2, 3, 4, 5};
	VERIFY(btree_put(e->e_tree, dkey, 17, shortval, sizeof(shortval), BTREE_PUT_REPLACE,
	                 NULL) == 0);
	CHECK(t_check(e, report, sizeof(report)) == -EIO && strstr(report, "R2") != NULL);
	CHECK(t_lookup(e, &d, "victim", NULL, NULL) == -EIO);
	CHECK(t_create(e, &d, "victim", 0644, NULL) == -EIO);
	struct rd_ctx c;
	CHECK(t_readdir_all(e, &d, false, 100, &c, false) == -EIO);
	free(c.ents);
	CHECK(t_rmdir(e, &root, "d") == -ENOTEMPTY);
	/* A malformed inode. */
	const uint8_t shortino[50] = {FS_REG};
	VERIFY(btree_put(e->e_tree, ikey, 9, shortino, sizeof(shortino), BTREE_PUT_REPLACE, NULL) ==
	       0);
	zpl_cache_forget(e->e_z);
	CHECK(t_getattr(e, &g, NULL) == -EIO);
	CHECK(t_write(e, &g, 0, "x", 1) == -EIO);
	/* An orphan inode (no dirent), unless the caller says it is open. */
	struct tenv *e2 = env_new();
	struct fs_obj_id r2 = t_root(e2), h;
	CHECK(t_create(e2, &r2, "h", 0644, &h) == 0);
	find_dirent(e2, &r2, "h", dkey);
	VERIFY(btree_delete(e2->e_tree, dkey, 17, NULL) == 0);
	plant_inode_nlink(e2, &r2, 2);
	CHECK(zpl_check(e2->e_z, st_load, &e2->e_st, NULL, 0, report, sizeof(report)) == -EIO);
	CHECK(strstr(report, "R4") != NULL || strstr(report, "R6") != NULL);
	env_free(e2);
	env_free(e);
}

/* Block adoption: a block offered for exactly one whole dirty buffer is taken by zpl_sync
 * instead of a write; an offer that is not a whole buffer byte for byte is refused; a change of
 * the buffer after the offer makes zpl_sync write it after all; a refusal by ze_adopt_block too. */
static int g_adopt_rc;
static unsigned g_adopt_calls;
static void fill_bytes(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((seed + i) * 0x9e3779b97f4a7c15ull >> 56);
}

static int env_adopt(void *ctx, const struct blk_ptr *bp, const void *data)
{
	struct tenv *e = ctx;
	g_adopt_calls++;
	struct mblock *mb = ms_find(&e->e_st, bp);
	CHECK(mb != NULL && mb->mb_len == bp->bp_lsize && memcmp(mb->mb_img, data, mb->mb_len) == 0);
	return g_adopt_rc;
}

static void test_adopt(void)
{
	enum { B = 128 * 1024 };
	struct tenv *e = env_new_ex(16384, B);
	e->e_env.ze_adopt_block = env_adopt;
	env_reopen(e); /* the zpl takes the env at open */
	struct fs_obj_id root = t_root(e), f;
	static uint8_t data[4 * B], back[4 * B];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)rnd();
	CHECK(t_create(e, &root, "f", 0644, &f) == 0);
	CHECK(t_write(e, &f, 0, data, sizeof(data)) == 0); /* four blocks of B */
	CHECK(env_sync(e) == 0);
	/* the caller's own copies of blocks 1 and 2, as an indirect write makes them */
	fill_bytes(data + B, B, 11);
	fill_bytes(data + 2 * B, B, 12);
	CHECK(t_write(e, &f, B, data + B, 2 * B) == 0);
	struct blk_ptr b1, b2;
	CHECK(ms_store(&e->e_st, data + B, B, 2, &b1) == 0 && ms_store(&e->e_st, data + 2 * B, B, 2, &b2) == 0);
	CHECK(!zpl_adopt(e->e_z, &f, B + 4096, data + B, &b1)); /* not aligned */
	CHECK(!zpl_adopt(e->e_z, &f, 3 * B, data + 3 * B, &b1)); /* no dirty buffer there */
	CHECK(!zpl_adopt(e->e_z, &f, B, data + 2 * B, &b1));     /* other bytes */
	CHECK(zpl_adopt(e->e_z, &f, B, data + B, &b1));
	CHECK(zpl_adopt(e->e_z, &f, 2 * B, data + 2 * B, &b2));
	/* block 2 changes after the offer: it is written after all */
	CHECK(t_write(e, &f, 2 * B + 100, "x", 1) == 0);
	data[2 * B + 100] = 'x';
	g_adopt_calls = 0;
	g_adopt_rc = 0;
	uint64_t writes = e->e_st.ms_data_writes, n = 0;
	CHECK(zpl_sync(e->e_z, &n) == 0);
	CHECK(g_adopt_calls == 1 && n == 1 && e->e_st.ms_data_writes == writes + 1);
	CHECK(btree_sync(e->e_tree, &e->e_root) == 0);
	e->e_st.ms_txg++;
	/* a refused offer: written */
	fill_bytes(data, B, 13);
	CHECK(t_write(e, &f, 0, data, B) == 0);
	struct blk_ptr b0;
	CHECK(ms_store(&e->e_st, data, B, 2, &b0) == 0);
	CHECK(zpl_adopt(e->e_z, &f, 0, data, &b0));
	g_adopt_calls = 0;
	g_adopt_rc = -ENOENT;
	writes = e->e_st.ms_data_writes;
	CHECK(env_sync(e) == 0 && g_adopt_calls == 1 && e->e_st.ms_data_writes == writes + 1);
	ms_free(&e->e_st, &b0); /* the caller keeps what was refused */
	env_reopen(e);
	CHECK(read_all(e, &f, 0, back, sizeof(back)) && memcmp(back, data, sizeof(back)) == 0);
	CHECK_SOUND(e);
	env_free(e);
}

/* Sealing: blocks prepared from picked buffers are written by zpl_sync (ze_write_sealed) only
 * while they hold the buffer's current bytes. A buffer edited while handed out is not sealed; one
 * edited after its seal was attached loses it (ze_drop_seal); buffers truncated away, and those
 * left at close, drop theirs. The env's sealed block is a copy of the bytes it was made from, so
 * a stale seal written by zpl_sync would show as old data on reading back. */
struct test_sealed {
	uint32_t ts_len;
	uint8_t ts_bytes[];
};
static unsigned g_sealed_live, g_sealed_written, g_sealed_dropped;
/* Buffers the env took (ze_write_sealed's may_take): freed after the sync, when it may. */
static void *g_taken[64];
static unsigned g_ntaken;

static int env_write_sealed(void *ctx, void *sealed, void *data, bool may_take, bool *taken,
                            struct blk_ptr *bp)
{
	struct test_sealed *ts = sealed;
	CHECK(memcmp(ts->ts_bytes, data, ts->ts_len) == 0); /* the buffer is what was sealed */
	int rc = env_write_block(ctx, ts->ts_bytes, ts->ts_len, bp);
	free(ts);
	g_sealed_live--;
	g_sealed_written += rc == 0;
	if (rc == 0 && may_take && g_ntaken < 64) {
		g_taken[g_ntaken++] = data;
		*taken = true;
	}
	return rc;
}

static void free_taken(void)
{
	for (unsigned i = 0; i < g_ntaken; i++)
		mem_free(g_taken[i]);
	g_ntaken = 0;
}

static void env_drop_seal(void *ctx, void *sealed)
{
	(void)ctx;
	free(sealed);
	g_sealed_live--;
	g_sealed_dropped++;
}

/* Picks every dirty buffer and seals it; edit (may be NULL) runs between the pick and the attach,
 * as the loop's requests do while the sync thread prepares. Returns the seals attached. */
static unsigned seal_all(struct tenv *e, void (*edit)(struct tenv *e, void *arg), void *arg)
{
	struct zpl_seal v[64];
	uint64_t cursor = 0;
	size_t n = zpl_seal_pick(e->e_z, &cursor, v, 64, UINT64_MAX);
	CHECK(n < 64);
	for (size_t i = 0; i < n; i++) {
		struct test_sealed *ts = malloc(sizeof(*ts) + v[i].zs_size);
		VERIFY(ts != NULL);
		ts->ts_len = v[i].zs_size;
		memcpy(ts->ts_bytes, v[i].zs_data, v[i].zs_size);
		v[i].zs_sealed = ts;
		g_sealed_live++;
	}
	if (edit != NULL)
		edit(e, arg);
	zpl_seal_attach(e->e_z, v, n);
	unsigned attached = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i].zs_sealed == NULL) {
			attached++;
			continue;
		}
		free(v[i].zs_sealed);
		g_sealed_live--;
	}
	return attached;
}

static uint8_t g_seal_data[4 * 65536];
static struct fs_obj_id g_seal_file;

static void seal_edit_block1(struct tenv *e, void *arg)
{
	(void)arg;
	g_seal_data[65536 + 7] ^= 0x5a;
	CHECK(t_write(e, &g_seal_file, 65536 + 7, &g_seal_data[65536 + 7], 1) == 0);
}

static void test_seal(void)
{
	enum { B = 65536 };
	struct tenv *e = env_new_ex(16384, B);
	struct fs_obj_id root = t_root(e), g;
	static uint8_t back[4 * B];
	uint64_t cursor = 0;
	struct zpl_seal none[1];
	/* without the env's sealing, nothing is handed out */
	fill_bytes(g_seal_data, sizeof(g_seal_data), 21);
	CHECK(t_create(e, &root, "f", 0644, &g_seal_file) == 0);
	CHECK(t_write(e, &g_seal_file, 0, g_seal_data, sizeof(g_seal_data)) == 0);
	CHECK(zpl_seal_pick(e->e_z, &cursor, none, 1, UINT64_MAX) == 0);
	e->e_env.ze_write_sealed = env_write_sealed;
	e->e_env.ze_drop_seal = env_drop_seal;
	env_reopen(e);
	g_sealed_live = g_sealed_written = g_sealed_dropped = 0;

	/* 1: four sealed buffers, all written sealed */
	fill_bytes(g_seal_data, sizeof(g_seal_data), 22);
	CHECK(t_write(e, &g_seal_file, 0, g_seal_data, sizeof(g_seal_data)) == 0);
	CHECK(seal_all(e, NULL, NULL) == 4);
	uint64_t writes = e->e_st.ms_data_writes;
	CHECK(env_sync(e) == 0);
	CHECK(g_sealed_written == 4 && g_sealed_live == 0 && e->e_st.ms_data_writes == writes + 4);
	CHECK(g_ntaken == 4);
	free_taken();

	/* 2: block 1 edited while handed out: the edit goes into a new buffer and its seal is
	 * not attached; the other three are */
	fill_bytes(g_seal_data, sizeof(g_seal_data), 23);
	CHECK(t_write(e, &g_seal_file, 0, g_seal_data, sizeof(g_seal_data)) == 0);
	CHECK(seal_all(e, seal_edit_block1, NULL) == 3);
	g_sealed_written = 0;
	CHECK(env_sync(e) == 0);
	CHECK(g_sealed_written == 3 && g_sealed_live == 0);
	free_taken();

	/* 3: edits after the attach drop the seals of blocks 0 and 2; truncation drops block 3's */
	fill_bytes(g_seal_data, sizeof(g_seal_data), 24);
	CHECK(t_write(e, &g_seal_file, 0, g_seal_data, sizeof(g_seal_data)) == 0);
	CHECK(seal_all(e, NULL, NULL) == 4);
	g_seal_data[3] ^= 1;
	g_seal_data[2 * B + 9] ^= 1;
	CHECK(t_write(e, &g_seal_file, 3, &g_seal_data[3], 1) == 0);
	CHECK(t_write(e, &g_seal_file, 2 * B + 9, &g_seal_data[2 * B + 9], 1) == 0);
	CHECK(t_truncate(e, &g_seal_file, 3 * B) == 0);
	CHECK(g_sealed_dropped == 3 && g_sealed_live == 1);
	g_sealed_written = 0;
	CHECK(env_sync(e) == 0);
	CHECK(g_sealed_written == 1 && g_sealed_live == 0);
	free_taken();

	env_reopen(e);
	CHECK(read_all(e, &g_seal_file, 0, back, 3 * B) && memcmp(back, g_seal_data, 3 * B) == 0);
	CHECK_SOUND(e);

	/* 4: seals left at close are dropped */
	CHECK(t_create(e, &root, "g", 0644, &g) == 0);
	CHECK(t_write(e, &g, 0, g_seal_data, B) == 0);
	CHECK(seal_all(e, NULL, NULL) == 1 && g_sealed_live == 1);
	zpl_close(e->e_z);
	e->e_z = NULL;
	CHECK(g_sealed_live == 0);
	env_free(e);
}

/* The inode cache: after a random mix of changes over more files than it holds, every object's
 * attributes read through it are those a fresh zpl reads from the tree; a cached inode is served
 * without the tree (no block loaded with every image forgotten); a removed object is stale at
 * once. */
static bool attr_same(const struct fs_attr *a, const struct fs_attr *b)
{
	return a->fa_type == b->fa_type && a->fa_mode == b->fa_mode && a->fa_nlink == b->fa_nlink &&
	       a->fa_uid == b->fa_uid && a->fa_gid == b->fa_gid && a->fa_size == b->fa_size &&
	       a->fa_used_bytes == b->fa_used_bytes && a->fa_fileid == b->fa_fileid &&
	       time_eq(a->fa_atime, b->fa_atime) && time_eq(a->fa_mtime, b->fa_mtime) &&
	       time_eq(a->fa_ctime, b->fa_ctime);
}

static void test_inode_cache(void)
{
	enum { NFILES = 3000, NDIRS = 4 };
	struct tenv *e = env_new();
	struct zpl_cache_stats cs;
	zpl_cache_stats(e->e_z, &cs);
	CHECK(cs.zcs_entries == ZPL_ICACHE_MIN_ENTRIES && cs.zcs_hits == 0);
	CHECK(NFILES > cs.zcs_entries); /* evictions happen */
	struct fs_obj_id root = t_root(e), dirs[NDIRS];
	static struct fs_obj_id files[NFILES];
	static bool gone[NFILES];
	static uint32_t links[NFILES]; /* extra links, each "l<i>" in dirs[i % NDIRS] */
	memset(gone, 0, sizeof(gone));
	memset(links, 0, sizeof(links));
	for (int d = 0; d < NDIRS; d++) {
		char name[16];
		snprintf(name, sizeof(name), "d%d", d);
		CHECK(t_mkdir(e, &root, name, 0755, &dirs[d]) == 0);
	}
	for (int i = 0; i < NFILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		CHECK(t_create(e, &dirs[i % NDIRS], name, 0644, &files[i]) == 0);
	}
	bool ok = true;
	static struct fs_attr before[NFILES];
	for (int step = 0; step < 6000 && ok; step++) {
		int i = (int)(rnd() % NFILES);
		uint64_t r = rnd() % 100;
		char name[16], lname[16];
		snprintf(name, sizeof(name), "f%d", i);
		snprintf(lname, sizeof(lname), "l%d", i);
		const struct fs_obj_id *dir = &dirs[i % NDIRS];
		struct fs_attr a;
		if (gone[i]) {
			ok = t_getattr(e, &files[i], NULL) == -ESTALE;
		} else if (r < 40) {
			ok = t_getattr(e, &files[i], &a) == 0 && a.fa_nlink == 1 + links[i];
		} else if (r < 60) {
			struct fs_sattr sa = {.fs_set_mode = true, .fs_mode = (uint32_t)(rnd() % 0777),
			                      .fs_set_size = rnd() % 2 == 0, .fs_size = rnd() % 100000};
			ok = t_setattr(e, &files[i], &sa, NULL) == 0;
		} else if (r < 70) {
			ok = t_write(e, &files[i], rnd() % 50000, "cache", 5) == 0;
		} else if (r < 80 && links[i] == 0) {
			ok = t_link(e, &files[i], dir, lname) == 0;
			links[i] = 1;
		} else if (r < 88 && links[i] == 1) {
			ok = t_remove(e, dir, lname) == 0;
			links[i] = 0;
		} else if (r < 92) {
			/* Cached right before: the removal must not leave it behind. */
			ok = t_getattr(e, &files[i], NULL) == 0 && t_remove(e, dir, name) == 0 &&
			     (links[i] == 0 || t_remove(e, dir, lname) == 0) &&
			     t_getattr(e, &files[i], NULL) == -ESTALE;
			gone[i] = true;
		} else if (r < 95) {
			ok = env_sync(e) == 0;
		} else {
			char to[16];
			snprintf(to, sizeof(to), "f%d", i);
			const struct fs_obj_id *other = &dirs[(i + 1) % NDIRS];
			ok = t_rename(e, dir, name, other, to) == 0 && t_rename(e, other, to, dir, name) == 0;
		}
		CHECKF(ok, "step %d, file %d, action %llu", step, i, (unsigned long long)r);
		if (step % 2000 != 1999 || !ok)
			continue;
		for (int j = 0; j < NFILES; j++)
			if (!gone[j])
				ok = ok && t_getattr(e, &files[j], &before[j]) == 0;
		zpl_cache_stats(e->e_z, &cs);
		CHECKF(cs.zcs_hits > 0 && cs.zcs_misses > 0, "step %d: %llu hits, %llu misses", step,
		       (unsigned long long)cs.zcs_hits, (unsigned long long)cs.zcs_misses);
		env_reopen(e); /* a fresh zpl: the tree's own records */
		for (int j = 0; j < NFILES && ok; j++) {
			struct fs_attr after;
			if (gone[j])
				continue;
			ok = t_getattr(e, &files[j], &after) == 0 && attr_same(&before[j], &after);
			CHECKF(ok, "step %d: file %d's cached attributes differ from the tree's", step, j);
		}
		CHECK_SOUND(e);
	}
	CHECK(ok);
	/* Served from the cache: no block needed even with every image forgotten. */
	int k = 0;
	while (gone[k])
		k++;
	struct fs_attr a1, a2;
	CHECK(t_getattr(e, &files[k], &a1) == 0);
	ms_forget(&e->e_st);
	uint64_t loads = e->e_st.ms_loads;
	zpl_cache_stats(e->e_z, &cs);
	uint64_t hits = cs.zcs_hits;
	CHECK(t_getattr(e, &files[k], &a2) == 0 && attr_same(&a1, &a2));
	zpl_cache_stats(e->e_z, &cs);
	CHECK(e->e_st.ms_loads == loads && cs.zcs_hits == hits + 1);
	/* Forgotten, it walks the tree again. */
	zpl_cache_forget(e->e_z);
	CHECK(t_getattr(e, &files[k], &a2) == 0 && attr_same(&a1, &a2));
	CHECK(e->e_st.ms_loads > loads);
	env_free(e);
}

/* Object ids are handed out in sequence, and the inode cache is two-way set associative: the set
 * function must spread a run of consecutive ids so that no set gets three while the run is
 * smaller than the cache (a hash taking the product's middle bits put ids a fixed stride apart
 * into one set, and a quarter of a file set larger than half the cache then missed forever).
 * 1,500 files in a 2,048-entry cache, read twice: the second pass is served entirely from it. */
static void test_inode_cache_spread(void)
{
	enum { NFILES = 1500 };
	struct tenv *e = env_new();
	struct zpl_cache_stats cs;
	zpl_cache_stats(e->e_z, &cs);
	CHECK(cs.zcs_entries == ZPL_ICACHE_MIN_ENTRIES && NFILES < cs.zcs_entries);
	struct fs_obj_id root = t_root(e), dir;
	static struct fs_obj_id files[NFILES];
	CHECK(t_mkdir(e, &root, "d", 0755, &dir) == 0);
	bool ok = true;
	for (int i = 0; i < NFILES && ok; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		ok = t_create(e, &dir, name, 0644, &files[i]) == 0;
	}
	CHECK(ok && env_sync(e) == 0);
	for (int i = 0; i < NFILES && ok; i++)
		ok = t_getattr(e, &files[i], NULL) == 0;
	zpl_cache_stats(e->e_z, &cs);
	uint64_t misses = cs.zcs_misses, hits = cs.zcs_hits;
	for (int i = 0; i < NFILES && ok; i++)
		ok = t_getattr(e, &files[i], NULL) == 0;
	CHECK(ok);
	zpl_cache_stats(e->e_z, &cs);
	CHECKF(cs.zcs_misses == misses && cs.zcs_hits >= hits + NFILES,
	       "second pass over %d files: %llu misses, %llu hits", NFILES,
	       (unsigned long long)(cs.zcs_misses - misses), (unsigned long long)(cs.zcs_hits - hits));
	env_free(e);
}

/* Allocation failures at every point of a few operations: each either succeeds, fails with
 * -ENOMEM leaving the dataset as it was, or (inside the tree, half-way) fails the zpl, which then
 * answers -EIO to everything. */
static void test_enomem(void)
{
	int clean = 0, failed = 0, passed = 0;
	static uint8_t data[300000];
	memset(data, 3, sizeof(data));
	for (long n = 0; n < 400; n++) {
		struct tenv *e = env_new_ex(8192, 0);
		struct fs_obj_id root = t_root(e), d, f;
		char name[16];
		VERIFY(t_mkdir(e, &root, "d", 0755, &d) == 0);
		for (int i = 0; i < 60; i++) {
			snprintf(name, sizeof(name), "file-%d", i);
			VERIFY(t_create(e, &d, name, 0644, &f) == 0);
		}
		VERIFY(t_write(e, &f, 0, data, 1000) == 0);
		mem_fail_after(n);
		int rc;
		switch (n % 4) {
		case 0: rc = t_write(e, &f, 5000, data, sizeof(data)); break;
		case 1: rc = t_rename(e, &d, "file-3", &root, "moved"); break;
		case 2: rc = t_create(e, &d, "new", 0644, NULL); break;
		default: rc = t_remove(e, &d, "file-59"); break;
		}
		mem_fail_after(-1);
		if (rc == 0) {
			passed++;
			CHECK_SOUND(e);
		} else if (rc == -ENOMEM) {
			clean++;
			struct fs_attr a;
			CHECK(t_getattr(e, &f, &a) == 0 && a.fa_size == 1000);
			CHECK(t_lookup(e, &d, "file-3", NULL, NULL) == 0 &&
			      t_lookup(e, &d, "file-59", NULL, NULL) == 0);
			CHECK(t_lookup(e, &d, "new", NULL, NULL) == -ENOENT);
			CHECK_SOUND(e);
		} else {
			CHECKF(rc == -EIO, "status %d", rc);
			failed++;
			CHECK(t_getattr(e, &root, NULL) == -EIO);
		}
		env_free(e);
	}
	CHECKF(clean > 0 && passed > 0, "%d clean, %d failed the zpl, %d passed", clean, failed,
	       passed);
}

/* The scenarios again, every operation starting from a cold cache: each one misses on every
 * node and data block it needs, restarts after each load, and must end the same. */
#define COLD(fn)                                                                                   \
	static void fn##_cold(void)                                                                \
	{                                                                                          \
		g_cold = true;                                                                     \
		fn();                                                                              \
		g_cold = false;                                                                    \
	}
COLD(test_create_lookup)
COLD(test_exclusive)
COLD(test_mkdir_rmdir)
COLD(test_link)
COLD(test_symlink)
COLD(test_mknod)
COLD(test_rename)
COLD(test_readdir)
COLD(test_setattr)
COLD(test_sparse_large)
COLD(test_growth)
COLD(test_read_refs)
COLD(test_read_pieces)
COLD(test_permissions)
COLD(test_collisions)
COLD(test_check_damage)

/* zpl_diff: a side read in steps of one record is the side read at once; a rename is one "R";
 * and a tree whose entries no longer hang together (what a live file system read between its
 * changes can look like: a directory cycle cut off from the root, an entry naming no inode)
 * is compared without looping, what the root no longer reaches removed. */
static struct zpl_diff_side *t_diff_side(struct tenv *e, uint32_t step)
{
	struct zpl_diff_side *s = NULL;
	VERIFY(zpl_diff_side_create(&s) == 0);
	ms_forget(&e->e_st); /* every node missed once */
	for (bool done = false; !done;) {
		struct blk_ptr missing;
		int rc = zpl_diff_side_read(s, e->e_tree, step, &done, &missing);
		if (rc == -SH_ENEEDBLOCK)
			VERIFY(ms_load(&e->e_st, &missing) == 0);
		else
			VERIFY(rc == 0);
	}
	return s;
}

struct t_diff_text {
	char dt_text[1024];
	size_t dt_len;
};

static int t_diff_line(void *arg, const struct zpl_diff_entry *de)
{
	struct t_diff_text *t = arg;
	int n = snprintf(t->dt_text + t->dt_len, sizeof(t->dt_text) - t->dt_len, "%c\t%s%s%s\n",
	                 (char)de->zde_kind, de->zde_path, de->zde_new_path ? " -> " : "",
	                 de->zde_new_path ? de->zde_new_path : "");
	VERIFY(n > 0 && (size_t)n < sizeof(t->dt_text) - t->dt_len);
	t->dt_len += (size_t)n;
	return 0;
}

static bool t_diff_is(struct zpl_diff_side *from, struct zpl_diff_side *to, const char *want)
{
	struct t_diff_text t = {.dt_len = 0};
	t.dt_text[0] = '\0';
	int rc = zpl_diff(from, to, t_diff_line, &t);
	if (rc == 0 && strcmp(t.dt_text, want) == 0)
		return true;
	printf("#   zpl_diff: %d\n#   got:\n%s#   want:\n%s", rc, t.dt_text, want);
	return false;
}

/* Puts a raw entry (dir, key hash) -> child named name, behind the zpl's back. */
static void plant_dirent(struct tenv *e, uint64_t dir, uint64_t hash, uint64_t child,
                         uint8_t type, const char *name)
{
	uint8_t key[17], val[10 + FS_NAME_MAX];
	for (int i = 0; i < 8; i++) {
		key[i] = (uint8_t)(dir >> (56 - 8 * i));
		key[9 + i] = (uint8_t)(hash >> (56 - 8 * i));
		val[i] = (uint8_t)(child >> (8 * i));
	}
	key[8] = 2;
	size_t len = strlen(name);
	val[8] = type;
	val[9] = (uint8_t)len;
	memcpy(val + 10, name, len);
	VERIFY(btree_put(e->e_tree, key, 17, val, (uint32_t)(10 + len), BTREE_PUT_NEW, NULL) == 0);
}

static void test_diff(void)
{
	struct tenv *e = env_new();
	struct fs_obj_id root = t_root(e), a, b;
	CHECK(t_mkdir(e, &root, "a", 0755, &a) == 0);
	CHECK(t_mkdir(e, &a, "b", 0755, &b) == 0);
	CHECK(t_create(e, &b, "f", 0644, NULL) == 0);
	CHECK(t_create(e, &root, "g", 0644, NULL) == 0);
	struct zpl_diff_side *one = t_diff_side(e, 1), *whole = t_diff_side(e, 0);
	CHECK(t_diff_is(one, whole, ""));
	CHECK(t_rename(e, &root, "g", &a, "g2") == 0);
	struct zpl_diff_side *renamed = t_diff_side(e, 3);
	CHECK(t_diff_is(one, renamed, "M\t/\nM\t/a\nR\t/g -> /a/g2\n"));
	CHECK(t_diff_is(whole, renamed, "M\t/\nM\t/a\nR\t/g -> /a/g2\n"));
	/* a and b name each other, the root names neither; an entry names no inode */
	uint8_t key[17];
	find_dirent(e, &root, "a", key);
	VERIFY(btree_delete(e->e_tree, key, 17, NULL) == 0);
	plant_dirent(e, id_objid(&b), 1ull << 16, id_objid(&a), FS_DIR, "a");
	plant_dirent(e, id_objid(&root), 3ull << 16, 1ull << 40, FS_REG, "nobody");
	zpl_cache_forget(e->e_z);
	struct zpl_diff_side *cut = t_diff_side(e, 0);
	CHECK(t_diff_is(renamed, cut, "-\t/a\n-\t/a/b\n-\t/a/b/f\n-\t/a/g2\n"));
	CHECK(t_diff_is(cut, renamed, "+\t/a\n+\t/a/b\n+\t/a/b/f\n+\t/a/g2\n"));
	zpl_diff_side_destroy(cut);
	zpl_diff_side_destroy(renamed);
	zpl_diff_side_destroy(whole);
	zpl_diff_side_destroy(one);
	env_free(e);
}

int main(void)
{
	TAP_RUN(test_format_open);
	TAP_RUN(test_create_lookup);
	TAP_RUN(test_exclusive);
	TAP_RUN(test_mkdir_rmdir);
	TAP_RUN(test_link);
	TAP_RUN(test_symlink);
	TAP_RUN(test_mknod);
	TAP_RUN(test_rename);
	TAP_RUN(test_readdir);
	TAP_RUN(test_setattr);
	TAP_RUN(test_sparse_large);
	TAP_RUN(test_growth);
	TAP_RUN(test_plan_shrinks);
	TAP_RUN(test_remove_queued);
	TAP_RUN(test_truncate_steps);
	TAP_RUN(test_random_data);
	TAP_RUN(test_read_refs);
	TAP_RUN(test_read_pieces);
	TAP_RUN(test_sync_errors);
	TAP_RUN(test_fsstat_commit_access);
	TAP_RUN(test_permissions);
	TAP_RUN(test_collisions);
	TAP_RUN(test_big_dir);
	TAP_RUN(test_replay);
	TAP_RUN(test_record_encode);
	TAP_RUN(test_check_damage);
	TAP_RUN(test_enomem);
	TAP_RUN(test_inode_cache);
	TAP_RUN(test_inode_cache_spread);
	TAP_RUN(test_adopt);
	TAP_RUN(test_seal);
	TAP_RUN(test_create_lookup_cold);
	TAP_RUN(test_exclusive_cold);
	TAP_RUN(test_mkdir_rmdir_cold);
	TAP_RUN(test_link_cold);
	TAP_RUN(test_symlink_cold);
	TAP_RUN(test_mknod_cold);
	TAP_RUN(test_rename_cold);
	TAP_RUN(test_readdir_cold);
	TAP_RUN(test_setattr_cold);
	TAP_RUN(test_sparse_large_cold);
	TAP_RUN(test_growth_cold);
	TAP_RUN(test_read_refs_cold);
	TAP_RUN(test_read_pieces_cold);
	TAP_RUN(test_permissions_cold);
	TAP_RUN(test_collisions_cold);
	TAP_RUN(test_check_damage_cold);
	TAP_RUN(test_diff);
	return tap_finish();
}
