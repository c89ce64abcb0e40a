/*
 * test_trainer_nn.c: proves the model's math (trainer/model.c) on the CPU.
 *
 * - Linear through cblas_sgemm equals plain loops bit for bit (integer inputs, so any summation
 *   order is exact): forward, dw/db accumulating into what is there, dx; batch 0 writes nothing.
 * - BatchNorm forward (training) equals its definition computed in double; the running statistics
 *   follow PyTorch (momentum 0.1, biased variance to normalise, unbiased for the running
 *   variance); evaluation mode normalises with the running statistics.
 * - Every backward equals a finite difference of its forward (4-point central stencil, error
 *   O(h^4), inputs on a 2^-12 grid so x +- h is exact): Linear (w, b, x), BatchNorm in training
 *   mode (z, gamma, beta), ReLU, softmax cross-entropy, and the whole model (every parameter).
 * - Softmax cross-entropy: closed form for zero logits, finite and right for logits of +-1000.
 * - The flat layout: layer i's w b gamma beta precede layer i+1's and the last layer's end the
 *   buffer (grads alike); on_layer_done comes last layer first, once per layer, with that layer's
 *   gradients already final. Init: within nn.Linear's bounds, variance bound^2/3, reproducible
 *   from the seed; gamma 1, beta 0, running mean 0 and variance 1.
 * SyncBatchNorm across ranks: test_trainer_syncbn.c.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nn.h"

/* ---- deterministic test data ---- */

static uint64_t rng = 12345;

/* Uniform in [lo, hi) on the 2^-12 grid: x +- h and x +- 2h stay exact for h = 2^-k, k <= 12. */
static void fill(float *v, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(round((lo + (hi - lo) * harness_uniform01(&rng)) * 4096.0) / 4096.0);
}

static void fill_int(float *v, size_t n, int lo, int hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(lo + (int)floor((hi - lo + 1) * harness_uniform01(&rng)));
}

/* ---- Linear: sgemm against plain loops, bit for bit ---- */

static void test_linear_exact(void)
{
    long before = harness_failures;
    enum { B = 5, IN = 7, OUT = 3 };
    float x[B * IN], w[OUT * IN], b[OUT], z[B * OUT], dz[B * OUT], dw[OUT * IN], db[OUT];
    float dw0[OUT * IN], db0[OUT], dx[B * IN];
    fill_int(x, B * IN, -4, 4);
    fill_int(w, OUT * IN, -3, 3);
    fill_int(b, OUT, -5, 5);
    fill_int(dz, B * OUT, -3, 3);
    fill_int(dw0, OUT * IN, -9, 9);
    fill_int(db0, OUT, -9, 9);
    memcpy(dw, dw0, sizeof(dw));
    memcpy(db, db0, sizeof(db));

    linear_forward(x, w, b, B, IN, OUT, z);
    linear_backward_params(x, dz, B, IN, OUT, dw, db);
    linear_backward_input(dz, w, B, IN, OUT, dx);
    for (int r = 0; r < B; r++)
        for (int o = 0; o < OUT; o++) {
            float want = b[o];
            for (int i = 0; i < IN; i++)
                want += x[r * IN + i] * w[o * IN + i];
            CHECK(z[r * OUT + o] == want, "z[%d][%d] = %g, want %g", r, o, z[r * OUT + o], want);
        }
    for (int o = 0; o < OUT; o++) {
        float want_b = db0[o];
        for (int r = 0; r < B; r++)
            want_b += dz[r * OUT + o];
        CHECK(db[o] == want_b, "db[%d] = %g, want %g", o, db[o], want_b);
        for (int i = 0; i < IN; i++) {
            float want = dw0[o * IN + i];
            for (int r = 0; r < B; r++)
                want += dz[r * OUT + o] * x[r * IN + i];
            CHECK(dw[o * IN + i] == want, "dw[%d][%d] = %g, want %g", o, i, dw[o * IN + i], want);
        }
    }
    for (int r = 0; r < B; r++)
        for (int i = 0; i < IN; i++) {
            float want = 0;
            for (int o = 0; o < OUT; o++)
                want += dz[r * OUT + o] * w[o * IN + i];
            CHECK(dx[r * IN + i] == want, "dx[%d][%d] = %g, want %g", r, i, dx[r * IN + i], want);
        }
    float zs[B * OUT], dws[OUT * IN];
    memcpy(zs, z, sizeof(z));
    memcpy(dws, dw, sizeof(dw));
    linear_forward(x, w, b, 0, IN, OUT, z);
    linear_backward_params(x, dz, 0, IN, OUT, dw, db);
    CHECK(memcmp(zs, z, sizeof(z)) == 0 && memcmp(dws, dw, sizeof(dw)) == 0,
          "batch 0 wrote something");
    harness_report(
        before, "linear: cblas_sgemm forward, dw/db accumulation and dx equal plain loops exactly");
}

