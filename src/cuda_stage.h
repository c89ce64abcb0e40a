/*
 * cuda_stage.h: collectives on CUDA device buffers, staged through pinned host memory
 * (cuda_stage.c; CUDA builds only take device buffers, see enqueue.c).
 */
#ifndef CHORUS_CUDA_STAGE_H
#define CHORUS_CUDA_STAGE_H

#include "comm.h"

/* The number of CUDA devices, or -1 when the process has not loaded and initialized CUDA. */
int cuda_device_count(void);
/* The device of the calling thread's current CUDA context, or -1 (none, or CUDA not loaded). */
int cuda_current_device(void);
/* NULL when the loaded CUDA driver has every function staging needs; else the first missing. */
const char *cuda_stage_missing(void);
/* Copy the device inputs of ops[i] with on_device into a pinned arena on each op's cuda_stream,
 * wait for the streams, and point those ops' sendbuff/recvbuff at the arena. fn names the call. */
chorusResult_t cuda_stage_in(chorusComm_t comm, comm_op_t *ops, int n, const char *fn);
/* Copy staged outputs back to the user's device buffers (user: the ops as called) and wait. */
chorusResult_t cuda_stage_out(chorusComm_t comm, const comm_op_t *user, const comm_op_t *staged,
                              int n, const char *fn);
/* The asynchronous way (CHORUS_CUDA_ASYNC, stream memory operations): when every op is on device
 * buffers of one stream, queue the batch on the stream and on the communicator's CUDA worker and
 * set *taken_p (the result is then the call's); else leave *taken_p 0 and do nothing. */
chorusResult_t cuda_stage_async(chorusComm_t comm, comm_op_t *ops, int n, const char *fn,
                                int *taken_p);
/* Wait until the CUDA worker has run everything queued (a host call keeps issue order). */
chorusResult_t cuda_stage_drain(chorusComm_t comm);
/* 1 on the CUDA worker thread. */
int cuda_stage_is_worker(void);
/* Stop the worker, free the slots and the arena (comm_free, after comm_wait_idle). */
void cuda_stage_free(chorusComm_t comm);

#endif /* CHORUS_CUDA_STAGE_H */
