/* pool_fs_impl.h: what the files of src/poolfs share about the zpl's tree entries (zpl.c's key
 * table), for the pool's owners: which entries name a block. Private to src/poolfs. */
#ifndef SHALE_POOLFS_POOL_FS_IMPL_H
#define SHALE_POOLFS_POOL_FS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"

/* What pfs_entry_block found in an entry. */
enum pfs_entry_kind {
	PFS_ENTRY_NONE = 0,  /* no block: not an extent, a hole, or an extent being written */
	PFS_ENTRY_BLOCK = 1, /* an extent naming a block: *bp_out */
};
/* Whether key is an extent's (objid(8) | kind 0x03 | index(8)). */
bool pfs_entry_is_extent(const void *key, uint32_t klen);
/* The block the entry (key, val) names, if any: PFS_ENTRY_BLOCK with *bp_out, PFS_ENTRY_NONE, or
 * -EIO for an extent whose value does not parse. */
int pfs_entry_block(const void *key, uint32_t klen, const void *val, uint32_t vlen,
                    struct blk_ptr *bp_out);

struct pool_ds;
/* Whether dataset ds's tree is a sound file system (zpl_check: its records, links, counts),
 * read through the pool's cache, the blocks missing read synchronously. ds must be idle (no
 * other owner changing it). 0, or -EIO with report saying why, -ENOMEM. */
int pfs_tree_check(struct pool_ds *ds, char *report, size_t report_bytes);

#endif
