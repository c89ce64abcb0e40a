/*
 * tuning_test.c: the CHORUS_ALGO / CHORUS_PROTO parsers and the tuning model (src/tuning.c).
 *
 * What it proves:
 *   - a table of values parses to exactly the expected per-collective masks (case, spaces, ^,
 *     per-collective lists, NCCL names Chorus lacks), and every malformed value is refused with
 *     chorusInvalidArgument and an error text that names the variable and the offending token;
 *   - the model answers as the physics says where the answer is known: time never falls as the
 *     size grows; on one host ring beats tree for a large all-reduce; across 4 hosts on a slow,
 *     high-latency link tree (log-depth) beats ring for 8 bytes and loses for 64 MiB; more
 *     threads than cores cost time, so tune_pick does not oversubscribe; ties go to ring;
 *   - tune_init honours CHORUS_ALGO=tree (tree for all-reduce, ring for all-gather, which tree
 *     does not serve, said once at INFO), refuses CHORUS_PROTO=LL, and tune_log prints one row
 *     per collective and size (the table is echoed below).
 * The model is a pure function: no communicator, no timing. CPU only; well under a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#undef CHECK /* harness.h's CHECK(cond, ...) is the one this test uses */
#include "harness.h"
#include "tuning.h"

#define R (1u << ALGO_RING)
#define T (1u << ALGO_TREE)
#define RT (R | T)
#define O (1u << ALGO_ONESHOT)
#define W (1u << ALGO_TWOSHOT)
#define D (O | W)
#define A (RT | D)
#define S (1u << PROTO_SIMPLE)
#define LL (1u << PROTO_LL)
#define LL128 (1u << PROTO_LL128)

static const char *const kind_names[TUNE_NCOLLS] = {"allreduce", "broadcast", "reduce", "allgather",
                                                    "reducescatter"};

typedef struct algo_ok {
    const char *spec;
    unsigned mask[TUNE_NCOLLS]; /* allreduce, broadcast, reduce, allgather, reducescatter */
} algo_ok_t;

static const algo_ok_t algo_ok[] = {
    {"", {A, A, A, A, A}},
    {"   ", {A, A, A, A, A}},
    {"ring", {R, R, R, R, R}},
    {"Ring,Tree", {RT, RT, RT, RT, RT}},
    {"TREE", {T, T, T, T, T}},
    {"^tree", {R | D, R | D, R | D, R | D, R | D}},
    {" ^ tree ", {R | D, R | D, R | D, R | D, R | D}},
    {"^ring", {T | D, T | D, T | D, T | D, T | D}},
    {"^nvls", {A, A, A, A, A}},
    {"^Ring, PAT", {T | D, T | D, T | D, T | D, T | D}},
    {"ring,nvls,collnetdirect", {R, R, R, R, R}},
    {"allreduce:tree;broadcast:ring", {T, R, A, A, A}},
    {"allreduce:^ring", {T | D, A, A, A, A}},
    {" AllReduce : tree ; ReduceScatter:ring ;", {T, A, A, A, R}},
    {"allgather:tree", {A, A, A, T, A}},
    {"reduce:^collnet,tree;allreduce:nvlstree,ring", {R, A, R | D, A, A}},
    {"broadcast:collnetchain,tree", {A, T, A, A, A}},
    {"OneShot", {O, O, O, O, O}},
    {"twoshot,oneshot", {D, D, D, D, D}},
    {"^oneshot,twoshot", {RT, RT, RT, RT, RT}},
    {"allreduce:twoshot;allgather:oneshot,ring", {W, A, A, R | O, A}},
};

/* A refused value and a word its error text must contain (besides the variable's name). */
typedef struct bad {
    const char *spec;
    const char *word;
} bad_t;

