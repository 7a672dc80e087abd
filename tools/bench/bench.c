/* bench.c: `shale bench`: command line, mounting, runs and comparisons.
 *
 * What it is
 *   An NFSv3 load generator that speaks the protocol itself, through the project's asynchronous
 *   RPC client (src/rpc/rpc_aclnt.c) and its own NFSv3/MOUNT codecs (bench_nfs3.c): no kernel
 *   mount, no NFS library. Workloads: sfs2008 (bench_sfs.c), varmail, seq, meta and syncwrite
 *   (bench_wl.c). Results go through bench_stats.h: the SPECsfs2008-style text report, JSON,
 *   SVG, and the A/B ratio table of --vs. seq and meta run a fixed sequence of phases, of which
 *   --phases picks a subset (for instance only seq's UNSTABLE+COMMIT write of a very large file,
 *   or meta's create and READDIRPLUS listing of a very large directory).
 *
 * Threads (bench_engine.c)
 *   --procs P load threads, each running its own struct loop with --conns C TCP connections, each
 *   connection with up to --depth B calls in flight (SPECsfs's "biod" setting). A thread owns its
 *   connections, its operation slots (C x B, preallocated: no allocation per operation), its
 *   random generator and its latency histograms, so the hot path takes no lock and shares no
 *   cache line. The main thread only starts the threads, samples CPU at the edges of the
 *   measured window, and merges the histograms afterwards.
 *
 * Batching
 *   Calls are encoded straight into the connection's send buffer and sent together: all calls
 *   started in one pacing tick go out in one writev per connection; a completion that starts the
 *   next call does so on the connection whose reply is being handled, and the client sends those
 *   after the whole batch of replies that one read(2) returned. So the system calls per
 *   operation fall as the load rises, and one core drives well over 100k ops/s.
 *
 * Pacing (open loop, sfs2008)
 *   Each thread is given rate/P ops/s. A periodic timer (about one op per tick, no finer than
 *   100 us, no coarser than 2 ms; timer slack set to 1 us) computes how many operations are due
 *   by now since the start and appends them to a backlog stamped with the tick's time. The
 *   backlog is drained while a slot is free, at the tick and after every completion. When the
 *   server falls behind, every slot is busy and the backlog grows: the requested rate is not
 *   reduced to what the server manages (that would make a closed loop of it).
 *   --rate auto first runs the mix at a rate no server reaches (bench_sfs.c, sfs_probe_peak), so
 *   the calls in flight set the pace, and uses the throughput achieved as the 100% point.
 *   --spin-us makes each load loop poll for that long before it sleeps: on a VM, waking a
 *   sleeping thread on an idle vCPU costs tens of microseconds, which would otherwise be counted
 *   in every response time.
 *
 * Latency, and coordinated omission
 *   A closed-loop generator that measures from the moment it actually sends stops sending while
 *   the server stalls, and so never records the requests a real client population would have
 *   issued during the stall: the stall shows up as one slow request instead of thousands
 *   ("coordinated omission"). Here an operation's latency runs from its intended start: the tick
 *   at which it became due, not the later moment a slot freed up for it. Time spent waiting in
 *   the backlog because the server had every slot busy is counted against the server. Only the
 *   tick granularity (the interval between the due time and its tick) is not counted, because it
 *   is the generator's own artefact, not the server's.
 *   Each operation also records its response time from the moment its call was handed to the
 *   connection until its reply, as SPECsfs2008's generator measured it. That one excludes the
 *   client's backlog: it is bounded by Little's law (calls in flight / throughput), so near
 *   saturation it stays comparable between servers whose curves end at different loads. The
 *   sfs2008 curve and its overall response time use it; the intended-start mean and p99 are
 *   reported beside it as the queued response time.
 *
 * Closed loop (varmail, syncwrite, seq, meta)
 *   Every slot issues its next operation as soon as its reply is in: the server's speed sets
 *   the pace, and latency runs from the send. varmail and syncwrite run for --warmup plus
 *   --runtime seconds; seq and meta run each phase to its end, all of it measured.
 *
 * Measured window
 *   A load point runs --warmup seconds unmeasured, then --runtime seconds measured: an operation
 *   counts if its reply arrives inside the window. After the window the thread stops issuing and
 *   waits for its calls in flight (at most the call timeout). Every reply is decoded strictly and
 *   its status compared with the expected one; an error the workload did not expect is a failed
 *   operation, a call without a reply within --timeout-ms is unanswered, and either makes the
 *   run say so and exit 1.
 *
 * File sets
 *   Everything lives under <export>/shale-bench/: sfs2008's reusable tree (layout in
 *   bench_sfs.c), and per-run directories and files for varmail, seq, meta and syncwrite, named
 *   with a random run id and removed at the end of a successful run (meta's only when its
 *   remove phase runs).
 *
 * Server cost
 *   With --server-pid (and --vs-pid), the server's CPU seconds (utime+stime of all its threads,
 *   /proc/PID/stat) are sampled at the edges of each measured window, and its peak RSS is
 *   VmHWM after a reset through /proc/PID/clear_refs at the start of the measured points. The
 *   generator's own CPU (getrusage) is reported alongside, per operation and, as each side's
 *   share of a core, per point ("CPU per point"), so a reader can see when the client, not the
 *   server, was the limit. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_impl.h"

#define BENCH_SYNC_TIMEOUT_MS 30000
#define BENCH_SYNC_RES_MAX 65536u

/* ---- small helpers ---- */

