/* test_posix.c: unit tests of the posix back end, driving the fs interface directly over real
 * files in a temporary directory (as root: handles and identity switching need it), including
 * the id cache (inode numbers reused, renames, more names than slots) and the group commit of
 * directory fsyncs (with fsync replaced by a hook that can hold or fail it). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs.h"
#include "loop/loop.h"
#include "posix/posix.h"
#include "posix/posix_impl.h"
#include "tap.h"

static char g_base[64];    /* the temporary directory */
static char g_export[128]; /* g_base/export: the exported tree */
static char g_outside[128]; /* g_base/outside: same host fs, not exported */
static struct fs *g_fs;
static struct fs_obj_id g_root;

static const struct fs_cred g_rootc = { .fc_uid = 0, .fc_gid = 0 };
static const struct fs_cred g_user = { .fc_uid = 1000, .fc_gid = 1000 };

/* ---- running requests ---- */

struct waiter {
	pthread_mutex_t w_lock;
	pthread_cond_t w_cond;
	bool w_done;
	pthread_t w_thread; /* where fr_done ran */
};

static void waiter_done(struct fs_req *req)
{
	struct waiter *w = req->fr_done_arg;
	pthread_mutex_lock(&w->w_lock);
	w->w_done = true;
	w->w_thread = pthread_self();
	pthread_cond_signal(&w->w_cond);
	pthread_mutex_unlock(&w->w_lock);
}

static int run_on(struct fs *fs, struct fs_req *req, pthread_t *done_thread)
{
	struct waiter w = { .w_done = false };
	pthread_mutex_init(&w.w_lock, NULL);
	pthread_cond_init(&w.w_cond, NULL);
	req->fr_fs = fs;
	req->fr_loop = NULL;
	req->fr_done = waiter_done;
	req->fr_done_arg = &w;
	fs_submit(req);
	pthread_mutex_lock(&w.w_lock);
	while (!w.w_done)
		pthread_cond_wait(&w.w_cond, &w.w_lock);
	pthread_mutex_unlock(&w.w_lock);
	pthread_cond_destroy(&w.w_cond);
	pthread_mutex_destroy(&w.w_lock);
	if (done_thread != NULL)
		*done_thread = w.w_thread;
	/* Inline requests switched this thread's fs identity; the test's own file work is root's. */
	VERIFY(posix_thread_cred_reset() == 0);
	return req->fr_status;
}

static int run(struct fs_req *req)
{
	return run_on(g_fs, req, NULL);
}

static void req_init(struct fs_req *req, enum fs_op op, const struct fs_obj_id *obj,
		     const struct fs_cred *cred)
{
	memset(req, 0, sizeof(*req));
	req->fr_op = op;
	req->fr_cred = cred;
	if (obj != NULL)
		req->fr_obj = *obj;
}

static bool id_equal(const struct fs_obj_id *a, const struct fs_obj_id *b)
{
	return a->foi_len == b->foi_len && memcmp(a->foi_bytes, b->foi_bytes, a->foi_len) == 0;
}

static int do_lookup(const struct fs_obj_id *dir, const char *name, const struct fs_cred *cred,
		     struct fs_obj_id *id, struct fs_attr *attr)
{
	struct fs_req r;
	req_init(&r, FS_OP_LOOKUP, dir, cred);
	r.u.lookup.lk_name = name;
	int rc = run(&r);
	if (rc == 0 && id != NULL)
		*id = r.u.lookup.lk_obj;
	if (rc == 0 && attr != NULL)
		*attr = r.u.lookup.lk_attr;
	return rc;
}

static int do_getattr(const struct fs_obj_id *obj, struct fs_attr *attr)
{
	struct fs_req r;
	req_init(&r, FS_OP_GETATTR, obj, &g_rootc);
	int rc = run(&r);
	if (rc == 0 && attr != NULL)
		*attr = r.u.getattr.ga_attr;
	return rc;
}

static int do_create(const struct fs_obj_id *dir, const char *name, enum fs_create_mode how,
		     int mode, const uint8_t *verf, const struct fs_cred *cred, struct fs_obj_id *id,
		     struct fs_attr *attr)
{
	struct fs_req r;
	req_init(&r, FS_OP_CREATE, dir, cred);
	r.u.create.cr_name = name;
	r.u.create.cr_mode = how;
	if (mode >= 0) {
		r.u.create.cr_sattr.fs_set_mode = true;
		r.u.create.cr_sattr.fs_mode = (uint32_t)mode;
	}
	if (verf != NULL)
		memcpy(r.u.create.cr_verf, verf, 8);
	int rc = run(&r);
	if (rc == 0 && id != NULL)
		*id = r.u.create.cr_obj;
	if (rc == 0 && attr != NULL)
		*attr = r.u.create.cr_attr;
	return rc;
}

static int do_mkdir(const struct fs_obj_id *dir, const char *name, uint32_t mode,
		    const struct fs_cred *cred, struct fs_obj_id *id)
{
	struct fs_req r;
	req_init(&r, FS_OP_MKDIR, dir, cred);
	r.u.create.cr_name = name;
	r.u.create.cr_sattr.fs_set_mode = true;
	r.u.create.cr_sattr.fs_mode = mode;
	int rc = run(&r);
	if (rc == 0 && id != NULL)
		*id = r.u.create.cr_obj;
	return rc;
}

static int do_write(const struct fs_obj_id *obj, uint64_t off, const char *data,
		    enum fs_stable stable, const struct fs_cred *cred, struct fs_req *out)
{
	struct fs_req r;
	req_init(&r, FS_OP_WRITE, obj, cred);
	r.u.write.wr_offset = off;
	r.u.write.wr_data = data;
	r.u.write.wr_len = (uint32_t)strlen(data);
	r.u.write.wr_stable = stable;
	int rc = run(&r);
	if (out != NULL)
		*out = r;
	return rc;
}

/* Reads into buf (NUL-terminated); returns the status. */
static int do_read(const struct fs_obj_id *obj, uint64_t off, uint32_t count,
		   const struct fs_cred *cred, char *buf, size_t bufsize, bool *eof)
{
	struct fs_req r;
	req_init(&r, FS_OP_READ, obj, cred);
	r.u.read.rd_offset = off;
	r.u.read.rd_count = count;
	int rc = run(&r);
	buf[0] = '\0';
	if (rc == 0) {
		size_t n = SH_MIN((size_t)r.u.read.rd_buf.fb_len, bufsize - 1);
		CHECK(r.u.read.rd_buf.fb_data != NULL);
		if (n > 0)
			memcpy(buf, r.u.read.rd_buf.fb_data, n);
		buf[n] = '\0';
		if (eof != NULL)
			*eof = r.u.read.rd_eof;
	}
	r.u.read.rd_buf.fb_release(r.u.read.rd_buf.fb_release_arg);
	return rc;
}

static int do_remove(enum fs_op op, const struct fs_obj_id *dir, const char *name,
		     const struct fs_cred *cred)
{
	struct fs_req r;
	req_init(&r, op, dir, cred);
	r.u.remove.rm_name = name;
	return run(&r);
}

static void host_path(char *out, size_t size, const char *rel)
{
	snprintf(out, size, "%s/%s", g_export, rel);
}

static void host_write(const char *rel, const char *data, mode_t mode)
{
	char p[512];
	host_path(p, sizeof(p), rel);
	int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, mode);
	VERIFY(fd >= 0);
	VERIFY(write(fd, data, strlen(data)) == (ssize_t)strlen(data));
	VERIFY(fchmod(fd, mode) == 0);
	close(fd);
}

static bool host_stat(const char *rel, struct stat *st)
{
	char p[512];
	host_path(p, sizeof(p), rel);
	return lstat(p, st) == 0;
}

/* Open fds of this process on a file whose path ends in suffix. */
static int fds_on(const char *suffix)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	VERIFY(d != NULL);
	struct dirent *e;
	size_t sl = strlen(suffix);
	while ((e = readdir(d)) != NULL) {
		char path[300], target[512];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len >= (ssize_t)sl) {
			target[len] = '\0';
			n += strcmp(target + len - (ssize_t)sl, suffix) == 0;
		}
	}
	closedir(d);
	return n;
}

/* Open fds of this process whose path starts with prefix (inside), or does not (!inside). */
static int fds_prefixed(const char *prefix, bool inside)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	VERIFY(d != NULL);
	struct dirent *e;
	size_t pl = strlen(prefix);
	while ((e = readdir(d)) != NULL) {
		char path[300], target[512];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue; /* the directory's own fd, closed by now */
		target[len] = '\0';
		n += (strncmp(target, prefix, pl) == 0) == inside;
	}
	closedir(d);
	return n;
}

/* Open fds of this process whose file has been deleted (a cached fd that keeps its space). */
static int deleted_fd_count(void)
{
	return fds_on(" (deleted)");
}

/* Builds an id in this back end's format for a host path (as a forger who knows the format). */
static void forge_id(const char *path, enum fs_type type, struct fs_obj_id *id)
{
	_Alignas(struct file_handle) uint8_t buf[sizeof(struct file_handle) + 128];
	struct file_handle *fh = (struct file_handle *)(void *)buf;
	int mnt;
	fh->handle_bytes = 128;
	VERIFY(name_to_handle_at(AT_FDCWD, path, fh, &mnt, 0) == 0);
	*id = g_root; /* version and export tag */
	id->foi_bytes[POSIX_ID_OFF_TYPE] = (uint8_t)type;
	memcpy(id->foi_bytes + POSIX_ID_OFF_HTYPE, &fh->handle_type, 4);
	memcpy(id->foi_bytes + POSIX_ID_OFF_HANDLE, fh->f_handle, fh->handle_bytes);
	id->foi_len = (uint8_t)(POSIX_ID_OFF_HANDLE + fh->handle_bytes);
}

/* ---- cases ---- */

static void test_root_getattr(void)
{
	struct fs_attr a;
	struct stat st;
	CHECK(do_getattr(&g_root, &a) == 0);
	CHECK(stat(g_export, &st) == 0);
	CHECK(a.fa_type == FS_DIR);
	CHECK(a.fa_fileid == (uint64_t)st.st_ino);
	CHECK(a.fa_mode == (st.st_mode & 07777));
	CHECK(a.fa_fsid == 77);
	struct fs_info fi;
	fs_info(g_fs, &fi);
	CHECK(fi.fi_name_max == 255 && fi.fi_has_symlinks && fi.fi_link_max > 1);
	uint8_t v1[8], v2[8];
	fs_write_verifier(g_fs, v1);
	fs_write_verifier(g_fs, v2);
	CHECK(memcmp(v1, v2, 8) == 0);
}

static void test_lookup_dots(void)
{
	struct fs_obj_id id, sub, up;
	struct fs_attr a;
	CHECK(do_lookup(&g_root, ".", &g_rootc, &id, NULL) == 0);
	CHECK(id_equal(&id, &g_root));
	/* ".." of the export root is the root, not the host parent. */
	CHECK(do_lookup(&g_root, "..", &g_rootc, &id, &a) == 0);
	CHECK(id_equal(&id, &g_root));
	CHECK(do_mkdir(&g_root, "dots", 0755, &g_rootc, &sub) == 0);
	CHECK(do_lookup(&sub, "..", &g_rootc, &up, NULL) == 0);
	CHECK(id_equal(&up, &g_root));
	CHECK(do_lookup(&g_root, "dots", &g_rootc, &id, &a) == 0);
	CHECK(id_equal(&id, &sub) && a.fa_type == FS_DIR);
	CHECK(do_lookup(&g_root, "missing", &g_rootc, &id, NULL) == -ENOENT);
	CHECK(do_lookup(&g_root, "a/b", &g_rootc, &id, NULL) == -EACCES);
	CHECK(do_lookup(&g_root, "", &g_rootc, &id, NULL) == -EINVAL);
}

static void test_create_modes(void)
{
	struct fs_obj_id id, id2;
	struct fs_attr a;
	struct stat st;
	/* The test runs with umask 077: the client's mode must still be exact. */
	CHECK(do_create(&g_root, "c1", FS_CREATE_UNCHECKED, 0664, NULL, &g_rootc, &id, &a) == 0);
	CHECK(a.fa_type == FS_REG && a.fa_mode == 0664 && a.fa_size == 0);
	CHECK(host_stat("c1", &st) && (st.st_mode & 07777) == 0664);
	CHECK(do_create(&g_root, "c1", FS_CREATE_GUARDED, 0600, NULL, &g_rootc, &id2, NULL) == -EEXIST);
	host_write("c1", "some data", 0664);
	/* UNCHECKED over an existing file: same object; a size given truncates. */
	struct fs_req r;
	req_init(&r, FS_OP_CREATE, &g_root, &g_rootc);
	r.u.create.cr_name = "c1";
	r.u.create.cr_mode = FS_CREATE_UNCHECKED;
	r.u.create.cr_sattr.fs_set_size = true;
	r.u.create.cr_sattr.fs_size = 0;
	CHECK(run(&r) == 0);
	CHECK(id_equal(&r.u.create.cr_obj, &id));
	CHECK(host_stat("c1", &st) && st.st_size == 0);
	CHECK(do_create(&g_root, "dots", FS_CREATE_UNCHECKED, 0600, NULL, &g_rootc, &id2, NULL) ==
	      -EEXIST);
	CHECK(do_create(&g_root, "..", FS_CREATE_UNCHECKED, 0600, NULL, &g_rootc, &id2, NULL) ==
	      -EEXIST);
}

