/* pool_fs_snapdir.c: the .zfs directory of a served pool file system: .zfs/snapshot/NAME/ is
 * snapshot NAME, read only, as ZFS users browse their snapshots over NFS.
 *
 * ---- Model ----
 * Every writable pool_fs has one snapdir. It answers three kinds of object ids of the file
 * system (the NFS layer wraps each into a handle as it does any other):
 *
 *   id                         bytes  what
 *   'Z' 'F' 'S' 1                  4  .zfs (a directory in the root, fileid PFS_SD_INO_ZFS)
 *   'Z' 'F' 'S' 2                  4  .zfs/snapshot (fileid PFS_SD_INO_SNAPDIR)
 *   zpl id (16) | txg (u64 LE)    24  object `zpl id` of the snapshot taken in txg `txg`
 *   zpl id (16)                   16  the file system's own objects: not the snapdir's
 *
 * A snapshot is named by its txg, never reused within its file system and kept by renames, so
 * a handle stays valid across restarts and renames and answers -ESTALE once the snapshot is
 * gone. The two directories are the file system's (its fsid); each snapshot has an fsid of its
 * own (the file system's mixed with its txg), so a client sees a mount point at
 * .zfs/snapshot/NAME (the Linux client mounts it by itself) and no two objects with one fileid
 * in one fsid. READDIR of .zfs/snapshot gives each snapshot the cookie txg + 2 (1 and 2 are "."
 * and ".."): unique, stable while it exists, in the order listed, so a client pages through
 * thousands without a loop. Its attributes change with the snapshots (size: their number;
 * mtime and ctime: when the snapdir last saw the list change, a digest of names and txgs), so a
 * client that listed it sees a snapshot made since at its next look. The root's READDIR lists
 * .zfs (cookie 3, between ".." and the first name, whose cookies are >= 65536: zpl.c) only when
 * the dataset's snapdir property is visible; LOOKUP finds it either way, and a name ".zfs" in
 * the root cannot be created (EEXIST), as in ZFS.
 *
 * ---- Snapshots opened ----
 * A request for a snapshot's object goes to a read-only pool_fs of that snapshot (pool_fs_open
 * of "fs@snap"), opened at first use on the worker thread (opening blocks) and kept in a table
 * of at most PFS_SD_OPEN_MAX, the least recently used idle one closed to make room. The request
 * is copied into a call (struct pfs_sd_call): the copy goes to the snapshot with the ids cut to
 * the zpl's 16 bytes, and its completion copies the results back, the snapshot's txg appended to
 * every id that goes out, and completes the caller's request. ".." of a snapshot's root is
 * .zfs/snapshot.
 *
 * Rules:
 *   D1 An entry's se_busy counts its calls in flight and its READ buffers not released; its
 *      pool_fs is destroyed only at se_busy == 0, by the one thread that took it out of the table
 *      (eviction on the worker, release, or pfs_snapdir_destroy), so no request ever meets a
 *      destroyed file system.
 *   D2 The destroy of a snapshot (pool_snap.c) first dooms it (no open from then on), then calls
 *      pfs_sd_release: the entry is marked dead (new requests for it wait on the worker), its
 *      calls drain (at most PFS_SD_RELEASE_WAIT_S; a READ buffer a stuck client holds makes the
 *      destroy fail with -EBUSY rather than hang the command), and it is closed. Later requests
 *      find no snapshot and answer -ESTALE. Nothing on an event loop ever waits: requests
 *      only take sd_lock briefly or go to the worker.
 *   D3 The worker is the only thread that opens snapshots, so a txg has at most one entry.
 *   D4 The snapshot list is read (pool_snap_entries, every record under the pool lock) only when
 *      the pool's snapshot generation (pool_snap_gen: bumped by every phase 1 that changed a
 *      snapshot record) moved since the cached list was read; the generation is read before
 *      the records, so a change that races the read leaves the list stale and read again.
 *
 * ---- Concurrency ----
 * sd_lock guards the table, the counters of busy entries, the worker's queue and the list's
 * digest; it is a leaf (no pool lock or other lock is taken under it, no call made). Requests
 * for open snapshots run on the caller's thread; the rest (opens, the two directories, whose
 * answers read the snapshot list under the pool lock) on the worker. A call's completion runs
 * on whatever thread the snapshot's file system completes it on and posts the caller's to its
 * loop (fs_req_complete). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "poolfs/pool_fs.h"
#include "poolfs/pool_fs_snapdir.h"
#include "pool/pool_impl.h"
#include "zpl/zpl.h"

#define PFS_SD_OPEN_MAX 16u          /* snapshots kept open (each has two threads and a zpl) */
#define PFS_SD_RELEASE_WAIT_S 10     /* how long a destroy waits for a snapshot's readers */
#define PFS_SD_ID_CTL_BYTES 4u
#define PFS_SD_ID_SNAP_BYTES (ZPL_OBJ_ID_BYTES + 8u)
#define PFS_SD_KIND_ZFS 1u
#define PFS_SD_KIND_SNAPDIR 2u
/* fileids of the two directories (ZFS's ZFSCTL_INO_ROOT and ZFSCTL_INO_SNAPDIR), and the base of
 * the snapshots' fileids in .zfs/snapshot's listing (plus their txg) */
#define PFS_SD_INO_ZFS 0x0000ffffffffffffull
#define PFS_SD_INO_SNAPDIR 0x0000fffffffffffdull
#define PFS_SD_INO_SNAP_BASE 0x0000fffe00000000ull
#define PFS_SD_COOKIE_ZFS 3u /* .zfs in the root's listing */
#define PFS_SD_COOKIE_SNAP_BIAS 2u

static const char pfs_sd_zfs_name[] = ".zfs";
static const char pfs_sd_snapshot_name[] = "snapshot";

struct pfs_snap_ent {
	struct pfs_snap_ent *se_next;
	uint64_t se_txg;
	struct fs *se_fs;            /* read-only pool_fs of the snapshot */
	struct fs_obj_id se_root;    /* its root, as its zpl names it (16 bytes) */
	unsigned se_busy;            /* rule D1 */
	bool se_dead;                /* being released (D2) */
	uint64_t se_used;            /* sd_clock at its last use: the least recently used goes */
};

