/*
 * consumer.c: an outside program built against an installed Chorus (tests/install.cmake).
 *
 * It sees only the installed headers: chorus_mpi.h, which brings chorus.h and mpi.h. It joins a
 * communicator through MPI, all-reduces a float buffer whose values are small integers (so any
 * summation order gives the same float) and checks every element against the closed form.
 * Prints PASS on rank 0 and exits 0 when every rank agrees; exits 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>

#include <chorus_mpi.h>

#define COUNT 100003 /* prime, so the buffer does not split evenly across ranks or slices */

int main(int argc, char **argv)
{
    int rank, nranks, bad = 0, anybad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    chorusComm_t comm;
    chorusResult_t res = chorusCommInitMPI(&comm, MPI_COMM_WORLD);
    if (res != chorusSuccess) {
        fprintf(stderr, "rank %d: chorusCommInitMPI: %s: %s\n", rank, chorusGetErrorString(res),
                chorusGetLastError(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    float *send = malloc(COUNT * sizeof(float));
    float *recv = malloc(COUNT * sizeof(float));
    if (send == NULL || recv == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < COUNT; i++) {
        send[i] = (float)(rank + i % 16);
        recv[i] = -1.0f;
    }
    res = chorusAllReduce(send, recv, COUNT, chorusFloat32, chorusSum, comm, NULL);
    if (res != chorusSuccess) {
        fprintf(stderr, "rank %d: chorusAllReduce: %s: %s\n", rank, chorusGetErrorString(res),
                chorusGetLastError(comm));
        bad = 1;
    }
    /* sum over r of (r + i % 16) = nranks * (nranks - 1) / 2 + nranks * (i % 16) */
    for (int i = 0; i < COUNT && !bad; i++) {
        float want = (float)(nranks * (nranks - 1) / 2 + nranks * (i % 16));
        if (recv[i] != want) {
            fprintf(stderr, "rank %d: element %d is %g, want %g\n", rank, i, recv[i], want);
            bad = 1;
        }
    }
    chorusCommDestroy(comm);
    free(send);
    free(recv);

    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s: all-reduce of %d floats over %d ranks\n", anybad ? "FAIL" : "PASS", COUNT,
               nranks);
    }
    MPI_Finalize();
    return anybad ? 1 : 0;
}
