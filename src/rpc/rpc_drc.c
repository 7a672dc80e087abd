/* rpc_drc.c: the duplicate request cache for non-idempotent procedures.
 *
 * Problem: a client that does not get a reply in time retransmits the call with the same xid. For
 * an idempotent procedure executing it twice is harmless; for CREATE, REMOVE, RENAME, WRITE...
 * the second execution can return a wrong error (REMOVE: NOENT after it succeeded) or redo work.
 * The cache remembers recent non-idempotent calls so a retransmission is answered with the
 * original reply bytes, or dropped while the original is still running.
 *
 * Key: client address, transport, xid, program, version, procedure and a 64-bit hash of the
 * argument bytes (so an unrelated call that happens to reuse an xid is a miss, not a wrong
 * replay). The client's source port is part of the key on UDP only:
 *   - over TCP a client retransmits after the connection broke, typically on a new connection
 *     from a new source port, so the port must not be part of the key or the retransmission
 *     would miss; the xid plus argument hash separates the calls of different processes on one
 *     host well enough;
 *   - over UDP each client socket keeps its port for its whole life and retransmits from it,
 *     while several independent clients on one host (one port each) may pick the same xid, so
 *     the port keeps them apart.
 *
 * Structure: up to RPC_DRC_SHARDS shards (fewer for a small cache, so that a tiny cache is one
 * exact LRU) chosen by the key's hash, each with its own mutex, a chained
 * hash table and an LRU list. Only non-idempotent calls touch the cache, so a lock per shard is
 * cheap and idempotent traffic never takes it. Each shard holds at most capacity / shards entries
 * (at least one); inserting into a full shard evicts its least recently used entry, whatever its
 * state (an evicted in-progress entry just means its later completion finds nothing to update).
 *
 * Entry states: IN_PROGRESS (inserted by rpc_drc_begin on a miss) -> DONE (rpc_drc_complete stored
 * the reply) or removed (rpc_drc_abandon, eviction). A lookup hit moves the entry to the LRU head.
 * The stored reply is a private copy owned by the entry; begin hands out a further copy so the
 * shard lock is never held while sending. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "rpc/rpc_impl.h"

#define RPC_DRC_SHARDS 16u /* at most; a power of two, enough that cores rarely contend */
#define RPC_DRC_MIN_PER_SHARD 64u /* below this per shard, fewer shards (exact LRU when small) */

struct rpc_drc_entry {
	struct rpc_drc_key rde_key;
	uint64_t rde_hash;
	enum rpc_drc_state rde_state;
	uint8_t *rde_reply;
	size_t rde_reply_len;
	struct rpc_drc_entry *rde_chain; /* hash bucket chain */
	struct rpc_drc_entry *rde_prev;  /* LRU list: head = most recent */
	struct rpc_drc_entry *rde_next;
};

struct rpc_drc_shard {
	pthread_mutex_t rds_lock; /* protects everything below */
	struct rpc_drc_entry **rds_buckets;
	unsigned rds_nbuckets; /* a power of two */
	unsigned rds_count;
	unsigned rds_capacity;
	struct rpc_drc_entry *rds_lru_head;
	struct rpc_drc_entry *rds_lru_tail;
};

struct rpc_drc {
	unsigned rd_nshards; /* a power of two <= RPC_DRC_SHARDS */
	struct rpc_drc_shard rd_shards[RPC_DRC_SHARDS];
};

void rpc_drc_key_init(struct rpc_drc_key *key, const struct sockaddr_storage *peer,
		      enum rpc_transport transport, uint32_t xid, uint32_t prog, uint32_t vers,
		      uint32_t proc, const void *args, size_t args_len)
{
	memset(key, 0, sizeof(*key)); /* padding too: the key is hashed and compared as bytes */
	key->rdk_family = peer->ss_family;
	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)peer;
		memcpy(key->rdk_addr, &sin->sin_addr, 4);
		key->rdk_port = ntohs(sin->sin_port);
	} else if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)peer;
		memcpy(key->rdk_addr, &sin6->sin6_addr, 16);
		key->rdk_port = ntohs(sin6->sin6_port);
	}
	if (transport != RPC_UDP)
		key->rdk_port = 0; /* see the header comment */
	key->rdk_transport = (uint32_t)transport;
	key->rdk_xid = xid;
	key->rdk_prog = prog;
	key->rdk_vers = vers;
	key->rdk_proc = proc;
	key->rdk_args_hash = sh_hash64(args, args_len, 0x5348414c45445243ull /* "SHALEDRC" */);
}

