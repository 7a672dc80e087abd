/* posix_dirops.c: the posix back end's namespace operations: LOOKUP, CREATE, MKDIR, SYMLINK,
 * MKNOD, REMOVE, RMDIR, RENAME, LINK and READDIR(PLUS). Every name is resolved by a *at() call
 * relative to a directory fd, one component, symlinks not followed, under the client's identity
 * so the kernel checks search and write permission. See posix.c for the model. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "posix/posix_impl.h"

/* Holds a directory by id and stats it. */
static int posix_hold_dir(struct posix_fs *pf, const struct fs_obj_id *id, struct posix_fd **out,
			  struct stat *st)
{
	int rc = posix_fd_hold(pf, id, out);
	if (rc != 0)
		return rc;
	if ((*out)->pfd_type != FS_DIR)
		rc = -ENOTDIR;
	if (rc == 0)
		rc = posix_stat_fd((*out)->pfd_fd, st);
	if (rc == 0 && st->st_nlink == 0) {
		posix_fd_forget(pf, *out);
		rc = -ESTALE;
	}
	if (rc != 0)
		posix_fd_rele(pf, *out);
	return rc;
}

static bool posix_is_root(const struct posix_fs *pf, const struct stat *st)
{
	return st->st_dev == pf->pf_root_dev && st->st_ino == pf->pf_root_ino;
}

static int posix_fsync_fd(int fd)
{
	return fsync(fd) == 0 ? 0 : -errno;
}

/* The fsync of a new object made in directory d. Where that fsync writes the object's entry too
 * (pf_new_entry_with_object), it writes d's blocks, so it runs in a round of d's group commit
 * (posix_dir_sync_object), never beside an fsync of d of another round. */
static int posix_fsync_new(struct posix_fs *pf, struct posix_fd *d, int fd)
{
	return pf->pf_new_entry_with_object ? posix_dir_sync_object(pf, d, fd) : posix_fsync_fd(fd);
}

/* Stats (dirfd, name) without following a symlink and builds its id. */
static int posix_entry(struct posix_fs *pf, int dirfd, const char *name, struct stat *st,
		       struct fs_obj_id *id)
{
	int id_rc;
	int rc = posix_entry_lookup(pf, dirfd, name, st, id, &id_rc);
	return rc != 0 ? rc : id_rc;
}

int posix_do_lookup(struct posix_fs *pf, struct fs_req *req)
{
	const char *name = req->u.lookup.lk_name;
	struct posix_fd *d;
	struct stat dst, st;
	int rc;

	rc = posix_check_name(name, 0);
	if (rc != 0)
		return rc;
	rc = posix_hold_dir(pf, &req->fr_obj, &d, &dst);
	if (rc != 0)
		return rc;
	rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out;
	if (strcmp(name, ".") == 0 || (strcmp(name, "..") == 0 && posix_is_root(pf, &dst))) {
		/* ".." of the export root is the root itself, never its host parent. */
		rc = posix_perm(req->fr_cred, d->pfd_fd, &dst, X_OK, false, false);
		if (rc != 0)
			goto out;
		req->u.lookup.lk_obj = d->pfd_id;
		st = dst;
	} else {
		rc = posix_entry(pf, d->pfd_fd, name, &st, &req->u.lookup.lk_obj);
		if (rc != 0)
			goto out;
	}
	posix_attr_from_stat(pf, &st, &req->u.lookup.lk_attr);
out:
	posix_attr_from_stat(pf, &dst, &req->u.lookup.lk_dir_attr);
	req->u.lookup.lk_dir_attr_valid = true;
	posix_fd_rele(pf, d);
	return rc;
}

/* The EXCLUSIVE create verifier kept in the new file's times, as knfsd does: the first four
 * bytes in atime, the last four in mtime. Seconds keep 31 bits (file systems without large
 * timestamps refuse negative ones) and the top bit goes into the nanoseconds, so all 64 bits
 * survive. */