enum pfs_sd_call_kind {
	PFS_SD_SNAP = 1,      /* a request for a snapshot's object */
	PFS_SD_ROOT_READDIR,  /* the root's READDIR with .zfs listed */
	PFS_SD_CTL,           /* a request for .zfs or .zfs/snapshot (the worker answers) */
};

/* One request the snapdir answers: the caller's (sc_outer) and, when another file system
 * answers for it, the copy that went there (sc_inner). */
struct pfs_sd_call {
	struct fs_req sc_inner;
	struct fs_req *sc_outer;
	struct pfs_snapdir *sc_sd;
	struct pfs_sd_call *sc_next;    /* the worker's queue */
	enum pfs_sd_call_kind sc_kind;
	struct pfs_snap_ent *sc_ent;    /* PFS_SD_SNAP once forwarded (busy counted) */
	uint64_t sc_txg;                /* PFS_SD_SNAP: the snapshot */
	unsigned sc_ctl_kind;           /* PFS_SD_CTL: the directory (PFS_SD_KIND_*) */
	bool sc_ctl_self;               /* PFS_SD_CTL: a LOOKUP that names the directory itself
	                                 * from outside it (.zfs in the root, ".." of a snapshot) */
	struct fs_attr sc_ctl_attr;     /* PFS_SD_CTL: the directory's attributes */
	bool sc_zfs_emitted;            /* PFS_SD_ROOT_READDIR: .zfs went out (or was passed) */
	bool sc_full;                   /* a READDIR's caller said its reply is full */
	void (*sc_release)(void *arg);  /* READ: the snapshot's buffer's release */
	void *sc_release_arg;
};

struct pfs_snapdir {
	struct pool *sd_pool;
	struct pool_ds *sd_ds;       /* the file system's (held open by its pool_fs) */
	struct fs *sd_head;
	pfs_head_run_fn sd_head_run;
	struct fs_obj_id sd_root;
	uint64_t sd_fsid;
	uint64_t sd_head_id;
	struct pool_snap_user sd_user;

	pthread_mutex_t sd_lock;     /* everything below (a leaf lock) */
	pthread_cond_t sd_cv;        /* the queue grew, an entry drained or went */
	pthread_t sd_worker;
	bool sd_stopping;
	struct pfs_sd_call *sd_queue, *sd_queue_tail;
	struct pfs_snap_ent *sd_ents;
	unsigned sd_nents;
	uint64_t sd_clock;
	uint64_t sd_digest;          /* of the snapshot list as last seen */
	bool sd_digest_valid;
	struct fs_time sd_changed;   /* when the list was last seen to change */
	uint64_t sd_opens, sd_closes, sd_forwarded;
	struct pfs_sd_list *sd_list; /* the snapshot list as last read (one reference) */
};

/* The file system's snapshots as pool_snap_entries gave them when the pool's snapshot generation
 * was sl_gen: shared by the requests that use it (sl_refs, under sd_lock) and replaced when the
 * generation moves, so that a GETATTR of .zfs/snapshot reads no snapshot record (rule D4). */
struct pfs_sd_list {
	unsigned sl_refs;
	uint64_t sl_gen;
	size_t sl_n;
	struct pool_snap_entry *sl_ents;
};

/* ---------------------------------------------------------------------------------------------
 * The snapshot list (rule D4) */

static void pfs_sd_list_free(struct pfs_sd_list *l)
{
	if (l) {
		mem_free(l->sl_ents);
		mem_free(l);
	}
}

static void pfs_sd_list_put(struct pfs_snapdir *sd, struct pfs_sd_list *l)
{
	pthread_mutex_lock(&sd->sd_lock);
	bool last = --l->sl_refs == 0;
	pthread_mutex_unlock(&sd->sd_lock);
	if (last)
		pfs_sd_list_free(l);
}

