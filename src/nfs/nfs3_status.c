/* nfs3_status.c: the one table that turns a negative errno or -SH_E* code into an nfsstat3.
 *
 * Back ends speak errno with its POSIX meaning (fs.h); the NFS layer never invents an nfsstat3
 * elsewhere except for the conditions only it can see (bad handles, access rules, argument
 * checks), and even those go through here as -SH_E* or errno codes where a name exists. */
#include <errno.h>

#include "nfs/nfs_impl.h"

struct nfs3_status_map {
	int nsm_errno; /* positive errno or SH_E* code */
	uint32_t nsm_status;
};

static const struct nfs3_status_map nfs3_status_table[] = {
	{EPERM, NFS3ERR_PERM},
	{ENOENT, NFS3ERR_NOENT},
	{EIO, NFS3ERR_IO},
	{ENXIO, NFS3ERR_NXIO},
	{EACCES, NFS3ERR_ACCES},
	{EEXIST, NFS3ERR_EXIST},
	{EXDEV, NFS3ERR_XDEV},
	{ENODEV, NFS3ERR_NODEV},
	{ENOTDIR, NFS3ERR_NOTDIR},
	{EISDIR, NFS3ERR_ISDIR},
	{EINVAL, NFS3ERR_INVAL},
	{EFBIG, NFS3ERR_FBIG},
	{ENOSPC, NFS3ERR_NOSPC},
	{EROFS, NFS3ERR_ROFS},
	{EMLINK, NFS3ERR_MLINK},
	{ENAMETOOLONG, NFS3ERR_NAMETOOLONG},
	{ENOTEMPTY, NFS3ERR_NOTEMPTY},
	{EDQUOT, NFS3ERR_DQUOT},
	{ESTALE, NFS3ERR_STALE},
	{EREMOTE, NFS3ERR_REMOTE},
	{SH_EBADHANDLE, NFS3ERR_BADHANDLE},
	{SH_ENOTSYNC, NFS3ERR_NOT_SYNC},
	{SH_EBADCOOKIE, NFS3ERR_BAD_COOKIE},
	{SH_ENOTSUPP, NFS3ERR_NOTSUPP},
	{SH_ETOOSMALL, NFS3ERR_TOOSMALL},
	{SH_ESERVERFAULT, NFS3ERR_SERVERFAULT},
	{SH_EBADTYPE, NFS3ERR_BADTYPE},
	{SH_EJUKEBOX, NFS3ERR_JUKEBOX},
	/* errno values with no nfsstat3 of their own, mapped as knfsd maps them */
	{EOPNOTSUPP, NFS3ERR_NOTSUPP},
	{ENOSYS, NFS3ERR_NOTSUPP},
	{EAGAIN, NFS3ERR_JUKEBOX},
	{ENOMEM, NFS3ERR_JUKEBOX},
	{ETIMEDOUT, NFS3ERR_JUKEBOX},
	{EOVERFLOW, NFS3ERR_INVAL},
	{E2BIG, NFS3ERR_FBIG},
	{ELOOP, NFS3ERR_ACCES},
	{EBADF, NFS3ERR_BADHANDLE},
	{ETXTBSY, NFS3ERR_ACCES},
	{EBUSY, NFS3ERR_ACCES},
};

uint32_t nfs3_status_from_errno(int err)
{
	if (SH_LIKELY(err == 0))
		return NFS3_OK;
	int pos = err < 0 ? -err : err;
	for (size_t i = 0; i < SH_ARRAY_SIZE(nfs3_status_table); i++)
		if (nfs3_status_table[i].nsm_errno == pos)
			return nfs3_status_table[i].nsm_status;
	log_ratelimited(LOG_WARN, "nfs: no nfsstat3 for error %d (%s), answering NFS3ERR_IO", err,
			sh_strerror(-pos));
	return NFS3ERR_IO;
}
