/*
 * model.c: the BatchNorm MLP, forward and backward, over one flat parameter buffer.
 *
 *   x -> [Linear -> BatchNorm1d -> ReLU] x (L-1) -> Linear -> logits -> softmax cross-entropy
 *
 * model.params (and model.grads, element for element):
 *   | w0 b0 gamma0 beta0 | w1 b1 gamma1 beta1 | ... | w(L-1) b(L-1) |
 * Backward finishes the last layer first, so gradients become final from the END of the buffer:
 * gradient buckets cut from the end can start their all-reduce while earlier layers still run.
 * model.buffers: | run_mean0 run_var0 | run_mean1 run_var1 | ... | (not trained)
 *
 * SyncBatchNorm: with a sync hook, a training forward sums [sum z, sum z^2, count] over the ranks
 * in one call per BN layer, so every rank normalises with the global batch statistics; backward
 * sums [sum dy, sum dy*xhat] in one call per BN layer. dgamma/dbeta keep this rank's share only:
 * they are gradients like any other and get reduced once, with the others, by the trainer. The
 * local sums are accumulated in double and rounded to float before the (optional) reduction, so
 * one rank without a hook computes exactly what one rank with a hook does.
 *
 * Matrix products go through cblas_sgemm; every kernel has a plain-loop reference and a finite-
 * difference check in tests/test_trainer_nn.c.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* ---- Linear ---- */

void linear_forward(const float *x, const float *w, const float *b, int batch, int in, int out,
                    float *z)
{
    if (batch <= 0)
        return;
    for (int r = 0; r < batch; r++)
        memcpy(z + (size_t)r * out, b, (size_t)out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x, in, w, in, 1.0f,
                z, out);
}

void linear_backward_params(const float *x, const float *dz, int batch, int in, int out, float *dw,
                            float *db)
{
    if (batch <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, dz, out, x, in, 1.0f,
                dw, in);
    for (int r = 0; r < batch; r++)
        for (int o = 0; o < out; o++)
            db[o] += dz[(size_t)r * out + o];
}

void linear_backward_input(const float *dz, const float *w, int batch, int in, int out, float *dx)
{
    if (batch <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1.0f, dz, out, w, in,
                0.0f, dx, in);
}

/* ---- BatchNorm1d ---- */

/* The hook has no error path back through the model: a failed reduction would leave ranks with
 * different statistics, so the program stops here with the reason. */
static void sync_or_die(allreduce_fn_t sync, void *sync_ctx, float *buf, int count,
                        const char *what)
{
    if (sync(buf, count, sync_ctx) != 0) {
        fprintf(stderr, "chorus-train: SyncBatchNorm %s all-reduce of %d floats failed\n", what,
                count);
        exit(EXIT_FAILURE);
    }
}

int bn_forward_train(const float *z, int batch, int c, const float *gamma, const float *beta,
                     float momentum, float eps, float *run_mean, float *run_var,
                     allreduce_fn_t sync, void *sync_ctx, float *stats, float *mean, float *invstd,
                     float *xhat, float *y)
{
    for (int j = 0; j < c; j++) {
        double s = 0.0, s2 = 0.0;
        for (int r = 0; r < batch; r++) {
            double v = z[(size_t)r * c + j];
            s += v;
            s2 += v * v;
        }
        stats[j] = (float)s;
        stats[c + j] = (float)s2;
    }
    stats[2 * c] = (float)batch;
    if (sync != NULL)
        sync_or_die(sync, sync_ctx, stats, 2 * c + 1, "forward");
    double n = stats[2 * c];
    if (n < 1.0)
        return 0; /* no samples anywhere: nothing to normalise, statistics unchanged */
    for (int j = 0; j < c; j++) {
        double m = stats[j] / n;
        double var = stats[c + j] / n - m * m; /* biased: what normalisation uses */
        if (var < 0.0)
            var = 0.0;
        mean[j] = (float)m;
        invstd[j] = (float)(1.0 / sqrt(var + eps));
        /* PyTorch: the running variance takes the unbiased estimate (n / (n - 1)). */
        double unbiased = n > 1.0 ? var * n / (n - 1.0) : var;
        run_mean[j] = (1.0f - momentum) * run_mean[j] + momentum * (float)m;
        run_var[j] = (1.0f - momentum) * run_var[j] + momentum * (float)unbiased;
    }
    for (int r = 0; r < batch; r++) {
        for (int j = 0; j < c; j++) {
            size_t k = (size_t)r * c + j;
            float h = (z[k] - mean[j]) * invstd[j];
            xhat[k] = h;
            y[k] = gamma[j] * h + beta[j];
        }
    }
    return (int)n;
}

void bn_forward_eval(const float *z, int batch, int c, const float *gamma, const float *beta,
                     const float *run_mean, const float *run_var, float eps, float *xhat, float *y)
{
    for (int r = 0; r < batch; r++) {
        for (int j = 0; j < c; j++) {
            size_t k = (size_t)r * c + j;
            float h = (z[k] - run_mean[j]) / sqrtf(run_var[j] + eps);
            xhat[k] = h;
            y[k] = gamma[j] * h + beta[j];
        }
    }
}

