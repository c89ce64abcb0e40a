/*
 * coll_matrix.c: the correctness matrix of the collectives, bit-exact.
 *
 * Proves: AllReduce, ReduceScatter, AllGather, Reduce and Broadcast (every root class), and
 * AlltoAll give the closed-form expected result for every dtype x op x count x in-place/out-of-
 * place, on every rank; out-of-place calls leave sendbuff unchanged; Reduce leaves a non-root's
 * recvbuff unchanged. Inputs are small integers (sums <= 64, products <= 4), exact in every dtype
 * including float16 and bfloat16, so any summation order gives the same bits; avg inputs sum to a
 * multiple of nranks, so the division is exact too.
 *
 * Ranks run as threads (--threads N, chorusCommInitAll), as processes launched by mpirun (no
 * --threads, WITH_MPI build), or as processes started by any launcher with CHORUS_RANK,
 * CHORUS_NRANKS and CHORUS_ROOT set (--env, chorusCommInitEnv; tests/support/netns_run.sh starts
 * them in network namespaces). --counts a,b,c picks the counts; the environment (CHORUS_BUFFSIZE,
 * CHORUS_NCHANNELS, CHORUS_ALGO, CHORUS_HOSTID) sets slice size, channels, algorithm and host
 * layout, so small buffers can cross many slices and ranks can sit on several (simulated) hosts.
 *
 * Built with WITH_DEVBUF (and WITH_MPI), the buffers the calls see are CUDA device memory
 * (support/devbuf.h: a real GPU, or the fake driver given by --driver PATH) and the calls go on a
 * CUDA stream; the test writes and checks host shadows, copied in before each call and out after
 * it, so every check above holds for device buffers too.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus.h"
#include "comm.h" /* --memalloc: pieces read in place (comm->zc_reads) */
#ifdef WITH_MPI
#include "chorus_mpi.h"
#endif
#ifdef WITH_DEVBUF
#include "support/devbuf.h"
#endif

#define NT 10
static const char *type_names[NT] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                     "uint64", "float16", "float32", "float64", "bfloat16"};
static const size_t type_size[NT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *op_names[5] = {"sum", "prod", "max", "min", "avg"};

static size_t counts[16] = {0, 1, 7, 1031};
static int ncounts = 4;
static int nranks_g;
static chorusComm_t *comms_g;
static int quick; /* large counts: all dtypes x ops for AllReduce, fewer for the rest */

/* Exact small-integer encodings written independently of the library's converters. */
static uint16_t small_to_half(double v)
{
    if (v == 0)
        return 0;
    int neg = v < 0;
    double a = neg ? -v : v;
    int e = 0;
    while (a >= 2) {
        a /= 2;
        e++;
    }
    while (a < 1) {
        a *= 2;
        e--;
    }
    uint16_t mant = (uint16_t)((a - 1) * 1024);
    return (uint16_t)((neg << 15) | ((e + 15) << 10) | mant);
}

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v =
        e == 0 ? m / 1024.0 / 16384.0
               : (1 + m / 1024.0) * ((e >= 15) ? (double)(1 << (e - 15)) : 1.0 / (1 << (15 - e)));
    if (e == 31)
        v = m ? 0.0 / 0.0 : 1.0 / 0.0;
    return (h & 0x8000) ? -v : v;
}

static void store(int t, void *buf, size_t i, double v)
{
    switch (t) {
    case 0:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case 1:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case 2:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case 3:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    case 4:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case 5:
        ((uint64_t *)buf)[i] = (uint64_t)v;
        break;
    case 6:
        ((uint16_t *)buf)[i] = small_to_half(v);
        break;
    case 7:
        ((float *)buf)[i] = (float)v;
        break;
    case 8:
        ((double *)buf)[i] = v;
        break;
    case 9: {
        float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16); /* exact: small integers */
        break;
    }
    }
}