static void test_exclusive_create(void)
{
	const uint8_t va[8] = { 0xde, 0xad, 0xbe, 0xef, 0x80, 0x01, 0x02, 0x03 };
	const uint8_t vb[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct fs_obj_id id1, id2;
	struct fs_attr a;
	CHECK(do_create(&g_root, "ex", FS_CREATE_EXCLUSIVE, -1, va, &g_rootc, &id1, &a) == 0);
	CHECK(a.fa_type == FS_REG && a.fa_size == 0);
	/* A retransmission with the same verifier succeeds with the same object. */
	CHECK(do_create(&g_root, "ex", FS_CREATE_EXCLUSIVE, -1, va, &g_rootc, &id2, NULL) == 0);
	CHECK(id_equal(&id1, &id2));
	CHECK(do_create(&g_root, "ex", FS_CREATE_EXCLUSIVE, -1, vb, &g_rootc, &id2, NULL) == -EEXIST);
	/* The client's following SETATTR sets real times (and the mode). */
	struct fs_req r;
	req_init(&r, FS_OP_SETATTR, &id1, &g_rootc);
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 0644;
	r.u.setattr.sa_sattr.fs_atime_how = FS_TIME_SERVER;
	r.u.setattr.sa_sattr.fs_mtime_how = FS_TIME_SERVER;
	CHECK(run(&r) == 0);
	CHECK(r.u.setattr.sa_wcc.fw_post_valid);
	CHECK(r.u.setattr.sa_wcc.fw_post.fa_mode == 0644);
	int64_t now = (int64_t)time(NULL);
	CHECK(r.u.setattr.sa_wcc.fw_post.fa_mtime.ft_sec >= now - 5);
	CHECK(r.u.setattr.sa_wcc.fw_post.fa_atime.ft_sec >= now - 5);
	/* Once the times are real, the old verifier no longer matches. */
	CHECK(do_create(&g_root, "ex", FS_CREATE_EXCLUSIVE, -1, va, &g_rootc, &id2, NULL) == -EEXIST);
}

/* cachestat(2) of a host file: pages in the cache, dirty, under writeback (Linux 6.5). */
struct wb_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
/* The host's page-cache figures of a file from off for len bytes (len 0: to the end). */
static int host_cachestat(const char *rel, uint64_t off, uint64_t len, struct wb_cachestat *cs)
{
	char p[512];
	host_path(p, sizeof(p), rel);
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return -errno;
	struct { uint64_t off, len; } range = { off, len };
	long rc = syscall(451 /* __NR_cachestat */, fd, &range, cs, 0);
	int err = rc == 0 ? 0 : -errno;
	close(fd);
	return err;
}

/* Drops the host file name's pages from the page cache; false (with a message) if some stay. */
static bool drop_from_page_cache(const char *name)
{
	char p[512];
	host_path(p, sizeof(p), name);
	int fd = open(p, O_RDONLY);
	if (fd < 0 || fsync(fd) != 0) {
		fprintf(stderr, "  # %s: %s\n", p, strerror(errno));
		if (fd >= 0)
			close(fd);
		return false;
	}
	/* A page just added may sit in another CPU's LRU batch, which DONTNEED skips: again until
	 * the cache holds none of the file. */
	struct wb_cachestat cs = {.nr_cache = 1};
	for (int i = 0; i < 100 && cs.nr_cache > 0; i++) {
		if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
			break;
		if (host_cachestat(name, 0, 0, &cs) != 0 || cs.nr_cache > 0)
			usleep(10000);
	}
	close(fd);
	if (cs.nr_cache > 0)
		fprintf(stderr, "  # %s stays in the page cache: %llu pages\n", name,
			(unsigned long long)cs.nr_cache);
	return cs.nr_cache == 0;
}

static void test_write_read_commit(void)
{
	struct fs_obj_id id;
	struct fs_req w;
	char buf[64];
	bool eof = false;
	pthread_t done_thread;
	CHECK(do_create(&g_root, "wr", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &id, NULL) == 0);
	CHECK(do_write(&id, 0, "hello", FS_UNSTABLE, &g_rootc, &w) == 0);
	CHECK(w.u.write.wr_count == 5 && w.u.write.wr_committed == FS_UNSTABLE);
	CHECK(w.u.write.wr_wcc.fw_pre_valid && w.u.write.wr_wcc.fw_pre_size == 0);
	CHECK(w.u.write.wr_wcc.fw_post_valid && w.u.write.wr_wcc.fw_post.fa_size == 5);
	CHECK(do_read(&id, 0, 100, &g_rootc, buf, sizeof(buf), &eof) == 0);
	CHECK(strcmp(buf, "hello") == 0 && eof);
	/* An UNSTABLE write and a read of cached data complete inline, on the submitting thread. */
	struct fs_req q;
	req_init(&q, FS_OP_WRITE, &id, &g_rootc);
	q.u.write.wr_data = "h";
	q.u.write.wr_len = 1;
	q.u.write.wr_stable = FS_UNSTABLE;
	CHECK(run_on(g_fs, &q, &done_thread) == 0 && pthread_equal(done_thread, pthread_self()));
	req_init(&q, FS_OP_READ, &id, &g_rootc);
	q.u.read.rd_count = 5;
	CHECK(run_on(g_fs, &q, &done_thread) == 0 && pthread_equal(done_thread, pthread_self()));
	q.u.read.rd_buf.fb_release(q.u.read.rd_buf.fb_release_arg);
	CHECK(do_read(&id, 1, 2, &g_rootc, buf, sizeof(buf), &eof) == 0);
	CHECK(strcmp(buf, "el") == 0 && !eof);
	CHECK(do_read(&id, 100, 2, &g_rootc, buf, sizeof(buf), &eof) == 0);
	CHECK(buf[0] == '\0' && eof);

	/* Stable writes run on a worker thread and report the stability they got. */
	struct fs_req r;
	req_init(&r, FS_OP_WRITE, &id, &g_rootc);
	r.u.write.wr_offset = 5;
	r.u.write.wr_data = " world";
	r.u.write.wr_len = 6;
	r.u.write.wr_stable = FS_FILE_SYNC;
	CHECK(run_on(g_fs, &r, &done_thread) == 0);
	CHECK(r.u.write.wr_count == 6 && r.u.write.wr_committed == FS_FILE_SYNC);
	CHECK(!pthread_equal(done_thread, pthread_self()));
	CHECK(do_write(&id, 11, "!", FS_DATA_SYNC, &g_rootc, &w) == 0);
	CHECK(w.u.write.wr_committed == FS_DATA_SYNC && w.u.write.wr_count == 1);
	char p[512];
	host_path(p, sizeof(p), "wr");
	int fd = open(p, O_RDONLY);
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	CHECK(n == 12 && memcmp(buf, "hello world!", 12) == 0);

	req_init(&r, FS_OP_COMMIT, &id, &g_rootc);
	CHECK(run(&r) == 0);
	CHECK(r.u.commit.cm_wcc.fw_post_valid && r.u.commit.cm_wcc.fw_post.fa_size == 12);
	/* Data not in the page cache is read by a worker, never inline. RWF_NOWAIT starts the
	 * readahead of a missing page before it gives up, and a fast device can finish that first,
	 * so one cold read may complete inline: of several, at least one must reach a worker. */
	host_write("cold", "cold data", 0644);
	struct fs_obj_id cold;
	CHECK(do_lookup(&g_root, "cold", &g_rootc, &cold, NULL) == 0);
	bool on_worker = false;
	for (int attempt = 0; attempt < 5 && !on_worker; attempt++) {
		CHECK(drop_from_page_cache("cold"));
		req_init(&q, FS_OP_READ, &cold, &g_rootc);
		q.u.read.rd_count = 100;
		CHECK(run_on(g_fs, &q, &done_thread) == 0);
		CHECK(q.u.read.rd_buf.fb_len == 9 &&
		      memcmp(q.u.read.rd_buf.fb_data, "cold data", 9) == 0);
		CHECK(q.u.read.rd_eof);
		on_worker = !pthread_equal(done_thread, pthread_self());
		q.u.read.rd_buf.fb_release(q.u.read.rd_buf.fb_release_arg);
	}
	CHECKF(on_worker, "five reads of a file just dropped from the page cache all ran inline");
	/* READ and WRITE of a directory. */
	CHECK(do_read(&g_root, 0, 10, &g_rootc, buf, sizeof(buf), NULL) == -EISDIR);
	CHECK(do_write(&g_root, 0, "x", FS_UNSTABLE, &g_rootc, NULL) == -EISDIR);
}

/* Reads count bytes at off with rd_pipe_ok into out (which gets fb_len bytes); returns the
 * status and whether the data came in a pipe. The release runs before returning. */
static int do_read_pipe_ok(const struct fs_obj_id *obj, uint64_t off, uint32_t count,
			   uint8_t *out, uint32_t *len_out, bool *piped_out, bool *eof_out,
			   pthread_t *done_thread)
{
	struct fs_req r;
	req_init(&r, FS_OP_READ, obj, &g_rootc);
	r.u.read.rd_offset = off;
	r.u.read.rd_count = count;
	r.u.read.rd_pipe_ok = true;
	int rc = run_on(g_fs, &r, done_thread);
	struct fs_buf *b = &r.u.read.rd_buf;
	*len_out = b->fb_len;
	*piped_out = b->fb_piped;
	*eof_out = r.u.read.rd_eof;
	if (rc == 0 && b->fb_piped) {
		size_t got = 0;
		while (got < b->fb_len) {
			ssize_t n = read(b->fb_pipe_fd, out + got, b->fb_len - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		CHECK(got == b->fb_len);
	} else if (rc == 0 && b->fb_len > 0) {
		memcpy(out, b->fb_data, b->fb_len);
	}
	b->fb_release(b->fb_release_arg);
	return rc;
}

/* READs of 64 KiB and more, for a caller that can send a pipe, come in a pipe of page-cache
 * pages; the export's pipes are reused once emptied and closed when a reply dropped its bytes.
 * Smaller, unaligned-beyond-a-pipe and pipe-less READs copy; cold data is spliced by a worker. */
static void test_read_piped(void)
{
	const uint32_t size = 3u << 20;
	uint8_t *data = mem_alloc(size), *got = mem_alloc(size);
	VERIFY(data != NULL && got != NULL);
	for (uint32_t i = 0; i < size; i++)
		data[i] = (uint8_t)(i * 7u + (i >> 12));
	char p[512];
	host_path(p, sizeof(p), "piped");
	int fd = open(p, O_CREAT | O_TRUNC | O_RDWR, 0644);
	VERIFY(fd >= 0 && write(fd, data, size) == (ssize_t)size);
	struct fs_obj_id id;
	CHECK(do_lookup(&g_root, "piped", &g_rootc, &id, NULL) == 0);
	struct posix_pipes *pipes = &posix_fs_of(g_fs)->pf_pipes;
	unsigned pipes0 = pipes->pp_count;
	uint32_t len;
	bool piped, eof;
	pthread_t done_thread;

	/* Cached: inline, in a pipe, the right bytes; the emptied pipe is reused. */
	for (int round = 0; round < 3; round++) {
		CHECK(do_read_pipe_ok(&id, 1u << 20, 1u << 20, got, &len, &piped, &eof,
				      &done_thread) == 0);
		CHECK(piped && len == 1u << 20 && !eof);
		CHECK(pthread_equal(done_thread, pthread_self()));
		CHECK(memcmp(got, data + (1u << 20), len) == 0);
		CHECK(pipes->pp_count == pipes0 + 1 && pipes->pp_nfree == pipes->pp_count);
	}
	/* The last bytes of the file: a short READ with eof. */
	CHECK(do_read_pipe_ok(&id, size - 100000, 1u << 20, got, &len, &piped, &eof, NULL) == 0);
	CHECK(piped && len == 100000 && eof && memcmp(got, data + size - 100000, len) == 0);
	/* Small, or spanning more pages than a pipe holds, or not allowed: copied. */
	CHECK(do_read_pipe_ok(&id, 4096, 32768, got, &len, &piped, &eof, NULL) == 0);
	CHECK(!piped && len == 32768 && memcmp(got, data + 4096, len) == 0);
	CHECK(do_read_pipe_ok(&id, 100, 1u << 20, got, &len, &piped, &eof, NULL) == 0);
	CHECK(!piped && len == 1u << 20 && memcmp(got, data + 100, len) == 0);
	struct fs_req r;
	req_init(&r, FS_OP_READ, &id, &g_rootc);
	r.u.read.rd_count = 1u << 20;
	CHECK(run(&r) == 0 && !r.u.read.rd_buf.fb_piped && r.u.read.rd_buf.fb_len == 1u << 20);
	r.u.read.rd_buf.fb_release(r.u.read.rd_buf.fb_release_arg);

	/* A pipe released with its bytes unread is closed; the file truncated under a pipe does not
	 * take the bytes the pipe holds. */
	req_init(&r, FS_OP_READ, &id, &g_rootc);
	r.u.read.rd_count = 256u << 10;
	r.u.read.rd_pipe_ok = true;
	CHECK(run(&r) == 0 && r.u.read.rd_buf.fb_piped);
	CHECK(ftruncate(fd, 0) == 0);
	int queued = -1;
	CHECK(ioctl(r.u.read.rd_buf.fb_pipe_fd, FIONREAD, &queued) == 0 && queued == 256 << 10);
	unsigned before = pipes->pp_count;
	r.u.read.rd_buf.fb_release(r.u.read.rd_buf.fb_release_arg);
	CHECK(pipes->pp_count == before - 1 && pipes->pp_nfree == pipes->pp_count);

	/* Not in the page cache: a worker splices it (inline, the range is not all cached). */
	VERIFY(pwrite(fd, data, size, 0) == (ssize_t)size);
	CHECK(fsync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
	CHECK(do_read_pipe_ok(&id, 0, 1u << 20, got, &len, &piped, &eof, &done_thread) == 0);
	CHECK(piped && len == 1u << 20 && memcmp(got, data, len) == 0);
	CHECK(!pthread_equal(done_thread, pthread_self()));
	close(fd);
	mem_free(data);
	mem_free(got);
}

static int host_dirty_pages(const char *rel, uint64_t *dirty)
{
	struct wb_cachestat cs;
	int rc = host_cachestat(rel, 0, 0, &cs);
	if (rc == 0)
		*dirty = cs.nr_dirty;
	return rc;
}

/* An UNSTABLE WRITE's pages are sent to the disk about a second later (posix_writeback.c), not
 * after the kernel's 30 seconds; the data stays right. */
static void test_write_behind(void)
{
	struct fs_obj_id id;
	static char data[200 * 1024 + 1]; /* below POSIX_DIRECT_MIN_BYTES: buffered */
	memset(data, 'w', sizeof(data) - 1);
	CHECK(do_create(&g_root, "wb", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &id, NULL) == 0);
	CHECK(do_write(&id, 0, data, FS_UNSTABLE, &g_rootc, NULL) == 0);
	uint64_t dirty = 0;
	int rc = host_dirty_pages("wb", &dirty);
	CHECKF(rc == 0, "cachestat: %d", rc);
	CHECKF(dirty > 0, "no dirty page right after the write");
	uint64_t t0 = clock_monotonic_ns();
	while (rc == 0 && dirty > 0 && clock_monotonic_ns() - t0 < 5000000000ull) {
		usleep(50 * 1000);
		rc = host_dirty_pages("wb", &dirty);
	}
	CHECKF(rc == 0 && dirty == 0, "%llu pages still dirty after %.1f s",
	       (unsigned long long)dirty, (double)(clock_monotonic_ns() - t0) / 1e9);
	char buf[64];
	bool eof;
	CHECK(do_read(&id, 1000, 10, &g_rootc, buf, sizeof(buf), &eof) == 0);
	CHECK(strcmp(buf, "wwwwwwwwww") == 0);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "wb", &g_rootc) == 0);
}

/* One WRITE of len bytes of data at off on fs; returns the status, the request in *out. */
static int write_bytes(struct fs *fs, const struct fs_obj_id *obj, uint64_t off, const void *data,
		       uint32_t len, enum fs_stable stable, struct fs_req *out, pthread_t *done_thread)
{
	req_init(out, FS_OP_WRITE, obj, &g_rootc);
	out->u.write.wr_offset = off;
	out->u.write.wr_data = data;
	out->u.write.wr_len = len;
	out->u.write.wr_stable = stable;
	return run_on(fs, out, done_thread);
}

/* Whether the host file's bytes at off are data (read with the host's own calls). */
static bool host_bytes_are(const char *rel, uint64_t off, const void *data, size_t len)
{
	char p[512];
	host_path(p, sizeof(p), rel);
	int fd = open(p, O_RDONLY);
	uint8_t *buf = malloc(len);
	bool same = fd >= 0 && buf != NULL && pread(fd, buf, len, (off_t)off) == (ssize_t)len &&
		    memcmp(buf, data, len) == 0;
	free(buf);
	if (fd >= 0)
		close(fd);
	return same;
}

/* A large aligned UNSTABLE WRITE goes to the disk directly (posix_direct.c): on a worker, from a
 * buffer of any alignment, caching nothing, coherent with buffered WRITEs of the same range
 * before and after it; small, unaligned and stable WRITEs stay buffered, and so does every
 * WRITE of a file system made with pfc_buffered_writes. Where the host file system has no
 * direct I/O, every WRITE must have been buffered. */
static void test_direct_write(void)
{
	const uint32_t mib = 1u << 20;
	struct posix_fs *pf = posix_fs_of(g_fs);
	uint8_t *raw = malloc(mib + 1), *raw2 = malloc(mib + 1);
	VERIFY(raw != NULL && raw2 != NULL);
	uint8_t *data = raw + 1, *data2 = raw2 + 1; /* as unaligned as a WRITE inside an RPC record */
	for (uint32_t i = 0; i < mib; i++) {
		data[i] = (uint8_t)(i * 7u + 3u);
		data2[i] = (uint8_t)(i * 13u + 5u);
	}
	struct fs_obj_id id;
	CHECK(do_create(&g_root, "dw", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &id, NULL) == 0);
	char p[512];
	host_path(p, sizeof(p), "dw");
	struct statx stx;
	CHECK(statx(AT_FDCWD, p, 0, STATX_DIOALIGN, &stx) == 0);
	bool host_direct = (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align != 0 &&
			   stx.stx_dio_offset_align <= 4096 && stx.stx_dio_mem_align != 0;
	uint64_t direct0 = __atomic_load_n(&pf->pf_direct.pd_writes, __ATOMIC_RELAXED);

	/* 1 MiB at 1 MiB: past the end, leaving a hole. */
	struct fs_req w;
	pthread_t done_thread;
	CHECK(write_bytes(g_fs, &id, mib, data, mib, FS_UNSTABLE, &w, &done_thread) == 0);
	CHECK(w.u.write.wr_count == mib && w.u.write.wr_committed == FS_UNSTABLE);
	CHECK(w.u.write.wr_wcc.fw_post_valid && w.u.write.wr_wcc.fw_post.fa_size == 2ull * mib);
	uint64_t direct1 = __atomic_load_n(&pf->pf_direct.pd_writes, __ATOMIC_RELAXED);
	struct wb_cachestat cs = { .nr_cache = 99 };
	CHECK(host_cachestat("dw", mib, mib, &cs) == 0);
	uint64_t cached = cs.nr_cache;
	if (host_direct) {
		CHECKF(direct1 == direct0 + 1, "%llu direct writes", (unsigned long long)(direct1 - direct0));
		CHECK(!pthread_equal(done_thread, pthread_self())); /* it waited on a worker */
		CHECKF(cached == 0, "%llu pages cached after a direct write", (unsigned long long)cached);
	} else {
		CHECK(direct1 == direct0);
	}
	CHECK(host_bytes_are("dw", mib, data, mib));
	static const uint8_t zeros[4096];
	CHECK(host_bytes_are("dw", 0, zeros, sizeof(zeros)));

	/* A buffered WRITE inside the range, then a direct one over it: the cached page goes. */
	CHECK(write_bytes(g_fs, &id, mib + 4096, "xyz", 3, FS_UNSTABLE, &w, NULL) == 0);
	CHECK(host_bytes_are("dw", mib + 4096, "xyz", 3));
	CHECK(write_bytes(g_fs, &id, mib, data2, mib, FS_UNSTABLE, &w, NULL) == 0);
	CHECK(w.u.write.wr_count == mib);
	CHECK(host_bytes_are("dw", mib, data2, mib));
	char buf[64];
	bool eof = false;
	CHECK(do_read(&id, mib + 4096, 3, &g_rootc, buf, sizeof(buf), &eof) == 0);
	CHECK(memcmp(buf, data2 + 4096, 3) == 0 && !eof);

	/* Buffered: an unaligned offset, a short WRITE, a stable one. */
	uint64_t direct2 = __atomic_load_n(&pf->pf_direct.pd_writes, __ATOMIC_RELAXED);
	CHECK(write_bytes(g_fs, &id, 100, data, mib, FS_UNSTABLE, &w, NULL) == 0);
	CHECK(w.u.write.wr_count == mib);
	CHECK(write_bytes(g_fs, &id, 2ull * mib, data, 64 * 1024, FS_UNSTABLE, &w, NULL) == 0);
	CHECK(write_bytes(g_fs, &id, 3ull * mib, data, mib, FS_FILE_SYNC, &w, NULL) == 0);
	CHECK(w.u.write.wr_committed == FS_FILE_SYNC);
	CHECK(__atomic_load_n(&pf->pf_direct.pd_writes, __ATOMIC_RELAXED) == direct2);
	CHECK(host_bytes_are("dw", 100, data, mib));
	CHECK(host_bytes_are("dw", 3ull * mib, data, mib));

	struct fs_req c;
	req_init(&c, FS_OP_COMMIT, &id, &g_rootc);
	CHECK(run(&c) == 0);
	CHECK(c.u.commit.cm_wcc.fw_post_valid && c.u.commit.cm_wcc.fw_post.fa_size == 4ull * mib);

	/* pfc_buffered_writes: never direct. */
	struct fs *fs2;
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77,
				       .pfc_nworkers = 2, .pfc_buffered_writes = true };
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	if (fs2 != NULL) {
		struct fs_obj_id id2;
		struct fs_req r;
		req_init(&r, FS_OP_LOOKUP, &g_root, &g_rootc);
		r.u.lookup.lk_name = "dw";
		CHECK(run_on(fs2, &r, NULL) == 0);
		id2 = r.u.lookup.lk_obj;
		CHECK(write_bytes(fs2, &id2, 0, data, mib, FS_UNSTABLE, &w, NULL) == 0);
		CHECK(w.u.write.wr_count == mib);
		CHECK(posix_fs_of(fs2)->pf_direct.pd_writes == 0);
		CHECK(host_bytes_are("dw", 0, data, mib));
		fs_destroy(fs2);
	}
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "dw", &g_rootc) == 0);
	free(raw);
	free(raw2);
}

