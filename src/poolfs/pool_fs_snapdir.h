/* pool_fs_snapdir.h: the .zfs directory of a served pool file system (pool_fs_snapdir.c), the way
 * pool_fs.c reaches it. Private to src/poolfs. */
#ifndef SHALE_POOLFS_POOL_FS_SNAPDIR_H
#define SHALE_POOLFS_POOL_FS_SNAPDIR_H

#include <stdbool.h>

#include "fs/fs.h"
#include "pool/pool.h"

struct pfs_snapdir;

/* Runs a request on the file system itself, as if the .zfs directory did not exist. */
typedef void (*pfs_head_run_fn)(struct fs *head, struct fs_req *req);

/* The .zfs directory of head, the file system of dataset ds (not a snapshot) of pool p, whose
 * root is root and whose own requests go to head_run. Starts its worker thread and registers
 * with the pool (pool_snap_user_add). 0, -ENOMEM, or a thread's error. */
SH_MUST_CHECK int pfs_snapdir_create(struct pool *p, struct pool_ds *ds, struct fs *head,
                                     const struct fs_obj_id *root, pfs_head_run_fn head_run,
                                     struct pfs_snapdir **out);
/* Once every request of head has completed and every READ buffer been released: closes the
 * snapshots it opened, stops its thread, unregisters. */
void pfs_snapdir_destroy(struct pfs_snapdir *sd);
/* Whether req is the .zfs directory's to answer (an object in it, .zfs in the root, or the
 * root's READDIR when .zfs is listed). Any thread; cheap for ordinary requests. */
bool pfs_snapdir_claims(const struct pfs_snapdir *sd, const struct fs_req *req);
/* Answers a request pfs_snapdir_claims claimed (fs_submit's contract). */
void pfs_snapdir_submit(struct pfs_snapdir *sd, struct fs_req *req);

/* Counters, for tests and status. */
struct pfs_snapdir_stats {
	unsigned ss_open;        /* snapshots open now */
	uint64_t ss_opens;       /* snapshots opened since the file system was */
	uint64_t ss_closes;      /* closed: to stay within the bound, or to be destroyed */
	uint64_t ss_forwarded;   /* requests answered by a snapshot */
};
void pfs_snapdir_stats(struct pfs_snapdir *sd, struct pfs_snapdir_stats *out);

#endif
