/* memfs.c: the in-memory test back end (see memfs.h). Node 0 is the root directory; an object id
 * is the node index as 4 bytes plus the tag "memf", so an id it did not issue is detected. */
#include "memfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t memfs_tag[4] = {'m', 'e', 'm', 'f'};

void memfs_obj(uint32_t index, struct fs_obj_id *out)
{
	memset(out, 0, sizeof(*out));
	out->foi_len = 8;
	memcpy(out->foi_bytes, &index, 4);
	memcpy(out->foi_bytes + 4, memfs_tag, 4);
}

static int memfs_node_of(struct memfs *mf, const struct fs_obj_id *id, struct memfs_node **out,
			 uint32_t *index_out)
{
	uint32_t idx;
	if (id->foi_len != 8 || memcmp(id->foi_bytes + 4, memfs_tag, 4) != 0)
		return -SH_EBADHANDLE;
	memcpy(&idx, id->foi_bytes, 4);
	if (idx >= MEMFS_NODES)
		return -SH_EBADHANDLE;
	if (!mf->mf_nodes[idx].mn_used)
		return -ESTALE;
	*out = &mf->mf_nodes[idx];
	if (index_out)
		*index_out = idx;
	return 0;
}

static void memfs_attr(struct memfs *mf, uint32_t idx, struct fs_attr *a)
{
	const struct memfs_node *n = &mf->mf_nodes[idx];
	memset(a, 0, sizeof(*a));
	a->fa_type = n->mn_type;
	a->fa_mode = n->mn_mode;
	a->fa_nlink = n->mn_nlink;
	a->fa_uid = n->mn_uid;
	a->fa_gid = n->mn_gid;
	a->fa_size = n->mn_size;
	a->fa_used_bytes = n->mn_size;
	a->fa_fsid = mf->mf_fs.fs_fsid;
	a->fa_fileid = idx + 1u;
	a->fa_mtime.ft_sec = (int64_t)n->mn_ctime;
	a->fa_ctime.ft_sec = (int64_t)n->mn_ctime;
}

static void memfs_wcc_pre(struct memfs *mf, uint32_t idx, struct fs_wcc *w)
{
	w->fw_pre_valid = true;
	w->fw_pre_size = mf->mf_nodes[idx].mn_size;
	w->fw_pre_mtime.ft_sec = (int64_t)mf->mf_nodes[idx].mn_ctime;
	w->fw_pre_ctime = w->fw_pre_mtime;
}

static void memfs_wcc_post(struct memfs *mf, uint32_t idx, struct fs_wcc *w)
{
	w->fw_post_valid = true;
	memfs_attr(mf, idx, &w->fw_post);
}

static long memfs_find(struct memfs *mf, uint32_t dir, const char *name)
{
	for (uint32_t i = 1; i < MEMFS_NODES; i++)
		if (mf->mf_nodes[i].mn_used && mf->mf_nodes[i].mn_parent == dir &&
		    strcmp(mf->mf_nodes[i].mn_name, name) == 0)
			return i;
	return -1;
}

static long memfs_alloc(struct memfs *mf)
{
	for (uint32_t i = 1; i < MEMFS_NODES; i++)
		if (!mf->mf_nodes[i].mn_used)
			return i;
	return -1;
}

static bool memfs_dir_empty(struct memfs *mf, uint32_t dir)
{
	for (uint32_t i = 1; i < MEMFS_NODES; i++)
		if (mf->mf_nodes[i].mn_used && mf->mf_nodes[i].mn_parent == dir)
			return false;
	return true;
}

static void memfs_buf_release(void *arg)
{
	free(arg);
}

