/* bench_nfs3.h: the client side of NFSv3 and MOUNT v3 (RFC 1813) that `shale bench` needs:
 * argument encoders writing into an xdr_enc, and one strict result decoder.
 *
 * Strictness: a result is accepted only if it decodes completely, with no byte left over, every
 * bool is 0 or 1, every length is within the RFC's bounds and a READ's data length equals its
 * count. Anything else is -EBADMSG and the bench counts the operation as failed. */
#ifndef SHALE_BENCH_NFS3_H
#define SHALE_BENCH_NFS3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "xdr/xdr.h"

#define BENCH_NFS3_PROG 100003u
#define BENCH_NFS3_VERS 3u
#define BENCH_MOUNT_PROG 100005u
#define BENCH_MOUNT_VERS 3u
#define BENCH_MOUNT_MNT 1u

#define BENCH_FH_MAX 64u        /* NFS3_FHSIZE */
#define BENCH_NAME_MAX 255u
#define BENCH_PATH_MAX 1024u

enum bench_nfs3_proc {
	BENCH_NFS3_NULL = 0,
	BENCH_NFS3_GETATTR = 1,
	BENCH_NFS3_SETATTR = 2,
	BENCH_NFS3_LOOKUP = 3,
	BENCH_NFS3_ACCESS = 4,
	BENCH_NFS3_READLINK = 5,
	BENCH_NFS3_READ = 6,
	BENCH_NFS3_WRITE = 7,
	BENCH_NFS3_CREATE = 8,
	BENCH_NFS3_MKDIR = 9,
	BENCH_NFS3_SYMLINK = 10,
	BENCH_NFS3_REMOVE = 12,
	BENCH_NFS3_RMDIR = 13,
	BENCH_NFS3_READDIR = 16,
	BENCH_NFS3_READDIRPLUS = 17,
	BENCH_NFS3_FSSTAT = 18,
	BENCH_NFS3_FSINFO = 19,
	BENCH_NFS3_COMMIT = 21,
	BENCH_NFS3_NPROCS = 22,
};

/* nfsstat3 values the bench looks at. */
#define BENCH_NFS3_OK 0u
#define BENCH_NFS3ERR_NOENT 2u
#define BENCH_NFS3ERR_EXIST 17u

enum bench_stable { BENCH_UNSTABLE = 0, BENCH_DATA_SYNC = 1, BENCH_FILE_SYNC = 2 };
enum bench_ftype { BENCH_NF3REG = 1, BENCH_NF3DIR = 2, BENCH_NF3LNK = 5 };

struct bench_fh {
	uint32_t fh_len;
	uint8_t fh_data[BENCH_FH_MAX];
};

struct bench_fattr {
	uint32_t fa_type;
	uint32_t fa_mode;
	uint64_t fa_size;
	uint64_t fa_fileid;
};

/* What the decoder extracts; only the fields of the decoded procedure are meaningful. */
struct bench_nfs3_res {
	uint32_t nr_status;          /* nfsstat3 */
	bool nr_has_attr;            /* post-op (or GETATTR) attributes of the object */
	struct bench_fattr nr_attr;
	bool nr_has_fh;              /* LOOKUP, CREATE, MKDIR, SYMLINK, MNT */
	struct bench_fh nr_fh;
	uint32_t nr_count;           /* READ/WRITE count; READDIR(PLUS) entries; READLINK length */
	bool nr_eof;
	const uint8_t *nr_data;      /* READ data or READLINK target, into the reply */
	uint32_t nr_committed;       /* WRITE */
	uint64_t nr_verf;            /* WRITE, COMMIT; READDIR(PLUS): the cookie verifier */
	uint64_t nr_cookie;          /* READDIR(PLUS): the last entry's cookie (0 if none) */
	const uint8_t *nr_entries;   /* READDIR(PLUS): the entry list, into the reply (walk it */
	size_t nr_entries_len;       /* with bench_nfs3_dirent_next) */
	uint32_t nr_access;          /* ACCESS */
	uint32_t nr_rtmax, nr_wtmax, nr_dtpref; /* FSINFO */
	uint64_t nr_fbytes;          /* FSSTAT */
};

