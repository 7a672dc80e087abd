/* shale.c: the `shale` command: one program, with verbs in the manner of zpool/zfs.
 *
 *   shale serve [options]     the NFSv3 server (src/server)
 *   shale bench WORKLOAD ...  the NFSv3 load generator (tools/bench)
 *   shale pool VERB ...       create, import, export, status, check a pool (tools/shale_pool.c)
 *   shale fs VERB ...         create, list, destroy a pool's file systems (tools/shale_pool.c)
 *   shale version
 *
 * Each verb parses its own options and calls into one layer; nothing here knows protocol details. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "server/server.h"
#include "shale_pool.h"

#define SHALE_VERSION "0.1.0"

static void shale_usage(FILE *out)
{
	fprintf(out,
		"usage: shale <command> [options]\n"
		"\n"
		"commands:\n"
		"  serve     serve the exports over NFSv3 (see `shale serve --help`)\n"
		"  bench     load-test an NFSv3 server (see `shale bench --help`)\n"
		"  pool      create, import, export, status, check a storage pool (`shale pool help`)\n"
		"  fs        create, list, destroy a pool's file systems (`shale fs help`)\n"
		"  snapshot  create, list, destroy snapshots of file systems (`shale snapshot help`)\n"
		"  send      a snapshot as a stream, whole or since another (`shale send --help`)\n"
		"  receive   a stream into a file system of a pool (`shale receive --help`)\n"
		"  version   print the version\n");
}

static void shale_serve_usage(FILE *out)
{
	fprintf(out,
		"usage: shale serve --exports FILE [options]\n"
		"\n"
		"  --exports FILE        exports file, exports(5) syntax (required)\n"
		"  --state DIR           server state (handle key); default ./var/state\n"
		"  --listen ADDR         address to listen on; default 127.0.0.1\n"
		"  --port N              NFS and MOUNT port, TCP and UDP; default 2049, 0 = any\n"
		"  --no-portmap          neither register with rpcbind nor answer port 111\n"
		"  --portmap-port N      port of the built-in portmapper; default 111\n"
		"  --threads N           event-loop threads; default one per core\n"
		"  --fd-cache N          open files kept by the posix back end; default 16384\n"
		"  --buffered-writes     posix back end: every WRITE through the host's page cache\n"
		"                        (default: UNSTABLE WRITEs of 256 KiB to 1 MiB, aligned, go\n"
		"                        to the disk directly, O_DIRECT, and are not cached)\n"
		"  --pool-dir DIR        where the leaves of the pools named in the exports (POOL/FS)\n"
		"                        are; default " SERVER_POOL_DIR_DEFAULT "\n"
		"  --arc-max BYTES       the pools' memory: cached blocks plus dirty data (suffix K,\n"
		"                        M, G); default 256M\n"
		"  --dirty-max BYTES     the dirty data limit D: a txg starts once D is dirty (D/4\n"
		"                        under a moderate load), writers wait past 2 D; default a\n"
		"                        tenth of --arc-max (1M..128M). Smaller: a forced txg\n"
		"                        (snapshot create) returns sooner under a write load;\n"
		"                        larger: fewer txgs\n"
		"  --ready-file FILE     write port=N and portmap=MODE here once serving\n"
		"  --grace SECONDS       the lock manager's grace period after a start, when only\n"
		"                        the clients that held locks before may take them back;\n"
		"                        default 90 (it ends sooner once they all have)\n"
		"  --no-nlm              serve no lock manager (NLM, NSM): clients must mount\n"
		"                        with nolock\n"
		"  --client-locks N      locks, waits and share reservations one client may hold;\n"
		"                        default 65536 (past it: NLM4_DENIED_NOLOCKS)\n"
		"client bounds (README, \"Limits\"):\n"
		"  --max-connections N   TCP connections in all; default 4096. Past it a new one\n"
		"                        closes the least recently active connection of the\n"
		"                        address holding the most\n"
		"  --max-connections-per-address N\n"
		"                        TCP connections from one client address; default 1024\n"
		"  --connection-memory BYTES\n"
		"                        memory one connection may hold (its calls, their replies,\n"
		"                        its partial record); default 4M. Past it the connection is\n"
		"                        not read until its replies drain\n"
		"  --connection-calls N  calls one connection may have in progress or waiting to\n"
		"                        be sent; default 256. Likewise\n"
		"  --request-memory BYTES\n"
		"                        request and reply memory of all connections; default\n"
		"                        256M, shared fairly among them\n"
		"  --idle-timeout SECONDS\n"
		"                        close connections idle this long; default 300, 0 = never\n"
		"  --record-timeout SECONDS\n"
		"                        close a connection whose partial record got no byte for\n"
		"                        this long; default 30\n"
		"  --log-level LEVEL     debug, info, warn or error; default info\n");
}

static int shale_parse_uint(const char *text, unsigned long max, unsigned long *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (errno || !end || *end || end == text || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A count of at least 1 and at most 2^20 (connections, calls). */
static int shale_parse_count(const char *text, unsigned *out)
{
	unsigned long v;
	if (shale_parse_uint(text, 1u << 20, &v) < 0 || v == 0)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* argv: the verb's arguments (argv[0] "serve"); whole_argv: main's, to restart with. */
static int shale_serve(int argc, char **argv, char **whole_argv)
{
	struct server_config config = {
		.sc_state_dir = "var/state",
		.sc_listen_addr = "127.0.0.1",
		.sc_port = 2049,
		.sc_portmap = true,
		.sc_portmap_port = 111,
	};
	enum { OPT_NO_PORTMAP = 256, OPT_PORTMAP_PORT, OPT_READY, OPT_LOG, OPT_FD_CACHE, OPT_POOL_DIR, OPT_ARC_MAX,
	       OPT_DIRTY_MAX, OPT_BUFFERED_WRITES, OPT_MAX_CONNS, OPT_MAX_CONNS_ADDR, OPT_CONN_MEM, OPT_CONN_CALLS,
	       OPT_REQ_MEM, OPT_IDLE_TIMEOUT, OPT_RECORD_TIMEOUT,
	       OPT_GRACE, OPT_NO_NLM, OPT_CLIENT_LOCKS };
	static const struct option options[] = {
		{"exports", required_argument, NULL, 'e'},
		{"state", required_argument, NULL, 's'},
		{"listen", required_argument, NULL, 'l'},
		{"port", required_argument, NULL, 'p'},
		{"threads", required_argument, NULL, 't'},
		{"no-portmap", no_argument, NULL, OPT_NO_PORTMAP},
		{"portmap-port", required_argument, NULL, OPT_PORTMAP_PORT},
		{"fd-cache", required_argument, NULL, OPT_FD_CACHE},
		{"buffered-writes", no_argument, NULL, OPT_BUFFERED_WRITES},
		{"pool-dir", required_argument, NULL, OPT_POOL_DIR},
		{"arc-max", required_argument, NULL, OPT_ARC_MAX},
		{"dirty-max", required_argument, NULL, OPT_DIRTY_MAX},
		{"ready-file", required_argument, NULL, OPT_READY},
		{"max-connections", required_argument, NULL, OPT_MAX_CONNS},
		{"max-connections-per-address", required_argument, NULL, OPT_MAX_CONNS_ADDR},
		{"connection-memory", required_argument, NULL, OPT_CONN_MEM},
		{"connection-calls", required_argument, NULL, OPT_CONN_CALLS},
		{"request-memory", required_argument, NULL, OPT_REQ_MEM},
		{"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
		{"record-timeout", required_argument, NULL, OPT_RECORD_TIMEOUT},
		{"grace", required_argument, NULL, OPT_GRACE},
		{"no-nlm", no_argument, NULL, OPT_NO_NLM},
		{"client-locks", required_argument, NULL, OPT_CLIENT_LOCKS},
		{"log-level", required_argument, NULL, OPT_LOG},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int opt;
	unsigned long v;
	while ((opt = getopt_long(argc, argv, "e:s:l:p:t:h", options, NULL)) != -1) {
		switch (opt) {
		case 'e': config.sc_exports_path = optarg; break;
		case 's': config.sc_state_dir = optarg; break;
		case 'l': config.sc_listen_addr = optarg; break;
		case 'p':
			if (shale_parse_uint(optarg, 65535, &v) < 0)
				goto bad_value;
			config.sc_port = (uint16_t)v;
			break;
		case 't':
			if (shale_parse_uint(optarg, 256, &v) < 0)
				goto bad_value;
			config.sc_nthreads = (unsigned)v;
			break;
		case OPT_NO_PORTMAP: config.sc_portmap = false; break;
		case OPT_PORTMAP_PORT:
			if (shale_parse_uint(optarg, 65535, &v) < 0 || v == 0)
				goto bad_value;
			config.sc_portmap_port = (uint16_t)v;
			break;
		case OPT_FD_CACHE:
			if (shale_parse_uint(optarg, 1u << 20, &v) < 0)
				goto bad_value;
			config.sc_fd_cache_max = (unsigned)v;
			break;
		case OPT_BUFFERED_WRITES: config.sc_buffered_writes = true; break;
		case OPT_READY: config.sc_ready_file = optarg; break;
		case OPT_MAX_CONNS:
			if (shale_parse_count(optarg, &config.sc_max_conns) < 0)
				goto bad_value;
			break;
		case OPT_MAX_CONNS_ADDR:
			if (shale_parse_count(optarg, &config.sc_max_conns_per_addr) < 0)
				goto bad_value;
			break;
		case OPT_CONN_MEM:
			/* at least a largest record and its reply, so a connection can make progress */
			if (shale_parse_bytes(optarg, &config.sc_conn_mem_bytes) < 0 ||
			    config.sc_conn_mem_bytes < (2u << 20))
				goto bad_value;
			break;
		case OPT_CONN_CALLS:
			if (shale_parse_count(optarg, &config.sc_conn_calls) < 0)
				goto bad_value;
			break;
		case OPT_REQ_MEM:
			if (shale_parse_bytes(optarg, &config.sc_mem_bytes) < 0 ||
			    config.sc_mem_bytes < (16u << 20))
				goto bad_value;
			break;
		case OPT_IDLE_TIMEOUT:
			if (shale_parse_uint(optarg, 1u << 30, &v) < 0)
				goto bad_value;
			config.sc_idle_timeout_s = v == 0 ? UINT32_MAX : (unsigned)v;
			break;
		case OPT_RECORD_TIMEOUT:
			if (shale_parse_uint(optarg, 1u << 30, &v) < 0 || v == 0)
				goto bad_value;
			config.sc_record_timeout_s = (unsigned)v;
			break;
		case OPT_GRACE:
			if (shale_parse_uint(optarg, 3600, &v) < 0 || v == 0)
				goto bad_value;
			config.sc_grace_s = (unsigned)v;
			break;
		case OPT_NO_NLM: config.sc_no_nlm = true; break;
		case OPT_CLIENT_LOCKS:
			if (shale_parse_count(optarg, &config.sc_client_locks) < 0)
				goto bad_value;
			break;
		case OPT_POOL_DIR: config.sc_pool_dir = optarg; break;
		case OPT_ARC_MAX:
			if (shale_parse_bytes(optarg, &config.sc_arc_max_bytes) < 0)
				goto bad_value;
			break;
		case OPT_DIRTY_MAX:
			if (shale_parse_bytes(optarg, &config.sc_dirty_max_bytes) < 0 ||
			    config.sc_dirty_max_bytes < POOL_DIRTY_MAX_MIN)
				goto bad_value;
			break;
		case OPT_LOG:
			if (strcmp(optarg, "debug") == 0)
				log_set_level(LOG_DEBUG);
			else if (strcmp(optarg, "info") == 0)
				log_set_level(LOG_INFO);
			else if (strcmp(optarg, "warn") == 0)
				log_set_level(LOG_WARN);
			else if (strcmp(optarg, "error") == 0)
				log_set_level(LOG_ERROR);
			else
				goto bad_value;
			break;
		case 'h': shale_serve_usage(stdout); return 0;
		default: shale_serve_usage(stderr); return 2;
		}
	}
	if (optind != argc || !config.sc_exports_path) {
		shale_serve_usage(stderr);
		return 2;
	}
	server_exec_with_huge_heap(whole_argv);
	/* The memory model (pool.c) fits the open and the syncing txg, up to 2 D each, in 40% of
	 * the ARC limit: a larger D is honoured, but memory may then pass --arc-max. Said after the
	 * restart into the huge-page heap, so once. */
	uint64_t arc_max = config.sc_arc_max_bytes ? config.sc_arc_max_bytes : POOL_ARC_MAX_DEFAULT;
	if (config.sc_dirty_max_bytes > arc_max / 5)
		fprintf(stderr,
		        "shale serve: warning: --dirty-max above a fifth of --arc-max: the dirty "
		        "data of two txgs (4x it) may take memory beyond --arc-max\n");
	return server_run(&config) == 0 ? 0 : 1;
bad_value:
	fprintf(stderr, "shale serve: bad value '%s' for an option\n", optarg);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		shale_usage(stderr);
		return 2;
	}
	const char *verb = argv[1];
	if (strcmp(verb, "serve") == 0)
		return shale_serve(argc - 1, argv + 1, argv);
	if (strcmp(verb, "bench") == 0)
		return bench_main(argc - 1, argv + 1);
	/* An administrator's commands say what they did on stdout, as zpool and zfs do; of the
	 * pool's log only warnings and errors are for them (the server's info lines, such as the
	 * txg an import came up at, are in what `pool status` and `pool import` print). */
	if (strcmp(verb, "pool") == 0) {
		log_set_level(LOG_WARN);
		return shale_pool_main(argc - 1, argv + 1);
	}
	if (strcmp(verb, "fs") == 0) {
		log_set_level(LOG_WARN);
		if (argc > 2 && strcmp(argv[2], "diff") == 0)
			return shale_fs_diff_main(argc - 1, argv + 1); /* with the snapshot verbs */
		return shale_fs_main(argc - 1, argv + 1);
	}
	if (strcmp(verb, "snapshot") == 0) {
		log_set_level(LOG_WARN);
		return shale_snapshot_main(argc - 1, argv + 1);
	}
	if (strcmp(verb, "send") == 0 || strcmp(verb, "receive") == 0 || strcmp(verb, "recv") == 0) {
		log_set_level(LOG_WARN);
		return strcmp(verb, "send") == 0 ? shale_send_main(argc - 1, argv + 1)
		                                 : shale_receive_main(argc - 1, argv + 1);
	}
	if (strcmp(verb, "version") == 0 || strcmp(verb, "--version") == 0) {
		printf("shale %s\n", SHALE_VERSION);
		return 0;
	}
	if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
		shale_usage(stdout);
		return 0;
	}
	fprintf(stderr, "shale: unknown command '%s'\n", verb);
	shale_usage(stderr);
	return 2;
}
