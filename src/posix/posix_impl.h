/* posix_impl.h: what the files of the posix back end share (see posix.c for the design).
 *
 * Object id format (struct fs_obj_id, all multi-byte fields little-endian):
 *
 *   offset  size  field
 *   0       1     POSIX_ID_VERSION, so an id from another back end or a later format is refused
 *   1       1     enum fs_type of the object, fixed for the inode's life; picks how it is reopened
 *   2       4     export tag: low 32 bits of sh_hash64 of the root's kernel handle, so an id of one
 *                 exported directory is refused by another export of the same host file system
 *   6       4     struct file_handle.handle_type (int32)
 *   10      n     struct file_handle.f_handle, n = foi_len - 10, 1 <= n <= POSIX_ID_HANDLE_MAX
 *
 * Bytes 6.. (handle type and handle) are the fd cache's key. */
#ifndef SHALE_POSIX_IMPL_H
#define SHALE_POSIX_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fs/fs.h"
#include "posix/posix.h"

#define POSIX_ID_VERSION 0x50
#define POSIX_ID_OFF_VERSION 0
#define POSIX_ID_OFF_TYPE 1
#define POSIX_ID_OFF_TAG 2
#define POSIX_ID_OFF_HTYPE 6
#define POSIX_ID_OFF_HANDLE 10
#define POSIX_ID_HANDLE_MAX (FS_OBJ_ID_MAX - POSIX_ID_OFF_HANDLE)

/* Open fds kept. The sfs2008 file set of 512 MB (19,560 files in 668 directories, 30% of the
 * files in use, most of those written now and then, and a written file holds two fds) needs
 * about 12,500 to run without reopening by handle; at about 300 bytes per entry plus the
 * kernel's open file, 16384 cost a few MiB. Reopening costs open_by_handle_at, fstat and, for a
 * directory, the containment walk, and evicting costs a close. */
#define POSIX_FD_CACHE_DEFAULT 16384
/* Workers: each waits on one flush at a time, and requests changing one directory share its
 * fsync (posix_dir_sync) only when they run at once, so more workers than cores pay: with 16
 * rather than 8, closed-loop REMOVEs of 32 clients in one directory ran a third faster, at no
 * measurable cost to the sfs2008 mix; with 32 rather than 16 (as many as the meta bench keeps in
 * flight), 15-20% faster again (24,000-26,400 against 19,900-22,200 a second, three runs each
 * alternating, server on one core), 4 KiB FILE_SYNC writes from 64 in flight unchanged within
 * the noise. Idle workers cost a stack each. */
#define POSIX_NWORKERS_DEFAULT 32
/* A verified directory is walked up to the root again after this long, so that a directory
 * moved out of the export on the host is refused within this time. */
#define POSIX_VERIFY_TTL_NS (2ull * 1000 * 1000 * 1000)
/* Deepest directory nesting the containment walk follows before refusing (PATH_MAX / 2, the
 * deepest a tree of one-character names can be while still naming every entry). */
#define POSIX_VERIFY_MAX_DEPTH 2048
/* Largest READ served at once; the NFS layer asks for far less (its rtmax). */
#define POSIX_READ_MAX_BYTES (8u << 20)

/* A request waiting in one of a directory's rounds of fsyncs (posix_fdcache.c). */
struct posix_sync_waiter;

