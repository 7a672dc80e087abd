/* mount3.c: the MOUNT protocol, version 3 (RFC 1813 appendix I): NULL, MNT, DUMP, UMNT, UMNTALL
 * and EXPORT, served on the NFS port.
 *
 * MNT accepts an exported directory or, as mountd does, any directory below one: the longest
 * export path that is a prefix of the request (at a component boundary) names the export, whose
 * rules the client must pass: no matching rule, or a `secure` rule and an unprivileged source port
 * (mountd's "illegal port"), is MNT3ERR_ACCES; a path under no export is MNT3ERR_NOENT. The rest
 * of the path is walked one LOOKUP at a time through the export's back end (asynchronously, like
 * every fs request; "." and ".." components are refused so the walk never leaves the export), as
 * the server itself (uid 0, as mountd), and must end on a directory. The reply carries the handle
 * and the auth flavor list [AUTH_SYS].
 *
 * The mount list DUMP reports is informational only (as everywhere: clients that vanish never
 * UMNT), kept in memory under ns_mount_lock (MNT arrives on any loop) and bounded in size. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nfs/nfs_impl.h"

#define MOUNT3_LIST_MAX 4096u
#define MOUNT3_MNT_RES_BYTES (4u + 4u + NFS3_FHSIZE + 4u + 4u) /* fhandle3 + one flavor */

static void mount3_host_name(const struct rpc_call *call, char out[64])
{
	struct nfs_addr addr;
	out[0] = '\0';
	if (nfs_addr_from_sockaddr((const struct sockaddr *)&call->rc_peer, call->rc_peer_len,
				   &addr) < 0)
		return;
	static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (memcmp(addr.na_bytes, v4_prefix, 12) == 0)
		inet_ntop(AF_INET, addr.na_bytes + 12, out, 64);
	else
		inet_ntop(AF_INET6, addr.na_bytes, out, 64);
}

static void mount3_reply_void(struct rpc_call *call)
{
	if (rpc_call_res_init(call, 0) < 0)
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
	else
		rpc_reply_success(call);
}

static void mount3_null(struct rpc_call *call)
{
	mount3_reply_void(call);
}

bool mount3_dec_path(struct xdr_dec *dec, char out[MNT3_PATHLEN + 1], size_t *len_out)
{
	uint32_t len;
	const uint8_t *path = xdr_get_opaque(dec, MNT3_PATHLEN, &len);
	if (!xdr_dec_ok(dec))
		return false;
	size_t n = 0;
	for (uint32_t i = 0; i < len; i++) {
		if (path[i] == '\0')
			return false; /* would end the C string early: another path than was sent */
		if (path[i] != '/' || n == 0 || out[n - 1] != '/')
			out[n++] = (char)path[i];
	}
	while (n > 1 && out[n - 1] == '/')
		n--;
	out[n] = '\0';
	*len_out = n;
	return true;
}

static void mount3_list_add(struct nfs_service *svc, const char *host, const char *path,
			    size_t path_len)
{
	pthread_mutex_lock(&svc->ns_mount_lock);
	for (size_t i = 0; i < svc->ns_nmounts; i++)
		if (strcmp(svc->ns_mounts[i].nme_host, host) == 0 &&
		    strlen(svc->ns_mounts[i].nme_path) == path_len &&
		    memcmp(svc->ns_mounts[i].nme_path, path, path_len) == 0)
			goto out_unlock;
	if (svc->ns_nmounts == svc->ns_mounts_cap) {
		size_t cap = svc->ns_mounts_cap ? svc->ns_mounts_cap * 2 : 16;
		struct nfs_mount_entry *grown;
		if (cap > MOUNT3_LIST_MAX ||
		    !(grown = mem_realloc(svc->ns_mounts, sizeof(*grown) * cap))) {
			log_ratelimited(LOG_WARN, "mount list full: %s not recorded", host);
			goto out_unlock;
		}
		svc->ns_mounts = grown;
		svc->ns_mounts_cap = cap;
	}
	char *copy = mem_strndup(path, path_len);
	if (!copy)
		goto out_unlock;
	struct nfs_mount_entry *e = &svc->ns_mounts[svc->ns_nmounts++];
	snprintf(e->nme_host, sizeof(e->nme_host), "%s", host);
	e->nme_path = copy;
out_unlock:
	pthread_mutex_unlock(&svc->ns_mount_lock);
}

