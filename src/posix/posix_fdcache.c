/* posix_fdcache.c: the posix back end's cache of open objects, keyed by kernel file handle, and
 * the containment check that refuses a directory lying outside the export.
 *
 * Rules:
 *  1. An entry is in the hash table and the LRU list exactly while pfd_in_table; pc_nfds counts
 *     the fds of those entries only.
 *  2. An entry is freed (its fds closed) only when it is out of the table and pfd_refs drops to
 *     zero, so a request holding an entry can use its fds without the lock.
 *  3. pfd_fd never changes after insertion; pfd_wfd goes once from -1 to an fd, under pc_lock,
 *     and is read with an atomic load.
 *  4. Eviction takes the least recently used entries with no holders while pc_nfds exceeds
 *     pc_max_fds; when every entry is held the cache stays over its limit until releases.
 *  5. A directory entry is in the table only after the containment walk succeeded, and is walked
 *     again when POSIX_VERIFY_TTL_NS passed since.
 *  6. Every directory a successful walk passed lies inside the export too, so the walk remembers
 *     them (pc_dirmemo, keyed by inode number and birth time so a reused inode number is not
 *     taken for the directory that had it), and a later walk that climbs to one of them within
 *     POSIX_VERIFY_TTL_NS of that proof stops there. The proof a walk gives is dated by the
 *     oldest proof it relied on, never later, so a directory moved out of the export is still
 *     refused within POSIX_VERIFY_TTL_NS; sibling directories re-verified every TTL then cost
 *     one step up each rather than a walk to the root. Without birth times (a host file system
 *     that reports none) every walk goes to the root.
 *  7. Idle expiry: an entry records the pass (pc_pass) in which a request last took it
 *     (posix_lru_push_head, so the LRU list is ordered by it too); posix_fdcache_expire, run
 *     about once a second by the write-behind thread, advances the pass and removes the entries
 *     nobody holds that no request took in the last pc_idle_passes passes (so an entry goes
 *     between pc_idle_passes and one more seconds after its last use), walking from the LRU
 *     tail and stopping at the first younger one. Otherwise an entry would stay until
 *     eviction: a file removed on the host (not through a REMOVE of ours, which forgets it)
 *     would keep its space allocated. */
#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "posix/posix_impl.h"

#define POSIX_KEY_OFF POSIX_ID_OFF_HTYPE

static uint32_t posix_pow2_at_least(uint32_t n)
{
	uint32_t p = 64;
	while (p < n && p < (1u << 30))
		p <<= 1;
	return p;
}

int posix_fdcache_init(struct posix_fdcache *cache, uint32_t max_fds, uint32_t idle_passes)
{
	memset(cache, 0, sizeof(*cache));
	cache->pc_max_fds = max_fds;
	cache->pc_idle_passes = idle_passes;
	cache->pc_nbuckets = posix_pow2_at_least(max_fds);
	cache->pc_buckets = mem_zalloc(cache->pc_nbuckets * sizeof(cache->pc_buckets[0]));
	cache->pc_ino_buckets = mem_zalloc(cache->pc_nbuckets * sizeof(cache->pc_ino_buckets[0]));
	int rc = cache->pc_buckets == NULL || cache->pc_ino_buckets == NULL
		     ? ENOMEM
		     : pthread_mutex_init(&cache->pc_lock, NULL);
	if (rc != 0) {
		mem_free(cache->pc_buckets);
		mem_free(cache->pc_ino_buckets);
		cache->pc_buckets = NULL;
		cache->pc_ino_buckets = NULL;
		return -rc;
	}
	return 0;
}

static void posix_fd_free(struct posix_fd *pfd)
{
	if (pfd->pfd_fd >= 0)
		(void)close(pfd->pfd_fd);
	if (pfd->pfd_wfd >= 0)
		(void)close(pfd->pfd_wfd);
	pthread_mutex_destroy(&pfd->pfd_dir_lock);
	pthread_mutex_destroy(&pfd->pfd_sync_lock);
	mem_free(pfd);
}

/* Every request has completed (fs_destroy's contract), so nothing is held. */
void posix_fdcache_fini(struct posix_fdcache *cache)
{
	struct posix_fd *pfd = cache->pc_lru_head;
	while (pfd != NULL) {
		struct posix_fd *next = pfd->pfd_lru_next;
		VERIFY(pfd->pfd_refs == 0);
		posix_fd_free(pfd);
		pfd = next;
	}
	mem_free(cache->pc_buckets);
	mem_free(cache->pc_ino_buckets);
	cache->pc_buckets = NULL;
	cache->pc_ino_buckets = NULL;
	pthread_mutex_destroy(&cache->pc_lock);
}

static unsigned posix_fd_nfds(const struct posix_fd *pfd)
{
	return (pfd->pfd_fd >= 0 ? 1u : 0u) + (pfd->pfd_wfd >= 0 ? 1u : 0u);
}

static bool posix_key_equal(const struct fs_obj_id *a, const struct fs_obj_id *b)
{
	return a->foi_len == b->foi_len &&
	       memcmp(a->foi_bytes + POSIX_KEY_OFF, b->foi_bytes + POSIX_KEY_OFF,
		      (size_t)a->foi_len - POSIX_KEY_OFF) == 0;
}

