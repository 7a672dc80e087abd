/* test_nfs_exports.c: exports(5) parsing, client matching and credential squashing. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nfs/nfs_impl.h"
#include "tap.h"

static struct nfs_exports *parse_ok(const char *text)
{
	struct nfs_exports *xs = NULL;
	char err[256];
	int rc = nfs_exports_parse(text, strlen(text), &xs, err, sizeof(err));
	CHECKF(rc == 0, "parse failed: %d %s", rc, err);
	return rc == 0 ? xs : NULL;
}

static struct nfs_addr addr_of(const char *text)
{
	struct nfs_addr a;
	memset(&a, 0, sizeof(a));
	struct in_addr in4;
	struct in6_addr in6;
	if (inet_pton(AF_INET, text, &in4) == 1) {
		a.na_bytes[10] = 0xff;
		a.na_bytes[11] = 0xff;
		memcpy(a.na_bytes + 12, &in4, 4);
	} else if (inet_pton(AF_INET6, text, &in6) == 1) {
		memcpy(a.na_bytes, &in6, 16);
	}
	return a;
}

static void test_full_file(void)
{
	const char *text =
		"# exports for the test\n"
		"\n"
		"/srv/a   10.1.2.3(rw,no_root_squash,insecure) 192.168.0.0/16(ro,all_squash,anonuid=1000,anongid=1001) \\\n"
		"         172.16.0.0/255.240.0.0(rw,sync,no_subtree_check) *(ro,subtree_check,secure,root_squash)\n"
		"/srv/b/  localhost(rw,fsid=42,async,wdelay,no_wdelay,no_all_squash)  # trailing comment\n"
		"\"/srv/with space\" fe80::1(rw) 2001:db8::/32(ro) *\n";
	struct nfs_exports *xs = parse_ok(text);
	if (!xs)
		return;
	CHECK(nfs_exports_count(xs) == 3);
	CHECK(strcmp(nfs_exports_path(xs, 0), "/srv/a") == 0);
	CHECK(strcmp(nfs_exports_path(xs, 1), "/srv/b") == 0);
	CHECK(strcmp(nfs_exports_path(xs, 2), "/srv/with space") == 0);

	const struct nfs_export *a = &xs->nx_exports[0];
	CHECK(a->ne_line == 3);
	CHECK(a->ne_nrules == 4);
	CHECK(a->ne_rules[0].ncr_kind == NFS_CLIENT_HOST);
	CHECK(a->ne_rules[0].ncr_flags == NFS_EXP_RW);
	CHECK(a->ne_rules[1].ncr_kind == NFS_CLIENT_NET && a->ne_rules[1].ncr_prefix == 96 + 16);
	CHECK(a->ne_rules[1].ncr_flags == (NFS_EXP_ALL_SQUASH | NFS_EXP_ROOT_SQUASH | NFS_EXP_SECURE));
	CHECK(a->ne_rules[1].ncr_anonuid == 1000 && a->ne_rules[1].ncr_anongid == 1001);
	CHECK(a->ne_rules[2].ncr_kind == NFS_CLIENT_NET && a->ne_rules[2].ncr_prefix == 96 + 12);
	CHECK(a->ne_rules[2].ncr_flags == (NFS_EXP_RW | NFS_EXP_ROOT_SQUASH | NFS_EXP_SECURE));
	CHECK(a->ne_rules[3].ncr_kind == NFS_CLIENT_ANY);
	CHECK(a->ne_rules[3].ncr_flags == (NFS_EXP_ROOT_SQUASH | NFS_EXP_SECURE));
	CHECK(a->ne_rules[3].ncr_anonuid == NFS_ANON_ID_DEFAULT);
	CHECK(strcmp(a->ne_rules[2].ncr_spec, "172.16.0.0/255.240.0.0") == 0);
	CHECK(!a->ne_fsid_explicit);

	const struct nfs_export *b = &xs->nx_exports[1];
	CHECK(b->ne_line == 5);
	CHECK(b->ne_fsid_explicit && nfs_exports_fsid(xs, 1) == 42);
	CHECK(b->ne_rules[0].ncr_kind == NFS_CLIENT_HOST && b->ne_rules[0].ncr_naddrs >= 1);
	CHECK(b->ne_rules[0].ncr_flags & NFS_EXP_ASYNC);
	struct nfs_addr lo = addr_of("127.0.0.1");
	CHECK(nfs_export_match(b, &lo) == 0); /* localhost resolved at load */

	const struct nfs_export *c = &xs->nx_exports[2];
	CHECK(c->ne_line == 6 && c->ne_nrules == 3);
	CHECK(c->ne_rules[1].ncr_kind == NFS_CLIENT_NET && c->ne_rules[1].ncr_prefix == 32);
	/* a bare client gets the defaults */
	CHECK(c->ne_rules[2].ncr_flags == (NFS_EXP_ROOT_SQUASH | NFS_EXP_SECURE));

	/* fsid: a stable hash of the path when not given, distinct per export */
	CHECK(nfs_exports_fsid(xs, 0) != nfs_exports_fsid(xs, 2));
	struct nfs_exports *again = parse_ok("/srv/a *\n");
	if (again) {
		CHECK(nfs_exports_fsid(again, 0) == nfs_exports_fsid(xs, 0));
		nfs_exports_destroy(again);
	}
	CHECK(nfs_exports_find_path(xs, "/srv/b", 6) == 1);
	CHECK(nfs_exports_find_path(xs, "/srv/b//", 8) == 1);
	CHECK(nfs_exports_find_path(xs, "/srv/c", 6) == -1);
	nfs_exports_destroy(xs);
}