/* ---- BatchNorm forward against its definition ---- */

static void test_bn_forward(void)
{
    long before = harness_failures;
    enum { B = 9, C = 5 };
    float z[B * C], gamma[C], beta[C], y[B * C], xhat[B * C], stats[2 * C + 1];
    float mean[C], invstd[C], rm[C], rv[C], ye[B * C], xe[B * C];
    fill(z, B * C, -2.0, 3.0);
    fill(gamma, C, 0.5, 1.5);
    fill(beta, C, -1.0, 1.0);
    for (int j = 0; j < C; j++)
        rm[j] = 0.0f, rv[j] = 1.0f;
    int n = bn_forward_train(z, B, C, gamma, beta, 0.1f, 1e-5f, rm, rv, NULL, NULL, stats, mean,
                             invstd, xhat, y);
    CHECK(n == B, "count %d, want %d", n, B);
    for (int j = 0; j < C; j++) {
        double m = 0, v = 0;
        for (int r = 0; r < B; r++)
            m += z[r * C + j];
        m /= B;
        for (int r = 0; r < B; r++)
            v += (z[r * C + j] - m) * (z[r * C + j] - m);
        v /= B; /* biased, to normalise */
        for (int r = 0; r < B; r++) {
            double want = gamma[j] * (z[r * C + j] - m) / sqrt(v + 1e-5) + beta[j];
            CHECK(harness_close(y[r * C + j], want, 1e-5), "y[%d][%d] = %.8g, want %.8g", r, j,
                  y[r * C + j], want);
        }
        CHECK(harness_close(rm[j], 0.1 * m, 1e-6), "run_mean[%d] = %.8g, want %.8g", j, rm[j],
              0.1 * m);
        double rv_want = 0.9 + 0.1 * v * B / (B - 1); /* unbiased, like PyTorch */
        CHECK(harness_close(rv[j], rv_want, 1e-6), "run_var[%d] = %.8g, want %.8g", j, rv[j],
              rv_want);
    }
    bn_forward_eval(z, B, C, gamma, beta, rm, rv, 1e-5f, xe, ye);
    for (int r = 0; r < B; r++)
        for (int j = 0; j < C; j++) {
            double want = gamma[j] * (z[r * C + j] - rm[j]) / sqrt(rv[j] + 1e-5) + beta[j];
            CHECK(harness_close(ye[r * C + j], want, 1e-6), "eval y[%d][%d] = %.8g, want %.8g", r,
                  j, ye[r * C + j], want);
        }
    harness_report(before,
                   "batchnorm forward: batch statistics, PyTorch running statistics, eval mode");
}

/* ---- finite differences ---- */

typedef double (*loss_fn_t)(void *ctx);

