/* testserver.c: one private `shale serve` per test program (see testserver.h). */
#include "testserver.h"
#include "rawrpc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int ts_stop_server(struct ts_server *ts);

/* How long a server may take to write its ready file before the test gives up. */
#define TS_READY_TIMEOUT_MS 20000
#define TS_STOP_TIMEOUT_MS 10000

static void ts_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

static int ts_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return -1;
	int rc = fputs(text, f) < 0 ? -1 : 0;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

/* Removes the temporary tree. The tree is ours alone (mkdtemp), so a recursive rm is safe. */
static void ts_remove_tree(const char *root)
{
	if (root[0] == '\0' || strncmp(root, "/tmp/shale-test-", 16) != 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		execlp("rm", "rm", "-rf", "--", root, (char *)NULL);
		_exit(127);
	}
	if (pid > 0) {
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
		}
	}
}

int ts_run_cmd(char *const argv[], const char *out_path, bool append)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(out_path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool ts_pool_mode(void)
{
	const char *b = getenv("SHALE_TS_BACKEND");
	return b != NULL && strcmp(b, "pool") == 0;
}

/* Pool mode: a pool "tank" of one file in <root>/pool with a file system exp<i> per export. */
static int ts_make_pool(struct ts_server *ts, const char *bin, unsigned nexports)
{
	char dir[320], img[360], log[320];
	snprintf(dir, sizeof(dir), "%s/pool", ts->ts_root);
	snprintf(img, sizeof(img), "%s/tank.img", dir);
	snprintf(log, sizeof(log), "%s/pool-setup.log", ts->ts_root);
	if (mkdir(dir, 0700) != 0) {
		printf("# mkdir %s: %s\n", dir, strerror(errno));
		return -1;
	}
	char *create[] = {(char *)bin, "pool", "create", "tank", img, "--size", "1G", NULL};
	if (ts_run_cmd(create, log, true) != 0) {
		printf("# shale pool create failed (see %s)\n", log);
		return -1;
	}
	for (unsigned i = 0; i < nexports; i++) {
		char name[32];
		snprintf(name, sizeof(name), "tank/exp%u", i);
		char *fs[] = {(char *)bin, "fs", "create", name, "-d", dir, NULL};
		if (ts_run_cmd(fs, log, true) != 0) {
			printf("# shale fs create %s failed (see %s)\n", name, log);
			return -1;
		}
	}
	return 0;
}

/* Reads "port=N" from the ready file once it is complete (ends with a newline). */
static int ts_read_ready(const char *path, uint16_t *port_out)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	char line[128];
	int found = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long v;
		char *end;
		if (strncmp(line, "port=", 5) != 0)
			continue;
		errno = 0;
		v = strtoul(line + 5, &end, 10);
		if (errno == 0 && end != line + 5 && *end == '\n' && v > 0 && v < 65536) {
			*port_out = (uint16_t)v;
			found = 0;
		}
	}
	fclose(f);
	return found;
}

/* Starts `shale serve` on <root>/exports and waits for its ready file; sets ts_pid and ts_port.
 * Returns 0, or -1 (the process, if any, is left in ts_pid for the caller to kill). */
static const char *const *ts_extra_args; /* ts_set_extra_args */

void ts_set_extra_args(const char *const *args)
{
	ts_extra_args = args;
}

static int ts_launch(struct ts_server *ts, const char *bin, bool pool)
{
	char exports_path[320], state_path[320], ready_path[320], pool_dir[320];
	snprintf(exports_path, sizeof(exports_path), "%s/exports", ts->ts_root);
	snprintf(state_path, sizeof(state_path), "%s/state", ts->ts_root);
	snprintf(ready_path, sizeof(ready_path), "%s/ready", ts->ts_root);
	snprintf(pool_dir, sizeof(pool_dir), "%s/pool", ts->ts_root);
	(void)unlink(ready_path);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		printf("# fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int logfd = open(ts->ts_log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
			close(logfd);
		}
		char *argv[32] = {(char *)bin, "serve", "--exports", exports_path, "--state",
				  state_path, "--port", "0", "--no-portmap", "--listen", "127.0.0.1",
				  "--ready-file", ready_path};
		unsigned argc = 13;
		if (pool) {
			argv[argc++] = "--pool-dir";
			argv[argc++] = pool_dir;
			argv[argc++] = "--arc-max";
			argv[argc++] = "64M";
		}
		for (unsigned i = 0; ts_extra_args && ts_extra_args[i] && argc < 31; i++)
			argv[argc++] = (char *)ts_extra_args[i];
		argv[argc] = NULL;
		execv(bin, argv);
		_exit(127);
	}
	ts->ts_pid = pid;
	for (int waited_ms = 0; waited_ms < TS_READY_TIMEOUT_MS; waited_ms += 20) {
		if (ts_read_ready(ready_path, &ts->ts_port) == 0)
			return 0;
		if (!ts_alive(ts)) {
			printf("# server exited before becoming ready\n");
			ts_dump_log(ts, 30);
			return -1;
		}
		ts_sleep_ms(20);
	}
	printf("# server did not write %s within %d ms\n", ready_path, TS_READY_TIMEOUT_MS);
	ts_dump_log(ts, 30);
	return -1;
}