static const bad_t algo_bad[] = {
    {"rings", "rings"},
    {"ring,trees", "trees"},
    {"ring,", "empty"},
    {"^", "empty"},
    {"nvls", "nvls"},
    {"collnetdirect,pat", "collnetdirect"},
    {"allreduce:nvls", "nvls"},
    {"allreduce:tree;allgather:bogus", "bogus"},
    {"allredux:tree", "allredux"},
    {"allreduce:tree;allreduce:ring", "allreduce"},
    {"allreduce:tree;ring", "ring"},
    {"tree;broadcast:ring", "tree"},
    {"allreduce:", "empty"},
    {"^ring,tree,oneshot,twoshot", "excludes"},
    {"threeshot", "threeshot"},
    {"broadcast:^tree,ring,oneshot,twoshot", "broadcast"},
    {"ring tree", "ring tree"},
};

typedef struct proto_ok {
    const char *spec;
    unsigned mask;
} proto_ok_t;

static const proto_ok_t proto_ok[] = {
    {"", S | LL | LL128},
    {"simple", S},
    {" Simple , LL ", S | LL},
    {"^LL", S | LL128},
    {"^ll,LL128", S},
    {"SIMPLE,ll128", S | LL128},
    {"allreduce:simple;broadcast:^LL", S}, /* collapsed: what every collective allows */
    {"broadcast:^LL", S | LL128},
};

static const bad_t proto_bad[] = {
    {"LL", "Simple"},
    {"LL128", "Simple"},
    {"LL,LL128", "Simple"},
    {"^simple", "Simple"},
    {"allreduce:LL", "allreduce"},
    {"ll256", "ll256"},
    {"simple;", "simple;"},
    {"reduce:simple;gather:simple", "gather"},
};

static void check_parsers(void)
{
    long before = harness_failures;
    for (size_t i = 0; i < sizeof(algo_ok) / sizeof(algo_ok[0]); i++) {
        unsigned m[TUNE_NCOLLS] = {0};
        CHECK_OK(tune_parse_algo("TEST_ALGO_VAR", algo_ok[i].spec, m));
        for (int c = 0; c < TUNE_NCOLLS; c++)
            CHECK(m[c] == algo_ok[i].mask[c], "algo \"%s\": %s mask %#x, want %#x", algo_ok[i].spec,
                  kind_names[c], m[c], algo_ok[i].mask[c]);
    }
    unsigned m[TUNE_NCOLLS];
    CHECK_OK(tune_parse_algo("TEST_ALGO_VAR", NULL, m));
    for (int c = 0; c < TUNE_NCOLLS; c++)
        CHECK(m[c] == A, "algo NULL: %s mask %#x, want everything", kind_names[c], m[c]);
    for (size_t i = 0; i < sizeof(algo_bad) / sizeof(algo_bad[0]); i++) {
        unsigned keep[TUNE_NCOLLS] = {7, 7, 7, 7, 7};
        char what[128];
        snprintf(what, sizeof(what), "tune_parse_algo(\"%s\")", algo_bad[i].spec);
        chorusResult_t res = tune_parse_algo("TEST_ALGO_VAR", algo_bad[i].spec, keep);
        harness_expect_refused(what, res, chorusInvalidArgument, chorusGetLastError(NULL),
                               "TEST_ALGO_VAR", algo_bad[i].word);
        for (int c = 0; c < TUNE_NCOLLS; c++)
            CHECK(keep[c] == 7, "%s wrote its output although it failed", what);
    }
    harness_report(before, "CHORUS_ALGO parser: %zu valid values, %zu refused with their token",
                   sizeof(algo_ok) / sizeof(algo_ok[0]), sizeof(algo_bad) / sizeof(algo_bad[0]));

    before = harness_failures;
    for (size_t i = 0; i < sizeof(proto_ok) / sizeof(proto_ok[0]); i++) {
        unsigned pm = 0;
        CHECK_OK(tune_parse_proto("TEST_PROTO_VAR", proto_ok[i].spec, &pm));
        CHECK(pm == proto_ok[i].mask, "proto \"%s\": mask %#x, want %#x", proto_ok[i].spec, pm,
              proto_ok[i].mask);
    }
    unsigned pm_null = 0;
    CHECK_OK(tune_parse_proto("TEST_PROTO_VAR", NULL, &pm_null));
    CHECK(pm_null == (S | LL | LL128), "proto NULL: mask %#x, want everything", pm_null);
    for (size_t i = 0; i < sizeof(proto_bad) / sizeof(proto_bad[0]); i++) {
        unsigned pm = 99;
        char what[128];
        snprintf(what, sizeof(what), "tune_parse_proto(\"%s\")", proto_bad[i].spec);
        chorusResult_t res = tune_parse_proto("TEST_PROTO_VAR", proto_bad[i].spec, &pm);
        harness_expect_refused(what, res, chorusInvalidArgument, chorusGetLastError(NULL),
                               "TEST_PROTO_VAR", proto_bad[i].word);
        CHECK(pm == 99, "%s wrote its output although it failed", what);
    }
    harness_report(before,
                   "CHORUS_PROTO parser: %zu valid values, %zu refused (LL alone: only "
                   "Simple exists)",
                   sizeof(proto_ok) / sizeof(proto_ok[0]),
                   sizeof(proto_bad) / sizeof(proto_bad[0]));
}

