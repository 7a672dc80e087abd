/* pclient.c: synchronous libnfs raw calls with results copied out of libnfs (see pclient.h). */
#include "pclient.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A call that gets no answer within this long is reported as a failure, not waited on forever. */
#define PC_CALL_TIMEOUT_MS 15000
/* Largest result re-encoded: a 1 MiB READ plus headers, with room to spare. */
#define PC_CAPTURE_MAX (4u << 20)

struct pc_keep {
	struct pc_keep *pk_next;
	ZDR pk_zdr;      /* owns what decoding allocated */
	char *pk_buf;    /* the re-encoded result; decoded strings and opaques point into it */
};

/* One call in flight. capture re-encodes and decodes the result into out. */
struct pc_wait {
	bool pw_done;
	int pw_status;
	struct pc_client *pw_client;
	bool (*pw_capture)(struct pc_client *c, void *data, void *out);
	void *pw_out;
	bool pw_capture_failed;
};

static uint64_t pc_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

const char *pc_last_error(const struct pc_client *c)
{
	return c->pc_err;
}

void pc_fh_set(struct pc_fh *fh, const nfs_fh3 *wire)
{
	fh->pf_len = wire->data.data_len > PC_FH_MAX ? PC_FH_MAX : wire->data.data_len;
	memset(fh->pf_data, 0, sizeof(fh->pf_data));
	if (fh->pf_len > 0)
		memcpy(fh->pf_data, wire->data.data_val, fh->pf_len);
}

nfs_fh3 pc_fh_arg(struct pc_fh *fh)
{
	nfs_fh3 w;
	w.data.data_len = fh->pf_len;
	w.data.data_val = fh->pf_data;
	return w;
}

bool pc_fh_equal(const struct pc_fh *a, const struct pc_fh *b)
{
	return a->pf_len == b->pf_len && memcmp(a->pf_data, b->pf_data, a->pf_len) == 0;
}

/* Re-encodes a result with its XDR routine and decodes it into out; the memory is kept on the
 * client until pc_release. Written as a macro per result type so each XDR routine is called with
 * its own prototype (no function-pointer casts). */
#define PC_CAPTURE_FN(TYPE)                                                                        \
	static bool pc_capture_##TYPE(struct pc_client *c, void *data, void *out)                  \
	{                                                                                          \
		struct pc_keep *k = calloc(1, sizeof(*k));                                         \
		if (k == NULL)                                                                     \
			return false;                                                              \
		for (uint32_t cap = 64u << 10; cap <= PC_CAPTURE_MAX; cap *= 4) {                  \
			ZDR enc;                                                                   \
			k->pk_buf = malloc(cap);                                                   \
			if (k->pk_buf == NULL)                                                     \
				break;                                                             \
			zdrmem_create(&enc, k->pk_buf, cap, ZDR_ENCODE);                           \
			bool ok = zdr_##TYPE(&enc, (TYPE *)data);                                  \
			uint32_t len = zdr_getpos(&enc);                                           \
			zdr_destroy(&enc);                                                         \
			if (ok) {                                                                  \
				memset(out, 0, sizeof(TYPE));                                      \
				zdrmem_create(&k->pk_zdr, k->pk_buf, len, ZDR_DECODE);             \
				if (!zdr_##TYPE(&k->pk_zdr, (TYPE *)out)) {                        \
					zdr_destroy(&k->pk_zdr);                                   \
					break;                                                     \
				}                                                                  \
				k->pk_next = c->pc_kept;                                           \
				c->pc_kept = k;                                                    \
				return true;                                                       \
			}                                                                          \
			free(k->pk_buf);                                                           \
			k->pk_buf = NULL;                                                          \
		}                                                                                  \
		free(k->pk_buf);                                                                   \
		free(k);                                                                           \
		return false;                                                                      \
	}

