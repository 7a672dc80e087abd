/* shale_send.c: `shale send` and `shale receive`, replication between pools, in the manner of
 * zfs send and zfs receive (the stream and what a receive promises: src/poolfs/pool_fs_send.c).
 *
 *   shale send [-c] POOL/FS@SNAP [-i @BASE | -i POOL/FS@BASE] [-d DIR]   the stream to stdout
 *                                   (-c: compressed blocks as stored, zfs send -c)
 *   shale receive [-F] POOL/FS [-d DIR]                            a stream from stdin
 *
 * A pool a server holds is asked through its status socket, the stream flowing over it (the
 * server reads or writes the pool); a pool nobody holds is imported, used and exported. stdout
 * must not be a terminal for send. The stream of a served pool is checked to end with its last
 * record, so a send the server could not finish fails here too. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "poolfs/pool_fs.h"
#include "shale_pool.h"

/* The last record of every stream (pool_fs_send.c's END): 16 header, 24 payload, 8 sum. */
#define SEND_END_BYTES 48u
#define SEND_COPY_BYTES (256u * 1024u)

static void send_cmd_usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"  shale send [-c] POOL/FS@SNAP [-i @BASE] [-d DIR] > STREAM    the snapshot whole, or\n"
		"      with -i what changed since BASE (an older snapshot of the same file system);\n"
		"      -c: compressed blocks as stored (a receiver that compresses alike writes them\n"
		"      as they come)\n"
		"  shale receive [-F] POOL/FS [-d DIR] < STREAM     a full stream makes POOL/FS; an\n"
		"      incremental one needs POOL/FS at the stream's base, unchanged since (-F rolls it\n"
		"      back there first, destroying later snapshots); all or nothing\n"
		"  DIR holds the pool's leaves (default " POOL_CMD_DEFAULT_DIR ")\n");
}

/* POOL/REST into pool and *rest; false when it does not say so. */
static bool send_split_pool(const char *target, char *pool, const char **rest)
{
	const char *slash = strchr(target, '/');
	if (!slash || slash == target || (size_t)(slash - target) > POOL_NAME_MAX || !slash[1])
		return false;
	memcpy(pool, target, (size_t)(slash - target));
	pool[slash - target] = '\0';
	*rest = slash + 1;
	return true;
}

/* Whether the last SEND_END_BYTES of a stream are its END record, whole. */
static bool send_tail_is_end(const uint8_t *tail, size_t n)
{
	static const uint8_t magic[4] = {'S', 'H', 'R', 'S'};
	return n == SEND_END_BYTES && memcmp(tail, magic, 4) == 0 && tail[4] == 4 && tail[5] == 0 &&
	       tail[12] == 24 && tail[13] == 0 && tail[14] == 0 && tail[15] == 0;
}

/* The stream of a served pool, copied from fd to stdout. Returns the exit status. */
static int send_copy_out(const char *cmd, int fd)
{
	uint8_t *buf = malloc(SEND_COPY_BYTES);
	uint8_t tail[SEND_END_BYTES];
	size_t tail_n = 0, total = 0;
	if (!buf)
		return 1;
	int status = 0;
	for (;;) {
		ssize_t n = read(fd, buf, SEND_COPY_BYTES);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "%s: reading from the server: %s\n", cmd, strerror(errno));
			status = 1;
			break;
		}
		if (n == 0)
			break;
		if (total == 0 && n >= 7 && memcmp(buf, "error: ", 7) == 0) {
			fprintf(stderr, "%s: %.*s", cmd, (int)(n - 7), (const char *)buf + 7);
			status = 1;
			break;
		}
		if (sh_write_all(STDOUT_FILENO, buf, (size_t)n) != 0) {
			fprintf(stderr, "%s: writing the stream: %s\n", cmd, strerror(errno));
			status = 1;
			break;
		}
		total += (size_t)n;
		/* keep the last SEND_END_BYTES seen */
		size_t take = SH_MIN((size_t)n, (size_t)SEND_END_BYTES);
		size_t keep = SH_MIN(tail_n, SEND_END_BYTES - take);
		memmove(tail, tail + tail_n - keep, keep);
		memcpy(tail + keep, buf + n - take, take);
		tail_n = keep + take;
	}
	free(buf);
	if (status == 0 && !send_tail_is_end(tail, tail_n)) {
		fprintf(stderr, "%s: the stream was cut off (the server's log says why)\n", cmd);
		status = 1;
	}
	return status;
}

/* Both commands' options: -d DIR, and send's -i BASE and -c or receive's -F (spec says which;
 * -c and -F set *flag). Returns -1 to go on (optind at the operands), else the exit status
 * (help, a usage error). */
static int send_cmd_options(int argc, char **argv, const char *spec, const char **dir,
                            const char **from, bool *flag)
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	*dir = POOL_CMD_DEFAULT_DIR;
	optind = 1;
	int opt;
	while ((opt = getopt_long(argc, argv, spec, longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': *dir = optarg; break;
		case 'i': *from = optarg; break;
		case 'c':
		case 'F': *flag = true; break;
		case 'h': send_cmd_usage(stdout); return 0;
		default: send_cmd_usage(stderr); return 2;
		}
	}
	return -1;
}

/* A send (so_snapshot set) or a receive (so_fs) on a pool nobody serves. */
struct send_offline {
	const char *so_snapshot, *so_from; /* send */
	bool so_stored;                    /* send -c */
	const char *so_fs;                 /* receive */
	bool so_force;
};

/* Imports pool, sends to stdout or receives from stdin, exports it; done (may be NULL) is
 * printed on success. Returns the exit status. */
