/* pool_statsock.c: the live status of a pool a process holds open, for `shale pool status`.
 *
 * The pool commands import a pool to work on it, and a pool that `shale serve` has open cannot be
 * imported again (its leaves are locked), so without help an administrator could not see the
 * live figures (cache hit rates, the log's group commits, the datasets being served) of exactly
 * the pools that matter. The holder therefore answers on a Unix socket next to the pool's leaves,
 * <dir>/.<pool>.status (mode 0600). A client sends one request line and shuts its writing side
 * down: "status" (or nothing) gets pool_status_print's text, "txgs" the history of the last txgs
 * (pool_txg_history_print), "scrub" starts the online scrub
 * (pool_scrub_start) and "scrub stop" cancels it, each answered with one line; "fs list" gets
 * pool_ds_list_print's table; "fs set", "fs create", "fs destroy" and "fs rename" (forms at
 * pool_statsock_fs_change) change the pool's file systems as `shale fs` does on a pool nobody
 * serves (durable before the answer; a property set is seen by the file system's next request;
 * a file system the server has open, being exported, is neither destroyed nor renamed), each
 * answered "ok" or "error: TEXT"; "fs diff FS@SNAP [FS@SNAP|FS]" gets "ok" and then zfs diff's
 * lines, made by the layer that knows the file systems (po_fs_diff: the pool only carries it),
 * or "error: TEXT"; anything else gets "error: unknown request". Then the
 * connection is closed. A request not complete within 2 s counts as "status". The socket path is
 * derived from the leaf directory and the pool name, so the command finds it from the same -d DIR
 * it uses to find the leaves. A change runs on this thread and waits for its txg: other clients
 * wait meanwhile.
 *
 * One thread per served pool, blocked in accept(2); pool_status_print takes the pool's locks only
 * to copy the figures, and the text is formatted in memory and then sent (MSG_NOSIGNAL: a reader
 * that hangs up is an error, not a SIGPIPE) with no lock held, so a client that does not read
 * stalls only this thread, and a send timeout bounds that. Stopping shuts the listening socket down, which
 * wakes accept, joins the thread and removes the socket file. A socket file left by a process
 * that died is replaced: bind fails with EADDRINUSE, and a socket nobody answers on is stale. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pool/pool_impl.h"

struct pool_statsock {
	struct pool *ss_pool;
	int ss_fd;
	pthread_t ss_thread;
	char ss_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

int pool_status_socket_path(const char *dir, const char *name, char *out, size_t cap)
{
	int n = snprintf(out, cap, "%s/.%s.status", dir, name);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

static int pool_statsock_addr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memcpy(sa->sun_path, path, strlen(path) + 1);
	return 0;
}

static int pool_statsock_send(int fd, const char *text, size_t len)
{
	for (size_t sent = 0; sent < len;) {
		ssize_t n = send(fd, text + sent, len - sent, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		sent += (size_t)n;
	}
	return 0;
}

/* The status text, as the holder's. */
static int pool_statsock_print_status(struct pool *p, void *arg, FILE *out)
{
	(void)arg;
	fprintf(out, "(live: from the process serving the pool, pid %ld)\n", (long)getpid());
	return pool_status_print(p, out);
}

/* The txg history (`shale pool txgs`). */
static int pool_statsock_print_txgs(struct pool *p, void *arg, FILE *out)
{
	(void)arg;
	return pool_txg_history_print(p, out);
}

/* The request line (up to its newline, the end of the client's writing, or the timeout). Read a
 * byte at a time: what follows the newline ("receive"'s stream) stays in the socket. */
static void pool_statsock_read_request(int fd, char *req, size_t cap)
{
	size_t len = 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (len + 1 < cap) {
		/* the 2 s are for the whole line, however slowly its bytes come */
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 2)
			break;
		ssize_t n = recv(fd, req + len, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || req[len] == '\n')
			break;
		len++;
	}
	req[len] = '\0';
	req[strcspn(req, "\r\n")] = '\0';
}

/* Sends to fd the text print writes: formatted in memory first, then sent with MSG_NOSIGNAL, so a
 * reader that hung up costs an error, not the process (a SIGPIPE). A print that fails is
 * answered "error: TEXT". */