/* SETATTR of the mode of the export at path's root, as root over NFS. */
static int ts_chmod_root(const struct ts_server *ts, const char *path, uint32_t mode)
{
	uint8_t fh[64];
	uint32_t fh_len = 0;
	if (rr_mount(ts->ts_port, path, fh, &fh_len) != 0)
		return -1;
	return rr_nfs_chmod(ts->ts_port, fh, fh_len, mode);
}

int ts_start(struct ts_server *ts, const char *const *export_lines, unsigned nexports)
{
	return ts_start_with(ts, export_lines, nexports, NULL, 0);
}

/* A fixture on the host (posix mode): the file with its content and mode. */
static int ts_fixture_host(const struct ts_server *ts, const struct ts_fixture *f)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/%s", ts->ts_export_path[f->tf_export], f->tf_name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	size_t len = strlen(f->tf_content);
	int rc = write(fd, f->tf_content, len) == (ssize_t)len && fchmod(fd, f->tf_mode) == 0
			 ? 0
			 : -1;
	if (close(fd) != 0)
		rc = -1;
	return rc;
}

/* A fixture over NFS (pool mode), through the set-up server. */
static int ts_fixture_nfs(const struct ts_server *ts, const struct ts_fixture *f)
{
	uint8_t root[64], fh[64];
	uint32_t root_len = 0, fh_len = 0;
	if (rr_mount(ts->ts_port, ts->ts_export_path[f->tf_export], root, &root_len) != 0)
		return -1;
	return rr_nfs_make(ts->ts_port, root, root_len, f->tf_name, f->tf_content, f->tf_mode, fh,
			   &fh_len);
}

int ts_start_with(struct ts_server *ts, const char *const *export_lines, unsigned nexports,
		  const struct ts_fixture *fixtures, unsigned nfixtures)
{
	return ts_start_backend(ts, export_lines, nexports, fixtures, nfixtures, ts_pool_mode());
}

