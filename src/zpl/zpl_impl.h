/* zpl_impl.h: what the zpl's own files share: record layouts in memory, key builders, the
 * per-operation plan (struct zpl_op) and the dirty buffer table. The formats on disk and the rules
 * are described at the top of zpl.c. */
#ifndef SHALE_ZPL_IMPL_H
#define SHALE_ZPL_IMPL_H

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "zpl/zpl.h"

/* ---- key kinds (byte 8 of every key) ---- */
#define ZPL_KIND_META 0x00
#define ZPL_KIND_INODE 0x01
#define ZPL_KIND_DIRENT 0x02
#define ZPL_KIND_EXTENT 0x03
#define ZPL_KIND_UNLINKED 0x04 /* under object id 0: the queue of removed files still to free */
#define ZPL_SHORT_KEY 9u /* meta and inode keys */
#define ZPL_LONG_KEY 17u /* dirent and extent keys */

/* ---- record sizes ---- */
#define ZPL_META_BYTES 64u
#define ZPL_INODE_FIXED_BYTES 128u
#define ZPL_DIRENT_FIXED_BYTES 10u
#define ZPL_FORMAT_VERSION 1u

#define ZPL_FIRST_OBJID 2u      /* ids below are never issued (1 is reserved) */
#define ZPL_PAGE_BYTES 4096u    /* growth unit of a single-block file */
#define ZPL_HASH_INDEX_BITS 16u /* low bits of a dirent hash: the collision index */
#define ZPL_HASH_INDEX_MASK 0xffffull
#define ZPL_HASH_BASE_MASK 0x7fffffffffff0000ull /* top bit clear: cookies are < 2^63 */
#define ZPL_DIRENT_NOMINAL_BYTES 32u /* a directory's reported size per entry (see zpl.c) */
#define ZPL_MAX_FILE_BYTES ((uint64_t)INT64_MAX)

/* Inode flags. */
#define ZPL_IF_VERF 0x01  /* ino_verf holds an EXCLUSIVE create verifier */
#define ZPL_IF_FIXED 0x02 /* the block size is final (the file grew past one block) */
#define ZPL_IF_UNLINKED 0x04 /* removed, nlink 0, its blocks being freed (zpl_reap.c) */
#define ZPL_IF_ALL (ZPL_IF_VERF | ZPL_IF_FIXED | ZPL_IF_UNLINKED)


struct zpl_meta {
	uint64_t me_next_objid;
	uint64_t me_root_objid;
	uint64_t me_root_gen;
	uint64_t me_nobjects;
	uint64_t me_next_gen;
	uint64_t me_salt;
};

struct zpl_inode {
	uint8_t ino_type; /* enum fs_type */
	uint8_t ino_flags;
	uint16_t ino_link_len; /* symlinks: target bytes */
	uint32_t ino_mode;     /* 07777 bits */
	uint32_t ino_nlink;
	uint32_t ino_uid, ino_gid;
	uint32_t ino_rdev_major, ino_rdev_minor;
	uint32_t ino_blksz; /* regular files: block size; long symlinks: block 0's size */
	uint64_t ino_size;
	struct fs_time ino_atime, ino_mtime, ino_ctime, ino_btime;
	uint64_t ino_gen;
	uint64_t ino_parent;   /* directories: the directory holding their entry (root: itself) */
	uint64_t ino_nentries; /* directories: entries, "." and ".." not counted */
	uint64_t ino_nblocks;  /* extents present (including those awaiting zpl_sync) */
	uint8_t ino_verf[8];
	char ino_link[ZPL_SYMLINK_INLINE_MAX]; /* inline target when ino_link_len <= the max */
};

