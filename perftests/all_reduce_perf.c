/*
 * all_reduce_perf.c: nccl-tests' all_reduce_perf for Chorus (chorusAllReduce, MPI_Allreduce with
 * --compare mpi). busbw = algbw * 2(n-1)/n: each rank sends and receives 2(n-1)/n of the buffer.
 */
#include "common.h"

static void ar_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    (void)nranks;
    counts_p->sendcount = count;
    counts_p->recvcount = count;
    counts_p->paramcount = count;
    counts_p->send_inplace_offset = 0;
    counts_p->recv_inplace_offset = 0;
}

static void ar_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    double base = (double)(count * eltsize) / 1.0e9 / sec;
    *algbw_p = base;
    *busbw_p = base * (2.0 * (nranks - 1) / nranks);
}

static chorusResult_t ar_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    return chorusAllReduce(sendbuff, recvbuff, c->counts.paramcount, c->dtype, c->op, comm, stream);
}

static size_t ar_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t n = c->counts.paramcount;
    for (size_t i = 0; i < n; i++) {
        perf_store(sendbuff, i, c->dtype, perf_value(c->dtype, c->op, c->nranks, c->rank, i));
    }
    for (size_t i = 0; expected != NULL && i < n; i++) {
        perf_store(expected, i, c->dtype, perf_reduced(c->dtype, c->op, c->nranks, i));
    }
    return n;
}

static int ar_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    return MPI_Allreduce(sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff, recvbuff,
                         (int)c->counts.paramcount, dt, op, comm);
}

static const perf_coll_t ar_coll = {
    .name = "all_reduce",
    .reduces = 1,
    .rooted = 0,
    .no_inplace = 0,
    .tuning_name = "allreduce",
    .get_counts = ar_get_counts,
    .get_bw = ar_get_bw,
    .run = ar_run,
    .init = ar_init,
    .mpi_run = ar_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &ar_coll);
}