int ts_start_backend(struct ts_server *ts, const char *const *export_lines, unsigned nexports,
		     const struct ts_fixture *fixtures, unsigned nfixtures, bool pool)
{
	memset(ts, 0, sizeof(*ts));
	ts->ts_pool = pool;
	const char *bin = getenv("SHALE_BIN");
	if (bin == NULL || bin[0] == '\0') {
		printf("# SHALE_BIN is not set\n");
		return -1;
	}
	if (nexports == 0 || nexports > TS_MAX_EXPORTS) {
		printf("# bad export count %u\n", nexports);
		return -1;
	}
	snprintf(ts->ts_root, sizeof(ts->ts_root), "/tmp/shale-test-XXXXXX");
	if (mkdtemp(ts->ts_root) == NULL) {
		printf("# mkdtemp: %s\n", strerror(errno));
		ts->ts_root[0] = '\0';
		return -1;
	}
	/* The temporary root must be traversable by squashed and unprivileged uids. */
	chmod(ts->ts_root, 0755);

	if (pool && ts_make_pool(ts, bin, nexports) != 0)
		goto fail;
	char exports_text[4096] = "";
	size_t used = 0;
	for (unsigned i = 0; i < nexports; i++) {
		if (pool) {
			/* The exports file names the file system; clients mount "/tank/exp<i>". */
			char *path = ts->ts_export_path[i];
			snprintf(path, sizeof(ts->ts_export_path[i]), "/tank/exp%u", i);
		} else {
			snprintf(ts->ts_export_path[i], sizeof(ts->ts_export_path[i]), "%s/exp%u",
				 ts->ts_root, i);
			if (mkdir(ts->ts_export_path[i], 0777) != 0 ||
			    chmod(ts->ts_export_path[i], 0777) != 0) {
				printf("# mkdir %s: %s\n", ts->ts_export_path[i], strerror(errno));
				goto fail;
			}
		}
		/* Substitute the path for the line's "%s" (done by hand: the line is not a
		 * compile-time format). */
		const char *hole = strstr(export_lines[i], "%s");
		if (hole == NULL) {
			printf("# export line without %%s: %s\n", export_lines[i]);
			goto fail;
		}
		int n = snprintf(exports_text + used, sizeof(exports_text) - used, "%.*s%s%s\n",
				 (int)(hole - export_lines[i]), export_lines[i],
				 ts->ts_export_path[i] + (pool ? 1 : 0), hole + 2);
		if (n < 0 || (size_t)n >= sizeof(exports_text) - used) {
			printf("# exports text too long\n");
			goto fail;
		}
		used += (size_t)n;
	}
	ts->ts_nexports = nexports;

	char exports_path[320], state_path[320];
	snprintf(exports_path, sizeof(exports_path), "%s/exports", ts->ts_root);
	snprintf(state_path, sizeof(state_path), "%s/state", ts->ts_root);
	snprintf(ts->ts_log_path, sizeof(ts->ts_log_path), "%s/server.log", ts->ts_root);
	if (mkdir(state_path, 0700) != 0) {
		printf("# cannot create %s\n", state_path);
		goto fail;
	}
	if (pool) {
		/* A new file system's root is root's, mode 0755; the host directories of the posix
		 * mode are 0777. Match them over NFS, through a first server whose exports all let
		 * root in, before the real exports are served. */
		char setup_text[1024] = "";
		size_t setup_used = 0;
		for (unsigned i = 0; i < nexports; i++)
			setup_used += (size_t)snprintf(
				setup_text + setup_used, sizeof(setup_text) - setup_used,
				"tank/exp%u 127.0.0.1(rw,insecure,no_root_squash)\n", i);
		if (ts_write_file(exports_path, setup_text) != 0 || ts_launch(ts, bin, true) != 0)
			goto fail;
		for (unsigned i = 0; i < nexports; i++) {
			if (ts_chmod_root(ts, ts->ts_export_path[i], 0777) != 0) {
				printf("# chmod 0777 of %s over NFS failed\n",
				       ts->ts_export_path[i]);
				goto fail;
			}
		}
		for (unsigned i = 0; i < nfixtures; i++) {
			if (fixtures[i].tf_export >= nexports ||
			    ts_fixture_nfs(ts, &fixtures[i]) != 0) {
				printf("# fixture %s over NFS failed\n", fixtures[i].tf_name);
				goto fail;
			}
		}
		if (ts_stop_server(ts) != 0) {
			printf("# the set-up server did not stop cleanly\n");
			goto fail;
		}
	}
	for (unsigned i = 0; !pool && i < nfixtures; i++) {
		if (fixtures[i].tf_export >= nexports || ts_fixture_host(ts, &fixtures[i]) != 0) {
			printf("# fixture %s: %s\n", fixtures[i].tf_name, strerror(errno));
			goto fail;
		}
	}
	if (ts_write_file(exports_path, exports_text) != 0) {
		printf("# cannot write %s\n", exports_path);
		goto fail;
	}
	if (ts_launch(ts, bin, pool) == 0)
		return 0;
fail:
	if (ts->ts_pid > 0) {
		kill(ts->ts_pid, SIGKILL);
		waitpid(ts->ts_pid, NULL, 0);
		ts->ts_pid = 0;
	}
	ts_remove_tree(ts->ts_root);
	ts->ts_root[0] = '\0';
	return -1;
}

int ts_restart(struct ts_server *ts, bool crash)
{
	const char *bin = getenv("SHALE_BIN");
	if (!bin || ts->ts_pid <= 0)
		return -1;
	if (crash) {
		kill(ts->ts_pid, SIGKILL);
		waitpid(ts->ts_pid, NULL, 0);
		ts->ts_pid = 0;
	} else if (ts_stop_server(ts) != 0) {
		return -1;
	}
	return ts_launch(ts, bin, ts->ts_pool);
}

