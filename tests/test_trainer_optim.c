/*
 * test_trainer_optim.c: proves the optimizers and the learning-rate schedule (trainer/optim.c).
 *
 * - SGD with momentum, PyTorch semantics (buf = momentum buf + grad + wd p; p -= lr buf): two
 *   steps without and with weight decay, and momentum 0, against values worked out by hand;
 * - AdamW (decoupled decay p *= 1 - lr wd, bias-corrected moments): two steps on three elements
 *   (positive, zero and sign-changing gradients) against values worked out by hand; the state
 *   (m, v, t) after them;
 * - the defaults optim_init sets, and that state starts at zero;
 * - lr_at: linear warmup (step s of w at base (s+1)/w), cosine from base to 0 at total_steps, 0
 *   after; no warmup; lr_scaled: none, linear, sqrt, and -1 for an unknown rule.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <math.h>
#include <stdio.h>

#include "harness.h"
#include "nn.h"

static void near(const char *what, double got, double want)
{
    CHECK(harness_close(got, want, 1e-6), "%s: %.9g, want %.9g", what, got, want);
}

static void test_sgd(void)
{
    long before = harness_failures;
    optim_t o;
    CHECK(optim_init(&o, OPT_SGD, 2) == 0, "optim_init");
    CHECK(o.m[0] == 0 && o.m[1] == 0 && o.t == 0 && o.v == NULL, "fresh SGD state");
    near("SGD default momentum", o.momentum, 0.9);
    near("SGD default weight decay", o.weight_decay, 0.0);
    /* lr 0.1, momentum 0.9, no decay; p = {1, -1}, g = {0.5, 0.25} twice.
     * step 1: buf = g = {0.5, 0.25};                  p = {1 - 0.05, -1 - 0.025}
     * step 2: buf = 0.9 buf + g = {0.95, 0.475};      p = {0.95 - 0.095, -1.025 - 0.0475} */
    float p[2] = {1.0f, -1.0f}, g[2] = {0.5f, 0.25f};
    optim_step(&o, p, g, 0.1f);
    near("SGD step 1 p[0]", p[0], 0.95);
    near("SGD step 1 p[1]", p[1], -1.025);
    optim_step(&o, p, g, 0.1f);
    near("SGD step 2 p[0]", p[0], 0.855);
    near("SGD step 2 p[1]", p[1], -1.0725);
    near("SGD step 2 buf[0]", o.m[0], 0.95);
    CHECK(o.t == 2, "t = %lld", (long long)o.t);
    optim_free(&o);

    /* Weight decay 0.01, p = 2, g = 0.5:
     * step 1: g' = 0.5 + 0.02 = 0.52; buf = 0.52; p = 2 - 0.052 = 1.948
     * step 2: g' = 0.5 + 0.01948 = 0.51948; buf = 0.468 + 0.51948 = 0.98748; p = 1.849252 */
    CHECK(optim_init(&o, OPT_SGD, 1) == 0, "optim_init");
    o.weight_decay = 0.01f;
    float q = 2.0f, gq = 0.5f;
    optim_step(&o, &q, &gq, 0.1f);
    near("SGD+wd step 1", q, 1.948);
    optim_step(&o, &q, &gq, 0.1f);
    near("SGD+wd step 2", q, 1.849252);
    optim_free(&o);

    /* Momentum 0: plain SGD, p -= lr g each step. */
    CHECK(optim_init(&o, OPT_SGD, 1) == 0, "optim_init");
    o.momentum = 0.0f;
    q = 1.0f;
    optim_step(&o, &q, &gq, 0.1f);
    optim_step(&o, &q, &gq, 0.1f);
    near("SGD momentum 0", q, 0.9);
    optim_free(&o);
    harness_report(before, "SGD with momentum and weight decay: PyTorch's update, by hand");
}

