/* rpc_portmap.c: the portmapper side of the server (RFC 1833, PMAP version 2, program 100000).
 *
 * A client that mounts without explicit ports asks the portmapper on port 111 which port serves
 * NFS and MOUNT. rpc_portmap_start chooses one of three modes:
 *   REGISTERED: something accepts TCP connections on 127.0.0.1:<pmap port> (rpcbind normally):
 *     every (program, version) the server serves is registered there for TCP and UDP with
 *     PMAPPROC_SET, after a PMAPPROC_UNSET that clears stale entries of an earlier run; the
 *     same UNSETs run in rpc_portmap_stop.
 *   BUILTIN: nothing answers and the caller allows it: the server itself listens on the pmap port
 *     (TCP and UDP) with listeners that serve only program 100000, and answers NULL, SET, UNSET,
 *     GETPORT and DUMP from its own program table and bound ports. SET and UNSET are honoured
 *     only from loopback addresses (so a local rpc.statd or a second server could register) and
 *     only touch the extra mappings they created, never the server's own programs.
 *   NONE: neither.
 * PMAPPROC_CALLIT is not offered (PROC_UNAVAIL): it forwards calls on behalf of anyone, which
 * makes a portmapper a traffic amplifier, and no NFS client needs it.
 *
 * Wire formats (RFC 1833 section 3):
 *   mapping  = prog | vers | prot (6 = TCP, 17 = UDP) | port       (4 x u32)
 *   SET/UNSET(mapping) -> bool;  GETPORT(mapping) -> u32 port (0 = unknown)
 *   DUMP() -> pmaplist = { bool more; mapping } ... bool false
 *
 * The builtin handlers run on any loop; the extra mappings are guarded by pm_lock, which only
 * portmapper calls take. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "rpc/rpc_impl.h"

#define RPC_PMAP_NULL 0u
#define RPC_PMAP_SET 1u
#define RPC_PMAP_UNSET 2u
#define RPC_PMAP_GETPORT 3u
#define RPC_PMAP_DUMP 4u
#define RPC_PMAP_MAX_EXTRA 64u /* mappings other local programs may SET; bounds the DUMP reply */
#define RPC_PMAP_TIMEOUT_MS 3000

struct rpc_portmap {
	struct rpc_server *pm_srv;
	enum rpc_portmap_mode pm_mode;
	uint16_t pm_port;       /* the portmapper's port (probed or bound) */
	pthread_mutex_t pm_lock; /* protects pm_extra and pm_nextra */
	struct rpc_pmap_mapping pm_extra[RPC_PMAP_MAX_EXTRA];
	unsigned pm_nextra;
};

void rpc_portmap_free(struct rpc_portmap *pm)
{
	if (!pm)
		return;
	pthread_mutex_destroy(&pm->pm_lock);
	mem_free(pm);
}

/* ------------------------------------------------------------------------------------------ */
/* Builtin portmapper */

bool rpc_pmap_get_mapping(struct xdr_dec *dec, struct rpc_pmap_mapping *m)
{
	m->pmm_prog = xdr_get_u32(dec);
	m->pmm_vers = xdr_get_u32(dec);
	m->pmm_prot = xdr_get_u32(dec);
	m->pmm_port = xdr_get_u32(dec);
	return xdr_dec_ok(dec) && xdr_dec_remaining(dec) == 0;
}

static bool rpc_pmap_peer_is_loopback(const struct rpc_call *call)
{
	if (call->rc_peer.ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)&call->rc_peer;
		return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
	}
	if (call->rc_peer.ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)&call->rc_peer;
		return IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
	}
	return false;
}

/* Calls fn for every mapping the portmapper knows: its own, the server's, the extra ones. */
static void rpc_pmap_each(struct rpc_portmap *pm, void (*fn)(const struct rpc_pmap_mapping *m, void *arg),
			  void *arg)
{
	static const uint32_t prots[2] = {RPC_IPPROTO_TCP, RPC_IPPROTO_UDP};
	static const enum rpc_transport transports[2] = {RPC_TCP, RPC_UDP};
	for (unsigned t = 0; t < 2; t++) {
		struct rpc_pmap_mapping self = {RPC_PMAP_PROG, RPC_PMAP_VERS, prots[t], pm->pm_port};
		fn(&self, arg);
	}
	const struct rpc_program_desc *prog;
	for (unsigned i = 0; rpc_server_program_at(pm->pm_srv, i, &prog); i++) {
		for (unsigned t = 0; t < 2; t++) {
			uint16_t port = rpc_server_main_port(pm->pm_srv, transports[t]);
			if (port == 0)
				continue;
			for (uint32_t v = 0; v < prog->rpg_nversions; v++) {
				struct rpc_pmap_mapping m = {prog->rpg_prog, prog->rpg_versions[v].rvd_vers,
							     prots[t], port};
				fn(&m, arg);
			}
		}
	}
	pthread_mutex_lock(&pm->pm_lock);
	for (unsigned i = 0; i < pm->pm_nextra; i++)
		fn(&pm->pm_extra[i], arg);
	pthread_mutex_unlock(&pm->pm_lock);
}