/* Compare grad[i] with (8 (f(+h) - f(-h)) - (f(+2h) - f(-2h))) / 12h, perturbing v[i]. */
static void fd_check(const char *name, loss_fn_t f, void *ctx, float *v, const float *grad,
                     size_t n, float h, double atol, double rtol)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        float save = v[i];
        double fx[4];
        const float steps[4] = {h, -h, 2 * h, -2 * h};
        for (int s = 0; s < 4; s++) {
            v[i] = save + steps[s];
            fx[s] = f(ctx);
        }
        v[i] = save;
        double fd = (8.0 * (fx[0] - fx[1]) - (fx[2] - fx[3])) / (12.0 * h);
        double err = fabs(grad[i] - fd);
        worst = fmax(worst, err);
        CHECK(err <= atol + rtol * fmax(fabs(fd), fabs(grad[i])),
              "%s[%zu]: backward %.8g, finite difference %.8g", name, i, grad[i], fd);
    }
    printf("  %-22s %4zu entries, max |backward - finite difference| = %.1e\n", name, n, worst);
}

static double dot(const float *a, const float *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * r[i];
    return s;
}

enum { LB = 6, LIN = 5, LOUT = 4 };
typedef struct {
    float x[LB * LIN], w[LOUT * LIN], b[LOUT], z[LB * LOUT], r[LB * LOUT];
} lin_ctx_t;

static double lin_loss(void *p)
{
    lin_ctx_t *c = p;
    linear_forward(c->x, c->w, c->b, LB, LIN, LOUT, c->z);
    return dot(c->z, c->r, LB * LOUT);
}

enum { BB = 9, BC = 5 };
typedef struct {
    float z[BB * BC], gamma[BC], beta[BC], r[BB * BC];
    float y[BB * BC], xhat[BB * BC], stats[2 * BC + 1], mean[BC], invstd[BC], rm[BC], rv[BC];
} bn_ctx_t;

static double bn_loss(void *p)
{
    bn_ctx_t *c = p;
    bn_forward_train(c->z, BB, BC, c->gamma, c->beta, 0.1f, 1e-5f, c->rm, c->rv, NULL, NULL,
                     c->stats, c->mean, c->invstd, c->xhat, c->y);
    return dot(c->y, c->r, BB * BC);
}

enum { RN = 40 };
typedef struct {
    float y[RN], a[RN], r[RN];
} relu_ctx_t;

static double relu_loss(void *p)
{
    relu_ctx_t *c = p;
    relu_forward(c->y, RN, c->a);
    return dot(c->a, c->r, RN);
}

enum { CB = 6, CK = 10 };
typedef struct {
    float logits[CB * CK];
    uint8_t y[CB];
} ce_ctx_t;

static double ce_loss(void *p)
{
    ce_ctx_t *c = p;
    return model_loss(c->logits, c->y, CB, CK, 1.0f, NULL, NULL);
}

/* The mean cross-entropy of the model's logits, in double: an independent reference. */
enum { MB = 9, MCLS = 4 };
static const int msizes[] = {6, 8, 7, MCLS};
typedef struct {
    model_t m;
    float x[MB * 6], logits[MB * MCLS];
    uint8_t y[MB];
} model_ctx_t;

static double model_mean_loss(void *p)
{
    model_ctx_t *c = p;
    model_forward(&c->m, c->x, MB, 1, NULL, NULL, c->logits);
    double total = 0;
    for (int r = 0; r < MB; r++) {
        const float *row = c->logits + r * MCLS;
        double mx = row[0], se = 0;
        for (int k = 1; k < MCLS; k++)
            mx = fmax(mx, row[k]);
        for (int k = 0; k < MCLS; k++)
            se += exp(row[k] - mx);
        total += mx + log(se) - row[c->y[r]];
    }
    return total / MB;
}