/* A file that takes pf_wb_burst bytes of buffered UNSTABLE data has its write-out started at
 * once, not at the next second's pass (posix_writeback.c, rule 7); a smaller one does not. */
static void test_write_behind_burst(void)
{
	const uint32_t chunk = 100000; /* not a multiple of 512: buffered */
	static uint8_t data[100000];
	memset(data, 'b', sizeof(data));
	struct fs *fs2;
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77,
				       .pfc_nworkers = 2, .pfc_write_behind_burst = 4 * chunk };
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	if (fs2 == NULL)
		return;
	struct posix_fs *pf = posix_fs_of(fs2);
	struct fs_obj_id small_id, big_id;
	CHECK(do_create(&g_root, "wbs", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &small_id, NULL) == 0);
	CHECK(do_create(&g_root, "wbb", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &big_id, NULL) == 0);
	struct fs_req w;
	for (uint32_t i = 0; i < 3; i++)
		CHECK(write_bytes(fs2, &small_id, (uint64_t)i * chunk, data, chunk, FS_UNSTABLE, &w,
				  NULL) == 0);
	pthread_mutex_lock(&pf->pf_wb_lock);
	bool urgent = pf->pf_wb_urgent;
	uint64_t bursts0 = pf->pf_wb_bursts;
	pthread_mutex_unlock(&pf->pf_wb_lock);
	CHECKF(!urgent && bursts0 == 0, "3 of 4 chunks asked for a pass (%llu)",
	       (unsigned long long)bursts0);
	/* Twice the burst: even if a timed pass zeroes the count in between, four chunks in a row
	 * follow or precede it. */
	for (uint32_t i = 0; i < 8; i++)
		CHECK(write_bytes(fs2, &big_id, (uint64_t)i * chunk, data, chunk, FS_UNSTABLE, &w,
				  NULL) == 0);
	/* The pass comes at once: well before the second a timed pass could take. */
	uint64_t t0 = clock_monotonic_ns(), bursts = 0;
	while (clock_monotonic_ns() - t0 < 3000000000ull) {
		pthread_mutex_lock(&pf->pf_wb_lock);
		bursts = pf->pf_wb_bursts;
		pthread_mutex_unlock(&pf->pf_wb_lock);
		if (bursts > 0)
			break;
		usleep(1000);
	}
	CHECKF(bursts >= 1 && bursts <= 2, "%llu early passes after %.3f s", (unsigned long long)bursts,
	       (double)(clock_monotonic_ns() - t0) / 1e9);
	fs_destroy(fs2);
	CHECK(host_bytes_are("wbb", 7ull * chunk, data, chunk));
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "wbs", &g_rootc) == 0);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "wbb", &g_rootc) == 0);
}

static void test_setattr(void)
{
	struct fs_obj_id id;
	struct fs_attr a;
	struct stat st;
	CHECK(do_create(&g_root, "sa", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &id, NULL) == 0);
	CHECK(do_write(&id, 0, "0123456789", FS_UNSTABLE, &g_rootc, NULL) == 0);
	CHECK(do_getattr(&id, &a) == 0);

	struct fs_req r;
	req_init(&r, FS_OP_SETATTR, &id, &g_rootc);
	r.u.setattr.sa_sattr.fs_set_size = true;
	r.u.setattr.sa_sattr.fs_size = 4;
	r.u.setattr.sa_guard = true;
	r.u.setattr.sa_guard_ctime = a.fa_ctime;
	r.u.setattr.sa_guard_ctime.ft_sec -= 1; /* a stale guard */
	CHECK(run(&r) == -SH_ENOTSYNC);
	CHECK(host_stat("sa", &st) && st.st_size == 10);

	r.u.setattr.sa_guard_ctime = a.fa_ctime;
	CHECK(run(&r) == 0);
	CHECK(host_stat("sa", &st) && st.st_size == 4);
	CHECK(r.u.setattr.sa_wcc.fw_pre_valid && r.u.setattr.sa_wcc.fw_pre_size == 10);

	req_init(&r, FS_OP_SETATTR, &id, &g_rootc);
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 04750;
	r.u.setattr.sa_sattr.fs_set_uid = true;
	r.u.setattr.sa_sattr.fs_uid = 1000;
	r.u.setattr.sa_sattr.fs_set_gid = true;
	r.u.setattr.sa_sattr.fs_gid = 1001;
	r.u.setattr.sa_sattr.fs_mtime_how = FS_TIME_CLIENT;
	r.u.setattr.sa_sattr.fs_mtime.ft_sec = 1000000000;
	r.u.setattr.sa_sattr.fs_mtime.ft_nsec = 123;
	CHECK(run(&r) == 0);
	CHECK(host_stat("sa", &st));
	/* As knfsd: the change of owner revokes the set-id bits of the mode set with it. */
	CHECK((st.st_mode & 07777) == 0750 && st.st_uid == 1000 && st.st_gid == 1001);
	CHECK(st.st_mtim.tv_sec == 1000000000 && st.st_mtim.tv_nsec == 123);
	/* A non-owner may not chmod. */
	req_init(&r, FS_OP_SETATTR, &id, &(struct fs_cred){ .fc_uid = 2000, .fc_gid = 2000 });
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 0777;
	CHECK(run(&r) == -EPERM);
	/* The server's clock, set by a non-owner: allowed to whoever may write the file (knfsd,
	 * and utimensat(2) with no times), EACCES to others; the client's clock needs the owner. */
	struct fs_cred other = {.fc_uid = 2000, .fc_gid = 2000};
	req_init(&r, FS_OP_SETATTR, &id, &other);
	r.u.setattr.sa_sattr.fs_mtime_how = FS_TIME_SERVER;
	CHECK(run(&r) == -EACCES);
	req_init(&r, FS_OP_SETATTR, &id, &g_rootc);
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 0756;
	CHECK(run(&r) == 0);
	req_init(&r, FS_OP_SETATTR, &id, &other);
	r.u.setattr.sa_sattr.fs_mtime_how = FS_TIME_SERVER;
	CHECK(run(&r) == 0);
	CHECK(host_stat("sa", &st) && st.st_mtim.tv_sec > 1500000000 && st.st_uid == 1000);
	req_init(&r, FS_OP_SETATTR, &id, &other);
	r.u.setattr.sa_sattr.fs_mtime_how = FS_TIME_CLIENT;
	r.u.setattr.sa_sattr.fs_mtime.ft_sec = 1000000000;
	CHECK(run(&r) == -EPERM);

	/* CREATE UNCHECKED with a size over an existing file: its owner may truncate it even
	 * where the mode denies writing (knfsd's owner override, as for SETATTR), no one else. */
	struct fs_obj_id own;
	CHECK(do_create(&g_root, "own", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &own, NULL) == 0);
	CHECK(do_write(&own, 0, "0123456789", FS_FILE_SYNC, &g_rootc, NULL) == 0);
	req_init(&r, FS_OP_SETATTR, &own, &g_rootc);
	r.u.setattr.sa_sattr.fs_set_uid = true;
	r.u.setattr.sa_sattr.fs_uid = other.fc_uid;
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 0444;
	CHECK(run(&r) == 0);
	struct fs_cred third = {.fc_uid = 3000, .fc_gid = 3000};
	const struct fs_cred *who[] = {&third, &other};
	for (int i = 0; i < 2; i++) {
		req_init(&r, FS_OP_CREATE, &g_root, who[i]);
		r.u.create.cr_name = "own";
		r.u.create.cr_mode = FS_CREATE_UNCHECKED;
		r.u.create.cr_sattr.fs_set_size = true;
		r.u.create.cr_sattr.fs_size = 3;
		CHECK(run(&r) == (i == 0 ? -EACCES : 0));
		CHECK(host_stat("own", &st) && st.st_size == (i == 0 ? 10 : 3));
	}
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "own", &g_rootc) == 0);
}

static void test_mkdir_symlink_mknod(void)
{
	struct fs_obj_id d, l, n;
	struct fs_attr a;
	struct stat st;
	CHECK(do_mkdir(&g_root, "md", 0770, &g_rootc, &d) == 0);
	CHECK(host_stat("md", &st) && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0770);
	CHECK(do_mkdir(&g_root, "md", 0770, &g_rootc, NULL) == -EEXIST);

	struct fs_req r;
	req_init(&r, FS_OP_SYMLINK, &d, &g_rootc);
	r.u.create.cr_name = "ln";
	r.u.create.cr_link_target = "../no/such/target";
	CHECK(run(&r) == 0);
	l = r.u.create.cr_obj;
	CHECK(r.u.create.cr_attr.fa_type == FS_LNK);
	req_init(&r, FS_OP_READLINK, &l, &g_rootc);
	CHECK(run(&r) == 0);
	CHECK(strcmp(r.u.readlink.rl_target, "../no/such/target") == 0 && r.u.readlink.rl_len == 17);
	req_init(&r, FS_OP_READLINK, &d, &g_rootc);
	CHECK(run(&r) == -EINVAL);

	static const struct { const char *name; enum fs_type type; mode_t fmt; } nodes[] = {
		{ "fifo", FS_FIFO, S_IFIFO }, { "sock", FS_SOCK, S_IFSOCK },
		{ "chr", FS_CHR, S_IFCHR },   { "blk", FS_BLK, S_IFBLK },
	};
	for (size_t i = 0; i < SH_ARRAY_SIZE(nodes); i++) {
		req_init(&r, FS_OP_MKNOD, &d, &g_rootc);
		r.u.create.cr_name = nodes[i].name;
		r.u.create.cr_type = nodes[i].type;
		r.u.create.cr_rdev_major = 1;
		r.u.create.cr_rdev_minor = 3;
		r.u.create.cr_sattr.fs_set_mode = true;
		r.u.create.cr_sattr.fs_mode = 0666;
		CHECKF(run(&r) == 0, "mknod %s: %d", nodes[i].name, r.fr_status);
		n = r.u.create.cr_obj;
		char rel[64];
		snprintf(rel, sizeof(rel), "md/%s", nodes[i].name);
		CHECK(host_stat(rel, &st) && (st.st_mode & S_IFMT) == nodes[i].fmt);
		CHECK((st.st_mode & 07777) == 0666); /* exact despite the umask */
		if (nodes[i].type == FS_CHR || nodes[i].type == FS_BLK)
			CHECK(major(st.st_rdev) == 1 && minor(st.st_rdev) == 3);
		CHECK(do_getattr(&n, &a) == 0 && a.fa_type == nodes[i].type);
	}
	/* A FIFO's attributes can be changed (through its O_PATH fd). */
	CHECK(do_lookup(&d, "fifo", &g_rootc, &n, NULL) == 0);
	req_init(&r, FS_OP_SETATTR, &n, &g_rootc);
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 0600;
	CHECK(run(&r) == 0);
	CHECK(host_stat("md/fifo", &st) && (st.st_mode & 07777) == 0600);
	req_init(&r, FS_OP_MKNOD, &d, &g_rootc);
	r.u.create.cr_name = "reg";
	r.u.create.cr_type = FS_REG;
	CHECK(run(&r) == -SH_EBADTYPE);
	/* A user without CAP_MKNOD cannot make device nodes. */
	CHECK(do_mkdir(&g_root, "umd", 0777, &g_rootc, &d) == 0);
	req_init(&r, FS_OP_MKNOD, &d, &g_user);
	r.u.create.cr_name = "chr";
	r.u.create.cr_type = FS_CHR;
	r.u.create.cr_rdev_major = 1; /* 0:0 would be a whiteout, which anyone may make */
	r.u.create.cr_rdev_minor = 3;
	CHECKF(run(&r) == -EPERM, "%d", r.fr_status);
}

static void test_remove_and_stale(void)
{
	struct fs_obj_id f, d, g;
	struct fs_attr a;
	int deleted = deleted_fd_count();
	CHECK(do_create(&g_root, "rm1", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &f, NULL) == 0);
	CHECK(do_getattr(&f, &a) == 0); /* its fd is cached now */
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "rm1", &g_rootc) == 0);
	CHECK(deleted_fd_count() == deleted); /* and closed by the REMOVE: the space is free */
	struct stat st;
	CHECK(!host_stat("rm1", &st));
	/* A file with a second link keeps its cached fd until its last name goes. */
	CHECK(do_create(&g_root, "rmh", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &f, NULL) == 0);
	CHECK(do_getattr(&f, &a) == 0);
	char lp[512], hp[512];
	host_path(lp, sizeof(lp), "rmh");
	host_path(hp, sizeof(hp), "rmh2");
	CHECK(link(lp, hp) == 0);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "rmh", &g_rootc) == 0);
	CHECK(do_getattr(&f, &a) == 0 && a.fa_nlink == 1);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "rmh2", &g_rootc) == 0);
	CHECK(deleted_fd_count() == deleted);
	CHECK(do_getattr(&f, &a) == -ESTALE);
	CHECK(do_getattr(&f, &a) == -ESTALE);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "rm1", &g_rootc) == -ENOENT);

	/* Deleted on the host while its fd is cached: still stale. */
	CHECK(do_create(&g_root, "rm2", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &g, NULL) == 0);
	CHECK(do_getattr(&g, &a) == 0);
	char p[512];
	host_path(p, sizeof(p), "rm2");
	CHECK(unlink(p) == 0);
	CHECK(do_getattr(&g, &a) == -ESTALE);

	CHECK(do_mkdir(&g_root, "rmd", 0755, &g_rootc, &d) == 0);
	CHECK(do_create(&d, "inner", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	CHECK(do_remove(FS_OP_RMDIR, &g_root, "rmd", &g_rootc) == -ENOTEMPTY);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "rmd", &g_rootc) == -EISDIR);
	CHECK(do_remove(FS_OP_REMOVE, &d, "inner", &g_rootc) == 0);
	CHECK(do_remove(FS_OP_RMDIR, &g_root, "rmd", &g_rootc) == 0);
	CHECK(do_getattr(&d, &a) == -ESTALE);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, ".", &g_rootc) == -EINVAL);
}

