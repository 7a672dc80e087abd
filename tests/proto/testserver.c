/* testserver.c: one private `shale serve` per test program (see testserver.h). */
#include "testserver.h"

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

int ts_start(struct ts_server *ts, const char *const *export_lines, unsigned nexports)
{
	memset(ts, 0, sizeof(*ts));
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

	char exports_text[4096] = "";
	size_t used = 0;
	for (unsigned i = 0; i < nexports; i++) {
		snprintf(ts->ts_export_path[i], sizeof(ts->ts_export_path[i]), "%s/exp%u", ts->ts_root, i);
		if (mkdir(ts->ts_export_path[i], 0777) != 0 || chmod(ts->ts_export_path[i], 0777) != 0) {
			printf("# mkdir %s: %s\n", ts->ts_export_path[i], strerror(errno));
			goto fail;
		}
		/* Substitute the path for the line's "%s" (done by hand: the line is not a
		 * compile-time format). */
		const char *hole = strstr(export_lines[i], "%s");
		if (hole == NULL) {
			printf("# export line without %%s: %s\n", export_lines[i]);
			goto fail;
		}
		int n = snprintf(exports_text + used, sizeof(exports_text) - used, "%.*s%s%s\n",
				 (int)(hole - export_lines[i]), export_lines[i], ts->ts_export_path[i],
				 hole + 2);
		if (n < 0 || (size_t)n >= sizeof(exports_text) - used) {
			printf("# exports text too long\n");
			goto fail;
		}
		used += (size_t)n;
	}
	ts->ts_nexports = nexports;

	char exports_path[320], state_path[320], ready_path[320];
	snprintf(exports_path, sizeof(exports_path), "%s/exports", ts->ts_root);
	snprintf(state_path, sizeof(state_path), "%s/state", ts->ts_root);
	snprintf(ready_path, sizeof(ready_path), "%s/ready", ts->ts_root);
	snprintf(ts->ts_log_path, sizeof(ts->ts_log_path), "%s/server.log", ts->ts_root);
	if (ts_write_file(exports_path, exports_text) != 0 || mkdir(state_path, 0700) != 0) {
		printf("# cannot write %s or create %s\n", exports_path, state_path);
		goto fail;
	}

	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		printf("# fork: %s\n", strerror(errno));
		goto fail;
	}
	if (pid == 0) {
		int logfd = open(ts->ts_log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
			close(logfd);
		}
		execl(bin, bin, "serve", "--exports", exports_path, "--state", state_path, "--port", "0",
		      "--no-portmap", "--listen", "127.0.0.1", "--ready-file", ready_path, (char *)NULL);
		_exit(127);
	}
	ts->ts_pid = pid;

	for (int waited_ms = 0; waited_ms < TS_READY_TIMEOUT_MS; waited_ms += 20) {
		if (ts_read_ready(ready_path, &ts->ts_port) == 0)
			return 0;
		if (!ts_alive(ts)) {
			printf("# server exited before becoming ready\n");
			ts_dump_log(ts, 30);
			goto fail;
		}
		ts_sleep_ms(20);
	}
	printf("# server did not write %s within %d ms\n", ready_path, TS_READY_TIMEOUT_MS);
	ts_dump_log(ts, 30);
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

int ts_stop(struct ts_server *ts)
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
