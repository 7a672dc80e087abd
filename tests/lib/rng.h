/* rng.h: a small seeded random generator for tests (xorshift64*), the same sequence on every
 * machine, so that a failing seed can be replayed. Header-only, like tap.h: one generator per
 * test program. */
#ifndef SHALE_TEST_RNG_H
#define SHALE_TEST_RNG_H

#include <stdint.h>

static uint64_t test_rng_state = 1;

/* Restarts the sequence; seed 0 is taken as 1 (xorshift's state must not be zero). */
static inline void test_rng_seed(uint64_t seed)
{
	test_rng_state = seed != 0 ? seed : 1;
}

static inline uint64_t test_rng_next(void)
{
	test_rng_state ^= test_rng_state >> 12;
	test_rng_state ^= test_rng_state << 25;
	test_rng_state ^= test_rng_state >> 27;
	return test_rng_state * 0x2545f4914f6cdd1dull;
}

/* 0 .. n-1 (n > 0); the modulo's bias is of no matter to a test. */
static inline uint32_t test_rng_below(uint32_t n)
{
	return (uint32_t)(test_rng_next() % n);
}

#endif
