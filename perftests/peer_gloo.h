/*
 * peer_gloo.h: Gloo as --compare's peer (peer_gloo.cc; peer_gloo_none.c where the build found no
 * Gloo). Gloo is what PyTorch's gloo backend runs: its TCP transport, here over loopback, with
 * the rendezvous in a file store every rank of this host can read.
 */
#ifndef CHORUS_PERF_PEER_GLOO_H
#define CHORUS_PERF_PEER_GLOO_H

#include <stddef.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when this build has Gloo, else why not. */
const char *perf_gloo_missing(void);
/* Connect rank of nranks to every other through the file store in dir (an empty directory every
 * rank sees). 0, or -1 with the reason in err. */
int perf_gloo_init(int rank, int nranks, const char *dir, char *err, size_t errlen);
/* 1 when Gloo has collective coll (the perftest's name: "all_reduce", ...) for dtype and op (no
 * average: Gloo has none), on a call of count elements a rank (Gloo fails on none). */
int perf_gloo_supported(const char *coll, chorusDataType_t dtype, chorusRedOp_t op, size_t count);
/* Gloo's coll on send (sendcount elements) into recv (recvcount), root for the rooted ones
 * (broadcast: recv alone, the root's data in it, as MPI_Bcast). 0, or -1 with the reason in err. */
int perf_gloo_run(const char *coll, const void *send, void *recv, size_t sendcount,
                  size_t recvcount, chorusDataType_t dtype, chorusRedOp_t op, int root, char *err,
                  size_t errlen);
/* Gloo's version, e.g. "Gloo 0.5.0 (TCP transport)". */
const char *perf_gloo_version(void);
void perf_gloo_finalize(void);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_PERF_PEER_GLOO_H */
