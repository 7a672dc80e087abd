/* lock.c: the lock table: held byte ranges, blocked requests and share reservations, by file.
 *
 * Records. Three hash tables (chained, doubled as they fill, keyed with a seed drawn at
 * creation so that a client cannot choose colliding keys ahead of time):
 *
 *   record        key                       holds
 *   ------------  ------------------------  ----------------------------------------------------
 *   lock_filerec  (fs, file id)             its held ranges, sorted by start; its blocked
 *                                           requests, oldest first; its share reservations
 *   lock_ownrec   (host, svid, owner handle) a count of references: one per record of its own,
 *                                           one per call working for it
 *   lock_hostrec  host                      its owners' count and its records' count (the bound)
 *
 * A held range, a blocked request and a reservation each point at their owner record. A file
 * record lives while it has any record, an owner while referenced, a host while it has owners:
 * each call frees what it left empty before it returns.
 *
 * Rules every change keeps (checked by lock_check in the unit test through the public calls):
 *   L1 One owner's held ranges on a file never overlap, and two of the same kind never touch
 *      (they are merged): the owner's view of the file is a set of disjoint maximal ranges.
 *   L2 Two held ranges of different owners on a file overlap only if both are shared.
 *   L3 A blocked request conflicts, at the end of every call, with some held range of another
 *      owner: a change that could free one runs the grant pass (file_grant) before it returns.
 *   L4 The counts (per owner, per host, in all) equal the records there are.
 *
 * The grant pass walks the file's blocked requests oldest first and grants each that no held
 * range of another owner conflicts with, applying it as lock_lock would. A grant can free bytes
 * for a request older than itself (its owner's exclusive range becomes shared), so the pass runs
 * again until one grants nothing. A request that arrives while older ones wait and does not
 * conflict is granted at once (POSIX promises no order, and knfsd does the same); among the
 * blocked, arrival order decides. No deadlock detection: NLM's clients do not rely on it.
 *
 * Bounds. Each host may have lto_host_max records and the table lto_table_max, so neither a
 * flood of locks nor of blocked requests (each a record) grows memory without end; a change that
 * would add a record past a bound answers LOCK_NOLOCKS. A split adds a record to what was
 * counted (a lock or unlock in the middle of a range): such a change goes past the bound by one
 * rather than fail an unlock. A grant is never refused for the bound: its request was counted
 * when it queued.
 *
 * Allocation. A change allocates the records it may need (at most two: the new range and the
 * right part of a split one) before it touches anything, so that running out of memory leaves
 * the table as it was.
 *
 * Concurrency. One mutex, t_mu, guards everything; nothing blocks under it and no callback runs
 * under it: granted and dropped requests are moved to a list on the caller's stack and handed
 * back after the mutex is released. The NLM layer's calls are short (a hash lookup and a walk of
 * one file's records), so one mutex serves every loop. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "lock/lock.h"

#define LOCK_HTAB_MIN_SLOTS 64u

/* ---------------------------------------------------------------------------------------------
 * Records */

struct lock_hnode {
	struct lock_hnode *hn_next;
	uint64_t hn_hash;
};

struct lock_htab {
	struct lock_hnode **ht_slots;
	uint64_t ht_nslots; /* a power of two */
	uint64_t ht_count;
};

struct lock_hostrec {
	struct lock_hnode hr_node;
	uint64_t hr_host;
	uint64_t hr_owners;
	uint64_t hr_records;
};

struct lock_ownrec {
	struct lock_hnode or_node;
	struct lock_hostrec *or_host;
	uint64_t or_refs;
	uint32_t or_svid;
	uint32_t or_oh_len;
	uint8_t or_oh[]; /* or_oh_len bytes */
};

struct lock_held {
	struct lock_held *hd_prev, *hd_next;
	struct lock_ownrec *hd_owner;
	struct lock_range hd_range;
	bool hd_exclusive;
};

struct lock_wait {
	struct lock_wait *wt_prev, *wt_next;
	struct lock_ownrec *wt_owner;
	struct lock_range wt_range;
	bool wt_exclusive;
	void *wt_user;
};

struct lock_share {
	struct lock_share *sh_next;
	struct lock_ownrec *sh_owner;
	unsigned sh_access, sh_deny;
};

struct lock_filerec {
	struct lock_hnode fr_node;
	struct lock_file fr_key;
	struct lock_held *fr_held;                      /* sorted by start */
	struct lock_wait *fr_wait_head, *fr_wait_tail; /* oldest first */
	struct lock_share *fr_shares;
};

/* Blocked requests taken out under the mutex, handed back after it (oldest first). */
struct lock_handback {
	struct lock_wait *hb_granted_head, *hb_granted_tail;
	struct lock_wait *hb_dropped_head, *hb_dropped_tail;
};

struct lock_table {
	pthread_mutex_t t_mu;
	struct lock_table_opts t_opts;
	uint64_t t_seed;
	struct lock_htab t_files, t_owners, t_hosts;
	uint64_t t_records;
	uint64_t t_held, t_blocked, t_shares;
	uint64_t t_bytes;
	uint64_t t_granted, t_nolocks;
};

