/* test_pool_reap_crash.c: crash consistency of freeing large files on the pool: the REMOVE that
 * queues a file for the background reaper (zpl_reap.c, pool_fs.c) and the truncation made in
 * steps (-SH_EPARTIAL). A dataset of 4 KiB records holds two files of 3,000 extents ("a", "b")
 * and a small one ("keep"), all durable; then, on a fault-recording leaf with txgs every few
 * milliseconds, "a" is removed, "b" truncated to 1,000 blocks and 100 bytes, "keep" rewritten
 * and committed, and the reaper frees "a" in steps while txgs go by. For cut points over that run
 * (pool_fs_fixture.h's machinery) and every fault mode, the image is imported and checked
 * (pool_check, the zpl's rule R9 included), and:
 *   - "a" is gone if its REMOVE was acknowledged before the cut; if present, its blocks are
 *     intact (no reap step can be durable without the REMOVE that queued the file);
 *   - "b" has the new size if its SETATTR was acknowledged; its first 1,000 blocks and 100 bytes
 *     are intact; past them each block reads as it was or as zeros (a step made, the size not
 *     yet cut), and the size is the old or the new one;
 *   - "keep" has its new bytes if their COMMIT was acknowledged, else its old or new ones;
 *   - opening the file system resumes the reaper, which finishes, and the pool checks clean.
 * The second test destroys a dataset in steps (pool_destroy.c): file system "gone" holds a file
 * of 3,000 extents, "keep" a small file; "gone" is destroyed with 256 entries per step while
 * txgs go by. At each cut the image imports and checks clean, "gone" is absent if its destroy
 * was acknowledged and intact if present, "keep" is intact, and the import's sync thread
 * finishes the destroy, after which the pool checks clean again.
 * 16 cut points by default (SHALE_CRASH_CUTS=N for more), 5 modes each. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool_fs_fixture.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"
#include "tap.h"

#define FSID 78u
#define BLK 4096u
#define NBLK 3000u                      /* extents of "a" and "b": three reap steps each */
#define B_KEEP (1000ull * BLK + 100u)   /* "b"'s size after its truncation */
#define KEEP_LEN 8192u

/* File fid's bytes [off, off + len) (fid 3 and 4: the old and new bytes of "keep"). */
static void pfill(uint8_t *buf, unsigned fid, uint64_t off, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = pattern_byte(fid, off + i);
}

static struct pool_open_opts ropts(void)
{
	struct pool_open_opts o;
	memset(&o, 0, sizeof(o));
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 5;
	o.po_arc_max_bytes = 16 * MIB;
	o.po_log_region_bytes = 4 * MIB;
	return o;
}

struct reap_run {
	struct blk_dev *rr_leaf;
	uint64_t rr_start;
	uint64_t rr_ack_remove, rr_ack_trunc, rr_ack_keep; /* global numbers after each reply */
};

static int write_file(struct fs *fs, const struct fs_obj_id *f, unsigned fid, uint64_t len)
{
	static uint8_t buf[64 * BLK];
	for (uint64_t off = 0; off < len; off += sizeof(buf)) {
		uint32_t n = (uint32_t)SH_MIN((uint64_t)sizeof(buf), len - off);
		pfill(buf, fid, off, n);
		int rc = op_write(fs, f, off, buf, n, FS_UNSTABLE, NULL);
		if (rc != 0)
			return rc;
	}
	return op_commit(fs, f);
}

