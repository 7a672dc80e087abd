/* fuzz_pool_recv.c: libFuzzer target for shale receive (src/poolfs/pool_fs_send.c): a stream is
 * hostile bytes from outside the pool, applied to a pool made on a memory leaf at the first
 * input.
 *
 * Input: byte 0 says how; the rest is the stream. Bit 0: the records' sequence numbers and
 * checksums are made right first (the input read as header, payload, checksum records), so that
 * mutations reach the parsing behind them. Bit 1: the stream is received as an incremental one
 * into the file system "inc", its first record given the GUID of inc's snapshot as its base;
 * else as a full one into "fz". Checks beyond "no crash, no leak": a refused stream leaves
 * nothing behind ("fz" absent, "inc" at its snapshot), and an accepted one is undone for the next
 * input (its snapshot and file system destroyed, or "inc" rolled back). The seeds are streams
 * made by hand to the format's table (docs/design.md): a full one with a metadata entry, an
 * inode and an extent with its block, the same as version 2 with the block as stored (a zstd
 * frame; send -c), and an incremental one that removes and puts. */
#include <sys/mman.h>
#include <unistd.h>

#include "base/xxh.h"
#include "fuzz.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"

/* A broken promise: says which, then stops the run (a crash the fuzzer saves). */
#define FUZZ_FAIL(...)                                                                             \
	do {                                                                                       \
		fprintf(stderr, "fuzz_pool_recv: " __VA_ARGS__);                                   \
		fprintf(stderr, "\n");                                                            \
		__builtin_trap();                                                                  \
	} while (0)

struct fuzz_find {
	const char *ff_name;
	uint64_t ff_id;
};

static int fuzz_find_one(void *arg, const struct pool_ds_info *di)
{
	struct fuzz_find *ff = arg;
	if (strcmp(di->di_name, ff->ff_name) == 0)
		ff->ff_id = di->di_id;
	return 0;
}

/* The one snapshot of file system name. */
static struct pool_snap_entry fuzz_only_snapshot(struct pool *p, const char *name)
{
	struct fuzz_find ff = {name, 0};
	struct pool_snap_entry *ents = NULL, one;
	size_t n = 0;
	if (pool_ds_list(p, fuzz_find_one, &ff) != 0 || ff.ff_id == 0 ||
	    pool_snap_entries(p, ff.ff_id, &ents, &n) != 0 || n != 1)
		FUZZ_FAIL("%s has not one snapshot", name);
	one = ents[0];
	mem_free(ents);
	return one;
}

static struct pool *fuzz_pool(uint64_t *base_guid)
{
	static struct pool *p;
	static uint64_t guid;
	if (!p) {
		struct blk_dev *d = NULL;
		struct pool_open_opts o = {.po_attach = pool_fs_attach, .po_txg_interval_ms = 60000};
		struct pool_create_args a = {.pc_name = "fuzz", .pc_opts = &o};
		const char *snap = "inc@b";
		char err[256];
		if (blk_dev_create_mem(128u << 20, &d) != 0 ||
		    pool_create_on_devs(&a, &d, 1, NULL, 0, &p) != 0 ||
		    pool_ds_create(p, "inc", NULL) != 0 ||
		    pool_snapshot_create(p, &snap, 1, err, sizeof(err)) != 0)
			__builtin_trap();
		guid = fuzz_only_snapshot(p, "inc").se_guid; /* the incremental inputs' base */
	}
	*base_guid = guid;
	return p;
}

static void put_le(uint8_t *b, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *b, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = n; i-- > 0;)
		v = (v << 8) | b[i];
	return v;
}

/* Makes the sequence numbers and checksums of the records in s (len bytes) right, as far as
 * they parse. */
static void fix_records(uint8_t *s, size_t len)
{
	uint32_t seq = 0;
	size_t at = 0;
	while (at + 16 + 8 <= len) {
		uint32_t n = (uint32_t)get_le(s + at + 12, 4);
		if (n > len - at - 24)
			break;
		put_le(s + at + 8, seq++, 4);
		put_le(s + at + 16 + n, XXH3_64bits(s + at, 16 + n), 8);
		at += 24 + (size_t)n;
	}
}

/* Whether "fz" is absent and "inc" has one snapshot and nothing else: as before every input. */
static int fuzz_ds_one(void *arg, const struct pool_ds_info *di)
{
	int *state = arg;
	if (strcmp(di->di_name, "fz") == 0)
		*state |= 1;
	if (strcmp(di->di_name, "inc") == 0 && (di->di_snapshots != 1 || di->di_receiving))
		*state |= 2;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (4u << 20))
		return 0;
	uint64_t base_guid;
	struct pool *p = fuzz_pool(&base_guid);
	uint8_t how = data[0];
	bool incremental = (how & 2) != 0;
	uint8_t *s = malloc(size);
	if (!s)
		return 0;
	size_t len = size - 1;
	memcpy(s, data + 1, len);
	if (incremental && len >= 16 + 24) {
		put_le(s + 16 + 4, 2, 4);
		put_le(s + 16 + 16, base_guid, 8);
	}
	if (how & 1)
		fix_records(s, len);
	int fd = memfd_create("stream", 0);
	if (fd < 0 || sh_write_all(fd, s, len) != 0 || lseek(fd, 0, SEEK_SET) != 0)
		__builtin_trap();
	free(s);
	char err[512] = "";
	struct pool_fs_recv_stats st;
	const char *fs = incremental ? "inc" : "fz";
	int rc = pool_fs_receive(p, fs, false, fd, &st, err, sizeof(err));
	close(fd);
	if (rc == 0) {
		/* undone for the next input */
		if (incremental) {
			if (pool_fs_rollback(p, "inc@b", true, err, sizeof(err)) != 0)
				FUZZ_FAIL("rollback after an accepted stream: %s", err);
		} else {
			/* its one snapshot, then the file system */
			char name[POOL_SNAP_FULL_MAX + 8];
			snprintf(name, sizeof(name), "fz@%s", fuzz_only_snapshot(p, "fz").se_name);
			if (pool_snapshot_destroy(p, name, err, sizeof(err)) != 0 ||
			    pool_ds_destroy(p, "fz") != 0)
				FUZZ_FAIL("removing an accepted stream's file system: %s", err);
		}
	}
	int state = 0;
	if (pool_ds_list(p, fuzz_ds_one, &state) != 0 || state != 0)
		FUZZ_FAIL("something of the input stayed (%d; the receive said %d: %s)", state, rc,
		          err); /* 1: fz, 2: inc changed */
	return 0;
}

