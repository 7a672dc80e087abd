/* posix.c: the posix back end: an existing host directory served through the fs interface.
 *
 * Theory of operation
 * ===================
 *
 * Handles. An object is named by the kernel's own file handle for it (name_to_handle_at), wrapped
 * in a small header (format in posix_impl.h: version, object type, export tag, handle type,
 * handle bytes). The kernel handle names the inode and its generation, so it survives a server
 * restart, and a handle of a deleted inode fails to open with ESTALE. Objects are reopened with
 * open_by_handle_at relative to the exported root's fd (any fd on the mount serves as mount_fd);
 * that needs CAP_DAC_READ_SEARCH, which the server has as root. An id that is malformed, carries
 * another export's tag, or whose object turns out to be of another type than the id says is
 * refused with -SH_EBADHANDLE; an object that is gone (open fails with ESTALE, or it has no links
 * left) gives -ESTALE. posix_fs_create refuses a host file system without handles, or whose
 * handles would not fit in FS_OBJ_ID_MAX, with -EOPNOTSUPP.
 *
 * Containment. A kernel handle names any inode of the host file system, not only those below the
 * export root, so ids are checked (posix_fdcache.c):
 *  1. Directories: when a directory is opened by handle (a cache miss) we walk ".." from it,
 *     as root, until we meet the export root (same st_dev and st_ino); leaving the file system,
 *     reaching its top, or passing POSIX_VERIFY_MAX_DEPTH levels refuses it with -ESTALE. The
 *     cache remembers the verdict for POSIX_VERIFY_TTL_NS, then walks again, so a directory that
 *     is moved out of the export on the host stops being served within that time. The kernel
 *     always reconnects a directory opened by handle to its real parent, so ".." is true. A walk
 *     may stop early at a directory another walk proved inside the export less than that time
 *     before, and then counts as done when that proof was made (posix_fdcache.c, rule 6).
 *  2. Non-directories have no parent to walk to. Their ids are issued only for entries of
 *     directories that passed rule 1 (LOOKUP, READDIRPLUS, CREATE and friends), and the NFS
 *     layer seals every id in a MAC'd file handle, so a client can present no other. A file that
 *     is moved out of the tree on the host after a client learnt its id stays reachable through
 *     that id, as with knfsd's default no_subtree_check; the export tag keeps it from being used
 *     through another export.
 *  3. Names never walk: every name is one component (no '/'), resolved with a *at() call
 *     relative to a verified directory fd, never followed if it is a symlink (O_NOFOLLOW,
 *     AT_SYMLINK_NOFOLLOW, name_to_handle_at without AT_SYMLINK_FOLLOW); ".." of the export root
 *     answers the root itself; a mount point inside the export is not crossed (-EACCES).
 *
 * The fd cache (posix_fdcache.c) keeps opened objects by handle with an LRU limit on the number
 * of fds (pfc_fd_cache_max): a directory as O_RDONLY|O_DIRECTORY (enough for *at() calls, fsync
 * and getdents64), a regular file as O_RDONLY plus an O_RDWR fd opened on the first write (so a
 * file only read is never open for writing, which would make exec of it fail with ETXTBSY), and
 * anything else as O_PATH. Requests hold entries by reference while they use the fds. Entries
 * no request has used for pfc_fd_idle_s seconds are closed by the write-behind thread's pass
 * (posix_fdcache_expire), as knfsd's file cache closes idle files: an open fd would keep the
 * space of a file removed on the host, which no REMOVE of ours told the cache about, allocated.
 *
 * The id cache (posix_idcache.c) maps (inode number, birth time) to the id made for it, so LOOKUP
 * and each READDIRPLUS entry cost one statx rather than a statx and a name_to_handle_at.
 *
 * Threading and completion. fo_submit runs the operations the page cache can answer on the
 * calling (event loop) thread and completes them at once: GETATTR, LOOKUP, ACCESS, READLINK,
 * READDIR, FSSTAT, READ through preadv2(RWF_NOWAIT) (or, for a large READ over TCP whose range
 * cachestat finds cached, spliced into a pipe: posix_pipe.c), and UNSTABLE WRITE, which only copies into
 * the page cache (through pwritev2(RWF_NOWAIT) where the host file system offers it; ext4 does
 * not, and there a buffered write waits only when writeback throttles a writer, as knfsd's
 * would). A read or write that would block is "punted" to the worker pool, as are every stable
 * WRITE, COMMIT and every metadata change, since those wait on a flush, and a large aligned
 * UNSTABLE WRITE, which is written past the page cache with O_DIRECT (posix_direct.c) and so
 * waits for the device. Workers (pfc_nworkers) take requests from one FIFO queue, linked
 * through the request's fr_task.lt_next (unused until fs_req_complete), and finish with
 * fs_req_complete, which carries fr_done back to the request's loop; a REMOVE or RMDIR waiting
 * for its directory's fsync is parked in the directory's round instead, and completed by
 * whoever finishes the round (posix_fdcache.c). Workers are SCHED_BATCH
 * (sh_thread_setup): a worker woken by the loop's pthread_cond_signal would otherwise preempt
 * the loop thread on its own core at once, and every cached request behind it would wait for
 * the worker's syscalls. Measured with the server on one core (sfs2008): the loop was preempted
 * about 4,000 times a second at 40,000 ops/s; as SCHED_BATCH, the peak rose from about 91,000 to
 * about 121,000 ops/s and the response time at 85,000 fell from 0.77 to 0.17-0.20 ms.
 *
 * Credentials (posix_cred.c). Each request runs with fr_cred installed as the running thread's
 * fsuid, fsgid and supplementary groups (setfsuid, setfsgid and the raw setgroups system call,
 * all per thread), switched only when they differ from what the thread last installed. Handles
 * are opened with fsuid 0 (a non-zero fsuid drops CAP_DAC_READ_SEARCH) before the switch.
 * Namespace operations are then plain *at() calls that the kernel checks against the client's
 * identity; I/O on cached fds (opened as root) is checked explicitly first: root and the owner
 * from the mode bits (the owner may always read and write an object it has open, as knfsd
 * allows), everyone else by faccessat2(AT_EACCESS), which honours groups and ACLs. ACCESS
 * computes granted bits the same way, with root's rule that execute needs some x bit.
 *
 * Durability (RFC 1813 section 3.3: metadata changes are stable before the reply). After a
 * change we fsync what changed: the directory for CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR
 * and LINK, both directories for RENAME across directories, the object itself after SETATTR.
 * A new object is made durable itself first (fsync, or syncfs for objects that cannot be opened
 * for I/O, such as symlinks and device nodes), then its directory entry; LINK fsyncs the object
 * for its link count. On a file system that journals namespace changes (pf_journal: ext4 with a
 * journal, found by its jbd2 entry in /proc/fs/jbd2, and XFS) the object's own fsync is skipped
 * when nothing was set on it after the creating call: the creating call (or the link) and the
 * directory entry are one transaction, and the directory's fsync commits it. Attributes set
 * afterwards (an EXCLUSIVE create's verifier, a mode the umask cut, a size) are later
 * transactions that the directory's fsync need not cover, so the object is then fsynced too.
 * On a file system without a journal (ext2, ext4 made without one) the directory's fsync does
 * not write the new inode, and an acknowledged CREATE could otherwise come back after a crash as
 * an entry without a valid inode. ext4 without a journal (pf_new_entry_with_object) goes the
 * other way: the fsync of an inode just linked into a directory writes that directory too
 * (posix_fsync_writes_new_entry), so a new regular file or directory is durable, name and all,
 * after its own fsync, and CREATE and MKDIR skip the directory's; a file that has gained a second
 * link before that fsync (a concurrent LINK) still gets it, as does everything else.
 * Directory fsyncs are group-committed (posix_dir_sync): requests changing the same directory
 * at about the same time share one fsync that started after all their changes. Where a new
 * object's fsync writes its directory (pf_new_entry_with_object), those fsyncs join the same
 * group commit (posix_dir_sync_object): fsyncs that write one directory run in rounds, one round
 * at a time, never two of different rounds at once (posix_fdcache.c says why); so does the fsync
 * of a directory after its SETATTR. WRITE with
 * DATA_SYNC or FILE_SYNC uses pwritev2 with RWF_DSYNC or RWF_SYNC (one system call for the
 * write and its flush); COMMIT is an fdatasync of the file.
 *
 * Write-behind (posix_writeback.c). A file an UNSTABLE WRITE dirtied is listed, and a thread of
 * its own starts the write-out of its dirty pages about a second later (sync_file_range, which
 * does not wait), so the data goes to the disk while the client is still sending, not in one
 * burst 30 seconds later (the kernel's vm.dirty_expire_centisecs) that every fsync and COMMIT
 * then waits behind; a file that takes a burst of data (32 MiB) starts its write-out at once.
 *
 * Direct writes (posix_direct.c). UNSTABLE WRITEs of 256 KiB to 1 MiB, aligned as the file's
 * direct I/O needs, are copied into an aligned buffer and written with O_DIRECT on a worker:
 * no page-cache pages are allocated and filled for them, which was most of the server's core in
 * a large sequential write. COMMIT's fdatasync makes them durable as it does buffered data.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdalign.h>
#include <string.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "posix/posix_impl.h"

/* Reads, and UNSTABLE writes (page-cache copies), run on the caller's thread; everything else
 * (changes, stable writes, COMMIT) may wait on the disk and goes to a worker. */
