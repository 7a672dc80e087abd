/* guest_common.h: what the kernel-client guest programs share (guest_fsops.c, guest_stress.c):
 * the file patterns, hashing, whole-buffer I/O and dropping the guest's caches. Header-only and
 * static inline, as tests/lib/tap.h, so each program compiles alone with one gcc -static line.
 *
 * File contents come from pattern_fill(): a pure function of (seed, offset), so a check, another
 * program or the host can recompute what any file must hold without keeping a copy. */
#ifndef SHALE_KCLIENT_GUEST_COMMON_H
#define SHALE_KCLIENT_GUEST_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "tap.h"

#define KC_IO_BYTES (1u << 20) /* buffer size for large I/O: fewer, larger NFS WRITEs */

/* splitmix64 finaliser: spreads the bits of (seed, word index) so every 8-byte word differs. */
static inline uint64_t pattern_word(uint64_t seed, uint64_t index)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 1;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Fills buf with the bytes file `seed` holds at [off, off + len). */
static inline void pattern_fill(uint8_t *buf, size_t len, uint64_t seed, uint64_t off)
{
	for (size_t i = 0; i < len;) {
		uint64_t pos = off + i;
		uint64_t w = pattern_word(seed, pos / 8);
		if (pos % 8 == 0 && len - i >= 8) {
			memcpy(buf + i, &w, 8);
			i += 8;
		} else {
			buf[i] = (uint8_t)(w >> (8 * (pos % 8)));
			i++;
		}
	}
}

#define FNV_OFFSET 0xcbf29ce484222325ull	/* FNV-1a 64-bit offset basis */
#define FNV_PRIME 0x100000001b3ull		/* FNV-1a 64-bit prime */

static inline uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= FNV_PRIME;
	}
	return h;
}

/* Hash of the first len bytes of pattern `seed`. */
static inline uint64_t pattern_hash(uint64_t seed, uint64_t len)
{
	static uint8_t buf[KC_IO_BYTES];
	uint64_t h = FNV_OFFSET;
	for (uint64_t off = 0; off < len; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
		pattern_fill(buf, n, seed, off);
		h = fnv1a(h, buf, n);
	}
	return h;
}

/* Hashes a whole file; returns 0 or -errno, the size through *size_out. */
static inline int file_hash(const char *path, uint64_t *hash_out, uint64_t *size_out)
{
	static uint8_t buf[KC_IO_BYTES];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	uint64_t h = FNV_OFFSET, size = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0) {
			int err = -errno;
			close(fd);
			return err;
		}
		if (n == 0)
			break;
		h = fnv1a(h, buf, (size_t)n);
		size += (uint64_t)n;
	}
	close(fd);
	*hash_out = h;
	*size_out = size;
	return 0;
}


/* Writes all of buf at off; returns 0 or -errno. */
static inline int pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/* Reads exactly len bytes at off (fewer only at end of file); returns bytes read or -errno. */
static inline ssize_t pread_all(int fd, void *buf, size_t len, off_t off)
{
	uint8_t *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(fd, p + got, len - got, off + (off_t)got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Reads up to cap bytes from the start of path; returns how many or -errno. */
static inline ssize_t read_head(const char *path, void *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	ssize_t n = pread_all(fd, buf, cap, 0);
	close(fd);
	return n;
}

/* Creates path holding pattern `seed` for len bytes, written in KC_IO_BYTES pieces, fsync'd. */
static inline int write_pattern_file(const char *path, uint64_t seed, uint64_t len, int flags)
{
	static uint8_t buf[KC_IO_BYTES];
	int fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
	if (fd < 0)
		return -errno;
	int rc = 0;
	for (uint64_t off = 0; off < len && rc == 0; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
		pattern_fill(buf, n, seed, off);
		rc = pwrite_all(fd, buf, n, (off_t)off);
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* Checks that path is a regular file of len bytes holding pattern `seed`. */
static inline void check_pattern_file(const char *path, uint64_t seed, uint64_t len)
{
	uint64_t h = 0, size = 0;
	int rc = file_hash(path, &h, &size);
	CHECKF(rc == 0, "hash %s: %s", path, strerror(-rc));
	if (rc != 0)
		return;
	CHECKF(size == len, "%s: size %" PRIu64 ", expected %" PRIu64, path, size, len);
	uint64_t want = pattern_hash(seed, len);
	CHECKF(h == want, "%s: hash %016" PRIx64 ", expected %016" PRIx64, path, h, want);
}

/* Writes back every dirty page and drops the guest's page, dentry and inode caches, so the next
 * reads go to the server. Returns 0 or -errno. */
static inline int drop_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return -errno;
	int rc = write(fd, "3\n", 2) == 2 ? 0 : -errno;
	close(fd);
	return rc;
}

#endif