static void posix_verf_times(const uint8_t verf[8], struct timespec ts[2])
{
	for (int i = 0; i < 2; i++) {
		const uint8_t *v = verf + 4 * i;
		uint32_t w = (uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 | v[3];
		ts[i].tv_sec = (time_t)(w & 0x7fffffffu);
		ts[i].tv_nsec = (long)(w >> 31);
	}
}

static bool posix_verf_matches(const struct stat *st, const uint8_t verf[8])
{
	struct timespec ts[2];
	posix_verf_times(verf, ts);
	return S_ISREG(st->st_mode) && st->st_size == 0 && st->st_atim.tv_sec == ts[0].tv_sec &&
	       st->st_atim.tv_nsec == ts[0].tv_nsec && st->st_mtim.tv_sec == ts[1].tv_sec &&
	       st->st_mtim.tv_nsec == ts[1].tv_nsec;
}

/* CREATE of a regular file. On success *st and *id describe the file and its creation (plus
 * any attributes set on it) is durable; so is its directory entry when *entry_durable says so,
 * otherwise the caller syncs the directory. *exists_ok says an existing file was accepted
 * (nothing new to sync in the directory). */
static int posix_create_reg(struct posix_fs *pf, struct fs_req *req, struct posix_fd *d,
			    struct stat *st, struct fs_obj_id *id, bool *exists_ok,
			    bool *entry_durable)
{
	int dfd = d->pfd_fd;
	const char *name = req->u.create.cr_name;
	const struct fs_sattr *sa = &req->u.create.cr_sattr;
	enum fs_create_mode how = req->u.create.cr_mode;
	bool changed = false;
	int rc = 0;

	/* EXCLUSIVE: attributes follow in a SETATTR; until then only the owner may use it. */
	mode_t mode = how == FS_CREATE_EXCLUSIVE ? 0600 : sa->fs_set_mode ? (mode_t)(sa->fs_mode & 07777)
									     : 0644;
	int fd = openat(dfd, name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
			mode);
	if (fd < 0) {
		if (errno != EEXIST || how == FS_CREATE_GUARDED)
			return -errno;
		if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) != 0)
			return -errno;
		if (how == FS_CREATE_EXCLUSIVE) {
			/* A retransmitted CREATE finds the file its first transmission made. */
			if (!posix_verf_matches(st, req->u.create.cr_verf))
				return -EEXIST;
		} else {
			/* UNCHECKED over an existing regular file: only a size applies (RFC 1813
			 * section 3.3.8, as knfsd reads it). */
			if (!S_ISREG(st->st_mode))
				return -EEXIST;
			if (sa->fs_set_size) {
				/* The owner may truncate a file whose mode denies it writing
				 * (knfsd's owner override, as for SETATTR's size): the owner opens
				 * it as root, then truncates as itself, so that the truncation
				 * still drops the set-id bits; anyone else opens it as itself. */
				bool owner = req->fr_cred->fc_uid != 0 &&
					     req->fr_cred->fc_uid == (uint32_t)st->st_uid;
				int wfd = -1;
				if (owner)
					rc = posix_cred_root();
				int wflags = O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
				if (rc == 0) {
					wfd = openat(dfd, name, wflags);
					rc = wfd < 0 ? -errno : 0;
				}
				if (owner) {
					int crc = posix_cred_apply(req->fr_cred);
					if (rc == 0)
						rc = crc;
				}
				if (rc != 0) {
					if (wfd >= 0)
						(void)close(wfd);
					return rc;
				}
				if (sa->fs_size > (uint64_t)INT64_MAX)
					rc = -EFBIG;
				else if (ftruncate(wfd, (off_t)sa->fs_size) != 0)
					rc = -errno;
				if (rc == 0)
					rc = posix_fsync_fd(wfd);
				if (rc == 0)
					rc = posix_stat_fd(wfd, st);
				(void)close(wfd);
				if (rc != 0)
					return rc;
			}
		}
		*exists_ok = true;
		return posix_id_at(pf, dfd, name, 0, FS_REG, id);
	}

	if (how == FS_CREATE_EXCLUSIVE) {
		struct timespec ts[2];
		posix_verf_times(req->u.create.cr_verf, ts);
		if (futimens(fd, ts) != 0)
			rc = -errno;
		changed = true;
	} else {
		/* The mode was given to openat; set it again only where the process umask
		 * cleared bits the client asked for. */
		struct fs_sattr rest = *sa;
		rest.fs_set_mode = sa->fs_set_mode && (mode & pf->pf_umask) != 0;
		rc = posix_apply_sattr(fd, FS_REG, false, &rest, &changed);
		if (rc == 0 && sa->fs_set_size && sa->fs_size != 0) {
			if (sa->fs_size > (uint64_t)INT64_MAX)
				rc = -EFBIG;
			else if (ftruncate(fd, (off_t)sa->fs_size) != 0)
				rc = -errno;
			changed = true;
		}
	}
	/* The new inode is fsynced itself, then (by the caller) its directory. Without a journal
	 * (ext2, or ext4 made without one) the directory's fsync does not write the inode, and an
	 * acknowledged CREATE could come back after a crash as an entry without a valid inode. On
	 * a journalling file system the directory's fsync commits the creating transaction, which
	 * holds both, so only what was set afterwards needs the file's own fsync (posix.c,
	 * Durability). */
	if (rc == 0 && (!pf->pf_journal || changed))
		rc = posix_fsync_new(pf, d, fd);
	if (rc == 0)
		rc = posix_stat_fd(fd, st);
	/* Where the fsync wrote the entry too (pf_new_entry_with_object), it wrote the directory
	 * of the file's one name; a LINK made meanwhile would leave two, and the fsync may have
	 * written the other's directory, which the link count taken after it shows. */
	if (rc == 0 && pf->pf_new_entry_with_object && st->st_nlink == 1)
		*entry_durable = true;
	if (rc == 0)
		rc = posix_id_at(pf, fd, "", AT_EMPTY_PATH, FS_REG, id);
	(void)close(fd);
	return rc;
}

