/* shale_pool.c: `shale pool` and `shale fs`, the administration verbs of the storage pool, in the
 * manner of zpool(8) and zfs(8).
 *
 *   shale pool create NAME [mirror] VDEV... [log [mirror] VDEV...] [--size BYTES] [--force]
 *   shale pool import|export|status|check|destroy NAME [-d DIR]
 *   shale pool list [-d DIR]
 *   shale pool attach|detach|replace|add ... (tools/shale_pool_vdev.c)
 *   shale fs create|destroy NAME/FS [-d DIR] [--recordsize BYTES] [--compression off|lz4|zstd]
 *   shale fs list NAME [-d DIR]
 *   shale fs rename NAME/FS NAME/NEW [-d DIR]
 *   shale fs clone NAME/FS@SNAP NAME/NEW [-d DIR] (tools/shale_snap.c)
 *   shale fs rollback [-r] NAME/FS@SNAP [-d DIR] (tools/shale_snap.c)
 *   shale fs set compression=off|lz4|zstd NAME/FS [-d DIR]
 *   shale fs set quota=SIZE|none NAME/FS [-d DIR]
 *   shale fs set snapdir=hidden|visible NAME/FS [-d DIR]
 *
 * Model: there is no resident daemon holding pools between commands. Each command finds the pool's
 * leaves (the files in DIR, default ./var/pool, whose labels name the pool; or the leaves given to
 * create), imports it (replaying its intent log if the last user did not export it), does its work
 * and exports it again, so that every command leaves the pool clean and fully synced. A leaf is
 * locked while open (blk.h), so a command refuses, with "in use", a pool that `shale serve` or
 * another command has open. The exceptions ask the holder through the pool's status socket
 * (pool_statsock.c): `pool status`, `pool scrub` and every `shale fs` verb.
 *
 * VDEV is a file or a block device. With --size, files that do not exist are created at that size
 * (suffixes K, M, G, T); existing ones are used as they are. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "blk/blk.h"
#include "shale_pool.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"

/* Options every command imports with: datasets get the file-system owner, which replays their log
 * records and names their data blocks (for check and destroy). */
void shale_cmd_pool_opts(struct pool_open_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->po_attach = pool_fs_attach;
}

static void pool_cmd_usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"  shale pool create NAME [mirror] VDEV... [log [mirror] VDEV...] [--size BYTES] [--force]\n"
		"      a pool on files or block devices; `mirror A B` makes A and B one mirror\n"
		"      (repeat `mirror` for more mirrors of the same width), several plain VDEVs\n"
		"      are striped; `log VDEV` puts the intent log on its own (fast) device.\n"
		"      --size creates the files that do not exist yet (suffix K, M, G or T);\n"
		"      a VDEV of another pool is refused unless --force\n"
		"  shale pool import NAME [-d DIR]   replay the intent log, write a txg, print status\n"
		"  shale pool export NAME [-d DIR]   import and export: the pool ends clean\n"
		"  shale pool status NAME [-d DIR]   vdevs, errors, cache and log figures, space;\n"
		"      live from the server when `shale serve` holds the pool, else read\n"
		"      without writing to it\n"
		"  shale pool check NAME [-d DIR]    verify every block and the allocator; exit 1 on problems\n"
		"  shale pool txgs NAME [-d DIR]     while `shale serve` holds the pool: its last 64\n"
		"      txgs, why each was written, its size and where its time went, phase by phase\n"
		"  shale pool scrub NAME [-d DIR] [--wait] [--stop]\n"
		"      while `shale serve` holds the pool: verify and repair every block\n"
		"      online, in the background (`pool status` shows its progress; --wait\n"
		"      waits for the end and exits 1 on problems; --stop cancels it);\n"
		"      otherwise the same as check\n"
		"  shale pool list [-d DIR]          the pools there: size, allocated, free, health\n"
		"  shale pool destroy NAME [-d DIR]  wipe the labels of the pool's leaves: it is gone\n"
		"  shale pool attach NAME EXISTING NEW [-d DIR] [--size BYTES] [--force]\n"
		"      NEW becomes another side of EXISTING's mirror; every block is copied onto it\n"
		"  shale pool detach NAME LEAF [-d DIR]   take LEAF out of its mirror\n"
		"  shale pool add NAME [mirror] VDEV... [-d DIR] [--size BYTES] [--force]\n"
		"      another top-level vdev (plain, or a mirror): more space\n"
		"  shale pool replace NAME OLD NEW [-d DIR] [--size BYTES] [--force] [--discard-log]\n"
		"      attach NEW beside OLD (which may be missing), resilver, detach OLD;\n"
		"      --discard-log: the log device OLD is lost for good, and with it its records\n"
		"  DIR holds the pool's leaves (default " POOL_CMD_DEFAULT_DIR ")\n");
}