/* ---------------------------------------------------------------------------------------------
 * Memory, counted */

static void *lock_alloc(struct lock_table *t, size_t bytes)
{
	void *p = mem_alloc(bytes);
	if (p)
		t->t_bytes += bytes;
	return p;
}

static void lock_free(struct lock_table *t, void *p, size_t bytes)
{
	if (!p)
		return;
	t->t_bytes -= bytes;
	mem_free(p);
}

/* ---------------------------------------------------------------------------------------------
 * Hash tables */

static int htab_init(struct lock_table *t, struct lock_htab *h)
{
	h->ht_slots = lock_alloc(t, LOCK_HTAB_MIN_SLOTS * sizeof(*h->ht_slots));
	if (!h->ht_slots)
		return -ENOMEM;
	memset(h->ht_slots, 0, LOCK_HTAB_MIN_SLOTS * sizeof(*h->ht_slots));
	h->ht_nslots = LOCK_HTAB_MIN_SLOTS;
	h->ht_count = 0;
	return 0;
}

static void htab_fini(struct lock_table *t, struct lock_htab *h)
{
	lock_free(t, h->ht_slots, h->ht_nslots * sizeof(*h->ht_slots));
	h->ht_slots = NULL;
}

/* Doubles the slots once the table holds as many entries; failing that, chains grow longer. */
static void htab_grow(struct lock_table *t, struct lock_htab *h)
{
	if (h->ht_count < h->ht_nslots)
		return;
	uint64_t n = h->ht_nslots * 2;
	struct lock_hnode **slots = lock_alloc(t, n * sizeof(*slots));
	if (!slots)
		return;
	memset(slots, 0, n * sizeof(*slots));
	for (uint64_t i = 0; i < h->ht_nslots; i++) {
		struct lock_hnode *e = h->ht_slots[i];
		while (e) {
			struct lock_hnode *next = e->hn_next;
			e->hn_next = slots[e->hn_hash & (n - 1)];
			slots[e->hn_hash & (n - 1)] = e;
			e = next;
		}
	}
	lock_free(t, h->ht_slots, h->ht_nslots * sizeof(*h->ht_slots));
	h->ht_slots = slots;
	h->ht_nslots = n;
}

static void htab_insert(struct lock_table *t, struct lock_htab *h, struct lock_hnode *e,
                        uint64_t hash)
{
	htab_grow(t, h);
	e->hn_hash = hash;
	struct lock_hnode **slot = &h->ht_slots[hash & (h->ht_nslots - 1)];
	e->hn_next = *slot;
	*slot = e;
	h->ht_count++;
}

static void htab_remove(struct lock_htab *h, struct lock_hnode *e)
{
	struct lock_hnode **at = &h->ht_slots[e->hn_hash & (h->ht_nslots - 1)];
	while (*at != e)
		at = &(*at)->hn_next;
	*at = e->hn_next;
	h->ht_count--;
}

static struct lock_hnode *htab_first(struct lock_htab *h, uint64_t hash)
{
	return h->ht_slots[hash & (h->ht_nslots - 1)];
}

/* ---------------------------------------------------------------------------------------------
 * Hosts and owners */

static uint64_t host_hash(const struct lock_table *t, uint64_t host)
{
	return sh_hash64(&host, sizeof(host), t->t_seed);
}

static struct lock_hostrec *host_find(struct lock_table *t, uint64_t host)
{
	uint64_t hash = host_hash(t, host);
	for (struct lock_hnode *e = htab_first(&t->t_hosts, hash); e; e = e->hn_next) {
		struct lock_hostrec *hr = SH_CONTAINER_OF(e, struct lock_hostrec, hr_node);
		if (e->hn_hash == hash && hr->hr_host == host)
			return hr;
	}
	return NULL;
}

static uint64_t owner_hash(const struct lock_table *t, const struct lock_owner *o)
{
	uint64_t head[2] = {o->lo_host, ((uint64_t)o->lo_svid << 32) | o->lo_oh_len};
	return sh_hash64(o->lo_oh, o->lo_oh_len, sh_hash64(head, sizeof(head), t->t_seed));
}

static struct lock_ownrec *owner_find(struct lock_table *t, const struct lock_owner *o)
{
	uint64_t hash = owner_hash(t, o);
	for (struct lock_hnode *e = htab_first(&t->t_owners, hash); e; e = e->hn_next) {
		struct lock_ownrec *r = SH_CONTAINER_OF(e, struct lock_ownrec, or_node);
		if (e->hn_hash == hash && r->or_host->hr_host == o->lo_host &&
		    r->or_svid == o->lo_svid && r->or_oh_len == o->lo_oh_len &&
		    memcmp(r->or_oh, o->lo_oh, o->lo_oh_len) == 0)
			return r;
	}
	return NULL;
}