/* The current list with a reference (pfs_sd_list_put it), read again when it is stale. */
static int pfs_sd_list_get(struct pfs_snapdir *sd, struct pfs_sd_list **out)
{
	uint64_t gen = pool_snap_gen(sd->sd_pool);
	pthread_mutex_lock(&sd->sd_lock);
	struct pfs_sd_list *l = sd->sd_list;
	if (l && l->sl_gen == gen) {
		l->sl_refs++;
		pthread_mutex_unlock(&sd->sd_lock);
		*out = l;
		return 0;
	}
	pthread_mutex_unlock(&sd->sd_lock);
	l = mem_zalloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	int rc = pool_snap_entries(sd->sd_pool, sd->sd_head_id, &l->sl_ents, &l->sl_n);
	if (rc != 0) {
		mem_free(l);
		return rc;
	}
	l->sl_gen = gen;
	l->sl_refs = 2; /* the caller's and the cache's */
	pthread_mutex_lock(&sd->sd_lock);
	struct pfs_sd_list *old = sd->sd_list;
	sd->sd_list = l;
	bool last = old && --old->sl_refs == 0;
	pthread_mutex_unlock(&sd->sd_lock);
	if (last)
		pfs_sd_list_free(old);
	*out = l;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Ids */

static void pfs_sd_ctl_id(unsigned kind, struct fs_obj_id *id)
{
	memset(id, 0, sizeof(*id));
	id->foi_len = PFS_SD_ID_CTL_BYTES;
	id->foi_bytes[0] = 'Z';
	id->foi_bytes[1] = 'F';
	id->foi_bytes[2] = 'S';
	id->foi_bytes[3] = (uint8_t)kind;
}

/* The kind of a directory id (PFS_SD_KIND_*), or 0. */
static unsigned pfs_sd_ctl_kind(const struct fs_obj_id *id)
{
	if (id->foi_len != PFS_SD_ID_CTL_BYTES || memcmp(id->foi_bytes, "ZFS", 3) != 0)
		return 0;
	unsigned kind = id->foi_bytes[3];
	return kind == PFS_SD_KIND_ZFS || kind == PFS_SD_KIND_SNAPDIR ? kind : 0;
}

static uint64_t pfs_sd_le64(const uint8_t *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | b[i];
	return v;
}

/* A snapshot's object id: the zpl's and the txg. */
static void pfs_sd_snap_id(const struct fs_obj_id *zpl_id, uint64_t txg, struct fs_obj_id *out)
{
	*out = *zpl_id;
	for (unsigned i = 0; i < 8; i++)
		out->foi_bytes[ZPL_OBJ_ID_BYTES + i] = (uint8_t)(txg >> (8 * i));
	out->foi_len = PFS_SD_ID_SNAP_BYTES;
}

/* Splits a snapshot's object id; false when id is not one. */
static bool pfs_sd_snap_split(const struct fs_obj_id *id, struct fs_obj_id *zpl_id, uint64_t *txg)
{
	if (id->foi_len != PFS_SD_ID_SNAP_BYTES)
		return false;
	memset(zpl_id, 0, sizeof(*zpl_id));
	zpl_id->foi_len = ZPL_OBJ_ID_BYTES;
	memcpy(zpl_id->foi_bytes, id->foi_bytes, ZPL_OBJ_ID_BYTES);
	*txg = pfs_sd_le64(id->foi_bytes + ZPL_OBJ_ID_BYTES);
	return *txg != 0;
}

static bool pfs_sd_id_eq(const struct fs_obj_id *a, const struct fs_obj_id *b)
{
	return a->foi_len == b->foi_len && memcmp(a->foi_bytes, b->foi_bytes, a->foi_len) == 0;
}

/* The fsid of the snapshot of txg: the file system's mixed with it, never the file system's. */
static uint64_t pfs_sd_snap_fsid(const struct pfs_snapdir *sd, uint64_t txg)
{
	return sd->sd_fsid ^ (sh_hash64(&txg, sizeof(txg), 0x7a66732e736e6170ull) | 1u);
}

/* ---------------------------------------------------------------------------------------------
 * Which requests are ours */

static bool pfs_sd_is_zfs_name(const char *name)
{
	return name && strcmp(name, pfs_sd_zfs_name) == 0;
}

bool pfs_snapdir_claims(const struct pfs_snapdir *sd, const struct fs_req *req)
{
	if (req->fr_obj.foi_len != ZPL_OBJ_ID_BYTES)
		return true;
	switch (req->fr_op) {
	case FS_OP_LOOKUP:
		return pfs_sd_is_zfs_name(req->u.lookup.lk_name) &&
		       pfs_sd_id_eq(&req->fr_obj, &sd->sd_root);
	case FS_OP_READDIR:
		return pool_ds_snapdir_visible(sd->sd_ds) &&
		       pfs_sd_id_eq(&req->fr_obj, &sd->sd_root);
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD:
		return pfs_sd_is_zfs_name(req->u.create.cr_name) &&
		       pfs_sd_id_eq(&req->fr_obj, &sd->sd_root);
	case FS_OP_RENAME:
		return req->u.rename.rn_to_dir.foi_len != ZPL_OBJ_ID_BYTES ||
		       (pfs_sd_is_zfs_name(req->u.rename.rn_to_name) &&
		        pfs_sd_id_eq(&req->u.rename.rn_to_dir, &sd->sd_root));
	case FS_OP_LINK:
		return req->u.link.ln_dir.foi_len != ZPL_OBJ_ID_BYTES ||
		       (pfs_sd_is_zfs_name(req->u.link.ln_name) &&
		        pfs_sd_id_eq(&req->u.link.ln_dir, &sd->sd_root));
	default:
		return false;
	}
}

/* ---------------------------------------------------------------------------------------------
 * The table of open snapshots */

static struct pfs_snap_ent *pfs_sd_find_locked(struct pfs_snapdir *sd, uint64_t txg)
{
	for (struct pfs_snap_ent *e = sd->sd_ents; e; e = e->se_next)
		if (e->se_txg == txg)
			return e;
	return NULL;
}

static void pfs_sd_unlink_locked(struct pfs_snapdir *sd, struct pfs_snap_ent *e)
{
	struct pfs_snap_ent **link = &sd->sd_ents;
	while (*link != e)
		link = &(*link)->se_next;
	*link = e->se_next;
	sd->sd_nents--;
	sd->sd_closes++;
}

/* An entry taken out of the table (D1): nobody else can reach it. */
static void pfs_sd_ent_close(struct pfs_snap_ent *e)
{
	fs_destroy(e->se_fs);
	mem_free(e);
}

/* One busy count of e less (D1). */
static void pfs_sd_ent_put(struct pfs_snapdir *sd, struct pfs_snap_ent *e)
{
	pthread_mutex_lock(&sd->sd_lock);
	ASSERT(e->se_busy > 0);
	if (--e->se_busy == 0 && e->se_dead)
		pthread_cond_broadcast(&sd->sd_cv);
	pthread_mutex_unlock(&sd->sd_lock);
}

/* The name of the snapshot of txg ("fs@snap" into full), 0 or -ESTALE (none: destroyed), or the
 * listing's error. */
static int pfs_sd_snap_name(struct pfs_snapdir *sd, uint64_t txg, char *full, size_t full_len)
{
	struct pfs_sd_list *l;
	int rc = pfs_sd_list_get(sd, &l);
	if (rc != 0)
		return rc;
	const struct pool_snap_entry *ents = l->sl_ents;
	size_t n = l->sl_n;
	rc = -ESTALE;
	for (size_t i = 0; i < n; i++) {
		if (ents[i].se_txg == txg) {
			char fs[POOL_DS_NAME_MAX + 1];
			pool_lock(sd->sd_pool);
			memcpy(fs, sd->sd_ds->ds_name, sizeof(fs)); /* a rename changes it */
			pool_unlock(sd->sd_pool);
			snprintf(full, full_len, "%s@%s", fs, ents[i].se_name);
			rc = 0;
			break;
		}
	}
	pfs_sd_list_put(sd, l);
	return rc;
}

/* Worker: the entry of the snapshot of txg, opened if need be, with a busy count taken.
 * -ESTALE when the snapshot does not exist (or is being destroyed). */
static int pfs_sd_ent_get(struct pfs_snapdir *sd, uint64_t txg, struct pfs_snap_ent **out)
{
	pthread_mutex_lock(&sd->sd_lock);
	for (;;) {
		struct pfs_snap_ent *e = pfs_sd_find_locked(sd, txg);
		if (!e)
			break;
		if (!e->se_dead) {
			e->se_busy++;
			e->se_used = ++sd->sd_clock;
			sd->sd_forwarded++;
			pthread_mutex_unlock(&sd->sd_lock);
			*out = e;
			return 0;
		}
		pthread_cond_wait(&sd->sd_cv, &sd->sd_lock); /* being released (D2) */
	}
	pthread_mutex_unlock(&sd->sd_lock);

	char full[POOL_SNAP_FULL_MAX + 1];
	int rc = pfs_sd_snap_name(sd, txg, full, sizeof(full));
	if (rc != 0)
		return rc;
	struct pfs_snap_ent *e = mem_zalloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	rc = pool_fs_open(sd->sd_pool, full, pfs_sd_snap_fsid(sd, txg), &e->se_fs);
	if (rc == 0)
		rc = fs_root(e->se_fs, &e->se_root);
	if (rc != 0) {
		if (e->se_fs)
			fs_destroy(e->se_fs);
		mem_free(e);
		return rc == -ENOENT ? -ESTALE : rc; /* destroyed meanwhile, or doomed */
	}
	e->se_txg = txg;
	e->se_busy = 1;
	/* Room: the least recently used idle entries go, outside the lock (D1). */
	struct pfs_snap_ent *victims = NULL;
	pthread_mutex_lock(&sd->sd_lock);
	while (sd->sd_nents >= PFS_SD_OPEN_MAX) {
		struct pfs_snap_ent *lru = NULL;
		for (struct pfs_snap_ent *c = sd->sd_ents; c; c = c->se_next)
			if (c->se_busy == 0 && !c->se_dead && (!lru || c->se_used < lru->se_used))
				lru = c;
		if (!lru)
			break; /* all busy: over the bound for a while */
		pfs_sd_unlink_locked(sd, lru);
		lru->se_next = victims;
		victims = lru;
	}
	e->se_used = ++sd->sd_clock;
	e->se_next = sd->sd_ents;
	sd->sd_ents = e;
	sd->sd_nents++;
	sd->sd_opens++;
	sd->sd_forwarded++; /* the request that opened it goes there */
	pthread_mutex_unlock(&sd->sd_lock);
	while (victims) {
		struct pfs_snap_ent *v = victims;
		victims = v->se_next;
		pfs_sd_ent_close(v);
	}
	*out = e;
	return 0;
}

/* pool_snap_user's release (D2): no pool lock held; the snapshot is doomed already. */
static int pfs_sd_release(void *arg, uint64_t txg)
{
	struct pfs_snapdir *sd = arg;
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += PFS_SD_RELEASE_WAIT_S;
	pthread_mutex_lock(&sd->sd_lock);
	struct pfs_snap_ent *e = pfs_sd_find_locked(sd, txg);
	if (!e) {
		pthread_mutex_unlock(&sd->sd_lock);
		return 0;
	}
	e->se_dead = true;
	while (e->se_busy > 0) {
		if (pthread_cond_timedwait(&sd->sd_cv, &sd->sd_lock, &deadline) == ETIMEDOUT &&
		    e->se_busy > 0) {
			e->se_dead = false; /* still in use: it goes on serving */
			pthread_cond_broadcast(&sd->sd_cv);
			pthread_mutex_unlock(&sd->sd_lock);
			return -EBUSY;
		}
	}
	pfs_sd_unlink_locked(sd, e);
	pthread_cond_broadcast(&sd->sd_cv); /* the worker may wait for it to go */
	pthread_mutex_unlock(&sd->sd_lock);
	pfs_sd_ent_close(e);
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Calls: a request answered through another file system's */

static void pfs_sd_call_free(struct pfs_sd_call *call)
{
	mem_free(call);
}

/* Completes the caller's request with status. */
static void pfs_sd_call_finish(struct pfs_sd_call *call, int status)
{
	struct fs_req *outer = call->sc_outer;
	outer->fr_status = status;
	pfs_sd_call_free(call);
	fs_req_complete(outer);
}

static void pfs_sd_queue(struct pfs_snapdir *sd, struct pfs_sd_call *call)
{
	call->sc_next = NULL;
	pthread_mutex_lock(&sd->sd_lock);
	if (sd->sd_queue_tail)
		sd->sd_queue_tail->sc_next = call;
	else
		sd->sd_queue = call;
	sd->sd_queue_tail = call;
	pthread_cond_broadcast(&sd->sd_cv);
	pthread_mutex_unlock(&sd->sd_lock);
}

/* The READ buffer of a snapshot, released by the caller: the snapshot's release, then the busy
 * count the buffer kept (D1). */
static void pfs_sd_read_release(void *arg)
{
	struct pfs_sd_call *call = arg;
	if (call->sc_release)
		call->sc_release(call->sc_release_arg);
	pfs_sd_ent_put(call->sc_sd, call->sc_ent);
	pfs_sd_call_free(call);
}

static bool pfs_sd_forward_emit(struct fs_req *inner, const struct fs_dirent *entry)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	struct fs_dirent d = *entry;
	if (d.fd_has_obj)
		pfs_sd_snap_id(&entry->fd_obj, call->sc_txg, &d.fd_obj);
	return outer->u.readdir.rd_emit(outer, &d);
}

static void pfs_sd_snap_done(struct fs_req *inner)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	struct pfs_snapdir *sd = call->sc_sd;
	bool (*emit)(struct fs_req *, const struct fs_dirent *) = outer->u.readdir.rd_emit;
	/* The results, with the ids that go out made the snapshot's. */
	outer->u = inner->u;
	if (outer->fr_op == FS_OP_READDIR)
		outer->u.readdir.rd_emit = emit;
	outer->fr_status = inner->fr_status;
	if (outer->fr_op == FS_OP_LOOKUP && inner->fr_status == 0)
		pfs_sd_snap_id(&inner->u.lookup.lk_obj, call->sc_txg, &outer->u.lookup.lk_obj);
	if (outer->fr_op == FS_OP_READ &&
	    (inner->fr_status == 0 || inner->u.read.rd_buf.fb_release)) {
		/* the entry stays busy until the caller lets go of the buffer */
		call->sc_release = inner->u.read.rd_buf.fb_release;
		call->sc_release_arg = inner->u.read.rd_buf.fb_release_arg;
		outer->u.read.rd_buf.fb_release = pfs_sd_read_release;
		outer->u.read.rd_buf.fb_release_arg = call;
		fs_req_complete(outer);
		return;
	}
	pfs_sd_ent_put(sd, call->sc_ent);
	pfs_sd_call_free(call);
	fs_req_complete(outer);
}

