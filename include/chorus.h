/*
 * chorus.h: the public face of Chorus, a collective-communication library.
 *
 * The API has NCCL's shape and names with "chorus" for "nccl": a user of NCCL should guess every
 * name right, and a nccl* -> chorus* shim is a table of one-liners (enumerator values match
 * NCCL's). No CUDA or MPI header is needed to include this file. Every call returns chorusResult_t;
 * no call prints to stdout or exits the process. On failure chorusGetLastError() says what went
 * wrong.
 */
#ifndef CHORUS_H
#define CHORUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_MAJOR 0
#define CHORUS_MINOR 1
#define CHORUS_PATCH 0
/* Same encoding as NCCL_VERSION_CODE: major*10000 + minor*100 + patch. */
#define CHORUS_VERSION_CODE (CHORUS_MAJOR * 10000 + CHORUS_MINOR * 100 + CHORUS_PATCH)

#define CHORUS_UNIQUE_ID_BYTES 128
/* The rendezvous id: rank 0 makes it, the user carries it to every rank (MPI_Bcast, a file, ...).
 */
typedef struct {
    char internal[CHORUS_UNIQUE_ID_BYTES];
} chorusUniqueId;

typedef struct chorusComm *chorusComm_t;
/* A cudaStream_t for device buffers; for host buffers NULL (blocking) or a host stream. */
typedef void *chorusStream_t;

#define CHORUS_SPLIT_NOCOLOR (-1)

typedef enum {
    chorusSuccess = 0,
    chorusUnhandledCudaError = 1,
    chorusSystemError = 2,
    chorusInternalError = 3,
    chorusInvalidArgument = 4,
    chorusInvalidUsage = 5,
    chorusRemoteError = 6,
    chorusInProgress = 7,
    chorusTimeout = 8,
    chorusNumResults = 9
} chorusResult_t;

typedef enum {
    chorusInt8 = 0,
    chorusChar = 0,
    chorusUint8 = 1,
    chorusInt32 = 2,
    chorusInt = 2,
    chorusUint32 = 3,
    chorusInt64 = 4,
    chorusUint64 = 5,
    chorusFloat16 = 6,
    chorusHalf = 6,
    chorusFloat32 = 7,
    chorusFloat = 7,
    chorusFloat64 = 8,
    chorusDouble = 8,
    chorusBfloat16 = 9,
    chorusNumTypes = 10
} chorusDataType_t;

/* Integer sums and products wrap (two's complement). chorusAvg is the sum in the datatype, so
 * integers wrap there too, then divided by the rank count: integers truncate toward zero. For
 * float16 and bfloat16 each step (every sum of two, the division) is rounded to the type. */
typedef enum {
    chorusSum = 0,
    chorusProd = 1,
    chorusMax = 2,
    chorusMin = 3,
    chorusAvg = 4,
    chorusNumOps = 5
} chorusRedOp_t;

/* Communicator options. Initialize with CHORUS_CONFIG_INITIALIZER; every field left at its
 * initializer value means "use the default" (the environment, then the built-in default). */
typedef struct {
    size_t size; /* set by the initializer: sizeof(chorusConfig_t) */
    unsigned magic; /* set by the initializer */
    unsigned version; /* set by the initializer: CHORUS_VERSION_CODE */
    int blocking; /* 1: init blocks until connected (the only mode so far) */
    int timeoutMs; /* deadline of every wait, in ms (CHORUS_TIMEOUT_MS) */
    int minChannels; /* lower bound on channels (CHORUS_MIN_NCHANNELS) */
    int maxChannels; /* upper bound on channels (CHORUS_MAX_NCHANNELS) */
    const char *netName; /* net plugin between hosts, as CHORUS_NET: "IB" or "Socket"; NULL:
                          * automatic (IB where an active port exists) */
} chorusConfig_t;

#define CHORUS_CONFIG_UNDEF_INT (-2147483647 - 1)
#define CHORUS_CONFIG_MAGIC 0xc0de5eedu
#define CHORUS_CONFIG_INITIALIZER                                                                  \
    {                                                                                              \
        sizeof(chorusConfig_t), CHORUS_CONFIG_MAGIC, CHORUS_VERSION_CODE, CHORUS_CONFIG_UNDEF_INT, \
            CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, NULL        \
    }

/* Version as CHORUS_VERSION_CODE. */
chorusResult_t chorusGetVersion(int *version);
/* A static string naming a result code. */
const char *chorusGetErrorString(chorusResult_t result);
/* The last error text of this thread (comm NULL) or of this communicator; "" when none. */
const char *chorusGetLastError(chorusComm_t comm);

/* Rank 0 only: open the rendezvous listener and fill the id (address + random secret). */
chorusResult_t chorusGetUniqueId(chorusUniqueId *uniqueId);
/* Collective over nranks ranks: join the communicator identified by commId as rank. Inside
 * chorusGroupStart/End (NCCL's way for one thread to make several ranks) it only checks its
 * arguments and sets *comm to NULL; the outermost chorusGroupEnd initializes all of the group's
 * communicators at once, sets the handles and returns the first failure (then none is kept). A
 * config's netName must then stay valid until chorusGroupEnd. */
chorusResult_t chorusCommInitRank(chorusComm_t *comm, int nranks, chorusUniqueId commId, int rank);
chorusResult_t chorusCommInitRankConfig(chorusComm_t *comm, int nranks, chorusUniqueId commId,
                                        int rank, chorusConfig_t *config);