static int memfs_do(struct memfs *mf, struct fs_req *req)
{
	struct memfs_node *n;
	uint32_t idx;
	int rc = memfs_node_of(mf, &req->fr_obj, &n, &idx);
	if (rc < 0)
		return rc;
	mf->mf_last_cred = *req->fr_cred;
	mf->mf_last_op = req->fr_op;
	mf->mf_clock++;
	switch (req->fr_op) {
	case FS_OP_GETATTR:
		memfs_attr(mf, idx, &req->u.getattr.ga_attr);
		return 0;
	case FS_OP_SETATTR:
		memfs_wcc_pre(mf, idx, &req->u.setattr.sa_wcc);
		if (req->u.setattr.sa_guard && req->u.setattr.sa_guard_ctime.ft_sec != (int64_t)n->mn_ctime)
			rc = -SH_ENOTSYNC;
		else if (req->u.setattr.sa_sattr.fs_set_mode)
			n->mn_mode = req->u.setattr.sa_sattr.fs_mode;
		memfs_wcc_post(mf, idx, &req->u.setattr.sa_wcc);
		return rc;
	case FS_OP_LOOKUP: {
		req->u.lookup.lk_dir_attr_valid = true;
		memfs_attr(mf, idx, &req->u.lookup.lk_dir_attr);
		if (n->mn_type != FS_DIR)
			return -ENOTDIR;
		long c = memfs_find(mf, idx, req->u.lookup.lk_name);
		if (strcmp(req->u.lookup.lk_name, ".") == 0)
			c = idx;
		if (c < 0)
			return -ENOENT;
		memfs_obj((uint32_t)c, &req->u.lookup.lk_obj);
		memfs_attr(mf, (uint32_t)c, &req->u.lookup.lk_attr);
		return 0;
	}
	case FS_OP_ACCESS:
		req->u.access.ac_granted = req->u.access.ac_want;
		req->u.access.ac_attr_valid = true;
		memfs_attr(mf, idx, &req->u.access.ac_attr);
		return 0;
	case FS_OP_READLINK:
		if (n->mn_type != FS_LNK)
			return -EINVAL;
		req->u.readlink.rl_len = (uint32_t)strlen(n->mn_target);
		memcpy(req->u.readlink.rl_target, n->mn_target, req->u.readlink.rl_len + 1);
		return 0;
	case FS_OP_READ: {
		uint64_t off = req->u.read.rd_offset;
		uint64_t len = off >= n->mn_size ? 0 : SH_MIN(n->mn_size - off, req->u.read.rd_count);
		void *copy = malloc(len ? len : 1);
		if (!copy)
			return -ENOMEM;
		if (len)
			memcpy(copy, n->mn_data + off, len);
		req->u.read.rd_buf = (struct fs_buf){copy, (uint32_t)len, memfs_buf_release, copy};
		req->u.read.rd_eof = off + len >= n->mn_size;
		req->u.read.rd_attr_valid = true;
		memfs_attr(mf, idx, &req->u.read.rd_attr);
		return 0;
	}
	case FS_OP_WRITE: {
		memfs_wcc_pre(mf, idx, &req->u.write.wr_wcc);
		uint64_t end = req->u.write.wr_offset + req->u.write.wr_len;
		if (end > n->mn_size) {
			uint8_t *grown = realloc(n->mn_data, end);
			if (!grown)
				return -ENOSPC;
			memset(grown + n->mn_size, 0, end - n->mn_size);
			n->mn_data = grown;
			n->mn_size = end;
		}
		memcpy(n->mn_data + req->u.write.wr_offset, req->u.write.wr_data, req->u.write.wr_len);
		n->mn_ctime = mf->mf_clock;
		req->u.write.wr_count = req->u.write.wr_len;
		req->u.write.wr_committed = FS_FILE_SYNC;
		memfs_wcc_post(mf, idx, &req->u.write.wr_wcc);
		return 0;
	}
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD: {
		memfs_wcc_pre(mf, idx, &req->u.create.cr_dir_wcc);
		long c = memfs_find(mf, idx, req->u.create.cr_name);
		if (req->fr_op == FS_OP_CREATE && req->u.create.cr_mode == FS_CREATE_EXCLUSIVE)
			memcpy(mf->mf_last_verf, req->u.create.cr_verf, 8);
		if (c >= 0 && !(req->fr_op == FS_OP_CREATE &&
				req->u.create.cr_mode == FS_CREATE_UNCHECKED)) {
			rc = -EEXIST;
		} else if (c < 0 && (c = memfs_alloc(mf)) < 0) {
			rc = -ENOSPC;
		} else {
			struct memfs_node *nn = &mf->mf_nodes[c];
			if (!nn->mn_used) {
				memset(nn, 0, sizeof(*nn));
				nn->mn_used = true;
				nn->mn_parent = idx;
				snprintf(nn->mn_name, sizeof(nn->mn_name), "%s", req->u.create.cr_name);
				nn->mn_nlink = 1;
				nn->mn_uid = req->fr_cred->fc_uid;
				nn->mn_gid = req->fr_cred->fc_gid;
				nn->mn_mode = req->u.create.cr_sattr.fs_set_mode ?
						      req->u.create.cr_sattr.fs_mode : 0600;
				nn->mn_type = req->fr_op == FS_OP_MKDIR     ? FS_DIR :
					      req->fr_op == FS_OP_SYMLINK   ? FS_LNK :
					      req->fr_op == FS_OP_MKNOD     ? req->u.create.cr_type :
									      FS_REG;
				if (req->fr_op == FS_OP_SYMLINK)
					snprintf(nn->mn_target, sizeof(nn->mn_target), "%s",
						 req->u.create.cr_link_target);
				nn->mn_ctime = mf->mf_clock;
			}
			memfs_obj((uint32_t)c, &req->u.create.cr_obj);
			req->u.create.cr_attr_valid = true;
			memfs_attr(mf, (uint32_t)c, &req->u.create.cr_attr);
			n->mn_ctime = mf->mf_clock;
		}
		memfs_wcc_post(mf, idx, &req->u.create.cr_dir_wcc);
		return rc;
	}
	case FS_OP_REMOVE:
	case FS_OP_RMDIR: {
		memfs_wcc_pre(mf, idx, &req->u.remove.rm_dir_wcc);
		long c = memfs_find(mf, idx, req->u.remove.rm_name);
		if (c < 0)
			rc = -ENOENT;
		else if (req->fr_op == FS_OP_RMDIR && mf->mf_nodes[c].mn_type != FS_DIR)
			rc = -ENOTDIR;
		else if (req->fr_op == FS_OP_REMOVE && mf->mf_nodes[c].mn_type == FS_DIR)
			rc = -EISDIR;
		else if (req->fr_op == FS_OP_RMDIR && !memfs_dir_empty(mf, (uint32_t)c))
			rc = -ENOTEMPTY;
		else {
			free(mf->mf_nodes[c].mn_data);
			memset(&mf->mf_nodes[c], 0, sizeof(mf->mf_nodes[c]));
			n->mn_ctime = mf->mf_clock;
		}
		memfs_wcc_post(mf, idx, &req->u.remove.rm_dir_wcc);
		return rc;
	}
	case FS_OP_RENAME: {
		struct memfs_node *to;
		uint32_t to_idx;
		rc = memfs_node_of(mf, &req->u.rename.rn_to_dir, &to, &to_idx);
		if (rc < 0)
			return rc;
		memfs_wcc_pre(mf, idx, &req->u.rename.rn_from_wcc);
		memfs_wcc_pre(mf, to_idx, &req->u.rename.rn_to_wcc);
		long c = memfs_find(mf, idx, req->u.rename.rn_from_name);
		if (c < 0) {
			rc = -ENOENT;
		} else {
			long old = memfs_find(mf, to_idx, req->u.rename.rn_to_name);
			if (old >= 0 && old != c)
				memset(&mf->mf_nodes[old], 0, sizeof(mf->mf_nodes[old]));
			mf->mf_nodes[c].mn_parent = to_idx;
			snprintf(mf->mf_nodes[c].mn_name, sizeof(mf->mf_nodes[c].mn_name), "%s",
				 req->u.rename.rn_to_name);
		}
		memfs_wcc_post(mf, idx, &req->u.rename.rn_from_wcc);
		memfs_wcc_post(mf, to_idx, &req->u.rename.rn_to_wcc);
		return rc;
	}
	case FS_OP_LINK:
		req->u.link.ln_attr_valid = true;
		memfs_attr(mf, idx, &req->u.link.ln_attr);
		return -EMLINK; /* no hard links here: exercises an error reply with wcc */
	case FS_OP_READDIR: {
		if (n->mn_type != FS_DIR)
			return -ENOTDIR;
		req->u.readdir.rd_attr_valid = true;
		memfs_attr(mf, idx, &req->u.readdir.rd_attr);
		if (req->u.readdir.rd_cookie != 0 &&
		    memcmp(req->u.readdir.rd_verf, mf->mf_dir_verf, 8) != 0)
			return -SH_EBADCOOKIE;
		memcpy(req->u.readdir.rd_verf_out, mf->mf_dir_verf, 8);
		req->u.readdir.rd_eof = true;
		/* cookie = node index + 1; entries in index order */
		for (uint32_t i = (uint32_t)req->u.readdir.rd_cookie; i < MEMFS_NODES; i++) {
			const struct memfs_node *e = &mf->mf_nodes[i];
			if (i == 0 || !e->mn_used || e->mn_parent != idx)
				continue;
			struct fs_dirent d;
			memset(&d, 0, sizeof(d));
			d.fd_fileid = i + 1u;
			d.fd_cookie = i + 1u;
			d.fd_name = e->mn_name;
			d.fd_name_len = (uint32_t)strlen(e->mn_name);
			if (req->u.readdir.rd_plus) {
				d.fd_has_obj = true;
				memfs_obj(i, &d.fd_obj);
				d.fd_has_attr = true;
				memfs_attr(mf, i, &d.fd_attr);
			}
			if (!req->u.readdir.rd_emit(req, &d)) {
				req->u.readdir.rd_eof = false;
				break;
			}
		}
		return 0;
	}
	case FS_OP_FSSTAT:
		req->u.fsstat.st_total_bytes = 1u << 30;
		req->u.fsstat.st_free_bytes = 1u << 29;
		req->u.fsstat.st_avail_bytes = 1u << 28;
		req->u.fsstat.st_total_files = 1000;
		req->u.fsstat.st_free_files = 900;
		req->u.fsstat.st_avail_files = 800;
		req->u.fsstat.st_attr_valid = true;
		memfs_attr(mf, idx, &req->u.fsstat.st_attr);
		return 0;
	case FS_OP_COMMIT:
		memfs_wcc_pre(mf, idx, &req->u.commit.cm_wcc);
		memfs_wcc_post(mf, idx, &req->u.commit.cm_wcc);
		return 0;
	}
	return -SH_ENOTSUPP;
}

