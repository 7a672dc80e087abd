/* nfs_impl.h: what the files of the nfs module share: protocol constants, the exports model, the
 * handle codec, the XDR argument and result structures, the per-call state and the service. */
#ifndef SHALE_NFS_IMPL_H
#define SHALE_NFS_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/base.h"
#include "fs/fs.h"
#include "nfs/nfs.h"
#include "rpc/rpc.h"
#include "xdr/xdr.h"

/* ---- protocol numbers (RFC 1813) ---- */
#define NFS3_PROGRAM 100003u
#define NFS3_VERSION 3u
#define MOUNT_PROGRAM 100005u
#define MOUNT_V3 3u
#define NFS3_FHSIZE 64u          /* RFC 1813 section 2.4 */
#define NFS3_COOKIEVERFSIZE 8u
#define NFS3_CREATEVERFSIZE 8u
#define NFS3_WRITEVERFSIZE 8u
#define MNT3_PATHLEN 1024u       /* MNTPATHLEN, appendix I */
#define MNT3_NAMELEN 255u        /* MNTNAMLEN */
/* What this server advertises in FSINFO and accepts per READ/WRITE (the rpc record limit is
 * 1 MiB + 4 KiB so a full 1 MiB WRITE fits). */
#define NFS3_IO_MAX (1024u * 1024u)
#define NFS3_DTPREF (64u * 1024u)
/* Over UDP a reply must fit one datagram: READ data and READDIR replies are capped here (the
 * largest rsize Linux uses over UDP). */
#define NFS3_UDP_IO_MAX (32u * 1024u)
/* Upper bound accepted for a handle's length when decoding: longer than NFS3_FHSIZE so that an
 * oversized handle is answered NFS3ERR_BADHANDLE rather than GARBAGE_ARGS. */
#define NFS3_FH_DECODE_MAX 1024u
/* Names longer than FS_NAME_MAX are answered NAMETOOLONG; above this they are garbage. */
#define NFS3_NAME_DECODE_MAX 8192u

enum nfs3_proc {
	NFS3PROC_NULL = 0,
	NFS3PROC_GETATTR = 1,
	NFS3PROC_SETATTR = 2,
	NFS3PROC_LOOKUP = 3,
	NFS3PROC_ACCESS = 4,
	NFS3PROC_READLINK = 5,
	NFS3PROC_READ = 6,
	NFS3PROC_WRITE = 7,
	NFS3PROC_CREATE = 8,
	NFS3PROC_MKDIR = 9,
	NFS3PROC_SYMLINK = 10,
	NFS3PROC_MKNOD = 11,
	NFS3PROC_REMOVE = 12,
	NFS3PROC_RMDIR = 13,
	NFS3PROC_RENAME = 14,
	NFS3PROC_LINK = 15,
	NFS3PROC_READDIR = 16,
	NFS3PROC_READDIRPLUS = 17,
	NFS3PROC_FSSTAT = 18,
	NFS3PROC_FSINFO = 19,
	NFS3PROC_PATHCONF = 20,
	NFS3PROC_COMMIT = 21,
	NFS3PROC_COUNT = 22,
};

enum nfsstat3 {
	NFS3_OK = 0,
	NFS3ERR_PERM = 1,
	NFS3ERR_NOENT = 2,
	NFS3ERR_IO = 5,
	NFS3ERR_NXIO = 6,
	NFS3ERR_ACCES = 13,
	NFS3ERR_EXIST = 17,
	NFS3ERR_XDEV = 18,
	NFS3ERR_NODEV = 19,
	NFS3ERR_NOTDIR = 20,
	NFS3ERR_ISDIR = 21,
	NFS3ERR_INVAL = 22,
	NFS3ERR_FBIG = 27,
	NFS3ERR_NOSPC = 28,
	NFS3ERR_ROFS = 30,
	NFS3ERR_MLINK = 31,
	NFS3ERR_NAMETOOLONG = 63,
	NFS3ERR_NOTEMPTY = 66,
	NFS3ERR_DQUOT = 69,
	NFS3ERR_STALE = 70,
	NFS3ERR_REMOTE = 71,
	NFS3ERR_BADHANDLE = 10001,
	NFS3ERR_NOT_SYNC = 10002,
	NFS3ERR_BAD_COOKIE = 10003,
	NFS3ERR_NOTSUPP = 10004,
	NFS3ERR_TOOSMALL = 10005,
	NFS3ERR_SERVERFAULT = 10006,
	NFS3ERR_BADTYPE = 10007,
	NFS3ERR_JUKEBOX = 10008,
};

