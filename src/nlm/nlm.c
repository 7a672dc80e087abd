/* nlm.c: the lock manager: NLM procedures over the lock table, the clients (hosts) that lock,
 * blocked locks granted through callbacks, NSM, the state number, and recovery after restarts.
 *
 * Hosts. A client machine is its address (the request's source IP, never the port) and the
 * name it gives itself (caller_name), both: a client cannot act as another by naming itself so,
 * and two clients behind one address stay apart. A host gets an id (counting from 1) that the
 * lock table knows it by; owners are (host id, svid, owner handle), as the kernel client sends
 * them. The host table is bounded (NLM_HOSTS_MAX); when it is full, hosts that hold nothing and
 * wait for nothing are forgotten to make room, and if none can be, the request gets
 * DENIED_NOLOCKS.
 *
 * Blocked locks. A LOCK with block set that conflicts is queued in the table with a struct
 * nlm_block (its user pointer), which keeps what the GRANTED callback needs: the request's
 * address and transport, its version, cookie and lock. The reply says BLOCKED. When the table
 * grants it (on the thread of the UNLOCK that freed it) the block goes to the callback threads
 * (NLM_CALLBACK_THREADS of them, so that a client that does not answer holds up one), one of which
 * finds the client's NLM port through the portmapper at the request's address (callbacks
 * go nowhere else), and calls GRANTED. The client's answer decides: GRANTED keeps the lock;
 * DENIED (it no longer waits: it cancelled, or gave up) unlocks it; no answer is tried again
 * NLM_CALLBACK_TRIES times, NLM_CALLBACK_RETRY_MS apart, and then the grant is withdrawn
 * (unlocked). While a GRANTED is in flight the block is on ns_granting: a CANCEL that finds no
 * waiting request there finds it, and unlocks the grant at once (the client's answer to the
 * GRANTED will be DENIED). The _MSG procedures work as their plain forms, reply nothing in their
 * RPC reply (a void result), and send the result as a _RES call through the same threads.
 *
 * The state number and recovery (NSM's model, as statd and knfsd keep it):
 *
 *   file (in the state directory)  content
 *   -----------------------------  -------------------------------------------------------------
 *   nsm/state                      the NSM state number, decimal; odd while the server runs. Each
 *                                  start reads it, adds 2 (or 1 if even), writes it back (a new
 *                                  file renamed over the old, both fsynced) before serving
 *   nsm/hosts/H                    a client that has held a lock in this run: 16 bytes of address
 *                                  (IPv6, IPv4 mapped) then its name. H: a hash of both, in hex.
 *                                  Written and fsynced (with the directory) before the first
 *                                  lock of that client is granted
 *   nsm/hosts.prev/H               the clients of the runs before this one: at start every file
 *                                  of hosts/ moves here; the files go when the grace period ends
 *
 * Rules:
 *   R1 A lock is granted to a client only once its nsm/hosts file is durable; so after a crash
 *      the next start knows every client that may believe it holds a lock.
 *   R2 Each start begins a grace period (nlc_grace_s): new LOCK, TEST and SHARE get
 *      DENIED_GRACE_PERIOD; LOCK and SHARE with reclaim set are served only for a client of
 *      hosts.prev (by address), otherwise DENIED. After grace, reclaims get DENIED_GRACE_PERIOD
 *      (as knfsd). UNLOCK, CANCEL, reads and writes go on.
 *   R3 At start the callback threads send SM_NOTIFY (our name, the new state) to each client of
 *      hosts.prev, whose kernel then reclaims its locks.
 *   R4 Grace ends at its time, or as soon as every client of hosts.prev is done: it sent a
 *      request without reclaim (a kernel client sends none while it reclaims), or freed all
 *      (FREE_ALL, or its own SM_NOTIFY). With no client in hosts.prev it ends at once.
 *   R5 A client's SM_NOTIFY (it rebooted) or FREE_ALL releases all its locks, shares and
 *      blocked requests at once, granting those that waited on them; so does the removal of an
 *      export, for the locks on it (nlm_service_release_fs).
 *
 * Concurrency. Procedures run on the rpc loops, any of them. ns_lock guards the hosts, the
 * callback queue, ns_granting and the grace state; the lock table has its own mutex (a leaf, and
 * its callbacks run without it: they take ns_lock). The callback threads make blocking RPC calls
 * with no lock held. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lock/lock.h"
#include "nfs/nfs.h"
#include "nlm/nlm.h"
#include "nlm/nlm_xdr.h"
#include "rpc/rpc.h"

#define NLM_HOSTS_MAX 16384u         /* hosts known at once */
#define NLM_HOST_SLOTS 1024u         /* hash slots of the host table */
#define NLM_JOBS_MAX 4096u           /* _RES and NOTIFY calls waiting to be sent */
#define NLM_CALLBACK_TRIES 5u        /* tries of one callback before it is given up */
#define NLM_CALLBACK_RETRY_MS 2000u  /* between tries; also each try's timeout */
#define NLM_CALLBACK_THREADS 4u      /* callbacks in flight at once: a client that does not answer
                                      * holds one thread for a try's timeout, not every grant */
#define NLM_PMAP_PORT 111u
#define NLM_PREV_MAX 65536u          /* clients of hosts.prev read at start */
#define NLM_ADDR_LEN 16u

/* ---------------------------------------------------------------------------------------------
 * Records */

struct nlm_host {
	struct nlm_host *nh_next; /* hash chain */
	uint64_t nh_id;
	uint64_t nh_hash;
	uint8_t nh_addr[NLM_ADDR_LEN];
	bool nh_monitored;  /* its nsm/hosts file is durable (R1) */
	uint32_t nh_refs;   /* blocks and jobs naming it: it is not forgotten while any does */
	uint32_t nh_name_len;
	uint8_t nh_name[];
};

/* A client of the runs before (hosts.prev). */
struct nlm_prev {
	uint8_t np_addr[NLM_ADDR_LEN];
	bool np_done; /* R4 */
	uint32_t np_name_len;
	char np_name[NLM_NAME_MAX + 1];
};

/* A blocked lock: the lock table's user pointer, then a GRANTED callback's subject. */
struct nlm_block {
	struct nlm_block *nb_prev, *nb_next; /* on ns_granting while its GRANTED is in flight */
	struct nlm_host *nb_host;            /* held (nh_refs) */
	struct sockaddr_storage nb_peer;
	socklen_t nb_peer_len;
	enum rpc_transport nb_transport;
	uint32_t nb_vers;
	bool nb_exclusive;
	bool nb_withdrawn; /* CANCEL unlocked it while its GRANTED was in flight */
	unsigned nb_tries;
	struct lock_file nb_file;
	struct lock_range nb_range;
	int32_t nb_svid;
	uint64_t nb_offset, nb_len; /* as the request said them, for the callback */
	uint32_t nb_cookie_len, nb_caller_len, nb_fh_len, nb_oh_len;
	uint8_t nb_bytes[]; /* cookie, caller name, fh, oh */
};

enum nlm_job_kind { NLM_JOB_GRANTED, NLM_JOB_RES, NLM_JOB_NOTIFY };

struct nlm_job {
	struct nlm_job *nj_next;
	enum nlm_job_kind nj_kind;
	uint64_t nj_not_before_ns;
	unsigned nj_tries;
	struct nlm_block *nj_block; /* GRANTED */
	struct sockaddr_storage nj_peer;
	socklen_t nj_peer_len;
	enum rpc_transport nj_transport;
	uint32_t nj_prog, nj_vers, nj_proc;
	size_t nj_args_len;
	uint8_t nj_args[]; /* RES and NOTIFY: the call's encoded arguments */
};

struct nlm_service {
	struct nfs_service *ns_nfs;
	struct lock_table *ns_locks;
	char *ns_state_dir;
	char *ns_server_name;
	int32_t ns_state;
	unsigned ns_grace_s;
	uint16_t ns_pmap_port; /* where clients' portmappers answer: 111, or a test's port */