static void test_load_file(void)
{
	char path[] = "/tmp/shale-exports-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	const char *text = "/data 127.0.0.1(rw)\n/bad\n";
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	struct nfs_exports *xs = NULL;
	char err[256] = "";
	CHECK(nfs_exports_load(path, &xs, err, sizeof(err)) == -EINVAL);
	CHECKF(strstr(err, "line 2") != NULL, "err=%s", err);
	CHECK(xs == NULL);
	unlink(path);
	CHECK(nfs_exports_load(path, &xs, err, sizeof(err)) == -ENOENT);
}

/* A pool's file system is exported as POOL/FS: clients mount /POOL/FS, and the export says which
 * dataset it is; a host directory says NULL. A snapshot is exported as POOL/FS@SNAP. */
static void test_dataset_exports(void)
{
	const char *text = "tank/home 127.0.0.1(rw)\n/srv/data *(ro)\nbig-pool.2/my_fs *(rw)\n"
	                   "tank/home@2026-12-07T10:00 *(ro)\n";
	struct nfs_exports *xs = NULL;
	char err[256] = "";
	CHECKF(nfs_exports_parse(text, strlen(text), &xs, err, sizeof(err)) == 0, "err=%s", err);
	if (!xs)
		return;
	CHECK(nfs_exports_count(xs) == 4);
	CHECK(strcmp(nfs_exports_path(xs, 0), "/tank/home") == 0);
	CHECK(nfs_exports_dataset(xs, 0) && strcmp(nfs_exports_dataset(xs, 0), "tank/home") == 0);
	CHECK(nfs_exports_dataset(xs, 1) == NULL);
	CHECK(strcmp(nfs_exports_path(xs, 1), "/srv/data") == 0);
	CHECK(nfs_exports_dataset(xs, 2) && strcmp(nfs_exports_dataset(xs, 2), "big-pool.2/my_fs") == 0);
	CHECK(nfs_exports_fsid(xs, 0) != nfs_exports_fsid(xs, 2));
	/* a snapshot: its own export, mounted as /POOL/FS@SNAP */
	CHECK(nfs_exports_dataset(xs, 3) &&
	      strcmp(nfs_exports_dataset(xs, 3), "tank/home@2026-12-07T10:00") == 0);
	CHECK(strcmp(nfs_exports_path(xs, 3), "/tank/home@2026-12-07T10:00") == 0);
	CHECK(nfs_exports_fsid(xs, 3) != nfs_exports_fsid(xs, 0));
	nfs_exports_destroy(xs);
}

struct bad_case {
	const char *text;
	unsigned line;
	const char *reason;
};

