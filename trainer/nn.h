/*
 * nn.h: the pieces chorus-train is made of, each in its own file, each usable alone and tested
 * alone (trainer/README.md). train.c reads top to bottom and calls only these and the public
 * Chorus API. Everything is fp32, row-major, batch-major ([batch][features]).
 */
#ifndef CHORUS_TRAIN_NN_H
#define CHORUS_TRAIN_NN_H

#include <stddef.h>
#include <stdint.h>

/* ---- data.c: Fashion-MNIST IDX files (gzip), read with zlib ---- */

#define DATA_DIR_DEFAULT "/usr/share/datasets/fashion-mnist"
#define DATA_MEAN 0.2860f
#define DATA_STD 0.3530f

typedef struct dataset {
    int n; /* examples */
    int dim; /* 784 */
    float *x; /* [n][dim], normalised: (pixel/255 - mean) / std */
    uint8_t *y; /* [n], 0..9 */
} dataset_t;

/* Load "<dir>/<prefix>-images-idx3-ubyte.gz" and "-labels-idx1-ubyte.gz" (prefix "train" or
 * "t10k"). Returns 0, or -1 with err naming the file and what is wrong (missing, bad magic,
 * truncated, label out of range, counts differ). */
int data_load(const char *dir, const char *prefix, dataset_t *ds, char *err, size_t errlen);
void data_free(dataset_t *ds);

/* ---- sampler.c: the distributed sampler ---- */

/* The epoch's order: a permutation of [0, n) from (seed, epoch) alone, padded by wrapping around
 * to a multiple of global_batch so every rank runs the same number of steps. Rank r of nranks at
 * step k takes positions k*global_batch + r, + r + nranks, ... (strided), so the ranks' step-k
 * samples together are exactly the 1-rank step-k batch. Returns the steps per epoch. */
int sampler_steps(int n, int global_batch);
/* This rank's sample count at any step: global_batch / nranks, plus one for the first
 * global_batch % nranks ranks. */
int sampler_local_batch(int global_batch, int nranks, int rank);
/* Fill idx[0..local_batch) with the example indices of (rank, step) in epoch. perm is scratch of
 * sampler_steps(n, global_batch) * global_batch ints, computed by sampler_permute. */
void sampler_permute(int n, int global_batch, uint64_t seed, int epoch, int *perm);
void sampler_batch(const int *perm, int global_batch, int nranks, int rank, int step, int *idx);

/* ---- model.c: a BatchNorm MLP: [Linear -> BN -> ReLU] x hidden layers -> Linear ---- */

/* Sum in place across ranks (count floats): SyncBatchNorm's hook. NULL: statistics stay local.
 * Every rank calls it equally often (also with batch 0). Nonzero return: the model prints the
 * reason and exits, since ranks would continue with different statistics. */
typedef int (*allreduce_fn_t)(float *buf, int count, void *ctx);

typedef struct layer {
    int in, out;
    float *w, *b; /* [out][in], [out]: views into model.params */
    float *dw, *db; /* views into model.grads */
    int bn; /* followed by BatchNorm + ReLU */
    float *gamma, *beta; /* [out] params */
    float *dgamma, *dbeta; /* grads */
    float *run_mean, *run_var; /* [out] buffers (not trained; broadcast at start) */
    /* activations kept for backward, [batch][out] */
    float *z, *xhat, *a;
    float *mean, *invstd; /* [out] batch statistics used in forward */
} layer_t;

typedef struct model {
    int nlayers;
    layer_t *layers;
    /* one flat buffer each: gradient buckets are slices of grads. Order: layer 0's w b gamma beta,
     * then layer 1's, ...: the last layer's come last, so backward finishes the end first. */
    float *params, *grads;
    size_t nparams;
    float *buffers; /* running means and variances, flat */
    size_t nbuffers;
    int max_batch;
    float bn_momentum, bn_eps;
    int bn_count; /* BN's sample count (all ranks) in the last training forward */
    float *work; /* scratch: backward's gradient ping-pong and the SyncBN sums */
} model_t;

/* sizes: {784, 256, 256, 10}: nsizes-1 layers, BN+ReLU after each but the last. Weights from
 * seed (Kaiming-uniform like PyTorch's nn.Linear); gamma 1, beta 0. Returns 0 or -1. */
int model_init(model_t *m, const int *sizes, int nsizes, int max_batch, uint64_t seed);
void model_free(model_t *m);
/* Forward on x [batch][in] to logits [batch][classes]. train: batch statistics (all-reduced
 * through sync when non-NULL, global_batch = total samples across ranks) and running-stat
 * updates; else running statistics. batch <= max_batch. Either overwrites the activations
 * backward uses. */
