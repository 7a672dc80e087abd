/* zpl_check.c: the offline check of a dataset: the tree (btree_check), then every record against
 * the rules R1-R7 and R9 of zpl.c (R9: the queue of zpl_reap.c), by one ordered scan that loads
 * what it lacks, and a pass over what the scan collected. Memory is proportional to the objects
 * and entries (about 100 bytes per object and 24 per entry), so it suits the offline checker and
 * tests, not a running server. */
#include <stdio.h>

#include "zpl/zpl_impl.h"

struct ck_ino {
	uint64_t ci_objid; /* 0: empty slot */
	uint64_t ci_gen;
	uint64_t ci_parent;
	uint64_t ci_nentries;
	uint64_t ci_nblocks;
	uint64_t ci_size;
	uint32_t ci_nlink;
	uint32_t ci_blksz;
	uint8_t ci_type;
	uint8_t ci_flags;
	uint16_t ci_link_len;
	/* counted */
	uint64_t ci_refs;     /* dirents naming it */
	uint64_t ci_named_by; /* the directory of (one of) those dirents */
	uint64_t ci_entries;  /* directories: their dirents */
	uint64_t ci_subdirs;  /* directories: their dirents naming directories */
	uint64_t ci_extents;
	bool ci_queued;       /* a queue entry names it */
};

struct ck_queued {
	uint64_t cq_objid;
	uint64_t cq_gen;
};

struct ck_dirent {
	uint64_t cd_dir;
	uint64_t cd_child;
	uint8_t cd_type;
};

struct ck_state {
	struct zpl *cs_z;
	struct ck_ino *cs_inos; /* open addressing by object id */
	uint64_t cs_cap;
	uint64_t cs_ninos;
	struct ck_dirent *cs_des;
	uint64_t cs_nde, cs_capde;
	struct ck_queued *cs_queue; /* unlinked files' queue entries, in key order */
	uint64_t cs_nqueue, cs_capqueue;
	bool cs_have_meta;
	struct zpl_meta cs_meta;
	uint8_t cs_last[ZPL_KEY_MAX]; /* the last key visited, where a scan resumes */
	uint32_t cs_last_len;
	bool cs_any;
	int cs_err;
	char *cs_report;
	size_t cs_report_bytes;
};

static void ck_fail(struct ck_state *cs, const char *fmt, ...) SH_PRINTF(2, 3);
static void ck_fail(struct ck_state *cs, const char *fmt, ...)
{
	if (cs->cs_err != 0)
		return;
	cs->cs_err = -EIO;
	if (cs->cs_report != NULL && cs->cs_report_bytes > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(cs->cs_report, cs->cs_report_bytes, fmt, ap);
		va_end(ap);
	}
}

static uint64_t ck_slot(uint64_t objid, uint64_t cap)
{
	uint64_t x = objid * 0x9e3779b97f4a7c15ull;
	return (x ^ (x >> 29)) & (cap - 1);
}

static struct ck_ino *ck_find(const struct ck_state *cs, uint64_t objid)
{
	if (cs->cs_cap == 0)
		return NULL;
	for (uint64_t i = ck_slot(objid, cs->cs_cap);; i = (i + 1) & (cs->cs_cap - 1)) {
		if (cs->cs_inos[i].ci_objid == objid)
			return &cs->cs_inos[i];
		if (cs->cs_inos[i].ci_objid == 0)
			return NULL;
	}
}

static struct ck_ino *ck_add(struct ck_state *cs, uint64_t objid)
{
	if ((cs->cs_ninos + 1) * 2 > cs->cs_cap) {
		uint64_t cap = cs->cs_cap != 0 ? cs->cs_cap * 2 : 1024;
		struct ck_ino *n = mem_zalloc(sizeof(*n) * cap);
		if (n == NULL)
			return NULL;
		for (uint64_t i = 0; i < cs->cs_cap; i++) {
			if (cs->cs_inos[i].ci_objid == 0)
				continue;
			uint64_t j = ck_slot(cs->cs_inos[i].ci_objid, cap);
			while (n[j].ci_objid != 0)
				j = (j + 1) & (cap - 1);
			n[j] = cs->cs_inos[i];
		}
		mem_free(cs->cs_inos);
		cs->cs_inos = n;
		cs->cs_cap = cap;
	}
	uint64_t j = ck_slot(objid, cs->cs_cap);
	while (cs->cs_inos[j].ci_objid != 0)
		j = (j + 1) & (cs->cs_cap - 1);
	cs->cs_inos[j].ci_objid = objid;
	cs->cs_ninos++;
	return &cs->cs_inos[j];
}

