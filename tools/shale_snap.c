/* shale_snap.c: `shale snapshot`, the snapshot verbs of the storage pool, in the manner of
 * zfs snapshot, zfs list -t snapshot and zfs destroy of a snapshot.
 *
 *   shale snapshot create POOL/FS@NAME... [-d DIR]   taken together, in one txg (all or none)
 *   shale snapshot list [POOL[/FS]] [-p] [-d DIR]     NAME, USED, REFER, CREATION
 *   shale snapshot destroy POOL/FS@NAME [-d DIR]
 *
 * and the file-system verbs made of snapshots: shale fs clone, shale fs rollback, shale fs
 * promote and shale fs diff POOL/FS@SNAP [POOL/FS@LATER | POOL/FS] (zfs diff: pool_fs_diff
 * prints the lines).
 *
 * As `shale fs`: a pool a server holds is asked through its status socket (pool_statsock.c),
 * and the server makes the change on the live pool; a pool nobody holds is imported, changed and
 * exported. Every name of one create is in one pool. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolfs/pool_fs.h"
#include "shale_pool.h"

static void snap_cmd_usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"  shale snapshot create POOL/FS@NAME... [-d DIR]   several at once are taken in\n"
		"      the same txg; NAME: 1 to %u of A-Z a-z 0-9 _ . : -\n"
		"  shale snapshot list [POOL[/FS]] [-p] [-d DIR]    USED: what only it holds (what its\n"
		"      destroy frees); REFER: what it references; -p: exact bytes and seconds\n"
		"  shale snapshot destroy POOL/FS@NAME [-d DIR]     refused while a clone depends on it\n"
		"  DIR holds the pool's leaves (default " POOL_CMD_DEFAULT_DIR ")\n",
		POOL_SNAP_NAME_MAX);
}

/* POOL/REST into pool (POOL_NAME_MAX + 1 bytes) and *rest; false when it does not say so. */
static bool snap_cmd_split_pool(const char *target, char *pool, const char **rest)
{
	const char *slash = strchr(target, '/');
	if (!slash || slash == target || (size_t)(slash - target) > POOL_NAME_MAX ||
	    slash[1] == '\0')
		return false;
	memcpy(pool, target, (size_t)(slash - target));
	pool[slash - target] = '\0';
	*rest = slash + 1;
	return true;
}

/* What a change did (done) or why it failed; returns the exit status. */
static int snap_cmd_outcome(const char *cmd, int rc, const char *err, const char *done)
{
	if (rc == 0) {
		fputs(done, stdout);
		return 0;
	}
	fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
	return 1;
}

