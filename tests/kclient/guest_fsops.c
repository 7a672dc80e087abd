/* guest_fsops.c: file-system checks that the kernel-client guest runs against its NFS mount.
 *
 * The program runs inside the qemu guest, statically linked, on top of the Linux kernel's NFSv3
 * client; every system call it makes turns into NFS traffic to the server under test on the
 * host. It has three modes:
 *
 *   guest_fsops phase1 MNT   builds the tree MNT/kc, checking every operation as it goes
 *   guest_fsops phase2 MNT   after an unmount and a fresh mount, checks that the tree is exactly
 *                            what phase 1 left behind (sizes, contents, link counts, modes,
 *                            owners, times, symlink targets, directory listings)
 *   guest_fsops hash FILE    prints the 64-bit FNV-1a hash of FILE; the host runs this on the
 *                            exported directory to compare with what the guest wrote
 *   guest_fsops crashload MNT STATE   a workload of creates (each fsync'd), renames and removes
 *                            during which the host kills the server (kill -9) and restarts it;
 *                            prints "# crash acked ..." per completed operation and records in
 *                            the file STATE what each name must be: acknowledged, or uncertain
 *                            (its operation failed across the crash)
 *   guest_fsops crashcheck MNT STATE  after a fresh mount: every acknowledged create, rename and
 *                            remove is there as the client saw it complete
 *
 * Each case prints one TAP line (`ok - NAME` / `not ok - NAME`) through tests/lib/tap.h; the exit
 * status is non-zero when any case failed.
 *
 * File contents come from pattern_fill(): a pure function of (seed, offset), so phase 2 and the host
 * can recompute what any file must hold without keeping a copy. The final state phase 1 leaves is
 * described once, in the expect_* functions, and phase 2 calls the same functions.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "guest_common.h"

/* The NFS client reports this f_type in statfs (include/uapi/linux/magic.h: NFS_SUPER_MAGIC). */
#define KC_NFS_SUPER_MAGIC 0x6969

#define KC_BIG_BYTES (64u << 20)	/* the large-file case: 64 MiB */
/* A file removed to see its space come back: on the pool (128 KiB records) more than the 1,024
 * extents that a REMOVE frees itself, so it is queued and freed in the background. */
#define KC_HUGE_BYTES (160u << 20)
#define KC_HUGE_WAIT_S 40		/* how long its space may take to come back */
#define KC_MANY_COUNT 2000		/* entries in the large directory */
#define KC_WRITERS 4			/* concurrent writer processes */
#define KC_WRITER_BYTES (8u << 20)	/* bytes each writer writes */
#define KC_BASIC_BYTES 200000u
#define KC_TRUNC_WRITTEN 100000u
#define KC_TRUNC_SHORT 5000u
#define KC_TRUNC_FINAL 70000u
#define KC_CHOWN_UID 4321u
#define KC_CHOWN_GID 8765u
#define KC_MODE 0751u

/* Seeds for pattern_fill, one per file so a misplaced block is caught. */
enum {
	SEED_BASIC = 1,
	SEED_TRUNC = 2,
	SEED_BIG = 3,
	SEED_LINK = 4,
	SEED_HUGE = 5,
	SEED_WRITER0 = 10
};

/* utimes values: seconds and microseconds chosen to survive NFSv3 nfstime3 exactly. */
static const struct timeval kc_times[2] = {
	{ .tv_sec = 1000000000, .tv_usec = 123456 },	/* atime */
	{ .tv_sec = 1234567890, .tv_usec = 654321 },	/* mtime */
};

static char kc_root[4096];	/* MNT/kc */

/* --- small helpers ------------------------------------------------------------------------- */

static const char *kp(const char *rel)
{
	static char paths[8][4200];
	static unsigned next;
	char *p = paths[next++ % 8];
	snprintf(p, sizeof(paths[0]), "%s/%s", kc_root, rel);
	return p;
}

