/* proto_diff.c: the pool back end against the posix back end, call by call.
 *
 * Two private servers run side by side: one exports a host directory (the posix back end, whose
 * answers carry the Linux kernel's own file-system semantics, as knfsd's do), the other a pool's
 * file system. A seeded random sequence of NFSv3 calls goes to both, each call the same on both
 * sides but for the handles, and the answers must agree: the status, and on success what both
 * must report alike (type, mode, link count, owner, size of everything but a directory, the bytes
 * READ returns and its eof, READLINK's target, ACCESS's bits, a directory's names and each
 * entry's attributes). What may differ is not compared: file ids, times, space used, a
 * directory's size, cookies and verifiers.
 *
 * The namespace is small on purpose (a handful of directories, names from a six-letter alphabet)
 * so that calls collide: creating what exists, removing what is gone, renaming over files and
 * directories, removing non-empty directories, using handles of removed objects. Objects are
 * tracked as pairs of handles, the posix one and the pool one, learnt from the replies. A fifth
 * of the calls come from an unprivileged uid with a supplementary group, and owners and groups
 * change, so permission checks are compared too.
 *
 * A disagreement is printed with the call's number and arguments; after DIFF_MAX_REPORTS the
 * seed's run stops (the namespaces may no longer agree). Seeds are fixed and printed;
 * SHALE_DIFF_SEED and SHALE_DIFF_CALLS replay one run, SHALE_DIFF_VERBOSE prints every call.
 * After the runs, both servers must still answer and the pool must check clean when its server
 * stops (ts_stop). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pclient.h"
#include "rawrpc.h"
#include "rng.h"
#include "tap.h"
#include "testserver.h"

#define NFS_PROGRAM 100003
#define DIFF_SIDES 2 /* 0: posix back end, 1: pool */
#define DIFF_MAX_OBJS 48
#define DIFF_MAX_REPORTS 8
#define DIFF_CALLS_DEFAULT 1500
#define DIFF_USER_UID 1000
#define DIFF_USER_GROUP 1001 /* a supplementary group of the user's */
#define DIFF_OTHER_GROUP 1003 /* a group the user is not in */
#define DIFF_MAX_LIST 64 /* directory entries compared per listing */
#define DIFF_DATA_MAX 6000
#define DIFF_NAME_MAX 255 /* NFS3_MAXNAMLEN */

static const char *const side_name[DIFF_SIDES] = {"posix", "pool"};
static struct ts_server srv[DIFF_SIDES];
static struct pc_client root_cl[DIFF_SIDES], user_cl[DIFF_SIDES];

/* One object as both servers name it. */
struct diff_obj {
	struct pc_fh do_fh[DIFF_SIDES];
	uint32_t do_type; /* ftype3 as last seen */
};
static struct diff_obj objs[DIFF_MAX_OBJS];
static unsigned nobjs;
/* Each export's root: never learnt, so that ".." cannot lead a run into its neighbours' files
 * and a replay of one seed sees what the run of all seeds saw. */
static struct pc_fh export_root[DIFF_SIDES];

static unsigned long call_no;
static char call_desc[256];
static unsigned reports;
static bool verbose; /* SHALE_DIFF_VERBOSE: every call is printed */

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	reports++;
	printf("#   call %lu (%s): ", call_no, call_desc);
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* ---------------------------------------------------------------- choosing arguments */

static const char *random_name(bool dots)
{
	static const char *const names[] = {"a", "b", "c", "d", "e", "f"};
	/* The longest name NFSv3 allows, and one byte more. */
	static char longest[DIFF_NAME_MAX + 1], too_long[DIFF_NAME_MAX + 2];
	if (longest[0] == '\0') {
		memset(longest, 'l', sizeof(longest) - 1);
		memset(too_long, 't', sizeof(too_long) - 1);
	}
	if (dots && test_rng_below(12) == 0)
		return test_rng_below(2) ? "." : "..";
	if (test_rng_below(40) == 0)
		return test_rng_below(2) ? longest : too_long;
	if (test_rng_below(80) == 0)
		return test_rng_below(2) ? "" : "a/b"; /* names no entry can have */
	return names[test_rng_below(6)];
}

/* A random known object, of type want (0: any); objs[0] is the root, always a directory. */
static struct diff_obj *random_obj(uint32_t want)
{
	unsigned candidates[DIFF_MAX_OBJS], n = 0;
	for (unsigned i = 0; i < nobjs; i++)
		if (want == 0 || objs[i].do_type == want)
			candidates[n++] = i;
	return n == 0 ? &objs[0] : &objs[candidates[test_rng_below(n)]];
}

static struct diff_obj *random_dir(void)
{
	return random_obj(NF3DIR);
}