/* One cached open object. Held (pfd_refs > 0) while a request uses its fds. */
struct posix_fd {
	struct posix_fd *pfd_hash_next;
	struct posix_fd *pfd_lru_prev; /* most recently used at the list head */
	struct posix_fd *pfd_lru_next;
	uint64_t pfd_hash;
	struct fs_obj_id pfd_id;    /* the id as issued (tag and type included) */
	uint64_t pfd_ino;           /* the object's inode number, for posix_fd_forget_if_unlinked */
	struct posix_fd *pfd_ino_next; /* chain of pc_ino_buckets */
	enum fs_type pfd_type;
	uint32_t pfd_used_pass;     /* pc_pass when a request last took it (rule 7) */
	int pfd_fd;                 /* O_RDONLY for REG, O_RDONLY|O_DIRECTORY for DIR, else O_PATH */
	int pfd_wfd;                /* REG only: O_RDWR, opened on first need; -1 until then */
	bool pfd_in_table;          /* false once evicted or forgotten: closed at the last rele */
	uint32_t pfd_refs;          /* guarded by the cache lock */
	uint64_t pfd_verified_ns;   /* DIR: when the containment walk last succeeded */
	pthread_mutex_t pfd_dir_lock; /* DIR: serializes lseek + getdents64 on pfd_fd */
	/* DIR: group commit of the fsyncs that write the directory, in rounds (posix_dir_sync);
	 * guarded by pfd_sync_lock. */
	pthread_mutex_t pfd_sync_lock;
	uint64_t pfd_sync_ticket;   /* changes that joined a round, ever */
	struct posix_sync_waiter *pfd_sync_open_list; /* the open round's waiting members */
	struct fs_req *pfd_sync_open_reqs; /* ...and its parked ones (posix_dir_sync_park) */
	bool pfd_sync_open_tainted; /* a round failed after a parked member joined the open one */
	uint32_t pfd_sync_open_objs; /* its members that bring a new object's fsync of their own */
	bool pfd_sync_open_dir;     /* ...and whether one needs the directory's own fsync */
	bool pfd_sync_running;      /* the round before the open one has fsyncs under way */
	struct posix_sync_waiter *pfd_sync_run_list; /* the running round's waiting members */
	struct fs_req *pfd_sync_run_reqs; /* ...and its parked ones */
	bool pfd_sync_run_tainted;  /* its parked members are answered with the failure */
	uint64_t pfd_sync_run_nfail; /* pfd_sync_nfail when it started */
	struct posix_fd *pfd_sync_next; /* pf_round_head's list, with a reference */
	uint32_t pfd_sync_left;     /* fsyncs of the running round not finished yet */
	uint64_t pfd_sync_nfail;    /* fsyncs that failed, and the last one's error */
	int pfd_sync_err;
	/* Write-behind (posix_writeback.c): listed once, with a reference; guarded by pf_wb_lock. */
	bool pfd_wb_queued;
	struct posix_fd *pfd_wb_next;
	uint64_t pfd_wb_bytes; /* UNSTABLE bytes since its last write-out started (atomic) */
	/* REG: the file's direct-I/O offset alignment (posix_direct.c, rule 3; atomic): 0 not yet
	 * asked, POSIX_DIRECT_REFUSED when the file has no direct I/O */
	uint32_t pfd_dio_align;
};

/* Direct writes of large UNSTABLE WRITEs (posix_direct.c). */
#define POSIX_DIRECT_MIN_BYTES (256u << 10) /* smaller WRITEs are buffered */
#define POSIX_DIRECT_BUF_BYTES (1u << 20)   /* the NFS layer's wtmax: larger ones are buffered */
#define POSIX_DIRECT_BUFS 16u              /* aligned buffers at most: 16 MiB */
#define POSIX_DIRECT_MEM_ALIGN 4096u       /* the buffers' alignment (any device's need) */
#define POSIX_DIRECT_REFUSED UINT32_MAX
struct posix_direct {
	bool pd_enabled;          /* not pfc_buffered_writes */
	pthread_mutex_t pd_lock;  /* guards the free list and pd_nbufs */
	void *pd_free[POSIX_DIRECT_BUFS];
	unsigned pd_nfree, pd_nbufs;
	uint64_t pd_writes;   /* WRITEs written directly (atomic) */
};

/* A directory the containment walk found inside the export (posix_fdcache.c, rule 6), keyed by
 * inode number and birth time; pd_verified_ns 0: empty. */
#define POSIX_DIRMEMO_SLOTS 1024u /* power of two */
struct posix_dirmemo {
	uint64_t pd_ino;
	int64_t pd_btime_sec;
	uint32_t pd_btime_nsec;
	uint64_t pd_verified_ns; /* when the walk that proved it last reached the root */
};

#define POSIX_FD_IDLE_S_DEFAULT 5u /* pfc_fd_idle_s's default */

