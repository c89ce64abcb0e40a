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
/* Device dev's PCI bus id ("0000:3b:00.0") in busid, or "" where the driver cannot say. */
void cuda_device_busid(int dev, char *busid, size_t len);
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
/* The device path (cuda_dev.c): 1 when this rank may run device-buffer collectives GPU to GPU by
 * what the peer exchange says and its driver has (init, after the exchange; init's agreement
 * then takes it only where every rank said 1). */
int cuda_dev_decide(chorusComm_t comm);
/* Where cuda_dev_decide said 1: 1 unless this rank's GPU has no peer access to another rank's
 * (one this process sees; CUDA IPC opens memory of GPUs it does not see), else 0 with the first
 * such rank in *peer_p. Init agrees on the answer over all ranks. */
int cuda_dev_reachable(chorusComm_t comm, int *peer_p);
/* 1 when the batch runs GPU to GPU: comm decided so, and every op is a collective on device
 * buffers. */
int cuda_dev_wanted(chorusComm_t comm, const comm_op_t *ops, int n);
/* Run one collective of such a batch (p: the call's primitives, filled for a host run). */
chorusResult_t cuda_dev_coll(chorusComm_t comm, const comm_op_t *op, prims_t *p, const char *fn);
/* Before an asynchronous batch of the device path is queued (ctx: the buffers', pushed): make
 * the communicator's stream, load every kernel and connect the device ring on first use, in the
 * calling thread. On the worker these would run while the caller's stream waits for the worker,
 * and the driver may synchronize the context for them (module loading is lazy since CUDA 12.2):
 * a deadlock no deadline could end. */
chorusResult_t cuda_dev_prepare(chorusComm_t comm, const char *fn, void *ctx);
/* Close the device ring, destroy the stream and unload the kernels (comm_free). */
void cuda_dev_free(chorusComm_t comm);
/* chorusMemAllocDevice, and chorusMemFree of device memory (cuda_dev.c). */
chorusResult_t cuda_mem_alloc(void **ptr, size_t nbytes);
chorusResult_t cuda_mem_free(void *ptr);
/* Stop the worker, free the slots and the arena (comm_free, after comm_wait_idle). */
void cuda_stage_free(chorusComm_t comm);

#endif /* CHORUS_CUDA_STAGE_H */
