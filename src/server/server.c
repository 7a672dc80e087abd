/* server.c: the daemon's wiring, in start order:
 *
 *   exports file -> one fs per export: a pool's file system (POOL/FS lines: the pool is imported
 *   from --pool-dir once, replaying its intent log) or a host directory (posix back end)
 *   -> nfs service (NFS v3 + MOUNT v3 programs) -> lock manager (NLM v1/3/4 + NSM programs)
 *   -> rpc server (loops, listeners) -> portmapper (rpcbind registration or built-in)
 *   -> loop threads start -> lock manager starts (notifications, grace) -> ready file -> wait
 *   for SIGINT/SIGTERM -> stop in reverse order.
 *
 * SIGHUP reloads the exports file (as `exportfs -r`): a valid file replaces the exports for every
 * call that starts afterwards; an export whose line stays (same path or POOL/FS, same fsid) keeps
 * its open file system, so its clients notice nothing; a new one is opened (a pool imported if
 * it is not yet); a removed one's handles get NFS3ERR_STALE, and its file system is closed once
 * no call uses it (nfs_service_reap, each second). A file that does not load, or an export that
 * cannot be opened, leaves the exports as they were, with the reason in the log. (A pool's file
 * system whose fsid= changes counts as another export, and its open predecessor keeps the new one
 * from opening it: take it out in one reload and back in the next.)
 *
 * Each open file system is counted (struct server_fs) by the generations of the exports that
 * name it; the service gives a generation's back when it frees it, and the last one closes it.
 *
 * Signals are blocked in every thread (the mask is set before any thread starts, and threads
 * inherit it) and collected here with sigtimedwait, so no handler ever runs inside a loop.
 *
 * The heap in huge pages (server_exec_with_huge_heap). The pool's blocks live in malloc'd
 * buffers (the ARC's, the dirty data's), and every page of them is touched afresh as buffers are
 * freed and allocated again. On a virtual machine whose hypervisor maps guest memory lazily (the
 * development VM's kernel runs under a paravirtual MMU, and free pages are reported back to the
 * host), the first touch of a 4 KiB page costs a fault into the hypervisor, and so does the
 * kernel's first access to a user page it copies into a socket: a 1 MiB buffer written by the
 * program and then sent went out at 530 MB/s, the same buffer sent again at 3,400 MB/s, and one
 * in a 2 MiB huge page at 3,700 MB/s the first time. glibc's heap madvises itself MADV_HUGEPAGE
 * only when the tunable glibc.malloc.hugetlb is set, and tunables are read from the environment
 * at start only, so the server restarts itself once with it set. Measured on the pool (1 GiB
 * seq, server on one core): READs from the cache 566 -> 3,310 MB/s, UNSTABLE+COMMIT writes
 * 272 -> 425-470 MB/s; sfs2008 unchanged within the noise. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nfs/nfs.h"
#include "nlm/nlm.h"
#include "posix/posix.h"
#include "rpc/rpc.h"
#include "server/server.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"

/* The pools imported for the exports, by name; exported again at the end. Each answers
 * `shale pool status` on its status socket while it is served (pool_statsock.c). */
struct server_pools {
	struct pool *sp_pools[POOL_MAX_TOPS];
	struct pool_statsock *sp_status[POOL_MAX_TOPS];
	unsigned sp_count;
};

/* The status socket's "send" and "receive" (pool_open_opts.po_fs_send/po_fs_receive). */
static int server_fs_send(struct pool *p, const char *snapshot, const char *from, bool stored,
                          int fd, uint64_t *written, char *err, size_t err_len)
{
	struct pool_fs_send_stats st;
	int rc = pool_fs_send(p, snapshot, from, stored ? POOL_FS_SEND_STORED : 0, fd, &st, err,
	                      err_len);
	*written = st.ss_stream_bytes;
	return rc;
}

static int server_fs_receive(struct pool *p, const char *fs, bool force, int fd, char *err,
                             size_t err_len)
{
	struct pool_fs_recv_stats st;
	return pool_fs_receive(p, fs, force, fd, &st, err, err_len);
}