/* Learns (or refreshes) an object from a pair of handles both servers returned. Two handles of
 * one side name one object; if the other side's handle differs, the two namespaces disagree. */
static void note_obj(const struct pc_fh fh[DIFF_SIDES], uint32_t type)
{
	if (pc_fh_equal(&fh[0], &export_root[0]) || pc_fh_equal(&fh[1], &export_root[1]))
		return;
	for (unsigned i = 0; i < nobjs; i++) {
		bool same0 = pc_fh_equal(&objs[i].do_fh[0], &fh[0]);
		bool same1 = pc_fh_equal(&objs[i].do_fh[1], &fh[1]);
		if (same0 != same1) {
			report("one object for the %s server, two for the %s",
			       same0 ? side_name[0] : side_name[1],
			       same0 ? side_name[1] : side_name[0]);
			return;
		}
		if (same0) {
			objs[i].do_type = type;
			return;
		}
	}
	unsigned slot = nobjs < DIFF_MAX_OBJS ? nobjs++ : 1 + test_rng_below(DIFF_MAX_OBJS - 1);
	objs[slot].do_fh[0] = fh[0];
	objs[slot].do_fh[1] = fh[1];
	objs[slot].do_type = type;
}

/* ---------------------------------------------------------------- comparing answers */

/* The status a call answered, or DIFF_NO_REPLY when it failed at the RPC level (rc != 0). */
#define DIFF_NO_REPLY 0xffffffffu
static uint32_t reply_status(int rc, const nfsstat3 *status)
{
	return rc == 0 ? (uint32_t)*status : DIFF_NO_REPLY;
}

/* Statuses; a call that failed at the RPC level never agrees. */
static bool same_status(const uint32_t st[DIFF_SIDES])
{
	if (st[0] == st[1] && st[0] != DIFF_NO_REPLY)
		return true;
	report("status %" PRIu32 " from posix, %" PRIu32 " from the pool", st[0], st[1]);
	return false;
}

static void compare_fattr(const char *what, const fattr3 *a, const fattr3 *b)
{
	if (a->type != b->type) {
		report("%s: type %d against %d", what, a->type, b->type);
		return;
	}
	if (a->mode != b->mode)
		report("%s: mode %04o against %04o", what, a->mode, b->mode);
	if (a->nlink != b->nlink)
		report("%s: nlink %u against %u", what, a->nlink, b->nlink);
	if (a->uid != b->uid || a->gid != b->gid)
		report("%s: owner %u:%u against %u:%u", what, a->uid, a->gid, b->uid, b->gid);
	if (a->type != NF3DIR && a->size != b->size)
		report("%s: size %" PRIu64 " against %" PRIu64, what, (uint64_t)a->size,
		       (uint64_t)b->size);
}

/* Post-op attributes are optional (RFC 1813); they are compared when both sides sent them. */
static void compare_post(const char *what, const post_op_attr *a, const post_op_attr *b)
{
	if (a->attributes_follow && b->attributes_follow)
		compare_fattr(what, &a->post_op_attr_u.attributes, &b->post_op_attr_u.attributes);
}

static struct pc_client *client(unsigned side, bool as_user)
{
	return as_user ? &user_cl[side] : &root_cl[side];
}

static bool pick_user(void)
{
	return test_rng_below(5) == 0;
}

static sattr3 sattr_none(void)
{
	sattr3 s;
	memset(&s, 0, sizeof(s));
	return s;
}

static uint32_t random_mode(bool dir)
{
	static const uint32_t file_modes[] = {0644, 0600, 0666, 0755, 0444, 0640, 04755, 02755};
	static const uint32_t dir_modes[] = {0755, 0777, 0700, 01777, 02775, 0555, 0711};
	return dir ? dir_modes[test_rng_below(7)] : file_modes[test_rng_below(8)];
}

/* ---------------------------------------------------------------- the calls */

