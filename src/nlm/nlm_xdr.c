/* nlm_xdr.c: NLM (versions 1, 3, 4) and NSM (version 1) codecs. The forms, in XDR language
 * (XNFS and RFC 1813 appendix II; "offset" and "len" are unsigned in 32 bits before version 4,
 * uint64 from it):
 *
 *   nlm_lock      { string caller_name<1024>; netobj fh; netobj oh; int svid; offset; len; }
 *   testargs      { netobj cookie; bool exclusive; nlm_lock alock; }        TEST, GRANTED (+_MSG)
 *   lockargs      { netobj cookie; bool block; bool exclusive; nlm_lock alock;
 *                   bool reclaim; int state; }                              LOCK (+_MSG), NM_LOCK
 *   cancargs      { netobj cookie; bool block; bool exclusive; nlm_lock alock; } CANCEL (+_MSG)
 *   unlockargs    { netobj cookie; nlm_lock alock; }                        UNLOCK (+_MSG)
 *   shareargs     { netobj cookie; { string caller_name<1024>; netobj fh; netobj oh;
 *                   fsh_mode mode; fsh_access access; } share; bool reclaim; }  SHARE, UNSHARE
 *   nlm_notify    { string name<1025>; int state; }                          FREE_ALL
 *   res           { netobj cookie; stat; }                      LOCK/CANCEL/UNLOCK/GRANTED_RES
 *   testres       { netobj cookie; stat; [holder if DENIED] }               TEST_RES
 *   holder        { bool exclusive; int svid; netobj oh; offset; len; }
 *   shareres      { netobj cookie; stat; int sequence; }
 *
 *   NSM: sm_name { string mon_name<1024>; }                                 STAT
 *        my_id { string my_name<1024>; int prog; int vers; int proc; }      UNMON_ALL
 *        mon_id { string mon_name<1024>; my_id my_id; }                     UNMON
 *        mon { mon_id mon_id; opaque priv[16]; }                            MON
 *        stat_chge { string mon_name<1024>; int state; }                    NOTIFY
 *        sm_stat_res { res res_stat; int state; }   sm_stat { int state; } */
#include <string.h>

#include "nlm/nlm_xdr.h"

#define NLM_NOTIFY_NAME_MAX 1025u /* nlm_notify's name: MAXNAMELEN */

static void nlm_get_bytes(struct xdr_dec *dec, uint32_t max, struct nlm_bytes *out)
{
	out->nb_data = xdr_get_opaque(dec, max, &out->nb_len);
}

static void nlm_put_bytes(struct xdr_enc *enc, const struct nlm_bytes *b)
{
	xdr_put_opaque(enc, b->nb_data, b->nb_len);
}

/* The offset or length as the version carries it. */
static uint64_t nlm_get_off(struct xdr_dec *dec, uint32_t vers)
{
	return vers >= NLM_VERS4 ? xdr_get_u64(dec) : xdr_get_u32(dec);
}

static void nlm_put_off(struct xdr_enc *enc, uint32_t vers, uint64_t v)
{
	if (vers >= NLM_VERS4)
		xdr_put_u64(enc, v);
	else
		xdr_put_u32(enc, (uint32_t)v); /* the caller kept it in 32 bits for these versions */
}

static void nlm_get_lock(struct xdr_dec *dec, uint32_t vers, struct nlm_lock *l)
{
	nlm_get_bytes(dec, NLM_NAME_MAX, &l->nl_caller);
	nlm_get_bytes(dec, NLM_FH_MAX, &l->nl_fh);
	nlm_get_bytes(dec, NLM_OH_MAX, &l->nl_oh);
	l->nl_svid = xdr_get_i32(dec);
	l->nl_offset = nlm_get_off(dec, vers);
	l->nl_len = nlm_get_off(dec, vers);
}

