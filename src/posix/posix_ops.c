/* posix_ops.c: the posix back end's operations on single objects (GETATTR, SETATTR, ACCESS,
 * READLINK, READ, WRITE, COMMIT, FSSTAT), the helpers every operation shares, and the dispatcher.
 * The namespace operations are in posix_dirops.c. See posix.c for the model. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "posix/posix_impl.h"

/* ---- shared helpers ---- */

int posix_stat_fd(int fd, struct stat *st)
{
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
		return -errno;
	return 0;
}

enum fs_type posix_type_of_mode(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return FS_REG;
	case S_IFDIR: return FS_DIR;
	case S_IFBLK: return FS_BLK;
	case S_IFCHR: return FS_CHR;
	case S_IFLNK: return FS_LNK;
	case S_IFSOCK: return FS_SOCK;
	case S_IFIFO: return FS_FIFO;
	default: return (enum fs_type)0;
	}
}

static struct fs_time posix_time(const struct timespec *ts)
{
	struct fs_time t = { .ft_sec = (int64_t)ts->tv_sec, .ft_nsec = (uint32_t)ts->tv_nsec };
	return t;
}

void posix_attr_from_stat(const struct posix_fs *pf, const struct stat *st, struct fs_attr *attr)
{
	attr->fa_type = posix_type_of_mode(st->st_mode);
	attr->fa_mode = (uint32_t)(st->st_mode & 07777);
	attr->fa_nlink = (uint32_t)st->st_nlink;
	attr->fa_uid = (uint32_t)st->st_uid;
	attr->fa_gid = (uint32_t)st->st_gid;
	attr->fa_size = (uint64_t)st->st_size;
	attr->fa_used_bytes = (uint64_t)st->st_blocks * 512; /* st_blocks counts 512-byte units */
	attr->fa_rdev_major = major(st->st_rdev);
	attr->fa_rdev_minor = minor(st->st_rdev);
	attr->fa_fsid = pf->pf_fs.fs_fsid;
	attr->fa_fileid = (uint64_t)st->st_ino;
	attr->fa_atime = posix_time(&st->st_atim);
	attr->fa_mtime = posix_time(&st->st_mtim);
	attr->fa_ctime = posix_time(&st->st_ctim);
}

void posix_wcc_pre(const struct stat *st, struct fs_wcc *wcc)
{
	wcc->fw_pre_valid = true;
	wcc->fw_pre_size = (uint64_t)st->st_size;
	wcc->fw_pre_mtime = posix_time(&st->st_mtim);
	wcc->fw_pre_ctime = posix_time(&st->st_ctim);
}

void posix_wcc_post(struct posix_fs *pf, int fd, struct fs_wcc *wcc)
{
	struct stat st;
	wcc->fw_post_valid = false;
	if (posix_stat_fd(fd, &st) == 0) {
		posix_attr_from_stat(pf, &st, &wcc->fw_post);
		wcc->fw_post_valid = true;
	}
}

int posix_check_name(const char *name, int dot_result)
{
	if (name == NULL || name[0] == '\0')
		return -EINVAL;
	size_t len = strnlen(name, FS_NAME_MAX + 1);
	if (len > FS_NAME_MAX)
		return -ENAMETOOLONG;
	if (memchr(name, '/', len) != NULL)
		return -EACCES; /* as knfsd: a name with a slash would walk the tree */
	if (dot_result != 0 && (strcmp(name, ".") == 0 || strcmp(name, "..") == 0))
		return dot_result;
	return 0;
}

int posix_id_at(struct posix_fs *pf, int dirfd, const char *name, int flags, enum fs_type type,
		struct fs_obj_id *id_out)
{
	alignas(struct file_handle) uint8_t fh_buf[sizeof(struct file_handle) + POSIX_ID_HANDLE_MAX];
	struct file_handle *fh = (struct file_handle *)(void *)fh_buf;
	int mount_id;

