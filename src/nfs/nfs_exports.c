/* nfs_exports.c: the exports file (exports(5) syntax), client matching and credential squashing.
 *
 * Parsing happens once, at load; the result is immutable and shared read-only by every loop.
 * Steps: physical lines are joined into logical lines (a backslash before the newline continues
 * the line; '#' outside quotes starts a comment that ends the physical line); each logical line is
 * split into words; the first is the path (absolute; may be double-quoted), every other word is
 * `client(options)` or a bare `client` (default options). Host names are resolved here, once, so
 * that matching a request never calls the resolver: a DNS change needs a reload. Every error names
 * the logical line it was found on (its first physical line).
 *
 * Matching precedence (exports(5)): a client that several specs match gets the rule of the first
 * in this order, whatever their order on the line: single hosts (address or name), networks, `*`.
 * Within a class, the first written wins. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nfs/nfs_impl.h"

#define NFS_EXPORTS_FILE_MAX (4u * 1024u * 1024u)

struct nfs_parse {
	struct nfs_exports *np_exports;
	char *np_err;
	size_t np_err_len;
	unsigned np_line;
};

static int nfs_parse_error(struct nfs_parse *ps, const char *fmt, ...) SH_PRINTF(2, 3);
static int nfs_parse_error(struct nfs_parse *ps, const char *fmt, ...)
{
	if (ps->np_err && ps->np_err_len) {
		int n = snprintf(ps->np_err, ps->np_err_len, "line %u: ", ps->np_line);
		if (n >= 0 && (size_t)n < ps->np_err_len) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(ps->np_err + n, ps->np_err_len - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return -EINVAL;
}

/* FNV-1a, 64 bit: a fixed function so an export keeps its fsid (and its clients' handles) across
 * restarts and builds. Collisions with another export are refused at load. */
static uint64_t nfs_path_fsid(const char *path)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		h ^= *p;
		h *= 0x100000001b3ull;
	}
	return h;
}

static void nfs_rule_fini(struct nfs_client_rule *rule)
{
	mem_free(rule->ncr_spec);
	mem_free(rule->ncr_addrs);
}

static void nfs_export_fini(struct nfs_export *exp)
{
	for (size_t i = 0; i < exp->ne_nrules; i++)
		nfs_rule_fini(&exp->ne_rules[i]);
	mem_free(exp->ne_rules);
	mem_free(exp->ne_path);
}

void nfs_exports_destroy(struct nfs_exports *exports)
{
	if (!exports)
		return;
	for (size_t i = 0; i < exports->nx_count; i++)
		nfs_export_fini(&exports->nx_exports[i]);
	mem_free(exports->nx_exports);
	mem_free(exports);
}

size_t nfs_exports_count(const struct nfs_exports *exports)
{
	return exports->nx_count;
}

const char *nfs_exports_path(const struct nfs_exports *exports, size_t index)
{
	VERIFY(index < exports->nx_count);
	return exports->nx_exports[index].ne_path;
}

const char *nfs_exports_dataset(const struct nfs_exports *exports, size_t index)
{
	const struct nfs_export *exp = &exports->nx_exports[index];
	return exp->ne_dataset ? exp->ne_path + 1 : NULL;
}

uint64_t nfs_exports_fsid(const struct nfs_exports *exports, size_t index)
{
	VERIFY(index < exports->nx_count);
	return exports->nx_exports[index].ne_fsid;
}

/* ---- addresses ---- */

static void nfs_addr_from_v4(const struct in_addr *in, struct nfs_addr *out)
{
	memset(out->na_bytes, 0, 10);
	out->na_bytes[10] = 0xff;
	out->na_bytes[11] = 0xff;
	memcpy(out->na_bytes + 12, &in->s_addr, 4);
}

