/* guest_lock.c: the lock checks of the two-guest kernel-client test (run-kclient-lock.sh), run in
 * each guest with its role: `guest_lock a DIR` or `guest_lock b DIR`, DIR the NFS mount.
 *
 * The two guests are two NFS clients of one server; their fcntl and flock calls go to the
 * server's lock manager (NLM) through each kernel's lockd. They take turns through files in
 * DIR/sync (the mount has no attribute cache, so each sees the other's files at once):
 *
 *   a: locks bytes 0-99 exclusive and 4 KiB past 2 GiB shared          -> sync/a-locked
 *   b: sees a's lock (F_GETLK names a's process), is refused at byte 50
 *      and at a byte past 2 GiB for an exclusive lock, gets a shared one
 *      there and bytes 200-209 (no overlap); a second process of b is
 *      refused b's own range; then waits (F_SETLKW) for byte 50         -> sync/b-waiting
 *   a: unlocks 0-99 a second after b waits
 *   b: granted (the server's GRANTED callback woke its lockd)           -> sync/b-granted
 *   a: flock(LOCK_EX) of a second file                                  -> sync/a-flock
 *   b: flock(LOCK_EX | LOCK_NB) of it is refused                        -> sync/b-done
 *
 * `guest_lock a|b DIR recover`: the server is killed (kill -9) and started again while a holds a
 * lock (run-kclient-lock.sh --recover):
 *
 *   a: locks bytes 0-99 exclusive                                       -> sync/a-locked
 *   b: ready                                                            -> sync/b-ready
 *   a: "# lock host kill" on the console: the host kills the server and starts it again; it
 *      notifies a, the client that held a lock (SM_NOTIFY), whose kernel reclaims the lock in
 *      the grace period
 *   b: three seconds later asks for byte 50: the server answers "grace period" until grace ends
 *      (a reclaimed, but stays silent), then refuses it: a's lock came back. A free range is
 *      then granted at once, and an F_SETLKW of byte 50 waits for a's unlock     -> sync/b-done
 *
 * `guest_lock a|b DIR reset`, then `guest_lock a DIR reboot`: guest a is reset (its qemu killed)
 * while it holds a lock that b waits for, and boots again (run-kclient-lock.sh --reset):
 *
 *   a: locks bytes 0-99 exclusive                                       -> sync/a-locked
 *   b: waits (F_SETLKW) for byte 50                                     -> sync/b-waiting
 *   a: "# lock host reset" on the console: the host kills a's qemu and boots it again; a's
 *      sm-notify (its state directory survived on a second export) tells the server, which
 *      releases what a held
 *   b: granted                                                          -> sync/b-granted
 *   a (rebooted): byte 50 is b's now                                    -> sync/a-back
 *
 * Every check prints a TAP line ("ok - NAME" / "not ok - NAME"), prefixed with the role. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GIB (1024LL * 1024 * 1024)

static const char *role;
static const char *dir;
static int failures;

static void tap(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s - %s: ", ok ? "ok" : "not ok", role);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	failures += !ok;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void mark(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/sync/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT, 0666);
	if (fd >= 0)
		close(fd);
	else
		tap(0, "create %s: %s", path, strerror(errno));
}

/* Waits up to 90 s for the other guest's mark. */
static int wait_mark(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/sync/%s", dir, name);
	struct stat st;
	for (int i = 0; i < 900; i++) {
		if (stat(path, &st) == 0)
			return 1;
		usleep(100000);
	}
	tap(0, "%s never came", name);
	return 0;
}

static int set_lock(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
	return fcntl(fd, cmd, &fl);
}

static int open_file(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDWR | O_CREAT, 0666);
	if (fd < 0)
		tap(0, "open %s: %s", path, strerror(errno));
	return fd;
}

