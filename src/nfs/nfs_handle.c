/* nfs_handle.c: NFSv3 file handles: wrapping a back end's object id with the export's fsid and a
 * keyed MAC, and checking the handles clients send back.
 *
 * The format is the offset/size table in nfs_impl.h. The MAC is SipHash-2-4 (Aumasson and
 * Bernstein, "SipHash: a fast short-input PRF", 2012) under a 128-bit key kept in the state
 * directory, so a client can neither forge a handle for an object it was never given nor alter
 * one (for instance to walk another export's ids); it stays cheap enough for every request: no
 * allocation, a few dozen cycles for a 58-byte handle. MACs are compared without early exit. */
#include <string.h>

#include "nfs/nfs_impl.h"

static inline uint64_t nfs_rotl64(uint64_t x, unsigned b)
{
	return (x << b) | (x >> (64u - b));
}

static inline uint64_t nfs_load_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8u * i);
	return v;
}

void nfs_handle_key_init(struct nfs_handle_key *key, const uint8_t bytes[NFS_HANDLE_KEY_LEN])
{
	key->nhk_k0 = nfs_load_le64(bytes);
	key->nhk_k1 = nfs_load_le64(bytes + 8);
}

#define NFS_SIPROUND(v0, v1, v2, v3)                                                               \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = nfs_rotl64(v1, 13);                                                           \
		v1 ^= v0;                                                                          \
		v0 = nfs_rotl64(v0, 32);                                                           \
		v2 += v3;                                                                          \
		v3 = nfs_rotl64(v3, 16);                                                           \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = nfs_rotl64(v3, 21);                                                           \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = nfs_rotl64(v1, 17);                                                           \
		v1 ^= v2;                                                                          \
		v2 = nfs_rotl64(v2, 32);                                                           \
	} while (0)

uint64_t nfs_siphash24(const struct nfs_handle_key *key, const void *data, size_t len)
{
	/* initialisation constants: "somepseudorandomlygeneratedbytes" (SipHash paper, 2.1) */
	uint64_t v0 = 0x736f6d6570736575ull ^ key->nhk_k0;
	uint64_t v1 = 0x646f72616e646f6dull ^ key->nhk_k1;
	uint64_t v2 = 0x6c7967656e657261ull ^ key->nhk_k0;
	uint64_t v3 = 0x7465646279746573ull ^ key->nhk_k1;
	const uint8_t *p = data;
	size_t full = len & ~(size_t)7u;

	for (size_t off = 0; off < full; off += 8) {
		uint64_t m = nfs_load_le64(p + off);
		v3 ^= m;
		NFS_SIPROUND(v0, v1, v2, v3);
		NFS_SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	/* last block: remaining bytes, with the message length in the top byte */
	uint64_t b = (uint64_t)(len & 0xffu) << 56;
	for (size_t i = 0; i < (len & 7u); i++)
		b |= (uint64_t)p[full + i] << (8u * i);
	v3 ^= b;
	NFS_SIPROUND(v0, v1, v2, v3);
	NFS_SIPROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xffu;
	for (int i = 0; i < 4; i++)
		NFS_SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

static void nfs_store_be64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56u - 8u * i));
}

static uint64_t nfs_load_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

void nfs_handle_encode(const struct nfs_handle_key *key, uint64_t fsid, const struct fs_obj_id *obj,
		       struct nfs_fh *out)
{
	VERIFY(obj->foi_len <= FS_OBJ_ID_MAX);
	uint8_t *p = out->nf_bytes;
	p[0] = (uint8_t)NFS_FH_VERSION;
	p[1] = obj->foi_len;
	nfs_store_be64(p + 2, fsid);
	memcpy(p + NFS_FH_HDR_LEN, obj->foi_bytes, obj->foi_len);
	size_t body = NFS_FH_HDR_LEN + obj->foi_len;
	nfs_store_be64(p + body, nfs_siphash24(key, p, body));
	out->nf_len = (uint32_t)(body + NFS_FH_MAC_LEN);
}

int nfs_handle_decode(const struct nfs_handle_key *key, const uint8_t *fh, size_t len,
		      uint64_t *fsid_out, struct fs_obj_id *obj_out)
{
	if (len < NFS_FH_MIN_LEN || len > NFS_FH_MAX_LEN)
		return -SH_EBADHANDLE;
	if (fh[0] != NFS_FH_VERSION)
		return -SH_EBADHANDLE;
	size_t obj_len = fh[1];
	if (obj_len > FS_OBJ_ID_MAX || NFS_FH_MIN_LEN + obj_len != len)
		return -SH_EBADHANDLE;
	size_t body = NFS_FH_HDR_LEN + obj_len;
	uint64_t want = nfs_siphash24(key, fh, body);
	uint64_t got = nfs_load_be64(fh + body);
	/* constant time: no early exit on the first differing byte */
	if ((want ^ got) != 0)
		return -SH_EBADHANDLE;
	*fsid_out = nfs_load_be64(fh + 2);
	obj_out->foi_len = (uint8_t)obj_len;
	memcpy(obj_out->foi_bytes, fh + NFS_FH_HDR_LEN, obj_len);
	return 0;
}