static bool reap_workload(struct reap_run *rr)
{
	VERIFY(blk_dev_create_fault(64 * MIB, &rr->rr_leaf) == 0);
	struct pool_open_opts o = ropts();
	struct pool_create_args a = {.pc_name = "reap", .pc_opts = &o};
	struct pool *p = NULL;
	struct fs *fs = NULL;
	struct fs_obj_id root, fa, fb, fk;
	struct pool_ds_props props = {.dp_record_bytes = BLK};
	int rc = pool_create_on_devs(&a, &rr->rr_leaf, 1, NULL, 0, &p);
	if (rc == 0)
		rc = pool_ds_create(p, "fs", &props);
	if (rc == 0)
		rc = pool_fs_open(p, "fs", FSID, &fs);
	if (rc == 0)
		rc = fs_root(fs, &root);
	if (rc == 0)
		rc = op_create(fs, FS_OP_CREATE, &root, "a", NULL, 0, &fa);
	if (rc == 0)
		rc = op_create(fs, FS_OP_CREATE, &root, "b", NULL, 0, &fb);
	if (rc == 0)
		rc = op_create(fs, FS_OP_CREATE, &root, "keep", NULL, 0, &fk);
	if (rc == 0)
		rc = write_file(fs, &fa, 1, (uint64_t)NBLK * BLK);
	if (rc == 0)
		rc = write_file(fs, &fb, 2, (uint64_t)NBLK * BLK);
	if (rc == 0)
		rc = write_file(fs, &fk, 3, KEEP_LEN);
	if (rc == 0)
		rc = pool_txg_wait_synced(p, 0);
	if (rc != 0) {
		printf("#   setting up: %s\n", sh_strerror(rc));
		goto out;
	}
	rr->rr_start = blk_fault_global_seq();
	CHECK((rc = op_remove(fs, FS_OP_REMOVE, &root, "a")) == 0);
	rr->rr_ack_remove = blk_fault_global_seq();
	CHECK(op_setattr(fs, &fb, (int64_t)B_KEEP, -1, NULL) == 0);
	rr->rr_ack_trunc = blk_fault_global_seq();
	uint8_t buf[KEEP_LEN];
	pfill(buf, 4, 0, KEEP_LEN);
	CHECK(op_write(fs, &fk, 0, buf, KEEP_LEN, FS_UNSTABLE, NULL) == 0);
	CHECK(op_commit(fs, &fk) == 0);
	rr->rr_ack_keep = blk_fault_global_seq();
	CHECK(fs_reap_wait(fs));
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct pool_fs_stats st;
	pool_fs_stats(fs, &st);
	printf("#   workload: %" PRIu64 " reap steps\n", st.ps_reap_steps);
	CHECK(st.ps_reap_steps >= 3);
out:
	if (fs)
		fs_destroy(fs);
	if (p)
		pool_close(p); /* the crash */
	return rc == 0;
}

/* "name"'s bytes [0, len) against file fid's, with blocks at and past zero_from allowed to read
 * as zeros instead; a mismatch is printed unless quiet. */
static bool check_bytes(struct fs *fs, const struct fs_obj_id *f, const char *name, unsigned fid,
                        uint64_t len, uint64_t zero_from, bool quiet)
{
	static uint8_t got[64 * BLK], want[64 * BLK];
	for (uint64_t off = 0; off < len; off += sizeof(got)) {
		uint32_t n = (uint32_t)SH_MIN((uint64_t)sizeof(got), len - off), g = 0;
		if (op_read(fs, f, off, n, got, &g, NULL) != 0 || g != n) {
			printf("#   %s: reading at %" PRIu64 " failed\n", name, off);
			return false;
		}
		pfill(want, fid, off, n);
		for (uint32_t b = 0; b < n; b += BLK) {
			uint32_t m = SH_MIN(BLK, n - b);
			if (memcmp(got + b, want + b, m) == 0)
				continue;
			bool zero = off + b >= zero_from;
			for (uint32_t i = 0; zero && i < m; i++)
				zero = got[b + i] == 0;
			if (!zero) {
				if (!quiet)
						printf("#   %s: block at %" PRIu64
					       " is neither its bytes nor zeros\n",
					       name, off + b);
				return false;
			}
		}
	}
	return true;
}

/* The imported image of cut g against the reap run's acknowledgements. */
static bool verify_reap(void *run, struct pool *p, uint64_t g)
{
	struct reap_run *rr = run;
	bool ok = true;
	struct fs *fs = NULL;
	struct fs_obj_id root, f;
	struct fs_attr at;
	int rc;
	if ((rc = pool_fs_open(p, "fs", FSID, &fs)) != 0 || (rc = fs_root(fs, &root)) != 0) {
		printf("#   file system: %s\n", sh_strerror(rc));
		if (fs)
			fs_destroy(fs);
		return false;
	}
	rc = op_lookup(fs, &root, "a", &f, &at);
	if (rc == 0 && g >= rr->rr_ack_remove) {
		printf("#   \"a\" is back after its REMOVE was acknowledged\n");
		ok = false;
	} else if (rc == 0) {
		ok = at.fa_size == (uint64_t)NBLK * BLK &&
		     check_bytes(fs, &f, "a", 1, (uint64_t)NBLK * BLK, UINT64_MAX, false);
	} else if (rc != -ENOENT) {
		printf("#   \"a\": %s\n", sh_strerror(rc));
		ok = false;
	}
	if ((rc = op_lookup(fs, &root, "b", &f, &at)) != 0) {
		printf("#   \"b\": %s\n", sh_strerror(rc));
		ok = false;
	} else if (at.fa_size != B_KEEP &&
	           (g >= rr->rr_ack_trunc || at.fa_size != (uint64_t)NBLK * BLK)) {
		printf("#   \"b\" has %" PRIu64 " bytes\n", at.fa_size);
		ok = false;
	} else {
		ok = check_bytes(fs, &f, "b", 2, at.fa_size, 1000ull * BLK + BLK, false) && ok;
	}
	if ((rc = op_lookup(fs, &root, "keep", &f, &at)) != 0 || at.fa_size != KEEP_LEN) {
		printf("#   \"keep\": %s\n", sh_strerror(rc));
		ok = false;
	} else {
		bool is_new = check_bytes(fs, &f, "keep", 4, KEEP_LEN, UINT64_MAX, true);
		if (!is_new && (g >= rr->rr_ack_keep ||
		                !check_bytes(fs, &f, "keep", 3, KEEP_LEN, UINT64_MAX, true))) {
			printf("#   \"keep\" lost its committed bytes\n");
			ok = false;
		}
	}
	/* The reaper resumes at open and finishes; the pool stays sound. */
	if (!fs_reap_wait(fs) || pool_txg_wait_synced(p, 0) != 0) {
		printf("#   the reaper did not finish\n");
		ok = false;
	}
	fs_destroy(fs);
	return ok;
}

