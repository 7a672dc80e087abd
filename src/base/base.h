/* base.h: the ground floor every other module stands on: checked-allocation wrappers, logging,
 * clocks, assertion macros and Shale's own error codes.
 *
 * Error convention (see docs/design.md): a function that can fail returns 0 or a negative errno;
 * the few conditions errno has no name for use the SH_E* codes below, also returned negated.
 * Results go out through pointer parameters. */
#ifndef SHALE_BASE_H
#define SHALE_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SH_MUST_CHECK __attribute__((warn_unused_result))
#define SH_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#define SH_NORETURN __attribute__((noreturn))
#define SH_LIKELY(x) __builtin_expect(!!(x), 1)
#define SH_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SH_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define SH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SH_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SH_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Project error codes for conditions errno cannot name. Returned negated like errno values; the
 * numbers sit far above any errno so the two never collide. nfs maps each to its nfsstat3. */
enum sh_error {
	SH_EBADHANDLE = 10001,   /* a handle that this server did not issue (NFS3ERR_BADHANDLE) */
	SH_ENOTSYNC = 10002,     /* SETATTR guard ctime mismatch (NFS3ERR_NOT_SYNC) */
	SH_EBADCOOKIE = 10003,   /* a READDIR cookie that cannot be honoured (NFS3ERR_BAD_COOKIE) */
	SH_ENOTSUPP = 10004,     /* operation not supported by this back end (NFS3ERR_NOTSUPP) */
	SH_ETOOSMALL = 10005,    /* READDIR buffer too small for one entry (NFS3ERR_TOOSMALL) */
	SH_ESERVERFAULT = 10006, /* an internal error with no better name (NFS3ERR_SERVERFAULT) */
	SH_EBADTYPE = 10007,     /* MKNOD of a type the server does not create (NFS3ERR_BADTYPE) */
	SH_EJUKEBOX = 10008,     /* try again later (NFS3ERR_JUKEBOX) */
	SH_ENEEDBLOCK = 10009,   /* the operation needs a block that is not in memory: load it, retry */
	SH_EPARTIAL = 10010,     /* the operation made a durable part of its change: run it again */
};

/* Human-readable text for a negative errno or -SH_E* code. Never returns NULL. */
const char *sh_strerror(int negative_code);

/* ---- assertions ----
 * VERIFY stays in every build: it guards invariants whose breach would corrupt data. ASSERT is for
 * debug builds only. Neither is ever used on bytes from the network or the disk: those produce
 * errors. */