/* create and destroy: the names, all POOL/FS@NAME of one pool. */
static int snap_cmd_change(bool create, const char *dir, int n, char **targets)
{
	const char *cmd = create ? "shale snapshot create" : "shale snapshot destroy";
	if (n < 1 || n > (int)POOL_SNAP_BATCH_MAX || (!create && n != 1)) {
		snap_cmd_usage(stderr);
		return 2;
	}
	char pool[POOL_NAME_MAX + 1] = "";
	const char *names[POOL_SNAP_BATCH_MAX];
	size_t request_len = 32, done_len = 0;
	for (int i = 0; i < n; i++) {
		char this_pool[POOL_NAME_MAX + 1], fs[POOL_DS_NAME_MAX + 1],
		    snap[POOL_SNAP_NAME_MAX + 1];
		if (!snap_cmd_split_pool(targets[i], this_pool, &names[i]) ||
		    pool_snap_name_split(names[i], fs, snap) != 0) {
			fprintf(stderr,
				"%s: '%s' is not POOL/FS@NAME (NAME: 1 to %u of A-Z a-z 0-9 _ . : -)\n",
				cmd, targets[i], POOL_SNAP_NAME_MAX);
			return 2;
		}
		if (i > 0 && strcmp(pool, this_pool) != 0) {
			fprintf(stderr, "%s: every snapshot of one command is in one pool\n", cmd);
			return 2;
		}
		strcpy(pool, this_pool);
		request_len += strlen(names[i]) + 1;
		done_len += strlen(targets[i]) + 16;
	}
	/* a served pool: its server takes them */
	char *request = mem_alloc(request_len), *done = mem_alloc(done_len);
	if (!request || !done) {
		mem_free(request);
		mem_free(done);
		fprintf(stderr, "%s: out of memory\n", cmd);
		return 1;
	}
	size_t at = (size_t)snprintf(request, request_len, "snapshot %s",
	                             create ? "create" : "destroy");
	size_t done_at = 0;
	for (int i = 0; i < n; i++) {
		at += (size_t)snprintf(request + at, request_len - at, " %s", names[i]);
		done_at += (size_t)snprintf(done + done_at, done_len - done_at, "%s %s/%s\n",
		                            create ? "took" : "destroyed", pool, names[i]);
	}
	int status = shale_cmd_remote(dir, pool, request, cmd, done);
	mem_free(request);
	if (status >= 0) {
		mem_free(done);
		return status;
	}
	struct pool *p = NULL;
	if (shale_cmd_import(cmd, dir, pool, false, &p) < 0) {
		mem_free(done);
		return 1;
	}
	char err[256] = "";
	int rc = create ? pool_snapshot_create(p, names, (unsigned)n, err, sizeof(err))
	                : pool_snapshot_destroy(p, names[0], err, sizeof(err));
	status = snap_cmd_outcome(cmd, rc, err, done);
	mem_free(done);
	if (shale_cmd_export(cmd, p) < 0)
		status = 1;
	return status;
}

/* One pool's snapshot table into out: from its server, or from the pool imported read only.
 * Returns 0 or -errno (reported). */
static int snap_cmd_list_pool(const char *dir, const char *pool, const char *fs, bool exact,
                              FILE *out)
{
	const char *cmd = "shale snapshot list";
	char request[POOL_DS_NAME_MAX + 32];
	snprintf(request, sizeof(request), "snapshot list%s%s%s", fs ? " " : "", fs ? fs : "",
	         exact ? " exact" : "");
	if (pool_statsock_request(dir, pool, request, out) == 0)
		return 0;
	struct pool *p = NULL;
	int rc = shale_cmd_import(cmd, dir, pool, true, &p);
	if (rc < 0)
		return rc;
	rc = pool_snapshot_list_print(p, fs, exact, out);
	if (rc < 0)
		fprintf(stderr, "%s: %s: %s\n", cmd, pool,
		        rc == -ENOENT ? "no such file system" : sh_strerror(rc));
	int erc = shale_cmd_export(cmd, p);
	return rc < 0 ? rc : erc;
}

/* list [POOL[/FS]]: every pool in dir when none is named; one header. */
static int snap_cmd_list(const char *dir, const char *target, bool exact)
{
	char pool[POOL_NAME_MAX + 1];
	const char *fs = NULL;
	struct pool_names_found found = {0};
	const char *one[1] = {pool};
	const char *const *pools = one;
	unsigned npools = 1;
	if (target && strchr(target, '/')) {
		if (!snap_cmd_split_pool(target, pool, &fs)) {
			fprintf(stderr, "shale snapshot list: give POOL or POOL/FS\n");
			return 2;
		}
	} else if (target) {
		snprintf(pool, sizeof(pool), "%s", target);
	} else {
		int rc = pool_find_names(dir, &found);
		if (rc < 0) {
			fprintf(stderr, "shale snapshot list: cannot read %s: %s\n", dir,
			        sh_strerror(rc));
			return 1;
		}
		pools = (const char *const *)found.pn_names;
		npools = found.pn_count;
	}
	int status = 0;
	for (unsigned i = 0; i < npools; i++) {
		char *text = NULL;
		size_t len = 0;
		FILE *mem = open_memstream(&text, &len);
		int rc = mem ? snap_cmd_list_pool(dir, pools[i], fs, exact, mem) : -ENOMEM;
		if (mem && fclose(mem) != 0 && rc == 0)
			rc = -ENOMEM;
		if (rc == 0 && text && strncmp(text, "error: ", 7) == 0) {
			fprintf(stderr, "shale snapshot list: %s", text + 7);
			rc = -EIO;
		}
		if (rc == 0 && text) {
			/* the header of the first table only */
			const char *body = text;
			if (i > 0 && strchr(text, '\n'))
				body = strchr(text, '\n') + 1;
			fputs(body, stdout);
		}
		free(text); /* open_memstream's buffer comes from malloc */
		if (rc != 0)
			status = 1;
	}
	pool_names_fini(&found);
	return status;
}