struct bench_kept {
	struct bench_kept *bk_next;
	char bk_text[];
};
/* Strings referenced by run records; owned by this list until the process exits. */
static struct bench_kept *bench_kept_list;

const char *bench_keep(const char *text)
{
	size_t len = strlen(text);
	struct bench_kept *k = mem_alloc(sizeof(*k) + len + 1);
	if (!k)
		return "";
	memcpy(k->bk_text, text, len + 1);
	k->bk_next = bench_kept_list;
	bench_kept_list = k;
	return k->bk_text;
}

static void bench_keep_free_all(void)
{
	while (bench_kept_list) {
		struct bench_kept *k = bench_kept_list;
		bench_kept_list = k->bk_next;
		mem_free(k);
	}
}

void bench_run_add_figure(struct bench_run *run, const char *name, double value, const char *unit)
{
	if (run->br_nfigures >= BENCH_MAX_FIGURES)
		return;
	struct bench_figure *f = &run->br_figures[run->br_nfigures++];
	f->bf_name = name;
	f->bf_value = value;
	f->bf_unit = unit;
}

/* ---- synchronous set-up calls ---- */

static struct rpc_clnt *bench_sync_clnt; /* the current target's set-up connection */

int bench_sync_nfs(const struct bench_ctx *ctx, uint32_t proc, const void *args, size_t args_len,
		   struct bench_nfs3_res *res)
{
	(void)ctx;
	static uint8_t buf[BENCH_SYNC_RES_MAX];
	size_t len = 0;
	int rc = rpc_clnt_call(bench_sync_clnt, BENCH_NFS3_PROG, BENCH_NFS3_VERS, proc, args,
			       args_len, buf, sizeof(buf), &len, BENCH_SYNC_TIMEOUT_MS, NULL, NULL);
	if (rc < 0)
		return rc;
	struct xdr_dec dec;
	xdr_dec_init(&dec, buf, len);
	rc = bench_nfs3_decode(proc, &dec, res);
	res->nr_data = NULL;
	return rc;
}

int bench_sync_mkdir(const struct bench_ctx *ctx, const struct bench_fh *dir, const char *name,
		     struct bench_fh *fh_out)
{
	uint8_t args[512];
	struct xdr_enc enc;
	struct bench_nfs3_res res;
	for (int attempt = 0; attempt < 2; attempt++) {
		xdr_enc_init(&enc, args, sizeof(args));
		bench_nfs3_enc_dirop(&enc, dir, name, strlen(name));
		int rc = bench_sync_nfs(ctx, BENCH_NFS3_LOOKUP, args, xdr_enc_len(&enc), &res);
		if (rc < 0)
			return rc;
		if (res.nr_status == BENCH_NFS3_OK) {
			if (res.nr_has_attr && res.nr_attr.fa_type != BENCH_NF3DIR)
				return -ENOTDIR;
			*fh_out = res.nr_fh;
			return 0;
		}
		if (res.nr_status != BENCH_NFS3ERR_NOENT)
			return -EREMOTEIO;
		xdr_enc_init(&enc, args, sizeof(args));
		bench_nfs3_enc_mkdir(&enc, dir, name, strlen(name), 0755);
		rc = bench_sync_nfs(ctx, BENCH_NFS3_MKDIR, args, xdr_enc_len(&enc), &res);
		if (rc < 0)
			return rc;
		if (res.nr_status == BENCH_NFS3_OK && res.nr_has_fh) {
			*fh_out = res.nr_fh;
			return 0;
		}
		if (res.nr_status != BENCH_NFS3ERR_EXIST)
			return -EREMOTEIO;
		/* Someone made it meanwhile: look it up again. */
	}
	return -EREMOTEIO;
}

static void bench_ctx_close(struct bench_ctx *ctx)
{
	(void)ctx;
	rpc_clnt_destroy(bench_sync_clnt);
	bench_sync_clnt = NULL;
}