struct rpc_pmap_lookup {
	const struct rpc_pmap_mapping *pl_want;
	uint32_t pl_port;
};

static void rpc_pmap_lookup_fn(const struct rpc_pmap_mapping *m, void *arg)
{
	struct rpc_pmap_lookup *pl = arg;
	if (pl->pl_port == 0 && m->pmm_prog == pl->pl_want->pmm_prog &&
	    m->pmm_vers == pl->pl_want->pmm_vers && m->pmm_prot == pl->pl_want->pmm_prot)
		pl->pl_port = m->pmm_port;
}

static void rpc_pmap_dump_fn(const struct rpc_pmap_mapping *m, void *arg)
{
	struct xdr_enc *enc = arg;
	xdr_put_bool(enc, true);
	xdr_put_u32(enc, m->pmm_prog);
	xdr_put_u32(enc, m->pmm_vers);
	xdr_put_u32(enc, m->pmm_prot);
	xdr_put_u32(enc, m->pmm_port);
}

static void rpc_pmap_proc_null(struct rpc_call *call)
{
	rpc_reply_success(call);
}

static void rpc_pmap_reply_u32(struct rpc_call *call, uint32_t v)
{
	if (rpc_call_res_init(call, 4) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, v);
	rpc_reply_success(call);
}

static bool rpc_pmap_served_here(struct rpc_portmap *pm, uint32_t prog)
{
	const struct rpc_program_desc *p;
	if (prog == RPC_PMAP_PROG)
		return true;
	for (unsigned i = 0; rpc_server_program_at(pm->pm_srv, i, &p); i++)
		if (p->rpg_prog == prog)
			return true;
	return false;
}

static void rpc_pmap_proc_set(struct rpc_call *call)
{
	struct rpc_portmap *pm = call->rc_prog_ctx;
	struct rpc_pmap_mapping m;
	if (!rpc_pmap_get_mapping(&call->rc_args, &m)) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	bool ok = false;
	if (rpc_pmap_peer_is_loopback(call) && !rpc_pmap_served_here(pm, m.pmm_prog) &&
	    (m.pmm_prot == RPC_IPPROTO_TCP || m.pmm_prot == RPC_IPPROTO_UDP) && m.pmm_port <= 65535) {
		pthread_mutex_lock(&pm->pm_lock);
		bool exists = false;
		for (unsigned i = 0; i < pm->pm_nextra; i++)
			exists |= pm->pm_extra[i].pmm_prog == m.pmm_prog &&
				  pm->pm_extra[i].pmm_vers == m.pmm_vers &&
				  pm->pm_extra[i].pmm_prot == m.pmm_prot;
		/* As in RFC 1833: SET fails when the (prog, vers, prot) is already mapped. */
		if (!exists && pm->pm_nextra < RPC_PMAP_MAX_EXTRA) {
			pm->pm_extra[pm->pm_nextra++] = m;
			ok = true;
		}
		pthread_mutex_unlock(&pm->pm_lock);
	}
	rpc_pmap_reply_u32(call, ok ? 1u : 0u);
}

static void rpc_pmap_proc_unset(struct rpc_call *call)
{
	struct rpc_portmap *pm = call->rc_prog_ctx;
	struct rpc_pmap_mapping m;
	if (!rpc_pmap_get_mapping(&call->rc_args, &m)) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	bool ok = false;
	if (rpc_pmap_peer_is_loopback(call)) {
		pthread_mutex_lock(&pm->pm_lock);
		for (unsigned i = 0; i < pm->pm_nextra;) {
			if (pm->pm_extra[i].pmm_prog == m.pmm_prog && pm->pm_extra[i].pmm_vers == m.pmm_vers) {
				pm->pm_extra[i] = pm->pm_extra[--pm->pm_nextra];
				ok = true;
			} else {
				i++;
			}
		}
		pthread_mutex_unlock(&pm->pm_lock);
	}
	rpc_pmap_reply_u32(call, ok ? 1u : 0u);
}

