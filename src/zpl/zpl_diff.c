/* zpl_diff.c: the differences between two states of one file system (zfs diff): the paths
 * created, removed, renamed and modified between a snapshot and a later snapshot, or the live
 * file system.
 *
 * ---- Problem ----
 * zfs diff asks the DMU which dnodes were born after the older snapshot and names each through
 * the parent pointer every znode carries. Here files carry no parent pointer (directories do,
 * zpl.c), so a file's names are the directory entries that name it, and those are found only by
 * reading the directories. And what changed is known only by comparing the inode records.
 *
 * ---- How ----
 * Each side is read into memory by one ordered scan of its tree (struct zpl_diff_side): every
 * inode's object id, generation, type, size, mtime and ctime, and every directory entry's
 * directory, child and name. The scan goes in steps whose size the caller bounds, so that a
 * caller reading a file system it serves holds its lock a bounded time at once, and a step that
 * misses a block resumes after the last key it read (btree_scan's resumption contract). Extents
 * carry nothing diff needs: past the first ZPL_DIFF_EXTENTS_READ_MAX of a file, the scan jumps
 * over the rest. Once both sides are read, all in memory:
 *   1. Names. An entry counts when the root reaches its directory. A directory's own name is the
 *      first entry found naming it (rule R3 of zpl.c gives it exactly one); the root reaches a
 *      directory when it reaches the directory that names it, decided once per directory and
 *      remembered. A path is the names from the root down, "/" first; the root's path is "/".
 *   2. Matching. An object is the same on both sides when its object id and its generation (and
 *      its type) are. The zpl never reuses an id, but an id found with another generation
 *      would be another object: a remove and a create.
 *   3. Per object on one side only: every path it has there, "-" (removed) or "+" (created).
 *      Per object on both: changed when its ctime, mtime or size differ (the ctime changes with
 *      every change of its contents, attributes, links or name; a directory's mtime with every
 *      change of its entries). Its entries are matched by (directory, name), the directory
 *      being the same object on both sides. A matched entry of a changed object is "M" when its
 *      path is the same and "R" (old -> new) when a directory above it was renamed, as zfs diff
 *      prints a changed file whose path differs. The entries left on each side are paired in
 *      path order as renames ("R"); what is left over is a link removed ("-") or added ("+").
 *      So a file with several links gets a line per link, and an object whose entries and inode
 *      are unchanged gets none, whatever happened to the directories above it. The root has no
 *      entry: it is "/", modified or not. A tree never formatted (a snapshot of a file system
 *      nobody had used) has no root and reads as an empty root directory.
 *   4. The lines are sorted by path (bytes), then "-", "R", "M", "+" for one path.
 *
 * ---- Cost ----
 * Both trees are read whole: time proportional to the inodes and entries of both (extents
 * mostly jumped over), memory about 70 bytes per object (the table is at most half full, so 140)
 * plus 40 per entry plus the names, per side, and the output. ZFS prunes with block births; a
 * walk of both trees that skipped the subtrees they share (equal node pointers, births before
 * the older snapshot's txg) would cost only what changed, but the tree has no paired walk yet.
 *
 * ---- A side that changes while it is read ----
 * A live file system read in steps may change between them: an entry renamed meanwhile can be
 * seen at both names or at neither. Every path printed is still well formed (a directory is
 * named once, a cycle is never followed, an entry whose directory the root does not reach is
 * left out), but the report may mix the states before and after such a change. A snapshot does
 * not change. */
#include <stdlib.h>

#include "zpl/zpl_impl.h"

/* Extents of one file read before the scan jumps over the rest: enough that small files never
 * cost a new descent, few enough that a large one costs one. */
#define ZPL_DIFF_EXTENTS_READ_MAX 8u
#define ZD_NONE UINT64_MAX

/* What the root reaching a directory is known to be (zo_reach). */
enum zd_reach { ZD_REACH_UNKNOWN = 0, ZD_REACH_BUSY, ZD_REACH_YES, ZD_REACH_NO };

struct zd_obj {
	uint64_t zo_objid; /* 0: an empty slot (ids start at ZPL_FIRST_OBJID) */
	uint64_t zo_gen;
	uint64_t zo_size;
	struct fs_time zo_mtime, zo_ctime;
	uint64_t zo_links; /* its first entry (index into ds_ents), ZD_NONE: none */
	uint8_t zo_type;
	uint8_t zo_reach; /* enum zd_reach, directories */
};