static bool posix_runs_inline(const struct fs_req *req)
{
	if (req->fr_op == FS_OP_WRITE)
		return req->u.write.wr_stable == FS_UNSTABLE;
	return !fs_op_changes(req->fr_op) && req->fr_op != FS_OP_COMMIT;
}

static void posix_enqueue(struct posix_fs *pf, struct fs_req *req)
{
	req->fr_task.lt_next = NULL;
	pthread_mutex_lock(&pf->pf_queue_lock);
	if (pf->pf_queue_tail != NULL)
		pf->pf_queue_tail->fr_task.lt_next = &req->fr_task;
	else
		pf->pf_queue_head = req;
	pf->pf_queue_tail = req;
	pthread_mutex_unlock(&pf->pf_queue_lock);
	/* Signalled after the unlock, so the woken worker does not at once block on the lock still
	 * held here (on a busy core it would also preempt this thread only to wait for it). */
	pthread_cond_signal(&pf->pf_queue_cond);
}

static void posix_submit(struct fs *fs, struct fs_req *req)
{
	struct posix_fs *pf = posix_fs_of(fs);

	if (req->fr_op == FS_OP_READ)
		posix_read_buf_init(&req->u.read.rd_buf);
	if (posix_runs_inline(req) && posix_op_run(pf, req, true) == 0) {
		fs_req_complete(req);
		return;
	}
	posix_enqueue(pf, req);
}

