/* guest_stress.c: the kernel-client guest's workloads for restarts and faults of the server.
 *
 * Runs inside the qemu guest, statically linked, on the Linux NFSv3 client, while the host does
 * something to the server (run-kclient.sh --restart, --full, --eio). Modes:
 *
 *   guest_stress restartload MNT EAGER STATE  three processes at once on MNT/rs: an fsx-style checker
 *                   (seeded random writes, reads, truncates, mapped reads and fsyncs on one file,
 *                   every read compared with an in-memory model; the last operations printed on a
 *                   mismatch), a writer of O_SYNC records (FILE_SYNC WRITEs) and a writer of
 *                   buffered 1 MiB chunks pushed out with sync_file_range and fsync'd every other
 *                   chunk (UNSTABLE WRITEs + COMMIT), through EAGER, the same export mounted with
 *                   write=eager: there writeback that is not for fsync sends no COMMIT of its own
 *                   once its WRITEs are answered (fs/nfs/write.c, nfs_writepages), which would race
 *                   with the kill. The buffered writer prints "# restart kill"
 *                   after one chunk's UNSTABLE WRITEs were answered and before its COMMIT: the host
 *                   then kills the server (kill -9) and starts it again, and the COMMIT meets a new
 *                   write verifier, so the client must send those WRITEs again. The other two run
 *                   until the buffered writer is done. Any error any call returns fails the run.
 *                   "# restart progress NAME N" lines let the host see work done after the restart.
 *                   What the files must hold goes to STATE (the guest's tmpfs).
 *   guest_stress restartcheck MNT STATE  after a fresh mount: every byte of the three files
 *   guest_stress fill MNT QMNT           the pool full: files written into MNT until a write fails
 *                   with ENOSPC, into QMNT (a file system with a quota) until one fails with
 *                   EDQUOT; the server goes on answering, removes work and give the space back, and
 *                   writes succeed again
 *   guest_stress eiowrite MNT SMNT       writes the victim file into MNT (a mirror) and SMNT (one
 *                   leaf), and a second file beside it, then waits until the host has made the leaf
 *                   fail reads of the victims' blocks (the marker file SMNT/armed appears)
 *   guest_stress eiocheck MNT SMNT       the mirror serves the victim whole; on the single leaf
 *                   its read fails with EIO and everything else works
 *   guest_stress sectors IMAGE           (on the host) prints "OFFSET LENGTH" for each run of at
 *                   least KC_RUN_MIN_BYTES of IMAGE holding, sector by sector, consecutive sectors
 *                   of the victim's pattern: where the victim's data blocks are stored
 *
 * Each case prints one TAP line through tests/lib/tap.h; the exit status is non-zero when any
 * failed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest_common.h"
#include "rng.h"
#include "tap.h"

#define KC_SECTOR_BYTES 4096u

/* --- the restart workload -------------------------------------------------------------------- */

#define KC_FSX_MAX_BYTES (1u << 20)   /* the checker's file never grows past this */
#define KC_FSX_MAX_IO (64u << 10)     /* largest write or read */
#define KC_FSX_MIN_OPS 3000u          /* operations done even if the buffered writer ends first */
#define KC_FSX_MAX_OPS 20000u         /* a bound, should the buffered writer hang */
#define KC_FSX_LOG 48u                /* operations printed on a mismatch */
#define KC_FSX_SEED 0x5eedf5c1ull
#define KC_SYNC_REC_BYTES (32u << 10) /* one O_SYNC record */
#define KC_SYNC_MIN_RECS 256u
#define KC_SYNC_MAX_RECS 4096u        /* 128 MiB: a bound */
#define KC_SYNC_SEED 7001u
#define KC_UNST_CHUNK_BYTES (1u << 20)
#define KC_UNST_CHUNKS 12u
/* The chunk after whose UNSTABLE WRITEs the server is killed: its offset, 4 MiB, is past every
 * offset the checker writes, so the host can tell this file's WRITEs from the checker's. */
#define KC_UNST_KILL_CHUNK 4u
#define KC_UNST_KILL_WAIT_S 3 /* time for the kill to come before the COMMIT is sent */
#define KC_UNST_SEED 7002u
#define KC_PROGRESS_FSX 100u  /* a progress line every this many operations */
#define KC_PROGRESS_SYNC 16u

/* Shared between the workers (MAP_SHARED before the fork). */
struct restart_shared {
	volatile int rs_unstable_done; /* the buffered writer has finished: the others may stop */
};