/*
 * With N samples over all ranks, y = gamma xhat + beta, xhat = (z - mean) invstd:
 *   dz = gamma invstd (dy - sum(dy)/N - xhat sum(dy xhat)/N)
 * The two sums run over the global batch, so they are what SyncBN reduces.
 */
void bn_backward(const float *dy, const float *xhat, const float *gamma, const float *invstd,
                 int batch, int c, int count, allreduce_fn_t sync, void *sync_ctx, float *sums,
                 float *dgamma, float *dbeta, float *dz)
{
    for (int j = 0; j < c; j++) {
        double sdy = 0.0, sdyx = 0.0;
        for (int r = 0; r < batch; r++) {
            size_t k = (size_t)r * c + j;
            sdy += dy[k];
            sdyx += (double)dy[k] * xhat[k];
        }
        sums[j] = (float)sdy;
        sums[c + j] = (float)sdyx;
        dbeta[j] += sums[j];
        dgamma[j] += sums[c + j];
    }
    if (sync != NULL)
        sync_or_die(sync, sync_ctx, sums, 2 * c, "backward");
    if (count < 1)
        return;
    for (int j = 0; j < 2 * c; j++)
        sums[j] /= (float)count; /* now the global means of dy and dy*xhat */
    for (int r = 0; r < batch; r++) {
        for (int j = 0; j < c; j++) {
            size_t k = (size_t)r * c + j;
            dz[k] = gamma[j] * invstd[j] * (dy[k] - sums[j] - xhat[k] * sums[c + j]);
        }
    }
}

/* ---- ReLU ---- */

void relu_forward(const float *y, size_t n, float *a)
{
    for (size_t i = 0; i < n; i++)
        a[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

void relu_backward(const float *a, const float *da, size_t n, float *dy)
{
    for (size_t i = 0; i < n; i++)
        dy[i] = a[i] > 0.0f ? da[i] : 0.0f;
}

/* ---- the model ---- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (-bound, bound) from the top 24 bits: every value is exact in float. */
static float uniform_pm(uint64_t *state, float bound)
{
    float u = (float)(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
    return (2.0f * u - 1.0f) * bound;
}

/* The widest activation whose gradient backward holds (layer outputs; the input needs none). */
static int max_width(const model_t *m)
{
    int w = 1;
    for (int i = 0; i < m->nlayers; i++)
        w = m->layers[i].out > w ? m->layers[i].out : w;
    return w;
}

int model_init(model_t *m, const int *sizes, int nsizes, int max_batch, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    if (nsizes < 2 || max_batch < 1)
        return -1;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] < 1)
            return -1;
    m->nlayers = nsizes - 1;
    m->max_batch = max_batch;
    m->bn_momentum = 0.1f;
    m->bn_eps = 1e-5f;
    m->layers = calloc((size_t)m->nlayers, sizeof(layer_t));
    if (m->layers == NULL)
        return -1;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *l = &m->layers[i];
        l->in = sizes[i];
        l->out = sizes[i + 1];
        l->bn = i < m->nlayers - 1;
        m->nparams += (size_t)l->in * l->out + l->out + (l->bn ? 2 * (size_t)l->out : 0);
        m->nbuffers += l->bn ? 2 * (size_t)l->out : 0;
    }
    int wmax = max_width(m);
    size_t nwork = 2 * (size_t)max_batch * wmax + 2 * (size_t)wmax + 1;
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->buffers = calloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
    m->work = calloc(nwork, sizeof(float));
    if (m->params == NULL || m->grads == NULL || m->buffers == NULL || m->work == NULL)
        goto err_free;

    float *p = m->params, *g = m->grads, *buf = m->buffers;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *l = &m->layers[i];
        size_t nw = (size_t)l->in * l->out, no = (size_t)l->out;
        l->w = p, l->dw = g, p += nw, g += nw;
        l->b = p, l->db = g, p += no, g += no;
        if (!l->bn)
            continue;
        l->gamma = p, l->dgamma = g, p += no, g += no;
        l->beta = p, l->dbeta = g, p += no, g += no;
        l->run_mean = buf, buf += no;
        l->run_var = buf, buf += no;
        /* activations kept for backward: z, xhat, a [max_batch][out]; mean, invstd [out] */
        size_t na = (size_t)max_batch * no;
        l->z = malloc((3 * na + 2 * no) * sizeof(float));
        if (l->z == NULL)
            goto err_free;
        l->xhat = l->z + na;
        l->a = l->xhat + na;
        l->mean = l->a + na;
        l->invstd = l->mean + no;
        for (size_t j = 0; j < no; j++) {
            l->gamma[j] = 1.0f;
            l->beta[j] = 0.0f;
            l->run_mean[j] = 0.0f;
            l->run_var[j] = 1.0f;
        }
    }

    /* nn.Linear's reset_parameters: kaiming_uniform_(a=sqrt(5)) gives w ~ U(+-1/sqrt(in)), and
     * the bias takes the same bound. One stream from the seed, layer by layer, w then b. */
    uint64_t state = seed;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *l = &m->layers[i];
        float bound = 1.0f / sqrtf((float)l->in);
        for (size_t k = 0; k < (size_t)l->in * l->out; k++)
            l->w[k] = uniform_pm(&state, bound);
        for (int k = 0; k < l->out; k++)
            l->b[k] = uniform_pm(&state, bound);
    }
    return 0;