static void test_rename_link(void)
{
	struct fs_obj_id a, b, d1, d2, victim, id;
	struct fs_attr at;
	struct fs_req r;
	CHECK(do_mkdir(&g_root, "rn1", 0755, &g_rootc, &d1) == 0);
	CHECK(do_mkdir(&g_root, "rn2", 0755, &g_rootc, &d2) == 0);
	CHECK(do_create(&d1, "a", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &a, NULL) == 0);
	CHECK(do_create(&d2, "victim", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &victim, NULL) == 0);
	int deleted = deleted_fd_count();
	CHECK(do_getattr(&victim, &at) == 0); /* cached now */

	req_init(&r, FS_OP_RENAME, &d1, &g_rootc);
	r.u.rename.rn_from_name = "a";
	r.u.rename.rn_to_dir = d1;
	r.u.rename.rn_to_name = "b";
	CHECK(run(&r) == 0);
	CHECK(do_lookup(&d1, "b", &g_rootc, &b, NULL) == 0 && id_equal(&a, &b));
	CHECK(do_lookup(&d1, "a", &g_rootc, &id, NULL) == -ENOENT);

	/* Across directories, over an existing target. */
	req_init(&r, FS_OP_RENAME, &d1, &g_rootc);
	r.u.rename.rn_from_name = "b";
	r.u.rename.rn_to_dir = d2;
	r.u.rename.rn_to_name = "victim";
	CHECK(run(&r) == 0);
	CHECK(r.u.rename.rn_from_wcc.fw_pre_valid && r.u.rename.rn_to_wcc.fw_post_valid);
	CHECK(do_lookup(&d2, "victim", &g_rootc, &id, NULL) == 0 && id_equal(&id, &a));
	CHECK(do_lookup(&d1, "b", &g_rootc, &id, NULL) == -ENOENT);
	CHECK(deleted_fd_count() == deleted); /* the victim's cached fd went with it */
	CHECK(do_getattr(&victim, &at) == -ESTALE);

	/* LINK */
	req_init(&r, FS_OP_LINK, &a, &g_rootc);
	r.u.link.ln_dir = d1;
	r.u.link.ln_name = "hard";
	CHECK(run(&r) == 0);
	CHECK(r.u.link.ln_attr_valid && r.u.link.ln_attr.fa_nlink == 2);
	CHECK(do_lookup(&d1, "hard", &g_rootc, &id, NULL) == 0 && id_equal(&id, &a));
	req_init(&r, FS_OP_LINK, &d2, &g_rootc);
	r.u.link.ln_dir = d1;
	r.u.link.ln_name = "dirlink";
	CHECK(run(&r) == -EISDIR);
	req_init(&r, FS_OP_LINK, &a, &g_rootc);
	r.u.link.ln_dir = d1;
	r.u.link.ln_name = "hard";
	CHECK(run(&r) == -EEXIST);
}

struct rd_ctx {
	struct fs_req rc_req;
	int rc_limit; /* stop after this many entries (-1: no limit) */
	int rc_count;
	char rc_names[256][32];
	uint64_t rc_cookies[256];
	uint64_t rc_fileids[256];
	bool rc_has_obj[256];
	struct fs_obj_id rc_objs[256];
};

static bool rd_emit(struct fs_req *req, const struct fs_dirent *e)
{
	struct rd_ctx *c = SH_CONTAINER_OF(req, struct rd_ctx, rc_req);
	if (c->rc_limit >= 0 && c->rc_count >= c->rc_limit)
		return false;
	if (c->rc_count >= 256)
		return false;
	int i = c->rc_count++;
	snprintf(c->rc_names[i], sizeof(c->rc_names[i]), "%.*s", (int)e->fd_name_len, e->fd_name);
	c->rc_cookies[i] = e->fd_cookie;
	c->rc_fileids[i] = e->fd_fileid;
	c->rc_has_obj[i] = e->fd_has_obj;
	if (e->fd_has_obj)
		c->rc_objs[i] = e->fd_obj;
	return true;
}

static int do_readdir(struct rd_ctx *c, const struct fs_obj_id *dir, uint64_t cookie,
		      const uint8_t *verf, bool plus, int limit)
{
	req_init(&c->rc_req, FS_OP_READDIR, dir, &g_rootc);
	c->rc_req.u.readdir.rd_cookie = cookie;
	if (verf != NULL)
		memcpy(c->rc_req.u.readdir.rd_verf, verf, 8);
	c->rc_req.u.readdir.rd_plus = plus;
	c->rc_req.u.readdir.rd_emit = rd_emit;
	c->rc_limit = limit;
	c->rc_count = 0;
	return run(&c->rc_req);
}

static int rd_find(const struct rd_ctx *c, const char *name)
{
	for (int i = 0; i < c->rc_count; i++)
		if (strcmp(c->rc_names[i], name) == 0)
			return i;
	return -1;
}

static void test_readdir(void)
{
	static struct rd_ctx c1, c2;
	struct fs_obj_id d, id;
	char name[32];
	CHECK(do_mkdir(&g_root, "rd", 0755, &g_rootc, &d) == 0);
	for (int i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		CHECK(do_create(&d, name, FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	}
	CHECK(do_readdir(&c1, &d, 0, NULL, true, -1) == 0);
	CHECK(c1.rc_req.u.readdir.rd_eof);
	CHECK(c1.rc_count == 62);
	CHECK(rd_find(&c1, ".") >= 0 && rd_find(&c1, "..") >= 0);
	int i5 = rd_find(&c1, "f05");
	CHECK(i5 >= 0 && c1.rc_has_obj[i5]);
	CHECK(do_lookup(&d, "f05", &g_rootc, &id, NULL) == 0);
	CHECK(i5 >= 0 && id_equal(&id, &c1.rc_objs[i5]));
	int dd = rd_find(&c1, "..");
	CHECK(dd >= 0 && c1.rc_has_obj[dd] && id_equal(&c1.rc_objs[dd], &g_root));

	/* Read 20, change the directory, resume from the 20th cookie. */
	uint8_t verf[8];
	CHECK(do_readdir(&c1, &d, 0, NULL, false, 20) == 0);
	CHECK(c1.rc_count == 20 && !c1.rc_req.u.readdir.rd_eof);
	memcpy(verf, c1.rc_req.u.readdir.rd_verf_out, 8);
	uint64_t cookie = c1.rc_cookies[19];
	int removed = 0;
	for (int i = 0; i < 20 && removed < 5; i++) {
		if (c1.rc_names[i][0] == 'f') {
			CHECK(do_remove(FS_OP_REMOVE, &d, c1.rc_names[i], &g_rootc) == 0);
			removed++;
		}
	}
	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "new%02d", i);
		CHECK(do_create(&d, name, FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	}
	CHECK(do_readdir(&c2, &d, cookie, verf, false, -1) == 0);
	CHECK(c2.rc_req.u.readdir.rd_eof);
	/* Nothing read before appears again, and every original entry not yet read does. */
	int dup = 0, missing = 0;
	for (int i = 0; i < c2.rc_count; i++)
		if (rd_find(&c1, c2.rc_names[i]) >= 0)
			dup++;
	for (int i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		if (rd_find(&c1, name) < 0 && rd_find(&c2, name) < 0)
			missing++;
	}
	CHECKF(dup == 0 && missing == 0, "dup %d missing %d", dup, missing);

	/* A verifier from elsewhere with a non-zero cookie is refused. */
	uint8_t bad[8] = { 9, 9, 9, 9, 9, 9, 9, 9 };
	CHECK(do_readdir(&c2, &d, cookie, bad, false, -1) == -SH_EBADCOOKIE);
	/* ".." of the root reports the root. */
	struct stat st;
	CHECK(stat(g_export, &st) == 0);
	CHECK(do_readdir(&c2, &g_root, 0, NULL, false, -1) == 0);
	int r = rd_find(&c2, "..");
	CHECK(r >= 0 && c2.rc_fileids[r] == (uint64_t)st.st_ino);
	CHECK(do_readdir(&c2, &id, 0, NULL, false, -1) == -ENOTDIR);
}

static void test_forged_ids(void)
{
	struct fs_obj_id id;
	struct fs_attr a;
	id = g_root;
	id.foi_bytes[POSIX_ID_OFF_VERSION] ^= 0xff;
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
	id = g_root;
	id.foi_bytes[POSIX_ID_OFF_TAG] ^= 1; /* another export's tag */
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
	id = g_root;
	id.foi_len = POSIX_ID_OFF_HANDLE;
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
	id = g_root;
	id.foi_len = 0;
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
	id = g_root;
	id.foi_bytes[POSIX_ID_OFF_TYPE] = FS_REG; /* a directory claimed to be a file */
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
	id = g_root;
	id.foi_bytes[POSIX_ID_OFF_TYPE] = 99;
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
	id = g_root;
	memset(id.foi_bytes + POSIX_ID_OFF_HTYPE, 0x7f, 4); /* a handle type nobody knows */
	CHECK(do_getattr(&id, &a) == -SH_EBADHANDLE);
}

static void test_outside_refused(void)
{
	struct fs_obj_id id, sub;
	struct fs_attr a;
	char p[512];
	/* A handle for a directory of the same host fs outside the export. */
	forge_id(g_outside, FS_DIR, &id);
	CHECK(do_getattr(&id, &a) == -ESTALE);
	CHECK(do_lookup(&id, "secret", &g_rootc, NULL, NULL) == -ESTALE);
	forge_id(g_base, FS_DIR, &id);
	CHECK(do_getattr(&id, &a) == -ESTALE);
	forge_id("/", FS_DIR, &id);
	CHECK(do_getattr(&id, &a) == -ESTALE);

	/* A directory moved out of the export on the host: refused once reopened (a new instance
	 * has a cold cache, and ids survive a restart). */
	CHECK(do_mkdir(&g_root, "leaver", 0755, &g_rootc, &sub) == 0);
	CHECK(do_mkdir(&g_root, "stayer", 0755, &g_rootc, &id) == 0);
	struct fs *fs2;
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77 };
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	struct fs_req r;
	req_init(&r, FS_OP_GETATTR, &id, &g_rootc);
	CHECK(run_on(fs2, &r, NULL) == 0); /* a valid id from before the "restart" */
	host_path(p, sizeof(p), "leaver");
	char to[512];
	snprintf(to, sizeof(to), "%s/leaver", g_outside);
	CHECK(rename(p, to) == 0);
	req_init(&r, FS_OP_GETATTR, &sub, &g_rootc);
	CHECK(run_on(fs2, &r, NULL) == -ESTALE);
	fs_destroy(fs2);

	/* One moved out while cached: refused once its verification has expired. */
	struct fs_attr a2;
	CHECK(do_getattr(&id, &a2) == 0);
	host_path(p, sizeof(p), "stayer");
	snprintf(to, sizeof(to), "%s/stayer", g_outside);
	CHECK(rename(p, to) == 0);
	struct timespec ts = { .tv_sec = (time_t)(POSIX_VERIFY_TTL_NS / 1000000000ull),
			       .tv_nsec = 200 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	CHECK(do_getattr(&id, &a2) == -ESTALE);
	CHECK(do_lookup(&id, "x", &g_rootc, NULL, NULL) == -ESTALE);
}

/* The containment walk stops at a directory a recent walk proved inside the export, and the
 * proof keeps its first date: a directory first reached after its ancestors were moved out of
 * the export is refused once POSIX_VERIFY_TTL_NS has passed since the ancestors were proved,
 * not since it was itself first reached. */
static void test_outside_memo(void)
{
	struct fs_obj_id a, b, c1, c2;
	char p[512], to[512];
	CHECK(do_mkdir(&g_root, "memo_a", 0755, &g_rootc, &a) == 0);
	CHECK(do_mkdir(&a, "b", 0755, &g_rootc, &b) == 0);
	CHECK(do_mkdir(&b, "c1", 0755, &g_rootc, &c1) == 0);
	CHECK(do_mkdir(&b, "c2", 0755, &g_rootc, &c2) == 0);
	struct fs *fs2; /* a cold cache: c1 and c2 are reached by walks */
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77 };
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	struct fs_req r;
	req_init(&r, FS_OP_GETATTR, &c1, &g_rootc);
	CHECK(run_on(fs2, &r, NULL) == 0); /* proves b and memo_a */
	uint64_t proved = clock_monotonic_ns();
	struct timespec half = { .tv_sec = (time_t)(POSIX_VERIFY_TTL_NS / 2 / 1000000000ull),
				 .tv_nsec = (long)(POSIX_VERIFY_TTL_NS / 2 % 1000000000ull) };
	nanosleep(&half, NULL);
	host_path(p, sizeof(p), "memo_a");
	snprintf(to, sizeof(to), "%s/memo_a", g_outside);
	CHECK(rename(p, to) == 0);
	/* Within the proof's lifetime a walk from c2 may stop at b. */
	req_init(&r, FS_OP_GETATTR, &c2, &g_rootc);
	int rc_within = run_on(fs2, &r, NULL);
	CHECKF(rc_within == 0 || rc_within == -ESTALE, "c2 within the TTL: %d", rc_within);
	/* Past the TTL counted from the proof of b, both are refused. */
	uint64_t now = clock_monotonic_ns();
	uint64_t until = proved + POSIX_VERIFY_TTL_NS + 300ull * 1000 * 1000;
	if (until > now) {
		struct timespec ts = { .tv_sec = (time_t)((until - now) / 1000000000ull),
				       .tv_nsec = (long)((until - now) % 1000000000ull) };
		nanosleep(&ts, NULL);
	}
	req_init(&r, FS_OP_GETATTR, &c2, &g_rootc);
	CHECK(run_on(fs2, &r, NULL) == -ESTALE);
	req_init(&r, FS_OP_GETATTR, &c1, &g_rootc);
	CHECK(run_on(fs2, &r, NULL) == -ESTALE);
	fs_destroy(fs2);
	CHECK(rename(to, p) == 0); /* back, for the cases after this one */
}

static void test_symlink_not_followed(void)
{
	struct fs_obj_id l, id;
	struct fs_attr a;
	char p[512];
	host_path(p, sizeof(p), "etc_link");
	CHECK(symlink("/etc", p) == 0);
	host_path(p, sizeof(p), "out_link");
	CHECK(symlink(g_outside, p) == 0);
	CHECK(do_lookup(&g_root, "etc_link", &g_rootc, &l, &a) == 0);
	CHECK(a.fa_type == FS_LNK);
	CHECK(do_lookup(&l, "passwd", &g_rootc, &id, NULL) == -ENOTDIR);
	CHECK(do_lookup(&g_root, "etc_link/passwd", &g_rootc, &id, NULL) == -EACCES);
	CHECK(do_create(&l, "x", FS_CREATE_UNCHECKED, 0644, NULL, &g_rootc, &id, NULL) == -ENOTDIR);
	char buf[16];
	CHECK(do_read(&l, 0, 10, &g_rootc, buf, sizeof(buf), NULL) == -EINVAL);
	CHECK(do_lookup(&g_root, "out_link", &g_rootc, &l, &a) == 0 && a.fa_type == FS_LNK);
	CHECK(do_lookup(&l, "secret", &g_rootc, &id, NULL) == -ENOTDIR);
	/* A CREATE over a symlink name does not write through it. */
	CHECK(do_create(&g_root, "out_link", FS_CREATE_UNCHECKED, 0644, NULL, &g_rootc, &id, NULL) ==
	      -EEXIST);
	struct stat st;
	snprintf(p, sizeof(p), "%s/secret", g_outside);
	CHECK(stat(p, &st) == 0 && st.st_size == 6);
}

static void test_permissions(void)
{
	struct fs_obj_id f, d, uf;
	struct fs_req r;
	char buf[32];
	struct stat st;
	host_write("rootfile", "secret", 0644);
	CHECK(do_lookup(&g_root, "rootfile", &g_user, &f, NULL) == 0);
	CHECK(do_read(&f, 0, 10, &g_user, buf, sizeof(buf), NULL) == 0 && strcmp(buf, "secret") == 0);
	CHECK(do_write(&f, 0, "x", FS_UNSTABLE, &g_user, NULL) == -EACCES);
	CHECK(do_write(&f, 0, "x", FS_FILE_SYNC, &g_user, NULL) == -EACCES);
	req_init(&r, FS_OP_SETATTR, &f, &g_user);
	r.u.setattr.sa_sattr.fs_set_size = true;
	r.u.setattr.sa_sattr.fs_size = 0;
	CHECK(run(&r) == -EACCES);
	CHECK(host_stat("rootfile", &st) && st.st_size == 6);

	req_init(&r, FS_OP_ACCESS, &f, &g_user);
	r.u.access.ac_want = 0x3f;
	CHECK(run(&r) == 0 && r.u.access.ac_granted == FS_ACCESS_READ);
	req_init(&r, FS_OP_ACCESS, &f, &g_rootc);
	r.u.access.ac_want = 0x3f;
	CHECK(run(&r) == 0);
	CHECK(r.u.access.ac_granted == (FS_ACCESS_READ | FS_ACCESS_MODIFY | FS_ACCESS_EXTEND));
	host_write("rootexec", "#!/bin/sh\n", 0744);
	CHECK(do_lookup(&g_root, "rootexec", &g_rootc, &f, NULL) == 0);
	req_init(&r, FS_OP_ACCESS, &f, &g_rootc);
	r.u.access.ac_want = FS_ACCESS_EXECUTE;
	CHECK(run(&r) == 0 && r.u.access.ac_granted == FS_ACCESS_EXECUTE);
	req_init(&r, FS_OP_ACCESS, &f, &g_user);
	r.u.access.ac_want = FS_ACCESS_EXECUTE | FS_ACCESS_READ;
	CHECK(run(&r) == 0 && r.u.access.ac_granted == FS_ACCESS_READ);

	/* Group rights, including a supplementary group (set per thread). */
	host_write("grpfile", "group", 0640);
	char p[512];
	host_path(p, sizeof(p), "grpfile");
	CHECK(chown(p, 0, 1000) == 0);
	CHECK(do_lookup(&g_root, "grpfile", &g_rootc, &f, NULL) == 0);
	const struct fs_cred other = { .fc_uid = 2000, .fc_gid = 2000 };
	const struct fs_cred supp = { .fc_uid = 2000, .fc_gid = 2000, .fc_ngids = 2,
				      .fc_gids = { 3000, 1000 } };
	CHECK(do_read(&f, 0, 10, &g_user, buf, sizeof(buf), NULL) == 0);
	CHECK(do_read(&f, 0, 10, &other, buf, sizeof(buf), NULL) == -EACCES);
	CHECK(do_read(&f, 0, 10, &supp, buf, sizeof(buf), NULL) == 0 && strcmp(buf, "group") == 0);
	CHECK(do_read(&f, 0, 10, &other, buf, sizeof(buf), NULL) == -EACCES);

	/* Namespace operations are checked by the kernel under the client's identity. */
	CHECK(do_create(&g_root, "ufile", FS_CREATE_GUARDED, 0644, NULL, &g_user, &uf, NULL) == -EACCES);
	CHECK(do_mkdir(&g_root, "udir", 0755, &g_rootc, &d) == 0);
	host_path(p, sizeof(p), "udir");
	CHECK(chown(p, 1000, 1000) == 0);
	CHECK(do_create(&d, "ufile", FS_CREATE_GUARDED, 0600, NULL, &g_user, &uf, NULL) == 0);
	CHECK(host_stat("udir/ufile", &st) && st.st_uid == 1000 && st.st_gid == 1000);
	CHECK(do_write(&uf, 0, "mine", FS_FILE_SYNC, &g_user, NULL) == 0);
	CHECK(do_read(&uf, 0, 10, &other, buf, sizeof(buf), NULL) == -EACCES);
	CHECK(do_remove(FS_OP_REMOVE, &d, "ufile", &other) == -EACCES);
	CHECK(do_remove(FS_OP_REMOVE, &g_root, "rootfile", &g_user) == -EACCES);
	/* The owner may still write a file it made read-only (NFS owner override). */
	req_init(&r, FS_OP_SETATTR, &uf, &g_user);
	r.u.setattr.sa_sattr.fs_set_mode = true;
	r.u.setattr.sa_sattr.fs_mode = 0400;
	CHECK(run(&r) == 0);
	CHECK(do_write(&uf, 4, "!", FS_UNSTABLE, &g_user, NULL) == 0);
	/* Search permission: a 0700 root directory hides its entries from a user. */
	CHECK(do_mkdir(&g_root, "private", 0700, &g_rootc, &d) == 0);
	CHECK(do_create(&d, "inside", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	CHECK(do_lookup(&d, "inside", &g_user, NULL, NULL) == -EACCES);
	static struct rd_ctx c;
	req_init(&c.rc_req, FS_OP_READDIR, &d, &g_user);
	c.rc_req.u.readdir.rd_emit = rd_emit;
	c.rc_limit = -1;
	CHECK(run(&c.rc_req) == -EACCES);
}

static void test_fsstat(void)
{
	struct fs_req r;
	struct statvfs sv;
	req_init(&r, FS_OP_FSSTAT, &g_root, &g_rootc);
	CHECK(run(&r) == 0);
	CHECK(statvfs(g_export, &sv) == 0);
	CHECK(r.u.fsstat.st_total_bytes == (uint64_t)sv.f_blocks * sv.f_frsize);
	CHECK(r.u.fsstat.st_total_files == sv.f_files);
	CHECK(r.u.fsstat.st_free_bytes >= r.u.fsstat.st_avail_bytes);
	CHECK(r.u.fsstat.st_attr_valid && r.u.fsstat.st_attr.fa_type == FS_DIR);
}

static void test_fd_cache_limit(void)
{
	struct fs *fs2;
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77,
				       .pfc_fd_cache_max = 16, .pfc_nworkers = 2,
				       .pfc_no_write_behind = true }; /* it would hold fds */
	struct fs_obj_id dir, ids[100];
	char name[32], buf[32];
	CHECK(do_mkdir(&g_root, "many", 0755, &g_rootc, &dir) == 0);
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "many/m%03d", i);
		host_write(name, name, 0644);
	}
	/* fs2's fds on the files: those under many/. The fds outside the export are counted for
	 * leaks; those on the export's other paths are not, since g_fs's cache closes its idle
	 * ones at any time. */
	char files[600];
	snprintf(files, sizeof(files), "%s/many/", g_export);
	int before = fds_prefixed(g_export, false);
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	int peak = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < 100; i++) {
			struct fs_req r;
			snprintf(name, sizeof(name), "m%03d", i);
			req_init(&r, FS_OP_LOOKUP, &dir, &g_rootc);
			r.u.lookup.lk_name = name;
			CHECK(run_on(fs2, &r, NULL) == 0);
			ids[i] = r.u.lookup.lk_obj;
			req_init(&r, FS_OP_WRITE, &ids[i], &g_rootc); /* a second fd per file */
			r.u.write.wr_data = "M";
			r.u.write.wr_len = 1;
			r.u.write.wr_stable = FS_UNSTABLE;
			CHECK(run_on(fs2, &r, NULL) == 0);
			req_init(&r, FS_OP_READ, &ids[i], &g_rootc);
			r.u.read.rd_count = 32;
			CHECK(run_on(fs2, &r, NULL) == 0);
			snprintf(buf, sizeof(buf), "%.*s", (int)r.u.read.rd_buf.fb_len,
				 (const char *)r.u.read.rd_buf.fb_data);
			r.u.read.rd_buf.fb_release(r.u.read.rd_buf.fb_release_arg);
			snprintf(name, sizeof(name), "Many/m%03d", i);
			CHECK(strcmp(buf, name) == 0);
			peak = SH_MAX(peak, fds_prefixed(files, true));
		}
	}
	CHECKF(peak <= 16, "peak %d cached fds over a limit of 16", peak);
	CHECK(peak >= 8); /* it does cache */
	fs_destroy(fs2);
	CHECK(fds_prefixed(files, true) == 0);
	CHECK(fds_prefixed(g_export, false) == before);
}