int bench_ctx_open(struct bench_ctx *ctx, const struct bench_opts *opts,
		   const struct bench_target *target)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->bc_opts = opts;
	ctx->bc_target = target;
	ctx->bc_cred.rcr_flavor = RPC_AUTH_SYS;
	ctx->bc_cred.rcr_uid = (uint32_t)getuid();
	ctx->bc_cred.rcr_gid = (uint32_t)getgid();
	int rc = sh_random_bytes(&ctx->bc_run_id, sizeof(ctx->bc_run_id));
	if (rc < 0)
		return rc;

	/* MOUNT v3 MNT over TCP. */
	struct rpc_clnt *mnt;
	rc = rpc_clnt_create(target->bt_host, target->bt_mount_port, RPC_TCP, &mnt);
	if (rc < 0) {
		log_error("bench: cannot connect to MOUNT at %s:%u: %s", target->bt_host,
			  target->bt_mount_port, sh_strerror(rc));
		return rc;
	}
	rpc_clnt_set_cred(mnt, &ctx->bc_cred);
	uint8_t args[BENCH_PATH_MAX + 16], res_buf[512];
	struct xdr_enc enc;
	xdr_enc_init(&enc, args, sizeof(args));
	bench_mount_enc_mnt(&enc, target->bt_export);
	size_t res_len = 0;
	rc = rpc_clnt_call(mnt, BENCH_MOUNT_PROG, BENCH_MOUNT_VERS, BENCH_MOUNT_MNT, args,
			   xdr_enc_len(&enc), res_buf, sizeof(res_buf), &res_len,
			   BENCH_SYNC_TIMEOUT_MS, NULL, NULL);
	rpc_clnt_destroy(mnt);
	struct bench_nfs3_res res;
	if (rc == 0) {
		struct xdr_dec dec;
		xdr_dec_init(&dec, res_buf, res_len);
		rc = bench_mount_decode_mnt(&dec, &res);
	}
	if (rc < 0 || res.nr_status != 0) {
		log_error("bench: MNT %s on %s failed: %s", target->bt_export, target->bt_server,
			  rc < 0 ? sh_strerror(rc) : "the server refused it");
		return rc < 0 ? rc : -EACCES;
	}
	ctx->bc_root = res.nr_fh;

	rc = rpc_clnt_create(target->bt_host, target->bt_port, RPC_TCP, &bench_sync_clnt);
	if (rc < 0) {
		log_error("bench: cannot connect to NFS at %s: %s", target->bt_server, sh_strerror(rc));
		return rc;
	}
	rpc_clnt_set_cred(bench_sync_clnt, &ctx->bc_cred);
	xdr_enc_init(&enc, args, sizeof(args));
	bench_nfs3_enc_fh(&enc, &ctx->bc_root);
	rc = bench_sync_nfs(ctx, BENCH_NFS3_FSINFO, args, xdr_enc_len(&enc), &res);
	if (rc < 0 || res.nr_status != BENCH_NFS3_OK) {
		log_error("bench: FSINFO on %s failed", target->bt_server);
		rc = rc < 0 ? rc : -EREMOTEIO;
		goto out_close;
	}
	/* Transfers above 1 MiB are not used; a server announcing less than 4 KiB is odd but
	 * honoured. */
	ctx->bc_rtmax = SH_MIN(SH_MAX(res.nr_rtmax, 4096u), (uint32_t)1 << 20);
	ctx->bc_wtmax = SH_MIN(SH_MAX(res.nr_wtmax, 4096u), (uint32_t)1 << 20);
	rc = bench_sync_mkdir(ctx, &ctx->bc_root, "shale-bench", &ctx->bc_work);
	if (rc < 0) {
		log_error("bench: cannot create shale-bench in %s: %s", target->bt_export, sh_strerror(rc));
		goto out_close;
	}
	return 0;
out_close:
	bench_ctx_close(ctx);
	return rc;
}

/* ---- options ---- */

