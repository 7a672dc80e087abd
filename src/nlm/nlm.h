/* nlm.h: the lock manager NFSv3 clients lock files with: the Network Lock Manager (program
 * 100021, versions 1, 3 and 4) and the Network Status Monitor (program 100024, version 1), served
 * on the NFS port beside NFS and MOUNT, over the lock table (src/lock) and the NFS service's file
 * handles and exports. The theory (hosts, blocked locks and their callbacks, the state number,
 * grace and recovery) is at the top of nlm.c.
 *
 * Use: create the service after the NFS service (nlm_service_create), register its programs with
 * the rpc server before it starts (nlm_service_register), start it once the server runs
 * (nlm_service_start: it then notifies the clients that held locks before this start, and its
 * grace period begins). Tear down after the rpc server has stopped (nlm_service_destroy). */
#ifndef SHALE_NLM_NLM_H
#define SHALE_NLM_NLM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

struct nfs_service;
struct rpc_server;

#define NLM_GRACE_DEFAULT_S 90u            /* knfsd's and Ganesha's grace period */
#define NLM_HOST_LOCKS_DEFAULT 65536u      /* records (locks, waits, shares) one client may hold */
#define NLM_TABLE_LOCKS_DEFAULT 1048576u   /* records of all clients together */

struct nlm_service_config {
	const char *nlc_state_dir;   /* the server's state directory: nsm/ holds the state number
	                              * and the clients to notify after a restart */
	struct nfs_service *nlc_nfs; /* resolves file handles and checks exports */
	unsigned nlc_grace_s;        /* 0: NLM_GRACE_DEFAULT_S */
	uint64_t nlc_host_locks;     /* 0: NLM_HOST_LOCKS_DEFAULT */
	uint64_t nlc_table_locks;    /* 0: NLM_TABLE_LOCKS_DEFAULT */
	/* The name this server gives itself in the notifications it sends (its address as clients
	 * mount it); NULL: the address the server listens on, given to nlm_service_start. */
	const char *nlc_server_name;
};

struct nlm_service;

/* Creates the service: reads and raises the state number (nsm/state, made if absent) and reads
 * the list of clients that held locks before (nsm/hosts/). Destroy with nlm_service_destroy.
 * Returns 0 or -errno (the state directory unusable). */
SH_MUST_CHECK int nlm_service_create(const struct nlm_service_config *config,
                                     struct nlm_service **out);
/* Adds NLM (100021 v1, v3, v4) and NSM (100024 v1) to srv. Before rpc_server_start. */
SH_MUST_CHECK int nlm_service_register(struct nlm_service *svc, struct rpc_server *srv);
/* Starts the callback thread, the grace period and the notifications to the clients of the last
 * run; listen_addr is the address the server listens on (the name in notifications unless the
 * configuration gave one). After rpc_server_start. */
SH_MUST_CHECK int nlm_service_start(struct nlm_service *svc, const char *listen_addr);
/* Releases every lock on the file system with fsid (its export removed), granting nothing. */
void nlm_service_release_fs(struct nlm_service *svc, uint64_t fsid);
/* Whether the grace period runs now. */
bool nlm_service_in_grace(struct nlm_service *svc);
/* Stops the callback thread and frees the service. The rpc server must be stopped. NULL is
 * ignored. */
void nlm_service_destroy(struct nlm_service *svc);

#endif