static void *posix_worker_main(void *arg)
{
	struct posix_fs *pf = arg;
	sh_thread_setup("shale-posix", SH_THREAD_BACKGROUND);

	for (;;) {
		pthread_mutex_lock(&pf->pf_queue_lock);
		while (pf->pf_queue_head == NULL && pf->pf_round_head == NULL && !pf->pf_stopping)
			pthread_cond_wait(&pf->pf_queue_cond, &pf->pf_queue_lock);
		struct posix_fd *round_dir = pf->pf_round_head;
		if (round_dir != NULL) {
			/* A round's directory fsync first: parked requests wait on it. */
			pf->pf_round_head = round_dir->pfd_sync_next;
			if (pf->pf_round_head == NULL)
				pf->pf_round_tail = NULL;
			pthread_mutex_unlock(&pf->pf_queue_lock);
			posix_round_run_queued(pf, round_dir);
			continue;
		}
		struct fs_req *req = pf->pf_queue_head;
		if (req == NULL) {
			pthread_mutex_unlock(&pf->pf_queue_lock);
			break; /* stopping and drained */
		}
		struct loop_task *next = req->fr_task.lt_next;
		pf->pf_queue_head = next != NULL ? SH_CONTAINER_OF(next, struct fs_req, fr_task) : NULL;
		if (pf->pf_queue_head == NULL)
			pf->pf_queue_tail = NULL;
		pthread_mutex_unlock(&pf->pf_queue_lock);

		req->fr_task.lt_next = NULL;
		if (req->fr_op == FS_OP_READ) {
			/* A punted READ may have left nothing to release; start clean. */
			posix_read_buf_init(&req->u.read.rd_buf);
		}
		int rc = posix_op_run(pf, req, false);
		VERIFY(rc == 0 || rc == POSIX_PARKED);
		if (rc == 0)
			fs_req_complete(req);
	}
	return NULL;
}