	pthread_mutex_t ns_lock;
	pthread_cond_t ns_cv; /* the callback threads wait here for jobs */
	struct nlm_host *ns_hosts[NLM_HOST_SLOTS];
	uint64_t ns_nhosts;
	uint64_t ns_next_host_id;
	uint64_t ns_host_seed;
	struct nlm_job *ns_jobs; /* in arrival order; each with its time */
	struct nlm_job **ns_jobs_tail;
	unsigned ns_njobs;
	struct nlm_block *ns_granting;
	struct nlm_prev *ns_prev;
	size_t ns_nprev;
	bool ns_grace;
	uint64_t ns_grace_end_ns;
	bool ns_prev_forgotten; /* hosts.prev emptied, grace being over */
	bool ns_stopping;
	unsigned ns_nthreads; /* callback threads started */
	pthread_t ns_threads[NLM_CALLBACK_THREADS];
};

/* ---------------------------------------------------------------------------------------------
 * Small helpers */

/* The request's source address in the 16-byte form (IPv4 mapped into IPv6). */
static int nlm_addr_of(const struct sockaddr_storage *ss, socklen_t len,
                       uint8_t out[NLM_ADDR_LEN])
{
	if (ss->ss_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)ss;
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &in->sin_addr, 4);
		return 0;
	}
	if (ss->ss_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		memcpy(out, &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* The socket address of a 16-byte address (port 0): an IPv4 one for a mapped address. */
static socklen_t nlm_sockaddr_of(const uint8_t addr[NLM_ADDR_LEN], struct sockaddr_storage *ss)
{
	static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	memset(ss, 0, sizeof(*ss));
	if (memcmp(addr, v4_prefix, 12) == 0) {
		struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, addr + 12, 4);
		return sizeof(*in);
	}
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
	in6->sin6_family = AF_INET6;
	memcpy(&in6->sin6_addr, addr, NLM_ADDR_LEN);
	return sizeof(*in6);
}

/* The address as text for rpc_clnt_create. */
static void nlm_addr_text(const uint8_t addr[NLM_ADDR_LEN], char out[INET6_ADDRSTRLEN])
{
	static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (memcmp(addr, v4_prefix, 12) == 0)
		inet_ntop(AF_INET, addr + 12, out, INET6_ADDRSTRLEN);
	else
		inet_ntop(AF_INET6, addr, out, INET6_ADDRSTRLEN);
}

/* The byte range of an NLM offset and length: a length of 0, or one that runs past the last
 * byte, reaches the end of the file and beyond (knfsd's reading). */
static struct lock_range nlm_range(uint64_t offset, uint64_t len)
{
	struct lock_range r = {.lr_start = offset, .lr_end = LOCK_END};
	if (len != 0 && len - 1 <= LOCK_END - offset)
		r.lr_end = offset + (len - 1);
	return r;
}

/* A range as NLM's offset and length (0: to the end), clamped to 32 bits for versions 1 and 3. */
static void nlm_range_out(uint32_t vers, const struct lock_range *r, uint64_t *offset,
                          uint64_t *len)
{
	*offset = r->lr_start;
	*len = r->lr_end == LOCK_END ? 0 : r->lr_end - r->lr_start + 1;
	if (vers < NLM_VERS4) {
		if (*offset > UINT32_MAX)
			*offset = UINT32_MAX;
		if (*len > UINT32_MAX)
			*len = 0;
	}
}

static uint64_t nlm_now_ns(void)
{
	return clock_monotonic_ns();
}

/* ---------------------------------------------------------------------------------------------
 * The state directory */

/* STATE/nsm/rel into out. */
static int nlm_path(const struct nlm_service *svc, char *out, size_t cap, const char *rel)
{
	int n = snprintf(out, cap, "%s/nsm/%s", svc->ns_state_dir, rel);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int nlm_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

/* Writes len bytes to path durably: a new file renamed into place, then the directory synced. */
static int nlm_write_durable(const char *dir, const char *path, const void *data, size_t len)
{
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = sh_write_all(fd, data, len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc == 0)
		rc = nlm_fsync_dir(dir);
	if (rc != 0)
		(void)unlink(tmp);
	return rc;
}

/* Reads nsm/state, raises it to the next odd number and writes it back (durably). */
static int nlm_state_advance(struct nlm_service *svc)
{
	char dir[PATH_MAX], path[PATH_MAX];
	int rc = nlm_path(svc, dir, sizeof(dir), "");
	if (rc == 0)
		rc = nlm_path(svc, path, sizeof(path), "state");
	if (rc != 0)
		return rc;
	char *text = NULL;
	size_t len = 0;
	long long state = 0;
	rc = sh_read_file(path, &text, &len, 64);
	if (rc == 0) {
		char *end = NULL;
		state = strtoll(text, &end, 10);
		if (end == text || state < 0 || state > INT32_MAX - 2) {
			log_warn("%s: not a state number; starting again from 1", path);
			state = 0;
		}
		mem_free(text);
	} else if (rc != -ENOENT) {
		return rc;
	}
	state += (state % 2 == 0) ? 1 : 2;
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%lld\n", state);
	rc = nlm_write_durable(dir, path, buf, (size_t)n);
	if (rc == 0)
		svc->ns_state = (int32_t)state;
	return rc;
}

/* Moves every file of nsm/hosts to nsm/hosts.prev and reads hosts.prev into ns_prev (R2, R3). */
static int nlm_prev_load(struct nlm_service *svc)
{
	char hosts[PATH_MAX], prev[PATH_MAX];
	int rc = nlm_path(svc, hosts, sizeof(hosts), "hosts");
	if (rc == 0)
		rc = nlm_path(svc, prev, sizeof(prev), "hosts.prev");
	if (rc != 0)
		return rc;
	if ((mkdir(hosts, 0700) < 0 && errno != EEXIST) || (mkdir(prev, 0700) < 0 && errno != EEXIST))
		return -errno;
	DIR *d = opendir(hosts);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char from[PATH_MAX], to[PATH_MAX];
		if ((size_t)snprintf(from, sizeof(from), "%s/%s", hosts, e->d_name) >= sizeof(from) ||
		    (size_t)snprintf(to, sizeof(to), "%s/%s", prev, e->d_name) >= sizeof(to))
			continue;
		if (rename(from, to) < 0)
			log_warn("cannot move %s to %s: %s", from, to, sh_strerror(-errno));
	}
	closedir(d);
	rc = nlm_fsync_dir(prev);
	if (rc == 0)
		rc = nlm_fsync_dir(hosts);
	if (rc != 0)
		return rc;
	d = opendir(prev);
	if (!d)
		return -errno;
	while ((e = readdir(d)) != NULL && svc->ns_nprev < NLM_PREV_MAX) {
		if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp"))
			continue;
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", prev, e->d_name) >= sizeof(path))
			continue;
		char *data = NULL;
		size_t len = 0;
		if (sh_read_file(path, &data, &len, NLM_ADDR_LEN + NLM_NAME_MAX) != 0 ||
		    len < NLM_ADDR_LEN) {
			log_warn("%s: not a client's record; ignored", path);
			mem_free(data);
			continue;
		}
		struct nlm_prev *grown =
			mem_realloc(svc->ns_prev, (svc->ns_nprev + 1) * sizeof(*svc->ns_prev));
		if (!grown) {
			mem_free(data);
			closedir(d);
			return -ENOMEM;
		}
		svc->ns_prev = grown;
		struct nlm_prev *p = &svc->ns_prev[svc->ns_nprev++];
		memset(p, 0, sizeof(*p));
		memcpy(p->np_addr, data, NLM_ADDR_LEN);
		p->np_name_len = (uint32_t)(len - NLM_ADDR_LEN);
		memcpy(p->np_name, data + NLM_ADDR_LEN, p->np_name_len);
		mem_free(data);
	}
	closedir(d);
	return 0;
}

/* Grace is over: hosts.prev goes (its clients that reclaimed are in hosts again). */
static void nlm_prev_forget(struct nlm_service *svc)
{
	char prev[PATH_MAX];
	if (nlm_path(svc, prev, sizeof(prev), "hosts.prev") != 0)
		return;
	DIR *d = opendir(prev);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char path[PATH_MAX];
		if (e->d_name[0] == '.' ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", prev, e->d_name) >= sizeof(path))
			continue;
		(void)unlink(path);
	}
	closedir(d);
	(void)nlm_fsync_dir(prev);
}

/* ---------------------------------------------------------------------------------------------
 * Grace */

/* Under ns_lock: whether grace runs; ends it when its time has come or every client of the runs
 * before is done (R4). */
static bool nlm_grace_locked(struct nlm_service *svc)
{
	if (!svc->ns_grace)
		return false;
	bool all_done = true;
	for (size_t i = 0; i < svc->ns_nprev && all_done; i++)
		all_done = svc->ns_prev[i].np_done;
	if (all_done || nlm_now_ns() >= svc->ns_grace_end_ns) {
		svc->ns_grace = false;
		log_info("lock manager: grace period over (%s)",
		         all_done ? "every client that held locks is done" : "its time ran out");
	}
	return svc->ns_grace;
}

/* Under ns_lock: the client of the runs before at addr, or NULL. */
static struct nlm_prev *nlm_prev_find(struct nlm_service *svc, const uint8_t addr[NLM_ADDR_LEN])
{
	for (size_t i = 0; i < svc->ns_nprev; i++)
		if (memcmp(svc->ns_prev[i].np_addr, addr, NLM_ADDR_LEN) == 0)
			return &svc->ns_prev[i];
	return NULL;
}

/* What grace says of a request from addr (R2, R4): 0 to go on, or the status to answer. */
static int nlm_grace_check(struct nlm_service *svc, const uint8_t addr[NLM_ADDR_LEN],
                           bool reclaim, bool may_reclaim)
{
	pthread_mutex_lock(&svc->ns_lock);
	struct nlm_prev *p = nlm_prev_find(svc, addr);
	if (p && !reclaim && svc->ns_grace)
		p->np_done = true;
	bool grace = nlm_grace_locked(svc);
	pthread_mutex_unlock(&svc->ns_lock);
	if (!grace)
		return reclaim && may_reclaim ? NLM_STAT_DENIED_GRACE_PERIOD : 0;
	if (!reclaim || !may_reclaim)
		return NLM_STAT_DENIED_GRACE_PERIOD;
	return p ? 0 : NLM_STAT_DENIED;
}

bool nlm_service_in_grace(struct nlm_service *svc)
{
	pthread_mutex_lock(&svc->ns_lock);
	bool grace = nlm_grace_locked(svc);
	pthread_mutex_unlock(&svc->ns_lock);
	return grace;
}

/* ---------------------------------------------------------------------------------------------
 * Hosts */

static uint64_t nlm_host_hash(const struct nlm_service *svc, const uint8_t addr[NLM_ADDR_LEN],
                              const uint8_t *name, uint32_t name_len)
{
	return sh_hash64(name, name_len, sh_hash64(addr, NLM_ADDR_LEN, svc->ns_host_seed));
}

/* Under ns_lock: forgets hosts that hold nothing and that nothing names (to make room). */
static void nlm_hosts_prune_locked(struct nlm_service *svc)
{
	for (unsigned i = 0; i < NLM_HOST_SLOTS; i++) {
		for (struct nlm_host **at = &svc->ns_hosts[i]; *at;) {
			struct nlm_host *h = *at;
			if (h->nh_refs == 0 && lock_host_records(svc->ns_locks, h->nh_id) == 0) {
				*at = h->nh_next;
				svc->ns_nhosts--;
				mem_free(h);
			} else {
				at = &h->nh_next;
			}
		}
	}
}

/* The host of a request, held (nlm_host_put gives it back): found, or made if create. NULL
 * when not found and not made: the table is full of hosts holding locks, or no memory. */
static struct nlm_host *nlm_host_get(struct nlm_service *svc, const uint8_t addr[NLM_ADDR_LEN],
                                     const struct nlm_bytes *name, bool create)
{
	uint64_t hash = nlm_host_hash(svc, addr, name->nb_data, name->nb_len);
	pthread_mutex_lock(&svc->ns_lock);
	struct nlm_host *h = svc->ns_hosts[hash % NLM_HOST_SLOTS];
	while (h && !(h->nh_hash == hash && h->nh_name_len == name->nb_len &&
	              memcmp(h->nh_addr, addr, NLM_ADDR_LEN) == 0 &&
	              memcmp(h->nh_name, name->nb_data, name->nb_len) == 0))
		h = h->nh_next;
	if (!h && create) {
		if (svc->ns_nhosts >= NLM_HOSTS_MAX)
			nlm_hosts_prune_locked(svc);
		if (svc->ns_nhosts < NLM_HOSTS_MAX)
			h = mem_zalloc(sizeof(*h) + name->nb_len);
		if (h) {
			h->nh_id = ++svc->ns_next_host_id;
			h->nh_hash = hash;
			memcpy(h->nh_addr, addr, NLM_ADDR_LEN);
			h->nh_name_len = name->nb_len;
			memcpy(h->nh_name, name->nb_data, name->nb_len);
			h->nh_next = svc->ns_hosts[hash % NLM_HOST_SLOTS];
			svc->ns_hosts[hash % NLM_HOST_SLOTS] = h;
			svc->ns_nhosts++;
		}
	}
	if (h)
		h->nh_refs++;
	pthread_mutex_unlock(&svc->ns_lock);
	return h;
}

static void nlm_host_put(struct nlm_service *svc, struct nlm_host *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&svc->ns_lock);
	VERIFY(h->nh_refs > 0);
	h->nh_refs--;
	pthread_mutex_unlock(&svc->ns_lock);
}

