/*
 * peer_gloo_none.c: peer_gloo.h where the build found no Gloo: --compare gloo says why.
 */
#include "peer_gloo.h"

#include <stdio.h>

const char *perf_gloo_missing(void)
{
    return "this build found no Gloo (install libgloo-dev, or run scripts/deps.sh, then "
           "re-run cmake)";
}

const char *perf_gloo_version(void)
{
    return "none";
}

int perf_gloo_init(int rank, int nranks, const char *dir, char *err, size_t errlen)
{
    (void)rank;
    (void)nranks;
    (void)dir;
    snprintf(err, errlen, "%s", perf_gloo_missing());
    return -1;
}

int perf_gloo_supported(const char *coll, chorusDataType_t dtype, chorusRedOp_t op, size_t count)
{
    (void)count;
    (void)coll;
    (void)dtype;
    (void)op;
    return 0;
}

int perf_gloo_run(const char *coll, const void *send, void *recv, size_t sendcount,
                  size_t recvcount, chorusDataType_t dtype, chorusRedOp_t op, int root, char *err,
                  size_t errlen)
{
    (void)coll;
    (void)send;
    (void)recv;
    (void)sendcount;
    (void)recvcount;
    (void)dtype;
    (void)op;
    (void)root;
    snprintf(err, errlen, "%s", perf_gloo_missing());
    return -1;
}

void perf_gloo_finalize(void)
{
}
