/* fuzz.h: what the libFuzzer targets of tests/fuzz share: a cursor over the input, and the seed
 * writer.
 *
 * Each target (fuzz_<name>.c) defines LLVMFuzzerTestOneInput and fuzz_write_seeds. Run with
 * SHALE_FUZZ_SEEDS=DIR in the environment, a target writes its seed inputs into DIR (built with
 * the project's own encoders where they exist, so the seeds are what a client or the pool really
 * produces) and exits instead of fuzzing; that is how tests/fuzz/corpus/<name>/seed-* were made.
 * The log is silenced: a decoder refusing garbage may log, and a fuzzer runs it millions of times.
 * Header-only on purpose: every target includes it once. */
#ifndef SHALE_FUZZ_H
#define SHALE_FUZZ_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes the target's seed inputs into dir (fuzz_seed for each). */
static void fuzz_write_seeds(const char *dir);

/* Writes one seed file dir/seed-<name>; exits on failure (it only runs by hand). */
static inline void fuzz_seed(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_level(LOG_ERROR + 1);
	const char *dir = getenv("SHALE_FUZZ_SEEDS");
	if (dir) {
		fuzz_write_seeds(dir);
		exit(0);
	}
	return 0;
}

/* A cursor over the input, for targets that take a few choices from its first bytes. Reads past
 * the end give zeros. */
struct fuzz_in {
	const uint8_t *fi_data;
	size_t fi_len;
};
static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	if (in->fi_len == 0)
		return 0;
	in->fi_len--;
	return *in->fi_data++;
}
static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = (v << 8) | fuzz_u8(in);
	return v;
}

#endif
