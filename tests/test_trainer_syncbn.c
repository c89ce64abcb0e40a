/*
 * test_trainer_syncbn.c: proves SyncBatchNorm (trainer/model.c) on real Chorus ranks: threads made
 * by chorusCommInitAll, with a hook that calls chorusAllReduce in place.
 *
 * 13 samples split as 13 (1 rank), 6/6/1 (a rank with one sample), 4/3/3/3 and 7/0/6 (a rank with
 * none). For the BN kernels and for the whole model (6-8-7-4, the same seed on every rank):
 * outputs, input gradients, running statistics, and dgamma/dbeta and every other gradient summed
 * over the ranks equal the single-process full batch without a hook to 1e-6 (relative above 1);
 * one rank with the hook is bit for bit the run without it. The hook is called exactly once per BN
 * layer per pass on every rank (the empty one too), with 2c+1 floats [sum z, sum z^2, count]
 * forward and 2c floats [sum dy, sum dy*xhat] backward.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "harness.h"
#include "nn.h"

/* ---- deterministic test data ---- */

static uint64_t rng = 12345;

/* Uniform in [lo, hi) on the 2^-12 grid. */
static void fill(float *v, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(round((lo + (hi - lo) * harness_uniform01(&rng)) * 4096.0) / 4096.0);
}

enum { MCLS = 4 };
static const int msizes[] = {6, 8, 7, MCLS};

/* ---- SyncBatchNorm on Chorus thread ranks ---- */

enum { SN = 13, SC = 5, SX = 6 };

/* Inputs and full-batch results shared by every case. */
static float s_z[SN * SC], s_dy[SN * SC], s_gamma[SC], s_beta[SC], s_x[SN * SX];
static uint8_t s_lab[SN];

typedef struct {
    /* in */
    int rank, lo, cnt;
    chorusComm_t comm;
    int use_hook;
    /* hook bookkeeping */
    int calls, counts[16];
    /* out: rows lo..lo+cnt of the shared outputs, and per-rank values */
    float *y, *dz, *logits;
    float dgamma[SC], dbeta[SC], rm[SC], rv[SC];
    int n_fwd, n_bwd, calls_kernel_fwd, calls_kernel_bwd, calls_model_fwd, calls_model_bwd;
    float *grads, *buffers;
    size_t nparams, nbuffers;
    int err;
} srank_t;

static int hook(float *buf, int count, void *ctx)
{
    srank_t *s = ctx;
    s->counts[s->calls++ & 15] = count;
    return chorusAllReduce(buf, buf, (size_t)count, chorusFloat32, chorusSum, s->comm, NULL) !=
           chorusSuccess;
}

/* The ranks of the split being run: thread `rank` works on s_ranks[rank]. */
static srank_t *s_ranks;

/* One rank's share: the BN kernels on rows lo..lo+cnt, then the whole model on the same rows.
 * comm and nranks are in s_ranks[rank] already (comm NULL for the full batch). */
static void srank_main(chorusComm_t comm, int rank, int nranks)
{
    (void)comm;
    (void)nranks;
    srank_t *s = &s_ranks[rank];
    allreduce_fn_t sync = s->use_hook ? hook : NULL;
    int rows = s->cnt > 0 ? s->cnt : 1;
    float *xhat = malloc((size_t)rows * SC * sizeof(float));
    float stats[2 * SC + 1], mean[SC], invstd[SC];
    for (int j = 0; j < SC; j++)
        s->rm[j] = 0, s->rv[j] = 1, s->dgamma[j] = 0, s->dbeta[j] = 0;
    s->n_fwd = bn_forward_train(s_z + s->lo * SC, s->cnt, SC, s_gamma, s_beta, 0.1f, 1e-5f, s->rm,
                                s->rv, sync, s, stats, mean, invstd, xhat, s->y + s->lo * SC);
    s->calls_kernel_fwd = s->calls;
    bn_backward(s_dy + s->lo * SC, xhat, s_gamma, invstd, s->cnt, SC, s->n_fwd, sync, s, stats,
                s->dgamma, s->dbeta, s->dz + s->lo * SC);
    s->calls_kernel_bwd = s->calls - s->calls_kernel_fwd;
    free(xhat);

    model_t m;
    if (model_init(&m, msizes, 4, SN, 5) != 0) {
        s->err = 1;
        return;
    }
    float dlogits[SN * MCLS];
    int c0 = s->calls;
    model_zero_grad(&m);
    model_forward(&m, s_x + s->lo * SX, s->cnt, 1, sync, s, s->logits + s->lo * MCLS);
    s->calls_model_fwd = s->calls - c0;
    model_loss(s->logits + s->lo * MCLS, s_lab + s->lo, s->cnt, MCLS, (float)SN, dlogits, NULL);
    model_backward(&m, s_x + s->lo * SX, dlogits, s->cnt, sync, s, NULL, NULL);
    s->calls_model_bwd = s->calls - c0 - s->calls_model_fwd;
    s->nparams = m.nparams;
    s->nbuffers = m.nbuffers;
    s->grads = malloc(m.nparams * sizeof(float));
    s->buffers = malloc(m.nbuffers * sizeof(float));
    memcpy(s->grads, m.grads, m.nparams * sizeof(float));
    memcpy(s->buffers, m.buffers, m.nbuffers * sizeof(float));
    model_free(&m);
}