static uint64_t posix_key_hash(const struct fs_obj_id *id)
{
	return sh_hash64(id->foi_bytes + POSIX_KEY_OFF, (size_t)id->foi_len - POSIX_KEY_OFF, 0);
}

/* Called with pc_lock held. */
static struct posix_fd *posix_cache_find(struct posix_fdcache *cache, const struct fs_obj_id *id,
					 uint64_t hash)
{
	struct posix_fd *pfd = cache->pc_buckets[hash & (cache->pc_nbuckets - 1)];
	for (; pfd != NULL; pfd = pfd->pfd_hash_next)
		if (pfd->pfd_hash == hash && posix_key_equal(&pfd->pfd_id, id))
			return pfd;
	return NULL;
}

static struct posix_fd **posix_ino_bucket(struct posix_fdcache *cache, uint64_t ino)
{
	return &cache->pc_ino_buckets[sh_hash_fib(ino, (unsigned)__builtin_ctz(cache->pc_nbuckets))];
}

static void posix_lru_unlink(struct posix_fdcache *cache, struct posix_fd *pfd)
{
	if (pfd->pfd_lru_prev != NULL)
		pfd->pfd_lru_prev->pfd_lru_next = pfd->pfd_lru_next;
	else
		cache->pc_lru_head = pfd->pfd_lru_next;
	if (pfd->pfd_lru_next != NULL)
		pfd->pfd_lru_next->pfd_lru_prev = pfd->pfd_lru_prev;
	else
		cache->pc_lru_tail = pfd->pfd_lru_prev;
	pfd->pfd_lru_prev = pfd->pfd_lru_next = NULL;
}

static void posix_lru_push_head(struct posix_fdcache *cache, struct posix_fd *pfd)
{
	pfd->pfd_used_pass = cache->pc_pass;
	pfd->pfd_lru_prev = NULL;
	pfd->pfd_lru_next = cache->pc_lru_head;
	if (cache->pc_lru_head != NULL)
		cache->pc_lru_head->pfd_lru_prev = pfd;
	else
		cache->pc_lru_tail = pfd;
	cache->pc_lru_head = pfd;
}

/* Takes pfd out of the table (rule 1). Called with pc_lock held. */
static void posix_cache_remove(struct posix_fdcache *cache, struct posix_fd *pfd)
{
	struct posix_fd **pp = &cache->pc_buckets[pfd->pfd_hash & (cache->pc_nbuckets - 1)];
	while (*pp != pfd)
		pp = &(*pp)->pfd_hash_next;
	*pp = pfd->pfd_hash_next;
	pfd->pfd_hash_next = NULL;
	pp = posix_ino_bucket(cache, pfd->pfd_ino);
	while (*pp != pfd)
		pp = &(*pp)->pfd_ino_next;
	*pp = pfd->pfd_ino_next;
	pfd->pfd_ino_next = NULL;
	posix_lru_unlink(cache, pfd);
	cache->pc_nentries--;
	cache->pc_nfds -= posix_fd_nfds(pfd);
	pfd->pfd_in_table = false;
}

/* Rules 4 and 7: walks the LRU list from its tail while more(cache, entry) holds, taking the
 * entries nobody holds out of the table. Called with pc_lock held; returns them, linked through
 * pfd_hash_next, for the caller to free once the lock is dropped. */
static struct posix_fd *posix_cache_take_lru(struct posix_fdcache *cache,
					     bool (*more)(const struct posix_fdcache *cache,
							  const struct posix_fd *pfd))
{
	struct posix_fd *victims = NULL;
	struct posix_fd *pfd = cache->pc_lru_tail;
	while (pfd != NULL && more(cache, pfd)) {
		struct posix_fd *prev = pfd->pfd_lru_prev;
		if (pfd->pfd_refs == 0) {
			posix_cache_remove(cache, pfd);
			pfd->pfd_hash_next = victims;
			victims = pfd;
		}
		pfd = prev;
	}
	return victims;
}

static bool posix_cache_over_limit(const struct posix_fdcache *cache, const struct posix_fd *pfd)
{
	(void)pfd;
	return cache->pc_nfds > cache->pc_max_fds;
}

static bool posix_cache_idle(const struct posix_fdcache *cache, const struct posix_fd *pfd)
{
	return cache->pc_pass - pfd->pfd_used_pass > cache->pc_idle_passes;
}

/* Rule 4. */
static struct posix_fd *posix_cache_evict(struct posix_fdcache *cache)
{
	return posix_cache_take_lru(cache, posix_cache_over_limit);
}

static void posix_free_victims(struct posix_fd *victims)
{
	while (victims != NULL) {
		struct posix_fd *next = victims->pfd_hash_next;
		posix_fd_free(victims);
		victims = next;
	}
}

void posix_fdcache_expire(struct posix_fdcache *cache)
{
	pthread_mutex_lock(&cache->pc_lock);
	cache->pc_pass++;
	struct posix_fd *victims = posix_cache_take_lru(cache, posix_cache_idle);
	pthread_mutex_unlock(&cache->pc_lock);
	posix_free_victims(victims);
}