static void role_a(void)
{
	int fd = open_file("locked");
	if (fd < 0)
		return;
	tap(set_lock(fd, F_SETLK, F_WRLCK, 0, 100) == 0, "exclusive lock of bytes 0-99");
	tap(set_lock(fd, F_SETLK, F_RDLCK, 2 * GIB + 10, 4096) == 0,
	    "shared lock of 4 KiB past 2 GiB");
	printf("# a: pid %d\n", (int)getpid());
	mark("a-locked");
	if (!wait_mark("b-waiting"))
		return;
	sleep(1);
	tap(set_lock(fd, F_SETLK, F_UNLCK, 0, 100) == 0, "unlock of bytes 0-99");
	if (!wait_mark("b-granted"))
		return;
	int ffd = open_file("flocked");
	tap(ffd >= 0 && flock(ffd, LOCK_EX) == 0, "flock(LOCK_EX) of a second file");
	mark("a-flock");
	wait_mark("b-done");
	close(ffd);
	close(fd);
}

static void role_b(void)
{
	if (!wait_mark("a-locked"))
		return;
	int fd = open_file("locked");
	if (fd < 0)
		return;
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 1};
	int rc = fcntl(fd, F_GETLK, &fl);
	tap(rc == 0 && fl.l_type == F_WRLCK && fl.l_start == 0 && fl.l_len == 100,
	    "F_GETLK sees the other client's exclusive lock of 0-99 (type %d, %lld+%lld, pid %d)",
	    fl.l_type, (long long)fl.l_start, (long long)fl.l_len, (int)fl.l_pid);
	rc = set_lock(fd, F_SETLK, F_WRLCK, 50, 1);
	tap(rc != 0 && (errno == EAGAIN || errno == EACCES),
	    "an exclusive lock of byte 50 is refused (%s)", rc ? strerror(errno) : "granted");
	rc = set_lock(fd, F_SETLK, F_WRLCK, 2 * GIB + 20, 1);
	tap(rc != 0 && (errno == EAGAIN || errno == EACCES),
	    "an exclusive lock past 2 GiB is refused where the other holds it shared");
	tap(set_lock(fd, F_SETLK, F_RDLCK, 2 * GIB + 20, 1) == 0,
	    "a shared lock there is granted beside the other's");
	tap(set_lock(fd, F_SETLK, F_WRLCK, 200, 10) == 0, "bytes 200-209 (no overlap) are granted");
	/* a second process of this client: refused this process's range */
	pid_t child = fork();
	if (child == 0) {
		int cfd = open_file("locked");
		int crc = set_lock(cfd, F_SETLK, F_WRLCK, 205, 1);
		_exit(crc != 0 && (errno == EAGAIN || errno == EACCES) ? 0 : 1);
	}
	int status = 1;
	waitpid(child, &status, 0);
	tap(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "another process of the same client is refused this process's range");
	/* unlocking the middle of 200-209 splits it: 205 is free, 204 is not */
	tap(set_lock(fd, F_SETLK, F_UNLCK, 205, 1) == 0, "unlock of byte 205 (a split)");
	child = fork();
	if (child == 0) {
		int cfd = open_file("locked");
		int free_rc = set_lock(cfd, F_SETLK, F_WRLCK, 205, 1);
		int held_rc = set_lock(cfd, F_SETLK, F_WRLCK, 204, 1);
		_exit(free_rc == 0 && held_rc != 0 ? 0 : 1);
	}
	waitpid(child, &status, 0);
	tap(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "after the split byte 205 is free and byte 204 still held");
	/* the blocking wait, woken by the other client's unlock through GRANTED */
	mark("b-waiting");
	double t0 = now_ms();
	rc = set_lock(fd, F_SETLKW, F_WRLCK, 50, 1);
	double waited = now_ms() - t0;
	tap(rc == 0 && waited >= 500, "F_SETLKW waits for the other's unlock and is granted (%.0f ms)",
	    waited);
	mark("b-granted");
	if (!wait_mark("a-flock"))
		return;
	int ffd = open_file("flocked");
	rc = ffd >= 0 ? flock(ffd, LOCK_EX | LOCK_NB) : -1;
	tap(rc != 0 && errno == EWOULDBLOCK, "flock(LOCK_EX | LOCK_NB) is refused while the other holds it");
	mark("b-done");
	close(ffd);
	close(fd);
}