static void nlm_put_lock(struct xdr_enc *enc, uint32_t vers, const struct nlm_lock *l)
{
	nlm_put_bytes(enc, &l->nl_caller);
	nlm_put_bytes(enc, &l->nl_fh);
	nlm_put_bytes(enc, &l->nl_oh);
	xdr_put_i32(enc, l->nl_svid);
	nlm_put_off(enc, vers, l->nl_offset);
	nlm_put_off(enc, vers, l->nl_len);
}

bool nlm_xdr_dec_args(struct xdr_dec *dec, uint32_t vers, uint32_t proc, struct nlm_args *a)
{
	*a = (struct nlm_args){0};
	switch (proc) {
	case NLM_NULL:
		break;
	case NLM_TEST:
	case NLM_TEST_MSG:
	case NLM_GRANTED:
	case NLM_GRANTED_MSG:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		a->na_exclusive = xdr_get_bool(dec);
		nlm_get_lock(dec, vers, &a->na_lock);
		break;
	case NLM_LOCK:
	case NLM_LOCK_MSG:
	case NLM_NM_LOCK:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		a->na_block = xdr_get_bool(dec);
		a->na_exclusive = xdr_get_bool(dec);
		nlm_get_lock(dec, vers, &a->na_lock);
		a->na_reclaim = xdr_get_bool(dec);
		a->na_state = xdr_get_i32(dec);
		break;
	case NLM_CANCEL:
	case NLM_CANCEL_MSG:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		a->na_block = xdr_get_bool(dec);
		a->na_exclusive = xdr_get_bool(dec);
		nlm_get_lock(dec, vers, &a->na_lock);
		break;
	case NLM_UNLOCK:
	case NLM_UNLOCK_MSG:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		nlm_get_lock(dec, vers, &a->na_lock);
		break;
	case NLM_TEST_RES:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		a->na_stat = xdr_get_u32(dec);
		if (a->na_stat == NLM_STAT_DENIED) { /* the holder: read past it */
			(void)xdr_get_bool(dec);
			(void)xdr_get_i32(dec);
			struct nlm_bytes oh;
			nlm_get_bytes(dec, NLM_OH_MAX, &oh);
			(void)nlm_get_off(dec, vers);
			(void)nlm_get_off(dec, vers);
		}
		break;
	case NLM_LOCK_RES:
	case NLM_CANCEL_RES:
	case NLM_UNLOCK_RES:
	case NLM_GRANTED_RES:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		a->na_stat = xdr_get_u32(dec);
		break;
	case NLM_SHARE:
	case NLM_UNSHARE:
		nlm_get_bytes(dec, NLM_COOKIE_MAX, &a->na_cookie);
		nlm_get_bytes(dec, NLM_NAME_MAX, &a->na_lock.nl_caller);
		nlm_get_bytes(dec, NLM_FH_MAX, &a->na_lock.nl_fh);
		nlm_get_bytes(dec, NLM_OH_MAX, &a->na_lock.nl_oh);
		a->na_share_mode = xdr_get_u32(dec);
		a->na_share_access = xdr_get_u32(dec);
		a->na_reclaim = xdr_get_bool(dec);
		if (a->na_share_mode > 3 || a->na_share_access > 3)
			xdr_dec_fail(dec); /* fsh_mode and fsh_access are enums of four values */
		break;
	case NLM_FREE_ALL:
		nlm_get_bytes(dec, NLM_NOTIFY_NAME_MAX, &a->na_name);
		a->na_state = xdr_get_i32(dec);
		break;
	default:
		xdr_dec_fail(dec);
		break;
	}
	return xdr_dec_ok(dec);
}

static void nsm_get_my_id(struct xdr_dec *dec, struct nsm_args *a)
{
	nlm_get_bytes(dec, NLM_NAME_MAX, &a->sa_my_name);
	a->sa_my_prog = xdr_get_u32(dec);
	a->sa_my_vers = xdr_get_u32(dec);
	a->sa_my_proc = xdr_get_u32(dec);
}

