/*
 * tuning.c: the CHORUS_ALGO / CHORUS_PROTO parsers and the alpha-beta model that picks an
 * algorithm and a channel count for each call (tuning.h, DESIGN section 6).
 *
 * The model. A call on C channels costs
 *
 *   T = start + lat + bw + fill
 *   start = call_us (+ wake_us when C > 1: the channel workers sleep between calls)
 *   lat   = net_hops * (net_alpha_us + topo.net_latency_us) + shm_hops * a_shm
 *   bw    = max(passes / C / b_shm, wire / C / b_net)        (the wire term only across hosts)
 *   fill  = for chains and trees, whose slices flow hop by hop: every hop's slice time once,
 *           less the slowest hop's (the bw term counts that one); slice = min(slot, bytes / C)
 *
 * with n ranks, H hosts, L ranks on the fullest host, x = nbytes (the per-rank count, as NCCL
 * counts it: allgather's send count, reducescatter's receive count), D = 1 + floor(log2(H - 1))
 * the host tree's depth (0 for one host), deg = min(H - 1, 3) its busiest host's edges:
 *
 *                       steps or hops               passes per rank     wire per host link
 *   ring allreduce      2(n-1) steps                (2n-1)/n x          2(n-1)/n x
 *   ring allgather, RS  n-1 steps                   n x                 (n-1) x
 *   chain bcast/reduce  H-1 net + n-H shm hops      x                   x
 *   tree allreduce      2D net + 2(L-1) shm hops    2x (up + down)      deg x; (deg+1)/2 x, C >= 2
 *   tree bcast/reduce   D net + L-1 shm hops, C=1   x                   2x if H >= 4, else x
 *
 * A pass is one primitive call over the bytes (send, recv, recv_reduce_send, ...: the rank
 * copies or reduces them once, in or out of a FIFO). A ring step waits for the predecessor's,
 * so a ring's latency adds up the links of S steps, H of every n of them between hosts (the
 * ring is node-major): net_hops = S * H / n; its bandwidth is the slowest link's. Trees: the
 * double binary tree of tree.c (channel c on tree c % 2; with one channel the busiest host is
 * interior in the one tree), chains inside hosts.
 *
 *   a_shm = shm_alpha_us, or shm_alpha_oversub_us when L * C threads exceed topo.host_cores
 *   b_shm = shm_beta per thread; shm_beta_dram, at most shm_host_beta_dram / (L * C), once the
 *           host's buffers (L ranks' input + output) outgrow shm_llc_nbytes; times
 *           host_cores / (L * C) * oversub_eff when the threads exceed the cores
 *   b_net = min(link / C, net_sock_beta), link = net_gbps * 125 bytes/us: the channels share
 *           the link, each at most what one socket carries
 *
 * Direct algorithms (one host, node-local windows, one thread): T = call_us + pieces x rounds x
 * round + passes / b_shm, with a round of flags direct_round_us (a_shm when oversubscribed), a
 * piece per window buffer (CHORUS_DIRECT_BUFFSIZE), one round per piece (two for two-shot), and
 * the passes of direct.c's schedules (two-shot's fitted against the ring; see tune_predict).
 *
 * tune_pick: among the allowed algorithms that serve the collective, the lowest T, ring on a tie.
 * Channels per algorithm: C0 = min(max_channels, max(1, call bytes / 256 KiB)) (call bytes: the
 * buffer, nbytes x n for allgather and reducescatter; rooted trees: 1), or fewer where the model
 * says fewer is strictly faster: more threads than cores, a link or memory bandwidth already
 * full (then wake_us decides), a small call.
 *
 * Calibration of the shm constants (the net ones: see the net table below):
 *
 *   cmake -S . -B build-tune -DCHORUS_WERROR=ON && cmake --build build-tune -j2
 *   export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
 *   mpirun -np N --oversubscribe build-tune/perftests/P_perf -b 8 -e 32M -f 4 -d float -o sum \
 *       -w 10 -n 40
 *   P in all_reduce all_gather broadcast reduce_scatter reduce, N = 2 and 4, 3 runs each; also
 *   -np 3 all_reduce; CHORUS_NCHANNELS=2 with -np 2 all_reduce, all_gather and -np 1 all_reduce.
 *
 * on this VM (2 AMD EPYC cores, 24 GB, the default 1 channel, 4 MiB FIFO of 8 slots). Measured: the
 * median over runs of the out-of-place and in-place times. Fitted: call_us and shm_alpha_us by
 * relative least squares on the -np 2 rings up to 2 KiB (1 step for all_gather and
 * reduce_scatter, 2 for all_reduce); shm_beta and shm_beta_dram by relative least squares on every
 * -np 2 point from 32 KiB, the others fixed; shm_alpha_oversub_us and oversub_eff by a grid
 * search on the log error of the oversubscribed ring points (-np 3, -np 4, -np 2 x 2 channels);
 * wake_us from -np 1 x 2 channels. In us (size: nccl-tests' column, the total for all_gather and
 * reduce_scatter; *: 32 B, as 8 B is no element per rank):
 *
 *   perftest -np [x channels]   8 B      2 KiB    128 KiB  2 MiB    32 MiB
 *   all_reduce 2                1.58     1.54     12.2     148      3739
 *     model                     1.49     1.62     9.61     131      3449
 *   all_gather 2                1.06     1.08     5.55     83.2     1951
 *     model                     1.02     1.10     6.44     87.7     2299
 *   reduce_scatter 2            0.99     1.19     7.64     82.0     2221
 *     model                     1.02     1.10     6.44     87.7     2299
 *   broadcast 2                 0.67     0.68     5.06     80.0     2954
 *     model                     1.02     1.10     6.44     87.7     2299
 *   reduce 2                    0.33     0.48     7.18     93.1     2345
 *     model                     1.02     1.10     6.44     87.7     2299
 *   all_reduce 4                113      222      199      1039     15970
 *     model                     229      229      276      987      20338
 *   all_gather 4                83.5*    83.6     97.7     510      7909
 *     model                     115      115      142      548      11606
 *   all_reduce 3                293      385      334      1278     20460
 *     model                     153      153      186      694      14517
 *   all_reduce 2 x2             35.3     39.2     52.4     237      12576
 *     model                     89.1     89.4     109      414      8707
 *   all_reduce 1 x2             12.4     12.6     14.5     43.9     1080
 *     model                     13.1     13.1     15.8     56.4     1162
 *
 * Over all 12 sizes (8 B to 32 MiB, x4) the model/measured ratio has an rms spread of x1.16 on the
 * -np 2 rings. It misses, knowingly: chains at small sizes (x1.7 at -np 2, x5 at -np 4), because
 * back-to-back calls of a rooted collective overlap (the root does not wait), so perftests
 * measures their throughput and the model a call's latency; the oversubscribed regime (x1.9 on
 * rings), where a step costs a scheduler switch of 10 to 100 us; one rank (a memcpy, priced as
 * a FIFO pass: 3x high). Runs on this shared VM differ by up to 2x at 32 MiB.
 *
 * Net (net_alpha_us): fitted by hand on hosts simulated with CHORUS_HOSTID on this 2-core box,
 * all_reduce_perf -b 8 -e 16M -f 8 -n 10 -w 3 launched by env (CHORUS_RANK/NRANKS/ROOT), ring
 * and tree forced; 8-byte times (us), measured / model after the fit:
 *   2 ranks, 2 hosts: ring 250-300 / 300;  4 ranks, 2 hosts x 2: ring 650-900 / 805, tree
 *   650-840 / 537. A net hop there is a chain of wake-ups (executor, proxy, TCP, proxy, executor)
 *   on cores the simulated hosts share, hence the cost scaled by threads / cores. The link's
 *   bandwidth term is the plugin's speed (CHORUS_NET_SPEED_MBPS overrides it): in namespaces
 *   shaped to 1 Gbit/s with that set, 2 hosts x 2 ranks at 2-16 MiB measured 26.2/105/212 ms
 *   ring and 19.6/75.5/147 ms tree against a model of 25.8/101/202 and 21.9/72.2/140
 *   (scripts/bench-net.sh; perftests/README.md has the whole table).
 */
