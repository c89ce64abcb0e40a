/*
 * reduce_scatter_perf.c: nccl-tests' reduce_scatter_perf for Chorus (chorusReduceScatter). Rank r
 * keeps slice r of the reduction of n * recvcount elements; busbw = algbw * (n-1)/n.
 */
#include "common.h"

static void rs_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    counts_p->recvcount = count / (size_t)nranks;
    counts_p->sendcount = counts_p->recvcount * (size_t)nranks;
    counts_p->paramcount = counts_p->recvcount;
    counts_p->send_inplace_offset = 0;
    counts_p->recv_inplace_offset = counts_p->recvcount;
}

static void rs_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    double base = (double)(count * eltsize) * nranks / 1.0e9 / sec;
    *algbw_p = base;
    *busbw_p = base * ((double)(nranks - 1) / nranks);
}

static chorusResult_t rs_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    return chorusReduceScatter(sendbuff, recvbuff, c->counts.paramcount, c->dtype, c->op, comm,
                               stream);
}

static size_t rs_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t rc = c->counts.recvcount;
    for (size_t i = 0; i < c->counts.sendcount; i++) {
        perf_store(sendbuff, i, c->dtype, perf_value(c->dtype, c->op, c->nranks, c->rank, i));
    }
    for (size_t i = 0; expected != NULL && i < rc; i++) {
        perf_store(expected, i, c->dtype,
                   perf_reduced(c->dtype, c->op, c->nranks, (size_t)c->rank * rc + i));
    }
    return rc;
}

static int rs_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    return MPI_Reduce_scatter_block(sendbuff, recvbuff, (int)c->counts.paramcount, dt, op, comm);
}

static const perf_coll_t rs_coll = {
    .tuning_name = "reducescatter",
    .name = "reduce_scatter",
    .reduces = 1,
    .get_counts = rs_get_counts,
    .get_bw = rs_get_bw,
    .run = rs_run,
    .init = rs_init,
    .mpi_run = rs_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &rs_coll);
}
