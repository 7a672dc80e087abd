/* posix.h: the posix back end: exports an existing host directory through the fs interface.
 *
 * Objects are named by the kernel's own file handles (name_to_handle_at), reopened with
 * open_by_handle_at, so a handle survives a server restart and a deleted file is detected as
 * ESTALE. Nothing outside the root directory is reachable: ".." of the root is the root, and a
 * handle whose object lies outside the exported tree is refused. Symbolic links are never followed
 * on the server side. Requests that can be answered from the page cache (GETATTR, LOOKUP, ACCESS,
 * READLINK, READ of cached data, READDIR, FSSTAT) run on the submitting thread and complete before
 * fs_submit returns; requests that wait on the disk (a READ of uncached data, every WRITE that
 * cannot be buffered without blocking, every stable WRITE, COMMIT and every metadata change, which
 * is made durable before completion) run on a small pool of worker threads and complete through
 * fs_req_complete, so an event loop never blocks on a flush.
 *
 * Thread identity: each request runs with its fr_cred as the thread's file-system identity
 * (fsuid, fsgid and supplementary groups, all per thread on Linux). fs_submit may therefore leave
 * the submitting thread with a client's fs identity; a thread that later opens files of its own
 * calls posix_thread_cred_reset first. The process must run as root (CAP_DAC_READ_SEARCH for
 * open_by_handle_at, CAP_SETUID/CAP_SETGID for the identity switch). */
#ifndef SHALE_POSIX_H
#define SHALE_POSIX_H

#include "base/base.h"
#include "fs/fs.h"

struct posix_fs_config {
	const char *pfc_root_path;   /* directory to export; must exist */
	uint64_t pfc_fsid;           /* reported as fattr3.fsid */
	unsigned pfc_fd_cache_max;   /* open fds kept cached (0 = default 16384); a regular file
	                              * being written holds two; requests in flight may briefly
	                              * hold more */
	unsigned pfc_nworkers;       /* worker threads (0 = default 32) */
	unsigned pfc_idcache_slots;  /* name -> id cache entries, rounded up to a power of two
	                              * (0 = default 65536, 64 bytes each, touched as it fills) */
	bool pfc_no_write_behind;    /* leave UNSTABLE data to the kernel's writeback alone
	                              * (posix_writeback.c; on by default) */
	uint64_t pfc_write_behind_burst; /* bytes of UNSTABLE data in one file that start its
	                              * write-out at once (0 = default 32 MiB) */
	unsigned pfc_fd_idle_s;      /* an entry of the fd cache that no request has used for
	                              * about this many seconds is closed (0 = default 5), so that
	                              * the space of a file removed on the host comes back */
	bool pfc_buffered_writes;    /* every WRITE through the host's page cache, as knfsd's
	                              * default (default: large aligned UNSTABLE WRITEs go to the
	                              * disk with O_DIRECT, posix_direct.c) */
};

/* Opens the directory and creates a file system on it. Destroy with fs_destroy(). Returns 0,
 * -ENOTDIR, -EOPNOTSUPP (the host file system has no file handles) or -errno. */
SH_MUST_CHECK int posix_fs_create(const struct posix_fs_config *config, struct fs **out);

/* Gives the calling thread back the process's own fs identity (fsuid/fsgid = effective uid/gid,
 * the process's supplementary groups) after fs_submit ran requests on it. Returns 0 or -errno. */
SH_MUST_CHECK int posix_thread_cred_reset(void);

#endif