static int posix_root(struct fs *fs, struct fs_obj_id *root_out)
{
	*root_out = posix_fs_of(fs)->pf_root_id;
	return 0;
}

static void posix_info(struct fs *fs, struct fs_info *info_out)
{
	*info_out = posix_fs_of(fs)->pf_info;
}

static void posix_write_verifier(struct fs *fs, uint8_t verf_out[8])
{
	memcpy(verf_out, posix_fs_of(fs)->pf_write_verf, 8);
}

static void posix_stop_workers(struct posix_fs *pf, unsigned started)
{
	pthread_mutex_lock(&pf->pf_queue_lock);
	pf->pf_stopping = true;
	pthread_cond_broadcast(&pf->pf_queue_cond);
	pthread_mutex_unlock(&pf->pf_queue_lock);
	for (unsigned i = 0; i < started; i++)
		pthread_join(pf->pf_workers[i], NULL);
}

/* Every submitted request has completed (fs_destroy's contract); workers drain and exit. */
static void posix_destroy(struct fs *fs)
{
	struct posix_fs *pf = posix_fs_of(fs);

	posix_stop_workers(pf, pf->pf_nworkers);
	mem_free(pf->pf_workers);
	posix_writeback_stop(pf);
	posix_fdcache_fini(&pf->pf_cache);
	posix_idcache_fini(&pf->pf_idcache);
	posix_pipes_fini(&pf->pf_pipes);
	posix_direct_fini(pf);
	pthread_cond_destroy(&pf->pf_queue_cond);
	pthread_mutex_destroy(&pf->pf_queue_lock);
	(void)close(pf->pf_root_fd);
	mem_free(pf);
}

static const struct fs_ops posix_fs_ops = {
	.fo_name = "posix",
	.fo_submit = posix_submit,
	.fo_root = posix_root,
	.fo_info = posix_info,
	.fo_write_verifier = posix_write_verifier,
	.fo_destroy = posix_destroy,
};

/* Reads the root's kernel handle, refusing a file system whose handles we cannot use. */
static int posix_probe_handles(struct posix_fs *pf)
{
	/* 128 bytes: the kernel's MAX_HANDLE_SZ, so the real size is learnt even when too big. */
	alignas(struct file_handle) uint8_t fh_buf[sizeof(struct file_handle) + 128];
	struct file_handle *fh = (struct file_handle *)(void *)fh_buf;
	int mount_id;

	fh->handle_bytes = 128;
	if (name_to_handle_at(pf->pf_root_fd, "", fh, &mount_id, AT_EMPTY_PATH) != 0) {
		int err = errno;
		log_error("posix: the exported file system gives no file handles: %s",
			  sh_strerror(-err));
		return err == EOPNOTSUPP || err == EOVERFLOW ? -EOPNOTSUPP : -err;
	}
	if (fh->handle_bytes == 0 || fh->handle_bytes > POSIX_ID_HANDLE_MAX) {
		log_error("posix: file handles of %u bytes do not fit in %d", fh->handle_bytes,
			  POSIX_ID_HANDLE_MAX);
		return -EOPNOTSUPP;
	}
	/* Without CAP_DAC_READ_SEARCH the handles could be made but never reopened. */
	int fd = open_by_handle_at(pf->pf_root_fd, fh, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		log_error("posix: open_by_handle_at fails (%s); the server must run as root",
			  sh_strerror(-err));
		return -err;
	}
	(void)close(fd);
	pf->pf_mount_id = mount_id;
	uint8_t key[4 + 128];
	memcpy(key, &fh->handle_type, 4);
	memcpy(key + 4, fh->f_handle, fh->handle_bytes);
	pf->pf_tag = (uint32_t)sh_hash64(key, 4 + fh->handle_bytes, 0);
	return 0;
}