SH_NORETURN void sh_panic(const char *file, int line, const char *fmt, ...) SH_PRINTF(3, 4);
#define VERIFY(cond)                                                                               \
	do {                                                                                       \
		if (SH_UNLIKELY(!(cond)))                                                          \
			sh_panic(__FILE__, __LINE__, "VERIFY(%s) failed", #cond);                  \
	} while (0)
#ifdef NDEBUG
#define ASSERT(cond) ((void)0)
#else
#define ASSERT(cond) VERIFY(cond)
#endif

/* ---- memory ----
 * All heap allocation goes through these wrappers so a test can make the Nth allocation fail
 * (mem_fail_after). They return NULL on failure, like malloc; callers handle it as -ENOMEM. */
void *mem_alloc(size_t bytes);
void *mem_zalloc(size_t bytes);
void *mem_realloc(void *ptr, size_t bytes);
void *mem_aligned_alloc(size_t alignment, size_t bytes);
char *mem_strdup(const char *s);
char *mem_strndup(const char *s, size_t max_bytes);
void mem_free(void *ptr);
/* Test hook: the allocation n calls from now fails (n = 0 means the very next one); n < 0 turns
 * failure injection off. Thread-safe but meant for single-threaded unit tests. */
void mem_fail_after(long n);

/* ---- logging ----
 * One line per message to stderr, with a timestamp and level. Thread-safe (one write(2) per line).
 * log_ratelimited suppresses repeats of the same call site beyond a few per second, for messages a
 * hostile client could otherwise use to flood the log. */
enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
void log_msg(enum log_level level, const char *fmt, ...) SH_PRINTF(2, 3);
void log_vmsg(enum log_level level, const char *fmt, va_list ap) SH_PRINTF(2, 0);
#define log_debug(...)                                                                             \
	do {                                                                                       \
		if (SH_UNLIKELY(log_get_level() <= LOG_DEBUG))                                     \
			log_msg(LOG_DEBUG, __VA_ARGS__);                                           \
	} while (0)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
/* At most a few messages per second from one call site; the rest are counted and the count is
 * reported with the next message that gets through. */
#define log_ratelimited(level, ...)                                                                \
	do {                                                                                       \
		static struct log_ratelimit log_rl_state_;                                         \
		if (log_ratelimit_allow(&log_rl_state_))                                           \
			log_msg(level, __VA_ARGS__);                                               \
	} while (0)
struct log_ratelimit {
	uint64_t window_start_ns;
	uint32_t count_in_window;
	uint32_t suppressed;
};
bool log_ratelimit_allow(struct log_ratelimit *state);

/* ---- clocks ---- */
uint64_t clock_monotonic_ns(void); /* CLOCK_MONOTONIC, for intervals */
uint64_t clock_realtime_ns(void);  /* CLOCK_REALTIME, for timestamps and verifiers */

/* ---- threads ---- */
/* Names the calling thread (shown by top -H, ps -L and perf; at most 15 characters are kept).
 * A background thread (work that waits on a disk anyway: the posix flush workers, the committer,
 * the pool's I/O engine) is also made SCHED_BATCH: the scheduler then never lets it preempt a
 * serving thread (an event loop) when it wakes, yet it keeps its fair share of the CPU under
 * load. Failures are logged once and otherwise ignored: both are tuning, not correctness. */
enum sh_thread_kind { SH_THREAD_SERVING, SH_THREAD_BACKGROUND };
void sh_thread_setup(const char *name, enum sh_thread_kind kind);
/* Moves the calling thread to kind's scheduling class (SCHED_OTHER or SCHED_BATCH), for a
 * thread whose work is slow in some phases and holds up serving threads in others. */
void sh_thread_set_kind(enum sh_thread_kind kind);

/* ---- small helpers ---- */
/* Fills buf with len cryptographically random bytes (getrandom). Returns 0 or -errno. */
SH_MUST_CHECK int sh_random_bytes(void *buf, size_t len);
/* 64-bit hash of bytes, for in-memory hash tables only (XXH3, unkeyed: not for anything an
 * attacker can exploit by collision unless the table bounds its chains). */
uint64_t sh_hash64(const void *data, size_t len, uint64_t seed);
/* Fibonacci hashing of an integer key into [0, 2^bits), bits <= 32: the top bits of
 * key * 2^64/phi. The top bits, not the middle ones: keys in arithmetic progression (consecutive
 * object ids) then land evenly apart, where the bits below the top repeat with a short period
 * and put several such keys in one slot. */
static inline uint32_t sh_hash_fib(uint64_t key, unsigned bits)
{
	ASSERT(bits <= 32); /* more would be cut off by the result's type */
	return bits == 0 ? 0u : (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64u - bits));
}
/* Write the whole buffer / read exactly len bytes, retrying on EINTR and short counts. */
SH_MUST_CHECK int sh_write_all(int fd, const void *buf, size_t len);
/* Reads until len bytes came or the input ended: *got_out says how many (fewer than len only at
 * the end). Returns 0, or -errno of a failed read (*got_out: the bytes before it). */
SH_MUST_CHECK int sh_read_full(int fd, void *buf, size_t len, size_t *got_out);
SH_MUST_CHECK int sh_read_file(const char *path, char **content_out, size_t *len_out, size_t max_bytes);

#endif