static void call_lookup(void)
{
	struct diff_obj *dir = random_dir();
	const char *name = random_name(true);
	bool user = pick_user();
	snprintf(call_desc, sizeof(call_desc), "LOOKUP %.24s%s", name, user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	LOOKUP3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		LOOKUP3args a = {.what = {.dir = pc_fh_arg(&dir->do_fh[s]), .name = (char *)name}};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_lookup(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (!same_status(st) || st[0] != NFS3_OK)
		return;
	LOOKUP3resok *ok0 = &r[0].LOOKUP3res_u.resok, *ok1 = &r[1].LOOKUP3res_u.resok;
	compare_post("object", &ok0->obj_attributes, &ok1->obj_attributes);
	struct pc_fh fh[DIFF_SIDES];
	pc_fh_set(&fh[0], &ok0->object);
	pc_fh_set(&fh[1], &ok1->object);
	if (ok0->obj_attributes.attributes_follow)
		note_obj(fh, ok0->obj_attributes.post_op_attr_u.attributes.type);
}

static void call_getattr(void)
{
	struct diff_obj *o = random_obj(0);
	snprintf(call_desc, sizeof(call_desc), "GETATTR");
	uint32_t st[DIFF_SIDES];
	GETATTR3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		GETATTR3args a = {.object = pc_fh_arg(&o->do_fh[s])};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_getattr(&root_cl[s], &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK)
		compare_fattr("attributes", &r[0].GETATTR3res_u.resok.obj_attributes,
			      &r[1].GETATTR3res_u.resok.obj_attributes);
}

/* The new object of a CREATE, MKDIR, SYMLINK or MKNOD that succeeded on both sides. */
static void learn_new(const post_op_fh3 *fh0, const post_op_fh3 *fh1, const post_op_attr *a0,
		      const post_op_attr *a1)
{
	compare_post("new object", a0, a1);
	if (!fh0->handle_follows || !fh1->handle_follows || !a0->attributes_follow)
		return;
	struct pc_fh fh[DIFF_SIDES];
	pc_fh_set(&fh[0], &fh0->post_op_fh3_u.handle);
	pc_fh_set(&fh[1], &fh1->post_op_fh3_u.handle);
	note_obj(fh, a0->post_op_attr_u.attributes.type);
}

static void call_create(void)
{
	struct diff_obj *dir = random_dir();
	const char *name = random_name(false);
	bool user = pick_user();
	createmode3 how = (createmode3)test_rng_below(3); /* UNCHECKED, GUARDED, EXCLUSIVE */
	uint32_t mode = random_mode(false);
	uint64_t verf = call_no % 4; /* a repeated verifier makes a retried EXCLUSIVE create */
	/* An UNCHECKED create may carry a size, which applies to a file that exists. */
	bool sized = how == UNCHECKED && test_rng_below(3) == 0;
	int64_t size = sized ? (int64_t)test_rng_below(3000) : -1;
	snprintf(call_desc, sizeof(call_desc), "CREATE %.24s how %d mode %04o size %" PRId64 "%s",
		 name, how, mode, size, user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	CREATE3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		CREATE3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = pc_fh_arg(&dir->do_fh[s]);
		a.where.name = (char *)name;
		a.how.mode = how;
		if (how == EXCLUSIVE)
			memcpy(a.how.createhow3_u.verf, &verf, sizeof(verf));
		else
			a.how.createhow3_u.obj_attributes = pc_sattr_mode(mode);
		if (size >= 0) {
			a.how.createhow3_u.obj_attributes.size.set_it = 1;
			a.how.createhow3_u.obj_attributes.size.set_size3_u.size = (uint64_t)size;
		}
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_create(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (!same_status(st) || st[0] != NFS3_OK)
		return;
	CREATE3resok *ok0 = &r[0].CREATE3res_u.resok, *ok1 = &r[1].CREATE3res_u.resok;
	/* An EXCLUSIVE create's attributes are the server's until the client's SETATTR (RFC 1813
	 * 3.3.8: the verifier may live in them), so only its handle is learnt. */
	post_op_attr none = {.attributes_follow = 0};
	learn_new(&ok0->obj, &ok1->obj, how == EXCLUSIVE ? &none : &ok0->obj_attributes,
		  how == EXCLUSIVE ? &none : &ok1->obj_attributes);
}

static void call_mkdir(void)
{
	struct diff_obj *dir = random_dir();
	const char *name = random_name(false);
	bool user = pick_user();
	uint32_t mode = random_mode(true);
	snprintf(call_desc, sizeof(call_desc), "MKDIR %.24s mode %04o%s", name, mode,
		 user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	MKDIR3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		MKDIR3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = pc_fh_arg(&dir->do_fh[s]);
		a.where.name = (char *)name;
		a.attributes = pc_sattr_mode(mode);
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_mkdir(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK)
		learn_new(&r[0].MKDIR3res_u.resok.obj, &r[1].MKDIR3res_u.resok.obj,
			  &r[0].MKDIR3res_u.resok.obj_attributes,
			  &r[1].MKDIR3res_u.resok.obj_attributes);
}

static void call_symlink(void)
{
	static const char *const targets[] = {"a", "../b", "/etc/passwd", "c/d/e", "."};
	struct diff_obj *dir = random_dir();
	const char *name = random_name(false);
	const char *target = targets[test_rng_below(5)];
	snprintf(call_desc, sizeof(call_desc), "SYMLINK %.24s -> %s", name, target);
	uint32_t st[DIFF_SIDES];
	SYMLINK3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		SYMLINK3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = pc_fh_arg(&dir->do_fh[s]);
		a.where.name = (char *)name;
		a.symlink.symlink_attributes = sattr_none();
		a.symlink.symlink_data = (char *)target;
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_symlink(&root_cl[s], &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK)
		learn_new(&r[0].SYMLINK3res_u.resok.obj, &r[1].SYMLINK3res_u.resok.obj,
			  &r[0].SYMLINK3res_u.resok.obj_attributes,
			  &r[1].SYMLINK3res_u.resok.obj_attributes);
}

static void call_mknod(void)
{
	struct diff_obj *dir = random_dir();
	const char *name = random_name(false);
	snprintf(call_desc, sizeof(call_desc), "MKNOD %.24s fifo", name);
	uint32_t st[DIFF_SIDES];
	MKNOD3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		MKNOD3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = pc_fh_arg(&dir->do_fh[s]);
		a.where.name = (char *)name;
		a.what.type = NF3FIFO;
		a.what.mknoddata3_u.pipe_attributes = pc_sattr_mode(0640);
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_mknod(&root_cl[s], &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK)
		learn_new(&r[0].MKNOD3res_u.resok.obj, &r[1].MKNOD3res_u.resok.obj,
			  &r[0].MKNOD3res_u.resok.obj_attributes,
			  &r[1].MKNOD3res_u.resok.obj_attributes);
}

static void call_remove(bool rmdir)
{
	struct diff_obj *dir = random_dir();
	const char *name = random_name(true);
	bool user = pick_user();
	snprintf(call_desc, sizeof(call_desc), "%s %.24s%s", rmdir ? "RMDIR" : "REMOVE", name,
		 user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		diropargs3 where = {.dir = pc_fh_arg(&dir->do_fh[s]), .name = (char *)name};
		if (rmdir) {
			RMDIR3args a = {.object = where};
			RMDIR3res r;
			memset(&r, 0, sizeof(r));
			st[s] = reply_status(pc_nfs3_rmdir(client(s, user), &a, &r), &r.status);
		} else {
			REMOVE3args a = {.object = where};
			REMOVE3res r;
			memset(&r, 0, sizeof(r));
			st[s] = reply_status(pc_nfs3_remove(client(s, user), &a, &r), &r.status);
		}
	}
	same_status(st);
}

static void call_rename(void)
{
	struct diff_obj *from = random_dir(), *to = random_dir();
	const char *from_name = random_name(true), *to_name = random_name(true);
	bool user = pick_user();
	snprintf(call_desc, sizeof(call_desc), "RENAME %.24s to %.24s%s%s", from_name, to_name,
		 from == to ? " in one directory" : "", user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		RENAME3args a = {
		    .from = {.dir = pc_fh_arg(&from->do_fh[s]), .name = (char *)from_name},
		    .to = {.dir = pc_fh_arg(&to->do_fh[s]), .name = (char *)to_name}};
		RENAME3res r;
		memset(&r, 0, sizeof(r));
		st[s] = reply_status(pc_nfs3_rename(client(s, user), &a, &r), &r.status);
	}
	same_status(st);
}

static void call_link(void)
{
	struct diff_obj *file = random_obj(0), *dir = random_dir();
	const char *name = random_name(false);
	snprintf(call_desc, sizeof(call_desc), "LINK type %u as %.24s", file->do_type, name);
	uint32_t st[DIFF_SIDES];
	LINK3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		LINK3args a = {.file = pc_fh_arg(&file->do_fh[s]),
			       .link = {.dir = pc_fh_arg(&dir->do_fh[s]), .name = (char *)name}};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_link(&root_cl[s], &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK)
		compare_post("linked object", &r[0].LINK3res_u.resok.file_attributes,
			     &r[1].LINK3res_u.resok.file_attributes);
}

static void call_write(void)
{
	static char data[DIFF_DATA_MAX];
	struct diff_obj *o = random_obj(test_rng_below(4) ? NF3REG : 0);
	bool user = pick_user();
	uint64_t off = test_rng_below(4) == 0 ? 0 : test_rng_below(40000);
	uint32_t len = test_rng_below(DIFF_DATA_MAX);
	stable_how stable = test_rng_below(2) ? FILE_SYNC : UNSTABLE;
	for (uint32_t i = 0; i < len; i++)
		data[i] = (char)('A' + (call_no + i) % 26);
	snprintf(call_desc, sizeof(call_desc), "WRITE %u at %" PRIu64 " stable %d%s", len, off,
		 stable, user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	WRITE3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		WRITE3args a = {.file = pc_fh_arg(&o->do_fh[s]), .offset = off, .count = len,
				.stable = stable};
		a.data.data_len = len;
		a.data.data_val = data;
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_write(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (!same_status(st) || st[0] != NFS3_OK)
		return;
	WRITE3resok *ok0 = &r[0].WRITE3res_u.resok, *ok1 = &r[1].WRITE3res_u.resok;
	if (ok0->count != ok1->count)
		report("count %u against %u", ok0->count, ok1->count);
	compare_post("written file", &ok0->file_wcc.after, &ok1->file_wcc.after);
}

static void call_read(void)
{
	struct diff_obj *o = random_obj(test_rng_below(4) ? NF3REG : 0);
	bool user = pick_user();
	uint64_t off = test_rng_below(3) == 0 ? 0 : test_rng_below(48000);
	uint32_t count = test_rng_below(9000);
	snprintf(call_desc, sizeof(call_desc), "READ %u at %" PRIu64 "%s", count, off,
		 user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	READ3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		READ3args a = {.file = pc_fh_arg(&o->do_fh[s]), .offset = off, .count = count};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_read(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (!same_status(st) || st[0] != NFS3_OK)
		return;
	READ3resok *ok0 = &r[0].READ3res_u.resok, *ok1 = &r[1].READ3res_u.resok;
	compare_post("file read", &ok0->file_attributes, &ok1->file_attributes);
	/* A server may return fewer bytes than asked before the end; both back ends return all
	 * that the file holds, so a short count from one of them alone is a difference. */
	if (ok0->count != ok1->count || ok0->data.data_len != ok1->data.data_len)
		report("READ returned %u bytes against %u", ok0->count, ok1->count);
	else if (memcmp(ok0->data.data_val, ok1->data.data_val, ok0->data.data_len) != 0)
		report("READ returned different bytes");
	if (ok0->eof != ok1->eof)
		report("eof %u against %u", ok0->eof, ok1->eof);
}

static void call_setattr(void)
{
	struct diff_obj *o = random_obj(0);
	bool user = pick_user();
	sattr3 sa = sattr_none();
	char what[96] = "";
	size_t used = 0;
	unsigned pick = test_rng_below(16);
	if (pick & 1) {
		sa.mode.set_it = 1;
		sa.mode.set_mode3_u.mode = random_mode(o->do_type == NF3DIR);
		used += (size_t)snprintf(what + used, sizeof(what) - used, " mode %04o",
					 sa.mode.set_mode3_u.mode);
	}
	if (pick & 2) {
		sa.size.set_it = 1;
		sa.size.set_size3_u.size = test_rng_below(3) == 0 ? 0 : test_rng_below(45000);
		used += (size_t)snprintf(what + used, sizeof(what) - used, " size %" PRIu64,
					 (uint64_t)sa.size.set_size3_u.size);
	}
	if (pick & 4) {
		static const uint32_t gids[] = {0, DIFF_USER_UID, DIFF_USER_GROUP,
						DIFF_OTHER_GROUP};
		unsigned which = test_rng_below(3); /* 0: owner and group, 1: owner, 2: group */
		uint32_t uid = test_rng_below(2) ? DIFF_USER_UID : 0, gid = gids[test_rng_below(4)];
		if (which != 2) {
			sa.uid.set_it = 1;
			sa.uid.set_uid3_u.uid = uid;
			used += (size_t)snprintf(what + used, sizeof(what) - used, " uid %u", uid);
		}
		if (which != 1) {
			sa.gid.set_it = 1;
			sa.gid.set_gid3_u.gid = gid;
			used += (size_t)snprintf(what + used, sizeof(what) - used, " gid %u", gid);
		}
	}
	if (pick & 8 || pick == 0) {
		/* The client's time needs ownership; the server's time write permission too. */
		bool server_time = test_rng_below(2) == 0;
		sa.mtime.set_it = server_time ? SET_TO_SERVER_TIME : SET_TO_CLIENT_TIME;
		sa.mtime.set_mtime_u.mtime.seconds = 1700000000u + (uint32_t)call_no;
		used += (size_t)snprintf(what + used, sizeof(what) - used, " mtime%s",
					 server_time ? " now" : "");
	}
	/* A guard on the ctime: each side's own (read just before: the change applies), or one
	 * long past (NOT_SYNC). */
	unsigned guard = test_rng_below(6); /* 0: the object's ctime, 1: a stale one, else none */
	snprintf(call_desc, sizeof(call_desc), "SETATTR type %u%s%s%s", o->do_type, what,
		 guard == 0 ? " guarded" : guard == 1 ? " guarded by a stale ctime" : "",
		 user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	SETATTR3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		SETATTR3args a = {.object = pc_fh_arg(&o->do_fh[s]), .new_attributes = sa};
		if (guard == 0) {
			GETATTR3args ga = {.object = pc_fh_arg(&o->do_fh[s])};
			GETATTR3res gr;
			memset(&gr, 0, sizeof(gr));
			if (pc_nfs3_getattr(&root_cl[s], &ga, &gr) == 0 && gr.status == NFS3_OK) {
				a.guard.check = 1;
				a.guard.sattrguard3_u.obj_ctime =
				    gr.GETATTR3res_u.resok.obj_attributes.ctime;
			}
		} else if (guard == 1) {
			a.guard.check = 1;
			a.guard.sattrguard3_u.obj_ctime.seconds = 1000000000u;
		}
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_setattr(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK)
		compare_post("changed object", &r[0].SETATTR3res_u.resok.obj_wcc.after,
			     &r[1].SETATTR3res_u.resok.obj_wcc.after);
}

static void call_access(void)
{
	struct diff_obj *o = random_obj(0);
	bool user = pick_user() || test_rng_below(2) == 0;
	snprintf(call_desc, sizeof(call_desc), "ACCESS type %u%s", o->do_type,
		 user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	ACCESS3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		ACCESS3args a = {.object = pc_fh_arg(&o->do_fh[s]), .access = 0x3f};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_access(client(s, user), &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK &&
	    r[0].ACCESS3res_u.resok.access != r[1].ACCESS3res_u.resok.access)
		report("granted %#x against %#x", r[0].ACCESS3res_u.resok.access,
		       r[1].ACCESS3res_u.resok.access);
}

static void call_readlink(void)
{
	struct diff_obj *o = random_obj(test_rng_below(4) ? NF3LNK : 0);
	snprintf(call_desc, sizeof(call_desc), "READLINK type %u", o->do_type);
	uint32_t st[DIFF_SIDES];
	READLINK3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		READLINK3args a = {.symlink = pc_fh_arg(&o->do_fh[s])};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_readlink(&root_cl[s], &a, &r[s]), &r[s].status);
	}
	if (same_status(st) && st[0] == NFS3_OK &&
	    strcmp(r[0].READLINK3res_u.resok.data, r[1].READLINK3res_u.resok.data) != 0)
		report("target \"%s\" against \"%s\"", r[0].READLINK3res_u.resok.data,
		       r[1].READLINK3res_u.resok.data);
}

/* One directory entry of a listing, as READDIRPLUS gave it. */
struct diff_entry {
	char de_name[DIFF_NAME_MAX + 1];
	bool de_has_attr;
	fattr3 de_attr;
	bool de_has_fh;
	struct pc_fh de_fh;
};

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct diff_entry *)a)->de_name,
		      ((const struct diff_entry *)b)->de_name);
}

/* Lists a whole directory with READDIRPLUS; returns the status, the entries sorted by name. */
static uint32_t list_dir(unsigned side, bool user, const struct pc_fh *dir, uint32_t maxcount,
			 struct diff_entry *out, unsigned *n_out)
{
	struct pc_fh dir_copy = *dir;
	uint64_t cookie = 0;
	char verf[NFS3_COOKIEVERFSIZE] = {0};
	unsigned n = 0;
	for (int round = 0; round < 64; round++) {
		READDIRPLUS3args a;
		memset(&a, 0, sizeof(a));
		a.dir = pc_fh_arg(&dir_copy);
		a.cookie = cookie;
		memcpy(a.cookieverf, verf, sizeof(verf));
		a.dircount = maxcount / 2;
		a.maxcount = maxcount;
		READDIRPLUS3res r;
		memset(&r, 0, sizeof(r));
		if (pc_nfs3_readdirplus(client(side, user), &a, &r) != 0)
			return DIFF_NO_REPLY;
		if (r.status != NFS3_OK)
			return (uint32_t)r.status;
		READDIRPLUS3resok *ok = &r.READDIRPLUS3res_u.resok;
		memcpy(verf, ok->cookieverf, sizeof(verf));
		for (entryplus3 *e = ok->reply.entries; e != NULL; e = e->nextentry) {
			cookie = e->cookie;
			if (strcmp(e->name, ".") == 0 || strcmp(e->name, "..") == 0 ||
			    n == DIFF_MAX_LIST)
				continue;
			struct diff_entry *d = &out[n++];
			memset(d, 0, sizeof(*d));
			snprintf(d->de_name, sizeof(d->de_name), "%s", e->name);
			d->de_has_attr = e->name_attributes.attributes_follow;
			if (d->de_has_attr)
				d->de_attr = e->name_attributes.post_op_attr_u.attributes;
			d->de_has_fh = e->name_handle.handle_follows;
			if (d->de_has_fh)
				pc_fh_set(&d->de_fh, &e->name_handle.post_op_fh3_u.handle);
		}
		if (ok->reply.eof)
			break;
	}
	qsort(out, n, sizeof(out[0]), entry_cmp);
	*n_out = n;
	return NFS3_OK;
}

static void call_readdirplus(void)
{
	static struct diff_entry list[DIFF_SIDES][DIFF_MAX_LIST];
	static const uint32_t maxcounts[] = {4096, 1024, 600}; /* the smaller ones take pages */
	struct diff_obj *dir = random_obj(test_rng_below(6) ? NF3DIR : 0);
	bool user = pick_user();
	uint32_t maxcount = maxcounts[test_rng_below(3)];
	snprintf(call_desc, sizeof(call_desc), "READDIRPLUS type %u maxcount %u%s", dir->do_type,
		 maxcount, user ? " as a user" : "");
	uint32_t st[DIFF_SIDES];
	unsigned n[DIFF_SIDES] = {0, 0};
	for (unsigned s = 0; s < DIFF_SIDES; s++)
		st[s] = list_dir(s, user, &dir->do_fh[s], maxcount, list[s], &n[s]);
	if (!same_status(st) || st[0] != NFS3_OK)
		return;
	if (n[0] != n[1]) {
		report("%u entries against %u", n[0], n[1]);
		return;
	}
	for (unsigned i = 0; i < n[0]; i++) {
		if (strcmp(list[0][i].de_name, list[1][i].de_name) != 0) {
			report("entry %.40s against %.40s", list[0][i].de_name, list[1][i].de_name);
			return;
		}
	}
	for (unsigned i = 0; i < n[0]; i++) {
		const struct diff_entry *e0 = &list[0][i], *e1 = &list[1][i];
		char what[64];
		snprintf(what, sizeof(what), "entry %.40s", e0->de_name);
		if (e0->de_has_attr && e1->de_has_attr)
			compare_fattr(what, &e0->de_attr, &e1->de_attr);
		if (e0->de_has_fh && e1->de_has_fh && e0->de_has_attr) {
			struct pc_fh fh[DIFF_SIDES] = {e0->de_fh, e1->de_fh};
			note_obj(fh, e0->de_attr.type);
		}
	}
}

static void call_commit(void)
{
	struct diff_obj *o = random_obj(test_rng_below(4) ? NF3REG : 0);
	snprintf(call_desc, sizeof(call_desc), "COMMIT type %u", o->do_type);
	uint32_t st[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		COMMIT3args a = {.file = pc_fh_arg(&o->do_fh[s])};
		COMMIT3res r;
		memset(&r, 0, sizeof(r));
		st[s] = reply_status(pc_nfs3_commit(&root_cl[s], &a, &r), &r.status);
	}
	same_status(st);
}

static void call_pathconf(void)
{
	struct diff_obj *o = random_obj(0);
	snprintf(call_desc, sizeof(call_desc), "PATHCONF type %u", o->do_type);
	uint32_t st[DIFF_SIDES];
	PATHCONF3res r[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		PATHCONF3args a = {.object = pc_fh_arg(&o->do_fh[s])};
		memset(&r[s], 0, sizeof(r[s]));
		st[s] = reply_status(pc_nfs3_pathconf(&root_cl[s], &a, &r[s]), &r[s].status);
	}
	if (!same_status(st) || st[0] != NFS3_OK)
		return;
	/* What a client relies on; link_max is each file system's own. */
	PATHCONF3resok *a = &r[0].PATHCONF3res_u.resok, *b = &r[1].PATHCONF3res_u.resok;
	if (a->name_max != b->name_max || a->no_trunc != b->no_trunc ||
	    a->chown_restricted != b->chown_restricted ||
	    a->case_insensitive != b->case_insensitive ||
	    a->case_preserving != b->case_preserving)
		report("name_max %u/%u, no_trunc %d/%d, chown_restricted %d/%d, case %d%d/%d%d",
		       a->name_max, b->name_max, a->no_trunc, b->no_trunc, a->chown_restricted,
		       b->chown_restricted, a->case_insensitive, a->case_preserving,
		       b->case_insensitive, b->case_preserving);
}

/* ---------------------------------------------------------------- the runs */

static void one_call(void)
{
	unsigned pick = test_rng_below(100);
	if (pick < 12)
		call_lookup();
	else if (pick < 20)
		call_getattr();
	else if (pick < 32)
		call_create();
	else if (pick < 40)
		call_mkdir();
	else if (pick < 44)
		call_symlink();
	else if (pick < 46)
		call_mknod();
	else if (pick < 53)
		call_remove(false);
	else if (pick < 58)
		call_remove(true);
	else if (pick < 66)
		call_rename();
	else if (pick < 70)
		call_link();
	else if (pick < 78)
		call_write();
	else if (pick < 84)
		call_read();
	else if (pick < 90)
		call_setattr();
	else if (pick < 93)
		call_access();
	else if (pick < 95)
		call_readlink();
	else if (pick < 98)
		call_readdirplus();
	else if (pick < 99)
		call_pathconf();
	else
		call_commit();
	if (verbose)
		printf("#   %lu: %s\n", call_no, call_desc);
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		pc_release(&root_cl[s]);
		pc_release(&user_cl[s]);
	}
}

/* One seeded run in a fresh directory of each export's root. */
static bool run_seed(uint64_t seed, unsigned long calls, unsigned run_index)
{
	char top[32];
	snprintf(top, sizeof(top), "run%u", run_index);
	test_rng_seed(seed * 2654435761u + 1);
	call_no = 0;
	reports = 0;
	nobjs = 0;
	/* The run's own top directory, world-writable so the unprivileged uid can work in it. */
	struct pc_fh fh[DIFF_SIDES];
	for (unsigned s = 0; s < DIFF_SIDES; s++) {
		struct pc_fh root;
		uint8_t raw[64];
		uint32_t len = 0;
		if (rr_mount(srv[s].ts_port, srv[s].ts_export_path[0], raw, &len) != 0) {
			printf("# %s: MOUNT failed\n", side_name[s]);
			return false;
		}
		root.pf_len = len;
		memcpy(root.pf_data, raw, len);
		export_root[s] = root;
		MKDIR3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = pc_fh_arg(&root);
		a.where.name = top;
		a.attributes = pc_sattr_mode(0777);
		MKDIR3res r;
		memset(&r, 0, sizeof(r));
		if (pc_nfs3_mkdir(&root_cl[s], &a, &r) != 0 || r.status != NFS3_OK ||
		    !r.MKDIR3res_u.resok.obj.handle_follows) {
			printf("# %s: MKDIR %s failed\n", side_name[s], top);
			return false;
		}
		pc_fh_set(&fh[s], &r.MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
		pc_release(&root_cl[s]);
	}
	objs[0].do_fh[0] = fh[0];
	objs[0].do_fh[1] = fh[1];
	objs[0].do_type = NF3DIR;
	nobjs = 1;
	while (call_no < calls && reports < DIFF_MAX_REPORTS) {
		call_no++;
		one_call();
	}
	if (reports >= DIFF_MAX_REPORTS)
		printf("#   stopped after %u differences\n", reports);
	return reports == 0;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *lines[] = {"%s *(rw,insecure,no_root_squash)"};
	bool started = tap_check(ts_start_backend(&srv[0], lines, 1, NULL, 0, false) == 0,
				 "posix server starts") &&
		       tap_check(ts_start_backend(&srv[1], lines, 1, NULL, 0, true) == 0,
				 "pool server starts");
	bool ready = started;
	for (unsigned s = 0; ready && s < DIFF_SIDES; s++) {
		uint16_t port = srv[s].ts_port;
		const uint32_t groups[] = {DIFF_USER_GROUP};
		bool connected = pc_connect(&root_cl[s], port, NFS_PROGRAM, 3, 0, 0) == 0 &&
				 pc_connect_groups(&user_cl[s], port, NFS_PROGRAM, 3, DIFF_USER_UID,
						   DIFF_USER_UID, 1, groups) == 0;
		ready = tap_check(connected, "NFS connections to the %s server", side_name[s]);
	}
	if (ready) {
		const char *seed_env = getenv("SHALE_DIFF_SEED");
		const char *calls_env = getenv("SHALE_DIFF_CALLS");
		verbose = getenv("SHALE_DIFF_VERBOSE") != NULL;
		unsigned long calls = calls_env ? strtoul(calls_env, NULL, 10) : DIFF_CALLS_DEFAULT;
		uint64_t seeds[] = {1, 2, 3, 4};
		unsigned nseeds = 4;
		if (seed_env != NULL) {
			seeds[0] = strtoull(seed_env, NULL, 10);
			nseeds = 1;
		}
		for (unsigned i = 0; i < nseeds; i++)
			tap_check(run_seed(seeds[i], calls, i),
				  "seed %" PRIu64 ": %lu calls, the pool answers as the posix back "
				  "end does",
				  seeds[i], calls);
		for (unsigned s = 0; s < DIFF_SIDES; s++) {
			pc_disconnect(&root_cl[s]);
			pc_disconnect(&user_cl[s]);
		}
	}
	for (unsigned s = 0; started && s < DIFF_SIDES; s++)
		tap_check(ts_alive(&srv[s]), "%s server still running", side_name[s]);
	for (unsigned s = 0; s < DIFF_SIDES; s++)
		if (srv[s].ts_root[0] != '\0')
			tap_check(ts_stop(&srv[s]) == 0, "%s server exits cleanly on SIGTERM",
				  side_name[s]);
	return tap_finish();
}