static void bench_usage(FILE *out)
{
	fprintf(out,
		"usage: shale bench WORKLOAD --server HOST[:PORT] --export PATH [options]\n"
		"\n"
		"workloads:\n"
		"  sfs2008   SPECsfs2008 NFSv3 mix, open loop, --points load points up to --rate\n"
		"  varmail   filebench's varmail flow (--files, --flows), prints \"IO Summary:\"\n"
		"  seq       sequential write (UNSTABLE+COMMIT, FILE_SYNC) and verified read, MB/s\n"
		"  meta      create, getattr, lookup, remove of --files files in one directory\n"
		"            (and, asked for with --phases, a READDIRPLUS listing of them all)\n"
		"  syncwrite FILE_SYNC WRITEs of --xfer (4K) to --files files, --conns x --depth in\n"
		"            flight, closed loop for --warmup + --runtime: ops/s, MB/s, latency\n"
		"\n"
		"target:\n"
		"  --server HOST[:PORT]   numeric address, port default 2049\n"
		"  --mount-port N         MOUNT port (default: the NFS port)\n"
		"  --export PATH          exported path to mount (required)\n"
		"  --server-pid PID       server process on this machine: CPU per op, peak RSS\n"
		"  --label NAME           name in reports (default: the server address)\n"
		"load:\n"
		"  --rate OPS|auto        sfs2008 requested ops/s at 100%% (default 2000); auto: first\n"
		"                         measure this server's own peak (unpaced, --warmup +\n"
		"                         --runtime) and run the points up to it, as a vendor\n"
		"                         chose the load points of a SPECsfs2008 report\n"
		"  --points N             load points 1/N .. N/N of --rate (default 10)\n"
		"  --valid-pct P          a point counts for peak and ORT only if it achieved P%%\n"
		"                         of its requested rate (default 95; others: saturated)\n"
		"  --procs P              load threads (default 1)\n"
		"  --conns C              connections per thread (default: sfs2008 and syncwrite 4,\n"
		"                         meta 2, else 1)\n"
		"  --depth B              calls in flight per connection (default: 16; seq 4)\n"
		"  --warmup S             unmeasured seconds before each point (default 2)\n"
		"  --runtime S            measured seconds per point (default 10)\n"
		"  --timeout-ms MS        a call unanswered this long fails (default 30000)\n"
		"  --spin-us US           load threads poll this long before sleeping (default 0),\n"
		"                         so their own wake-up is not counted as response time\n"
		"file sets:\n"
		"  --fileset-mb MB        sfs2008 file set size (default 64)\n"
		"  --fileset-spec         SPECsfs2008 rule instead: 120 MB per requested op/s\n"
		"  --stable-writes        sfs2008 WRITEs as FILE_SYNC (default UNSTABLE)\n"
		"  --files N              meta files (default 10000); varmail files (default 1000);\n"
		"                         syncwrite files (default 64)\n"
		"  --flows N              varmail flows (default 16, filebench's threads)\n"
		"  --size-mb MB           seq file size; syncwrite: all its files together, each\n"
		"                         written in turn and wrapping at its share (default 256)\n"
		"  --xfer BYTES           seq and syncwrite transfer size, 4K..1M in steps of 4K,\n"
		"                         suffix K or M (default: seq 1M, syncwrite 4K)\n"
		"  --phases LIST          the phases to run, comma-separated, in the workload's order:\n"
		"                         seq: unstable,filesync,read (default all; read needs a\n"
		"                         write); meta: create,getattr,lookup,list,remove (default\n"
		"                         all but list; create always; without remove the files stay)\n"
		"output:\n"
		"  --json FILE  --svg FILE  --quiet\n"
		"comparison:\n"
		"  --vs HOST[:PORT] --vs-export PATH [--vs-mount-port N] [--vs-pid PID]\n"
		"  [--vs-label NAME] [--rounds N (default 3)]: A B A B ... and the A/B ratios\n"
		"  --before-run CMD       run CMD with /bin/sh before each run (every round and\n"
		"                         side), e.g. to start each from the same machine state;\n"
		"                         a failing CMD stops the comparison\n");
}

static int bench_parse_double(const char *text, double min, double max, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(text, &end);
	if (errno || !end || *end || end == text || !(v >= min && v <= max))
		return -EINVAL;
	*out = v;
	return 0;
}