/* The options after the verb (argv[0] is the verb): -d DIR, and the flag letter `flag` (0: none)
 * into *flag_set. Returns the index of the first operand, or -1 (a usage error, reported with
 * usage) or -2 (help asked for and printed). */
static int snap_cmd_options(int argc, char **argv, char flag, const char **dir, bool *flag_set,
                            void (*usage)(FILE *out))
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char spec[8] = "d:h";
	if (flag) {
		spec[3] = flag;
		spec[4] = '\0';
	}
	*dir = POOL_CMD_DEFAULT_DIR;
	*flag_set = false;
	optind = 1;
	int opt;
	while ((opt = getopt_long(argc, argv, spec, longopts, NULL)) != -1) {
		if (opt == 'd') {
			*dir = optarg;
		} else if (opt == 'h') {
			usage(stdout);
			return -2;
		} else if (flag && opt == flag) {
			*flag_set = true;
		} else {
			usage(stderr);
			return -1;
		}
	}
	return optind;
}

int shale_snapshot_main(int argc, char **argv)
{
	if (argc < 2) {
		snap_cmd_usage(stderr);
		return 2;
	}
	const char *verb = argv[1];
	if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
		snap_cmd_usage(stdout);
		return 0;
	}
	bool create = strcmp(verb, "create") == 0, destroy = strcmp(verb, "destroy") == 0;
	bool list = strcmp(verb, "list") == 0;
	if (!create && !destroy && !list) {
		fprintf(stderr, "shale snapshot: unknown command '%s'\n", verb);
		snap_cmd_usage(stderr);
		return 2;
	}
	const char *dir;
	bool exact;
	int first = snap_cmd_options(argc - 1, argv + 1, list ? 'p' : 0, &dir, &exact, snap_cmd_usage);
	if (first < 0)
		return first == -2 ? 0 : 2;
	argc--;
	argv++;
	if (list) {
		if (argc - first > 1) {
			snap_cmd_usage(stderr);
			return 2;
		}
		return snap_cmd_list(dir, first < argc ? argv[first] : NULL, exact);
	}
	return snap_cmd_change(create, dir, argc - first, argv + first);
}

/* A change on pool: asked of the server holding it, else made on the pool imported here by
 * op(p, arg, err, err_len); done is printed on success. Returns the exit status. */
static int snap_cmd_run(const char *cmd, const char *dir, const char *pool, const char *request,
                        const char *done, int (*op)(struct pool *p, void *arg, char *err,
                                                    size_t err_len),
                        void *arg)
{
	int status = shale_cmd_remote(dir, pool, request, cmd, done);
	if (status >= 0)
		return status;
	struct pool *p = NULL;
	if (shale_cmd_import(cmd, dir, pool, false, &p) < 0)
		return 1;
	char err[256] = "";
	int rc = op(p, arg, err, sizeof(err));
	status = snap_cmd_outcome(cmd, rc, err, done);
	if (shale_cmd_export(cmd, p) < 0)
		status = 1;
	return status;
}

struct clone_args {
	const char *ca_snapshot, *ca_name;
};

static int clone_op(struct pool *p, void *arg, char *err, size_t err_len)
{
	const struct clone_args *ca = arg;
	return pool_fs_clone(p, ca->ca_snapshot, ca->ca_name, err, err_len);
}

struct rollback_args {
	const char *ra_snapshot;
	bool ra_later;
};

static int rollback_op(struct pool *p, void *arg, char *err, size_t err_len)
{
	const struct rollback_args *ra = arg;
	return pool_fs_rollback(p, ra->ra_snapshot, ra->ra_later, err, err_len);
}