static int pool_statsock_print_answer(struct pool_statsock *ss, int fd,
				      int (*print)(struct pool *p, void *arg, FILE *out), void *arg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	if (!out)
		return -ENOMEM;
	int rc = print(ss->ss_pool, arg, out);
	if (fclose(out) != 0 && rc == 0)
		rc = -ENOMEM;
	if (rc != 0) {
		free(text);
		char line[128];
		snprintf(line, sizeof(line), "error: %s\n", sh_strerror(rc));
		return pool_statsock_send(fd, line, strlen(line));
	}
	rc = pool_statsock_send(fd, text, len);
	free(text); /* open_memstream's buffer comes from malloc */
	return rc;
}

/* A decimal count from a request, or -EINVAL. */
static int pool_statsock_u64(const char *text, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || text[0] == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

/* One "fs ..." change (req: what follows "fs "): "set FS quota BYTES", "set FS compression
 * off|lz4|zstd", "set FS snapdir hidden|visible", "create FS RECORD_BYTES
 * default|off|lz4|zstd" (0: the pool's record size),
 * "destroy FS" (the name goes at once, the blocks are freed in the background) or "rename FS
 * NEW". Returns 0 or a negative errno, -EINVAL for a request that does not parse. fs receives
 * the file system's name. */
static int pool_statsock_fs_change(struct pool_statsock *ss, const char *req,
				   char fs[POOL_DS_NAME_MAX + 2])
{
	char verb[8], a[POOL_DS_NAME_MAX + 2], b[24], extra;
	a[0] = b[0] = '\0';
	int n = sscanf(req, "%7s %65s %65s %23s %c", verb, fs, a, b, &extra);
	struct pool *p = ss->ss_pool;
	if (n == 4 && strcmp(verb, "set") == 0 && strcmp(a, "quota") == 0) {
		uint64_t bytes;
		int rc = pool_statsock_u64(b, &bytes);
		return rc != 0 ? rc : pool_ds_set_quota(p, fs, bytes);
	}
	if (n == 4 && strcmp(verb, "set") == 0 && strcmp(a, "snapdir") == 0) {
		bool visible = strcmp(b, "visible") == 0;
		return visible || strcmp(b, "hidden") == 0 ? pool_ds_set_snapdir(p, fs, visible)
		                                           : -EINVAL;
	}
	if (n == 4 && strcmp(verb, "set") == 0 && strcmp(a, "compression") == 0) {
		int c = pool_compress_from_name(b, false);
		return c < 0 ? -EINVAL : pool_ds_set_compress(p, fs, (enum pool_compress)c);
	}
	if (n == 4 && strcmp(verb, "create") == 0) {
		uint64_t record;
		int c = pool_compress_from_name(b, true);
		if (pool_statsock_u64(a, &record) != 0 || record > UINT32_MAX || c < 0)
			return -EINVAL;
		struct pool_ds_props props = {.dp_record_bytes = (uint32_t)record,
					      .dp_compress = (enum pool_compress)c};
		return pool_ds_create(p, fs, &props);
	}
	if (n == 2 && strcmp(verb, "destroy") == 0)
		return pool_ds_destroy_start(p, fs, false);
	if (n == 3 && strcmp(verb, "rename") == 0)
		return pool_ds_rename(p, fs, a);
	return -EINVAL;
}

/* The answer to an "fs ..." change (req: what follows "fs "): "ok", or "error: TEXT" (into
 * line). */
static const char *pool_statsock_fs_answer(struct pool_statsock *ss, const char *req,
					   const char *fs, int rc, char *line, size_t cap)
{
	const char *pool = pool_name(ss->ss_pool);
	switch (rc) {
	case 0: return "ok\n";
	case -EINVAL:
		return "error: the request does not parse, or names no valid file system or "
		       "property\n";
	case -ENOENT:
		snprintf(line, cap, "error: pool %s has no file system %s\n", pool, fs);
		break;
	case -EEXIST: snprintf(line, cap, "error: %s/%s exists\n", pool, fs); break;
	case -ENOTEMPTY:
		snprintf(line, cap,
			 "error: %s/%s has snapshots: destroy them first (shale snapshot list "
			 "%s/%s)\n",
			 pool, fs, pool, fs);
		break;
	case -ENOSPC:
		if (strncmp(req, "set ", 4) == 0)
			snprintf(line, cap, "error: the quota is less than what %s/%s holds now\n",
				 pool, fs);
		else
			snprintf(line, cap, "error: pool %s is full\n", pool);
		break;
	case -EBUSY:
		snprintf(line, cap,
			 "error: %s/%s is in use (exported, or being destroyed): take it out of "
			 "the exports and reload them first (SIGHUP)\n",
			 pool, fs);
		break;
	default: snprintf(line, cap, "error: %s\n", sh_strerror(rc)); break;
	}
	return line;
}

/* The most a request line holds: a snapshot request names up to POOL_SNAP_BATCH_MAX snapshots. */
#define POOL_STATSOCK_REQUEST_MAX (64u * (POOL_SNAP_FULL_MAX + 1u) + 64u)

/* What "fs list [-t filesystem|snapshot|all] [exact]" and "snapshot list [FS] [exact]" print. */
struct pool_statsock_list {
	bool sl_snapshot_table; /* snapshot list's table, else fs list's */
	const char *sl_fs;      /* snapshot list: NULL for every file system */
	enum pool_list_types sl_types;
	bool sl_exact;
};

static int pool_statsock_print_list(struct pool *p, void *arg, FILE *out)
{
	const struct pool_statsock_list *sl = arg;
	if (sl->sl_snapshot_table)
		return pool_snapshot_list_print(p, sl->sl_fs, sl->sl_exact, out);
	return pool_ds_list_print_types(p, sl->sl_types, out);
}

/* The list request's arguments (words after the verb) into sl; fs receives FS's name. -EINVAL
 * for one it does not know. */
static int pool_statsock_list_args(char *words, struct pool_statsock_list *sl,
                                   char fs[POOL_DS_NAME_MAX + 2])
{
	char *save = NULL;
	for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		if (strcmp(w, "exact") == 0) {
			sl->sl_exact = true;
		} else if (strcmp(w, "-t") == 0) {
			const char *t = strtok_r(NULL, " ", &save);
			int types = t ? pool_list_types_from_name(t) : -1;
			if (types < 0)
				return -EINVAL;
			sl->sl_types = (enum pool_list_types)types;
		} else if (!sl->sl_fs && strlen(w) <= POOL_DS_NAME_MAX) {
			strcpy(fs, w);
			sl->sl_fs = fs;
		} else {
			return -EINVAL;
		}
	}
	return 0;
}

