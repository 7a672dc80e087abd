/* lock.h: the table of byte-range locks, share reservations and blocked lock requests that the
 * Network Lock Manager serves (src/nlm). It knows nothing of RPC, hosts' addresses or storage:
 * files, owners and hosts are opaque keys, and a blocked request is an opaque pointer of the
 * caller's that comes back when the request is granted or dropped. The theory (the records, the
 * rules a change keeps, the order of waiters, the bounds, the lock) is at the top of lock.c.
 *
 * Semantics are POSIX record locks (fcntl F_SETLK), which NLM carries: a range is shared or
 * exclusive; ranges of one owner never conflict with each other and are merged, split, upgraded
 * and downgraded in place by that owner's next lock or unlock; two owners' ranges conflict where
 * they overlap and either is exclusive. Share reservations are NLM's SHARE (DOS open modes): an
 * access mode and a deny mode per owner and file, checked only against other reservations.
 *
 * Ownership: the creator destroys the table (lock_table_destroy), which drops every blocked
 * request through the dropped callback. A `user` pointer given with a blocking request belongs to
 * the table from LOCK_BLOCKED on and is handed back exactly once: to lcb_granted (the lock is
 * held now), to lcb_dropped (it never will be), or by lock_cancel. Keys and owner handles are
 * copied: the caller's buffers need not outlive the call.
 *
 * Thread safety: every function may be called from any thread. The table's one mutex is a leaf;
 * the callbacks run with it released, on the thread whose call made the change, before that call
 * returns. A callback may call into the table again. */
#ifndef SHALE_LOCK_LOCK_H
#define SHALE_LOCK_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

#define LOCK_FILE_ID_MAX 64u /* a file's id within its file system: fs.h's FS_OBJ_ID_MAX */
#define LOCK_OH_MAX 1024u    /* an owner handle's most bytes: NLM's LM_MAXSTRLEN (the XNFS spec) */
#define LOCK_END UINT64_MAX  /* a range's end when it runs to the end of the file and beyond */

/* A file: its file system (lock_release_fs frees by it) and its id there. Equal when all agree. */
struct lock_file {
	uint64_t lf_fs;
	uint8_t lf_len;
	uint8_t lf_id[LOCK_FILE_ID_MAX];
};

/* Who holds a lock: the client machine (the caller's id for it; lock_release_host frees by it),
 * the process there (NLM's svid) and the owner handle the client's lock manager chose (NLM's oh,
 * compared as bytes). Two requests are one owner's when all three are equal. */
struct lock_owner {
	uint64_t lo_host;
	uint32_t lo_svid;
	uint32_t lo_oh_len; /* at most LOCK_OH_MAX */
	const uint8_t *lo_oh;
};

/* Bytes lr_start to lr_end, both included; lr_end LOCK_END runs to the end of the file and on. */
struct lock_range {
	uint64_t lr_start;
	uint64_t lr_end;
};

/* What a lock ran into: one conflicting holder (NLM's nlm4_holder; the owner handle is not told,
 * as knfsd does not tell it). */
struct lock_conflict {
	bool lc_exclusive;
	uint64_t lc_host;
	uint32_t lc_svid;
	struct lock_range lc_range;
};

/* The outcomes of lock_test, lock_lock and lock_share (errors are negative errno). */
enum lock_result {
	LOCK_GRANTED = 0,         /* held now (lock_test: it would be) */
	LOCK_DENIED = 1,          /* another owner holds a conflicting range: *conflict says which */
	LOCK_BLOCKED = 2,         /* queued: the table took `user`; a callback hands it back */
	LOCK_BLOCKED_ALREADY = 3, /* the same owner already waits for the same range and kind: the
	                           * table kept its first request and did not take `user` */
	LOCK_NOLOCKS = 4,         /* the host's or the table's bound on records is reached */
};

/* Handed back blocked requests (see Ownership above). ctx is lto_ctx. */
struct lock_callbacks {
	/* The lock is held now, in the owner's name: tell the client (NLM's GRANTED). If the client
	 * refuses it, the caller unlocks the range. */
	void (*lcb_granted)(void *ctx, void *user);
	/* The request ended without a grant: its host or file system was released, or the table
	 * destroyed. */
	void (*lcb_dropped)(void *ctx, void *user);
};

struct lock_table_opts {
	struct lock_callbacks lto_callbacks;
	void *lto_ctx;
	/* Records (held ranges, blocked requests, share reservations) one host may have, and the
	 * whole table: past either, a new lock, blocked request or reservation gets LOCK_NOLOCKS. An
	 * unlock, and the grant of a request already queued, may go past them by the one record a
	 * split makes. 0: no bound. */
	uint64_t lto_host_max;
	uint64_t lto_table_max;
};

