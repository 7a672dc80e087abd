/* mfcommon.h: what every malformed-input test shares: a server with one export, its root handle,
 * and the after-each-attack check (still alive, a fresh client gets a NULL and a GETATTR answered,
 * resident memory within a bound (mt_rss_slack_kib) of where it started). */
#ifndef SHALE_MFCOMMON_H
#define SHALE_MFCOMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "rawrpc.h"
#include "testserver.h"

/* Resident memory may grow this much over the level measured after start-up before a check
 * fails: generous for caches and per-thread arenas, far below what an unbounded allocation driven
 * by a hostile length would take. */
#define MF_RSS_SLACK_KIB (64L * 1024)
/* Under AddressSanitizer the quarantine (256 MiB by default) keeps freed blocks resident. */
#define MF_RSS_SLACK_ASAN_KIB (512L * 1024)

struct mf_target {
	struct ts_server mt_srv;
	uint8_t mt_root[64];
	uint32_t mt_root_len;
	long mt_rss_start_kib;
	long mt_rss_slack_kib; /* MF_RSS_SLACK_KIB, or the ASan allowance */
};

/* Starts the server with one rw export and mounts it. Returns 0 or -1 (diagnostic printed). */
int mf_start(struct mf_target *t);
/* True if the server is alive, a fresh TCP client gets a NULL and a GETATTR of the root answered,
 * and VmRSS is below start + mt_rss_slack_kib; prints the evidence as "#" lines. The caller
 * records the case (tap.h keeps its counters per program file). */
bool mf_check_health(struct mf_target *t, const char *after);

/* Deterministic pseudo-random numbers (xorshift64*), so a failing run can be replayed by seed. */
struct mf_rng {
	uint64_t mr_state;
};
void mf_rng_seed(struct mf_rng *r, uint64_t seed);
uint64_t mf_rng_next(struct mf_rng *r);
uint32_t mf_rng_below(struct mf_rng *r, uint32_t bound); /* 0 .. bound-1; bound > 0 */
void mf_rng_fill(struct mf_rng *r, void *buf, size_t len);

#endif