/* A change's answer, "ok" or "error: TEXT" (err, else rc's meaning), logged and sent. */
static int pool_statsock_change_answer(struct pool_statsock *ss, int fd, const char *req, int rc,
                                       const char *err)
{
	char line[512];
	if (rc == 0 || !err[0])
		err = rc == 0 ? "done" : sh_strerror(rc);
	log_info("pool %s: %s: %s", pool_name(ss->ss_pool), req, err);
	if (rc == 0)
		snprintf(line, sizeof(line), "ok\n");
	else
		snprintf(line, sizeof(line), "error: %s\n", err);
	return pool_statsock_send(fd, line, strlen(line));
}

/* "snapshot create FS@NAME..." or "snapshot destroy FS@NAME": "ok" or "error: TEXT" into line. */
static const char *pool_statsock_snapshot(struct pool_statsock *ss, char *args, char *line,
                                          size_t cap)
{
	struct pool *p = ss->ss_pool;
	const char *names[POOL_SNAP_BATCH_MAX + 1];
	unsigned n = 0;
	bool create = strncmp(args, "create ", 7) == 0, destroy = strncmp(args, "destroy ", 8) == 0;
	char *save = NULL;
	for (char *tok = strtok_r(args + (create ? 7 : 8), " ", &save); tok && n <= POOL_SNAP_BATCH_MAX;
	     tok = strtok_r(NULL, " ", &save))
		names[n++] = tok;
	char err[256] = "";
	int rc;
	if ((!create && !destroy) || n == 0 || (destroy && n != 1))
		rc = -EINVAL, snprintf(err, sizeof(err), "the request does not parse");
	else if (create)
		rc = pool_snapshot_create(p, names, n, err, sizeof(err));
	else
		rc = pool_snapshot_destroy(p, names[0], err, sizeof(err));
	log_info("pool %s: snapshot %s: %s", pool_name(p), create ? "create" : "destroy",
	         rc == 0 ? "done" : err);
	if (rc == 0)
		return "ok\n";
	snprintf(line, cap, "error: %s\n", err[0] ? err : sh_strerror(rc));
	return line;
}

/* "fs diff FROM [TO]" (args: what follows "fs diff "): "ok" then the differences, from the
 * holder's po_fs_diff, or "error: TEXT". The answer is made whole before it is sent: a failure
 * half-way is an error, never a short list. */