/* Makes the host's nsm/hosts file durable, once (R1). On the loop's thread: the first lock of
 * each client in a run pays one file write and two fsyncs. */
static int nlm_host_monitor(struct nlm_service *svc, struct nlm_host *h)
{
	pthread_mutex_lock(&svc->ns_lock);
	bool done = h->nh_monitored;
	pthread_mutex_unlock(&svc->ns_lock);
	if (done)
		return 0;
	char dir[PATH_MAX], path[PATH_MAX], file[32];
	snprintf(file, sizeof(file), "hosts/%016" PRIx64,
	         sh_hash64(h->nh_name, h->nh_name_len, sh_hash64(h->nh_addr, NLM_ADDR_LEN, 0)));
	int rc = nlm_path(svc, dir, sizeof(dir), "hosts");
	if (rc == 0)
		rc = nlm_path(svc, path, sizeof(path), file);
	uint8_t *data = rc == 0 ? mem_alloc(NLM_ADDR_LEN + h->nh_name_len) : NULL;
	if (rc == 0 && !data)
		rc = -ENOMEM;
	if (rc == 0) {
		memcpy(data, h->nh_addr, NLM_ADDR_LEN);
		memcpy(data + NLM_ADDR_LEN, h->nh_name, h->nh_name_len);
		rc = nlm_write_durable(dir, path, data, NLM_ADDR_LEN + h->nh_name_len);
	}
	mem_free(data);
	if (rc != 0) {
		log_error("lock manager: cannot record client for recovery in %s: %s", path,
		          sh_strerror(rc));
		return rc;
	}
	pthread_mutex_lock(&svc->ns_lock);
	h->nh_monitored = true;
	pthread_mutex_unlock(&svc->ns_lock);
	return 0;
}

/* Releases everything of the hosts at addr (R5): those of that name only (FREE_ALL names the
 * caller_name its locks were taken under), or all of them when name is NULL (a client's
 * SM_NOTIFY: the machine at that address rebooted; knfsd's statd also matches the notifier by
 * address, monitoring clients by address by default). Returns the records released. */
static uint64_t nlm_hosts_release(struct nlm_service *svc, const uint8_t addr[NLM_ADDR_LEN],
                                  const struct nlm_bytes *name)
{
	pthread_mutex_lock(&svc->ns_lock);
	uint64_t *ids = mem_alloc((svc->ns_nhosts + 1) * sizeof(*ids));
	size_t n = 0;
	for (unsigned i = 0; ids && i < NLM_HOST_SLOTS; i++) {
		for (struct nlm_host *h = svc->ns_hosts[i]; h; h = h->nh_next) {
			bool by_name = !name || (h->nh_name_len == name->nb_len &&
			                         memcmp(h->nh_name, name->nb_data, name->nb_len) == 0);
			if (by_name && memcmp(h->nh_addr, addr, NLM_ADDR_LEN) == 0)
				ids[n++] = h->nh_id;
		}
	}
	struct nlm_prev *p = nlm_prev_find(svc, addr);
	if (p)
		p->np_done = true;
	pthread_mutex_unlock(&svc->ns_lock);
	if (!ids) {
		log_error("lock manager: no memory to release a client's locks");
		return 0;
	}
	uint64_t released = 0;
	for (size_t i = 0; i < n; i++)
		released += lock_release_host(svc->ns_locks, ids[i]);
	mem_free(ids);
	return released;
}

/* ---------------------------------------------------------------------------------------------
 * Blocks */