err_free:
    model_free(m);
    return -1;
}

void model_free(model_t *m)
{
    for (int i = 0; m->layers != NULL && i < m->nlayers; i++)
        free(m->layers[i].z);
    free(m->layers);
    free(m->params);
    free(m->grads);
    free(m->buffers);
    free(m->work);
    memset(m, 0, sizeof(*m));
}

static void check_batch(const model_t *m, int batch)
{
    if (batch < 0 || batch > m->max_batch) {
        fprintf(stderr, "chorus-train: batch %d outside the model's 0..%d\n", batch, m->max_batch);
        exit(EXIT_FAILURE);
    }
}

void model_forward(model_t *m, const float *x, int batch, int train, allreduce_fn_t sync,
                   void *sync_ctx, float *logits)
{
    check_batch(m, batch);
    float *stats = m->work + 2 * (size_t)m->max_batch * max_width(m);
    const float *in = x;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *l = &m->layers[i];
        if (!l->bn) {
            linear_forward(in, l->w, l->b, batch, l->in, l->out, logits);
            break;
        }
        linear_forward(in, l->w, l->b, batch, l->in, l->out, l->z);
        if (train)
            m->bn_count = bn_forward_train(l->z, batch, l->out, l->gamma, l->beta, m->bn_momentum,
                                           m->bn_eps, l->run_mean, l->run_var, sync, sync_ctx,
                                           stats, l->mean, l->invstd, l->xhat, l->a);
        else
            bn_forward_eval(l->z, batch, l->out, l->gamma, l->beta, l->run_mean, l->run_var,
                            m->bn_eps, l->xhat, l->a);
        relu_forward(l->a, (size_t)batch * l->out, l->a);
        in = l->a;
    }
}

float model_loss(const float *logits, const uint8_t *y, int batch, int classes, float scale,
                 float *dlogits, int *correct)
{
    double total = 0.0;
    int right = 0;
    for (int r = 0; r < batch; r++) {
        const float *row = logits + (size_t)r * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            best = row[k] > row[best] ? k : best;
        /* log-sum-exp around the maximum: exp never overflows, the largest term is exp(0) = 1 */
        double mx = row[best], se = 0.0;
        for (int k = 0; k < classes; k++)
            se += exp((double)row[k] - mx);
        total += mx + log(se) - row[y[r]];
        right += best == y[r];
        if (dlogits == NULL)
            continue;
        for (int k = 0; k < classes; k++) {
            double p = exp((double)row[k] - mx) / se;
            dlogits[(size_t)r * classes + k] = (float)((p - (k == y[r])) / scale);
        }
    }
    if (correct != NULL)
        *correct = right;
    return (float)total;
}

void model_backward(model_t *m, const float *x, const float *dlogits, int batch,
                    allreduce_fn_t sync, void *sync_ctx, void (*on_layer_done)(int, void *),
                    void *done_ctx)
{
    check_batch(m, batch);
    size_t half = (size_t)m->max_batch * max_width(m);
    float *ping = m->work, *pong = m->work + half, *sums = m->work + 2 * half;
    /* dz: the gradient at the current layer's output, dlogits first, then ping/pong in turn. */
    float *dz = (float *)dlogits; /* only read: the last layer has no BN */
    for (int i = m->nlayers - 1; i >= 0; i--) {
        layer_t *l = &m->layers[i];
        const float *in = i > 0 ? m->layers[i - 1].a : x;
        if (l->bn) { /* dz holds the gradient at a = relu(bn(z)); take it back to z, in place */
            relu_backward(l->a, dz, (size_t)batch * l->out, dz);
            bn_backward(dz, l->xhat, l->gamma, l->invstd, batch, l->out, m->bn_count, sync,
                        sync_ctx, sums, l->dgamma, l->dbeta, dz);
        }
        linear_backward_params(in, dz, batch, l->in, l->out, l->dw, l->db);
        if (on_layer_done != NULL)
            on_layer_done(i, done_ctx); /* this layer's gradients are final: its bucket may go */
        if (i > 0) {
            float *dx = dz == ping ? pong : ping;
            linear_backward_input(dz, l->w, batch, l->in, l->out, dx);
            dz = dx;
        }
    }
}

void model_zero_grad(model_t *m)
{
    memset(m->grads, 0, m->nparams * sizeof(float));
}