static void ck_inode(struct ck_state *cs, uint64_t objid, const uint8_t *val, uint32_t vlen)
{
	struct zpl_inode ino;
	if (zpl_inode_decode(val, vlen, &ino) != 0) {
		ck_fail(cs, "R2: object %llu: malformed inode record", (unsigned long long)objid);
		return;
	}
	if (objid < ZPL_FIRST_OBJID || objid >= cs->cs_meta.me_next_objid ||
	    ino.ino_gen >= cs->cs_meta.me_next_gen) {
		ck_fail(cs, "R1: object %llu (generation %llu) is not below the counters",
		        (unsigned long long)objid, (unsigned long long)ino.ino_gen);
		return;
	}
	struct ck_ino *ci = ck_add(cs, objid);
	if (ci == NULL) {
		cs->cs_err = -ENOMEM;
		return;
	}
	ci->ci_gen = ino.ino_gen;
	ci->ci_parent = ino.ino_parent;
	ci->ci_nentries = ino.ino_nentries;
	ci->ci_nblocks = ino.ino_nblocks;
	ci->ci_size = ino.ino_size;
	ci->ci_nlink = ino.ino_nlink;
	ci->ci_blksz = ino.ino_blksz;
	ci->ci_type = ino.ino_type;
	ci->ci_flags = ino.ino_flags;
	ci->ci_link_len = ino.ino_link_len;
}

static void ck_dirent(struct ck_state *cs, uint64_t dir, uint64_t hash, const uint8_t *val,
                      uint32_t vlen)
{
	struct zpl_dirent de;
	if (zpl_dirent_decode(val, vlen, &de) != 0) {
		ck_fail(cs, "R2: directory %llu: malformed dirent at hash %#llx",
		        (unsigned long long)dir, (unsigned long long)hash);
		return;
	}
	if ((hash & ~ZPL_HASH_INDEX_MASK) != zpl_name_hash(cs->cs_z, de.de_name, de.de_name_len)) {
		ck_fail(cs, "R2: directory %llu: entry \"%s\" is not at its name's hash",
		        (unsigned long long)dir, de.de_name);
		return;
	}
	if (cs->cs_nde == cs->cs_capde) {
		uint64_t cap = cs->cs_capde != 0 ? cs->cs_capde * 2 : 1024;
		struct ck_dirent *n = mem_realloc(cs->cs_des, sizeof(*n) * cap);
		if (n == NULL) {
			cs->cs_err = -ENOMEM;
			return;
		}
		cs->cs_des = n;
		cs->cs_capde = cap;
	}
	cs->cs_des[cs->cs_nde++] = (struct ck_dirent){dir, de.de_child, de.de_type};
}