enum mount3_proc {
	MOUNTPROC3_NULL = 0,
	MOUNTPROC3_MNT = 1,
	MOUNTPROC3_DUMP = 2,
	MOUNTPROC3_UMNT = 3,
	MOUNTPROC3_UMNTALL = 4,
	MOUNTPROC3_EXPORT = 5,
	MOUNTPROC3_COUNT = 6,
};
enum mountstat3 {
	MNT3_OK = 0,
	MNT3ERR_PERM = 1,
	MNT3ERR_NOENT = 2,
	MNT3ERR_IO = 5,
	MNT3ERR_ACCES = 13,
	MNT3ERR_NOTDIR = 20,
	MNT3ERR_INVAL = 22,
	MNT3ERR_NAMETOOLONG = 63,
	MNT3ERR_NOTSUPP = 10004,
	MNT3ERR_SERVERFAULT = 10006,
};

/* FSINFO properties bits (RFC 1813 section 3.3.19). */
enum { NFS3_FSF_LINK = 0x1, NFS3_FSF_SYMLINK = 0x2, NFS3_FSF_HOMOGENEOUS = 0x8, NFS3_FSF_CANSETTIME = 0x10 };

/* ---- status mapping (nfs3_status.c) ---- */
/* The nfsstat3 for 0, a negative errno or a -SH_E* code; unknown codes map to NFS3ERR_IO. */
uint32_t nfs3_status_from_errno(int err);

/* ---- exports (nfs_exports.c) ---- */
/* Addresses are kept as 16 bytes, IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one comparison
 * serves both families. */
struct nfs_addr {
	uint8_t na_bytes[16];
};

enum nfs_client_kind {
	NFS_CLIENT_HOST = 0, /* an address, or a host name resolved to addresses at load time */
	NFS_CLIENT_NET = 1,  /* address/prefix */
	NFS_CLIENT_ANY = 2,  /* `*` */
};

enum {
	NFS_EXP_RW = 0x01,
	NFS_EXP_ROOT_SQUASH = 0x02,
	NFS_EXP_ALL_SQUASH = 0x04,
	NFS_EXP_SECURE = 0x08,
	NFS_EXP_ASYNC = 0x10,
};
#define NFS_ANON_ID_DEFAULT 65534u /* knfsd's default anonuid/anongid ("nobody") */

struct nfs_client_rule {
	char *ncr_spec;               /* the client spec as written (EXPORT's group name) */
	enum nfs_client_kind ncr_kind;
	struct nfs_addr *ncr_addrs;   /* HOST: every address the spec names */
	size_t ncr_naddrs;
	struct nfs_addr ncr_net;      /* NET: network address, masked */
	unsigned ncr_prefix;          /* NET: prefix length over the 128-bit form */
	uint32_t ncr_flags;           /* NFS_EXP_* */
	uint32_t ncr_anonuid;
	uint32_t ncr_anongid;
	unsigned ncr_line;            /* where the rule was written, for messages */
};

struct nfs_export {
	char *ne_path;    /* the path clients mount: a host directory, or "/POOL/FS" */
	bool ne_dataset;  /* the line named a pool's file system as POOL/FS (ne_path + 1) */
	uint64_t ne_fsid;
	bool ne_fsid_explicit;
	struct nfs_client_rule *ne_rules;
	size_t ne_nrules;
	unsigned ne_line;
};

struct nfs_exports {
	struct nfs_export *nx_exports;
	size_t nx_count;
};