enum fsx_op { FSX_WRITE, FSX_READ, FSX_TRUNCATE, FSX_MAPREAD, FSX_FSYNC };
static const char *const fsx_op_names[] = { "write", "read", "truncate", "mapread", "fsync" };

struct fsx_entry {
	unsigned fe_n;
	enum fsx_op fe_op;
	uint32_t fe_off;
	uint32_t fe_len;
};

/* The fsx-style checker: the model is what the file must hold, fsx_bytes long. */
static uint8_t fsx_model[KC_FSX_MAX_BYTES];
static uint32_t fsx_bytes;
static struct fsx_entry fsx_log[KC_FSX_LOG];
static unsigned fsx_ops;

static void fsx_record(enum fsx_op op, uint32_t off, uint32_t len)
{
	fsx_log[fsx_ops % KC_FSX_LOG] = (struct fsx_entry){ fsx_ops, op, off, len };
}

/* Prints why the checker stopped and the operations before it; returns 1 (the worker's status). */
static int fsx_fail(const char *what, int err)
{
	printf("#   fsx: operation %u failed: %s%s%s\n", fsx_ops, what, err ? ": " : "",
	       err ? strerror(err) : "");
	printf("#   fsx: seed %#llx, file %u bytes in the model; the last operations:\n",
	       (unsigned long long)KC_FSX_SEED, fsx_bytes);
	unsigned first = fsx_ops + 1 > KC_FSX_LOG ? fsx_ops + 1 - KC_FSX_LOG : 0;
	for (unsigned n = first; n <= fsx_ops; n++) {
		const struct fsx_entry *e = &fsx_log[n % KC_FSX_LOG];
		printf("#   fsx %6u %-8s off %7u len %6u\n", e->fe_n, fsx_op_names[e->fe_op], e->fe_off,
		       e->fe_len);
	}
	return 1;
}

/* Compares got with the model at off; on a difference, prints the first differing byte. */
static int fsx_compare(const uint8_t *got, uint32_t off, uint32_t len)
{
	if (memcmp(got, fsx_model + off, len) == 0)
		return 0;
	uint32_t i = 0;
	while (got[i] == fsx_model[off + i])
		i++;
	printf("#   fsx: byte %u is %#x, the model says %#x\n", off + i, got[i], fsx_model[off + i]);
	return -1;
}

