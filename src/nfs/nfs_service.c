/* nfs_service.c: the NFS service object: the handle key kept in the state directory, the
 * exports' generations with each export's runtime entry, the per-loop state (call free lists and
 * client decision caches) and the export check every request goes through.
 *
 * Generations (struct nfs_table). ns_table is the current exports; a call takes it with
 * nfs_table_hold when it first resolves a handle or a path (on its loop's thread, the pointer's
 * load and the reference's increment in one callback) and gives it back when it ends. A reload
 * (nfs_service_reload, from the server's main thread) builds the next generation, stores it, then
 * posts a task to every loop and waits until each has run it: every callback that could have
 * loaded the old pointer has then ended, its increment made. Only then is the reference that the
 * current generation holds on itself dropped and the old one put on the retired list, which
 * nfs_service_reap frees once no call holds it, giving its file systems back through the release
 * function (the server closes those no other generation names). Invariant: a generation is freed
 * only when it is not current and its count is zero, and the count can no longer rise.
 *
 * The export check (nfs_service_check) answers "which rule of export E applies to this peer?".
 * The answer depends only on (peer address, E, the generation), so each loop caches it in a
 * direct-mapped table of NFS_CLIENT_CACHE_SLOTS slots indexed by a hash of address and export
 * index, each slot remembering the generation it was decided under: a repeat client costs one
 * hash and two compares, no scan and no syscall (host names were resolved at load). The table
 * belongs to its loop's thread and needs no lock. A call arriving on
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

/* A table for exports and fs (one per export), reading each export's root; or NULL with *rc_out
 * set (-ENOMEM, or fs_root's error). exports is the table's on success only. */
static struct nfs_table *nfs_table_new(struct nfs_exports *exports, struct fs **fs, uint64_t gen,
				       int *rc_out)
{
	struct nfs_table *t = mem_zalloc(sizeof(*t));
	size_t n = nfs_exports_count(exports);
	struct nfs_export_rt *rt = mem_zalloc(sizeof(*rt) * (n ? n : 1));
	*rc_out = -ENOMEM;
	if (!t || !rt) {
		mem_free(t);
		mem_free(rt);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		rt[i].ner_export = &exports->nx_exports[i];
		rt[i].ner_fs = fs[i];
		rt[i].ner_fsid = rt[i].ner_export->ne_fsid;
		rt[i].ner_index = i;
		rt[i].ner_gen = gen;
		int rc = fs_root(rt[i].ner_fs, &rt[i].ner_root);
		if (rc < 0) {
			log_error("export %s: cannot read its root: %s", rt[i].ner_export->ne_path,
				  sh_strerror(rc));
			mem_free(rt);
			mem_free(t);
			*rc_out = rc;
			return NULL;
		}
	}
	t->nt_exports = exports;
	t->nt_rt = rt;
	t->nt_count = n;
	t->nt_gen = gen;
	atomic_init(&t->nt_refs, 1); /* current */
	*rc_out = 0;
	return t;
}

/* Frees a table no call holds, giving each export's fs back. */
static void nfs_table_free(struct nfs_service *svc, struct nfs_table *t)
{
	for (size_t i = 0; i < t->nt_count; i++)
		if (svc->ns_release_fs)
			svc->ns_release_fs(svc->ns_release_arg, t->nt_rt[i].ner_fs);
	nfs_exports_destroy(t->nt_exports);
	mem_free(t->nt_rt);
	mem_free(t);
}