/* Removes the host's entries for one path, or all of them (path NULL). */
static void mount3_list_remove(struct nfs_service *svc, const char *host, const char *path,
			       size_t path_len)
{
	pthread_mutex_lock(&svc->ns_mount_lock);
	size_t kept = 0;
	for (size_t i = 0; i < svc->ns_nmounts; i++) {
		struct nfs_mount_entry *e = &svc->ns_mounts[i];
		bool drop = strcmp(e->nme_host, host) == 0 &&
			    (!path || (strlen(e->nme_path) == path_len &&
				       memcmp(e->nme_path, path, path_len) == 0));
		if (drop)
			mem_free(e->nme_path);
		else
			svc->ns_mounts[kept++] = *e;
	}
	svc->ns_nmounts = kept;
	pthread_mutex_unlock(&svc->ns_mount_lock);
}

/* The export whose path is the longest prefix of path at a component boundary, or -1. */
static long mount3_find_export(const struct nfs_exports *xs, const char *path, size_t len)
{
	long best = -1;
	size_t best_len = 0;
	for (size_t i = 0; i < xs->nx_count; i++) {
		const char *ep = xs->nx_exports[i].ne_path;
		size_t el = strlen(ep);
		bool root = el == 1; /* "/" is a prefix of everything */
		if (el > len || memcmp(ep, path, el) != 0)
			continue;
		if (!root && el < len && path[el] != '/')
			continue;
		if (best < 0 || el > best_len) {
			best = (long)i;
			best_len = el;
		}
	}
	return best;
}

/* One MNT in progress: the walk below the export's root. Allocated per MNT (a rare call). */
struct mount3_walk {
	struct fs_req mw_req;
	struct rpc_call *mw_call;
	struct nfs_service *mw_svc;
	struct nfs_table *mw_table; /* the exports the path was found in, held */
	const struct nfs_export_rt *mw_rt;
	struct fs_cred mw_cred;
	size_t mw_path_len;
	size_t mw_pos;       /* next byte of mw_path to walk */
	char mw_host[64];
	char mw_name[FS_NAME_MAX + 1];
	char mw_path[MNT3_PATHLEN + 1]; /* normalised */
};

static void mount3_mnt_finish(struct mount3_walk *w, uint32_t status)
{
	struct rpc_call *call = w->mw_call;
	xdr_put_u32(&call->rc_res, status);
	if (status == MNT3_OK) {
		struct nfs_fh fh;
		nfs_handle_encode(&w->mw_svc->ns_key, w->mw_rt->ner_fsid, &w->mw_req.fr_obj, &fh);
		xdr_put_opaque(&call->rc_res, fh.nf_bytes, fh.nf_len);
		xdr_put_u32(&call->rc_res, 1);
		xdr_put_u32(&call->rc_res, RPC_AUTH_SYS);
		mount3_list_add(w->mw_svc, w->mw_host, w->mw_path, w->mw_path_len);
	}
	nfs_table_rele(w->mw_table);
	mem_free(w);
	rpc_reply_success(call);
}

static uint32_t mount3_status_from_errno(int err)
{
	switch (err) {
	case -ENOENT:
	case -ESTALE:
		return MNT3ERR_NOENT;
	case -ENOTDIR:
		return MNT3ERR_NOTDIR;
	case -EACCES:
		return MNT3ERR_ACCES;
	case -EPERM:
		return MNT3ERR_PERM;
	case -ENAMETOOLONG:
		return MNT3ERR_NAMETOOLONG;
	default:
		return MNT3ERR_IO;
	}
}

