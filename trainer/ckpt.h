/*
 * ckpt.h: checkpoints of chorus-train. A checkpoint holds everything the next step depends on
 * (parameters, BN buffers, optimizer state and step count, where in which epoch to go on, and the
 * settings that decide the data order), so a resumed run is bit-identical to one never stopped.
 * Saving is atomic: a temporary file is written, fsync'ed and renamed over the old checkpoint.
 */
#ifndef CHORUS_TRAIN_CKPT_H
#define CHORUS_TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"

#define CKPT_MAX_SIZES 16

/* Where training stands and what it must agree with to go on. */
typedef struct ckpt_meta {
    int64_t epoch; /* the epoch to go on with */
    int64_t step; /* optimizer steps already done in it */
    int64_t global_step; /* optimizer steps done in all */
    uint64_t seed; /* the data order depends on it */
    int32_t batch, accum; /* global batch and accumulation: the data order and schedule */
    int32_t epochs; /* the schedule's length (cosine decay) */
    int32_t nsizes;
    int32_t sizes[CKPT_MAX_SIZES]; /* --layers */
} ckpt_meta_t;

/* Write path atomically (path.tmp.PID, fsync, rename, fsync of the directory). Returns 0, or -1
 * with err saying which call failed on which file. */
int ckpt_save(const char *path, const ckpt_meta_t *meta, const model_t *m, const optim_t *o,
              char *err, size_t errlen);
/* Read path into meta, m and o (already initialized with the run's shape and optimizer). Returns
 * 0, or -1 with err naming the file and what is wrong (missing, not a checkpoint, truncated,
 * corrupt, another model or optimizer). */
int ckpt_load(const char *path, ckpt_meta_t *meta, model_t *m, optim_t *o, char *err,
              size_t errlen);

#endif /* CHORUS_TRAIN_CKPT_H */