/* MKDIR, SYMLINK, MKNOD: makes the object, then sets what the creating call could not.
 * *entry_durable as for posix_create_reg. */
static int posix_create_other(struct posix_fs *pf, struct fs_req *req, struct posix_fd *d,
			      struct stat *st, struct fs_obj_id *id, bool *entry_durable)
{
	int dfd = d->pfd_fd;
	const char *name = req->u.create.cr_name;
	const struct fs_sattr *sa = &req->u.create.cr_sattr;
	enum fs_type type;
	mode_t mode = sa->fs_set_mode ? (mode_t)(sa->fs_mode & 07777) : 0;
	int rc = 0;

	switch (req->fr_op) {
	case FS_OP_MKDIR:
		type = FS_DIR;
		if (!sa->fs_set_mode)
			mode = 0755;
		if (mkdirat(dfd, name, mode) != 0)
			return -errno;
		break;
	case FS_OP_SYMLINK:
		type = FS_LNK;
		if (req->u.create.cr_link_target == NULL)
			return -EINVAL;
		if (strnlen(req->u.create.cr_link_target, FS_PATH_MAX + 1) > FS_PATH_MAX)
			return -ENAMETOOLONG;
		if (symlinkat(req->u.create.cr_link_target, dfd, name) != 0)
			return -errno;
		break;
	default: {
		mode_t fmt;
		dev_t dev = 0;
		type = req->u.create.cr_type;
		switch (type) {
		case FS_FIFO: fmt = S_IFIFO; break;
		case FS_SOCK: fmt = S_IFSOCK; break;
		case FS_CHR: fmt = S_IFCHR; break;
		case FS_BLK: fmt = S_IFBLK; break;
		default: return -SH_EBADTYPE;
		}
		if (type == FS_CHR || type == FS_BLK)
			dev = makedev(req->u.create.cr_rdev_major, req->u.create.cr_rdev_minor);
		if (!sa->fs_set_mode)
			mode = 0644;
		if (mknodat(dfd, name, fmt | mode, dev) != 0)
			return -errno;
		break;
	}
	}