static int fsx_run(const char *path, struct restart_shared *shared)
{
	static uint8_t buf[KC_FSX_MAX_IO + 1];
	test_rng_seed(KC_FSX_SEED);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return fsx_fail("open", errno);
	long page = sysconf(_SC_PAGESIZE);
	for (fsx_ops = 0; fsx_ops < KC_FSX_MAX_OPS; fsx_ops++) {
		if (fsx_ops >= KC_FSX_MIN_OPS && shared->rs_unstable_done)
			break;
		unsigned roll = test_rng_below(100);
		enum fsx_op op = roll < 40 ? FSX_WRITE : roll < 65 ? FSX_READ : roll < 75 ? FSX_TRUNCATE
			       : roll < 95 ? FSX_MAPREAD : FSX_FSYNC;
		if ((op == FSX_READ || op == FSX_MAPREAD) && fsx_bytes == 0)
			op = FSX_WRITE;
		uint32_t off = 0, len = 0;
		switch (op) {
		case FSX_WRITE:
			off = test_rng_below(KC_FSX_MAX_BYTES - 1);
			len = 1 + test_rng_below(KC_FSX_MAX_BYTES - off < KC_FSX_MAX_IO
							 ? KC_FSX_MAX_BYTES - off : KC_FSX_MAX_IO);
			for (uint32_t i = 0; i < len; i += 8) {
				uint64_t w = test_rng_next();
				memcpy(buf + i, &w, len - i < 8 ? len - i : 8);
			}
			fsx_record(op, off, len);
			int rc = pwrite_all(fd, buf, len, off);
			if (rc != 0)
				return fsx_fail("pwrite", -rc);
			memcpy(fsx_model + off, buf, len);
			if (off + len > fsx_bytes)
				fsx_bytes = off + len;
			break;
		case FSX_READ:
			off = test_rng_below(fsx_bytes);
			len = 1 + test_rng_below(fsx_bytes - off < KC_FSX_MAX_IO ? fsx_bytes - off
										 : KC_FSX_MAX_IO);
			fsx_record(op, off, len);
			/* Up to the end of the file: one byte more is asked, and must not come. */
			ssize_t n = pread_all(fd, buf, off + len == fsx_bytes ? len + 1 : len, off);
			if (n < 0)
				return fsx_fail("pread", (int)-n);
			if ((uint64_t)n != len)
				return fsx_fail("pread returned the wrong length", 0);
			if (fsx_compare(buf, off, len) != 0)
				return fsx_fail("pread returned bytes the model does not hold", 0);
			break;
		case FSX_TRUNCATE:
			/* Mostly within the present size, so the file does not only grow. */
			len = test_rng_below(4) == 0 ? test_rng_below(KC_FSX_MAX_BYTES + 1)
						     : test_rng_below(fsx_bytes + 1);
			fsx_record(op, 0, len);
			if (ftruncate(fd, len) != 0)
				return fsx_fail("ftruncate", errno);
			if (len < fsx_bytes)
				memset(fsx_model + len, 0, fsx_bytes - len);
			fsx_bytes = len;
			break;
		case FSX_MAPREAD: {
			off = test_rng_below(fsx_bytes);
			len = 1 + test_rng_below(fsx_bytes - off < KC_FSX_MAX_IO ? fsx_bytes - off
										 : KC_FSX_MAX_IO);
			fsx_record(op, off, len);
			uint32_t start = off - off % (uint32_t)page;
			uint8_t *m = mmap(NULL, off + len - start, PROT_READ, MAP_SHARED, fd, start);
			if (m == MAP_FAILED)
				return fsx_fail("mmap", errno);
			int c = fsx_compare(m + (off - start), off, len);
			munmap(m, off + len - start);
			if (c != 0)
				return fsx_fail("a mapped read saw bytes the model does not hold", 0);
			break;
		}
		case FSX_FSYNC:
			fsx_record(op, 0, 0);
			if (fsync(fd) != 0)
				return fsx_fail("fsync", errno);
			break;
		}
		if (fsx_ops % 16 == 15) {
			struct stat st;
			if (fstat(fd, &st) != 0)
				return fsx_fail("fstat", errno);
			if (st.st_size != fsx_bytes) {
				printf("#   fsx: size %jd, the model's %u\n", (intmax_t)st.st_size, fsx_bytes);
				return fsx_fail("the file's size is not the model's", 0);
			}
		}
		if (fsx_ops % KC_PROGRESS_FSX == KC_PROGRESS_FSX - 1)
			printf("# restart progress fsx %u\n", fsx_ops + 1);
	}
	if (fsync(fd) != 0)
		return fsx_fail("the last fsync", errno);
	if (close(fd) != 0)
		return fsx_fail("close", errno);
	printf("# restart: fsx ran %u operations, the file ends at %u bytes\n", fsx_ops, fsx_bytes);
	return 0;
}

/* The O_SYNC writer: record i holds pattern KC_SYNC_SEED at [i * REC, (i + 1) * REC). */
static int sync_run(const char *path, struct restart_shared *shared, uint32_t *recs_out)
{
	static uint8_t buf[KC_SYNC_REC_BYTES];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_SYNC, 0644);
	if (fd < 0) {
		printf("#   sync writer: open: %s\n", strerror(errno));
		return 1;
	}
	uint32_t i = 0;
	for (; i < KC_SYNC_MAX_RECS && !(i >= KC_SYNC_MIN_RECS && shared->rs_unstable_done); i++) {
		uint64_t off = (uint64_t)i * KC_SYNC_REC_BYTES;
		pattern_fill(buf, sizeof(buf), KC_SYNC_SEED, off);
		int rc = pwrite_all(fd, buf, sizeof(buf), (off_t)off);
		if (rc != 0) {
			printf("#   sync writer: record %u: %s\n", i, strerror(-rc));
			close(fd);
			return 1;
		}
		if (i % KC_PROGRESS_SYNC == KC_PROGRESS_SYNC - 1)
			printf("# restart progress sync %u\n", i + 1);
	}
	if (close(fd) != 0) {
		printf("#   sync writer: close: %s\n", strerror(errno));
		return 1;
	}
	*recs_out = i;
	printf("# restart: the O_SYNC writer wrote %u records\n", i);
	return 0;
}