/* ---- little- and big-endian helpers ---- */
static inline void zpl_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void zpl_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void zpl_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t zpl_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t zpl_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static inline uint64_t zpl_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static inline void zpl_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static inline uint64_t zpl_get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* ---- keys ---- */
static inline void zpl_key_meta(uint8_t k[ZPL_SHORT_KEY])
{
	memset(k, 0, ZPL_SHORT_KEY);
}
static inline void zpl_key_inode(uint8_t k[ZPL_SHORT_KEY], uint64_t objid)
{
	zpl_put_be64(k, objid);
	k[8] = ZPL_KIND_INODE;
}
static inline void zpl_key_long(uint8_t k[ZPL_LONG_KEY], uint64_t objid, uint8_t kind, uint64_t x)
{
	zpl_put_be64(k, objid);
	k[8] = kind;
	zpl_put_be64(k + 9, x);
}

/* ---- dirty data buffers ----
 * One per (object, block) written since the last zpl_sync. The table holds one reference; each
 * READ that hands out a pointer into db_data holds another (released from any thread, hence the
 * atomic count). A buffer is modified in place only while the table's is the only reference. */
struct zpl_dbuf {
	uint64_t db_obj;
	uint64_t db_blk;
	uint32_t db_size; /* bytes of db_data: the file's block size when made */
	atomic_uint db_refs;
	struct zpl_dbuf *db_hnext; /* hash chain by (obj, blk) */
	struct zpl_dbuf *db_onext; /* the object's list */
	struct zpl_dbuf *db_oprev;
	/* Owned, db_size bytes, allocated apart from this header: a data buffer then has exactly
	 * the size of the cached blocks' buffers, so the heap reuses the one's space for the other
	 * (a header in front of it made sizes no cached block has, and freed dirty data left holes
	 * the ARC could not fill). */
	uint8_t *db_data;
	/* Block adoption (zpl_adopt): while db_adoptable, db_adopt is a written block holding
	 * exactly db_data; cleared by any change of the buffer. */
	bool db_adoptable;
	struct blk_ptr db_adopt;
	/* Sealing (zpl_seal_pick): the caller's block prepared from exactly db_data, or NULL.
	 * Dropped (ze_drop_seal) by any change of the buffer and when it leaves the table. */
	void *db_seal;
};

/* The object's list head, in a second hash by object id. */
struct zpl_dobj {
	uint64_t do_obj;
	struct zpl_dbuf *do_head;
	struct zpl_dobj *do_hnext;
};

struct zpl_dtab {
	struct zpl_dbuf **dt_buckets;
	uint32_t dt_nbuckets; /* power of two */
	uint64_t dt_count;
	struct zpl_dobj **dt_obuckets;
	uint32_t dt_nobuckets;
	uint64_t dt_ocount;
	uint64_t dt_bytes; /* sum of db_size */
	/* The env's ze_drop_seal and ze_ctx, for buffers that leave with a seal (NULL: none). */
	void (*dt_drop_seal)(void *ctx, void *sealed);
	void *dt_seal_ctx;
};

/* ---- the inode cache (zpl.c) ----
 * Committed inode records by object id, so that an operation's first step (zpl_op_obj) does not
 * walk the tree. Two-way set associative, ic_nsets sets (ze_icache_entries / 2), allocated at the
 * first insert; records longer than ZPL_ICACHE_REC_MAX (inline symlink targets over 52 bytes) are
 * not cached. Invariant: an entry holds exactly the record the tree holds under that inode key
 * (zpl_op_commit updates or drops the entry of every inode it puts or deletes; nothing else
 * changes inode records). */
#define ZPL_ICACHE_WAYS 2u
#define ZPL_ICACHE_REC_MAX (ZPL_INODE_FIXED_BYTES + 52u)
struct zpl_icache_ent {
	uint64_t ie_objid; /* 0: empty (object ids start at ZPL_FIRST_OBJID) */
	uint32_t ie_len;
	uint8_t ie_rec[ZPL_ICACHE_REC_MAX];
};
_Static_assert(sizeof(struct zpl_icache_ent) == ZPL_ICACHE_ENTRY_BYTES, "zpl.h's entry size");
struct zpl_icache {
	struct zpl_icache_ent *ic_ents; /* ic_nsets * ZPL_ICACHE_WAYS, or NULL */
	uint8_t *ic_last_used;          /* per set: the way used last (the other is replaced) */
	uint32_t ic_nsets;              /* a power of two: 2^ic_set_bits */
	unsigned ic_set_bits;           /* sets are picked by sh_hash_fib(objid, ic_set_bits) */
	uint64_t ic_hits, ic_misses;
};