/* A file removed on the host, behind the back end's back: its cached fds are closed once idle
 * (pfc_fd_idle_s), so its space comes back; a file in use keeps its fd. */
static void test_fd_idle_expiry(void)
{
	struct fs *fs2;
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 78,
				       .pfc_nworkers = 2, .pfc_fd_idle_s = 1 };
	host_write("idle-gone", "gone", 0644);
	host_write("idle-kept", "kept", 0644);
	int deleted = deleted_fd_count();
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	struct fs_obj_id gone, kept;
	struct fs_req r;
	req_init(&r, FS_OP_LOOKUP, &g_root, &g_rootc);
	r.u.lookup.lk_name = "idle-gone";
	CHECK(run_on(fs2, &r, NULL) == 0);
	gone = r.u.lookup.lk_obj;
	req_init(&r, FS_OP_LOOKUP, &g_root, &g_rootc);
	r.u.lookup.lk_name = "idle-kept";
	CHECK(run_on(fs2, &r, NULL) == 0);
	kept = r.u.lookup.lk_obj;
	req_init(&r, FS_OP_WRITE, &gone, &g_rootc); /* both of its fds open */
	r.u.write.wr_data = "G";
	r.u.write.wr_len = 1;
	r.u.write.wr_stable = FS_UNSTABLE;
	CHECK(run_on(fs2, &r, NULL) == 0);
	req_init(&r, FS_OP_GETATTR, &kept, &g_rootc);
	CHECK(run_on(fs2, &r, NULL) == 0);
	CHECK(fds_on("/idle-kept") == 1);
	char path[300];
	snprintf(path, sizeof(path), "%s/idle-gone", g_export);
	CHECK(unlink(path) == 0);
	CHECK(deleted_fd_count() == deleted + 2); /* cached: its space still held */
	/* idle-kept stays in use (a GETATTR every 100 ms) while idle-gone is left alone */
	int still = -1;
	for (int i = 0; i < 60 && still != deleted; i++) {
		req_init(&r, FS_OP_GETATTR, &kept, &g_rootc);
		CHECK(run_on(fs2, &r, NULL) == 0);
		usleep(100 * 1000);
		still = deleted_fd_count();
	}
	CHECKF(still == deleted, "%d deleted files still open, %d before", still, deleted);
	CHECK(fds_on("/idle-kept") == 1);
	fs_destroy(fs2);
	CHECK(fds_on("/idle-kept") == 0);
	snprintf(path, sizeof(path), "%s/idle-kept", g_export);
	CHECK(unlink(path) == 0);
}

struct stress_arg {
	struct fs *sa_fs;
	struct fs_obj_id sa_dir;
	int sa_errors;
};

static void *stress_main(void *p)
{
	struct stress_arg *sa = p;
	char name[32];
	for (int i = 0; i < 400; i++) {
		struct fs_req r;
		snprintf(name, sizeof(name), "m%03d", (i * 7) % 100);
		req_init(&r, FS_OP_LOOKUP, &sa->sa_dir, (i & 1) ? &g_user : &g_rootc);
		r.u.lookup.lk_name = name;
		if (run_on(sa->sa_fs, &r, NULL) != 0) {
			sa->sa_errors++;
			continue;
		}
		struct fs_obj_id id = r.u.lookup.lk_obj;
		req_init(&r, FS_OP_WRITE, &id, &g_rootc);
		r.u.write.wr_offset = 1;
		r.u.write.wr_data = "x";
		r.u.write.wr_len = 1;
		r.u.write.wr_stable = (i % 3 == 0) ? FS_DATA_SYNC : FS_UNSTABLE;
		if (run_on(sa->sa_fs, &r, NULL) != 0 || r.u.write.wr_count != 1)
			sa->sa_errors++;
	}
	return NULL;
}

/* Threads racing through a small cache: eviction while others hold entries. */
static void test_concurrent_small_cache(void)
{
	struct fs *fs2;
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77,
				       .pfc_fd_cache_max = 8, .pfc_nworkers = 3 };
	struct stress_arg args[4];
	pthread_t th[4];
	struct fs_obj_id dir;
	CHECK(do_lookup(&g_root, "many", &g_rootc, &dir, NULL) == 0);
	CHECK(posix_fs_create(&cfg, &fs2) == 0);
	for (int i = 0; i < 4; i++) {
		args[i] = (struct stress_arg){ .sa_fs = fs2, .sa_dir = dir };
		CHECK(pthread_create(&th[i], NULL, stress_main, &args[i]) == 0);
	}
	int errors = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		errors += args[i].sa_errors;
	}
	CHECKF(errors == 0, "%d errors", errors);
	fs_destroy(fs2);
}

/* With a real loop: a stable write submitted on the loop's thread completes there, after a
 * worker did the flush. */
struct loop_case {
	struct loop *lc_loop;
	struct loop_task lc_start;
	struct fs_req lc_req;
	struct fs_obj_id lc_id;
	bool lc_inline_done; /* fr_done ran before fs_submit returned */
	bool lc_submitting;
	bool lc_done_on_loop;
	int lc_status;
};

static void loop_case_done(struct fs_req *req)
{
	struct loop_case *lc = SH_CONTAINER_OF(req, struct loop_case, lc_req);
	lc->lc_inline_done = lc->lc_submitting;
	lc->lc_done_on_loop = loop_on_thread(lc->lc_loop);
	lc->lc_status = req->fr_status;
	loop_stop(lc->lc_loop);
}

static void loop_case_start(struct loop_task *task)
{
	struct loop_case *lc = SH_CONTAINER_OF(task, struct loop_case, lc_start);
	req_init(&lc->lc_req, FS_OP_WRITE, &lc->lc_id, &g_rootc);
	lc->lc_req.fr_fs = g_fs;
	lc->lc_req.fr_loop = lc->lc_loop;
	lc->lc_req.fr_done = loop_case_done;
	lc->lc_req.u.write.wr_data = "durable";
	lc->lc_req.u.write.wr_len = 7;
	lc->lc_req.u.write.wr_stable = FS_FILE_SYNC;
	lc->lc_submitting = true;
	fs_submit(&lc->lc_req);
	lc->lc_submitting = false;
}

static void test_loop_completion(void)
{
	static struct loop_case lc;
	CHECK(do_create(&g_root, "looped", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &lc.lc_id, NULL) ==
	      0);
	CHECK(loop_create(&lc.lc_loop) == 0);
	lc.lc_status = 1;
	lc.lc_start.lt_fn = loop_case_start;
	loop_post(lc.lc_loop, &lc.lc_start);
	CHECK(loop_run(lc.lc_loop) == 0);
	CHECK(lc.lc_status == 0 && lc.lc_done_on_loop && !lc.lc_inline_done);
	CHECK(lc.lc_req.u.write.wr_committed == FS_FILE_SYNC);
	loop_destroy(lc.lc_loop);
	VERIFY(posix_thread_cred_reset() == 0);
	struct stat st;
	CHECK(host_stat("looped", &st) && st.st_size == 7);
}

static void test_bad_root(void)
{
	struct fs *fs2 = NULL;
	char p[512];
	struct posix_fs_config cfg = { .pfc_root_path = "/nonexistent/shale" };
	CHECK(posix_fs_create(&cfg, &fs2) == -ENOENT);
	host_path(p, sizeof(p), "c1");
	cfg.pfc_root_path = p;
	CHECK(posix_fs_create(&cfg, &fs2) == -ENOTDIR);
	/* /proc has no file handles. */
	cfg.pfc_root_path = "/proc";
	CHECK(posix_fs_create(&cfg, &fs2) == -EOPNOTSUPP);
}

/* ---- id cache (posix_idcache.c) and directory group commit (posix_dir_sync) ---- */

/* fsync as the back end sees it: passes through to the kernel, except that a test can make the
 * fsyncs of one descriptor wait for a condition or fail. Defined here, it takes the place of the
 * C library's for the whole program (the back end is linked in statically). */
