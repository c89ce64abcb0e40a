/*
 * harness_mpi.h: one rank per MPI process, for the functional tests built with MPI (test_p2p_mpi,
 * test_runahead_mpi). Header-only, so that the harness library itself needs no MPI.
 */
#ifndef CHORUS_TEST_HARNESS_MPI_H
#define CHORUS_TEST_HARNESS_MPI_H

#include <mpi.h>
#include <stdio.h>

#include "chorus_mpi.h"
#include "harness.h"

/* After MPI_Init: body on a communicator over MPI_COMM_WORLD (a failed init is a failure), then
 * the failures of every rank summed; this rank and the rank count in *rank_p and *nranks_p. */
static inline long harness_mpi_run(harness_rank_fn *body, int *rank_p, int *nranks_p)
{
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    setvbuf(stdout, NULL, _IOLBF, 0);
    chorusComm_t comm = NULL;
    chorusResult_t res = chorusCommInitMPI(&comm, MPI_COMM_WORLD);
    if (res != chorusSuccess) {
        FAIL("rank %d: chorusCommInitMPI: %s: %s", r, chorusGetErrorString(res),
             chorusGetLastError(NULL));
    } else {
        body(comm, r, n);
        CHECK_OK(chorusCommDestroy(comm));
    }
    long total = 0;
    MPI_Allreduce(&harness_failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    *rank_p = r;
    *nranks_p = n;
    return total;
}

#endif