PC_CAPTURE_FN(GETATTR3res)
PC_CAPTURE_FN(SETATTR3res)
PC_CAPTURE_FN(LOOKUP3res)
PC_CAPTURE_FN(ACCESS3res)
PC_CAPTURE_FN(READLINK3res)
PC_CAPTURE_FN(READ3res)
PC_CAPTURE_FN(WRITE3res)
PC_CAPTURE_FN(CREATE3res)
PC_CAPTURE_FN(MKDIR3res)
PC_CAPTURE_FN(SYMLINK3res)
PC_CAPTURE_FN(MKNOD3res)
PC_CAPTURE_FN(REMOVE3res)
PC_CAPTURE_FN(RMDIR3res)
PC_CAPTURE_FN(RENAME3res)
PC_CAPTURE_FN(LINK3res)
PC_CAPTURE_FN(READDIR3res)
PC_CAPTURE_FN(READDIRPLUS3res)
PC_CAPTURE_FN(FSSTAT3res)
PC_CAPTURE_FN(FSINFO3res)
PC_CAPTURE_FN(PATHCONF3res)
PC_CAPTURE_FN(COMMIT3res)
PC_CAPTURE_FN(mountres3)
PC_CAPTURE_FN(mountlist)
PC_CAPTURE_FN(exports)

static void pc_callback(struct rpc_context *rpc, int status, void *data, void *private_data)
{
	(void)rpc;
	struct pc_wait *w = private_data;
	w->pw_done = true;
	w->pw_status = status;
	if (status == RPC_STATUS_SUCCESS) {
		if (w->pw_capture != NULL && data != NULL &&
		    !w->pw_capture(w->pw_client, data, w->pw_out)) {
			w->pw_capture_failed = true;
			snprintf(w->pw_client->pc_err, sizeof(w->pw_client->pc_err),
				 "could not copy the result");
		}
	} else {
		snprintf(w->pw_client->pc_err, sizeof(w->pw_client->pc_err), "rpc status %d: %s", status,
			 (status == RPC_STATUS_ERROR && data != NULL) ? (const char *)data : "-");
	}
}

/* Drives the connection until w completes or the deadline passes. */
static int pc_wait_for(struct pc_client *c, struct pc_wait *w)
{
	uint64_t deadline = pc_now_ms() + PC_CALL_TIMEOUT_MS;
	while (!w->pw_done) {
		uint64_t now = pc_now_ms();
		if (now >= deadline) {
			snprintf(c->pc_err, sizeof(c->pc_err), "no reply within %d ms", PC_CALL_TIMEOUT_MS);
			/* Fails the call in flight (its callback runs with an error) so w is not
			 * touched after we return. */
			rpc_disconnect(c->pc_rpc, "timeout");
			if (!w->pw_done)
				return -1;
			break;
		}
		struct pollfd pfd = { .fd = rpc_get_fd(c->pc_rpc), .events = (short)rpc_which_events(c->pc_rpc) };
		int n = poll(&pfd, 1, 100);
		if (n < 0 && errno != EINTR) {
			snprintf(c->pc_err, sizeof(c->pc_err), "poll: %s", strerror(errno));
			return -1;
		}
		if (rpc_service(c->pc_rpc, n > 0 ? pfd.revents : 0) < 0) {
			if (!w->pw_done) {
				snprintf(c->pc_err, sizeof(c->pc_err), "connection failed: %s",
					 rpc_get_error(c->pc_rpc));
				return -1;
			}
		}
	}
	if (w->pw_status != RPC_STATUS_SUCCESS || w->pw_capture_failed)
		return -1;
	return 0;
}

static void pc_connect_cb(struct rpc_context *rpc, int status, void *data, void *private_data)
{
	(void)rpc;
	struct pc_wait *w = private_data;
	w->pw_done = true;
	w->pw_status = status;
	if (status != RPC_STATUS_SUCCESS)
		snprintf(w->pw_client->pc_err, sizeof(w->pw_client->pc_err), "connect: %s",
			 data != NULL ? (const char *)data : "failed");
}

int pc_connect(struct pc_client *c, uint16_t port, uint32_t prog, uint32_t vers, uint32_t uid,
	       uint32_t gid)
{
	return pc_connect_groups(c, port, prog, vers, uid, gid, 0, NULL);
}