static void test_malformed(void)
{
	static const struct bad_case cases[] = {
		{"/a *(rw,bogus)\n", 1, "unknown option 'bogus'"},
		{"# c\n/a *(rw)\n/b 10.0.0.300(rw)\n", 3, "bad IPv4 address"},
		{"/a *(rw)\nrelative *(rw)\n", 2, "neither absolute nor a pool's POOL/FS"},
		{"/a *(rw)\ntank/home/sub *(rw)\n", 2, "neither absolute nor a pool's POOL/FS"},
		{"tank/.. *(rw)\n", 1, "neither absolute nor a pool's POOL/FS"},
		{"tank/home@ *(ro)\n", 1, "neither absolute nor a pool's POOL/FS"},
		{"tank/@snap *(ro)\n", 1, "neither absolute nor a pool's POOL/FS"},
		{"tank/home@a@b *(ro)\n", 1, "neither absolute nor a pool's POOL/FS"},
		{"tank:x/home *(ro)\n", 1, "neither absolute nor a pool's POOL/FS"},
		{"tank/home *(rw)\n/tank/home *(ro)\n", 2, "duplicate export of /tank/home"},
		{"/a *(rw)\n\n*(rw)\n", 3, "missing export path"},
		{"/a *(rw)\n/a/ *(ro)\n", 2, "duplicate export of /a (first on line 1)"},
		{"/a\n", 1, "names no client"},
		{"/a (rw)\n", 1, "options without a client"},
		{"/a(rw)\n", 1, "options without a client"},
		{"/a \\\n  *(rw)\n/b 10.0.0.0/33(rw)\n", 3, "bad netmask"},
		{"/a 10.0.0.0/255.0.255.0(rw)\n", 1, "not contiguous"},
		{"/a *(anonuid=abc)\n", 1, "bad anonuid"},
		{"/a *(anongid=-1)\n", 1, "bad anongid"},
		{"/a *(fsid=x)\n", 1, "bad fsid"},
		{"/a 1.2.3.4(fsid=1) 5.6.7.8(fsid=2)\n", 1, "conflicting fsid"},
		{"/a *(fsid=7)\n/b *(fsid=7)\n", 2, "already used"},
		{"/a @group(rw)\n", 1, "netgroups"},
		{"/a *.example.com(rw)\n", 1, "wildcard"},
		{"/a *(rw\n", 1, "not closed"},
		{"/a host.invalid.(rw)\n", 1, "cannot resolve"},
		{"/a/../b *(rw)\n", 1, "'.' or '..'"},
		{"\"/a *(rw)\n", 1, "unterminated quote"},
		{"/a *(rw)\n/b bad!host(rw)\n", 2, "bad host name"},
	};
	for (size_t i = 0; i < SH_ARRAY_SIZE(cases); i++) {
		struct nfs_exports *xs = NULL;
		char err[256] = "";
		char want_line[32];
		int rc = nfs_exports_parse(cases[i].text, strlen(cases[i].text), &xs, err, sizeof(err));
		snprintf(want_line, sizeof(want_line), "line %u: ", cases[i].line);
		bool ok = rc == -EINVAL && xs == NULL && strncmp(err, want_line, strlen(want_line)) == 0 &&
			  strstr(err, cases[i].reason) != NULL;
		tap_check(ok, "malformed exports case %zu names line %u and '%s' (got: %s)", i,
			  cases[i].line, cases[i].reason, err);
		nfs_exports_destroy(xs);
	}
}

static void test_match(void)
{
	struct nfs_exports *xs = parse_ok(
		"/e *(ro) 10.0.0.0/8(rw) 10.1.2.3(rw,no_root_squash) 10.1.0.0/16(ro,all_squash) "
		"2001:db8::/32(rw) ::1(ro)\n"
		"/f 192.168.1.0/24(rw)\n");
	if (!xs)
		return;
	const struct nfs_export *e = &xs->nx_exports[0];
	const struct nfs_export *f = &xs->nx_exports[1];
	struct nfs_addr a;
	a = addr_of("10.1.2.3");
	CHECK(nfs_export_match(e, &a) == 2); /* host beats both networks and * */
	a = addr_of("10.1.9.9");
	CHECK(nfs_export_match(e, &a) == 1); /* first network in file order */
	a = addr_of("10.200.0.1");
	CHECK(nfs_export_match(e, &a) == 1);
	a = addr_of("11.0.0.1");
	CHECK(nfs_export_match(e, &a) == 0); /* only * */
	a = addr_of("2001:db8:1::5");
	CHECK(nfs_export_match(e, &a) == 4);
	a = addr_of("::1");
	CHECK(nfs_export_match(e, &a) == 5);
	a = addr_of("192.168.1.77");
	CHECK(nfs_export_match(f, &a) == 0);
	a = addr_of("192.168.2.1");
	CHECK(nfs_export_match(f, &a) == -1);
	a = addr_of("::ffff:192.168.1.1"); /* an IPv4-mapped peer matches the IPv4 rule */
	CHECK(nfs_export_match(f, &a) == 0);

	struct sockaddr_in sin = {.sin_family = AF_INET};
	inet_pton(AF_INET, "192.168.1.5", &sin.sin_addr);
	CHECK(nfs_addr_from_sockaddr((struct sockaddr *)&sin, sizeof(sin), &a) == 0);
	CHECK(nfs_export_match(f, &a) == 0);
	struct sockaddr un = {.sa_family = AF_UNIX};
	CHECK(nfs_addr_from_sockaddr(&un, sizeof(un), &a) == -EAFNOSUPPORT);
	nfs_exports_destroy(xs);
}