static void clone_cmd_usage(FILE *out)
{
	fprintf(out, "usage: shale fs clone POOL/FS@SNAP POOL/NEW [-d DIR]\n");
}

int shale_fs_clone_main(int argc, char **argv)
{
	const char *cmd = "shale fs clone";
	const char *dir;
	bool unused;
	int first = snap_cmd_options(argc - 1, argv + 1, 0, &dir, &unused, clone_cmd_usage);
	if (first < 0)
		return first == -2 ? 0 : 2;
	argc--;
	argv++;
	char pool[POOL_NAME_MAX + 1], new_pool[POOL_NAME_MAX + 1];
	const char *snapshot, *name;
	if (argc - first != 2 || !snap_cmd_split_pool(argv[first], pool, &snapshot) ||
	    !snap_cmd_split_pool(argv[first + 1], new_pool, &name) || !strchr(snapshot, '@')) {
		clone_cmd_usage(stderr);
		return 2;
	}
	if (strcmp(pool, new_pool) != 0) {
		fprintf(stderr, "%s: a clone is in its snapshot's pool\n", cmd);
		return 2;
	}
	char request[POOL_SNAP_FULL_MAX + POOL_DS_NAME_MAX + 32];
	char done[POOL_NAME_MAX + POOL_SNAP_FULL_MAX + POOL_DS_NAME_MAX + 32];
	snprintf(request, sizeof(request), "fs clone %s %s", snapshot, name);
	snprintf(done, sizeof(done), "cloned %s/%s from %s/%s\n", pool, name, pool, snapshot);
	struct clone_args ca = {snapshot, name};
	return snap_cmd_run(cmd, dir, pool, request, done, clone_op, &ca);
}

static void rollback_cmd_usage(FILE *out)
{
	fprintf(out, "usage: shale fs rollback [-r] POOL/FS@SNAP [-d DIR]\n");
}

int shale_fs_rollback_main(int argc, char **argv)
{
	const char *cmd = "shale fs rollback";
	const char *dir;
	bool later;
	int first = snap_cmd_options(argc - 1, argv + 1, 'r', &dir, &later, rollback_cmd_usage);
	if (first < 0)
		return first == -2 ? 0 : 2;
	argc--;
	argv++;
	char pool[POOL_NAME_MAX + 1];
	const char *snapshot;
	if (argc - first != 1 || !snap_cmd_split_pool(argv[first], pool, &snapshot) ||
	    !strchr(snapshot, '@')) {
		rollback_cmd_usage(stderr);
		return 2;
	}
	char request[POOL_SNAP_FULL_MAX + 32];
	char done[POOL_NAME_MAX + 2 * POOL_SNAP_FULL_MAX + 32];
	snprintf(request, sizeof(request), "fs rollback%s %s", later ? " -r" : "", snapshot);
	snprintf(done, sizeof(done), "rolled %s/%.*s back to %s/%s\n", pool,
	         (int)(strchr(snapshot, '@') - snapshot), snapshot, pool, snapshot);
	struct rollback_args ra = {snapshot, later};
	return snap_cmd_run(cmd, dir, pool, request, done, rollback_op, &ra);
}

static int promote_op(struct pool *p, void *arg, char *err, size_t err_len)
{
	return pool_fs_promote(p, arg, err, err_len);
}

static void promote_cmd_usage(FILE *out)
{
	fprintf(out, "usage: shale fs promote POOL/CLONE [-d DIR]\n");
}

int shale_fs_promote_main(int argc, char **argv)
{
	const char *cmd = "shale fs promote";
	const char *dir;
	bool unused;
	int first = snap_cmd_options(argc - 1, argv + 1, 0, &dir, &unused, promote_cmd_usage);
	if (first < 0)
		return first == -2 ? 0 : 2;
	argc--;
	argv++;
	char pool[POOL_NAME_MAX + 1];
	const char *fs;
	if (argc - first != 1 || !snap_cmd_split_pool(argv[first], pool, &fs) || strchr(fs, '@')) {
		promote_cmd_usage(stderr);
		return 2;
	}
	char request[POOL_DS_NAME_MAX + 32];
	char done[POOL_NAME_MAX + POOL_DS_NAME_MAX + 32];
	snprintf(request, sizeof(request), "fs promote %s", fs);
	snprintf(done, sizeof(done), "promoted %s/%s\n", pool, fs);
	return snap_cmd_run(cmd, dir, pool, request, done, promote_op, (void *)fs);
}