	fh->handle_bytes = POSIX_ID_HANDLE_MAX;
	if (name_to_handle_at(dirfd, name, fh, &mount_id, flags) != 0) {
		if (errno == EOVERFLOW) {
			log_ratelimited(LOG_ERROR, "posix: a file handle of %u bytes exceeds %d",
					fh->handle_bytes, POSIX_ID_HANDLE_MAX);
			return -SH_ESERVERFAULT;
		}
		return -errno;
	}
	if (mount_id != pf->pf_mount_id)
		return -EACCES; /* a mount point inside the export: not crossed */
	if (fh->handle_bytes == 0 || fh->handle_bytes > POSIX_ID_HANDLE_MAX)
		return -SH_ESERVERFAULT;
	uint8_t *b = id_out->foi_bytes;
	b[POSIX_ID_OFF_VERSION] = POSIX_ID_VERSION;
	b[POSIX_ID_OFF_TYPE] = (uint8_t)type;
	for (int i = 0; i < 4; i++) {
		b[POSIX_ID_OFF_TAG + i] = (uint8_t)(pf->pf_tag >> (8 * i));
		b[POSIX_ID_OFF_HTYPE + i] = (uint8_t)((uint32_t)fh->handle_type >> (8 * i));
	}
	memcpy(b + POSIX_ID_OFF_HANDLE, fh->f_handle, fh->handle_bytes);
	id_out->foi_len = (uint8_t)(POSIX_ID_OFF_HANDLE + fh->handle_bytes);
	return 0;
}

/* Holds fr_obj and stats it, refusing an object whose last link is gone. */
static int posix_hold_stat(struct posix_fs *pf, const struct fs_obj_id *id, struct posix_fd **out,
			   struct stat *st)
{
	int rc = posix_fd_hold(pf, id, out);
	if (rc != 0)
		return rc;
	rc = posix_stat_fd((*out)->pfd_fd, st);
	if (rc == 0 && st->st_nlink == 0) {
		posix_fd_forget(pf, *out);
		rc = -ESTALE;
	}
	if (rc != 0)
		posix_fd_rele(pf, *out);
	return rc;
}

/* ---- operations ---- */

static int posix_do_getattr(struct posix_fs *pf, struct fs_req *req)
{
	struct posix_fd *o;
	struct stat st;
	/* No permission is needed to read attributes, so no identity switch either. */
	int rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	posix_attr_from_stat(pf, &st, &req->u.getattr.ga_attr);
	posix_fd_rele(pf, o);
	return 0;
}

/* Applies a new mode to an object open only by O_PATH (fchmod refuses those fds; the
 * /proc/self/fd link names the object itself, never a symlink's target, since symlinks are
 * skipped by the caller). */
static int posix_chmod_path_fd(int fd, mode_t mode)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return chmod(path, mode) == 0 ? 0 : -errno;
}

static void posix_sattr_times(const struct fs_sattr *sa, struct timespec ts[2])
{
	const enum fs_time_how how[2] = { sa->fs_atime_how, sa->fs_mtime_how };
	const struct fs_time *t[2] = { &sa->fs_atime, &sa->fs_mtime };
	for (int i = 0; i < 2; i++) {
		if (how[i] == FS_TIME_SERVER) {
			ts[i].tv_sec = 0;
			ts[i].tv_nsec = UTIME_NOW;
		} else if (how[i] == FS_TIME_CLIENT) {
			ts[i].tv_sec = (time_t)t[i]->ft_sec;
			ts[i].tv_nsec = (long)t[i]->ft_nsec;
		} else {
			ts[i].tv_sec = 0;
			ts[i].tv_nsec = UTIME_OMIT;
		}
	}
}