/* ---- the per-operation plan ---- */

/* An inode an operation works on: loaded once, changed in memory, written at commit. */
struct zpl_oino {
	uint64_t oi_objid;
	bool oi_dirty;   /* put at commit */
	bool oi_created; /* new: put with BTREE_PUT_NEW */
	bool oi_deleted; /* deleted at commit (with its extents, planned separately) */
	struct zpl_inode oi_ino;
};
#define ZPL_OP_INODES 8u

enum zpl_mut_kind {
	ZPL_MUT_PUT = 1,
	ZPL_MUT_DEL = 2,
	ZPL_MUT_DEL_FREE = 3, /* delete an extent, then ze_free_block the pointer in mu_val */
};

struct zpl_mut {
	uint8_t mu_key[ZPL_KEY_MAX];
	uint8_t mu_klen;
	uint8_t mu_kind; /* enum zpl_mut_kind */
	uint8_t mu_mode; /* enum btree_put_mode */
	uint32_t mu_vlen;
	uint8_t mu_val[ZPL_LONG_KEY + ZPL_DIRENT_FIXED_BYTES + FS_NAME_MAX]; /* dirents, extents */
};

enum zpl_dchg_kind {
	ZPL_DCHG_INSTALL =
	    1, /* put dc_fresh in the table (replacing any buffer there), then edit it */
	ZPL_DCHG_MODIFY = 2, /* edit dc_existing in place (the table holds its only reference) */
	ZPL_DCHG_DROP = 3,   /* drop the object's buffers with dc_blk <= block <= dc_blk_last */
};

/* One planned change of dirty data, applied at commit (where nothing can fail). The edit is a
 * copy of dc_len bytes from dc_src to offset dc_off, then zeroing from dc_zero_from to the end
 * when dc_zero. */
struct zpl_dchg {
	uint8_t dc_kind;
	uint64_t dc_obj;
	uint64_t dc_blk;
	uint64_t dc_blk_last; /* ZPL_DCHG_DROP only */
	struct zpl_dbuf *dc_existing;
	struct zpl_dbuf *dc_fresh; /* owned by the plan until installed */
	struct zpl_dobj *dc_dobj; /* a list head allocated in advance for the object, in case it has
	                           * none when dc_fresh is installed (freed if unused) */
	const uint8_t *dc_src;
	uint32_t dc_off, dc_len;
	bool dc_zero;
	uint32_t dc_zero_from;
};

struct zpl_op {
	struct zpl *op_z;
	const struct fs_cred *op_cred;
	struct fs_time op_now;
	bool op_replay; /* zpl_replay: no permission checks */
	bool op_forced; /* replay of a create: the object id and generation are given */
	uint64_t op_forced_objid, op_forced_gen;
	struct blk_ptr *op_missing; /* where -SH_ENEEDBLOCK names its block (may be NULL) */
	struct zpl_meta op_meta;    /* the meta record as this operation leaves it */
	bool op_meta_dirty;
	bool op_queued; /* the plan queues a file for zpl_reap */
	struct zpl_oino op_inos[ZPL_OP_INODES];
	uint32_t op_ninos;
	struct zpl_mut *op_muts; /* z's reusable array */
	uint32_t op_nmuts;
	struct zpl_dchg *op_dchg; /* z's reusable array */
	uint32_t op_ndchg;
};