static void fs_cmd_usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"  shale fs create NAME/FS [-d DIR] [--recordsize BYTES] [--compression off|lz4|zstd]\n"
		"  shale fs list NAME [-t filesystem|snapshot|all] [-d DIR]\n"
		"      USED is REFER (what it references) plus what only its snapshots hold\n"
		"  shale fs rename NAME/FS NAME/NEW [-d DIR]\n"
		"  shale fs clone NAME/FS@SNAP NAME/NEW [-d DIR]   writable, sharing the snapshot's blocks\n"
		"  shale fs rollback [-r] NAME/FS@SNAP [-d DIR]   back to the snapshot; -r destroys the\n"
		"      later snapshots (refused without it); not while exported\n"
		"  shale fs promote NAME/CLONE [-d DIR]   the clone takes its origin's snapshots up to\n"
		"      its origin, which becomes its clone (and may then be destroyed); not while\n"
		"      either is exported\n"
		"  shale fs diff NAME/FS@SNAP [NAME/FS@LATER | NAME/FS] [-d DIR]   what changed since\n"
		"      the snapshot: + created, - removed, M modified, R renamed (zfs diff's lines)\n"
		"  shale fs set compression=off|lz4|zstd NAME/FS [-d DIR]   for blocks written from now on\n"
		"  shale fs set quota=SIZE|none NAME/FS [-d DIR]   the most it may hold\n"
		"  shale fs set snapdir=hidden|visible NAME/FS [-d DIR]   whether the root lists\n"
		"      .zfs (it is there either way: .zfs/snapshot/NAME is each snapshot)\n"
		"      (suffix K, M, G, T); over it, writes and creates fail with\n"
		"      NFS3ERR_DQUOT; df shows it as the size\n"
		"  shale fs destroy NAME/FS [-d DIR]\n"
		"  DIR holds the pool's leaves (default " POOL_CMD_DEFAULT_DIR ")\n");
}