#include "tuning.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "debug.h"

/* Every constant of the model, in one place. "fit": least squares on this machine's perftests
 * (see the opening comment); "measured": read off one measurement; "default": physics, to be
 * recalibrated. Bandwidths are bytes per microsecond (1 GB/s = 1000). */
typedef struct tune_consts {
    double call_us; /* fit: a call on one channel (enqueue, prims setup, final handoff) */
    double wake_us; /* measured: waking the channel workers when a call uses several channels */
    double shm_alpha_us; /* fit: one ring step or chain hop inside a host (post, peer sees it) */
    double shm_alpha_oversub_us; /* fit: the same when a host runs more threads than it has cores:
                                  * a futex sleep and a scheduler switch instead of a spin */
    double shm_beta; /* fit: one primitive pass (copy or fused reduce, one FIFO side) by one
                      * thread while the host's buffers fit in the last-level cache */
    double shm_beta_dram; /* fit: the same once they do not */
    double shm_llc_nbytes; /* this VM's last-level cache: where the host's buffers "do not" */
    double shm_host_beta_dram; /* measured: all threads of a host together with buffers in DRAM
                                * (2 x 14600 at 32 MiB, -np 2; 31000 in a 2-channel local copy);
                                * in cache each core has its own. A bigger host has more */
    double oversub_eff; /* fit: with more threads than cores each thread gets cores/threads of
                         * a core times this (spinning and switching waste the rest) */
    /* Net: fitted on simulated hosts over loopback (see the opening comment's net table). */
    double net_alpha_us; /* fit: a hop between hosts (executor -> proxy -> TCP -> proxy ->
                          * executor), times threads / cores when oversubscribed;
                          * + topo.net_latency_us */
    double net_sock_beta; /* default: what one channel's socket carries (tcp_stream, loopback,
                           * one connection: 2.6 GB/s here; 3.7 GB/s for 4 connections) */
    double net_default_gbps; /* default: link speed when the plugin reports none (NCCL's 10) */
    double slice_nbytes; /* pipelining slice when the topology gives none (4 MiB FIFO / 8) */
    double channel_nbytes; /* tune_pick: at most one channel per this many bytes */
    /* Direct (one host, node-local windows; see direct.c): a round of sequence flags, every
     * rank publishing and reading the others' (scaled like a_shm when oversubscribed) */
    double direct_round_us;
    double direct_nbytes; /* window buffer when the topology gives none */
    double direct_twoshot_eff; /* fit: two-shot's passes, as a fraction of the ring's */
    double direct_dram_penalty; /* fit: direct passes once the host's buffers outgrow the LLC */
    double direct_gather_eff; /* fit: direct all-gather's passes, as a fraction of n + 1 */
    double direct_cma_eff; /* measured: a broadcast's copy by cross-memory attach, as a fraction
                            * of a pass */
    double direct_cma_bcast_max; /* measured: the largest broadcast priced so (above, out of
                                  * place, the ring's pipelined copies win) */
} tune_consts_t;