static uint8_t *nlm_block_cookie(struct nlm_block *b)
{
	return b->nb_bytes;
}

static struct nlm_block *nlm_block_new(const struct rpc_call *call, struct nlm_host *h,
                                       const struct nlm_args *a, const struct lock_file *file,
                                       const struct lock_range *range)
{
	const struct nlm_lock *l = &a->na_lock;
	size_t extra = (size_t)a->na_cookie.nb_len + l->nl_caller.nb_len + l->nl_fh.nb_len +
	               l->nl_oh.nb_len;
	struct nlm_block *b = mem_zalloc(sizeof(*b) + extra);
	if (!b)
		return NULL;
	b->nb_host = h; /* the caller's reference passes to it (nlm_block_free gives it back) */
	memcpy(&b->nb_peer, &call->rc_peer, sizeof(b->nb_peer));
	b->nb_peer_len = call->rc_peer_len;
	b->nb_transport = call->rc_transport;
	b->nb_vers = call->rc_vers;
	b->nb_exclusive = a->na_exclusive;
	b->nb_file = *file;
	b->nb_range = *range;
	b->nb_svid = l->nl_svid;
	b->nb_offset = l->nl_offset;
	b->nb_len = l->nl_len;
	b->nb_cookie_len = a->na_cookie.nb_len;
	b->nb_caller_len = l->nl_caller.nb_len;
	b->nb_fh_len = l->nl_fh.nb_len;
	b->nb_oh_len = l->nl_oh.nb_len;
	uint8_t *p = b->nb_bytes;
	memcpy(p, a->na_cookie.nb_data, b->nb_cookie_len);
	p += b->nb_cookie_len;
	memcpy(p, l->nl_caller.nb_data, b->nb_caller_len);
	p += b->nb_caller_len;
	memcpy(p, l->nl_fh.nb_data, b->nb_fh_len);
	p += b->nb_fh_len;
	memcpy(p, l->nl_oh.nb_data, b->nb_oh_len);
	return b;
}

static struct lock_owner nlm_block_owner(const struct nlm_block *b)
{
	const uint8_t *oh = b->nb_bytes + b->nb_cookie_len + b->nb_caller_len + b->nb_fh_len;
	return (struct lock_owner){.lo_host = b->nb_host->nh_id, .lo_svid = (uint32_t)b->nb_svid,
	                           .lo_oh_len = b->nb_oh_len, .lo_oh = oh};
}

/* Takes back a grant (the client refused it, did not answer, or cancelled it meanwhile). */
static void nlm_withdraw(struct nlm_service *svc, const struct lock_file *file,
                         const struct lock_owner *o, const struct lock_range *range)
{
	int rc = lock_unlock(svc->ns_locks, file, o, range);
	if (rc != 0)
		log_error("lock manager: a grant could not be withdrawn (%s): the client keeps it",
		          sh_strerror(rc));
}

/* Frees a block and gives back its host reference. */
static void nlm_block_free(struct nlm_service *svc, struct nlm_block *b)
{
	nlm_host_put(svc, b->nb_host);
	mem_free(b);
}

/* Under ns_lock: queues a job for the callback threads. */
static void nlm_job_push_locked(struct nlm_service *svc, struct nlm_job *j)
{
	j->nj_next = NULL;
	*svc->ns_jobs_tail = j;
	svc->ns_jobs_tail = &j->nj_next;
	svc->ns_njobs++;
	pthread_cond_signal(&svc->ns_cv);
}

/* Takes b off ns_granting; true if a CANCEL withdrew it meanwhile. */
static bool nlm_granting_remove(struct nlm_service *svc, struct nlm_block *b)
{
	pthread_mutex_lock(&svc->ns_lock);
	if (b->nb_prev)
		b->nb_prev->nb_next = b->nb_next;
	else
		svc->ns_granting = b->nb_next;
	if (b->nb_next)
		b->nb_next->nb_prev = b->nb_prev;
	bool withdrawn = b->nb_withdrawn;
	pthread_mutex_unlock(&svc->ns_lock);
	return withdrawn;
}

/* The lock table's callbacks (on the thread of the call that freed the range). */
static void nlm_table_granted(void *ctx, void *user)
{
	struct nlm_service *svc = ctx;
	struct nlm_block *b = user;
	struct nlm_job *j = mem_zalloc(sizeof(*j));
	pthread_mutex_lock(&svc->ns_lock);
	/* on ns_granting until the client answers, for a CANCEL that comes meanwhile */
	b->nb_prev = NULL;
	b->nb_next = svc->ns_granting;
	if (svc->ns_granting)
		svc->ns_granting->nb_prev = b;
	svc->ns_granting = b;
	if (j) {
		j->nj_kind = NLM_JOB_GRANTED;
		j->nj_block = b;
		nlm_job_push_locked(svc, j);
	}
	pthread_mutex_unlock(&svc->ns_lock);
	if (!j) {
		/* no memory to tell the client: the grant cannot stand */
		log_error("lock manager: no memory for a GRANTED callback; the lock is withdrawn");
		struct lock_owner o = nlm_block_owner(b);
		(void)nlm_granting_remove(svc, b);
		nlm_withdraw(svc, &b->nb_file, &o, &b->nb_range);
		nlm_block_free(svc, b);
	}
}

static void nlm_table_dropped(void *ctx, void *user)
{
	nlm_block_free(ctx, user);
}

/* ---------------------------------------------------------------------------------------------
 * The callback threads */

/* The port prog/vers/transport has at addr's portmapper, or 0. */
static uint16_t nlm_getport(uint16_t pmap_port, const char *addr, uint32_t prog, uint32_t vers,
                            enum rpc_transport transport)
{
	struct rpc_clnt *c = NULL;
	if (rpc_clnt_create(addr, pmap_port, RPC_UDP, &c) != 0)
		return 0;
	uint8_t args[16], res[8];
	struct xdr_enc enc;
	xdr_enc_init(&enc, args, sizeof(args));
	xdr_put_u32(&enc, prog);
	xdr_put_u32(&enc, vers);
	xdr_put_u32(&enc, transport == RPC_TCP ? IPPROTO_TCP : IPPROTO_UDP);
	xdr_put_u32(&enc, 0);
	size_t res_len = 0;
	uint16_t port = 0;
	if (rpc_clnt_call(c, 100000u, 2u, 3u /* PMAPPROC_GETPORT */, args, xdr_enc_len(&enc), res,
	                  sizeof(res), &res_len, (int)NLM_CALLBACK_RETRY_MS, NULL, NULL) == 0) {
		struct xdr_dec dec;
		xdr_dec_init(&dec, res, res_len);
		uint32_t p = xdr_get_u32(&dec);
		if (xdr_dec_ok(&dec) && p > 0 && p <= UINT16_MAX)
			port = (uint16_t)p;
	}
	rpc_clnt_destroy(c);
	return port;
}

/* One call to the peer's prog (found through its portmapper). Returns 0 with the result in res,
 * or -errno. */
static int nlm_callback_call(const struct nlm_service *svc, const struct sockaddr_storage *peer,
                             socklen_t peer_len,
                             enum rpc_transport transport, uint32_t prog, uint32_t vers,
                             uint32_t proc, const void *args, size_t args_len, void *res,
                             size_t res_cap, size_t *res_len)
{
	uint8_t addr[NLM_ADDR_LEN];
	char text[INET6_ADDRSTRLEN];
	int rc = nlm_addr_of(peer, peer_len, addr);
	if (rc != 0)
		return rc;
	nlm_addr_text(addr, text);
	uint16_t port = nlm_getport(svc->ns_pmap_port, text, prog, vers, transport);
	if (port == 0)
		return -ECONNREFUSED;
	struct rpc_clnt *c = NULL;
	rc = rpc_clnt_create(text, port, transport, &c);
	if (rc != 0)
		return rc;
	struct rpc_cred cred = {.rcr_flavor = RPC_AUTH_SYS};
	rpc_clnt_set_cred(c, &cred);
	rc = rpc_clnt_call(c, prog, vers, proc, args, args_len, res, res_cap, res_len,
	                   (int)NLM_CALLBACK_RETRY_MS, NULL, NULL);
	rpc_clnt_destroy(c);
	return rc;
}