int shale_parse_bytes(const char *text, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno != 0 || end == text || v == 0)
		return -EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	default: return -EINVAL;
	}
	if (*end != '\0' || (shift > 0 && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Imports pool `name` from the leaves in dir, reporting failures on stderr. read_only: for the
 * commands that only look (status, list, fs list), which then write nothing to the pool. */
int shale_cmd_import(const char *cmd, const char *dir, const char *name, bool read_only,
                     struct pool **out)
{
	struct pool_open_opts opts;
	shale_cmd_pool_opts(&opts);
	opts.po_read_only = read_only;
	char err[512] = "";
	int rc = pool_import_by_name(dir, name, &opts, out, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
	return rc;
}

int shale_cmd_export(const char *cmd, struct pool *p)
{
	int rc = pool_export(p);
	if (rc < 0)
		fprintf(stderr, "%s: the pool's last txg could not be written: %s\n", cmd, sh_strerror(rc));
	return rc;
}

/* ---- shale pool create ---- */

/* Whether path carries a Shale pool label (of any pool). */
static bool pool_cmd_is_leaf(const char *path)
{
	struct blk_engine *engine = NULL;
	if (blk_engine_create(4, &engine) < 0)
		return false;
	struct blk_dev *dev = NULL;
	struct blk_label *label = mem_alloc(sizeof(*label));
	bool leaf = false;
	if (label && blk_dev_open_file(path, 0, &dev) == 0) {
		leaf = blk_label_read(engine, dev, label) == 0;
		blk_dev_close(dev);
	}
	mem_free(label);
	blk_engine_destroy(engine);
	return leaf;
}

static int pool_cmd_create(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"size", required_argument, NULL, 's'},
		{"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	uint64_t size = 0;
	bool force = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "+s:fh", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			if (shale_parse_bytes(optarg, &size) < 0) {
				fprintf(stderr, "shale pool create: bad size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'f': force = true; break;
		case 'h': pool_cmd_usage(stdout); return 0;
		default: pool_cmd_usage(stderr); return 2;
		}
	}
	/* Options may also follow the vdevs: getopt stops at the first operand with '+', so parse the
	 * operands by hand and accept --size anywhere. */
	if (optind >= argc) {
		pool_cmd_usage(stderr);
		return 2;
	}
	const char *name = argv[optind++];
	const char *data[POOL_CMD_MAX_LEAVES], *logs[BLK_MIRROR_MAX];
	unsigned ndata = 0, nlog = 0, groups = 0, width = 0, in_group = 0;
	bool mirror = false, in_log = false, log_mirror = false;
	for (int i = optind; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--size") == 0 || strcmp(a, "-s") == 0) {
			if (i + 1 >= argc || shale_parse_bytes(argv[i + 1], &size) < 0) {
				fprintf(stderr, "shale pool create: --size needs a size such as 256M\n");
				return 2;
			}
			i++;
			continue;
		}
		if (strcmp(a, "--force") == 0 || strcmp(a, "-f") == 0) {
			force = true;
			continue;
		}
		if (strcmp(a, "log") == 0) {
			if (in_log) {
				fprintf(stderr, "shale pool create: one log vdev only\n");
				return 2;
			}
			in_log = true;
			continue;
		}
		if (strcmp(a, "mirror") == 0) {
			if (in_log) {
				log_mirror = true;
				continue;
			}
			if (ndata > 0 && !mirror) {
				fprintf(stderr, "shale pool create: mix of plain and mirrored vdevs\n");
				return 2;
			}
			if (mirror) {
				if (width == 0)
					width = in_group;
				if (in_group != width) {
					fprintf(stderr, "shale pool create: every mirror needs the same number of vdevs\n");
					return 2;
				}
			}
			mirror = true;
			groups++;
			in_group = 0;
			continue;
		}
		if (in_log) {
			if (nlog == BLK_MIRROR_MAX) {
				fprintf(stderr, "shale pool create: at most %u log vdevs\n", BLK_MIRROR_MAX);
				return 2;
			}
			logs[nlog++] = a;
		} else {
			if (ndata == POOL_CMD_MAX_LEAVES) {
				fprintf(stderr, "shale pool create: too many vdevs\n");
				return 2;
			}
			data[ndata++] = a;
			in_group++;
		}
	}
	if (mirror) {
		if (width == 0)
			width = in_group;
		if (in_group != width || width < 2) {
			fprintf(stderr, "shale pool create: a mirror needs 2 to %u vdevs, the same number in each\n",
				BLK_MIRROR_MAX);
			return 2;
		}
	}
	if (ndata == 0 || (in_log && nlog == 0) || (log_mirror && nlog < 2) || (nlog > 1 && !log_mirror)) {
		fprintf(stderr, "shale pool create: give the vdevs (and `log [mirror] VDEV...` for a log)\n");
		pool_cmd_usage(stderr);
		return 2;
	}
	/* --size creates missing files; the pool's create makes every leaf at one size, so create the
	 * missing ones here and let the pool open them all. */
	const char *all[POOL_CMD_MAX_LEAVES + BLK_MIRROR_MAX];
	unsigned nall = 0;
	for (unsigned i = 0; i < ndata; i++)
		all[nall++] = data[i];
	for (unsigned i = 0; i < nlog; i++)
		all[nall++] = logs[i];
	for (unsigned i = 0; i < nall; i++) {
		struct stat st;
		if (stat(all[i], &st) == 0) {
			if (!force && pool_cmd_is_leaf(all[i])) {
				fprintf(stderr, "shale pool create: %s belongs to a pool already (--force to "
						"overwrite it)\n", all[i]);
				return 1;
			}
			continue;
		}
		if (size == 0) {
			fprintf(stderr, "shale pool create: %s does not exist (give --size to create it)\n", all[i]);
			return 1;
		}
		struct blk_dev *dev = NULL;
		int rc = blk_dev_open_file(all[i], size, &dev);
		if (rc < 0) {
			fprintf(stderr, "shale pool create: cannot create %s: %s\n", all[i], sh_strerror(rc));
			return 1;
		}
		blk_dev_close(dev);
	}
	struct pool_open_opts opts;
	memset(&opts, 0, sizeof(opts));
	shale_cmd_pool_opts(&opts);
	struct pool_create_args args = {
		.pc_name = name,
		.pc_layout = mirror ? POOL_LAYOUT_MIRROR : POOL_LAYOUT_STRIPE,
		.pc_mirror_width = mirror ? width : 0,
		.pc_paths = data,
		.pc_npaths = ndata,
		.pc_log_paths = logs,
		.pc_nlog_paths = nlog,
		.pc_opts = &opts,
	};
	struct pool *p = NULL;
	int rc = pool_create(&args, &p);
	if (rc < 0) {
		fprintf(stderr, "shale pool create: %s\n", sh_strerror(rc));
		return 1;
	}
	printf("created pool %s: %u %s%s%s\n", name, mirror ? groups : ndata,
	       mirror ? "mirrors" : "vdevs", nlog ? ", a log vdev" : "", nlog > 1 ? " (mirrored)" : "");
	return shale_cmd_export("shale pool create", p) == 0 ? 0 : 1;
}

/* ---- import, export, status, check ---- */

static void pool_cmd_report(void *arg, const char *line)
{
	(void)arg;
	printf("  %s\n", line);
}

/* The arguments of a verb that takes one pool NAME and -d DIR: *dir and *name set, and
 * POOL_CMD_GO; or the exit status (help printed, or a usage error). */
#define POOL_CMD_GO (-1)
static int pool_cmd_dir_and_name(int argc, char **argv, const char **dir, const char **name)
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	*dir = POOL_CMD_DEFAULT_DIR;
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': *dir = optarg; break;
		case 'h': pool_cmd_usage(stdout); return 0;
		default: pool_cmd_usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc) {
		pool_cmd_usage(stderr);
		return 2;
	}
	*name = argv[optind];
	return POOL_CMD_GO;
}