static const tune_consts_t tune_k = {
    .call_us = 0.55,
    .wake_us = 12.5,
    .shm_alpha_us = 0.47,
    .shm_alpha_oversub_us = 38.0,
    .shm_beta = 24200.0,
    .shm_beta_dram = 14600.0,
    .shm_llc_nbytes = 32.0 * 1024 * 1024,
    .shm_host_beta_dram = 30000.0,
    .oversub_eff = 0.4,
    .net_alpha_us = 45.0,
    .net_sock_beta = 2600.0,
    .net_default_gbps = 10.0,
    .slice_nbytes = 512.0 * 1024,
    .channel_nbytes = 256.0 * 1024,
    .direct_round_us = 0.3,
    .direct_nbytes = 512.0 * 1024,
    .direct_twoshot_eff = 0.7,
    .direct_dram_penalty = 3.5,
    .direct_gather_eff = 0.6,
    .direct_cma_eff = 0.7,
    .direct_cma_bcast_max = 32.0 * 1024 * 1024,
};

/* ---- Parsers ---------------------------------------------------------------------------- */

static const char *const coll_names[TUNE_NCOLLS] = {"allreduce", "broadcast", "reduce", "allgather",
                                                    "reducescatter"};
#define COLL_LIST "allreduce, broadcast, reduce, allgather, reducescatter"

/* A name a variable may hold; bit -1: NCCL has it, Chorus does not. */
typedef struct spec_name {
    const char *name;
    int bit;
} spec_name_t;

/* What one variable lists. */
typedef struct spec_kind {
    const char *what; /* "algorithm", "protocol" */
    const spec_name_t *names;
    int nnames;
    unsigned all; /* every bit */
    const char *allowed; /* the values, for error messages */
} spec_kind_t;

static const spec_name_t algo_spec_names[] = {
    {"ring", ALGO_RING},       {"tree", ALGO_TREE},
    {"oneshot", ALGO_ONESHOT}, {"twoshot", ALGO_TWOSHOT},
    {"collnet", -1},           {"collnetdirect", -1},
    {"collnetchain", -1},      {"nvls", -1},
    {"nvlstree", -1},          {"pat", -1},
};
static const spec_kind_t algo_spec = {
    "algorithm", algo_spec_names, sizeof(algo_spec_names) / sizeof(algo_spec_names[0]),
    (1u << ALGO_COUNT) - 1,
    "ring, tree, oneshot, twoshot (collnet, collnetdirect, collnetchain, nvls, nvlstree, pat: "
    "NCCL only, may be excluded)"};

static const spec_name_t proto_spec_names[] = {
    {"simple", PROTO_SIMPLE}, {"ll", PROTO_LL}, {"ll128", PROTO_LL128}};
static const spec_kind_t proto_spec = {"protocol", proto_spec_names, 3, (1u << PROTO_COUNT) - 1,
                                       "simple, ll, ll128 (Chorus runs Simple only)"};

/* A piece of the variable's value: [p, p + n). */
typedef struct span {
    const char *p;
    size_t n;
} span_t;

static span_t span_trim(span_t s)
{
    while (s.n > 0 && isspace((unsigned char)s.p[0])) {
        s.p++;
        s.n--;
    }
    while (s.n > 0 && isspace((unsigned char)s.p[s.n - 1]))
        s.n--;
    return s;
}

static int span_is(span_t s, const char *name)
{
    return strlen(name) == s.n && strncasecmp(s.p, name, s.n) == 0;
}

/* Offset of the first c in s, or s.n. */
static size_t span_find(span_t s, char c)
{
    const char *q = memchr(s.p, c, s.n);
    return q ? (size_t)(q - s.p) : s.n;
}

/* One list ("ring,tree", "^tree") into *mask_p; coll names the collective in messages (NULL for
 * a list that applies to all). */