/* Parses exports text (len bytes, need not be NUL-terminated); as nfs_exports_load. */
SH_MUST_CHECK int nfs_exports_parse(const char *text, size_t len, struct nfs_exports **out,
				    char *err, size_t err_len);
/* Index of the export with this path (trailing slashes ignored), or -1. */
long nfs_exports_find_path(const struct nfs_exports *exports, const char *path, size_t path_len);
/* The normalised address of a peer; returns 0 or -EAFNOSUPPORT. */
SH_MUST_CHECK int nfs_addr_from_sockaddr(const struct sockaddr *sa, socklen_t len,
					 struct nfs_addr *out);
/* The rule of export that applies to a client: exact hosts first, then networks, then `*`
 * (exports(5) precedence), in file order within each class. Returns the rule index or -1. */
long nfs_export_match(const struct nfs_export *exp, const struct nfs_addr *addr);
/* The credential the back end sees, per the rule's squashing options. AUTH_NONE callers are
 * the anonymous user. */
void nfs_squash_cred(const struct nfs_client_rule *rule, const struct rpc_cred *in,
		     struct fs_cred *out);

/* ---- file handles (nfs_handle.c) ----
 * Format (all integers big-endian):
 *   offset  size  field
 *   0       1     version (NFS_FH_VERSION)
 *   1       1     L = length of the back end's object id (0..FS_OBJ_ID_MAX)
 *   2       8     fsid of the export
 *   10      L     fs_obj_id bytes
 *   10+L    8     MAC: SipHash-2-4 over bytes [0, 10+L) under the server's 128-bit key
 * Total 18 + L bytes, at most 58 <= NFS3_FHSIZE. */
#define NFS_FH_VERSION 1u
#define NFS_FH_HDR_LEN 10u
#define NFS_FH_MAC_LEN 8u
#define NFS_FH_MIN_LEN (NFS_FH_HDR_LEN + NFS_FH_MAC_LEN)
#define NFS_FH_MAX_LEN (NFS_FH_MIN_LEN + FS_OBJ_ID_MAX)
#define NFS_HANDLE_KEY_LEN 16u

struct nfs_handle_key {
	uint64_t nhk_k0, nhk_k1;
};
struct nfs_fh {
	uint32_t nf_len;
	uint8_t nf_bytes[NFS3_FHSIZE];
};

/* Key from 16 bytes (little-endian halves, as SipHash defines). */
void nfs_handle_key_init(struct nfs_handle_key *key, const uint8_t bytes[NFS_HANDLE_KEY_LEN]);
/* SipHash-2-4 of data under key. */
uint64_t nfs_siphash24(const struct nfs_handle_key *key, const void *data, size_t len);
/* Builds the handle of obj in the export with fsid. */
void nfs_handle_encode(const struct nfs_handle_key *key, uint64_t fsid, const struct fs_obj_id *obj,
		       struct nfs_fh *out);
/* Checks a handle received from a client. Returns 0 with the fsid and object id, or
 * -SH_EBADHANDLE for a handle that is malformed, too short or long, or fails the MAC. */
SH_MUST_CHECK int nfs_handle_decode(const struct nfs_handle_key *key, const uint8_t *fh,
				    size_t len, uint64_t *fsid_out, struct fs_obj_id *obj_out);

/* ---- XDR arguments (nfs3_xdr.c) ----
 * Opaque and string arguments point into the call's record (zero copy). */
struct nfs3_bytes {
	const uint8_t *nb_data;
	uint32_t nb_len;
};
struct nfs3_diropargs {
	struct nfs3_bytes da_dir;
	struct nfs3_bytes da_name;
};