static pthread_mutex_t fs_hook_lock = PTHREAD_MUTEX_INITIALIZER;
static int fs_hook_fd = -1;           /* the descriptor watched; -1: none */
static struct posix_fd *fs_hook_pfd;  /* its cache entry (a directory held by the test) */
static uint64_t fs_hook_wait_ticket;  /* first fsync waits until this many changes took tickets */
static int fs_hook_fail_errno;        /* non-zero: watched fsyncs fail with it */
static int fs_hook_fail_other_errno;  /* non-zero: every other descriptor's fsyncs fail with it */
static char fs_hook_link_path[512];   /* set: the next other fsync first links its file here */
static int fs_hook_calls;             /* fsyncs of the watched descriptor */
static bool fs_hook_hold_met;         /* the first one's hold ended with every ticket taken */
static bool (*fs_hook_check)(int fd); /* run at the start of each watched fsync */
static int fs_hook_check_ok;          /* fsyncs for which fs_hook_check held */
static int fs_hook_watched_running;   /* watched fsyncs under way, and the most at once */
static int fs_hook_watched_most;
static int fs_hook_overlaps;          /* other fsyncs that started while a watched one ran */
static int fs_hook_others_running;    /* other fsyncs under way, and the most at once */
static int fs_hook_others_most;
static int fs_hook_gather;            /* non-zero: other fsyncs wait (at most 2 s) for this many */
static int fs_hook_others_started;    /* other fsyncs since armed */

int fsync(int fd)
{
	pthread_mutex_lock(&fs_hook_lock);
	bool watched = fd == fs_hook_fd && fd >= 0;
	int call = watched ? ++fs_hook_calls : 0;
	int fail = watched ? fs_hook_fail_errno : fs_hook_fail_other_errno;
	struct posix_fd *pfd = fs_hook_pfd;
	uint64_t want = fs_hook_wait_ticket;
	bool (*check)(int) = fs_hook_check;
	char link_path[sizeof(fs_hook_link_path)] = "";
	if (!watched && fs_hook_link_path[0] != '\0') {
		memcpy(link_path, fs_hook_link_path, sizeof(link_path));
		fs_hook_link_path[0] = '\0';
	}
	if (watched) {
		if (++fs_hook_watched_running > fs_hook_watched_most)
			fs_hook_watched_most = fs_hook_watched_running;
	} else {
		fs_hook_overlaps += fs_hook_watched_running > 0 ? 1 : 0;
		fs_hook_others_running++;
		fs_hook_others_started++;
		if (fs_hook_others_running > fs_hook_others_most)
			fs_hook_others_most = fs_hook_others_running;
	}
	int gather = watched ? 0 : fs_hook_gather;
	pthread_mutex_unlock(&fs_hook_lock);
	if (link_path[0] != '\0') {
		/* A LINK made by someone else while the file is being made durable. */
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		VERIFY(linkat(AT_FDCWD, self, AT_FDCWD, link_path, AT_SYMLINK_FOLLOW) == 0);
	}
	if (watched && call == 1 && pfd != NULL && want > 0) {
		/* Hold the first fsync until every change has taken its ticket (so they all queue
		 * behind it), at most 10 s. */
		for (int i = 0; i < 10000; i++) {
			pthread_mutex_lock(&pfd->pfd_sync_lock);
			uint64_t t = pfd->pfd_sync_ticket;
			pthread_mutex_unlock(&pfd->pfd_sync_lock);
			if (t >= want) {
				pthread_mutex_lock(&fs_hook_lock);
				fs_hook_hold_met = true;
				pthread_mutex_unlock(&fs_hook_lock);
				break;
			}
			usleep(1000);
		}
	}
	if (watched && check != NULL && check(fd)) {
		pthread_mutex_lock(&fs_hook_lock);
		fs_hook_check_ok++;
		pthread_mutex_unlock(&fs_hook_lock);
	}
	for (int i = 0; i < 2000 && gather > 0; i++) {
		pthread_mutex_lock(&fs_hook_lock);
		bool enough = fs_hook_others_started >= gather;
		pthread_mutex_unlock(&fs_hook_lock);
		if (enough)
			break;
		usleep(1000);
	}
	int rc = 0;
	if (fail != 0) {
		errno = fail;
		rc = -1;
	} else {
		rc = (int)syscall(SYS_fsync, fd);
	}
	int saved = errno;
	pthread_mutex_lock(&fs_hook_lock);
	if (watched)
		fs_hook_watched_running--;
	else
		fs_hook_others_running--;
	pthread_mutex_unlock(&fs_hook_lock);
	errno = saved;
	return rc;
}

static void fs_hook_arm(struct posix_fd *pfd, uint64_t wait_ticket, int fail_errno,
                        bool (*check)(int fd))
{
	pthread_mutex_lock(&fs_hook_lock);
	fs_hook_fd = pfd != NULL ? pfd->pfd_fd : -1;
	fs_hook_pfd = pfd;
	fs_hook_wait_ticket = wait_ticket;
	fs_hook_fail_errno = fail_errno;
	fs_hook_calls = 0;
	fs_hook_hold_met = false;
	fs_hook_check = check;
	fs_hook_check_ok = 0;
	fs_hook_overlaps = 0;
	fs_hook_watched_most = 0;
	fs_hook_others_most = 0;
	fs_hook_others_started = 0;
	fs_hook_gather = 0;
	pthread_mutex_unlock(&fs_hook_lock);
}

/* Returns the number of watched fsyncs and how many passed the check, and disarms. */
static int fs_hook_disarm(int *check_ok)
{
	pthread_mutex_lock(&fs_hook_lock);
	int calls = fs_hook_calls;
	if (check_ok != NULL)
		*check_ok = fs_hook_check_ok;
	fs_hook_fd = -1;
	fs_hook_pfd = NULL;
	fs_hook_wait_ticket = 0;
	fs_hook_fail_errno = 0;
	fs_hook_check = NULL;
	pthread_mutex_unlock(&fs_hook_lock);
	return calls;
}

/* Sets whether the back end takes a new object's own fsync to write its directory entry
 * (pf_new_entry_with_object, found from the host file system at creation) and returns what it
 * was: the group-commit tests below need every change, CREATE and MKDIR included, to fsync
 * the directory, whatever file system the tests run on. */
static bool set_new_entry_with_object(bool on)
{
	struct posix_fs *pf = posix_fs_of(g_fs);
	bool was = pf->pf_new_entry_with_object;
	pf->pf_new_entry_with_object = on;
	return was;
}

/* True when the id cache holds an entry for the inode now at host path rel (inode number and
 * birth time; looked at from outside, under the cache's lock). */
static bool idcache_has(const char *rel)
{
	char p[512];
	struct statx stx;
	host_path(p, sizeof(p), rel);
	if (statx(AT_FDCWD, p, AT_SYMLINK_NOFOLLOW, STATX_INO | STATX_BTIME, &stx) != 0)
		return false;
	struct posix_idcache *ic = &posix_fs_of(g_fs)->pf_idcache;
	bool found = false;
	pthread_mutex_lock(&ic->ic_lock);
	for (unsigned i = 0; i < ic->ic_nslots && !found; i++) {
		const struct posix_idcache_slot *slot = &ic->ic_slots[i];
		found = slot->ics_id.foi_len != 0 && slot->ics_ino == stx.stx_ino &&
		        slot->ics_btime_sec == stx.stx_btime.tv_sec &&
		        slot->ics_btime_nsec == stx.stx_btime.tv_nsec;
	}
	pthread_mutex_unlock(&ic->ic_lock);
	return found;
}

static uint64_t host_ino(const char *rel)
{
	struct stat st;
	return host_stat(rel, &st) ? (uint64_t)st.st_ino : 0;
}

/* Files the id cache tests need old: the cache takes an inode only once its birth time is
 * safely in the past (see posix_idcache.c), so they are made first and then left to age. */
#define IDC_MANY 4500
static bool idc_ready;

static void idcache_fixture(void)
{
	if (idc_ready)
		return;
	idc_ready = true;
	char name[512];
	struct stat st;
	if (host_stat("idc", &st))
		return;
	host_path(name, sizeof(name), "idc");
	VERIFY(mkdir(name, 0755) == 0);
	host_path(name, sizeof(name), "idc/many");
	VERIFY(mkdir(name, 0755) == 0);
	host_path(name, sizeof(name), "idc/other");
	VERIFY(mkdir(name, 0755) == 0);
	host_write("idc/ren_a", "a", 0644);
	host_write("idc/ren_b", "bbbbbbbbbbbbbbbbbbbbbb", 0644);
	host_write("idc/swap_x", "xxx", 0644);
	host_write("idc/swap_y", "yyyy", 0644);
	host_write("idc/aged", "aged!", 0644);
	for (int i = 0; i < IDC_MANY; i++) {
		char rel[64];
		snprintf(rel, sizeof(rel), "idc/many/n%05d", i);
		host_path(name, sizeof(name), rel);
		int fd = open(name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		VERIFY(fd >= 0);
		close(fd);
	}
	usleep(1300 * 1000); /* POSIX_IDCACHE_MIN_AGE_NS (1 s) and a margin */
}

/* An inode number reused by a new file (delete + create, on the host or through the back end)
 * must not give the new file the old file's id: LOOKUP returns the id CREATE returned (and
 * name_to_handle_at gives), with the new file's attributes, and the old id is stale. */
static void test_idcache_inode_reuse(void)
{
	idcache_fixture();
	struct fs_obj_id d, old_id, new_id, made, expect;
	struct fs_attr a;
	char p[512];
	CHECK(do_mkdir(&g_root, "reuse", 0755, &g_rootc, &d) == 0);
	host_path(p, sizeof(p), "reuse/f");
	int reused = 0, wrong_id = 0, wrong_attr = 0, not_stale = 0, young_cached = 0;
	for (int i = 0; i < 200; i++) {
		host_write("reuse/f", "old", 0644);
		uint64_t ino_old = host_ino("reuse/f");
		if (do_lookup(&d, "f", &g_rootc, &old_id, NULL) != 0)
			wrong_id++;
		/* Born within the coarse clock's reach of now: a successor could share its key. */
		if (idcache_has("reuse/f"))
			young_cached++;
		CHECK(unlink(p) == 0);
		host_write("reuse/f", "newer", 0644);
		uint64_t ino_new = host_ino("reuse/f");
		forge_id(p, FS_REG, &expect);
		if (do_lookup(&d, "f", &g_rootc, &new_id, &a) != 0 || !id_equal(&new_id, &expect))
			wrong_id++;
		else if (a.fa_fileid != ino_new || a.fa_size != 5)
			wrong_attr++;
		if (ino_new == ino_old) {
			reused++;
			if (do_getattr(&old_id, &a) != -ESTALE)
				not_stale++;
		}
		CHECK(unlink(p) == 0);
	}
	printf("# host: inode number reused in %d of 200 delete+create pairs\n", reused);
	CHECKF(wrong_id == 0 && wrong_attr == 0 && not_stale == 0,
	       "host: %d wrong ids, %d wrong attributes, %d old ids not stale", wrong_id,
	       wrong_attr, not_stale);
	CHECKF(young_cached == 0, "%d newborn files entered the id cache", young_cached);

	/* The same through CREATE and REMOVE. */
	reused = wrong_id = not_stale = 0;
	for (int i = 0; i < 5; i++) {
		CHECK(do_create(&d, "g", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &made, NULL) ==
		      0);
		uint64_t ino_old = host_ino("reuse/g");
		if (do_lookup(&d, "g", &g_rootc, &old_id, NULL) != 0 || !id_equal(&old_id, &made))
			wrong_id++;
		CHECK(do_remove(FS_OP_REMOVE, &d, "g", &g_rootc) == 0);
		CHECK(do_create(&d, "g", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &made, NULL) ==
		      0);
		if (do_lookup(&d, "g", &g_rootc, &new_id, &a) != 0 || !id_equal(&new_id, &made) ||
		    a.fa_fileid != host_ino("reuse/g"))
			wrong_id++;
		if (host_ino("reuse/g") == ino_old) {
			reused++;
			if (id_equal(&old_id, &new_id) || do_getattr(&old_id, &a) != -ESTALE)
				not_stale++;
		}
		CHECK(do_remove(FS_OP_REMOVE, &d, "g", &g_rootc) == 0);
	}
	printf("# fs: inode number reused in %d of 5 REMOVE+CREATE pairs\n", reused);
	CHECKF(wrong_id == 0 && not_stale == 0, "fs: %d wrong ids, %d old ids not stale", wrong_id,
	       not_stale);

	/* An old file, known to the cache, deleted and its inode number given to a new file. */
	struct fs_obj_id idc;
	CHECK(do_lookup(&g_root, "idc", &g_rootc, &idc, NULL) == 0);
	CHECK(do_lookup(&idc, "aged", &g_rootc, &old_id, NULL) == 0);
	CHECK(do_lookup(&idc, "aged", &g_rootc, &new_id, NULL) == 0 && id_equal(&old_id, &new_id));
	CHECKF(idcache_has("idc/aged"), "an old file's id is cached");
	CHECK(do_remove(FS_OP_REMOVE, &idc, "aged", &g_rootc) == 0);
	CHECK(do_create(&idc, "aged", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &made, NULL) == 0);
	CHECK(do_lookup(&idc, "aged", &g_rootc, &new_id, &a) == 0 && id_equal(&new_id, &made));
	CHECK(a.fa_fileid == host_ino("idc/aged") && a.fa_size == 0);
	CHECK(do_getattr(&old_id, &a) == -ESTALE);
}

/* Renames between LOOKUPs: each name's id is that of the object now under the name, with that
 * object's attributes, whether the server or the host renamed. */
static void test_idcache_rename(void)
{
	idcache_fixture();
	struct fs_obj_id idc, other, ida, idb, idx, idy, id;
	struct fs_attr a, g;
	struct fs_req r;
	CHECK(do_lookup(&g_root, "idc", &g_rootc, &idc, NULL) == 0);
	CHECK(do_lookup(&idc, "other", &g_rootc, &other, NULL) == 0);
	uint64_t ino_a = host_ino("idc/ren_a"), ino_b = host_ino("idc/ren_b");
	CHECK(do_lookup(&idc, "ren_a", &g_rootc, &ida, &a) == 0 && a.fa_fileid == ino_a);
	CHECK(do_lookup(&idc, "ren_b", &g_rootc, &idb, &a) == 0 && a.fa_fileid == ino_b &&
	      a.fa_size == 22);
	CHECK(!id_equal(&ida, &idb));
	CHECKF(idcache_has("idc/ren_a") && idcache_has("idc/ren_b"), "both ids cached");

	/* RENAME ren_a over ren_b: ren_b is now a's object. */
	req_init(&r, FS_OP_RENAME, &idc, &g_rootc);
	r.u.rename.rn_from_name = "ren_a";
	r.u.rename.rn_to_dir = idc;
	r.u.rename.rn_to_name = "ren_b";
	CHECK(run(&r) == 0);
	CHECK(do_lookup(&idc, "ren_b", &g_rootc, &id, &a) == 0);
	CHECK(id_equal(&id, &ida) && a.fa_fileid == ino_a && a.fa_size == 1);
	CHECK(do_getattr(&id, &g) == 0 && g.fa_fileid == a.fa_fileid && g.fa_size == 1);
	CHECK(do_lookup(&idc, "ren_a", &g_rootc, &id, NULL) == -ENOENT);
	CHECK(do_getattr(&idb, &g) == -ESTALE);

	/* Across directories and back. */
	req_init(&r, FS_OP_RENAME, &idc, &g_rootc);
	r.u.rename.rn_from_name = "ren_b";
	r.u.rename.rn_to_dir = other;
	r.u.rename.rn_to_name = "moved";
	CHECK(run(&r) == 0);
	CHECK(do_lookup(&other, "moved", &g_rootc, &id, &a) == 0);
	CHECK(id_equal(&id, &ida) && a.fa_fileid == ino_a && a.fa_size == 1);
	CHECK(do_lookup(&idc, "ren_b", &g_rootc, &id, NULL) == -ENOENT);

	/* The host swaps two names behind the server's back. */
	uint64_t ino_x = host_ino("idc/swap_x"), ino_y = host_ino("idc/swap_y");
	CHECK(do_lookup(&idc, "swap_x", &g_rootc, &idx, &a) == 0 && a.fa_size == 3);
	CHECK(do_lookup(&idc, "swap_y", &g_rootc, &idy, &a) == 0 && a.fa_size == 4);
	char px[512], py[512], pt[512];
	host_path(px, sizeof(px), "idc/swap_x");
	host_path(py, sizeof(py), "idc/swap_y");
	host_path(pt, sizeof(pt), "idc/swap_t");
	CHECK(rename(px, pt) == 0 && rename(py, px) == 0 && rename(pt, py) == 0);
	CHECK(do_lookup(&idc, "swap_x", &g_rootc, &id, &a) == 0);
	CHECK(id_equal(&id, &idy) && a.fa_fileid == ino_y && a.fa_size == 4);
	CHECK(do_getattr(&id, &g) == 0 && g.fa_fileid == ino_y);
	CHECK(do_lookup(&idc, "swap_y", &g_rootc, &id, &a) == 0);
	CHECK(id_equal(&id, &idx) && a.fa_fileid == ino_x && a.fa_size == 3);
	CHECK(do_getattr(&id, &g) == 0 && g.fa_fileid == ino_x);
}

/* Many names, more than the cache has slots: sets overflow and entries are replaced. Every
 * LOOKUP and every READDIRPLUS entry, on every pass, carries the object's own id (as
 * name_to_handle_at makes it) and fileid; and every entry left in the table maps its key to an
 * id of that same inode. */
static void test_idcache_many_names(void)
{
	idcache_fixture();
	static struct rd_ctx rc;
	struct fs_obj_id many, id, expect;
	struct fs_attr a;
	char name[64], p[512];
	CHECK(do_lookup(&g_root, "idc", &g_rootc, &id, NULL) == 0);
	CHECK(do_lookup(&id, "many", &g_rootc, &many, NULL) == 0);
	int bad_lookup = 0, bad_rd = 0, seen = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < IDC_MANY; i++) {
			snprintf(name, sizeof(name), "n%05d", (i * 7919) % IDC_MANY);
			snprintf(p, sizeof(p), "%s/idc/many/%s", g_export, name);
			forge_id(p, FS_REG, &expect);
			struct stat st;
			VERIFY(lstat(p, &st) == 0);
			if (do_lookup(&many, name, &g_rootc, &id, &a) != 0 ||
			    !id_equal(&id, &expect) || a.fa_fileid != (uint64_t)st.st_ino)
				bad_lookup++;
		}
		/* READDIRPLUS in pages of 200 entries. */
		uint64_t cookie = 0;
		uint8_t verf[8] = {0};
		bool eof = false;
		for (int page = 0; !eof && page < 100; page++) {
			if (do_readdir(&rc, &many, cookie, page ? verf : NULL, true, 200) != 0) {
				bad_rd++;
				break;
			}
			memcpy(verf, rc.rc_req.u.readdir.rd_verf_out, 8);
			eof = rc.rc_req.u.readdir.rd_eof;
			for (int e = 0; e < rc.rc_count; e++) {
				if (rc.rc_names[e][0] != 'n')
					continue;
				seen++;
				snprintf(p, sizeof(p), "%s/idc/many/%s", g_export, rc.rc_names[e]);
				forge_id(p, FS_REG, &expect);
				if (!rc.rc_has_obj[e] || !id_equal(&rc.rc_objs[e], &expect))
					bad_rd++;
			}
			if (rc.rc_count > 0)
				cookie = rc.rc_cookies[rc.rc_count - 1];
		}
		CHECK(eof);
	}
	CHECKF(bad_lookup == 0 && bad_rd == 0 && seen == 2 * IDC_MANY,
	       "%d wrong LOOKUPs, %d wrong READDIRPLUS entries, %d entries seen", bad_lookup,
	       bad_rd, seen);

	/* The table itself: nearly full, and no key maps to another inode's id. */
	struct posix_fs *pf = posix_fs_of(g_fs);
	struct posix_idcache *ic = &pf->pf_idcache;
	int used = 0, mismatched = 0, stale = 0;
	pthread_mutex_lock(&ic->ic_lock);
	for (unsigned i = 0; i < ic->ic_nslots; i++) {
		const struct posix_idcache_slot *slot = &ic->ic_slots[i];
		if (slot->ics_id.foi_len == 0)
			continue;
		used++;
		_Alignas(struct file_handle)
		    uint8_t buf[sizeof(struct file_handle) + FS_OBJ_ID_MAX];
		struct file_handle *fh = (struct file_handle *)(void *)buf;
		fh->handle_bytes = (unsigned)(slot->ics_id.foi_len - POSIX_ID_OFF_HANDLE);
		memcpy(&fh->handle_type, slot->ics_id.foi_bytes + POSIX_ID_OFF_HTYPE, 4);
		memcpy(fh->f_handle, slot->ics_id.foi_bytes + POSIX_ID_OFF_HANDLE,
		       fh->handle_bytes);
		int fd = open_by_handle_at(pf->pf_root_fd, fh, O_PATH | O_CLOEXEC);
		struct stat st;
		if (fd < 0) {
			stale++; /* the inode was deleted by an earlier case */
			continue;
		}
		if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != slot->ics_ino)
			mismatched++;
		close(fd);
	}
	pthread_mutex_unlock(&ic->ic_lock);
	printf("# id cache: %d of %u slots used, %d stale\n", used, ic->ic_nslots, stale);
	CHECKF(mismatched == 0, "%d entries map to another inode", mismatched);
	/* IDC_MANY keys hashed into sets of POSIX_IDCACHE_WAYS fill about 84% of the slots (some
	 * sets overflow while others stay short); far fewer means entries were not kept. */
	CHECKF(used >= (int)(ic->ic_nslots * 3 / 4), "only %d slots used", used);
}