static void memfs_submit(struct fs *fs, struct fs_req *req)
{
	struct memfs *mf = (struct memfs *)fs;
	req->fr_status = memfs_do(mf, req);
	fs_req_complete(req);
}

static int memfs_root(struct fs *fs, struct fs_obj_id *out)
{
	(void)fs;
	memfs_obj(0, out);
	return 0;
}

static void memfs_info(struct fs *fs, struct fs_info *info)
{
	(void)fs;
	memset(info, 0, sizeof(*info));
	info->fi_max_file_size = 1ull << 40;
	info->fi_time_delta.ft_nsec = 1;
	info->fi_link_max = 1;
	info->fi_name_max = FS_NAME_MAX;
	info->fi_has_symlinks = true;
	info->fi_can_set_time = true;
	info->fi_no_trunc = true;
	info->fi_case_preserving = true;
}

static void memfs_write_verifier(struct fs *fs, uint8_t verf[8])
{
	(void)fs;
	memcpy(verf, "WVERF-01", 8);
}

static void memfs_destroy(struct fs *fs)
{
	struct memfs *mf = (struct memfs *)fs;
	for (unsigned i = 0; i < MEMFS_NODES; i++)
		free(mf->mf_nodes[i].mn_data);
	free(mf);
}

static const struct fs_ops memfs_ops = {"memfs", memfs_submit, memfs_root, memfs_info,
					memfs_write_verifier, memfs_destroy};

struct memfs *memfs_create(uint64_t fsid)
{
	struct memfs *mf = calloc(1, sizeof(*mf));
	if (!mf)
		return NULL;
	mf->mf_fs.fs_ops = &memfs_ops;
	mf->mf_fs.fs_fsid = fsid;
	mf->mf_nodes[0].mn_used = true;
	mf->mf_nodes[0].mn_type = FS_DIR;
	mf->mf_nodes[0].mn_mode = 0777;
	mf->mf_nodes[0].mn_nlink = 2;
	memcpy(mf->mf_dir_verf, "DIRVERF!", 8);
	return mf;
}
