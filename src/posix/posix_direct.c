/* posix_direct.c: large UNSTABLE WRITEs written to the disk directly (O_DIRECT), past the host's
 * page cache.
 *
 * Problem
 *   A buffered write copies its data into page-cache pages the kernel allocates for it, and for
 *   a file being written for the first time every page is new. Measured with `shale bench seq`
 *   (1 GiB of 1 MiB UNSTABLE WRITEs, server on one core), that copy was 69% of the server's
 *   core (copy_folio_from_iter_atomic): the core, not the disk or the loopback, was the limit, at
 *   about 1 GB/s. On this machine a page the kernel allocated afresh costs far more to touch than
 *   one it reuses (a local 1 GiB pwrite loop: 0.7-1.1 GB/s into a new file, 16 GB/s over the
 *   same file's cached pages), but the copy and the allocation are paid on any machine. The data
 *   gains nothing from the page cache meanwhile: write-behind (posix_writeback.c) sends it to
 *   the disk within a second, and the client keeps its own copy until COMMIT.
 *
 * Model
 *   A WRITE takes the direct path when it is UNSTABLE, at least POSIX_DIRECT_MIN_BYTES and at
 *   most POSIX_DIRECT_BUF_BYTES long, and its offset and length are multiples of its file's
 *   direct-I/O alignment (rule 3); the option pfc_buffered_writes turns the path off. Such a
 *   WRITE, arriving inline on the event loop, is punted to a worker, since a direct write waits
 *   for the device. The worker copies the data into an aligned buffer from a small pool (the RPC
 *   record that carries it has no alignment), opens the file by handle with O_DIRECT, writes,
 *   and closes that fd. The reply says UNSTABLE as before:
 *   the device may hold the data in a volatile cache, and COMMIT's fdatasync flushes it (and the
 *   size and extents a write past the end changed) as it would for buffered data.
 *   The kernel keeps the two kinds coherent: a direct write first writes back and then drops
 *   any cached pages of its range, so READs, buffered WRITEs and splices of the same file see
 *   the new bytes. What a direct write leaves out is the page cache itself: a READ of the range
 *   soon after goes to the disk.
 *
 * Rules
 *   1. At most POSIX_DIRECT_BUFS buffers exist, allocated when first needed and kept until the
 *      file system is destroyed (pd_lock guards the free list and the count). A WRITE that finds
 *      none free (or cannot have one allocated) is written buffered at once rather than
 *      waiting, so a worker never waits for another's buffer and memory stays bounded.
 *   2. The O_DIRECT fd lives for one WRITE only: the fd cache and its limits are untouched. It
 *      is opened as root like the cached O_RDWR fd (posix_fd_open_handle), after the caller's
 *      own permission check, and the caller's identity is installed again before the write.
 *   3. Each file's alignment is asked of the kernel once (statx STATX_DIOALIGN, which says 0
 *      for a file without direct I/O: a file system that has none, data journalling, inline
 *      data, encryption) and kept in pfd_dio_align. A file that refuses direct I/O anyway
 *      (EINVAL at open or at the first write) is marked POSIX_DIRECT_REFUSED there and written
 *      buffered from then on; the WRITE that found out is written buffered too. The file is
 *      held and was opened by the same handle before, so an open that fails as a bad handle
 *      would (EINVAL) is taken for that refusal; a handle truly gone fails the buffered write. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "posix/posix_impl.h"

int posix_direct_init(struct posix_fs *pf, bool buffered_only)
{
	struct posix_direct *pd = &pf->pf_direct;
	memset(pd, 0, sizeof(*pd));
	pd->pd_enabled = !buffered_only;
	return -pthread_mutex_init(&pd->pd_lock, NULL);
}

void posix_direct_fini(struct posix_fs *pf)
{
	struct posix_direct *pd = &pf->pf_direct;
	VERIFY(pd->pd_nfree == pd->pd_nbufs); /* every request has completed */
	for (unsigned i = 0; i < pd->pd_nfree; i++)
		mem_free(pd->pd_free[i]);
	pthread_mutex_destroy(&pd->pd_lock);
}

