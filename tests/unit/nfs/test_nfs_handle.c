/* test_nfs_handle.c: file handle encoding and verification, and the SipHash-2-4 MAC. */
#include <errno.h>
#include <string.h>

#include "nfs/nfs_impl.h"
#include "tap.h"

static void key_from(uint8_t first, struct nfs_handle_key *key)
{
	uint8_t bytes[NFS_HANDLE_KEY_LEN];
	for (unsigned i = 0; i < sizeof(bytes); i++)
		bytes[i] = (uint8_t)(first + i);
	nfs_handle_key_init(key, bytes);
}

static void test_siphash_vector(void)
{
	/* SipHash paper, appendix A: key 00..0f, message 00..0e */
	struct nfs_handle_key key;
	key_from(0, &key);
	uint8_t msg[15];
	for (unsigned i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)i;
	CHECK(nfs_siphash24(&key, msg, sizeof(msg)) == 0xa129ca6149be45e5ull);
	/* empty message, from the reference implementation's vector table */
	CHECK(nfs_siphash24(&key, msg, 0) == 0x726fdb47dd0e0e31ull);
}

static void make_obj(struct fs_obj_id *obj, unsigned len)
{
	obj->foi_len = (uint8_t)len;
	for (unsigned i = 0; i < len; i++)
		obj->foi_bytes[i] = (uint8_t)(0xa0 + i * 7);
}

static void test_round_trip(void)
{
	struct nfs_handle_key key;
	key_from(1, &key);
	static const unsigned lens[] = {0, 1, 8, 16, 39, FS_OBJ_ID_MAX};
	for (size_t i = 0; i < SH_ARRAY_SIZE(lens); i++) {
		struct fs_obj_id obj, back;
		make_obj(&obj, lens[i]);
		struct nfs_fh fh;
		nfs_handle_encode(&key, 0x1122334455667788ull + i, &obj, &fh);
		CHECK(fh.nf_len == NFS_FH_MIN_LEN + lens[i]);
		CHECK(fh.nf_len <= NFS3_FHSIZE);
		CHECK(fh.nf_bytes[0] == NFS_FH_VERSION && fh.nf_bytes[1] == lens[i]);
		uint64_t fsid = 0;
		memset(&back, 0, sizeof(back));
		CHECK(nfs_handle_decode(&key, fh.nf_bytes, fh.nf_len, &fsid, &back) == 0);
		CHECK(fsid == 0x1122334455667788ull + i);
		CHECK(back.foi_len == obj.foi_len &&
		      memcmp(back.foi_bytes, obj.foi_bytes, obj.foi_len) == 0);
	}
	CHECK(NFS_FH_MAX_LEN <= NFS3_FHSIZE);
}

static void test_altered_bytes(void)
{
	struct nfs_handle_key key;
	key_from(2, &key);
	struct fs_obj_id obj, out;
	make_obj(&obj, 24);
	struct nfs_fh fh;
	nfs_handle_encode(&key, 77, &obj, &fh);
	unsigned rejected = 0;
	for (uint32_t i = 0; i < fh.nf_len; i++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			struct nfs_fh bad = fh;
			bad.nf_bytes[i] ^= (uint8_t)(1u << bit);
			uint64_t fsid;
			if (nfs_handle_decode(&key, bad.nf_bytes, bad.nf_len, &fsid, &out) ==
			    -SH_EBADHANDLE)
				rejected++;
		}
	}
	CHECKF(rejected == fh.nf_len * 8u, "%u of %u flips rejected", rejected, fh.nf_len * 8u);
}

static void test_other_key_and_lengths(void)
{
	struct nfs_handle_key key, other;
	key_from(3, &key);
	key_from(4, &other);
	struct fs_obj_id obj, out;
	make_obj(&obj, 12);
	struct nfs_fh fh;
	nfs_handle_encode(&key, 5, &obj, &fh);
	uint64_t fsid;
	CHECK(nfs_handle_decode(&key, fh.nf_bytes, fh.nf_len, &fsid, &out) == 0);
	CHECK(nfs_handle_decode(&other, fh.nf_bytes, fh.nf_len, &fsid, &out) == -SH_EBADHANDLE);

	/* truncated and extended by one byte */
	CHECK(nfs_handle_decode(&key, fh.nf_bytes, fh.nf_len - 1, &fsid, &out) == -SH_EBADHANDLE);
	uint8_t longer[128];
	memset(longer, 0, sizeof(longer));
	memcpy(longer, fh.nf_bytes, fh.nf_len);
	CHECK(nfs_handle_decode(&key, longer, fh.nf_len + 1, &fsid, &out) == -SH_EBADHANDLE);
	CHECK(nfs_handle_decode(&key, longer, 65, &fsid, &out) == -SH_EBADHANDLE);
	CHECK(nfs_handle_decode(&key, longer, sizeof(longer), &fsid, &out) == -SH_EBADHANDLE);
	CHECK(nfs_handle_decode(&key, longer, 0, &fsid, &out) == -SH_EBADHANDLE);
	CHECK(nfs_handle_decode(&key, longer, NFS_FH_MIN_LEN - 1, &fsid, &out) == -SH_EBADHANDLE);

	/* a length byte claiming more than FS_OBJ_ID_MAX, even with a matching total length */
	uint8_t forged[NFS3_FHSIZE];
	memset(forged, 0, sizeof(forged));
	forged[0] = NFS_FH_VERSION;
	forged[1] = FS_OBJ_ID_MAX + 1;
	CHECK(nfs_handle_decode(&key, forged, NFS_FH_MIN_LEN + FS_OBJ_ID_MAX + 1, &fsid, &out) ==
	      -SH_EBADHANDLE);
	/* an all-zero handle of a plausible length */
	memset(forged, 0, sizeof(forged));
	forged[0] = NFS_FH_VERSION;
	CHECK(nfs_handle_decode(&key, forged, NFS_FH_MIN_LEN, &fsid, &out) == -SH_EBADHANDLE);
}

int main(void)
{
	TAP_RUN(test_siphash_vector);
	TAP_RUN(test_round_trip);
	TAP_RUN(test_altered_bytes);
	TAP_RUN(test_other_key_and_lengths);
	return tap_finish();
}