struct posix_fdcache {
	pthread_mutex_t pc_lock; /* guards everything below and every pfd_refs, links, pfd_wfd set */
	struct posix_dirmemo pc_dirmemo[POSIX_DIRMEMO_SLOTS];
	struct posix_fd **pc_buckets;
	struct posix_fd **pc_ino_buckets; /* the same entries by inode number (pfd_ino_next) */
	uint32_t pc_nbuckets; /* power of two, of each table */
	struct posix_fd *pc_lru_head;
	struct posix_fd *pc_lru_tail;
	uint32_t pc_nentries; /* entries in the table */
	uint32_t pc_nfds;     /* fds held by entries in the table */
	uint32_t pc_max_fds;
	uint32_t pc_pass;      /* idle-expiry passes so far: the clock of rule 7 */
	uint32_t pc_idle_passes; /* entries unused for this many passes are closed */
};

/* The id cache (posix_idcache.c): inode number and birth time to object id. */
/* Power of two; 65536 x 64 bytes = 4 MiB per export, touched only as it fills. A miss costs four
 * system calls (openat, statx, name_to_handle_at, close) instead of none, and every READDIRPLUS
 * looks up each entry of a directory, so the table should hold the names in use with room to
 * spare, as sets overflow long before the table is full: of the 20,228 names of the sfs2008
 * file set (512 MB), 4096 entries hold a fifth, 32768 leave about 7% of them displaced by their
 * set's overflow, 65536 under 1%. */
#define POSIX_IDCACHE_SLOTS_DEFAULT 65536u
#define POSIX_IDCACHE_WAYS 4u     /* entries per set */
struct posix_idcache_slot {
	uint64_t ics_ino;
	int64_t ics_btime_sec;
	uint32_t ics_btime_nsec;
	uint8_t ics_type;
	struct fs_obj_id ics_id; /* foi_len 0: empty slot */
};
struct posix_idcache {
	pthread_mutex_t ic_lock; /* guards ic_slots */
	struct posix_idcache_slot *ic_slots;
	uint32_t ic_nslots; /* power of two, a multiple of POSIX_IDCACHE_WAYS; fixed at init */
};

/* Pipes for READ data spliced from the page cache (posix_pipe.c). */
#define POSIX_PIPE_BYTES (1u << 20)     /* each pipe's capacity: an NFS READ of 1 MiB */
#define POSIX_PIPE_MIN_BYTES (64u << 10) /* smaller READs copy */
#define POSIX_PIPES_MAX 64u             /* pipes of one export at most */
struct posix_pipe;
struct posix_pipes {
	pthread_mutex_t pp_lock; /* guards the fields below */
	struct posix_pipe *pp_free;
	unsigned pp_nfree;
	unsigned pp_count; /* pipes open, free or out */
	bool pp_broken;    /* the file system cannot splice: never try again */
};

struct posix_fs {
	struct fs pf_fs; /* first: struct fs * converts to struct posix_fs * */
	int pf_root_fd;  /* O_RDONLY|O_DIRECTORY; also the mount fd for open_by_handle_at */
	dev_t pf_root_dev;
	ino_t pf_root_ino;
	int pf_mount_id;
	struct fs_obj_id pf_root_id;
	uint32_t pf_tag;
	uint8_t pf_write_verf[8];
	mode_t pf_umask; /* the process umask at creation; created objects get their exact mode */
	/* The host file system journals namespace changes (ext4 with a journal, XFS): a new
	 * object, or a new link, is committed in the same transaction as its directory entry, so
	 * the directory's fsync makes both durable (posix.c, Durability). */
	bool pf_journal;
	/* An fsync of a newly linked object also writes its directory entry (ext4 without a
	 * journal; posix.c, Durability), so CREATE and MKDIR need no fsync of the directory. */
	bool pf_new_entry_with_object;
	struct fs_info pf_info;
	struct posix_fdcache pf_cache;
	struct posix_idcache pf_idcache;
	bool pf_write_nowait; /* pwritev2(RWF_NOWAIT) supported; cleared on first EOPNOTSUPP */
	struct posix_pipes pf_pipes;

	pthread_mutex_t pf_queue_lock; /* guards the queue and pf_stopping */
	pthread_cond_t pf_queue_cond;
	struct fs_req *pf_queue_head; /* linked through fr_task.lt_next until completion */
	struct fs_req *pf_queue_tail;
	/* Directories whose running round's fsync of the directory has no thread to run it
	 * (posix_fdcache.c): a worker takes them before requests. */
	struct posix_fd *pf_round_head;
	struct posix_fd *pf_round_tail;
	bool pf_stopping;
	unsigned pf_nworkers;
	pthread_t *pf_workers;