static void test_finite_differences(void)
{
    long before = harness_failures;
    const float h = 0x1p-7f;

    lin_ctx_t *lc = calloc(1, sizeof(*lc));
    fill(lc->x, LB * LIN, -1, 1);
    fill(lc->w, LOUT * LIN, -1, 1);
    fill(lc->b, LOUT, -1, 1);
    fill(lc->r, LB * LOUT, -1, 1);
    float ldw[LOUT * LIN] = {0}, ldb[LOUT] = {0}, ldx[LB * LIN];
    linear_backward_params(lc->x, lc->r, LB, LIN, LOUT, ldw, ldb);
    linear_backward_input(lc->r, lc->w, LB, LIN, LOUT, ldx);
    fd_check("linear dw", lin_loss, lc, lc->w, ldw, LOUT * LIN, h, 1e-4, 1e-4);
    fd_check("linear db", lin_loss, lc, lc->b, ldb, LOUT, h, 1e-4, 1e-4);
    fd_check("linear dx", lin_loss, lc, lc->x, ldx, LB * LIN, h, 1e-4, 1e-4);
    free(lc);

    bn_ctx_t *bc = calloc(1, sizeof(*bc));
    fill(bc->z, BB * BC, -1.5, 2.5);
    fill(bc->gamma, BC, 0.5, 1.5);
    fill(bc->beta, BC, -1, 1);
    fill(bc->r, BB * BC, -1, 1);
    float bdz[BB * BC], bdg[BC] = {0}, bdb[BC] = {0}, sums[2 * BC];
    bn_loss(bc);
    bn_backward(bc->r, bc->xhat, bc->gamma, bc->invstd, BB, BC, BB, NULL, NULL, sums, bdg, bdb,
                bdz);
    fd_check("batchnorm dz", bn_loss, bc, bc->z, bdz, BB * BC, h, 2e-4, 1e-3);
    fd_check("batchnorm dgamma", bn_loss, bc, bc->gamma, bdg, BC, h, 2e-4, 1e-3);
    fd_check("batchnorm dbeta", bn_loss, bc, bc->beta, bdb, BC, h, 2e-4, 1e-3);
    free(bc);

    relu_ctx_t *rc = calloc(1, sizeof(*rc));
    fill(rc->y, RN, 0.1, 2.0);
    for (int i = 0; i < RN; i += 2)
        rc->y[i] = -rc->y[i]; /* half negative, none within 2h of the kink */
    fill(rc->r, RN, -1, 1);
    float rdy[RN];
    relu_loss(rc);
    relu_backward(rc->a, rc->r, RN, rdy);
    fd_check("relu dy", relu_loss, rc, rc->y, rdy, RN, h, 1e-5, 1e-5);
    free(rc);

    ce_ctx_t *cc = calloc(1, sizeof(*cc));
    fill(cc->logits, CB * CK, -3, 3);
    for (int r = 0; r < CB; r++)
        cc->y[r] = (uint8_t)(r * 3 % CK);
    float cdl[CB * CK];
    model_loss(cc->logits, cc->y, CB, CK, 1.0f, cdl, NULL);
    fd_check("cross-entropy dlogits", ce_loss, cc, cc->logits, cdl, CB * CK, 0x1p-5f, 1e-4, 1e-3);
    free(cc);

    /* The whole model. Betas of +-3 keep every BN output at least 3 - sqrt(MB - 1) > 0.17 away
     * from ReLU's kink (|xhat| <= sqrt(n - 1) for n samples), so no perturbation crosses it:
     * half the units always on, half always off (their gradients must come out 0). */
    model_ctx_t *mc = calloc(1, sizeof(*mc));
    CHECK(model_init(&mc->m, msizes, 4, MB, 3) == 0, "model_init");
    for (size_t i = 0; i < mc->m.nparams; i++)
        mc->m.params[i] = (float)(round(mc->m.params[i] * 4096.0) / 4096.0);
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < mc->m.layers[l].out; j++)
            mc->m.layers[l].beta[j] = j % 2 ? 3.0f : -3.0f;
    fill(mc->x, MB * 6, -2, 2);
    for (int r = 0; r < MB; r++)
        mc->y[r] = (uint8_t)(r % MCLS);
    float dlogits[MB * MCLS];
    model_zero_grad(&mc->m);
    model_forward(&mc->m, mc->x, MB, 1, NULL, NULL, mc->logits);
    model_loss(mc->logits, mc->y, MB, MCLS, (float)MB, dlogits, NULL);
    model_backward(&mc->m, mc->x, dlogits, MB, NULL, NULL, NULL, NULL);
    fd_check("model (all params)", model_mean_loss, mc, mc->m.params, mc->m.grads, mc->m.nparams, h,
             1e-4, 2e-3);
    model_free(&mc->m);
    free(mc);
    harness_report(
        before,
        "backward of linear, batchnorm, relu, cross-entropy, whole model = finite differences");
}