/* Looks up the next component, or finishes when none is left. */
static void mount3_walk_next(struct mount3_walk *w)
{
	while (w->mw_pos < w->mw_path_len && w->mw_path[w->mw_pos] == '/')
		w->mw_pos++;
	if (w->mw_pos >= w->mw_path_len) {
		mount3_mnt_finish(w, MNT3_OK);
		return;
	}
	size_t start = w->mw_pos;
	while (w->mw_pos < w->mw_path_len && w->mw_path[w->mw_pos] != '/')
		w->mw_pos++;
	size_t n = w->mw_pos - start;
	if (n > FS_NAME_MAX) {
		mount3_mnt_finish(w, MNT3ERR_NAMETOOLONG);
		return;
	}
	memcpy(w->mw_name, w->mw_path + start, n);
	w->mw_name[n] = '\0';
	if (memchr(w->mw_name, '\0', n) || strcmp(w->mw_name, ".") == 0 ||
	    strcmp(w->mw_name, "..") == 0) {
		mount3_mnt_finish(w, MNT3ERR_NOENT);
		return;
	}
	memset(&w->mw_req.u.lookup, 0, sizeof(w->mw_req.u.lookup));
	w->mw_req.u.lookup.lk_name = w->mw_name;
	fs_submit(&w->mw_req);
}

static void mount3_walk_done(struct fs_req *req)
{
	struct mount3_walk *w = SH_CONTAINER_OF(req, struct mount3_walk, mw_req);
	if (req->fr_status < 0) {
		mount3_mnt_finish(w, mount3_status_from_errno(req->fr_status));
		return;
	}
	if (req->u.lookup.lk_attr.fa_type != FS_DIR) {
		mount3_mnt_finish(w, MNT3ERR_NOTDIR);
		return;
	}
	req->fr_obj = req->u.lookup.lk_obj;
	mount3_walk_next(w);
}

