/* shale_pool.h: the `shale pool` and `shale fs` verbs (tools/shale_pool.c). */
#ifndef SHALE_TOOLS_SHALE_POOL_H
#define SHALE_TOOLS_SHALE_POOL_H

/* The directory searched for a pool's leaves when -d is not given (relative to the current one). */
#define POOL_CMD_DEFAULT_DIR "var/pool"

#include <stdint.h>

/* "64M" -> 67108864 (suffixes K, M, G, T; no zero). Returns 0 or -EINVAL. */
int shale_parse_bytes(const char *text, uint64_t *out);

/* argv[0] is "pool" / "fs"; return the process's exit status. */
int shale_pool_main(int argc, char **argv);
int shale_fs_main(int argc, char **argv);

#endif