/* The buffered writer: chunk i holds pattern KC_UNST_SEED at [i MiB, (i + 1) MiB). */
static int unstable_run(const char *path, uint32_t *chunks_out)
{
	static uint8_t buf[KC_UNST_CHUNK_BYTES];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		printf("#   buffered writer: open: %s\n", strerror(errno));
		return 1;
	}
	const char *what = NULL;
	uint32_t i = 0;
	for (; i < KC_UNST_CHUNKS && what == NULL; i++) {
		uint64_t off = (uint64_t)i * KC_UNST_CHUNK_BYTES;
		pattern_fill(buf, sizeof(buf), KC_UNST_SEED, off);
		int rc = pwrite_all(fd, buf, sizeof(buf), (off_t)off);
		if (rc != 0) {
			errno = -rc;
			what = "pwrite";
			break;
		}
		/* WRITE without WAIT_BEFORE is writeback without data integrity (WB_SYNC_NONE):
		 * UNSTABLE WRITEs, waited for, and no COMMIT. */
		if (sync_file_range(fd, (off64_t)off, KC_UNST_CHUNK_BYTES,
				    SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
			what = "sync_file_range";
			break;
		}
		if (i == KC_UNST_KILL_CHUNK) {
			printf("# restart kill (chunk %u written UNSTABLE, not committed)\n", i);
			sleep(KC_UNST_KILL_WAIT_S);
		}
		if (i % 2 == 1 && fsync(fd) != 0)
			what = "fsync";
		printf("# restart progress unstable %u\n", i + 1);
	}
	if (what == NULL && fsync(fd) != 0)
		what = "the last fsync";
	if (what != NULL) {
		printf("#   buffered writer: chunk %u: %s: %s\n", i, what, strerror(errno));
		close(fd);
		return 1;
	}
	if (close(fd) != 0) {
		printf("#   buffered writer: close: %s\n", strerror(errno));
		return 1;
	}
	*chunks_out = i;
	return 0;
}

/* Writes len bytes to path (the guest's tmpfs); returns 0 or -1. */
static int save_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return -1;
	int rc = fwrite(buf, 1, len, f) == len ? 0 : -1;
	return fclose(f) == 0 ? rc : -1;
}

static int restartload(const char *mnt, const char *eager_mnt, const char *state_path)
{
	char dir[4200], path[4300], part[4300];
	snprintf(dir, sizeof(dir), "%s/rs", mnt);
	if (!tap_check(mkdir(dir, 0755) == 0, "restart: mkdir %s", dir))
		return tap_finish();
	struct restart_shared *shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE,
					     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!tap_check(shared != MAP_FAILED, "restart: shared page"))
		return tap_finish();
	shared->rs_unstable_done = 0;
	static const char *const names[] = { "fsx", "sync", "unstable" };
	pid_t pids[3];
	for (unsigned w = 0; w < 3; w++) {
		fflush(stdout);
		pids[w] = fork();
		if (pids[w] < 0) {
			tap_check(false, "restart: fork: %s", strerror(errno));
			return tap_finish();
		}
		if (pids[w] != 0)
			continue;
		snprintf(path, sizeof(path), "%s/rs/%s", w == 2 ? eager_mnt : mnt, names[w]);
		snprintf(part, sizeof(part), "%s.%s", state_path, names[w]);
		/* What restartcheck must find goes to STATE.NAME: the checker's model, the number
		 * of records or chunks the writers wrote. */
		uint32_t count = 0;
		int rc;
		if (w == 0) {
			rc = fsx_run(path, shared);
			if (rc == 0 && save_file(part, fsx_model, fsx_bytes) != 0)
				rc = 1;
		} else {
			rc = w == 1 ? sync_run(path, shared, &count) : unstable_run(path, &count);
			if (w == 2)
				shared->rs_unstable_done = 1;
			if (rc == 0 && save_file(part, &count, sizeof(count)) != 0)
				rc = 1;
		}
		fflush(stdout);
		_exit(rc);
	}
	for (unsigned w = 0; w < 3; w++) {
		int status = 0;
		pid_t got = waitpid(pids[w], &status, 0);
		tap_check(got == pids[w] && WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "restart: the %s worker carried on across the restart with no error", names[w]);
	}
	return tap_finish();
}

/* Reads path.name (a file restartload saved) into buf; returns its length or -1. */
static ssize_t load_part(const char *state_path, const char *name, void *buf, size_t cap)
{
	char part[4300];
	snprintf(part, sizeof(part), "%s.%s", state_path, name);
	FILE *f = fopen(part, "r");
	if (f == NULL)
		return -1;
	size_t n = fread(buf, 1, cap, f);
	fclose(f);
	return (ssize_t)n;
}

static const char *rc_mnt, *rc_state;

