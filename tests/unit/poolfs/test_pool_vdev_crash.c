/* test_pool_vdev_crash.c: crash consistency of changing a pool's vdevs (pool_vdev.c). A pool on
 * the fault-recording leaf A holds a dataset of 200 keys (values up to 20 KiB, many in blocks of
 * their own), all durable. Then, on the blank fault leaf B, one of two changes, and for cut points
 * over the whole of it, both leaves cut at one instant (pool_fs_fixture.h's crash plan), in every
 * fault mode, the images that carry a pool label import together (as the commands find a pool's
 * leaves: by label), a check finds no problem, and:
 *   - replace: A is replaced by B as `shale pool replace` does it: pool_vdev_attach (import,
 *     export, B's labels, A's labels), an import of both with a check (the resilver), an export,
 *     and pool_vdev_detach of A (import, export, B's labels, A's wiped). The vdev is A alone, A
 *     and B, or B alone, every key holds its value, and after that check, when B is in the
 *     configuration, B alone holds the whole pool: imported by itself, every key holds its value
 *     and a check finds no problem.
 *   - add: B is added as a second top-level vdev (pool_vdev_add), then 200 more keys are written
 *     into the pool (onto both vdevs) and the pool exported. The pool is A alone or A and B as two
 *     vdevs; the first keys hold their values; each of the others is absent or holds its value.
 * 24 cut points by default for each (SHALE_CRASH_CUTS=N for more), 5 modes each. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fs_fixture.h"
#include "pool_kv.h"
#include "pool/pool.h"
#include "tap.h"

#define NKEYS 200u
#define LEAF_BYTES (48 * MIB)

static struct pool_open_opts vopts(void)
{
	struct pool_open_opts o;
	memset(&o, 0, sizeof(o));
	o.po_attach = kv_attach;
	o.po_txg_interval_ms = 60000; /* a txg when the test (or an import, export) asks */
	o.po_arc_max_bytes = 16 * MIB;
	return o;
}

static uint32_t key_of(char *key, unsigned k)
{
	return (uint32_t)snprintf(key, KV_KEY_MAX, "k%04u", k);
}

/* Key k's value: its length and bytes depend on k alone. */
static uint32_t value_of(uint8_t *buf, unsigned k)
{
	uint32_t len = k % 3 == 0 ? 100u + k : KV_INLINE_MAX + 1u + (k * 7919u) % 20000u;
	for (uint32_t i = 0; i < len; i++)
		buf[i] = pattern_byte(k, i);
	return len;
}

/* Keys [from, to) hold their values; with may_lack, a key may be absent instead. */
static bool keys_hold(struct pool *p, unsigned from, unsigned to, bool may_lack)
{
	struct kv *kv = NULL;
	if (kv_open(p, "kv", &kv) != 0) {
		printf("#   the dataset does not open\n");
		return false;
	}
	static uint8_t want[KV_VAL_MAX], got[KV_VAL_MAX];
	unsigned bad = 0;
	for (unsigned k = from; k < to; k++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_of(key, k), wlen = value_of(want, k), len = 0;
		int rc = kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, got, sizeof(got), &len, NULL,
		                 NULL);
		if (rc == -ENOENT && may_lack)
			continue;
		if ((rc != 0 || len != wlen || memcmp(got, want, len) != 0) && bad++ < 3)
			printf("#   key %u: %s\n", k, rc != 0 ? sh_strerror(rc) : "wrong bytes");
	}
	kv_close(kv);
	return bad == 0;
}

/* Puts keys [from, to); true when all succeeded. */
static bool put_keys(struct pool *p, unsigned from, unsigned to)
{
	struct kv *kv = NULL;
	bool ok = kv_open(p, "kv", &kv) == 0;
	static uint8_t val[KV_VAL_MAX];
	for (unsigned k = from; ok && k < to; k++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_of(key, k), vlen = value_of(val, k);
		ok = kv_exec(kv, KV_OP_PUT, key, klen, val, vlen, NULL, 0, NULL, NULL, NULL) == 0;
	}
	if (kv)
		kv_close(kv);
	return ok;
}

/* Whether each of the two guids is a child of top-level vdev 0 (and nothing else is). */
static bool children_are(struct pool *p, uint64_t ga, uint64_t gb, bool *has_a, bool *has_b)
{
	struct pool_status *st = mem_alloc(sizeof(*st));
	VERIFY(st != NULL);
	pool_status(p, st);
	*has_a = *has_b = false;
	bool other = st->ps_ntops != 1;
	for (unsigned c = 0; !other && c < st->ps_tops[0].sv_nchildren; c++) {
		uint64_t g = st->ps_tops[0].sv_children[c].sl_guid;
		*has_a |= g == ga;
		*has_b |= g == gb;
		other |= g != ga && g != gb;
	}
	mem_free(st);
	return !other && (*has_a || *has_b);
}