/* One try of a GRANTED callback: true when the job is over (answered, or given up). */
static bool nlm_job_granted(struct nlm_service *svc, struct nlm_job *j)
{
	struct nlm_block *b = j->nj_block;
	uint8_t *args = mem_alloc(NLM_XDR_GRANTED_MAX);
	if (!args)
		return false; /* try again later */
	struct nlm_lock l = {
		.nl_caller = {b->nb_bytes + b->nb_cookie_len, b->nb_caller_len},
		.nl_fh = {b->nb_bytes + b->nb_cookie_len + b->nb_caller_len, b->nb_fh_len},
		.nl_oh = {b->nb_bytes + b->nb_cookie_len + b->nb_caller_len + b->nb_fh_len,
		          b->nb_oh_len},
		.nl_svid = b->nb_svid,
		.nl_offset = b->nb_offset,
		.nl_len = b->nb_len,
	};
	struct nlm_bytes cookie = {nlm_block_cookie(b), b->nb_cookie_len};
	struct xdr_enc enc;
	xdr_enc_init(&enc, args, NLM_XDR_GRANTED_MAX);
	nlm_xdr_enc_granted(&enc, b->nb_vers, &cookie, b->nb_exclusive, &l);
	uint8_t res[NLM_XDR_RES_MAX];
	size_t res_len = 0;
	int rc = nlm_callback_call(svc, &b->nb_peer, b->nb_peer_len, b->nb_transport, NLM_PROG,
	                           b->nb_vers, NLM_GRANTED, args, xdr_enc_len(&enc), res, sizeof(res),
	                           &res_len);
	mem_free(args);
	uint32_t stat = NLM_STAT_DENIED;
	if (rc == 0) {
		struct xdr_dec dec;
		struct nlm_bytes ck;
		xdr_dec_init(&dec, res, res_len);
		ck.nb_data = xdr_get_opaque(&dec, NLM_COOKIE_MAX, &ck.nb_len);
		stat = xdr_get_u32(&dec);
		if (!xdr_dec_ok(&dec))
			stat = NLM_STAT_DENIED;
		if (stat == NLM_STAT_DENIED_GRACE_PERIOD)
			rc = -EAGAIN; /* the client is recovering: ask again */
	}
	if (rc != 0 && ++j->nj_tries < NLM_CALLBACK_TRIES)
		return false;
	bool withdrawn = nlm_granting_remove(svc, b);
	if ((rc != 0 || stat != NLM_STAT_GRANTED) && !withdrawn) {
		struct lock_owner o = nlm_block_owner(b);
		log_info("lock manager: a blocked lock's grant was %s; it is withdrawn",
		         rc != 0 ? "not answered" : "refused by the client");
		nlm_withdraw(svc, &b->nb_file, &o, &b->nb_range);
	}
	nlm_block_free(svc, b);
	return true;
}

/* One try of a _RES or NOTIFY call: true when over. */
static bool nlm_job_message(const struct nlm_service *svc, struct nlm_job *j)
{
	uint8_t res[64];
	size_t res_len = 0;
	int rc = nlm_callback_call(svc, &j->nj_peer, j->nj_peer_len, j->nj_transport, j->nj_prog,
	                           j->nj_vers, j->nj_proc, j->nj_args, j->nj_args_len, res,
	                           sizeof(res), &res_len);
	if (rc != 0 && ++j->nj_tries < NLM_CALLBACK_TRIES)
		return false;
	if (rc != 0) {
		uint8_t addr[NLM_ADDR_LEN];
		char text[INET6_ADDRSTRLEN] = "?";
		if (nlm_addr_of(&j->nj_peer, j->nj_peer_len, addr) == 0)
			nlm_addr_text(addr, text);
		log_info("lock manager: %s to %s not delivered: %s",
		         j->nj_kind == NLM_JOB_NOTIFY ? "SM_NOTIFY" : "a _RES callback", text,
		         sh_strerror(rc));
	}
	return true;
}

static void *nlm_thread(void *arg)
{
	struct nlm_service *svc = arg;
	sh_thread_setup("shale-nlm", SH_THREAD_SERVING); /* grants wait on it */
	pthread_mutex_lock(&svc->ns_lock);
	while (!svc->ns_stopping) {
		if (!svc->ns_prev_forgotten && !nlm_grace_locked(svc)) {
			svc->ns_prev_forgotten = true;
			pthread_mutex_unlock(&svc->ns_lock);
			nlm_prev_forget(svc);
			pthread_mutex_lock(&svc->ns_lock);
		}
		/* the first job whose time has come; else wait for one */
		uint64_t now = nlm_now_ns(), next = UINT64_MAX;
		struct nlm_job **at = &svc->ns_jobs, *j = NULL;
		for (; *at; at = &(*at)->nj_next) {
			if ((*at)->nj_not_before_ns <= now) {
				j = *at;
				break;
			}
			next = SH_MIN(next, (*at)->nj_not_before_ns);
		}
		if (!j) {
			uint64_t wait_ns = next == UINT64_MAX ? 1000000000ull : next - now;
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + wait_ns;
			ts.tv_sec = (time_t)(t / 1000000000ull);
			ts.tv_nsec = (long)(t % 1000000000ull);
			(void)pthread_cond_timedwait(&svc->ns_cv, &svc->ns_lock, &ts);
			continue;
		}
		*at = j->nj_next;
		if (svc->ns_jobs_tail == &j->nj_next)
			svc->ns_jobs_tail = at;
		svc->ns_njobs--;
		pthread_mutex_unlock(&svc->ns_lock);
		bool over = j->nj_kind == NLM_JOB_GRANTED ? nlm_job_granted(svc, j)
		                                          : nlm_job_message(svc, j);
		pthread_mutex_lock(&svc->ns_lock);
		if (over) {
			mem_free(j);
		} else {
			j->nj_not_before_ns = nlm_now_ns() + NLM_CALLBACK_RETRY_MS * 1000000ull;
			nlm_job_push_locked(svc, j);
		}
	}
	pthread_mutex_unlock(&svc->ns_lock);
	return NULL;
}

/* Queues a message (a _RES or SM_NOTIFY call) to peer; dropped (the client retransmits its
 * _MSG) when the queue is full. */
static void nlm_message_queue(struct nlm_service *svc, const struct sockaddr_storage *peer,
                              socklen_t peer_len, enum rpc_transport transport,
                              enum nlm_job_kind kind, uint32_t prog, uint32_t vers,
                              uint32_t proc, const void *args, size_t len)
{
	struct nlm_job *j = mem_zalloc(sizeof(*j) + len);
	if (!j)
		return;
	j->nj_kind = kind;
	memcpy(&j->nj_peer, peer, sizeof(j->nj_peer));
	j->nj_peer_len = peer_len;
	j->nj_transport = transport;
	j->nj_prog = prog;
	j->nj_vers = vers;
	j->nj_proc = proc;
	j->nj_args_len = len;
	memcpy(j->nj_args, args, len);
	pthread_mutex_lock(&svc->ns_lock);
	bool room = svc->ns_njobs < NLM_JOBS_MAX && !svc->ns_stopping;
	if (room)
		nlm_job_push_locked(svc, j);
	pthread_mutex_unlock(&svc->ns_lock);
	if (!room)
		mem_free(j);
}

/* ---------------------------------------------------------------------------------------------
 * NLM procedures */

/* What one procedure computed: its status and, for TEST, the holder; for SHARE, the form. */
struct nlm_result {
	uint32_t nr_stat;
	struct nlm_holder nr_holder;
	bool nr_share;
	bool nr_test;
};

/* The file a lock names, checked against the exports: 0 or the status to answer. */
static uint32_t nlm_resolve(struct nlm_service *svc, const struct rpc_call *call,
                            const struct nlm_bytes *fh, bool exclusive, struct lock_file *file)
{
	uint64_t fsid;
	struct fs_obj_id obj;
	bool rw;
	int rc = nfs_service_lock_file(svc->ns_nfs, call, fh->nb_data, fh->nb_len, &fsid, &obj, &rw);
	if (rc == -SH_EBADHANDLE || rc == -ESTALE)
		return NLM_STAT_STALE_FH;
	if (rc != 0)
		return NLM_STAT_FAILED;
	if (exclusive && !rw)
		return NLM_STAT_ROFS;
	memset(file, 0, sizeof(*file));
	file->lf_fs = fsid;
	file->lf_len = obj.foi_len;
	memcpy(file->lf_id, obj.foi_bytes, obj.foi_len);
	return NLM_STAT_GRANTED;
}

