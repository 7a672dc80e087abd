/* fs.h: the asynchronous file-system interface between the NFS layer and the back ends.
 *
 * Model: a `struct fs` is one file system that can be exported (a host directory for the posix back
 * end; a dataset of a pool later). Objects in it are named by a struct fs_obj_id, an opaque byte
 * string the back end issues and alone interprets (the NFS layer wraps it into a file handle with
 * an export id and a MAC). Every operation is a `struct fs_req` that the caller fills and starts
 * with fs_submit; the back end fills the result fields and completes it with fs_req_complete, which
 * runs req->fr_done on req->fr_loop's thread. A back end may complete before fs_submit returns
 * (an operation answered from memory) or much later from another thread (one that waited on a
 * disk); callers therefore never touch the request after submitting it, except in fr_done.
 *
 * Ownership: the caller owns the fs_req (normally embedded in its per-call state) and every input
 * buffer it points to, until fr_done runs. Output data the back end hands out (READ data) comes
 * with a release callback the caller invokes when done with it.
 *
 * Errors: fr_status is 0 or a negative errno or -SH_E* code (base.h). Back ends use errno names
 * with their POSIX meaning (ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR, ENAMETOOLONG, EACCES,
 * EPERM, EROFS, ENOSPC, EDQUOT, EFBIG, EINVAL, EXDEV, EMLINK, EIO, ESTALE) and SH_EBADHANDLE for an
 * object id they did not issue, ESTALE for one that no longer exists.
 *
 * Durability contract (RFC 1813 section 3.3): when an operation that changes metadata (CREATE,
 * MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK, SETATTR) completes with fr_status 0, the
 * change is on stable storage. A WRITE completes with wr_committed saying how stable its data is
 * (never less than asked); COMMIT completes once all earlier writes to the object are stable.
 *
 * Permissions: the back end enforces access for fr_cred (already squashed by the NFS layer per the
 * export's rules), with POSIX semantics; a read-only export is enforced by the NFS layer. */
#ifndef SHALE_FS_H
#define SHALE_FS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/base.h"
#include "loop/loop.h"

#define FS_OBJ_ID_MAX 40 /* leaves room in a 64-byte NFS handle for export id, version and MAC */
#define FS_NAME_MAX 255
#define FS_PATH_MAX 4096
#define FS_MAX_GIDS 16

struct fs_obj_id {
	uint8_t foi_len;
	uint8_t foi_bytes[FS_OBJ_ID_MAX];
};

/* Same numbering as NFSv3 ftype3 (RFC 1813 section 2.6). */
enum fs_type { FS_REG = 1, FS_DIR = 2, FS_BLK = 3, FS_CHR = 4, FS_LNK = 5, FS_SOCK = 6, FS_FIFO = 7 };

struct fs_time {
	int64_t ft_sec;
	uint32_t ft_nsec;
};

struct fs_attr {
	enum fs_type fa_type;
	uint32_t fa_mode; /* permission and set-id/sticky bits only (07777) */
	uint32_t fa_nlink;
	uint32_t fa_uid;
	uint32_t fa_gid;
	uint64_t fa_size;
	uint64_t fa_used_bytes;
	uint32_t fa_rdev_major;
	uint32_t fa_rdev_minor;
	uint64_t fa_fsid;
	uint64_t fa_fileid;
	struct fs_time fa_atime;
	struct fs_time fa_mtime;
	struct fs_time fa_ctime;
};

/* Weak cache consistency data (RFC 1813 section 2.6, wcc_data): the object's size and times
 * before the change and its attributes after. Either half may be absent. */
struct fs_wcc {
	bool fw_pre_valid;
	uint64_t fw_pre_size;
	struct fs_time fw_pre_mtime;
	struct fs_time fw_pre_ctime;
	bool fw_post_valid;
	struct fs_attr fw_post;
};

enum fs_time_how { FS_TIME_DONT_CHANGE = 0, FS_TIME_SERVER = 1, FS_TIME_CLIENT = 2 };