static int bench_parse_uint(const char *text, unsigned long max, unsigned long *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (errno || !end || end == text || v > max)
		return -EINVAL;
	if (*end == 'K' || *end == 'k') {
		v *= 1024;
		end++;
	} else if (*end == 'M' || *end == 'm') {
		v *= 1048576;
		end++;
	}
	if (*end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* HOST[:PORT] (IPv6 as [addr]:port); "localhost" means 127.0.0.1. */
static int bench_parse_server(const char *text, struct bench_target *t)
{
	char host[64];
	const char *port_text = NULL;
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close || (size_t)(close - text - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, text + 1, (size_t)(close - text - 1));
		host[close - text - 1] = '\0';
		if (close[1] == ':')
			port_text = close + 2;
		else if (close[1])
			return -EINVAL;
	} else {
		const char *colon = strchr(text, ':');
		size_t len = colon ? (size_t)(colon - text) : strlen(text);
		if (len >= sizeof(host) || (colon && strchr(colon + 1, ':')))
			return -EINVAL;
		memcpy(host, text, len);
		host[len] = '\0';
		port_text = colon ? colon + 1 : NULL;
	}
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	uint8_t addr[16];
	if (inet_pton(AF_INET, host, addr) != 1 && inet_pton(AF_INET6, host, addr) != 1)
		return -EINVAL;
	unsigned long port = 2049;
	if (port_text && (bench_parse_uint(port_text, 65535, &port) < 0 || port == 0))
		return -EINVAL;
	snprintf(t->bt_host, sizeof(t->bt_host), "%s", host);
	t->bt_port = (uint16_t)port;
	snprintf(t->bt_server, sizeof(t->bt_server), "%s%s%s:%lu", strchr(host, ':') ? "[" : "",
		 host, strchr(host, ':') ? "]" : "", port);
	return 0;
}

enum {
	OPT_SERVER = 256, OPT_MOUNT_PORT, OPT_EXPORT, OPT_RATE, OPT_POINTS, OPT_PROCS, OPT_CONNS,
	OPT_DEPTH, OPT_WARMUP, OPT_RUNTIME, OPT_FILESET_MB, OPT_FILESET_SPEC, OPT_SERVER_PID,
	OPT_JSON, OPT_SVG, OPT_LABEL, OPT_VS, OPT_VS_EXPORT, OPT_VS_MOUNT_PORT, OPT_VS_PID,
	OPT_VS_LABEL, OPT_ROUNDS, OPT_FILES, OPT_FLOWS, OPT_SIZE_MB, OPT_XFER, OPT_TIMEOUT, OPT_SPIN,
	OPT_STABLE, OPT_QUIET, OPT_HELP, OPT_VALID_PCT, OPT_PHASES, OPT_BEFORE_RUN,
};

static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
	static const struct option options[] = {
		{"server", required_argument, NULL, OPT_SERVER},
		{"mount-port", required_argument, NULL, OPT_MOUNT_PORT},
		{"export", required_argument, NULL, OPT_EXPORT},
		{"rate", required_argument, NULL, OPT_RATE},
		{"points", required_argument, NULL, OPT_POINTS},
		{"procs", required_argument, NULL, OPT_PROCS},
		{"conns", required_argument, NULL, OPT_CONNS},
		{"depth", required_argument, NULL, OPT_DEPTH},
		{"warmup", required_argument, NULL, OPT_WARMUP},
		{"runtime", required_argument, NULL, OPT_RUNTIME},
		{"fileset-mb", required_argument, NULL, OPT_FILESET_MB},
		{"fileset-spec", no_argument, NULL, OPT_FILESET_SPEC},
		{"server-pid", required_argument, NULL, OPT_SERVER_PID},
		{"json", required_argument, NULL, OPT_JSON},
		{"svg", required_argument, NULL, OPT_SVG},
		{"label", required_argument, NULL, OPT_LABEL},
		{"vs", required_argument, NULL, OPT_VS},
		{"vs-export", required_argument, NULL, OPT_VS_EXPORT},
		{"vs-mount-port", required_argument, NULL, OPT_VS_MOUNT_PORT},
		{"vs-pid", required_argument, NULL, OPT_VS_PID},
		{"vs-label", required_argument, NULL, OPT_VS_LABEL},
		{"rounds", required_argument, NULL, OPT_ROUNDS},
		{"files", required_argument, NULL, OPT_FILES},
		{"flows", required_argument, NULL, OPT_FLOWS},
		{"size-mb", required_argument, NULL, OPT_SIZE_MB},
		{"xfer", required_argument, NULL, OPT_XFER},
		{"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
		{"spin-us", required_argument, NULL, OPT_SPIN},
		{"stable-writes", no_argument, NULL, OPT_STABLE},
		{"quiet", no_argument, NULL, OPT_QUIET},
		{"valid-pct", required_argument, NULL, OPT_VALID_PCT},
		{"phases", required_argument, NULL, OPT_PHASES},
		{"before-run", required_argument, NULL, OPT_BEFORE_RUN},
		{"help", no_argument, NULL, OPT_HELP},
		{NULL, 0, NULL, 0},
	};
	unsigned long mount_port = 0, vs_mount_port = 0, v;
	long conns = -1, depth = -1, files = -1;
	const char *phases = NULL;
	bool have_server = false, have_vs = false;
	const char *bad = NULL;
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		double d;
		const char *arg = optarg;
		switch (opt) {
		case OPT_SERVER:
			if (bench_parse_server(arg, &o->bo_a) < 0)
				bad = arg;
			have_server = true;
			break;
		case OPT_VS:
			if (bench_parse_server(arg, &o->bo_b) < 0)
				bad = arg;
			have_vs = true;
			break;
		case OPT_MOUNT_PORT:
		case OPT_VS_MOUNT_PORT:
			if (bench_parse_uint(arg, 65535, &v) < 0 || v == 0)
				bad = arg;
			else if (opt == OPT_MOUNT_PORT)
				mount_port = v;
			else
				vs_mount_port = v;
			break;
		case OPT_EXPORT: o->bo_a.bt_export = arg; break;
		case OPT_VS_EXPORT: o->bo_b.bt_export = arg; break;
		case OPT_LABEL: o->bo_a.bt_label = arg; break;
		case OPT_VS_LABEL: o->bo_b.bt_label = arg; break;
		case OPT_SERVER_PID:
		case OPT_VS_PID:
			if (bench_parse_uint(arg, 1u << 30, &v) < 0 || v == 0)
				bad = arg;
			else if (opt == OPT_SERVER_PID)
				o->bo_a.bt_pid = (pid_t)v;
			else
				o->bo_b.bt_pid = (pid_t)v;
			break;
		case OPT_BEFORE_RUN: o->bo_before_run = arg; break;
		case OPT_SPIN:
			if (bench_parse_uint(arg, 1000000, &v) < 0)
				bad = arg;
			else
				o->bo_spin_us = (uint32_t)v;
			break;
		case OPT_RATE:
			if (strcmp(arg, "auto") == 0)
				o->bo_rate_auto = true;
			else if (bench_parse_double(arg, 1, 1e8, &o->bo_rate) < 0)
				bad = arg;
			else
				o->bo_rate_auto = false;
			break;
		case OPT_VALID_PCT:
			if (bench_parse_double(arg, 1, 100, &d) < 0)
				bad = arg;
			else
				o->bo_valid_fraction = d / 100.0;
			break;
		case OPT_WARMUP:
		case OPT_RUNTIME:
			if (bench_parse_double(arg, opt == OPT_WARMUP ? 0 : 0.1, 86400, &d) < 0)
				bad = arg;
			else if (opt == OPT_WARMUP)
				o->bo_warmup_s = d;
			else
				o->bo_runtime_s = d;
			break;
		case OPT_FILESET_MB:
			if (bench_parse_double(arg, 0.01, 1e7, &o->bo_fileset_mb) < 0)
				bad = arg;
			break;
		case OPT_SIZE_MB:
			if (bench_parse_double(arg, 0.01, 1e7, &o->bo_size_mb) < 0)
				bad = arg;
			break;
		case OPT_FILESET_SPEC: o->bo_fileset_spec = true; break;
		case OPT_STABLE: o->bo_stable_writes = true; break;
		case OPT_QUIET: o->bo_quiet = true; break;
		case OPT_JSON: o->bo_json = arg; break;
		case OPT_PHASES: phases = arg; break;
		case OPT_SVG: o->bo_svg = arg; break;
		case OPT_POINTS:
		case OPT_PROCS:
		case OPT_CONNS:
		case OPT_DEPTH:
		case OPT_ROUNDS:
		case OPT_FILES:
		case OPT_FLOWS:
		case OPT_TIMEOUT:
		case OPT_XFER: {
			static const unsigned long maxima[] = {
				[OPT_POINTS - OPT_SERVER] = 100, [OPT_PROCS - OPT_SERVER] = 256,
				[OPT_CONNS - OPT_SERVER] = 256, [OPT_DEPTH - OPT_SERVER] = 4096,
				[OPT_ROUNDS - OPT_SERVER] = 100, [OPT_FILES - OPT_SERVER] = 10000000,
				[OPT_FLOWS - OPT_SERVER] = 4096, [OPT_TIMEOUT - OPT_SERVER] = 3600000,
				[OPT_XFER - OPT_SERVER] = 1u << 20,
			};
			if (bench_parse_uint(arg, maxima[opt - OPT_SERVER], &v) < 0 || v == 0) {
				bad = arg;
				break;
			}
			switch (opt) {
			case OPT_POINTS: o->bo_points = (unsigned)v; break;
			case OPT_PROCS: o->bo_procs = (unsigned)v; break;
			case OPT_CONNS: conns = (long)v; break;
			case OPT_DEPTH: depth = (long)v; break;
			case OPT_ROUNDS: o->bo_rounds = (unsigned)v; break;
			case OPT_FILES: files = (long)v; break;
			case OPT_FLOWS: o->bo_flows = (unsigned)v; break;
			case OPT_TIMEOUT: o->bo_timeout_ms = (uint32_t)v; break;
			default:
				if (v < 4096 || v % 4096 != 0)
					bad = arg;
				o->bo_xfer = (uint32_t)v;
				break;
			}
			break;
		}
		case OPT_HELP:
		case 'h':
			bench_usage(stdout);
			return 1;
		default:
			bench_usage(stderr);
			return -EINVAL;
		}
		if (bad) {
			fprintf(stderr, "shale bench: bad value '%s' for an option\n", bad);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "shale bench: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	if (!have_server || !o->bo_a.bt_export) {
		fprintf(stderr, "shale bench: --server and --export are required\n");
		return -EINVAL;
	}
	if (have_vs != (o->bo_b.bt_export != NULL)) {
		fprintf(stderr, "shale bench: --vs and --vs-export go together\n");
		return -EINVAL;
	}
	if (o->bo_rate_auto && o->bo_fileset_spec) {
		fprintf(stderr, "shale bench: --fileset-spec sizes the file set from --rate, so it needs a "
				"number, not --rate auto\n");
		return -EINVAL;
	}
	o->bo_vs = have_vs;
	o->bo_a.bt_mount_port = mount_port ? (uint16_t)mount_port : o->bo_a.bt_port;
	o->bo_b.bt_mount_port = vs_mount_port ? (uint16_t)vs_mount_port : o->bo_b.bt_port;
	if (!o->bo_a.bt_label)
		o->bo_a.bt_label = o->bo_a.bt_server;
	if (have_vs && !o->bo_b.bt_label)
		o->bo_b.bt_label = o->bo_b.bt_server;
	const char *w = o->bo_workload;
	bool is_sfs = strcmp(w, "sfs2008") == 0, is_meta = strcmp(w, "meta") == 0;
	bool is_seq = strcmp(w, "seq") == 0, is_vm = strcmp(w, "varmail") == 0;
	bool is_sw = strcmp(w, "syncwrite") == 0;
	if (!is_sfs && !is_meta && !is_seq && !is_vm && !is_sw) {
		fprintf(stderr, "shale bench: unknown workload '%s'\n", w);
		return -EINVAL;
	}
	if (bench_wl_phases(w, phases, &o->bo_phases) < 0)
		return -EINVAL;
	/* syncwrite: 4 x 16 = 64 requests in flight by default, each a 4 KiB FILE_SYNC WRITE to one
	 * of 64 files. */
	o->bo_conns = conns > 0 ? (unsigned)conns : is_sfs || is_sw ? 4 : is_meta ? 2 : 1;
	o->bo_depth = depth > 0 ? (unsigned)depth : is_seq ? 4 : 16;
	o->bo_files = files > 0 ? (unsigned)files : is_vm ? 1000 : is_sw ? 64 : 10000;
	if (o->bo_xfer == 0)
		o->bo_xfer = is_sw ? 4096u : 1u << 20;
	return 0;
}

/* ---- runs ---- */

static int bench_run_once(const struct bench_opts *o, const struct bench_target *target,
			  struct bench_run *run)
{
	memset(run, 0, sizeof(*run));
	run->br_workload = o->bo_workload;
	run->br_label = target->bt_label;
	run->br_server = target->bt_server;
	run->br_export = target->bt_export;
	run->br_processes = o->bo_procs;
	run->br_connections = o->bo_conns;
	run->br_depth = o->bo_depth;
	run->br_valid_fraction = o->bo_valid_fraction;
	run->br_before_run = o->bo_before_run;
	if (o->bo_before_run) {
		int status = system(o->bo_before_run);
		if (status == -1)
			return -errno;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "shale bench: --before-run command failed (status %d): %s\n",
				status, o->bo_before_run);
			return -ECANCELED;
		}
	}
	/* seq and meta run each phase to completion: no warm-up, no fixed run time. */
	bool timed = strcmp(o->bo_workload, "sfs2008") == 0 || strcmp(o->bo_workload, "varmail") == 0 ||
		     strcmp(o->bo_workload, "syncwrite") == 0;
	run->br_warmup_s = timed ? o->bo_warmup_s : 0;
	run->br_runtime_s = timed ? o->bo_runtime_s : 0;
	struct bench_ctx ctx;
	int rc = bench_ctx_open(&ctx, o, target);
	if (rc < 0)
		return rc;
	if (strcmp(o->bo_workload, "sfs2008") == 0)
		rc = bench_sfs2008(&ctx, run);
	else if (strcmp(o->bo_workload, "varmail") == 0)
		rc = bench_varmail(&ctx, run);
	else if (strcmp(o->bo_workload, "seq") == 0)
		rc = bench_seq(&ctx, run);
	else if (strcmp(o->bo_workload, "syncwrite") == 0)
		rc = bench_syncwrite(&ctx, run);
	else
		rc = bench_meta(&ctx, run);
	if (target->bt_pid > 0 && run->br_server_peak_rss_kib == 0)
		run->br_server_peak_rss_kib = bench_proc_hwm_kib(target->bt_pid);
	bench_ctx_close(&ctx);
	bench_run_finish(run);
	return rc;
}

