/* nlm_xdr.h: the wire forms of the Network Lock Manager (program 100021; versions 1 and 3 from
 * the X/Open XNFS specification, version 4 from RFC 1813 appendix II) and of the Network Status
 * Monitor (program 100024, version 1), decoded in place from a call's record and encoded into a
 * reply or a call. XDR only: what the fields mean to the server is nlm.c's.
 *
 * Versions 1 and 3 carry offsets and lengths in 32 bits and a smaller set of statuses; version 3
 * adds SHARE, UNSHARE, NM_LOCK and FREE_ALL. Version 4 has 64-bit offsets and lengths, and more
 * statuses (nlm_xdr_stat_for maps them down for the older versions, as knfsd does).
 *
 * Every decoded string and opaque points into the record and lives as long as it; each has the
 * bound its constant below gives, and a longer one fails the decode (GARBAGE_ARGS). */
#ifndef SHALE_NLM_NLM_XDR_H
#define SHALE_NLM_NLM_XDR_H

#include <stdbool.h>
#include <stdint.h>

#include "xdr/xdr.h"

#define NLM_PROG 100021u
#define NSM_PROG 100024u
#define NLM_VERS1 1u
#define NLM_VERS3 3u
#define NLM_VERS4 4u
#define NSM_VERS1 1u

#define NLM_NAME_MAX 1024u   /* caller_name and NSM's mon_name: LM_MAXSTRLEN, SM_MAXSTRLEN */
#define NLM_COOKIE_MAX 1024u /* a cookie: the XNFS netobj has none; knfsd takes 32 */
#define NLM_OH_MAX 1024u     /* an owner handle: as a cookie (the lock table's LOCK_OH_MAX) */
#define NLM_FH_MAX 1024u     /* a file handle as sent: ours are at most 64 bytes, a longer one is
                              * stale, not garbage */

enum nlm_proc {
	NLM_NULL = 0,
	NLM_TEST = 1,
	NLM_LOCK = 2,
	NLM_CANCEL = 3,
	NLM_UNLOCK = 4,
	NLM_GRANTED = 5,
	NLM_TEST_MSG = 6,
	NLM_LOCK_MSG = 7,
	NLM_CANCEL_MSG = 8,
	NLM_UNLOCK_MSG = 9,
	NLM_GRANTED_MSG = 10,
	NLM_TEST_RES = 11,
	NLM_LOCK_RES = 12,
	NLM_CANCEL_RES = 13,
	NLM_UNLOCK_RES = 14,
	NLM_GRANTED_RES = 15,
	NLM_SHARE = 20,
	NLM_UNSHARE = 21,
	NLM_NM_LOCK = 22,
	NLM_FREE_ALL = 23,
	NLM_NPROCS = 24,
};

enum nlm_stat {
	NLM_STAT_GRANTED = 0,
	NLM_STAT_DENIED = 1,
	NLM_STAT_DENIED_NOLOCKS = 2,
	NLM_STAT_BLOCKED = 3,
	NLM_STAT_DENIED_GRACE_PERIOD = 4,
	NLM_STAT_DEADLCK = 5, /* version 3 on */
	NLM_STAT_ROFS = 6,    /* version 4 on */
	NLM_STAT_STALE_FH = 7,
	NLM_STAT_FBIG = 8,
	NLM_STAT_FAILED = 9,
};

enum nsm_proc {
	NSM_NULL = 0,
	NSM_STAT = 1,
	NSM_MON = 2,
	NSM_UNMON = 3,
	NSM_UNMON_ALL = 4,
	NSM_SIMU_CRASH = 5,
	NSM_NOTIFY = 6,
	NSM_NPROCS = 7,
};

enum nsm_res { NSM_STAT_SUCC = 0, NSM_STAT_FAIL = 1 };

#define NSM_PRIV_LEN 16u /* mon's opaque priv[16] */

/* Bytes, pointing into a record. */
struct nlm_bytes {
	const uint8_t *nb_data;
	uint32_t nb_len;
};