	int ofd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (ofd < 0)
		return -errno;
	/* The mode was given to the creating call; set it again only where the process umask
	 * cleared bits of it. */
	struct fs_sattr rest = *sa;
	rest.fs_set_size = false;
	rest.fs_set_mode = type != FS_LNK && (mode & pf->pf_umask) != 0;
	rest.fs_mode = (uint32_t)mode;
	bool changed = false;
	rc = posix_apply_sattr(ofd, type, true, &rest, &changed);
	if (rc == 0 && (!pf->pf_journal || changed)) {
		/* The new object is made durable itself unless its directory's fsync will commit it
		 * (see posix_create_reg): a new directory through a real fd; symlinks and device
		 * nodes cannot be opened for I/O, so the file system is synced (both are rare). */
		if (type == FS_DIR) {
			char path[64];
			snprintf(path, sizeof(path), "/proc/self/fd/%d", ofd);
			rc = posix_cred_root();
			int sfd = rc == 0 ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
			if (rc == 0 && sfd < 0)
				rc = -errno;
			if (sfd >= 0) {
				rc = posix_fsync_new(pf, d, sfd);
				(void)close(sfd);
			}
			/* A directory has one name: the fsync wrote its entry where
			 * pf_new_entry_with_object says so. */
			if (rc == 0 && pf->pf_new_entry_with_object)
				*entry_durable = true;
			if (rc == 0)
				rc = posix_cred_apply(req->fr_cred);
		} else if (syncfs(pf->pf_root_fd) != 0) {
			rc = -errno;
		}
	}
	if (rc == 0)
		rc = posix_stat_fd(ofd, st);
	if (rc == 0)
		rc = posix_id_at(pf, ofd, "", AT_EMPTY_PATH, type, id);
	(void)close(ofd);
	return rc;
}

int posix_do_create(struct posix_fs *pf, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.create.cr_dir_wcc;
	struct posix_fd *d;
	struct stat dst, st;
	bool exists_ok = false, entry_durable = false;
	int rc;

	rc = posix_check_name(req->u.create.cr_name, -EEXIST);
	if (rc != 0)
		return rc;
	rc = posix_hold_dir(pf, &req->fr_obj, &d, &dst);
	if (rc != 0)
		return rc;
	rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out;
	posix_wcc_pre(&dst, wcc);
	if (req->fr_op == FS_OP_CREATE)
		rc = posix_create_reg(pf, req, d, &st, &req->u.create.cr_obj, &exists_ok,
				      &entry_durable);
	else
		rc = posix_create_other(pf, req, d, &st, &req->u.create.cr_obj,
					&entry_durable);
	/* The new entry is durable once its directory is, unless the object's fsync wrote it. */
	if (rc == 0 && !exists_ok && !entry_durable)
		rc = posix_dir_sync(pf, d);
	if (rc == 0) {
		posix_attr_from_stat(pf, &st, &req->u.create.cr_attr);
		req->u.create.cr_attr_valid = true;
	}
	posix_wcc_post(pf, d->pfd_fd, wcc);
out:
	posix_fd_rele(pf, d);
	return rc;
}