/* The attributes of .zfs (kind 1) or .zfs/snapshot (kind 2), given the snapshot list. */
static void pfs_sd_ctl_attr(struct pfs_snapdir *sd, unsigned kind,
                            const struct pool_snap_entry *ents, size_t n, struct fs_attr *attr)
{
	uint64_t digest = n;
	for (size_t i = 0; i < n; i++) {
		digest = sh_hash64(&ents[i].se_txg, sizeof(ents[i].se_txg), digest);
		digest = sh_hash64(ents[i].se_name, strlen(ents[i].se_name), digest);
	}
	pthread_mutex_lock(&sd->sd_lock);
	if (!sd->sd_digest_valid || sd->sd_digest != digest) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		struct fs_time t = {now.tv_sec, (uint32_t)now.tv_nsec};
		/* Never back in time, and never the same as before: a client compares them. */
		if (sd->sd_digest_valid && (t.ft_sec < sd->sd_changed.ft_sec ||
		                            (t.ft_sec == sd->sd_changed.ft_sec &&
		                             t.ft_nsec <= sd->sd_changed.ft_nsec))) {
			t = sd->sd_changed;
			if (++t.ft_nsec >= 1000000000u) {
				t.ft_nsec = 0;
				t.ft_sec++;
			}
		}
		sd->sd_changed = t;
		sd->sd_digest = digest;
		sd->sd_digest_valid = true;
	}
	struct fs_time changed = sd->sd_changed;
	pthread_mutex_unlock(&sd->sd_lock);
	memset(attr, 0, sizeof(*attr));
	attr->fa_type = FS_DIR;
	attr->fa_mode = 0555;
	attr->fa_nlink = kind == PFS_SD_KIND_ZFS ? 3 : 2;
	attr->fa_size = kind == PFS_SD_KIND_ZFS ? 1 : n;
	attr->fa_fsid = sd->sd_fsid;
	attr->fa_fileid = kind == PFS_SD_KIND_ZFS ? PFS_SD_INO_ZFS : PFS_SD_INO_SNAPDIR;
	attr->fa_atime = changed;
	attr->fa_mtime = changed;
	attr->fa_ctime = changed;
}