union nfs3_args {
	struct nfs3_bytes fh; /* GETATTR READLINK FSSTAT FSINFO PATHCONF */
	struct {
		struct nfs3_bytes fh;
		struct fs_sattr sattr;
		bool guard;
		struct fs_time guard_ctime;
	} setattr;
	struct nfs3_diropargs dirop; /* LOOKUP REMOVE RMDIR */
	struct {
		struct nfs3_bytes fh;
		uint32_t access;
	} access;
	struct {
		struct nfs3_bytes fh;
		uint64_t offset;
		uint32_t count;
	} read; /* READ, COMMIT */
	struct {
		struct nfs3_bytes fh;
		uint64_t offset;
		uint32_t count;
		uint32_t stable;
		struct nfs3_bytes data;
	} write;
	struct {
		struct nfs3_diropargs where;
		uint32_t mode; /* FS_CREATE_*; MKDIR/SYMLINK/MKNOD: UNCHECKED */
		struct fs_sattr sattr;
		uint8_t verf[NFS3_CREATEVERFSIZE];
		uint32_t type;         /* MKNOD: ftype3 */
		uint32_t major, minor; /* MKNOD of CHR/BLK */
		struct nfs3_bytes target; /* SYMLINK */
	} create; /* CREATE MKDIR SYMLINK MKNOD */
	struct {
		struct nfs3_diropargs from;
		struct nfs3_diropargs to;
	} rename;
	struct {
		struct nfs3_bytes fh;
		struct nfs3_diropargs link;
	} link;
	struct {
		struct nfs3_bytes dir;
		uint64_t cookie;
		uint8_t verf[NFS3_COOKIEVERFSIZE];
		uint32_t dircount; /* READDIRPLUS only; READDIR: = count */
		uint32_t count;    /* READDIR count, READDIRPLUS maxcount */
	} readdir;
};

