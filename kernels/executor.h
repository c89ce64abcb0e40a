/*
 * executor.h: runs the channel programs of one operation on host threads.
 *
 * Task 0 runs in the calling thread (the caller of a blocking call, or a host stream's worker);
 * tasks 1..n-1 run on the pool's persistent workers, one per extra channel, like one CUDA block
 * per channel in NCCL. The call returns when every task has returned, with the first error.
 */
#ifndef CHORUS_EXECUTOR_H
#define CHORUS_EXECUTOR_H

#include <stddef.h>

#include "chorus.h"

typedef chorusResult_t (*exec_fn_t)(void *arg);
typedef struct exec_pool exec_pool_t;

chorusResult_t exec_pool_create(int nworkers, exec_pool_t **pool_p);
/* Run fn on n args (args + i * stride) and wait for all; returns the first error. A task that
 * fails should make the others stop (the collective tasks raise the abort flag). */
chorusResult_t exec_pool_run(exec_pool_t *pool, int n, exec_fn_t fn, void *args, size_t stride);
void exec_pool_destroy(exec_pool_t *pool);

#endif /* CHORUS_EXECUTOR_H */