static void diff_cmd_usage(FILE *out)
{
	fprintf(out,
		"usage: shale fs diff POOL/FS@SNAP [POOL/FS@LATER | POOL/FS] [-d DIR]\n"
		"  what changed from the snapshot to the other one, or to the file system as it is\n"
		"  (the default), a path a line in path order: M modified, + created, - removed,\n"
		"  R renamed (R /old -> /new)\n");
}

/* How long the server may work on a diff before its answer: it reads both trees whole first
 * (minutes for millions of files read from disk). */
#define DIFF_CMD_WAIT_S 3600u

/* The differences as the server holding pool answers them ("ok" then the lines): printed, and
 * the exit status returned; -1 when nobody serves the pool. */
static int diff_cmd_remote(const char *cmd, const char *dir, const char *pool, const char *request)
{
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	if (!mem)
		return -1;
	int rc = pool_statsock_request_wait(dir, pool, request, DIFF_CMD_WAIT_S, mem);
	if (fclose(mem) != 0 && rc == 0)
		rc = -ENOMEM;
	int status = -1;
	if (rc == 0 && text && strncmp(text, "ok\n", 3) == 0) {
		status = fwrite(text + 3, 1, len - 3, stdout) == len - 3 ? 0 : 1;
	} else if (rc == 0) {
		const char *answer = text ? text : "";
		bool error = strncmp(answer, "error: ", 7) == 0;
		fprintf(stderr, "%s: %s%s", cmd, error ? "" : "unexpected answer from the server: ",
		        answer + (error ? 7 : 0));
		status = 1;
	}
	free(text); /* open_memstream's buffer comes from malloc */
	return status;
}

int shale_fs_diff_main(int argc, char **argv)
{
	const char *cmd = "shale fs diff";
	const char *dir;
	bool unused;
	int first = snap_cmd_options(argc - 1, argv + 1, 0, &dir, &unused, diff_cmd_usage);
	if (first < 0)
		return first == -2 ? 0 : 2;
	argc--;
	argv++;
	int n = argc - first;
	char pool[POOL_NAME_MAX + 1], to_pool[POOL_NAME_MAX + 1];
	const char *from, *to = NULL;
	if ((n != 1 && n != 2) || !snap_cmd_split_pool(argv[first], pool, &from) ||
	    !strchr(from, '@') || (n == 2 && !snap_cmd_split_pool(argv[first + 1], to_pool, &to))) {
		diff_cmd_usage(stderr);
		return 2;
	}
	if (to && strcmp(pool, to_pool) != 0) {
		fprintf(stderr, "%s: %s and %s are not of one file system (nor one pool)\n", cmd,
		        argv[first], argv[first + 1]);
		return 1;
	}
	char request[2 * POOL_SNAP_FULL_MAX + 32];
	snprintf(request, sizeof(request), "fs diff %s%s%s", from, to ? " " : "", to ? to : "");
	int status = diff_cmd_remote(cmd, dir, pool, request);
	if (status >= 0)
		return status;
	/* Nobody serves it: imported here (not read only: the log is replayed, so the file system
	 * as it is has every acknowledged change, and a read-only pool opens no dataset) */
	struct pool *p = NULL;
	if (shale_cmd_import(cmd, dir, pool, false, &p) < 0)
		return 1;
	char err[512] = "";
	int rc = pool_fs_diff(p, from, to, stdout, err, sizeof(err));
	status = 0;
	if (rc != 0) {
		fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
		status = 1;
	}
	if (shale_cmd_export(cmd, p) < 0)
		status = 1;
	return status;
}