static void test_cross_entropy(void)
{
    long before = harness_failures;
    enum { B = 3, K = 10 };
    float logits[B * K] = {0}, dl[B * K];
    uint8_t y[B] = {0, 4, 9};
    int correct = -1;
    float loss = model_loss(logits, y, B, K, 4.0f, dl, &correct);
    CHECK(harness_close(loss, B * log(10.0), 1e-6), "zero logits: loss %.8g, want 3 log 10", loss);
    for (int r = 0; r < B; r++)
        for (int k = 0; k < K; k++) {
            double want = (0.1 - (k == y[r])) / 4.0;
            CHECK(harness_close(dl[r * K + k], want, 1e-7), "zero logits: dlogits[%d][%d] = %g", r,
                  k, dl[r * K + k]);
        }
    /* +-1000: exp would overflow without the log-sum-exp shift. Row 0 right, rows 1-2 wrong. */
    for (int r = 0; r < B; r++)
        for (int k = 0; k < K; k++)
            logits[r * K + k] = k == 0 ? 1000.0f : (k == 1 ? -1000.0f : 0.0f);
    loss = model_loss(logits, y, B, K, 1.0f, dl, &correct);
    CHECK(isfinite(loss) && harness_close(loss, 2000.0, 1e-6), "large logits: loss %.8g, want 2000",
          loss);
    CHECK(correct == 1, "large logits: %d correct, want 1", correct);
    CHECK(dl[0] == 0.0f && dl[K + 0] == 1.0f && dl[K + 4] == -1.0f, "large logits: dlogits");
    harness_report(before,
                   "cross-entropy: closed form at zero logits, stable at +-1000, correct count");
}

/* ---- layout, on_layer_done, init ---- */

typedef struct {
    model_t *m;
    int order[8], n;
    float *snap[8]; /* each layer's gradient slice when its callback came */
} done_ctx_t;

static size_t layer_nparams(const layer_t *l)
{
    return (size_t)l->in * l->out + l->out + (l->bn ? 2 * (size_t)l->out : 0);
}

static void on_done(int i, void *p)
{
    done_ctx_t *d = p;
    const layer_t *l = &d->m->layers[i];
    if (d->n < 8 && i >= 0 && i < d->m->nlayers && d->snap[i] == NULL) {
        d->order[d->n++] = i;
        d->snap[i] = malloc(layer_nparams(l) * sizeof(float));
        memcpy(d->snap[i], l->dw, layer_nparams(l) * sizeof(float));
    }
}