void model_forward(model_t *m, const float *x, int batch, int train, allreduce_fn_t sync,
                   void *sync_ctx, float *logits);
/* Softmax cross-entropy: returns the summed loss over the batch, writes dlogits = d(sum loss)/d
 * logits scaled by 1/scale (scale = the global batch, so gradients are of the global mean). */
float model_loss(const float *logits, const uint8_t *y, int batch, int classes, float scale,
                 float *dlogits, int *correct);
/* Backward from dlogits, after a training forward of the same batch; accumulates into grads (call
 * model_zero_grad first). on_layer_done, when set, is called with the layer index as soon as that
 * layer's gradients are final (last layer first): the trainer starts that bucket's all-reduce
 * there. sync as in the forward: one call per BN layer with [sum dy, sum dy*xhat]. */
void model_backward(model_t *m, const float *x, const float *dlogits, int batch,
                    allreduce_fn_t sync, void *sync_ctx, void (*on_layer_done)(int, void *),
                    void *done_ctx);
void model_zero_grad(model_t *m);

/* ---- optim.c: SGD with momentum, AdamW, and the learning-rate schedule ---- */

typedef enum { OPT_SGD, OPT_ADAMW } opt_kind_t;
typedef struct optim {
    opt_kind_t kind;
    size_t n;
    float lr, momentum, beta1, beta2, eps, weight_decay;
    float *m, *v; /* state: SGD uses m as the momentum buffer */
    int64_t t; /* steps taken */
} optim_t;
/* Zeroed state and defaults the caller may override: SGD lr 0.1, momentum 0.9, weight_decay 0;
 * AdamW lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0.01. optim_step uses its lr argument. */
int optim_init(optim_t *o, opt_kind_t kind, size_t n);
void optim_free(optim_t *o);
void optim_step(optim_t *o, float *params, const float *grads, float lr);
/* Linear warmup over warmup_steps from 0 to base, then cosine decay to 0 at total_steps. */
float lr_at(float base, int64_t step, int64_t warmup_steps, int64_t total_steps);
/* base_lr scaled for global_batch against ref_batch: "none", "linear", "sqrt"; -1 for another
 * rule or a batch <= 0. */
float lr_scaled(float base_lr, const char *rule, int global_batch, int ref_batch);

/* ---- model.c's layer kernels, used by model_forward/backward and tested alone ---- */

/* z[batch][out] = x[batch][in] w^T + b (cblas_sgemm). */
void linear_forward(const float *x, const float *w, const float *b, int batch, int in, int out,
                    float *z);
/* dw += dz^T x, db += column sums of dz. */
void linear_backward_params(const float *x, const float *dz, int batch, int in, int out, float *dw,
                            float *db);
/* dx[batch][in] = dz[batch][out] w. */
void linear_backward_input(const float *dz, const float *w, int batch, int in, int out, float *dx);
/* BatchNorm1d, training: statistics of z[batch][c] from [sum z, sum z^2, count] (2c+1 floats in
 * stats), all-reduced through sync in one call when non-NULL; writes mean, invstd, xhat and y =
 * gamma xhat + beta, updates run_mean/run_var (unbiased variance) by momentum. Returns the count
 * over all ranks. y may alias z. */
int bn_forward_train(const float *z, int batch, int c, const float *gamma, const float *beta,
                     float momentum, float eps, float *run_mean, float *run_var,
                     allreduce_fn_t sync, void *sync_ctx, float *stats, float *mean, float *invstd,
                     float *xhat, float *y);
/* BatchNorm1d, evaluation: running statistics. y may alias z. */
void bn_forward_eval(const float *z, int batch, int c, const float *gamma, const float *beta,
                     const float *run_mean, const float *run_var, float eps, float *xhat, float *y);
/* BatchNorm1d backward from dy: dgamma += sum dy xhat, dbeta += sum dy (this rank's samples
 * only); [sum dy, sum dy xhat] (2c floats in sums) all-reduced through sync in one call; dz from
 * the global sums divided by count (bn_forward_train's return). dz may alias dy. */
void bn_backward(const float *dy, const float *xhat, const float *gamma, const float *invstd,
                 int batch, int c, int count, allreduce_fn_t sync, void *sync_ctx, float *sums,
                 float *dgamma, float *dbeta, float *dz);
/* a = max(y, 0); da -> dy = da where a > 0, else 0. Both may work in place. */
void relu_forward(const float *y, size_t n, float *a);
void relu_backward(const float *a, const float *da, size_t n, float *dy);

#endif /* CHORUS_TRAIN_NN_H */