/* Decoders: fill args from dec; return 0 or -EBADMSG (GARBAGE_ARGS). */
typedef int (*nfs3_dec_fn)(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_void(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_fh(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_setattr(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_dirop(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_access(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_read(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_write(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_create(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_mkdir(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_symlink(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_mknod(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_rename(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_link(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_readdir(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_readdirplus(struct xdr_dec *dec, union nfs3_args *args);
int nfs3_dec_commit(struct xdr_dec *dec, union nfs3_args *args);
/* The decoder the procedure table (nfs3_proc.c) gives procedure proc, or NULL past the table. */
nfs3_dec_fn nfs3_proc_decoder(uint32_t proc);

/* ---- XDR results (nfs3_xdr.c) ----
 * Every result starts with its status. Pointers are NULL when the item is absent (post_op_attr
 * false, pre_op_attr false, post_op_fh3 false); the encoders then write the "absent" arm, so an
 * early error reply is just a zeroed result with its status set. */
struct nfs3_res_common {
	uint32_t status;
};
union nfs3_res {
	struct nfs3_res_common common;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
	} attrstat; /* GETATTR */
	struct {
		uint32_t status;
		const struct fs_wcc *wcc;
	} wccstat; /* SETATTR REMOVE RMDIR */
	struct {
		uint32_t status;
		const struct nfs_fh *fh;
		const struct fs_attr *obj_attr;
		const struct fs_attr *dir_attr;
	} lookup;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		uint32_t access;
	} access;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		const char *target;
		uint32_t len;
	} readlink;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		uint32_t count; /* data follows as the call's bulk segment */
		bool eof;
	} read;
	struct {
		uint32_t status;
		const struct fs_wcc *wcc;
		uint32_t count;
		uint32_t committed;
		uint8_t verf[NFS3_WRITEVERFSIZE];
	} write; /* also COMMIT (count, committed unused) */
	struct {
		uint32_t status;
		const struct nfs_fh *fh;
		const struct fs_attr *attr;
		const struct fs_wcc *dir_wcc;
	} create; /* CREATE MKDIR SYMLINK MKNOD */
	struct {
		uint32_t status;
		const struct fs_wcc *from_wcc;
		const struct fs_wcc *to_wcc;
	} rename;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		const struct fs_wcc *dir_wcc;
	} link;
	struct {
		uint32_t status;
		const struct fs_attr *dir_attr;
	} readdir; /* the failure arm; success is encoded incrementally */
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		uint64_t tbytes, fbytes, abytes, tfiles, ffiles, afiles;
		uint32_t invarsec;
	} fsstat;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		uint32_t rtmax, rtpref, rtmult, wtmax, wtpref, wtmult, dtpref;
		uint64_t maxfilesize;
		struct fs_time time_delta;
		uint32_t properties;
	} fsinfo;
	struct {
		uint32_t status;
		const struct fs_attr *attr;
		uint32_t linkmax, name_max;
		bool no_trunc, chown_restricted, case_insensitive, case_preserving;
	} pathconf;
};

typedef void (*nfs3_enc_fn)(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_void(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_getattr(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_wccstat(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_lookup(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_access(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_readlink(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_read(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_write(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_create(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_rename(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_link(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_readdir_fail(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_fsstat(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_fsinfo(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_pathconf(struct xdr_enc *enc, const union nfs3_res *res);
void nfs3_enc_commit(struct xdr_enc *enc, const union nfs3_res *res);

/* Encoded sizes (RFC 1813 section 2.6 / 3.3) used to bound replies. */
#define NFS3_FATTR_BYTES 84u
#define NFS3_POST_OP_ATTR_MAX (4u + NFS3_FATTR_BYTES)
#define NFS3_PRE_OP_ATTR_MAX (4u + 24u)
#define NFS3_WCC_MAX (NFS3_PRE_OP_ATTR_MAX + NFS3_POST_OP_ATTR_MAX)
#define NFS3_POST_OP_FH_MAX (4u + 4u + NFS3_FHSIZE)
/* READDIR/READDIRPLUS reply head as this server sizes it: status, dir post_op_attr (full), verf. */
#define NFS3_READDIR_HEAD_MAX (4u + NFS3_POST_OP_ATTR_MAX + NFS3_COOKIEVERFSIZE)
#define NFS3_READDIR_TAIL_BYTES 8u /* entries list terminator + eof */

void nfs3_enc_fattr(struct xdr_enc *enc, const struct fs_attr *attr);
void nfs3_enc_post_op_attr(struct xdr_enc *enc, const struct fs_attr *attr);
void nfs3_enc_wcc(struct xdr_enc *enc, const struct fs_wcc *wcc);
/* Wire bytes of one entry3 / entryplus3 (value_follows included). */
size_t nfs3_entry_bytes(uint32_t name_len);
size_t nfs3_entryplus_bytes(uint32_t name_len, const struct nfs_fh *fh, bool has_attr);
/* Writes the head of a successful READDIR(PLUS) reply over the first bytes of the result. The
 * caller reserved NFS3_READDIR_HEAD_MAX bytes before the entries; when dir_attr is absent the
 * entries are moved down so the reply stays contiguous. */
void nfs3_enc_readdir_head(struct xdr_enc *enc, const struct fs_attr *dir_attr,
			   const uint8_t verf[NFS3_COOKIEVERFSIZE]);
void nfs3_enc_entry(struct xdr_enc *enc, uint64_t fileid, const char *name, uint32_t name_len,
		    uint64_t cookie);
void nfs3_enc_entryplus(struct xdr_enc *enc, uint64_t fileid, const char *name, uint32_t name_len,
			uint64_t cookie, const struct fs_attr *attr, const struct nfs_fh *fh);
void nfs3_enc_readdir_tail(struct xdr_enc *enc, bool eof);

/* ---- the service (nfs_service.c) ---- */
struct nfs3_call;

/* Per-loop state: touched only on its loop's thread. */
#define NFS_CLIENT_CACHE_SLOTS 256u
#define NFS_CALL_FREE_MAX 256u
struct nfs_client_cache_slot {
	struct nfs_addr ncs_addr;
	uint64_t ncs_gen;     /* the exports' generation the decision was made under */
	uint32_t ncs_export;  /* export index + 1; 0 = empty slot */
	int32_t ncs_rule;     /* rule index or -1 (not allowed) */
};
struct nfs_loop_state {
	struct nfs_client_cache_slot nls_cache[NFS_CLIENT_CACHE_SLOTS];
	struct nfs3_call *nls_free;
	unsigned nls_nfree;
};

struct nfs_export_rt {
	const struct nfs_export *ner_export;
	struct fs *ner_fs;
	uint64_t ner_fsid;
	struct fs_obj_id ner_root;
	size_t ner_index;
	uint64_t ner_gen; /* its table's generation */
};

/* One generation of the exports (nfs_service.c): the parsed file (owned) and each export's
 * runtime entry. ns_table is the current one. A call holds the table it resolved its handle or
 * path against (nt_refs) until it ends, so a reload never frees what a call still uses. */
struct nfs_table {
	struct nfs_exports *nt_exports;
	struct nfs_export_rt *nt_rt;
	size_t nt_count;
	uint64_t nt_gen;
	atomic_long nt_refs;       /* calls holding it, plus one while it is current */
	struct nfs_table *nt_next; /* on the retired list */
};

struct nfs_mount_entry {
	char nme_host[64];    /* numeric client address */
	char *nme_path;       /* the directory mounted (normalised); owned by the entry */
};

struct nfs_service {
	struct nfs_handle_key ns_key;
	_Atomic(struct nfs_table *) ns_table;  /* the current exports */
	struct nfs_table *ns_retired;           /* older ones, freed once no call holds them */
	pthread_mutex_t ns_table_lock;          /* guards ns_retired and reloads */
	void (*ns_release_fs)(void *arg, struct fs *fs);
	void *ns_release_arg;
	struct loop **ns_loopv;                 /* the rpc server's loops (the reload's barrier) */
	struct nfs_loop_state *ns_loops; /* one per loop of the rpc server */
	unsigned ns_nloops;
	/* loop_index() -> that loop's state (loop indexes are process-wide, so the server's loops
	 * need not be 0..n-1); NULL for loops the service does not know */
	struct nfs_loop_state **ns_loop_map;
	unsigned ns_loop_map_len;
	pthread_mutex_t ns_mount_lock;   /* guards the mount list */
	struct nfs_mount_entry *ns_mounts;
	size_t ns_nmounts, ns_mounts_cap;
};

/* The outcome of checking a caller against an export. */
enum nfs_access_verdict {
	NFS_ACCESS_OK = 0,
	NFS_ACCESS_DENIED = 1,  /* no rule matches the client */
	NFS_ACCESS_INSECURE = 2 /* `secure` export, source port >= 1024 */
};
/* Finds the rule for the caller of call on export rt, through the loop's decision cache. */
enum nfs_access_verdict nfs_service_check(struct nfs_service *svc, const struct rpc_call *call,
					  const struct nfs_export_rt *rt,
					  const struct nfs_client_rule **rule_out);
/* The current exports, held for a call (on a loop thread); give it back with nfs_table_rele. */
struct nfs_table *nfs_table_hold(struct nfs_service *svc);
void nfs_table_rele(struct nfs_table *table);
/* The export of table whose fsid this is, or NULL. */
const struct nfs_export_rt *nfs_table_export_by_fsid(const struct nfs_table *table,
						     uint64_t fsid);
struct nfs_loop_state *nfs_service_loop_state(struct nfs_service *svc, const struct rpc_call *call);

/* Program tables (nfs3_proc.c, mount3.c). */
extern const struct rpc_program_desc nfs3_program;
extern const struct rpc_program_desc mount3_program;
/* MOUNT v3's argument decoder (mount3.c): a dirpath (string<MNTPATHLEN>, the argument of MNT and
 * UMNT) into out, NUL-terminated and normalised: repeated slashes collapsed and trailing ones
 * dropped, so that "/a//b/" and "/a/b" name one mount. Returns false on bad XDR or a path holding a
 * NUL byte. */
bool mount3_dec_path(struct xdr_dec *dec, char out[MNT3_PATHLEN + 1], size_t *len_out);
/* Frees the per-call states cached on a loop's free list (at service destroy). */
void nfs3_call_free_list(struct nfs_loop_state *ls);

#endif
