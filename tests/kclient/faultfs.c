/* faultfs.c: a leaf that fails reads, for run-kclient.sh --eio: a FUSE file system holding one
 * file, whose bytes are those of a backing file, and whose reads of chosen byte ranges fail with
 * EIO. The server opens it as it opens any leaf and gets EIO from the kernel, as from a disk with
 * bad sectors: nothing in the server knows it is being tested.
 *
 * Why FUSE: device-mapper's `error` and `flakey` targets would be the usual way, but this host's
 * kernel has no device-mapper; FUSE is there (/dev/fuse) and needs only libfuse3.
 *
 * Usage: faultfs BACKING RULES MOUNTPOINT [FUSE options]
 *   MOUNTPOINT/NAME (NAME: BACKING's base name) reads and writes BACKING. RULES is a text file
 *   of lines "OFFSET LENGTH" (bytes): a read that overlaps one of these ranges fails with EIO.
 *   The file is read again whenever its modification time or size changes, so the faults can be
 *   armed and cleared while the server runs; a missing file means no faults. Writes, flushes
 *   and everything else always pass. Every failed read is logged on stderr as
 *   "faultfs: EIO read OFFSET LENGTH", the count of them at exit as "faultfs: N reads failed".
 *
 * Every open is direct I/O (FOPEN_DIRECT_IO): the kernel caches none of the file's pages, so
 * every read the server makes reaches this program. Flock is left to the kernel (no .flock), which
 * then locks locally, as on any file. */
#define FUSE_USE_VERSION 31

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAULTFS_MAX_RULES 4096u

struct faultfs_rule {
	uint64_t fr_off;
	uint64_t fr_len;
};

static int faultfs_fd = -1;               /* the backing file */
static char faultfs_name[256];            /* "/" + its base name */
static const char *faultfs_rules_path;
static pthread_mutex_t faultfs_lock = PTHREAD_MUTEX_INITIALIZER; /* guards the rules */
static struct faultfs_rule faultfs_rules[FAULTFS_MAX_RULES];
static unsigned faultfs_nrules;
static struct timespec faultfs_rules_mtime;
static off_t faultfs_rules_size = -1;
static atomic_ulong faultfs_failed;

/* Reads RULES again if it changed since the last read. Called with faultfs_lock held. */
static void faultfs_reload(void)
{
	struct stat st;
	if (stat(faultfs_rules_path, &st) != 0) {
		faultfs_nrules = 0;
		faultfs_rules_size = -1;
		return;
	}
	if (st.st_size == faultfs_rules_size && st.st_mtim.tv_sec == faultfs_rules_mtime.tv_sec &&
	    st.st_mtim.tv_nsec == faultfs_rules_mtime.tv_nsec)
		return;
	FILE *f = fopen(faultfs_rules_path, "r");
	if (f == NULL)
		return;
	unsigned n = 0;
	uint64_t off, len;
	while (n < FAULTFS_MAX_RULES && fscanf(f, "%" SCNu64 " %" SCNu64, &off, &len) == 2)
		faultfs_rules[n++] = (struct faultfs_rule){ off, len };
	fclose(f);
	faultfs_nrules = n;
	faultfs_rules_size = st.st_size;
	faultfs_rules_mtime = st.st_mtim;
	fprintf(stderr, "faultfs: %u ranges fail reads\n", n);
}

static bool faultfs_fails(uint64_t off, uint64_t len)
{
	pthread_mutex_lock(&faultfs_lock);
	faultfs_reload();
	bool hit = false;
	for (unsigned i = 0; i < faultfs_nrules && !hit; i++)
		hit = off < faultfs_rules[i].fr_off + faultfs_rules[i].fr_len &&
		      faultfs_rules[i].fr_off < off + len;
	pthread_mutex_unlock(&faultfs_lock);
	return hit;
}

static int faultfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	if (strcmp(path, "/") == 0) {
		memset(st, 0, sizeof(*st));
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if (strcmp(path, faultfs_name) != 0)
		return -ENOENT;
	return fstat(faultfs_fd, st) == 0 ? 0 : -errno;
}

static int faultfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
			   struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)off;
	(void)fi;
	(void)flags;
	if (strcmp(path, "/") != 0)
		return -ENOTDIR;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, faultfs_name + 1, NULL, 0, 0);
	return 0;
}

static int faultfs_open(const char *path, struct fuse_file_info *fi)
{
	if (strcmp(path, faultfs_name) != 0)
		return -ENOENT;
	fi->direct_io = 1;
	return 0;
}

static int faultfs_read(const char *path, char *buf, size_t len, off_t off,
			struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	if (faultfs_fails((uint64_t)off, len)) {
		atomic_fetch_add(&faultfs_failed, 1);
		fprintf(stderr, "faultfs: EIO read %jd %zu\n", (intmax_t)off, len);
		return -EIO;
	}
	ssize_t n = pread(faultfs_fd, buf, len, off);
	return n < 0 ? -errno : (int)n;
}

static int faultfs_write(const char *path, const char *buf, size_t len, off_t off,
			 struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	ssize_t n = pwrite(faultfs_fd, buf, len, off);
	return n < 0 ? -errno : (int)n;
}

static int faultfs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)path;
	(void)datasync;
	(void)fi;
	return fdatasync(faultfs_fd) == 0 ? 0 : -errno;
}

static int faultfs_flush(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	return 0;
}

static const struct fuse_operations faultfs_ops = {
	.getattr = faultfs_getattr,
	.readdir = faultfs_readdir,
	.open = faultfs_open,
	.read = faultfs_read,
	.write = faultfs_write,
	.fsync = faultfs_fsync,
	.flush = faultfs_flush,
};

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: faultfs BACKING RULES MOUNTPOINT [FUSE options]\n");
		return 2;
	}
	faultfs_fd = open(argv[1], O_RDWR);
	if (faultfs_fd < 0) {
		fprintf(stderr, "faultfs: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	const char *base = strrchr(argv[1], '/');
	snprintf(faultfs_name, sizeof(faultfs_name), "/%s", base ? base + 1 : argv[1]);
	faultfs_rules_path = argv[2];
	/* fuse_main gets: the program name, the mount point, -f (stay in the foreground: the
	 * caller holds its pid), a thread limit and whatever options follow. */
	char *fargs[72];
	int fargc = 0;
	fargs[fargc++] = argv[0];
	fargs[fargc++] = argv[3];
	fargs[fargc++] = "-f";
	fargs[fargc++] = "-o";
	fargs[fargc++] = "max_threads=8"; /* libfuse 3.14's default (-1) is logged as invalid */
	for (int i = 4; i < argc && fargc < 71; i++)
		fargs[fargc++] = argv[i];
	fargs[fargc] = NULL;
	int rc = fuse_main(fargc, fargs, &faultfs_ops, NULL);
	fprintf(stderr, "faultfs: %lu reads failed\n", atomic_load(&faultfs_failed));
	close(faultfs_fd);
	return rc;
}