/* The owner's record, made if new, with a reference for the call (owner_put gives it back).
 * NULL: no memory. */
static struct lock_ownrec *owner_get(struct lock_table *t, const struct lock_owner *o)
{
	struct lock_ownrec *r = owner_find(t, o);
	if (r) {
		r->or_refs++;
		return r;
	}
	struct lock_hostrec *hr = host_find(t, o->lo_host);
	bool new_host = !hr;
	if (new_host) {
		hr = lock_alloc(t, sizeof(*hr));
		if (!hr)
			return NULL;
		*hr = (struct lock_hostrec){.hr_host = o->lo_host};
	}
	r = lock_alloc(t, sizeof(*r) + o->lo_oh_len);
	if (!r) {
		if (new_host)
			lock_free(t, hr, sizeof(*hr));
		return NULL;
	}
	*r = (struct lock_ownrec){.or_host = hr, .or_refs = 1, .or_svid = o->lo_svid,
	                          .or_oh_len = o->lo_oh_len};
	memcpy(r->or_oh, o->lo_oh, o->lo_oh_len);
	if (new_host)
		htab_insert(t, &t->t_hosts, &hr->hr_node, host_hash(t, o->lo_host));
	hr->hr_owners++;
	htab_insert(t, &t->t_owners, &r->or_node, owner_hash(t, o));
	return r;
}

static void owner_put(struct lock_table *t, struct lock_ownrec *r)
{
	VERIFY(r->or_refs > 0);
	if (--r->or_refs > 0)
		return;
	struct lock_hostrec *hr = r->or_host;
	htab_remove(&t->t_owners, &r->or_node);
	lock_free(t, r, sizeof(*r) + r->or_oh_len);
	if (--hr->hr_owners == 0) {
		VERIFY(hr->hr_records == 0);
		htab_remove(&t->t_hosts, &hr->hr_node);
		lock_free(t, hr, sizeof(*hr));
	}
}

/* A record of owner r's comes or goes (L4). */
static void record_add(struct lock_table *t, struct lock_ownrec *r)
{
	r->or_refs++;
	r->or_host->hr_records++;
	t->t_records++;
}

static void record_del(struct lock_table *t, struct lock_ownrec *r)
{
	VERIFY(r->or_host->hr_records > 0 && t->t_records > 0);
	r->or_host->hr_records--;
	t->t_records--;
	owner_put(t, r);
}

/* Whether owner o may add one more record. */
static bool record_room(struct lock_table *t, const struct lock_owner *o)
{
	const struct lock_table_opts *op = &t->t_opts;
	if (op->lto_table_max && t->t_records >= op->lto_table_max)
		return false;
	if (op->lto_host_max) {
		struct lock_hostrec *hr = host_find(t, o->lo_host);
		if (hr && hr->hr_records >= op->lto_host_max)
			return false;
	}
	return true;
}

/* ---------------------------------------------------------------------------------------------
 * Files */

static uint64_t file_hash(const struct lock_table *t, const struct lock_file *f)
{
	uint64_t head[2] = {f->lf_fs, f->lf_len};
	return sh_hash64(f->lf_id, f->lf_len, sh_hash64(head, sizeof(head), t->t_seed));
}

static struct lock_filerec *file_find(struct lock_table *t, const struct lock_file *f)
{
	uint64_t hash = file_hash(t, f);
	for (struct lock_hnode *e = htab_first(&t->t_files, hash); e; e = e->hn_next) {
		struct lock_filerec *r = SH_CONTAINER_OF(e, struct lock_filerec, fr_node);
		if (e->hn_hash == hash && r->fr_key.lf_fs == f->lf_fs &&
		    r->fr_key.lf_len == f->lf_len && memcmp(r->fr_key.lf_id, f->lf_id, f->lf_len) == 0)
			return r;
	}
	return NULL;
}

static struct lock_filerec *file_get(struct lock_table *t, const struct lock_file *f)
{
	struct lock_filerec *r = file_find(t, f);
	if (r)
		return r;
	r = lock_alloc(t, sizeof(*r));
	if (!r)
		return NULL;
	*r = (struct lock_filerec){.fr_key = *f};
	htab_insert(t, &t->t_files, &r->fr_node, file_hash(t, f));
	return r;
}

/* Frees the file's record once it has nothing left. */
static void file_put(struct lock_table *t, struct lock_filerec *r)
{
	if (!r || r->fr_held || r->fr_wait_head || r->fr_shares)
		return;
	htab_remove(&t->t_files, &r->fr_node);
	lock_free(t, r, sizeof(*r));
}

/* ---------------------------------------------------------------------------------------------
 * Ranges */

static bool range_overlap(const struct lock_range *a, const struct lock_range *b)
{
	return a->lr_start <= b->lr_end && b->lr_start <= a->lr_end;
}