/* The pool named `name`, imported now if it is not yet. */
static int server_pool_get(const struct server_config *config, struct server_pools *pools, const char *name,
			   struct pool **out)
{
	for (unsigned i = 0; i < pools->sp_count; i++) {
		if (strcmp(pool_name(pools->sp_pools[i]), name) == 0) {
			*out = pools->sp_pools[i];
			return 0;
		}
	}
	if (pools->sp_count == SH_ARRAY_SIZE(pools->sp_pools))
		return -E2BIG;
	struct pool_open_opts opts = {
		.po_arc_max_bytes = config->sc_arc_max_bytes,
		.po_dirty_max_bytes = config->sc_dirty_max_bytes,
		.po_attach = pool_fs_attach,
		.po_fs_diff = pool_fs_diff, /* `shale fs diff` through the status socket */
		.po_fs_send = server_fs_send, /* `shale send` and `receive`, the same way */
		.po_fs_receive = server_fs_receive,
	};
	char err[512] = "";
	const char *dir = config->sc_pool_dir ? config->sc_pool_dir : SERVER_POOL_DIR_DEFAULT;
	int rc = pool_import_by_name(dir, name, &opts, out, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err[0] ? err : sh_strerror(rc));
		return rc;
	}
	log_info("pool %s imported from %s", name, dir);
	struct pool_statsock *ss = NULL;
	rc = pool_status_serve_start(*out, dir, &ss);
	if (rc < 0)
		log_warn("pool %s: no live status for `shale pool status` (%s)", name, sh_strerror(rc));
	pools->sp_status[pools->sp_count] = ss;
	pools->sp_pools[pools->sp_count++] = *out;
	return 0;
}

/* The open file systems, each with the number of exports generations naming it. */
struct server_fs {
	struct fs *sf_fs;
	unsigned sf_refs;
	struct server_fs *sf_next;
};

static int server_fs_add(struct server_fs **list, struct fs *fs)
{
	struct server_fs *sf = mem_zalloc(sizeof(*sf));
	if (!sf)
		return -ENOMEM;
	sf->sf_fs = fs;
	sf->sf_refs = 1;
	sf->sf_next = *list;
	*list = sf;
	return 0;
}

static void server_fs_ref(struct server_fs *list, struct fs *fs)
{
	for (struct server_fs *sf = list; sf; sf = sf->sf_next)
		if (sf->sf_fs == fs) {
			sf->sf_refs++;
			return;
		}
	VERIFY(!"a file system the server did not open");
}

/* nfs_service's release function (and the server's own): the last reference closes it. */
static void server_fs_release(void *arg, struct fs *fs)
{
	struct server_fs **link = arg;
	for (; *link; link = &(*link)->sf_next) {
		struct server_fs *sf = *link;
		if (sf->sf_fs != fs)
			continue;
		if (--sf->sf_refs == 0) {
			*link = sf->sf_next;
			fs_destroy(sf->sf_fs);
			mem_free(sf);
		}
		return;
	}
	VERIFY(!"a file system the server did not open");
}

/* The back end of export i: a pool's file system or a host directory. */
static int server_open_export(const struct server_config *config, struct nfs_exports *exports, size_t i,
			      struct server_pools *pools, struct fs **fs_out)
{
	const char *dataset = nfs_exports_dataset(exports, i);
	if (!dataset) {
		struct posix_fs_config pcfg = {
			.pfc_root_path = nfs_exports_path(exports, i),
			.pfc_fsid = nfs_exports_fsid(exports, i),
			.pfc_fd_cache_max = config->sc_fd_cache_max,
			.pfc_buffered_writes = config->sc_buffered_writes,
		};
		int rc = posix_fs_create(&pcfg, fs_out);
		if (rc < 0)
			log_error("cannot export %s: %s", pcfg.pfc_root_path, sh_strerror(rc));
		return rc;
	}
	const char *slash = strchr(dataset, '/');
	char name[POOL_NAME_MAX + 1];
	size_t len = (size_t)(slash - dataset);
	if (!slash || len > POOL_NAME_MAX)
		return -EINVAL; /* the exports parser only accepts POOL/FS */
	memcpy(name, dataset, len);
	name[len] = '\0';
	struct pool *p = NULL;
	int rc = server_pool_get(config, pools, name, &p);
	if (rc < 0)
		return rc;
	rc = pool_fs_open(p, slash + 1, nfs_exports_fsid(exports, i), fs_out);
	if (rc < 0)
		log_error("cannot export %s: %s%s", dataset, sh_strerror(rc),
			  rc == -ENOENT ? " (create it with `shale fs create`)" : "");
	return rc;
}

