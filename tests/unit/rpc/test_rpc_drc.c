/* test_rpc_drc.c: the duplicate request cache: a completed call replays its original bytes, one
 * in progress is reported as such, different arguments miss, LRU eviction, TCP keys ignore the
 * client port while UDP keys include it. */
#include <arpa/inet.h>
#include <string.h>

#include "rpc/rpc_impl.h"
#include "tap.h"

static void make_peer(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *sin = (struct sockaddr_in *)(void *)ss;
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	VERIFY(inet_pton(AF_INET, ip, &sin->sin_addr) == 1);
}

static enum rpc_drc_state begin(struct rpc_drc *drc, const struct rpc_drc_key *key, uint8_t **reply,
				size_t *len)
{
	enum rpc_drc_state st = RPC_DRC_MISS;
	int rc = rpc_drc_begin(drc, key, &st, reply, len);
	CHECK(rc == 0);
	return st;
}

static void drc_hit_returns_original_bytes(void)
{
	struct rpc_drc *drc;
	CHECK(rpc_drc_create(64, &drc) == 0);
	struct sockaddr_storage peer;
	make_peer(&peer, "10.0.0.1", 900);
	struct rpc_drc_key key;
	rpc_drc_key_init(&key, &peer, RPC_TCP, 42, 100003, 3, 8, "args", 4);
	uint8_t *reply;
	size_t len;
	CHECK(begin(drc, &key, &reply, &len) == RPC_DRC_MISS);
	CHECK(begin(drc, &key, &reply, &len) == RPC_DRC_IN_PROGRESS);
	CHECK(reply == NULL);
	struct iovec iov[2] = {{"head-", 5}, {"body", 4}};
	rpc_drc_complete(drc, &key, iov, 2);
	CHECK(begin(drc, &key, &reply, &len) == RPC_DRC_DONE);
	CHECK(reply && len == 9 && memcmp(reply, "head-body", 9) == 0);
	mem_free(reply);
	/* Same xid, different arguments: a different call. */
	struct rpc_drc_key other;
	rpc_drc_key_init(&other, &peer, RPC_TCP, 42, 100003, 3, 8, "argz", 4);
	CHECK(begin(drc, &other, &reply, &len) == RPC_DRC_MISS);
	/* Abandoned: the next attempt is a fresh miss. */
	rpc_drc_abandon(drc, &other);
	CHECK(begin(drc, &other, &reply, &len) == RPC_DRC_MISS);
	rpc_drc_destroy(drc);
}

static void drc_key_port_rules(void)
{
	struct rpc_drc *drc;
	CHECK(rpc_drc_create(64, &drc) == 0);
	struct sockaddr_storage a, b;
	make_peer(&a, "10.0.0.2", 800);
	make_peer(&b, "10.0.0.2", 801);
	struct rpc_drc_key ka, kb;
	uint8_t *reply;
	size_t len;
	/* TCP: a retransmission over a new connection (new port) still hits. */
	rpc_drc_key_init(&ka, &a, RPC_TCP, 7, 1, 1, 1, "x", 1);
	rpc_drc_key_init(&kb, &b, RPC_TCP, 7, 1, 1, 1, "x", 1);
	CHECK(begin(drc, &ka, &reply, &len) == RPC_DRC_MISS);
	CHECK(begin(drc, &kb, &reply, &len) == RPC_DRC_IN_PROGRESS);
	/* UDP: another port is another client. */
	rpc_drc_key_init(&ka, &a, RPC_UDP, 7, 1, 1, 1, "x", 1);
	rpc_drc_key_init(&kb, &b, RPC_UDP, 7, 1, 1, 1, "x", 1);
	CHECK(begin(drc, &ka, &reply, &len) == RPC_DRC_MISS);
	CHECK(begin(drc, &kb, &reply, &len) == RPC_DRC_MISS);
	/* Another address. */
	make_peer(&b, "10.0.0.3", 800);
	rpc_drc_key_init(&kb, &b, RPC_UDP, 7, 1, 1, 1, "x", 1);
	CHECK(begin(drc, &kb, &reply, &len) == RPC_DRC_MISS);
	rpc_drc_destroy(drc);
}

static void drc_lru_eviction(void)
{
	enum { CAP = 8 };
	struct rpc_drc *drc;
	CHECK(rpc_drc_create(CAP, &drc) == 0);
	struct sockaddr_storage peer;
	make_peer(&peer, "10.0.0.4", 700);
	struct rpc_drc_key keys[CAP + 1];
	uint8_t *reply;
	size_t len;
	struct iovec iov = {"r", 1};
	for (uint32_t i = 0; i < CAP; i++) {
		rpc_drc_key_init(&keys[i], &peer, RPC_UDP, i, 1, 1, 1, NULL, 0);
		CHECK(begin(drc, &keys[i], &reply, &len) == RPC_DRC_MISS);
		rpc_drc_complete(drc, &keys[i], &iov, 1);
	}
	CHECK(rpc_drc_count(drc) == CAP);
	/* Touch the oldest so that key 1 becomes the least recently used. */
	CHECK(begin(drc, &keys[0], &reply, &len) == RPC_DRC_DONE);
	mem_free(reply);
	rpc_drc_key_init(&keys[CAP], &peer, RPC_UDP, CAP, 1, 1, 1, NULL, 0);
	CHECK(begin(drc, &keys[CAP], &reply, &len) == RPC_DRC_MISS);
	CHECK(rpc_drc_count(drc) == CAP);
	CHECK(begin(drc, &keys[0], &reply, &len) == RPC_DRC_DONE); /* kept: recently used */
	mem_free(reply);
	CHECK(begin(drc, &keys[2], &reply, &len) == RPC_DRC_DONE);
	mem_free(reply);
	/* Key 1 was evicted: asking again is a miss (and inserts it, evicting the next LRU). */
	CHECK(begin(drc, &keys[1], &reply, &len) == RPC_DRC_MISS);
	CHECK(rpc_drc_count(drc) == CAP);
	rpc_drc_destroy(drc);
}

static void drc_large_capacity_bounded(void)
{
	struct rpc_drc *drc;
	CHECK(rpc_drc_create(1024, &drc) == 0);
	struct sockaddr_storage peer;
	make_peer(&peer, "10.0.0.5", 1);
	uint8_t *reply;
	size_t len;
	for (uint32_t i = 0; i < 5000; i++) {
		struct rpc_drc_key k;
		rpc_drc_key_init(&k, &peer, RPC_TCP, i, 1, 1, 1, &i, sizeof(i));
		CHECK(begin(drc, &k, &reply, &len) == RPC_DRC_MISS);
	}
	unsigned n = rpc_drc_count(drc);
	CHECKF(n <= 1024 + 16 && n >= 512, "count %u", n);
	rpc_drc_destroy(drc);
}

int main(void)
{
	TAP_RUN(drc_hit_returns_original_bytes);
	TAP_RUN(drc_key_port_rules);
	TAP_RUN(drc_lru_eviction);
	TAP_RUN(drc_large_capacity_bounded);
	return tap_finish();
}
