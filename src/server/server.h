/* server.h: `shale serve`, the daemon: wires the exports, the back ends, the NFS service and the
 * RPC server together, runs them until SIGINT or SIGTERM, and takes them apart again. */
#ifndef SHALE_SERVER_H
#define SHALE_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

/* Searched for the leaves of the pools that exports name (POOL/FS), relative to the current
 * directory. */
#define SERVER_POOL_DIR_DEFAULT "var/pool"

struct server_config {
	const char *sc_exports_path; /* exports(5)-style file */
	const char *sc_state_dir;    /* created if absent; holds the handle key */
	const char *sc_listen_addr;  /* numeric address, default 127.0.0.1 */
	uint16_t sc_port;            /* NFS and MOUNT, TCP and UDP; 0 = any free port */
	bool sc_portmap;             /* register with rpcbind, or answer port 111 ourselves */
	uint16_t sc_portmap_port;    /* the built-in portmapper's port (111; tests use others) */
	unsigned sc_nthreads;        /* event loops; 0 = one per core */
	unsigned sc_fd_cache_max;    /* posix back end: open files kept */
	bool sc_buffered_writes;     /* posix back end: no direct writes (posix.h) */
	const char *sc_pool_dir;     /* where the leaves of exported pools are; NULL: the default */
	uint64_t sc_arc_max_bytes;   /* pools' ARC limit; 0: the pool's default */
	uint64_t sc_dirty_max_bytes; /* pools' dirty data limit; 0: the pool's default */
	const char *sc_ready_file;   /* written once serving: "port=N" and "portmap=MODE" lines */
	/* Client bounds (rpc.h's struct rpc_server_config, "Flow control" in rpc_server.c); 0 =
	 * the default given there. */
	unsigned sc_max_conns;          /* TCP connections in all */
	unsigned sc_max_conns_per_addr; /* TCP connections from one client address */
	uint64_t sc_conn_mem_bytes;     /* memory one connection may hold */
	unsigned sc_conn_calls;         /* calls one connection may have in progress or queued */
	uint64_t sc_mem_bytes;          /* request and reply memory of all connections */
	unsigned sc_idle_timeout_s;     /* idle connections closed; UINT32_MAX: never */
	unsigned sc_record_timeout_s;   /* stalled partial records closed */
	/* The lock manager (src/nlm): its grace period after a start (0: NLM_GRACE_DEFAULT_S), and
	 * whether it is served at all (knfsd's and Ganesha's lockd can be turned off too). */
	unsigned sc_grace_s;
	bool sc_no_nlm;
	unsigned sc_client_locks; /* records one client may hold (0: NLM_HOST_LOCKS_DEFAULT) */
};

/* Restarts the process (execv of its own program, as /proc/self/exe names it, with the same argv)
 * with glibc's malloc told to back its heap with transparent huge pages
 * (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, appended to any tunables already set), unless
 * GLIBC_TUNABLES already names glibc.malloc.hugetlb, so an administrator's own setting (hugetlb=0
 * turns it off) is kept and the restarted process does not restart again. Call it first, before
 * any thread starts. Returns only when the process was not restarted: nothing to do, not a glibc
 * build, or the exec failed (logged at debug; the server then runs with the heap as it is). Why:
 * server.c, "The heap in huge pages". */
void server_exec_with_huge_heap(char *const argv[]);

/* Runs the server until SIGINT/SIGTERM. Returns 0 after a clean stop, or -errno when it could not
 * start (the reason is logged). */
SH_MUST_CHECK int server_run(const struct server_config *config);

#endif
