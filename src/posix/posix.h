/* posix.h: the posix back end: exports an existing host directory through the fs interface.
 *
 * Objects are named by the kernel's own file handles (name_to_handle_at), reopened with
 * open_by_handle_at, so a handle survives a server restart and a deleted file is detected as
 * ESTALE. Nothing outside the root directory is reachable: ".." of the root is the root, and a
 * handle whose object lies outside the exported tree is refused. Symbolic links are never followed
 * on the server side. Requests run on a small pool of worker threads so that a request waiting on
 * the disk (fsync of a stable write or of a directory after a metadata change) never blocks an
 * event loop; completions return to the requesting loop via fs_req_complete. */
#ifndef SHALE_POSIX_H
#define SHALE_POSIX_H

#include "base/base.h"
#include "fs/fs.h"

struct posix_fs_config {
	const char *pfc_root_path;   /* directory to export; must exist */
	uint64_t pfc_fsid;           /* reported as fattr3.fsid */
	unsigned pfc_fd_cache_max;   /* open files kept cached (default 1024) */
	unsigned pfc_nworkers;       /* worker threads (default 8) */
};

/* Opens the directory and creates a file system on it. Destroy with fs_destroy(). Returns 0,
 * -ENOTDIR, -EOPNOTSUPP (the host file system has no file handles) or -errno. */
SH_MUST_CHECK int posix_fs_create(const struct posix_fs_config *config, struct fs **out);

#endif