static void posix_fill_info(struct posix_fs *pf)
{
	struct fs_info *fi = &pf->pf_info;
	struct statvfs sv;

	memset(fi, 0, sizeof(*fi));
	fi->fi_max_file_size = (uint64_t)INT64_MAX; /* off_t's limit; the host fs may set less */
	fi->fi_time_delta.ft_sec = 0;
	fi->fi_time_delta.ft_nsec = 1; /* Linux keeps nanosecond timestamps */
	long link_max = fpathconf(pf->pf_root_fd, _PC_LINK_MAX);
	fi->fi_link_max = link_max > 0 && link_max < (long)UINT32_MAX ? (uint32_t)link_max : 65000;
	fi->fi_name_max = FS_NAME_MAX;
	if (fstatvfs(pf->pf_root_fd, &sv) == 0 && sv.f_namemax > 0 && sv.f_namemax < FS_NAME_MAX)
		fi->fi_name_max = (uint32_t)sv.f_namemax;
	fi->fi_has_links = true;
	fi->fi_has_symlinks = true;
	fi->fi_can_set_time = true;
	fi->fi_no_trunc = true;
	fi->fi_chown_restricted = true;
	fi->fi_case_insensitive = false;
	fi->fi_case_preserving = true;
}

/* Descriptors the fd cache leaves to the rest of the process (sockets: the RPC server accepts
 * up to 4096 connections; log, state and eventfds) when the fd limit is large enough. */
#define POSIX_FD_RESERVE 4352u

/* The fd cache limit. The fd limit is raised first when the cache wants more (a soft limit of
 * 1024 is common and would leave the cache far smaller than a file set in daily use); the hard
 * limit too where the process may. The cache then takes what the limit leaves after the larger
 * of POSIX_FD_RESERVE and a quarter of the limit, or half of a limit smaller than that. */
static uint32_t posix_cache_limit(unsigned wanted)
{
	uint64_t max = SH_MIN(wanted != 0 ? (uint64_t)wanted : POSIX_FD_CACHE_DEFAULT,
			      (uint64_t)1 << 24);
	uint64_t need = max + SH_MAX(max / 3, (uint64_t)POSIX_FD_RESERVE);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < need) {
		struct rlimit raised = { .rlim_cur = need, .rlim_max = rl.rlim_max };
		if (raised.rlim_max != RLIM_INFINITY && raised.rlim_max < need)
			raised.rlim_max = need;
		if (setrlimit(RLIMIT_NOFILE, &raised) != 0 && rl.rlim_max > rl.rlim_cur) {
			/* Not allowed to raise the hard limit: take what it allows. */
			raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : rl.rlim_max;
			raised.rlim_max = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &raised);
		}
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t lim = rl.rlim_cur;
		uint64_t reserve = SH_MAX(lim / 4, (uint64_t)POSIX_FD_RESERVE);
		uint64_t allowed = lim >= 2 * reserve ? lim - reserve : lim / 2;
		if (max > allowed) {
			log_msg(wanted != 0 ? LOG_WARN : LOG_INFO,
				"posix: fd cache limited to %llu by RLIMIT_NOFILE %llu",
				(unsigned long long)allowed, (unsigned long long)lim);
			max = allowed;
		}
	}
	if (max < 8)
		max = 8; /* a request holds at most three entries (RENAME, LINK) at once */
	return (uint32_t)max;
}

/* File system magic numbers (statfs f_type) of the journalling file systems recognised. */
#define POSIX_EXT4_MAGIC 0xEF53u     /* ext2, ext3 and ext4 share it */
#define POSIX_XFS_MAGIC 0x58465342u

/* Whether the block device holding dev has a jbd2 journal: jbd2 lists each journal it runs in
 * /proc/fs/jbd2 as "<device name>-<journal inode>", and the device's name is the last
 * component of its /sys/dev/block/MAJOR:MINOR link. */