/* Whether a and b overlap or are adjacent (no byte between them). */
static bool range_touch(const struct lock_range *a, const struct lock_range *b)
{
	bool a_reaches = a->lr_end == LOCK_END || a->lr_end + 1 >= b->lr_start;
	bool b_reaches = b->lr_end == LOCK_END || b->lr_end + 1 >= a->lr_start;
	return a_reaches && b_reaches;
}

static bool range_equal(const struct lock_range *a, const struct lock_range *b)
{
	return a->lr_start == b->lr_start && a->lr_end == b->lr_end;
}

/* ---------------------------------------------------------------------------------------------
 * Held ranges */

static void held_unlink(struct lock_filerec *f, struct lock_held *h)
{
	if (h->hd_prev)
		h->hd_prev->hd_next = h->hd_next;
	else
		f->fr_held = h->hd_next;
	if (h->hd_next)
		h->hd_next->hd_prev = h->hd_prev;
	h->hd_prev = h->hd_next = NULL;
}

/* Links h into f's list in start order. */
static void held_link(struct lock_filerec *f, struct lock_held *h)
{
	struct lock_held *prev = NULL, *at = f->fr_held;
	while (at && at->hd_range.lr_start <= h->hd_range.lr_start) {
		prev = at;
		at = at->hd_next;
	}
	h->hd_prev = prev;
	h->hd_next = at;
	if (prev)
		prev->hd_next = h;
	else
		f->fr_held = h;
	if (at)
		at->hd_prev = h;
}

static void held_free(struct lock_table *t, struct lock_filerec *f, struct lock_held *h)
{
	held_unlink(f, h);
	t->t_held--;
	record_del(t, h->hd_owner);
	lock_free(t, h, sizeof(*h));
}

/* Takes a preallocated record into f as owner r's range of kind. */
static void held_add(struct lock_table *t, struct lock_filerec *f, struct lock_held *h,
                     struct lock_ownrec *r, const struct lock_range *range, bool exclusive)
{
	*h = (struct lock_held){.hd_owner = r, .hd_range = *range, .hd_exclusive = exclusive};
	held_link(f, h);
	t->t_held++;
	record_add(t, r);
}

/* The first held range of an owner other than r (NULL: any owner) that conflicts with range of
 * kind exclusive; r may also be NULL with o naming an owner the table has no record of. */
static struct lock_held *held_conflict(struct lock_filerec *f, const struct lock_ownrec *r,
                                       const struct lock_range *range, bool exclusive)
{
	for (struct lock_held *h = f ? f->fr_held : NULL; h; h = h->hd_next) {
		if (h->hd_range.lr_start > range->lr_end)
			break;
		if (h->hd_owner != r && (exclusive || h->hd_exclusive) &&
		    range_overlap(&h->hd_range, range))
			return h;
	}
	return NULL;
}

/* Removes what owner r holds of range, cutting ranges partly inside it; a range covering it on
 * both sides keeps its left part and *spare (consumed: set to NULL) becomes its right part. */
static void held_cut(struct lock_table *t, struct lock_filerec *f, struct lock_ownrec *r,
                     const struct lock_range *range, struct lock_held **spare)
{
	struct lock_held *h = f->fr_held;
	while (h && h->hd_range.lr_start <= range->lr_end) {
		struct lock_held *next = h->hd_next;
		if (h->hd_owner != r || !range_overlap(&h->hd_range, range)) {
			h = next;
			continue;
		}
		struct lock_range hr = h->hd_range;
		bool left = hr.lr_start < range->lr_start;
		bool right = hr.lr_end > range->lr_end;
		if (left && right) {
			VERIFY(*spare); /* the caller allocated it: one range can cover another only once */
			struct lock_range rest = {range->lr_end + 1, hr.lr_end};
			h->hd_range.lr_end = range->lr_start - 1;
			held_add(t, f, *spare, r, &rest, h->hd_exclusive);
			*spare = NULL;
		} else if (left) {
			h->hd_range.lr_end = range->lr_start - 1;
		} else if (right) {
			/* its start moves right, past ranges that start within the cut: relink */
			held_unlink(f, h);
			h->hd_range.lr_start = range->lr_end + 1;
			held_link(f, h);
		} else {
			held_free(t, f, h);
		}
		h = next;
	}
}

/* Whether owner r holds a single range of kind exclusive containing range (a lock that changes
 * nothing: the common repeated request, which must not need a record). */
static bool held_covers(struct lock_filerec *f, struct lock_ownrec *r,
                        const struct lock_range *range, bool exclusive)
{
	for (struct lock_held *h = f->fr_held; h; h = h->hd_next) {
		if (h->hd_range.lr_start > range->lr_start)
			break;
		if (h->hd_owner == r && h->hd_exclusive == exclusive &&
		    h->hd_range.lr_end >= range->lr_end)
			return true;
	}
	return false;
}

/* How many records held_apply would add (negative: remove) for owner r's range of kind: the new
 * range, less the ranges of the same kind it absorbs and those of the other kind it covers, plus
 * the right part of one it splits. */