int pc_connect_groups(struct pc_client *c, uint16_t port, uint32_t prog, uint32_t vers,
		      uint32_t uid, uint32_t gid, uint32_t ngids, const uint32_t *gids)
{
	memset(c, 0, sizeof(*c));
	c->pc_rpc = rpc_init_context();
	if (c->pc_rpc == NULL) {
		snprintf(c->pc_err, sizeof(c->pc_err), "rpc_init_context failed");
		return -1;
	}
	uint32_t groups[16];
	if (ngids > 16)
		ngids = 16;
	for (uint32_t i = 0; i < ngids; i++)
		groups[i] = gids[i];
	rpc_set_auth(c->pc_rpc, authunix_create("shale-test", uid, gid, ngids, groups));
	struct pc_wait w = { .pw_client = c };
	if (rpc_connect_port_async(c->pc_rpc, "127.0.0.1", port, (int)prog, (int)vers, pc_connect_cb,
				   &w) != 0) {
		snprintf(c->pc_err, sizeof(c->pc_err), "connect: %s", rpc_get_error(c->pc_rpc));
		goto fail;
	}
	if (pc_wait_for(c, &w) != 0)
		goto fail;
	return 0;
fail:
	rpc_destroy_context(c->pc_rpc);
	c->pc_rpc = NULL;
	return -1;
}

void pc_release(struct pc_client *c)
{
	while (c->pc_kept != NULL) {
		struct pc_keep *k = c->pc_kept;
		c->pc_kept = k->pk_next;
		zdr_destroy(&k->pk_zdr);
		free(k->pk_buf);
		free(k);
	}
}

void pc_disconnect(struct pc_client *c)
{
	if (c->pc_rpc != NULL)
		rpc_destroy_context(c->pc_rpc);
	c->pc_rpc = NULL;
	pc_release(c);
}