int rpc_drc_create(unsigned capacity, struct rpc_drc **out)
{
	if (capacity == 0)
		capacity = 1;
	struct rpc_drc *drc = mem_zalloc(sizeof(*drc));
	if (!drc)
		return -ENOMEM;
	unsigned nshards = 1;
	while (nshards < RPC_DRC_SHARDS && capacity / (nshards * 2) >= RPC_DRC_MIN_PER_SHARD)
		nshards *= 2;
	drc->rd_nshards = nshards;
	unsigned per_shard = (capacity + nshards - 1) / nshards;
	unsigned nbuckets = 1;
	while (nbuckets < per_shard)
		nbuckets <<= 1;
	unsigned i;
	for (i = 0; i < nshards; i++) {
		struct rpc_drc_shard *sh = &drc->rd_shards[i];
		sh->rds_buckets = mem_zalloc(nbuckets * sizeof(*sh->rds_buckets));
		if (!sh->rds_buckets)
			goto out_free_shards;
		sh->rds_nbuckets = nbuckets;
		sh->rds_capacity = per_shard;
		VERIFY(pthread_mutex_init(&sh->rds_lock, NULL) == 0);
	}
	*out = drc;
	return 0;
out_free_shards:
	while (i-- > 0) {
		pthread_mutex_destroy(&drc->rd_shards[i].rds_lock);
		mem_free(drc->rd_shards[i].rds_buckets);
	}
	mem_free(drc);
	return -ENOMEM;
}

void rpc_drc_destroy(struct rpc_drc *drc)
{
	if (!drc)
		return;
	for (unsigned i = 0; i < drc->rd_nshards; i++) {
		struct rpc_drc_shard *sh = &drc->rd_shards[i];
		struct rpc_drc_entry *e = sh->rds_lru_head;
		while (e) {
			struct rpc_drc_entry *next = e->rde_next;
			mem_free(e->rde_reply);
			mem_free(e);
			e = next;
		}
		pthread_mutex_destroy(&sh->rds_lock);
		mem_free(sh->rds_buckets);
	}
	mem_free(drc);
}

static uint64_t rpc_drc_hash(const struct rpc_drc_key *key)
{
	return sh_hash64(key, sizeof(*key), 0);
}

static struct rpc_drc_shard *rpc_drc_shard_of(struct rpc_drc *drc, uint64_t hash)
{
	return &drc->rd_shards[(hash >> 60) & (drc->rd_nshards - 1)];
}

static void rpc_drc_lru_unlink(struct rpc_drc_shard *sh, struct rpc_drc_entry *e)
{
	if (e->rde_prev)
		e->rde_prev->rde_next = e->rde_next;
	else
		sh->rds_lru_head = e->rde_next;
	if (e->rde_next)
		e->rde_next->rde_prev = e->rde_prev;
	else
		sh->rds_lru_tail = e->rde_prev;
	e->rde_prev = e->rde_next = NULL;
}

static void rpc_drc_lru_push(struct rpc_drc_shard *sh, struct rpc_drc_entry *e)
{
	e->rde_prev = NULL;
	e->rde_next = sh->rds_lru_head;
	if (sh->rds_lru_head)
		sh->rds_lru_head->rde_prev = e;
	else
		sh->rds_lru_tail = e;
	sh->rds_lru_head = e;
}

/* Finds the entry; *link_out receives the chain link pointing at it (for removal). */
static struct rpc_drc_entry *rpc_drc_find(struct rpc_drc_shard *sh, const struct rpc_drc_key *key,
					  uint64_t hash, struct rpc_drc_entry ***link_out)
{
	struct rpc_drc_entry **link = &sh->rds_buckets[hash & (sh->rds_nbuckets - 1)];
	for (; *link; link = &(*link)->rde_chain) {
		struct rpc_drc_entry *e = *link;
		if (e->rde_hash == hash && memcmp(&e->rde_key, key, sizeof(*key)) == 0) {
			if (link_out)
				*link_out = link;
			return e;
		}
	}
	return NULL;
}

static void rpc_drc_remove(struct rpc_drc_shard *sh, struct rpc_drc_entry *e)
{
	struct rpc_drc_entry **link;
	struct rpc_drc_entry *found = rpc_drc_find(sh, &e->rde_key, e->rde_hash, &link);
	VERIFY(found == e);
	*link = e->rde_chain;
	rpc_drc_lru_unlink(sh, e);
	sh->rds_count--;
	mem_free(e->rde_reply);
	mem_free(e);
}