struct zd_ent {
	uint64_t ze_dir;
	uint64_t ze_child;
	uint64_t ze_name_off; /* into ds_names */
	uint64_t ze_next;     /* the child's next entry, ZD_NONE: none */
	uint8_t ze_name_len;
};

struct zpl_diff_side {
	struct zd_obj *ds_objs; /* open addressing by object id, at most half full */
	uint64_t ds_cap, ds_nobjs;
	struct zd_ent *ds_ents;
	uint64_t ds_nents, ds_ents_cap;
	char *ds_names;
	uint64_t ds_names_len, ds_names_cap;
	uint64_t ds_root; /* from the meta record; 0: the tree has none (never formatted) */
	/* The scan: where it resumes (the last key read), and the state of the step running. */
	uint8_t ds_last[ZPL_KEY_MAX];
	uint32_t ds_last_len;
	bool ds_any;
	bool ds_have_meta;
	bool ds_done;
	uint64_t ds_extents_objid; /* the object whose extents the scan is in, and how many */
	uint64_t ds_extents_read;
	uint32_t ds_budget;
	bool ds_stopped; /* the step's budget ran out */
	bool ds_jumped;  /* the visit moved ds_last past a file's extents */
	int ds_err;
};

/* ---------------------------------------------------------------------------------------------
 * One side in memory */