int posix_apply_sattr(int fd, enum fs_type type, bool path_fd, const struct fs_sattr *sa,
		      bool *changed)
{
	bool real_fd = !path_fd;

	if (sa->fs_set_uid || sa->fs_set_gid) {
		uid_t uid = sa->fs_set_uid ? (uid_t)sa->fs_uid : (uid_t)-1;
		gid_t gid = sa->fs_set_gid ? (gid_t)sa->fs_gid : (gid_t)-1;
		if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) != 0)
			return -errno;
		*changed = true;
	}
	if (sa->fs_set_mode && type != FS_LNK) {
		/* Linux keeps no meaningful mode on a symlink, so a mode for one is ignored. */
		mode_t mode = (mode_t)(sa->fs_mode & 07777);
		/* As knfsd: a change of owner revokes the set-id bits of anything but a directory,
		 * those of a mode set in the same call too (the chown above revoked the old ones).
		 */
		if ((sa->fs_set_uid || sa->fs_set_gid) && type != FS_DIR) {
			mode &= ~(mode_t)S_ISUID;
			if ((mode & S_IXGRP) != 0)
				mode &= ~(mode_t)S_ISGID;
		}
		int rc = real_fd ? (fchmod(fd, mode) == 0 ? 0 : -errno) : posix_chmod_path_fd(fd, mode);
		if (rc != 0)
			return rc;
		*changed = true;
	}
	if (sa->fs_atime_how != FS_TIME_DONT_CHANGE || sa->fs_mtime_how != FS_TIME_DONT_CHANGE) {
		struct timespec ts[2];
		posix_sattr_times(sa, ts);
		int r = real_fd ? futimens(fd, ts) : utimensat(fd, "", ts, AT_EMPTY_PATH);
		if (r != 0)
			return -errno;
		*changed = true;
	}
	return 0;
}

/* Makes the object's metadata durable: fsync where it has a real fd (a directory's in a round of
 * its group commit, which writes its inode too, so that it never runs beside another fsync
 * writing the directory: posix_fdcache.c); objects held only by O_PATH (symlinks, devices, FIFOs,
 * sockets) cannot be fsynced, so the whole file system is synced. */
static int posix_sync_obj(struct posix_fs *pf, struct posix_fd *o)
{
	if (o->pfd_type == FS_DIR)
		return posix_dir_sync(pf, o);
	if (o->pfd_type == FS_REG)
		return fsync(o->pfd_fd) == 0 ? 0 : -errno;
	return syncfs(pf->pf_root_fd) == 0 ? 0 : -errno;
}

/* chown(2), chmod(2) and utimensat(2)'s ownership rules for a caller that is not root: the
 * changes the kernel would refuse with EPERM (the size is checked by the truncate itself). */
static int posix_setattr_owner_check(const struct fs_cred *cred, const struct stat *st,
				     enum fs_type type, const struct fs_sattr *sa)
{
	if (cred->fc_uid == 0)
		return 0;
	bool owner = cred->fc_uid == (uint32_t)st->st_uid;
	bool needs_owner = (sa->fs_set_mode && type != FS_LNK) || sa->fs_set_uid ||
			   sa->fs_set_gid || sa->fs_atime_how == FS_TIME_CLIENT ||
			   sa->fs_mtime_how == FS_TIME_CLIENT;
	if (needs_owner && !owner)
		return -EPERM;
	if (sa->fs_set_uid && sa->fs_uid != (uint32_t)st->st_uid)
		return -EPERM;
	if (sa->fs_set_gid && sa->fs_gid != (uint32_t)st->st_gid &&
	    !posix_in_group(cred, sa->fs_gid))
		return -EPERM;
	return 0;
}