static double load(int t, const void *buf, size_t i)
{
    switch (t) {
    case 0:
        return ((const int8_t *)buf)[i];
    case 1:
        return ((const uint8_t *)buf)[i];
    case 2:
        return ((const int32_t *)buf)[i];
    case 3:
        return ((const uint32_t *)buf)[i];
    case 4:
        return (double)((const int64_t *)buf)[i];
    case 5:
        return (double)((const uint64_t *)buf)[i];
    case 6:
        return half_to_double(((const uint16_t *)buf)[i]);
    case 7:
        return ((const float *)buf)[i];
    case 8:
        return ((const double *)buf)[i];
    case 9: {
        uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    }
    return 0;
}

/* Rank r's input element at global index g for op (reductions) or -1 (data movement). */
static double input(int op, int r, size_t g, int n)
{
    switch (op) {
    case 0: /* sum */
    case 4: /* avg: one rank adds n, so the sum is n * (base + 1) */
        return (double)(g % 7) + (((size_t)r + g) % (size_t)n == 0 ? n : 0);
    case 1: /* prod: at most two ranks hold a 2 */
        return ((size_t)r == g % (size_t)n || (size_t)r == (g / (size_t)n) % (size_t)n) ? 2 : 1;
    case 2:
    case 3:
        return (double)(((size_t)r * 7 + g * 3) % 50);
    default: /* no reduction: identify the rank and the index */
        return (double)(((size_t)r * 13 + g) % 100);
    }
}

static double expected_reduce(int op, size_t g, int n)
{
    double acc = input(op, 0, g, n);
    for (int r = 1; r < n; r++) {
        double v = input(op, r, g, n);
        switch (op) {
        case 0:
        case 4:
            acc += v;
            break;
        case 1:
            acc *= v;
            break;
        case 2:
            acc = v > acc ? v : acc;
            break;
        case 3:
            acc = v < acc ? v : acc;
            break;
        }
    }
    return op == 4 ? acc / n : acc;
}

typedef struct ctx {
    int rank, n;
    chorusComm_t comm;
    long failures;
    long checks;
    long zc_reads; /* pieces of peers' buffers this rank read in place */
    long zc_won; /* all-reduces run two-shot zero-copy after a won vote */
    long zc_bcast_won; /* broadcasts run direct zero-copy after a won vote */
    long zc_rs_won; /* reduce-scatters run direct zero-copy after a won vote */
    long zc_pushes; /* inputs this rank wrote into peers' outputs (all-gather push) */
    long zc_ar_pushed; /* all-reduces this rank ran by push */
    long cma_reads; /* peers' inputs this rank read by cross-memory attach */
    long cma_writes[CMA_W_KINDS]; /* peers' outputs this rank wrote by cross-memory attach, by
                                   * collective (algo.h CMA_W_*) */
    long cma_on; /* 1: this rank's communicator has cross-memory attach on */
    long cma_adapt; /* 1: its all-gathers choose their path at run time (CHORUS_CMA_ADAPT) */
    long cma_switches; /* plans it took up that changed the path of some size */
    long slot_both; /* 1: its ring or tree calls wrote their send slots both ways (slot_adapt) */
    long win_both; /* 1: its direct calls copied into its window both ways (CHORUS_WINDOW_ADAPT) */
    /* WITH_DEVBUF: the device buffers behind the host shadows send and recv, their size, the
     * stream, and the result of the call in flight (CALL) */
    char *send, *recv, *dsend, *drecv;
    size_t cap;
    void *stream;
    chorusResult_t res;
} ctx_t;

/* The buffer the library sees for a pointer into a host shadow: the same place in the device
 * buffer behind it (WITH_DEVBUF), else the pointer. */
static void *D(const ctx_t *c, void *p)
{
    char *q = p;
    if (c->dsend != NULL && q >= c->send && q < c->send + c->cap)
        return c->dsend + (q - c->send);
    if (c->drecv != NULL && q >= c->recv && q < c->recv + c->cap)
        return c->drecv + (q - c->recv);
    return p;
}

#ifdef WITH_DEVBUF
static void FAIL_dev(ctx_t *c, const char *what);
/* Shadows into the device buffers before a call, and back after it. */
static void dev_in(ctx_t *c)
{
    if (!devbuf_put(c->dsend, c->send, c->cap) || !devbuf_put(c->drecv, c->recv, c->cap))
        FAIL_dev(c, "copying the inputs in");
}

static void dev_out(ctx_t *c)
{
    if (!devbuf_get(c->send, c->dsend, c->cap) || !devbuf_get(c->recv, c->drecv, c->cap))
        FAIL_dev(c, "copying the results out");
}
#define CALL(c, call) (dev_in(c), (c)->res = (call), dev_out(c), (c)->res)
#else
#define CALL(c, call) (call)
#endif

/* --cma on|off: fail unless some rank read or wrote a peer's memory by cross-memory attach (on),
 * or if one did (off); auto (2): every rank's communicator has it on, and some rank used it, or
 * every rank's has it off, and none did (CHORUS_CMA_MIN unset: window.c's timing chose); adapt
 * (3): every rank's all-gathers choose their path at run time, every rank took up the same number
 * of plans that switched a path, more than one, and some rank used cross-memory attach
 * (CHORUS_CMA_ADAPT=2 switches at every chance); -1: not asked. */
static int cma_mode = -1;
/* --cma-writes K,...: fail unless, for each collective listed (allgather, broadcast: in-place
 * roots, allreduce: two-shot), some rank wrote into a peer's output by cross-memory attach
 * (direct.c); bit CMA_W_* set: asked. --cma off fails if any did. --cma-no-writes K,...: fail if
 * some rank's K did. */
static unsigned cma_writes_wanted, cma_writes_unwanted;
static const char *const cma_w_names[CMA_W_KINDS] = {"allgather", "broadcast", "allreduce"};
/* --slot-modes: fail unless every rank ran ring or tree calls with plain and with streaming
 * send-slot stores (CHORUS_SLOT_ADAPT=2 switches at every call). */
static int slot_modes;
/* --window-modes: the same for the direct algorithms' copies into a rank's window
 * (CHORUS_WINDOW_ADAPT=2). */
static int window_modes;
/* --memalloc: 0 malloc'd buffers, 1 chorusMemAlloc on every rank, 2 on even ranks only. */
static int memalloc_mode;
/* --zc-allreduce: -1 not checked, 1 some all-reduce must win the zero-copy vote, 0 none may. */
static int zc_vote = -1;
/* --zc-broadcast won: some broadcast must win its zero-copy vote. */
static int zc_bcast_vote;
/* --zc-reducescatter: as --zc-allreduce, for reduce-scatter. */
static int zc_rs_vote = -1;
/* --zc-allgather: 1 some all-gather must push into the peers' outputs, 0 none may. */
static int zc_ag_vote = -1;
/* --zc-allreduce-push: 1 some all-reduce must run by push, 0 none may. */
static int zc_arp_vote = -1;

/* arg is a comma list of cma_w_names: their bits in *mask, and 1; else 0. */
static int cma_writes_arg(const char *arg, unsigned *mask)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < CMA_W_KINDS && strcmp(tok, cma_w_names[k]) != 0)
            k++;
        if (k == CMA_W_KINDS)
            return 0;
        *mask |= 1u << k;
    }
    return *mask != 0;
}

