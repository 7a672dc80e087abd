/* posix_cred.c: per-thread file-system identity switching and permission checks for the posix
 * back end.
 *
 * Linux keeps fsuid, fsgid and the supplementary group list per thread in the kernel; glibc's
 * setgroups() broadcasts to every thread of the process, so the group list is set with the raw
 * system call instead. Each thread remembers the identity it last installed (posix_tcred) and
 * only issues the syscalls for the parts that change, so a stream of requests from one user costs
 * no switching at all.
 *
 * Permission checks: the cache opens objects as root, so an fd from it carries no permission of
 * its own; READ, WRITE, READDIR, SETATTR of the size and ACCESS check explicitly. Root and the
 * owner are decided from the mode bits in user space (a POSIX ACL's owner entry is the mode's
 * owner bits, so this is exact even with ACLs); anyone else is checked by the kernel with
 * faccessat2(fd, "", AT_EMPTY_PATH | AT_EACCESS) under the thread's switched identity, which
 * honours group membership and ACLs. Namespace operations (lookup, create, remove, rename, link)
 * run as relative *at() calls under the switched identity and are checked by the kernel itself. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "posix/posix_impl.h"

#ifndef SYS_faccessat2
#define SYS_faccessat2 439 /* Linux 5.8, asm-generic and x86_64 numbering */
#endif

struct posix_tcred {
	/* Each part is known only once this thread installed it; a failed switch leaves it
	 * unknown, so the next request installs it again. */
	bool tc_uid_ok, tc_gid_ok, tc_groups_ok;
	uint32_t tc_uid;
	uint32_t tc_gid;
	uint32_t tc_ngids;
	uint32_t tc_gids[FS_MAX_GIDS];
};

static _Thread_local struct posix_tcred posix_tcred;

/* The process's own groups, captured once at file-system creation for posix_thread_cred_reset. */
static pthread_mutex_t posix_pgroups_lock = PTHREAD_MUTEX_INITIALIZER;
static bool posix_pgroups_saved;
static int posix_pgroups_n;
static gid_t posix_pgroups[FS_MAX_GIDS * 4];

void posix_cred_save_process_groups(void)
{
	pthread_mutex_lock(&posix_pgroups_lock);
	if (!posix_pgroups_saved) {
		int n = getgroups((int)SH_ARRAY_SIZE(posix_pgroups), posix_pgroups);
		posix_pgroups_n = n < 0 ? 0 : n;
		posix_pgroups_saved = true;
	}
	pthread_mutex_unlock(&posix_pgroups_lock);
}

static int posix_set_groups(size_t n, const gid_t *list)
{
	if (syscall(SYS_setgroups, n, list) != 0)
		return -errno;
	return 0;
}

/* setfsuid/setfsgid report the previous value, not failure; a second call reads back the value
 * now in force. Only done when it changes, so the check costs little. */
static int posix_set_fsuid(uint32_t uid)
{
	(void)setfsuid((uid_t)uid);
	if ((uint32_t)setfsuid((uid_t)-1) != uid)
		return -EPERM;
	return 0;
}

static int posix_set_fsgid(uint32_t gid)
{
	(void)setfsgid((gid_t)gid);
	if ((uint32_t)setfsgid((gid_t)-1) != gid)
		return -EPERM;
	return 0;
}

int posix_cred_apply(const struct fs_cred *cred)
{
	struct posix_tcred *tc = &posix_tcred;
	uint32_t ngids = SH_MIN(cred->fc_ngids, (uint32_t)FS_MAX_GIDS);
	int rc;

	if (!tc->tc_groups_ok || tc->tc_ngids != ngids ||
	    memcmp(tc->tc_gids, cred->fc_gids, ngids * sizeof(cred->fc_gids[0])) != 0) {
		gid_t list[FS_MAX_GIDS];
		for (uint32_t i = 0; i < ngids; i++)
			list[i] = (gid_t)cred->fc_gids[i];
		tc->tc_groups_ok = false;
		rc = posix_set_groups(ngids, list);
		if (rc != 0)
			return rc;
		memcpy(tc->tc_gids, cred->fc_gids, ngids * sizeof(cred->fc_gids[0]));
		tc->tc_ngids = ngids;
		tc->tc_groups_ok = true;
	}
	if (!tc->tc_gid_ok || tc->tc_gid != cred->fc_gid) {
		tc->tc_gid_ok = false;
		rc = posix_set_fsgid(cred->fc_gid);
		if (rc != 0)
			return rc;
		tc->tc_gid = cred->fc_gid;
		tc->tc_gid_ok = true;
	}
	if (!tc->tc_uid_ok || tc->tc_uid != cred->fc_uid) {
		tc->tc_uid_ok = false;
		rc = posix_set_fsuid(cred->fc_uid);
		if (rc != 0)
			return rc;
		tc->tc_uid = cred->fc_uid;
		tc->tc_uid_ok = true;
	}
	return 0;
}