/* ndev ranks in this process, one thread each; devlist NULL: host ranks. */
chorusResult_t chorusCommInitAll(chorusComm_t *comms, int ndev, const int *devlist);
/* Join by environment: CHORUS_RANK/CHORUS_NRANKS/CHORUS_ROOT=host:port, or torchrun's
 * RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT. Rank 0 listens on the root port. */
chorusResult_t chorusCommInitEnv(chorusComm_t *comm);
/* Collective over comm: ranks with the same color form a new communicator ordered by (key, rank);
 * color < 0 (CHORUS_SPLIT_NOCOLOR) gives *newcomm = NULL. Inside a group it is held for
 * chorusGroupEnd, as chorusCommInitRank. */
chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t *newcomm,
                               chorusConfig_t *config);
/* Wait until every queued operation of comm has finished. chorusInvalidUsage where the calling
 * thread's open group holds calls on comm (they run only at chorusGroupEnd). */
chorusResult_t chorusCommFinalize(chorusComm_t comm);
/* Free the communicator (after its operations finished). chorusInvalidUsage, nothing freed, where
 * the calling thread's open group (chorusGroupStart without its chorusGroupEnd yet) holds calls
 * on it: end the group first. */
chorusResult_t chorusCommDestroy(chorusComm_t comm);
/* Stop every operation of comm in bounded time and free it; safe from any thread. */
chorusResult_t chorusCommAbort(chorusComm_t comm);
/* chorusSuccess, or the error that stopped an operation of comm asynchronously. */
chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t *asyncError);
chorusResult_t chorusCommCount(const chorusComm_t comm, int *count);
chorusResult_t chorusCommUserRank(const chorusComm_t comm, int *rank);
/* The CUDA device of comm; -1 for a host-only communicator. */
chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int *device);

/* Collectives: NCCL's semantics. In place when sendbuff == recvbuff (AllGather: sendbuff is this
 * rank's slice of recvbuff; ReduceScatter: recvbuff is this rank's slice of sendbuff). Buffers
 * that overlap in any other way get chorusInvalidArgument. The ranks match calls in the order
 * each issued them on the communicator: threads calling one communicator at once are safe (the
 * calls run one at a time) but match in whatever order each process ran them, so issue a rank's
 * calls from one thread, or order them, as NCCL asks (CHORUS_CHECK_ARGS=1 finds calls that do
 * not match). */
chorusResult_t chorusAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                               chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                               chorusStream_t stream);
chorusResult_t chorusBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                               chorusDataType_t datatype, int root, chorusComm_t comm,
                               chorusStream_t stream);
chorusResult_t chorusReduce(const void *sendbuff, void *recvbuff, size_t count,
                            chorusDataType_t datatype, chorusRedOp_t op, int root,
                            chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                               chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                   chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                   chorusStream_t stream);
/* count elements to and from every peer (a collective: every rank calls it, as the others). */
chorusResult_t chorusAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                              chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusSend(const void *sendbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusRecv(void *recvbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream);
/* Calls between GroupStart and GroupEnd are issued together at GroupEnd (nestable): first the
 * group's communicator initializations (chorusCommInitRank, chorusCommSplit), all at once; then
 * its collectives (all-to-all included) in issue order, then its sends and receives progress
 * together, each matched with the peer's in the order both issued them. */
chorusResult_t chorusGroupStart(void);
chorusResult_t chorusGroupEnd(void);

/* Host streams: calls on one run in order on its worker thread. */
chorusResult_t chorusStreamCreate(chorusStream_t *stream);
/* Wait until every call queued on stream has finished; returns the first error among them. */
chorusResult_t chorusStreamSynchronize(chorusStream_t stream);
/* chorusSuccess when idle, chorusInProgress while calls are queued or running. */
chorusResult_t chorusStreamQuery(chorusStream_t stream);
chorusResult_t chorusStreamDestroy(chorusStream_t stream);

/* Page-aligned host memory that Chorus may register or share (zero-copy paths): a memfd mapped
 * shared, so ranks of one host read a large collective's input in place instead of copying it
 * (CHORUS_ZCOPY and the CHORUS_ZCOPY_*MIN sizes, 16 MiB and up by default; smaller calls copy it
 * as malloc'd memory). Being shared memory, it stays shared with a child made by fork(). Free it
 * with chorusMemFree only. */
chorusResult_t chorusMemAlloc(void **ptr, size_t nbytes);
/* Chorus extension: CUDA device memory on the calling thread's current device (what NCCL's
 * ncclMemAlloc gives), for buffers of device-buffer collectives. The application must have
 * initialised CUDA (cudaSetDevice, or a current driver context): Chorus never loads it. A build
 * or a process without CUDA gets chorusInvalidUsage. Free it with chorusMemFree. */
chorusResult_t chorusMemAllocDevice(void **ptr, size_t nbytes);
/* Frees chorusMemAlloc and chorusMemAllocDevice memory; NULL does nothing. Any other pointer, one
 * freed already included, gets chorusInvalidArgument and is left alone. */
chorusResult_t chorusMemFree(void *ptr);

/* Chorus extension (not in NCCL): the algorithm the tuner picks on comm for a collective of count
 * elements ("ring" or "tree") and the model's predicted time in microseconds. coll is NCCL's name
 * of the collective: "allreduce", "broadcast", "reduce", "allgather", "reducescatter". */
chorusResult_t chorusCommTuningInfo(chorusComm_t comm, const char *coll, size_t count,
                                    chorusDataType_t datatype, const char **algo,
                                    double *predictedUs);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_H */