/* Whether export i of a and export j of b are the same: the same path or POOL/FS, the same
 * fsid (so the open file system serves both). */
static bool server_same_export(const struct nfs_exports *a, size_t i, const struct nfs_exports *b,
			       size_t j)
{
	const char *da = nfs_exports_dataset(a, i), *db = nfs_exports_dataset(b, j);
	if ((da == NULL) != (db == NULL) || nfs_exports_fsid(a, i) != nfs_exports_fsid(b, j))
		return false;
	if (da)
		return strcmp(da, db) == 0;
	return strcmp(nfs_exports_path(a, i), nfs_exports_path(b, j)) == 0;
}

/* SIGHUP: the exports file again (see the header). */
static void server_reload(const struct server_config *config, struct nfs_service *svc,
			  struct nlm_service *nlm, struct server_pools *pools,
			  struct server_fs **fs_open)
{
	char err[512] = "";
	struct nfs_exports *exports = NULL;
	int rc = nfs_exports_load(config->sc_exports_path, &exports, err, sizeof(err));
	if (rc < 0) {
		log_error("reload: exports file %s refused, the exports stay as they were: %s",
			  config->sc_exports_path, err[0] ? err : sh_strerror(rc));
		return;
	}
	const struct nfs_exports *cur = nfs_service_exports(svc);
	size_t n = nfs_exports_count(exports), ncur = nfs_exports_count(cur), kept = 0, taken = 0;
	/* the fsids of the exports that go (cur is retired by the reload: read them first) */
	uint64_t *gone = mem_alloc(sizeof(*gone) * (ncur ? ncur : 1));
	size_t ngone = 0;
	if (!gone) {
		log_error("reload: the exports stay as they were (%s)", sh_strerror(-ENOMEM));
		nfs_exports_destroy(exports);
		return;
	}
	for (size_t j = 0; j < ncur; j++) {
		size_t i = 0;
		while (i < n && nfs_exports_fsid(exports, i) != nfs_exports_fsid(cur, j))
			i++;
		if (i == n)
			gone[ngone++] = nfs_exports_fsid(cur, j);
	}
	struct fs **fs = mem_zalloc(sizeof(*fs) * (n ? n : 1));
	rc = fs ? 0 : -ENOMEM;
	for (; rc == 0 && taken < n; taken++) {
		size_t j = 0;
		while (j < ncur && !server_same_export(exports, taken, cur, j))
			j++;
		if (j < ncur) {
			fs[taken] = nfs_service_export_fs(svc, j);
			server_fs_ref(*fs_open, fs[taken]);
			kept++;
			continue;
		}
		rc = server_open_export(config, exports, taken, pools, &fs[taken]);
		if (rc == 0) {
			rc = server_fs_add(fs_open, fs[taken]);
			if (rc != 0)
				fs_destroy(fs[taken]);
		}
	}
	if (rc == 0) {
		rc = nfs_service_reload(svc, exports, fs);
		if (rc == 0)
			log_info("reload: serving %zu export%s (%zu kept, %zu new, %zu gone)", n,
				 n == 1 ? "" : "s", kept, n - kept, ncur - kept);
		else
			log_error("reload: the exports stay as they were: %s", sh_strerror(rc));
		/* the locks on the file systems whose exports went go with them */
		for (size_t j = 0; rc == 0 && nlm && j < ngone; j++)
			nlm_service_release_fs(nlm, gone[j]);
		exports = NULL; /* the service's, also on failure */
	} else {
		log_error("reload: the exports stay as they were (%s)", sh_strerror(rc));
		if (taken > 0)
			taken--; /* the one that failed holds nothing */
	}
	/* On failure, what was taken for the new exports goes back. */
	for (size_t i = 0; rc != 0 && fs && i < taken; i++)
		server_fs_release(fs_open, fs[i]);
	nfs_exports_destroy(exports);
	mem_free(fs);
	mem_free(gone);
}

