/* nfs_service.c: the NFS service object: the handle key kept in the state directory, the
 * per-export runtime table, the per-loop state (call free lists and client decision caches) and the
 * export check every request goes through.
 *
 * The export check (nfs_service_check) answers "which rule of export E applies to this peer?".
 * The answer depends only on (peer address, E), both fixed for the life of the exports, so each
 * loop caches it in a direct-mapped table of NFS_CLIENT_CACHE_SLOTS slots indexed by a hash of
 * the pair: a repeat client costs one hash and one compare, no scan and no syscall (host names were
 * resolved at load). The table belongs to its loop's thread and needs no lock. A call arriving on
 * a loop the service has no state for (not one of the rpc server's loops at registration) is still
 * answered correctly, by the scan, without caching.
 *
 * Each loop's state is found from loop_index(call->rc_loop) through ns_loop_map, built at
 * registration from the rpc server's loops. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nfs/nfs_impl.h"

#define NFS_KEY_FILE "handle.key"

static int nfs_key_load_or_create(const char *state_dir, uint8_t key[NFS_HANDLE_KEY_LEN])
{
	char path[FS_PATH_MAX], tmp[FS_PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", state_dir, NFS_KEY_FILE) >= sizeof(path) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/%s.tmp", state_dir, NFS_KEY_FILE) >= sizeof(tmp))
		return -ENAMETOOLONG;
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
		return -errno;

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		struct stat st;
		int rc = 0;
		if (fstat(fd, &st) < 0) {
			rc = -errno;
		} else if (st.st_size != NFS_HANDLE_KEY_LEN) {
			log_error("%s: %lld bytes, expected %u: refusing to use or replace it (handles "
				  "issued under it would become invalid)",
				  path, (long long)st.st_size, NFS_HANDLE_KEY_LEN);
			rc = -EINVAL;
		} else {
			if (st.st_mode & 077)
				log_warn("%s is readable by others (mode %o): anyone who can read it "
					 "can forge file handles",
					 path, (unsigned)(st.st_mode & 0777));
			ssize_t n = read(fd, key, NFS_HANDLE_KEY_LEN);
			if (n < 0)
				rc = -errno;
			else if (n != NFS_HANDLE_KEY_LEN)
				rc = -EIO;
		}
		close(fd);
		return rc;
	}
	if (errno != ENOENT)
		return -errno;

	/* first start: a fresh random key, written to a temporary file and renamed into place so
	 * that a crash never leaves a short key behind */
	int rc = sh_random_bytes(key, NFS_HANDLE_KEY_LEN);
	if (rc < 0)
		return rc;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	rc = sh_write_all(fd, key, NFS_HANDLE_KEY_LEN);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return rc;
	}
	int dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) < 0)
			rc = -errno;
		close(dfd);
	}
	if (rc == 0)
		log_info("created handle key %s", path);
	return rc;
}

int nfs_service_create(const struct nfs_service_config *config, struct nfs_service **out)
{
	struct nfs_service *svc = mem_zalloc(sizeof(*svc));
	if (!svc)
		return -ENOMEM;
	int rc = pthread_mutex_init(&svc->ns_mount_lock, NULL);
	if (rc != 0) {
		mem_free(svc);
		return -rc;
	}
	uint8_t key[NFS_HANDLE_KEY_LEN];
	rc = nfs_key_load_or_create(config->nsc_state_dir, key);
	if (rc < 0) {
		log_error("handle key in %s: %s", config->nsc_state_dir, sh_strerror(rc));
		goto out_fail;
	}
	nfs_handle_key_init(&svc->ns_key, key);
	memset(key, 0, sizeof(key));

	svc->ns_exports = config->nsc_exports;
	svc->ns_nexports = nfs_exports_count(config->nsc_exports);
	svc->ns_rt = mem_zalloc(sizeof(*svc->ns_rt) * (svc->ns_nexports ? svc->ns_nexports : 1));
	if (!svc->ns_rt) {
		rc = -ENOMEM;
		goto out_fail;
	}
	for (size_t i = 0; i < svc->ns_nexports; i++) {
		struct nfs_export_rt *rt = &svc->ns_rt[i];
		rt->ner_export = &config->nsc_exports->nx_exports[i];
		rt->ner_fs = config->nsc_fs[i];
		rt->ner_fsid = rt->ner_export->ne_fsid;
		rt->ner_index = i;
		rc = fs_root(rt->ner_fs, &rt->ner_root);
		if (rc < 0) {
			log_error("export %s: cannot read its root: %s", rt->ner_export->ne_path,
				  sh_strerror(rc));
			goto out_fail;
		}
	}
	*out = svc;
	return 0;

out_fail:
	nfs_service_destroy(svc);
	return rc;
}

