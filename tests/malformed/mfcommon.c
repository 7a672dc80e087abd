/* mfcommon.c: server set-up and health checks shared by the malformed-input tests. */
#include "mfcommon.h"

#include <stdio.h>
#include <string.h>

int mf_start(struct mf_target *t)
{
	memset(t, 0, sizeof(*t));
	const char *lines[] = { "%s *(rw,insecure,no_root_squash)" };
	if (ts_start(&t->mt_srv, lines, 1) != 0)
		return -1;
	int st = rr_mount(t->mt_srv.ts_port, t->mt_srv.ts_export_path[0], t->mt_root, &t->mt_root_len);
	if (st != 0) {
		printf("# MNT of the export failed: %d\n", st);
		ts_stop(&t->mt_srv);
		return -1;
	}
	t->mt_rss_start_kib = ts_rss_kib(&t->mt_srv);
	t->mt_rss_slack_kib = ts_under_asan(&t->mt_srv) ? MF_RSS_SLACK_ASAN_KIB : MF_RSS_SLACK_KIB;
	printf("# server pid %d port %u, VmRSS at start %ld KiB, allowed growth %ld KiB\n",
	       (int)t->mt_srv.ts_pid, t->mt_srv.ts_port, t->mt_rss_start_kib, t->mt_rss_slack_kib);
	return 0;
}

bool mf_check_health(struct mf_target *t, const char *after)
{
	bool alive = ts_alive(&t->mt_srv);
	bool answers = alive && rr_server_healthy(t->mt_srv.ts_port, t->mt_root, t->mt_root_len);
	long rss = alive ? ts_rss_kib(&t->mt_srv) : -1;
	bool rss_ok = rss > 0 && rss < t->mt_rss_start_kib + t->mt_rss_slack_kib;
	if (!alive || !answers || !rss_ok)
		printf("#   after %s: alive=%d answers=%d VmRSS=%ld KiB (start %ld)\n", after, alive,
		       answers, rss, t->mt_rss_start_kib);
	if (!alive)
		ts_dump_log(&t->mt_srv, 20);
	else
		printf("#   after %s: VmRSS %ld KiB (start %ld)\n", after, rss, t->mt_rss_start_kib);
	return alive && answers && rss_ok;
}

void mf_rng_seed(struct mf_rng *r, uint64_t seed)
{
	r->mr_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

uint64_t mf_rng_next(struct mf_rng *r)
{
	uint64_t x = r->mr_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->mr_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

uint32_t mf_rng_below(struct mf_rng *r, uint32_t bound)
{
	return (uint32_t)((mf_rng_next(r) >> 32) % bound);
}

void mf_rng_fill(struct mf_rng *r, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len > 0) {
		uint64_t v = mf_rng_next(r);
		size_t n = len < 8 ? len : 8;
		memcpy(p, &v, n);
		p += n;
		len -= n;
	}
}