struct fs_sattr {
	bool fs_set_mode, fs_set_uid, fs_set_gid, fs_set_size;
	uint32_t fs_mode;
	uint32_t fs_uid;
	uint32_t fs_gid;
	uint64_t fs_size;
	enum fs_time_how fs_atime_how;
	enum fs_time_how fs_mtime_how;
	struct fs_time fs_atime; /* when FS_TIME_CLIENT */
	struct fs_time fs_mtime;
};

struct fs_cred {
	uint32_t fc_uid;
	uint32_t fc_gid;
	uint32_t fc_ngids;
	uint32_t fc_gids[FS_MAX_GIDS];
};

/* ACCESS3 bits (RFC 1813 section 3.3.4). */
enum {
	FS_ACCESS_READ = 0x01,
	FS_ACCESS_LOOKUP = 0x02,
	FS_ACCESS_MODIFY = 0x04,
	FS_ACCESS_EXTEND = 0x08,
	FS_ACCESS_DELETE = 0x10,
	FS_ACCESS_EXECUTE = 0x20,
};

enum fs_stable { FS_UNSTABLE = 0, FS_DATA_SYNC = 1, FS_FILE_SYNC = 2 }; /* stable_how */
enum fs_create_mode { FS_CREATE_UNCHECKED = 0, FS_CREATE_GUARDED = 1, FS_CREATE_EXCLUSIVE = 2 };

/* Most pieces one fs_buf gathers. */
#define FS_BUF_SEGS_MAX 16u

/* Data handed out by a back end (READ). Call fb_release(fb_release_arg) once done with it. The
 * bytes are one piece at fb_data, or (fb_nsegs > 0) the fb_nsegs pieces of fb_segs in order, so
 * that a back end can hand out cached blocks as they are instead of copying them into one buffer;
 * the pieces stay valid until the release. fb_len counts the bytes of all pieces. Or, only when
 * the caller allowed it (rd_pipe_ok), fb_piped: the fb_len bytes wait in a pipe whose read end is
 * fb_pipe_fd (references to the page cache that a splice to a socket sends without a copy); the
 * caller takes exactly fb_len bytes from it, or none, before the release, and nothing else. */
struct fs_buf {
	const void *fb_data;
	uint32_t fb_len;
	void (*fb_release)(void *arg);
	void *fb_release_arg;
	const struct iovec *fb_segs;
	uint32_t fb_nsegs; /* 0..FS_BUF_SEGS_MAX */
	bool fb_piped;
	int fb_pipe_fd;
};

/* One directory entry, offered to the caller's emit callback during READDIR. */
struct fs_dirent {
	uint64_t fd_fileid;
	uint64_t fd_cookie; /* resuming READDIR from this cookie returns the entries after this one */
	const char *fd_name; /* not NUL-terminated; valid during the emit call only */
	uint32_t fd_name_len;
	/* READDIRPLUS only (rd_plus): the entry's id and attributes, when the back end got them. */
	bool fd_has_obj;
	struct fs_obj_id fd_obj;
	bool fd_has_attr;
	struct fs_attr fd_attr;
};

enum fs_op {
	FS_OP_GETATTR = 1,
	FS_OP_SETATTR,
	FS_OP_LOOKUP,
	FS_OP_ACCESS,
	FS_OP_READLINK,
	FS_OP_READ,
	FS_OP_WRITE,
	FS_OP_CREATE,
	FS_OP_MKDIR,
	FS_OP_SYMLINK,
	FS_OP_MKNOD,
	FS_OP_REMOVE,
	FS_OP_RMDIR,
	FS_OP_RENAME,
	FS_OP_LINK,
	FS_OP_READDIR,
	FS_OP_FSSTAT,
	FS_OP_COMMIT,
};

struct fs;
struct fs_req;
typedef void (*fs_done_fn)(struct fs_req *req);

/* Inputs are marked (in), outputs (out). Names are NUL-terminated, at most FS_NAME_MAX bytes,
 * never "", "." or ".." except LOOKUP, which accepts "." and ".." (".." of the root is the root). */