/* Concurrent CREATEs in one directory, submitted from several loop threads at once and
 * completed through the workers: every one succeeds, completes on its own loop, and every file
 * is there under the id CREATE returned. */
#define CC_THREADS 4
#define CC_EACH 25
struct cc_loop {
	struct loop *cl_loop;
	struct loop_task cl_start;
	struct fs_req cl_reqs[CC_EACH];
	char cl_names[CC_EACH][32];
	int cl_done;
	int cl_bad_thread;
	int cl_index;
	struct fs_obj_id cl_dir;
	pthread_t cl_thread;
};

static void cc_done(struct fs_req *req)
{
	struct cc_loop *cl = req->fr_done_arg;
	if (!loop_on_thread(cl->cl_loop))
		cl->cl_bad_thread++;
	if (++cl->cl_done == CC_EACH)
		loop_stop(cl->cl_loop);
}

static void cc_start(struct loop_task *task)
{
	struct cc_loop *cl = SH_CONTAINER_OF(task, struct cc_loop, cl_start);
	for (int i = 0; i < CC_EACH; i++) {
		struct fs_req *r = &cl->cl_reqs[i];
		snprintf(cl->cl_names[i], sizeof(cl->cl_names[i]), "t%d_%02d", cl->cl_index, i);
		req_init(r, FS_OP_CREATE, &cl->cl_dir, &g_rootc);
		r->u.create.cr_name = cl->cl_names[i];
		r->u.create.cr_mode = FS_CREATE_GUARDED;
		r->fr_fs = g_fs;
		r->fr_loop = cl->cl_loop;
		r->fr_done = cc_done;
		r->fr_done_arg = cl;
		fs_submit(r);
	}
}

static void *cc_main(void *arg)
{
	struct cc_loop *cl = arg;
	cl->cl_start.lt_fn = cc_start;
	loop_post(cl->cl_loop, &cl->cl_start);
	VERIFY(loop_run(cl->cl_loop) == 0);
	return NULL;
}

static void test_dir_sync_concurrent_creates(void)
{
	static struct cc_loop cls[CC_THREADS];
	struct fs_obj_id d, id;
	struct posix_fd *dpfd = NULL;
	bool was = set_new_entry_with_object(false);
	CHECK(do_mkdir(&g_root, "cc", 0755, &g_rootc, &d) == 0);
	CHECK(posix_fd_hold(posix_fs_of(g_fs), &d, &dpfd) == 0);
	fs_hook_arm(dpfd, 0, 0, NULL); /* count the directory's fsyncs */
	for (int t = 0; t < CC_THREADS; t++) {
		memset(&cls[t], 0, sizeof(cls[t]));
		cls[t].cl_index = t;
		cls[t].cl_dir = d;
		CHECK(loop_create(&cls[t].cl_loop) == 0);
	}
	for (int t = 0; t < CC_THREADS; t++)
		CHECK(pthread_create(&cls[t].cl_thread, NULL, cc_main, &cls[t]) == 0);
	int failed = 0, wrong = 0, bad_thread = 0;
	for (int t = 0; t < CC_THREADS; t++) {
		pthread_join(cls[t].cl_thread, NULL);
		bad_thread += cls[t].cl_bad_thread;
		for (int i = 0; i < CC_EACH; i++) {
			struct fs_req *r = &cls[t].cl_reqs[i];
			if (r->fr_status != 0) {
				failed++;
				continue;
			}
			if (do_lookup(&d, cls[t].cl_names[i], &g_rootc, &id, NULL) != 0 ||
			    !id_equal(&id, &r->u.create.cr_obj) || !r->u.create.cr_attr_valid)
				wrong++;
		}
		loop_destroy(cls[t].cl_loop);
	}
	int dir_fsyncs = fs_hook_disarm(NULL);
	set_new_entry_with_object(was);
	posix_fd_rele(posix_fs_of(g_fs), dpfd);
	VERIFY(posix_thread_cred_reset() == 0);
	char p[512];
	host_path(p, sizeof(p), "cc");
	DIR *dir = opendir(p);
	int present = 0;
	struct dirent *de;
	while (dir != NULL && (de = readdir(dir)) != NULL)
		present += de->d_name[0] == 't' ? 1 : 0;
	if (dir != NULL)
		closedir(dir);
	printf("# %d CREATEs, %d fsyncs of their directory\n", CC_THREADS * CC_EACH, dir_fsyncs);
	CHECKF(failed == 0 && wrong == 0 && bad_thread == 0,
	       "%d failed, %d wrong, %d off their loop", failed, wrong, bad_thread);
	CHECKF(present == CC_THREADS * CC_EACH, "%d files present", present);
	CHECK(dir_fsyncs >= 1 && dir_fsyncs <= CC_THREADS * CC_EACH);
}

/* Group commit, made deterministic: the first fsync of the directory is held until every one of
 * a mix of CREATE, MKDIR, REMOVE, RENAME and LINK has made its change and queued for
 * durability. Exactly one more fsync follows, and when it starts every change is in place. With
 * fsync failing instead, every request that shared it reports the error, and a later change
 * succeeds (the error is not sticky). */
