/* nfs-rm.c: removes one file over NFSv3 with libnfs, the removal libnfs-utils (nfs-cp, nfs-cat,
 * nfs-ls) lacks; bench/snapshot.sh builds it to give a snapshot blocks of its own.
 *
 * Usage: nfs-rm nfs://HOST/EXPORT/PATH?nfsport=N&mountport=N&version=3 (nfs-cp's URL form).
 * Exit 0 once the server answered the REMOVE with NFS3_OK, 1 otherwise, with libnfs's error on
 * stderr. Build: cc -O2 -o nfs-rm bench/nfs-rm.c -lnfs (Debian's libnfs-dev). */
#include <stdio.h>
#include <sys/time.h> /* libnfs.h uses struct timeval without including it */

#include <nfsc/libnfs.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: nfs-rm nfs://HOST/EXPORT/PATH[?nfsport=N&mountport=N]\n");
		return 2;
	}
	int rc = 1;
	struct nfs_context *nfs = nfs_init_context();
	if (!nfs) {
		fprintf(stderr, "nfs-rm: cannot make a libnfs context\n");
		return 1;
	}
	struct nfs_url *url = nfs_parse_url_full(nfs, argv[1]);
	if (!url) {
		fprintf(stderr, "nfs-rm: %s\n", nfs_get_error(nfs));
		goto out_context;
	}
	if (nfs_mount(nfs, url->server, url->path) != 0) {
		fprintf(stderr, "nfs-rm: mounting %s:%s: %s\n", url->server, url->path,
		        nfs_get_error(nfs));
		goto out_url;
	}
	if (nfs_unlink(nfs, url->file) != 0) {
		fprintf(stderr, "nfs-rm: removing %s: %s\n", url->file, nfs_get_error(nfs));
		goto out_url;
	}
	rc = 0;
out_url:
	nfs_destroy_url(url);
out_context:
	nfs_destroy_context(nfs);
	return rc;
}