/* nlm_lock / nlm4_lock: the lock a call is about. */
struct nlm_lock {
	struct nlm_bytes nl_caller; /* the client's name for itself */
	struct nlm_bytes nl_fh;
	struct nlm_bytes nl_oh;
	int32_t nl_svid;
	uint64_t nl_offset;
	uint64_t nl_len; /* 0: to the end of the file */
};

/* The arguments of every NLM procedure but NULL, in one shape; each decoder fills the fields its
 * procedure has. */
struct nlm_args {
	struct nlm_bytes na_cookie;
	bool na_block;
	bool na_exclusive;
	bool na_reclaim;
	int32_t na_state;
	struct nlm_lock na_lock;
	uint32_t na_share_mode;   /* SHARE: fsh_mode, the deny bits (0-3) */
	uint32_t na_share_access; /* SHARE: fsh_access (0-3) */
	struct nlm_bytes na_name; /* FREE_ALL: nlm_notify's name */
	uint32_t na_stat;         /* a _RES call: the result's status */
};

/* A TEST's holder. */
struct nlm_holder {
	bool nh_exclusive;
	int32_t nh_svid;
	uint64_t nh_offset;
	uint64_t nh_len;
};

/* NSM arguments. */
struct nsm_args {
	struct nlm_bytes sa_mon_name; /* STAT, MON, UNMON, NOTIFY */
	struct nlm_bytes sa_my_name;  /* MON, UNMON, UNMON_ALL: the monitoring host */
	uint32_t sa_my_prog, sa_my_vers, sa_my_proc;
	const uint8_t *sa_priv; /* MON: NSM_PRIV_LEN bytes */
	int32_t sa_state;       /* NOTIFY */
};

/* Decoders: true when the arguments of proc (version vers) decoded whole. */
bool nlm_xdr_dec_args(struct xdr_dec *dec, uint32_t vers, uint32_t proc, struct nlm_args *out);
bool nsm_xdr_dec_args(struct xdr_dec *dec, uint32_t proc, struct nsm_args *out);

/* The status as version vers can say it. */
uint32_t nlm_xdr_stat_for(uint32_t vers, enum nlm_stat stat);

/* Encoders of results (and of the _RES and GRANTED calls' arguments, which have the same forms).
 * A holder of NULL encodes no holder (any status but DENIED). The most bytes each takes: */
#define NLM_XDR_RES_MAX (4u + NLM_COOKIE_MAX + 4u + 4u + 4u + 4u + NLM_OH_MAX + 16u)
void nlm_xdr_enc_res(struct xdr_enc *enc, const struct nlm_bytes *cookie, uint32_t stat);
void nlm_xdr_enc_testres(struct xdr_enc *enc, uint32_t vers, const struct nlm_bytes *cookie,
                         uint32_t stat, const struct nlm_holder *holder);
void nlm_xdr_enc_shareres(struct xdr_enc *enc, const struct nlm_bytes *cookie, uint32_t stat,
                          int32_t sequence);
/* A GRANTED call's arguments (nlm_testargs): the cookie, exclusive and the lock. */
#define NLM_XDR_GRANTED_MAX                                                                       \
	(4u + NLM_COOKIE_MAX + 4u + 4u + NLM_NAME_MAX + 4u + NLM_FH_MAX + 4u + NLM_OH_MAX + 4u + 16u)
void nlm_xdr_enc_granted(struct xdr_enc *enc, uint32_t vers, const struct nlm_bytes *cookie,
                         bool exclusive, const struct nlm_lock *lock);
/* NSM results: sm_stat_res (res and state) and sm_stat (state). */
void nsm_xdr_enc_stat_res(struct xdr_enc *enc, enum nsm_res res, int32_t state);
void nsm_xdr_enc_stat(struct xdr_enc *enc, int32_t state);
/* NSM's NOTIFY call's arguments (stat_chge). */
void nsm_xdr_enc_notify(struct xdr_enc *enc, const char *mon_name, int32_t state);

#endif