	/* Write-behind of UNSTABLE data (posix_writeback.c). */
	bool pf_wb_started;
	pthread_t pf_wb_thread;
	pthread_mutex_t pf_wb_lock; /* guards the list and pf_wb_stopping */
	pthread_cond_t pf_wb_cond;
	struct posix_fd *pf_wb_head;
	unsigned pf_wb_len;
	unsigned pf_wb_max; /* fixed at start (posix_writeback.c, rule 4) */
	bool pf_wb_stopping;
	bool pf_wb_urgent;    /* a listed file passed pf_wb_burst bytes: pass now (rule 7) */
	uint64_t pf_wb_burst; /* fixed at start */
	uint64_t pf_wb_bursts; /* passes started early by pf_wb_urgent */

	struct posix_direct pf_direct; /* posix_direct.c */
};

static inline struct posix_fs *posix_fs_of(struct fs *fs)
{
	return (struct posix_fs *)(void *)fs;
}

/* Returned by an operation run inline when it would block on the disk: run it on a worker. */
#define POSIX_PUNT 1
/* Returned by an operation that handed its request to a directory's round of fsyncs
 * (posix_dir_sync_park): the round completes it. */
#define POSIX_PARKED 2

/* ---- posix_writeback.c ---- */
/* Starts (and stops) the write-behind thread. Returns 0 or -errno. */
SH_MUST_CHECK int posix_writeback_start(struct posix_fs *pf, uint64_t burst_bytes);
void posix_writeback_stop(struct posix_fs *pf);
/* After a successful UNSTABLE WRITE of bytes to pfd (held by the caller): lists it for
 * write-behind, and asks for a pass now when the file passed the burst size. */
void posix_writeback_note(struct posix_fs *pf, struct posix_fd *pfd, uint64_t bytes);

/* ---- posix_direct.c ---- */
/* Sets the direct path up (off when buffered_only). Returns 0 or -errno. */
SH_MUST_CHECK int posix_direct_init(struct posix_fs *pf, bool buffered_only);
void posix_direct_fini(struct posix_fs *pf);
/* Whether a WRITE of len bytes at off to the held file pfd takes the direct path. */
bool posix_direct_wanted(const struct posix_fs *pf, struct posix_fd *pfd, enum fs_stable stable,
			 uint64_t off, uint32_t len);
/* On a worker, with the caller's permission to write checked: writes len bytes of data at off
 * with O_DIRECT and returns the bytes written, POSIX_DIRECT_DECLINED when the WRITE must be
 * written buffered instead (no free buffer, the file refused direct I/O), or -errno. Leaves
 * cred installed as the thread's identity. */
#define POSIX_DIRECT_DECLINED 2
SH_MUST_CHECK ssize_t posix_direct_write(struct posix_fs *pf, struct posix_fd *pfd,
					 const struct fs_cred *cred, const uint8_t *data,
					 uint64_t off, uint32_t len);

/* ---- posix_pipe.c ---- */
SH_MUST_CHECK int posix_pipes_init(struct posix_pipes *pp);
void posix_pipes_fini(struct posix_pipes *pp);
/* Hands out count bytes of fd from off in a pipe (out->fb_piped; fewer at the end of the file,
 * or none: fb_len 0, not piped) and returns 0; POSIX_PIPE_DECLINED when the READ should copy
 * instead (too small, too big for a pipe, no pipe to be had, an inline READ whose range is not
 * all in the page cache, a file system that cannot splice); or -errno. inline_read: on the event
 * loop, where the disk must not be waited for. */
#define POSIX_PIPE_DECLINED 2
SH_MUST_CHECK int posix_read_piped(struct posix_pipes *pp, int fd, uint64_t off, uint32_t count,
				   bool inline_read, struct fs_buf *out);

/* ---- posix_id / attributes (posix_ops.c) ---- */
/* Builds the id of the object named by (dirfd, name) (name "" with AT_EMPTY_PATH in flags for
 * dirfd itself). Refuses an object on another mount (a mount point inside the export) with
 * -EACCES. Returns 0 or -errno. */
SH_MUST_CHECK int posix_id_at(struct posix_fs *pf, int dirfd, const char *name, int flags,
			      enum fs_type type, struct fs_obj_id *id_out);