/* Checks the id's header and fills fh (with room for POSIX_ID_HANDLE_MAX bytes). */
static int posix_id_parse(const struct posix_fs *pf, const struct fs_obj_id *id,
			  struct file_handle *fh, enum fs_type *type_out)
{
	if (id->foi_len <= POSIX_ID_OFF_HANDLE || id->foi_len > FS_OBJ_ID_MAX)
		return -SH_EBADHANDLE;
	if (id->foi_bytes[POSIX_ID_OFF_VERSION] != POSIX_ID_VERSION)
		return -SH_EBADHANDLE;
	uint8_t type = id->foi_bytes[POSIX_ID_OFF_TYPE];
	if (type < FS_REG || type > FS_FIFO)
		return -SH_EBADHANDLE;
	const uint8_t *t = id->foi_bytes + POSIX_ID_OFF_TAG;
	uint32_t tag = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
		       (uint32_t)t[3] << 24;
	if (tag != pf->pf_tag)
		return -SH_EBADHANDLE;
	const uint8_t *h = id->foi_bytes + POSIX_ID_OFF_HTYPE;
	uint32_t htype = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
			 (uint32_t)h[3] << 24;
	fh->handle_type = (int)htype;
	fh->handle_bytes = (unsigned)id->foi_len - POSIX_ID_OFF_HANDLE;
	memcpy(fh->f_handle, id->foi_bytes + POSIX_ID_OFF_HANDLE, fh->handle_bytes);
	*type_out = (enum fs_type)type;
	return 0;
}

static uint32_t posix_dirmemo_index(uint64_t ino)
{
	return (uint32_t)(sh_hash64(&ino, sizeof(ino), 0x6469726du) & (POSIX_DIRMEMO_SLOTS - 1));
}

/* Rule 6: when (ino, btime) was proved inside the export, or 0. Called with pc_lock held. */
static uint64_t posix_dirmemo_find(const struct posix_fdcache *cache, const struct statx *stx)
{
	const struct posix_dirmemo *m = &cache->pc_dirmemo[posix_dirmemo_index(stx->stx_ino)];
	if (m->pd_verified_ns != 0 && m->pd_ino == stx->stx_ino &&
	    m->pd_btime_sec == stx->stx_btime.tv_sec && m->pd_btime_nsec == stx->stx_btime.tv_nsec)
		return m->pd_verified_ns;
	return 0;
}

/* Called with pc_lock held. */
static void posix_dirmemo_put(struct posix_fdcache *cache, const struct statx *stx,
			      uint64_t verified_ns)
{
	struct posix_dirmemo *m = &cache->pc_dirmemo[posix_dirmemo_index(stx->stx_ino)];
	m->pd_ino = stx->stx_ino;
	m->pd_btime_sec = stx->stx_btime.tv_sec;
	m->pd_btime_nsec = stx->stx_btime.tv_nsec;
	m->pd_verified_ns = verified_ns;
}

/* Directories one walk may remember for rule 6; deeper walks remember the nearest ones. */
#define POSIX_WALK_MEMO 16

/* Rule 5: walks ".." from the directory fd up to the export root, or (rule 6) to a directory
 * recently proved inside it. Returns 0 with *proved_ns = the date of the proof (now, or the
 * older proof the walk stopped at), or -ESTALE when the walk leaves the host file system, reaches
 * its top, or goes deeper than POSIX_VERIFY_MAX_DEPTH. Runs with fsuid 0 so no search permission
 * stops it. */
static int posix_dir_contained(struct posix_fs *pf, int fd, const struct stat *st,
			       uint64_t *proved_ns)
{
	struct posix_fdcache *cache = &pf->pf_cache;
	struct statx passed[POSIX_WALK_MEMO];
	unsigned npassed = 0;
	dev_t prev_dev = st->st_dev;
	ino_t prev_ino = st->st_ino;
	int cur = fd;
	int owned = -1;
	int rc = -ESTALE;
	uint64_t now = clock_monotonic_ns();
	uint64_t proof = now;

	*proved_ns = now;
	if (st->st_dev == pf->pf_root_dev && st->st_ino == pf->pf_root_ino)
		return 0;
	for (unsigned depth = 0; depth < POSIX_VERIFY_MAX_DEPTH; depth++) {
		int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (up < 0) {
			rc = errno == ENOENT ? -ESTALE : -errno;
			break;
		}
		if (owned >= 0)
			(void)close(owned);
		owned = cur = up;
		struct statx stx;
		if (statx(up, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW,
			  STATX_TYPE | STATX_INO | STATX_BTIME, &stx) != 0) {
			rc = -errno;
			break;
		}
		dev_t udev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
		if (udev != pf->pf_root_dev) {
			rc = -ESTALE; /* climbed off the exported file system */
			break;
		}
		if ((ino_t)stx.stx_ino == pf->pf_root_ino) {
			rc = 0;
			break;
		}
		if (udev == prev_dev && (ino_t)stx.stx_ino == prev_ino) {
			rc = -ESTALE; /* ".." of the top is itself: the root was never passed */
			break;
		}
		if (stx.stx_mask & STATX_BTIME) {
			pthread_mutex_lock(&cache->pc_lock);
			uint64_t memo = posix_dirmemo_find(cache, &stx);
			pthread_mutex_unlock(&cache->pc_lock);
			if (memo != 0 && now - memo <= POSIX_VERIFY_TTL_NS) {
				proof = memo;
				rc = 0;
				break;
			}
			if (npassed < POSIX_WALK_MEMO)
				passed[npassed++] = stx;
		}
		prev_dev = udev;
		prev_ino = (ino_t)stx.stx_ino;
		rc = -ESTALE;
	}
	if (owned >= 0)
		(void)close(owned);
	if (rc == 0) {
		pthread_mutex_lock(&cache->pc_lock);
		for (unsigned i = 0; i < npassed; i++)
			posix_dirmemo_put(cache, &passed[i], proof);
		pthread_mutex_unlock(&cache->pc_lock);
		*proved_ns = proof;
	}
	return rc;
}