#define CHECK_OK(expr)                                                                             \
	do {                                                                                       \
		errno = 0;                                                                         \
		long kc_rc_ = (long)(expr);                                                        \
		CHECKF(kc_rc_ >= 0, "%s: %s", #expr, strerror(errno));                             \
	} while (0)

/* Checks that path holds exactly the string text. */
static void check_text_file(const char *path, const char *text)
{
	char buf[256];
	ssize_t n = read_head(path, buf, sizeof(buf));
	CHECKF(n >= 0, "read %s: %s", path, strerror((int)-n));
	CHECKF(n == (ssize_t)strlen(text) && memcmp(buf, text, strlen(text)) == 0,
	       "%s: content differs (%zd bytes, expected %zu)", path, n, strlen(text));
}

static int write_text_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	int rc = pwrite_all(fd, text, strlen(text), 0);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

static void check_absent(const char *path)
{
	struct stat st;
	errno = 0;
	int rc = lstat(path, &st);
	CHECKF(rc != 0 && errno == ENOENT, "%s: expected ENOENT, got rc %d (%s)", path, rc,
	       strerror(errno));
}

/* --- expected final state, checked at the end of phase 1 and again in phase 2 ---------------- */

#define APPEND_TEXT "first line\nsecond line\nthird line\n"

static void expect_data_files(void)
{
	check_pattern_file(kp("basic"), SEED_BASIC, KC_BASIC_BYTES);
	check_text_file(kp("append.txt"), APPEND_TEXT);
}

static void expect_trunc(void)
{
	/* [0, SHORT) keeps the pattern, [SHORT, FINAL) reads as zeros (the hole the extend made). */
	static uint8_t want[KC_TRUNC_FINAL], got[KC_TRUNC_FINAL + 16];
	memset(want, 0, sizeof(want));
	pattern_fill(want, KC_TRUNC_SHORT, SEED_TRUNC, 0);
	int fd = open(kp("trunc"), O_RDONLY);
	CHECKF(fd >= 0, "open trunc: %s", strerror(errno));
	if (fd < 0)
		return;
	ssize_t n = pread_all(fd, got, sizeof(got), 0);
	close(fd);
	CHECKF(n == KC_TRUNC_FINAL, "trunc: read %zd bytes, expected %u", n, KC_TRUNC_FINAL);
	CHECK(n == KC_TRUNC_FINAL && memcmp(got, want, KC_TRUNC_FINAL) == 0);
}

static void expect_renames(void)
{
	check_absent(kp("ren_a"));
	check_text_file(kp("ren_b"), "rename in one directory\n");
	check_absent(kp("d1/moved"));
	check_text_file(kp("d2/moved"), "rename across directories\n");
	check_absent(kp("over_src"));
	check_text_file(kp("over_dst"), "the source replaces the target\n");
}

static void expect_links(void)
{
	struct stat a, b;
	int ra = stat(kp("link_orig"), &a), rb = stat(kp("link_other"), &b);
	CHECKF(ra == 0 && rb == 0, "stat links: %s", strerror(errno));
	if (ra != 0 || rb != 0)
		return;
	CHECKF(a.st_nlink == 2 && b.st_nlink == 2, "nlink %ju/%ju, expected 2", (uintmax_t)a.st_nlink,
	       (uintmax_t)b.st_nlink);
	CHECK(a.st_ino == b.st_ino);
	check_absent(kp("link_third"));
	check_pattern_file(kp("link_other"), SEED_LINK, 3000);
}

static void expect_symlinks(void)
{
	char buf[256];
	ssize_t n = readlink(kp("sym_rel"), buf, sizeof(buf));
	CHECKF(n == 9 && memcmp(buf, "link_orig", 9) == 0, "readlink sym_rel: %zd", n);
	n = readlink(kp("sym_abs"), buf, sizeof(buf));
	CHECKF(n == 23 && memcmp(buf, "/no/such/place/at/all/x", 23) == 0, "readlink sym_abs: %zd", n);
	struct stat st;
	CHECK(lstat(kp("sym_rel"), &st) == 0 && S_ISLNK(st.st_mode));
	/* Following the relative link reaches the hard-linked file. */
	check_pattern_file(kp("sym_rel"), SEED_LINK, 3000);
}

static void expect_dirs(void)
{
	struct stat st;
	CHECK(stat(kp("sub/created"), &st) == 0 && S_ISDIR(st.st_mode));
	check_absent(kp("empty"));
	CHECK(stat(kp("full"), &st) == 0 && S_ISDIR(st.st_mode));
	check_text_file(kp("full/keep"), "keeps full non-empty\n");
}

static void expect_attrs(void)
{
	struct stat st;
	CHECK_OK(stat(kp("modes"), &st));
	CHECKF(S_ISREG(st.st_mode) && (st.st_mode & 07777) == KC_MODE, "mode %o", st.st_mode);
	CHECK_OK(stat(kp("owned"), &st));
	CHECKF(st.st_uid == KC_CHOWN_UID && st.st_gid == KC_CHOWN_GID, "owner %u:%u", st.st_uid,
	       st.st_gid);
	CHECK_OK(stat(kp("times"), &st));
	CHECKF(st.st_atim.tv_sec == kc_times[0].tv_sec &&
		       st.st_atim.tv_nsec == kc_times[0].tv_usec * 1000,
	       "atime %jd.%09ld", (intmax_t)st.st_atim.tv_sec, st.st_atim.tv_nsec);
	CHECKF(st.st_mtim.tv_sec == kc_times[1].tv_sec &&
		       st.st_mtim.tv_nsec == kc_times[1].tv_usec * 1000,
	       "mtime %jd.%09ld", (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

/* Lists dir and checks it holds exactly the names f0000..f(count-1), each once. */
static void expect_many(void)
{
	static unsigned char seen[KC_MANY_COUNT];
	memset(seen, 0, sizeof(seen));
	DIR *d = opendir(kp("many"));
	CHECKF(d != NULL, "opendir many: %s", strerror(errno));
	if (d == NULL)
		return;
	unsigned dots = 0, others = 0, dups = 0, total = 0;
	struct dirent *e;
	errno = 0;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
			dots++;
			continue;
		}
		unsigned idx;
		char tail;
		if (sscanf(e->d_name, "f%4u%c", &idx, &tail) == 1 && idx < KC_MANY_COUNT &&
		    strlen(e->d_name) == 5) {
			if (seen[idx]++)
				dups++;
			total++;
		} else {
			others++;
			printf("#   unexpected entry %s\n", e->d_name);
		}
	}
	CHECKF(errno == 0, "readdir: %s", strerror(errno));
	closedir(d);
	unsigned missing = 0;
	for (unsigned i = 0; i < KC_MANY_COUNT; i++)
		missing += seen[i] == 0;
	CHECKF(dots == 2 && others == 0 && dups == 0 && missing == 0 && total == KC_MANY_COUNT,
	       "dots %u, unknown %u, duplicates %u, missing %u, seen %u", dots, others, dups, missing,
	       total);
}

/* The top directory's listing, sorted, must be exactly these names. */
static const char *const kc_top_names[] = {
	"append.txt", "basic", "big", "d1", "d2", "full", "link_orig", "link_other", "many",
	"modes", "over_dst", "owned", "ren_b", "sub", "sym_abs", "sym_rel", "times", "trunc",
	"w0", "w1", "w2", "w3",
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void expect_top_listing(void)
{
	char *names[64];
	size_t n = 0;
	DIR *d = opendir(kc_root);
	CHECKF(d != NULL, "opendir %s: %s", kc_root, strerror(errno));
	if (d == NULL)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n < 64)
			names[n] = strdup(e->d_name);
		n++;
	}
	closedir(d);
	size_t want = sizeof(kc_top_names) / sizeof(kc_top_names[0]);
	CHECKF(n == want, "top directory has %zu entries, expected %zu", n, want);
	if (n <= 64) {
		qsort(names, n, sizeof(names[0]), cmp_str);
		for (size_t i = 0; i < n && i < want; i++)
			CHECKF(strcmp(names[i], kc_top_names[i]) == 0, "entry %zu: %s, expected %s", i,
			       names[i], kc_top_names[i]);
	}
	for (size_t i = 0; i < n && i < 64; i++)
		free(names[i]);
}

static void expect_big(void)
{
	check_pattern_file(kp("big"), SEED_BIG, KC_BIG_BYTES);
}

static void expect_writers(void)
{
	for (unsigned i = 0; i < KC_WRITERS; i++) {
		char rel[8];
		snprintf(rel, sizeof(rel), "w%u", i);
		check_pattern_file(kp(rel), SEED_WRITER0 + i, KC_WRITER_BYTES);
	}
}

/* --- phase 1: perform and check each operation ----------------------------------------------- */

static void p1_create(void)
{
	int fd = open(kp("basic"), O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECKF(fd >= 0, "create: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	struct stat st;
	CHECK_OK(stat(kp("basic"), &st));
	CHECK(S_ISREG(st.st_mode) && st.st_size == 0 && (st.st_mode & 0777) == 0644);
	CHECK(st.st_uid == 0 && st.st_gid == 0);
	errno = 0;
	fd = open(kp("basic"), O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECKF(fd < 0 && errno == EEXIST, "second O_EXCL create: fd %d, %s", fd, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void p1_write_read(void)
{
	static uint8_t want[KC_BASIC_BYTES], got[KC_BASIC_BYTES];
	pattern_fill(want, sizeof(want), SEED_BASIC, 0);
	int fd = open(kp("basic"), O_RDWR);
	CHECKF(fd >= 0, "open: %s", strerror(errno));
	if (fd < 0)
		return;
	/* Two writes, the second one first, so the file is assembled out of order. */
	size_t half = KC_BASIC_BYTES / 2 + 1234;
	CHECK(pwrite_all(fd, want + half, sizeof(want) - half, (off_t)half) == 0);
	CHECK(pwrite_all(fd, want, half, 0) == 0);
	CHECK_OK(fsync(fd));
	struct stat st;
	CHECK_OK(fstat(fd, &st));
	CHECK(st.st_size == KC_BASIC_BYTES);
	CHECK(pread_all(fd, got, sizeof(got), 0) == (ssize_t)sizeof(got));
	CHECK(memcmp(got, want, sizeof(got)) == 0);
	/* A read across the end of file returns only what exists. */
	CHECK(pread_all(fd, got, 100, KC_BASIC_BYTES - 40) == 40);
	CHECK(pread_all(fd, got, 100, KC_BASIC_BYTES + 10) == 0);
	close(fd);
	CHECK(drop_caches() == 0);
	check_pattern_file(kp("basic"), SEED_BASIC, KC_BASIC_BYTES);
}

static void p1_append(void)
{
	CHECK(write_text_file(kp("append.txt"), "first line\n") == 0);
	const char *more[] = { "second line\n", "third line\n" };
	for (int i = 0; i < 2; i++) {
		int fd = open(kp("append.txt"), O_WRONLY | O_APPEND);
		CHECKF(fd >= 0, "open O_APPEND: %s", strerror(errno));
		if (fd < 0)
			return;
		CHECK(write(fd, more[i], strlen(more[i])) == (ssize_t)strlen(more[i]));
		CHECK(close(fd) == 0);
	}
	struct stat st;
	CHECK_OK(stat(kp("append.txt"), &st));
	CHECK(st.st_size == (off_t)strlen(APPEND_TEXT));
	check_text_file(kp("append.txt"), APPEND_TEXT);
}

static void p1_truncate(void)
{
	CHECK(write_pattern_file(kp("trunc"), SEED_TRUNC, KC_TRUNC_WRITTEN, O_EXCL) == 0);
	int fd = open(kp("trunc"), O_RDWR);
	CHECKF(fd >= 0, "open: %s", strerror(errno));
	if (fd < 0)
		return;
	CHECK_OK(ftruncate(fd, KC_TRUNC_SHORT));
	struct stat st;
	CHECK_OK(fstat(fd, &st));
	CHECK(st.st_size == KC_TRUNC_SHORT);
	close(fd);
	/* Extending by path leaves a hole that must read as zeros. */
	CHECK_OK(truncate(kp("trunc"), KC_TRUNC_FINAL));
	CHECK_OK(stat(kp("trunc"), &st));
	CHECK(st.st_size == KC_TRUNC_FINAL);
	CHECK(drop_caches() == 0);
	expect_trunc();
}

static void p1_rename_same_dir(void)
{
	CHECK(write_text_file(kp("ren_a"), "rename in one directory\n") == 0);
	struct stat before, after;
	CHECK_OK(stat(kp("ren_a"), &before));
	CHECK_OK(rename(kp("ren_a"), kp("ren_b")));
	CHECK_OK(stat(kp("ren_b"), &after));
	CHECK(before.st_ino == after.st_ino);
	check_absent(kp("ren_a"));
	check_text_file(kp("ren_b"), "rename in one directory\n");
}

static void p1_rename_across_dirs(void)
{
	CHECK_OK(mkdir(kp("d1"), 0755));
	CHECK_OK(mkdir(kp("d2"), 0755));
	CHECK(write_text_file(kp("d1/moved"), "rename across directories\n") == 0);
	CHECK_OK(rename(kp("d1/moved"), kp("d2/moved")));
	check_absent(kp("d1/moved"));
	check_text_file(kp("d2/moved"), "rename across directories\n");
}

static void p1_rename_over_existing(void)
{
	CHECK(write_text_file(kp("over_src"), "the source replaces the target\n") == 0);
	CHECK(write_text_file(kp("over_dst"), "the old target\n") == 0);
	struct stat src, dst;
	CHECK_OK(stat(kp("over_src"), &src));
	CHECK_OK(rename(kp("over_src"), kp("over_dst")));
	CHECK_OK(stat(kp("over_dst"), &dst));
	CHECK(src.st_ino == dst.st_ino && dst.st_nlink == 1);
	check_absent(kp("over_src"));
	check_text_file(kp("over_dst"), "the source replaces the target\n");
	/* Renaming a directory over a non-empty directory must fail. */
	CHECK_OK(mkdir(kp("d1/inner"), 0755));
	CHECK(write_text_file(kp("d2/moved2"), "x\n") == 0);
	errno = 0;
	int rc = rename(kp("d1/inner"), kp("d2"));
	CHECKF(rc != 0 && (errno == ENOTEMPTY || errno == EEXIST), "rc %d %s", rc, strerror(errno));
	CHECK_OK(unlink(kp("d2/moved2")));
	CHECK_OK(rmdir(kp("d1/inner")));
}

static void p1_hard_link(void)
{
	CHECK(write_pattern_file(kp("link_orig"), SEED_LINK, 3000, O_EXCL) == 0);
	CHECK_OK(link(kp("link_orig"), kp("link_other")));
	CHECK_OK(link(kp("link_orig"), kp("link_third")));
	struct stat st;
	CHECK_OK(stat(kp("link_orig"), &st));
	CHECKF(st.st_nlink == 3, "nlink %ju after two links", (uintmax_t)st.st_nlink);
	CHECK_OK(unlink(kp("link_third")));
	errno = 0;
	CHECK(link(kp("link_orig"), kp("link_other")) != 0 && errno == EEXIST);
	expect_links();
}

static void p1_symlink(void)
{
	CHECK_OK(symlink("link_orig", kp("sym_rel")));
	CHECK_OK(symlink("/no/such/place/at/all/x", kp("sym_abs")));
	errno = 0;
	CHECK(symlink("again", kp("sym_rel")) != 0 && errno == EEXIST);
	errno = 0;
	struct stat st;
	CHECK(stat(kp("sym_abs"), &st) != 0 && errno == ENOENT); /* dangling */
	expect_symlinks();
}

static void p1_mkdir_rmdir(void)
{
	CHECK_OK(mkdir(kp("sub"), 0755));
	CHECK_OK(mkdir(kp("sub/created"), 0700));
	struct stat st;
	CHECK_OK(stat(kp("sub/created"), &st));
	CHECK(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
	CHECK_OK(stat(kp("sub"), &st));
	CHECKF(st.st_nlink == 3, "sub nlink %ju", (uintmax_t)st.st_nlink);
	errno = 0;
	CHECK(mkdir(kp("sub"), 0755) != 0 && errno == EEXIST);
	CHECK_OK(mkdir(kp("empty"), 0755));
	CHECK_OK(rmdir(kp("empty")));
	check_absent(kp("empty"));
	CHECK_OK(mkdir(kp("full"), 0755));
	CHECK(write_text_file(kp("full/keep"), "keeps full non-empty\n") == 0);
	errno = 0;
	int rc = rmdir(kp("full"));
	CHECKF(rc != 0 && errno == ENOTEMPTY, "rmdir of non-empty dir: rc %d, %s", rc,
	       strerror(errno));
	errno = 0;
	CHECK(rmdir(kp("full/keep")) != 0 && errno == ENOTDIR);
	errno = 0;
	CHECK(unlink(kp("full")) != 0 && (errno == EISDIR || errno == EPERM));
	expect_dirs();
}

static void p1_readdir_2000(void)
{
	CHECK_OK(mkdir(kp("many"), 0755));
	unsigned failed = 0;
	for (unsigned i = 0; i < KC_MANY_COUNT; i++) {
		char rel[32];
		snprintf(rel, sizeof(rel), "many/f%04u", i);
		int fd = open(kp(rel), O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0) {
			if (failed++ < 5)
				printf("#   create %s: %s\n", rel, strerror(errno));
			continue;
		}
		close(fd);
	}
	CHECKF(failed == 0, "%u creates failed", failed);
	expect_many();
}

static void p1_chmod(void)
{
	CHECK(write_text_file(kp("modes"), "mode bits\n") == 0);
	static const mode_t modes[] = { 0600, 0444, 0777, 01755, KC_MODE };
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		CHECK_OK(chmod(kp("modes"), modes[i]));
		struct stat st;
		CHECK_OK(stat(kp("modes"), &st));
		CHECKF((st.st_mode & 07777) == modes[i], "mode %o, expected %o", st.st_mode & 07777,
		       modes[i]);
	}
}

static void p1_chown(void)
{
	CHECK(write_text_file(kp("owned"), "owner\n") == 0);
	CHECK_OK(chown(kp("owned"), KC_CHOWN_UID, (gid_t)-1));
	struct stat st;
	CHECK_OK(stat(kp("owned"), &st));
	CHECK(st.st_uid == KC_CHOWN_UID && st.st_gid == 0);
	CHECK_OK(chown(kp("owned"), (uid_t)-1, KC_CHOWN_GID));
	CHECK_OK(stat(kp("owned"), &st));
	CHECK(st.st_uid == KC_CHOWN_UID && st.st_gid == KC_CHOWN_GID);
}

static void p1_utimes(void)
{
	CHECK(write_text_file(kp("times"), "times\n") == 0);
	CHECK_OK(utimes(kp("times"), kc_times));
	expect_attrs();
}

static void p1_statfs(void)
{
	struct statfs sf;
	CHECK_OK(statfs(kc_root, &sf));
	CHECKF(sf.f_type == KC_NFS_SUPER_MAGIC, "f_type %lx", (unsigned long)sf.f_type);
	CHECK(sf.f_bsize > 0 && sf.f_blocks > 0);
	CHECK(sf.f_bfree <= sf.f_blocks && sf.f_bavail <= sf.f_bfree);
	CHECK(sf.f_ffree <= sf.f_files);
	printf("#   statfs: bsize %ld blocks %llu bfree %llu files %llu ffree %llu\n",
	       (long)sf.f_bsize, (unsigned long long)sf.f_blocks, (unsigned long long)sf.f_bfree,
	       (unsigned long long)sf.f_files, (unsigned long long)sf.f_ffree);
}

static void p1_big_file(void)
{
	struct timeval t0, t1, t2;
	gettimeofday(&t0, NULL);
	int rc = write_pattern_file(kp("big"), SEED_BIG, KC_BIG_BYTES, O_EXCL);
	CHECKF(rc == 0, "write big: %s", strerror(-rc));
	gettimeofday(&t1, NULL);
	CHECK(drop_caches() == 0);
	uint64_t h = 0, size = 0, want = pattern_hash(SEED_BIG, KC_BIG_BYTES);
	rc = file_hash(kp("big"), &h, &size);
	gettimeofday(&t2, NULL);
	CHECKF(rc == 0, "read big: %s", strerror(-rc));
	CHECKF(size == KC_BIG_BYTES, "size %" PRIu64, size);
	CHECKF(h == want, "hash %016" PRIx64 ", expected %016" PRIx64, h, want);
	double w = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
	double r = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_usec - t1.tv_usec) / 1e6;
	printf("#   big: 64 MiB written in %.1f s, read back in %.1f s\n", w, r);
	printf("# kclient-hash big %016" PRIx64 "\n", want);
}

/* Space the file system reports available, in bytes (0 when statfs fails). */
static uint64_t avail_bytes(void)
{
	struct statfs sf;
	if (statfs(kc_root, &sf) != 0)
		return 0;
	return (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
}

/* A large file written, fsync'd and removed: the removal returns at once and the space the file
 * took is reported available again soon after (the pool frees such a file in the background). */
static void p1_huge_removed(void)
{
	const uint64_t slack = 16u << 20;
	uint64_t before = avail_bytes();
	int rc = write_pattern_file(kp("huge"), SEED_HUGE, KC_HUGE_BYTES, O_EXCL);
	CHECKF(rc == 0, "write huge: %s", strerror(-rc));
	uint64_t full = avail_bytes();
	CHECKF(full + KC_HUGE_BYTES - slack <= before, "%" PRIu64 " MiB available before, %" PRIu64
	       " after writing %u MiB", before >> 20, full >> 20, KC_HUGE_BYTES >> 20);
	struct timeval t0, t1;
	gettimeofday(&t0, NULL);
	CHECK_OK(unlink(kp("huge")));
	gettimeofday(&t1, NULL);
	check_absent(kp("huge"));
	uint64_t now = 0;
	int waited = 0;
	for (; waited < KC_HUGE_WAIT_S * 10; waited++) {
		now = avail_bytes();
		if (now + slack >= before)
			break;
		usleep(100000);
	}
	CHECKF(now + slack >= before, "%" PRIu64 " MiB available %d s after the removal, %" PRIu64
	       " before the write", now >> 20, KC_HUGE_WAIT_S, before >> 20);
	double rm_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
	printf("#   huge: removed in %.3f s, space back after %.1f s\n", rm_s, waited / 10.0);
}

static void p1_concurrent_writers(void)
{
	pid_t pids[KC_WRITERS];
	for (unsigned i = 0; i < KC_WRITERS; i++) {
		char rel[8];
		snprintf(rel, sizeof(rel), "w%u", i);
		const char *path = kp(rel);
		fflush(stdout);
		pids[i] = fork();
		CHECKF(pids[i] >= 0, "fork: %s", strerror(errno));
		if (pids[i] == 0)
			_exit(write_pattern_file(path, SEED_WRITER0 + i, KC_WRITER_BYTES, O_EXCL) == 0 ? 0 : 1);
	}
	for (unsigned i = 0; i < KC_WRITERS; i++) {
		if (pids[i] < 0)
			continue;
		int status = 0;
		CHECK(waitpid(pids[i], &status, 0) == pids[i]);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %u status %d", i, status);
	}
	CHECK(drop_caches() == 0);
	expect_writers();
}

static void p1_final_listing(void)
{
	expect_top_listing();
}

/* --- phase 2: everything again after a fresh mount --------------------------------------------- */

static void p2_sizes_and_contents(void)
{
	expect_data_files();
	expect_trunc();
}

static void p2_renames(void)
{
	expect_renames();
}

static void p2_link_counts(void)
{
	expect_links();
}

static void p2_symlink_targets(void)
{
	expect_symlinks();
}

static void p2_directories(void)
{
	expect_dirs();
	expect_top_listing();
}

static void p2_large_directory(void)
{
	expect_many();
}

static void p2_attributes(void)
{
	expect_attrs();
}

static void p2_big_file(void)
{
	expect_big();
}

static void p2_writers(void)
{
	expect_writers();
}

static void p2_cleanup_and_remove(void)
{
	/* Removing part of the tree checks REMOVE/RMDIR on objects the server saw only via LOOKUP. */
	unsigned failed = 0;
	for (unsigned i = 0; i < KC_MANY_COUNT; i += 2) {
		char rel[32];
		snprintf(rel, sizeof(rel), "many/f%04u", i);
		failed += unlink(kp(rel)) != 0;
	}
	CHECKF(failed == 0, "%u unlinks failed", failed);
	unsigned left = 0;
	DIR *d = opendir(kp("many"));
	CHECK(d != NULL);
	if (d != NULL) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL)
			left += e->d_name[0] == 'f';
		closedir(d);
	}
	CHECKF(left == KC_MANY_COUNT / 2, "%u entries left, expected %u", left, KC_MANY_COUNT / 2);
	CHECK_OK(unlink(kp("full/keep")));
	CHECK_OK(rmdir(kp("full")));
	check_absent(kp("full"));
}

static int run_phase(int phase, const char *mnt)
{
	snprintf(kc_root, sizeof(kc_root), "%s/kc", mnt);
	if (phase == 1) {
		errno = 0;
		int rc = mkdir(kc_root, 0755);
		if (!tap_check(rc == 0, "phase1: mkdir of a fresh work directory")) {
			printf("#   mkdir %s: %s\n", kc_root, strerror(errno));
			return tap_finish();
		}
		tap_run_case("phase1: create (O_EXCL, mode, owner)", p1_create);
		tap_run_case("phase1: write and read back", p1_write_read);
		tap_run_case("phase1: append", p1_append);
		tap_run_case("phase1: truncate shrink and extend", p1_truncate);
		tap_run_case("phase1: rename in one directory", p1_rename_same_dir);
		tap_run_case("phase1: rename across directories", p1_rename_across_dirs);
		tap_run_case("phase1: rename over an existing target", p1_rename_over_existing);
		tap_run_case("phase1: hard link and nlink", p1_hard_link);
		tap_run_case("phase1: symlink and readlink", p1_symlink);
		tap_run_case("phase1: mkdir, rmdir, rmdir non-empty is ENOTEMPTY", p1_mkdir_rmdir);
		tap_run_case("phase1: readdir of 2000 entries, each once", p1_readdir_2000);
		tap_run_case("phase1: chmod", p1_chmod);
		tap_run_case("phase1: chown as root", p1_chown);
		tap_run_case("phase1: utimes read back", p1_utimes);
		tap_run_case("phase1: statfs", p1_statfs);
		tap_run_case("phase1: 64 MiB write, drop caches, read back, hash", p1_big_file);
		const char *space = getenv("KC_SPACE");
		if (space != NULL && strcmp(space, "own") == 0) /* the server's own space: a pool */
			tap_run_case("phase1: 160 MiB file removed, its space available again",
				     p1_huge_removed);
		tap_run_case("phase1: 4 concurrent writers", p1_concurrent_writers);
		tap_run_case("phase1: top directory listing", p1_final_listing);
	} else {
		struct stat st;
		if (!tap_check(stat(kc_root, &st) == 0 && S_ISDIR(st.st_mode),
			       "phase2: work directory found after remount"))
			return tap_finish();
		tap_run_case("phase2: sizes and contents", p2_sizes_and_contents);
		tap_run_case("phase2: renames", p2_renames);
		tap_run_case("phase2: link counts", p2_link_counts);
		tap_run_case("phase2: symlink targets", p2_symlink_targets);
		tap_run_case("phase2: directories and top listing", p2_directories);
		tap_run_case("phase2: 2000-entry directory listing", p2_large_directory);
		tap_run_case("phase2: mode, owner, times", p2_attributes);
		tap_run_case("phase2: 64 MiB file hash", p2_big_file);
		tap_run_case("phase2: concurrent writers' files", p2_writers);
		tap_run_case("phase2: remove half the directory, rmdir", p2_cleanup_and_remove);
	}
	return tap_finish();
}

/* --- the crash workload ---------------------------------------------------------------------- */

#define KC_CRASH_FILES 300
#define KC_CRASH_SEED 5000u

/* What name i must be after the crash, as far as the client saw its operations complete. */
enum crash_state {
	CRASH_NONE = 0,      /* never created */
	CRASH_AT_F = 1,      /* f<i> holds pattern i; g<i> absent */
	CRASH_AT_G = 2,      /* renamed: g<i> holds pattern i; f<i> absent */
	CRASH_REMOVED = 3,   /* neither exists */
	CRASH_UNCERTAIN = 4, /* an operation on it failed (its reply was lost in the crash): not checked */
};

static uint64_t crash_len(unsigned i)
{
	return 1000u + (uint64_t)(i * 7919u) % 60000u;
}

static int crashload(const char *mnt, const char *state_path)
{
	static unsigned char state[KC_CRASH_FILES];
	char dir[4200], a[4300], b[4300];
	snprintf(dir, sizeof(dir), "%s/crash", mnt);
	if (mkdir(dir, 0755) != 0) {
		printf("not ok - crash: mkdir %s: %s\n", dir, strerror(errno));
		return 1;
	}
	unsigned acked = 0, failed = 0;
	for (unsigned i = 0; i < KC_CRASH_FILES; i++) {
		snprintf(a, sizeof(a), "%s/f%u", dir, i);
		int rc = write_pattern_file(a, KC_CRASH_SEED + i, crash_len(i), O_TRUNC);
		state[i] = rc == 0 ? CRASH_AT_F : CRASH_UNCERTAIN;
		printf("# crash %s create f%u\n", rc == 0 ? "acked" : "failed", i);
		rc == 0 ? acked++ : failed++;
		if (i % 3 == 2 && state[i - 1] == CRASH_AT_F) {
			snprintf(a, sizeof(a), "%s/f%u", dir, i - 1);
			snprintf(b, sizeof(b), "%s/g%u", dir, i - 1);
			rc = rename(a, b) == 0 ? 0 : -errno;
			state[i - 1] = rc == 0 ? CRASH_AT_G : CRASH_UNCERTAIN;
			printf("# crash %s rename f%u g%u\n", rc == 0 ? "acked" : "failed", i - 1, i - 1);
			rc == 0 ? acked++ : failed++;
		}
		if (i % 5 == 4 && i >= 7 && state[i - 7] == CRASH_AT_G) {
			snprintf(b, sizeof(b), "%s/g%u", dir, i - 7);
			rc = unlink(b) == 0 ? 0 : -errno;
			state[i - 7] = rc == 0 ? CRASH_REMOVED : CRASH_UNCERTAIN;
			printf("# crash %s remove g%u\n", rc == 0 ? "acked" : "failed", i - 7);
			rc == 0 ? acked++ : failed++;
		}
	}
	printf("# crash workload done: %u operations acknowledged, %u failed\n", acked, failed);
	FILE *f = fopen(state_path, "w");
	if (!f || fwrite(state, 1, sizeof(state), f) != sizeof(state) || fclose(f) != 0) {
		printf("not ok - crash: cannot save the state to %s\n", state_path);
		return 1;
	}
	return 0;
}

static const char *crash_mnt;
static unsigned char crash_state_saved[KC_CRASH_FILES];

/* Whether the name exists (1), not (0), or cannot be told (-errno). */
static int crash_exists(const char *name)
{
	char path[4300];
	struct stat st;
	snprintf(path, sizeof(path), "%s/crash/%s", crash_mnt, name);
	if (lstat(path, &st) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

static void crash_check_state(enum crash_state want_state)
{
	unsigned checked = 0;
	for (unsigned i = 0; i < KC_CRASH_FILES; i++) {
		if (crash_state_saved[i] != want_state)
			continue;
		char f[32], g[32], path[4300];
		snprintf(f, sizeof(f), "f%u", i);
		snprintf(g, sizeof(g), "g%u", i);
		int fe = crash_exists(f), ge = crash_exists(g);
		switch (want_state) {
		case CRASH_AT_F:
			CHECKF(fe == 1 && ge == 0, "f%u: exists %d, g%u exists %d", i, fe, i, ge);
			snprintf(path, sizeof(path), "%s/crash/%s", crash_mnt, f);
			if (fe == 1)
				check_pattern_file(path, KC_CRASH_SEED + i, crash_len(i));
			break;
		case CRASH_AT_G:
			CHECKF(fe == 0 && ge == 1, "renamed %u: f exists %d, g exists %d", i, fe, ge);
			snprintf(path, sizeof(path), "%s/crash/%s", crash_mnt, g);
			if (ge == 1)
				check_pattern_file(path, KC_CRASH_SEED + i, crash_len(i));
			break;
		case CRASH_REMOVED:
			CHECKF(fe == 0 && ge == 0, "removed %u: f exists %d, g exists %d", i, fe, ge);
			break;
		default: break;
		}
		checked++;
	}
	printf("# crash: %u names in this state checked\n", checked);
	CHECK(checked > 0);
}

static void crash_check_creates(void) { crash_check_state(CRASH_AT_F); }
static void crash_check_renames(void) { crash_check_state(CRASH_AT_G); }
static void crash_check_removes(void) { crash_check_state(CRASH_REMOVED); }

static int crashcheck(const char *mnt, const char *state_path)
{
	crash_mnt = mnt;
	FILE *f = fopen(state_path, "r");
	size_t n = f ? fread(crash_state_saved, 1, sizeof(crash_state_saved), f) : 0;
	if (f)
		fclose(f);
	if (n != sizeof(crash_state_saved)) {
		printf("not ok - crash: the workload's state file %s is missing\n", state_path);
		return 1;
	}
	unsigned uncertain = 0;
	for (unsigned i = 0; i < KC_CRASH_FILES; i++)
		uncertain += crash_state_saved[i] == CRASH_UNCERTAIN;
	printf("# crash: %u names uncertain (their operation failed across the crash)\n", uncertain);
	tap_run_case("crash: every acknowledged create is there with its fsync'd data", crash_check_creates);
	tap_run_case("crash: every acknowledged rename is there, with the file's data", crash_check_renames);
	tap_run_case("crash: every acknowledged remove stays removed", crash_check_removes);
	return tap_finish();
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "phase1") == 0)
		return run_phase(1, argv[2]);
	if (argc == 3 && strcmp(argv[1], "phase2") == 0)
		return run_phase(2, argv[2]);
	if (argc == 3 && strcmp(argv[1], "hash") == 0) {
		uint64_t h = 0, size = 0;
		int rc = file_hash(argv[2], &h, &size);
		if (rc != 0) {
			fprintf(stderr, "guest_fsops: %s: %s\n", argv[2], strerror(-rc));
			return 1;
		}
		printf("%016" PRIx64 " %" PRIu64 "\n", h, size);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "crashload") == 0)
		return crashload(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "crashcheck") == 0)
		return crashcheck(argv[2], argv[3]);
	if (argc == 2 && strcmp(argv[1], "big-hash") == 0) {
		printf("%016" PRIx64 " %u\n", pattern_hash(SEED_BIG, KC_BIG_BYTES), KC_BIG_BYTES);
		return 0;
	}
	fprintf(stderr, "usage: guest_fsops phase1|phase2 MNT | hash FILE | big-hash | "
			"crashload|crashcheck MNT STATE\n");
	return 2;
}
