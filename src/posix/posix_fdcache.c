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
 *     that reports none) every walk goes to the root. */
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

int posix_fdcache_init(struct posix_fdcache *cache, uint32_t max_fds)
{
	memset(cache, 0, sizeof(*cache));
	cache->pc_max_fds = max_fds;
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
	pthread_cond_destroy(&pfd->pfd_sync_cond);
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

/* Rule 4. Called with pc_lock held; returns the evicted entries, linked through pfd_hash_next,
 * for the caller to free once the lock is dropped. */
static struct posix_fd *posix_cache_evict(struct posix_fdcache *cache)
{
	struct posix_fd *victims = NULL;
	struct posix_fd *pfd = cache->pc_lru_tail;
	while (cache->pc_nfds > cache->pc_max_fds && pfd != NULL) {
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

static void posix_free_victims(struct posix_fd *victims)
{
	while (victims != NULL) {
		struct posix_fd *next = victims->pfd_hash_next;
		posix_fd_free(victims);
		victims = next;
	}
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
	if (rc == 0) {
		rc = pthread_cond_init(&pfd->pfd_sync_cond, NULL);
		if (rc != 0)
			pthread_mutex_destroy(&pfd->pfd_sync_lock);
	}
	if (rc != 0) {
		pthread_mutex_destroy(&pfd->pfd_dir_lock);
		(void)close(fd);
		mem_free(pfd);
		return -rc;
	}
	pfd->pfd_sync_open = 1;
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

/* Group commit (see posix_impl.h), in rounds. A request joins the open round after its change
 * and waits; when no round is running, the first member to see that starts the open round
 * (rounds run one at a time, in order), and new changes join the next one. A round runs one
 * fsync of the directory if any member needs it (the first such member to wake runs it) and one
 * fsync per member that brought a new object of its own (posix_dir_sync_object, which that
 * member runs), all at once. The round finishes when the last of them returns, and only then
 * are its members answered and the next round started.
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
 * round finished and had not yet been answered: reporting an error for a change that is in fact
 * durable is safe (the client retries), the reverse would not be. */
static int posix_dir_sync_join(struct posix_fd *d, int obj_fd)
{
	pthread_mutex_lock(&d->pfd_sync_lock);
	uint64_t round = d->pfd_sync_open;
	d->pfd_sync_ticket++;
	d->pfd_sync_open_members++;
	if (obj_fd >= 0)
		d->pfd_sync_open_objs++;
	else
		d->pfd_sync_open_dir = true;
	uint64_t nfail_before = d->pfd_sync_nfail;
	bool mine_done = false;
	int rc = 0;
	for (;;) {
		if (d->pfd_sync_finished >= round) {
			rc = d->pfd_sync_nfail != nfail_before ? d->pfd_sync_err : 0;
			break;
		}
		if (!d->pfd_sync_running && round == d->pfd_sync_open) {
			/* Start this round; later changes join the next. */
			if (d->pfd_sync_open_members > 1)
				pthread_cond_broadcast(&d->pfd_sync_cond); /* the others' turn */
			d->pfd_sync_running = true;
			d->pfd_sync_dir_claimed = false;
			d->pfd_sync_left = d->pfd_sync_open_objs + (d->pfd_sync_open_dir ? 1u : 0u);
			d->pfd_sync_open++;
			d->pfd_sync_open_members = 0;
			d->pfd_sync_open_objs = 0;
			d->pfd_sync_open_dir = false;
		}
		int fd = -1;
		if (d->pfd_sync_running && round == d->pfd_sync_open - 1 && !mine_done) {
			mine_done = true;
			if (obj_fd >= 0) {
				fd = obj_fd;
			} else if (!d->pfd_sync_dir_claimed) {
				d->pfd_sync_dir_claimed = true;
				fd = d->pfd_fd;
			}
		}
		if (fd < 0) {
			pthread_cond_wait(&d->pfd_sync_cond, &d->pfd_sync_lock);
			continue;
		}
		pthread_mutex_unlock(&d->pfd_sync_lock);
		int frc = fsync(fd) == 0 ? 0 : -errno;
		pthread_mutex_lock(&d->pfd_sync_lock);
		if (frc != 0) {
			d->pfd_sync_nfail++;
			d->pfd_sync_err = frc;
		}
		if (--d->pfd_sync_left == 0) {
			d->pfd_sync_running = false;
			d->pfd_sync_finished = round;
			pthread_cond_broadcast(&d->pfd_sync_cond);
		}
	}
	pthread_mutex_unlock(&d->pfd_sync_lock);
	return rc;
}

int posix_dir_sync(struct posix_fd *d)
{
	return posix_dir_sync_join(d, -1);
}

int posix_dir_sync_object(struct posix_fd *d, int obj_fd)
{
	return posix_dir_sync_join(d, obj_fd);
}