static int posix_open_flags(enum fs_type type)
{
	switch (type) {
	case FS_REG:
		/* O_NONBLOCK: harmless on a regular file, and never hangs should it be a FIFO. */
		return O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
	case FS_DIR:
		return O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	default:
		/* Symlinks, devices, FIFOs and sockets are never opened for I/O. */
		return O_PATH | O_NOFOLLOW | O_CLOEXEC;
	}
}

static int posix_open_error(int err)
{
	switch (err) {
	case ESTALE:
	case ENOENT:
		return -ESTALE;
	case EINVAL:  /* a handle type the file system does not know */
	case ENOTDIR: /* the id said directory, the object is not one */
	case ELOOP:   /* the id said regular file or directory, the object is a symlink */
	case EBADF:
		return -SH_EBADHANDLE;
	default:
		return -err;
	}
}

int posix_fd_hold(struct posix_fs *pf, const struct fs_obj_id *id, struct posix_fd **out)
{
	struct posix_fdcache *cache = &pf->pf_cache;
	alignas(struct file_handle) uint8_t fh_buf[sizeof(struct file_handle) + POSIX_ID_HANDLE_MAX];
	struct file_handle *fh = (struct file_handle *)(void *)fh_buf;
	enum fs_type type;
	struct posix_fd *pfd;
	int rc;

	rc = posix_id_parse(pf, id, fh, &type);
	if (rc != 0)
		return rc;
	uint64_t hash = posix_key_hash(id);

	pthread_mutex_lock(&cache->pc_lock);
	pfd = posix_cache_find(cache, id, hash);
	if (pfd != NULL) {
		if (pfd->pfd_type != type) {
			pthread_mutex_unlock(&cache->pc_lock);
			return -SH_EBADHANDLE;
		}
		pfd->pfd_refs++;
		posix_lru_unlink(cache, pfd);
		posix_lru_push_head(cache, pfd);
		uint64_t verified_ns = pfd->pfd_verified_ns;
		pthread_mutex_unlock(&cache->pc_lock);
		if (type == FS_DIR && clock_monotonic_ns() - verified_ns > POSIX_VERIFY_TTL_NS) {
			struct stat st;
			uint64_t proved_ns = 0;
			rc = posix_cred_root();
			if (rc == 0)
				rc = posix_stat_fd(pfd->pfd_fd, &st);
			if (rc == 0)
				rc = st.st_nlink == 0 ? -ESTALE
						      : posix_dir_contained(pf, pfd->pfd_fd, &st,
									    &proved_ns);
			if (rc != 0) {
				posix_fd_forget(pf, pfd);
				posix_fd_rele(pf, pfd);
				return rc;
			}
			pthread_mutex_lock(&cache->pc_lock);
			pfd->pfd_verified_ns = proved_ns;
			pthread_mutex_unlock(&cache->pc_lock);
		}
		*out = pfd;
		return 0;
	}
	pthread_mutex_unlock(&cache->pc_lock);

	/* Miss: open by handle as root (open_by_handle_at needs CAP_DAC_READ_SEARCH, which a
	 * non-zero fsuid drops from the thread's effective set). */
	rc = posix_cred_root();
	if (rc != 0)
		return rc;
	int fd = open_by_handle_at(pf->pf_root_fd, fh, posix_open_flags(type));
	if (fd < 0)
		return posix_open_error(errno);
	struct stat st;
	rc = posix_stat_fd(fd, &st);
	if (rc == 0 && posix_type_of_mode(st.st_mode) != type)
		rc = -SH_EBADHANDLE;
	if (rc == 0 && st.st_dev != pf->pf_root_dev)
		rc = -SH_EBADHANDLE;
	if (rc == 0 && st.st_nlink == 0)
		rc = -ESTALE;
	uint64_t proved_ns = clock_monotonic_ns();
	if (rc == 0 && type == FS_DIR)
		rc = posix_dir_contained(pf, fd, &st, &proved_ns);
	if (rc != 0) {
		(void)close(fd);
		return rc;
	}

	pfd = mem_zalloc(sizeof(*pfd));
	if (pfd == NULL) {
		(void)close(fd);
		return -ENOMEM;
	}
	rc = pthread_mutex_init(&pfd->pfd_dir_lock, NULL);
	if (rc != 0) {
		(void)close(fd);
		mem_free(pfd);
		return -rc;
	}
	rc = pthread_mutex_init(&pfd->pfd_sync_lock, NULL);
	if (rc != 0) {
		pthread_mutex_destroy(&pfd->pfd_dir_lock);
		(void)close(fd);
		mem_free(pfd);
		return -rc;
	}
	pfd->pfd_hash = hash;
	pfd->pfd_id = *id;
	pfd->pfd_ino = (uint64_t)st.st_ino;
	pfd->pfd_type = type;
	pfd->pfd_fd = fd;
	pfd->pfd_wfd = -1;
	pfd->pfd_refs = 1;
	pfd->pfd_verified_ns = proved_ns;

	pthread_mutex_lock(&cache->pc_lock);
	struct posix_fd *raced = posix_cache_find(cache, id, hash);
	struct posix_fd *victims = NULL;
	if (raced != NULL) {
		/* Another thread opened the same object meanwhile: use its entry. */
		raced->pfd_refs++;
		pthread_mutex_unlock(&cache->pc_lock);
		posix_fd_free(pfd);
		if (raced->pfd_type != type) {
			posix_fd_rele(pf, raced);
			return -SH_EBADHANDLE;
		}
		*out = raced;
		return 0;
	}
	struct posix_fd **bucket = &cache->pc_buckets[hash & (cache->pc_nbuckets - 1)];
	pfd->pfd_hash_next = *bucket;
	*bucket = pfd;
	bucket = posix_ino_bucket(cache, pfd->pfd_ino);
	pfd->pfd_ino_next = *bucket;
	*bucket = pfd;
	posix_lru_push_head(cache, pfd);
	pfd->pfd_in_table = true;
	cache->pc_nentries++;
	cache->pc_nfds += posix_fd_nfds(pfd);
	victims = posix_cache_evict(cache);
	pthread_mutex_unlock(&cache->pc_lock);
	posix_free_victims(victims);
	*out = pfd;
	return 0;
}