#define GC_OPS 6
static bool gc_all_changes_visible(int fd)
{
	struct stat st;
	return fstatat(fd, "c1", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       fstatat(fd, "c2", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       fstatat(fd, "sub", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       fstatat(fd, "gone", &st, AT_SYMLINK_NOFOLLOW) != 0 &&
	       fstatat(fd, "from", &st, AT_SYMLINK_NOFOLLOW) != 0 &&
	       fstatat(fd, "to", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       fstatat(fd, "linked", &st, AT_SYMLINK_NOFOLLOW) == 0;
}

struct gc_batch {
	pthread_mutex_t gb_lock;
	pthread_cond_t gb_cond;
	int gb_done;
	struct fs_req gb_reqs[GC_OPS];
};

static void gc_done(struct fs_req *req)
{
	struct gc_batch *gb = req->fr_done_arg;
	pthread_mutex_lock(&gb->gb_lock);
	gb->gb_done++;
	pthread_cond_signal(&gb->gb_cond);
	pthread_mutex_unlock(&gb->gb_lock);
}

static void gc_begin(struct gc_batch *gb)
{
	memset(gb, 0, sizeof(*gb));
	pthread_mutex_init(&gb->gb_lock, NULL);
	pthread_cond_init(&gb->gb_cond, NULL);
}

static void gc_submit(struct gc_batch *gb, struct fs_req *req)
{
	req->fr_fs = g_fs;
	req->fr_done = gc_done;
	req->fr_done_arg = gb;
	fs_submit(req);
}

/* Waits until n requests of the batch are done, and ends it. */
static void gc_end(struct gc_batch *gb, int n)
{
	pthread_mutex_lock(&gb->gb_lock);
	while (gb->gb_done < n)
		pthread_cond_wait(&gb->gb_cond, &gb->gb_lock);
	pthread_mutex_unlock(&gb->gb_lock);
	pthread_cond_destroy(&gb->gb_cond);
	pthread_mutex_destroy(&gb->gb_lock);
	VERIFY(posix_thread_cred_reset() == 0);
}

/* Submits the six changes to directory d at once (target file "src" for the LINK) and waits. */
static void gc_run(struct gc_batch *gb, const struct fs_obj_id *d, const struct fs_obj_id *src)
{
	gc_begin(gb);
	struct fs_req *r = gb->gb_reqs;
	req_init(&r[0], FS_OP_CREATE, d, &g_rootc);
	r[0].u.create.cr_name = "c1";
	r[0].u.create.cr_mode = FS_CREATE_GUARDED;
	req_init(&r[1], FS_OP_CREATE, d, &g_rootc);
	r[1].u.create.cr_name = "c2";
	r[1].u.create.cr_mode = FS_CREATE_UNCHECKED;
	req_init(&r[2], FS_OP_MKDIR, d, &g_rootc);
	r[2].u.create.cr_name = "sub";
	req_init(&r[3], FS_OP_REMOVE, d, &g_rootc);
	r[3].u.remove.rm_name = "gone";
	req_init(&r[4], FS_OP_RENAME, d, &g_rootc);
	r[4].u.rename.rn_from_name = "from";
	r[4].u.rename.rn_to_dir = *d;
	r[4].u.rename.rn_to_name = "to";
	req_init(&r[5], FS_OP_LINK, src, &g_rootc);
	r[5].u.link.ln_dir = *d;
	r[5].u.link.ln_name = "linked";
	for (int i = 0; i < GC_OPS; i++)
		gc_submit(gb, &r[i]);
	gc_end(gb, GC_OPS);
}

static void gc_prepare(const char *dirname, struct fs_obj_id *d, struct fs_obj_id *src)
{
	char rel[128];
	CHECK(do_mkdir(&g_root, dirname, 0755, &g_rootc, d) == 0);
	snprintf(rel, sizeof(rel), "%s/gone", dirname);
	host_write(rel, "g", 0644);
	snprintf(rel, sizeof(rel), "%s/from", dirname);
	host_write(rel, "f", 0644);
	snprintf(rel, sizeof(rel), "%s_src", dirname);
	host_write(rel, "s", 0644);
	CHECK(do_lookup(&g_root, rel, &g_rootc, src, NULL) == 0);
}

/* gc_prepare, then the new directory's cache entry, held (NULL, the failure reported, when it
 * cannot be). */
static struct posix_fd *gc_prepare_held(const char *dirname, struct fs_obj_id *d,
					struct fs_obj_id *src)
{
	struct posix_fd *dpfd = NULL;
	gc_prepare(dirname, d, src);
	CHECK(posix_fd_hold(posix_fs_of(g_fs), d, &dpfd) == 0);
	return dpfd;
}

/* True when no change waits on the directory's group commit and no round runs. */
static bool dir_sync_idle(struct posix_fd *dpfd)
{
	pthread_mutex_lock(&dpfd->pfd_sync_lock);
	bool idle = !dpfd->pfd_sync_running && dpfd->pfd_sync_open_list == NULL &&
		    dpfd->pfd_sync_open_reqs == NULL && dpfd->pfd_sync_open_objs == 0 &&
		    !dpfd->pfd_sync_open_dir && dpfd->pfd_sync_run_list == NULL &&
		    dpfd->pfd_sync_run_reqs == NULL && dpfd->pfd_sync_left == 0;
	pthread_mutex_unlock(&dpfd->pfd_sync_lock);
	return idle;
}

static void test_dir_sync_group_commit(void)
{
	static struct gc_batch gb;
	struct fs_obj_id d, src;
	struct posix_fd *dpfd = gc_prepare_held("gc", &d, &src);
	if (dpfd == NULL)
		return;
	bool was = set_new_entry_with_object(false);
	fs_hook_arm(dpfd, GC_OPS, 0, gc_all_changes_visible);
	gc_run(&gb, &d, &src);
	int check_ok = 0;
	int fsyncs = fs_hook_disarm(&check_ok);
	set_new_entry_with_object(was);
	int failed = 0;
	for (int i = 0; i < GC_OPS; i++)
		failed += gb.gb_reqs[i].fr_status != 0 ? 1 : 0;
	CHECKF(failed == 0, "%d of %d changes failed", failed, GC_OPS);
	/* The held fsync (released once every change had queued), then one for all the others,
	 * which started with every change in place. */
	CHECKF(fsyncs == 2 && check_ok == 2, "%d fsyncs of the directory, %d saw every change",
	       fsyncs, check_ok);
	CHECK(gc_all_changes_visible(dpfd->pfd_fd));
	CHECK(dir_sync_idle(dpfd));
	posix_fd_rele(posix_fs_of(g_fs), dpfd);
}

static void test_dir_sync_error(void)
{
	static struct gc_batch gb;
	struct fs_obj_id d, src;
	struct posix_fd *dpfd = gc_prepare_held("gce", &d, &src);
	if (dpfd == NULL)
		return;
	bool was = set_new_entry_with_object(false);
	/* One change, its fsync failing. */
	fs_hook_arm(dpfd, 0, EIO, NULL);
	CHECK(do_create(&d, "e1", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == -EIO);
	CHECK(fs_hook_disarm(NULL) == 1);
	/* Not sticky: the next change's own fsync succeeds. */
	fs_hook_arm(dpfd, 0, 0, NULL);
	CHECK(do_create(&d, "e2", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	CHECK(fs_hook_disarm(NULL) == 1);
	/* Six changes queued behind a failing fsync: all of them hear of the failure (a change
	 * reported failed although durable is safe, the reverse would not be). */
	fs_hook_arm(dpfd, GC_OPS, EIO, NULL);
	gc_run(&gb, &d, &src);
	int fsyncs = fs_hook_disarm(NULL);
	int eio = 0;
	for (int i = 0; i < GC_OPS; i++)
		eio += gb.gb_reqs[i].fr_status == -EIO ? 1 : 0;
	CHECKF(eio == GC_OPS, "%d of %d changes reported EIO (%d fsyncs)", eio, GC_OPS, fsyncs);
	fs_hook_arm(dpfd, 0, 0, NULL);
	CHECK(do_create(&d, "e3", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	CHECK(fs_hook_disarm(NULL) == 1);
	set_new_entry_with_object(was);
	posix_fd_rele(posix_fs_of(g_fs), dpfd);
}

/* Where a new object's own fsync writes its directory entry (ext4 without a journal), CREATE
 * and MKDIR fsync the new object and not the directory, and the object's fsync failing fails
 * the change; REMOVE still fsyncs the directory. */
static void test_new_entry_with_object(void)
{
	struct fs_obj_id d, src, id;
	struct posix_fd *dpfd = gc_prepare_held("ne", &d, &src);
	if (dpfd == NULL)
		return;
	bool was = set_new_entry_with_object(true);
	fs_hook_arm(dpfd, 0, 0, NULL);
	CHECK(do_create(&d, "n1", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, &id, NULL) == 0);
	CHECK(do_create(&d, "n2", FS_CREATE_EXCLUSIVE, -1, (const uint8_t *)"verifier",
			&g_rootc, NULL, NULL) == 0);
	CHECK(do_mkdir(&d, "nsub", 0755, &g_rootc, NULL) == 0);
	int dir_fsyncs = fs_hook_disarm(NULL);
	CHECKF(dir_fsyncs == 0, "%d fsyncs of the directory for CREATE and MKDIR", dir_fsyncs);
	struct fs_obj_id found;
	CHECK(do_lookup(&d, "n1", &g_rootc, &found, NULL) == 0 && id_equal(&found, &id));
	/* Every other descriptor's fsync failing: the new object's own fsync is what a CREATE
	 * and a MKDIR now rest on, so both report it. */
	pthread_mutex_lock(&fs_hook_lock);
	fs_hook_fail_other_errno = EIO;
	pthread_mutex_unlock(&fs_hook_lock);
	fs_hook_arm(dpfd, 0, 0, NULL);
	CHECK(do_create(&d, "n3", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == -EIO);
	CHECK(do_mkdir(&d, "nsub2", 0755, &g_rootc, NULL) == -EIO);
	CHECK(fs_hook_disarm(NULL) == 0);
	pthread_mutex_lock(&fs_hook_lock);
	fs_hook_fail_other_errno = 0;
	pthread_mutex_unlock(&fs_hook_lock);
	/* A new file that gains a second name before its fsync returns: that fsync may have
	 * written the other name's directory, so the CREATE fsyncs its own. */
	pthread_mutex_lock(&fs_hook_lock);
	host_path(fs_hook_link_path, sizeof(fs_hook_link_path), "ne_second_name");
	pthread_mutex_unlock(&fs_hook_lock);
	fs_hook_arm(dpfd, 0, 0, NULL);
	CHECK(do_create(&d, "n4", FS_CREATE_GUARDED, 0644, NULL, &g_rootc, NULL, NULL) == 0);
	CHECK(fs_hook_disarm(NULL) == 1);
	struct fs_attr attr;
	CHECK(do_lookup(&d, "n4", &g_rootc, &found, &attr) == 0 && attr.fa_nlink == 2);
	/* A REMOVE has no new object: its directory is fsynced. */
	fs_hook_arm(dpfd, 0, 0, NULL);
	CHECK(do_remove(FS_OP_REMOVE, &d, "gone", &g_rootc) == 0);
	CHECK(fs_hook_disarm(NULL) == 1);
	set_new_entry_with_object(was);
	posix_fd_rele(posix_fs_of(g_fs), dpfd);
}

/* Waits (at most 5 s) until a watched fsync is under way. */
static void wait_watched_fsync(void)
{
	for (int t = 0; t < 5000; t++) {
		pthread_mutex_lock(&fs_hook_lock);
		bool running = fs_hook_watched_running > 0;
		pthread_mutex_unlock(&fs_hook_lock);
		if (running)
			return;
		usleep(1000);
	}
}

/* Where a new object's fsync writes its directory's blocks (ext4 without a journal), no fsync
 * that writes the directory may start while one of another round runs: one that started later
 * would skip, without waiting for them, the blocks the first holds (posix_fdcache.c). A REMOVE's
 * directory fsync is held while three CREATEs and a MKDIR make their changes: their fsyncs wait
 * for it, then run as one round, side by side (each is held until all four have started). */
static void test_rounds_never_overlap(void)
{
	static struct gc_batch gb;
	struct fs_obj_id d, src;
	struct posix_fd *dpfd = gc_prepare_held("rn", &d, &src);
	if (dpfd == NULL)
		return;
	bool was = set_new_entry_with_object(true);
	gc_begin(&gb);
	/* The directory's fsync waits until the REMOVE and the four others have joined. */
	fs_hook_arm(dpfd, 5, 0, NULL);
	pthread_mutex_lock(&fs_hook_lock);
	fs_hook_gather = 4;
	pthread_mutex_unlock(&fs_hook_lock);
	struct fs_req *r = gb.gb_reqs;
	static const char *const names[] = {"r1", "r2", "r3", "rsub"};
	req_init(&r[0], FS_OP_REMOVE, &d, &g_rootc);
	r[0].u.remove.rm_name = "gone";
	for (int i = 1; i <= 4; i++) {
		req_init(&r[i], i == 4 ? FS_OP_MKDIR : FS_OP_CREATE, &d, &g_rootc);
		r[i].u.create.cr_name = names[i - 1];
		r[i].u.create.cr_mode = FS_CREATE_GUARDED;
	}
	for (int i = 0; i < 5; i++) {
		gc_submit(&gb, &r[i]);
		/* The REMOVE's fsync first, so that the others change the directory under it. */
		if (i == 0)
			wait_watched_fsync();
	}
	gc_end(&gb, 5);
	pthread_mutex_lock(&fs_hook_lock);
	int overlaps = fs_hook_overlaps, most = fs_hook_others_most;
	pthread_mutex_unlock(&fs_hook_lock);
	int dir_fsyncs = fs_hook_disarm(NULL);
	set_new_entry_with_object(was);
	int failed = 0;
	for (int i = 0; i < 5; i++)
		failed += r[i].fr_status != 0 ? 1 : 0;
	CHECKF(failed == 0, "%d of 5 changes failed", failed);
	CHECKF(dir_fsyncs == 1, "%d fsyncs of the directory", dir_fsyncs);
	CHECKF(overlaps == 0, "%d new objects' fsyncs started while the directory's ran", overlaps);
	CHECKF(most == 4, "at most %d of the four new objects' fsyncs ran at once", most);
	CHECK(dir_sync_idle(dpfd));
	posix_fd_rele(posix_fs_of(g_fs), dpfd);
}

/* A SETATTR of a directory fsyncs the directory, so it too joins the directory's rounds: while a
 * REMOVE's directory fsync is held, a chmod of the directory makes its change and waits, and its
 * fsync runs after the held one, never beside it. */
static void test_setattr_dir_in_rounds(void)
{
	static struct gc_batch gb;
	struct fs_obj_id d, src;
	struct posix_fd *dpfd = gc_prepare_held("rs", &d, &src);
	if (dpfd == NULL)
		return;
	gc_begin(&gb);
	fs_hook_arm(dpfd, 2, 0, NULL); /* held until the REMOVE and the SETATTR have joined */
	struct fs_req *r = gb.gb_reqs;
	req_init(&r[0], FS_OP_REMOVE, &d, &g_rootc);
	r[0].u.remove.rm_name = "gone";
	req_init(&r[1], FS_OP_SETATTR, &d, &g_rootc);
	r[1].u.setattr.sa_sattr.fs_set_mode = true;
	r[1].u.setattr.sa_sattr.fs_mode = 0700;
	gc_submit(&gb, &r[0]);
	wait_watched_fsync();
	gc_submit(&gb, &r[1]);
	gc_end(&gb, 2);
	pthread_mutex_lock(&fs_hook_lock);
	int most = fs_hook_watched_most;
	pthread_mutex_unlock(&fs_hook_lock);
	int dir_fsyncs = fs_hook_disarm(NULL);
	CHECKF(r[0].fr_status == 0 && r[1].fr_status == 0, "REMOVE %d, SETATTR %d",
	       r[0].fr_status, r[1].fr_status);
	CHECKF(dir_fsyncs == 2 && most == 1, "%d fsyncs of the directory, at most %d at once",
	       dir_fsyncs, most);
	struct stat st;
	CHECK(host_stat("rs", &st) && (st.st_mode & 07777) == 0700);
	posix_fd_rele(posix_fs_of(g_fs), dpfd);
}

/* A REMOVE waits for its directory's fsync parked in the directory's rounds, not on a worker
 * (posix_dir_sync_park): while the first REMOVE's fsync of the directory is held, more REMOVEs
 * than there are workers all make their changes and join the next round, which one more fsync
 * then covers. Were each waiting on a worker, the workers would run out and the held fsync would
 * wait for the rest in vain. */
static void test_parked_removes_free_workers(void)
{
	static struct gc_batch gb;
	static struct fs_req reqs[40];
	static char names[40][16];
	struct posix_fs *pf = posix_fs_of(g_fs);
	unsigned n = pf->pf_nworkers + 3;
	CHECKF(n <= 40, "%u workers", pf->pf_nworkers);
	if (n > 40)
		return;
	struct fs_obj_id d;
	CHECK(do_mkdir(&g_root, "pk", 0755, &g_rootc, &d) == 0);
	for (unsigned i = 0; i < n; i++) {
		char rel[64];
		snprintf(names[i], sizeof(names[i]), "v%u", i);
		snprintf(rel, sizeof(rel), "pk/v%u", i);
		host_write(rel, "v", 0644);
	}
	struct posix_fd *dpfd = NULL;
	CHECK(posix_fd_hold(pf, &d, &dpfd) == 0);
	if (dpfd == NULL)
		return;
	gc_begin(&gb);
	fs_hook_arm(dpfd, n, 0, NULL); /* the first fsync is held until all n have joined */
	for (unsigned i = 0; i < n; i++) {
		req_init(&reqs[i], FS_OP_REMOVE, &d, &g_rootc);
		reqs[i].u.remove.rm_name = names[i];
		gc_submit(&gb, &reqs[i]);
		if (i == 0)
			wait_watched_fsync();
	}
	gc_end(&gb, (int)n);
	pthread_mutex_lock(&fs_hook_lock);
	bool hold_met = fs_hook_hold_met;
	pthread_mutex_unlock(&fs_hook_lock);
	int dir_fsyncs = fs_hook_disarm(NULL);
	unsigned failed = 0, left = 0;
	for (unsigned i = 0; i < n; i++) {
		char rel[64];
		struct stat st;
		snprintf(rel, sizeof(rel), "pk/v%u", i);
		failed += reqs[i].fr_status != 0 ? 1 : 0;
		left += host_stat(rel, &st) ? 1 : 0;
	}
	CHECKF(failed == 0 && left == 0, "%u of %u REMOVEs failed, %u names left", failed, n, left);
	CHECKF(hold_met, "the held fsync timed out before %u REMOVEs (%u workers) had joined", n,
	       pf->pf_nworkers);
	CHECKF(dir_fsyncs == 2, "%d fsyncs of the directory", dir_fsyncs);
	CHECK(dir_sync_idle(dpfd));
	posix_fd_rele(pf, dpfd);
}

static void cleanup(void)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_base);
}

int main(void)
{
	if (geteuid() != 0) {
		/* Handles and identity switching need root; a non-root run is a failure to run. */
		printf("not ok - posix tests need root\n");
		return 1;
	}
	umask(077);
	snprintf(g_base, sizeof(g_base), "/tmp/shale-posix-XXXXXX");
	VERIFY(mkdtemp(g_base) != NULL);
	VERIFY(chmod(g_base, 0755) == 0);
	snprintf(g_export, sizeof(g_export), "%s/export", g_base);
	snprintf(g_outside, sizeof(g_outside), "%s/outside", g_base);
	VERIFY(mkdir(g_export, 0755) == 0 && chmod(g_export, 0755) == 0);
	VERIFY(mkdir(g_outside, 0755) == 0 && chmod(g_outside, 0755) == 0);
	char p[256];
	snprintf(p, sizeof(p), "%s/secret", g_outside);
	int fd = open(p, O_CREAT | O_WRONLY, 0644);
	VERIFY(fd >= 0 && write(fd, "secret", 6) == 6);
	close(fd);

	/* A small id cache, so the IDC_MANY names overflow it (test_idcache_many_names). */
	struct posix_fs_config cfg = { .pfc_root_path = g_export, .pfc_fsid = 77,
				       .pfc_idcache_slots = 4096 };
	int rc = posix_fs_create(&cfg, &g_fs);
	if (!tap_check(rc == 0, "posix_fs_create (%d)", rc)) {
		cleanup();
		return tap_finish();
	}
	VERIFY(fs_root(g_fs, &g_root) == 0);

	TAP_RUN(test_root_getattr);
	TAP_RUN(test_lookup_dots);
	TAP_RUN(test_create_modes);
	TAP_RUN(test_exclusive_create);
	TAP_RUN(test_write_read_commit);
	TAP_RUN(test_read_piped);
	TAP_RUN(test_write_behind);
	TAP_RUN(test_direct_write);
	TAP_RUN(test_write_behind_burst);
	TAP_RUN(test_setattr);
	TAP_RUN(test_mkdir_symlink_mknod);
	TAP_RUN(test_remove_and_stale);
	TAP_RUN(test_rename_link);
	TAP_RUN(test_readdir);
	TAP_RUN(test_forged_ids);
	TAP_RUN(test_outside_refused);
	TAP_RUN(test_outside_memo);
	TAP_RUN(test_symlink_not_followed);
	TAP_RUN(test_permissions);
	TAP_RUN(test_fsstat);
	TAP_RUN(test_fd_cache_limit);
	TAP_RUN(test_fd_idle_expiry);
	TAP_RUN(test_concurrent_small_cache);
	TAP_RUN(test_loop_completion);
	TAP_RUN(test_bad_root);
	TAP_RUN(test_idcache_inode_reuse);
	TAP_RUN(test_idcache_rename);
	TAP_RUN(test_idcache_many_names);
	TAP_RUN(test_dir_sync_concurrent_creates);
	TAP_RUN(test_dir_sync_group_commit);
	TAP_RUN(test_dir_sync_error);
	TAP_RUN(test_new_entry_with_object);
	TAP_RUN(test_rounds_never_overlap);
	TAP_RUN(test_setattr_dir_in_rounds);
	TAP_RUN(test_parked_removes_free_workers);

	fs_destroy(g_fs);
	cleanup();
	return tap_finish();
}
