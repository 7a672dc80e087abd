/* bench.h: `shale bench`, an NFSv3 load generator (SPECsfs2008-style sfs2008, varmail, seq, meta)
 * that reports in the SPECsfs2008 layout and compares two servers. See bench.c. */
#ifndef SHALE_BENCH_H
#define SHALE_BENCH_H

/* Runs `shale bench WORKLOAD [options]`; argv[0] is "bench". Returns the process exit status:
 * 0 when every operation of every run was answered as expected, 1 when some failed or went
 * unanswered (or a run could not complete), 2 on a usage error. */
int bench_main(int argc, char **argv);

#endif