/* The owner of a lock: host (NULL: one the table has never seen, id 0), svid, owner handle. */
static struct lock_owner nlm_owner_of(const struct nlm_host *h, const struct nlm_lock *l)
{
	return (struct lock_owner){.lo_host = h ? h->nh_id : 0, .lo_svid = (uint32_t)l->nl_svid,
	                           .lo_oh_len = l->nl_oh.nb_len, .lo_oh = l->nl_oh.nb_data};
}

static uint32_t nlm_from_table(int rc)
{
	switch (rc) {
	case LOCK_GRANTED: return NLM_STAT_GRANTED;
	case LOCK_DENIED: return NLM_STAT_DENIED;
	case LOCK_BLOCKED:
	case LOCK_BLOCKED_ALREADY: return NLM_STAT_BLOCKED;
	case LOCK_NOLOCKS: return NLM_STAT_DENIED_NOLOCKS;
	default: return NLM_STAT_DENIED_NOLOCKS; /* -ENOMEM */
	}
}

static void nlm_do_test(struct nlm_service *svc, const struct rpc_call *call,
                        const uint8_t addr[NLM_ADDR_LEN], const struct nlm_args *a,
                        struct nlm_result *r)
{
	r->nr_test = true;
	struct lock_file file;
	r->nr_stat = (uint32_t)nlm_grace_check(svc, addr, false, false);
	if (r->nr_stat == 0)
		r->nr_stat = nlm_resolve(svc, call, &a->na_lock.nl_fh, false, &file);
	if (r->nr_stat != NLM_STAT_GRANTED)
		return;
	/* a host the table has never seen holds nothing: every holder is another's (id 0) */
	struct nlm_host *h = nlm_host_get(svc, addr, &a->na_lock.nl_caller, false);
	struct lock_owner o = nlm_owner_of(h, &a->na_lock);
	struct lock_range range = nlm_range(a->na_lock.nl_offset, a->na_lock.nl_len);
	struct lock_conflict c;
	int rc = lock_test(svc->ns_locks, &file, &o, a->na_exclusive, &range, &c);
	nlm_host_put(svc, h);
	r->nr_stat = rc == LOCK_DENIED ? NLM_STAT_DENIED : rc == 0 ? NLM_STAT_GRANTED
	                                                           : NLM_STAT_FAILED;
	if (rc == LOCK_DENIED) {
		r->nr_holder.nh_exclusive = c.lc_exclusive;
		r->nr_holder.nh_svid = (int32_t)c.lc_svid;
		nlm_range_out(call->rc_vers, &c.lc_range, &r->nr_holder.nh_offset,
		              &r->nr_holder.nh_len);
	}
}

static void nlm_do_lock(struct nlm_service *svc, const struct rpc_call *call,
                        const uint8_t addr[NLM_ADDR_LEN], const struct nlm_args *a,
                        bool monitored, struct nlm_result *r)
{
	struct lock_file file;
	r->nr_stat = (uint32_t)nlm_grace_check(svc, addr, a->na_reclaim, true);
	if (r->nr_stat == 0)
		r->nr_stat = nlm_resolve(svc, call, &a->na_lock.nl_fh, a->na_exclusive, &file);
	if (r->nr_stat != NLM_STAT_GRANTED)
		return;
	struct nlm_host *h = nlm_host_get(svc, addr, &a->na_lock.nl_caller, true);
	if (!h || (monitored && nlm_host_monitor(svc, h) != 0)) {
		nlm_host_put(svc, h);
		r->nr_stat = NLM_STAT_DENIED_NOLOCKS;
		return;
	}
	struct lock_owner o = nlm_owner_of(h, &a->na_lock);
	struct lock_range range = nlm_range(a->na_lock.nl_offset, a->na_lock.nl_len);
	struct nlm_block *b = NULL;
	if (a->na_block) {
		b = nlm_block_new(call, h, a, &file, &range);
		if (!b) {
			nlm_host_put(svc, h);
			r->nr_stat = NLM_STAT_DENIED_NOLOCKS;
			return;
		}
		pthread_mutex_lock(&svc->ns_lock);
		h->nh_refs++; /* the block's own */
		pthread_mutex_unlock(&svc->ns_lock);
	}
	struct lock_conflict c;
	int rc = lock_lock(svc->ns_locks, &file, &o, a->na_exclusive, &range, b, &c);
	if (b && rc != LOCK_BLOCKED)
		nlm_block_free(svc, b); /* the table did not take it */
	nlm_host_put(svc, h);
	r->nr_stat = nlm_from_table(rc);
}