static uint64_t leaf_guid(struct blk_engine *e, struct blk_dev *d)
{
	struct blk_label *lb = mem_alloc(sizeof(*lb));
	VERIFY(lb != NULL);
	uint64_t g = blk_label_read(e, d, lb) == 0 ? lb->lb_leaf_guid : 0;
	mem_free(lb);
	return g;
}

enum vdev_change { VDEV_REPLACE, VDEV_ADD };

struct vdev_run {
	enum vdev_change vr_change;
	struct blk_dev *vr_leaf[2]; /* A, B */
	uint64_t vr_start;
	uint64_t vr_guid[2];
};

/* The pool on A with the first keys, durable and exported; the run starts after it. */
static bool setup_run(struct vdev_run *vr, struct blk_engine *e)
{
	struct pool_open_opts o = vopts();
	VERIFY(blk_dev_create_fault(LEAF_BYTES, &vr->vr_leaf[0]) == 0);
	VERIFY(blk_dev_create_fault(LEAF_BYTES, &vr->vr_leaf[1]) == 0);
	struct pool_create_args a = {.pc_name = "vc", .pc_opts = &o};
	struct pool *p = NULL;
	bool ok = pool_create_on_devs(&a, vr->vr_leaf, 1, NULL, 0, &p) == 0 &&
	          pool_ds_create(p, "kv", NULL) == 0 && put_keys(p, 0, NKEYS);
	ok = ok && pool_export(p) == 0;
	if (!ok) {
		pool_close(p);
		return false;
	}
	vr->vr_guid[0] = leaf_guid(e, vr->vr_leaf[0]);
	blk_fault_trim(vr->vr_leaf[0]);
	vr->vr_start = blk_fault_global_seq();
	return true;
}

static bool replace_run(struct vdev_run *vr, struct blk_engine *e)
{
	if (!setup_run(vr, e))
		return false;
	struct pool_open_opts o = vopts();
	struct pool *p = NULL;
	/* the replace: attach, resilver, detach */
	char err[512], name[24];
	snprintf(name, sizeof(name), "%" PRIu64, vr->vr_guid[0]);
	CHECKF(pool_vdev_attach(vr->vr_leaf, 1, &o, name, vr->vr_leaf[1], false, err,
	                        sizeof(err)) == 0,
	       "attach: %s", err);
	vr->vr_guid[1] = leaf_guid(e, vr->vr_leaf[1]);
	CHECK(pool_import_devs(vr->vr_leaf, 2, &o, &p) == 0);
	if (!p)
		return false;
	CHECK(pool_check(p, NULL, NULL) == 0);
	CHECK(pool_export(p) == 0);
	CHECKF(pool_vdev_detach(vr->vr_leaf, 2, &o, name, err, sizeof(err)) == 0, "detach: %s",
	       err);
	return vr->vr_guid[1] != 0;
}

static bool add_run(struct vdev_run *vr, struct blk_engine *e)
{
	if (!setup_run(vr, e))
		return false;
	struct pool_open_opts o = vopts();
	char err[512];
	CHECKF(pool_vdev_add(vr->vr_leaf, 1, &o, &vr->vr_leaf[1], 1, false, err, sizeof(err)) == 0,
	       "add: %s", err);
	vr->vr_guid[1] = leaf_guid(e, vr->vr_leaf[1]);
	struct pool *p = NULL;
	CHECK(pool_import_devs(vr->vr_leaf, 2, &o, &p) == 0);
	if (!p)
		return false;
	CHECK(put_keys(p, NKEYS, 2 * NKEYS));
	CHECK(pool_export(p) == 0);
	return vr->vr_guid[1] != 0;
}

/* Add: the pool is A alone, or A and B as its two top-level vdevs. */
static bool tops_are(struct pool *p, const struct vdev_run *vr, unsigned *ntops_out)
{
	struct pool_status *st = mem_alloc(sizeof(*st));
	VERIFY(st != NULL);
	pool_status(p, st);
	unsigned n = st->ps_ntops;
	bool ok = (n == 1 || n == 2) && st->ps_tops[0].sv_nchildren == 1 &&
	          st->ps_tops[0].sv_children[0].sl_guid == vr->vr_guid[0] &&
	          (n == 1 || (st->ps_tops[1].sv_nchildren == 1 &&
	                      st->ps_tops[1].sv_children[0].sl_guid == vr->vr_guid[1]));
	mem_free(st);
	*ntops_out = n;
	return ok;
}

/* One cut: the labelled images import and check clean; then what the change's run requires
 * (the theory at the top). */
