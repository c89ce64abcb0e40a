/*
 * chorus_mpi.h: bootstrap a Chorus communicator from an MPI communicator (header-only).
 *
 * Needs mpi.h and an initialized MPI; the library itself never links MPI, so this helper is
 * compiled into the program that includes it. Rank 0 of mpicomm makes the unique id and one
 * MPI_Bcast carries {result of chorusGetUniqueId, id} to every rank: when rank 0 cannot make an
 * id, every rank returns that same error instead of hanging in chorusCommInitRank.
 */
#ifndef CHORUS_MPI_H
#define CHORUS_MPI_H

#include <mpi.h>
#include <string.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over mpicomm: *comm becomes a communicator whose ranks and size are mpicomm's. */
static inline chorusResult_t chorusCommInitMPI(chorusComm_t *comm, MPI_Comm mpicomm)
{
    struct {
        int result; /* chorusResult_t of chorusGetUniqueId on rank 0 */
        chorusUniqueId id;
    } msg;
    int rank, nranks;

    if (comm == NULL || mpicomm == MPI_COMM_NULL) {
        return chorusInvalidArgument;
    }
    if (MPI_Comm_rank(mpicomm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(mpicomm, &nranks) != MPI_SUCCESS) {
        return chorusSystemError;
    }
    memset(&msg, 0, sizeof(msg));
    if (rank == 0) {
        msg.result = (int)chorusGetUniqueId(&msg.id);
    }
    if (MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, mpicomm) != MPI_SUCCESS) {
        return chorusSystemError;
    }
    if (msg.result != (int)chorusSuccess) {
        return (chorusResult_t)msg.result;
    }
    return chorusCommInitRank(comm, nranks, msg.id, rank);
}

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_MPI_H */