static int posix_do_setattr(struct posix_fs *pf, struct fs_req *req)
{
	const struct fs_sattr *sa = &req->u.setattr.sa_sattr;
	struct fs_wcc *wcc = &req->u.setattr.sa_wcc;
	struct posix_fd *o;
	struct stat st;
	int wfd = -1;
	bool changed = false;
	int rc;

	rc = posix_fd_hold(pf, &req->fr_obj, &o);
	if (rc != 0)
		return rc;
	rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out_rele;
	rc = posix_stat_fd(o->pfd_fd, &st);
	if (rc == 0 && st.st_nlink == 0)
		rc = -ESTALE;
	if (rc != 0)
		goto out_rele;
	posix_wcc_pre(&st, wcc);
	if (req->u.setattr.sa_guard &&
	    ((int64_t)st.st_ctim.tv_sec != req->u.setattr.sa_guard_ctime.ft_sec ||
	     (uint32_t)st.st_ctim.tv_nsec != req->u.setattr.sa_guard_ctime.ft_nsec)) {
		rc = -SH_ENOTSYNC;
		goto out_post;
	}
	/* Size first, while the caller's rights are those it had on the object before any change
	 * of owner or mode in this same request; but what the kernel would refuse after it is
	 * refused before it, so that a refused SETATTR changes nothing (knfsd truncates first and
	 * may then refuse the rest, leaving the new size). */
	if (sa->fs_set_size) {
		if (o->pfd_type == FS_DIR)
			rc = -EISDIR;
		else if (o->pfd_type != FS_REG)
			rc = -EINVAL;
		else if (sa->fs_size > (uint64_t)INT64_MAX)
			rc = -EFBIG;
		else
			rc = posix_perm(req->fr_cred, o->pfd_fd, &st, W_OK, true, false);
		if (rc == 0)
			rc = posix_fd_writable(pf, o, &wfd); /* may switch to root to open */
		if (rc == 0)
			rc = posix_cred_apply(req->fr_cred);
		if (rc == 0)
			rc = posix_setattr_owner_check(req->fr_cred, &st, o->pfd_type, sa);
		if (rc == 0 && ftruncate(wfd, (off_t)sa->fs_size) != 0)
			rc = -errno;
		if (rc != 0)
			goto out_post;
		changed = true;
	}
	/* Times set to the server's clock by a caller who is neither the owner nor root: knfsd
	 * lets anyone who may write the object do that (the rule of utimensat(2) with no times),
	 * where utimensat with one time "now" and the other omitted demands ownership. So the
	 * write permission is checked here and the times are set as root. */
	bool path_fd = o->pfd_type != FS_REG && o->pfd_type != FS_DIR;
	bool server_times_only =
	    (sa->fs_atime_how == FS_TIME_SERVER || sa->fs_mtime_how == FS_TIME_SERVER) &&
	    sa->fs_atime_how != FS_TIME_CLIENT && sa->fs_mtime_how != FS_TIME_CLIENT;
	bool touch_by_writer = server_times_only && req->fr_cred->fc_uid != 0 &&
			       req->fr_cred->fc_uid != (uint32_t)st.st_uid;
	struct fs_sattr first = *sa;
	if (touch_by_writer)
		first.fs_atime_how = first.fs_mtime_how = FS_TIME_DONT_CHANGE;
	rc = posix_apply_sattr(o->pfd_fd, o->pfd_type, path_fd, &first, &changed);
	if (rc == 0 && touch_by_writer) {
		struct fs_sattr times = {.fs_atime_how = sa->fs_atime_how,
					 .fs_mtime_how = sa->fs_mtime_how};
		rc = posix_perm(req->fr_cred, o->pfd_fd, &st, W_OK, false, false);
		if (rc == 0)
			rc = posix_cred_root();
		if (rc == 0)
			rc = posix_apply_sattr(o->pfd_fd, o->pfd_type, path_fd, &times, &changed);
		int crc = posix_cred_apply(req->fr_cred);
		if (rc == 0)
			rc = crc;
	}
	if (changed) {
		int src = posix_sync_obj(pf, o);
		if (rc == 0)
			rc = src;
	}
out_post:
	posix_wcc_post(pf, o->pfd_fd, wcc);
out_rele:
	posix_fd_rele(pf, o);
	return rc;
}

static int posix_do_access(struct posix_fs *pf, struct fs_req *req)
{
	struct posix_fd *o;
	struct stat st;
	int rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	rc = posix_cred_apply(req->fr_cred);
	if (rc == 0) {
		req->u.access.ac_granted = posix_access_bits(req->fr_cred, o->pfd_fd, &st,
							     req->u.access.ac_want);
		posix_attr_from_stat(pf, &st, &req->u.access.ac_attr);
		req->u.access.ac_attr_valid = true;
	}
	posix_fd_rele(pf, o);
	return rc;
}