/* The file's alignment rule for direct I/O, asked once (rule 3). */
static uint32_t posix_direct_align(struct posix_fd *pfd)
{
	uint32_t align = __atomic_load_n(&pfd->pfd_dio_align, __ATOMIC_RELAXED);
	if (align != 0)
		return align;
	struct statx stx;
	if (statx(pfd->pfd_fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0 ||
	    !(stx.stx_mask & STATX_DIOALIGN) || stx.stx_dio_offset_align == 0 ||
	    stx.stx_dio_mem_align == 0 || stx.stx_dio_mem_align > POSIX_DIRECT_MEM_ALIGN ||
	    POSIX_DIRECT_MIN_BYTES % stx.stx_dio_offset_align != 0)
		align = POSIX_DIRECT_REFUSED;
	else
		align = stx.stx_dio_offset_align;
	__atomic_store_n(&pfd->pfd_dio_align, align, __ATOMIC_RELAXED);
	return align;
}

bool posix_direct_wanted(const struct posix_fs *pf, struct posix_fd *pfd, enum fs_stable stable,
			 uint64_t off, uint32_t len)
{
	if (!pf->pf_direct.pd_enabled || stable != FS_UNSTABLE || len < POSIX_DIRECT_MIN_BYTES ||
	    len > POSIX_DIRECT_BUF_BYTES)
		return false;
	uint32_t align = posix_direct_align(pfd);
	return align != POSIX_DIRECT_REFUSED && off % align == 0 && len % align == 0;
}

/* A buffer from the pool (rule 1), or NULL when all are out. */
static void *posix_direct_buf_get(struct posix_direct *pd)
{
	void *buf = NULL;
	pthread_mutex_lock(&pd->pd_lock);
	if (pd->pd_nfree > 0) {
		buf = pd->pd_free[--pd->pd_nfree];
	} else if (pd->pd_nbufs < POSIX_DIRECT_BUFS) {
		buf = mem_aligned_alloc(POSIX_DIRECT_MEM_ALIGN, POSIX_DIRECT_BUF_BYTES);
		if (buf != NULL)
			pd->pd_nbufs++;
	}
	pthread_mutex_unlock(&pd->pd_lock);
	return buf;
}

static void posix_direct_buf_put(struct posix_direct *pd, void *buf)
{
	pthread_mutex_lock(&pd->pd_lock);
	pd->pd_free[pd->pd_nfree++] = buf;
	pthread_mutex_unlock(&pd->pd_lock);
}

ssize_t posix_direct_write(struct posix_fs *pf, struct posix_fd *pfd,
			   const struct fs_cred *cred, const uint8_t *data, uint64_t off,
			   uint32_t len)
{
	struct posix_direct *pd = &pf->pf_direct;
	void *buf = posix_direct_buf_get(pd);
	if (buf == NULL)
		return POSIX_DIRECT_DECLINED;
	int fd;
	int rc = posix_fd_open_handle(pf, pfd, O_WRONLY | O_DIRECT, &fd);
	int crc = posix_cred_apply(cred); /* rule 2 */
	if (rc == -SH_EBADHANDLE) { /* open's EINVAL: O_DIRECT refused (rule 3) */
		__atomic_store_n(&pfd->pfd_dio_align, POSIX_DIRECT_REFUSED, __ATOMIC_RELAXED);
		rc = POSIX_DIRECT_DECLINED;
	}
	if (rc != 0 || crc != 0) {
		if (rc == 0)
			(void)close(fd);
		posix_direct_buf_put(pd, buf);
		return rc != 0 ? rc : crc;
	}
	memcpy(buf, data, len);
	size_t done = 0;
	ssize_t result = 0;
	while (done < len) {
		ssize_t n = pwrite(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (done == 0 && errno == EINVAL) { /* rule 3 */
				__atomic_store_n(&pfd->pfd_dio_align, POSIX_DIRECT_REFUSED, __ATOMIC_RELAXED);
				result = POSIX_DIRECT_DECLINED;
			} else if (done == 0) {
				result = -errno;
			}
			break; /* a short write is reported as such */
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	(void)close(fd);
	posix_direct_buf_put(pd, buf);
	if (result == 0)
		result = (ssize_t)done;
	if (result > 0)
		__atomic_fetch_add(&pd->pd_writes, 1, __ATOMIC_RELAXED);
	return result;
}
