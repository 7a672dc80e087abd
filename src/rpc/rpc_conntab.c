/* rpc_conntab.c: the server's table of TCP connections by client address: the connection limit,
 * the per-address cap, and the choice of the connection to close when a new one needs room.
 *
 * Problem: with a plain connection limit, one address that opens the whole table's worth of idle
 * connections locks every other client out (a new connection is refused). knfsd instead closes
 * its oldest idle connection when a new one arrives at the limit; this table does the same, and
 * keeps one address from taking the table in the first place.
 *
 * Model: every open TCP connection of the server has an entry (embedded in its struct rpc_conn),
 * filed under its client address (the IP address; the port is not part of it). Admission of a new
 * connection (rpc_conntab_add), in this order:
 *   1. Its address already holds max_per_addr connections: the least recently active connection
 *      of that same address is chosen to close. The address keeps its count; others lose nothing.
 *   2. Else the table holds max_conns connections: the least recently active connection of the
 *      address holding the most connections is chosen to close (of addresses holding equally
 *      many, the one with the least recently active connection).
 *   3. The new connection is admitted either way, unless no connection could be chosen (every
 *      candidate is already closing) and the table is full, or the table already holds
 *      max_conns + RPC_CONNTAB_SLACK entries (closes asked for have not happened yet): refused.
 * A chosen connection is only marked (ce_evict); its owner, the loop that serves it, closes it
 * on its own thread (rpc_server.c), and the close removes the entry. Until then it is counted.
 * The caller learns the victim's owner (ce_owner, fixed at admission), never the entry itself:
 * once the lock is dropped the entry may be gone.
 *
 * Activity: ce_active_ns is the monotonic time of the connection's last complete record or
 * written reply, stored by its loop and read here under the table lock by other loops' accepts:
 * an atomic, relaxed (a stale value only makes the choice slightly less exact).
 *
 * Concurrency: one mutex guards the table (the address hash, each address's list, the counts,
 * every entry's links and ce_evict transitions to true). It is taken on accept and close only,
 * never per request.
 *
 * Structure: an address record (struct rpc_conntab_addr) per distinct address with connections,
 * in a chained hash of RPC_CONNTAB_BUCKETS buckets; each record lists its entries. Choosing by
 * rule 1 walks one address's list; rule 2 walks the address records and the lists of the
 * largest. Both are bounded by the table's size and run only when a limit is reached. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "rpc/rpc_impl.h"

#define RPC_CONNTAB_BUCKETS 1024u /* a power of two; distinct client addresses are few */

struct rpc_conntab_addr {
	uint8_t ca_addr[16]; /* IPv4 in the first 4 bytes, or IPv6 */
	uint16_t ca_family;
	unsigned ca_count;
	struct rpc_conntab_entry *ca_head; /* this address's entries */
	struct rpc_conntab_addr *ca_chain; /* hash bucket chain */
};

struct rpc_conntab {
	pthread_mutex_t ct_lock;
	unsigned ct_max;
	unsigned ct_max_per_addr;
	unsigned ct_count;
	unsigned ct_evicted_total;
	struct rpc_conntab_addr *ct_buckets[RPC_CONNTAB_BUCKETS];
};

int rpc_conntab_create(unsigned max_conns, unsigned max_per_addr, struct rpc_conntab **out)
{
	if (max_conns == 0 || max_per_addr == 0)
		return -EINVAL;
	struct rpc_conntab *t = mem_zalloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	int rc = -pthread_mutex_init(&t->ct_lock, NULL);
	if (rc < 0) {
		mem_free(t);
		return rc;
	}
	t->ct_max = max_conns;
	t->ct_max_per_addr = max_per_addr;
	*out = t;
	return 0;
}

void rpc_conntab_destroy(struct rpc_conntab *t)
{
	if (!t)
		return;
	for (unsigned b = 0; b < RPC_CONNTAB_BUCKETS; b++) {
		while (t->ct_buckets[b]) {
			struct rpc_conntab_addr *a = t->ct_buckets[b];
			t->ct_buckets[b] = a->ca_chain;
			mem_free(a);
		}
	}
	pthread_mutex_destroy(&t->ct_lock);
	mem_free(t);
}

/* The address part of a peer: family and the IP bytes. */
static void rpc_conntab_key(const struct sockaddr_storage *peer, uint8_t addr[16],
			    uint16_t *family)
{
	memset(addr, 0, 16);
	*family = peer->ss_family;
	if (peer->ss_family == AF_INET)
		memcpy(addr, &((const struct sockaddr_in *)(const void *)peer)->sin_addr, 4);
	else if (peer->ss_family == AF_INET6)
		memcpy(addr, &((const struct sockaddr_in6 *)(const void *)peer)->sin6_addr, 16);
}

static unsigned rpc_conntab_bucket(const uint8_t addr[16], uint16_t family)
{
	uint64_t h = 1469598103934665603ull ^ family; /* FNV-1a */
	for (unsigned i = 0; i < 16; i++) {
		h ^= addr[i];
		h *= 1099511628211ull;
	}
	return (unsigned)(h ^ (h >> 29)) & (RPC_CONNTAB_BUCKETS - 1);
}

static struct rpc_conntab_addr *rpc_conntab_find(struct rpc_conntab *t, const uint8_t addr[16],
						 uint16_t family)
{
	struct rpc_conntab_addr *a = t->ct_buckets[rpc_conntab_bucket(addr, family)];
	while (a && (a->ca_family != family || memcmp(a->ca_addr, addr, 16) != 0))
		a = a->ca_chain;
	return a;
}