static void ck_extent(struct ck_state *cs, uint64_t objid, uint64_t blk, const uint8_t *val,
                      uint32_t vlen)
{
	struct ck_ino *ci = ck_find(cs, objid);
	struct blk_ptr bp;
	if (ci == NULL) {
		ck_fail(cs, "R5: extent %llu of object %llu, which has no inode",
		        (unsigned long long)blk, (unsigned long long)objid);
		return;
	}
	if (vlen != BLK_PTR_DISK_BYTES || blk_ptr_decode(val, &bp) != 0) {
		ck_fail(cs, "R2: object %llu: malformed extent %llu", (unsigned long long)objid,
		        (unsigned long long)blk);
		return;
	}
	bool long_link = ci->ci_type == FS_LNK && ci->ci_link_len > ZPL_SYMLINK_INLINE_MAX;
	if (ci->ci_type != FS_REG && !long_link) {
		ck_fail(cs, "R5: object %llu of type %u has extent %llu", (unsigned long long)objid,
		        ci->ci_type, (unsigned long long)blk);
		return;
	}
	uint64_t nblk =
	    ci->ci_blksz == 0 ? 0 : ci->ci_size / ci->ci_blksz + (ci->ci_size % ci->ci_blksz != 0);
	if (blk >= nblk) {
		ck_fail(cs, "R5: object %llu: extent %llu beyond its size %llu",
		        (unsigned long long)objid, (unsigned long long)blk,
		        (unsigned long long)ci->ci_size);
		return;
	}
	if ((ci->ci_flags & ZPL_IF_FIXED) == 0 && ci->ci_type == FS_REG && blk != 0) {
		ck_fail(cs, "R7: object %llu: extent %llu of a single-block file",
		        (unsigned long long)objid, (unsigned long long)blk);
		return;
	}
	if (blk_ptr_is_hole(&bp)) {
		if (zpl_dbuf_find(&cs->cs_z->z_dtab, objid, blk) == NULL) {
			ck_fail(
			    cs,
			    "R5: object %llu: extent %llu is being written but has no dirty buffer",
			    (unsigned long long)objid, (unsigned long long)blk);
			return;
		}
	} else if (bp.bp_lsize > ci->ci_blksz) {
		ck_fail(cs, "R5: object %llu: extent %llu of %u bytes in %u-byte blocks",
		        (unsigned long long)objid, (unsigned long long)blk, bp.bp_lsize,
		        ci->ci_blksz);
		return;
	}
	ci->ci_extents++;
}

static void ck_queued(struct ck_state *cs, uint64_t objid, const uint8_t *val, uint32_t vlen)
{
	if (vlen != 8) {
		ck_fail(cs, "R9: a malformed queue entry for object %llu", (unsigned long long)objid);
		return;
	}
	if (cs->cs_nqueue == cs->cs_capqueue) {
		uint64_t cap = cs->cs_capqueue != 0 ? cs->cs_capqueue * 2 : 64;
		struct ck_queued *n = mem_realloc(cs->cs_queue, sizeof(*n) * cap);
		if (n == NULL) {
			cs->cs_err = -ENOMEM;
			return;
		}
		cs->cs_queue = n;
		cs->cs_capqueue = cap;
	}
	cs->cs_queue[cs->cs_nqueue++] = (struct ck_queued){objid, zpl_get_le64(val)};
}

static bool ck_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                     uint32_t val_len)
{
	struct ck_state *cs = arg;
	const uint8_t *k = key;
	memcpy(cs->cs_last, k, SH_MIN(key_len, (uint32_t)ZPL_KEY_MAX));
	cs->cs_last_len = SH_MIN(key_len, (uint32_t)ZPL_KEY_MAX);
	cs->cs_any = true;
	if (key_len != ZPL_SHORT_KEY && key_len != ZPL_LONG_KEY) {
		ck_fail(cs, "R2: a key of %u bytes", key_len);
		return false;
	}
	uint64_t objid = zpl_get_be64(k);
	uint8_t kind = k[8];
	if (!cs->cs_have_meta) {
		uint8_t mkey[ZPL_SHORT_KEY];
		zpl_key_meta(mkey);
		if (key_len != ZPL_SHORT_KEY || memcmp(k, mkey, sizeof(mkey)) != 0 ||
		    zpl_meta_decode(val, val_len, &cs->cs_meta) != 0) {
			ck_fail(cs, "R1: the first record is not a valid meta record");
			return false;
		}
		cs->cs_have_meta = true;
		return true;
	}
	if (objid == 0 && kind == ZPL_KIND_UNLINKED && key_len == ZPL_LONG_KEY)
		ck_queued(cs, zpl_get_be64(k + 9), val, val_len);
	else if (kind == ZPL_KIND_INODE && key_len == ZPL_SHORT_KEY)
		ck_inode(cs, objid, val, val_len);
	else if (kind == ZPL_KIND_DIRENT && key_len == ZPL_LONG_KEY)
		ck_dirent(cs, objid, zpl_get_be64(k + 9), val, val_len);
	else if (kind == ZPL_KIND_EXTENT && key_len == ZPL_LONG_KEY)
		ck_extent(cs, objid, zpl_get_be64(k + 9), val, val_len);
	else
		ck_fail(cs, "R2: object %llu: a key of kind %u and %u bytes",
		        (unsigned long long)objid, kind, key_len);
	return cs->cs_err == 0;
}