struct zpl {
	struct btree *z_tree;
	struct zpl_env z_env;
	uint32_t z_record_bytes;
	struct zpl_meta z_meta; /* as committed in the (in-memory) tree */
	int z_failed;           /* non-zero: a commit failed half-way; everything is -EIO */
	uint64_t (*z_hash)(const void *name, size_t len, uint64_t salt);
	struct zpl_dtab z_dtab;
	struct zpl_op z_op; /* the running operation's plan (one at a time) */
	struct zpl_mut *z_muts;
	uint32_t z_cap_muts;
	struct zpl_dchg *z_dchg;
	uint32_t z_cap_dchg;
	void *z_scratch; /* READDIR batch */
	struct zpl_icache z_icache;
	uint64_t z_reap_queued; /* files queued for zpl_reap since zpl_open */
	uint64_t z_reap_files;  /* files zpl_reap deleted since zpl_open */
	uint64_t z_reap_extents; /* extents zpl_reap freed since zpl_open */
};

/* ---- zpl.c: codecs ---- */
void zpl_meta_encode(const struct zpl_meta *me, uint8_t out[ZPL_META_BYTES]);
SH_MUST_CHECK int zpl_meta_decode(const uint8_t *in, uint32_t len, struct zpl_meta *me);
/* Encodes ino into out (ZPL_VAL_MAX bytes); returns the record's length. */
uint32_t zpl_inode_encode(const struct zpl_inode *ino, uint8_t *out);
SH_MUST_CHECK int zpl_inode_decode(const uint8_t *in, uint32_t len, struct zpl_inode *ino);
void zpl_objid_encode(uint64_t objid, uint64_t gen, struct fs_obj_id *id);
void zpl_attr_from_inode(const struct zpl *z, uint64_t objid, const struct zpl_inode *ino,
                         struct fs_attr *attr);
void zpl_wcc_pre(const struct zpl_inode *ino, struct fs_wcc *wcc);
void zpl_wcc_post(const struct zpl *z, const struct zpl_oino *oi, struct fs_wcc *wcc);
uint64_t zpl_name_hash(const struct zpl *z, const char *name, size_t len);

/* Marks the zpl failed after a change stopped half-way (logged once); every later call is -EIO. */
void zpl_fail(struct zpl *z, int rc, const char *what);

/* ---- zpl.c: the plan ---- */
void zpl_op_begin(struct zpl *z, struct zpl_op *op, const struct fs_cred *cred,
                  struct blk_ptr *missing);
/* Releases what an unfinished plan holds (fresh buffers). */
void zpl_op_abort(struct zpl_op *op);
/* Looks up key: 0 with the value copied (val_cap bytes available, *vlen set), -ENOENT,
 * -SH_ENEEDBLOCK (op->op_missing filled), -EIO (also for a value longer than val_cap). */
SH_MUST_CHECK int zpl_op_lookup(struct zpl_op *op, const uint8_t *key, uint32_t klen, void *val,
                                uint32_t val_cap, uint32_t *vlen);
/* The inode objid, loaded into the operation's table once: 0, -ENOENT, -EIO, -SH_ENEEDBLOCK. */
SH_MUST_CHECK int zpl_op_inode(struct zpl_op *op, uint64_t objid, struct zpl_oino **out);
/* The committed inode objid (from the inode cache, else the tree, then cached) decoded into *out,
 * outside the operation's table: 0, -ENOENT, -EIO, -SH_ENEEDBLOCK. */
SH_MUST_CHECK int zpl_op_read_inode(struct zpl_op *op, uint64_t objid, struct zpl_inode *out);
/* Starts loading objid's set of the inode cache into the CPU's cache, for a caller that will
 * read several inodes in turn (READDIRPLUS): each first touch of a set misses the CPU's cache,
 * and misses started together overlap. */
void zpl_icache_prefetch(const struct zpl *z, uint64_t objid);
/* The inode an object id names: 0; -SH_EBADHANDLE (malformed or never issued); -ESTALE (removed,
 * queued for zpl_reap, or another generation); -EIO; -SH_ENEEDBLOCK. */
