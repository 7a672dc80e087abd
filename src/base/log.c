/* log.c: one-line log messages to stderr, safe from any thread.
 *
 * Each message is formatted into a stack buffer and written with a single write(2), so lines from
 * different threads never interleave. The rate limiter keeps hostile input from flooding the log:
 * each call site keeps a small window state (a race between threads on it only miscounts a
 * message, which is harmless). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

static _Atomic int log_level_current = LOG_INFO;

void log_set_level(enum log_level level)
{
	atomic_store(&log_level_current, (int)level);
}

enum log_level log_get_level(void)
{
	return (enum log_level)atomic_load_explicit(&log_level_current, memory_order_relaxed);
}

static const char *const log_level_names[] = {"debug", "info", "warn", "error"};

void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
	if ((int)level < atomic_load_explicit(&log_level_current, memory_order_relaxed))
		return;
	char line[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int len = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ shale %s: ",
			   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			   tm.tm_sec, ts.tv_nsec / 1000000L, log_level_names[level & 3]);
	if (len < 0)
		return;
	int body = vsnprintf(line + len, sizeof(line) - (size_t)len - 1, fmt, ap);
	if (body < 0)
		body = 0;
	size_t total = (size_t)len + (size_t)body;
	if (total > sizeof(line) - 2)
		total = sizeof(line) - 2;
	line[total++] = '\n';
	/* A failed log write has nowhere to be reported; it is deliberately dropped. */
	ssize_t ignored = write(STDERR_FILENO, line, total);
	(void)ignored;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}

/* At most LOG_RATELIMIT_BURST messages per call site per second. */
#define LOG_RATELIMIT_BURST 5u
#define LOG_RATELIMIT_WINDOW_NS 1000000000ull

bool log_ratelimit_allow(struct log_ratelimit *state)
{
	uint64_t now = clock_monotonic_ns();
	if (now - state->window_start_ns >= LOG_RATELIMIT_WINDOW_NS) {
		if (state->suppressed)
			log_msg(LOG_WARN, "(%u similar messages suppressed)", state->suppressed);
		state->window_start_ns = now;
		state->count_in_window = 0;
		state->suppressed = 0;
	}
	if (state->count_in_window < LOG_RATELIMIT_BURST) {
		state->count_in_window++;
		return true;
	}
	state->suppressed++;
	return false;
}