void posix_fd_rele(struct posix_fs *pf, struct posix_fd *pfd)
{
	struct posix_fdcache *cache = &pf->pf_cache;
	bool free_it;

	pthread_mutex_lock(&cache->pc_lock);
	VERIFY(pfd->pfd_refs > 0);
	pfd->pfd_refs--;
	free_it = pfd->pfd_refs == 0 && !pfd->pfd_in_table;
	struct posix_fd *victims = NULL;
	if (pfd->pfd_refs == 0 && pfd->pfd_in_table && cache->pc_nfds > cache->pc_max_fds)
		victims = posix_cache_evict(cache); /* rule 4: the limit was exceeded while held */
	pthread_mutex_unlock(&cache->pc_lock);
	posix_free_victims(victims);
	if (free_it)
		posix_fd_free(pfd);
}

void posix_fd_ref(struct posix_fs *pf, struct posix_fd *pfd)
{
	pthread_mutex_lock(&pf->pf_cache.pc_lock);
	VERIFY(pfd->pfd_refs > 0);
	pfd->pfd_refs++;
	pthread_mutex_unlock(&pf->pf_cache.pc_lock);
}

int posix_fd_open_handle(struct posix_fs *pf, struct posix_fd *pfd, int flags, int *fd_out)
{
	alignas(struct file_handle) uint8_t fh_buf[sizeof(struct file_handle) + POSIX_ID_HANDLE_MAX];
	struct file_handle *fh = (struct file_handle *)(void *)fh_buf;
	enum fs_type type;

	if (pfd->pfd_type != FS_REG)
		return -EINVAL;
	int rc = posix_id_parse(pf, &pfd->pfd_id, fh, &type);
	if (rc != 0)
		return rc;
	rc = posix_cred_root();
	if (rc != 0)
		return rc;
	int fd = open_by_handle_at(pf->pf_root_fd, fh, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return posix_open_error(errno);
	*fd_out = fd;
	return 0;
}

int posix_fd_writable(struct posix_fs *pf, struct posix_fd *pfd, int *fd_out)
{
	struct posix_fdcache *cache = &pf->pf_cache;
	int wfd = __atomic_load_n(&pfd->pfd_wfd, __ATOMIC_ACQUIRE);
	if (wfd >= 0) {
		*fd_out = wfd;
		return 0;
	}
	int fd;
	int rc = posix_fd_open_handle(pf, pfd, O_RDWR, &fd);
	if (rc != 0)
		return rc;

	pthread_mutex_lock(&cache->pc_lock);
	struct posix_fd *victims = NULL;
	if (pfd->pfd_wfd < 0) {
		__atomic_store_n(&pfd->pfd_wfd, fd, __ATOMIC_RELEASE);
		fd = -1;
		if (pfd->pfd_in_table) {
			cache->pc_nfds++;
			victims = posix_cache_evict(cache);
		}
	}
	wfd = pfd->pfd_wfd;
	pthread_mutex_unlock(&cache->pc_lock);
	posix_free_victims(victims);
	if (fd >= 0)
		(void)close(fd); /* another thread installed one first */
	*fd_out = wfd;
	return 0;
}

void posix_fd_forget(struct posix_fs *pf, struct posix_fd *pfd)
{
	struct posix_fdcache *cache = &pf->pf_cache;

	pthread_mutex_lock(&cache->pc_lock);
	if (pfd->pfd_in_table)
		posix_cache_remove(cache, pfd);
	pthread_mutex_unlock(&cache->pc_lock);
}

/* Entries of one inode looked at; one is the rule (an inode has one handle), more a margin. */
#define POSIX_FORGET_MAX 4

void posix_fd_forget_if_unlinked(struct posix_fs *pf, uint64_t ino)
{
	struct posix_fdcache *cache = &pf->pf_cache;
	struct posix_fd *found[POSIX_FORGET_MAX];
	unsigned n = 0;

	pthread_mutex_lock(&cache->pc_lock);
	for (struct posix_fd *pfd = *posix_ino_bucket(cache, ino); pfd != NULL && n < POSIX_FORGET_MAX;
	     pfd = pfd->pfd_ino_next) {
		if (pfd->pfd_ino == ino) {
			pfd->pfd_refs++;
			found[n++] = pfd;
		}
	}
	pthread_mutex_unlock(&cache->pc_lock);
	for (unsigned i = 0; i < n; i++) {
		struct stat st;
		if (posix_stat_fd(found[i]->pfd_fd, &st) != 0 || st.st_nlink == 0)
			posix_fd_forget(pf, found[i]);
		posix_fd_rele(pf, found[i]);
	}
}

/* Group commit (see posix_impl.h), in rounds. A request joins the open round after its change;
 * a change that finds no round running starts the open round itself (rounds run one at a time,
 * in order), and new changes join the next one. A round runs one fsync of the directory if any
 * member needs it and one fsync per member that brought a new object of its own
 * (posix_dir_sync_object, which that member runs), all at once. The round finishes when the
 * last of them returns; the thread that ran that one starts the next round, and only then are
 * the finished round's members answered.
 *
 * Members are of two kinds. A waiting member (posix_dir_sync, posix_dir_sync_object) is a
 * worker that waits on a condition of its own, on its stack, in its round's list. A parked
 * member (posix_dir_sync_park: REMOVE and RMDIR, whose reply is complete but for the fsync) is
 * the request itself, linked through fr_task.lt_next with its reference of the directory: its
 * worker goes back to the queue, and whoever finishes the round sets the request's status and
 * completes it. The directory's fsync of a round goes to a thread that is awake when it can:
 * the change that starts the round, or the thread that finished the previous one if that
 * thread has no request of its own waiting (it ran a parked member's fsync, so it keeps running
 * the next rounds' while they come); else to a waiting member that needs it; else (only parked
 * members need it) to a worker, through pf_round_head. A round wakes exactly the members it gives
 * an fsync to when it starts and each waiting member once when it finishes: the server's
 * workers share one busy core, where a wake-up costs far more than the fsync's system call, and
 * waking every waiter at every step (one shared condition) took about a third of a round of
 * creates before its last fsync started. A parked REMOVE costs no wake-up at all, and does not
 * hold a worker while its directory's fsync runs: a burst of REMOVEs in one directory no longer
 * takes every worker from the other requests.
 *
 * Why rounds, and not only one directory fsync at a time. Where the host file system keeps a
 * directory's dirty blocks on a list of the directory's (ext4 without a journal: fs/buffer.c's
 * fsync_buffers_list), an fsync takes the blocks off that list while it writes them, and
 * another fsync running then does not see them: it neither writes nor waits for a block the
 * first holds, even one a change of its own dirtied after the first one's write began. The fsync
 * of a new object writes its directory's blocks the same way (ext4_sync_parent). So no fsync
 * that writes a directory may start while another that writes it runs, unless neither is
 * trusted until both are done: every fsync of a round starts after the change of every member,
 * no fsync of an earlier round is running (so every dirty block of the directory is on its
 * list, or written and waited for), and a member is answered only once every fsync of its round,
 * each of which waited for the blocks it took and then flushed the disk, has returned. A round
 * that has no new objects is one fsync, as a plain group commit would run it.
 *
 * A failure is reported to every member of the failed round (a block another member's fsync
 * failed to write may hold any member's change), and to any request that joined before the
 * round finished and had not yet been answered (for a parked member: any member of the round
 * that was open when the failed one finished, pfd_sync_open_tainted): reporting an error for a
 * change that is in fact durable is safe (the client retries), the reverse would not be. */
struct posix_sync_waiter {
	struct posix_sync_waiter *next; /* the next waiting member of its round */
	pthread_cond_t cond;   /* signalled when given an fsync, and when its round finishes */
	int obj_fd;            /* its new object, whose fsync it runs; -1: the directory's */
	int run_fd;            /* the fsync its round gave it and it has not started; -1 if none */
	uint64_t nfail_before; /* the directory's failed fsyncs when it joined */
	bool done;             /* its round finished, and rc is its answer */
	int rc;
};

/* Hands the running round's directory fsync to a worker (posix_round_run_queued). */
static void posix_round_queue(struct posix_fs *pf, struct posix_fd *d)
{
	posix_fd_ref(pf, d); /* the queue's */
	pthread_mutex_lock(&pf->pf_queue_lock);
	d->pfd_sync_next = NULL;
	if (pf->pf_round_tail != NULL)
		pf->pf_round_tail->pfd_sync_next = d;
	else
		pf->pf_round_head = d;
	pf->pf_round_tail = d;
	pthread_mutex_unlock(&pf->pf_queue_lock);
	pthread_cond_signal(&pf->pf_queue_cond);
}

/* Starts the open round (it has members; no round runs). Each new object's fsync goes to its own
 * member. The directory's, if a member needs it, goes to the caller when the caller is a waiting
 * member that needs it (self) or a thread free to run it (caller_free: one whose own request
 * is parked or answered), else to the first waiting member that needs it, else (only parked
 * members need it) to a worker. Only the members given an fsync are woken. Returns true when
 * the caller is to run the directory's fsync (caller_free). */
static bool posix_round_start(struct posix_fs *pf, struct posix_fd *d,
			      struct posix_sync_waiter *self, bool caller_free)
{
	struct posix_sync_waiter *members = d->pfd_sync_open_list;
	bool dir_needed = d->pfd_sync_open_dir;
	d->pfd_sync_running = true;
	d->pfd_sync_run_list = members;
	d->pfd_sync_run_reqs = d->pfd_sync_open_reqs;
	d->pfd_sync_run_tainted = d->pfd_sync_open_tainted;
	d->pfd_sync_run_nfail = d->pfd_sync_nfail;
	d->pfd_sync_left = d->pfd_sync_open_objs + (dir_needed ? 1u : 0u);
	d->pfd_sync_open_list = NULL;
	d->pfd_sync_open_reqs = NULL;
	d->pfd_sync_open_tainted = false;
	d->pfd_sync_open_objs = 0;
	d->pfd_sync_open_dir = false;
	bool caller_runs_dir = false;
	if (dir_needed && self != NULL && self->obj_fd < 0) {
		self->run_fd = d->pfd_fd;
		dir_needed = false;
	} else if (dir_needed && caller_free) {
		caller_runs_dir = true;
		dir_needed = false;
	}
	for (struct posix_sync_waiter *w = members; w != NULL; w = w->next) {
		if (w->obj_fd >= 0) {
			w->run_fd = w->obj_fd;
		} else if (dir_needed) {
			w->run_fd = d->pfd_fd;
			dir_needed = false;
		} else {
			continue;
		}
		if (w != self)
			pthread_cond_signal(&w->cond);
	}
	if (dir_needed)
		posix_round_queue(pf, d);
	return caller_runs_dir;
}

/* One fsync of the running round has returned (frc, 0 or -errno). When it was the round's last,
 * the round finishes: the open round starts first, so its fsyncs are not held behind the
 * answers, then every waiting member of the finished one is answered and woken (self, the
 * caller, is awake already), and its parked members, their status set, are returned in
 * *finished_reqs for the caller to complete once it has let go of the lock. Returns true when
 * the caller (caller_free) is to run the new round's directory fsync. */
static bool posix_round_fsync_done(struct posix_fs *pf, struct posix_fd *d,
				   struct posix_sync_waiter *self, int frc, bool caller_free,
				   struct fs_req **finished_reqs)
{
	*finished_reqs = NULL;
	if (frc != 0) {
		d->pfd_sync_nfail++;
		d->pfd_sync_err = frc;
	}
	if (--d->pfd_sync_left > 0)
		return false;
	bool round_failed = d->pfd_sync_nfail != d->pfd_sync_run_nfail;
	int parked_rc = round_failed || d->pfd_sync_run_tainted ? d->pfd_sync_err : 0;
	for (struct fs_req *req = d->pfd_sync_run_reqs; req != NULL;) {
		req->fr_status = parked_rc;
		struct loop_task *next = req->fr_task.lt_next;
		req = next != NULL ? SH_CONTAINER_OF(next, struct fs_req, fr_task) : NULL;
	}
	*finished_reqs = d->pfd_sync_run_reqs;
	struct posix_sync_waiter *finished = d->pfd_sync_run_list;
	d->pfd_sync_run_list = NULL;
	d->pfd_sync_run_reqs = NULL;
	d->pfd_sync_running = false;
	/* A parked member of the open round joined before this failure was known: a block the
	 * failed fsync did not write may hold its change too. */
	if (round_failed && d->pfd_sync_open_reqs != NULL)
		d->pfd_sync_open_tainted = true;
	bool caller_runs_dir = false;
	if (d->pfd_sync_open_list != NULL || d->pfd_sync_open_reqs != NULL)
		caller_runs_dir = posix_round_start(pf, d, NULL, caller_free);
	for (struct posix_sync_waiter *w = finished; w != NULL;) {
		/* Read next before the member can see done: once it does, its stack is gone. Every
		 * member sees done only under the lock, which is held here. */
		struct posix_sync_waiter *next = w->next;
		w->rc = d->pfd_sync_nfail != w->nfail_before ? d->pfd_sync_err : 0;
		w->done = true;
		if (w != self)
			pthread_cond_signal(&w->cond);
		w = next;
	}
	return caller_runs_dir;
}

/* Completes parked requests whose round has finished, each releasing its reference of d; the
 * caller holds a reference of its own. */
static void posix_round_complete(struct posix_fs *pf, struct posix_fd *d, struct fs_req *reqs)
{
	while (reqs != NULL) {
		struct loop_task *next = reqs->fr_task.lt_next;
		reqs->fr_task.lt_next = NULL;
		fs_req_complete(reqs); /* reqs belongs to its loop from here on */
		posix_fd_rele(pf, d);
		reqs = next != NULL ? SH_CONTAINER_OF(next, struct fs_req, fr_task) : NULL;
	}
}

/* Runs fd's fsync for the running round (the lock held on entry and return) and accounts for
 * it; when that finishes the round, completes its parked members. Returns true when the caller
 * (caller_free) is to run the next round's directory fsync. */
static bool posix_round_fsync(struct posix_fs *pf, struct posix_fd *d,
			      struct posix_sync_waiter *self, int fd, bool caller_free)
{
	pthread_mutex_unlock(&d->pfd_sync_lock);
	int frc = fsync(fd) == 0 ? 0 : -errno;
	pthread_mutex_lock(&d->pfd_sync_lock);
	struct fs_req *finished;
	bool caller_runs_dir = posix_round_fsync_done(pf, d, self, frc, caller_free, &finished);
	if (finished != NULL) {
		pthread_mutex_unlock(&d->pfd_sync_lock);
		posix_round_complete(pf, d, finished);
		pthread_mutex_lock(&d->pfd_sync_lock);
	}
	return caller_runs_dir;
}

/* Runs the running round's directory fsync, given to the calling thread (which holds the sync
 * lock and a reference of d, and has no request of its own waiting), then each next one the
 * finished rounds give it: a thread already awake starts the next round's fsync at once, where
 * handing it to a member would wait for that member's wake-up. Returns with the lock held. */
static void posix_round_run_dir(struct posix_fs *pf, struct posix_fd *d)
{
	while (posix_round_fsync(pf, d, NULL, d->pfd_fd, true))
		;
}

static int posix_dir_sync_join(struct posix_fs *pf, struct posix_fd *d, int obj_fd)
{
	struct posix_sync_waiter self = {.obj_fd = obj_fd, .run_fd = -1};
	int rc = pthread_cond_init(&self.cond, NULL);
	if (rc != 0)
		return -rc;
	pthread_mutex_lock(&d->pfd_sync_lock);
	d->pfd_sync_ticket++;
	if (obj_fd >= 0)
		d->pfd_sync_open_objs++;
	else
		d->pfd_sync_open_dir = true;
	self.nfail_before = d->pfd_sync_nfail;
	self.next = d->pfd_sync_open_list;
	d->pfd_sync_open_list = &self;
	if (!d->pfd_sync_running)
		(void)posix_round_start(pf, d, &self, false); /* rounds run one at a time */
	while (!self.done) {
		if (self.run_fd < 0) {
			pthread_cond_wait(&self.cond, &d->pfd_sync_lock);
			continue;
		}
		int fd = self.run_fd;
		self.run_fd = -1;
		(void)posix_round_fsync(pf, d, &self, fd, false);
	}
	rc = self.rc;
	pthread_mutex_unlock(&d->pfd_sync_lock);
	pthread_cond_destroy(&self.cond);
	return rc;
}

void posix_dir_sync_park(struct posix_fs *pf, struct posix_fd *d, struct fs_req *req)
{
	pthread_mutex_lock(&d->pfd_sync_lock);
	d->pfd_sync_ticket++;
	d->pfd_sync_open_dir = true;
	struct fs_req *first = d->pfd_sync_open_reqs;
	req->fr_task.lt_next = first != NULL ? &first->fr_task : NULL;
	d->pfd_sync_open_reqs = req; /* req and its reference of d belong to the rounds now */
	if (!d->pfd_sync_running && posix_round_start(pf, d, NULL, true)) {
		posix_fd_ref(pf, d); /* the round may complete req, releasing its reference */
		posix_round_run_dir(pf, d);
		pthread_mutex_unlock(&d->pfd_sync_lock);
		posix_fd_rele(pf, d);
		return;
	}
	pthread_mutex_unlock(&d->pfd_sync_lock);
}

void posix_round_run_queued(struct posix_fs *pf, struct posix_fd *d)
{
	pthread_mutex_lock(&d->pfd_sync_lock);
	posix_round_run_dir(pf, d);
	pthread_mutex_unlock(&d->pfd_sync_lock);
	posix_fd_rele(pf, d); /* the queue's */
}

int posix_dir_sync(struct posix_fs *pf, struct posix_fd *d)
{
	return posix_dir_sync_join(pf, d, -1);
}

int posix_dir_sync_object(struct posix_fs *pf, struct posix_fd *d, int obj_fd)
{
	return posix_dir_sync_join(pf, d, obj_fd);
}
