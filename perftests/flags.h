/*
 * flags.h: the parsed command line of a *_perf benchmark (flags.c parses, common.c runs it).
 */
#ifndef CHORUS_PERF_FLAGS_H
#define CHORUS_PERF_FLAGS_H

#include <stddef.h>

#include "chorus.h"

typedef struct perf_opts {
    size_t minbytes, maxbytes, stepbytes, stepfactor;
    int iters, warmup, agg_iters, check, blocking, stream_null, average, cputime, root;
    int root_given; /* -r was on the command line (a collective without a root notes it) */
    int timeout_s; /* -T: seconds a wait may take (CHORUS_TIMEOUT_MS, common.c); 0: the library's */
    int compare_mpi, register_bufs; /* compare_mpi: --compare names a peer (mpi or gloo) */
    int compare_gloo; /* --compare gloo: the peer is Gloo (peer_gloo.h), not MPI */
    int device_bufs; /* --device cuda: cudaMalloc'd buffers (the call stages them) */
    int rewrite; /* --rewrite 1|2: each timed iteration first writes the input again (common.c) */
    int offset; /* --offset: host buffers this many bytes past a page boundary (common.c) */
    const char *json_path; /* -J FILE: the JSON report (report.c); NULL: none */
    int ntypes, nops;
    int types[chorusNumTypes]; /* chorusDataType_t values */
    int ops[chorusNumOps]; /* chorusRedOp_t values */
} perf_opts_t;

/* Fill *o from nccl-tests' flags (defaults for the rest). 0: run; 1: exit 0 (help); -1: exit with
 * an error. Messages print on rank 0 only. */
int perf_parse(int argc, char **argv, int rank, perf_opts_t *o);

#endif /* CHORUS_PERF_FLAGS_H */
