/* pool_fs_fixture.h: what the pool's file-system and crash tests share (test_pool_fs.c,
 * test_pool_fs_crash.c, test_pool_crash.c). Header-only, like tap.h and pool_kv.h: each test
 * program includes it once and gets its own copy of the state below.
 *
 * Two parts.
 *
 * The synchronous driver of fs.h (struct call, op_*). fs.h is asynchronous: a request is filled,
 * started with fs_submit and finished by a callback that may run before fs_submit returns or
 * later on a pool thread. call_init fills the common fields of one request (root credentials,
 * fr_loop NULL so the back end completes on its own thread), call_run submits it and blocks until
 * the callback ran, call_fini checks that it ran exactly once (a second completion or none is
 * counted in bad_completions, which every test case checks at its end) and tears the call down.
 * The callback also records blk_fault_global_seq() (c_ack): the number the fault leaves' next
 * event will get, read after the back end's flush for the request was recorded, which is how the
 * crash tests know whether an acknowledgement came before a cut. The op_* helpers wrap one
 * operation each and return its fr_status (0 or a negative errno); their out-parameters are
 * written only on success unless said otherwise. Any number of threads may drive calls at once;
 * op_readdir_all serialises itself (its emit callback has no argument of its own).
 *
 * Crash cuts (rng_next, event_seq, crash_plan_*, crash_cut_import). Every fault leaf records
 * each completed write and flush with a number from one process-wide counter; a cut at number G
 * keeps, on every leaf, the events numbered below G (blk_fault_events_before), so images of all
 * leaves at one instant can be built, in each blk_fault_mode. A crash_plan spreads the cut points
 * over a run: three quarters just before flush events of any leaf (spread over the whole run), the
 * rest at random instants, SHALE_CRASH_CUTS=N points in all or the test's default.
 * crash_cut_import builds one cut's images, imports them and runs pool_check.
 *
 * Names are the ones the tests used before they shared this file, so test bodies read as
 * before. */
#ifndef SHALE_TEST_POOL_FS_FIXTURE_H
#define SHALE_TEST_POOL_FS_FIXTURE_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool/pool.h"
#include "poolfs/pool_fs.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define ACK_NONE UINT64_MAX /* an acknowledgement's global number before it came */

/* ---- pools ---- */

/* A memory leaf of bytes. */
static inline struct blk_dev *mem_dev(uint64_t bytes)
{
	struct blk_dev *d = NULL;
	VERIFY(blk_dev_create_mem(bytes, &d) == 0);
	return d;
}

/* Options for a pool of file systems: owners attached through pool_fs_attach, no timed txgs
 * (tests sync when they say so); arc_max 0 is the default. */
static inline struct pool_open_opts opts_fs(uint64_t arc_max)
{
	struct pool_open_opts o = {0};
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 60000;
	o.po_arc_max_bytes = arc_max;
	return o;
}

/* pool_check's report, as TAP comments. */
static inline void report_print(void *arg, const char *line)
{
	(void)arg;
	printf("#   check: %s\n", line);
}

/* len pseudo-random bytes from seed (xorshift: the same seed, the same bytes). */
static inline void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		buf[i] = (uint8_t)s;
	}
}

/* ---- the synchronous driver ---- */

static const struct fs_cred root_cred = {.fc_uid = 0, .fc_gid = 0};

struct call {
	struct fs_req c_req;
	pthread_mutex_t c_lock;
	pthread_cond_t c_cond;
	int c_done;     /* completions seen: exactly one is right */
	uint64_t c_ack; /* blk_fault_global_seq() when the completion ran */
};

/* Calls whose completion ran more than once or never (call_fini). */
static _Atomic unsigned bad_completions;

static inline void call_done(struct fs_req *req)
{
	struct call *c = req->fr_done_arg;
	uint64_t seq = blk_fault_global_seq(); /* after the flush that made it durable */
	pthread_mutex_lock(&c->c_lock);
	c->c_ack = seq;
	c->c_done++;
	pthread_cond_broadcast(&c->c_cond);
	pthread_mutex_unlock(&c->c_lock);
}

/* Prepares c for op on fs, about obj (NULL: none), as root. Undone by call_fini. */
static inline void call_init(struct call *c, struct fs *fs, enum fs_op op,
                             const struct fs_obj_id *obj)
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
static inline int call_run(struct call *c)
{
	fs_submit(&c->c_req);
	pthread_mutex_lock(&c->c_lock);
	while (c->c_done == 0)
		pthread_cond_wait(&c->c_cond, &c->c_lock);
	pthread_mutex_unlock(&c->c_lock);
	return c->c_req.fr_status;
}

