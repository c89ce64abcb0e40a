/*
 * common.h: the shared driver of the nccl-tests-compatible benchmarks (*_perf).
 *
 * A benchmark is one perf_coll_t: how a byte size becomes counts, how bandwidth is derived, how
 * to call the Chorus collective (and optionally MPI's), and how to fill this rank's input and the
 * expected output. perf_main() does the rest: nccl-tests' flags, init under mpirun or by
 * environment, the timed loops, the bit-exact check and the nccl-tests table. Only the public API
 * (chorus.h, chorus_mpi.h) is used.
 */
#ifndef CHORUS_PERF_COMMON_H
#define CHORUS_PERF_COMMON_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

/* Element counts of one row (nccl-tests' getCollByteCount). */
typedef struct perf_counts {
    size_t sendcount; /* elements in this rank's send buffer */
    size_t recvcount; /* elements in this rank's receive buffer */
    size_t paramcount; /* the count argument of the call */
    size_t send_inplace_offset; /* in place: sendbuff = recvbuff + offset * rank (elements) */
    size_t recv_inplace_offset; /* in place: recvbuff = recvbuff + offset * rank (elements) */
} perf_counts_t;

/* One call of the collective under test, as the callbacks see it. */
typedef struct perf_case {
    chorusDataType_t dtype;
    chorusRedOp_t op; /* only for collectives that reduce */
    int root; /* -1 for collectives without a root */
    int rank;
    int nranks;
    perf_counts_t counts;
} perf_case_t;

typedef struct perf_coll {
    const char *name; /* "all_reduce": the banner and error messages */
    int reduces; /* 1: iterate -o and print the op; 0: op column "none" */
    int rooted; /* 1: iterate -r and print the root; 0: root column -1 */
    int no_inplace; /* 1: the in-place columns print N/A (the call has no in-place form) */
    /* 1: MPI's call has one buffer (MPI_Bcast: the root's data is its result), the work of
     * Chorus' in-place call, so --compare mpi times it beside that and compares the two; 0: MPI
     * is timed beside and compared with Chorus out of place. */
    int mpi_in_place;
    /* Optional: the collective's name for chorusCommTuningInfo ("allreduce", ...); when set, each
     * row ends with the tuner's algorithm and the model's predicted time for the call. */
    const char *tuning_name;
    /* Counts of a row from count = bytes / sizeof(dtype), aligned as the collective needs. */
    void (*get_counts)(size_t count, int nranks, perf_counts_t *counts_p);
    /* nccl-tests' getBw: algbw and busbw in GB/s from paramcount and seconds per call. */
    void (*get_bw)(size_t paramcount, size_t eltsize, double sec, int nranks, double *algbw_p,
                   double *busbw_p);
    /* The Chorus call. */
    chorusResult_t (*run)(const void *sendbuff, void *recvbuff, const perf_case_t *c,
                          chorusComm_t comm, chorusStream_t stream);
    /* Fill sendbuff (counts.sendcount elements) with this rank's input and expected with what
     * recvbuff must hold afterwards; returns how many elements of recvbuff to check. */
    size_t (*init)(const perf_case_t *c, void *sendbuff, void *expected);
    /* Optional (NULL: no --compare mpi): the same collective with MPI; sendbuff may be
     * MPI_IN_PLACE's equivalent (sendbuff == recvbuff). Returns an MPI error code. */
    int (*mpi_run)(const void *sendbuff, void *recvbuff, const perf_case_t *c, MPI_Datatype dt,
                   MPI_Op op, MPI_Comm comm);
} perf_coll_t;

/* Parse the flags, run every row and print the table; returns the process exit code. */
int perf_main(int argc, char **argv, const perf_coll_t *coll);

/* Bytes per element of dtype (0 if invalid); data.c. */
size_t perf_dtype_size(chorusDataType_t dtype);

/*
 * Verifiable data. Every value is a small integer (or a signed power of two for prod) chosen so
 * that any reduction order gives the same bits in every dtype: sums stay below the largest
 * integer the dtype holds exactly (127 for int8, 256 for bfloat16, 2048 for half), avg inputs sum
 * to a multiple of nranks, products hold at most a few factors of two. pattern_op picks the
 * recipe; collectives that do not reduce use chorusMax (any values). Defined in data.c.
 */
/* The value rank contributes at element index i. */
int64_t perf_value(chorusDataType_t dtype, chorusRedOp_t pattern_op, int nranks, int rank,
                   size_t i);
/* The reduction over ranks 0..nranks-1 of perf_value at index i, computed on the host. */
int64_t perf_reduced(chorusDataType_t dtype, chorusRedOp_t op, int nranks, size_t i);
/* buf[idx] = v converted to dtype (exact for the values above). */
void perf_store(void *buf, size_t idx, chorusDataType_t dtype, int64_t v);

#endif /* CHORUS_PERF_COMMON_H */
