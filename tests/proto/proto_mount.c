/* proto_mount.c: MOUNT v3 (RFC 1813 section 5) and the exports(5) `secure` rule against a private
 * `shale serve`.
 *
 * Exports used:
 *   exp0  rw, insecure        MNT, DUMP, UMNT, UMNTALL, EXPORT
 *   exp1  ro, insecure        listed by EXPORT
 *   exp2  rw, secure          refused from a client port >= 1024, served from a reserved port
 * The secure-port cases use the raw RPC client, which can bind the exact source port. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pclient.h"
#include "rawrpc.h"
#include "tap.h"
#include "testserver.h"

#define MNT_PROGRAM 100005
#define NFS_PROGRAM 100003

static struct ts_server srv;
static struct pc_client mc; /* MOUNT v3 client */

static bool dump_lists(const char *path)
{
	mountlist ml = NULL;
	if (pc_mount3_dump(&mc, &ml) != 0) {
		printf("# DUMP: %s\n", pc_last_error(&mc));
		return false;
	}
	for (mountlist m = ml; m != NULL; m = m->ml_next)
		if (m->ml_directory != NULL && strcmp(m->ml_directory, path) == 0)
			return true;
	return false;
}

static void mount_null(void)
{
	CHECK(pc_mount3_null(&mc) == 0);
}

static void mnt_gives_handle(void)
{
	mountres3 r;
	CHECK(pc_mount3_mnt(&mc, srv.ts_export_path[0], &r) == 0);
	CHECKF(r.fhs_status == MNT3_OK, "status %u", r.fhs_status);
	if (r.fhs_status != MNT3_OK)
		return;
	mountres3_ok *ok = &r.mountres3_u.mountinfo;
	CHECKF(ok->fhandle.fhandle3_len > 0 && ok->fhandle.fhandle3_len <= 64, "handle length %u",
	       ok->fhandle.fhandle3_len);
	bool has_sys = false;
	for (u_int i = 0; i < ok->auth_flavors.auth_flavors_len; i++)
		has_sys = has_sys || ok->auth_flavors.auth_flavors_val[i] == 1;
	CHECKF(has_sys, "AUTH_SYS not among %u flavors", ok->auth_flavors.auth_flavors_len);
	/* The handle is a directory handle the NFS program accepts. */
	struct pc_fh fh;
	fh.pf_len = ok->fhandle.fhandle3_len;
	memcpy(fh.pf_data, ok->fhandle.fhandle3_val, fh.pf_len);
	struct pc_client nc;
	CHECK(pc_connect(&nc, srv.ts_port, NFS_PROGRAM, 3, 0, 0) == 0);
	GETATTR3args a = { .object = pc_fh_arg(&fh) };
	GETATTR3res gr = {0};
	CHECK(pc_nfs3_getattr(&nc, &a, &gr) == 0);
	CHECKF(gr.status == NFS3_OK && gr.GETATTR3res_u.resok.obj_attributes.type == NF3DIR,
	       "GETATTR status %u", gr.status);
	pc_disconnect(&nc);
	/* MNT twice gives the same handle. */
	mountres3 r2;
	CHECK(pc_mount3_mnt(&mc, srv.ts_export_path[0], &r2) == 0 && r2.fhs_status == MNT3_OK);
	if (r2.fhs_status == MNT3_OK)
		CHECK(r2.mountres3_u.mountinfo.fhandle.fhandle3_len == fh.pf_len &&
		      memcmp(r2.mountres3_u.mountinfo.fhandle.fhandle3_val, fh.pf_data, fh.pf_len) == 0);
}

static void mnt_refuses_unexported(void)
{
	mountres3 r;
	CHECK(pc_mount3_mnt(&mc, "/definitely/not/exported", &r) == 0);
	CHECKF(r.fhs_status == MNT3ERR_NOENT || r.fhs_status == MNT3ERR_ACCES ||
	       r.fhs_status == MNT3ERR_PERM, "status %u", r.fhs_status);
	/* An existing host directory that is not exported. */
	CHECK(pc_mount3_mnt(&mc, "/tmp", &r) == 0);
	CHECKF(r.fhs_status == MNT3ERR_ACCES || r.fhs_status == MNT3ERR_PERM ||
	       r.fhs_status == MNT3ERR_NOENT, "/tmp: status %u", r.fhs_status);
	/* A path that leaves the export with "..". */
	char path[512];
	snprintf(path, sizeof(path), "%s/..", srv.ts_export_path[0]);
	CHECK(pc_mount3_mnt(&mc, path, &r) == 0);
	CHECKF(r.fhs_status != MNT3_OK, "%s: status %u", path, r.fhs_status);
	/* A path longer than MNTPATHLEN (1024) is refused or rejected, never served. */
	char longpath[1100];
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	int rc = pc_mount3_mnt(&mc, longpath, &r);
	CHECKF(rc != 0 || r.fhs_status != MNT3_OK, "long path served");
	if (rc != 0) { /* the connection may have been dropped for garbage: reconnect */
		pc_disconnect(&mc);
		CHECK(pc_connect(&mc, srv.ts_port, MNT_PROGRAM, 3, 0, 0) == 0);
	}
}