static const char *server_portmap_mode_name(enum rpc_portmap_mode mode)
{
	switch (mode) {
	case RPC_PORTMAP_REGISTERED: return "registered";
	case RPC_PORTMAP_BUILTIN: return "builtin";
	case RPC_PORTMAP_NONE: break;
	}
	return "none";
}

static int server_mkdir_p(const char *path)
{
	char buf[4096];
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Written to a temporary name and renamed, so a reader never sees half a file. */
static int server_write_ready_file(const char *path, uint16_t port, enum rpc_portmap_mode mode)
{
	char tmp[4096 + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	char text[128];
	int len = snprintf(text, sizeof(text), "port=%u\nportmap=%s\npid=%d\n", (unsigned)port,
			   server_portmap_mode_name(mode), (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int rc = sh_write_all(fd, text, (size_t)len);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	return rc;
}

void server_exec_with_huge_heap(char *const argv[])
{
#ifdef __GLIBC__
	static const char tunable[] = "glibc.malloc.hugetlb=1";
	const char *before = getenv("GLIBC_TUNABLES");
	if (before && strstr(before, "glibc.malloc.hugetlb="))
		return;
	size_t len = (before ? strlen(before) + 1 : 0) + sizeof(tunable);
	char *value = mem_alloc(len);
	if (!value)
		return;
	snprintf(value, len, "%s%s%s", before ? before : "", before ? ":" : "", tunable);
	int rc = setenv("GLIBC_TUNABLES", value, 1);
	mem_free(value);
	if (rc != 0)
		return;
	/* The program's own path first, so that the process keeps its name (the kernel names it
	 * after the file executed, and /proc/self/exe would make it "exe"); the link itself when
	 * that path is gone (" (deleted)") or too long. */
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0 && (size_t)n < sizeof(self) - 1) {
		self[n] = '\0';
		execv(self, argv);
	}
	execv("/proc/self/exe", argv);
	/* Still here: the variable stays set, which nothing reads after the start (the server
	 * runs no other program). */
	log_debug("cannot restart with the heap in huge pages: %s", strerror(errno));
#else
	(void)argv;
#endif
}

/* Descriptors beyond the connections: listeners, the log, eventfds, rings, leaves, state. */
#define SERVER_FD_SPARE 1024u

/* Raises the soft descriptor limit so that the connection limit (max_conns, 0: rpc.h's default)
 * is reached before the descriptors run out, as far as the hard limit allows; the posix back
 * end raises it further for its fd cache. */
static void server_raise_fd_limit(unsigned max_conns)
{
	struct rpc_server_config def;
	rpc_server_config_default(&def);
	uint64_t need = (uint64_t)(max_conns != 0 ? max_conns : def.rsc_max_conns) +
			RPC_CONNS_SLACK + SERVER_FD_SPARE;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
		return;
	struct rlimit raised = {.rlim_cur = need, .rlim_max = rl.rlim_max};
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
		raised.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &raised) != 0 || raised.rlim_cur < need)
		log_warn("server: the descriptor limit (%llu) is below what %llu connections need",
			 (unsigned long long)raised.rlim_cur, (unsigned long long)need);
}

int server_run(const struct server_config *config)
{
	char err[512] = "";
	struct nfs_exports *exports = NULL;
	struct fs **fs_list = NULL;
	struct server_fs *fs_open = NULL; /* every file system open, counted */
	size_t nexports = 0;
	struct nfs_service *svc = NULL;
	struct nlm_service *nlm = NULL;
	struct rpc_server *srv = NULL;
	struct server_pools pools = {.sp_count = 0};
	int rc;

	sigset_t stop_signals;
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
	/* A client that vanishes mid-reply must not kill the server. */
	signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
	/* One malloc arena for every thread, set before any thread starts. The pool's big
	 * buffers travel between threads (a dirty buffer made on a loop thread is freed by the
	 * sync thread, a cached block read for one thread is evicted by another), and glibc
	 * returns a chunk to the arena of the thread that allocated it, where only that arena
	 * can reuse it: with an arena per thread each grows to its own peak, and the memory that
	 * --arc-max bounds (pool.c's memory model) is exceeded by the sum of those peaks
	 * (measured: 38 MiB more resident over a short sfs2008 run). Small allocations still go
	 * through glibc's per-thread caches without the arena lock, and the big ones are a few
	 * per block written, so the one lock is not contended. */
	if (mallopt(M_ARENA_MAX, 1) != 1)
		log_warn("cannot limit malloc to one arena: --arc-max may be exceeded");
#endif
	/* Objects get exactly the mode the client asks for: the client has applied its own umask,
	 * as knfsd and Ganesha assume. The server's own files name their modes explicitly. */
	umask(0);

	rc = server_mkdir_p(config->sc_state_dir);
	if (rc < 0) {
		log_error("cannot create state directory %s: %s", config->sc_state_dir, sh_strerror(rc));
		return rc;
	}
	rc = nfs_exports_load(config->sc_exports_path, &exports, err, sizeof(err));
	if (rc < 0) {
		log_error("exports file %s refused: %s", config->sc_exports_path,
			  err[0] ? err : sh_strerror(rc));
		return rc;
	}
	nexports = nfs_exports_count(exports);
	fs_list = mem_zalloc(sizeof(*fs_list) * (nexports ? nexports : 1));
	if (!fs_list) {
		rc = -ENOMEM;
		goto out_exports;
	}
	for (size_t i = 0; i < nexports; i++) {
		rc = server_open_export(config, exports, i, &pools, &fs_list[i]);
		if (rc == 0) {
			rc = server_fs_add(&fs_open, fs_list[i]);
			if (rc < 0)
				fs_destroy(fs_list[i]);
		}
		if (rc < 0)
			goto out_fs;
	}
	struct nfs_service_config ncfg = {
		.nsc_state_dir = config->sc_state_dir,
		.nsc_exports = exports,
		.nsc_fs = fs_list,
		.nsc_release_fs = server_fs_release,
		.nsc_release_arg = &fs_open,
	};
	rc = nfs_service_create(&ncfg, &svc);
	exports = NULL; /* the service's now, also on failure */
	if (rc < 0) {
		log_error("cannot create the NFS service: %s", sh_strerror(rc));
		goto out_fs;
	}
	if (!config->sc_no_nlm) {
		struct nlm_service_config lcfg = {
			.nlc_state_dir = config->sc_state_dir,
			.nlc_nfs = svc,
			.nlc_grace_s = config->sc_grace_s,
			.nlc_host_locks = config->sc_client_locks,
		};
		rc = nlm_service_create(&lcfg, &nlm);
		if (rc < 0) {
			log_error("cannot create the lock manager: %s", sh_strerror(rc));
			goto out_svc;
		}
	}
	struct rpc_server_config rcfg = {
		.rsc_nloops = config->sc_nthreads,
		.rsc_max_conns = config->sc_max_conns,
		.rsc_max_conns_per_addr = config->sc_max_conns_per_addr,
		.rsc_max_conn_buffer_bytes = (size_t)config->sc_conn_mem_bytes,
		.rsc_max_conn_calls = config->sc_conn_calls,
		.rsc_max_total_buffer_bytes = (size_t)config->sc_mem_bytes,
		.rsc_idle_timeout_s = config->sc_idle_timeout_s,
		.rsc_record_timeout_s = config->sc_record_timeout_s,
	};
	server_raise_fd_limit(config->sc_max_conns);
	rc = rpc_server_create(&rcfg, &srv);
	if (rc < 0) {
		log_error("cannot create the RPC server: %s", sh_strerror(rc));
		goto out_svc;
	}
	rc = nfs_service_register(svc, srv);
	if (rc == 0 && nlm)
		rc = nlm_service_register(nlm, srv);
	if (rc < 0) {
		log_error("cannot register NFS programs: %s", sh_strerror(rc));
		goto out_srv;
	}
	uint16_t port = 0;
	rc = rpc_server_listen(srv, config->sc_listen_addr, config->sc_port, RPC_TCP | RPC_UDP, &port);
	if (rc < 0) {
		log_error("cannot listen on %s port %u: %s", config->sc_listen_addr,
			  (unsigned)config->sc_port, sh_strerror(rc));
		goto out_srv;
	}
	enum rpc_portmap_mode pmap_mode = RPC_PORTMAP_NONE;
	if (config->sc_portmap) {
		rpc_portmap_set_port(srv, config->sc_portmap_port);
		rc = rpc_portmap_start(srv, config->sc_listen_addr, true, &pmap_mode);
		if (rc < 0)
			log_warn("portmapper unavailable (%s): clients must give port=%u,mountport=%u",
				 sh_strerror(rc), (unsigned)port, (unsigned)port);
	}
	rc = rpc_server_start(srv);
	if (rc < 0) {
		log_error("cannot start the server threads: %s", sh_strerror(rc));
		goto out_pmap;
	}
	if (nlm) {
		rc = nlm_service_start(nlm, config->sc_listen_addr);
		if (rc < 0) {
			log_error("cannot start the lock manager: %s", sh_strerror(rc));
			rpc_server_stop(srv);
			goto out_pmap;
		}
	}
	log_info("serving %zu export%s on %s port %u (NFS v3, MOUNT v3%s, TCP and UDP), "
		 "portmapper %s",
		 nexports, nexports == 1 ? "" : "s", config->sc_listen_addr, (unsigned)port,
		 nlm ? ", NLM v4 and NSM" : "", server_portmap_mode_name(pmap_mode));
	for (size_t i = 0; i < nexports; i++)
		log_info("export %s", nfs_exports_path(nfs_service_exports(svc), i));
	if (config->sc_ready_file) {
		rc = server_write_ready_file(config->sc_ready_file, port, pmap_mode);
		if (rc < 0)
			log_warn("cannot write ready file %s: %s", config->sc_ready_file, sh_strerror(rc));
	}

	int sig;
	for (;;) {
		const struct timespec tick = {.tv_sec = 1};
		sig = sigtimedwait(&stop_signals, NULL, &tick);
		if (sig == SIGINT || sig == SIGTERM)
			break;
		if (sig == SIGHUP) {
			log_info("signal %d: reloading the exports from %s", sig,
				 config->sc_exports_path);
			server_reload(config, svc, nlm, &pools, &fs_open);
		}
		nfs_service_reap(svc); /* the file systems of exports that went, once unused */
	}
	log_info("signal %d: stopping", sig);
	rc = 0;
	/* Stop order: the rpc server drains (no call in flight afterwards), so the back ends' workers
	 * are idle when the file systems go, and the service outlives every call that used it. */
	rpc_portmap_stop(srv);
	rpc_server_stop(srv);
	goto out_srv;
out_pmap:
	rpc_portmap_stop(srv);
out_srv:
	rpc_server_destroy(srv);
out_svc:
	nlm_service_destroy(nlm); /* after the server: no call uses it any more */
	nfs_service_destroy(svc); /* gives every file system back: closed */
out_fs:
	while (fs_open) /* those a service never took */
		server_fs_release(&fs_open, fs_open->sf_fs);
	mem_free(fs_list);
	/* The file systems are closed: a last txg makes everything durable and the pools close clean,
	 * so the next start need not replay their logs. */
	for (unsigned i = 0; i < pools.sp_count; i++) {
		pool_status_serve_stop(pools.sp_status[i]);
		const char *name = pool_name(pools.sp_pools[i]);
		char saved[POOL_NAME_MAX + 1];
		snprintf(saved, sizeof(saved), "%s", name);
		int erc = pool_export(pools.sp_pools[i]);
		if (erc < 0)
			log_error("pool %s: the last txg could not be written (%s); its log will be replayed "
				  "at the next import", saved, sh_strerror(erc));
		else
			log_info("pool %s exported", saved);
	}
out_exports:
	nfs_exports_destroy(exports);
	return rc;
}