static void rc_check_fsx(void)
{
	static uint8_t got[KC_FSX_MAX_BYTES + 1];
	char path[4300];
	ssize_t want = load_part(rc_state, "fsx", fsx_model, sizeof(fsx_model));
	CHECKF(want >= 0, "no fsx state saved");
	if (want < 0)
		return;
	snprintf(path, sizeof(path), "%s/rs/fsx", rc_mnt);
	ssize_t n = read_head(path, got, sizeof(got));
	CHECKF(n >= 0, "read %s: %s", path, strerror((int)-n));
	CHECKF(n == want, "the checker's file reads %zd bytes, the model holds %zd", n, want);
	if (n == want)
		CHECK(fsx_compare(got, 0, (uint32_t)n) == 0);
}

static void rc_check_sync(void)
{
	char path[4300];
	uint32_t recs = 0;
	CHECKF(load_part(rc_state, "sync", &recs, sizeof(recs)) == sizeof(recs), "no state");
	snprintf(path, sizeof(path), "%s/rs/sync", rc_mnt);
	check_pattern_file(path, KC_SYNC_SEED, (uint64_t)recs * KC_SYNC_REC_BYTES);
	printf("#   %u O_SYNC records of %u KiB\n", recs, KC_SYNC_REC_BYTES >> 10);
}

static void rc_check_unstable(void)
{
	char path[4300];
	uint32_t chunks = 0;
	CHECKF(load_part(rc_state, "unstable", &chunks, sizeof(chunks)) == sizeof(chunks), "no state");
	CHECK(chunks == KC_UNST_CHUNKS);
	snprintf(path, sizeof(path), "%s/rs/unstable", rc_mnt);
	check_pattern_file(path, KC_UNST_SEED, (uint64_t)chunks * KC_UNST_CHUNK_BYTES);
}

static int restartcheck(const char *mnt, const char *state_path)
{
	rc_mnt = mnt;
	rc_state = state_path;
	tap_run_case("restart: the fsx file holds every byte of the model", rc_check_fsx);
	tap_run_case("restart: the O_SYNC (FILE_SYNC) file holds every record", rc_check_sync);
	tap_run_case("restart: the UNSTABLE+COMMIT file holds every chunk, the re-sent one too",
		     rc_check_unstable);
	return tap_finish();
}

/* --- the pool full ----------------------------------------------------------------------------- */

#define KC_FILL_FILE_BYTES (4u << 20)
#define KC_FILL_MAX_FILES 64u  /* 256 MiB: more than the pool and the quota hold */
#define KC_FILL_SEED 8000u
#define KC_FILL_WAIT_S 60      /* how long freed space may take to be reported */
#define KC_FILL_REMOVE 4u      /* files removed to make room */

static const char *fill_dir;
static int fill_want_err;
static unsigned fill_count; /* files written whole before the failing one */
static bool fill_partial;   /* the failing one was created (its create did not fail) */

static uint64_t avail_of(const char *path)
{
	struct statfs sf;
	if (statfs(path, &sf) != 0)
		return 0;
	return (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
}

/* How many names in dir want() takes (a failed opendir is a failed CHECK). */
static unsigned count_names(const char *dir, bool (*want)(const char *name))
{
	DIR *d = opendir(dir);
	CHECKF(d != NULL, "opendir %s: %s", dir, strerror(errno));
	unsigned names = 0;
	if (d != NULL) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL)
			names += want(e->d_name);
		closedir(d);
	}
	return names;
}

static bool is_fill_name(const char *name)
{
	return name[0] == 'f';
}

static const char *fill_path(unsigned i)
{
	static char path[4300];
	snprintf(path, sizeof(path), "%s/f%02u", fill_dir, i);
	return path;
}

/* Writes 4 MiB files until one fails; it must fail with fill_want_err. */
static void fill_until_error(void)
{
	CHECKF(mkdir(fill_dir, 0755) == 0, "mkdir %s: %s", fill_dir, strerror(errno));
	int rc = 0;
	for (fill_count = 0; fill_count < KC_FILL_MAX_FILES; fill_count++) {
		rc = write_pattern_file(fill_path(fill_count), KC_FILL_SEED + fill_count,
					KC_FILL_FILE_BYTES, O_EXCL);
		if (rc != 0)
			break;
	}
	struct stat st;
	fill_partial = lstat(fill_path(fill_count), &st) == 0;
	printf("#   %u files of 4 MiB written, then: %s; %" PRIu64 " KiB reported available\n",
	       fill_count, rc ? strerror(-rc) : "no error", avail_of(fill_dir) >> 10);
	CHECKF(rc == -fill_want_err, "the write that did not fit failed with %s, expected %s",
	       strerror(-rc), strerror(fill_want_err));
}

