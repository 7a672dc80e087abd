/* posix_pipe.c: large READs handed out in pipes, so that their data reaches the client's socket
 * without a copy.
 *
 * Problem. A READ served by copying (preadv2 into a buffer, then writev of the buffer to the
 * socket) copies its data twice on the server's core: page cache to buffer, buffer to socket.
 * Measured with `shale bench seq` on one core, the two copies were 23% and 30% of that core, and
 * the core, not the loopback, was the limit.
 *
 * Model. splice(2) moves references to page-cache pages from the file into a pipe (no copy), and
 * the RPC layer later splices the pipe to the TCP socket, which sends the pages themselves
 * (MSG_SPLICE_PAGES): the server copies nothing. This is knfsd's "splice read". Each export has
 * a pool (struct posix_pipes) of pipes whose capacity was raised to POSIX_PIPE_BYTES:
 *   - a free pipe is empty and on pp_free; a pipe out is owned by exactly one fs_buf (fb_piped),
 *     whose release (posix_pipe_release, run by whoever consumed the buffer) returns it: to
 *     pp_free when it is empty, closed when bytes stayed in it (a reply discarded because its
 *     connection closed);
 *   - at most POSIX_PIPES_MAX pipes exist (each pins up to POSIX_PIPE_BYTES of page cache while
 *     its reply waits, and an unprivileged user's pipes count against pipe-user-pages-soft);
 *   - a READ takes the pipe path only when its caller can send a pipe (rd_pipe_ok: TCP), it is at
 *     least POSIX_PIPE_MIN_BYTES (below that a copy costs less than the extra system calls) and
 *     fits the pipe's slots. Otherwise, or when no pipe can be had (the limit, EMFILE, a size the
 *     kernel refuses), or the file system cannot splice, it copies as before.
 * What the client receives are the pages as they are when the socket sends them: a WRITE to the
 * same range racing the reply may show through, as with knfsd. A file truncated meanwhile keeps
 * the pages the pipe references, so the reply always carries the bytes it announced.
 *
 * Never waiting for the disk on the loop. splice has no RWF_NOWAIT. A READ run inline (on the
 * event loop) first asks cachestat(2) (Linux 6.5) whether the whole range is in the page cache,
 * and takes the copy path, which punts a miss to a worker, when it is not or the kernel lacks
 * the call. A page evicted between the check and the splice is read from disk on the loop: a
 * rare, bounded wait. Workers splice without the check.
 *
 * Concurrency. READs run on the loop and on workers, releases on the loop: pp_lock guards the
 * free list and the count. Nothing else is shared. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "posix/posix_impl.h"

/* cachestat(2): the kernel's ABI (include/uapi/linux/mman.h), absent from older headers. The
 * number is the same on every architecture that has the call. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct posix_cachestat_range {
	uint64_t off;
	uint64_t len;
};
struct posix_cachestat {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};

struct posix_pipe {
	int pp_rd, pp_wr; /* both non-blocking */
	struct posix_pipes *pp_pool;
	struct posix_pipe *pp_next; /* pp_free */
};

int posix_pipes_init(struct posix_pipes *pp)
{
	memset(pp, 0, sizeof(*pp));
	return -pthread_mutex_init(&pp->pp_lock, NULL);
}

static void posix_pipe_close(struct posix_pipe *p)
{
	(void)close(p->pp_rd);
	(void)close(p->pp_wr);
	mem_free(p);
}

void posix_pipes_fini(struct posix_pipes *pp)
{
	/* Every buffer was released (fs_destroy's contract), so every pipe is on the free list. */
	ASSERT(pp->pp_count == pp->pp_nfree);
	while (pp->pp_free) {
		struct posix_pipe *p = pp->pp_free;
		pp->pp_free = p->pp_next;
		posix_pipe_close(p);
	}
	pthread_mutex_destroy(&pp->pp_lock);
}

/* A new pipe of POSIX_PIPE_BYTES, or NULL. */
static struct posix_pipe *posix_pipe_open(struct posix_pipes *pp)
{
	struct posix_pipe *p = mem_alloc(sizeof(*p));
	if (p == NULL)
		return NULL;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
		mem_free(p);
		return NULL;
	}
	p->pp_rd = fds[0];
	p->pp_wr = fds[1];
	p->pp_pool = pp;
	p->pp_next = NULL;
	int size = fcntl(p->pp_wr, F_SETPIPE_SZ, (int)POSIX_PIPE_BYTES);
	if (size < (int)POSIX_PIPE_BYTES) {
		posix_pipe_close(p);
		return NULL;
	}
	return p;
}