int zpl_diff_side_create(struct zpl_diff_side **out)
{
	*out = mem_zalloc(sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void zpl_diff_side_destroy(struct zpl_diff_side *side)
{
	if (!side)
		return;
	mem_free(side->ds_objs);
	mem_free(side->ds_ents);
	mem_free(side->ds_names);
	mem_free(side);
}

static uint64_t zd_slot(uint64_t objid, uint64_t cap)
{
	uint64_t x = objid * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing: consecutive ids spread */
	return (x ^ (x >> 29)) & (cap - 1);
}

static struct zd_obj *zd_find(struct zpl_diff_side *s, uint64_t objid)
{
	if (s->ds_cap == 0 || objid == 0)
		return NULL;
	for (uint64_t i = zd_slot(objid, s->ds_cap);; i = (i + 1) & (s->ds_cap - 1)) {
		if (s->ds_objs[i].zo_objid == objid)
			return &s->ds_objs[i];
		if (s->ds_objs[i].zo_objid == 0)
			return NULL;
	}
}

/* The slot of objid, taken if it is new; NULL without memory. */
static struct zd_obj *zd_add(struct zpl_diff_side *s, uint64_t objid)
{
	struct zd_obj *o = zd_find(s, objid);
	if (o)
		return o;
	if ((s->ds_nobjs + 1) * 2 > s->ds_cap) {
		uint64_t cap = s->ds_cap ? s->ds_cap * 2 : 1024;
		struct zd_obj *n = mem_zalloc(sizeof(*n) * cap);
		if (!n)
			return NULL;
		for (uint64_t i = 0; i < s->ds_cap; i++) {
			if (s->ds_objs[i].zo_objid == 0)
				continue;
			uint64_t j = zd_slot(s->ds_objs[i].zo_objid, cap);
			while (n[j].zo_objid != 0)
				j = (j + 1) & (cap - 1);
			n[j] = s->ds_objs[i];
		}
		mem_free(s->ds_objs);
		s->ds_objs = n;
		s->ds_cap = cap;
	}
	uint64_t j = zd_slot(objid, s->ds_cap);
	while (s->ds_objs[j].zo_objid != 0)
		j = (j + 1) & (s->ds_cap - 1);
	s->ds_objs[j] = (struct zd_obj){.zo_objid = objid, .zo_links = ZD_NONE};
	s->ds_nobjs++;
	return &s->ds_objs[j];
}

static int zd_read_inode(struct zpl_diff_side *s, uint64_t objid, const void *val, uint32_t len)
{
	struct zpl_inode ino;
	if (objid < ZPL_FIRST_OBJID || zpl_inode_decode(val, len, &ino) != 0)
		return -EIO;
	struct zd_obj *o = zd_add(s, objid);
	if (!o)
		return -ENOMEM;
	o->zo_gen = ino.ino_gen;
	o->zo_size = ino.ino_size;
	o->zo_mtime = ino.ino_mtime;
	o->zo_ctime = ino.ino_ctime;
	o->zo_type = ino.ino_type;
	return 0;
}

/* Grows the array the pointer at array_ptr points to (*cap elements of size bytes; first when
 * it has none) to hold need; 0 or -ENOMEM (the array as it was). */
static int zd_grow(void *array_ptr, uint64_t *cap, uint64_t need, size_t size, uint64_t first)
{
	if (need <= *cap)
		return 0;
	uint64_t n = *cap ? *cap : first;
	while (n < need)
		n *= 2;
	void *old;
	memcpy(&old, array_ptr, sizeof(old)); /* any element type's pointer, without aliasing it */
	void *grown = mem_realloc(old, (size_t)n * size);
	if (!grown)
		return -ENOMEM;
	memcpy(array_ptr, &grown, sizeof(grown));
	*cap = n;
	return 0;
}

static int zd_read_dirent(struct zpl_diff_side *s, uint64_t dir, const void *val, uint32_t len)
{
	struct zpl_dirent de;
	if (zpl_dirent_decode(val, len, &de) != 0)
		return -EIO;
	int rc = zd_grow(&s->ds_ents, &s->ds_ents_cap, s->ds_nents + 1,
	                 sizeof(*s->ds_ents), 1024);
	if (rc == 0)
		rc = zd_grow(&s->ds_names, &s->ds_names_cap,
		             s->ds_names_len + de.de_name_len, 1, 16384);
	if (rc != 0)
		return rc;
	memcpy(s->ds_names + s->ds_names_len, de.de_name, de.de_name_len);
	s->ds_ents[s->ds_nents++] = (struct zd_ent){
		.ze_dir = dir,
		.ze_child = de.de_child,
		.ze_name_off = s->ds_names_len,
		.ze_next = ZD_NONE,
		.ze_name_len = de.de_name_len,
	};
	s->ds_names_len += de.de_name_len;
	return 0;
}

/* An extent key of objid: read (nothing to keep), or, past the first few of the file, jump to
 * the key after its last possible extent. false stops the scan for the jump. */
static bool zd_read_extent(struct zpl_diff_side *s, uint64_t objid)
{
	if (s->ds_extents_objid != objid) {
		s->ds_extents_objid = objid;
		s->ds_extents_read = 0;
	}
	if (++s->ds_extents_read <= ZPL_DIFF_EXTENTS_READ_MAX)
		return true;
	zpl_key_long(s->ds_last, objid, ZPL_KIND_EXTENT, UINT64_MAX);
	s->ds_last_len = ZPL_LONG_KEY;
	s->ds_jumped = true;
	return false;
}

static bool zd_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                     uint32_t val_len)
{
	struct zpl_diff_side *s = arg;
	if (s->ds_budget == 0) {
		s->ds_stopped = true;
		return false;
	}
	s->ds_budget--;
	const uint8_t *k = key;
	if (key_len != ZPL_SHORT_KEY && key_len != ZPL_LONG_KEY) {
		s->ds_err = -EIO;
		return false;
	}
	memcpy(s->ds_last, k, key_len);
	s->ds_last_len = key_len;
	s->ds_any = true;
	uint64_t objid = zpl_get_be64(k);
	uint8_t kind = k[8];
	if (!s->ds_have_meta) {
		/* the meta key is the smallest in a formatted tree */
		struct zpl_meta me;
		if (objid != 0 || kind != ZPL_KIND_META || key_len != ZPL_SHORT_KEY ||
		    zpl_meta_decode(val, val_len, &me) != 0) {
			s->ds_err = -EIO;
			return false;
		}
		s->ds_have_meta = true;
		s->ds_root = me.me_root_objid;
		return true;
	}
	if (kind == ZPL_KIND_INODE && key_len == ZPL_SHORT_KEY)
		s->ds_err = zd_read_inode(s, objid, val, val_len);
	else if (kind == ZPL_KIND_DIRENT && key_len == ZPL_LONG_KEY)
		s->ds_err = zd_read_dirent(s, objid, val, val_len);
	else if (kind == ZPL_KIND_EXTENT && key_len == ZPL_LONG_KEY)
		return zd_read_extent(s, objid);
	else if (!(kind == ZPL_KIND_UNLINKED && key_len == ZPL_LONG_KEY && objid == 0))
		s->ds_err = -EIO;
	return s->ds_err == 0;
}

/* After the scan: each object's entries chained from it. Entries naming no inode (a live side
 * read while it changed) are left out. */
static void zd_link_entries(struct zpl_diff_side *s)
{
	for (uint64_t i = 0; i < s->ds_nents; i++) {
		struct zd_obj *o = zd_find(s, s->ds_ents[i].ze_child);
		if (!o)
			continue;
		s->ds_ents[i].ze_next = o->zo_links;
		o->zo_links = i;
	}
}

int zpl_diff_side_read(struct zpl_diff_side *s, struct btree *tree, uint32_t max_records,
                       bool *done_out, struct blk_ptr *missing_out)
{
	*done_out = s->ds_done;
	if (s->ds_done)
		return 0;
	s->ds_budget = max_records ? max_records : UINT32_MAX;
	int rc;
	do {
		s->ds_stopped = s->ds_jumped = false;
		s->ds_err = 0;
		rc = btree_scan(tree, s->ds_any ? s->ds_last : NULL, s->ds_any ? s->ds_last_len : 0,
		                s->ds_any, zd_visit, s, missing_out);
		if (s->ds_err != 0)
			return s->ds_err;
		if (rc != 0)
			return rc == -SH_ENEEDBLOCK || rc == -ENOMEM ? rc : -EIO;
	} while (s->ds_jumped && !s->ds_stopped);
	if (s->ds_stopped || s->ds_jumped)
		return 0;
	zd_link_entries(s);
	s->ds_done = true;
	*done_out = true;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Names and paths */

/* Whether the root reaches directory d (through the first entry naming each directory on the
 * way up). Decided once per directory: the chain walked is marked busy, then with the answer. */
static bool zd_reached(struct zpl_diff_side *s, struct zd_obj *d)
{
	enum zd_reach answer = ZD_REACH_NO;
	for (struct zd_obj *o = d;;) {
		if (o->zo_objid == s->ds_root) {
			answer = ZD_REACH_YES;
			break;
		}
		if (o->zo_reach == ZD_REACH_YES || o->zo_reach == ZD_REACH_NO) {
			answer = (enum zd_reach)o->zo_reach;
			break;
		}
		/* busy: a cycle (a live side changed while read); a non-directory or no entry: cut */
		if (o->zo_reach == ZD_REACH_BUSY || o->zo_type != FS_DIR || o->zo_links == ZD_NONE)
			break;
		o->zo_reach = ZD_REACH_BUSY;
		o = zd_find(s, s->ds_ents[o->zo_links].ze_dir);
		if (!o)
			break;
	}
	for (struct zd_obj *o = d; o && o->zo_reach == ZD_REACH_BUSY;
	     o = zd_find(s, s->ds_ents[o->zo_links].ze_dir))
		o->zo_reach = (uint8_t)answer;
	return answer == ZD_REACH_YES;
}

/* The entries of o that count (their directory reached; a directory's first only) into *v
 * (growing it; *cap elements). Returns the count, or -ENOMEM. */
static int64_t zd_links(struct zpl_diff_side *s, const struct zd_obj *o, uint64_t **v,
                        uint64_t *cap)
{
	int64_t n = 0;
	for (uint64_t e = o->zo_links; e != ZD_NONE; e = s->ds_ents[e].ze_next) {
		struct zd_obj *dir = zd_find(s, s->ds_ents[e].ze_dir);
		if (dir && dir->zo_type == FS_DIR && zd_reached(s, dir)) {
			if (zd_grow(v, cap, (uint64_t)n + 1, sizeof(**v), 16) != 0)
				return -ENOMEM;
			(*v)[n++] = e;
		}
		if (o->zo_type == FS_DIR)
			break; /* its name is its first entry's, which its children's paths go through */
	}
	return n;
}

/* The path of entry e ("/a/b"), allocated (mem_free), or NULL without memory. Its directory is
 * reached, so the walk up ends at the root. */
static char *zd_path(struct zpl_diff_side *s, uint64_t e)
{
	size_t len = 0;
	for (uint64_t x = e;;) {
		len += 1 + s->ds_ents[x].ze_name_len;
		const struct zd_obj *dir = zd_find(s, s->ds_ents[x].ze_dir);
		if (dir->zo_objid == s->ds_root)
			break;
		x = dir->zo_links;
	}
	char *path = mem_alloc(len + 1);
	if (!path)
		return NULL;
	path[len] = '\0';
	size_t at = len;
	for (uint64_t x = e;;) {
		const struct zd_ent *ent = &s->ds_ents[x];
		at -= ent->ze_name_len;
		memcpy(path + at, s->ds_names + ent->ze_name_off, ent->ze_name_len);
		path[--at] = '/';
		const struct zd_obj *dir = zd_find(s, ent->ze_dir);
		if (dir->zo_objid == s->ds_root)
			break;
		x = dir->zo_links;
	}
	return path;
}

/* ---------------------------------------------------------------------------------------------
 * The comparison */

struct zd_line {
	char zl_kind; /* enum zpl_diff_kind */
	char *zl_path;
	char *zl_new_path; /* renames only */
};

/* What one comparison has found so far, and scratch space reused per object. */
struct zd_diff {
	struct zpl_diff_side *zd_from, *zd_to;
	struct zd_line *zd_lines;
	uint64_t zd_nlines, zd_lines_cap;
	uint64_t *zd_from_links, *zd_to_links;
	uint64_t zd_from_cap, zd_to_cap;
};

/* Adds a line; takes path and new_path (either may be NULL: out of memory, reported here). */
static int zd_line_add(struct zd_diff *d, char kind, char *path, char *new_path)
{
	int rc = !path || (kind == ZPL_DIFF_RENAMED && !new_path) ? -ENOMEM : 0;
	if (rc == 0)
		rc = zd_grow(&d->zd_lines, &d->zd_lines_cap, d->zd_nlines + 1,
		             sizeof(*d->zd_lines), 64);
	if (rc != 0) {
		mem_free(path);
		mem_free(new_path);
		return rc;
	}
	d->zd_lines[d->zd_nlines++] = (struct zd_line){kind, path, new_path};
	return 0;
}

/* A line per entry of o on side s (kind: removed or created). */
static int zd_lines_of(struct zd_diff *d, struct zpl_diff_side *s, const struct zd_obj *o,
                       char kind)
{
	int64_t n = zd_links(s, o, &d->zd_from_links, &d->zd_from_cap);
	if (n < 0)
		return (int)n;
	for (int64_t i = 0; i < n; i++) {
		int rc = zd_line_add(d, kind, zd_path(s, d->zd_from_links[i]), NULL);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* Orders entries by (directory, name), for matching. */
struct zd_key {
	uint64_t zk_dir;
	const char *zk_name;
	uint8_t zk_name_len;
	uint64_t zk_ent;
	char *zk_path; /* left-over entries: their path, to pair by */
};

static int zd_key_cmp(const void *a, const void *b)
{
	const struct zd_key *x = a, *y = b;
	if (x->zk_dir != y->zk_dir)
		return x->zk_dir < y->zk_dir ? -1 : 1;
	int c = memcmp(x->zk_name, y->zk_name, SH_MIN(x->zk_name_len, y->zk_name_len));
	return c != 0 ? c : (int)x->zk_name_len - (int)y->zk_name_len;
}

static int zd_key_path_cmp(const void *a, const void *b)
{
	const struct zd_key *x = a, *y = b;
	return strcmp(x->zk_path, y->zk_path);
}

/* The keys of n entries of s (allocated; mem_free), or NULL. */
static struct zd_key *zd_keys(struct zpl_diff_side *s, const uint64_t *ents, int64_t n)
{
	struct zd_key *k = mem_zalloc(sizeof(*k) * (size_t)(n > 0 ? n : 1));
	if (!k)
		return NULL;
	for (int64_t i = 0; i < n; i++) {
		const struct zd_ent *e = &s->ds_ents[ents[i]];
		k[i] = (struct zd_key){e->ze_dir, s->ds_names + e->ze_name_off, e->ze_name_len,
		                       ents[i], NULL};
	}
	qsort(k, (size_t)n, sizeof(*k), zd_key_cmp);
	return k;
}

/* Whether directory objid is the same object on both sides. */
static bool zd_same_dir(const struct zd_diff *d, uint64_t objid)
{
	const struct zd_obj *a = zd_find(d->zd_from, objid), *b = zd_find(d->zd_to, objid);
	return a && b && a->zo_gen == b->zo_gen;
}

/* The left-over entries of one side, in path order: their paths into k[i].zk_path (owned by
 * the key until handed to a line). Entries matched have zk_ent ZD_NONE. Returns how many are
 * left (moved to the front), or -ENOMEM. */
static int64_t zd_leftovers(struct zpl_diff_side *s, struct zd_key *k, int64_t n)
{
	int64_t m = 0;
	for (int64_t i = 0; i < n; i++) {
		if (k[i].zk_ent == ZD_NONE)
			continue;
		k[m] = k[i];
		k[m].zk_path = zd_path(s, k[m].zk_ent);
		if (!k[m].zk_path) {
			for (int64_t j = 0; j < m; j++)
				mem_free(k[j].zk_path);
			return -ENOMEM;
		}
		m++;
	}
	qsort(k, (size_t)m, sizeof(*k), zd_key_path_cmp);
	return m;
}

/* An object on both sides (a on from, b on to). */
static int zd_compare(struct zd_diff *d, const struct zd_obj *a, const struct zd_obj *b)
{
	struct zpl_diff_side *from = d->zd_from, *to = d->zd_to;
	bool changed = a->zo_size != b->zo_size || a->zo_mtime.ft_sec != b->zo_mtime.ft_sec ||
	               a->zo_mtime.ft_nsec != b->zo_mtime.ft_nsec ||
	               a->zo_ctime.ft_sec != b->zo_ctime.ft_sec ||
	               a->zo_ctime.ft_nsec != b->zo_ctime.ft_nsec;
	if (a->zo_objid == from->ds_root && b->zo_objid == to->ds_root) {
		char *root = changed ? mem_strdup("/") : NULL;
		return changed ? zd_line_add(d, ZPL_DIFF_MODIFIED, root, NULL) : 0;
	}
	int64_t na = zd_links(from, a, &d->zd_from_links, &d->zd_from_cap);
	int64_t nb = na < 0 ? na : zd_links(to, b, &d->zd_to_links, &d->zd_to_cap);
	if (nb < 0)
		return (int)nb;
	if (!changed && na == nb && na == 1) {
		/* the common case: one name, the same */
		const struct zd_ent *ea = &from->ds_ents[d->zd_from_links[0]];
		const struct zd_ent *eb = &to->ds_ents[d->zd_to_links[0]];
		if (ea->ze_dir == eb->ze_dir && ea->ze_name_len == eb->ze_name_len &&
		    memcmp(from->ds_names + ea->ze_name_off, to->ds_names + eb->ze_name_off,
		           ea->ze_name_len) == 0)
			return 0;
	}
	struct zd_key *ka = zd_keys(from, d->zd_from_links, na);
	struct zd_key *kb = ka ? zd_keys(to, d->zd_to_links, nb) : NULL;
	int rc = kb ? 0 : -ENOMEM;
	/* matched entries: by (directory, name), both lists sorted so */
	for (int64_t i = 0, j = 0; rc == 0 && i < na && j < nb;) {
		int c = zd_key_cmp(&ka[i], &kb[j]);
		if (c < 0) {
			i++;
			continue;
		}
		if (c > 0) {
			j++;
			continue;
		}
		if (zd_same_dir(d, ka[i].zk_dir)) {
			if (changed) {
				char *pa = zd_path(from, ka[i].zk_ent), *pb = zd_path(to, kb[j].zk_ent);
				if (pa && pb && strcmp(pa, pb) == 0) {
					mem_free(pb);
					rc = zd_line_add(d, ZPL_DIFF_MODIFIED, pa, NULL);
				} else {
					rc = zd_line_add(d, ZPL_DIFF_RENAMED, pa, pb);
				}
			}
			ka[i].zk_ent = kb[j].zk_ent = ZD_NONE;
		}
		i++;
		j++;
	}
	/* the rest: renames in path order, then links removed or added */
	int64_t ma = rc == 0 ? zd_leftovers(from, ka, na) : 0;
	int64_t mb = rc == 0 && ma >= 0 ? zd_leftovers(to, kb, nb) : 0;
	if (ma < 0 || mb < 0) {
		rc = -ENOMEM;
		for (int64_t i = 0; i < ma; i++)
			mem_free(ka[i].zk_path);
		ma = mb = 0;
	}
	for (int64_t i = 0; i < SH_MAX(ma, mb); i++) {
		char *pa = i < ma ? ka[i].zk_path : NULL, *pb = i < mb ? kb[i].zk_path : NULL;
		if (rc != 0) {
			mem_free(pa);
			mem_free(pb);
		} else if (pa && pb) {
			rc = zd_line_add(d, ZPL_DIFF_RENAMED, pa, pb);
		} else {
			rc = zd_line_add(d, pa ? ZPL_DIFF_REMOVED : ZPL_DIFF_CREATED, pa ? pa : pb,
			                 NULL);
		}
	}
	mem_free(ka);
	mem_free(kb);
	return rc;
}

/* Whether a (from) and b (to) are the same object. */
static bool zd_same(const struct zd_obj *a, const struct zd_obj *b)
{
	return a && b && a->zo_gen == b->zo_gen && a->zo_type == b->zo_type;
}

static int zd_kind_rank(char kind)
{
	switch (kind) {
	case ZPL_DIFF_REMOVED: return 0;
	case ZPL_DIFF_RENAMED: return 1;
	case ZPL_DIFF_MODIFIED: return 2;
	default: return 3;
	}
}

static int zd_line_cmp(const void *a, const void *b)
{
	const struct zd_line *x = a, *y = b;
	int c = strcmp(x->zl_path, y->zl_path);
	if (c != 0)
		return c;
	if (x->zl_kind != y->zl_kind)
		return zd_kind_rank(x->zl_kind) - zd_kind_rank(y->zl_kind);
	return strcmp(x->zl_new_path ? x->zl_new_path : "", y->zl_new_path ? y->zl_new_path : "");
}

/* Whether directory dir of s has an entry. */
static bool zd_has_entries(const struct zpl_diff_side *s, uint64_t dir)
{
	for (uint64_t i = 0; i < s->ds_nents; i++)
		if (s->ds_ents[i].ze_dir == dir)
			return true;
	return false;
}

int zpl_diff(struct zpl_diff_side *from, struct zpl_diff_side *to, zpl_diff_fn fn,
             void *arg)
{
	if (!from->ds_done || !to->ds_done)
		return -EINVAL;
	struct zd_diff d = {.zd_from = from, .zd_to = to};
	int rc = 0;
	/* A tree never formatted (a snapshot of a file system not yet used) has no root: it reads
	 * as an empty root directory, so the other side's root is modified when it has entries. */
	struct zpl_diff_side *rooted = from->ds_root ? from : to;
	if ((from->ds_root == 0) != (to->ds_root == 0) && zd_has_entries(rooted, rooted->ds_root))
		rc = zd_line_add(&d, ZPL_DIFF_MODIFIED, mem_strdup("/"), NULL);
	for (uint64_t i = 0; rc == 0 && i < from->ds_cap; i++) {
		const struct zd_obj *a = &from->ds_objs[i];
		if (a->zo_objid == 0)
			continue;
		const struct zd_obj *b = zd_find(to, a->zo_objid);
		if (zd_same(a, b))
			rc = zd_compare(&d, a, b);
		else
			rc = zd_lines_of(&d, from, a, ZPL_DIFF_REMOVED);
	}
	for (uint64_t i = 0; rc == 0 && i < to->ds_cap; i++) {
		const struct zd_obj *b = &to->ds_objs[i];
		if (b->zo_objid != 0 && !zd_same(zd_find(from, b->zo_objid), b))
			rc = zd_lines_of(&d, to, b, ZPL_DIFF_CREATED);
	}
	if (rc == 0 && d.zd_nlines > 0)
		qsort(d.zd_lines, (size_t)d.zd_nlines, sizeof(*d.zd_lines), zd_line_cmp);
	for (uint64_t i = 0; i < d.zd_nlines; i++) {
		const struct zd_line *l = &d.zd_lines[i];
		if (rc == 0) {
			struct zpl_diff_entry e = {
				.zde_kind = (enum zpl_diff_kind)l->zl_kind,
				.zde_path = l->zl_path,
				.zde_new_path = l->zl_new_path,
			};
			rc = fn(arg, &e);
		}
		mem_free(l->zl_path);
		mem_free(l->zl_new_path);
	}
	mem_free(d.zd_lines);
	mem_free(d.zd_from_links);
	mem_free(d.zd_to_links);
	return rc;
}