SH_MUST_CHECK int zpl_op_obj(struct zpl_op *op, const struct fs_obj_id *id, struct zpl_oino **out);
/* A tree call's failure as an operation returns it: -SH_ENEEDBLOCK (naming *missing in
 * op_missing), -ENOMEM, or -EIO for anything else (a malformed tree). */
SH_MUST_CHECK int zpl_op_tree_error(struct zpl_op *op, int rc, const struct blk_ptr *missing);
/* Plans deleting oi's inode at commit (its extents are planned separately) and counts it out of
 * the meta record. */
SH_MUST_CHECK int zpl_op_delete_inode(struct zpl_op *op, struct zpl_oino *oi);
/* A new inode of type (id and generation from the counters, or the forced ones in replay), with
 * the operation's time in all four times. -ENOMEM when the table is full (never in practice),
 * -EIO for a forced id the counters contradict. */
SH_MUST_CHECK int zpl_op_new_inode(struct zpl_op *op, uint8_t type, struct zpl_oino **out);
/* Plans a put (mode: enum btree_put_mode) or a delete of a dirent or extent key. */
SH_MUST_CHECK int zpl_op_put(struct zpl_op *op, const uint8_t *key, uint32_t klen, const void *val,
                             uint32_t vlen, int mode);
SH_MUST_CHECK int zpl_op_del(struct zpl_op *op, const uint8_t *key, uint32_t klen);
/* Plans the delete of an extent whose block is freed once the delete is done. */
SH_MUST_CHECK int zpl_op_del_extent(struct zpl_op *op, const uint8_t *key,
                                    const uint8_t bp[BLK_PTR_DISK_BYTES]);
SH_MUST_CHECK int zpl_op_dchg(struct zpl_op *op, struct zpl_dchg **out);
/* Preloads every key the plan touches, then applies it: 0, -SH_ENEEDBLOCK (nothing applied), or
 * -EIO after a failure half-way (the zpl is then failed). Ends the plan either way. */
SH_MUST_CHECK int zpl_op_commit(struct zpl_op *op);

/* ---- zpl_dir.c ---- */
struct zpl_dirent {
	uint64_t de_child;
	uint8_t de_type;
	uint8_t de_name_len;
	char de_name[FS_NAME_MAX + 1];
};
uint32_t zpl_dirent_encode(uint64_t child, uint8_t type, const char *name, size_t len,
                           uint8_t *out);
SH_MUST_CHECK int zpl_dirent_decode(const uint8_t *in, uint32_t len, struct zpl_dirent *de);
/* Looks name up in directory dir: 0 with *de and *hash_out (the entry's key hash), -ENOENT with
 * *free_hash_out (the first free key hash for the name; -ENOSPC instead when all 2^16 are taken),
 * -EIO, -SH_ENEEDBLOCK. free_hash_out may be NULL. */
SH_MUST_CHECK int zpl_dir_find(struct zpl_op *op, uint64_t dir, const char *name, size_t len,
                               struct zpl_dirent *de, uint64_t *hash_out, uint64_t *free_hash_out);
SH_MUST_CHECK int zpl_do_readdir(struct zpl_op *op, struct fs_req *req);

/* ---- zpl_data.c ---- */
SH_MUST_CHECK int zpl_dtab_init(struct zpl_dtab *dt);
void zpl_dtab_fini(struct zpl_dtab *dt);
struct zpl_dbuf *zpl_dbuf_find(const struct zpl_dtab *dt, uint64_t obj, uint64_t blk);
void zpl_dbuf_rele(struct zpl_dbuf *db);
/* Applies a planned data change (commit). */
void zpl_dchg_apply(struct zpl *z, struct zpl_dchg *dc);
void zpl_dchg_discard(struct zpl_dchg *dc);
/* Plans writing len bytes at off (the caller checked permissions and limits) and updates the
 * inode's size and block size. */