/* The server still answers: listing, statfs, and the files written whole read back. */
static void fill_still_serving(void)
{
	struct statfs sf;
	CHECKF(statfs(fill_dir, &sf) == 0, "statfs: %s", strerror(errno));
	unsigned names = count_names(fill_dir, is_fill_name);
	CHECKF(names == fill_count + fill_partial, "%u names listed, expected %u", names,
	       fill_count + fill_partial);
	CHECK(drop_caches() == 0);
	for (unsigned i = 0; i < fill_count; i++)
		check_pattern_file(fill_path(i), KC_FILL_SEED + i, KC_FILL_FILE_BYTES);
}

/* Removing the partial file and a few whole ones works and the space is reported again. */
static void fill_remove(void)
{
	uint64_t before = avail_of(fill_dir);
	if (fill_partial)
		CHECKF(unlink(fill_path(fill_count)) == 0, "unlink of the partial file: %s",
		       strerror(errno));
	for (unsigned i = 0; i < KC_FILL_REMOVE && i < fill_count; i++)
		CHECKF(unlink(fill_path(i)) == 0, "unlink f%02u: %s", i, strerror(errno));
	uint64_t want = before + (uint64_t)KC_FILL_REMOVE * KC_FILL_FILE_BYTES / 2, now = 0;
	unsigned waited = 0;
	for (; waited < KC_FILL_WAIT_S * 10; waited++) {
		now = avail_of(fill_dir);
		if (now >= want)
			break;
		usleep(100000);
	}
	printf("#   %" PRIu64 " KiB available before the removes, %" PRIu64 " KiB %.1f s after\n",
	       before >> 10, now >> 10, waited / 10.0);
	CHECKF(now >= want, "space not given back within %d s", KC_FILL_WAIT_S);
}

/* Writes work again once there is room: two new files, read back after dropping caches. */
static void fill_write_again(void)
{
	for (unsigned i = 0; i < 2; i++) {
		int rc = write_pattern_file(fill_path(KC_FILL_MAX_FILES + i),
					    KC_FILL_SEED + KC_FILL_MAX_FILES + i, KC_FILL_FILE_BYTES,
					    O_EXCL);
		CHECKF(rc == 0, "write after the removes: %s", strerror(-rc));
	}
	CHECK(drop_caches() == 0);
	for (unsigned i = 0; i < 2; i++)
		check_pattern_file(fill_path(KC_FILL_MAX_FILES + i), KC_FILL_SEED + KC_FILL_MAX_FILES + i,
				   KC_FILL_FILE_BYTES);
	for (unsigned i = KC_FILL_REMOVE; i < fill_count; i++)
		check_pattern_file(fill_path(i), KC_FILL_SEED + i, KC_FILL_FILE_BYTES);
}

static void fill_one(const char *what, const char *dir, int want_err)
{
	char name[128];
	fill_dir = dir;
	fill_want_err = want_err;
	snprintf(name, sizeof(name), "%s: writes fail with %s once it is full", what,
		 want_err == ENOSPC ? "ENOSPC" : "EDQUOT");
	tap_run_case(name, fill_until_error);
	snprintf(name, sizeof(name), "%s: the server answers on: listing, statfs, every whole file",
		 what);
	tap_run_case(name, fill_still_serving);
	snprintf(name, sizeof(name), "%s: removes work and the space comes back", what);
	tap_run_case(name, fill_remove);
	snprintf(name, sizeof(name), "%s: writes work again, every file reads back", what);
	tap_run_case(name, fill_write_again);
}

static int fill(const char *mnt, const char *qmnt)
{
	char dir[4200], qdir[4200];
	snprintf(dir, sizeof(dir), "%s/fill", mnt);
	snprintf(qdir, sizeof(qdir), "%s/fill", qmnt);
	fill_one("quota", qdir, EDQUOT);
	fill_one("pool full", dir, ENOSPC);
	return tap_finish();
}

/* --- a leaf failing reads ------------------------------------------------------------------------ */

#define KC_VICTIM_BYTES (8u << 20)
#define KC_VICTIM_SEED 9000u
#define KC_KEEP_BYTES (1u << 20)
#define KC_KEEP_SEED 9001u
#define KC_NEW_SEED 9002u
#define KC_ARMED_WAIT_S 300 /* how long the host may take to stop, arm and restart the server */
/* The shortest run the host's scan counts as a data block's: a log record or a stray match
 * is shorter (a record is 128 KiB). */