/* ---- encoders: write one procedure's arguments ---- */
void bench_nfs3_enc_fh(struct xdr_enc *enc, const struct bench_fh *fh);
void bench_nfs3_enc_dirop(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			  size_t name_len); /* LOOKUP, REMOVE, RMDIR */
/* SETATTR: mode (when set_mode), size (when set_size), mtime set to the server's time (when
 * set_mtime); no guard. */
void bench_nfs3_enc_setattr(struct xdr_enc *enc, const struct bench_fh *fh, bool set_mode,
			    uint32_t mode, bool set_size, uint64_t size, bool set_mtime);
void bench_nfs3_enc_access(struct xdr_enc *enc, const struct bench_fh *fh, uint32_t mask);
void bench_nfs3_enc_read(struct xdr_enc *enc, const struct bench_fh *fh, uint64_t off,
			 uint32_t count);
/* WRITE header: the data (count bytes) goes after it as the call's bulk segment. */
void bench_nfs3_enc_write(struct xdr_enc *enc, const struct bench_fh *fh, uint64_t off,
			  uint32_t count, enum bench_stable stable);
/* CREATE UNCHECKED (guarded = false) or GUARDED with the given mode. */
void bench_nfs3_enc_create(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			   size_t name_len, bool guarded, uint32_t mode);
void bench_nfs3_enc_mkdir(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			  size_t name_len, uint32_t mode);
void bench_nfs3_enc_symlink(struct xdr_enc *enc, const struct bench_fh *dir, const char *name,
			    size_t name_len, const char *target);
void bench_nfs3_enc_readdir(struct xdr_enc *enc, const struct bench_fh *dir, uint64_t cookie,
			    uint64_t verf, uint32_t count);
void bench_nfs3_enc_readdirplus(struct xdr_enc *enc, const struct bench_fh *dir, uint64_t cookie,
				uint64_t verf, uint32_t dircount, uint32_t maxcount);
void bench_nfs3_enc_commit(struct xdr_enc *enc, const struct bench_fh *fh, uint64_t off,
			   uint32_t count);
void bench_mount_enc_mnt(struct xdr_enc *enc, const char *path);

/* Decodes the result body of procedure proc (an enum bench_nfs3_proc) strictly. Returns 0 with
 * res filled (res->nr_status may be an error status: those results decode too), or -EBADMSG. */
SH_MUST_CHECK int bench_nfs3_decode(uint32_t proc, struct xdr_dec *dec, struct bench_nfs3_res *res);
/* MOUNT v3 MNT result: status 0 with the root handle, or the mountstat3 in nr_status. */
SH_MUST_CHECK int bench_mount_decode_mnt(struct xdr_dec *dec, struct bench_nfs3_res *res);

/* One entry of a READDIR or READDIRPLUS reply; de_name points into the reply. */
struct bench_dirent {
	uint64_t de_fileid;
	const uint8_t *de_name;
	uint32_t de_name_len;
	uint64_t de_cookie;
	bool de_has_fh;              /* READDIRPLUS: the entry carried a handle */
};
/* Walks the entry list of a decoded READDIR(PLUS) reply: start with
 * xdr_dec_init(dec, res->nr_entries, res->nr_entries_len), then call until it returns 0 (end of
 * the list) or -EBADMSG; 1 means *de holds the next entry. The list was already checked by
 * bench_nfs3_decode, so -EBADMSG only comes from a list not obtained that way. */
SH_MUST_CHECK int bench_nfs3_dirent_next(struct xdr_dec *dec, bool plus, struct bench_dirent *de);

/* Name of a procedure ("GETATTR"...), static. */
const char *bench_nfs3_proc_name(uint32_t proc);

#endif