/* Starts a call's inner request on fs (a snapshot's, or the file system itself via head_run);
 * done runs with its outcome. */
static void pfs_sd_call_start(struct pfs_sd_call *call, struct fs *fs, bool head,
                              fs_done_fn done)
{
	struct fs_req *inner = &call->sc_inner;
	inner->fr_fs = fs;
	inner->fr_loop = NULL; /* done runs where the file system completes it */
	inner->fr_done = done;
	inner->fr_done_arg = call;
	inner->fr_status = 0;
	if (head)
		call->sc_sd->sd_head_run(fs, inner);
	else
		fs_submit(inner);
}

/* A request for a snapshot's object, its entry busy: ".." of the snapshot's root answers
 * .zfs/snapshot; everything else goes to the snapshot. */
static void pfs_sd_forward(struct pfs_snapdir *sd, struct pfs_sd_call *call,
                           struct pfs_snap_ent *e);

/* ---------------------------------------------------------------------------------------------
 * The two directories (on the worker) */

static void pfs_sd_ctl_lookup_root_done(struct fs_req *inner);
static void pfs_sd_ctl_lookup_snap_done(struct fs_req *inner);

static bool pfs_sd_emit_ctl(struct fs_req *outer, const char *name, uint64_t cookie,
                            uint64_t fileid, const struct fs_obj_id *obj,
                            const struct fs_attr *attr)
{
	struct fs_dirent d;
	memset(&d, 0, sizeof(d));
	d.fd_fileid = fileid;
	d.fd_cookie = cookie;
	d.fd_name = name;
	d.fd_name_len = (uint32_t)strlen(name);
	if (outer->u.readdir.rd_plus && obj) {
		d.fd_has_obj = true;
		d.fd_obj = *obj;
		d.fd_has_attr = attr != NULL;
		if (attr)
			d.fd_attr = *attr;
	}
	return outer->u.readdir.rd_emit(outer, &d);
}

/* READDIR of .zfs or .zfs/snapshot: returns the status. */
static int pfs_sd_ctl_readdir(struct pfs_snapdir *sd, struct fs_req *outer, unsigned kind,
                              const struct pool_snap_entry *ents, size_t n,
                              const struct fs_attr *attr)
{
	uint64_t cookie = outer->u.readdir.rd_cookie;
	outer->u.readdir.rd_attr_valid = true;
	outer->u.readdir.rd_attr = *attr;
	outer->u.readdir.rd_eof = false;
	memset(outer->u.readdir.rd_verf_out, 0, 8);
	if (!outer->u.readdir.rd_emit)
		return -EINVAL;
	struct fs_obj_id self;
	pfs_sd_ctl_id(kind, &self);
	if (cookie == 0 && !pfs_sd_emit_ctl(outer, ".", 1, attr->fa_fileid, &self, attr))
		return 0;
	if (cookie <= 1) {
		uint64_t parent_ino = kind == PFS_SD_KIND_ZFS ? pfs_sd_le64(sd->sd_root.foi_bytes)
		                                              : PFS_SD_INO_ZFS;
		if (!pfs_sd_emit_ctl(outer, "..", 2, parent_ino, NULL, NULL))
			return 0;
	}
	if (kind == PFS_SD_KIND_ZFS) {
		if (cookie <= 2) {
			struct fs_obj_id snapdir;
			struct fs_attr snapdir_attr;
			pfs_sd_ctl_id(PFS_SD_KIND_SNAPDIR, &snapdir);
			pfs_sd_ctl_attr(sd, PFS_SD_KIND_SNAPDIR, ents, n, &snapdir_attr);
			if (!pfs_sd_emit_ctl(outer, pfs_sd_snapshot_name, 3, PFS_SD_INO_SNAPDIR,
			                     &snapdir, &snapdir_attr))
				return 0;
		}
		outer->u.readdir.rd_eof = true;
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t c = ents[i].se_txg + PFS_SD_COOKIE_SNAP_BIAS;
		if (c <= cookie)
			continue;
		if (!pfs_sd_emit_ctl(outer, ents[i].se_name, c, PFS_SD_INO_SNAP_BASE + ents[i].se_txg,
		                     NULL, NULL))
			return 0;
	}
	outer->u.readdir.rd_eof = true;
	return 0;
}