static chorusResult_t parse_list(const char *var, const char *value, const spec_kind_t *k,
                                 span_t list, const char *coll, unsigned *mask_p)
{
    char where[48] = ""; /* " (for allreduce)" in a per-collective value */
    if (coll != NULL)
        snprintf(where, sizeof(where), " (for %s)", coll);
    list = span_trim(list);
    int exclude = list.n > 0 && list.p[0] == '^';
    if (exclude) {
        list.p++;
        list.n--;
    }
    unsigned bits = 0;
    span_t missing = {NULL, 0}; /* the first name NCCL has and Chorus does not */
    while (1) {
        size_t comma = span_find(list, ',');
        span_t tok = span_trim((span_t){list.p, comma});
        if (tok.n == 0)
            return ERR(chorusInvalidArgument, SUB_TUNING,
                       "%s=\"%s\": empty %s name%s (allowed: %s; ^ in front excludes)", var, value,
                       k->what, where, k->allowed);
        int i = 0;
        while (i < k->nnames && !span_is(tok, k->names[i].name))
            i++;
        if (i == k->nnames)
            return ERR(chorusInvalidArgument, SUB_TUNING,
                       "%s=\"%s\": unknown %s \"%.*s\"%s (allowed: %s; ^ in front excludes)", var,
                       value, k->what, (int)tok.n, tok.p, where, k->allowed);
        if (k->names[i].bit >= 0)
            bits |= 1u << k->names[i].bit;
        else if (missing.p == NULL)
            missing = tok;
        if (comma == list.n)
            break;
        list.p += comma + 1;
        list.n -= comma + 1;
    }
    unsigned mask = exclude ? k->all & ~bits : bits;
    if (mask == 0 && !exclude)
        return ERR(chorusInvalidArgument, SUB_TUNING,
                   "%s=\"%s\": names only \"%.*s\"%s, which Chorus does not have (allowed: %s)",
                   var, value, (int)missing.n, missing.p, where, k->allowed);
    if (mask == 0)
        return ERR(chorusInvalidArgument, SUB_TUNING,
                   "%s=\"%s\": excludes every %s%s (allowed: %s)", var, value, k->what, where,
                   k->allowed);
    *mask_p = mask;
    return chorusSuccess;
}

/* A whole value: one list for every collective, or "coll:list;coll:list" (unlisted collectives
 * keep everything). */
static chorusResult_t parse_spec(const char *var, const char *value, const spec_kind_t *k,
                                 unsigned masks_p[TUNE_NCOLLS])
{
    unsigned masks[TUNE_NCOLLS];
    for (int c = 0; c < TUNE_NCOLLS; c++)
        masks[c] = k->all;
    span_t all = span_trim((span_t){value ? value : "", value ? strlen(value) : 0});
    if (all.n > 0 && span_find(all, ':') == all.n) {
        unsigned m;
        CHECK(parse_list(var, value, k, all, NULL, &m));
        for (int c = 0; c < TUNE_NCOLLS; c++)
            masks[c] = m;
    } else if (all.n > 0) {
        int named[TUNE_NCOLLS] = {0};
        while (all.n > 0) {
            size_t semi = span_find(all, ';');
            span_t seg = span_trim((span_t){all.p, semi});
            size_t step = semi < all.n ? semi + 1 : semi; /* past the ';' */
            all.p += step;
            all.n -= step;
            if (seg.n == 0)
                continue;
            size_t colon = span_find(seg, ':');
            if (colon == seg.n)
                return ERR(chorusInvalidArgument, SUB_TUNING,
                           "%s=\"%s\": \"%.*s\" is not collective:%ss (a per-collective value "
                           "is like allreduce:tree;broadcast:ring)",
                           var, value, (int)seg.n, seg.p, k->what);
            span_t name = span_trim((span_t){seg.p, colon});
            int c = 0;
            while (c < TUNE_NCOLLS && !span_is(name, coll_names[c]))
                c++;
            if (c == TUNE_NCOLLS)
                return ERR(chorusInvalidArgument, SUB_TUNING,
                           "%s=\"%s\": unknown collective \"%.*s\" (allowed: %s)", var, value,
                           (int)name.n, name.p, COLL_LIST);
            if (named[c])
                return ERR(chorusInvalidArgument, SUB_TUNING,
                           "%s=\"%s\": collective \"%s\" is named twice", var, value,
                           coll_names[c]);
            named[c] = 1;
            CHECK(parse_list(var, value, k, (span_t){seg.p + colon + 1, seg.n - colon - 1},
                             coll_names[c], &masks[c]));
        }
    }
    memcpy(masks_p, masks, sizeof(masks));
    return chorusSuccess;
}

chorusResult_t tune_parse_algo(const char *var, const char *spec, unsigned mask[TUNE_NCOLLS])
{
    return parse_spec(var, spec, &algo_spec, mask);
}