/* Defines pc_<name>(c, args, res) over rpc_<name>_async. */
#define PC_CALL_FN(NAME, ARGS, RES)                                                                \
	int pc_##NAME(struct pc_client *c, ARGS *a, RES *r)                                        \
	{                                                                                          \
		struct pc_wait w = { .pw_client = c, .pw_capture = pc_capture_##RES, .pw_out = r }; \
		if (c->pc_rpc == NULL) {                                                           \
			snprintf(c->pc_err, sizeof(c->pc_err), "not connected");                   \
			return -1;                                                                 \
		}                                                                                  \
		if (rpc_##NAME##_async(c->pc_rpc, pc_callback, a, &w) != 0) {                      \
			snprintf(c->pc_err, sizeof(c->pc_err), "queue: %s", rpc_get_error(c->pc_rpc)); \
			return -1;                                                                 \
		}                                                                                  \
		return pc_wait_for(c, &w);                                                         \
	}

PC_CALL_FN(nfs3_getattr, GETATTR3args, GETATTR3res)
PC_CALL_FN(nfs3_setattr, SETATTR3args, SETATTR3res)
PC_CALL_FN(nfs3_lookup, LOOKUP3args, LOOKUP3res)
PC_CALL_FN(nfs3_access, ACCESS3args, ACCESS3res)
PC_CALL_FN(nfs3_readlink, READLINK3args, READLINK3res)
PC_CALL_FN(nfs3_read, READ3args, READ3res)
PC_CALL_FN(nfs3_write, WRITE3args, WRITE3res)
PC_CALL_FN(nfs3_create, CREATE3args, CREATE3res)
PC_CALL_FN(nfs3_mkdir, MKDIR3args, MKDIR3res)
PC_CALL_FN(nfs3_symlink, SYMLINK3args, SYMLINK3res)
PC_CALL_FN(nfs3_mknod, MKNOD3args, MKNOD3res)
PC_CALL_FN(nfs3_remove, REMOVE3args, REMOVE3res)
PC_CALL_FN(nfs3_rmdir, RMDIR3args, RMDIR3res)
PC_CALL_FN(nfs3_rename, RENAME3args, RENAME3res)
PC_CALL_FN(nfs3_link, LINK3args, LINK3res)
PC_CALL_FN(nfs3_readdir, READDIR3args, READDIR3res)
PC_CALL_FN(nfs3_readdirplus, READDIRPLUS3args, READDIRPLUS3res)
PC_CALL_FN(nfs3_fsstat, FSSTAT3args, FSSTAT3res)
PC_CALL_FN(nfs3_fsinfo, FSINFO3args, FSINFO3res)
PC_CALL_FN(nfs3_pathconf, PATHCONF3args, PATHCONF3res)
PC_CALL_FN(nfs3_commit, COMMIT3args, COMMIT3res)

/* Calls without arguments or results, or with a path argument. */
static int pc_start_checked(struct pc_client *c, int queued, struct pc_wait *w)
{
	if (queued != 0) {
		snprintf(c->pc_err, sizeof(c->pc_err), "queue: %s", rpc_get_error(c->pc_rpc));
		return -1;
	}
	return pc_wait_for(c, w);
}

int pc_nfs3_null(struct pc_client *c)
{
	struct pc_wait w = { .pw_client = c };
	return pc_start_checked(c, rpc_nfs3_null_async(c->pc_rpc, pc_callback, &w), &w);
}

int pc_mount3_null(struct pc_client *c)
{
	struct pc_wait w = { .pw_client = c };
	return pc_start_checked(c, rpc_mount3_null_async(c->pc_rpc, pc_callback, &w), &w);
}

int pc_mount3_mnt(struct pc_client *c, const char *path, mountres3 *r)
{
	struct pc_wait w = { .pw_client = c, .pw_capture = pc_capture_mountres3, .pw_out = r };
	return pc_start_checked(c, rpc_mount3_mnt_async(c->pc_rpc, pc_callback, (char *)path, &w), &w);
}

int pc_mount3_dump(struct pc_client *c, mountlist *r)
{
	struct pc_wait w = { .pw_client = c, .pw_capture = pc_capture_mountlist, .pw_out = r };
	return pc_start_checked(c, rpc_mount3_dump_async(c->pc_rpc, pc_callback, &w), &w);
}

int pc_mount3_umnt(struct pc_client *c, const char *path)
{
	struct pc_wait w = { .pw_client = c };
	return pc_start_checked(c, rpc_mount3_umnt_async(c->pc_rpc, pc_callback, (char *)path, &w), &w);
}

int pc_mount3_umntall(struct pc_client *c)
{
	struct pc_wait w = { .pw_client = c };
	return pc_start_checked(c, rpc_mount3_umntall_async(c->pc_rpc, pc_callback, &w), &w);
}

int pc_mount3_export(struct pc_client *c, exports *r)
{
	struct pc_wait w = { .pw_client = c, .pw_capture = pc_capture_exports, .pw_out = r };
	return pc_start_checked(c, rpc_mount3_export_async(c->pc_rpc, pc_callback, &w), &w);
}

sattr3 pc_sattr_mode(uint32_t mode)
{
	sattr3 s;
	memset(&s, 0, sizeof(s));
	s.mode.set_it = 1;
	s.mode.set_mode3_u.mode = mode;
	return s;
}

uint32_t pc_lookup(struct pc_client *c, struct pc_fh *dir, const char *name, struct pc_fh *out,
		   fattr3 *attr)
{
	LOOKUP3args a = { .what = { .dir = pc_fh_arg(dir), .name = (char *)name } };
	LOOKUP3res r = {0};
	if (pc_nfs3_lookup(c, &a, &r) != 0) {
		printf("# LOOKUP %s failed: %s\n", name, pc_last_error(c));
		return 0xffffffffu;
	}
	if (r.status == NFS3_OK) {
		if (out != NULL)
			pc_fh_set(out, &r.LOOKUP3res_u.resok.object);
		if (attr != NULL && r.LOOKUP3res_u.resok.obj_attributes.attributes_follow)
			*attr = r.LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes;
	}
	return r.status;
}
