/*
 * sendrecv_perf.c: nccl-tests' sendrecv_perf for Chorus: in one group every rank sends to
 * rank + 1 and receives from rank - 1 (a ring shift). busbw = algbw. The in-place columns print
 * N/A: a send and a receive on one buffer in one group have no defined order.
 */
#include "common.h"

static void sr_get_counts(size_t count, int nranks, perf_counts_t *counts_p)
{
    (void)nranks;
    counts_p->sendcount = count;
    counts_p->recvcount = count;
    counts_p->paramcount = count;
    counts_p->send_inplace_offset = 0;
    counts_p->recv_inplace_offset = 0;
}

static void sr_get_bw(size_t count, size_t eltsize, double sec, int nranks, double *algbw_p,
                      double *busbw_p)
{
    (void)nranks;
    *algbw_p = (double)(count * eltsize) / 1.0e9 / sec;
    *busbw_p = *algbw_p;
}

static chorusResult_t sr_run(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                             chorusComm_t comm, chorusStream_t stream)
{
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    chorusResult_t res, end;
    res = chorusGroupStart();
    if (res != chorusSuccess) {
        return res;
    }
    res = chorusSend(sendbuff, c->counts.paramcount, c->dtype, next, comm, stream);
    if (res == chorusSuccess) {
        res = chorusRecv(recvbuff, c->counts.paramcount, c->dtype, prev, comm, stream);
    }
    end = chorusGroupEnd();
    return res != chorusSuccess ? res : end;
}

static size_t sr_init(const perf_case_t *c, void *sendbuff, void *expected)
{
    size_t n = c->counts.paramcount;
    int prev = (c->rank + c->nranks - 1) % c->nranks;
    for (size_t i = 0; i < n; i++) {
        perf_store(sendbuff, i, c->dtype, perf_value(c->dtype, chorusMax, c->nranks, c->rank, i));
    }
    for (size_t i = 0; expected != NULL && i < n; i++) {
        perf_store(expected, i, c->dtype, perf_value(c->dtype, chorusMax, c->nranks, prev, i));
    }
    return n;
}

static int sr_mpi_run(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    int n = (int)c->counts.paramcount;
    (void)op;
    return MPI_Sendrecv(sendbuff, n, dt, next, 0, recvbuff, n, dt, prev, 0, comm,
                        MPI_STATUS_IGNORE);
}

static const perf_coll_t sr_coll = {
    .name = "sendrecv",
    .no_inplace = 1,
    .get_counts = sr_get_counts,
    .get_bw = sr_get_bw,
    .run = sr_run,
    .init = sr_init,
    .mpi_run = sr_mpi_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &sr_coll);
}
