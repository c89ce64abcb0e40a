/*
 * sampler.c: the distributed sampler. Every rank computes the same epoch order from (seed, epoch)
 * alone, with no communication, and takes its strided share of each global batch:
 *
 *   perm:  p0 p1 p2 ... p(n-1) | p0 p1 ...        Fisher-Yates permutation of [0, n), then wrapped
 *          '---- step 0 ----'  '---- step 1 ...   around to steps * global_batch positions
 *   step k, 3 ranks, global batch 7:  positions k*7 + {0 1 2 3 4 5 6}
 *          rank 0: +0 +3 +6   rank 1: +1 +4   rank 2: +2 +5
 *
 * So the ranks' step-k samples together are exactly the 1-rank step-k batch, whatever the rank
 * count, and a global batch not divisible by the rank count gives the first ranks one sample more.
 */
#include "nn.h"

/* splitmix64 (Steele, Lea, Flood 2014): a full-period 64-bit generator with a strong output mix. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound) without modulo bias: reject the few draws below 2^64 mod bound. */
static uint64_t uniform_below(uint64_t *state, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t r = splitmix64(state);
        if (r >= threshold)
            return r % bound;
    }
}

int sampler_steps(int n, int global_batch)
{
    return (n + global_batch - 1) / global_batch;
}

int sampler_local_batch(int global_batch, int nranks, int rank)
{
    return global_batch / nranks + (rank < global_batch % nranks);
}

void sampler_permute(int n, int global_batch, uint64_t seed, int epoch, int *perm)
{
    /* The stream depends on both seed and epoch through two mixing rounds, so neighbouring seeds
     * or epochs give unrelated orders. */
    uint64_t state = seed;
    state = splitmix64(&state) ^ ((uint64_t)(uint32_t)epoch * 0xd1b54a32d192ed03ull);
    (void)splitmix64(&state);
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)uniform_below(&state, (uint64_t)i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int total = sampler_steps(n, global_batch) * global_batch;
    for (int i = n; i < total; i++)
        perm[i] = perm[i - n]; /* wrap around: the padding repeats the epoch's first samples */
}

void sampler_batch(const int *perm, int global_batch, int nranks, int rank, int step, int *idx)
{
    const int *base = perm + (size_t)step * global_batch;
    int local = sampler_local_batch(global_batch, nranks, rank);
    for (int j = 0; j < local; j++)
        idx[j] = base[rank + j * nranks];
}
