/* xxh.h: the XXH3 hashes (block checksums, stream records, hash tables) from Debian's libxxhash.
 *
 * On x86-64 through the library's dispatcher (xxh_x86dispatch.h), which picks the widest vector
 * unit the CPU has (SSE2, AVX2, AVX-512) at the first call: Debian builds the plain entry points
 * for the baseline SSE2, and a 128 KiB block's XXH3-128 ran at 14.5 GB/s through them against
 * 61 GB/s through the dispatcher on the development VM (AVX-512). The hashes are the same
 * whichever unit computes them, so nothing on disk or on the wire depends on it. Elsewhere the
 * plain entry points. Include this, never <xxhash.h>. */
#ifndef SHALE_BASE_XXH_H
#define SHALE_BASE_XXH_H

#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#endif