enum fs_type posix_type_of_mode(mode_t mode);
void posix_attr_from_stat(const struct posix_fs *pf, const struct stat *st, struct fs_attr *attr);
/* fstat that works on O_PATH fds too. Returns 0 or -errno. */
SH_MUST_CHECK int posix_stat_fd(int fd, struct stat *st);
void posix_wcc_pre(const struct stat *st, struct fs_wcc *wcc);
/* Fills the post half of wcc from a fresh fstat of fd (left invalid if that fails). */
void posix_wcc_post(struct posix_fs *pf, int fd, struct fs_wcc *wcc);
/* Checks an entry name from a client: 0, -EINVAL (empty), -ENAMETOOLONG, -EACCES (contains '/'),
 * and for dot_result != 0, that value for "." and "..". */
SH_MUST_CHECK int posix_check_name(const char *name, int dot_result);

/* Applies owner, mode and times of sa to the object of type type open as fd (path_fd: opened
 * O_PATH) as the thread's identity; size is the caller's business. Sets *changed when anything
 * was done. Returns 0 or -errno. */
SH_MUST_CHECK int posix_apply_sattr(int fd, enum fs_type type, bool path_fd,
				    const struct fs_sattr *sa, bool *changed);
/* Makes a READ's output releasable even when the request fails early. */
void posix_read_buf_init(struct fs_buf *buf);

/* Runs req on the calling thread. Returns 0 when req->fr_status is final, or POSIX_PUNT
 * (only when may_punt) when it must be rerun on a worker. */
int posix_op_run(struct posix_fs *pf, struct fs_req *req, bool may_punt);

/* ---- id cache (posix_idcache.c) ---- */
/* nslots: entries wanted (0 = POSIX_IDCACHE_SLOTS_DEFAULT), rounded up to a power of two. */
SH_MUST_CHECK int posix_idcache_init(struct posix_idcache *ic, uint32_t nslots);
void posix_idcache_fini(struct posix_idcache *ic);
/* Stats (dirfd, name) without following a symlink and gives the id of what it names, from the
 * cache when it can (see posix_idcache.c). Returns 0 with *st filled, or -errno when the name
 * cannot be stat'ed. On 0, *id_rc says whether *id was made: 0, -EACCES for an object on another
 * mount (a mount point inside the export is not crossed), or another -errno. */
SH_MUST_CHECK int posix_entry_lookup(struct posix_fs *pf, int dirfd, const char *name,
				     struct stat *st, struct fs_obj_id *id, int *id_rc);
struct statx;
void posix_stat_from_statx(const struct statx *stx, struct stat *st);

/* ---- namespace operations (posix_dirops.c); each returns fr_status ---- */
int posix_do_lookup(struct posix_fs *pf, struct fs_req *req);
int posix_do_create(struct posix_fs *pf, struct fs_req *req); /* CREATE MKDIR SYMLINK MKNOD */
int posix_do_remove(struct posix_fs *pf, struct fs_req *req); /* REMOVE RMDIR */
int posix_do_rename(struct posix_fs *pf, struct fs_req *req);
int posix_do_link(struct posix_fs *pf, struct fs_req *req);
int posix_do_readdir(struct posix_fs *pf, struct fs_req *req);

/* ---- fd cache (posix_fdcache.c) ---- */
/* max_fds: rule 4's limit; idle_passes: rule 7's age, in passes of about a second. */
SH_MUST_CHECK int posix_fdcache_init(struct posix_fdcache *cache, uint32_t max_fds,
                                     uint32_t idle_passes);
void posix_fdcache_fini(struct posix_fdcache *cache);
/* Rule 7: one idle-expiry pass (about a second apart): closes the entries no request holds that
 * none has taken for pc_idle_passes passes. */
void posix_fdcache_expire(struct posix_fdcache *cache);
/* Resolves id to a held cache entry, opening it by handle on a miss (with the thread's fs
 * identity briefly switched to root) and checking that a directory lies inside the export.
 * Returns 0, -SH_EBADHANDLE (not an id of this export, or its type does not match the object),
 * -ESTALE (the object is gone or has left the export) or -errno. Release with posix_fd_rele. */
SH_MUST_CHECK int posix_fd_hold(struct posix_fs *pf, const struct fs_obj_id *id,
				struct posix_fd **out);