/* argv[*i] is name followed by won or lost: *vote 1 or 0, *i past both, and 1; else 0. */
static int won_lost_arg(int argc, char **argv, int *i, const char *name, int *vote)
{
    if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc ||
        (strcmp(argv[*i + 1], "won") != 0 && strcmp(argv[*i + 1], "lost") != 0))
        return 0;
    *vote = strcmp(argv[++*i], "won") == 0;
    return 1;
}

static char *alloc_buf(int rank, size_t nbytes)
{
    void *p = NULL;
    if (memalloc_mode == 1 || (memalloc_mode == 2 && rank % 2 == 0))
        return chorusMemAlloc(&p, nbytes) == chorusSuccess ? p : NULL;
    return malloc(nbytes);
}

static void free_buf(int rank, void *p)
{
    if (memalloc_mode == 1 || (memalloc_mode == 2 && rank % 2 == 0))
        chorusMemFree(p);
    else
        free(p);
}

#define FAIL(c, ...)                                                                               \
    do {                                                                                           \
        if ((c)->failures++ < 10) {                                                                \
            fprintf(stderr, "rank %d: ", (c)->rank);                                               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#ifdef WITH_DEVBUF
static void FAIL_dev(ctx_t *c, const char *what)
{
    FAIL(c, "%s (device buffers) failed", what);
}
#endif

static int call_ok(ctx_t *c, chorusResult_t res, const char *what)
{
    if (res == chorusSuccess)
        return 1;
    FAIL(c, "%s returned %s: %s", what, chorusGetErrorString(res), chorusGetLastError(c->comm));
    return 0;
}

/* Compare n elements of buf with f(k) for k in [0, n). */
#define VERIFY(c, t, buf, nelem, expr, label)                                                      \
    do {                                                                                           \
        long bad_ = 0;                                                                             \
        for (size_t k = 0; k < (nelem); k++) {                                                     \
            double want_ = (expr), got_ = load(t, buf, k);                                         \
            if (got_ != want_ && bad_++ == 0)                                                      \
                FAIL(c, "%s: element %zu is %g, expected %g", label, k, got_, want_);              \
        }                                                                                          \
        (c)->checks++;                                                                             \
    } while (0)

#ifndef WITH_DEVBUF
/* --cma adapt: AG_BURST all-gathers back to back, nothing between them (each into its own
 * output, checked after the last), of three sizes in turn (int32; the largest takes two pieces of
 * the window), in place every other three, each call's values its own: where a plan for a path
 * reached some rank a call late, that call's parts would come from the wrong place, or the ranks
 * would wait for each other's flags until the timeout. */
#define AG_BURST 60
static void ag_burst(ctx_t *c)
{
    const int n = c->n, r = c->rank;
    const size_t sizes[3] = {4100, 20000, 140000};
    size_t total = 0;
    for (int i = 0; i < AG_BURST; i++)
        total += sizes[i % 3] * (size_t)n;
    int32_t *out = malloc(total * 4), *in = malloc(sizes[2] * 4);
    if (out == NULL || in == NULL) {
        FAIL(c, "allocating %zu bytes for the all-gather burst failed", total * 4 + sizes[2] * 4);
        free(out);
        free(in);
        return;
    }
    char label[96];
    int32_t *o = out;
    for (int i = 0; i < AG_BURST; o += sizes[i % 3] * (size_t)n, i++) {
        size_t count = sizes[i % 3];
        int32_t *src = i / 3 % 2 ? o + (size_t)r * count : in;
        for (size_t k = 0; k < count; k++)
            src[k] = (int32_t)(((size_t)i * 977 + (size_t)r * 131 + k) % 1000003);
        snprintf(label, sizeof(label), "AllGather burst call %d", i);
        if (!call_ok(c, chorusAllGather(src, o, count, chorusInt32, c->comm, NULL), label))
            break;
    }
    o = out;
    for (int i = 0; i < AG_BURST; o += sizes[i % 3] * (size_t)n, i++) {
        size_t count = sizes[i % 3];
        snprintf(label, sizeof(label), "AllGather burst call %d count %zu %s", i, count,
                 i / 3 % 2 ? "in-place" : "out-of-place");
        VERIFY(c, chorusInt32, o, count * n,
               (double)(((size_t)i * 977 + k / count * 131 + k % count) % 1000003), label);
    }
    free(out);
    free(in);
}
#endif

static void run_matrix(ctx_t *c)
{
    const int n = c->n, r = c->rank;
    size_t maxcount = 0;
    for (int i = 0; i < ncounts; i++)
        maxcount = counts[i] > maxcount ? counts[i] : maxcount;
    size_t cap = (maxcount * (size_t)n + 64) * 8;
    char *send = alloc_buf(r, cap), *recv = alloc_buf(r, cap), *orig = malloc(cap);
    char label[200];
    c->send = send, c->recv = recv, c->cap = cap;
#ifdef WITH_DEVBUF
    c->dsend = devbuf_alloc(cap), c->drecv = devbuf_alloc(cap), c->stream = devbuf_stream();
    if (c->dsend == NULL || c->drecv == NULL) {
        FAIL(c, "allocating 2 x %zu bytes of device memory failed", cap);
        return;
    }
#endif
    void *stream = c->stream;
    if (send == NULL || recv == NULL || orig == NULL) {
        FAIL(c, "allocating 3 x %zu bytes failed", cap);
        return;
    }
    for (int ci = 0; ci < ncounts; ci++) {
        size_t count = counts[ci];
        int large = count > 100000;
        for (int t = 0; t < NT; t++) {
            size_t es = type_size[t];
            for (int op = 0; op < 5; op++) {
                int ops_for_all = !(large && quick) || op == (t % 5);
                for (int inplace = 0; inplace < 2; inplace++) {
                    const char *place = inplace ? "in-place" : "out-of-place";
                    char *out = inplace ? send : recv;
                    /* AllReduce */
                    for (size_t k = 0; k < count; k++)
                        store(t, send, k, input(op, r, k, n));
                    memcpy(orig, send, count * es);
                    snprintf(label, sizeof(label), "AllReduce %s %s count %zu %s", type_names[t],
                             op_names[op], count, place);
                    if (call_ok(c,
                                CALL(c, chorusAllReduce(D(c, send), D(c, out), count, t, op,
                                                        c->comm, stream)),
                                label)) {
                        VERIFY(c, t, out, count, expected_reduce(op, k, n), label);
                        if (!inplace && memcmp(send, orig, count * es) != 0)
                            FAIL(c, "%s changed sendbuff", label);
                    }
                    if (!ops_for_all)
                        continue;
                    /* ReduceScatter: input n blocks of count; rank r gets block r. */
                    for (size_t k = 0; k < count * n; k++)
                        store(t, send, k, input(op, r, k, n));
                    char *rs_out = inplace ? send + (size_t)r * count * es : recv;
                    snprintf(label, sizeof(label), "ReduceScatter %s %s count %zu %s",
                             type_names[t], op_names[op], count, place);
                    if (call_ok(c,
                                CALL(c, chorusReduceScatter(D(c, send), D(c, rs_out), count, t, op,
                                                            c->comm, stream)),
                                label))
                        VERIFY(c, t, rs_out, count, expected_reduce(op, (size_t)r * count + k, n),
                               label);
                    /* Reduce at roots 0, n-1 and n/2. */
                    int roots[3] = {0, n - 1, n / 2};
                    for (int ri = 0; ri < 3; ri++) {
                        int root = roots[ri];
                        if ((ri == 1 && root == 0) || (ri == 2 && (root == 0 || root == n - 1)))
                            continue;
                        for (size_t k = 0; k < count; k++)
                            store(t, send, k, input(op, r, k, n));
                        if (!inplace)
                            memset(recv, 0x5a, count * es);
                        memcpy(orig, out, count * es);
                        snprintf(label, sizeof(label), "Reduce root %d %s %s count %zu %s", root,
                                 type_names[t], op_names[op], count, place);
                        if (!call_ok(c,
                                     CALL(c, chorusReduce(D(c, send), D(c, out), count, t, op, root,
                                                          c->comm, stream)),
                                     label))
                            continue;
                        if (r == root)
                            VERIFY(c, t, out, count, expected_reduce(op, k, n), label);
                        else if (!inplace && memcmp(out, orig, count * es) != 0)
                            FAIL(c, "%s changed a non-root recvbuff", label);
                    }
                }
            }
            /* Data movement: once per dtype. */
            for (int inplace = 0; inplace < 2; inplace++) {
                const char *place = inplace ? "in-place" : "out-of-place";
                /* AllGather: block b of recvbuff comes from rank b. */
                char *ag_in = inplace ? recv + (size_t)r * count * es : send;
                for (size_t k = 0; k < count; k++)
                    store(t, ag_in, k, input(-1, r, k, n));
                snprintf(label, sizeof(label), "AllGather %s count %zu %s", type_names[t], count,
                         place);
                if (call_ok(c,
                            CALL(c, chorusAllGather(D(c, ag_in), D(c, recv), count, t, c->comm,
                                                    stream)),
                            label))
                    VERIFY(c, t, recv, count * n, input(-1, (int)(k / count), k % count, n), label);
                /* Broadcast from roots 0, n-1, n/2. */
                int roots[3] = {0, n - 1, n / 2};
                for (int ri = 0; ri < 3; ri++) {
                    int root = roots[ri];
                    if ((ri == 1 && root == 0) || (ri == 2 && (root == 0 || root == n - 1)))
                        continue;
                    char *out = inplace ? send : recv;
                    for (size_t k = 0; k < count; k++)
                        store(t, send, k, r == root ? input(-1, r, k, n) : -1);
                    snprintf(label, sizeof(label), "Broadcast root %d %s count %zu %s", root,
                             type_names[t], count, place);
                    if (call_ok(c,
                                CALL(c, chorusBroadcast(D(c, send), D(c, out), count, t, root,
                                                        c->comm, stream)),
                                label))
                        VERIFY(c, t, out, count, input(-1, root, k, n), label);
                }
                /* AlltoAll: block p of rank r's input goes to block r of rank p's output. */
                for (size_t k = 0; k < count * n; k++)
                    store(t, send, k, input(-1, r, k, n));
                char *out = inplace ? send : recv;
                snprintf(label, sizeof(label), "AlltoAll %s count %zu %s", type_names[t], count,
                         place);
                if (call_ok(
                        c,
                        CALL(c, chorusAlltoAll(D(c, send), D(c, out), count, t, c->comm, stream)),
                        label))
                    VERIFY(c, t, out, count * n,
                           input(-1, (int)(k / count), (size_t)r * count + k % count, n), label);
            }
        }
    }
#ifndef WITH_DEVBUF
    if (cma_mode == 3)
        ag_burst(c);
#endif
    free_buf(r, send);
    free_buf(r, recv);
    free(orig);
#ifdef WITH_DEVBUF
    devbuf_free(c->dsend);
    devbuf_free(c->drecv);
    if (devbuf_faults() != 0)
        FAIL(c, "the fake driver counted %d faults (see its messages above)", devbuf_faults());
#endif
    c->zc_reads = (long)c->comm->zc_reads;
    c->zc_won = (long)c->comm->zc_allreduce_won;
    c->zc_bcast_won = (long)c->comm->zc_broadcast_won;
    c->zc_rs_won = (long)c->comm->zc_reducescatter_won;
    c->zc_pushes = (long)c->comm->zc_pushes;
    c->zc_ar_pushed = (long)c->comm->zc_allreduce_pushed;
    c->cma_reads = (long)c->comm->cma_reads;
    for (int k = 0; k < CMA_W_KINDS; k++)
        c->cma_writes[k] = (long)c->comm->cma_writes[k];
    c->cma_on = c->comm->win_view.cma_read != NULL;
    c->cma_adapt = c->comm->win_view.cma_adapt != NULL;
    c->cma_switches = c->cma_adapt ? (long)c->comm->cma_plan.switches : 0;
    c->slot_both = c->comm->slot_plan.calls[0] != 0 && c->comm->slot_plan.calls[1] != 0;
    c->win_both = c->comm->win_plan.calls[0] != 0 && c->comm->win_plan.calls[1] != 0;
}

/* --zc-WHAT: 1 (and rank 0 says why) when want is 1 and no call won its zero-copy vote, or 0 and
 * some did (won: summed over the ranks); want -1: not checked. */
static int vote_failed(int me, const char *what, int want, long won)
{
    if (want < 0 || (want ? won != 0 : won == 0))
        return 0;
    if (me == 0)
        printf("FAIL --zc-%s %s: %ld calls (summed over the ranks) won the zero-copy vote and "
               "ran direct (CHORUS_ZCOPY_*_MIN)\n",
               what, want ? "won" : "lost", won);
    return 1;
}

/* --slot-modes, --window-modes (asked): 1 (and rank 0 says why) unless all nranks_g ranks wrote
 * both ways (both: how many did; what: the copies; calls: the setting and calls that make them). */
static int modes_failed(int me, int asked, long both, const char *flag, const char *what,
                        const char *calls)
{
    if (!asked || nranks_g < 2 || both == nranks_g)
        return 0;
    if (me == 0)
        printf("FAIL --%s: %ld of %d ranks %s both with plain and with streaming stores (%s of "
               "32 KiB and more on one host)\n",
               flag, both, nranks_g, what, calls);
    return 1;
}

static void *thread_main(void *arg)
{
    ctx_t *c = arg;
    run_matrix(c);
    return NULL;
}

/* --env: one rank per process, joined by chorusCommInitEnv. The failure and check counts are summed
 * over the ranks with Chorus itself; if that sum fails, this rank counts the call as a failure so
 * the run can never pass by losing a rank's verdict. Every rank exits with the global verdict. */
static int env_main(long *failures_p, long *checks_p, long *zc_p, long *won_p, long *bwon_p,
                    long *rswon_p, long *push_p, long *cma_p, long *cma_on_p, long adapt_p[3],
                    long *arpush_p, long cma_writes_p[CMA_W_KINDS], long *slot_both_p,
                    long *win_both_p, int *me_p)
{
    chorusComm_t comm;
    chorusResult_t res = chorusCommInitEnv(&comm);
    if (res != chorusSuccess) {
        fprintf(stderr, "chorusCommInitEnv: %s: %s\n", chorusGetErrorString(res),
                chorusGetLastError(NULL));
        return 1;
    }
    int me = 0, n = 0;
    if (chorusCommUserRank(comm, &me) != chorusSuccess ||
        chorusCommCount(comm, &n) != chorusSuccess) {
        fprintf(stderr, "chorusCommUserRank/chorusCommCount failed\n");
        chorusCommDestroy(comm);
        return 1;
    }
    nranks_g = n;
    ctx_t c = {.rank = me, .n = n, .comm = comm};
    run_matrix(&c);
    int64_t sums[12 + CMA_W_KINDS] = {c.failures,     c.checks,       c.zc_reads,  c.zc_won,
                                      c.zc_bcast_won, c.zc_rs_won,    c.cma_reads, c.cma_on,
                                      c.zc_pushes,    c.zc_ar_pushed, c.slot_both, c.win_both};
    for (int k = 0; k < CMA_W_KINDS; k++)
        sums[12 + k] = c.cma_writes[k];
    int64_t adapt[3] = {c.cma_adapt, -c.cma_switches, c.cma_switches}; /* sum, -min, max */
    if (call_ok(&c,
                chorusAllReduce(sums, sums, 12 + CMA_W_KINDS, chorusInt64, chorusSum, comm, NULL),
                "AllReduce of the failure and check counts") &&
        call_ok(&c, chorusAllReduce(adapt, adapt, 1, chorusInt64, chorusSum, comm, NULL),
                "AllReduce of the all-gather plans") &&
        call_ok(&c, chorusAllReduce(adapt + 1, adapt + 1, 2, chorusInt64, chorusMax, comm, NULL),
                "AllReduce of the all-gather plans")) {
        adapt_p[0] = (long)adapt[0];
        adapt_p[1] = (long)-adapt[1];
        adapt_p[2] = (long)adapt[2];
        *failures_p = (long)sums[0];
        *checks_p = (long)sums[1];
        *zc_p = (long)sums[2];
        *won_p = (long)sums[3];
        *bwon_p = (long)sums[4];
        *rswon_p = (long)sums[5];
        *cma_p = (long)sums[6];
        *cma_on_p = (long)sums[7];
        *push_p = (long)sums[8];
        *arpush_p = (long)sums[9];
        *slot_both_p = (long)sums[10];
        *win_both_p = (long)sums[11];
        for (int k = 0; k < CMA_W_KINDS; k++)
            cma_writes_p[k] = (long)sums[12 + k];
    } else {
        *failures_p = c.failures;
        *checks_p = c.checks;
    }
    chorusCommDestroy(comm);
    *me_p = me;
    return 0;
}

#ifdef WITH_DEVBUF
#define PROCESSES "processes, CUDA device buffers"
#else
#define PROCESSES "processes"
#endif

static void parse_counts(const char *text)
{
    ncounts = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *tok = strtok(buf, ","); tok && ncounts < 16; tok = strtok(NULL, ","))
        counts[ncounts++] = strtoull(tok, NULL, 0);
}

int main(int argc, char **argv)
{
    int threads = 0, env = 0;
    const char *driver = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--driver") == 0 && i + 1 < argc)
            driver = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--env") == 0)
            env = 1;
        else if (strcmp(argv[i], "--counts") == 0 && i + 1 < argc)
            parse_counts(argv[++i]);
        else if (strcmp(argv[i], "--quick-large") == 0)
            quick = 1;
        else if (won_lost_arg(argc, argv, &i, "--zc-allreduce", &zc_vote) ||
                 won_lost_arg(argc, argv, &i, "--zc-reducescatter", &zc_rs_vote) ||
                 won_lost_arg(argc, argv, &i, "--zc-allgather", &zc_ag_vote) ||
                 won_lost_arg(argc, argv, &i, "--zc-allreduce-push", &zc_arp_vote)) {
            /* taken */
        } else if (strcmp(argv[i], "--zc-broadcast") == 0 && i + 1 < argc &&
                   strcmp(argv[i + 1], "won") == 0) {
            zc_bcast_vote = 1;
            i++;
        } else if (strcmp(argv[i], "--cma") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "on") == 0 || strcmp(argv[i + 1], "off") == 0 ||
                    strcmp(argv[i + 1], "auto") == 0 || strcmp(argv[i + 1], "adapt") == 0)) {
            i++;
            cma_mode = strcmp(argv[i], "adapt") == 0  ? 3
                       : strcmp(argv[i], "auto") == 0 ? 2
                                                      : strcmp(argv[i], "on") == 0;
        } else if (strcmp(argv[i], "--cma-writes") == 0 && i + 1 < argc &&
                   cma_writes_arg(argv[i + 1], &cma_writes_wanted)) {
            i++;
        } else if (strcmp(argv[i], "--cma-no-writes") == 0 && i + 1 < argc &&
                   cma_writes_arg(argv[i + 1], &cma_writes_unwanted)) {
            i++;
        } else if (strcmp(argv[i], "--slot-modes") == 0) {
            slot_modes = 1;
        } else if (strcmp(argv[i], "--window-modes") == 0) {
            window_modes = 1;
        } else if (strcmp(argv[i], "--memalloc") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "all") == 0 || strcmp(argv[i + 1], "even") == 0))
            memalloc_mode = strcmp(argv[++i], "all") == 0 ? 1 : 2;
        else {
            fprintf(
                stderr,
                "usage: %s [--threads N | --env] [--counts a,b,...] [--quick-large]\n"
                "          [--memalloc all|even] [--zc-allreduce won|lost] [--zc-broadcast won]\n"
                "          [--zc-reducescatter won|lost] [--zc-allgather won|lost]\n"
                "          [--zc-allreduce-push won|lost]\n"
                "          [--cma on|off|auto|adapt] [--cma-writes K,...] [--cma-no-writes K,...]\n"
                "          [--slot-modes] [--window-modes] [--driver PATH]\n"
                "  --threads N  N ranks as threads of this process\n"
                "  --memalloc   chorusMemAlloc buffers on every rank / on even ranks; fails\n"
                "               unless a rank read a peer's buffer in place (zero-copy)\n"
                "  --zc-allreduce  fails unless some all-reduce won (none won) the zero-copy\n"
                "               vote (CHORUS_ZCOPY_ALLREDUCE_MIN); lost: --memalloc's own\n"
                "               check is off\n"
                "  --zc-broadcast won  fails unless some broadcast won its zero-copy vote\n"
                "  --zc-reducescatter  as --zc-allreduce, for reduce-scatter\n"
                "  --zc-allgather  fails unless some all-gather wrote straight into the peers'\n"
                "               outputs (none did; CHORUS_ZCOPY_ALLGATHER_MIN)\n"
                "  --zc-allreduce-push  fails unless some all-reduce ran by push into the\n"
                "               outputs (none did; CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN)\n"
                "  --cma on|off fails unless some rank read or wrote a peer's memory by\n"
                "               cross-memory attach (on), or if one did (off); auto: every\n"
                "               rank's communicator agreed on it (on: some rank used it;\n"
                "               off: none did); adapt: every rank's all-gathers chose their\n"
                "               path at run time and switched it alike, more than once\n"
                "               (CHORUS_CMA_ADAPT=2), and some rank used it\n"
                "  --cma-writes fails unless, for each of K (allgather, broadcast,\n"
                "               allreduce), some rank wrote into a peer's output by\n"
                "               cross-memory attach\n"
                "  --cma-no-writes fails if, for one of K, some rank did\n"
                "  --slot-modes fails unless every rank wrote ring or tree send slots both\n"
                "               with plain and with streaming stores (CHORUS_SLOT_ADAPT=2)\n"
                "  --window-modes the same for direct calls' copies into the window\n"
                "               (CHORUS_WINDOW_ADAPT=2)\n"
                "  --env        one rank per process: CHORUS_RANK, CHORUS_NRANKS, CHORUS_ROOT\n"
                "  (neither)    one rank per process under mpirun (WITH_MPI build)\n"
                "  --driver     the fake CUDA driver (WITH_DEVBUF build on the fake)\n",
                argv[0]);
            return 2;
        }
    }
    if (threads > 0 && env) {
        fprintf(stderr, "--threads and --env exclude each other\n");
        return 2;
    }