int nfs_service_register(struct nfs_service *svc, struct rpc_server *srv)
{
	unsigned n = rpc_server_nloops(srv);
	if (n && !svc->ns_loops) {
		unsigned map_len = 0;
		for (unsigned i = 0; i < n; i++)
			map_len = SH_MAX(map_len, loop_index(rpc_server_loop(srv, i)) + 1u);
		svc->ns_loops = mem_zalloc(sizeof(*svc->ns_loops) * n);
		svc->ns_loop_map = mem_zalloc(sizeof(*svc->ns_loop_map) * map_len);
		if (!svc->ns_loops || !svc->ns_loop_map) {
			mem_free(svc->ns_loops);
			mem_free(svc->ns_loop_map);
			svc->ns_loops = NULL;
			svc->ns_loop_map = NULL;
			return -ENOMEM;
		}
		svc->ns_nloops = n;
		svc->ns_loop_map_len = map_len;
		for (unsigned i = 0; i < n; i++)
			svc->ns_loop_map[loop_index(rpc_server_loop(srv, i))] = &svc->ns_loops[i];
	}
	int rc = rpc_server_add_program(srv, &nfs3_program, svc);
	if (rc < 0)
		return rc;
	return rpc_server_add_program(srv, &mount3_program, svc);
}

void nfs_service_destroy(struct nfs_service *svc)
{
	if (!svc)
		return;
	for (unsigned i = 0; i < svc->ns_nloops; i++)
		nfs3_call_free_list(&svc->ns_loops[i]);
	mem_free(svc->ns_loops);
	mem_free(svc->ns_loop_map);
	mem_free(svc->ns_rt);
	for (size_t i = 0; i < svc->ns_nmounts; i++)
		mem_free(svc->ns_mounts[i].nme_path);
	mem_free(svc->ns_mounts);
	pthread_mutex_destroy(&svc->ns_mount_lock);
	memset(&svc->ns_key, 0, sizeof(svc->ns_key));
	mem_free(svc);
}

struct nfs_loop_state *nfs_service_loop_state(struct nfs_service *svc, const struct rpc_call *call)
{
	if (!call->rc_loop)
		return NULL;
	unsigned idx = loop_index(call->rc_loop);
	return idx < svc->ns_loop_map_len ? svc->ns_loop_map[idx] : NULL;
}

const struct nfs_export_rt *nfs_service_export_by_fsid(const struct nfs_service *svc, uint64_t fsid)
{
	/* exports are few; a scan of a small contiguous array beats hashing here */
	for (size_t i = 0; i < svc->ns_nexports; i++)
		if (svc->ns_rt[i].ner_fsid == fsid)
			return &svc->ns_rt[i];
	return NULL;
}

enum nfs_access_verdict nfs_service_check(struct nfs_service *svc, const struct rpc_call *call,
					  const struct nfs_export_rt *rt,
					  const struct nfs_client_rule **rule_out)
{
	struct nfs_addr addr;
	*rule_out = NULL;
	if (nfs_addr_from_sockaddr((const struct sockaddr *)&call->rc_peer, call->rc_peer_len,
				   &addr) < 0)
		return NFS_ACCESS_DENIED;

	long rule_idx;
	struct nfs_loop_state *ls = nfs_service_loop_state(svc, call);
	if (ls) {
		uint64_t h = sh_hash64(&addr, sizeof(addr), rt->ner_index);
		struct nfs_client_cache_slot *slot = &ls->nls_cache[h % NFS_CLIENT_CACHE_SLOTS];
		if (slot->ncs_export == rt->ner_index + 1 &&
		    memcmp(&slot->ncs_addr, &addr, sizeof(addr)) == 0) {
			rule_idx = slot->ncs_rule;
		} else {
			rule_idx = nfs_export_match(rt->ner_export, &addr);
			slot->ncs_addr = addr;
			slot->ncs_export = (uint32_t)(rt->ner_index + 1);
			slot->ncs_rule = (int32_t)rule_idx;
		}
	} else {
		rule_idx = nfs_export_match(rt->ner_export, &addr);
	}
	if (rule_idx < 0)
		return NFS_ACCESS_DENIED;
	const struct nfs_client_rule *rule = &rt->ner_export->ne_rules[rule_idx];
	*rule_out = rule;
	/* RFC 1813 leaves this to the server; knfsd refuses a `secure` export to a caller whose
	 * source port is not privileged (below 1024) */
	if ((rule->ncr_flags & NFS_EXP_SECURE) && rpc_call_peer_port(call) >= 1024)
		return NFS_ACCESS_INSECURE;
	return NFS_ACCESS_OK;
}