void posix_fd_rele(struct posix_fs *pf, struct posix_fd *pfd);
/* Takes one more reference on an entry the caller holds; release it with posix_fd_rele. */
void posix_fd_ref(struct posix_fs *pf, struct posix_fd *pfd);
/* The O_RDWR fd of a held regular file, opened on first need. Returns 0 or -errno. */
SH_MUST_CHECK int posix_fd_writable(struct posix_fs *pf, struct posix_fd *pfd, int *fd_out);
/* A new fd of the held regular file pfd, opened by handle as root with flags (and O_NOFOLLOW,
 * O_NONBLOCK, O_CLOEXEC); the caller owns it and installs its identity again afterwards.
 * Returns 0 or -errno. */
SH_MUST_CHECK int posix_fd_open_handle(struct posix_fs *pf, struct posix_fd *pfd, int flags,
				       int *fd_out);
/* Drops the entries of inode ino from the cache if the object has no links left (after REMOVE,
 * RMDIR or RENAME over it), so its space is freed without waiting for LRU eviction. By inode
 * number, so that the caller needs only a stat of the name, not the object's handle. */
void posix_fd_forget_if_unlinked(struct posix_fs *pf, uint64_t ino);
/* Drops an entry whose object was found unlinked or moved out while held. */
void posix_fd_forget(struct posix_fs *pf, struct posix_fd *pfd);
/* Makes the changes made so far in the held directory d durable (fsync of d), sharing one fsync
 * among the requests that ask at about the same time: a request waits for a round of fsyncs
 * that started after its change, and one round covers every change made before it started
 * (group commit, posix_fdcache.c). Returns 0 or -errno (an error is reported to every request
 * the failed round may have covered). */
SH_MUST_CHECK int posix_dir_sync(struct posix_fs *pf, struct posix_fd *d);
/* As posix_dir_sync, for a new object whose own fsync writes its entry in d as well
 * (pf_new_entry_with_object): fsyncs obj_fd in the round of d it joins, beside the other
 * fsyncs that write d, never overlapping one of another round. */
SH_MUST_CHECK int posix_dir_sync_object(struct posix_fs *pf, struct posix_fd *d, int obj_fd);
/* As posix_dir_sync, without waiting: req (whose change to the held directory d is made and
 * whose reply is filled in but for its status) joins d's open round, taking the caller's
 * reference of d with it, and the round sets its status, completes it and releases d. The
 * calling thread may run rounds' directory fsyncs before it returns. */
void posix_dir_sync_park(struct posix_fs *pf, struct posix_fd *d, struct fs_req *req);
/* Runs the directory fsync that a round of d queued for a worker (pf_round_head) and whatever
 * follows from it; consumes the queue's reference of d. */
void posix_round_run_queued(struct posix_fs *pf, struct posix_fd *d);

/* ---- credentials and permissions (posix_cred.c) ---- */
/* Makes the calling thread's fs identity (fsuid, fsgid, supplementary groups) that of cred,
 * with syscalls only for the parts that differ from the thread's current identity. */
SH_MUST_CHECK int posix_cred_apply(const struct fs_cred *cred);
/* Sets the thread's fsuid to 0 (restoring CAP_DAC_READ_SEARCH for open_by_handle_at) if it is
 * not already; the next posix_cred_apply switches back. */
SH_MUST_CHECK int posix_cred_root(void);
/* Whether gid is cred's group or one of its supplementary groups. */
bool posix_in_group(const struct fs_cred *cred, uint32_t gid);
/* Checks that cred (already applied to the thread) may do mask (R_OK/W_OK/X_OK) on the object
 * of fd with attributes st. owner_override: the owner may read and write regardless of mode
 * (NFS semantics for I/O on a file the owner opened before changing its mode); read_if_exec:
 * execute permission suffices for R_OK (clients page in executables they may only execute).
 * Returns 0, -EACCES or -errno. */
SH_MUST_CHECK int posix_perm(const struct fs_cred *cred, int fd, const struct stat *st, int mask,
			     bool owner_override, bool read_if_exec);
/* The FS_ACCESS_* bits of want that cred is granted on the object. */
uint32_t posix_access_bits(const struct fs_cred *cred, int fd, const struct stat *st,
			   uint32_t want);
/* Remembers the process's original groups so posix_thread_cred_reset can restore them. */
void posix_cred_save_process_groups(void);

#endif
