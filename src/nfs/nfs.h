/* nfs.h: the NFS layer: NFSv3 (RFC 1813) and MOUNT v3 (RFC 1813 appendix I) served over the rpc
 * layer on top of the asynchronous fs interface, with exports(5)-style access rules and keyed,
 * unforgeable file handles.
 *
 * Use: load the exports file (nfs_exports_load), create one struct fs per export (same order),
 * create the service (nfs_service_create, which takes the exports), register its two programs with
 * an rpc server (nfs_service_register) before the server starts. A reload (nfs_service_reload)
 * gives it new exports and file systems while it serves. Tear down in the reverse order: stop and
 * destroy the rpc server, then nfs_service_destroy, which gives every file system back through
 * the release function the service was created with. */
#ifndef SHALE_NFS_H
#define SHALE_NFS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "fs/fs.h"

struct rpc_server;

/* ---- exports ----
 * The file follows exports(5): one export per logical line, `/path client(opts) client2(opts)`,
 * '#' starts a comment, a backslash at the end of a line continues it. Client specs: `*`, an IPv4
 * or IPv6 address, a network (a.b.c.d/n, a.b.c.d/255.255.0.0, ipv6/n), or a host name, which is
 * resolved once, when the file is loaded (later DNS changes need a reload). Options: rw, ro
 * (default), root_squash (default), no_root_squash, all_squash, no_all_squash, anonuid=N,
 * anongid=N (default 65534), secure (default), insecure, sync, async (accepted, ignored: writes
 * follow the client's stable_how), fsid=N, subtree_check, no_subtree_check, wdelay, no_wdelay
 * (accepted, no effect). */
struct nfs_exports; /* a parsed exports file */

/* Parses the exports file at path. On success *out receives the exports (free with
 * nfs_exports_destroy) and 0 is returned. A malformed file returns -EINVAL with err (err_len
 * bytes, may be NULL) naming the line number and the reason; an unreadable one returns -errno. */
SH_MUST_CHECK int nfs_exports_load(const char *path, struct nfs_exports **out, char *err,
				   size_t err_len);
/* Frees exports; NULL is ignored. */
void nfs_exports_destroy(struct nfs_exports *exports);
/* Number of exports in file order. */
size_t nfs_exports_count(const struct nfs_exports *exports);
/* The path clients mount for export index (absolute, without trailing slash; "/POOL/FS" for a
 * pool's file system); owned by exports. */
const char *nfs_exports_path(const struct nfs_exports *exports, size_t index);
/* "POOL/FS" when the export's line named a pool's file system (a path without a leading slash,
 * two names of [A-Za-z0-9_.-]), NULL when it names a host directory. Owned by exports. */
const char *nfs_exports_dataset(const struct nfs_exports *exports, size_t index);
/* The export's file system id: the fsid= option, else a stable hash of the path. Handles carry it
 * to find their export. */
uint64_t nfs_exports_fsid(const struct nfs_exports *exports, size_t index);

/* ---- service ---- */
struct nfs_service_config {
	const char *nsc_state_dir;        /* holds handle.key; created (0700) if absent */
	struct nfs_exports *nsc_exports;  /* the service's from create on (even on failure) */
	struct fs **nsc_fs;               /* one per export, same order; each given back through
	                                   * nsc_release_fs once no exports generation uses it */
	void (*nsc_release_fs)(void *arg, struct fs *fs);
	void *nsc_release_arg;
};
struct nfs_service;

/* Creates the service: loads the handle MAC key from state_dir/handle.key, or creates it (random,
 * mode 0600) so that handles survive restarts, and reads every export's root object. Destroy with
 * nfs_service_destroy. Returns 0, -EINVAL (key file of the wrong size) or -errno. */
SH_MUST_CHECK int nfs_service_create(const struct nfs_service_config *config,
				     struct nfs_service **out);
/* Adds NFS (100003 v3) and MOUNT (100005 v3) to srv; call before rpc_server_start. Per-loop state
 * (free lists, client decision caches) is sized from rpc_server_nloops(srv). */
SH_MUST_CHECK int nfs_service_register(struct nfs_service *svc, struct rpc_server *srv);
/* Frees the service; the rpc server serving it must already be stopped. NULL is ignored. Every fs
 * is given back through nsc_release_fs. */
void nfs_service_destroy(struct nfs_service *svc);

/* Reloading the exports (exportfs -r): exports (owned by the service from here on, also on
 * failure) and fs (one per export, each given back through nsc_release_fs once no generation uses
 * it; on failure the caller keeps them) replace the current ones for every call that starts from
 * now on; a call already running ends with the generation it began with. Handles of an export no
 * longer listed get NFS3ERR_STALE. Call from a thread that is not one of the service's loops,
 * while the rpc server runs (it waits for each loop to finish its turn). Returns 0, or -errno
 * (the old exports stay). */
SH_MUST_CHECK int nfs_service_reload(struct nfs_service *svc, struct nfs_exports *exports,
				     struct fs **fs);
/* Frees the generations no call holds any more, giving their fs back. Not from a loop. */
void nfs_service_reap(struct nfs_service *svc);
/* The current generation's exports and each one's fs, for a reload to compare with. Only from
 * the thread that reloads. */
const struct nfs_exports *nfs_service_exports(struct nfs_service *svc);
struct fs *nfs_service_export_fs(struct nfs_service *svc, size_t index);

/* ---- for the lock manager (src/nlm) ---- */
struct rpc_call;
/* Resolves the file handle fh (len bytes) that the caller of call sent, under the current exports:
 * 0 with the export's fsid, the object's id and whether the caller's rule lets it write (*rw_out);
 * -SH_EBADHANDLE (not a handle this server issued), -ESTALE (no export has its fsid now) or
 * -EACCES (the export admits no such caller, or asks for a privileged port). From a loop thread
 * (the one of call). */
SH_MUST_CHECK int nfs_service_lock_file(struct nfs_service *svc, const struct rpc_call *call,
					const uint8_t *fh, size_t len, uint64_t *fsid_out,
					struct fs_obj_id *obj_out, bool *rw_out);

#endif
