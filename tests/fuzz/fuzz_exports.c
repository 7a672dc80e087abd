/* fuzz_exports.c: libFuzzer target for the exports-file parser (nfs_exports.c).
 *
 * Covers nfs_exports_parse over the whole file: logical lines (continuations, comments, quotes),
 * paths and pool file system names, client specs (addresses, networks with prefix or netmask,
 * host names, `*`) and options; then, on every file it accepts, the lookups the server makes with
 * the result: nfs_exports_find_path of each export's own path, nfs_export_match of a few
 * addresses, and nfs_squash_cred under each rule.
 *
 * Host names are resolved by the fake getaddrinfo below, linked over the C library's, so that the
 * target is deterministic and never waits on DNS: a name beginning with "no" does not resolve,
 * any other gives 192.0.2.1 and 2001:db8::1. Checks beyond "no crash": each export is found by
 * its own path, and a matched rule index is inside its export's rules. */
#include <arpa/inet.h>
#include <netdb.h>

#include "fuzz.h"
#include "nfs/nfs_impl.h"

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res);
void freeaddrinfo(struct addrinfo *res);

struct fuzz_ai {
	struct addrinfo fa_ai[2];
	struct sockaddr_in fa_v4;
	struct sockaddr_in6 fa_v6;
};

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
	(void)service;
	(void)hints;
	if (!node || strncmp(node, "no", 2) == 0)
		return EAI_NONAME;
	struct fuzz_ai *fa = calloc(1, sizeof(*fa));
	if (!fa)
		return EAI_MEMORY;
	fa->fa_v4.sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.1", &fa->fa_v4.sin_addr);
	fa->fa_v6.sin6_family = AF_INET6;
	inet_pton(AF_INET6, "2001:db8::1", &fa->fa_v6.sin6_addr);
	fa->fa_ai[0] = (struct addrinfo){.ai_family = AF_INET,
	                                 .ai_addrlen = sizeof(fa->fa_v4),
	                                 .ai_addr = (struct sockaddr *)&fa->fa_v4,
	                                 .ai_next = &fa->fa_ai[1]};
	fa->fa_ai[1] = (struct addrinfo){.ai_family = AF_INET6,
	                                 .ai_addrlen = sizeof(fa->fa_v6),
	                                 .ai_addr = (struct sockaddr *)&fa->fa_v6};
	*res = &fa->fa_ai[0];
	return 0;
}

void freeaddrinfo(struct addrinfo *res)
{
	free(res); /* fa_ai[0] is the start of its struct fuzz_ai */
}

static void fuzz_addr(const char *text, struct nfs_addr *out)
{
	struct sockaddr_storage ss = {0};
	socklen_t len;
	if (strchr(text, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		inet_pton(AF_INET6, text, &s6->sin6_addr);
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		inet_pton(AF_INET, text, &s4->sin_addr);
		len = sizeof(*s4);
	}
	if (nfs_addr_from_sockaddr((struct sockaddr *)&ss, len, out) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const peers[] = {"127.0.0.1", "192.0.2.1", "10.1.2.3", "2001:db8::1",
	                                    "::1"};
	struct nfs_exports *xs;
	char err[256];
	if (nfs_exports_parse((const char *)data, size, &xs, err, sizeof(err)) != 0)
		return 0;
	for (size_t i = 0; i < nfs_exports_count(xs); i++) {
		const char *path = nfs_exports_path(xs, i);
		long found = nfs_exports_find_path(xs, path, strlen(path));
		if (found < 0 || strcmp(nfs_exports_path(xs, (size_t)found), path) != 0)
			__builtin_trap();
		const struct nfs_export *exp = &xs->nx_exports[i];
		for (size_t p = 0; p < SH_ARRAY_SIZE(peers); p++) {
			struct nfs_addr addr;
			fuzz_addr(peers[p], &addr);
			long r = nfs_export_match(exp, &addr);
			if (r >= (long)exp->ne_nrules)
				__builtin_trap();
		}
		struct rpc_cred root = {
		    .rcr_flavor = RPC_AUTH_SYS, .rcr_ngids = 1, .rcr_gids = {0}};
		for (size_t r = 0; r < exp->ne_nrules; r++) {
			struct fs_cred out;
			nfs_squash_cred(&exp->ne_rules[r], &root, &out);
		}
	}
	nfs_exports_destroy(xs);
	return 0;
}

static void fuzz_write_seeds(const char *dir)
{
	static const char etc_default[] =
	    "# exports(5) syntax: path, then clients with options\n"
	    "/srv/export 127.0.0.1(rw,no_root_squash,insecure) 10.0.2.0/24(rw)\n"
	    "tank/home *(ro,all_squash,anonuid=1000,anongid=1000,fsid=42)\n";
	static const char tricky[] =
	    "\"/srv/with space\" \\\n"
	    "    192.168.0.0/255.255.0.0(rw,sync) 2001:db8::/32(ro,secure) \\\r\n"
	    "    host-name.example(rw,root_squash)   # a comment \"quoted\"\n"
	    "/srv/b/ ::1(rw,async,no_subtree_check)\n"
	    "\n"
	    "   # only a comment\n";
	static const char bad[] = "/srv/x nohost(rw)\n";
	fuzz_seed(dir, "default", etc_default, sizeof(etc_default) - 1);
	fuzz_seed(dir, "tricky", tricky, sizeof(tricky) - 1);
	fuzz_seed(dir, "unresolvable", bad, sizeof(bad) - 1);
}