struct fs_req {
	enum fs_op fr_op;               /* (in) */
	struct fs *fr_fs;               /* (in) */
	const struct fs_cred *fr_cred;  /* (in) */
	struct loop *fr_loop;           /* (in) the thread fr_done runs on */
	fs_done_fn fr_done;             /* (in) */
	void *fr_done_arg;              /* (in) the caller's own pointer */
	struct fs_obj_id fr_obj;        /* (in) the object (for namespace ops: the directory) */
	int fr_status;                  /* (out) 0 or negative error */
	struct loop_task fr_task;       /* used by fs_req_complete */
	union {
		struct { struct fs_attr ga_attr; /* out */ } getattr;
		struct {
			struct fs_sattr sa_sattr;    /* in */
			bool sa_guard;               /* in: check ctime first */
			struct fs_time sa_guard_ctime; /* in */
			struct fs_wcc sa_wcc;        /* out */
		} setattr;
		struct {
			const char *lk_name;     /* in */
			struct fs_obj_id lk_obj; /* out */
			struct fs_attr lk_attr;  /* out */
			bool lk_dir_attr_valid;  /* out */
			struct fs_attr lk_dir_attr; /* out */
		} lookup;
		struct {
			uint32_t ac_want;    /* in: FS_ACCESS_* bits */
			uint32_t ac_granted; /* out */
			bool ac_attr_valid;  /* out */
			struct fs_attr ac_attr;
		} access;
		struct {
			char rl_target[FS_PATH_MAX + 1]; /* out, NUL-terminated */
			uint32_t rl_len;                 /* out */
			bool rl_attr_valid;              /* out */
			struct fs_attr rl_attr;
		} readlink;
		struct {
			uint64_t rd_offset;   /* in */
			uint32_t rd_count;    /* in */
			bool rd_pipe_ok;      /* in: the caller can send rd_buf from a pipe (fb_piped) */
			struct fs_buf rd_buf; /* out (release it even when rd_buf.fb_len == 0) */
			bool rd_eof;          /* out */
			bool rd_attr_valid;   /* out */
			struct fs_attr rd_attr;
		} read;
		struct {
			uint64_t wr_offset;       /* in */
			const void *wr_data;      /* in */
			uint32_t wr_len;          /* in */
			enum fs_stable wr_stable; /* in */
			uint32_t wr_count;        /* out: bytes written */
			enum fs_stable wr_committed; /* out */
			struct fs_wcc wr_wcc;     /* out */
		} write;
		struct {
			const char *cr_name;          /* in */
			enum fs_create_mode cr_mode;  /* in */
			struct fs_sattr cr_sattr;     /* in (UNCHECKED/GUARDED) */
			uint8_t cr_verf[8];           /* in (EXCLUSIVE) */
			enum fs_type cr_type;         /* in: MKNOD only (FS_CHR, FS_BLK, FS_SOCK, FS_FIFO) */
			uint32_t cr_rdev_major;       /* in: MKNOD of FS_CHR/FS_BLK */
			uint32_t cr_rdev_minor;
			const char *cr_link_target;   /* in: SYMLINK only */
			struct fs_obj_id cr_obj;      /* out */
			bool cr_attr_valid;           /* out */
			struct fs_attr cr_attr;       /* out */
			struct fs_wcc cr_dir_wcc;     /* out */
		} create; /* CREATE, MKDIR, SYMLINK, MKNOD */
		struct {
			const char *rm_name;      /* in */
			struct fs_wcc rm_dir_wcc; /* out */
		} remove; /* REMOVE, RMDIR */
		struct {
			const char *rn_from_name;   /* in (fr_obj is the source directory) */
			struct fs_obj_id rn_to_dir; /* in */
			const char *rn_to_name;     /* in */
			struct fs_wcc rn_from_wcc;  /* out */
			struct fs_wcc rn_to_wcc;    /* out */
		} rename;
		struct {
			struct fs_obj_id ln_dir;  /* in (fr_obj is the file to link) */
			const char *ln_name;      /* in */
			bool ln_attr_valid;       /* out: the file's attributes */
			struct fs_attr ln_attr;
			struct fs_wcc ln_dir_wcc; /* out */
		} link;
		struct {
			uint64_t rd_cookie;     /* in: 0 = start */
			uint8_t rd_verf[8];     /* in: verifier from the reply that gave the cookie */
			bool rd_plus;           /* in: READDIRPLUS (fill fd_obj and fd_attr) */
			/* in: called per entry in cookie order; returns false when the caller's reply is
			 * full, and the back end stops (that entry is not counted as sent). */
			bool (*rd_emit)(struct fs_req *req, const struct fs_dirent *entry);
			uint8_t rd_verf_out[8]; /* out */
			bool rd_eof;            /* out: every entry after rd_cookie was emitted */
			bool rd_attr_valid;     /* out: the directory's attributes */
			struct fs_attr rd_attr;
		} readdir;
		struct {
			uint64_t st_total_bytes, st_free_bytes, st_avail_bytes; /* out */
			uint64_t st_total_files, st_free_files, st_avail_files; /* out */
			uint32_t st_invarsec;                                 /* out */
			bool st_attr_valid;                                   /* out */
			struct fs_attr st_attr;
		} fsstat;
		struct {
			uint64_t cm_offset;   /* in */
			uint32_t cm_count;    /* in: 0 = to end of file */
			struct fs_wcc cm_wcc; /* out */
		} commit;
	} u;
};