static int64_t held_apply_delta(struct lock_filerec *f, struct lock_ownrec *r,
                                const struct lock_range *range, bool exclusive)
{
	if (held_covers(f, r, range, exclusive))
		return 0;
	int64_t delta = 1;
	for (struct lock_held *h = f->fr_held; h; h = h->hd_next) {
		if (h->hd_owner != r)
			continue;
		const struct lock_range *hr = &h->hd_range;
		if (h->hd_exclusive == exclusive) {
			delta -= range_touch(hr, range);
		} else if (range_overlap(hr, range)) {
			bool left = hr->lr_start < range->lr_start, right = hr->lr_end > range->lr_end;
			delta += left && right ? 1 : !left && !right ? -1 : 0;
		}
	}
	return delta;
}

/* Gives owner r range of kind on f (no conflict with others: the caller checked), with the two
 * records *a (the new range) and *b (a split's right part) preallocated; used ones are set to
 * NULL. L1 holds after it. */
static void held_apply(struct lock_table *t, struct lock_filerec *f, struct lock_ownrec *r,
                       const struct lock_range *range, bool exclusive, struct lock_held **a,
                       struct lock_held **b)
{
	if (held_covers(f, r, range, exclusive))
		return;
	struct lock_range merged = *range;
	/* same kind, touching: absorbed into the new range (L1's merge) */
	struct lock_held *h = f->fr_held;
	while (h) {
		struct lock_held *next = h->hd_next;
		if (h->hd_owner == r && h->hd_exclusive == exclusive &&
		    range_touch(&h->hd_range, range)) {
			merged.lr_start = SH_MIN(merged.lr_start, h->hd_range.lr_start);
			merged.lr_end = SH_MAX(merged.lr_end, h->hd_range.lr_end);
			held_free(t, f, h);
		}
		h = next;
	}
	/* the other kind, overlapping: the range replaces it there (an upgrade or downgrade) */
	held_cut(t, f, r, range, b);
	held_add(t, f, *a, r, &merged, exclusive);
	*a = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Blocked requests and the grant pass */

static void wait_unlink(struct lock_filerec *f, struct lock_wait *w)
{
	if (w->wt_prev)
		w->wt_prev->wt_next = w->wt_next;
	else
		f->fr_wait_head = w->wt_next;
	if (w->wt_next)
		w->wt_next->wt_prev = w->wt_prev;
	else
		f->fr_wait_tail = w->wt_prev;
	w->wt_prev = w->wt_next = NULL;
}

static void handback_push(struct lock_wait **head, struct lock_wait **tail, struct lock_wait *w)
{
	w->wt_next = NULL;
	if (*tail)
		(*tail)->wt_next = w;
	else
		*head = w;
	*tail = w;
}

/* Takes w out of the table onto the dropped list. */
static void wait_drop(struct lock_table *t, struct lock_filerec *f, struct lock_wait *w,
                      struct lock_handback *hb)
{
	wait_unlink(f, w);
	t->t_blocked--;
	record_del(t, w->wt_owner);
	w->wt_owner = NULL;
	handback_push(&hb->hb_dropped_head, &hb->hb_dropped_tail, w);
}

/* L3: grants, oldest first, every blocked request of f that no other owner's range conflicts
 * with, until a pass grants none. A grant whose records cannot be allocated waits for the next
 * change (and is logged). */
static void file_grant(struct lock_table *t, struct lock_filerec *f, struct lock_handback *hb)
{
	bool granted;
	do {
		granted = false;
		struct lock_wait *w = f->fr_wait_head;
		while (w) {
			struct lock_wait *next = w->wt_next;
			if (held_conflict(f, w->wt_owner, &w->wt_range, w->wt_exclusive)) {
				w = next;
				continue;
			}
			struct lock_held *a = lock_alloc(t, sizeof(*a));
			struct lock_held *b = lock_alloc(t, sizeof(*b));
			if (!a || !b) {
				lock_free(t, a, sizeof(*a));
				lock_free(t, b, sizeof(*b));
				log_error("lock table: no memory to grant a blocked lock; it waits on");
				return;
			}
			struct lock_ownrec *r = w->wt_owner;
			held_apply(t, f, r, &w->wt_range, w->wt_exclusive, &a, &b);
			lock_free(t, a, sizeof(*a));
			lock_free(t, b, sizeof(*b));
			wait_unlink(f, w);
			t->t_blocked--;
			t->t_granted++;
			record_del(t, r);
			w->wt_owner = NULL;
			handback_push(&hb->hb_granted_head, &hb->hb_granted_tail, w);
			granted = true;
			w = next;
		}
	} while (granted && f->fr_wait_head);
}

/* After the mutex: every granted request to lcb_granted, then every dropped one to lcb_dropped,
 * each in the order taken. */
static void handback_run(struct lock_table *t, struct lock_handback *hb)
{
	const struct lock_callbacks *cb = &t->t_opts.lto_callbacks;
	void *ctx = t->t_opts.lto_ctx;
	for (struct lock_wait *w = hb->hb_granted_head; w;) {
		struct lock_wait *next = w->wt_next;
		void *user = w->wt_user;
		mem_free(w); /* its bytes left t_bytes when it was taken out, under the mutex */
		if (cb->lcb_granted)
			cb->lcb_granted(ctx, user);
		w = next;
	}
	for (struct lock_wait *w = hb->hb_dropped_head; w;) {
		struct lock_wait *next = w->wt_next;
		void *user = w->wt_user;
		mem_free(w);
		if (cb->lcb_dropped)
			cb->lcb_dropped(ctx, user);
		w = next;
	}
}

/* Under the mutex: the handed-back records' bytes leave the count (they are freed after it). */
static void handback_uncount(struct lock_table *t, const struct lock_handback *hb)
{
	for (struct lock_wait *w = hb->hb_granted_head; w; w = w->wt_next)
		t->t_bytes -= sizeof(*w);
	for (struct lock_wait *w = hb->hb_dropped_head; w; w = w->wt_next)
		t->t_bytes -= sizeof(*w);
}

static void table_unlock(struct lock_table *t, struct lock_handback *hb)
{
	handback_uncount(t, hb);
	pthread_mutex_unlock(&t->t_mu);
	handback_run(t, hb);
}

/* ---------------------------------------------------------------------------------------------
 * The table */

int lock_table_create(const struct lock_table_opts *opts, struct lock_table **out)
{
	*out = NULL;
	struct lock_table *t = mem_zalloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->t_opts = *opts;
	int rc = sh_random_bytes(&t->t_seed, sizeof(t->t_seed));
	if (rc == 0)
		rc = htab_init(t, &t->t_files);
	if (rc == 0)
		rc = htab_init(t, &t->t_owners);
	if (rc == 0)
		rc = htab_init(t, &t->t_hosts);
	if (rc == 0)
		rc = -pthread_mutex_init(&t->t_mu, NULL);
	if (rc != 0) {
		htab_fini(t, &t->t_files);
		htab_fini(t, &t->t_owners);
		htab_fini(t, &t->t_hosts);
		mem_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

/* Removes every record of the files match accepts (and every record of host's owners, if
 * by_host), dropping their blocked requests; grants what waited on a file that stays. Returns
 * how many records went. Under the mutex. */
static uint64_t table_release(struct lock_table *t, bool by_host, uint64_t key,
                              struct lock_handback *hb)
{
	uint64_t before = t->t_records;
	for (uint64_t i = 0; i < t->t_files.ht_nslots; i++) {
		struct lock_hnode *e = t->t_files.ht_slots[i];
		while (e) {
			struct lock_hnode *next_e = e->hn_next;
			struct lock_filerec *f = SH_CONTAINER_OF(e, struct lock_filerec, fr_node);
			bool whole = !by_host && f->fr_key.lf_fs == key;
			if (!by_host && !whole) {
				e = next_e;
				continue;
			}
			bool freed = false;
			for (struct lock_held *h = f->fr_held; h;) {
				struct lock_held *next = h->hd_next;
				if (whole || h->hd_owner->or_host->hr_host == key) {
					held_free(t, f, h);
					freed = true;
				}
				h = next;
			}
			for (struct lock_wait *w = f->fr_wait_head; w;) {
				struct lock_wait *next = w->wt_next;
				if (whole || w->wt_owner->or_host->hr_host == key)
					wait_drop(t, f, w, hb);
				w = next;
			}
			for (struct lock_share **at = &f->fr_shares; *at;) {
				struct lock_share *s = *at;
				if (whole || s->sh_owner->or_host->hr_host == key) {
					*at = s->sh_next;
					t->t_shares--;
					record_del(t, s->sh_owner);
					lock_free(t, s, sizeof(*s));
				} else {
					at = &s->sh_next;
				}
			}
			if (freed)
				file_grant(t, f, hb);
			file_put(t, f);
			e = next_e;
		}
	}
	return before - t->t_records;
}

void lock_table_destroy(struct lock_table *t)
{
	if (!t)
		return;
	struct lock_handback hb = {0};
	pthread_mutex_lock(&t->t_mu);
	for (uint64_t i = 0; i < t->t_files.ht_nslots; i++) {
		while (t->t_files.ht_slots[i]) {
			struct lock_filerec *f =
				SH_CONTAINER_OF(t->t_files.ht_slots[i], struct lock_filerec, fr_node);
			(void)table_release(t, false, f->fr_key.lf_fs, &hb);
		}
	}
	VERIFY(t->t_records == 0 && t->t_owners.ht_count == 0 && t->t_hosts.ht_count == 0);
	table_unlock(t, &hb);
	pthread_mutex_destroy(&t->t_mu);
	htab_fini(t, &t->t_files);
	htab_fini(t, &t->t_owners);
	htab_fini(t, &t->t_hosts);
	mem_free(t);
}

static void conflict_fill(struct lock_conflict *c, const struct lock_held *h)
{
	if (!c)
		return;
	c->lc_exclusive = h->hd_exclusive;
	c->lc_host = h->hd_owner->or_host->hr_host;
	c->lc_svid = h->hd_owner->or_svid;
	c->lc_range = h->hd_range;
}

static bool owner_valid(const struct lock_owner *o)
{
	return o->lo_oh_len <= LOCK_OH_MAX && (o->lo_oh || o->lo_oh_len == 0);
}

static bool request_valid(const struct lock_file *file, const struct lock_owner *o,
                          const struct lock_range *range)
{
	return file->lf_len <= LOCK_FILE_ID_MAX && owner_valid(o) &&
	       (!range || range->lr_start <= range->lr_end);
}

int lock_test(struct lock_table *t, const struct lock_file *file, const struct lock_owner *owner,
              bool exclusive, const struct lock_range *range, struct lock_conflict *conflict)
{
	if (!request_valid(file, owner, range))
		return -EINVAL;
	pthread_mutex_lock(&t->t_mu);
	struct lock_filerec *f = file_find(t, file);
	/* an owner with no record in the table holds nothing: every holder is another */
	const struct lock_ownrec *r = f ? owner_find(t, owner) : NULL;
	struct lock_held *h = held_conflict(f, r, range, exclusive);
	if (h)
		conflict_fill(conflict, h);
	pthread_mutex_unlock(&t->t_mu);
	return h ? LOCK_DENIED : LOCK_GRANTED;
}

int lock_lock(struct lock_table *t, const struct lock_file *file, const struct lock_owner *owner,
              bool exclusive, const struct lock_range *range, void *user,
              struct lock_conflict *conflict)
{
	if (!request_valid(file, owner, range))
		return -EINVAL;
	struct lock_held *a = mem_alloc(sizeof(*a)), *b = mem_alloc(sizeof(*b));
	struct lock_wait *w = user ? mem_alloc(sizeof(*w)) : NULL;
	if (!a || !b || (user && !w)) {
		mem_free(a);
		mem_free(b);
		mem_free(w);
		return -ENOMEM;
	}
	struct lock_handback hb = {0};
	int rc;
	pthread_mutex_lock(&t->t_mu);
	t->t_bytes += 2 * sizeof(*a) + (w ? sizeof(*w) : 0);
	struct lock_filerec *f = file_get(t, file);
	struct lock_ownrec *r = f ? owner_get(t, owner) : NULL;
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	struct lock_held *h = held_conflict(f, r, range, exclusive);
	if (!h) {
		if (held_apply_delta(f, r, range, exclusive) > 0 && !record_room(t, owner)) {
			t->t_nolocks++;
			rc = LOCK_NOLOCKS;
			goto out;
		}
		held_apply(t, f, r, range, exclusive, &a, &b);
		/* a downgrade (or the end of an exclusive range merged away) can free others */
		file_grant(t, f, &hb);
		rc = LOCK_GRANTED;
		goto out;
	}
	conflict_fill(conflict, h);
	if (!user) {
		rc = LOCK_DENIED;
		goto out;
	}
	for (struct lock_wait *q = f->fr_wait_head; q; q = q->wt_next) {
		if (q->wt_owner == r && q->wt_exclusive == exclusive &&
		    range_equal(&q->wt_range, range)) {
			rc = LOCK_BLOCKED_ALREADY;
			goto out;
		}
	}
	if (!record_room(t, owner)) {
		t->t_nolocks++;
		rc = LOCK_NOLOCKS;
		goto out;
	}
	*w = (struct lock_wait){.wt_prev = f->fr_wait_tail, .wt_owner = r, .wt_range = *range,
	                        .wt_exclusive = exclusive, .wt_user = user};
	if (f->fr_wait_tail)
		f->fr_wait_tail->wt_next = w;
	else
		f->fr_wait_head = w;
	f->fr_wait_tail = w;
	t->t_blocked++;
	record_add(t, r);
	w = NULL;
	rc = LOCK_BLOCKED;
out:
	if (r)
		owner_put(t, r);
	file_put(t, f);
	lock_free(t, a, sizeof(*a));
	lock_free(t, b, sizeof(*b));
	lock_free(t, w, sizeof(*w));
	table_unlock(t, &hb);
	return rc;
}

int lock_unlock(struct lock_table *t, const struct lock_file *file,
                const struct lock_owner *owner, const struct lock_range *range)
{
	if (!request_valid(file, owner, range))
		return -EINVAL;
	struct lock_held *spare = mem_alloc(sizeof(*spare));
	if (!spare)
		return -ENOMEM;
	struct lock_handback hb = {0};
	pthread_mutex_lock(&t->t_mu);
	t->t_bytes += sizeof(*spare);
	struct lock_filerec *f = file_find(t, file);
	struct lock_ownrec *r = f ? owner_find(t, owner) : NULL;
	if (r) {
		r->or_refs++;
		held_cut(t, f, r, range, &spare);
		file_grant(t, f, &hb);
		owner_put(t, r);
		file_put(t, f);
	}
	lock_free(t, spare, sizeof(*spare));
	table_unlock(t, &hb);
	return 0;
}

int lock_cancel(struct lock_table *t, const struct lock_file *file,
                const struct lock_owner *owner, bool exclusive, const struct lock_range *range,
                void **user_out)
{
	*user_out = NULL;
	if (!request_valid(file, owner, range))
		return -EINVAL;
	int rc = -ENOENT;
	pthread_mutex_lock(&t->t_mu);
	struct lock_filerec *f = file_find(t, file);
	struct lock_ownrec *r = f ? owner_find(t, owner) : NULL;
	for (struct lock_wait *w = r ? f->fr_wait_head : NULL; w; w = w->wt_next) {
		if (w->wt_owner == r && w->wt_exclusive == exclusive &&
		    range_equal(&w->wt_range, range)) {
			wait_unlink(f, w);
			t->t_blocked--;
			*user_out = w->wt_user;
			record_del(t, r);
			lock_free(t, w, sizeof(*w));
			file_put(t, f);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->t_mu);
	return rc;
}

int lock_share(struct lock_table *t, const struct lock_file *file, const struct lock_owner *owner,
               unsigned access, unsigned deny)
{
	if (!request_valid(file, owner, NULL))
		return -EINVAL;
	struct lock_share *s = mem_alloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = LOCK_GRANTED;
	pthread_mutex_lock(&t->t_mu);
	t->t_bytes += sizeof(*s);
	struct lock_filerec *f = file_get(t, file);
	struct lock_ownrec *r = f ? owner_get(t, owner) : NULL;
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	struct lock_share *mine = NULL;
	for (struct lock_share *o = f->fr_shares; o; o = o->sh_next) {
		if (o->sh_owner == r) {
			mine = o;
			continue;
		}
		if ((o->sh_deny & access) || (o->sh_access & deny)) {
			rc = LOCK_DENIED;
			goto out;
		}
	}
	if (mine) {
		mine->sh_access = access;
		mine->sh_deny = deny;
		goto out;
	}
	if (!record_room(t, owner)) {
		t->t_nolocks++;
		rc = LOCK_NOLOCKS;
		goto out;
	}
	*s = (struct lock_share){.sh_next = f->fr_shares, .sh_owner = r, .sh_access = access,
	                         .sh_deny = deny};
	f->fr_shares = s;
	t->t_shares++;
	record_add(t, r);
	s = NULL;
out:
	if (r)
		owner_put(t, r);
	file_put(t, f);
	lock_free(t, s, sizeof(*s));
	pthread_mutex_unlock(&t->t_mu);
	return rc;
}

void lock_unshare(struct lock_table *t, const struct lock_file *file,
                  const struct lock_owner *owner)
{
	if (!request_valid(file, owner, NULL))
		return;
	pthread_mutex_lock(&t->t_mu);
	struct lock_filerec *f = file_find(t, file);
	struct lock_ownrec *r = f ? owner_find(t, owner) : NULL;
	for (struct lock_share **at = r ? &f->fr_shares : NULL; at && *at; at = &(*at)->sh_next) {
		struct lock_share *s = *at;
		if (s->sh_owner == r) {
			*at = s->sh_next;
			t->t_shares--;
			record_del(t, r);
			lock_free(t, s, sizeof(*s));
			file_put(t, f);
			break;
		}
	}
	pthread_mutex_unlock(&t->t_mu);
}

uint64_t lock_release_host(struct lock_table *t, uint64_t host)
{
	struct lock_handback hb = {0};
	pthread_mutex_lock(&t->t_mu);
	uint64_t n = host_find(t, host) ? table_release(t, true, host, &hb) : 0;
	table_unlock(t, &hb);
	return n;
}

uint64_t lock_release_fs(struct lock_table *t, uint64_t fs)
{
	struct lock_handback hb = {0};
	pthread_mutex_lock(&t->t_mu);
	uint64_t n = table_release(t, false, fs, &hb);
	table_unlock(t, &hb);
	return n;
}

uint64_t lock_host_records(struct lock_table *t, uint64_t host)
{
	pthread_mutex_lock(&t->t_mu);
	struct lock_hostrec *hr = host_find(t, host);
	uint64_t n = hr ? hr->hr_records : 0;
	pthread_mutex_unlock(&t->t_mu);
	return n;
}

void lock_table_stats(struct lock_table *t, struct lock_stats *out)
{
	pthread_mutex_lock(&t->t_mu);
	*out = (struct lock_stats){
		.ls_files = t->t_files.ht_count,
		.ls_held = t->t_held,
		.ls_blocked = t->t_blocked,
		.ls_shares = t->t_shares,
		.ls_owners = t->t_owners.ht_count,
		.ls_hosts = t->t_hosts.ht_count,
		.ls_bytes = t->t_bytes + sizeof(*t),
		.ls_granted = t->t_granted,
		.ls_nolocks = t->t_nolocks,
	};
	pthread_mutex_unlock(&t->t_mu);
}
