/*
 * alltoall_perf.c: nccl-tests' alltoall_perf for Chorus (chorusAlltoAll): count elements to and
 * from every peer. busbw = algbw * (n-1)/n.
 */
#include "common.h"

static void aa_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    counts_p->paramcount = count / (size_t)nranks;
    counts_p->sendcount = counts_p->paramcount * (size_t)nranks;
    counts_p->recvcount = counts_p->sendcount;
    counts_p->send_inplace_offset = 0;
    counts_p->recv_inplace_offset = 0;
}

static void aa_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    double base = (double)(count * eltsize) * nranks / 1.0e9 / sec;
    *algbw_p = base;
    *busbw_p = base * ((double)(nranks - 1) / nranks);
}

static chorusResult_t aa_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    return chorusAlltoAll(sendbuff, recvbuff, c->counts.paramcount, c->dtype, comm, stream);
}

/* Block p of rank r's input goes to rank p; block p of rank r's output came from rank p. */
static size_t aa_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t pc = c->counts.paramcount;
    for (size_t j = 0; j < c->counts.sendcount; j++) {
        perf_store(sendbuff, j, c->dtype, perf_value(c->dtype, chorusMax, c->nranks, c->rank, j));
    }
    for (size_t j = 0; expected != NULL && j < c->counts.recvcount; j++) {
        size_t peer = j / pc, i = j % pc;
        perf_store(expected, j, c->dtype,
                   perf_value(c->dtype, chorusMax, c->nranks, (int)peer, (size_t)c->rank * pc + i));
    }
    return c->counts.recvcount;
}

static int aa_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    int n = (int)c->counts.paramcount;
    (void)op;
    return MPI_Alltoall(sendbuff, n, dt, recvbuff, n, dt, comm);
}

static const perf_coll_t aa_coll = {
    .name = "alltoall",
    .get_counts = aa_get_counts,
    .get_bw = aa_get_bw,
    .run = aa_run,
    .init = aa_init,
    .mpi_run = aa_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &aa_coll);
}