/* A run's peak for ordering rounds: a run without a valid point (peak NAN) sorts lowest. */
static double bench_peak_key(const struct bench_run *run)
{
	return isfinite(run->br_peak_ops) ? run->br_peak_ops : -1.0;
}

/* Index of the round whose peak throughput is the median (for plots). */
static size_t bench_median_round(const struct bench_run *runs, size_t n)
{
	size_t best = 0;
	for (size_t i = 0; i < n; i++) {
		size_t below = 0, equal_before = 0;
		for (size_t j = 0; j < n; j++) {
			if (bench_peak_key(&runs[j]) < bench_peak_key(&runs[i]))
				below++;
			else if (bench_peak_key(&runs[j]) == bench_peak_key(&runs[i]) && j < i)
				equal_before++;
		}
		if (below + equal_before == n / 2)
			best = i;
	}
	return best;
}

int bench_main(int argc, char **argv)
{
	if (argc < 2 || argv[1][0] == '-') {
		bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
		bench_usage(help ? stdout : stderr);
		return help ? 0 : 2;
	}
	struct bench_opts o = {
		.bo_workload = argv[1],
		.bo_rounds = 3,
		.bo_rate = 2000,
		.bo_valid_fraction = BENCH_VALID_FRACTION_DEFAULT,
		.bo_points = 10,
		.bo_procs = 1,
		.bo_warmup_s = 2,
		.bo_runtime_s = 10,
		.bo_fileset_mb = 64,
		.bo_flows = 16,
		.bo_size_mb = 256,
		.bo_xfer = 0, /* the workload's own default unless --xfer is given */
		.bo_timeout_ms = 30000,
	};
	int rc = bench_parse(argc - 1, argv + 1, &o);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (strcmp(o.bo_workload, "sfs2008") != 0)
		o.bo_points = 1;

	size_t rounds = o.bo_vs ? o.bo_rounds : 1;
	size_t nruns = o.bo_vs ? 2 * rounds : 1;
	struct bench_run *runs = mem_zalloc(sizeof(*runs) * nruns);
	struct bench_run *a_runs = mem_zalloc(sizeof(*a_runs) * rounds);
	struct bench_run *b_runs = mem_zalloc(sizeof(*b_runs) * rounds);
	if (!runs || !a_runs || !b_runs) {
		fprintf(stderr, "shale bench: out of memory\n");
		rc = -ENOMEM;
		goto out;
	}
	bool all_ok = true;
	for (size_t r = 0; r < rounds; r++) {
		for (int side = 0; side < (o.bo_vs ? 2 : 1); side++) {
			const struct bench_target *target = side == 0 ? &o.bo_a : &o.bo_b;
			struct bench_run *run = &runs[o.bo_vs ? 2 * r + (size_t)side : r];
			if (!o.bo_quiet)
				fprintf(stderr, "== %s against %s (%s)%s\n", o.bo_workload,
					target->bt_label, target->bt_server,
					o.bo_vs ? (side == 0 ? ", A" : ", B") : "");
			rc = bench_run_once(&o, target, run);
			if (rc < 0) {
				fprintf(stderr, "shale bench: %s against %s did not complete: %s\n",
					o.bo_workload, target->bt_label, sh_strerror(rc));
				all_ok = false;
				goto report;
			}
			bench_report_text(stdout, run);
			fflush(stdout);
			if (run->br_failed || run->br_unanswered) {
				printf("RUN FAILED: %" PRIu64 " failed and %" PRIu64
				       " unanswered operations against %s\n",
				       run->br_failed, run->br_unanswered, target->bt_label);
				all_ok = false;
			}
			(side == 0 ? a_runs : b_runs)[r] = *run;
		}
	}
report:;
	struct bench_ratio ratios[64];
	size_t nratios = 0;
	bool compared = all_ok && o.bo_vs;
	if (compared) {
		nratios = bench_compare(a_runs, b_runs, rounds, ratios, SH_ARRAY_SIZE(ratios));
		bench_report_compare(stdout, o.bo_a.bt_label, o.bo_b.bt_label, ratios, nratios);
	}
	size_t done = 0;
	for (size_t i = 0; i < nruns; i++)
		if (runs[i].br_workload)
			done = i + 1;
	if (o.bo_json && done > 0) {
		/* A --vs run's JSON carries its comparison, so that readers of the file take the
		 * same ratios as the table above instead of deriving their own. */
		if (compared)
			rc = bench_report_json_vs(o.bo_json, runs, done, o.bo_a.bt_label,
						  o.bo_b.bt_label, ratios, nratios);
		else
			rc = bench_report_json(o.bo_json, runs, done);
		if (rc < 0) {
			fprintf(stderr, "shale bench: cannot write %s: %s\n", o.bo_json, sh_strerror(rc));
			all_ok = false;
		}
	}
	if (o.bo_svg && done > 0) {
		struct bench_run plot[2];
		size_t nplot = 1;
		if (o.bo_vs && all_ok) {
			plot[0] = a_runs[bench_median_round(a_runs, rounds)];
			plot[1] = b_runs[bench_median_round(b_runs, rounds)];
			nplot = 2;
		} else {
			plot[0] = runs[0];
		}
		rc = bench_report_svg(o.bo_svg, plot, nplot);
		if (rc < 0) {
			fprintf(stderr, "shale bench: cannot write %s: %s\n", o.bo_svg, sh_strerror(rc));
			all_ok = false;
		}
	}
	rc = all_ok ? 0 : -EIO;
out:
	if (runs)
		for (size_t i = 0; i < nruns; i++)
			mem_free(runs[i].br_points);
	mem_free(runs);
	mem_free(a_runs);
	mem_free(b_runs);
	bench_keep_free_all();
	return rc == 0 ? 0 : 1;
}