/* ---- seeds: streams made by hand to the format ---- */

struct seed_stream {
	uint8_t ss_buf[16384];
	size_t ss_len;
	uint32_t ss_seq;
	uint64_t ss_puts, ss_dels, ss_data;
};

static void seed_record(struct seed_stream *ss, unsigned type, const uint8_t *pl, uint32_t n)
{
	uint8_t *r = ss->ss_buf + ss->ss_len;
	put_le(r, 0x53524853u, 4);
	put_le(r + 4, type, 2);
	put_le(r + 6, 0, 2);
	put_le(r + 8, ss->ss_seq++, 4);
	put_le(r + 12, n, 4);
	memcpy(r + 16, pl, n);
	put_le(r + 16 + n, XXH3_64bits(r, 16 + n), 8);
	ss->ss_len += 24 + n;
}

static void seed_begin(struct seed_stream *ss, uint32_t kind, uint64_t guid, const char *name)
{
	uint8_t pl[64] = {0};
	size_t m = strlen(name);
	put_le(pl, 1, 4);
	put_le(pl + 4, kind, 4);
	put_le(pl + 8, guid, 8);
	put_le(pl + 16, kind == 2 ? 1 : 0, 8); /* the harness puts the real base in */
	put_le(pl + 24, 1700000000000000000ull, 8);
	put_le(pl + 32, 131072, 4);
	pl[36] = 1;
	pl[37] = (uint8_t)m;
	memcpy(pl + 48, name, m);
	seed_record(ss, 1, pl, (uint32_t)(48 + m));
}

static void seed_put(struct seed_stream *ss, const uint8_t *key, uint32_t k, const uint8_t *val,
                     uint32_t v, uint32_t d)
{
	uint8_t pl[8192];
	put_le(pl, k, 2);
	put_le(pl + 2, v, 2);
	put_le(pl + 4, d, 4);
	memcpy(pl + 8, key, k);
	memcpy(pl + 8 + k, val, v);
	for (uint32_t i = 0; i < d; i++)
		pl[8 + k + v + i] = (uint8_t)(i * 7 + 1);
	seed_record(ss, 2, pl, 8 + k + v + d);
	ss->ss_puts++;
	ss->ss_data += d;
}

static void seed_end(struct seed_stream *ss)
{
	uint8_t pl[24];
	put_le(pl, ss->ss_puts, 8);
	put_le(pl + 8, ss->ss_dels, 8);
	put_le(pl + 16, ss->ss_data, 8);
	seed_record(ss, 4, pl, 24);
}

static void fuzz_write_seeds(const char *dir)
{
	static struct seed_stream ss;
	uint8_t meta[9] = {0}, inode[9] = {0, 0, 0, 0, 0, 0, 0, 2, 1}, extent[17] = {0};
	uint8_t val[64] = {0};
	extent[7] = 2;
	extent[8] = 3;
	/* full: bit 0 clear (checksums as made), bit 1 clear (full) */
	memset(&ss, 0, sizeof(ss));
	ss.ss_buf[0] = 0;
	ss.ss_len = 1;
	seed_begin(&ss, 1, 0x1234567890abcdefull, "seeded");
	memset(val, 0x11, 40);
	seed_put(&ss, meta, sizeof(meta), val, 40, 0);
	seed_put(&ss, inode, sizeof(inode), val, 48, 0);
	memset(val, 0, sizeof(val));
	seed_put(&ss, extent, sizeof(extent), val, 64, 4096);
	seed_end(&ss);
	/* the harness reads byte 0 as "how" and the rest as the stream */
	fuzz_seed(dir, "full", ss.ss_buf, ss.ss_len);
	/* incremental: a put and a removal of a key the base lacks (refused: not its base) */
	memset(&ss, 0, sizeof(ss));
	ss.ss_buf[0] = 3;
	ss.ss_len = 1;
	seed_begin(&ss, 2, 0x2234567890abcdefull, "next");
	memset(val, 0x22, 40);
	seed_put(&ss, meta, sizeof(meta), val, 40, 0);
	uint8_t del[16];
	put_le(del, sizeof(inode), 2);
	memcpy(del + 2, inode, sizeof(inode));
	seed_record(&ss, 3, del, (uint32_t)(2 + sizeof(inode)));
	ss.ss_dels++;
	seed_end(&ss);
	fuzz_seed(dir, "incremental", ss.ss_buf, ss.ss_len);
}