static void recover_a(void)
{
	int fd = open_file("locked");
	if (fd < 0)
		return;
	tap(set_lock(fd, F_SETLK, F_WRLCK, 0, 100) == 0, "exclusive lock of bytes 0-99 before the crash");
	mark("a-locked");
	if (!wait_mark("b-ready"))
		return;
	printf("# lock host kill\n");
	fflush(stdout);
	if (!wait_mark("b-refused"))
		return;
	tap(set_lock(fd, F_SETLK, F_UNLCK, 0, 100) == 0, "unlock after the restart");
	wait_mark("b-done");
	close(fd);
}

static void recover_b(void)
{
	if (!wait_mark("a-locked"))
		return;
	int fd = open_file("locked");
	if (fd < 0)
		return;
	mark("b-ready");
	sleep(3); /* the host kills and restarts the server meanwhile */
	double t0 = now_ms();
	int rc = set_lock(fd, F_SETLK, F_WRLCK, 50, 1);
	double waited = now_ms() - t0;
	tap(rc != 0 && (errno == EAGAIN || errno == EACCES),
	    "after the restart the other's reclaimed lock refuses byte 50 (%s, after %.0f ms)",
	    rc ? strerror(errno) : "granted", waited);
	tap(waited >= 2000, "that request waited for the grace period (%.0f ms)", waited);
	t0 = now_ms();
	tap(set_lock(fd, F_SETLK, F_WRLCK, 500, 10) == 0 && now_ms() - t0 < 2000,
	    "a free range is granted at once once grace is over");
	mark("b-refused");
	t0 = now_ms();
	rc = set_lock(fd, F_SETLKW, F_WRLCK, 50, 1);
	tap(rc == 0, "F_SETLKW of byte 50 is granted at the other's unlock (%.0f ms)", now_ms() - t0);
	mark("b-done");
	close(fd);
}

static void reset_a(void)
{
	int fd = open_file("locked");
	if (fd < 0)
		return;
	tap(set_lock(fd, F_SETLK, F_WRLCK, 0, 100) == 0, "exclusive lock of bytes 0-99 before the reset");
	mark("a-locked");
	if (!wait_mark("b-waiting"))
		return;
	sleep(1);
	printf("# lock host reset\n");
	fflush(stdout);
	pause(); /* the host kills this machine */
}

static void reset_b(void)
{
	if (!wait_mark("a-locked"))
		return;
	int fd = open_file("locked");
	if (fd < 0)
		return;
	mark("b-waiting");
	double t0 = now_ms();
	int rc = set_lock(fd, F_SETLKW, F_WRLCK, 50, 1);
	tap(rc == 0, "F_SETLKW is granted once the other client, reset, notifies the server (%.0f ms)",
	    now_ms() - t0);
	mark("b-granted");
	wait_mark("a-back");
	close(fd);
}

static void reboot_a(void)
{
	if (!wait_mark("b-granted"))
		return;
	int fd = open_file("locked");
	if (fd < 0)
		return;
	int rc = set_lock(fd, F_SETLK, F_WRLCK, 50, 1);
	tap(rc != 0 && (errno == EAGAIN || errno == EACCES),
	    "after its reset the lock it held is gone and byte 50 is the other's");
	tap(set_lock(fd, F_SETLK, F_WRLCK, 0, 10) == 0, "the rest of its old range is free");
	mark("a-back");
	close(fd);
}

int main(int argc, char **argv)
{
	const char *mode = argc == 4 ? argv[3] : "";
	if ((argc != 3 && argc != 4) || (strcmp(argv[1], "a") != 0 && strcmp(argv[1], "b") != 0) ||
	    (argc == 4 && strcmp(mode, "recover") != 0 && strcmp(mode, "reset") != 0 &&
	     strcmp(mode, "reboot") != 0)) {
		fprintf(stderr, "usage: guest_lock a|b DIR [recover|reset|reboot]\n");
		return 2;
	}
	role = argv[1];
	dir = argv[2];
	char sync[512];
	snprintf(sync, sizeof(sync), "%s/sync", dir);
	(void)mkdir(sync, 0777);
	if (strcmp(mode, "reboot") == 0)
		reboot_a();
	else if (strcmp(mode, "reset") == 0)
		role[0] == 'a' ? reset_a() : reset_b();
	else if (argc == 4)
		role[0] == 'a' ? recover_a() : recover_b();
	else if (role[0] == 'a')
		role_a();
	else
		role_b();
	return failures ? 1 : 0;
}
