/* pclient.h: synchronous NFSv3 and MOUNT v3 calls over libnfs's raw RPC interface, for tests.
 *
 * libnfs's raw API is asynchronous: rpc_nfs3_*_async queues a call and a callback receives the
 * decoded result, which libnfs frees as soon as the callback returns. pc_* calls queue one call,
 * drive the connection with poll + rpc_service until the callback ran (or a deadline passed), and
 * hand back a private copy of the result: the callback re-encodes libnfs's result with its own XDR
 * routine and decodes that again into the caller's struct, so every pointer in it (handles, names,
 * READ data, directory entries) stays valid until pc_release or pc_disconnect. Arguments are the
 * wire structures themselves, so a test controls every field it sends.
 *
 * Return convention: 0 when a reply was received and decoded (the NFS status is then in
 * res->status), -1 when the call failed at the RPC level (connection lost, timeout, or an RPC
 * error such as GARBAGE_ARGS); pc_last_error names the cause. */
#ifndef SHALE_PCLIENT_H
#define SHALE_PCLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-mount.h>
#include <nfsc/libnfs-raw-nfs.h>

#define PC_FH_MAX 64 /* RFC 1813 NFS3_FHSIZE */

struct pc_keep; /* one captured result's memory */

struct pc_client {
	struct rpc_context *pc_rpc;
	struct pc_keep *pc_kept; /* results handed out since the last pc_release */
	char pc_err[256];
};

/* A file handle held by value, so it outlives the result it came from. */
struct pc_fh {
	uint32_t pf_len;
	char pf_data[PC_FH_MAX];
};

/* Connects by TCP to 127.0.0.1:port for program prog version vers, with AUTH_SYS uid/gid.
 * Returns 0 or -1 (pc_err says why; the client is then already cleaned up). */
int pc_connect(struct pc_client *c, uint16_t port, uint32_t prog, uint32_t vers, uint32_t uid,
	       uint32_t gid);
/* pc_connect with supplementary groups in the AUTH_SYS credential (at most 16 are sent). */
int pc_connect_groups(struct pc_client *c, uint16_t port, uint32_t prog, uint32_t vers,
		      uint32_t uid, uint32_t gid, uint32_t ngids, const uint32_t *gids);
/* Closes the connection and frees every result still held. */
void pc_disconnect(struct pc_client *c);
/* Frees every result handed out so far (their pointers become invalid). */
void pc_release(struct pc_client *c);
const char *pc_last_error(const struct pc_client *c);

/* Handles: copy in and out of the wire form. pc_fh_arg's result points into fh. */
void pc_fh_set(struct pc_fh *fh, const nfs_fh3 *wire);
nfs_fh3 pc_fh_arg(struct pc_fh *fh);
bool pc_fh_equal(const struct pc_fh *a, const struct pc_fh *b);

/* NFS version 3 (program 100003), RFC 1813 section 3.3. */
int pc_nfs3_null(struct pc_client *c);
int pc_nfs3_getattr(struct pc_client *c, GETATTR3args *a, GETATTR3res *r);
int pc_nfs3_setattr(struct pc_client *c, SETATTR3args *a, SETATTR3res *r);
int pc_nfs3_lookup(struct pc_client *c, LOOKUP3args *a, LOOKUP3res *r);
int pc_nfs3_access(struct pc_client *c, ACCESS3args *a, ACCESS3res *r);
int pc_nfs3_readlink(struct pc_client *c, READLINK3args *a, READLINK3res *r);
int pc_nfs3_read(struct pc_client *c, READ3args *a, READ3res *r);
int pc_nfs3_write(struct pc_client *c, WRITE3args *a, WRITE3res *r);
int pc_nfs3_create(struct pc_client *c, CREATE3args *a, CREATE3res *r);
int pc_nfs3_mkdir(struct pc_client *c, MKDIR3args *a, MKDIR3res *r);
int pc_nfs3_symlink(struct pc_client *c, SYMLINK3args *a, SYMLINK3res *r);
int pc_nfs3_mknod(struct pc_client *c, MKNOD3args *a, MKNOD3res *r);
int pc_nfs3_remove(struct pc_client *c, REMOVE3args *a, REMOVE3res *r);
int pc_nfs3_rmdir(struct pc_client *c, RMDIR3args *a, RMDIR3res *r);
int pc_nfs3_rename(struct pc_client *c, RENAME3args *a, RENAME3res *r);
int pc_nfs3_link(struct pc_client *c, LINK3args *a, LINK3res *r);
int pc_nfs3_readdir(struct pc_client *c, READDIR3args *a, READDIR3res *r);
int pc_nfs3_readdirplus(struct pc_client *c, READDIRPLUS3args *a, READDIRPLUS3res *r);
int pc_nfs3_fsstat(struct pc_client *c, FSSTAT3args *a, FSSTAT3res *r);
int pc_nfs3_fsinfo(struct pc_client *c, FSINFO3args *a, FSINFO3res *r);
int pc_nfs3_pathconf(struct pc_client *c, PATHCONF3args *a, PATHCONF3res *r);
int pc_nfs3_commit(struct pc_client *c, COMMIT3args *a, COMMIT3res *r);

/* MOUNT version 3 (program 100005), RFC 1813 section 5.2. */
int pc_mount3_null(struct pc_client *c);
int pc_mount3_mnt(struct pc_client *c, const char *path, mountres3 *r);
int pc_mount3_dump(struct pc_client *c, mountlist *r);
int pc_mount3_umnt(struct pc_client *c, const char *path);
int pc_mount3_umntall(struct pc_client *c);
int pc_mount3_export(struct pc_client *c, exports *r);

/* Helpers shared by the protocol tests. */
/* A sattr3 that sets only the mode. */
sattr3 pc_sattr_mode(uint32_t mode);
/* LOOKUP of name in dir: returns the nfsstat3, or 0xffffffff when the call itself failed (the
 * reason printed as a TAP comment); on NFS3_OK fills out and attr when they are not NULL. */
uint32_t pc_lookup(struct pc_client *c, struct pc_fh *dir, const char *name, struct pc_fh *out,
		   fattr3 *attr);

#endif