int nfs_service_create(const struct nfs_service_config *config, struct nfs_service **out)
{
	struct nfs_service *svc = mem_zalloc(sizeof(*svc));
	if (!svc) {
		nfs_exports_destroy(config->nsc_exports);
		return -ENOMEM;
	}
	svc->ns_release_fs = config->nsc_release_fs;
	svc->ns_release_arg = config->nsc_release_arg;
	int rc = pthread_mutex_init(&svc->ns_mount_lock, NULL);
	if (rc == 0) {
		rc = pthread_mutex_init(&svc->ns_table_lock, NULL);
		if (rc != 0)
			pthread_mutex_destroy(&svc->ns_mount_lock);
	}
	if (rc != 0) {
		nfs_exports_destroy(config->nsc_exports);
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

	struct nfs_table *t = nfs_table_new(config->nsc_exports, config->nsc_fs, 1, &rc);
	if (!t)
		goto out_fail;
	atomic_init(&svc->ns_table, t);
	*out = svc;
	return 0;

out_fail:
	/* the exports are the service's and go; the caller keeps its fs: nothing is given back */
	nfs_exports_destroy(config->nsc_exports);
	svc->ns_release_fs = NULL;
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
		svc->ns_loopv = mem_zalloc(sizeof(*svc->ns_loopv) * n);
		if (!svc->ns_loops || !svc->ns_loop_map || !svc->ns_loopv) {
			mem_free(svc->ns_loops);
			mem_free(svc->ns_loop_map);
			mem_free(svc->ns_loopv);
			svc->ns_loops = NULL;
			svc->ns_loop_map = NULL;
			svc->ns_loopv = NULL;
			return -ENOMEM;
		}
		svc->ns_nloops = n;
		svc->ns_loop_map_len = map_len;
		for (unsigned i = 0; i < n; i++) {
			svc->ns_loopv[i] = rpc_server_loop(srv, i);
			svc->ns_loop_map[loop_index(rpc_server_loop(srv, i))] = &svc->ns_loops[i];
		}
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
	mem_free(svc->ns_loopv);
	/* no call runs any more: every generation goes */
	struct nfs_table *t = atomic_load(&svc->ns_table);
	if (t)
		nfs_table_free(svc, t);
	while (svc->ns_retired) {
		struct nfs_table *old = svc->ns_retired;
		svc->ns_retired = old->nt_next;
		nfs_table_free(svc, old);
	}
	pthread_mutex_destroy(&svc->ns_table_lock);
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

struct nfs_table *nfs_table_hold(struct nfs_service *svc)
{
	/* The load and the increment happen in one loop callback: a reload swaps the pointer, then
	 * waits for every loop to end its turn before it drops the table's own reference, so a
	 * table loaded here cannot be freed before this increment (nfs_service_reload). */
	struct nfs_table *t = atomic_load_explicit(&svc->ns_table, memory_order_acquire);
	atomic_fetch_add_explicit(&t->nt_refs, 1, memory_order_relaxed);
	return t;
}

void nfs_table_rele(struct nfs_table *table)
{
	if (table)
		atomic_fetch_sub_explicit(&table->nt_refs, 1, memory_order_release);
}

const struct nfs_export_rt *nfs_table_export_by_fsid(const struct nfs_table *table, uint64_t fsid)
{
	/* exports are few; a scan of a small contiguous array beats hashing here */
	for (size_t i = 0; i < table->nt_count; i++)
		if (table->nt_rt[i].ner_fsid == fsid)
			return &table->nt_rt[i];
	return NULL;
}

const struct nfs_exports *nfs_service_exports(struct nfs_service *svc)
{
	return atomic_load(&svc->ns_table)->nt_exports;
}

struct fs *nfs_service_export_fs(struct nfs_service *svc, size_t index)
{
	struct nfs_table *t = atomic_load(&svc->ns_table);
	return index < t->nt_count ? t->nt_rt[index].ner_fs : NULL;
}

/* The reload's barrier: a task posted to every loop, counted down as each runs it. */
struct nfs_barrier {
	pthread_mutex_t nb_lock;
	pthread_cond_t nb_cv;
	unsigned nb_left;
};
struct nfs_barrier_task {
	struct loop_task bt_task;
	struct nfs_barrier *bt_barrier;
};

static void nfs_barrier_run(struct loop_task *task)
{
	struct nfs_barrier_task *bt = SH_CONTAINER_OF(task, struct nfs_barrier_task, bt_task);
	struct nfs_barrier *b = bt->bt_barrier;
	pthread_mutex_lock(&b->nb_lock);
	if (--b->nb_left == 0)
		pthread_cond_signal(&b->nb_cv);
	pthread_mutex_unlock(&b->nb_lock);
}

/* Returns once every loop has ended the turn it was in (and run the task posted after it);
 * tasks: one per loop. */
static void nfs_loops_barrier(struct nfs_service *svc, struct nfs_barrier_task *tasks)
{
	if (svc->ns_nloops == 0)
		return;
	struct nfs_barrier b = {.nb_left = svc->ns_nloops};
	pthread_mutex_init(&b.nb_lock, NULL);
	pthread_cond_init(&b.nb_cv, NULL);
	for (unsigned i = 0; i < svc->ns_nloops; i++) {
		tasks[i].bt_task.lt_fn = nfs_barrier_run;
		tasks[i].bt_barrier = &b;
		loop_post(svc->ns_loopv[i], &tasks[i].bt_task);
	}
	pthread_mutex_lock(&b.nb_lock);
	while (b.nb_left > 0)
		pthread_cond_wait(&b.nb_cv, &b.nb_lock);
	pthread_mutex_unlock(&b.nb_lock);
	pthread_cond_destroy(&b.nb_cv);
	pthread_mutex_destroy(&b.nb_lock);
}

int nfs_service_reload(struct nfs_service *svc, struct nfs_exports *exports, struct fs **fs)
{
	/* The barrier's memory first: nothing may fail once the new table is current. */
	struct nfs_barrier_task *tasks = mem_zalloc(sizeof(*tasks) * (svc->ns_nloops + 1u));
	if (!tasks) {
		nfs_exports_destroy(exports);
		return -ENOMEM;
	}
	pthread_mutex_lock(&svc->ns_table_lock);
	struct nfs_table *old = atomic_load(&svc->ns_table);
	int rc;
	struct nfs_table *t = nfs_table_new(exports, fs, old->nt_gen + 1, &rc);
	if (!t) {
		pthread_mutex_unlock(&svc->ns_table_lock);
		nfs_exports_destroy(exports);
		mem_free(tasks);
		return rc;
	}
	atomic_store_explicit(&svc->ns_table, t, memory_order_release);
	nfs_loops_barrier(svc, tasks);
	mem_free(tasks);
	old->nt_next = svc->ns_retired;
	svc->ns_retired = old;
	atomic_fetch_sub_explicit(&old->nt_refs, 1, memory_order_release); /* no longer current */
	pthread_mutex_unlock(&svc->ns_table_lock);
	nfs_service_reap(svc);
	return 0;
}

void nfs_service_reap(struct nfs_service *svc)
{
	pthread_mutex_lock(&svc->ns_table_lock);
	struct nfs_table **link = &svc->ns_retired;
	while (*link) {
		struct nfs_table *t = *link;
		if (atomic_load_explicit(&t->nt_refs, memory_order_acquire) == 0) {
			*link = t->nt_next;
			nfs_table_free(svc, t);
		} else {
			link = &t->nt_next;
		}
	}
	pthread_mutex_unlock(&svc->ns_table_lock);
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
		if (slot->ncs_export == rt->ner_index + 1 && slot->ncs_gen == rt->ner_gen &&
		    memcmp(&slot->ncs_addr, &addr, sizeof(addr)) == 0) {
			rule_idx = slot->ncs_rule;
		} else {
			rule_idx = nfs_export_match(rt->ner_export, &addr);
			slot->ncs_addr = addr;
			slot->ncs_gen = rt->ner_gen;
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

int nfs_service_lock_file(struct nfs_service *svc, const struct rpc_call *call, const uint8_t *fh,
			  size_t len, uint64_t *fsid_out, struct fs_obj_id *obj_out, bool *rw_out)
{
	*rw_out = false;
	int rc = nfs_handle_decode(&svc->ns_key, fh, len, fsid_out, obj_out);
	if (rc < 0)
		return rc;
	struct nfs_table *table = nfs_table_hold(svc);
	const struct nfs_export_rt *rt = nfs_table_export_by_fsid(table, *fsid_out);
	const struct nfs_client_rule *rule = NULL;
	if (!rt)
		rc = -ESTALE;
	else if (nfs_service_check(svc, call, rt, &rule) != NFS_ACCESS_OK)
		rc = -EACCES;
	else
		*rw_out = (rule->ncr_flags & NFS_EXP_RW) != 0;
	nfs_table_rele(table);
	return rc;
}