static int posix_do_readlink(struct posix_fs *pf, struct fs_req *req)
{
	struct posix_fd *o;
	struct stat st;
	int rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	if (o->pfd_type != FS_LNK) {
		rc = -EINVAL;
		goto out;
	}
	char *buf = req->u.readlink.rl_target;
	ssize_t n = readlinkat(o->pfd_fd, "", buf, FS_PATH_MAX + 1);
	if (n < 0) {
		rc = -errno;
		goto out;
	}
	if (n > FS_PATH_MAX) {
		rc = -ENAMETOOLONG;
		goto out;
	}
	buf[n] = '\0';
	req->u.readlink.rl_len = (uint32_t)n;
	posix_attr_from_stat(pf, &st, &req->u.readlink.rl_attr);
	req->u.readlink.rl_attr_valid = true;
out:
	posix_fd_rele(pf, o);
	return rc;
}

static void posix_buf_release(void *arg)
{
	if (arg != NULL)
		mem_free(arg);
}

static int posix_do_read(struct posix_fs *pf, struct fs_req *req, bool may_punt)
{
	struct posix_fd *o;
	struct stat st;
	uint8_t *buf = NULL;
	int rc;

	rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	if (o->pfd_type != FS_REG) {
		rc = o->pfd_type == FS_DIR ? -EISDIR : -EINVAL;
		goto out;
	}
	rc = posix_cred_apply(req->fr_cred);
	if (rc == 0)
		rc = posix_perm(req->fr_cred, o->pfd_fd, &st, R_OK, true, true);
	if (rc != 0)
		goto out;

	uint64_t off = req->u.read.rd_offset;
	uint32_t count = SH_MIN(req->u.read.rd_count, POSIX_READ_MAX_BYTES);
	size_t done = 0;
	if (off >= (uint64_t)st.st_size || off > (uint64_t)INT64_MAX)
		count = 0;
	else
		count = (uint32_t)SH_MIN((uint64_t)count, (uint64_t)st.st_size - off);
	if (count > 0 && req->u.read.rd_pipe_ok) {
		/* Large READs go out from the page cache without a copy (posix_pipe.c). */
		rc = posix_read_piped(&pf->pf_pipes, o->pfd_fd, off, count, may_punt,
				      &req->u.read.rd_buf);
		if (rc < 0)
			goto out;
		if (rc == 0) {
			done = req->u.read.rd_buf.fb_len;
			count = 0; /* nothing left to copy */
		}
		rc = 0;
	}
	if (count > 0) {
		buf = mem_alloc(count);
		if (buf == NULL) {
			rc = -ENOMEM;
			goto out;
		}
	}
	while (done < count) {
		struct iovec iov = { .iov_base = buf + done, .iov_len = count - done };
		/* Inline, take only what the page cache holds; a miss goes to a worker. */
		ssize_t n = preadv2(o->pfd_fd, &iov, 1, (off_t)(off + done), may_punt ? RWF_NOWAIT : 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (may_punt && (errno == EAGAIN || errno == EOPNOTSUPP)) {
				rc = POSIX_PUNT;
				goto out;
			}
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break; /* the file shrank since the stat */
		done += (size_t)n;
	}
	if (buf != NULL) {
		req->u.read.rd_buf.fb_data = buf;
		req->u.read.rd_buf.fb_len = (uint32_t)done;
		req->u.read.rd_buf.fb_release_arg = buf;
		buf = NULL;
	}
	req->u.read.rd_eof = off + done >= (uint64_t)st.st_size;
	posix_attr_from_stat(pf, &st, &req->u.read.rd_attr);
	req->u.read.rd_attr_valid = true;
out:
	mem_free(buf);
	posix_fd_rele(pf, o);
	return rc;
}

static int posix_do_write(struct posix_fs *pf, struct fs_req *req, bool may_punt)
{
	struct fs_wcc *wcc = &req->u.write.wr_wcc;
	enum fs_stable stable = req->u.write.wr_stable;
	struct posix_fd *o;
	struct stat st;
	int wfd;
	int rc;

	rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	if (o->pfd_type != FS_REG) {
		rc = o->pfd_type == FS_DIR ? -EISDIR : -EINVAL;
		goto out;
	}
	rc = posix_cred_apply(req->fr_cred);
	if (rc == 0)
		rc = posix_perm(req->fr_cred, o->pfd_fd, &st, W_OK, true, false);
	/* Only now the O_RDWR fd, so a writer without the right never opens one; opening it may
	 * take the thread to root, hence the second (usually free) identity switch. */
	if (rc == 0)
		rc = posix_fd_writable(pf, o, &wfd);
	if (rc == 0)
		rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out;
	uint64_t off = req->u.write.wr_offset;
	uint32_t len = req->u.write.wr_len;
	if (off > (uint64_t)INT64_MAX || (uint64_t)INT64_MAX - off < len) {
		rc = -EFBIG;
		goto out;
	}
	if (posix_direct_wanted(pf, o, stable, off, len)) {
		if (may_punt) {
			rc = POSIX_PUNT; /* a direct write waits for the device */
			goto out;
		}
		posix_wcc_pre(&st, wcc);
		ssize_t n = posix_direct_write(pf, o, req->fr_cred, req->u.write.wr_data, off, len);
		if (n != POSIX_DIRECT_DECLINED) {
			if (n >= 0) {
				req->u.write.wr_count = (uint32_t)n;
				req->u.write.wr_committed = stable;
			}
			rc = n < 0 ? (int)n : 0;
			posix_wcc_post(pf, o->pfd_fd, wcc);
			goto out;
		}
	}
	int flags = 0;
	if (stable == FS_FILE_SYNC)
		flags = RWF_SYNC;
	else if (stable == FS_DATA_SYNC)
		flags = RWF_DSYNC;
	else if (may_punt && __atomic_load_n(&pf->pf_write_nowait, __ATOMIC_RELAXED))
		flags = RWF_NOWAIT; /* inline, UNSTABLE: a write that would wait goes to a worker */

	posix_wcc_pre(&st, wcc);
	const uint8_t *data = req->u.write.wr_data;
	size_t done = 0;
	while (done < len) {
		struct iovec iov = { .iov_base = (void *)(data + done), .iov_len = len - done };
		ssize_t n = pwritev2(wfd, &iov, 1, (off_t)(off + done), flags);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if ((flags & RWF_NOWAIT) && done == 0 && errno == EOPNOTSUPP) {
				/* The host fs has no non-blocking buffered writes (ext4 as of
				 * Linux 6.x): stop asking, and write to the page cache as
				 * knfsd does, which waits only when writeback throttles. */
				__atomic_store_n(&pf->pf_write_nowait, false, __ATOMIC_RELAXED);
				flags = 0;
				continue;
			}
			if ((flags & RWF_NOWAIT) && done == 0 && errno == EAGAIN) {
				rc = POSIX_PUNT;
				goto out;
			}
			if (done == 0)
				rc = -errno;
			break; /* a short write is reported as such */
		}
		done += (size_t)n;
		if (flags & RWF_NOWAIT)
			break; /* a partial non-blocking write is a legal short WRITE */
	}
	if (rc == 0) {
		req->u.write.wr_count = (uint32_t)done;
		req->u.write.wr_committed = stable;
		if (stable == FS_UNSTABLE)
			posix_writeback_note(pf, o, done);
	}
	posix_wcc_post(pf, o->pfd_fd, wcc);
out:
	posix_fd_rele(pf, o);
	return rc;
}