static tuner_t make_tuner(tune_topo_t topo, const char *algo)
{
    tuner_t t;
    memset(&t, 0, sizeof(t));
    CHECK_OK(tune_init(&topo, algo, "", &t));
    return t;
}

static tune_topo_t topo_of(int nranks, int nhosts, int max_channels, int cores, double gbps,
                           double latency_us)
{
    return (tune_topo_t){.nranks = nranks,
                         .nhosts = nhosts,
                         .max_local = (nranks + nhosts - 1) / nhosts,
                         .max_channels = max_channels,
                         .net_gbps = gbps,
                         .net_latency_us = latency_us,
                         .host_cores = cores};
}

/* One host whose ranks can map each other's windows (the direct algorithms may run). */
static tune_topo_t direct_topo(int nranks, int cores)
{
    tune_topo_t t = topo_of(nranks, 1, 4, cores, 0, 0);
    t.direct = 1;
    return t;
}

static void check_monotonic(void)
{
    long before = harness_failures;
    const tune_topo_t topos[] = {topo_of(1, 1, 4, 2, 0, 0),
                                 topo_of(2, 1, 4, 2, 0, 0),
                                 topo_of(4, 1, 4, 2, 0, 0),
                                 topo_of(8, 1, 8, 0, 0, 0),
                                 topo_of(8, 4, 4, 16, 10, 0),
                                 topo_of(4, 4, 2, 0, 1, 50),
                                 topo_of(33, 5, 16, 8, 100, 2),
                                 direct_topo(2, 2),
                                 direct_topo(4, 2),
                                 direct_topo(8, 64)};
    long npoints = 0;
    for (size_t i = 0; i < sizeof(topos) / sizeof(topos[0]); i++) {
        tuner_t t = make_tuner(topos[i], "");
        for (int k = 0; k < TUNE_NCOLLS; k++)
            for (int a = 0; a < ALGO_COUNT; a++) {
                if (!(tune_algos_serving((coll_kind_t)k) & (1u << a)))
                    continue;
                int direct = a == ALGO_ONESHOT || a == ALGO_TWOSHOT;
                if (direct && !topos[i].direct && topos[i].nranks > 1) {
                    CHECK(tune_predict(&t, (coll_kind_t)k, (algo_t)a, 8, 1) > 1e300,
                          "topo %zu: %s without windows should be HUGE_VAL", i,
                          algo_name((algo_t)a));
                    continue;
                }
                for (int c = 1; c <= topos[i].max_channels; c++) {
                    double prev = tune_predict(&t, (coll_kind_t)k, (algo_t)a, 0, c);
                    CHECK(prev > 0 && prev < 1e12, "topo %zu %s %s x%d: %g us for 0 bytes", i,
                          kind_names[k], algo_name((algo_t)a), c, prev);
                    for (size_t nb = 1; nb <= ((size_t)1 << 31); nb = nb * 2 + (nb & 1) * 3) {
                        double us = tune_predict(&t, (coll_kind_t)k, (algo_t)a, nb, c);
                        CHECK(us >= prev, "topo %zu %s %s x%d: %zu bytes %g us < %g us before", i,
                              kind_names[k], algo_name((algo_t)a), c, nb, us, prev);
                        prev = us;
                        npoints++;
                    }
                }
            }
    }
    harness_report(before, "model: time never falls as the size grows (%ld points, 10 topologies)",
                   npoints);
}

