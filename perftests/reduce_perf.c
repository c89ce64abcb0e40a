/*
 * reduce_perf.c: nccl-tests' reduce_perf for Chorus (chorusReduce) to each root of -r (-1: every
 * rank in turn); only the root's buffer is checked. busbw = algbw.
 */
#include "common.h"

static void rd_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    (void)nranks;
    counts_p->sendcount = count;
    counts_p->recvcount = count;
    counts_p->paramcount = count;
    counts_p->send_inplace_offset = 0;
    counts_p->recv_inplace_offset = 0;
}

static void rd_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    (void)nranks;
    *algbw_p = (double)(count * eltsize) / 1.0e9 / sec;
    *busbw_p = *algbw_p;
}

static chorusResult_t rd_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    return chorusReduce(sendbuff, recvbuff, c->counts.paramcount, c->dtype, c->op, c->root, comm,
                        stream);
}

static size_t rd_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t n = c->counts.paramcount;
    for (size_t i = 0; i < n; i++) {
        perf_store(sendbuff, i, c->dtype, perf_value(c->dtype, c->op, c->nranks, c->rank, i));
    }
    if (c->rank != c->root) {
        return 0;
    }
    for (size_t i = 0; expected != NULL && i < n; i++) {
        perf_store(expected, i, c->dtype, perf_reduced(c->dtype, c->op, c->nranks, i));
    }
    return n;
}

static int rd_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    return MPI_Reduce(sendbuff, recvbuff, (int)c->counts.paramcount, dt, op, c->root, comm);
}

static const perf_coll_t rd_coll = {
    .tuning_name = "reduce",
    .name = "reduce",
    .reduces = 1,
    .rooted = 1,
    .get_counts = rd_get_counts,
    .get_bw = rd_get_bw,
    .run = rd_run,
    .init = rd_init,
    .mpi_run = rd_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &rd_coll);
}