static int pool_statsock_fs_diff(struct pool_statsock *ss, int fd, const char *args)
{
	char from[POOL_SNAP_FULL_MAX + 2], to[POOL_SNAP_FULL_MAX + 2], err[512] = "", x;
	pool_fs_diff_fn diff = ss->ss_pool->p_opts.po_fs_diff;
	int n = sscanf(args, "%130s %130s %c", from, to, &x);
	char *text = NULL;
	size_t len = 0;
	FILE *out = NULL;
	int rc = 0;
	if (!diff)
		rc = -ENOTSUP, snprintf(err, sizeof(err), "this process does not compare file systems");
	else if (n != 1 && n != 2)
		rc = -EINVAL, snprintf(err, sizeof(err), "the request does not parse");
	else if (!(out = open_memstream(&text, &len)))
		rc = -ENOMEM;
	if (out) {
		fputs("ok\n", out);
		rc = diff(ss->ss_pool, from, n == 2 ? to : NULL, out, err, sizeof(err));
		if (fclose(out) != 0 && rc == 0)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = pool_statsock_send(fd, text, len);
	else
		rc = pool_statsock_change_answer(ss, fd, "fs diff", rc, err);
	free(text); /* open_memstream's buffer comes from malloc */
	return rc;
}

/* A stream's reader or writer may be slow (a pipe, a network): the socket waits this long. */
#define POOL_STATSOCK_STREAM_WAIT_S 600

static void pool_statsock_stream_timeouts(int fd)
{
	struct timeval tv = {.tv_sec = POOL_STATSOCK_STREAM_WAIT_S};
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* "send [-c] FS@SNAP [FROM]": the stream itself, or, when nothing of it was written, "error:
 * TEXT". A failure part way leaves the stream without its last record, which the command
 * notices. -c: compressed blocks as stored. */
static int pool_statsock_send_stream(struct pool_statsock *ss, int fd, const char *args)
{
	char snapshot[POOL_SNAP_FULL_MAX + 2], from[POOL_SNAP_FULL_MAX + 2], err[512] = "", x;
	pool_fs_send_fn send_fn = ss->ss_pool->p_opts.po_fs_send;
	bool stored = strncmp(args, "-c ", 3) == 0;
	int n = sscanf(stored ? args + 3 : args, "%130s %130s %c", snapshot, from, &x);
	uint64_t written = 0;
	int rc;
	if (!send_fn) {
		rc = -ENOTSUP;
		snprintf(err, sizeof(err), "this process does not send streams");
	} else if (n != 1 && n != 2) {
		rc = -EINVAL;
		snprintf(err, sizeof(err), "the request does not parse");
	} else {
		pool_statsock_stream_timeouts(fd);
		rc = send_fn(ss->ss_pool, snapshot, n == 2 ? from : NULL, stored, fd, &written,
		             err, sizeof(err));
	}
	log_info("pool %s: send %s: %s", pool_name(ss->ss_pool), args, rc == 0 ? "done" : err);
	if (rc == 0 || written > 0)
		return rc;
	return pool_statsock_change_answer(ss, fd, "send", rc, err);
}

/* "receive FS [-F]" followed by the stream: "ok" once it is received, or "error: TEXT". */
static int pool_statsock_receive_stream(struct pool_statsock *ss, int fd, const char *args)
{
	char fs[POOL_DS_NAME_MAX + 2], flag[8] = "", err[512] = "", x;
	pool_fs_receive_fn recv_fn = ss->ss_pool->p_opts.po_fs_receive;
	int n = sscanf(args, "%65s %7s %c", fs, flag, &x);
	int rc;
	if (!recv_fn) {
		rc = -ENOTSUP;
		snprintf(err, sizeof(err), "this process does not receive streams");
	} else if (n != 1 && !(n == 2 && strcmp(flag, "-F") == 0)) {
		rc = -EINVAL;
		snprintf(err, sizeof(err), "the request does not parse");
	} else {
		pool_statsock_stream_timeouts(fd);
		rc = recv_fn(ss->ss_pool, fs, n == 2, fd, err, sizeof(err));
	}
	return pool_statsock_change_answer(ss, fd, "receive", rc, err);
}

static int pool_statsock_serve_request(struct pool_statsock *ss, int fd, char *req);

static int pool_statsock_serve(struct pool_statsock *ss, int fd)
{
	char *req = mem_alloc(POOL_STATSOCK_REQUEST_MAX);
	if (!req)
		return -ENOMEM;
	int rc = pool_statsock_serve_request(ss, fd, req);
	mem_free(req);
	return rc;
}

static int pool_statsock_serve_request(struct pool_statsock *ss, int fd, char *req)
{
	pool_statsock_read_request(fd, req, POOL_STATSOCK_REQUEST_MAX);
	const char *answer = NULL;
	char line[512];
	bool fs_list = strcmp(req, "fs list") == 0 || strncmp(req, "fs list ", 8) == 0;
	bool snap_list = strcmp(req, "snapshot list") == 0 || strncmp(req, "snapshot list ", 14) == 0;
	if (fs_list || snap_list) {
		char fs[POOL_DS_NAME_MAX + 2] = "";
		struct pool_statsock_list sl = {.sl_snapshot_table = snap_list,
		                                .sl_types = POOL_LIST_FILESYSTEMS};
		if (pool_statsock_list_args(req + (fs_list ? 7 : 13), &sl, fs) != 0) {
			answer = "error: the request does not parse\n";
			return pool_statsock_send(fd, answer, strlen(answer));
		}
		return pool_statsock_print_answer(ss, fd, pool_statsock_print_list, &sl);
	}
	if (strncmp(req, "fs clone ", 9) == 0) {
		char snapshot[POOL_SNAP_FULL_MAX + 2], name[POOL_DS_NAME_MAX + 2], err[256] = "", x;
		int rc = sscanf(req + 9, "%130s %65s %c", snapshot, name, &x) == 2
		             ? pool_fs_clone(ss->ss_pool, snapshot, name, err, sizeof(err))
		             : -EINVAL;
		return pool_statsock_change_answer(ss, fd, req, rc, err);
	}
	if (strcmp(req, "txgs") == 0)
		return pool_statsock_print_answer(ss, fd, pool_statsock_print_txgs, NULL);
	if (strncmp(req, "fs diff ", 8) == 0)
		return pool_statsock_fs_diff(ss, fd, req + 8);
	if (strncmp(req, "send ", 5) == 0)
		return pool_statsock_send_stream(ss, fd, req + 5);
	if (strncmp(req, "receive ", 8) == 0)
		return pool_statsock_receive_stream(ss, fd, req + 8);
	if (strncmp(req, "fs promote ", 11) == 0) {
		char fs[POOL_DS_NAME_MAX + 2], err[256] = "", x;
		int rc = sscanf(req + 11, "%65s %c", fs, &x) == 1
		             ? pool_fs_promote(ss->ss_pool, fs, err, sizeof(err))
		             : -EINVAL;
		return pool_statsock_change_answer(ss, fd, req, rc, err);
	}
	if (strncmp(req, "fs rollback ", 12) == 0) {
		char snapshot[POOL_SNAP_FULL_MAX + 2], err[256] = "", x;
		const char *args = req + 12;
		bool later = strncmp(args, "-r ", 3) == 0;
		int rc = sscanf(args + (later ? 3 : 0), "%130s %c", snapshot, &x) == 1
		             ? pool_fs_rollback(ss->ss_pool, snapshot, later, err, sizeof(err))
		             : -EINVAL;
		return pool_statsock_change_answer(ss, fd, req, rc, err);
	}
	if (strncmp(req, "snapshot ", 9) == 0) {
		answer = pool_statsock_snapshot(ss, req + 9, line, sizeof(line));
		return pool_statsock_send(fd, answer, strlen(answer));
	}
	if (strncmp(req, "fs ", 3) == 0) {
		char fs[POOL_DS_NAME_MAX + 2] = "";
		int rc = pool_statsock_fs_change(ss, req + 3, fs);
		answer = pool_statsock_fs_answer(ss, req + 3, fs, rc, line, sizeof(line));
		log_info("pool %s: %s: %s", pool_name(ss->ss_pool), req,
			 rc == 0 ? "done" : sh_strerror(rc));
	} else if (strcmp(req, "scrub") == 0) {
		int rc = pool_scrub_start(ss->ss_pool, NULL);
		answer = rc == 0              ? "scrub started\n"
		         : rc == -EALREADY    ? "a scrub is already running\n"
		                              : "the scrub could not start\n";
	} else if (strcmp(req, "scrub stop") == 0) {
		answer = pool_scrub_cancel(ss->ss_pool) == 0 ? "scrub stopping\n"
		                                             : "no scrub is running\n";
	} else if (req[0] != '\0' && strcmp(req, "status") != 0) {
		answer = "error: unknown request\n";
	}
	if (answer)
		return pool_statsock_send(fd, answer, strlen(answer));
	return pool_statsock_print_answer(ss, fd, pool_statsock_print_status, NULL);
}

static void *pool_statsock_main(void *arg)
{
	struct pool_statsock *ss = arg;
	sh_thread_setup("shale-status", SH_THREAD_BACKGROUND);
	for (;;) {
		int fd = accept4(ss->ss_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break; /* shut down (EINVAL) or broken: stop serving */
		}
		struct timeval tv = {.tv_sec = 5}, rtv = {.tv_sec = 2};
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rtv, sizeof(rtv));
		if (pool_statsock_serve(ss, fd) != 0)
			log_debug("pool %s: a status reader went away", pool_name(ss->ss_pool));
		close(fd);
	}
	return NULL;
}

/* Whether a live process answers on path. */
static bool pool_statsock_alive(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool alive = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0;
	close(fd);
	return alive;
}

int pool_status_serve_start(struct pool *p, const char *dir, struct pool_statsock **out)
{
	*out = NULL;
	struct pool_statsock *ss = mem_zalloc(sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	ss->ss_pool = p;
	struct sockaddr_un sa;
	int rc = pool_status_socket_path(dir, pool_name(p), ss->ss_path, sizeof(ss->ss_path));
	if (rc == 0)
		rc = pool_statsock_addr(ss->ss_path, &sa);
	if (rc != 0) {
		mem_free(ss);
		return rc;
	}
	ss->ss_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ss->ss_fd < 0) {
		rc = -errno;
		mem_free(ss);
		return rc;
	}
	rc = bind(ss->ss_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	if (rc == -EADDRINUSE && !pool_statsock_alive(&sa)) {
		(void)unlink(ss->ss_path); /* left by a process that died */
		rc = bind(ss->ss_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	}
	if (rc == 0 && chmod(ss->ss_path, 0600) < 0)
		rc = -errno;
	if (rc == 0 && listen(ss->ss_fd, 8) < 0)
		rc = -errno;
	if (rc == 0) {
		rc = -pthread_create(&ss->ss_thread, NULL, pool_statsock_main, ss);
		if (rc != 0)
			(void)unlink(ss->ss_path);
	}
	if (rc != 0) {
		close(ss->ss_fd);
		mem_free(ss);
		return rc;
	}
	*out = ss;
	return 0;
}

void pool_status_serve_stop(struct pool_statsock *ss)
{
	if (!ss)
		return;
	(void)shutdown(ss->ss_fd, SHUT_RDWR);
	VERIFY(pthread_join(ss->ss_thread, NULL) == 0);
	close(ss->ss_fd);
	(void)unlink(ss->ss_path);
	mem_free(ss);
}

int pool_status_remote(const char *dir, const char *name, FILE *out)
{
	return pool_statsock_request(dir, name, "status", out);
}

int pool_statsock_request(const char *dir, const char *name, const char *request, FILE *out)
{
	return pool_statsock_request_wait(dir, name, request, POOL_STATSOCK_WAIT_S, out);
}

int pool_statsock_connect(const char *dir, const char *name, int *fd_out)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct sockaddr_un sa;
	*fd_out = -1;
	int rc = pool_status_socket_path(dir, name, path, sizeof(path));
	if (rc == 0)
		rc = pool_statsock_addr(path, &sa);
	if (rc != 0)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

int pool_statsock_request_wait(const char *dir, const char *name, const char *request,
                               unsigned wait_s, FILE *out)
{
	int fd;
	int rc = pool_statsock_connect(dir, name, &fd);
	if (rc != 0)
		return rc;
	struct timeval tv = {.tv_sec = wait_s};
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/* as long as the request is ("fs diff" names two snapshots of up to POOL_SNAP_FULL_MAX) */
	size_t line_cap = strlen(request) + 2;
	char *line = mem_alloc(line_cap);
	if (!line) {
		close(fd);
		return -ENOMEM;
	}
	int n_line = snprintf(line, line_cap, "%s\n", request);
	bool sent = n_line > 0 && send(fd, line, (size_t)n_line, MSG_NOSIGNAL) == n_line;
	mem_free(line);
	if (!sent) {
		close(fd);
		return -EIO;
	}
	(void)shutdown(fd, SHUT_WR);
	char buf[4096];
	size_t total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		if (fwrite(buf, 1, (size_t)n, out) != (size_t)n) {
			rc = -EIO;
			break;
		}
		total += (size_t)n;
	}
	close(fd);
	if (rc == 0 && total == 0)
		rc = -ECONNRESET; /* the holder closed without answering */
	return rc;
}