/* Run one split on nranks Chorus thread ranks (nranks 0: the full batch, no hook, one thread). */
static int run_split(const int *split, int nranks, srank_t *ranks, float *y, float *dz,
                     float *logits)
{
    int threads = nranks > 0 ? nranks : 1;
    chorusComm_t comms[8] = {0};
    if (nranks > 0 && harness_init_all(comms, nranks) != 0)
        return -1;
    for (int r = 0, lo = 0; r < threads; r++) {
        ranks[r] = (srank_t){.rank = r,
                             .lo = lo,
                             .cnt = nranks > 0 ? split[r] : SN,
                             .comm = comms[r],
                             .use_hook = nranks > 0,
                             .y = y,
                             .dz = dz,
                             .logits = logits};
        lo += ranks[r].cnt;
    }
    s_ranks = ranks;
    if (harness_run_ranks(comms, threads, srank_main) != 0)
        return -1;
    harness_destroy_all(comms, nranks);
    return 0;
}

static void test_sync_bn(void)
{
    long before = harness_failures;
    fill(s_z, SN * SC, -1, 1);
    for (int r = 0; r < SN; r++)
        for (int j = 0; j < SC; j++)
            s_z[r * SC + j] += 0.25f * j; /* per-feature means 0 .. 1 */
    fill(s_dy, SN * SC, -1, 1);
    fill(s_gamma, SC, 0.5, 1.5);
    fill(s_beta, SC, -1, 1);
    fill(s_x, SN * SX, -2, 2);
    for (int r = 0; r < SN; r++)
        s_lab[r] = (uint8_t)(r * 7 % MCLS);

    srank_t ref;
    float ry[SN * SC], rdz[SN * SC], rlog[SN * MCLS];
    run_split(NULL, 0, &ref, ry, rdz, rlog);

    static const int splits[][5] = {{1, 13}, {3, 6, 6, 1}, {4, 4, 3, 3, 3}, {3, 7, 0, 6}};
    for (int c = 0; c < 4; c++) {
        int nranks = splits[c][0];
        const int *split = &splits[c][1];
        srank_t ranks[8];
        float y[SN * SC], dz[SN * SC], logits[SN * MCLS];
        if (run_split(split, nranks, ranks, y, dz, logits) != 0)
            continue;
        double worst = 0;
#define CMP(what, got, want)                                                                       \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        worst = fmax(worst, fabs(g_ - w_) / fmax(1.0, fabs(w_)));                                  \
        CHECK(harness_close(g_, w_, 1e-6), "%d ranks: %s: %.9g, full batch %.9g", nranks, what,    \
              g_, w_);                                                                             \
    } while (0)
        for (int k = 0; k < SN * SC; k++) {
            CMP("bn y", y[k], ry[k]);
            CMP("bn dz", dz[k], rdz[k]);
        }
        for (int k = 0; k < SN * MCLS; k++)
            CMP("model logits", logits[k], rlog[k]);
        for (int j = 0; j < SC; j++) {
            double sg = 0, sb = 0;
            for (int r = 0; r < nranks; r++)
                sg += ranks[r].dgamma[j], sb += ranks[r].dbeta[j];
            CMP("bn dgamma summed", sg, ref.dgamma[j]);
            CMP("bn dbeta summed", sb, ref.dbeta[j]);
        }
        for (size_t k = 0; k < ref.nparams; k++) {
            double s = 0;
            for (int r = 0; r < nranks; r++)
                s += ranks[r].grads[k];
            CMP("model gradient summed", s, ref.grads[k]);
        }
        for (int r = 0; r < nranks; r++) {
            const srank_t *s = &ranks[r];
            CHECK(!s->err, "rank %d failed", r);
            CHECK(s->n_fwd == SN, "%d ranks: rank %d count %d", nranks, r, s->n_fwd);
            for (int j = 0; j < SC; j++) {
                CMP("bn running mean", s->rm[j], ref.rm[j]);
                CMP("bn running var", s->rv[j], ref.rv[j]);
            }
            for (size_t k = 0; k < ref.nbuffers; k++)
                CMP("model running stats", s->buffers[k], ref.buffers[k]);
            CHECK(s->calls_kernel_fwd == 1 && s->calls_kernel_bwd == 1 && s->calls_model_fwd == 2 &&
                      s->calls_model_bwd == 2,
                  "%d ranks: rank %d hook calls %d %d %d %d, want 1 1 2 2", nranks, r,
                  s->calls_kernel_fwd, s->calls_kernel_bwd, s->calls_model_fwd, s->calls_model_bwd);
            /* kernel fwd, kernel bwd, model fwd x2 (8 then 7 units), model bwd x2 (7 then 8) */
            const int want[6] = {2 * SC + 1, 2 * SC, 17, 15, 14, 16};
            for (int k = 0; k < 6; k++)
                CHECK(s->counts[k] == want[k],
                      "%d ranks: rank %d hook call %d had %d floats, "
                      "want %d",
                      nranks, r, k, s->counts[k], want[k]);
        }
        if (nranks == 1) {
            CHECK(memcmp(y, ry, sizeof(y)) == 0 && memcmp(dz, rdz, sizeof(dz)) == 0 &&
                      memcmp(logits, rlog, sizeof(logits)) == 0 &&
                      memcmp(ranks[0].grads, ref.grads, ref.nparams * sizeof(float)) == 0,
                  "1 rank with the hook differs from no hook");
        }
        printf("  %d ranks (", nranks);
        for (int r = 0; r < nranks; r++)
            printf("%s%d", r ? "/" : "", split[r]);
        printf("): max relative difference from the full batch %.1e\n", worst);
        for (int r = 0; r < nranks; r++)
            free(ranks[r].grads), free(ranks[r].buffers);
#undef CMP
    }
    free(ref.grads);
    free(ref.buffers);
    harness_report(before,
                   "SyncBatchNorm on 1, 3 (6/6/1, 7/0/6) and 4 Chorus ranks equals the full batch");
}

int main(void)
{
    test_sync_bn();
    return harness_finish("%ld failures", harness_failures);
}
