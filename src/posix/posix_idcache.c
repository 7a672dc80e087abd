/* posix_idcache.c: names to object ids without name_to_handle_at on the hot path.
 *
 * LOOKUP and every entry of READDIRPLUS need an object's attributes and its id (the kernel file
 * handle, posix_impl.h). Both come from a path walk of one component: statx for the attributes
 * and name_to_handle_at for the handle, two walks per name. This cache remembers the id of each
 * inode once made, so a name costs one statx.
 *
 * Key. An inode number alone is not enough: the kernel reuses inode numbers, and the handle of
 * the new inode differs from the old one's (it carries the generation). The key is therefore
 * (inode number, birth time, object type): a reused inode number comes with a new birth time
 * (statx STATX_BTIME), so an entry of a deleted inode is not taken for its successor. Where the
 * file system reports no birth time the cache is not used.
 *
 * Birth times are stored in nanoseconds but come from the kernel's coarse clock, which advances
 * once per tick (1 to 10 ms; kernels since 6.13 give a finer time only to a change that follows a
 * read of the file's times), so on ext4 a file deleted and a file created in the same tick often
 * get the same inode number and the same birth time. The cache therefore takes an inode only
 * once it was born at least POSIX_IDCACHE_MIN_AGE_NS before its entry is made: an inode that
 * later reuses the number is born after that moment, ticks later, so its key differs. (A
 * real-time clock set back by more than that margin could defeat this; the id mistaken then
 * names the deleted inode, whose handle the kernel refuses as stale, never another live file.)
 * Younger inodes take the slow way.
 *
 * An id is only cached after name_to_handle_at made it for a name on the export's own
 * mount, and used only for a statx that reports that same mount (STATX_MNT_ID), so a mount point
 * inside the export is still refused by posix_id_at.
 *
 * Structure. A set-associative table: ic_nslots entries (POSIX_IDCACHE_SLOTS_DEFAULT unless
 * configured) in sets of POSIX_IDCACHE_WAYS,
 * the set chosen by a hash of the key (a directory's entries read in one READDIRPLUS must not
 * evict one another, as pairs colliding in a direct-mapped table would on every pass); an insert
 * into a full set replaces an entry picked by other bits of the hash. One mutex guards the table; it is held only for a
 * compare and a copy of at most FS_OBJ_ID_MAX bytes. The table's memory is fixed at creation. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "posix/posix_impl.h"

/* Age an inode must have before its id is cached: far beyond the coarse clock's tick. */
#define POSIX_IDCACHE_MIN_AGE_NS 1000000000ll

/* True when the inode born at btime is old enough to be cached (see the top of this file). */
static bool posix_idcache_old_enough(const struct statx_timestamp *btime)
{
	struct timespec now;
	if (clock_gettime(CLOCK_REALTIME, &now) != 0)
		return false;
	int64_t born_ns = (int64_t)btime->tv_sec * 1000000000ll + (int64_t)btime->tv_nsec;
	int64_t now_ns = (int64_t)now.tv_sec * 1000000000ll + (int64_t)now.tv_nsec;
	return now_ns - born_ns >= POSIX_IDCACHE_MIN_AGE_NS;
}

static uint64_t posix_idcache_hash(uint64_t ino, int64_t btime_sec, uint32_t btime_nsec)
{
	uint64_t key[3] = {ino, (uint64_t)btime_sec, btime_nsec};
	return sh_hash64(key, sizeof(key), 0x69646361ull);
}

static struct posix_idcache_slot *posix_idcache_set(struct posix_idcache *ic, uint64_t hash)
{
	return &ic->ic_slots[(hash & (ic->ic_nslots / POSIX_IDCACHE_WAYS - 1)) *
			     POSIX_IDCACHE_WAYS];
}

/* The entry for the key, or NULL. Called with ic_lock held. */
static struct posix_idcache_slot *posix_idcache_find(struct posix_idcache *ic, uint64_t hash,
						     const struct statx *stx, enum fs_type type)
{
	struct posix_idcache_slot *set = posix_idcache_set(ic, hash);
	for (unsigned i = 0; i < POSIX_IDCACHE_WAYS; i++) {
		struct posix_idcache_slot *slot = &set[i];
		if (slot->ics_id.foi_len != 0 && slot->ics_ino == stx->stx_ino &&
		    slot->ics_btime_sec == stx->stx_btime.tv_sec &&
		    slot->ics_btime_nsec == stx->stx_btime.tv_nsec && slot->ics_type == (uint8_t)type)
			return slot;
	}
	return NULL;
}

/* Where a new entry goes: an empty way of its set, else one picked by the hash's high bits.
 * Called with ic_lock held. */
static struct posix_idcache_slot *posix_idcache_victim(struct posix_idcache *ic, uint64_t hash)
{
	struct posix_idcache_slot *set = posix_idcache_set(ic, hash);
	for (unsigned i = 0; i < POSIX_IDCACHE_WAYS; i++)
		if (set[i].ics_id.foi_len == 0)
			return &set[i];
	return &set[(hash >> 48) % POSIX_IDCACHE_WAYS];
}