static void mount3_mnt(struct rpc_call *call)
{
	struct nfs_service *svc = call->rc_prog_ctx;
	struct mount3_walk *w = mem_zalloc(sizeof(*w));
	if (!w) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	if (!mount3_dec_path(&call->rc_args, w->mw_path, &w->mw_path_len)) {
		mem_free(w);
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	if (rpc_call_res_init(call, MOUNT3_MNT_RES_BYTES) < 0) {
		mem_free(w);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	w->mw_call = call;
	w->mw_svc = svc;
	mount3_host_name(call, w->mw_host);

	w->mw_table = nfs_table_hold(svc);
	long idx = mount3_find_export(w->mw_table->nt_exports, w->mw_path, w->mw_path_len);
	if (idx < 0) {
		mount3_mnt_finish(w, MNT3ERR_NOENT);
		return;
	}
	const struct nfs_export_rt *rt = &w->mw_table->nt_rt[idx];
	const struct nfs_client_rule *rule;
	enum nfs_access_verdict v = nfs_service_check(svc, call, rt, &rule);
	if (v == NFS_ACCESS_INSECURE) {
		log_ratelimited(LOG_WARN,
				"refused mount of %s from %s: source port %u is not privileged and "
				"the export is 'secure'",
				rt->ner_export->ne_path, w->mw_host,
				(unsigned)rpc_call_peer_port(call));
		mount3_mnt_finish(w, MNT3ERR_ACCES);
		return;
	}
	if (v != NFS_ACCESS_OK) {
		log_ratelimited(LOG_WARN, "refused mount of %s from %s: no matching client",
				rt->ner_export->ne_path, w->mw_host);
		mount3_mnt_finish(w, MNT3ERR_ACCES);
		return;
	}
	w->mw_rt = rt;
	w->mw_pos = strlen(rt->ner_export->ne_path);
	w->mw_req.fr_op = FS_OP_LOOKUP;
	w->mw_req.fr_fs = rt->ner_fs;
	w->mw_req.fr_cred = &w->mw_cred; /* uid 0: the server's own walk, as mountd's */
	w->mw_req.fr_loop = call->rc_loop;
	w->mw_req.fr_done = mount3_walk_done;
	w->mw_req.fr_done_arg = w;
	w->mw_req.fr_obj = rt->ner_root;
	mount3_walk_next(w);
}

static void mount3_dump(struct rpc_call *call)
{
	struct nfs_service *svc = call->rc_prog_ctx;
	pthread_mutex_lock(&svc->ns_mount_lock);
	size_t bytes = 4;
	for (size_t i = 0; i < svc->ns_nmounts; i++) {
		const struct nfs_mount_entry *e = &svc->ns_mounts[i];
		bytes += 4u + 4u + xdr_padded_len(strlen(e->nme_host)) + 4u +
			 xdr_padded_len(strlen(e->nme_path));
	}
	if (rpc_call_res_init(call, bytes) < 0) {
		pthread_mutex_unlock(&svc->ns_mount_lock);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	for (size_t i = 0; i < svc->ns_nmounts; i++) {
		const struct nfs_mount_entry *e = &svc->ns_mounts[i];
		xdr_put_bool(&call->rc_res, true);
		xdr_put_opaque(&call->rc_res, e->nme_host, (uint32_t)strlen(e->nme_host));
		xdr_put_opaque(&call->rc_res, e->nme_path, (uint32_t)strlen(e->nme_path));
	}
	xdr_put_bool(&call->rc_res, false);
	pthread_mutex_unlock(&svc->ns_mount_lock);
	rpc_reply_success(call);
}

static void mount3_umnt(struct rpc_call *call)
{
	struct nfs_service *svc = call->rc_prog_ctx;
	char path[MNT3_PATHLEN + 1];
	size_t len;
	if (!mount3_dec_path(&call->rc_args, path, &len)) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	char host[64];
	mount3_host_name(call, host);
	mount3_list_remove(svc, host, path, len);
	mount3_reply_void(call);
}

static void mount3_umntall(struct rpc_call *call)
{
	struct nfs_service *svc = call->rc_prog_ctx;
	char host[64];
	mount3_host_name(call, host);
	mount3_list_remove(svc, host, NULL, 0);
	mount3_reply_void(call);
}

/* exports: the list of exports, each with its client specs as groups. */
static void mount3_export(struct rpc_call *call)
{
	struct nfs_service *svc = call->rc_prog_ctx;
	struct nfs_table *table = nfs_table_hold(svc);
	const struct nfs_exports *xs = table->nt_exports;
	size_t bytes = 4;
	for (size_t i = 0; i < xs->nx_count; i++) {
		const struct nfs_export *exp = &xs->nx_exports[i];
		bytes += 4u + 4u + xdr_padded_len(strlen(exp->ne_path)) + 4u;
		for (size_t r = 0; r < exp->ne_nrules; r++)
			bytes += 4u + 4u + xdr_padded_len(strlen(exp->ne_rules[r].ncr_spec));
	}
	if (rpc_call_res_init(call, bytes) < 0) {
		nfs_table_rele(table);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	struct xdr_enc *enc = &call->rc_res;
	for (size_t i = 0; i < xs->nx_count; i++) {
		const struct nfs_export *exp = &xs->nx_exports[i];
		xdr_put_bool(enc, true);
		xdr_put_opaque(enc, exp->ne_path, (uint32_t)strlen(exp->ne_path));
		for (size_t r = 0; r < exp->ne_nrules; r++) {
			const char *spec = exp->ne_rules[r].ncr_spec;
			xdr_put_bool(enc, true);
			xdr_put_opaque(enc, spec, (uint32_t)strlen(spec));
		}
		xdr_put_bool(enc, false);
	}
	xdr_put_bool(enc, false);
	nfs_table_rele(table);
	rpc_reply_success(call);
}

static const struct rpc_proc_desc mount3_procs[MOUNTPROC3_COUNT] = {
	[MOUNTPROC3_NULL] = {"NULL", mount3_null, false},
	[MOUNTPROC3_MNT] = {"MNT", mount3_mnt, false},
	[MOUNTPROC3_DUMP] = {"DUMP", mount3_dump, false},
	[MOUNTPROC3_UMNT] = {"UMNT", mount3_umnt, false},
	[MOUNTPROC3_UMNTALL] = {"UMNTALL", mount3_umntall, false},
	[MOUNTPROC3_EXPORT] = {"EXPORT", mount3_export, false},
};

static const struct rpc_version_desc mount3_versions[] = {
	{MOUNT_V3, mount3_procs, MOUNTPROC3_COUNT},
};

const struct rpc_program_desc mount3_program = {
	"mount", MOUNT_PROGRAM, mount3_versions, SH_ARRAY_SIZE(mount3_versions),
};