/* LOOKUP in .zfs or .zfs/snapshot. Returns 1 when an inner request took the call over, else
 * the status (the outputs filled). */
static int pfs_sd_ctl_lookup(struct pfs_snapdir *sd, struct pfs_sd_call *call, unsigned kind,
                             const struct pool_snap_entry *ents, size_t n)
{
	struct fs_req *outer = call->sc_outer;
	const char *name = outer->u.lookup.lk_name;
	/* the directory looked in: this one, unless the name leads here from outside */
	outer->u.lookup.lk_dir_attr_valid = !call->sc_ctl_self;
	outer->u.lookup.lk_dir_attr = call->sc_ctl_attr;
	if (call->sc_ctl_self || strcmp(name, ".") == 0) {
		pfs_sd_ctl_id(kind, &outer->u.lookup.lk_obj);
		outer->u.lookup.lk_attr = call->sc_ctl_attr;
		return 0;
	}
	if (kind == PFS_SD_KIND_ZFS && strcmp(name, "..") == 0) {
		/* the root: its attributes from the file system */
		call->sc_inner = *outer;
		call->sc_inner.fr_op = FS_OP_GETATTR;
		call->sc_inner.fr_obj = sd->sd_root;
		pfs_sd_call_start(call, sd->sd_head, true, pfs_sd_ctl_lookup_root_done);
		return 1;
	}
	unsigned to = 0;
	if (kind == PFS_SD_KIND_ZFS && strcmp(name, pfs_sd_snapshot_name) == 0)
		to = PFS_SD_KIND_SNAPDIR;
	if (kind == PFS_SD_KIND_SNAPDIR && strcmp(name, "..") == 0)
		to = PFS_SD_KIND_ZFS;
	if (to != 0) {
		pfs_sd_ctl_id(to, &outer->u.lookup.lk_obj);
		pfs_sd_ctl_attr(sd, to, ents, n, &outer->u.lookup.lk_attr);
		return 0;
	}
	if (kind != PFS_SD_KIND_SNAPDIR)
		return -ENOENT;
	size_t i;
	for (i = 0; i < n && strcmp(ents[i].se_name, name) != 0; i++)
		;
	if (i == n)
		return -ENOENT;
	struct pfs_snap_ent *e;
	int rc = pfs_sd_ent_get(sd, ents[i].se_txg, &e);
	if (rc != 0)
		return rc == -ESTALE ? -ENOENT : rc; /* destroyed since the listing */
	call->sc_ent = e;
	call->sc_txg = e->se_txg;
	call->sc_inner = *outer;
	call->sc_inner.fr_op = FS_OP_GETATTR;
	call->sc_inner.fr_obj = e->se_root;
	pfs_sd_call_start(call, e->se_fs, false, pfs_sd_ctl_lookup_snap_done);
	return 1;
}

static void pfs_sd_ctl_lookup_root_done(struct fs_req *inner)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	if (inner->fr_status == 0) {
		outer->u.lookup.lk_obj = call->sc_sd->sd_root;
		outer->u.lookup.lk_attr = inner->u.getattr.ga_attr;
	}
	pfs_sd_call_finish(call, inner->fr_status);
}

static void pfs_sd_ctl_lookup_snap_done(struct fs_req *inner)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	struct pfs_snap_ent *e = call->sc_ent;
	if (inner->fr_status == 0) {
		pfs_sd_snap_id(&e->se_root, e->se_txg, &outer->u.lookup.lk_obj);
		outer->u.lookup.lk_attr = inner->u.getattr.ga_attr;
	}
	pfs_sd_ent_put(call->sc_sd, e);
	pfs_sd_call_finish(call, inner->fr_status);
}

static void pfs_sd_ctl_fsstat_done(struct fs_req *inner)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	outer->u.fsstat = inner->u.fsstat;
	outer->u.fsstat.st_attr_valid = true;
	outer->u.fsstat.st_attr = call->sc_ctl_attr;
	pfs_sd_call_finish(call, inner->fr_status);
}

/* A request for .zfs (kind 1) or .zfs/snapshot (kind 2), on the worker. */
static void pfs_sd_ctl_run(struct pfs_snapdir *sd, struct pfs_sd_call *call, unsigned kind)
{
	struct fs_req *outer = call->sc_outer;
	struct pfs_sd_list *l;
	int rc = pfs_sd_list_get(sd, &l);
	if (rc != 0) {
		pfs_sd_call_finish(call, rc);
		return;
	}
	const struct pool_snap_entry *ents = l->sl_ents;
	size_t n = l->sl_n;
	pfs_sd_ctl_attr(sd, kind, ents, n, &call->sc_ctl_attr);
	const struct fs_attr *attr = &call->sc_ctl_attr;
	switch (outer->fr_op) {
	case FS_OP_GETATTR:
		outer->u.getattr.ga_attr = *attr;
		break;
	case FS_OP_ACCESS:
		outer->u.access.ac_granted =
		    outer->u.access.ac_want & (FS_ACCESS_READ | FS_ACCESS_LOOKUP | FS_ACCESS_EXECUTE);
		outer->u.access.ac_attr_valid = true;
		outer->u.access.ac_attr = *attr;
		break;
	case FS_OP_LOOKUP:
		rc = pfs_sd_ctl_lookup(sd, call, kind, ents, n);
		if (rc == 1) {
			pfs_sd_list_put(sd, l);
			return; /* an inner request finishes it */
		}
		break;
	case FS_OP_READDIR:
		rc = pfs_sd_ctl_readdir(sd, outer, kind, ents, n, attr);
		break;
	case FS_OP_FSSTAT:
		pfs_sd_list_put(sd, l);
		call->sc_inner = *outer;
		call->sc_inner.fr_obj = sd->sd_root;
		pfs_sd_call_start(call, sd->sd_head, true, pfs_sd_ctl_fsstat_done);
		return;
	case FS_OP_READ:
		outer->u.read.rd_attr_valid = true;
		outer->u.read.rd_attr = *attr;
		rc = -EISDIR;
		break;
	case FS_OP_READLINK:
		outer->u.readlink.rl_attr_valid = true;
		outer->u.readlink.rl_attr = *attr;
		rc = -EINVAL;
		break;
	default:
		rc = -EROFS; /* nothing in .zfs changes (a change's wcc stays empty) */
		break;
	}
	pfs_sd_list_put(sd, l);
	pfs_sd_call_finish(call, rc);
}