/* The pass over what the scan collected: R1, R3-R7. */
static void ck_finish(struct ck_state *cs, const uint64_t *open_objids, size_t nopen)
{
	const struct zpl_meta *me = &cs->cs_meta;
	for (uint64_t i = 0; i < cs->cs_nde && cs->cs_err == 0; i++) {
		const struct ck_dirent *d = &cs->cs_des[i];
		struct ck_ino *dir = ck_find(cs, d->cd_dir), *child = ck_find(cs, d->cd_child);
		if (dir == NULL || dir->ci_type != FS_DIR) {
			ck_fail(cs, "R2: a dirent in object %llu, which is not a directory",
			        (unsigned long long)d->cd_dir);
			return;
		}
		if (child == NULL || child->ci_type != d->cd_type) {
			ck_fail(
			    cs,
			    "R2: directory %llu: a dirent names object %llu of type %u, which %s",
			    (unsigned long long)d->cd_dir, (unsigned long long)d->cd_child,
			    d->cd_type, child == NULL ? "does not exist" : "has another type");
			return;
		}
		child->ci_refs++;
		child->ci_named_by = d->cd_dir;
		dir->ci_entries++;
		if (child->ci_type == FS_DIR)
			dir->ci_subdirs++;
	}
	if (cs->cs_err != 0)
		return;
	for (uint64_t i = 0; i < cs->cs_nqueue; i++) {
		const struct ck_queued *q = &cs->cs_queue[i];
		struct ck_ino *ci = ck_find(cs, q->cq_objid);
		if (ci == NULL || (ci->ci_flags & ZPL_IF_UNLINKED) == 0 || ci->ci_gen != q->cq_gen ||
		    ci->ci_refs != 0) {
			ck_fail(cs, "R9: the queue names object %llu, which %s",
			        (unsigned long long)q->cq_objid,
			        ci == NULL                                ? "does not exist"
			        : (ci->ci_flags & ZPL_IF_UNLINKED) == 0 ? "is not unlinked"
			        : ci->ci_gen != q->cq_gen                 ? "has another generation"
			                                                  : "a dirent names");
			return;
		}
		ci->ci_queued = true;
	}
	if (cs->cs_ninos != me->me_nobjects) {
		ck_fail(cs, "R1: %llu inodes, the meta record counts %llu",
		        (unsigned long long)cs->cs_ninos, (unsigned long long)me->me_nobjects);
		return;
	}
	struct ck_ino *root = ck_find(cs, me->me_root_objid);
	if (root == NULL || root->ci_type != FS_DIR || root->ci_gen != me->me_root_gen ||
	    root->ci_parent != me->me_root_objid) {
		ck_fail(cs, "R1: the root directory is missing or wrong");
		return;
	}
	for (uint64_t i = 0; i < cs->cs_cap; i++) {
		const struct ck_ino *ci = &cs->cs_inos[i];
		if (ci->ci_objid == 0)
			continue;
		unsigned long long id = (unsigned long long)ci->ci_objid;
		bool is_root = ci->ci_objid == me->me_root_objid;
		bool open = false;
		for (size_t j = 0; j < nopen; j++)
			open = open || open_objids[j] == ci->ci_objid;
		if (ci->ci_type == FS_DIR) {
			if (ci->ci_refs != (is_root ? 0u : 1u) && !(ci->ci_refs == 0 && open)) {
				ck_fail(cs, "R3: directory %llu is named by %llu dirents", id,
				        (unsigned long long)ci->ci_refs);
				return;
			}
			if (!is_root && ci->ci_refs == 1 && ci->ci_named_by != ci->ci_parent) {
				ck_fail(cs,
				        "R3: directory %llu is in %llu but its parent says %llu",
				        id, (unsigned long long)ci->ci_named_by,
				        (unsigned long long)ci->ci_parent);
				return;
			}
			if (ci->ci_nlink != 2 + ci->ci_subdirs) {
				ck_fail(cs, "R3: directory %llu has nlink %u, expected %llu", id,
				        ci->ci_nlink, (unsigned long long)(2 + ci->ci_subdirs));
				return;
			}
			if (ci->ci_nentries != ci->ci_entries) {
				ck_fail(cs, "R4: directory %llu counts %llu entries, has %llu", id,
				        (unsigned long long)ci->ci_nentries,
				        (unsigned long long)ci->ci_entries);
				return;
			}
		} else if ((ci->ci_flags & ZPL_IF_UNLINKED) != 0) {
			if (!ci->ci_queued) {
				ck_fail(cs, "R9: object %llu is unlinked but not queued", id);
				return;
			}
		} else {
			if (ci->ci_refs == 0 && !open) {
				ck_fail(cs, "R6: object %llu is named by no dirent", id);
				return;
			}
			if (ci->ci_refs != 0 && ci->ci_nlink != ci->ci_refs) {
				ck_fail(cs, "R3: object %llu has nlink %u, named by %llu dirents",
				        id, ci->ci_nlink, (unsigned long long)ci->ci_refs);
				return;
			}
		}
		if (ci->ci_extents != ci->ci_nblocks) {
			ck_fail(cs, "R5: object %llu counts %llu blocks, has %llu extents", id,
			        (unsigned long long)ci->ci_nblocks,
			        (unsigned long long)ci->ci_extents);
			return;
		}
		if (ci->ci_type == FS_REG && (ci->ci_flags & ZPL_IF_FIXED) == 0 &&
		    ci->ci_size > ci->ci_blksz) {
			ck_fail(cs, "R7: object %llu: %llu bytes in one block of %u", id,
			        (unsigned long long)ci->ci_size, ci->ci_blksz);
			return;
		}
	}
}

