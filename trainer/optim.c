/*
 * optim.c: the optimizers and the learning-rate schedule, with PyTorch's semantics so results can
 * be compared with torch.optim:
 *
 *   SGD:   g = grad + wd * p;  buf = momentum * buf + g;  p -= lr * buf
 *   AdamW: p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * Every rank runs the same step on the same (all-reduced) gradients, so parameters and state stay
 * bitwise equal across ranks; the trainer checks that with a checksum every K steps.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

int optim_init(optim_t *o, opt_kind_t kind, size_t n)
{
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->n = n;
    /* torch.optim defaults, except SGD momentum 0.9 (the usual choice; PyTorch's default is 0). */
    o->lr = kind == OPT_SGD ? 0.1f : 1e-3f;
    o->momentum = 0.9f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = kind == OPT_SGD ? 0.0f : 0.01f;
    o->m = calloc(n ? n : 1, sizeof(float));
    if (kind == OPT_ADAMW)
        o->v = calloc(n ? n : 1, sizeof(float));
    if (o->m == NULL || (kind == OPT_ADAMW && o->v == NULL)) {
        optim_free(o);
        return -1;
    }
    return 0;
}

void optim_free(optim_t *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

static void sgd_step(optim_t *o, float *p, const float *grad, float lr)
{
    const float mu = o->momentum, wd = o->weight_decay;
    for (size_t i = 0; i < o->n; i++) {
        float g = grad[i];
        if (wd != 0.0f)
            g += wd * p[i];
        /* PyTorch starts the buffer at the first gradient; with a zero buffer mu * 0 + g is the
         * same value bit for bit. */
        float buf = mu * o->m[i] + g;
        o->m[i] = buf;
        p[i] -= lr * buf;
    }
}

static void adamw_step(optim_t *o, float *p, const float *grad, float lr)
{
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    /* Bias corrections in double: 1 - 0.999^t is badly rounded in float for small t. */
    double t = (double)o->t;
    float bc1 = (float)(1.0 - pow(b1, t));
    float sqrt_bc2 = (float)sqrt(1.0 - pow(b2, t));
    float step_size = lr / bc1;
    float decay = 1.0f - lr * o->weight_decay;
    for (size_t i = 0; i < o->n; i++) {
        float g = grad[i];
        p[i] *= decay; /* decoupled weight decay, applied before the Adam update as in PyTorch */
        o->m[i] = b1 * o->m[i] + (1.0f - b1) * g;
        o->v[i] = b2 * o->v[i] + (1.0f - b2) * g * g;
        float denom = sqrtf(o->v[i]) / sqrt_bc2 + eps;
        p[i] -= step_size * (o->m[i] / denom);
    }
}

void optim_step(optim_t *o, float *params, const float *grads, float lr)
{
    o->t++;
    if (o->kind == OPT_SGD)
        sgd_step(o, params, grads, lr);
    else
        adamw_step(o, params, grads, lr);
}

float lr_at(float base, int64_t step, int64_t warmup_steps, int64_t total_steps)
{
    if (step >= total_steps)
        return 0.0f;
    if (step < warmup_steps) /* step 0 already moves: (s + 1) / warmup, reaching base at the end */
        return (float)((double)base * (double)(step + 1) / (double)warmup_steps);
    double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
    return (float)((double)base * 0.5 * (1.0 + cos(M_PI * progress)));
}

float lr_scaled(float base_lr, const char *rule, int global_batch, int ref_batch)
{
    if (rule == NULL || ref_batch <= 0 || global_batch <= 0)
        return -1.0f;
    double ratio = (double)global_batch / (double)ref_batch;
    if (strcmp(rule, "none") == 0)
        return base_lr;
    if (strcmp(rule, "linear") == 0)
        return (float)(base_lr * ratio);
    if (strcmp(rule, "sqrt") == 0)
        return (float)(base_lr * sqrt(ratio));
    return -1.0f;
}