static int send_offline_run(const char *cmd, const char *dir, const char *pool,
                            const struct send_offline *so, const char *done)
{
	struct pool *p = NULL;
	if (shale_cmd_import(cmd, dir, pool, false, &p) < 0)
		return 1;
	char err[512] = "";
	int rc;
	if (so->so_snapshot) {
		struct pool_fs_send_stats st;
		rc = pool_fs_send(p, so->so_snapshot, so->so_from,
		                  so->so_stored ? POOL_FS_SEND_STORED : 0, STDOUT_FILENO, &st, err,
		                  sizeof(err));
	} else {
		struct pool_fs_recv_stats st;
		rc = pool_fs_receive(p, so->so_fs, so->so_force, STDIN_FILENO, &st, err, sizeof(err));
	}
	int status = 0;
	if (rc != 0) {
		fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
		status = 1;
	} else if (done) {
		fputs(done, stdout);
	}
	if (shale_cmd_export(cmd, p) < 0)
		status = 1;
	return status;
}

int shale_send_main(int argc, char **argv)
{
	const char *cmd = "shale send", *dir, *from = NULL;
	bool stored = false;
	int status = send_cmd_options(argc, argv, "cd:i:h", &dir, &from, &stored);
	if (status >= 0)
		return status;
	char pool[POOL_NAME_MAX + 1], from_pool[POOL_NAME_MAX + 1];
	const char *snapshot, *from_rest;
	if (optind + 1 != argc || !send_split_pool(argv[optind], pool, &snapshot) ||
	    !strchr(snapshot, '@')) {
		send_cmd_usage(stderr);
		return 2;
	}
	if (from && from[0] != '@') {
		if (!send_split_pool(from, from_pool, &from_rest) || strcmp(from_pool, pool) != 0) {
			fprintf(stderr, "%s: -i names a snapshot of the same file system\n", cmd);
			return 2;
		}
		from = from_rest;
	}
	if (isatty(STDOUT_FILENO)) {
		fprintf(stderr, "%s: the stream is binary: redirect it to a file or a pipe\n", cmd);
		return 2;
	}
	int fd;
	if (pool_statsock_connect(dir, pool, &fd) == 0) {
		char request[2 * POOL_SNAP_FULL_MAX + 32];
		int n = snprintf(request, sizeof(request), "send %s%s%s%s\n", stored ? "-c " : "",
		                 snapshot, from ? " " : "", from ? from : "");
		status = 1;
		if (n > 0 && sh_write_all(fd, request, (size_t)n) == 0) {
			(void)shutdown(fd, SHUT_WR);
			status = send_copy_out(cmd, fd);
		} else {
			fprintf(stderr, "%s: the server did not take the request\n", cmd);
		}
		close(fd);
		return status;
	}
	struct send_offline so = {.so_snapshot = snapshot, .so_from = from, .so_stored = stored};
	return send_offline_run(cmd, dir, pool, &so, NULL);
}

/* stdin's stream to the server holding the pool, then its answer. Returns the exit status. */
static int receive_remote(const char *cmd, int fd, const char *fs, bool force, const char *done)
{
	char line[POOL_DS_NAME_MAX + 32];
	int n = snprintf(line, sizeof(line), "receive %s%s\n", fs, force ? " -F" : "");
	int rc = n > 0 ? sh_write_all(fd, line, (size_t)n) : -EINVAL;
	uint8_t *buf = malloc(SEND_COPY_BYTES);
	while (rc == 0 && buf) {
		ssize_t got = read(STDIN_FILENO, buf, SEND_COPY_BYTES);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			rc = got < 0 ? -errno : 0;
			break;
		}
		/* the server stops reading when it refuses the stream: its answer says why */
		if (send(fd, buf, (size_t)got, MSG_NOSIGNAL) != got)
			break;
	}
	free(buf);
	(void)shutdown(fd, SHUT_WR);
	char answer[1024];
	size_t len = 0;
	for (;;) {
		ssize_t got = read(fd, answer + len, sizeof(answer) - 1 - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || (len += (size_t)got) == sizeof(answer) - 1)
			break;
	}
	answer[len] = '\0';
	if (strncmp(answer, "ok\n", 3) == 0) {
		fputs(done, stdout);
		return 0;
	}
	if (strncmp(answer, "error: ", 7) == 0)
		fprintf(stderr, "%s: %s", cmd, answer + 7);
	else
		fprintf(stderr, "%s: no answer from the server%s%s\n", cmd, rc ? ": " : "",
		        rc ? sh_strerror(rc) : "");
	return 1;
}

int shale_receive_main(int argc, char **argv)
{
	const char *cmd = "shale receive", *dir, *unused = NULL;
	bool force = false;
	int status = send_cmd_options(argc, argv, "d:Fh", &dir, &unused, &force);
	if (status >= 0)
		return status;
	char pool[POOL_NAME_MAX + 1];
	const char *fs;
	if (optind + 1 != argc || !send_split_pool(argv[optind], pool, &fs) || strchr(fs, '@')) {
		send_cmd_usage(stderr);
		return 2;
	}
	char done[POOL_NAME_MAX + POOL_DS_NAME_MAX + 32];
	snprintf(done, sizeof(done), "received %s/%s\n", pool, fs);
	int fd;
	if (pool_statsock_connect(dir, pool, &fd) == 0) {
		status = receive_remote(cmd, fd, fs, force, done);
		close(fd);
		return status;
	}
	struct send_offline so = {.so_fs = fs, .so_force = force};
	return send_offline_run(cmd, dir, pool, &so, done);
}