static void rpc_pmap_proc_getport(struct rpc_call *call)
{
	struct rpc_portmap *pm = call->rc_prog_ctx;
	struct rpc_pmap_mapping m;
	if (!rpc_pmap_get_mapping(&call->rc_args, &m)) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	struct rpc_pmap_lookup pl = {&m, 0};
	rpc_pmap_each(pm, rpc_pmap_lookup_fn, &pl);
	rpc_pmap_reply_u32(call, pl.pl_port);
}

static void rpc_pmap_count_fn(const struct rpc_pmap_mapping *m, void *arg)
{
	(void)m;
	(*(size_t *)arg)++;
}

static void rpc_pmap_proc_dump(struct rpc_call *call)
{
	struct rpc_portmap *pm = call->rc_prog_ctx;
	if (xdr_dec_remaining(&call->rc_args) != 0) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	size_t count = 0;
	rpc_pmap_each(pm, rpc_pmap_count_fn, &count);
	/* Extras may be added between counting and encoding: leave room for the maximum. */
	if (rpc_call_res_init(call, (count + RPC_PMAP_MAX_EXTRA) * 20 + 4) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	rpc_pmap_each(pm, rpc_pmap_dump_fn, &call->rc_res);
	xdr_put_bool(&call->rc_res, false);
	rpc_reply_success(call);
}

static const struct rpc_proc_desc rpc_pmap_procs[] = {
	[RPC_PMAP_NULL] = {"NULL", rpc_pmap_proc_null, false},
	[RPC_PMAP_SET] = {"SET", rpc_pmap_proc_set, false},
	[RPC_PMAP_UNSET] = {"UNSET", rpc_pmap_proc_unset, false},
	[RPC_PMAP_GETPORT] = {"GETPORT", rpc_pmap_proc_getport, false},
	[RPC_PMAP_DUMP] = {"DUMP", rpc_pmap_proc_dump, false},
	[5] = {"CALLIT", NULL, false}, /* see the header comment */
};
static const struct rpc_version_desc rpc_pmap_versions[] = {
	{RPC_PMAP_VERS, rpc_pmap_procs, SH_ARRAY_SIZE(rpc_pmap_procs)},
};
static const struct rpc_program_desc rpc_pmap_program = {
	"portmapper", RPC_PMAP_PROG, rpc_pmap_versions, SH_ARRAY_SIZE(rpc_pmap_versions),
};

/* ------------------------------------------------------------------------------------------ */
/* Registration with a running rpcbind */

static int rpc_pmap_remote(struct rpc_clnt *clnt, uint32_t proc, const struct rpc_pmap_mapping *m,
			   uint32_t *result_out)
{
	uint8_t args[16], res[4];
	xdr_store_u32(args, m->pmm_prog);
	xdr_store_u32(args + 4, m->pmm_vers);
	xdr_store_u32(args + 8, m->pmm_prot);
	xdr_store_u32(args + 12, m->pmm_port);
	size_t res_len;
	int rc = rpc_clnt_call(clnt, RPC_PMAP_PROG, RPC_PMAP_VERS, proc, args, sizeof(args), res,
			       sizeof(res), &res_len, RPC_PMAP_TIMEOUT_MS, NULL, NULL);
	if (rc < 0)
		return rc;
	if (res_len != 4)
		return -EBADMSG;
	*result_out = ((uint32_t)res[0] << 24) | ((uint32_t)res[1] << 16) | ((uint32_t)res[2] << 8) | res[3];
	return 0;
}

/* UNSETs every version of every program of the server. */
static void rpc_pmap_unset_all(struct rpc_portmap *pm, struct rpc_clnt *clnt)
{
	const struct rpc_program_desc *prog;
	for (unsigned i = 0; rpc_server_program_at(pm->pm_srv, i, &prog); i++) {
		for (uint32_t v = 0; v < prog->rpg_nversions; v++) {
			struct rpc_pmap_mapping m = {prog->rpg_prog, prog->rpg_versions[v].rvd_vers, 0, 0};
			uint32_t ok;
			if (rpc_pmap_remote(clnt, RPC_PMAP_UNSET, &m, &ok) < 0)
				return;
		}
	}
}

static int rpc_pmap_register(struct rpc_portmap *pm, struct rpc_clnt *clnt)
{
	static const uint32_t prots[2] = {RPC_IPPROTO_TCP, RPC_IPPROTO_UDP};
	static const enum rpc_transport transports[2] = {RPC_TCP, RPC_UDP};
	rpc_pmap_unset_all(pm, clnt);
	const struct rpc_program_desc *prog;
	for (unsigned i = 0; rpc_server_program_at(pm->pm_srv, i, &prog); i++) {
		for (unsigned t = 0; t < 2; t++) {
			uint16_t port = rpc_server_main_port(pm->pm_srv, transports[t]);
			if (port == 0)
				continue;
			for (uint32_t v = 0; v < prog->rpg_nversions; v++) {
				struct rpc_pmap_mapping m = {prog->rpg_prog, prog->rpg_versions[v].rvd_vers,
							     prots[t], port};
				uint32_t ok = 0;
				int rc = rpc_pmap_remote(clnt, RPC_PMAP_SET, &m, &ok);
				if (rc < 0)
					return rc;
				if (!ok)
					log_warn("rpc: portmapper refused %s version %u over %s",
						 prog->rpg_name, m.pmm_vers, t == 0 ? "TCP" : "UDP");
			}
		}
	}
	return 0;
}

int rpc_portmap_start(struct rpc_server *srv, const char *listen_addr, bool builtin_allowed,
		      enum rpc_portmap_mode *mode_out)
{
	struct rpc_portmap **slot = rpc_server_portmap_slot(srv);
	if (*slot)
		return -EALREADY;
	struct rpc_portmap *pm = mem_zalloc(sizeof(*pm));
	if (!pm)
		return -ENOMEM;
	VERIFY(pthread_mutex_init(&pm->pm_lock, NULL) == 0);
	pm->pm_srv = srv;
	pm->pm_port = rpc_server_portmap_cfg_port(srv);
	pm->pm_mode = RPC_PORTMAP_NONE;
	int rc = 0;

	if (pm->pm_port != 0) {
		struct rpc_clnt *clnt;
		rc = rpc_clnt_create("127.0.0.1", pm->pm_port, RPC_TCP, &clnt);
		if (rc == 0) {
			rc = rpc_pmap_register(pm, clnt);
			rpc_clnt_destroy(clnt);
			if (rc < 0) {
				log_error("rpc: registering with the portmapper on port %u failed: %s",
					  pm->pm_port, sh_strerror(rc));
				goto out_free;
			}
			pm->pm_mode = RPC_PORTMAP_REGISTERED;
			log_info("rpc: registered with the portmapper on 127.0.0.1:%u", pm->pm_port);
			goto out_done;
		}
		rc = 0;
	}
	if (builtin_allowed) {
		uint16_t bound;
		rc = rpc_server_listen_program(srv, listen_addr, pm->pm_port, RPC_TCP | RPC_UDP,
					       &rpc_pmap_program, pm, &bound);
		if (rc < 0) {
			log_error("rpc: builtin portmapper cannot listen on %s:%u: %s", listen_addr,
				  pm->pm_port, sh_strerror(rc));
			goto out_free;
		}
		pm->pm_port = bound;
		pm->pm_mode = RPC_PORTMAP_BUILTIN;
		log_info("rpc: builtin portmapper on %s:%u", listen_addr, bound);
	}
out_done:
	*slot = pm;
	*mode_out = pm->pm_mode;
	return 0;
out_free:
	rpc_portmap_free(pm);
	return rc;
}

void rpc_portmap_stop(struct rpc_server *srv)
{
	struct rpc_portmap *pm = *rpc_server_portmap_slot(srv);
	if (!pm || pm->pm_mode != RPC_PORTMAP_REGISTERED)
		return;
	struct rpc_clnt *clnt;
	if (rpc_clnt_create("127.0.0.1", pm->pm_port, RPC_TCP, &clnt) == 0) {
		rpc_pmap_unset_all(pm, clnt);
		rpc_clnt_destroy(clnt);
	}
	pm->pm_mode = RPC_PORTMAP_NONE;
}

uint16_t rpc_portmap_port(const struct rpc_server *srv)
{
	struct rpc_portmap *pm = *rpc_server_portmap_slot((struct rpc_server *)srv);
	return pm && pm->pm_mode == RPC_PORTMAP_BUILTIN ? pm->pm_port : 0;
}