static bool posix_dev_has_jbd2(dev_t dev)
{
	char link[64], target[PATH_MAX];
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(dev), minor(dev));
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return false;
	target[n] = '\0';
	const char *name = strrchr(target, '/');
	name = name ? name + 1 : target;
	size_t len = strlen(name);
	DIR *dir = opendir("/proc/fs/jbd2");
	if (dir == NULL)
		return false;
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(dir)) != NULL)
		found = strncmp(e->d_name, name, len) == 0 && e->d_name[len] == '-';
	(void)closedir(dir);
	return found;
}

/* The type name of the file system mounted where fd lies ("ext4", "ext2"...): the field after
 * " - " in its line of /proc/self/mountinfo, found by the mount id statx gives. False when it
 * cannot be told. */
static bool posix_mount_type(int fd, char *out, size_t cap)
{
	struct statx stx;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0 || !(stx.stx_mask & STATX_MNT_ID))
		return false;
	FILE *mountinfo = fopen("/proc/self/mountinfo", "re");
	if (mountinfo == NULL)
		return false;
	char *line = NULL; /* getline's buffer, freed below */
	size_t line_cap = 0;
	bool found = false;
	while (!found && getline(&line, &line_cap, mountinfo) > 0) {
		unsigned long long id;
		if (sscanf(line, "%llu", &id) != 1 || id != stx.stx_mnt_id)
			continue;
		const char *sep = strstr(line, " - ");
		size_t len = sep != NULL ? strcspn(sep + 3, " \n") : 0;
		if (len == 0 || len >= cap)
			break;
		memcpy(out, sep + 3, len);
		out[len] = '\0';
		found = true;
	}
	free(line);
	(void)fclose(mountinfo);
	return found;
}

/* Whether an fsync of an object just linked into a directory also makes that entry durable. ext4
 * without a journal does so: an inode added to a directory is marked as a new entry, and its
 * fsync then writes the directory's blocks and inode as well, and those of each ancestor so
 * marked (fs/ext4/fsync.c, ext4_sync_parent), so that a crash soon after cannot lose the name
 * of a file that was fsynced. Counted on the development VM (/sys/block/DEV/stat): the fsync
 * of an existing file after a chmod wrote two blocks, that of a file just created three, one
 * flush each. Told by the mount's type, "ext4" (ext4's driver; an ext2 file system that
 * driver mounts is named "ext2" and is not assumed to), not by the magic number, which ext2's
 * own driver shares and which does no such thing. */
static bool posix_fsync_writes_new_entry(int fd, bool journal)
{
	char type[32];
	return !journal && posix_mount_type(fd, type, sizeof(type)) && strcmp(type, "ext4") == 0;
}

/* Whether the file system of fd journals namespace changes, so that a directory's fsync commits
 * the objects created in it (see Durability above). Unknown file systems are assumed not to. */
static bool posix_fs_journals(int fd, dev_t dev)
{
	struct statfs sfs;
	if (fstatfs(fd, &sfs) != 0)
		return false;
	if ((unsigned long)sfs.f_type == POSIX_XFS_MAGIC)
		return true;
	return (unsigned long)sfs.f_type == POSIX_EXT4_MAGIC && posix_dev_has_jbd2(dev);
}