chorusResult_t tune_parse_proto(const char *var, const char *spec, unsigned *mask_p)
{
    unsigned masks[TUNE_NCOLLS];
    CHECK(parse_spec(var, spec, &proto_spec, masks));
    unsigned mask = proto_spec.all;
    for (int c = 0; c < TUNE_NCOLLS; c++) {
        if (!(masks[c] & (1u << PROTO_SIMPLE))) { /* so spec is not NULL: NULL allows all */
            char where[48] = "";
            if (strchr(spec, ':') != NULL)
                snprintf(where, sizeof(where), " (for %s)", coll_names[c]);
            return ERR(chorusInvalidArgument, SUB_TUNING,
                       "%s=\"%s\" does not allow the Simple protocol%s: Chorus only has the "
                       "Simple protocol (LL and LL128 are NCCL's); allow simple or unset %s",
                       var, spec, where, var);
        }
        mask &= masks[c];
    }
    *mask_p = mask;
    return chorusSuccess;
}

/* ---- The model -------------------------------------------------------------------------- */

unsigned tune_algos_serving(coll_kind_t kind)
{
    switch (kind) {
    case COLL_ALLREDUCE:
        return (1u << ALGO_RING) | (1u << ALGO_TREE) | (1u << ALGO_ONESHOT) | (1u << ALGO_TWOSHOT);
    case COLL_BROADCAST:
    case COLL_REDUCE:
        return (1u << ALGO_RING) | (1u << ALGO_TREE) | (1u << ALGO_ONESHOT);
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
        return (1u << ALGO_RING) | (1u << ALGO_ONESHOT);
    default:
        return 0;
    }
}

const char *algo_name(algo_t algo)
{
    switch (algo) {
    case ALGO_RING:
        return "ring";
    case ALGO_TREE:
        return "tree";
    case ALGO_ONESHOT:
        return "oneshot";
    case ALGO_TWOSHOT:
        return "twoshot";
    default:
        return "unknown";
    }
}

/* The library does not link libm: these and HUGE_VAL are all the model needs of it. */
static double dmin(double a, double b)
{
    return a < b ? a : b;
}

static double dmax(double a, double b)
{
    return a > b ? a : b;
}

/* The topology with every field in range (tune_init stores it so; a hand-made tuner too). */
static tune_topo_t topo_norm(const tune_topo_t *in)
{
    tune_topo_t t = *in;
    if (t.nranks < 1)
        t.nranks = 1;
    if (t.nhosts < 1 || t.nhosts > t.nranks)
        t.nhosts = t.nhosts < 1 ? 1 : t.nranks;
    int even = (t.nranks + t.nhosts - 1) / t.nhosts;
    if (t.max_local < even || t.max_local > t.nranks - t.nhosts + 1)
        t.max_local = t.max_local < even ? even : t.nranks - t.nhosts + 1;
    if (t.max_channels < 1)
        t.max_channels = 1;
    if (t.host_cores < 0)
        t.host_cores = 0;
    return t;
}

/* Edges from the host tree's root to its deepest host (tree.c: position 0 above an in-order
 * binary tree of positions 1..H-1): 1 + floor(log2(H-1)); 0 for one host. */
static int host_tree_depth(int nhosts)
{
    int d = 0;
    if (nhosts < 2)
        return 0;
    for (int m = nhosts - 1; m > 1; m >>= 1)
        d++;
    return 1 + d;
}