int posix_do_remove(struct posix_fs *pf, struct fs_req *req)
{
	const char *name = req->u.remove.rm_name;
	struct fs_wcc *wcc = &req->u.remove.rm_dir_wcc;
	bool is_rmdir = req->fr_op == FS_OP_RMDIR;
	struct posix_fd *d;
	struct stat dst, st;
	int rc;

	/* As rmdir(2): ".." is a directory that is not empty, "." an invalid argument. */
	bool dotdot = is_rmdir && name != NULL && strcmp(name, "..") == 0;
	rc = posix_check_name(name, dotdot ? -ENOTEMPTY : -EINVAL);
	if (rc != 0)
		return rc;
	rc = posix_hold_dir(pf, &req->fr_obj, &d, &dst);
	if (rc != 0)
		return rc;
	rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out;
	posix_wcc_pre(&dst, wcc);
	/* The victim's inode, to drop its cached fds once it is gone (freeing its space now). */
	bool have_victim = fstatat(d->pfd_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (unlinkat(d->pfd_fd, name, is_rmdir ? AT_REMOVEDIR : 0) != 0)
		rc = -errno;
	else if (have_victim)
		posix_fd_forget_if_unlinked(pf, (uint64_t)st.st_ino);
	posix_wcc_post(pf, d->pfd_fd, wcc);
	if (rc == 0) {
		/* The reply is complete but for the directory's fsync: the request waits for it
		 * parked in the directory's rounds, not on this worker, and the round that covers
		 * it answers it. */
		posix_dir_sync_park(pf, d, req);
		return POSIX_PARKED;
	}
out:
	posix_fd_rele(pf, d);
	return rc;
}

int posix_do_rename(struct posix_fs *pf, struct fs_req *req)
{
	const char *from = req->u.rename.rn_from_name;
	const char *to = req->u.rename.rn_to_name;
	struct posix_fd *fd_dir, *td_dir;
	struct stat fst, tst, st;
	int rc;

	rc = posix_check_name(from, -EINVAL);
	if (rc == 0)
		rc = posix_check_name(to, -EINVAL);
	if (rc != 0)
		return rc;
	rc = posix_hold_dir(pf, &req->fr_obj, &fd_dir, &fst);
	if (rc != 0)
		return rc;
	rc = posix_hold_dir(pf, &req->u.rename.rn_to_dir, &td_dir, &tst);
	if (rc != 0) {
		posix_fd_rele(pf, fd_dir);
		return rc;
	}
	rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out;
	posix_wcc_pre(&fst, &req->u.rename.rn_from_wcc);
	posix_wcc_pre(&tst, &req->u.rename.rn_to_wcc);
	/* The inode renamed over, if any, to drop its cached fds once it is gone. */
	bool have_victim = fstatat(td_dir->pfd_fd, to, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (renameat(fd_dir->pfd_fd, from, td_dir->pfd_fd, to) != 0) {
		rc = -errno;
		goto out_post;
	}
	/* Both directories changed; each is durable once fsynced. */
	rc = posix_dir_sync(pf, td_dir);
	if (rc == 0 && td_dir != fd_dir)
		rc = posix_dir_sync(pf, fd_dir);
	if (have_victim)
		posix_fd_forget_if_unlinked(pf, (uint64_t)st.st_ino);
out_post:
	posix_wcc_post(pf, fd_dir->pfd_fd, &req->u.rename.rn_from_wcc);
	posix_wcc_post(pf, td_dir->pfd_fd, &req->u.rename.rn_to_wcc);
out:
	posix_fd_rele(pf, td_dir);
	posix_fd_rele(pf, fd_dir);
	return rc;
}

int posix_do_link(struct posix_fs *pf, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.link.ln_dir_wcc;
	struct posix_fd *o, *d;
	struct stat dst, st;
	char path[64];
	int rc;

	rc = posix_check_name(req->u.link.ln_name, -EEXIST);
	if (rc != 0)
		return rc;
	rc = posix_fd_hold(pf, &req->fr_obj, &o);
	if (rc != 0)
		return rc;
	if (o->pfd_type == FS_DIR) {
		posix_fd_rele(pf, o);
		return -EISDIR;
	}
	rc = posix_hold_dir(pf, &req->u.link.ln_dir, &d, &dst);
	if (rc != 0) {
		posix_fd_rele(pf, o);
		return rc;
	}
	rc = posix_cred_apply(req->fr_cred);
	if (rc != 0)
		goto out;
	posix_wcc_pre(&dst, wcc);
	/* linkat(fd, "", AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH, which the client's identity
	 * lacks; the /proc/self/fd link names the same inode (a symlink itself, not its target)
	 * and lets the kernel check the client's rights to make the link. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", o->pfd_fd);
	if (linkat(AT_FDCWD, path, d->pfd_fd, req->u.link.ln_name, AT_SYMLINK_FOLLOW) != 0) {
		rc = -errno;
		goto out_post;
	}
	/* The file's new link count is made durable with the file (syncfs for objects that cannot
	 * be fsynced through their O_PATH fd), the entry with its directory. On a journalling file
	 * system the link count and the entry are one transaction, which the directory's fsync
	 * commits. */
	if (pf->pf_journal)
		rc = 0;
	else if (o->pfd_type == FS_REG)
		rc = posix_fsync_fd(o->pfd_fd);
	else
		rc = syncfs(pf->pf_root_fd) == 0 ? 0 : -errno;
	if (rc == 0)
		rc = posix_dir_sync(pf, d);
	if (posix_stat_fd(o->pfd_fd, &st) == 0) {
		posix_attr_from_stat(pf, &st, &req->u.link.ln_attr);
		req->u.link.ln_attr_valid = true;
	}
out_post:
	posix_wcc_post(pf, d->pfd_fd, wcc);
out:
	posix_fd_rele(pf, d);
	posix_fd_rele(pf, o);
	return rc;
}

/* The cookie verifier: constant for a directory (cookies are getdents64 d_off values, which
 * ext4 and xfs keep valid while the directory changes), derived from its id so a cookie is not
 * taken for one of another directory. */
static void posix_dir_verf(const struct posix_fd *d, uint8_t verf[8])
{
	uint64_t h = sh_hash64(d->pfd_id.foi_bytes, d->pfd_id.foi_len, 0x706f736978ull);
	memcpy(verf, &h, 8);
}

struct posix_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* Fills one READDIR entry; returns the emit callback's answer. */
static bool posix_emit_entry(struct posix_fs *pf, struct fs_req *req, struct posix_fd *d,
			     const struct stat *dst, const struct posix_dirent64 *de)
{
	struct fs_dirent e;
	size_t len = strlen(de->d_name);
	bool dot = strcmp(de->d_name, ".") == 0;
	bool dotdot = strcmp(de->d_name, "..") == 0;
	bool self = dot || (dotdot && posix_is_root(pf, dst)); /* ".." of the root is the root */

	memset(&e, 0, sizeof(e));
	e.fd_fileid = self ? (uint64_t)dst->st_ino : de->d_ino;
	e.fd_cookie = (uint64_t)de->d_off;
	e.fd_name = de->d_name;
	e.fd_name_len = (uint32_t)len;
	if (req->u.readdir.rd_plus) {
		struct stat st;
		if (self) {
			e.fd_obj = d->pfd_id;
			e.fd_has_obj = true;
			posix_attr_from_stat(pf, dst, &e.fd_attr);
			e.fd_has_attr = true;
		} else {
			/* An entry gone since getdents64, or one we may not see, goes without; a
			 * mount point goes without its handle. */
			int id_rc;
			if (posix_entry_lookup(pf, d->pfd_fd, de->d_name, &st, &e.fd_obj, &id_rc) == 0) {
				posix_attr_from_stat(pf, &st, &e.fd_attr);
				e.fd_has_attr = true;
				e.fd_fileid = (uint64_t)st.st_ino;
				e.fd_has_obj = id_rc == 0;
			}
		}
	}
	return req->u.readdir.rd_emit(req, &e);
}

int posix_do_readdir(struct posix_fs *pf, struct fs_req *req)
{
	/* 16 KiB: room for about 500 entries of typical names; a READDIR reply holds fewer. */
	_Alignas(8) uint8_t buf[16384];
	struct posix_fd *d;
	struct stat dst;
	uint8_t verf[8];
	static const uint8_t zero_verf[8];
	int rc;

	rc = posix_hold_dir(pf, &req->fr_obj, &d, &dst);
	if (rc != 0)
		return rc;
	rc = posix_cred_apply(req->fr_cred);
	if (rc == 0)
		rc = posix_perm(req->fr_cred, d->pfd_fd, &dst, R_OK, false, false);
	if (rc != 0)
		goto out;
	posix_dir_verf(d, verf);
	/* A client that never saw a verifier sends zeros; any other mismatch is another
	 * directory's cookie. */
	if (req->u.readdir.rd_cookie != 0 && memcmp(req->u.readdir.rd_verf, verf, 8) != 0 &&
	    memcmp(req->u.readdir.rd_verf, zero_verf, 8) != 0) {
		rc = -SH_EBADCOOKIE;
		goto out;
	}
	memcpy(req->u.readdir.rd_verf_out, verf, 8);
	req->u.readdir.rd_eof = false;

	pthread_mutex_lock(&d->pfd_dir_lock);
	if (req->u.readdir.rd_cookie > (uint64_t)INT64_MAX ||
	    lseek(d->pfd_fd, (off_t)req->u.readdir.rd_cookie, SEEK_SET) < 0) {
		rc = -SH_EBADCOOKIE;
		goto out_unlock;
	}
	for (;;) {
		long n = syscall(SYS_getdents64, d->pfd_fd, buf, sizeof(buf));
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0) {
			req->u.readdir.rd_eof = true;
			break;
		}
		bool full = false;
		for (long pos = 0; pos < n;) {
			const struct posix_dirent64 *de = (const void *)(buf + pos);
			pos += de->d_reclen;
			if (!posix_emit_entry(pf, req, d, &dst, de)) {
				full = true;
				break;
			}
		}
		if (full)
			break;
	}
out_unlock:
	pthread_mutex_unlock(&d->pfd_dir_lock);
out:
	posix_attr_from_stat(pf, &dst, &req->u.readdir.rd_attr);
	req->u.readdir.rd_attr_valid = true;
	posix_fd_rele(pf, d);
	return rc;
}
