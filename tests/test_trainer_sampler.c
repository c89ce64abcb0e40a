/*
 * test_trainer_sampler.c: proves the distributed sampler (trainer/sampler.c).
 *
 * For n in {1, 10, 1000, 60000}, global batches {1, 7, 12, 16, 128} and 1..5 ranks (including
 * global batches not divisible by the rank count, and more ranks than samples in a batch):
 * - the steps per epoch are ceil(n / global_batch); local batches differ by at most one, the
 *   first global_batch % nranks ranks having the extra one, and sum to the global batch;
 * - over one epoch, across all ranks, every index in [0, n) is drawn, each exactly once, plus the
 *   padding: the first steps*global_batch - n entries of the order drawn a second time (or more
 *   when global_batch > n), so every rank runs the same number of steps;
 * - rank r's step-k samples are exactly the 1-rank step-k batch's entries r, r + nranks, ...: the
 *   ranks together see the 1-rank batch;
 * - the order is a function of (seed, epoch) alone: equal when recomputed, different for another
 *   epoch or seed, and not the identity.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nn.h"

/* One (n, global_batch, nranks) case over epoch `epoch` of seed. */
static void check_case(int n, int gb, int nranks, uint64_t seed, int epoch)
{
    int steps = sampler_steps(n, gb);
    CHECK(steps == (n + gb - 1) / gb && (long)steps * gb >= n && (long)(steps - 1) * gb < n,
          "n %d gb %d: %d steps", n, gb, steps);
    size_t total = (size_t)steps * gb;
    int *perm = malloc(total * sizeof(int)), *again = malloc(total * sizeof(int));
    int *count = calloc((size_t)n, sizeof(int)), *one = malloc((size_t)gb * sizeof(int));
    int *idx = malloc(((size_t)gb + 1) * sizeof(int));
    sampler_permute(n, gb, seed, epoch, perm);
    sampler_permute(n, gb, seed, epoch, again);
    CHECK(memcmp(perm, again, total * sizeof(int)) == 0, "n %d gb %d: order not reproducible", n,
          gb);

    int sum_local = 0, prev = gb + 1;
    for (int r = 0; r < nranks; r++) {
        int local = sampler_local_batch(gb, nranks, r);
        int want = gb / nranks + (r < gb % nranks);
        CHECK(local == want && local <= prev, "gb %d, %d ranks: rank %d local batch %d, want %d",
              gb, nranks, r, local, want);
        prev = local;
        sum_local += local;
    }
    CHECK(sum_local == gb, "gb %d, %d ranks: local batches sum to %d", gb, nranks, sum_local);

    for (int k = 0; k < steps; k++) {
        sampler_batch(perm, gb, 1, 0, k, one);
        for (int r = 0; r < nranks; r++) {
            int local = sampler_local_batch(gb, nranks, r);
            idx[local] = -12345; /* guard: nothing past the local batch */
            sampler_batch(perm, gb, nranks, r, k, idx);
            CHECK(idx[local] == -12345, "rank %d wrote past its local batch", r);
            for (int j = 0; j < local; j++) {
                CHECK(idx[j] >= 0 && idx[j] < n, "index %d out of range", idx[j]);
                CHECK(idx[j] == one[r + j * nranks],
                      "n %d gb %d %d ranks step %d: rank %d sample %d is %d, 1-rank batch has %d",
                      n, gb, nranks, k, r, j, idx[j], one[r + j * nranks]);
                if (idx[j] >= 0 && idx[j] < n)
                    count[idx[j]]++;
            }
        }
    }
    /* Each index once, plus the padding: wrapping repeats the order's first total - n entries. */
    int *want = calloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++)
        want[i] = 1;
    for (size_t p = (size_t)n; p < total; p++)
        want[perm[p - (size_t)n]]++;
    long bad = 0;
    for (int i = 0; i < n; i++)
        bad += count[i] != want[i] || count[i] < 1;
    CHECK(bad == 0, "n %d gb %d %d ranks: %ld indices drawn the wrong number of times", n, gb,
          nranks, bad);
    /* The order's first n entries are a permutation (each index once). */
    memset(want, 0, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        want[perm[i]]++;
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += want[i] != 1;
    CHECK(bad == 0, "n %d: the first n entries are not a permutation", n);
    free(want);
    free(perm);
    free(again);
    free(count);
    free(one);
    free(idx);
}

static void test_coverage(void)
{
    long before = harness_failures;
    const int ns[] = {1, 10, 1000, 60000};
    const int gbs[] = {1, 7, 12, 16, 128};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++)
            for (int nr = 1; nr <= 5; nr++)
                check_case(ns[a], gbs[b], nr, 42, a + nr);
    harness_report(
        before,
        "every index once per epoch plus padding; N-rank step k = 1-rank step k; uneven and "
        "tiny batches");
}

static void test_orders(void)
{
    long before = harness_failures;
    enum { N = 1000, GB = 128 };
    int steps = sampler_steps(N, GB);
    size_t total = (size_t)steps * GB;
    int *e0 = malloc(total * sizeof(int)), *e1 = malloc(total * sizeof(int));
    int *s1 = malloc(total * sizeof(int));
    sampler_permute(N, GB, 7, 0, e0);
    sampler_permute(N, GB, 7, 1, e1);
    sampler_permute(N, GB, 8, 0, s1);
    int same_epoch = 0, same_seed = 0, fixed = 0;
    for (int i = 0; i < N; i++) {
        same_epoch += e0[i] == e1[i];
        same_seed += e0[i] == s1[i];
        fixed += e0[i] == i;
    }
    /* A random permutation agrees with another in about one place; allow a handful. */
    CHECK(same_epoch < 10, "epochs 0 and 1 agree in %d of %d places", same_epoch, N);
    CHECK(same_seed < 10, "seeds 7 and 8 agree in %d of %d places", same_seed, N);
    CHECK(fixed < 10, "the order fixes %d of %d indices", fixed, N);
    free(e0);
    free(e1);
    free(s1);
    harness_report(before, "the order depends on seed and epoch and is shuffled");
}

int main(void)
{
    test_coverage();
    test_orders();
    return harness_finish("%ld failures", harness_failures);
}