double tune_predict(const tuner_t *t, coll_kind_t kind, algo_t algo, size_t nbytes, int nchannels)
{
    const tune_consts_t *k = &tune_k;
    if ((unsigned)kind >= TUNE_NCOLLS || (unsigned)algo >= ALGO_COUNT ||
        !(tune_algos_serving(kind) & (1u << algo)))
        return HUGE_VAL;
    const tune_topo_t tp = topo_norm(&t->topo);
    const int n = tp.nranks, H = tp.nhosts, L = tp.max_local;
    const int gather = kind == COLL_ALLGATHER || kind == COLL_REDUCESCATTER;
    const double nb = (double)nbytes;
    int C = nchannels < 1 ? 1 : nchannels > tp.max_channels ? tp.max_channels : nchannels;
    if (algo == ALGO_TREE && kind != COLL_ALLREDUCE)
        C = 1; /* a rooted tree runs on one channel */

    /* Shm: L ranks x C channel threads share the host's cores and memory (M ranks where hosts
     * are simulated on one machine; across hosts each rank also runs a proxy thread). */
    const int M = tp.machine_ranks > L ? tp.machine_ranks : L;
    const int threads = M * C * (H > 1 ? 2 : 1);
    const int over = tp.host_cores > 0 && threads > tp.host_cores;
    /* Fitted at -np 3..4 on 2 cores (1.5-2 threads a core); beyond that a step waits for a core
     * in proportion, as a net hop does (simulated hosts: 8 ranks and their proxies, 8 a core). */
    const double over_ratio = over ? (double)threads / tp.host_cores : 1.0;
    const double a_shm = over
                             ? k->shm_alpha_oversub_us * (over_ratio > 2.0 ? over_ratio / 2.0 : 1.0)
                             : k->shm_alpha_us;
    const double host_buffers = (double)L * (gather ? (double)(n + 1) : 2.0) * nb;
    const int dram = host_buffers > k->shm_llc_nbytes;
    const double beta = dram ? k->shm_beta_dram : k->shm_beta;
    double b_shm = dram ? dmin(beta, k->shm_host_beta_dram / threads) : beta;
    if (over)
        b_shm = dmin(b_shm, beta * tp.host_cores / threads * k->oversub_eff);
    const double start = k->call_us + (C > 1 ? k->wake_us : 0.0);
    if (n == 1)
        return start + nb / C / b_shm; /* a local copy */
    if (algo == ALGO_ONESHOT || algo == ALGO_TWOSHOT) {
        if (!tp.direct || H > 1)
            return HUGE_VAL;
        /* Rounds of flags per window piece, and passes (copies or two-input reductions) over
         * the busiest rank's bytes: see direct.c's schedules. */
        const double piece = tp.direct_nbytes > 0 ? (double)tp.direct_nbytes : k->direct_nbytes;
        double per = gather ? nb * n : nb, rounds = 1.0, dpasses;
        const int slotted = direct_slot_size(nbytes, (size_t)piece, tp.direct_zc_min) != 0;
        switch (kind) {
        case COLL_ALLREDUCE:
            /* Two-shot measured on this VM (2 ranks; 4 ranks on 2 cores): 0.55-0.75x the ring's
             * time at 256 KiB-2 MiB, where the windows stay in cache, and 2-3.5x it from 16 MiB
             * (a flag round per piece, every piece through DRAM): priced as 0.7 of the
             * ring's passes in cache and 3.5x in DRAM. One-shot reads all n inputs. */
            rounds = algo == ALGO_TWOSHOT ? 2.0 : 1.0;
            dpasses = algo == ALGO_TWOSHOT ? k->direct_twoshot_eff * (2.0 * n - 1) / n * nb
                                           : (double)n * nb;
            /* The windows' copies count too, except with more ranks than cores, where the
             * ring's steps wait on the scheduler as well: 4 ranks on 2 cores (AMD VM, 32 MiB
             * L3; CHORUS_ALGO, three alternated rounds, out of place), 4 MiB two-shot 1028-1069
             * us against the ring's 1205-1349, 8 MiB 2721-2799 against 2723-3654. */
            if (host_buffers * (over ? 1 : 2) > k->shm_llc_nbytes)
                dpasses *= k->direct_dram_penalty;
            break;
        case COLL_BROADCAST:
            /* By cross-memory attach (direct.c broadcast_cma): the others copy the root's input
             * at once, one copy and a round, no window; in place the root writes about 1/n of
             * it into each output meanwhile. Intel VM, 2 ranks, broadcast_perf with CHORUS_ALGO,
             * in place: 512 KiB 9.7 us against the ring's 24.0, 2 MiB 48.7 against 141, 16 MiB
             * 705 against 1179, 64 MiB 5252 against 8318; out of place (no split) 2 MiB 186
             * against 233, 16 MiB 1444 against 1874, 32 MiB 3199 against 4813, 64 MiB 10942
             * against 9307. Before the split, in place, 1 MiB 52.2 against 54.4-55.1 and 2 MiB
             * 174 against 147. */
            if (tp.direct_cma_bcast_min != 0 && nbytes >= tp.direct_cma_bcast_min &&
                nb <= k->direct_cma_bcast_max) {
                per = 0.0;
                rounds = 1.0;
                dpasses = k->direct_cma_eff * nb;
                break;
            }
            /* Up to DIRECT_LL_NBYTES the root writes LL words and runs up to DIRECT_LL_SLOTS
             * pieces ahead (64 then: 2 ranks, 8-128 B, 0.13-0.16 us against the chain's
             * 0.47-0.56; 6c26334); so it does in slotted pieces (algo.h), its copy and the
             * readers' overlapping from call to call. Above, the root waits for every rank's
             * done flag of two pieces back where the chain's root only waits for a free FIFO
             * slot: 8 B-4 KiB then took 0.5-0.7 us against the chain's 0.2-0.3 us. */
            rounds = nb <= DIRECT_LL_NBYTES || slotted ? 0.5 : 2.0;
            dpasses = slotted ? nb : 2.0 * nb;
            /* With more ranks than cores its gated waits keep the cores busy where the ring's
             * steps wait (as all-gather's below): 4 ranks on 2 cores, broadcast_perf -w 5 -n 20
             * with CHORUS_ALGO, in place, two runs: 4 MiB 677-718 us against the ring's 895-1118,
             * 16 MiB 3017-3512 against 6049-6300, 64 MiB 17537 against 26867 (1 MiB: 184-201
             * against 120-128 in place, 239 against 303 out of place). */
            if (over && !slotted && nb > DIRECT_LL_NBYTES) {
                rounds = 0.5;
                dpasses *= k->oversub_eff;
            }
            break;
        case COLL_REDUCE:
            /* LL words and slotted pieces: the non-roots run ahead, as broadcast's root does,
             * and their copies overlap the root's n - 1 reductions. */
            rounds = nb <= DIRECT_LL_NBYTES || slotted ? 0.5 : 1.0;
            dpasses = (nb <= DIRECT_LL_NBYTES || slotted ? n - 1.0 : (double)n) * nb;
            break;
        case COLL_ALLGATHER:
            /* A rank's input goes through its window in buffer-sized pieces (per = nb, not
             * nb x n), then every rank copies the n blocks out: n + 1 copies, fitted at 0.6 of
             * them, and with more ranks than cores without the ring's loss (oversub_eff: one
             * thread a rank, a flag round a piece). Measured (all_gather_perf, CHORUS_ALGO):
             * 4 ranks on 2 cores, 1-64 MiB, 0.55-0.85x the ring's time; 2 ranks, 8 KiB-2 MiB,
             * 0.75-1.0x. The model had priced it 1.1-2.7x the ring's. */
            per = nb;
            dpasses = k->direct_gather_eff * (n + 1.0) * nb * (over ? k->oversub_eff : 1.0);
            break;
        default: /* reduce-scatter */
            dpasses = (2.0 * n - 1) * nb;
            break;
        }
        const double pieces = per <= piece ? 1.0 : (double)(long long)((per + piece - 1) / piece);
        const double round = over ? a_shm : k->direct_round_us;
        return k->call_us + pieces * rounds * round + dpasses / b_shm;
    }

    /* Net: the link's bandwidth is shared by the channels crossing it, each at most a socket. */
    /* A net hop is a chain of wake-ups (executor, proxy, wire, proxy, executor): with more
     * threads than cores each one waits for a core, in proportion to the excess. */
    const double a_net =
        k->net_alpha_us * (over ? (double)threads / tp.host_cores : 1.0) + tp.net_latency_us;
    const double link = (tp.net_gbps > 0 ? tp.net_gbps : k->net_default_gbps) * 1000.0 / 8.0;
    const double b_net = dmin(link / C, k->net_sock_beta);
    const double slice =
        dmin(tp.slice_nbytes > 0 ? (double)tp.slice_nbytes : k->slice_nbytes, nb / C);

    /* Per algorithm: the hops a message's critical path takes over the net and inside hosts
     * (their alphas add up), the primitive passes over the busiest rank's bytes (passes), the
     * bytes through the busiest host's link in one direction (wire), and for chains and trees,
     * whose slices flow hop by hop, a pipeline fill. A ring's step waits for its predecessor's
     * step, so after S steps a rank has waited on a path of S links, of which H in n cross
     * hosts (node-major ring): rings pay H/n of their steps at net latency. */
    double net_hops, shm_hops, passes, wire;
    int pipelined = 1;
    if (algo == ALGO_RING) {
        double steps;
        if (kind == COLL_ALLREDUCE) {
            steps = 2.0 * (n - 1);
            passes = (2.0 * n - 1) / n * nb;
            wire = 2.0 * (n - 1) / n * nb;
        } else if (gather) {
            steps = n - 1;
            passes = n * nb;
            wire = (n - 1) * nb;
        } else { /* chain broadcast / reduce along the ring */
            steps = n - 1;
            passes = nb;
            wire = nb;
        }
        if (kind == COLL_BROADCAST || kind == COLL_REDUCE) {
            net_hops = H - 1; /* a chain crosses each host boundary once */
        } else {
            net_hops = H > 1 ? steps * H / n : 0.0;
            pipelined = 0; /* a ring's chunks keep every link busy from the first step */
        }
        shm_hops = steps - net_hops;
    } else {
        const int D = host_tree_depth(H);
        if (kind == COLL_ALLREDUCE) {
            /* Up and down overlap slice by slice. A host's link carries x per tree edge per
             * direction; the busiest host has deg = min(H-1, 3) edges in one tree, and with two
             * trees (C >= 2) it is interior in only one: (deg + 1) / 2. */
            const int deg = H - 1 < 3 ? H - 1 : 3;
            net_hops = 2.0 * D;
            shm_hops = 2.0 * (L - 1);
            passes = 2.0 * nb;
            wire = (C >= 2 ? (deg + 1) / 2.0 : deg) * nb;
        } else {
            net_hops = D;
            shm_hops = L - 1;
            passes = nb;
            wire = (H >= 4 ? 2.0 : 1.0) * nb; /* an interior host feeds two child hosts */
        }
    }
    const double lat = net_hops * a_net + shm_hops * a_shm;
    double bw = passes / C / b_shm;
    if (H > 1)
        bw = dmax(bw, wire / C / b_net);
    /* Slices through a pipeline of stages: every stage's slice time once, less the bottleneck
     * stage's, which the bandwidth term already counts. */
    double fill = 0.0;
    if (pipelined && net_hops + shm_hops > 0) {
        const double t_net = slice / b_net, t_shm = slice / b_shm;
        const double t_max = net_hops > 0 && t_net > t_shm ? t_net : t_shm;
        fill = net_hops * t_net + shm_hops * t_shm - t_max;
    }
    return start + lat + bw + fill;
}