static int pool_cmd_named(const char *verb, int argc, char **argv)
{
	const char *dir, *name;
	int status = pool_cmd_dir_and_name(argc, argv, &dir, &name);
	if (status != POOL_CMD_GO)
		return status;
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "shale pool %s", verb);
	struct pool *p = NULL;
	if (strcmp(verb, "status") == 0 && pool_status_remote(dir, name, stdout) == 0)
		return 0; /* a running server holds the pool: its live figures */
	if (shale_cmd_import(cmd, dir, name, strcmp(verb, "status") == 0, &p) < 0)
		return 1;
	status = 0;
	if (strcmp(verb, "status") == 0 || strcmp(verb, "import") == 0) {
		if (pool_status_print(p, stdout) < 0)
			status = 1;
	} else if (strcmp(verb, "check") == 0) {
		int64_t problems = pool_check(p, pool_cmd_report, NULL);
		if (problems < 0) {
			fprintf(stderr, "%s: the check stopped: %s\n", cmd, sh_strerror((int)problems));
			status = 1;
		} else {
			printf("pool %s: %" PRId64 " problem%s\n", pool_name(p), problems, problems == 1 ? "" : "s");
			status = problems == 0 ? 0 : 1;
		}
	}
	if (shale_cmd_export(cmd, p) < 0)
		status = 1;
	return status;
}

/* ---- txgs ---- */

/* Whether a status-socket request's rc says that nobody serves the pool there (no socket, nobody
 * listening on it, or a path no socket can have), as opposed to a server that failed to answer. */
static bool pool_cmd_unserved(int rc)
{
	return rc == -ENOENT || rc == -ECONNREFUSED || rc == -ENAMETOOLONG;
}

/* The served pool's history of its last txgs (the holder's memory: nothing to show otherwise). */
static int pool_cmd_txgs(int argc, char **argv)
{
	const char *dir, *name;
	int status = pool_cmd_dir_and_name(argc, argv, &dir, &name);
	if (status != POOL_CMD_GO)
		return status;
	int rc = pool_statsock_request(dir, name, "txgs", stdout);
	if (pool_cmd_unserved(rc)) {
		fprintf(stderr,
		        "shale pool txgs: no server holds pool %s in %s (the history is the "
		        "server's, kept in memory)\n",
		        name, dir);
		return 1;
	}
	if (rc != 0) {
		fprintf(stderr, "shale pool txgs: asking the server of pool %s in %s: %s\n", name,
		        dir, sh_strerror(rc));
		return 1;
	}
	return 0;
}

/* ---- scrub ---- */

/* The "  scan: " line of a served pool's status, into line (empty when there is none). */
static int pool_cmd_scan_line(const char *dir, const char *name, char *line, size_t cap)
{
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	if (!mem)
		return -ENOMEM;
	int rc = pool_statsock_request(dir, name, "status", mem);
	if (fclose(mem) != 0 && rc == 0)
		rc = -ENOMEM;
	line[0] = '\0';
	const char *scan = rc == 0 && text ? strstr(text, "\n  scan: ") : NULL;
	if (scan) {
		scan++;
		size_t n = strcspn(scan, "\n");
		snprintf(line, cap, "%.*s", (int)n, scan);
	}
	free(text); /* open_memstream's buffer comes from malloc */
	return rc;
}

/* The N of a scan line's "N problem(s)" at its end, or -1. */
static long long pool_cmd_scan_problems(const char *line)
{
	const char *word = strstr(line, " problem");
	const char *next;
	while (word && (next = strstr(word + 1, " problem")) != NULL)
		word = next;
	if (!word || word == line)
		return -1;
	const char *num = word;
	while (num > line && num[-1] >= '0' && num[-1] <= '9')
		num--;
	return num == word ? -1 : strtoll(num, NULL, 10);
}

static int pool_cmd_scrub(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"wait", no_argument, NULL, 'w'},
		{"stop", no_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = POOL_CMD_DEFAULT_DIR;
	bool wait = false, stop = false;
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 'w': wait = true; break;
		case 's': stop = true; break;
		case 'h': pool_cmd_usage(stdout); return 0;
		default: pool_cmd_usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc || (wait && stop)) {
		pool_cmd_usage(stderr);
		return 2;
	}
	const char *name = argv[optind];
	char before[512] = "";
	if (wait)
		(void)pool_cmd_scan_line(dir, name, before, sizeof(before));
	int rc = pool_statsock_request(dir, name, stop ? "scrub stop" : "scrub", stdout);
	if (rc != 0 && !pool_cmd_unserved(rc)) {
		fprintf(stderr, "shale pool scrub: asking the server of pool %s in %s: %s\n", name,
		        dir, sh_strerror(rc));
		return 1;
	}
	if (rc != 0) {
		if (stop) {
			fprintf(stderr, "shale pool scrub: no server holds pool %s in %s\n", name,
			        dir);
			return 1;
		}
		/* Not served: the pool is ours alone, and the check is the scrub. */
		printf("pool %s is not served: checking it (shale pool check)\n", name);
		char *check_argv[] = {"check", "-d", (char *)dir, (char *)name, NULL};
		return pool_cmd_named("check", 4, check_argv);
	}
	if (!wait)
		return 0;
	char line[512];
	for (;;) {
		struct timespec ts = {.tv_nsec = 200 * 1000000L};
		nanosleep(&ts, NULL);
		rc = pool_cmd_scan_line(dir, name, line, sizeof(line));
		if (rc != 0) {
			fprintf(stderr, "shale pool scrub: the server went away: %s\n",
			        sh_strerror(rc));
			return 1;
		}
		if (!strstr(line, "scrub in progress"))
			break;
	}
	printf("%s\n", line);
	if (!strstr(line, "last scrub") || strcmp(line, before) == 0) {
		fprintf(stderr, "shale pool scrub: the scrub did not finish (stopped?)\n");
		return 1;
	}
	return pool_cmd_scan_problems(line) == 0 ? 0 : 1;
}