static int posix_do_commit(struct posix_fs *pf, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.commit.cm_wcc;
	struct posix_fd *o;
	struct stat st;
	int rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	if (o->pfd_type != FS_REG) {
		rc = o->pfd_type == FS_DIR ? -EISDIR : -EINVAL;
		goto out;
	}
	posix_wcc_pre(&st, wcc);
	/* fdatasync writes the data and whatever metadata reaching it needs (size, extents); a
	 * COMMIT promises nothing about timestamps. Any fd of the inode flushes all its pages. */
	if (fdatasync(o->pfd_fd) != 0)
		rc = -errno;
	posix_wcc_post(pf, o->pfd_fd, wcc);
out:
	posix_fd_rele(pf, o);
	return rc;
}

static int posix_do_fsstat(struct posix_fs *pf, struct fs_req *req)
{
	struct posix_fd *o;
	struct stat st;
	struct statvfs sv;
	int rc = posix_hold_stat(pf, &req->fr_obj, &o, &st);
	if (rc != 0)
		return rc;
	if (fstatvfs(pf->pf_root_fd, &sv) != 0) {
		rc = -errno;
		goto out;
	}
	uint64_t frsize = sv.f_frsize != 0 ? sv.f_frsize : sv.f_bsize;
	req->u.fsstat.st_total_bytes = (uint64_t)sv.f_blocks * frsize;
	req->u.fsstat.st_free_bytes = (uint64_t)sv.f_bfree * frsize;
	req->u.fsstat.st_avail_bytes = (uint64_t)sv.f_bavail * frsize;
	req->u.fsstat.st_total_files = sv.f_files;
	req->u.fsstat.st_free_files = sv.f_ffree;
	req->u.fsstat.st_avail_files = sv.f_favail;
	req->u.fsstat.st_invarsec = 0; /* the host file system can change under us at any time */
	posix_attr_from_stat(pf, &st, &req->u.fsstat.st_attr);
	req->u.fsstat.st_attr_valid = true;
out:
	posix_fd_rele(pf, o);
	return rc;
}