/* The best channel count for one algorithm: as many as the call's bytes warrant (one per
 * channel_nbytes, at most max_channels; one for rooted trees), fewer only where the model says
 * fewer is strictly faster. */
static int pick_channels(const tuner_t *t, coll_kind_t kind, algo_t algo, size_t nbytes,
                         double *us_p)
{
    double total = (double)nbytes;
    if (kind == COLL_ALLGATHER || kind == COLL_REDUCESCATTER)
        total *= t->topo.nranks;
    double want = total / tune_k.channel_nbytes; /* truncated below */
    int max = t->topo.max_channels < 1 ? 1 : t->topo.max_channels;
    int c0 = want < 1 ? 1 : want > max ? max : (int)want;
    if ((algo == ALGO_TREE && kind != COLL_ALLREDUCE) || algo == ALGO_ONESHOT ||
        algo == ALGO_TWOSHOT)
        c0 = 1; /* a rooted tree, and the direct programs, run on one thread */
    int best = c0;
    double best_us = tune_predict(t, kind, algo, nbytes, c0);
    for (int c = c0 - 1; c >= 1; c--) {
        double us = tune_predict(t, kind, algo, nbytes, c);
        if (us < best_us * (1.0 - 1e-9)) { /* rounding is no reason to drop one */
            best_us = us;
            best = c;
        }
    }
    *us_p = best_us;
    return best;
}