static void dump_and_umnt(void)
{
	mountres3 r;
	CHECK(pc_mount3_mnt(&mc, srv.ts_export_path[0], &r) == 0 && r.fhs_status == MNT3_OK);
	CHECKF(dump_lists(srv.ts_export_path[0]), "DUMP does not list the mounted export");
	CHECK(!dump_lists(srv.ts_export_path[1]));
	CHECK(pc_mount3_umnt(&mc, srv.ts_export_path[0]) == 0);
	CHECKF(!dump_lists(srv.ts_export_path[0]), "DUMP still lists it after UMNT");
	/* UMNT of something never mounted is harmless (it has no error result). */
	CHECK(pc_mount3_umnt(&mc, "/never/mounted") == 0);
	pc_release(&mc);
}

static void umntall(void)
{
	mountres3 r;
	CHECK(pc_mount3_mnt(&mc, srv.ts_export_path[0], &r) == 0 && r.fhs_status == MNT3_OK);
	CHECK(pc_mount3_mnt(&mc, srv.ts_export_path[1], &r) == 0 && r.fhs_status == MNT3_OK);
	CHECK(dump_lists(srv.ts_export_path[0]) && dump_lists(srv.ts_export_path[1]));
	CHECK(pc_mount3_umntall(&mc) == 0);
	CHECK(!dump_lists(srv.ts_export_path[0]));
	CHECK(!dump_lists(srv.ts_export_path[1]));
	pc_release(&mc);
}

static void export_list(void)
{
	exports ex = NULL;
	CHECK(pc_mount3_export(&mc, &ex) == 0);
	bool found[3] = { false, false, false };
	int n = 0;
	for (exports e = ex; e != NULL; e = e->ex_next) {
		n++;
		for (int i = 0; i < 3; i++)
			if (e->ex_dir != NULL && strcmp(e->ex_dir, srv.ts_export_path[i]) == 0) {
				found[i] = true;
				CHECKF(e->ex_groups != NULL && e->ex_groups->gr_name != NULL &&
				       strcmp(e->ex_groups->gr_name, "*") == 0,
				       "export %d: groups do not name '*'", i);
			}
	}
	CHECKF(n == 3, "%d exports listed", n);
	CHECK(found[0] && found[1] && found[2]);
	pc_release(&mc);
}

/* MNT over a raw connection: returns the mountstat3, or 1000 + auth_stat for an AUTH_ERROR
 * rejection, or -1. */
static int raw_mnt(int fd, const char *path, uint8_t *fh, uint32_t *fh_len)
{
	struct rr_buf b;
	rr_buf_init(&b);
	uint32_t xid = 0x5ec00001u;
	rr_put_call(&b, xid, 2, RR_PROG_MOUNT, 3, 1, RR_CRED_SYS, 0, 0);
	rr_put_string(&b, path);
	struct rr_reply rp;
	uint8_t *rec = NULL;
	int result = -1;
	if (rr_call(fd, true, &b, xid, &rp, &rec, 10000) == 0) {
		if (rp.rp_reply_stat == 1 && rp.rp_reject_stat == 1) {
			result = 1000 + (int)rp.rp_auth_stat;
		} else if (rp.rp_reply_stat == 0 && rp.rp_accept_stat == 0) {
			uint32_t st = rr_get_u32(&rp.rp_body);
			if (st == 0) {
				const uint8_t *p = rr_get_opaque(&rp.rp_body, 64, fh_len);
				if (p != NULL) {
					memcpy(fh, p, *fh_len);
					result = 0;
				}
			} else {
				result = (int)st;
			}
		}
	}
	free(rec);
	rr_buf_fini(&b);
	return result;
}

/* GETATTR over a raw connection: the nfsstat3, 1000 + auth_stat for AUTH_ERROR, or -1. */
static int raw_getattr(int fd, const uint8_t *fh, uint32_t fh_len)
{
	struct rr_buf b;
	rr_buf_init(&b);
	uint32_t xid = 0x5ec00002u;
	rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 1, RR_CRED_SYS, 0, 0);
	rr_put_opaque(&b, fh, fh_len);
	struct rr_reply rp;
	uint8_t *rec = NULL;
	int result = -1;
	if (rr_call(fd, true, &b, xid, &rp, &rec, 10000) == 0) {
		if (rp.rp_reply_stat == 1 && rp.rp_reject_stat == 1)
			result = 1000 + (int)rp.rp_auth_stat;
		else if (rp.rp_reply_stat == 0 && rp.rp_accept_stat == 0)
			result = (int)rr_get_u32(&rp.rp_body);
	}
	free(rec);
	rr_buf_fini(&b);
	return result;
}