SH_MUST_CHECK int zpl_data_write(struct zpl_op *op, struct zpl_oino *oi, uint64_t off,
                                 const uint8_t *data, uint32_t len);
/* Plans a size change (truncate down: extents and buffers dropped, the new last block's tail
 * zeroed; up: block size growth). */
SH_MUST_CHECK int zpl_data_truncate(struct zpl_op *op, struct zpl_oino *oi, uint64_t new_size);
/* A truncation of regular file oi to new_size that drops more than ZPL_REAP_STEP_EXTENTS
 * extents is made in steps: this plans the first ZPL_REAP_STEP_EXTENTS of them alone, commits
 * them (the file's size and times unchanged: the range reads as zeros, as a hole) and returns
 * -SH_EPARTIAL, after which the caller runs the whole operation again; 0 (nothing planned) when
 * the rest fits in one step, which zpl_data_truncate then plans with the rest of the change;
 * -SH_ENEEDBLOCK; -EIO; -ENOMEM. Call it first in an operation's plan, after its checks. */
SH_MUST_CHECK int zpl_data_truncate_step(struct zpl_op *op, struct zpl_oino *oi,
                                         uint64_t new_size);
/* Plans dropping every extent and buffer of a removed object. */
SH_MUST_CHECK int zpl_data_remove(struct zpl_op *op, struct zpl_oino *oi);
/* Plans dropping the first max_extents (> 0) extents of regular file oi and their buffers;
 * *more_out: extents are left after them. */
SH_MUST_CHECK int zpl_data_drop_some(struct zpl_op *op, struct zpl_oino *oi, uint64_t max_extents,
                                     bool *more_out);
/* READ into req (permissions checked by the caller). */
SH_MUST_CHECK int zpl_data_read(struct zpl_op *op, struct zpl_oino *oi, struct fs_req *req);
/* Copies bytes [off, off + len) of regular file oi, as a READ would see them (dirty buffers
 * first, then block images; holes as zeros), into out. The caller keeps the range inside the
 * file's size. 0, -SH_ENEEDBLOCK (a block image not in memory), -EIO, or the store's error. */
SH_MUST_CHECK int zpl_data_read_range(struct zpl_op *op, const struct zpl_oino *oi, uint64_t off,
                                      uint32_t len, uint8_t *out);
/* A long symlink's target: copies ino_link_len bytes into out. */
SH_MUST_CHECK int zpl_data_read_link(struct zpl_op *op, struct zpl_oino *oi, char *out);
/* Plans block 0 of a new long symlink. */
SH_MUST_CHECK int zpl_data_new_link(struct zpl_op *op, struct zpl_oino *oi, const char *target,
                                    uint32_t len);

/* ---- zpl_reap.c ---- */
/* Plans queueing regular file oi, whose last link goes, for zpl_reap: unlinked, nlink 0, and
 * named by its queue entry. */
SH_MUST_CHECK int zpl_reap_queue(struct zpl_op *op, struct zpl_oino *oi);

/* ---- zpl_ops.c ---- */
#define ZPL_R 4u
#define ZPL_W 2u
#define ZPL_X 1u
/* POSIX access check of want (ZPL_R/W/X bits) to ino for op's credential: 0 or -EACCES (always
 * 0 in replay). owner_override: the owner may read and write whatever the mode (as knfsd does for
 * READ, WRITE and truncation, so a file created read-only can still be filled); read_if_exec: a
 * file that may be executed may be read (the client does the execute check). */
SH_MUST_CHECK int zpl_perm(const struct zpl_op *op, const struct zpl_inode *ino, uint32_t want,
                           bool owner_override, bool read_if_exec);
/* Runs req as op (shared by zpl_execute and zpl_replay): 0 or the operation's error, or
 * -SH_ENEEDBLOCK. */
SH_MUST_CHECK int zpl_run(struct zpl_op *op, struct fs_req *req);

#endif