#ifndef WITH_DEVBUF
    (void)driver;
#else
    if (threads > 0 || env || memalloc_mode) {
        fprintf(stderr, "device buffers: one rank per process under mpirun, without --memalloc\n");
        return 2;
    }
#endif
    long failures = 0, checks = 0, zc_reads = 0, zc_won = 0, zc_bcast_won = 0, zc_rs_won = 0,
         zc_pushes = 0, cma_reads = 0, cma_on = 0, zc_ar_pushed = 0, slot_both = 0, win_both = 0;
    long cma_writes[CMA_W_KINDS] = {0};
    long adapt[3] = {0, LONG_MAX, 0}; /* ranks choosing all-gather paths; least, most switches */
    int me = 0;
    if (threads > 0) {
        nranks_g = threads;
        comms_g = calloc(threads, sizeof(chorusComm_t));
        chorusResult_t res = chorusCommInitAll(comms_g, threads, NULL);
        if (res != chorusSuccess) {
            fprintf(stderr, "chorusCommInitAll: %s: %s\n", chorusGetErrorString(res),
                    chorusGetLastError(NULL));
            return 1;
        }
        ctx_t *ctx = calloc(threads, sizeof(ctx_t));
        pthread_t *tid = calloc(threads, sizeof(pthread_t));
        for (int i = 0; i < threads; i++) {
            ctx[i] = (ctx_t){.rank = i, .n = threads, .comm = comms_g[i]};
            pthread_create(&tid[i], NULL, thread_main, &ctx[i]);
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(tid[i], NULL);
            failures += ctx[i].failures;
            checks += ctx[i].checks;
            zc_reads += ctx[i].zc_reads;
            zc_won += ctx[i].zc_won;
            zc_bcast_won += ctx[i].zc_bcast_won;
            zc_rs_won += ctx[i].zc_rs_won;
            zc_pushes += ctx[i].zc_pushes;
            zc_ar_pushed += ctx[i].zc_ar_pushed;
            cma_reads += ctx[i].cma_reads;
            for (int k = 0; k < CMA_W_KINDS; k++)
                cma_writes[k] += ctx[i].cma_writes[k];
            cma_on += ctx[i].cma_on;
            slot_both += ctx[i].slot_both;
            win_both += ctx[i].win_both;
            adapt[0] += ctx[i].cma_adapt;
            adapt[1] = ctx[i].cma_switches < adapt[1] ? ctx[i].cma_switches : adapt[1];
            adapt[2] = ctx[i].cma_switches > adapt[2] ? ctx[i].cma_switches : adapt[2];
            chorusCommDestroy(comms_g[i]);
        }
        free(tid);
        free(ctx);
        free(comms_g);
    } else if (env) {
        if (env_main(&failures, &checks, &zc_reads, &zc_won, &zc_bcast_won, &zc_rs_won, &zc_pushes,
                     &cma_reads, &cma_on, adapt, &zc_ar_pushed, cma_writes, &slot_both, &win_both,
                     &me) != 0)
            return 1;
    } else {
#ifdef WITH_MPI
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        MPI_Comm_size(MPI_COMM_WORLD, &nranks_g);
#ifdef WITH_DEVBUF
        const char *why = "";
        if (devbuf_setup(me, driver, &why) == 0) { /* before init: it records the device */
            if (me == 0)
                printf("%s: %s\n", driver != NULL ? "FAIL" : "SKIP", why);
            MPI_Finalize();
            return driver != NULL ? 1 : 77;
        }
#endif
        chorusComm_t comm;
        chorusResult_t res = chorusCommInitMPI(&comm, MPI_COMM_WORLD);
        /* Every rank's init result, so that each prints its own error before the job ends (the
         * first rank to MPI_Abort could kill the others before they printed theirs;
         * settings_mismatch.sh reads every rank's). A failed rank waits 5 s at most for the
         * others' results, then aborts the job as before. */
        int ok = res == chorusSuccess, all_ok = 0;
        MPI_Request req;
        MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
        if (!ok) {
            fprintf(stderr, "rank %d: chorusCommInitMPI: %s: %s\n", me, chorusGetErrorString(res),
                    chorusGetLastError(NULL));
            int done = 0;
            for (int ms = 0; !done && ms < 5000; ms++) {
                MPI_Test(&req, &done, MPI_STATUS_IGNORE);
                if (!done) {
                    struct timespec ts = {0, 1000000};
                    nanosleep(&ts, NULL);
                }
            }
            if (!done)
                MPI_Abort(MPI_COMM_WORLD, 1);
            MPI_Finalize();
            return 1;
        }
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (!all_ok) {
            fprintf(stderr, "rank %d: init failed on another rank\n", me);
            chorusCommDestroy(comm);
            MPI_Finalize();
            return 1;
        }
        ctx_t c = {.rank = me, .n = nranks_g, .comm = comm};
        run_matrix(&c);
        chorusCommDestroy(comm);
        MPI_Allreduce(&c.failures, &failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.checks, &checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.zc_reads, &zc_reads, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.zc_won, &zc_won, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.zc_bcast_won, &zc_bcast_won, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.zc_rs_won, &zc_rs_won, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.zc_pushes, &zc_pushes, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.zc_ar_pushed, &zc_ar_pushed, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.cma_reads, &cma_reads, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(c.cma_writes, cma_writes, CMA_W_KINDS, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.cma_on, &cma_on, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.slot_both, &slot_both, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.win_both, &win_both, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.cma_adapt, &adapt[0], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&c.cma_switches, &adapt[1], 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&c.cma_switches, &adapt[2], 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
        MPI_Finalize();
#else
        fprintf(stderr, "built without MPI: use --threads N or --env\n");
        return 2;
#endif
    }
    failures += vote_failed(me, "allreduce", zc_vote, zc_won);
    failures += vote_failed(me, "broadcast", zc_bcast_vote ? 1 : -1, zc_bcast_won);
    failures += vote_failed(me, "reducescatter", zc_rs_vote, zc_rs_won);
    failures += vote_failed(me, "allgather", zc_ag_vote, zc_pushes);
    failures += vote_failed(me, "allreduce-push", zc_arp_vote, zc_ar_pushed);
    /* --zc-allreduce lost: the ring's fallback is the point; other calls need not read in place */
    long cma_written = 0; /* peers' outputs written by the attach, every collective */
    for (int k = 0; k < CMA_W_KINDS; k++)
        cma_written += cma_writes[k];
    long cma_moved = cma_reads + cma_written; /* peers' memory read or written by the attach */
    if (cma_mode == 2 && nranks_g > 1 &&
        ((cma_on != 0 && cma_on != nranks_g) || (cma_on != 0) != (cma_moved != 0))) {
        if (me == 0)
            printf("FAIL --cma auto: %ld of %d ranks have cross-memory attach on, %ld peers' "
                   "inputs read and %ld outputs written by it (every rank must agree, and use it "
                   "only if on)\n",
                   cma_on, nranks_g, cma_reads, cma_written);
        failures++;
    } else if (cma_mode == 3 && nranks_g > 1 &&
               (adapt[0] != nranks_g || adapt[1] != adapt[2] || adapt[1] < 2 || cma_moved == 0)) {
        if (me == 0)
            printf("FAIL --cma adapt: %ld of %d ranks choose all-gather paths at run time, "
                   "switching them %ld to %ld times (every rank must, alike, more than once), "
                   "%ld peers' inputs read and %ld outputs written by cross-memory attach "
                   "(CHORUS_CMA_ADAPT=2, CHORUS_CMA_MIN unset)\n",
                   adapt[0], nranks_g, adapt[1], adapt[2], cma_reads, cma_written);
        failures++;
    } else if (cma_mode == 0 || cma_mode == 1) {
        if (nranks_g > 1 && (cma_mode ? cma_moved == 0 : cma_moved != 0)) {
            if (me == 0)
                printf("FAIL --cma %s: %ld peers' inputs read and %ld outputs written by "
                       "cross-memory attach (summed over the ranks; CHORUS_CMA_MIN, CHORUS_ALGO, "
                       "and CHORUS_DEBUG=INFO says whether it is on)\n",
                       cma_mode ? "on" : "off", cma_reads, cma_written);
            failures++;
        }
    }
    for (int k = 0; k < CMA_W_KINDS; k++) {
        if ((cma_writes_unwanted >> k & 1) && cma_writes[k] != 0) {
            if (me == 0)
                printf("FAIL --cma-no-writes %s: %ld peers' outputs written by cross-memory attach "
                       "in %ss\n",
                       cma_w_names[k], cma_writes[k], cma_w_names[k]);
            failures++;
        }
        if (!(cma_writes_wanted >> k & 1) || nranks_g < 2 || cma_writes[k] != 0)
            continue;
        if (me == 0)
            printf("FAIL --cma-writes %s: no rank's %s wrote into a peer's output by cross-memory "
                   "attach (CHORUS_CMA_MIN; broadcasts in place from 128 KiB, two-shot all-reduces "
                   "from 64 KiB, where ranks do not outnumber cores)\n",
                   cma_w_names[k], cma_w_names[k]);
        failures++;
    }
    failures += modes_failed(me, slot_modes, slot_both, "slot-modes",
                             "wrote their ring or tree send slots", "CHORUS_SLOT_ADAPT=2, calls");
    failures +=
        modes_failed(me, window_modes, win_both, "window-modes", "copied into their windows",
                     "CHORUS_WINDOW_ADAPT=2, one-shot or two-shot calls");
    if (memalloc_mode && nranks_g > 1 && zc_reads == 0 && zc_vote != 0) {
        if (me == 0)
            printf("FAIL --memalloc: no rank read a peer's chorusMemAlloc buffer in place (is "
                   "CHORUS_ALGO a direct algorithm, and zero-copy on? see CHORUS_DEBUG=INFO)\n");
        failures++;
    }
    if (me == 0) {
        printf("%s: %d ranks (%s), counts", failures ? "FAIL" : "PASS", nranks_g,
               threads ? "threads"
               : env   ? "processes, env init"
                       : PROCESSES);
        for (int i = 0; i < ncounts; i++)
            printf(" %zu", counts[i]);
        printf(": %ld checks, %ld failures", checks, failures);
        if (memalloc_mode)
            printf(", %ld pieces read in place", zc_reads);
        if (cma_mode >= 0)
            printf(", %ld inputs read and %ld outputs written by cross-memory attach", cma_reads,
                   cma_written);
        if (cma_mode == 2)
            printf(" (on at %ld of %d ranks)", cma_on, nranks_g);
        if (cma_mode == 3)
            printf(" (paths switched %ld times on every rank)", adapt[1]);
        if (zc_vote >= 0 || zc_bcast_vote || zc_rs_vote >= 0)
            printf(", zero-copy votes won: %ld all-reduces, %ld broadcasts, %ld reduce-scatters",
                   zc_won, zc_bcast_won, zc_rs_won);
        if (zc_ag_vote >= 0)
            printf(", %ld inputs pushed into peers' outputs", zc_pushes);
        if (zc_arp_vote >= 0)
            printf(", %ld all-reduces by push", zc_ar_pushed);
        printf("\n");
    }
    return failures ? 1 : 0;
}