/* An empty pipe from the pool (opened when none is free and the limit allows), or NULL. */
static struct posix_pipe *posix_pipe_get(struct posix_pipes *pp)
{
	pthread_mutex_lock(&pp->pp_lock);
	struct posix_pipe *p = pp->pp_free;
	if (p != NULL) {
		pp->pp_free = p->pp_next;
		pp->pp_nfree--;
		pthread_mutex_unlock(&pp->pp_lock);
		return p;
	}
	if (pp->pp_count >= POSIX_PIPES_MAX || pp->pp_broken) {
		pthread_mutex_unlock(&pp->pp_lock);
		return NULL;
	}
	pp->pp_count++; /* reserved while it is opened without the lock */
	pthread_mutex_unlock(&pp->pp_lock);
	p = posix_pipe_open(pp);
	if (p == NULL) {
		pthread_mutex_lock(&pp->pp_lock);
		pp->pp_count--;
		pthread_mutex_unlock(&pp->pp_lock);
	}
	return p;
}

/* Returns p to its pool when it is empty, else closes it. */
static void posix_pipe_put(struct posix_pipe *p)
{
	struct posix_pipes *pp = p->pp_pool;
	int queued = -1;
	bool empty = ioctl(p->pp_rd, FIONREAD, &queued) == 0 && queued == 0;
	pthread_mutex_lock(&pp->pp_lock);
	if (empty) {
		p->pp_next = pp->pp_free;
		pp->pp_free = p;
		pp->pp_nfree++;
	} else {
		pp->pp_count--;
	}
	pthread_mutex_unlock(&pp->pp_lock);
	if (!empty)
		posix_pipe_close(p);
}

static void posix_pipe_release(void *arg)
{
	posix_pipe_put(arg);
}

/* Whether every page of [off, off + len) of fd is in the page cache (false when unknown). */
static bool posix_range_cached(int fd, uint64_t off, uint32_t len)
{
	struct posix_cachestat_range range = {.off = off, .len = len};
	struct posix_cachestat cs;
	if (syscall(__NR_cachestat, fd, &range, &cs, 0) != 0)
		return false;
	uint64_t page = 4096;
	uint64_t pages = (off + len + page - 1) / page - off / page;
	return cs.nr_cache >= pages;
}

int posix_read_piped(struct posix_pipes *pp, int fd, uint64_t off, uint32_t count, bool inline_read,
		     struct fs_buf *out)
{
	if (count < POSIX_PIPE_MIN_BYTES || (off % 4096) + count > POSIX_PIPE_BYTES)
		return POSIX_PIPE_DECLINED;
	if (inline_read && !posix_range_cached(fd, off, count))
		return POSIX_PIPE_DECLINED;
	struct posix_pipe *p = posix_pipe_get(pp);
	if (p == NULL)
		return POSIX_PIPE_DECLINED;
	size_t done = 0;
	int rc = 0;
	while (done < count) {
		loff_t at = (loff_t)(off + done);
		ssize_t n = splice(fd, &at, p->pp_wr, NULL, count - done, SPLICE_F_NONBLOCK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && done > 0)
				break; /* the pipe's slots are full: a short READ */
			rc = -errno;
			break;
		}
		if (n == 0)
			break; /* end of file: the file shrank since its stat */
		done += (size_t)n;
	}
	if (rc != 0 && done == 0) {
		posix_pipe_put(p);
		if (rc == -EINVAL) {
			/* The file system cannot splice: copy from now on. */
			pthread_mutex_lock(&pp->pp_lock);
			pp->pp_broken = true;
			pthread_mutex_unlock(&pp->pp_lock);
			return POSIX_PIPE_DECLINED;
		}
		if (rc == -EAGAIN)
			return POSIX_PIPE_DECLINED;
		return rc;
	}
	if (done == 0) {
		posix_pipe_put(p);
		out->fb_len = 0;
		return 0;
	}
	/* Bytes already in the pipe are a READ's answer even when a later splice failed. */
	out->fb_len = (uint32_t)done;
	out->fb_piped = true;
	out->fb_pipe_fd = p->pp_rd;
	out->fb_release = posix_pipe_release;
	out->fb_release_arg = p;
	return 0;
}
