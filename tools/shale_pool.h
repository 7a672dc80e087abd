/* shale_pool.h: the `shale pool` and `shale fs` verbs (tools/shale_pool.c). */
#ifndef SHALE_TOOLS_SHALE_POOL_H
#define SHALE_TOOLS_SHALE_POOL_H

/* The directory searched for a pool's leaves when -d is not given (relative to the current one). */
#define POOL_CMD_DEFAULT_DIR "var/pool"

#include <stdbool.h>
#include <stdint.h>

#include "pool/pool.h"

/* The most leaves a command takes. */
#define POOL_CMD_MAX_LEAVES 256u

/* "64M" -> 67108864 (suffixes K, M, G, T; no zero). Returns 0 or -EINVAL. */
int shale_parse_bytes(const char *text, uint64_t *out);

/* argv[0] is "pool" / "fs"; return the process's exit status. */
int shale_pool_main(int argc, char **argv);
int shale_fs_main(int argc, char **argv);
/* `shale snapshot` (tools/shale_snap.c); argv[0] is "snapshot". */
int shale_snapshot_main(int argc, char **argv);
/* `shale fs clone POOL/FS@SNAP POOL/NEW` (tools/shale_snap.c); argv[0] is "fs". */
int shale_fs_clone_main(int argc, char **argv);
/* `shale fs rollback [-r] POOL/FS@SNAP` (tools/shale_snap.c); argv[0] is "fs". */
int shale_fs_rollback_main(int argc, char **argv);
/* `shale fs promote POOL/CLONE` (tools/shale_snap.c); argv[0] is "fs". */
int shale_fs_promote_main(int argc, char **argv);
/* `shale fs diff POOL/FS@SNAP [POOL/FS@LATER | POOL/FS]` (tools/shale_snap.c); argv[0] is "fs". */
int shale_fs_diff_main(int argc, char **argv);
/* `shale send` and `shale receive` (tools/shale_send.c); argv[0] is the verb. */
int shale_send_main(int argc, char **argv);
int shale_receive_main(int argc, char **argv);
/* `shale pool attach|detach|replace|add` (tools/shale_pool_vdev.c); argv[0] is the verb. */
int shale_pool_vdev_main(const char *verb, int argc, char **argv);
/* The options every pool command imports with (datasets get the file-system owner). */
void shale_cmd_pool_opts(struct pool_open_opts *opts);
/* Imports pool `name` from the leaves in dir (read_only: for the commands that only look),
 * reporting a failure on stderr as cmd's; returns 0 or -errno. */
int shale_cmd_import(const char *cmd, const char *dir, const char *name, bool read_only,
                     struct pool **out);
/* Exports p (its last txg), reporting a failure as cmd's; returns 0 or -errno. */
int shale_cmd_export(const char *cmd, struct pool *p);
/* A command on a pool a server holds: request goes to the server (pool_statsock.c), which
 * answers with a table, or "ok" (done_line is then printed) or "error: TEXT". Returns the exit
 * status, or -1 when nobody serves the pool (the caller imports it then). */
int shale_cmd_remote(const char *dir, const char *pool, const char *request, const char *cmd,
                     const char *done_line);

#endif