static void test_squash(void)
{
	struct nfs_exports *xs = parse_ok(
		"/e 10.0.0.1(rw) 10.0.0.2(rw,no_root_squash) 10.0.0.3(rw,all_squash,anonuid=7,anongid=8) "
		"10.0.0.4(rw,anonuid=5,anongid=6)\n");
	if (!xs)
		return;
	const struct nfs_client_rule *r = xs->nx_exports[0].ne_rules;
	struct rpc_cred root = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = 0, .rcr_gid = 0, .rcr_ngids = 3,
				.rcr_gids = {0, 10, 20}};
	struct rpc_cred user = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = 1000, .rcr_gid = 100,
				.rcr_ngids = 2, .rcr_gids = {100, 0}};
	struct rpc_cred none = {.rcr_flavor = RPC_AUTH_NONE};
	struct fs_cred c;

	nfs_squash_cred(&r[0], &root, &c); /* root_squash, default anon 65534 */
	CHECK(c.fc_uid == 65534 && c.fc_gid == 65534 && c.fc_ngids == 3);
	CHECK(c.fc_gids[0] == 65534 && c.fc_gids[1] == 10 && c.fc_gids[2] == 20);
	nfs_squash_cred(&r[0], &user, &c);
	CHECK(c.fc_uid == 1000 && c.fc_gid == 100 && c.fc_ngids == 2 && c.fc_gids[1] == 65534);

	nfs_squash_cred(&r[1], &root, &c); /* no_root_squash */
	CHECK(c.fc_uid == 0 && c.fc_gid == 0 && c.fc_gids[0] == 0);

	nfs_squash_cred(&r[2], &user, &c); /* all_squash */
	CHECK(c.fc_uid == 7 && c.fc_gid == 8 && c.fc_ngids == 0);

	nfs_squash_cred(&r[3], &root, &c); /* root_squash to the given anon ids */
	CHECK(c.fc_uid == 5 && c.fc_gid == 6);

	nfs_squash_cred(&r[1], &none, &c); /* AUTH_NONE is anonymous even without squashing */
	CHECK(c.fc_uid == 65534 && c.fc_gid == 65534 && c.fc_ngids == 0);
	nfs_exports_destroy(xs);
}

static void test_alloc_failures(void)
{
	/* every allocation of a parse failing in turn: -ENOMEM, no leak (ASan checks) */
	const char *text = "/a 10.0.0.1(rw) *(ro)\n/b 10.0.0.0/8(rw)\n";
	int failures = 0;
	for (long n = 0; n < 64; n++) {
		struct nfs_exports *xs = NULL;
		mem_fail_after(n);
		int rc = nfs_exports_parse(text, strlen(text), &xs, NULL, 0);
		mem_fail_after(-1);
		if (rc == 0) {
			nfs_exports_destroy(xs);
			break;
		}
		CHECK(rc == -ENOMEM);
		failures++;
	}
	CHECK(failures > 3);
}

int main(void)
{
	TAP_RUN(test_full_file);
	TAP_RUN(test_load_file);
	TAP_RUN(test_dataset_exports);
	test_malformed();
	TAP_RUN(test_match);
	TAP_RUN(test_squash);
	TAP_RUN(test_alloc_failures);
	return tap_finish();
}
