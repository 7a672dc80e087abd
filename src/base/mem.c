/* mem.c: the one allocation wrapper, with failure injection for tests.
 *
 * Every allocation in Shale goes through mem_alloc and friends so that a test can make the Nth
 * allocation fail (mem_fail_after) and check that the caller turns it into -ENOMEM cleanly. The
 * countdown is a single atomic; when it is negative (the normal case) the cost is one relaxed load. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static atomic_long mem_fail_countdown = -1;

static bool mem_should_fail(void)
{
	long n = atomic_load_explicit(&mem_fail_countdown, memory_order_relaxed);
	if (SH_LIKELY(n < 0))
		return false;
	/* Count down; the call that takes it from 0 to -1 is the one that fails. */
	n = atomic_fetch_sub(&mem_fail_countdown, 1);
	return n == 0;
}

void mem_fail_after(long n)
{
	atomic_store(&mem_fail_countdown, n < 0 ? -1 : n);
}

void *mem_alloc(size_t bytes)
{
	if (mem_should_fail())
		return NULL;
	return malloc(bytes ? bytes : 1);
}

void *mem_zalloc(size_t bytes)
{
	if (mem_should_fail())
		return NULL;
	return calloc(1, bytes ? bytes : 1);
}

void *mem_realloc(void *ptr, size_t bytes)
{
	if (mem_should_fail())
		return NULL;
	return realloc(ptr, bytes ? bytes : 1);
}

void *mem_aligned_alloc(size_t alignment, size_t bytes)
{
	if (mem_should_fail())
		return NULL;
	void *p = NULL;
	if (posix_memalign(&p, alignment, bytes ? bytes : 1) != 0)
		return NULL;
	return p;
}

char *mem_strdup(const char *s)
{
	return mem_strndup(s, strlen(s));
}

char *mem_strndup(const char *s, size_t max_bytes)
{
	size_t len = strnlen(s, max_bytes);
	char *copy = mem_alloc(len + 1);
	if (!copy)
		return NULL;
	memcpy(copy, s, len);
	copy[len] = '\0';
	return copy;
}

void mem_free(void *ptr)
{
	free(ptr);
}