int rpc_drc_begin(struct rpc_drc *drc, const struct rpc_drc_key *key, enum rpc_drc_state *state_out,
		  uint8_t **reply_out, size_t *reply_len_out)
{
	uint64_t hash = rpc_drc_hash(key);
	struct rpc_drc_shard *sh = rpc_drc_shard_of(drc, hash);
	int rc = 0;
	*reply_out = NULL;
	*reply_len_out = 0;
	pthread_mutex_lock(&sh->rds_lock);
	struct rpc_drc_entry *e = rpc_drc_find(sh, key, hash, NULL);
	if (e) {
		rpc_drc_lru_unlink(sh, e);
		rpc_drc_lru_push(sh, e);
		*state_out = e->rde_state;
		if (e->rde_state == RPC_DRC_DONE) {
			uint8_t *copy = mem_alloc(e->rde_reply_len);
			if (copy) {
				memcpy(copy, e->rde_reply, e->rde_reply_len);
				*reply_out = copy;
				*reply_len_out = e->rde_reply_len;
			} else {
				/* Cannot replay now; dropping lets the client retransmit later. */
				*state_out = RPC_DRC_IN_PROGRESS;
			}
		}
		goto out_unlock;
	}
	e = mem_zalloc(sizeof(*e));
	if (!e) {
		rc = -ENOMEM;
		goto out_unlock;
	}
	if (sh->rds_count >= sh->rds_capacity)
		rpc_drc_remove(sh, sh->rds_lru_tail);
	e->rde_key = *key;
	e->rde_hash = hash;
	e->rde_state = RPC_DRC_IN_PROGRESS;
	size_t b = hash & (sh->rds_nbuckets - 1);
	e->rde_chain = sh->rds_buckets[b];
	sh->rds_buckets[b] = e;
	rpc_drc_lru_push(sh, e);
	sh->rds_count++;
	*state_out = RPC_DRC_MISS;
out_unlock:
	pthread_mutex_unlock(&sh->rds_lock);
	return rc;
}

void rpc_drc_complete(struct rpc_drc *drc, const struct rpc_drc_key *key, const struct iovec *iov,
		      unsigned iovcnt)
{
	size_t len = 0;
	for (unsigned i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	uint8_t *copy = NULL;
	if (len <= RPC_DRC_MAX_REPLY_BYTES) {
		copy = mem_alloc(len ? len : 1);
		if (copy) {
			size_t off = 0;
			for (unsigned i = 0; i < iovcnt; i++) {
				if (iov[i].iov_len)
					memcpy(copy + off, iov[i].iov_base, iov[i].iov_len);
				off += iov[i].iov_len;
			}
		}
	}
	uint64_t hash = rpc_drc_hash(key);
	struct rpc_drc_shard *sh = rpc_drc_shard_of(drc, hash);
	pthread_mutex_lock(&sh->rds_lock);
	struct rpc_drc_entry *e = rpc_drc_find(sh, key, hash, NULL);
	if (e && copy) {
		mem_free(e->rde_reply);
		e->rde_reply = copy;
		e->rde_reply_len = len;
		e->rde_state = RPC_DRC_DONE;
		copy = NULL;
	} else if (e) {
		/* Too large or no memory: forget the call rather than replay something else. */
		rpc_drc_remove(sh, e);
	}
	pthread_mutex_unlock(&sh->rds_lock);
	mem_free(copy);
}

void rpc_drc_abandon(struct rpc_drc *drc, const struct rpc_drc_key *key)
{
	uint64_t hash = rpc_drc_hash(key);
	struct rpc_drc_shard *sh = rpc_drc_shard_of(drc, hash);
	pthread_mutex_lock(&sh->rds_lock);
	struct rpc_drc_entry *e = rpc_drc_find(sh, key, hash, NULL);
	if (e && e->rde_state == RPC_DRC_IN_PROGRESS)
		rpc_drc_remove(sh, e);
	pthread_mutex_unlock(&sh->rds_lock);
}

unsigned rpc_drc_count(struct rpc_drc *drc)
{
	unsigned n = 0;
	for (unsigned i = 0; i < drc->rd_nshards; i++) {
		struct rpc_drc_shard *sh = &drc->rd_shards[i];
		pthread_mutex_lock(&sh->rds_lock);
		n += sh->rds_count;
		pthread_mutex_unlock(&sh->rds_lock);
	}
	return n;
}