#define KC_RUN_MIN_BYTES (64u << 10)

static int eiowrite(const char *mnt, const char *smnt)
{
	char path[4300];
	snprintf(path, sizeof(path), "%s/victim", mnt);
	int rc = write_pattern_file(path, KC_VICTIM_SEED, KC_VICTIM_BYTES, O_EXCL);
	tap_check(rc == 0, "eio: the victim written to the mirror (%s)", rc ? strerror(-rc) : "ok");
	snprintf(path, sizeof(path), "%s/victim", smnt);
	rc = write_pattern_file(path, KC_VICTIM_SEED, KC_VICTIM_BYTES, O_EXCL);
	tap_check(rc == 0, "eio: the victim written to the single leaf (%s)", rc ? strerror(-rc) : "ok");
	snprintf(path, sizeof(path), "%s/keep", smnt);
	rc = write_pattern_file(path, KC_KEEP_SEED, KC_KEEP_BYTES, O_EXCL);
	tap_check(rc == 0, "eio: a second file written beside it (%s)", rc ? strerror(-rc) : "ok");
	printf("# eio arm\n");
	/* The host stops the server, makes the leaves fail reads of the victims' blocks, starts it
	 * again and creates SMNT/armed. Dropping the caches makes each look-up go to the server. */
	snprintf(path, sizeof(path), "%s/armed", smnt);
	struct stat st;
	unsigned waited = 0;
	for (; waited < KC_ARMED_WAIT_S; waited++) {
		if (drop_caches() == 0 && stat(path, &st) == 0)
			break;
		sleep(1);
	}
	tap_check(waited < KC_ARMED_WAIT_S, "eio: the host armed the faults (%u s)", waited);
	return tap_finish();
}

static const char *eio_mnt, *eio_smnt;

static const char *eio_path(const char *mnt, const char *name)
{
	static char paths[4][4300];
	static unsigned next;
	char *p = paths[next++ % 4];
	snprintf(p, sizeof(paths[0]), "%s/%s", mnt, name);
	return p;
}

static bool is_eio_name(const char *name)
{
	return strcmp(name, "victim") == 0 || strcmp(name, "keep") == 0;
}

static void eio_mirror(void)
{
	CHECK(drop_caches() == 0);
	check_pattern_file(eio_path(eio_mnt, "victim"), KC_VICTIM_SEED, KC_VICTIM_BYTES);
}

/* Each read of the victim's blocks fails with EIO, at its start and in its middle, and again. */
static void eio_single_read(void)
{
	static uint8_t buf[64 << 10];
	CHECK(drop_caches() == 0);
	int fd = open(eio_path(eio_smnt, "victim"), O_RDONLY);
	CHECKF(fd >= 0, "open: %s", strerror(errno));
	if (fd < 0)
		return;
	static const off_t offs[] = { 0, KC_VICTIM_BYTES / 2, 0 };
	for (unsigned i = 0; i < 3; i++) {
		errno = 0;
		ssize_t n = pread(fd, buf, sizeof(buf), offs[i]);
		CHECKF(n < 0 && errno == EIO, "read at %jd: %zd (%s), expected EIO", (intmax_t)offs[i],
		       n, strerror(errno));
	}
	close(fd);
}

/* Everything but the victim's data works: its attributes, the listing, the other file, a new
 * file written and read back, a rename, a remove, statfs. */
static void eio_single_rest(void)
{
	struct stat st;
	CHECKF(stat(eio_path(eio_smnt, "victim"), &st) == 0 && st.st_size == KC_VICTIM_BYTES,
	       "stat victim: %s", strerror(errno));
	unsigned names = count_names(eio_smnt, is_eio_name);
	CHECKF(names == 2, "victim and keep listed: %u of 2", names);
	check_pattern_file(eio_path(eio_smnt, "keep"), KC_KEEP_SEED, KC_KEEP_BYTES);
	int rc = write_pattern_file(eio_path(eio_smnt, "new"), KC_NEW_SEED, KC_KEEP_BYTES, O_EXCL);
	CHECKF(rc == 0, "write new: %s", strerror(-rc));
	CHECK(drop_caches() == 0);
	check_pattern_file(eio_path(eio_smnt, "new"), KC_NEW_SEED, KC_KEEP_BYTES);
	CHECKF(rename(eio_path(eio_smnt, "new"), eio_path(eio_smnt, "renamed")) == 0, "rename: %s",
	       strerror(errno));
	check_pattern_file(eio_path(eio_smnt, "renamed"), KC_NEW_SEED, KC_KEEP_BYTES);
	CHECKF(unlink(eio_path(eio_smnt, "keep")) == 0, "unlink keep: %s", strerror(errno));
	struct statfs sf;
	CHECKF(statfs(eio_smnt, &sf) == 0, "statfs: %s", strerror(errno));
}

