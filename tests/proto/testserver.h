/* testserver.h: starts a private `shale serve` for one test program and stops it again.
 *
 * Each protocol or malformed-input test owns its server: a fresh temporary directory holds the
 * exported directories, the exports file, the state directory and the ready file. The server is
 * started with --port 0 --no-portmap --ready-file, and ts_start returns only once the ready file
 * names the port it listens on (no sleeping and hoping). The binary comes from $SHALE_BIN, which
 * meson sets to the built `shale`.
 *
 * Exports: the caller gives one exports(5) line per export, with "%s" where the exported
 * directory's path goes; export i lives in <tmp>/exp<i> and is created before the server starts
 * (mode 0777 so tests can create in it as any uid).
 *
 * Pool mode (SHALE_TS_BACKEND=pool in the environment): the exports are file systems of a pool
 * instead, "tank/exp<i>" of a 1 GiB pool in <tmp>/pool made with `shale pool create` and
 * `shale fs create`, served with --arc-max 64M; ts_export_path[i] is then the path clients
 * mount ("/tank/exp<i>"), not a host directory, so fixtures must be made over NFS. */
#ifndef SHALE_TESTSERVER_H
#define SHALE_TESTSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TS_MAX_EXPORTS 4

struct ts_server {
	pid_t ts_pid;                              /* the server process; 0 once reaped */
	uint16_t ts_port;                          /* NFS and MOUNT, TCP and UDP */
	char ts_root[256];                         /* the private temporary directory */
	char ts_export_path[TS_MAX_EXPORTS][320];  /* each export's path (host's unless pool) */
	unsigned ts_nexports;
	char ts_log_path[320];                     /* the server's stderr */
	bool ts_pool;                              /* serving a pool's file systems */
};

/* A file a test needs in an export before the server serves it: made on the host in the posix
 * mode, over NFS (by a set-up server with every export writable) in the pool mode. */
struct ts_fixture {
	unsigned tf_export;     /* index of the export */
	const char *tf_name;    /* in the export's root */
	const char *tf_content; /* the file's bytes (a string) */
	uint32_t tf_mode;
};

/* Creates the temporary tree and starts the server. export_lines[i] is an exports(5) line with
 * one "%s" for the directory path (e.g. "%s *(rw,insecure,no_root_squash)"). Returns 0, or -1 after
 * printing a "# ..." diagnostic. On failure nothing is left running. */
int ts_start(struct ts_server *ts, const char *const *export_lines, unsigned nexports);
/* ts_start, with the given fixtures made first. */
int ts_start_with(struct ts_server *ts, const char *const *export_lines, unsigned nexports,
		  const struct ts_fixture *fixtures, unsigned nfixtures);

/* ts_start_with for a chosen back end, whatever SHALE_TS_BACKEND says: a test that compares
 * the two back ends runs one server of each. */
int ts_start_backend(struct ts_server *ts, const char *const *export_lines, unsigned nexports,
		     const struct ts_fixture *fixtures, unsigned nfixtures, bool pool);

/* Further `shale serve` options for the servers started from now on (a NULL-terminated list
 * that must stay valid; NULL: none). */
void ts_set_extra_args(const char *const *args);

/* True when SHALE_TS_BACKEND=pool asks for pool-backed exports (see above). */
bool ts_pool_mode(void);

/* Sends SIGTERM and waits up to 10 s for the server to exit (then SIGKILL). Returns 0 if it exited
 * by itself after SIGTERM (and, in pool mode, `shale pool check` then found no problem in the
 * pool), -1 otherwise. Removes the temporary tree. Safe to call twice. */
int ts_stop(struct ts_server *ts);

/* Stops the server, with SIGKILL when crash (as a power cut would leave its files) or else as
 * ts_stop does, and starts it again on the same tree: the exports, the state directory and the
 * pool as they were. ts_port is the new port. 0, or -1 after a "# ..." diagnostic. */
int ts_restart(struct ts_server *ts, bool crash);

/* True while the server process exists and has not exited (kill(pid, 0) and not a zombie). */
bool ts_alive(struct ts_server *ts);

/* The server's resident set size in KiB (VmRSS from /proc/PID/status), or -1. */
long ts_rss_kib(const struct ts_server *ts);

/* True if the server runs under AddressSanitizer (libasan is mapped): its quarantine keeps freed
 * memory resident, so memory bounds must be looser. */
bool ts_under_asan(const struct ts_server *ts);

/* Runs argv (argv[0] a path) with stdout and stderr into out_path (appended to, or truncated
 * first); returns its exit status, or -1 when it could not run or did not exit. */
int ts_run_cmd(char *const argv[], const char *out_path, bool append);

/* Prints the last lines of the server's log as TAP comments, for failure diagnosis. */
void ts_dump_log(const struct ts_server *ts, unsigned max_lines);

#endif