/* The least recently active entry of a not yet marked for closing, or NULL. */
static struct rpc_conntab_entry *rpc_conntab_oldest(const struct rpc_conntab_addr *a)
{
	struct rpc_conntab_entry *best = NULL;
	uint64_t best_ns = UINT64_MAX;
	for (struct rpc_conntab_entry *e = a->ca_head; e; e = e->ce_next) {
		if (atomic_load_explicit(&e->ce_evict, memory_order_relaxed))
			continue;
		uint64_t ns = atomic_load_explicit(&e->ce_active_ns, memory_order_relaxed);
		if (ns < best_ns) {
			best_ns = ns;
			best = e;
		}
	}
	return best;
}

/* Rule 2's choice: the oldest entry not yet marked of the address holding the most entries; of
 * addresses holding equally many, the one whose oldest entry is the oldest. */
static struct rpc_conntab_entry *rpc_conntab_oldest_of_largest(const struct rpc_conntab *t)
{
	struct rpc_conntab_entry *best = NULL;
	unsigned best_count = 0;
	uint64_t best_ns = UINT64_MAX;
	for (unsigned b = 0; b < RPC_CONNTAB_BUCKETS; b++) {
		for (const struct rpc_conntab_addr *a = t->ct_buckets[b]; a; a = a->ca_chain) {
			if (a->ca_count < best_count)
				continue;
			struct rpc_conntab_entry *e = rpc_conntab_oldest(a);
			if (!e)
				continue;
			uint64_t ns = atomic_load_explicit(&e->ce_active_ns, memory_order_relaxed);
			if (a->ca_count > best_count || ns < best_ns) {
				best = e;
				best_count = a->ca_count;
				best_ns = ns;
			}
		}
	}
	return best;
}

int rpc_conntab_add(struct rpc_conntab *t, struct rpc_conntab_entry *entry,
		    const struct sockaddr_storage *peer, uint64_t now_ns, void *owner,
		    void **victim_owner_out)
{
	uint8_t addr[16];
	uint16_t family;
	rpc_conntab_key(peer, addr, &family);
	*victim_owner_out = NULL;
	memset(entry, 0, sizeof(*entry));
	entry->ce_owner = owner;
	atomic_store_explicit(&entry->ce_active_ns, now_ns, memory_order_relaxed);
	int rc = 0;
	pthread_mutex_lock(&t->ct_lock);
	struct rpc_conntab_addr *a = rpc_conntab_find(t, addr, family);
	struct rpc_conntab_entry *victim = NULL;
	if (t->ct_count >= t->ct_max + RPC_CONNTAB_SLACK) {
		rc = -EBUSY;
		goto out_unlock;
	}
	if (a && a->ca_count >= t->ct_max_per_addr)
		victim = rpc_conntab_oldest(a);
	else if (t->ct_count >= t->ct_max)
		victim = rpc_conntab_oldest_of_largest(t);
	if (!victim && t->ct_count >= t->ct_max) {
		rc = -EBUSY;
		goto out_unlock;
	}
	if (!a) {
		a = mem_zalloc(sizeof(*a));
		if (!a) {
			rc = -ENOMEM;
			goto out_unlock;
		}
		memcpy(a->ca_addr, addr, 16);
		a->ca_family = family;
		unsigned b = rpc_conntab_bucket(addr, family);
		a->ca_chain = t->ct_buckets[b];
		t->ct_buckets[b] = a;
	}
	entry->ce_addr = a;
	entry->ce_next = a->ca_head;
	if (a->ca_head)
		a->ca_head->ce_prev = entry;
	a->ca_head = entry;
	a->ca_count++;
	t->ct_count++;
	if (victim) {
		atomic_store_explicit(&victim->ce_evict, true, memory_order_relaxed);
		t->ct_evicted_total++;
		*victim_owner_out = victim->ce_owner;
	}
out_unlock:
	pthread_mutex_unlock(&t->ct_lock);
	return rc;
}

void rpc_conntab_remove(struct rpc_conntab *t, struct rpc_conntab_entry *entry)
{
	pthread_mutex_lock(&t->ct_lock);
	struct rpc_conntab_addr *a = entry->ce_addr;
	VERIFY(a && a->ca_count > 0 && t->ct_count > 0);
	if (entry->ce_prev)
		entry->ce_prev->ce_next = entry->ce_next;
	else
		a->ca_head = entry->ce_next;
	if (entry->ce_next)
		entry->ce_next->ce_prev = entry->ce_prev;
	entry->ce_prev = entry->ce_next = NULL;
	entry->ce_addr = NULL;
	a->ca_count--;
	t->ct_count--;
	if (a->ca_count == 0) {
		unsigned b = rpc_conntab_bucket(a->ca_addr, a->ca_family);
		struct rpc_conntab_addr **pp = &t->ct_buckets[b];
		while (*pp != a)
			pp = &(*pp)->ca_chain;
		*pp = a->ca_chain;
		mem_free(a);
	}
	pthread_mutex_unlock(&t->ct_lock);
}

void rpc_conntab_counts(struct rpc_conntab *t, const struct sockaddr_storage *peer,
			unsigned *total_out, unsigned *of_addr_out, unsigned *evicted_out)
{
	pthread_mutex_lock(&t->ct_lock);
	*total_out = t->ct_count;
	*evicted_out = t->ct_evicted_total;
	*of_addr_out = 0;
	if (peer) {
		uint8_t addr[16];
		uint16_t family;
		rpc_conntab_key(peer, addr, &family);
		const struct rpc_conntab_addr *a = rpc_conntab_find(t, addr, family);
		*of_addr_out = a ? a->ca_count : 0;
	}
	pthread_mutex_unlock(&t->ct_lock);
}