int posix_op_run(struct posix_fs *pf, struct fs_req *req, bool may_punt)
{
	int rc;

	if (req->fr_cred == NULL) {
		req->fr_status = -EINVAL;
		return 0;
	}
	switch (req->fr_op) {
	case FS_OP_GETATTR: rc = posix_do_getattr(pf, req); break;
	case FS_OP_SETATTR: rc = posix_do_setattr(pf, req); break;
	case FS_OP_LOOKUP: rc = posix_do_lookup(pf, req); break;
	case FS_OP_ACCESS: rc = posix_do_access(pf, req); break;
	case FS_OP_READLINK: rc = posix_do_readlink(pf, req); break;
	case FS_OP_READ: rc = posix_do_read(pf, req, may_punt); break;
	case FS_OP_WRITE: rc = posix_do_write(pf, req, may_punt); break;
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD: rc = posix_do_create(pf, req); break;
	case FS_OP_REMOVE:
	case FS_OP_RMDIR: rc = posix_do_remove(pf, req); break;
	case FS_OP_RENAME: rc = posix_do_rename(pf, req); break;
	case FS_OP_LINK: rc = posix_do_link(pf, req); break;
	case FS_OP_READDIR: rc = posix_do_readdir(pf, req); break;
	case FS_OP_FSSTAT: rc = posix_do_fsstat(pf, req); break;
	case FS_OP_COMMIT: rc = posix_do_commit(pf, req); break;
	default: rc = -SH_ENOTSUPP; break;
	}
	if (rc == POSIX_PUNT) {
		ASSERT(may_punt);
		return POSIX_PUNT;
	}
	if (rc == POSIX_PARKED) {
		ASSERT(!may_punt); /* only a worker parks a request */
		return POSIX_PARKED;
	}
	req->fr_status = rc;
	return 0;
}

void posix_read_buf_init(struct fs_buf *buf)
{
	static const uint8_t posix_no_data[1];
	buf->fb_data = posix_no_data; /* never NULL, so a caller's memcpy of 0 bytes is defined */
	buf->fb_len = 0;
	buf->fb_release = posix_buf_release;
	buf->fb_release_arg = NULL;
	buf->fb_segs = NULL;
	buf->fb_nsegs = 0;
	buf->fb_piped = false;
	buf->fb_pipe_fd = -1;
}