static void check_model(void)
{
    long before = harness_failures;
    /* One host of 8 ranks: tree is a chain up and down, twice ring's traffic per rank. */
    tuner_t one = make_tuner(topo_of(8, 1, 4, 0, 0, 0), "");
    size_t big = (size_t)64 << 20;
    double ring = tune_predict(&one, COLL_ALLREDUCE, ALGO_RING, big, 4);
    double tree = tune_predict(&one, COLL_ALLREDUCE, ALGO_TREE, big, 4);
    CHECK(ring < tree, "1 host x 8, 64 MiB all-reduce: ring %.1f us should beat tree %.1f us", ring,
          tree);
    tune_choice_t c = tune_pick(&one, COLL_ALLREDUCE, big);
    CHECK(c.algo == ALGO_RING, "1 host, 64 MiB: picked %s, want ring", algo_name(c.algo));
    c = tune_pick(&one, COLL_ALLREDUCE, 8);
    CHECK(c.algo == ALGO_RING && c.nchannels == 1, "1 host, 8 B: picked %s x%d, want ring x1",
          algo_name(c.algo), c.nchannels);
    CHECK(tune_predict(&one, COLL_ALLREDUCE, ALGO_TREE, 8, 1) >
              tune_predict(&one, COLL_ALLREDUCE, ALGO_RING, 8, 1),
          "1 host: tree has ring's steps and more bytes");

    /* 4 hosts x 1 rank, 1 Gbit/s, 50 us: 2 x 2 tree hops against 6 ring steps for a small
     * all-reduce, but 2x the bytes on the busiest link against ring's 1.5x for a large one. */
    tuner_t slow = make_tuner(topo_of(4, 4, 2, 0, 1, 50), "");
    ring = tune_predict(&slow, COLL_ALLREDUCE, ALGO_RING, 8, 1);
    tree = tune_predict(&slow, COLL_ALLREDUCE, ALGO_TREE, 8, 1);
    CHECK(tree < ring, "4 hosts, 8 B all-reduce: tree %.1f us should beat ring %.1f us", tree,
          ring);
    c = tune_pick(&slow, COLL_ALLREDUCE, 8);
    CHECK(c.algo == ALGO_TREE, "4 hosts, 8 B all-reduce: picked %s", algo_name(c.algo));
    CHECK(c.predicted_us == tree, "pick's prediction %.1f is the tree's %.1f", c.predicted_us,
          tree);
    c = tune_pick(&slow, COLL_ALLREDUCE, big);
    CHECK(c.algo == ALGO_RING, "4 hosts, 64 MiB all-reduce: picked %s, want ring",
          algo_name(c.algo));
    c = tune_pick(&slow, COLL_BROADCAST, 8);
    CHECK(c.algo == ALGO_TREE && c.nchannels == 1, "4 hosts, 8 B broadcast: picked %s x%d",
          algo_name(c.algo), c.nchannels);
    c = tune_pick(&slow, COLL_ALLGATHER, 8);
    CHECK(c.algo == ALGO_RING, "all-gather is ring's alone, picked %s", algo_name(c.algo));

    /* The slower the link, the longer the call. */
    tuner_t fast = make_tuner(topo_of(4, 4, 2, 0, 100, 2), "");
    CHECK(tune_predict(&fast, COLL_ALLREDUCE, ALGO_RING, big, 2) <
              tune_predict(&slow, COLL_ALLREDUCE, ALGO_RING, big, 2),
          "100 Gbit/s should be faster than 1 Gbit/s");

    /* Ties go to ring: one rank, where every algorithm is a local copy. */
    tuner_t solo = make_tuner(topo_of(1, 1, 1, 0, 0, 0), "");
    CHECK(tune_predict(&solo, COLL_ALLREDUCE, ALGO_RING, 4096, 1) ==
              tune_predict(&solo, COLL_ALLREDUCE, ALGO_TREE, 4096, 1),
          "one rank: ring and tree should cost the same");
    c = tune_pick(&solo, COLL_ALLREDUCE, 4096);
    CHECK(c.algo == ALGO_RING, "a tie picked %s, want ring", algo_name(c.algo));

    /* Cores: 2 ranks on 2 cores gain nothing from more channels; 8 channels on 8+ cores do. */
    tuner_t two = make_tuner(topo_of(2, 1, 8, 2, 0, 0), "");
    CHECK(tune_predict(&two, COLL_ALLREDUCE, ALGO_RING, 8, 2) >
              tune_predict(&two, COLL_ALLREDUCE, ALGO_RING, 8, 1),
          "4 threads on 2 cores should be slower");
    c = tune_pick(&two, COLL_ALLREDUCE, big);
    CHECK(c.nchannels == 1, "2 ranks on 2 cores, 64 MiB: %d channels, want 1", c.nchannels);
    c = tune_pick(&two, COLL_ALLREDUCE, 1 << 20);
    CHECK(c.nchannels == 1, "2 ranks on 2 cores, 1 MiB: %d channels, want 1", c.nchannels);
    tuner_t wide = make_tuner(topo_of(2, 1, 8, 64, 0, 0), "");
    c = tune_pick(&wide, COLL_ALLREDUCE, 1 << 20);
    CHECK(c.nchannels == 4, "2 ranks on 64 cores, 1 MiB: %d channels, want 4 (one per 256 KiB)",
          c.nchannels);
    c = tune_pick(&wide, COLL_ALLREDUCE, 64 << 10);
    CHECK(c.nchannels == 1, "64 KiB: %d channels, want 1 (below one channel's 256 KiB)",
          c.nchannels);

    /* One host with windows: a direct algorithm for small calls, the ring for large ones; none
     * without windows. */
    for (int nr = 2; nr <= 8; nr *= 2) {
        tuner_t d = make_tuner(direct_topo(nr, 2), "");
        c = tune_pick(&d, COLL_ALLREDUCE, 8);
        CHECK(c.algo == ALGO_ONESHOT || c.algo == ALGO_TWOSHOT,
              "%d ranks on one host, 8 B all-reduce: picked %s, want a direct one", nr,
              algo_name(c.algo));
        c = tune_pick(&d, COLL_ALLREDUCE, big);
        CHECK(c.algo == ALGO_RING, "%d ranks on one host, 64 MiB all-reduce: picked %s, want ring",
              nr, algo_name(c.algo));
    }
    /* Slotted broadcasts and reduces run ahead (priced below the lag-2 pieces); with 4 MiB
     * buffers slots reach 2 MiB, but where zero-copy is on the window runs calls from
     * CHORUS_ZCOPY_MIN (here 512 KiB) unslotted (algo.h), and so must the model price them. */
    tune_topo_t big_win = direct_topo(2, 2);
    big_win.direct_nbytes = 4 << 20;
    tuner_t bw_off = make_tuner(big_win, "");
    big_win.direct_zc_min = 512 << 10;
    tuner_t bw_zc = make_tuner(big_win, "");
    for (int k = 0; k < 2; k++) {
        coll_kind_t kind = k == 0 ? COLL_BROADCAST : COLL_REDUCE;
        double below_off = tune_predict(&bw_off, kind, ALGO_ONESHOT, 256 << 10, 1);
        double below_zc = tune_predict(&bw_zc, kind, ALGO_ONESHOT, 256 << 10, 1);
        double at_off = tune_predict(&bw_off, kind, ALGO_ONESHOT, 1 << 20, 1);
        double at_zc = tune_predict(&bw_zc, kind, ALGO_ONESHOT, 1 << 20, 1);
        CHECK(below_off == below_zc, "%s, 256 KiB (slotted either way): %.2f us against %.2f",
              kind_names[kind], below_off, below_zc);
        CHECK(at_zc > at_off,
              "%s, 1 MiB with 4 MiB buffers: %.2f us with zero-copy on (not slotted) should "
              "exceed %.2f (slotted)",
              kind_names[kind], at_zc, at_off);
    }
    /* Broadcasts by cross-memory attach (once the windows have timed it): one copy, so the
     * one-shot up to 32 MiB where the window's two copies lose to the ring from 512 KiB; the ring
     * above. */
    tune_topo_t cma_topo = direct_topo(2, 2);
    tuner_t no_cma = make_tuner(cma_topo, "");
    cma_topo.direct_cma_bcast_min = 64 << 10;
    tuner_t with_cma = make_tuner(cma_topo, "");
    c = tune_pick(&no_cma, COLL_BROADCAST, 512 << 10);
    CHECK(c.algo == ALGO_RING,
          "2 ranks, 512 KiB broadcast through the windows: picked %s, want ring",
          algo_name(c.algo));
    for (size_t nb = 64 << 10; nb <= 32 << 20; nb *= 2) {
        c = tune_pick(&with_cma, COLL_BROADCAST, nb);
        CHECK(c.algo == ALGO_ONESHOT,
              "2 ranks, %zu KiB broadcast by cross-memory attach: picked %s, want oneshot",
              nb >> 10, algo_name(c.algo));
    }
    c = tune_pick(&with_cma, COLL_BROADCAST, 64 << 20);
    CHECK(c.algo == ALGO_RING, "2 ranks, 64 MiB broadcast, attach on: picked %s, want ring",
          algo_name(c.algo));
    CHECK(tune_predict(&with_cma, COLL_BROADCAST, ALGO_ONESHOT, 32 << 10, 1) ==
              tune_predict(&no_cma, COLL_BROADCAST, ALGO_ONESHOT, 32 << 10, 1),
          "32 KiB broadcast: below the attach's threshold the model must not change");
    CHECK(tune_predict(&one, COLL_ALLREDUCE, ALGO_ONESHOT, 8, 1) > 1e300,
          "no windows: oneshot is HUGE_VAL");
    tune_topo_t across = topo_of(4, 2, 2, 0, 10, 0);
    across.direct = 1; /* even if claimed: windows are one host's */
    tuner_t ac = make_tuner(across, "");
    CHECK(tune_predict(&ac, COLL_ALLREDUCE, ALGO_TWOSHOT, 8, 1) > 1e300,
          "two hosts: twoshot is HUGE_VAL");

    /* What serves what; names. */
    CHECK(tune_algos_serving(COLL_ALLREDUCE) == A &&
              tune_algos_serving(COLL_BROADCAST) == (RT | O) &&
              tune_algos_serving(COLL_REDUCE) == (RT | O) &&
              tune_algos_serving(COLL_ALLGATHER) == (R | O) &&
              tune_algos_serving(COLL_REDUCESCATTER) == (R | O),
          "tune_algos_serving table");
    CHECK(tune_predict(&one, COLL_ALLGATHER, ALGO_TREE, 8, 1) > 1e300,
          "tree does not serve all-gather: HUGE_VAL");
    CHECK(strcmp(algo_name(ALGO_RING), "ring") == 0 && strcmp(algo_name(ALGO_TREE), "tree") == 0 &&
              strcmp(algo_name(ALGO_ONESHOT), "oneshot") == 0 &&
              strcmp(algo_name(ALGO_TWOSHOT), "twoshot") == 0,
          "algo_name");
    harness_report(before, "model: ring on one host, tree across slow hosts for small calls, "
                           "cores bound the channels, ties to ring, direct inside one host for "
                           "small calls");
}