tune_choice_t tune_pick(const tuner_t *t, coll_kind_t kind, size_t nbytes)
{
    tune_choice_t best = {ALGO_RING, 1, 0.0};
    if ((unsigned)kind >= TUNE_NCOLLS)
        return best;
    unsigned allowed = t->algo_mask[kind] & tune_algos_serving(kind);
    if (allowed == 0)
        allowed = 1u << ALGO_RING; /* see tuning.h: ring serves every collective */
    best.predicted_us = HUGE_VAL;
    for (int a = 0; a < ALGO_COUNT; a++) { /* ring first: a tie keeps ring */
        if (!(allowed & (1u << a)))
            continue;
        double us;
        int c = pick_channels(t, kind, (algo_t)a, nbytes, &us);
        if (us < best.predicted_us) {
            best.algo = (algo_t)a;
            best.nchannels = c;
            best.predicted_us = us;
        }
    }
    return best;
}

chorusResult_t tune_init(const tune_topo_t *topo, const char *algo, const char *proto, tuner_t *t)
{
    if (topo->nranks < 1 || topo->nhosts < 1 || topo->nhosts > topo->nranks)
        return ERR(chorusInternalError, SUB_TUNING, "tuner: %d ranks on %d hosts", topo->nranks,
                   topo->nhosts);
    tuner_t tu;
    memset(&tu, 0, sizeof(tu));
    tu.topo = topo_norm(topo);
    CHECK(tune_parse_algo("CHORUS_ALGO", algo, tu.algo_mask));
    CHECK(tune_parse_proto("CHORUS_PROTO", proto, &tu.proto_mask));
    for (int c = 0; c < TUNE_NCOLLS; c++)
        if (!(tu.algo_mask[c] & tune_algos_serving((coll_kind_t)c)))
            INFO(SUB_TUNING, "CHORUS_ALGO=\"%s\" allows no algorithm that serves %s: using ring",
                 algo, coll_names[c]);
    *t = tu;
    return chorusSuccess;
}

void tune_log(const tuner_t *t)
{
    if (debug_level < LOG_INFO || !(debug_subsys & SUB_TUNING))
        return;
    static const size_t sizes[] = {8, 64 << 10, 1 << 20, 64 << 20};
    static const char *const labels[] = {"8 B", "64 KiB", "1 MiB", "64 MiB"};
    const tune_topo_t *tp = &t->topo;
    INFO(SUB_TUNING,
         "tuner: %d ranks, %d hosts, <= %d per host, %d cores per host (0: unknown), "
         "<= %d channels, net %.1f Gbit/s %.1f us (0: unknown); predicted us, * = not allowed",
         tp->nranks, tp->nhosts, tp->max_local, tp->host_cores, tp->max_channels, tp->net_gbps,
         tp->net_latency_us);
    for (int c = 0; c < TUNE_NCOLLS; c++) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            tune_choice_t ch = tune_pick(t, (coll_kind_t)c, sizes[s]);
            char line[256];
            int len = snprintf(line, sizeof(line), "%-13s %6s: %s x%d |", coll_names[c], labels[s],
                               algo_name(ch.algo), ch.nchannels);
            for (int a = 0; a < ALGO_COUNT && len < (int)sizeof(line); a++) {
                if (!(tune_algos_serving((coll_kind_t)c) & (1u << a)))
                    continue;
                double us;
                int nch = pick_channels(t, (coll_kind_t)c, (algo_t)a, sizes[s], &us);
                len +=
                    snprintf(line + len, sizeof(line) - len, " %s%s %.1f (x%d)",
                             algo_name((algo_t)a), t->algo_mask[c] & (1u << a) ? "" : "*", us, nch);
            }
            INFO(SUB_TUNING, "%s", line);
        }
    }
}