/* Counts a call that did not complete exactly once, and frees c's lock and condition. */
static inline void call_fini(struct call *c)
{
	pthread_mutex_lock(&c->c_lock);
	if (c->c_done != 1)
		bad_completions++;
	pthread_mutex_unlock(&c->c_lock);
	pthread_cond_destroy(&c->c_cond);
	pthread_mutex_destroy(&c->c_lock);
}

/* ---- operations ---- */

/* LOOKUP of name in dir: its id into *out and its attributes into *attr (either may be NULL). */
static inline int op_lookup(struct fs *fs, const struct fs_obj_id *dir, const char *name,
                            struct fs_obj_id *out, struct fs_attr *attr)
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

static inline int op_getattr(struct fs *fs, const struct fs_obj_id *obj, struct fs_attr *attr)
{
	struct call c;
	call_init(&c, fs, FS_OP_GETATTR, obj);
	int rc = call_run(&c);
	if (rc == 0)
		*attr = c.c_req.u.getattr.ga_attr;
	call_fini(&c);
	return rc;
}

/* FSSTAT of the file system obj is on: its free bytes into *free_out. */
static inline int op_fsstat_free(struct fs *fs, const struct fs_obj_id *obj, uint64_t *free_out)
{
	struct call c;
	call_init(&c, fs, FS_OP_FSSTAT, obj);
	int rc = call_run(&c);
	if (rc == 0)
		*free_out = c.c_req.u.fsstat.st_free_bytes;
	call_fini(&c);
	return rc;
}

/* CREATE, MKDIR, SYMLINK (target) or MKNOD (type, device 1:3), guarded, mode 0755 for a
 * directory and 0644 otherwise; the new id into *out (may be NULL). */
static inline int op_create(struct fs *fs, enum fs_op op, const struct fs_obj_id *dir,
                            const char *name, const char *target, enum fs_type type,
                            struct fs_obj_id *out)
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

/* WRITE of data to [off, off + len) as stable; a short write is -EIO. Whatever the status,
 * *committed (if not NULL) gets the stability the back end answered and *ack (if not NULL) the
 * completion's global number (c_ack). */
static inline int op_write_ack(struct fs *fs, const struct fs_obj_id *obj, uint64_t off,
                               const void *data, uint32_t len, enum fs_stable stable,
                               enum fs_stable *committed, uint64_t *ack)
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
	if (ack)
		*ack = c.c_ack;
	call_fini(&c);
	return rc;
}

static inline int op_write(struct fs *fs, const struct fs_obj_id *obj, uint64_t off,
                           const void *data, uint32_t len, enum fs_stable stable,
                           enum fs_stable *committed)
{
	return op_write_ack(fs, obj, off, data, len, stable, committed, NULL);
}

/* Reads [off, off + len) into buf (fills with what the file has; *got_out bytes). */
static inline int op_read(struct fs *fs, const struct fs_obj_id *obj, uint64_t off, uint32_t len,
                          void *buf, uint32_t *got_out, bool *eof_out)
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
			if (fs_buf_copy_out(b, 0, (uint8_t *)buf + got, b->fb_len) != b->fb_len)
				rc = -EIO;
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

/* REMOVE or RMDIR (op) of name in dir. */
static inline int op_remove(struct fs *fs, enum fs_op op, const struct fs_obj_id *dir,
                            const char *name)
{
	struct call c;
	call_init(&c, fs, op, dir);
	c.c_req.u.remove.rm_name = name;
	int rc = call_run(&c);
	call_fini(&c);
	return rc;
}