int posix_fs_create(const struct posix_fs_config *config, struct fs **out)
{
	struct posix_fs *pf;
	struct stat st;
	int rc;

	if (config == NULL || config->pfc_root_path == NULL || out == NULL)
		return -EINVAL;
	posix_cred_save_process_groups();
	rc = posix_cred_root();
	if (rc != 0)
		return rc;
	pf = mem_zalloc(sizeof(*pf));
	if (pf == NULL)
		return -ENOMEM;
	pf->pf_fs.fs_ops = &posix_fs_ops;
	pf->pf_fs.fs_fsid = config->pfc_fsid;
	pf->pf_write_nowait = true;

	pf->pf_root_fd = open(config->pfc_root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pf->pf_root_fd < 0) {
		rc = -errno;
		goto out_free;
	}
	rc = posix_stat_fd(pf->pf_root_fd, &st);
	if (rc != 0)
		goto out_close;
	pf->pf_root_dev = st.st_dev;
	pf->pf_root_ino = st.st_ino;
	pf->pf_journal = posix_fs_journals(pf->pf_root_fd, st.st_dev);
	pf->pf_new_entry_with_object = posix_fsync_writes_new_entry(pf->pf_root_fd, pf->pf_journal);
	rc = posix_probe_handles(pf);
	if (rc != 0)
		goto out_close;
	rc = posix_id_at(pf, pf->pf_root_fd, "", AT_EMPTY_PATH, FS_DIR, &pf->pf_root_id);
	if (rc != 0)
		goto out_close;
	rc = sh_random_bytes(pf->pf_write_verf, sizeof(pf->pf_write_verf));
	if (rc != 0)
		goto out_close;
	/* umask can only be read by setting it; done once, before any worker runs. */
	pf->pf_umask = umask(0);
	umask(pf->pf_umask);
	posix_fill_info(pf);

	rc = posix_fdcache_init(&pf->pf_cache, posix_cache_limit(config->pfc_fd_cache_max),
	                        config->pfc_fd_idle_s ? config->pfc_fd_idle_s
	                                              : POSIX_FD_IDLE_S_DEFAULT);
	if (rc != 0)
		goto out_close;
	rc = posix_idcache_init(&pf->pf_idcache, config->pfc_idcache_slots);
	if (rc != 0)
		goto out_cache;
	rc = posix_pipes_init(&pf->pf_pipes);
	if (rc != 0)
		goto out_cache;
	rc = posix_direct_init(pf, config->pfc_buffered_writes);
	if (rc != 0)
		goto out_pipes;
	rc = -pthread_mutex_init(&pf->pf_queue_lock, NULL);
	if (rc != 0)
		goto out_direct;
	rc = -pthread_cond_init(&pf->pf_queue_cond, NULL);
	if (rc != 0)
		goto out_lock;
	pf->pf_nworkers = config->pfc_nworkers != 0 ? config->pfc_nworkers : POSIX_NWORKERS_DEFAULT;
	pf->pf_workers = mem_zalloc(pf->pf_nworkers * sizeof(pf->pf_workers[0]));
	if (pf->pf_workers == NULL) {
		rc = -ENOMEM;
		goto out_cond;
	}
	for (unsigned i = 0; i < pf->pf_nworkers; i++) {
		rc = -pthread_create(&pf->pf_workers[i], NULL, posix_worker_main, pf);
		if (rc != 0) {
			posix_stop_workers(pf, i);
			goto out_workers;
		}
	}
	if (!config->pfc_no_write_behind) {
		rc = posix_writeback_start(pf, config->pfc_write_behind_burst);
		if (rc != 0) {
			posix_stop_workers(pf, pf->pf_nworkers);
			goto out_workers;
		}
	}
	log_info("posix: exporting %s (fsid %llu, %u workers, %u cached fds, %s, %s)",
		 config->pfc_root_path, (unsigned long long)config->pfc_fsid, pf->pf_nworkers,
		 pf->pf_cache.pc_max_fds,
		 pf->pf_direct.pd_enabled ? "large UNSTABLE writes direct" : "every write buffered",
		 pf->pf_journal ? "journalling file system: new objects durable with their directory"
		 : pf->pf_new_entry_with_object
			 ? "ext4 without a journal: new objects fsynced with their directory entry"
			 : "new objects fsynced before their directory");
	*out = &pf->pf_fs;
	return 0;

out_workers:
	mem_free(pf->pf_workers);
out_cond:
	pthread_cond_destroy(&pf->pf_queue_cond);
out_lock:
	pthread_mutex_destroy(&pf->pf_queue_lock);
out_direct:
	posix_direct_fini(pf);
out_pipes:
	posix_pipes_fini(&pf->pf_pipes);
out_cache:
	posix_idcache_fini(&pf->pf_idcache);
	posix_fdcache_fini(&pf->pf_cache);
out_close:
	(void)close(pf->pf_root_fd);
out_free:
	mem_free(pf);
	return rc;
}