/* ---- list, destroy ---- */

/* -d DIR and the operands that follow; -1 after printing usage. */
static int pool_cmd_dir_opt(int argc, char **argv, const char **dir)
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	*dir = POOL_CMD_DEFAULT_DIR;
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': *dir = optarg; break;
		case 'h': pool_cmd_usage(stdout); return -1;
		default: pool_cmd_usage(stderr); return -1;
		}
	}
	return 0;
}

/* One line of `shale pool list` for a pool a server holds, from its live status text. */
static void pool_cmd_list_served(const char *name, const char *text)
{
	char state[32] = "?", total[16] = "-", free_b[16] = "-";
	const char *at = strstr(text, " state: ");
	if (at)
		(void)sscanf(at, " state: %31s", state);
	at = strstr(text, " space: ");
	if (at)
		(void)sscanf(at, " space: %15s total, %15s free", total, free_b);
	printf("%-24s %8s %8s %8s  %-9s %s\n", name, total, "-", free_b, state, "served");
}

static int pool_cmd_list(int argc, char **argv)
{
	const char *dir;
	if (pool_cmd_dir_opt(argc, argv, &dir) < 0)
		return 2;
	if (optind != argc) {
		pool_cmd_usage(stderr);
		return 2;
	}
	struct pool_names_found names;
	int rc = pool_find_names(dir, &names);
	if (rc < 0) {
		fprintf(stderr, "shale pool list: cannot read %s: %s\n", dir, sh_strerror(rc));
		return 1;
	}
	if (names.pn_count == 0) {
		printf("no pools in %s\n", dir);
		pool_names_fini(&names);
		return 0;
	}
	int status = 0;
	printf("%-24s %8s %8s %8s  %-9s %s\n", "NAME", "SIZE", "ALLOC", "FREE", "HEALTH", "USER");
	for (unsigned i = 0; i < names.pn_count; i++) {
		const char *name = names.pn_names[i];
		char *text = NULL;
		size_t len = 0;
		FILE *mem = open_memstream(&text, &len);
		bool served = mem && pool_status_remote(dir, name, mem) == 0;
		if (mem)
			fclose(mem);
		if (served) {
			pool_cmd_list_served(name, text ? text : "");
			free(text);
			continue;
		}
		free(text);
		struct pool_leaves leaves;
		if (pool_find_leaves(dir, name, &leaves) == 0) {
			unsigned found = leaves.pl_count + leaves.pl_busy;
			pool_leaves_fini(&leaves);
			if (found == 0)
				continue; /* a status socket a crashed server left behind */
		}
		struct pool *p = NULL;
		if (shale_cmd_import("shale pool list", dir, name, true, &p) < 0) {
			status = 1;
			continue;
		}
		struct pool_status *st = mem_alloc(sizeof(*st));
		if (st) {
			pool_status(p, st);
			char size_b[16], alloc_b[16], free_b[16];
			pool_fmt_bytes(size_b, sizeof(size_b), st->ps_total_bytes);
			pool_fmt_bytes(alloc_b, sizeof(alloc_b), st->ps_total_bytes - st->ps_free_bytes);
			pool_fmt_bytes(free_b, sizeof(free_b), st->ps_free_bytes);
			printf("%-24s %8s %8s %8s  %-9s %s\n", name, size_b, alloc_b, free_b,
			       st->ps_state == POOL_STATE_ONLINE     ? "ONLINE"
			       : st->ps_state == POOL_STATE_DEGRADED ? "DEGRADED"
			                                             : "SUSPENDED",
			       "-");
			mem_free(st);
		}
		if (shale_cmd_export("shale pool list", p) < 0)
			status = 1;
	}
	pool_names_fini(&names);
	return status;
}

/* shale pool destroy NAME: imports the pool (it must be whole enough to import, and no other
 * process may hold it), exports it, and wipes the labels of every leaf found, as zpool destroy
 * and labelclear do: the leaves are no longer any pool's. */