int nfs_addr_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct nfs_addr *out)
{
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		nfs_addr_from_v4(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, out);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		/* an IPv4-mapped peer is already in the normalised form */
		memcpy(out->na_bytes, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

static bool nfs_addr_prefix_equal(const struct nfs_addr *a, const struct nfs_addr *b, unsigned prefix)
{
	unsigned full = prefix / 8u, rest = prefix % 8u;
	if (memcmp(a->na_bytes, b->na_bytes, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8u - rest));
	return (a->na_bytes[full] & mask) == (b->na_bytes[full] & mask);
}

static void nfs_addr_mask(struct nfs_addr *a, unsigned prefix)
{
	for (unsigned bit = prefix; bit < 128u; bit++)
		a->na_bytes[bit / 8u] &= (uint8_t) ~(0x80u >> (bit % 8u));
}

/* Parses a numeric address; *is_v4 tells the family. Returns true on success. */
static bool nfs_parse_numeric(const char *text, struct nfs_addr *out, bool *is_v4)
{
	struct in_addr in4;
	struct in6_addr in6;
	if (inet_pton(AF_INET, text, &in4) == 1) {
		nfs_addr_from_v4(&in4, out);
		*is_v4 = true;
		return true;
	}
	if (inet_pton(AF_INET6, text, &in6) == 1) {
		memcpy(out->na_bytes, &in6, 16);
		*is_v4 = false;
		return true;
	}
	return false;
}

static bool nfs_parse_uint(const char *text, uint64_t max, uint64_t *out)
{
	if (!*text)
		return false;
	uint64_t v = 0;
	for (const char *p = text; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10u + (uint64_t)(*p - '0');
		if (v > max)
			return false;
	}
	*out = v;
	return true;
}

static int nfs_parse_client(struct nfs_parse *ps, const char *spec, struct nfs_client_rule *rule)
{
	if (strcmp(spec, "*") == 0) {
		rule->ncr_kind = NFS_CLIENT_ANY;
		return 0;
	}
	if (spec[0] == '@')
		return nfs_parse_error(ps, "client '%s': netgroups are not supported", spec);
	if (strpbrk(spec, "*?[]"))
		return nfs_parse_error(ps, "client '%s': wildcard host names are not supported", spec);
	if (strncmp(spec, "gss/", 4) == 0)
		return nfs_parse_error(ps, "client '%s': RPCSEC_GSS is not supported", spec);

	const char *slash = strchr(spec, '/');
	if (slash) {
		char addr_text[INET6_ADDRSTRLEN + 1];
		size_t alen = (size_t)(slash - spec);
		if (alen == 0 || alen >= sizeof(addr_text))
			return nfs_parse_error(ps, "client '%s': bad network address", spec);
		memcpy(addr_text, spec, alen);
		addr_text[alen] = '\0';
		bool is_v4;
		if (!nfs_parse_numeric(addr_text, &rule->ncr_net, &is_v4))
			return nfs_parse_error(ps, "client '%s': bad network address", spec);
		const char *mask = slash + 1;
		uint64_t bits;
		if (nfs_parse_uint(mask, is_v4 ? 32u : 128u, &bits)) {
			rule->ncr_prefix = (unsigned)bits + (is_v4 ? 96u : 0u);
		} else {
			struct in_addr m4;
			if (!is_v4 || inet_pton(AF_INET, mask, &m4) != 1)
				return nfs_parse_error(ps, "client '%s': bad netmask '%s'", spec, mask);
			uint32_t m = ntohl(m4.s_addr);
			unsigned n = 0;
			while (n < 32u && (m & (0x80000000u >> n)))
				n++;
			if (n < 32u && (m << n) != 0)
				return nfs_parse_error(ps, "client '%s': netmask '%s' is not contiguous",
						       spec, mask);
			rule->ncr_prefix = 96u + n;
		}
		nfs_addr_mask(&rule->ncr_net, rule->ncr_prefix);
		rule->ncr_kind = NFS_CLIENT_NET;
		return 0;
	}

	rule->ncr_kind = NFS_CLIENT_HOST;
	struct nfs_addr one;
	bool is_v4;
	if (nfs_parse_numeric(spec, &one, &is_v4)) {
		rule->ncr_addrs = mem_alloc(sizeof(*rule->ncr_addrs));
		if (!rule->ncr_addrs)
			return -ENOMEM;
		rule->ncr_addrs[0] = one;
		rule->ncr_naddrs = 1;
		return 0;
	}
	/* a digit-and-dot string that is no valid address is a typo, not a host name */
	if (strspn(spec, "0123456789.") == strlen(spec))
		return nfs_parse_error(ps, "client '%s': bad IPv4 address", spec);
	for (const char *p = spec; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_'))
			return nfs_parse_error(ps, "client '%s': bad host name", spec);

	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	int grc = getaddrinfo(spec, NULL, &hints, &res);
	if (grc != 0)
		return nfs_parse_error(ps, "client '%s': cannot resolve host name: %s", spec,
				       gai_strerror(grc));
	size_t n = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
		n++;
	rule->ncr_addrs = mem_alloc(sizeof(*rule->ncr_addrs) * (n ? n : 1));
	if (!rule->ncr_addrs) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		struct nfs_addr a;
		if (nfs_addr_from_sockaddr(ai->ai_addr, ai->ai_addrlen, &a) < 0)
			continue;
		bool dup = false;
		for (size_t i = 0; i < rule->ncr_naddrs; i++)
			dup = dup || memcmp(&rule->ncr_addrs[i], &a, sizeof(a)) == 0;
		if (!dup)
			rule->ncr_addrs[rule->ncr_naddrs++] = a;
	}
	freeaddrinfo(res);
	if (rule->ncr_naddrs == 0)
		return nfs_parse_error(ps, "client '%s': host name has no usable address", spec);
	return 0;
}

/* Applies one comma-separated option list to rule; an explicit fsid goes to *fsid. */
static int nfs_parse_options(struct nfs_parse *ps, char *opts, struct nfs_client_rule *rule,
			     bool *has_fsid, uint64_t *fsid)
{
	char *save = NULL;
	for (char *opt = strtok_r(opts, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(opt, '=');
		const char *val = NULL;
		if (eq) {
			*eq = '\0';
			val = eq + 1;
		}
		uint64_t v;
		if (!val && strcmp(opt, "rw") == 0) {
			rule->ncr_flags |= NFS_EXP_RW;
		} else if (!val && strcmp(opt, "ro") == 0) {
			rule->ncr_flags &= ~(uint32_t)NFS_EXP_RW;
		} else if (!val && strcmp(opt, "root_squash") == 0) {
			rule->ncr_flags |= NFS_EXP_ROOT_SQUASH;
		} else if (!val && strcmp(opt, "no_root_squash") == 0) {
			rule->ncr_flags &= ~(uint32_t)NFS_EXP_ROOT_SQUASH;
		} else if (!val && strcmp(opt, "all_squash") == 0) {
			rule->ncr_flags |= NFS_EXP_ALL_SQUASH;
		} else if (!val && strcmp(opt, "no_all_squash") == 0) {
			rule->ncr_flags &= ~(uint32_t)NFS_EXP_ALL_SQUASH;
		} else if (!val && strcmp(opt, "secure") == 0) {
			rule->ncr_flags |= NFS_EXP_SECURE;
		} else if (!val && strcmp(opt, "insecure") == 0) {
			rule->ncr_flags &= ~(uint32_t)NFS_EXP_SECURE;
		} else if (!val && strcmp(opt, "sync") == 0) {
			rule->ncr_flags &= ~(uint32_t)NFS_EXP_ASYNC;
		} else if (!val && strcmp(opt, "async") == 0) {
			/* Replies never claim more stability than the back end gave, so async
			 * cannot be honoured; it is accepted for compatibility. */
			rule->ncr_flags |= NFS_EXP_ASYNC;
			log_warn("exports line %u: 'async' is accepted but ignored (writes follow the "
				 "client's stable_how)",
				 ps->np_line);
		} else if (!val && (strcmp(opt, "subtree_check") == 0 ||
				    strcmp(opt, "no_subtree_check") == 0 || strcmp(opt, "wdelay") == 0 ||
				    strcmp(opt, "no_wdelay") == 0)) {
			/* accepted, no effect: handles never encode a path, and writes are not
			 * delayed */
		} else if (val && strcmp(opt, "anonuid") == 0) {
			if (!nfs_parse_uint(val, UINT32_MAX, &v))
				return nfs_parse_error(ps, "bad anonuid '%s'", val);
			rule->ncr_anonuid = (uint32_t)v;
		} else if (val && strcmp(opt, "anongid") == 0) {
			if (!nfs_parse_uint(val, UINT32_MAX, &v))
				return nfs_parse_error(ps, "bad anongid '%s'", val);
			rule->ncr_anongid = (uint32_t)v;
		} else if (val && strcmp(opt, "fsid") == 0) {
			if (!nfs_parse_uint(val, UINT64_MAX / 10u, &v))
				return nfs_parse_error(ps, "bad fsid '%s' (a decimal number)", val);
			if (*has_fsid && *fsid != v)
				return nfs_parse_error(ps, "conflicting fsid values %llu and %llu",
						       (unsigned long long)*fsid, (unsigned long long)v);
			*has_fsid = true;
			*fsid = v;
		} else {
			return nfs_parse_error(ps, "unknown option '%s%s%s'", opt, val ? "=" : "",
					       val ? val : "");
		}
	}
	return 0;
}

/* Splits the next word off *cursor: whitespace-separated, double quotes group (and are removed).
 * Returns NULL at the end of the line, or sets *bad on an unterminated quote. */
static char *nfs_next_word(char **cursor, bool *bad)
{
	char *p = *cursor;
	while (*p == ' ' || *p == '\t' || *p == '\r')
		p++;
	if (!*p) {
		*cursor = p;
		return NULL;
	}
	char *start = p, *out = p;
	bool quoted = false;
	while (*p && (quoted || (*p != ' ' && *p != '\t' && *p != '\r'))) {
		if (*p == '"') {
			quoted = !quoted;
			p++;
			continue;
		}
		*out++ = *p++;
	}
	if (quoted)
		*bad = true;
	if (*p)
		p++;
	*out = '\0';
	*cursor = p;
	return start;
}

/* A pool's file system: exactly "POOL/FS", each a name of [A-Za-z0-9_.-] (as the pool's own
 * names are), neither "." nor ".."; or one of its snapshots, "POOL/FS@SNAP" (SNAP of
 * [A-Za-z0-9_.:-], up to 64), served read only. */
static bool nfs_is_dataset_name(const char *word)
{
	const char *slash = strchr(word, '/');
	if (!slash || slash == word || slash[1] == '\0' || strchr(slash + 1, '/'))
		return false;
	const char *at = strchr(slash + 1, '@');
	if (at && (at == slash + 1 || at[1] == '\0' || strchr(at + 1, '@') || strlen(at + 1) > 64))
		return false;
	for (const char *p = word; *p; p++) {
		bool snap_char = at && p > at && *p == ':';
		if (p != slash && p != at && !snap_char &&
		    !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '.' || *p == '-'))
			return false;
	}
	size_t l1 = (size_t)(slash - word), l2 = at ? (size_t)(at - slash - 1) : strlen(slash + 1);
	if (l1 > 63 || l2 > 64)
		return false;
	bool dots1 = (l1 == 1 && word[0] == '.') || (l1 == 2 && word[0] == '.' && word[1] == '.');
	bool dots2 = strcmp(slash + 1, ".") == 0 || strcmp(slash + 1, "..") == 0;
	return !dots1 && !dots2;
}

static int nfs_normalise_path(struct nfs_parse *ps, const char *word, char **out)
{
	if (word[0] != '/')
		return nfs_parse_error(ps, "export path '%s' is neither absolute nor a pool's POOL/FS", word);
	size_t len = strlen(word);
	while (len > 1 && word[len - 1] == '/')
		len--;
	if (len > FS_PATH_MAX || len > MNT3_PATHLEN)
		return nfs_parse_error(ps, "export path is too long");
	/* refuse "." and ".." components: the path must name the directory plainly */
	for (size_t i = 0; i < len;) {
		size_t j = i + 1;
		while (j < len && word[j] != '/')
			j++;
		size_t clen = j - i - 1;
		const char *comp = word + i + 1;
		if ((clen == 1 && comp[0] == '.') || (clen == 2 && comp[0] == '.' && comp[1] == '.'))
			return nfs_parse_error(ps, "export path '%s' contains '.' or '..'", word);
		if (clen == 0 && len > 1)
			return nfs_parse_error(ps, "export path '%s' contains '//'", word);
		i = j;
	}
	*out = mem_strndup(word, len);
	return *out ? 0 : -ENOMEM;
}

static int nfs_parse_line(struct nfs_parse *ps, char *line)
{
	char *cursor = line;
	bool bad = false;
	char *word = nfs_next_word(&cursor, &bad);
	if (!word)
		return 0; /* blank or comment-only */
	if (bad)
		return nfs_parse_error(ps, "unterminated quote");
	if (word[0] != '/' && strchr(word, '('))
		return nfs_parse_error(ps, "missing export path");

	struct nfs_exports *xs = ps->np_exports;
	struct nfs_export *grown = mem_realloc(xs->nx_exports, sizeof(*grown) * (xs->nx_count + 1));
	if (!grown)
		return -ENOMEM;
	xs->nx_exports = grown;
	struct nfs_export *exp = &xs->nx_exports[xs->nx_count];
	memset(exp, 0, sizeof(*exp));
	exp->ne_line = ps->np_line;
	xs->nx_count++; /* counted now so that destroy frees a half-built export */

	char *paren = strchr(word, '(');
	if (paren)
		return nfs_parse_error(ps, "options without a client after the path (a default for "
				      "every host is not allowed: write *(...) )");
	int rc;
	if (word[0] != '/' && nfs_is_dataset_name(word)) {
		size_t wl = strlen(word);
		exp->ne_path = mem_alloc(wl + 2);
		if (!exp->ne_path)
			return -ENOMEM;
		exp->ne_path[0] = '/';
		memcpy(exp->ne_path + 1, word, wl + 1);
		exp->ne_dataset = true;
		rc = 0;
	} else {
		rc = nfs_normalise_path(ps, word, &exp->ne_path);
	}
	if (rc < 0)
		return rc;
	for (size_t i = 0; i + 1 < xs->nx_count; i++)
		if (strcmp(xs->nx_exports[i].ne_path, exp->ne_path) == 0)
			return nfs_parse_error(ps, "duplicate export of %s (first on line %u)",
					       exp->ne_path, xs->nx_exports[i].ne_line);

	uint64_t fsid = 0;
	bool has_fsid = false;
	while ((word = nfs_next_word(&cursor, &bad)) != NULL) {
		if (bad)
			return nfs_parse_error(ps, "unterminated quote");
		struct nfs_client_rule *rules =
			mem_realloc(exp->ne_rules, sizeof(*rules) * (exp->ne_nrules + 1));
		if (!rules)
			return -ENOMEM;
		exp->ne_rules = rules;
		struct nfs_client_rule *rule = &rules[exp->ne_nrules++];
		memset(rule, 0, sizeof(*rule));
		rule->ncr_flags = NFS_EXP_ROOT_SQUASH | NFS_EXP_SECURE;
		rule->ncr_anonuid = NFS_ANON_ID_DEFAULT;
		rule->ncr_anongid = NFS_ANON_ID_DEFAULT;
		rule->ncr_line = ps->np_line;

		char *opts = NULL;
		paren = strchr(word, '(');
		if (paren) {
			size_t wlen = strlen(word);
			if (word[wlen - 1] != ')')
				return nfs_parse_error(ps, "'%s': option list not closed by ')'", word);
			word[wlen - 1] = '\0';
			*paren = '\0';
			opts = paren + 1;
			if (strchr(opts, '(') || strchr(opts, ')'))
				return nfs_parse_error(ps, "'%s': bad parentheses", word);
		}
		if (word[0] == '\0')
			return nfs_parse_error(ps, "options without a client (a default for every "
						   "host is not allowed: write *(...) )");
		rule->ncr_spec = mem_strdup(word);
		if (!rule->ncr_spec)
			return -ENOMEM;
		rc = nfs_parse_client(ps, word, rule);
		if (rc < 0)
			return rc;
		if (opts) {
			rc = nfs_parse_options(ps, opts, rule, &has_fsid, &fsid);
			if (rc < 0)
				return rc;
		}
	}
	if (exp->ne_nrules == 0)
		return nfs_parse_error(ps, "export %s names no client (write * for every host)",
				       exp->ne_path);
	exp->ne_fsid_explicit = has_fsid;
	exp->ne_fsid = has_fsid ? fsid : nfs_path_fsid(exp->ne_path);
	for (size_t i = 0; i + 1 < xs->nx_count; i++)
		if (xs->nx_exports[i].ne_fsid == exp->ne_fsid)
			return nfs_parse_error(ps, "fsid %llu of %s is already used by %s (line %u)",
					       (unsigned long long)exp->ne_fsid, exp->ne_path,
					       xs->nx_exports[i].ne_path, xs->nx_exports[i].ne_line);
	return 0;
}

int nfs_exports_parse(const char *text, size_t len, struct nfs_exports **out, char *err,
		      size_t err_len)
{
	struct nfs_parse ps = {.np_err = err, .np_err_len = err_len, .np_line = 1};
	if (err && err_len)
		err[0] = '\0';
	char *line = mem_alloc(len + 1);
	ps.np_exports = mem_zalloc(sizeof(*ps.np_exports));
	int rc = -ENOMEM;
	if (!line || !ps.np_exports)
		goto out_fail;

	unsigned phys = 1; /* physical line of text[i] */
	size_t i = 0;
	while (i < len) {
		size_t n = 0;
		bool quoted = false;
		ps.np_line = phys;
		/* gather one logical line */
		while (i < len && text[i] != '\n') {
			char c = text[i];
			if (c == '\0') {
				rc = nfs_parse_error(&ps, "NUL byte in exports file");
				goto out_fail;
			}
			if (c == '\\') {
				size_t skip = 0; /* backslash-newline (or CRLF, or end of file) */
				if (i + 1 == len)
					skip = 1;
				else if (text[i + 1] == '\n')
					skip = 2;
				else if (text[i + 1] == '\r' && i + 2 < len && text[i + 2] == '\n')
					skip = 3;
				if (skip) {
					i += skip;
					phys += skip > 1;
					line[n++] = ' ';
					continue;
				}
			}
			if (c == '"')
				quoted = !quoted;
			if (c == '#' && !quoted) {
				while (i < len && text[i] != '\n')
					i++;
				break;
			}
			line[n++] = c;
			i++;
		}
		if (i < len) {
			i++; /* the newline */
			phys++;
		}
		line[n] = '\0';
		rc = nfs_parse_line(&ps, line);
		if (rc < 0)
			goto out_fail;
	}
	mem_free(line);
	*out = ps.np_exports;
	return 0;

out_fail:
	if (rc == -ENOMEM && err && err_len)
		snprintf(err, err_len, "line %u: out of memory", ps.np_line);
	mem_free(line);
	nfs_exports_destroy(ps.np_exports);
	return rc;
}

int nfs_exports_load(const char *path, struct nfs_exports **out, char *err, size_t err_len)
{
	char *text = NULL;
	size_t len = 0;
	int rc = sh_read_file(path, &text, &len, NFS_EXPORTS_FILE_MAX);
	if (rc < 0) {
		if (err && err_len)
			snprintf(err, err_len, "cannot read %s: %s", path, sh_strerror(rc));
		return rc;
	}
	rc = nfs_exports_parse(text, len, out, err, err_len);
	mem_free(text);
	return rc;
}

long nfs_exports_find_path(const struct nfs_exports *exports, const char *path, size_t path_len)
{
	while (path_len > 1 && path[path_len - 1] == '/')
		path_len--;
	for (size_t i = 0; i < exports->nx_count; i++) {
		const char *p = exports->nx_exports[i].ne_path;
		if (strlen(p) == path_len && memcmp(p, path, path_len) == 0)
			return (long)i;
	}
	return -1;
}

/* ---- matching and squashing ---- */

static bool nfs_rule_matches(const struct nfs_client_rule *rule, const struct nfs_addr *addr)
{
	switch (rule->ncr_kind) {
	case NFS_CLIENT_ANY:
		return true;
	case NFS_CLIENT_NET:
		return nfs_addr_prefix_equal(&rule->ncr_net, addr, rule->ncr_prefix);
	case NFS_CLIENT_HOST:
		for (size_t i = 0; i < rule->ncr_naddrs; i++)
			if (memcmp(&rule->ncr_addrs[i], addr, sizeof(*addr)) == 0)
				return true;
		return false;
	}
	return false;
}

long nfs_export_match(const struct nfs_export *exp, const struct nfs_addr *addr)
{
	long best = -1;
	for (size_t i = 0; i < exp->ne_nrules; i++) {
		const struct nfs_client_rule *rule = &exp->ne_rules[i];
		if ((best < 0 || rule->ncr_kind < exp->ne_rules[best].ncr_kind) &&
		    nfs_rule_matches(rule, addr))
			best = (long)i;
	}
	return best;
}

void nfs_squash_cred(const struct nfs_client_rule *rule, const struct rpc_cred *in,
		     struct fs_cred *out)
{
	if (in->rcr_flavor != RPC_AUTH_SYS || (rule->ncr_flags & NFS_EXP_ALL_SQUASH)) {
		out->fc_uid = rule->ncr_anonuid;
		out->fc_gid = rule->ncr_anongid;
		out->fc_ngids = 0;
		return;
	}
	bool squash = (rule->ncr_flags & NFS_EXP_ROOT_SQUASH) != 0;
	out->fc_uid = squash && in->rcr_uid == 0 ? rule->ncr_anonuid : in->rcr_uid;
	out->fc_gid = squash && in->rcr_gid == 0 ? rule->ncr_anongid : in->rcr_gid;
	uint32_t n = SH_MIN(in->rcr_ngids, (uint32_t)FS_MAX_GIDS);
	for (uint32_t i = 0; i < n; i++)
		out->fc_gids[i] = squash && in->rcr_gids[i] == 0 ? rule->ncr_anongid : in->rcr_gids[i];
	out->fc_ngids = n;
}