struct lock_stats {
	uint64_t ls_files;   /* files with any record */
	uint64_t ls_held;    /* held ranges */
	uint64_t ls_blocked; /* blocked requests */
	uint64_t ls_shares;  /* share reservations */
	uint64_t ls_owners;  /* distinct owners with any record */
	uint64_t ls_hosts;   /* distinct hosts with any record */
	uint64_t ls_bytes;   /* the memory all of these take, headers and hash slots included */
	uint64_t ls_granted; /* blocked requests granted since creation */
	uint64_t ls_nolocks; /* LOCK_NOLOCKS answers since creation */
};

struct lock_table;

/* A new, empty table, destroyed by lock_table_destroy. Returns 0 or -ENOMEM. */
SH_MUST_CHECK int lock_table_create(const struct lock_table_opts *opts, struct lock_table **out);
/* Drops every blocked request (lcb_dropped) and frees the table. */
void lock_table_destroy(struct lock_table *t);

/* Whether owner could take range of kind on file now (NLM's TEST): LOCK_GRANTED, or LOCK_DENIED
 * with the first conflicting holder in *conflict. Changes nothing. */
SH_MUST_CHECK int lock_test(struct lock_table *t, const struct lock_file *file,
                            const struct lock_owner *owner, bool exclusive,
                            const struct lock_range *range, struct lock_conflict *conflict);

/* Takes range of kind on file for owner (NLM's LOCK), replacing what the owner held of the range
 * (an upgrade or a downgrade) and merging with its adjacent ranges of the same kind. On a
 * conflict: with user NULL, LOCK_DENIED and *conflict; with user, the request is queued behind
 * the conflict (LOCK_BLOCKED) and granted, in arrival order among the requests it can be, when
 * the conflict goes; or LOCK_BLOCKED_ALREADY for a repeated request. LOCK_NOLOCKS past a bound.
 * A change that frees ranges grants the blocked requests it can before returning. */
SH_MUST_CHECK int lock_lock(struct lock_table *t, const struct lock_file *file,
                            const struct lock_owner *owner, bool exclusive,
                            const struct lock_range *range, void *user,
                            struct lock_conflict *conflict);

/* Releases what owner holds of range on file (NLM's UNLOCK): a range partly covered is cut, one
 * that covers it on both sides is split. Unlocking what is not held is no error. Grants what the
 * freed bytes let wait no longer. Returns 0 or -ENOMEM (a split's record; nothing changed). */
SH_MUST_CHECK int lock_unlock(struct lock_table *t, const struct lock_file *file,
                              const struct lock_owner *owner, const struct lock_range *range);

/* Takes back owner's blocked request for range of kind on file (NLM's CANCEL): 0 and *user_out
 * (the caller's again), or -ENOENT when no such request waits (it may have been granted). */
SH_MUST_CHECK int lock_cancel(struct lock_table *t, const struct lock_file *file,
                              const struct lock_owner *owner, bool exclusive,
                              const struct lock_range *range, void **user_out);

/* A share reservation (NLM's SHARE): access and deny are bit sets (1 read, 2 write). Refused
 * (LOCK_DENIED) when another owner's reservation on file denies what access asks or asks what
 * deny denies; a second reservation of the same owner replaces its first. LOCK_GRANTED,
 * LOCK_DENIED or LOCK_NOLOCKS. */
SH_MUST_CHECK int lock_share(struct lock_table *t, const struct lock_file *file,
                             const struct lock_owner *owner, unsigned access, unsigned deny);
/* Ends owner's reservation on file (NLM's UNSHARE); none is no error. */
void lock_unshare(struct lock_table *t, const struct lock_file *file,
                  const struct lock_owner *owner);

/* Everything of host: held ranges and reservations released, blocked requests dropped (NLM's
 * FREE_ALL, and a reboot NSM reports). Grants what waited on them. Returns how many records went. */
uint64_t lock_release_host(struct lock_table *t, uint64_t host);
/* Everything on the files of file system fs, as lock_release_host (an export or file system
 * removed). */
uint64_t lock_release_fs(struct lock_table *t, uint64_t fs);

/* How many held ranges, blocked requests and reservations host has. */
uint64_t lock_host_records(struct lock_table *t, uint64_t host);
void lock_table_stats(struct lock_table *t, struct lock_stats *out);

#endif