static int pool_cmd_destroy(int argc, char **argv)
{
	const char *dir;
	if (pool_cmd_dir_opt(argc, argv, &dir) < 0)
		return 2;
	if (optind + 1 != argc) {
		pool_cmd_usage(stderr);
		return 2;
	}
	const char *name = argv[optind];
	struct pool *p = NULL;
	if (shale_cmd_import("shale pool destroy", dir, name, false, &p) < 0)
		return 1;
	struct pool_status *st = mem_alloc(sizeof(*st));
	unsigned missing = 0;
	if (st) {
		pool_status(p, st);
		for (unsigned i = 0; i <= st->ps_ntops; i++) {
			const struct pool_status_vdev *sv = i < st->ps_ntops ? &st->ps_tops[i]
			                                   : st->ps_has_log  ? &st->ps_log
			                                                     : NULL;
			for (unsigned j = 0; sv && j < sv->sv_nchildren; j++) {
				if (sv->sv_children[j].sl_present)
					continue;
				missing++;
				fprintf(stderr,
				        "shale pool destroy: leaf %s is missing: its labels stay (it "
				        "alone would import as the pool)\n",
				        sv->sv_children[j].sl_path);
			}
		}
		mem_free(st);
	}
	if (shale_cmd_export("shale pool destroy", p) < 0)
		return 1;
	struct pool_leaves leaves;
	int rc = pool_find_leaves(dir, name, &leaves);
	bool found = rc == 0;
	struct blk_engine *engine = NULL;
	if (rc == 0)
		rc = blk_engine_create(8, &engine);
	unsigned wiped = 0;
	for (unsigned i = 0; rc == 0 && i < leaves.pl_count; i++) {
		struct blk_dev *dev = NULL;
		int r = blk_dev_open_file(leaves.pl_paths[i], 0, &dev);
		if (r == 0)
			r = blk_label_wipe(engine, dev);
		if (dev)
			blk_dev_close(dev);
		if (r != 0)
			fprintf(stderr, "shale pool destroy: cannot wipe %s: %s\n", leaves.pl_paths[i],
			        sh_strerror(r));
		else
			wiped++;
	}
	if (engine)
		blk_engine_destroy(engine);
	if (rc == 0)
		printf("destroyed pool %s: the labels of %u lea%s wiped%s\n", name, wiped,
		       wiped == 1 ? "f" : "ves", missing ? " (some leaves were missing)" : "");
	else
		fprintf(stderr, "shale pool destroy: %s\n", sh_strerror(rc));
	bool ok = rc == 0 && wiped == leaves.pl_count;
	if (found)
		pool_leaves_fini(&leaves);
	return ok ? 0 : 1;
}

int shale_pool_main(int argc, char **argv)
{
	if (argc < 2) {
		pool_cmd_usage(stderr);
		return 2;
	}
	const char *verb = argv[1];
	if (strcmp(verb, "create") == 0)
		return pool_cmd_create(argc - 1, argv + 1);
	if (strcmp(verb, "import") == 0 || strcmp(verb, "export") == 0 || strcmp(verb, "status") == 0 ||
	    strcmp(verb, "check") == 0)
		return pool_cmd_named(verb, argc - 1, argv + 1);
	if (strcmp(verb, "list") == 0)
		return pool_cmd_list(argc - 1, argv + 1);
	if (strcmp(verb, "scrub") == 0)
		return pool_cmd_scrub(argc - 1, argv + 1);
	if (strcmp(verb, "txgs") == 0)
		return pool_cmd_txgs(argc - 1, argv + 1);
	if (strcmp(verb, "destroy") == 0)
		return pool_cmd_destroy(argc - 1, argv + 1);
	if (strcmp(verb, "attach") == 0 || strcmp(verb, "detach") == 0 || strcmp(verb, "replace") == 0 ||
	    strcmp(verb, "add") == 0)
		return shale_pool_vdev_main(verb, argc - 1, argv + 1);
	if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
		pool_cmd_usage(stdout);
		return 0;
	}
	fprintf(stderr, "shale pool: unknown command '%s'\n", verb);
	pool_cmd_usage(stderr);
	return 2;
}

/* ---- shale fs ---- */

/* A `shale fs` command on a pool a server holds: request is sent to the server
 * (pool_statsock.c), which answers with fs list's table, or "ok" (done_line is then printed) or
 * "error: TEXT". Returns the exit status, or -1 when nobody serves the pool (the caller imports it
 * then). */
int shale_cmd_remote(const char *dir, const char *pool, const char *request, const char *cmd,
		     const char *done_line)
{
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	if (!mem)
		return -1;
	int rc = pool_statsock_request(dir, pool, request, mem);
	if (fclose(mem) != 0 && rc == 0)
		rc = -ENOMEM;
	int status = -1;
	if (rc == 0) {
		const char *answer = text ? text : "";
		if (strncmp(answer, "error: ", 7) == 0) {
			fprintf(stderr, "%s: %s", cmd, answer + 7);
			status = 1;
		} else if (done_line && strcmp(answer, "ok\n") != 0) {
			fprintf(stderr, "%s: unexpected answer from the server: %s", cmd, answer);
			status = 1;
		} else {
			fputs(done_line ? done_line : answer, stdout);
			status = 0;
		}
	}
	free(text); /* open_memstream's buffer comes from malloc */
	return status;
}