int posix_idcache_init(struct posix_idcache *ic, uint32_t nslots)
{
	memset(ic, 0, sizeof(*ic));
	if (nslots == 0)
		nslots = POSIX_IDCACHE_SLOTS_DEFAULT;
	uint32_t n = POSIX_IDCACHE_WAYS * 16;
	while (n < nslots && n < (1u << 24))
		n <<= 1;
	ic->ic_nslots = n;
	ic->ic_slots = mem_zalloc((size_t)n * sizeof(ic->ic_slots[0]));
	if (ic->ic_slots == NULL)
		return -ENOMEM;
	int rc = pthread_mutex_init(&ic->ic_lock, NULL);
	if (rc != 0) {
		mem_free(ic->ic_slots);
		ic->ic_slots = NULL;
		return -rc;
	}
	return 0;
}

void posix_idcache_fini(struct posix_idcache *ic)
{
	if (ic->ic_slots == NULL)
		return;
	pthread_mutex_destroy(&ic->ic_lock);
	mem_free(ic->ic_slots);
	ic->ic_slots = NULL;
}

void posix_stat_from_statx(const struct statx *stx, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_dev = makedev(stx->stx_dev_major, stx->stx_dev_minor);
	st->st_ino = (ino_t)stx->stx_ino;
	st->st_mode = (mode_t)stx->stx_mode;
	st->st_nlink = (nlink_t)stx->stx_nlink;
	st->st_uid = (uid_t)stx->stx_uid;
	st->st_gid = (gid_t)stx->stx_gid;
	st->st_rdev = makedev(stx->stx_rdev_major, stx->stx_rdev_minor);
	st->st_size = (off_t)stx->stx_size;
	st->st_blksize = (blksize_t)stx->stx_blksize;
	st->st_blocks = (blkcnt_t)stx->stx_blocks;
	st->st_atim.tv_sec = (time_t)stx->stx_atime.tv_sec;
	st->st_atim.tv_nsec = (long)stx->stx_atime.tv_nsec;
	st->st_mtim.tv_sec = (time_t)stx->stx_mtime.tv_sec;
	st->st_mtim.tv_nsec = (long)stx->stx_mtime.tv_nsec;
	st->st_ctim.tv_sec = (time_t)stx->stx_ctime.tv_sec;
	st->st_ctim.tv_nsec = (long)stx->stx_ctime.tv_nsec;
}

int posix_entry_lookup(struct posix_fs *pf, int dirfd, const char *name, struct stat *st,
		       struct fs_obj_id *id, int *id_rc)
{
	struct posix_idcache *ic = &pf->pf_idcache;
	struct statx stx;

	if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
		  STATX_BASIC_STATS | STATX_BTIME | STATX_MNT_ID, &stx) != 0)
		return -errno;
	posix_stat_from_statx(&stx, st);
	enum fs_type type = posix_type_of_mode(st->st_mode);
	bool cacheable = (stx.stx_mask & STATX_BTIME) != 0 && (stx.stx_mask & STATX_MNT_ID) != 0 &&
			 stx.stx_mnt_id == (uint64_t)(uint32_t)pf->pf_mount_id && type != 0;
	if (!cacheable) {
		*id_rc = posix_id_at(pf, dirfd, name, 0, type, id);
		return 0;
	}

	uint64_t hash = posix_idcache_hash(stx.stx_ino, stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec);
	pthread_mutex_lock(&ic->ic_lock);
	struct posix_idcache_slot *slot = posix_idcache_find(ic, hash, &stx, type);
	bool hit = slot != NULL;
	if (hit)
		*id = slot->ics_id;
	pthread_mutex_unlock(&ic->ic_lock);
	if (hit) {
		*id_rc = 0;
		return 0;
	}
	/* Miss: the id and the attributes must describe one object even if the name is replaced
	 * meanwhile, so both are taken from one O_PATH descriptor of it. */
	int ofd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (ofd < 0)
		return -errno;
	if (statx(ofd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_BTIME,
		  &stx) != 0) {
		int rc = -errno;
		(void)close(ofd);
		return rc;
	}
	posix_stat_from_statx(&stx, st);
	type = posix_type_of_mode(st->st_mode);
	*id_rc = posix_id_at(pf, ofd, "", AT_EMPTY_PATH, type, id);
	(void)close(ofd);
	if (*id_rc != 0 || !(stx.stx_mask & STATX_BTIME) || type == 0 ||
	    !posix_idcache_old_enough(&stx.stx_btime))
		return 0;
	hash = posix_idcache_hash(stx.stx_ino, stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec);
	pthread_mutex_lock(&ic->ic_lock);
	slot = posix_idcache_victim(ic, hash);
	slot->ics_ino = stx.stx_ino;
	slot->ics_btime_sec = stx.stx_btime.tv_sec;
	slot->ics_btime_nsec = stx.stx_btime.tv_nsec;
	slot->ics_type = (uint8_t)type;
	slot->ics_id = *id;
	pthread_mutex_unlock(&ic->ic_lock);
	return 0;
}