static inline int op_rename(struct fs *fs, const struct fs_obj_id *from_dir, const char *from,
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

/* COMMIT of obj; *ack (if not NULL) gets the completion's global number whatever the status. */
static inline int op_commit_ack(struct fs *fs, const struct fs_obj_id *obj, uint64_t *ack)
{
	struct call c;
	call_init(&c, fs, FS_OP_COMMIT, obj);
	int rc = call_run(&c);
	if (ack)
		*ack = c.c_ack;
	call_fini(&c);
	return rc;
}

static inline int op_commit(struct fs *fs, const struct fs_obj_id *obj)
{
	return op_commit_ack(fs, obj, NULL);
}

/* SETATTR of the size (size >= 0) and/or the mode (mode >= 0) for cred (NULL: root). */
static inline int op_setattr(struct fs *fs, const struct fs_obj_id *obj, int64_t size, int32_t mode,
                             const struct fs_cred *cred)
{
	struct call c;
	call_init(&c, fs, FS_OP_SETATTR, obj);
	if (cred)
		c.c_req.fr_cred = cred;
	c.c_req.u.setattr.sa_sattr.fs_set_size = size >= 0;
	c.c_req.u.setattr.sa_sattr.fs_size = size >= 0 ? (uint64_t)size : 0;
	c.c_req.u.setattr.sa_sattr.fs_set_mode = mode >= 0;
	c.c_req.u.setattr.sa_sattr.fs_mode = mode >= 0 ? (uint32_t)mode : 0;
	int rc = call_run(&c);
	call_fini(&c);
	return rc;
}

/* LINK of file as name in dir. */
static inline int op_link(struct fs *fs, const struct fs_obj_id *file, const struct fs_obj_id *dir,
                          const char *name)
{
	struct call c;
	call_init(&c, fs, FS_OP_LINK, file);
	c.c_req.u.link.ln_dir = *dir;
	c.c_req.u.link.ln_name = name;
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

static struct rd_state *rd_cur; /* the walk in progress, under rd_lock */

static inline bool rd_emit_cur(struct fs_req *req, const struct fs_dirent *e)
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

static inline int op_readdir_all(struct fs *fs, const struct fs_obj_id *dir, bool plus,
                                 char (*names)[32], unsigned max, unsigned *n_out)
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

/* ---- random numbers ---- */

/* splitmix64: the next number of the sequence *state walks. */
static inline uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The byte a test's writer id puts at offset b: never zero, so a byte tells which write (or a
 * hole) produced it. */
static inline uint8_t pattern_byte(uint32_t id, uint64_t b)
{
	uint32_t x = id * 2654435761u ^ (uint32_t)b * 40503u ^ (uint32_t)(b >> 16) * 97u;
	x ^= x >> 13;
	x *= 0x5bd1e995u;
	x ^= x >> 15;
	return (uint8_t)(x | 1u);
}

/* Waits (up to 60 s) until the pool fs has no removed file left to free (its reaper is idle);
 * false on a timeout. */
static inline bool fs_reap_wait(struct fs *fs)
{
	for (int i = 0; i < 6000; i++) {
		struct pool_fs_stats st;
		pool_fs_stats(fs, &st);
		if (!st.ps_reap_busy)
			return true;
		usleep(10000);
	}
	return false;
}

/* ---- crash cuts ---- */

/* The global number of event index i of dev (binary search over blk_fault_events_before): the
 * smallest s in [lo, hi] with events_before(dev, s + 1) > i. */
static inline uint64_t event_seq(const struct blk_dev *dev, size_t i, uint64_t lo, uint64_t hi)
{
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (blk_fault_events_before(dev, mid + 1) > i)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The first lines pool_check reports (report_keep), to print with the cut that failed. */
struct check_lines {
	char cl_lines[6][200];
	unsigned cl_n;
};

static inline void report_keep(void *arg, const char *line)
{
	struct check_lines *cl = arg;
	if (cl->cl_n < 6)
		snprintf(cl->cl_lines[cl->cl_n++], sizeof(cl->cl_lines[0]), "%s", line);
}

/* SHALE_CRASH_CUTS, or the configuration's default. */
static inline unsigned crash_cuts_wanted(unsigned dflt)
{
	const char *e = getenv("SHALE_CRASH_CUTS");
	long n = e ? strtol(e, NULL, 10) : 0;
	return n > 0 ? (unsigned)n : dflt;
}

/* The cut points of one run (crash_plan_init, crash_plan_cut, crash_plan_fini). */
struct crash_plan {
	uint64_t *cp_flushes; /* global numbers of the run's flush events, ascending */
	size_t cp_nflush;
	unsigned cp_nflush_cuts; /* the first cuts: just before flush events */
	unsigned cp_ncuts;       /* in all; the rest at random instants */
	uint64_t cp_start, cp_end;
	uint64_t cp_seed; /* of the random instants */
};

/* Plans the cuts of a run on leaves[0..nleaves-1] that began at global number start_seq and ended
 * now: crash_cuts_wanted(default_cuts) points, three quarters (at most one per flush) just before
 * flush events of any leaf, the rest at random instants drawn from seed. Freed by
 * crash_plan_fini. */
static inline void crash_plan_init(struct crash_plan *cp, struct blk_dev *const *leaves,
                                   unsigned nleaves, uint64_t start_seq, unsigned default_cuts,
                                   uint64_t seed)
{
	memset(cp, 0, sizeof(*cp));
	cp->cp_start = start_seq;
	cp->cp_end = blk_fault_global_seq();
	cp->cp_seed = seed;
	size_t cap = 0;
	for (unsigned i = 0; i < nleaves; i++) {
		size_t n = blk_fault_event_count(leaves[i]);
		size_t first = blk_fault_events_before(leaves[i], start_seq);
		for (size_t e = first; e < n; e++) {
			if (!blk_fault_event_is_flush(leaves[i], e))
				continue;
			if (cp->cp_nflush == cap) {
				cap = cap ? cap * 2 : 256;
				cp->cp_flushes =
				    realloc(cp->cp_flushes, cap * sizeof(*cp->cp_flushes));
				VERIFY(cp->cp_flushes != NULL);
			}
			cp->cp_flushes[cp->cp_nflush++] =
			    event_seq(leaves[i], e, start_seq, cp->cp_end);
		}
	}
	if (cp->cp_nflush > 0)
		qsort(cp->cp_flushes, cp->cp_nflush, sizeof(*cp->cp_flushes), cmp_u64);
	unsigned want = crash_cuts_wanted(default_cuts);
	cp->cp_nflush_cuts = (unsigned)SH_MIN((size_t)want * 3 / 4, cp->cp_nflush);
	cp->cp_ncuts = want;
}

/* Cut point c (0 <= c < cp_ncuts; the random ones must be asked for in order). */
static inline uint64_t crash_plan_cut(struct crash_plan *cp, unsigned c)
{
	if (c < cp->cp_nflush_cuts) /* spread over the whole run */
		return cp->cp_flushes[(size_t)c * cp->cp_nflush / cp->cp_nflush_cuts];
	return cp->cp_start + rng_next(&cp->cp_seed) % (cp->cp_end - cp->cp_start + 1);
}

static inline void crash_plan_fini(struct crash_plan *cp)
{
	free(cp->cp_flushes);
	cp->cp_flushes = NULL;
}

/* Builds the images of leaves[0..nleaves-1] at cut g in mode (leaf i with seed seed * 31 + i)
 * into img[], imports them with o into *pool_out and runs pool_check; what fails is printed.
 * Returns true when the import and the check both succeeded. *pool_out is NULL when the import
 * failed; otherwise the caller closes it. The caller closes every image (blk_dev_close). */
static inline bool crash_cut_import(struct blk_dev *const *leaves, unsigned nleaves, uint64_t g,
                                    enum blk_fault_mode mode, uint64_t seed,
                                    const struct pool_open_opts *o, struct blk_dev **img,
                                    struct pool **pool_out)
{
	for (unsigned i = 0; i < nleaves; i++) {
		size_t cut = blk_fault_events_before(leaves[i], g);
		VERIFY(blk_fault_image(leaves[i], cut, mode, seed * 31 + i, &img[i]) == 0);
	}
	*pool_out = NULL;
	/* First read only, as `shale pool status` imports: it must come up on every image, and
	 * whatever it tried to write would fail (the leaves refuse), so the import below sees the
	 * image as it was. */
	struct pool_open_opts ro = *o;
	ro.po_read_only = true;
	for (unsigned i = 0; i < nleaves; i++)
		blk_dev_set_read_only(img[i], true);
	int rc = pool_import_devs(img, nleaves, &ro, pool_out);
	uint64_t unreplayed = 0;
	struct pool_status *st = malloc(sizeof(*st));
	VERIFY(st != NULL);
	if (rc == 0) {
		pool_status(*pool_out, st);
		unreplayed = st->ps_log_unreplayed;
		pool_close(*pool_out);
	}
	*pool_out = NULL;
	for (unsigned i = 0; i < nleaves; i++)
		blk_dev_set_read_only(img[i], false);
	if (rc != 0) {
		printf("#   cut %" PRIu64 " mode %d seed %" PRIu64
		       ": read-only import failed: %s\n",
		       g, mode, seed, sh_strerror(rc));
		free(st);
		return false;
	}
	rc = pool_import_devs(img, nleaves, o, pool_out);
	if (rc != 0) {
		printf("#   cut %" PRIu64 " mode %d seed %" PRIu64 ": import failed: %s\n", g, mode,
		       seed, sh_strerror(rc));
		free(st);
		*pool_out = NULL;
		return false;
	}
	/* what the read-only import counted is what this one replayed */
	pool_status(*pool_out, st);
	uint64_t replayed = st->ps_log_replayed;
	free(st);
	if (replayed != unreplayed) {
		printf("#   cut %" PRIu64 " mode %d seed %" PRIu64 ": the read-only import counted "
		       "%" PRIu64 " log records, the import replayed %" PRIu64 "\n",
		       g, mode, seed, unreplayed, replayed);
		return false; /* the caller closes the pool */
	}
	struct check_lines cl = {.cl_n = 0};
	int64_t problems = pool_check(*pool_out, report_keep, &cl);
	if (problems != 0) {
		printf("#   cut %" PRIu64 " mode %d seed %" PRIu64 ": pool_check: %" PRId64 "\n", g,
		       mode, seed, problems);
		for (unsigned i = 0; i < cl.cl_n; i++)
			printf("#     %s\n", cl.cl_lines[i]);
		return false;
	}
	return true;
}

#endif