static void test_layout_and_init(void)
{
    long before = harness_failures;
    model_t m;
    CHECK(model_init(&m, msizes, 4, MB, 11) == 0, "model_init");
    size_t off = 0, boff = 0;
    for (int i = 0; i < m.nlayers; i++) {
        const layer_t *l = &m.layers[i];
        size_t nw = (size_t)l->in * l->out;
        CHECK(l->w == m.params + off && l->dw == m.grads + off, "layer %d w at %zu", i, off);
        CHECK(l->b == l->w + nw && l->db == l->dw + nw, "layer %d b after w", i);
        CHECK(l->bn == (i < m.nlayers - 1), "layer %d bn flag", i);
        if (l->bn) {
            CHECK(l->gamma == l->b + l->out && l->dgamma == l->db + l->out, "layer %d gamma", i);
            CHECK(l->beta == l->gamma + l->out && l->dbeta == l->dgamma + l->out, "layer %d beta",
                  i);
            CHECK(l->run_mean == m.buffers + boff && l->run_var == l->run_mean + l->out,
                  "layer %d running stats", i);
            boff += 2 * (size_t)l->out;
            for (int j = 0; j < l->out; j++)
                CHECK(l->gamma[j] == 1 && l->beta[j] == 0 && l->run_mean[j] == 0 &&
                          l->run_var[j] == 1,
                      "layer %d unit %d: gamma, beta, running stats not 1, 0, 0, 1", i, j);
        }
        off += layer_nparams(l);
    }
    CHECK(off == m.nparams && boff == m.nbuffers, "sizes: %zu params, %zu buffers", off, boff);

    float x[MB * 6], logits[MB * MCLS], dl[MB * MCLS];
    uint8_t y[MB];
    fill(x, MB * 6, -2, 2);
    for (int r = 0; r < MB; r++)
        y[r] = (uint8_t)(r % MCLS);
    done_ctx_t d = {.m = &m};
    model_zero_grad(&m);
    model_forward(&m, x, MB, 1, NULL, NULL, logits);
    model_loss(logits, y, MB, MCLS, (float)MB, dl, NULL);
    model_backward(&m, x, dl, MB, NULL, NULL, on_done, &d);
    CHECK(d.n == 3 && d.order[0] == 2 && d.order[1] == 1 && d.order[2] == 0,
          "on_layer_done order: %d calls", d.n);
    for (int k = 0; k < d.n; k++) {
        int i = d.order[k];
        const layer_t *l = &m.layers[i];
        CHECK(memcmp(d.snap[i], l->dw, layer_nparams(l) * sizeof(float)) == 0,
              "layer %d gradients changed after on_layer_done", i);
        free(d.snap[i]);
    }
    model_free(&m);

    /* Init: nn.Linear's U(-1/sqrt(in), 1/sqrt(in)) on the default shape, over the whole range. */
    const int big[] = {784, 256, 256, 10};
    model_t a, b;
    CHECK(model_init(&a, big, 4, 4, 42) == 0 && model_init(&b, big, 4, 4, 42) == 0, "init");
    CHECK(a.nparams == 784 * 256 + 256 + 512 + 256 * 256 + 256 + 512 + 256 * 10 + 10,
          "default shape has %zu params", a.nparams);
    CHECK(memcmp(a.params, b.params, a.nparams * sizeof(float)) == 0, "same seed, other params");
    model_free(&b);
    CHECK(model_init(&b, big, 4, 4, 43) == 0, "init");
    CHECK(memcmp(a.params, b.params, a.nparams * sizeof(float)) != 0, "seeds 42, 43 same params");
    for (int i = 0; i < a.nlayers; i++) {
        const layer_t *l = &a.layers[i];
        double bound = 1.0 / sqrt(l->in), s2 = 0;
        size_t nw = (size_t)l->in * l->out, bad = 0;
        for (size_t k = 0; k < nw; k++) {
            bad += fabs(l->w[k]) > bound;
            s2 += (double)l->w[k] * l->w[k];
        }
        for (int k = 0; k < l->out; k++)
            bad += fabs(l->b[k]) > bound;
        CHECK(bad == 0, "layer %d: %zu values outside +-%g", i, bad, bound);
        double var = s2 / nw, want = bound * bound / 3.0;
        CHECK(fabs(var / want - 1.0) < 0.05, "layer %d: weight variance %g, U(+-b) has %g", i, var,
              want);
    }
    model_free(&a);
    model_free(&b);
    harness_report(before,
                   "layout: last layer last, on_layer_done last-first with final gradients; init");
}

int main(void)
{
    test_linear_exact();
    test_bn_forward();
    test_finite_differences();
    test_cross_entropy();
    test_layout_and_init();
    return harness_finish("%ld failures", harness_failures);
}