static void nlm_do_cancel(struct nlm_service *svc, const struct rpc_call *call,
                          const uint8_t addr[NLM_ADDR_LEN], const struct nlm_args *a,
                          struct nlm_result *r)
{
	struct lock_file file;
	r->nr_stat = nlm_resolve(svc, call, &a->na_lock.nl_fh, false, &file);
	if (r->nr_stat != NLM_STAT_GRANTED)
		return;
	struct nlm_host *h = nlm_host_get(svc, addr, &a->na_lock.nl_caller, false);
	if (!h)
		return; /* nothing of it can wait */
	struct lock_owner o = nlm_owner_of(h, &a->na_lock);
	struct lock_range range = nlm_range(a->na_lock.nl_offset, a->na_lock.nl_len);
	void *user = NULL;
	if (lock_cancel(svc->ns_locks, &file, &o, a->na_exclusive, &range, &user) == 0) {
		nlm_block_free(svc, user);
		nlm_host_put(svc, h);
		return;
	}
	/* granted already, its GRANTED in flight: withdraw the grant (the client will refuse it) */
	bool found = false;
	pthread_mutex_lock(&svc->ns_lock);
	for (struct nlm_block *b = svc->ns_granting; b; b = b->nb_next) {
		struct lock_owner bo = nlm_block_owner(b);
		if (b->nb_host == h && !b->nb_withdrawn && b->nb_exclusive == a->na_exclusive &&
		    bo.lo_svid == o.lo_svid && bo.lo_oh_len == o.lo_oh_len &&
		    memcmp(bo.lo_oh, o.lo_oh, o.lo_oh_len) == 0 &&
		    memcmp(&b->nb_file, &file, sizeof(file)) == 0 &&
		    b->nb_range.lr_start == range.lr_start && b->nb_range.lr_end == range.lr_end) {
			b->nb_withdrawn = true;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&svc->ns_lock);
	if (found)
		nlm_withdraw(svc, &file, &o, &range);
	nlm_host_put(svc, h);
	/* nothing waited: knfsd answers GRANTED too */
}

static void nlm_do_unlock(struct nlm_service *svc, const struct rpc_call *call,
                          const uint8_t addr[NLM_ADDR_LEN], const struct nlm_args *a,
                          struct nlm_result *r)
{
	struct lock_file file;
	r->nr_stat = nlm_resolve(svc, call, &a->na_lock.nl_fh, false, &file);
	if (r->nr_stat != NLM_STAT_GRANTED)
		return;
	struct nlm_host *h = nlm_host_get(svc, addr, &a->na_lock.nl_caller, false);
	if (!h)
		return; /* it holds nothing */
	struct lock_owner o = nlm_owner_of(h, &a->na_lock);
	struct lock_range range = nlm_range(a->na_lock.nl_offset, a->na_lock.nl_len);
	if (lock_unlock(svc->ns_locks, &file, &o, &range) != 0)
		r->nr_stat = NLM_STAT_DENIED_NOLOCKS;
	nlm_host_put(svc, h);
}

static void nlm_do_share(struct nlm_service *svc, const struct rpc_call *call,
                         const uint8_t addr[NLM_ADDR_LEN], const struct nlm_args *a, bool share,
                         struct nlm_result *r)
{
	r->nr_share = true;
	struct lock_file file;
	r->nr_stat = share ? (uint32_t)nlm_grace_check(svc, addr, a->na_reclaim, true) : 0;
	if (r->nr_stat == 0)
		r->nr_stat = nlm_resolve(svc, call, &a->na_lock.nl_fh,
		                         share && (a->na_share_access & 2u), &file);
	if (r->nr_stat != NLM_STAT_GRANTED)
		return;
	struct nlm_host *h = nlm_host_get(svc, addr, &a->na_lock.nl_caller, share);
	if (!h || (share && nlm_host_monitor(svc, h) != 0)) {
		nlm_host_put(svc, h);
		r->nr_stat = share ? NLM_STAT_DENIED_NOLOCKS : NLM_STAT_GRANTED;
		return;
	}
	struct lock_owner o = {.lo_host = h->nh_id, .lo_oh_len = a->na_lock.nl_oh.nb_len,
	                       .lo_oh = a->na_lock.nl_oh.nb_data};
	if (share)
		r->nr_stat = nlm_from_table(
			lock_share(svc->ns_locks, &file, &o, a->na_share_access, a->na_share_mode));
	else
		lock_unshare(svc->ns_locks, &file, &o);
	nlm_host_put(svc, h);
}

/* Encodes r as proc's result (or _RES argument) for version vers. */
static void nlm_result_encode(struct xdr_enc *enc, uint32_t vers, const struct nlm_args *a,
                              const struct nlm_result *r)
{
	uint32_t stat = nlm_xdr_stat_for(vers, (enum nlm_stat)r->nr_stat);
	if (r->nr_test)
		nlm_xdr_enc_testres(enc, vers, &a->na_cookie, stat, &r->nr_holder);
	else if (r->nr_share)
		nlm_xdr_enc_shareres(enc, &a->na_cookie, stat, 0);
	else
		nlm_xdr_enc_res(enc, &a->na_cookie, stat);
}

static void nlm_reply_void(struct rpc_call *call)
{
	if (rpc_call_res_init(call, 0) < 0)
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
	else
		rpc_reply_success(call);
}

/* Every NLM procedure, every version. */
static void nlm_dispatch(struct rpc_call *call)
{
	struct nlm_service *svc = call->rc_prog_ctx;
	uint32_t proc = call->rc_proc, vers = call->rc_vers;
	if (proc == NLM_NULL) {
		nlm_reply_void(call);
		return;
	}
	struct nlm_args a;
	if (!nlm_xdr_dec_args(&call->rc_args, vers, proc, &a)) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	uint8_t addr[NLM_ADDR_LEN];
	if (nlm_addr_of(&call->rc_peer, call->rc_peer_len, addr) != 0) {
		rpc_call_drop(call);
		return;
	}
	struct nlm_result r = {.nr_stat = NLM_STAT_GRANTED};
	bool message = proc >= NLM_TEST_MSG && proc <= NLM_GRANTED_MSG;
	switch (proc) {
	case NLM_TEST:
	case NLM_TEST_MSG:
		nlm_do_test(svc, call, addr, &a, &r);
		break;
	case NLM_LOCK:
	case NLM_LOCK_MSG:
		nlm_do_lock(svc, call, addr, &a, true, &r);
		break;
	case NLM_NM_LOCK:
		a.na_block = false; /* a non-monitored lock never waits (XNFS) */
		nlm_do_lock(svc, call, addr, &a, false, &r);
		break;
	case NLM_CANCEL:
	case NLM_CANCEL_MSG:
		nlm_do_cancel(svc, call, addr, &a, &r);
		break;
	case NLM_UNLOCK:
	case NLM_UNLOCK_MSG:
		nlm_do_unlock(svc, call, addr, &a, &r);
		break;
	case NLM_GRANTED:
	case NLM_GRANTED_MSG:
		r.nr_stat = NLM_STAT_DENIED; /* a server waits for no lock of its own */
		break;
	case NLM_SHARE:
	case NLM_UNSHARE:
		if (vers < NLM_VERS3) {
			rpc_reply_accept_error(call, RPC_PROC_UNAVAIL);
			return;
		}
		nlm_do_share(svc, call, addr, &a, proc == NLM_SHARE, &r);
		break;
	case NLM_FREE_ALL:
		if (vers < NLM_VERS3) {
			rpc_reply_accept_error(call, RPC_PROC_UNAVAIL);
			return;
		}
		(void)nlm_hosts_release(svc, addr, &a.na_name);
		nlm_reply_void(call);
		return;
	default: /* the _RES calls: answers to callbacks this server does not make as _MSG */
		nlm_reply_void(call);
		return;
	}
	if (message) {
		uint8_t buf[NLM_XDR_RES_MAX];
		struct xdr_enc enc;
		xdr_enc_init(&enc, buf, sizeof(buf));
		nlm_result_encode(&enc, vers, &a, &r);
		if (xdr_enc_ok(&enc))
			nlm_message_queue(svc, &call->rc_peer, call->rc_peer_len, call->rc_transport,
			                  NLM_JOB_RES, NLM_PROG, vers, proc + (NLM_TEST_RES - NLM_TEST_MSG),
			                  buf, xdr_enc_len(&enc));
		nlm_reply_void(call);
		return;
	}
	if (rpc_call_res_init(call, NLM_XDR_RES_MAX) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	nlm_result_encode(&call->rc_res, vers, &a, &r);
	rpc_reply_success(call);
}

/* ---------------------------------------------------------------------------------------------
 * NSM procedures */

static void nsm_dispatch(struct rpc_call *call)
{
	struct nlm_service *svc = call->rc_prog_ctx;
	uint32_t proc = call->rc_proc;
	struct nsm_args a;
	if (!nsm_xdr_dec_args(&call->rc_args, proc, &a)) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	uint8_t addr[NLM_ADDR_LEN];
	if (nlm_addr_of(&call->rc_peer, call->rc_peer_len, addr) != 0) {
		rpc_call_drop(call);
		return;
	}
	switch (proc) {
	case NSM_NOTIFY:
		/* a client rebooted: what it held is gone (R5) */
		(void)nlm_hosts_release(svc, addr, NULL);
		nlm_reply_void(call);
		return;
	case NSM_NULL:
	case NSM_SIMU_CRASH: /* this server's monitor is its own: nothing to simulate */
		nlm_reply_void(call);
		return;
	default:
		break;
	}
	if (rpc_call_res_init(call, 8) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	switch (proc) {
	case NSM_STAT:
	case NSM_MON:
		/* this monitor watches the clients that lock here and no others: a MON from outside
		 * is refused, as statd refuses one not from the local host */
		nsm_xdr_enc_stat_res(&call->rc_res, proc == NSM_STAT ? NSM_STAT_SUCC : NSM_STAT_FAIL,
		                     svc->ns_state);
		break;
	default: /* UNMON, UNMON_ALL: nothing was monitored for anyone */
		nsm_xdr_enc_stat(&call->rc_res, svc->ns_state);
		break;
	}
	rpc_reply_success(call);
}

/* ---------------------------------------------------------------------------------------------
 * Programs and the service */

#define NLM_PROC(name) {name, nlm_dispatch, false}
static const struct rpc_proc_desc nlm_procs[NLM_NPROCS] = {
	NLM_PROC("NULL"),        NLM_PROC("TEST"),        NLM_PROC("LOCK"),
	NLM_PROC("CANCEL"),      NLM_PROC("UNLOCK"),      NLM_PROC("GRANTED"),
	NLM_PROC("TEST_MSG"),    NLM_PROC("LOCK_MSG"),    NLM_PROC("CANCEL_MSG"),
	NLM_PROC("UNLOCK_MSG"),  NLM_PROC("GRANTED_MSG"), NLM_PROC("TEST_RES"),
	NLM_PROC("LOCK_RES"),    NLM_PROC("CANCEL_RES"),  NLM_PROC("UNLOCK_RES"),
	NLM_PROC("GRANTED_RES"), {NULL, NULL, false},     {NULL, NULL, false},
	{NULL, NULL, false},     {NULL, NULL, false},     NLM_PROC("SHARE"),
	NLM_PROC("UNSHARE"),     NLM_PROC("NM_LOCK"),     NLM_PROC("FREE_ALL"),
};
static const struct rpc_version_desc nlm_versions[] = {
	{NLM_VERS1, nlm_procs, NLM_FREE_ALL + 1u},
	{NLM_VERS3, nlm_procs, NLM_FREE_ALL + 1u},
	{NLM_VERS4, nlm_procs, NLM_FREE_ALL + 1u},
};
static const struct rpc_program_desc nlm_program = {
	"NLM", NLM_PROG, nlm_versions, SH_ARRAY_SIZE(nlm_versions)};

#define NSM_PROC(name) {name, nsm_dispatch, false}
static const struct rpc_proc_desc nsm_procs[NSM_NPROCS] = {
	NSM_PROC("NULL"),       NSM_PROC("STAT"),       NSM_PROC("MON"),    NSM_PROC("UNMON"),
	NSM_PROC("UNMON_ALL"),  NSM_PROC("SIMU_CRASH"), NSM_PROC("NOTIFY"),
};
static const struct rpc_version_desc nsm_versions[] = {{NSM_VERS1, nsm_procs, NSM_NPROCS}};
static const struct rpc_program_desc nsm_program = {
	"NSM", NSM_PROG, nsm_versions, SH_ARRAY_SIZE(nsm_versions)};

int nlm_service_create(const struct nlm_service_config *config, struct nlm_service **out)
{
	*out = NULL;
	struct nlm_service *svc = mem_zalloc(sizeof(*svc));
	if (!svc)
		return -ENOMEM;
	svc->ns_nfs = config->nlc_nfs;
	svc->ns_grace_s = config->nlc_grace_s ? config->nlc_grace_s : NLM_GRACE_DEFAULT_S;
	svc->ns_jobs_tail = &svc->ns_jobs;
	/* Grace from the start of serving (R2): the rpc server answers before nlm_service_start has
	 * set grace's end, and no new lock may be granted before the clients of the runs before have
	 * been able to reclaim theirs. */
	svc->ns_grace = true;
	svc->ns_grace_end_ns = UINT64_MAX;
	/* A test plays several clients' portmappers on one port of its own (tests/proto/proto_nlm.c) */
	const char *pmap = getenv("SHALE_NLM_PORTMAP_PORT");
	long pmap_port = pmap ? strtol(pmap, NULL, 10) : 0;
	svc->ns_pmap_port = pmap_port > 0 && pmap_port <= UINT16_MAX ? (uint16_t)pmap_port
	                                                              : NLM_PMAP_PORT;
	svc->ns_state_dir = mem_strdup(config->nlc_state_dir);
	svc->ns_server_name = config->nlc_server_name ? mem_strdup(config->nlc_server_name) : NULL;
	int rc = svc->ns_state_dir && (svc->ns_server_name || !config->nlc_server_name) ? 0
	                                                                                 : -ENOMEM;
	if (rc == 0)
		rc = sh_random_bytes(&svc->ns_host_seed, sizeof(svc->ns_host_seed));
	if (rc == 0)
		rc = -pthread_mutex_init(&svc->ns_lock, NULL);
	if (rc != 0)
		goto fail_early;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = -pthread_cond_init(&svc->ns_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0)
		goto fail_mutex;
	struct lock_table_opts lo = {
		.lto_callbacks = {.lcb_granted = nlm_table_granted, .lcb_dropped = nlm_table_dropped},
		.lto_ctx = svc,
		.lto_host_max = config->nlc_host_locks ? config->nlc_host_locks : NLM_HOST_LOCKS_DEFAULT,
		.lto_table_max = config->nlc_table_locks ? config->nlc_table_locks
		                                         : NLM_TABLE_LOCKS_DEFAULT,
	};
	rc = lock_table_create(&lo, &svc->ns_locks);
	if (rc != 0)
		goto fail_cond;
	char dir[PATH_MAX];
	rc = nlm_path(svc, dir, sizeof(dir), "");
	if (rc == 0 && mkdir(dir, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	if (rc == 0)
		rc = nlm_state_advance(svc);
	if (rc == 0)
		rc = nlm_prev_load(svc);
	if (rc != 0) {
		log_error("lock manager: state directory %s/nsm: %s", svc->ns_state_dir,
		          sh_strerror(rc));
		goto fail_table;
	}
	*out = svc;
	return 0;
fail_table:
	lock_table_destroy(svc->ns_locks);
fail_cond:
	pthread_cond_destroy(&svc->ns_cv);
fail_mutex:
	pthread_mutex_destroy(&svc->ns_lock);
fail_early:
	mem_free(svc->ns_prev);
	mem_free(svc->ns_state_dir);
	mem_free(svc->ns_server_name);
	mem_free(svc);
	return rc;
}

int nlm_service_register(struct nlm_service *svc, struct rpc_server *srv)
{
	int rc = rpc_server_add_program(srv, &nlm_program, svc);
	if (rc == 0)
		rc = rpc_server_add_program(srv, &nsm_program, svc);
	return rc;
}

int nlm_service_start(struct nlm_service *svc, const char *listen_addr)
{
	const char *name = svc->ns_server_name ? svc->ns_server_name : listen_addr;
	pthread_mutex_lock(&svc->ns_lock);
	if (svc->ns_grace) /* not ended already: every client of the runs before is done */
		svc->ns_grace_end_ns = nlm_now_ns() + (uint64_t)svc->ns_grace_s * 1000000000ull;
	/* R3: every client of the runs before hears of the restart */
	for (size_t i = 0; i < svc->ns_nprev; i++) {
		struct nlm_prev *p = &svc->ns_prev[i];
		uint8_t args[4 + NLM_NAME_MAX + 4];
		struct xdr_enc enc;
		xdr_enc_init(&enc, args, sizeof(args));
		nsm_xdr_enc_notify(&enc, name, svc->ns_state);
		struct sockaddr_storage ss;
		socklen_t ss_len = nlm_sockaddr_of(p->np_addr, &ss);
		struct nlm_job *j = mem_zalloc(sizeof(*j) + xdr_enc_len(&enc));
		if (!j)
			continue;
		j->nj_kind = NLM_JOB_NOTIFY;
		j->nj_peer = ss;
		j->nj_peer_len = ss_len;
		j->nj_transport = RPC_UDP;
		j->nj_prog = NSM_PROG;
		j->nj_vers = NSM_VERS1;
		j->nj_proc = NSM_NOTIFY;
		j->nj_args_len = xdr_enc_len(&enc);
		memcpy(j->nj_args, args, j->nj_args_len);
		nlm_job_push_locked(svc, j);
	}
	(void)nlm_grace_locked(svc);
	pthread_mutex_unlock(&svc->ns_lock);
	int rc = 0;
	for (unsigned i = 0; i < NLM_CALLBACK_THREADS && rc == 0; i++) {
		rc = -pthread_create(&svc->ns_threads[i], NULL, nlm_thread, svc);
		if (rc == 0)
			svc->ns_nthreads++;
	}
	log_info("lock manager: NSM state %d; %zu client%s to notify; grace %u s", svc->ns_state,
	         svc->ns_nprev, svc->ns_nprev == 1 ? "" : "s", svc->ns_grace_s);
	return rc;
}

void nlm_service_release_fs(struct nlm_service *svc, uint64_t fsid)
{
	(void)lock_release_fs(svc->ns_locks, fsid);
}

void nlm_service_destroy(struct nlm_service *svc)
{
	if (!svc)
		return;
	pthread_mutex_lock(&svc->ns_lock);
	svc->ns_stopping = true;
	pthread_cond_broadcast(&svc->ns_cv);
	pthread_mutex_unlock(&svc->ns_lock);
	for (unsigned i = 0; i < svc->ns_nthreads; i++)
		pthread_join(svc->ns_threads[i], NULL);
	/* jobs not sent: a GRANTED's block leaves ns_granting and is freed (the lock stays with
	 * the table, which goes next) */
	while (svc->ns_jobs) {
		struct nlm_job *j = svc->ns_jobs;
		svc->ns_jobs = j->nj_next;
		if (j->nj_kind == NLM_JOB_GRANTED) {
			(void)nlm_granting_remove(svc, j->nj_block);
			nlm_block_free(svc, j->nj_block);
		}
		mem_free(j);
	}
	lock_table_destroy(svc->ns_locks);
	pthread_mutex_lock(&svc->ns_lock);
	bool forget = svc->ns_nthreads > 0 && !svc->ns_prev_forgotten && !nlm_grace_locked(svc);
	pthread_mutex_unlock(&svc->ns_lock);
	if (forget)
		nlm_prev_forget(svc);
	for (unsigned i = 0; i < NLM_HOST_SLOTS; i++) {
		while (svc->ns_hosts[i]) {
			struct nlm_host *h = svc->ns_hosts[i];
			svc->ns_hosts[i] = h->nh_next;
			mem_free(h);
		}
	}
	pthread_cond_destroy(&svc->ns_cv);
	pthread_mutex_destroy(&svc->ns_lock);
	mem_free(svc->ns_prev);
	mem_free(svc->ns_state_dir);
	mem_free(svc->ns_server_name);
	mem_free(svc);
}