bool ts_alive(struct ts_server *ts)
{
	if (ts->ts_pid <= 0)
		return false;
	int status;
	pid_t r = waitpid(ts->ts_pid, &status, WNOHANG);
	if (r == ts->ts_pid) {
		if (WIFSIGNALED(status))
			printf("# server died of signal %d\n", WTERMSIG(status));
		else if (WIFEXITED(status))
			printf("# server exited with status %d\n", WEXITSTATUS(status));
		ts->ts_pid = 0;
		return false;
	}
	return kill(ts->ts_pid, 0) == 0;
}

/* Sends SIGTERM and waits for the server (SIGKILL after TS_STOP_TIMEOUT_MS); 0 if it exited
 * by itself with status 0. The tree stays. */
static int ts_stop_server(struct ts_server *ts)
{
	int rc = -1;
	if (ts->ts_pid > 0) {
		kill(ts->ts_pid, SIGTERM);
		for (int waited_ms = 0; waited_ms < TS_STOP_TIMEOUT_MS; waited_ms += 10) {
			int status;
			pid_t r = waitpid(ts->ts_pid, &status, WNOHANG);
			if (r == ts->ts_pid) {
				if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
					rc = 0;
				else if (WIFEXITED(status))
					printf("# server exited with status %d after SIGTERM\n", WEXITSTATUS(status));
				else if (WIFSIGNALED(status))
					printf("# server died of signal %d after SIGTERM\n", WTERMSIG(status));
				ts->ts_pid = 0;
				break;
			}
			ts_sleep_ms(10);
		}
		if (ts->ts_pid > 0) {
			printf("# server ignored SIGTERM for %d ms; killing it\n", TS_STOP_TIMEOUT_MS);
			kill(ts->ts_pid, SIGKILL);
			waitpid(ts->ts_pid, NULL, 0);
			ts->ts_pid = 0;
		}
		if (rc != 0)
			ts_dump_log(ts, 30);
	}
	return rc;
}

int ts_stop(struct ts_server *ts)
{
	int rc = ts_stop_server(ts);
	if (rc == 0 && ts->ts_pool && ts->ts_root[0] != '\0') {
		/* Whatever the test sent, the pool it leaves behind must check clean. */
		const char *bin = getenv("SHALE_BIN");
		char dir[320], log[320];
		snprintf(dir, sizeof(dir), "%s/pool", ts->ts_root);
		snprintf(log, sizeof(log), "%s/pool-check.log", ts->ts_root);
		char *check[] = {(char *)bin, "pool", "check", "tank", "-d", dir, NULL};
		int st = bin != NULL ? ts_run_cmd(check, log, false) : -1;
		printf("# shale pool check after the server stopped: exit %d\n", st);
		if (st != 0) {
			FILE *f = fopen(log, "r");
			char line[256];
			for (int n = 0; f != NULL && n < 30 && fgets(line, sizeof(line), f); n++)
				printf("#   %s", line);
			if (f != NULL)
				fclose(f);
			rc = -1;
		}
	}
	if (ts->ts_root[0] != '\0' && getenv("SHALE_TEST_KEEP") == NULL)
		ts_remove_tree(ts->ts_root);
	ts->ts_root[0] = '\0';
	return rc;
}

long ts_rss_kib(const struct ts_server *ts)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)ts->ts_pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	}
	fclose(f);
	return kib;
}

bool ts_under_asan(const struct ts_server *ts)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)ts->ts_pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	char line[512];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, "libasan") != NULL;
	fclose(f);
	return found;
}

void ts_dump_log(const struct ts_server *ts, unsigned max_lines)
{
	if (ts->ts_log_path[0] == '\0')
		return;
	FILE *f = fopen(ts->ts_log_path, "r");
	if (f == NULL)
		return;
	/* Keep a ring of the last max_lines lines. */
	enum { RING = 64, WIDTH = 240 };
	static char ring[RING][WIDTH];
	unsigned n = 0;
	if (max_lines > RING)
		max_lines = RING;
	while (fgets(ring[n % RING], WIDTH, f) != NULL)
		n++;
	fclose(f);
	unsigned start = n > max_lines ? n - max_lines : 0;
	for (unsigned i = start; i < n; i++) {
		char *line = ring[i % RING];
		line[strcspn(line, "\n")] = '\0';
		printf("#   server: %s\n", line);
	}
}