/* The log file's lines that contain needle. */
static int count_lines(const char *path, const char *needle, int echo)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, needle) == NULL)
            continue;
        n++;
        const char *msg = strstr(line, "TUNING ");
        if (echo && msg != NULL)
            printf("  %s", msg + 7);
    }
    fclose(f);
    return n;
}

static void check_init_and_log(const char *log_path)
{
    long before = harness_failures;
    tune_topo_t topo = topo_of(8, 1, 4, 0, 0, 0);
    tuner_t t;
    memset(&t, 0, sizeof(t));
    CHECK_OK(tune_init(&topo, "tree", "", &t));
    size_t big = (size_t)64 << 20;
    tune_choice_t c = tune_pick(&t, COLL_ALLREDUCE, big);
    CHECK(c.algo == ALGO_TREE, "CHORUS_ALGO=tree, all-reduce: picked %s", algo_name(c.algo));
    CHECK(c.predicted_us == tune_predict(&t, COLL_ALLREDUCE, ALGO_TREE, big, c.nchannels),
          "the pick's prediction is the tree's");
    c = tune_pick(&t, COLL_ALLGATHER, big);
    CHECK(c.algo == ALGO_RING, "CHORUS_ALGO=tree, all-gather: picked %s, want ring",
          algo_name(c.algo));
    CHECK(c.predicted_us == tune_predict(&t, COLL_ALLGATHER, ALGO_RING, big, c.nchannels),
          "CHORUS_ALGO=tree, all-gather: %g us is not ring's prediction", c.predicted_us);
    c = tune_pick(&t, COLL_REDUCESCATTER, 8);
    CHECK(c.algo == ALGO_RING, "CHORUS_ALGO=tree, reduce-scatter: picked %s, want ring",
          algo_name(c.algo));
    int said = count_lines(log_path, "allows no algorithm that serves", 0);
    CHECK(said == 2,
          "tune_init should say once for allgather and once for reducescatter that "
          "ring is used: %d lines",
          said);

    tuner_t keep = t;
    chorusResult_t res = tune_init(&topo, "", "LL", &t);
    harness_expect_refused("tune_init(CHORUS_PROTO=LL)", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "CHORUS_PROTO", "Simple");
    CHECK(memcmp(&keep, &t, sizeof(t)) == 0, "a failed tune_init wrote its output");
    res = tune_init(&topo, "allreduce:ringg", "", &t);
    harness_expect_refused("tune_init(CHORUS_ALGO=allreduce:ringg)", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "CHORUS_ALGO", "ringg");
    harness_report(before, "tune_init: CHORUS_ALGO=tree gives tree for all-reduce, ring for "
                           "all-gather (said at INFO); CHORUS_PROTO=LL refused");

    before = harness_failures;
    tune_topo_t multi = topo_of(16, 4, 8, 8, 10, 0);
    t = make_tuner(multi, "");
    printf("tune_log for 16 ranks on 4 hosts (8 cores each), 10 Gbit/s:\n");
    tune_log(&t);
    int head = count_lines(log_path, "tuner:", 0), rows = count_lines(log_path, "|", 0);
    CHECK(head == 1 && rows == 20, "tune_log: %d header(s) and %d rows, want 1 and 5 x 4", head,
          rows);
    for (int k = 0; k < TUNE_NCOLLS; k++) {
        char needle[32];
        snprintf(needle, sizeof(needle), "%s ", kind_names[k]);
        CHECK(count_lines(log_path, needle, 0) >= 4, "tune_log has no rows for %s", kind_names[k]);
    }
    count_lines(log_path, "|", 1);
    harness_report(before, "tune_log: one row per collective and size");
}

int main(void)
{
    /* Log to a file of our own so the INFO lines can be checked (set before the library reads
     * its variables, once per process). */
    char log_path[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(log_path, sizeof(log_path), "%s/chorus_tuning_test.%d.log",
             tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
    setenv("CHORUS_DEBUG", "INFO", 1);
    setenv("CHORUS_DEBUG_SUBSYS", "TUNING", 1);
    setenv("CHORUS_DEBUG_FILE", log_path, 1);
    CHECK_OK(debug_init());

    check_parsers();
    check_monotonic();
    check_model();
    check_init_and_log(log_path);
    unlink(log_path);
    return harness_finish("tuning: parsers, model sanity, tune_init and tune_log");
}