static bool cut_verify(struct vdev_run *vr, struct blk_engine *e, uint64_t g,
                       enum blk_fault_mode mode, uint64_t seed)
{
	struct pool_open_opts o = vopts();
	struct blk_dev *img[2] = {NULL, NULL}, *labelled[2];
	unsigned n = 0;
	for (unsigned i = 0; i < 2; i++) {
		size_t cut = blk_fault_events_before(vr->vr_leaf[i], g);
		VERIFY(blk_fault_image(vr->vr_leaf[i], cut, mode, seed * 31 + i, &img[i]) == 0);
		if (leaf_guid(e, img[i]) != 0)
			labelled[n++] = img[i];
	}
	bool ok = n > 0;
	struct pool *p = NULL;
	int rc = n > 0 ? pool_import_devs(labelled, n, &o, &p) : -ENOENT;
	if (rc != 0) {
		printf("#   import of %u labelled images failed: %s\n", n, sh_strerror(rc));
		ok = false;
	}
	bool has_a = false, has_b = false;
	unsigned ntops = 0;
	if (p) {
		struct check_lines cl = {.cl_n = 0};
		int64_t problems = pool_check(p, report_keep, &cl);
		if (problems != 0) {
			printf("#   pool_check: %" PRId64 " (%s)\n", problems,
			       cl.cl_n ? cl.cl_lines[0] : "");
			ok = false;
		}
		if (vr->vr_change == VDEV_REPLACE &&
		    !children_are(p, vr->vr_guid[0], vr->vr_guid[1], &has_a, &has_b)) {
			printf("#   the vdev is not A, A and B, or B\n");
			ok = false;
		}
		if (vr->vr_change == VDEV_ADD && !tops_are(p, vr, &ntops)) {
			printf("#   the pool is not A, or A and B\n");
			ok = false;
		}
		ok = keys_hold(p, 0, NKEYS, false) && ok;
		if (vr->vr_change == VDEV_ADD)
			ok = keys_hold(p, NKEYS, 2 * NKEYS, true) && ok;
		ok = pool_export(p) == 0 && ok;
	}
	if (ok && has_b) {
		p = NULL;
		rc = pool_import_devs(&img[1], 1, &o, &p);
		if (rc != 0) {
			printf("#   B alone does not import: %s\n", sh_strerror(rc));
			ok = false;
		} else {
			ok = keys_hold(p, 0, NKEYS, false) && ok;
			int64_t problems = pool_check(p, NULL, NULL);
			if (problems != 0) {
				printf("#   B alone: pool_check: %" PRId64 "\n", problems);
				ok = false;
			}
			pool_close(p);
		}
	}
	for (unsigned i = 0; i < 2; i++)
		blk_dev_close(img[i]);
	if (!ok)
		printf("#   (cut %" PRIu64 " mode %d seed %" PRIu64 ", shape %s%s, %u vdevs)\n", g,
		       mode, seed, has_a ? "A" : "", has_b ? "B" : "", ntops);
	return ok;
}

/* Runs the change, then every cut point in every fault mode through cut_verify. */
static void change_crash(enum vdev_change change, uint64_t seed)
{
	struct blk_engine *e = NULL;
	VERIFY(blk_engine_create(8, &e) == 0);
	struct vdev_run vr;
	memset(&vr, 0, sizeof(vr));
	vr.vr_change = change;
	bool ok = change == VDEV_REPLACE ? replace_run(&vr, e) : add_run(&vr, e);
	CHECK(ok);
	if (ok) {
		struct crash_plan plan;
		crash_plan_init(&plan, vr.vr_leaf, 2, vr.vr_start, 24, seed);
		unsigned images = 0, failed = 0;
		for (unsigned c = 0; c < plan.cp_ncuts && failed <= 4; c++) {
			uint64_t g = crash_plan_cut(&plan, c);
			for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER && failed <= 4;
			     mode++) {
				images++;
				failed += !cut_verify(&vr, e, g, (enum blk_fault_mode)mode,
				                      c * 7 + (uint64_t)mode);
			}
		}
		printf("#   %u cut points (%zu flush events), %u images\n", plan.cp_ncuts,
		       plan.cp_nflush, images);
		CHECKF(failed == 0, "%u of %u images failed", failed, images);
		crash_plan_fini(&plan);
	}
	for (unsigned i = 0; i < 2; i++)
		blk_dev_close(vr.vr_leaf[i]);
	blk_engine_destroy(e);
}

static void test_replace_crash(void)
{
	change_crash(VDEV_REPLACE, 0x5e1);
}

static void test_add_crash(void)
{
	change_crash(VDEV_ADD, 0xadd);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_replace_crash);
	TAP_RUN(test_add_crash);
	return tap_finish();
}
