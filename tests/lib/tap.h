/* tap.h: the smallest test harness that does the job. A test program calls CHECK for each
 * assertion and tap_check per named case; it prints "ok - name" or "not ok - name" lines, which
 * tests/run.sh counts, and exits non-zero if anything failed. Header-only on purpose: every test
 * program includes it once. */
#ifndef SHALE_TAP_H
#define SHALE_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_passed_count;
static int tap_failed_count;
static bool tap_case_failed;

/* Records one assertion inside a case; prints the failing expression with its location. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			printf("#   CHECK(%s) failed at %s:%d\n", #cond, __FILE__, __LINE__);          \
			tap_case_failed = true;                                                    \
		}                                                                                  \
	} while (0)

/* Like CHECK, with a printf-style explanation. */
#define CHECKF(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			printf("#   CHECK(%s) failed at %s:%d: ", #cond, __FILE__, __LINE__);          \
			printf(__VA_ARGS__);                                                       \
			printf("\n");                                                              \
			tap_case_failed = true;                                                    \
		}                                                                                  \
	} while (0)

/* Runs one case: a function of no arguments that uses CHECK. With TAP_ONLY=NAME in the
 * environment (for a developer's run), only the case of that name runs; the others print
 * nothing and count nowhere. */
#define TAP_RUN(fn) tap_run_case(#fn, fn)

static inline void tap_run_case(const char *name, void (*fn)(void))
{
	const char *only = getenv("TAP_ONLY");
	if (only && only[0] && strcmp(only, name) != 0)
		return;
	tap_case_failed = false;
	fn();
	if (tap_case_failed) {
		tap_failed_count++;
		printf("not ok - %s\n", name);
	} else {
		tap_passed_count++;
		printf("ok - %s\n", name);
	}
	fflush(stdout);
}

/* Records a case decided by a single condition, with a printf-style name. */
static inline bool tap_check(bool passed, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool tap_check(bool passed, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf(passed ? "ok - " : "not ok - ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (passed)
		tap_passed_count++;
	else
		tap_failed_count++;
	return passed;
}

/* Prints the program's own summary and returns its exit status. */
static inline int tap_finish(void)
{
	printf("# %d passed, %d failed\n", tap_passed_count, tap_failed_count);
	return tap_failed_count == 0 ? 0 : 1;
}

#endif