typedef bool (*verify_fn)(void *run, struct pool *p, uint64_t g);

/* One image: the leaf cut at g in mode, imported with o and checked (crash_cut_import), then
 * verify(run, p, g) (which also lets the interrupted background work finish), then checked
 * again. */
static bool cut_verify(struct blk_dev **leaf, uint64_t g, enum blk_fault_mode mode,
                       uint64_t seed, const struct pool_open_opts *o, verify_fn verify, void *run)
{
	struct blk_dev *img[1] = {NULL};
	struct pool *p = NULL;
	bool ok = crash_cut_import(leaf, 1, g, mode, seed, o, img, &p);
	if (p) {
		ok = verify(run, p, g) && ok;
		struct check_lines cl = {.cl_n = 0};
		int64_t problems = pool_check(p, report_keep, &cl);
		if (problems != 0) {
			printf("#   after the background work: pool_check: %" PRId64 " (%s)\n",
			       problems, cl.cl_n ? cl.cl_lines[0] : "");
			ok = false;
		}
		pool_close(p);
	}
	blk_dev_close(img[0]);
	if (!ok)
		printf("#   (cut %" PRIu64 " mode %d seed %" PRIu64 ")\n", g, mode, seed);
	return ok;
}

/* Every cut point of a run (16 by default) in every fault mode, imported with o, through
 * verify; the cuts at or past ack (the reply under test) must be some of them. */
static void run_cuts(struct blk_dev **leaf, uint64_t start, uint64_t ack, uint64_t seed,
                     const struct pool_open_opts *o, verify_fn verify, void *run,
                     const char *what)
{
	struct crash_plan plan;
	crash_plan_init(&plan, leaf, 1, start, 16, seed);
	unsigned images = 0, failed = 0, after = 0;
	for (unsigned c = 0; c < plan.cp_ncuts && failed <= 4; c++) {
		uint64_t g = crash_plan_cut(&plan, c);
		after += g >= ack;
		for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER && failed <= 4;
		     mode++) {
			images++;
			failed += !cut_verify(leaf, g, (enum blk_fault_mode)mode,
			                      c * 7 + (uint64_t)mode, o, verify, run);
		}
	}
	printf("#   %u cut points (%zu flush events), %u images, %u after %s\n", plan.cp_ncuts,
	       plan.cp_nflush, images, after, what);
	CHECKF(failed == 0, "%u of %u images failed", failed, images);
	CHECK(after > 0);
	crash_plan_fini(&plan);
}

static void test_reap_crash(void)
{
	struct reap_run rr;
	memset(&rr, 0, sizeof(rr));
	bool ok = reap_workload(&rr);
	CHECK(ok);
	struct pool_open_opts o = ropts();
	if (ok)
		run_cuts(&rr.rr_leaf, rr.rr_start, rr.rr_ack_remove, 0x7e4, &o, verify_reap, &rr,
		         "the REMOVE's reply");
	blk_dev_close(rr.rr_leaf);
	CHECK(bad_completions == 0);
}

/* ---- destroying a dataset in steps ---- */

static struct pool_open_opts dopts(void)
{
	struct pool_open_opts o = ropts();
	o.po_destroy_step = 256;
	return o;
}

struct destroy_run {
	struct blk_dev *dr_leaf;
	uint64_t dr_start;
	uint64_t dr_ack_destroy; /* after pool_ds_destroy_start returned: the name is gone */
};