/* ---------------------------------------------------------------------------------------------
 * The root's READDIR with .zfs listed */

static bool pfs_sd_emit_zfs(struct pfs_sd_call *call)
{
	struct fs_obj_id zfs;
	pfs_sd_ctl_id(PFS_SD_KIND_ZFS, &zfs);
	call->sc_zfs_emitted = true;
	/* sc_ctl_attr: made for READDIRPLUS before the listing began (pfs_sd_root_readdir) */
	bool more = pfs_sd_emit_ctl(call->sc_outer, pfs_sd_zfs_name, PFS_SD_COOKIE_ZFS,
	                            PFS_SD_INO_ZFS, &zfs, &call->sc_ctl_attr);
	if (!more)
		call->sc_full = true;
	return more;
}

static bool pfs_sd_root_emit(struct fs_req *inner, const struct fs_dirent *entry)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	if (!call->sc_zfs_emitted && entry->fd_cookie > 2 && !pfs_sd_emit_zfs(call))
		return false;
	bool more = outer->u.readdir.rd_emit(outer, entry);
	if (!more)
		call->sc_full = true;
	return more;
}

static void pfs_sd_root_readdir_done(struct fs_req *inner)
{
	struct pfs_sd_call *call = SH_CONTAINER_OF(inner, struct pfs_sd_call, sc_inner);
	struct fs_req *outer = call->sc_outer;
	bool (*emit)(struct fs_req *, const struct fs_dirent *) = outer->u.readdir.rd_emit;
	uint64_t cookie = outer->u.readdir.rd_cookie;
	outer->u.readdir = inner->u.readdir;
	outer->u.readdir.rd_emit = emit;
	outer->u.readdir.rd_cookie = cookie;
	/* an empty root: .zfs is the last entry */
	if (inner->fr_status == 0 && inner->u.readdir.rd_eof && !call->sc_zfs_emitted &&
	    !call->sc_full && !pfs_sd_emit_zfs(call))
		outer->u.readdir.rd_eof = false;
	pfs_sd_call_finish(call, inner->fr_status);
}

static void pfs_sd_root_readdir(struct pfs_snapdir *sd, struct pfs_sd_call *call)
{
	struct fs_req *inner = &call->sc_inner;
	uint64_t cookie = call->sc_outer->u.readdir.rd_cookie;
	if (call->sc_outer->u.readdir.rd_plus && cookie < PFS_SD_COOKIE_ZFS) {
		/* .zfs's attributes, while no lock is held (the listing runs under the pool's) */
		struct pfs_sd_list *l;
		int rc = pfs_sd_list_get(sd, &l);
		if (rc != 0) {
			pfs_sd_call_finish(call, rc);
			return;
		}
		pfs_sd_ctl_attr(sd, PFS_SD_KIND_ZFS, l->sl_ents, l->sl_n, &call->sc_ctl_attr);
		pfs_sd_list_put(sd, l);
	}
	if (cookie == PFS_SD_COOKIE_ZFS) {
		inner->u.readdir.rd_cookie = 2; /* after "..": the names */
		call->sc_zfs_emitted = true;
	} else if (cookie > PFS_SD_COOKIE_ZFS) {
		call->sc_zfs_emitted = true; /* past it */
	}
	inner->u.readdir.rd_emit = pfs_sd_root_emit;
	pfs_sd_call_start(call, sd->sd_head, true, pfs_sd_root_readdir_done);
}

/* ---------------------------------------------------------------------------------------------
 * Requests */

static void pfs_sd_forward(struct pfs_snapdir *sd, struct pfs_sd_call *call,
                           struct pfs_snap_ent *e)
{
	struct fs_req *outer = call->sc_outer;
	struct fs_req *inner = &call->sc_inner;
	call->sc_ent = e; /* sd_forwarded was counted with its busy count, under sd_lock */
	if (outer->fr_op == FS_OP_LOOKUP && strcmp(outer->u.lookup.lk_name, "..") == 0 &&
	    pfs_sd_id_eq(&inner->fr_obj, &e->se_root)) {
		/* up from a snapshot's root: .zfs/snapshot, answered by the worker */
		pfs_sd_ent_put(sd, e);
		call->sc_ent = NULL;
		call->sc_kind = PFS_SD_CTL;
		call->sc_ctl_kind = PFS_SD_KIND_SNAPDIR;
		call->sc_ctl_self = true;
		pfs_sd_queue(sd, call);
		return;
	}
	if (outer->fr_op == FS_OP_READDIR)
		inner->u.readdir.rd_emit = pfs_sd_forward_emit;
	pfs_sd_call_start(call, e->se_fs, false, pfs_sd_snap_done);
}

static void *pfs_sd_worker_main(void *arg)
{
	struct pfs_snapdir *sd = arg;
	pthread_mutex_lock(&sd->sd_lock);
	for (;;) {
		while (!sd->sd_queue && !sd->sd_stopping)
			pthread_cond_wait(&sd->sd_cv, &sd->sd_lock);
		struct pfs_sd_call *call = sd->sd_queue;
		if (!call)
			break; /* stopping, and nothing left */
		sd->sd_queue = call->sc_next;
		if (!sd->sd_queue)
			sd->sd_queue_tail = NULL;
		pthread_mutex_unlock(&sd->sd_lock);
		if (call->sc_kind == PFS_SD_CTL) {
			pfs_sd_ctl_run(sd, call, call->sc_ctl_kind);
		} else {
			struct pfs_snap_ent *e;
			int rc = pfs_sd_ent_get(sd, call->sc_txg, &e);
			if (rc != 0)
				pfs_sd_call_finish(call, rc);
			else
				pfs_sd_forward(sd, call, e);
		}
		pthread_mutex_lock(&sd->sd_lock);
	}
	pthread_mutex_unlock(&sd->sd_lock);
	return NULL;
}