bool nsm_xdr_dec_args(struct xdr_dec *dec, uint32_t proc, struct nsm_args *a)
{
	*a = (struct nsm_args){0};
	switch (proc) {
	case NSM_NULL:
	case NSM_SIMU_CRASH:
		break;
	case NSM_STAT:
		nlm_get_bytes(dec, NLM_NAME_MAX, &a->sa_mon_name);
		break;
	case NSM_MON:
	case NSM_UNMON:
		nlm_get_bytes(dec, NLM_NAME_MAX, &a->sa_mon_name);
		nsm_get_my_id(dec, a);
		if (proc == NSM_MON)
			a->sa_priv = xdr_get_fixed(dec, NSM_PRIV_LEN);
		break;
	case NSM_UNMON_ALL:
		nsm_get_my_id(dec, a);
		break;
	case NSM_NOTIFY:
		nlm_get_bytes(dec, NLM_NAME_MAX, &a->sa_mon_name);
		a->sa_state = xdr_get_i32(dec);
		break;
	default:
		xdr_dec_fail(dec);
		break;
	}
	return xdr_dec_ok(dec);
}

uint32_t nlm_xdr_stat_for(uint32_t vers, enum nlm_stat stat)
{
	if (vers >= NLM_VERS4 || stat <= NLM_STAT_DENIED_GRACE_PERIOD)
		return stat;
	/* knfsd's choice for the older versions: a deadlock is a denial, the rest a lack of room */
	if (stat == NLM_STAT_DEADLCK)
		return vers == NLM_VERS3 ? NLM_STAT_DEADLCK : NLM_STAT_DENIED;
	return NLM_STAT_DENIED_NOLOCKS;
}

void nlm_xdr_enc_res(struct xdr_enc *enc, const struct nlm_bytes *cookie, uint32_t stat)
{
	nlm_put_bytes(enc, cookie);
	xdr_put_u32(enc, stat);
}

void nlm_xdr_enc_testres(struct xdr_enc *enc, uint32_t vers, const struct nlm_bytes *cookie,
                         uint32_t stat, const struct nlm_holder *holder)
{
	nlm_put_bytes(enc, cookie);
	xdr_put_u32(enc, stat);
	if (stat != NLM_STAT_DENIED)
		return;
	xdr_put_bool(enc, holder->nh_exclusive);
	xdr_put_i32(enc, holder->nh_svid);
	xdr_put_opaque(enc, NULL, 0); /* the owner handle is not told (as knfsd) */
	nlm_put_off(enc, vers, holder->nh_offset);
	nlm_put_off(enc, vers, holder->nh_len);
}

void nlm_xdr_enc_shareres(struct xdr_enc *enc, const struct nlm_bytes *cookie, uint32_t stat,
                          int32_t sequence)
{
	nlm_put_bytes(enc, cookie);
	xdr_put_u32(enc, stat);
	xdr_put_i32(enc, sequence);
}

void nlm_xdr_enc_granted(struct xdr_enc *enc, uint32_t vers, const struct nlm_bytes *cookie,
                         bool exclusive, const struct nlm_lock *lock)
{
	nlm_put_bytes(enc, cookie);
	xdr_put_bool(enc, exclusive);
	nlm_put_lock(enc, vers, lock);
}

void nsm_xdr_enc_stat_res(struct xdr_enc *enc, enum nsm_res res, int32_t state)
{
	xdr_put_u32(enc, res);
	xdr_put_i32(enc, state);
}

void nsm_xdr_enc_stat(struct xdr_enc *enc, int32_t state)
{
	xdr_put_i32(enc, state);
}

void nsm_xdr_enc_notify(struct xdr_enc *enc, const char *mon_name, int32_t state)
{
	size_t n = strlen(mon_name);
	xdr_put_opaque(enc, mon_name, (uint32_t)(n < NLM_NAME_MAX ? n : NLM_NAME_MAX));
	xdr_put_i32(enc, state);
}