static int eiocheck(const char *mnt, const char *smnt)
{
	eio_mnt = mnt;
	eio_smnt = smnt;
	tap_run_case("eio: the mirror serves every byte of the victim, one side failing its reads",
		     eio_mirror);
	tap_run_case("eio: one leaf: reads of the victim fail with EIO (NFS3ERR_IO)", eio_single_read);
	tap_run_case("eio: one leaf: attributes, listing, other files, write, rename, remove work",
		     eio_single_rest);
	/* After the rest, the victim fails just as before: nothing was cached or changed for it. */
	tap_run_case("eio: one leaf: the victim's reads still fail with EIO", eio_single_read);
	return tap_finish();
}

/* --- on the host: where a file's blocks lie in a leaf image ------------------------------------- */

struct sector_key {
	uint64_t sk_word; /* the sector's first 8 bytes */
	uint32_t sk_index;
};

static int cmp_key(const void *a, const void *b)
{
	uint64_t x = ((const struct sector_key *)a)->sk_word, y = ((const struct sector_key *)b)->sk_word;
	return x < y ? -1 : x > y;
}

/* Prints "OFFSET LENGTH" for every run of KC_RUN_MIN_BYTES or more of image sectors that hold
 * consecutive sectors of pattern seed. Returns 0, or 1 when the image cannot be read. */
static int sectors(const char *image, uint64_t seed, uint64_t len)
{
	uint32_t n = (uint32_t)(len / KC_SECTOR_BYTES);
	struct sector_key *keys = calloc(n, sizeof(*keys));
	static uint8_t want[KC_SECTOR_BYTES], got[KC_SECTOR_BYTES];
	int fd = open(image, O_RDONLY);
	if (keys == NULL || fd < 0) {
		fprintf(stderr, "guest_stress: %s: %s\n", image, strerror(errno));
		return 1;
	}
	for (uint32_t i = 0; i < n; i++)
		keys[i] = (struct sector_key){ pattern_word(seed, (uint64_t)i * KC_SECTOR_BYTES / 8), i };
	qsort(keys, n, sizeof(*keys), cmp_key);
	uint64_t run_off = 0, run_len = 0;
	uint32_t run_next = 0; /* the pattern sector the run's next image sector must hold */
	for (uint64_t off = 0;; off += KC_SECTOR_BYTES) {
		ssize_t r = pread_all(fd, got, sizeof(got), (off_t)off);
		bool match = false;
		uint32_t index = 0;
		if (r == (ssize_t)sizeof(got)) {
			struct sector_key k = { 0 }, *hit;
			memcpy(&k.sk_word, got, 8);
			hit = bsearch(&k, keys, n, sizeof(*keys), cmp_key);
			if (hit != NULL) {
				index = hit->sk_index;
				pattern_fill(want, sizeof(want), seed, (uint64_t)index * KC_SECTOR_BYTES);
				match = memcmp(want, got, sizeof(got)) == 0;
			}
		}
		if (match && run_len > 0 && index == run_next) {
			run_len += KC_SECTOR_BYTES;
			run_next++;
			continue;
		}
		if (run_len >= KC_RUN_MIN_BYTES)
			printf("%" PRIu64 " %" PRIu64 "\n", run_off, run_len);
		run_len = 0;
		if (r != (ssize_t)sizeof(got))
			break;
		if (match) {
			run_off = off;
			run_len = KC_SECTOR_BYTES;
			run_next = index + 1;
		}
	}
	close(fd);
	free(keys);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && strcmp(argv[1], "restartload") == 0)
		return restartload(argv[2], argv[3], argv[4]);
	if (argc == 4 && strcmp(argv[1], "restartcheck") == 0)
		return restartcheck(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "fill") == 0)
		return fill(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "eiowrite") == 0)
		return eiowrite(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "eiocheck") == 0)
		return eiocheck(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "sectors") == 0)
		return sectors(argv[2], KC_VICTIM_SEED, KC_VICTIM_BYTES);
	fprintf(stderr, "usage: guest_stress restartload MNT EAGER STATE | restartcheck MNT STATE | fill MNT QMNT | "
			"eiowrite|eiocheck MNT SMNT | sectors IMAGE\n");
	return 2;
}