void pfs_snapdir_submit(struct pfs_snapdir *sd, struct fs_req *req)
{
	enum fs_op op = req->fr_op;
	unsigned kind = pfs_sd_ctl_kind(&req->fr_obj);
	struct fs_obj_id zpl_id;
	uint64_t txg = 0;
	bool snap = pfs_sd_snap_split(&req->fr_obj, &zpl_id, &txg);
	if (req->fr_obj.foi_len == ZPL_OBJ_ID_BYTES) {
		if (op == FS_OP_LOOKUP) {
			kind = PFS_SD_KIND_ZFS; /* .zfs in the root: as "." of .zfs */
		} else if (op == FS_OP_READDIR) {
			kind = 0; /* the root's listing, .zfs in it */
		} else {
			/* a change that names .zfs in the root, or a directory of another fs */
			bool named = op == FS_OP_CREATE || op == FS_OP_MKDIR || op == FS_OP_SYMLINK ||
			             op == FS_OP_MKNOD ||
			             (op == FS_OP_RENAME &&
			              req->u.rename.rn_to_dir.foi_len == ZPL_OBJ_ID_BYTES) ||
			             (op == FS_OP_LINK && req->u.link.ln_dir.foi_len == ZPL_OBJ_ID_BYTES);
			req->fr_status = named ? -EEXIST : -EXDEV;
			fs_req_complete(req);
			return;
		}
	} else if (kind == 0 && !snap) {
		req->fr_status = -SH_EBADHANDLE;
		fs_req_complete(req);
		return;
	}
	if (fs_op_changes(op) || op == FS_OP_COMMIT) {
		req->fr_status = -EROFS; /* snapshots and .zfs never change */
		fs_req_complete(req);
		return;
	}
	struct pfs_sd_call *call = mem_zalloc(sizeof(*call));
	if (!call) {
		req->fr_status = -ENOMEM;
		fs_req_complete(req);
		return;
	}
	call->sc_outer = req;
	call->sc_sd = sd;
	call->sc_inner = *req;
	if (req->fr_obj.foi_len == ZPL_OBJ_ID_BYTES && op == FS_OP_READDIR) {
		call->sc_kind = PFS_SD_ROOT_READDIR;
		pfs_sd_root_readdir(sd, call);
		return;
	}
	if (!snap) {
		call->sc_kind = PFS_SD_CTL;
		call->sc_ctl_kind = kind;
		/* LOOKUP(root, ".zfs") is answered as .zfs itself */
		call->sc_ctl_self = req->fr_obj.foi_len == ZPL_OBJ_ID_BYTES;
		pfs_sd_queue(sd, call);
		return;
	}
	call->sc_kind = PFS_SD_SNAP;
	call->sc_txg = txg;
	call->sc_inner.fr_obj = zpl_id;
	pthread_mutex_lock(&sd->sd_lock);
	struct pfs_snap_ent *e = pfs_sd_find_locked(sd, txg);
	if (e && !e->se_dead) {
		e->se_busy++;
		e->se_used = ++sd->sd_clock;
		sd->sd_forwarded++;
		pthread_mutex_unlock(&sd->sd_lock);
		pfs_sd_forward(sd, call, e);
		return;
	}
	pthread_mutex_unlock(&sd->sd_lock);
	pfs_sd_queue(sd, call); /* opened by the worker first */
}

/* ---------------------------------------------------------------------------------------------
 * Life */

int pfs_snapdir_create(struct pool *p, struct pool_ds *ds, struct fs *head,
                       const struct fs_obj_id *root, pfs_head_run_fn head_run,
                       struct pfs_snapdir **out)
{
	*out = NULL;
	struct pfs_snapdir *sd = mem_zalloc(sizeof(*sd));
	if (!sd)
		return -ENOMEM;
	sd->sd_pool = p;
	sd->sd_ds = ds;
	sd->sd_head = head;
	sd->sd_head_run = head_run;
	sd->sd_root = *root;
	sd->sd_fsid = head->fs_fsid;
	sd->sd_head_id = pool_ds_id(ds);
	VERIFY(pthread_mutex_init(&sd->sd_lock, NULL) == 0);
	pthread_condattr_t ca;
	VERIFY(pthread_condattr_init(&ca) == 0);
	VERIFY(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0); /* pfs_sd_release's deadline */
	VERIFY(pthread_cond_init(&sd->sd_cv, &ca) == 0);
	pthread_condattr_destroy(&ca);
	int rc = -pthread_create(&sd->sd_worker, NULL, pfs_sd_worker_main, sd);
	if (rc != 0) {
		pthread_cond_destroy(&sd->sd_cv);
		pthread_mutex_destroy(&sd->sd_lock);
		mem_free(sd);
		return rc;
	}
	sd->sd_user.su_head_id = sd->sd_head_id;
	sd->sd_user.su_release = pfs_sd_release;
	sd->sd_user.su_arg = sd;
	pool_snap_user_add(p, &sd->sd_user);
	*out = sd;
	return 0;
}

void pfs_snapdir_destroy(struct pfs_snapdir *sd)
{
	if (!sd)
		return;
	pool_snap_user_remove(sd->sd_pool, &sd->sd_user); /* waits for a release in progress */
	pthread_mutex_lock(&sd->sd_lock);
	sd->sd_stopping = true;
	pthread_cond_broadcast(&sd->sd_cv);
	pthread_mutex_unlock(&sd->sd_lock);
	pthread_join(sd->sd_worker, NULL);
	VERIFY(sd->sd_queue == NULL);
	while (sd->sd_ents) {
		struct pfs_snap_ent *e = sd->sd_ents;
		VERIFY(e->se_busy == 0);
		sd->sd_ents = e->se_next;
		pfs_sd_ent_close(e);
	}
	/* every request ended: the cache holds the last reference */
	VERIFY(!sd->sd_list || sd->sd_list->sl_refs == 1);
	pfs_sd_list_free(sd->sd_list);
	pthread_cond_destroy(&sd->sd_cv);
	pthread_mutex_destroy(&sd->sd_lock);
	mem_free(sd);
}

void pfs_snapdir_stats(struct pfs_snapdir *sd, struct pfs_snapdir_stats *out)
{
	pthread_mutex_lock(&sd->sd_lock);
	out->ss_open = sd->sd_nents;
	out->ss_opens = sd->sd_opens;
	out->ss_closes = sd->sd_closes;
	out->ss_forwarded = sd->sd_forwarded;
	pthread_mutex_unlock(&sd->sd_lock);
}