static uint16_t local_port(int fd)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	if (getsockname(fd, (struct sockaddr *)&sin, &len) != 0)
		return 0;
	return ntohs(sin.sin_port);
}

/* Connects from a reserved port (we run as root in the test environment); -1 if none is free
 * or we lack the privilege. */
static int connect_reserved(void)
{
	for (uint16_t p = 1023; p >= 600; p--) {
		int fd = rr_connect_tcp(srv.ts_port, p);
		if (fd >= 0)
			return fd;
		if (errno == EACCES || errno == EPERM)
			return -1;
	}
	return -1;
}

static bool refused(int st, bool mount)
{
	/* mountstat3 ACCES/PERM, nfsstat3 PERM/ACCES, or an RPC AUTH_ERROR (TOOWEAK or other). */
	if (st >= 1000)
		return true;
	if (mount)
		return st == MNT3ERR_ACCES || st == MNT3ERR_PERM;
	return st == NFS3ERR_PERM || st == NFS3ERR_ACCES;
}

static void secure_export(void)
{
	uint8_t fh[64];
	uint32_t fh_len = 0;
	int hi = rr_connect_tcp(srv.ts_port, 0);
	CHECK(hi >= 0);
	if (hi < 0)
		return;
	CHECKF(local_port(hi) >= 1024, "ephemeral port %u", local_port(hi));
	int st = raw_mnt(hi, srv.ts_export_path[2], fh, &fh_len);
	CHECKF(refused(st, true), "MNT of a secure export from port %u: result %d", local_port(hi), st);
	/* The insecure export is served on the same connection. */
	uint8_t ifh[64];
	uint32_t ifh_len = 0;
	st = raw_mnt(hi, srv.ts_export_path[0], ifh, &ifh_len);
	CHECKF(st == 0, "MNT of an insecure export from a high port: result %d", st);

	int lo = connect_reserved();
	if (lo < 0) {
		CHECKF(false, "cannot bind a reserved port (%s)", strerror(errno));
		close(hi);
		return;
	}
	st = raw_mnt(lo, srv.ts_export_path[2], fh, &fh_len);
	CHECKF(st == 0, "MNT of a secure export from port %u: result %d", local_port(lo), st);
	if (st == 0) {
		st = raw_getattr(lo, fh, fh_len);
		CHECKF(st == 0, "GETATTR from a reserved port: result %d", st);
		/* The handle alone does not let a high-port client in. */
		st = raw_getattr(hi, fh, fh_len);
		CHECKF(refused(st, false), "GETATTR of a secure export's handle from port %u: result %d",
		       local_port(hi), st);
	}
	close(lo);
	close(hi);
}

static void udp_null_and_mnt(void)
{
	int fd = rr_connect_udp(srv.ts_port);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	struct rr_buf b;
	struct rr_reply rp;
	rr_buf_init(&b);
	rr_put_call(&b, 0x75647001u, 2, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
	CHECK(rr_call(fd, false, &b, 0x75647001u, &rp, NULL, 5000) == 0 && rp.rp_reply_stat == 0 &&
	      rp.rp_accept_stat == 0);
	b.rb_len = 0;
	rr_put_call(&b, 0x75647002u, 2, RR_PROG_MOUNT, 3, 1, RR_CRED_SYS, 0, 0);
	rr_put_string(&b, srv.ts_export_path[0]);
	uint8_t *rec = NULL;
	CHECK(rr_call(fd, false, &b, 0x75647002u, &rp, &rec, 5000) == 0 && rp.rp_reply_stat == 0 &&
	      rp.rp_accept_stat == 0 && rr_get_u32(&rp.rp_body) == 0);
	free(rec);
	rr_buf_fini(&b);
	close(fd);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *lines[] = {
		"%s *(rw,insecure,no_root_squash)",
		"%s *(ro,insecure)",
		"%s *(rw,secure,no_root_squash)",
	};
	if (!tap_check(ts_start(&srv, lines, 3) == 0, "server starts"))
		return tap_finish();
	if (!tap_check(pc_connect(&mc, srv.ts_port, MNT_PROGRAM, 3, 0, 0) == 0, "MOUNT connect")) {
		ts_stop(&srv);
		return tap_finish();
	}
	TAP_RUN(mount_null);
	TAP_RUN(mnt_gives_handle);
	TAP_RUN(mnt_refuses_unexported);
	TAP_RUN(dump_and_umnt);
	TAP_RUN(umntall);
	TAP_RUN(export_list);
	TAP_RUN(secure_export);
	TAP_RUN(udp_null_and_mnt);
	pc_disconnect(&mc);
	tap_check(ts_alive(&srv), "server still running");
	tap_check(ts_stop(&srv) == 0, "server exits cleanly on SIGTERM");
	return tap_finish();
}