static void test_adamw(void)
{
    long before = harness_failures;
    optim_t o;
    CHECK(optim_init(&o, OPT_ADAMW, 3) == 0, "optim_init");
    CHECK(o.v != NULL && o.m[2] == 0 && o.v[2] == 0 && o.t == 0, "fresh AdamW state");
    near("AdamW default beta1", o.beta1, 0.9);
    near("AdamW default beta2", o.beta2, 0.999);
    near("AdamW default eps", o.eps, 1e-8);
    near("AdamW default weight decay", o.weight_decay, 0.01);
    o.weight_decay = 0.1f;
    /* lr 0.01, decay 0.1 (p *= 0.999 each step). p = {1, -2, 0.5}; g1 = {0.5, 0, -1}, g2 =
     * {-0.25, 0, 2}. Step 1: mhat = g, vhat = g^2, so the update is lr g / (|g| + eps). */
    float p[3] = {1.0f, -2.0f, 0.5f};
    float g1[3] = {0.5f, 0.0f, -1.0f}, g2[3] = {-0.25f, 0.0f, 2.0f};
    optim_step(&o, p, g1, 0.01f);
    double p0 = 0.999 - 0.01 * 0.5 / (0.5 + 1e-8); /* 0.989 */
    double p1 = -2.0 * 0.999; /* zero gradient: decay only */
    double p2 = 0.5 * 0.999 + 0.01 * 1.0 / (1.0 + 1e-8); /* 0.5095 */
    near("AdamW step 1 p[0]", p[0], p0);
    near("AdamW step 1 p[1]", p[1], p1);
    near("AdamW step 1 p[2]", p[2], p2);
    near("AdamW step 1 m[0]", o.m[0], 0.05);
    near("AdamW step 1 v[0]", o.v[0], 0.00025);
    /* Step 2: bias corrections 1 - 0.9^2 = 0.19, 1 - 0.999^2 = 0.001999.
     * [0]: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225
     * [2]: m = -0.09 + 0.2 = 0.11,   v = 0.000999 + 0.004 = 0.004999 */
    optim_step(&o, p, g2, 0.01f);
    p0 = p0 * 0.999 - 0.01 * (0.02 / 0.19) / (sqrt(0.00031225 / 0.001999) + 1e-8); /* 0.98534763 */
    p1 = p1 * 0.999;
    p2 = p2 * 0.999 - 0.01 * (0.11 / 0.19) / (sqrt(0.004999 / 0.001999) + 1e-8); /* 0.50532946 */
    near("AdamW step 2 p[0]", p[0], p0);
    near("AdamW step 2 p[1]", p[1], p1);
    near("AdamW step 2 p[2]", p[2], p2);
    near("AdamW step 2 m[0]", o.m[0], 0.02);
    near("AdamW step 2 v[0]", o.v[0], 0.00031225);
    near("AdamW step 2 m[2]", o.m[2], 0.11);
    near("AdamW step 2 v[2]", o.v[2], 0.004999);
    CHECK(o.m[1] == 0 && o.v[1] == 0 && o.t == 2, "zero gradient left state; t = %lld",
          (long long)o.t);
    optim_free(&o);
    harness_report(before, "AdamW: decoupled decay, bias-corrected moments, by hand");
}

static void test_schedule(void)
{
    long before = harness_failures;
    /* base 0.1, warmup 5, total 105: warmup 0.02 .. 0.1, then cosine over 100 steps. */
    near("lr step 0", lr_at(0.1f, 0, 5, 105), 0.02);
    near("lr step 2", lr_at(0.1f, 2, 5, 105), 0.06);
    near("lr step 4", lr_at(0.1f, 4, 5, 105), 0.1);
    near("lr step 5 (cosine start)", lr_at(0.1f, 5, 5, 105), 0.1);
    near("lr step 30", lr_at(0.1f, 30, 5, 105), 0.05 * (1 + cos(M_PI * 0.25)));
    near("lr step 55 (halfway)", lr_at(0.1f, 55, 5, 105), 0.05);
    near("lr step 104", lr_at(0.1f, 104, 5, 105), 0.05 * (1 + cos(M_PI * 0.99)));
    near("lr step 105 (end)", lr_at(0.1f, 105, 5, 105), 0.0);
    near("lr after the end", lr_at(0.1f, 500, 5, 105), 0.0);
    near("no warmup, step 0", lr_at(0.1f, 0, 0, 100), 0.1);
    near("no warmup, step 50", lr_at(0.1f, 50, 0, 100), 0.05);
    float prev = 1.0f;
    int monotone = 1;
    for (int s = 5; s <= 105; s++) {
        float lr = lr_at(0.1f, s, 5, 105);
        monotone &= lr <= prev;
        prev = lr;
    }
    CHECK(monotone, "cosine part not non-increasing");

    near("scale none", lr_scaled(0.1f, "none", 512, 128), 0.1);
    near("scale linear", lr_scaled(0.1f, "linear", 512, 128), 0.4);
    near("scale sqrt", lr_scaled(0.1f, "sqrt", 512, 128), 0.2);
    near("scale linear down", lr_scaled(0.1f, "linear", 64, 128), 0.05);
    near("scale unknown", lr_scaled(0.1f, "cubic", 512, 128), -1.0);
    near("scale ref 0", lr_scaled(0.1f, "linear", 512, 0), -1.0);
    harness_report(before, "lr_at: warmup then cosine to 0; lr_scaled: none, linear, sqrt");
}

int main(void)
{
    test_sgd();
    test_adamw();
    test_schedule();
    return harness_finish("%ld failures", harness_failures);
}