/* Static properties of a file system, for FSINFO and PATHCONF. */
struct fs_info {
	uint64_t fi_max_file_size;
	struct fs_time fi_time_delta;
	uint32_t fi_link_max;
	uint32_t fi_name_max;
	bool fi_has_links;
	bool fi_has_symlinks;
	bool fi_can_set_time;
	bool fi_no_trunc;
	bool fi_chown_restricted;
	bool fi_case_insensitive;
	bool fi_case_preserving;
};

struct fs_ops {
	const char *fo_name;
	void (*fo_submit)(struct fs *fs, struct fs_req *req);
	SH_MUST_CHECK int (*fo_root)(struct fs *fs, struct fs_obj_id *root_out);
	void (*fo_info)(struct fs *fs, struct fs_info *info_out);
	void (*fo_write_verifier)(struct fs *fs, uint8_t verf_out[8]);
	void (*fo_destroy)(struct fs *fs);
};

/* The common head of every back end's file-system object; back ends embed it first. */
struct fs {
	const struct fs_ops *fs_ops;
	uint64_t fs_fsid; /* reported in fattr3.fsid */
};

/* Starts an operation. req->fr_done runs exactly once, on req->fr_loop's thread, possibly before
 * fs_submit returns. */
static inline void fs_submit(struct fs_req *req)
{
	req->fr_fs->fs_ops->fo_submit(req->fr_fs, req);
}
/* The root object of fs. Returns 0 or -errno. */
static inline SH_MUST_CHECK int fs_root(struct fs *fs, struct fs_obj_id *root_out)
{
	return fs->fs_ops->fo_root(fs, root_out);
}
static inline void fs_info(struct fs *fs, struct fs_info *info_out)
{
	fs->fs_ops->fo_info(fs, info_out);
}
/* The WRITE/COMMIT verifier: it changes whenever data written UNSTABLE may have been lost (at
 * least on every start of the server). */
static inline void fs_write_verifier(struct fs *fs, uint8_t verf_out[8])
{
	fs->fs_ops->fo_write_verifier(fs, verf_out);
}
static inline void fs_destroy(struct fs *fs)
{
	fs->fs_ops->fo_destroy(fs);
}

/* For back ends: finishes req. Runs fr_done at once when called on fr_loop's thread (or when
 * fr_loop is NULL, for tests without a loop), otherwise posts it to fr_loop. */
void fs_req_complete(struct fs_req *req);
/* Convenience for back ends: the name of an operation, for logs. */
/* Copies bytes [off, off + n) of buf's data to out (clamped to its length); returns the bytes
 * copied. Not for a piped buffer. */
size_t fs_buf_copy_out(const struct fs_buf *buf, size_t off, void *out, size_t n);

const char *fs_op_name(enum fs_op op);
/* Whether op changes the file system: true for SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD,
 * REMOVE, RMDIR, RENAME and LINK, the operations a back end's intent log must record when they
 * succeed (an UNSTABLE WRITE's data may wait there for its COMMIT); false for the others, which
 * read, and COMMIT, which only makes earlier writes durable. */
bool fs_op_changes(enum fs_op op);

#endif
