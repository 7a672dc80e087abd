/* misc.c: clocks, thread setup, error text, panics, random bytes, hashing and whole-buffer I/O
 * helpers. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/xxh.h"

uint64_t clock_monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t clock_realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static atomic_flag sh_thread_warned = ATOMIC_FLAG_INIT; /* one warning per process is enough */

/* The calling thread's class; name (NULL: asked of the system) only for the warning. */
static void sh_thread_class(const char *name, enum sh_thread_kind kind)
{
	struct sched_param param = {.sched_priority = 0};
	int policy = kind == SH_THREAD_BACKGROUND ? SCHED_BATCH : SCHED_OTHER;
	if (sched_setscheduler(0, policy, &param) == 0)
		return;
	int err = errno;
	if (atomic_flag_test_and_set(&sh_thread_warned))
		return;
	char own_name[16] = "?";
	if (!name) {
		(void)pthread_getname_np(pthread_self(), own_name, sizeof(own_name));
		name = own_name;
	}
	log_warn("cannot make thread %s %s: %s", name,
	         policy == SCHED_BATCH ? "SCHED_BATCH" : "SCHED_OTHER", strerror(err));
}

void sh_thread_setup(const char *name, enum sh_thread_kind kind)
{
	char short_name[16];
	snprintf(short_name, sizeof(short_name), "%s", name);
	int rc = pthread_setname_np(pthread_self(), short_name);
	if (rc != 0 && !atomic_flag_test_and_set(&sh_thread_warned))
		log_warn("cannot name thread %s: %s", short_name, strerror(rc));
	if (kind == SH_THREAD_BACKGROUND)
		sh_thread_class(short_name, kind);
}

void sh_thread_set_kind(enum sh_thread_kind kind)
{
	sh_thread_class(NULL, kind);
}

const char *sh_strerror(int negative_code)
{
	switch (-negative_code) {
	case SH_EBADHANDLE: return "bad file handle";
	case SH_ENOTSYNC: return "attribute guard mismatch";
	case SH_EBADCOOKIE: return "stale directory cookie";
	case SH_ENOTSUPP: return "operation not supported";
	case SH_ETOOSMALL: return "buffer too small";
	case SH_ESERVERFAULT: return "internal server error";
	case SH_EBADTYPE: return "unsupported object type";
	case SH_EJUKEBOX: return "try again later";
	case SH_ENEEDBLOCK: return "a block must be read in first";
	case SH_EPARTIAL: return "part of the change is made: run the operation again";
	default: break;
	}
	/* strerror is not thread-safe in general, but glibc returns static strings for known codes. */
	return strerror(-negative_code);
}

void sh_panic(const char *file, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_msg(LOG_ERROR, "panic at %s:%d: %s", file, line, msg);
	abort();
}

int sh_random_bytes(void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

uint64_t sh_hash64(const void *data, size_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(data, len, seed);
}

int sh_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int sh_read_full(int fd, void *buf, size_t len, size_t *got_out)
{
	uint8_t *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			*got_out = got;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*got_out = got;
	return 0;
}

int sh_read_file(const char *path, char **content_out, size_t *len_out, size_t max_bytes)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	size_t cap = 4096, len = 0;
	char *buf = mem_alloc(cap + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out_close;
	}
	for (;;) {
		if (len == cap) {
			if (cap >= max_bytes) {
				rc = -EFBIG;
				goto out_free;
			}
			size_t new_cap = SH_MIN(cap * 2, max_bytes);
			char *bigger = mem_realloc(buf, new_cap + 1);
			if (!bigger) {
				rc = -ENOMEM;
				goto out_free;
			}
			buf = bigger;
			cap = new_cap;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto out_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*content_out = buf;
	*len_out = len;
	close(fd);
	return 0;
out_free:
	mem_free(buf);
out_close:
	close(fd);
	return rc;
}