/* File system name with one file "f" of len bytes of file fid, durable. */
static int make_fs(struct pool *p, const char *name, unsigned fsid, unsigned fid, uint64_t len)
{
	struct pool_ds_props props = {.dp_record_bytes = BLK};
	struct fs *fs = NULL;
	struct fs_obj_id root, f;
	int rc = pool_ds_create(p, name, &props);
	if (rc == 0)
		rc = pool_fs_open(p, name, fsid, &fs);
	if (rc == 0)
		rc = fs_root(fs, &root);
	if (rc == 0)
		rc = op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, &f);
	if (rc == 0)
		rc = write_file(fs, &f, fid, len);
	if (fs)
		fs_destroy(fs);
	return rc;
}

static bool destroy_workload(struct destroy_run *dr)
{
	VERIFY(blk_dev_create_fault(64 * MIB, &dr->dr_leaf) == 0);
	struct pool_open_opts o = dopts();
	struct pool_create_args a = {.pc_name = "dq", .pc_opts = &o};
	struct pool *p = NULL;
	int rc = pool_create_on_devs(&a, &dr->dr_leaf, 1, NULL, 0, &p);
	if (rc == 0)
		rc = make_fs(p, "gone", FSID, 1, (uint64_t)NBLK * BLK);
	if (rc == 0)
		rc = make_fs(p, "keep", FSID + 1, 3, KEEP_LEN);
	if (rc == 0)
		rc = pool_txg_wait_synced(p, 0);
	if (rc != 0) {
		printf("#   setting up: %s\n", sh_strerror(rc));
		goto out;
	}
	dr->dr_start = blk_fault_global_seq();
	uint64_t txg0 = pool_synced_txg(p);
	CHECK((rc = pool_ds_destroy_start(p, "gone", false)) == 0);
	dr->dr_ack_destroy = blk_fault_global_seq();
	for (int i = 0; i < 10000 && pool_destroy_queued(p) > 0; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_destroy_queued(p) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	printf("#   workload: the destroy took %" PRIu64 " txgs\n", pool_synced_txg(p) - txg0);
	CHECK(pool_synced_txg(p) - txg0 >= NBLK / 256);
out:
	if (p)
		pool_close(p); /* the crash */
	return rc == 0;
}

/* "f" of file system name is file fid's len bytes. */
static bool fs_intact(struct pool *p, const char *name, unsigned fsid, unsigned fid, uint64_t len)
{
	struct fs *fs = NULL;
	struct fs_obj_id root, f;
	struct fs_attr at;
	int rc;
	bool ok = (rc = pool_fs_open(p, name, fsid, &fs)) == 0 && (rc = fs_root(fs, &root)) == 0 &&
	          (rc = op_lookup(fs, &root, "f", &f, &at)) == 0 && at.fa_size == len &&
	          check_bytes(fs, &f, name, fid, len, UINT64_MAX, false);
	if (!ok)
		printf("#   %s: not intact (%s)\n", name, sh_strerror(rc));
	if (fs)
		fs_destroy(fs);
	return ok;
}

static int names_visit(void *arg, const struct pool_ds_info *info)
{
	if (strcmp(info->di_name, "gone") == 0)
		*(bool *)arg = true;
	return 0;
}

/* The imported image of cut g against the destroy run's acknowledgement. */
static bool verify_destroy(void *run, struct pool *p, uint64_t g)
{
	struct destroy_run *dr = run;
	bool present = false;
	bool ok = pool_ds_list(p, names_visit, &present) == 0;
	if (present && g >= dr->dr_ack_destroy) {
		printf("#   \"gone\" is back after its destroy was acknowledged\n");
		ok = false;
	} else if (present) {
		ok = fs_intact(p, "gone", FSID, 1, (uint64_t)NBLK * BLK) && ok;
	}
	ok = fs_intact(p, "keep", FSID + 1, 3, KEEP_LEN) && ok;
	/* The sync thread goes on with a destroy the cut interrupted, and finishes. */
	for (int i = 0; i < 10000 && pool_destroy_queued(p) > 0; i++)
		if (pool_txg_wait_synced(p, 0) != 0)
			break;
	if (pool_destroy_queued(p) != 0 || pool_txg_wait_synced(p, 0) != 0) {
		printf("#   the destroy did not finish\n");
		ok = false;
	}
	return ok;
}

static void test_destroy_crash(void)
{
	struct destroy_run dr;
	memset(&dr, 0, sizeof(dr));
	bool ok = destroy_workload(&dr);
	CHECK(ok);
	struct pool_open_opts o = dopts();
	if (ok)
		run_cuts(&dr.dr_leaf, dr.dr_start, dr.dr_ack_destroy, 0xd35, &o, verify_destroy,
		         &dr, "the destroy's reply");
	blk_dev_close(dr.dr_leaf);
	CHECK(bad_completions == 0);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_reap_crash);
	TAP_RUN(test_destroy_crash);
	return tap_finish();
}
