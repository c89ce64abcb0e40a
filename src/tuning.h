/*
 * tuning.h: which algorithm, and how many channels, for each call (DESIGN section 6).
 *
 * An alpha-beta model per collective x algorithm predicts a call's time from its size, the rank
 * and host counts and the transports on the way (shm inside a host, net between hosts); the
 * constants are calibrated on the development machine (see tuning.c for how they were measured).
 * The tuner picks the allowed algorithm with the lowest prediction. CHORUS_ALGO and CHORUS_PROTO
 * restrict the choice with NCCL's syntax:
 *   "ring"  "ring,tree"  "^tree"  "allreduce:tree;broadcast:ring"  "allreduce:^ring"
 * (case-insensitive; a per-collective list names collectives by NCCL's names: allreduce,
 * broadcast, reduce, allgather, reducescatter; collectives not listed keep every algorithm).
 * Chorus has one protocol, Simple: CHORUS_PROTO that allows only LL/LL128 is an error that says so.
 * NCCL algorithm names Chorus lacks (collnet, collnetdirect, collnetchain, nvls, nvlstree, pat) are
 * accepted in an exclusion and refused when they are all a collective asks for.
 *
 * A collective left without an allowed algorithm that serves it (CHORUS_ALGO=tree and allgather,
 * which only ring serves) is not an error: tune_pick uses ring for it, and tune_init says so once
 * at INFO.
 */
#ifndef CHORUS_TUNING_H
#define CHORUS_TUNING_H

#include <stddef.h>

#include "algo.h"
#include "chorus.h"

typedef enum {
    ALGO_RING = 0,
    ALGO_TREE = 1,
    ALGO_ONESHOT = 2,
    ALGO_TWOSHOT = 3,
    ALGO_COUNT
} algo_t;
typedef enum { PROTO_SIMPLE = 0, PROTO_LL = 1, PROTO_LL128 = 2, PROTO_COUNT } proto_t;

#define TUNE_NCOLLS                                                                                \
    5 /* allreduce, broadcast, reduce, allgather, reducescatter (coll_kind_t order) */

/* What the model knows about the communicator. */
typedef struct tune_topo {
    int nranks;
    int nhosts;
    int max_local; /* most ranks on one host */
    int max_channels; /* channels the communicator has */
    double
        net_gbps; /* slowest inter-host link in Gbit/s as the net plugin reports it; 0: unknown */
    double net_latency_us; /* its one-way latency; 0: unknown */
    int host_cores; /* cores the ranks of one host share (0: unknown, taken as enough) */
    int machine_ranks; /* most ranks on one physical machine, whatever CHORUS_HOSTID says: they
                        * share its cores (simulated hosts on one box); 0: max_local */
    size_t slice_nbytes; /* pipelining slice, CHORUS_BUFFSIZE / CHORUS_STEPS (0: 512 KiB) */
    int direct; /* node-local windows are possible (one host, all ranks over shm): the direct
                 * algorithms (one-shot, two-shot) may run */
    size_t direct_nbytes; /* a window buffer, CHORUS_DIRECT_BUFFSIZE (0: 512 KiB) */
    size_t direct_zc_min; /* zero-copy may be on (CHORUS_ZCOPY) from this many bytes
                           * (CHORUS_ZCOPY_MIN; 0: off): broadcasts and reduces that big are
                           * then not slotted (algo.h) */
    size_t direct_cma_bcast_min; /* one-shot broadcasts from this size read the root's input by
                                  * cross-memory attach (window.c sets it once the windows are
                                  * made and the attach timed; 0: never) */
} tune_topo_t;

typedef struct tuner {
    tune_topo_t topo;
    unsigned algo_mask[TUNE_NCOLLS]; /* bit (1 << algo_t) set: allowed */
    unsigned proto_mask; /* bit (1 << proto_t) set: allowed */
} tuner_t;

typedef struct tune_choice {
    algo_t algo;
    int nchannels;
    double predicted_us; /* the model's time for the whole call */
} tune_choice_t;

/* Parse CHORUS_ALGO / CHORUS_PROTO values ("" allows everything). The variable's name is used in
 * the error text, which also lists what is allowed. */
chorusResult_t tune_parse_algo(const char *var, const char *spec, unsigned mask[TUNE_NCOLLS]);
chorusResult_t tune_parse_proto(const char *var, const char *spec, unsigned *mask_p);

/* Build a tuner; algo/proto are the CHORUS_ALGO / CHORUS_PROTO values. */
chorusResult_t tune_init(const tune_topo_t *topo, const char *algo, const char *proto, tuner_t *t);
/* Which algorithms serve a collective at all (ring for all five; tree for allreduce, broadcast,
 * reduce; one-shot for all five, where the windows are possible; two-shot for allreduce). */
unsigned tune_algos_serving(coll_kind_t kind);
/* The model's time in microseconds for kind, algorithm and channel count; nbytes is the call's
 * count times the element size (per rank, as NCCL counts it: allgather's send count,
 * reducescatter's receive count). HUGE_VAL when algo does not serve kind. */
double tune_predict(const tuner_t *t, coll_kind_t kind, algo_t algo, size_t nbytes, int nchannels);
/* The choice for one call: the allowed algorithm with the lowest prediction, and its channels. */
tune_choice_t tune_pick(const tuner_t *t, coll_kind_t kind, size_t nbytes);
/* Log the tuner's table at INFO (subsystem TUNING). */
void tune_log(const tuner_t *t);

const char *algo_name(algo_t algo);

#endif /* CHORUS_TUNING_H */