int shale_fs_main(int argc, char **argv)
{
	if (argc < 2) {
		fs_cmd_usage(stderr);
		return 2;
	}
	const char *verb = argv[1];
	bool create = strcmp(verb, "create") == 0, destroy = strcmp(verb, "destroy") == 0;
	bool list = strcmp(verb, "list") == 0, set = strcmp(verb, "set") == 0;
	bool rename = strcmp(verb, "rename") == 0;
	if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
		fs_cmd_usage(stdout);
		return 0;
	}
	if (strcmp(verb, "clone") == 0)
		return shale_fs_clone_main(argc, argv);
	if (strcmp(verb, "rollback") == 0)
		return shale_fs_rollback_main(argc, argv);
	if (strcmp(verb, "promote") == 0)
		return shale_fs_promote_main(argc, argv);
	if (destroy) {
		/* zfs destroy POOL/FS@SNAP destroys a snapshot: so does this */
		for (int i = 2; i < argc; i++) {
			if (argv[i][0] != '-' && strchr(argv[i], '@')) {
				argv[0] = (char *)"snapshot"; /* argv[1] is "destroy" */
				return shale_snapshot_main(argc, argv);
			}
		}
	}
	if (!create && !destroy && !list && !set && !rename) {
		fprintf(stderr, "shale fs: unknown command '%s'\n", verb);
		fs_cmd_usage(stderr);
		return 2;
	}
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"recordsize", required_argument, NULL, 'r'},
		{"compression", required_argument, NULL, 'c'},
		{"type", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = POOL_CMD_DEFAULT_DIR;
	enum pool_list_types types = POOL_LIST_FILESYSTEMS;
	const char *types_name = "filesystem";
	struct pool_ds_props props = {0};
	uint64_t v;
	int opt;
	argc--;
	argv++;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "d:r:c:t:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 't': {
			int t = pool_list_types_from_name(optarg);
			if (t < 0 || !list) {
				fprintf(stderr, "shale fs: -t is for fs list: filesystem, snapshot or "
						"all\n");
				return 2;
			}
			types = (enum pool_list_types)t;
			types_name = optarg;
			break;
		}
		case 'r':
			if (shale_parse_bytes(optarg, &v) < 0 || v > UINT32_MAX) {
				fprintf(stderr, "shale fs: bad record size '%s'\n", optarg);
				return 2;
			}
			props.dp_record_bytes = (uint32_t)v;
			break;
		case 'c': {
			int c = pool_compress_from_name(optarg, false);
			if (c < 0) {
				fprintf(stderr, "shale fs: compression is off, lz4 or zstd\n");
				return 2;
			}
			props.dp_compress = (enum pool_compress)c;
			break;
		}
		case 'h': fs_cmd_usage(stdout); return 0;
		default: fs_cmd_usage(stderr); return 2;
		}
	}
	/* set: PROPERTY=VALUE comes before the file system, as in zfs set */
	enum pool_compress set_compress = POOL_COMPRESS_DEFAULT;
	bool set_quota = false, set_snapdir = false, snapdir_visible = false;
	uint64_t quota_bytes = 0;
	if (set) {
		if (optind + 2 != argc) {
			fs_cmd_usage(stderr);
			return 2;
		}
		const char *pv = argv[optind++];
		if (strncmp(pv, "recordsize=", 11) == 0) {
			fprintf(stderr, "shale fs set: the record size is fixed when a file system is "
					"created (its files' blocks are laid out by it)\n");
			return 2;
		}
		if (strncmp(pv, "quota=", 6) == 0) {
			set_quota = true;
			if (strcmp(pv + 6, "none") != 0 &&
			    (shale_parse_bytes(pv + 6, &quota_bytes) < 0 || quota_bytes == 0)) {
				fprintf(stderr, "shale fs set: quota is a size (suffix K, M, "
						"G or T) or none\n");
				return 2;
			}
		} else if (strncmp(pv, "compression=", 12) == 0 &&
			   pool_compress_from_name(pv + 12, false) >= 0) {
			set_compress = (enum pool_compress)pool_compress_from_name(pv + 12, false);
		} else if (strcmp(pv, "snapdir=hidden") == 0 || strcmp(pv, "snapdir=visible") == 0) {
			set_snapdir = true;
			snapdir_visible = strcmp(pv + 8, "visible") == 0;
		} else {
			fprintf(stderr, "shale fs set: the property is compression=off|lz4|zstd, "
					"quota=SIZE|none or snapdir=hidden|visible\n");
			return 2;
		}
	}
	/* rename: POOL/FS POOL/NEW, within one pool */
	const char *new_ds = NULL;
	if (rename) {
		if (optind + 2 != argc) {
			fs_cmd_usage(stderr);
			return 2;
		}
		const char *from = argv[optind], *to = argv[optind + 1];
		const char *fs = strchr(from, '/'), *ts = strchr(to, '/');
		if (!fs || !ts || fs - from != ts - to || strncmp(from, to, (size_t)(fs - from)) != 0) {
			fprintf(stderr, "shale fs rename: give POOL/FS POOL/NEW, in one pool\n");
			return 2;
		}
		new_ds = ts + 1;
		argc--; /* the rest as for one file system: from */
	}
	if (optind + 1 != argc) {
		fs_cmd_usage(stderr);
		return 2;
	}
	char pool_name_buf[POOL_NAME_MAX + 1];
	const char *target = argv[optind];
	const char *slash = strchr(target, '/');
	const char *ds = NULL;
	if (list) {
		if (slash) {
			fprintf(stderr, "shale fs list: give the pool's name, not a file system's\n");
			return 2;
		}
		snprintf(pool_name_buf, sizeof(pool_name_buf), "%s", target);
	} else {
		if (!slash || slash == target || slash[1] == '\0' || strchr(slash + 1, '/') ||
		    (size_t)(slash - target) > POOL_NAME_MAX) {
			fprintf(stderr, "shale fs %s: name the file system as POOL/FS\n", verb);
			return 2;
		}
		memcpy(pool_name_buf, target, (size_t)(slash - target));
		pool_name_buf[slash - target] = '\0';
		ds = slash + 1;
	}
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "shale fs %s", verb);
	{
		/* A served pool is changed and listed by its server. */
		char request[200] = "", done_line[200] = "";
		snprintf(request, sizeof(request), "fs list -t %s", types_name);
		if (create && ds) {
			snprintf(request, sizeof(request), "fs create %s %" PRIu32 " %s", ds,
				 props.dp_record_bytes, pool_compress_name(props.dp_compress));
			snprintf(done_line, sizeof(done_line), "created %s/%s\n", pool_name_buf,
				 ds);
		} else if (destroy && ds) {
			snprintf(request, sizeof(request), "fs destroy %s", ds);
			snprintf(done_line, sizeof(done_line),
				 "destroyed %s/%s (its blocks are freed in the background: see "
				 "shale pool status)\n",
				 pool_name_buf, ds);
		} else if (rename && ds) {
			snprintf(request, sizeof(request), "fs rename %s %s", ds, new_ds);
			snprintf(done_line, sizeof(done_line), "renamed %s/%s to %s/%s\n",
				 pool_name_buf, ds, pool_name_buf, new_ds);
		} else if (set && ds) {
			if (set_quota)
				snprintf(request, sizeof(request), "fs set %s quota %" PRIu64, ds,
					 quota_bytes);
			else if (set_snapdir)
				snprintf(request, sizeof(request), "fs set %s snapdir %s", ds,
					 snapdir_visible ? "visible" : "hidden");
			else
				snprintf(request, sizeof(request), "fs set %s compression %s", ds,
					 pool_compress_name(set_compress));
			snprintf(done_line, sizeof(done_line), "set %s on %s/%s%s\n",
				 argv[optind - 1], pool_name_buf, ds,
				 set_quota || set_snapdir ? "" : " (blocks written from now on)");
		}
		int remote = shale_cmd_remote(dir, pool_name_buf, request, cmd,
					   list ? NULL : done_line);
		if (remote >= 0)
			return remote;
	}
	struct pool *p = NULL;
	if (shale_cmd_import(cmd, dir, pool_name_buf, list, &p) < 0)
		return 1;
	int status = 0, rc = 0;
	if (create) {
		rc = pool_ds_create(p, ds, &props);
		if (rc == 0)
			printf("created %s/%s\n", pool_name_buf, ds);
	} else if (destroy) {
		rc = pool_ds_destroy(p, ds);
		if (rc == 0)
			printf("destroyed %s/%s\n", pool_name_buf, ds);
	} else if (rename) {
		rc = pool_ds_rename(p, ds, new_ds);
		if (rc == 0)
			printf("renamed %s/%s to %s/%s\n", pool_name_buf, ds, pool_name_buf, new_ds);
	} else if (set && set_quota) {
		rc = pool_ds_set_quota(p, ds, quota_bytes);
		if (rc == 0)
			printf("set %s on %s/%s\n", argv[optind - 1], pool_name_buf, ds);
		if (rc == -ENOSPC) {
			fprintf(stderr, "%s: the quota is less than what %s/%s holds now\n", cmd,
				pool_name_buf, ds);
			status = 1;
			rc = 0;
		}
	} else if (set && set_snapdir) {
		rc = pool_ds_set_snapdir(p, ds, snapdir_visible);
		if (rc == 0)
			printf("set %s on %s/%s\n", argv[optind - 1], pool_name_buf, ds);
	} else if (set) {
		rc = pool_ds_set_compress(p, ds, set_compress);
		if (rc == 0)
			printf("set %s on %s/%s (blocks written from now on)\n", argv[optind - 1],
			       pool_name_buf, ds);
	} else {
		rc = pool_ds_list_print_types(p, types, stdout);
	}
	if (rc == -ENOTEMPTY) {
		fprintf(stderr,
			"%s: %s/%s has snapshots: destroy them first (shale snapshot list %s/%s)\n",
			cmd, pool_name_buf, ds, pool_name_buf, ds);
		status = 1;
	} else if (rc < 0) {
		fprintf(stderr, "%s: %s\n", cmd, sh_strerror(rc));
		status = 1;
	}
	if (shale_cmd_export(cmd, p) < 0)
		status = 1;
	return status;
}
