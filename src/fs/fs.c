/* fs.c: the parts of the fs interface that are the same for every back end: completion delivery
 * to the requesting loop, operation names for logs, and which operations change the file
 * system. The interface itself is in fs.h. */
#include <string.h>

#include "fs/fs.h"

static void fs_req_run_done(struct loop_task *task)
{
	struct fs_req *req = SH_CONTAINER_OF(task, struct fs_req, fr_task);
	req->fr_done(req);
}

void fs_req_complete(struct fs_req *req)
{
	if (req->fr_loop == NULL || loop_on_thread(req->fr_loop)) {
		req->fr_done(req);
		return;
	}
	req->fr_task.lt_fn = fs_req_run_done;
	loop_post(req->fr_loop, &req->fr_task);
}

size_t fs_buf_copy_out(const struct fs_buf *buf, size_t off, void *out, size_t n)
{
	VERIFY(!buf->fb_piped);
	struct iovec one = {.iov_base = (void *)(uintptr_t)buf->fb_data, .iov_len = buf->fb_len};
	const struct iovec *segs = buf->fb_nsegs > 0 ? buf->fb_segs : &one;
	uint32_t nsegs = buf->fb_nsegs > 0 ? buf->fb_nsegs : 1;
	size_t copied = 0;
	for (uint32_t i = 0; i < nsegs && copied < n; i++) {
		size_t len = segs[i].iov_len;
		if (off >= len) {
			off -= len;
			continue;
		}
		size_t take = SH_MIN(len - off, n - copied);
		memcpy((uint8_t *)out + copied, (const uint8_t *)segs[i].iov_base + off, take);
		copied += take;
		off = 0;
	}
	return copied;
}

const char *fs_op_name(enum fs_op op)
{
	static const char *const names[] = {
		[FS_OP_GETATTR] = "getattr", [FS_OP_SETATTR] = "setattr", [FS_OP_LOOKUP] = "lookup",
		[FS_OP_ACCESS] = "access",   [FS_OP_READLINK] = "readlink", [FS_OP_READ] = "read",
		[FS_OP_WRITE] = "write",     [FS_OP_CREATE] = "create",   [FS_OP_MKDIR] = "mkdir",
		[FS_OP_SYMLINK] = "symlink", [FS_OP_MKNOD] = "mknod",     [FS_OP_REMOVE] = "remove",
		[FS_OP_RMDIR] = "rmdir",     [FS_OP_RENAME] = "rename",   [FS_OP_LINK] = "link",
		[FS_OP_READDIR] = "readdir", [FS_OP_FSSTAT] = "fsstat",   [FS_OP_COMMIT] = "commit",
	};
	if ((unsigned)op < SH_ARRAY_SIZE(names) && names[op])
		return names[op];
	return "unknown";
}

bool fs_op_changes(enum fs_op op)
{
	switch (op) {
	case FS_OP_SETATTR:
	case FS_OP_WRITE:
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD:
	case FS_OP_REMOVE:
	case FS_OP_RMDIR:
	case FS_OP_RENAME:
	case FS_OP_LINK: return true;
	case FS_OP_GETATTR:
	case FS_OP_LOOKUP:
	case FS_OP_ACCESS:
	case FS_OP_READLINK:
	case FS_OP_READ:
	case FS_OP_READDIR:
	case FS_OP_FSSTAT:
	case FS_OP_COMMIT: return false;
	}
	return false; /* not an operation */
}