int posix_cred_root(void)
{
	struct posix_tcred *tc = &posix_tcred;

	if (tc->tc_uid_ok && tc->tc_uid == 0)
		return 0;
	tc->tc_uid_ok = false;
	int rc = posix_set_fsuid(0);
	if (rc != 0)
		return rc;
	tc->tc_uid = 0;
	tc->tc_uid_ok = true;
	return 0;
}

int posix_thread_cred_reset(void)
{
	struct posix_tcred *tc = &posix_tcred;
	int rc;

	posix_cred_save_process_groups();
	tc->tc_uid_ok = tc->tc_gid_ok = tc->tc_groups_ok = false;
	rc = posix_set_groups((size_t)posix_pgroups_n, posix_pgroups);
	if (rc != 0)
		return rc;
	rc = posix_set_fsgid((uint32_t)getegid());
	if (rc != 0)
		return rc;
	return posix_set_fsuid((uint32_t)geteuid());
}

bool posix_in_group(const struct fs_cred *cred, uint32_t gid)
{
	if (cred->fc_gid == gid)
		return true;
	for (uint32_t i = 0; i < cred->fc_ngids && i < FS_MAX_GIDS; i++)
		if (cred->fc_gids[i] == gid)
			return true;
	return false;
}

/* The rwx bits (as R_OK|W_OK|X_OK) that the mode gives cred's class; for the owner and root it is
 * exact, for the others it ignores ACLs and is used only as a hint. */
static int posix_mode_bits(const struct fs_cred *cred, const struct stat *st)
{
	mode_t m = st->st_mode;
	if (cred->fc_uid == 0) {
		int bits = R_OK | W_OK;
		if (S_ISDIR(m) || (m & (S_IXUSR | S_IXGRP | S_IXOTH)))
			bits |= X_OK;
		return bits;
	}
	if (cred->fc_uid == (uint32_t)st->st_uid)
		return (int)((m >> 6) & 7);
	if (posix_in_group(cred, (uint32_t)st->st_gid))
		return (int)((m >> 3) & 7);
	return (int)(m & 7);
}

static int posix_kernel_access(int fd, int mask)
{
	if (syscall(SYS_faccessat2, fd, "", mask, AT_EMPTY_PATH | AT_EACCESS) == 0)
		return 0;
	return -errno;
}

int posix_perm(const struct fs_cred *cred, int fd, const struct stat *st, int mask,
	       bool owner_override, bool read_if_exec)
{
	bool owner = cred->fc_uid == (uint32_t)st->st_uid;

	if (mask == 0)
		return 0;
	if (cred->fc_uid == 0 || owner) {
		int bits = posix_mode_bits(cred, st);
		if (owner && owner_override)
			bits |= R_OK | W_OK;
		if (read_if_exec && (bits & X_OK))
			bits |= R_OK;
		return (bits & mask) == mask ? 0 : -EACCES;
	}
	int rc = posix_kernel_access(fd, mask);
	if (rc == -EACCES && read_if_exec && mask == R_OK)
		rc = posix_kernel_access(fd, X_OK);
	return rc;
}

uint32_t posix_access_bits(const struct fs_cred *cred, int fd, const struct stat *st,
			   uint32_t want)
{
	int bits;

	if (cred->fc_uid == 0 || cred->fc_uid == (uint32_t)st->st_uid) {
		bits = posix_mode_bits(cred, st);
	} else {
		bits = 0;
		if (posix_kernel_access(fd, R_OK) == 0)
			bits |= R_OK;
		if (posix_kernel_access(fd, W_OK) == 0)
			bits |= W_OK;
		if (posix_kernel_access(fd, X_OK) == 0)
			bits |= X_OK;
	}

	/* Mapping of ACCESS3 bits to rwx, as RFC 1813 section 3.3.4 describes them. */
	uint32_t granted = 0;
	if (S_ISDIR(st->st_mode)) {
		if (bits & R_OK)
			granted |= FS_ACCESS_READ;
		if (bits & X_OK)
			granted |= FS_ACCESS_LOOKUP;
		if ((bits & (W_OK | X_OK)) == (W_OK | X_OK))
			granted |= FS_ACCESS_MODIFY | FS_ACCESS_EXTEND | FS_ACCESS_DELETE;
	} else {
		if (bits & R_OK)
			granted |= FS_ACCESS_READ;
		if (bits & W_OK)
			granted |= FS_ACCESS_MODIFY | FS_ACCESS_EXTEND;
		if ((bits & X_OK) && S_ISREG(st->st_mode))
			granted |= FS_ACCESS_EXECUTE;
	}
	return granted & want;
}
