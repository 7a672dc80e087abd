/* memfs.h: a small in-memory back end of the fs interface for the NFS service tests. It answers
 * every request synchronously (inside fs_submit) and records the last credential and exclusive
 * CREATE verifier it saw, so tests can check what the NFS layer passed down. */
#ifndef SHALE_TEST_MEMFS_H
#define SHALE_TEST_MEMFS_H

#include "fs/fs.h"

#define MEMFS_NODES 256

struct memfs_node {
	bool mn_used;
	enum fs_type mn_type;
	uint32_t mn_mode, mn_uid, mn_gid, mn_nlink;
	uint32_t mn_parent;
	char mn_name[FS_NAME_MAX + 1];
	uint8_t *mn_data;
	uint64_t mn_size;
	char mn_target[FS_PATH_MAX + 1];
	uint8_t mn_verf[8];
	uint64_t mn_ctime;
};

struct memfs {
	struct fs mf_fs;
	struct memfs_node mf_nodes[MEMFS_NODES];
	uint64_t mf_clock;
	struct fs_cred mf_last_cred;
	uint8_t mf_last_verf[8];
	enum fs_op mf_last_op;
	uint8_t mf_dir_verf[8];
};

struct memfs *memfs_create(uint64_t fsid);
/* The object id of node index i (8 bytes). */
void memfs_obj(uint32_t index, struct fs_obj_id *out);

#endif