int zpl_check(struct zpl *z, btree_load_fn load, void *arg, const uint64_t *open_objids,
              size_t nopen, char *report, size_t report_bytes)
{
	if (report != NULL && report_bytes > 0)
		report[0] = '\0';
	int rc = btree_check(z->z_tree, load, arg, report, report_bytes);
	if (rc != 0)
		return rc;
	struct ck_state cs;
	memset(&cs, 0, sizeof(cs));
	cs.cs_z = z;
	cs.cs_report = report;
	cs.cs_report_bytes = report_bytes;
	for (;;) {
		struct blk_ptr missing;
		rc = btree_scan(z->z_tree, cs.cs_any ? cs.cs_last : NULL,
		                cs.cs_any ? cs.cs_last_len : 0, cs.cs_any, ck_visit, &cs, &missing);
		if (rc == -SH_ENEEDBLOCK && cs.cs_err == 0) {
			if ((rc = load(arg, &missing)) != 0) {
				if (report != NULL && report_bytes > 0)
					snprintf(report, report_bytes, "loading a tree node: %s",
					         sh_strerror(rc));
				goto out;
			}
			continue;
		}
		break;
	}
	if (rc != 0) {
		if (report != NULL && report_bytes > 0 && cs.cs_err == 0)
			snprintf(report, report_bytes, "scanning the tree: %s", sh_strerror(rc));
		goto out;
	}
	if (cs.cs_err == 0 && !cs.cs_have_meta)
		ck_fail(&cs, "R1: the tree has no meta record");
	if (cs.cs_err == 0)
		ck_finish(&cs, open_objids, nopen);
	rc = cs.cs_err;
out:
	mem_free(cs.cs_inos);
	mem_free(cs.cs_des);
	mem_free(cs.cs_queue);
	return rc;
}
