/*
 * algo.h: what moves when. Collectives as channel programs over the primitives (prims.h), and the
 * graph (rings) they run on. Nothing here knows a transport or the communicator: a program gets
 * its channel's prims (connections to the ring's next and previous rank), its ring, the call's
 * arguments and which share of the buffer is its channel's.
 */
#ifndef CHORUS_ALGO_H
#define CHORUS_ALGO_H

#include <stddef.h>

#include "chorus.h"
#include "prims.h"

typedef enum {
    COLL_ALLREDUCE,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLGATHER,
    COLL_REDUCESCATTER,
    COLL_ALLTOALL,
    COLL_SEND,
    COLL_RECV,
} coll_kind_t;

/* One call's arguments, as the user gave them (count in elements; root or peer). */
typedef struct coll_args {
    coll_kind_t kind;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    chorusDataType_t dtype;
    chorusRedOp_t op;
    int root; /* Broadcast/Reduce root; Send/Recv peer */
} coll_args_t;

/* A ring: ranks[i] is the user rank at position i; this rank sits at position index. */
typedef struct ring {
    int nranks;
    int index;
    int *ranks;
} ring_t;

/* A tree seen from one rank: its parent (-1 at the root) and children. */
#define TREE_MAX_DOWN 3
typedef struct tree {
    int up;
    int ndown;
    int down[TREE_MAX_DOWN];
} tree_t;

/* A tree's connections on one channel: up_recv[i] and down_send[i] join child down[i]. */
typedef struct tree_conns {
    conn_t *up_send; /* to the parent (reductions go up); NULL at the root */
    conn_t *down_recv; /* from the parent (results come down); NULL at the root */
    int ndown;
    conn_t *up_recv[TREE_MAX_DOWN];
    conn_t *down_send[TREE_MAX_DOWN];
} tree_conns_t;

/* What one channel program runs with. */
typedef struct channel_work {
    prims_t prims;
    const ring_t *ring;
    const tree_conns_t *tree; /* tree programs only */
    const coll_args_t *args;
    int channel;
    int nchannels;
} channel_work_t;

typedef chorusResult_t (*channel_program_t)(const channel_work_t *w);

chorusResult_t ring_allreduce_program(const channel_work_t *w);
chorusResult_t ring_reducescatter_program(const channel_work_t *w);
chorusResult_t ring_allgather_program(const channel_work_t *w);
chorusResult_t ring_reduce_program(const channel_work_t *w);
chorusResult_t chain_broadcast_program(const channel_work_t *w);
chorusResult_t tree_allreduce_program(const channel_work_t *w);
chorusResult_t tree_broadcast_program(const channel_work_t *w);
chorusResult_t tree_reduce_program(const channel_work_t *w);

/* Direct algorithms (direct.c) over node-local windows: rank r's window, mapped by every local
 * rank at base[r], is a header of sequence flags then two buffers of buf_nbytes. */
#define DIRECT_HDR_NBYTES 81920 /* a multiple of the page */
#define DIRECT_MAX_RANKS 256
/* Small pieces go as LL words (direct.c): 256 slots of 32 words, 4 data bytes each. Up to 128
 * bytes (all-reduce, all-gather and reduce-scatter: tagged lines instead, below) LL beat a flag
 * then the data (2 ranks, 64 B all-reduce: 0.57 us against 0.68-0.71); from 256 bytes the doubled
 * lines cost more than the serial read saves (1.0 us against 0.7). A rank that only writes
 * (broadcast root, reduce non-roots) runs up to 256 pieces ahead, so where ranks outnumber cores
 * a process switch (about 5 us here) is paid once per that many calls: 4 ranks on 2 cores, 8 B
 * broadcast, 0.28-0.29 us against 0.45-0.72 with 64 slots (0.30-0.35 with 128) and 2.0 with 8;
 * 8 B reduce 0.31-0.36 against 0.55-0.59 (then 0.20-0.31 and 0.23-0.25 with the gate's stage
 * rule, direct_win.c). 2 ranks: no change. */
#define DIRECT_LL_SLOTS 256
#define DIRECT_LL_WORDS 32
#define DIRECT_LL_NBYTES (DIRECT_LL_WORDS * 4)
/* Pieces of up to 8 bytes (2 words) go into a ring of their own, 2 words a slot, four slots a
 * line, where a slot of 32 words gives each piece a line of its own: a writer that runs ahead
 * (broadcast root, reduce non-roots) then hands a reader that has fallen behind four pieces in
 * one transfer between the cores. AMD VM of 2026-12-07, 2 ranks, 8 B broadcast, 40 alternated
 * rounds (--compare mpi): Open MPI's time over Chorus' 1.03 with this alone, 1.05 with the leaner
 * call path alone (src/enqueue.c exec_one), 1.14 with both, 1.00 with neither.
 * tests/test_runahead.c changes between the rings while writers run ahead. */
#define DIRECT_LL_SMALL_WORDS 2
#define DIRECT_LL_SMALL_NBYTES (DIRECT_LL_SMALL_WORDS * 4)
/*
 * Slotted pieces (direct.c): a broadcast or reduce call of one piece above DIRECT_LL_NBYTES, up
 * to a quarter of the two buffers, cuts the buffers into slots of DIRECT_SLOT_MIN_NBYTES or the
 * piece's size rounded up to a power of two, and piece s uses slot s % (their count, at most
 * DIRECT_LL_SLOTS). The ranks that only write (broadcast root, reduce non-roots) then run up to
 * that many pieces ahead of the slowest reader, as with LL words, where two buffers let them run
 * one: where ranks outnumber cores a process switch (about 5 us here) is paid once per that
 * many calls, not once a call. A slotted piece's ready flag carries no payload (nothing is read
 * in place).
 */
#define DIRECT_SLOT_MIN_NBYTES 4096
#define DIRECT_SLOT_MIN_COUNT 4
/* The slot size of such a call of nbytes with buffers of buf_nbytes, zero-copy on from zc_min
 * bytes (0: off); 0: not slotted. The tuner prices a call by the same rule the window runs it. */
static inline size_t direct_slot_size(size_t nbytes, size_t buf_nbytes, size_t zc_min)
{
    if (nbytes <= DIRECT_LL_NBYTES || nbytes > buf_nbytes || (zc_min != 0 && nbytes >= zc_min))
        return 0;
    size_t slot = DIRECT_SLOT_MIN_NBYTES;
    while (slot < nbytes)
        slot *= 2;
    return 2 * buf_nbytes / slot >= DIRECT_SLOT_MIN_COUNT ? slot : 0;
}
/* Tagged lines (direct_win.c): a piece of up to DIRECT_LINES_NBYTES as 64-byte lines, each the
 * piece number then 56 data bytes, so a reader has the data when it sees the numbers (one
 * transfer between cores, not a flag's then the data's) at 7/8 of the bytes LL words cost. */
#define DIRECT_LINE_DATA 56
#define DIRECT_LINES 8
#define DIRECT_LINES_NBYTES (DIRECT_LINES * DIRECT_LINE_DATA)
typedef struct direct_line {
    uint64_t tag; /* the piece number, stored (release) after the data */
    unsigned char data[DIRECT_LINE_DATA];
} direct_line_t;
/* What a rank waits on once its wait may yield (fifo_gate_t; direct_win.c): written by the
 * rank, read by the ranks that may share its CPU. Its CPU has a line of its own, written only
 * when it changes: every rank reads every rank's CPU before it yields, and a line written at
 * every park would cross between the cores each time (the wait's fields are read only by ranks
 * on the same CPU). */
typedef struct direct_sched {
    uint32_t parked; /* 1 from the end of a wait's spin to the wait's end */
    int32_t rank; /* it waits until this rank's flag, at byte off of that rank's header, */
    uint32_t off; /* reaches s */
    uint64_t s;
    /* where it ran when it parked or last came back from a yield; -1: not yet */
    _Alignas(64) int32_t cpu;
} direct_sched_t;
typedef struct direct_hdr {
    fifo_flag_t ready[2]; /* [s % 2]: the rank's input of piece s is in its buffer (or, up to 48
                           * bytes, in the flag's payload, or in LL words) */
    fifo_flag_t reduced; /* two-shot: its part of piece s is reduced, in its buffer */
    fifo_flag_t done; /* it has read everything it reads of piece s */
    /* [s % 2]: piece s as tagged lines (only ever written as such: no data word reads as a tag).
     * The flags, the lines and sched share the header's first page: a small all-reduce then
     * touches one page of each window (a process switch empties the TLB here). */
    _Alignas(64) direct_line_t lines[2][DIRECT_LINES];
    _Alignas(64) direct_sched_t sched;
    /* [s % DIRECT_LL_SLOTS]: a small piece s, each word (s mod 2^32) << 32 | 4 data bytes */
    _Alignas(64) uint64_t ll[DIRECT_LL_SLOTS][DIRECT_LL_WORDS];
    uint64_t ll_fresh[DIRECT_LL_SLOTS]; /* the owner's own: when it last wrote a whole slot */
    /* [s % DIRECT_LL_SLOTS]: a piece s of up to DIRECT_LL_SMALL_NBYTES, as ll's words */
    _Alignas(64) uint64_t ll_small[DIRECT_LL_SLOTS][DIRECT_LL_SMALL_WORDS];
    uint64_t ll_small_fresh[DIRECT_LL_SLOTS]; /* as ll_fresh, for ll_small */
    /* Rank 0's only: the all-gathers' plan (direct_adapt.c), (first call it holds for, mod
     * 2^32) << 32 | the size classes that read by cross-memory attach from then on. */
    _Alignas(64) uint64_t cma_plan;
    /* Cross-memory attach into and out of this rank's memory (direct.c's *_cma): the peers
     * copying now (each counts itself in around its copy, direct_cma_copy), and the last piece
     * this rank left with an error (direct_cma_close): no peer copies for it or earlier after. */
    _Alignas(64) uint32_t cma_users;
    uint64_t cma_closed;
} direct_hdr_t;
_Static_assert(offsetof(direct_hdr_t, sched) + sizeof(direct_sched_t) <= 4096,
               "flags, lines and sched in the window header's first page");
_Static_assert(sizeof(direct_hdr_t) <= DIRECT_HDR_NBYTES, "direct window header too large");

/* In a ready flag's payload, id DIRECT_REF_CMA names memory its peers read or write by
 * cross-memory attach at addr (direct_view_t's cma_read, cma_write), not a chorusMemAlloc region;
 * span is then the bytes there (and at a two-shot all-reduce's output, whose address ino holds)
 * that the publisher's call covers, which a peer checks against its own call's before it copies
 * (direct_cma_span). For a region, span is the bytes from addr to the end of the buffer the
 * publisher's call exposes, and a peer maps none past it (direct_win.c, map_ref). Ranks called
 * with different counts fail there, where a peer wrote past the smaller call's buffer in the
 * larger's process (process_vm_writev; or into its chorusMemAlloc memory, an all-gather's push). */
#define DIRECT_REF_CMA UINT64_MAX
/* Zero-copy: where a rank's input lies when its peers read it in place (chorusMemAlloc memory),
 * carried in the payload of its ready flag: the region's number in the owner's process (never 0),
 * the data's offset in the region and its address there, and the region's memfd there (a peer
 * maps /proc/<pid>/fd/<fd>) with its inode number (the peer checks it opened that memfd). */
typedef struct mem_ref {
    uint64_t id;
    uint64_t offset;
    uint64_t addr;
    uint64_t ino;
    int32_t fd;
    int32_t reserved;
    uint64_t span; /* DIRECT_REF_CMA only (above) */
} mem_ref_t;

/* The gate of a rank's direct waits (direct_win.c): the wait under way (rank, off, s as in
 * direct_sched_t), copied into the rank's header when it parks. Up to DIRECT_GATE_MAX_RANKS
 * local ranks (each decision reads every rank's sched line); more wait without one. */
#define DIRECT_GATE_MAX_RANKS 16
typedef struct direct_gate {
    fifo_gate_t gate;
    const struct direct_view *v;
    int rank;
    uint32_t off;
    uint64_t s;
    /* Balance (direct_win.c): where the host's ranks outnumber its cores, a rank that parks on
     * a CPU crowded with them moves itself to the least crowded of cpus[0, ncpus), the CPUs its
     * thread could run on when the gate was set up. */
    int balance;
    int ncpus;
    int cpus[DIRECT_GATE_MAX_RANKS];
    int64_t moved_ns; /* when it last moved or looked at the machine's load (gate_balance) */
    int64_t gap_ns; /* the least time from one such look to the next (backs off) */
    uint32_t moves;
    uint32_t skipped; /* moves not made: other tasks wanted the CPUs */
    uint32_t parks; /* parks so far: it looks at every DIRECT_GATE_BALANCE_EVERY-th */
} direct_gate_t;
#define DIRECT_GATE_MOVE_GAP_NS (20LL * 1000 * 1000)
#define DIRECT_GATE_MOVE_GAP_MAX_NS (5LL * 1000 * 1000 * 1000)
#define DIRECT_GATE_BALANCE_EVERY 16
/* Set up g for v (whose gate it becomes): this rank's CPU not said yet. balance: move off
 * crowded CPUs (set where the machine's ranks, all of them in v, outnumber its cores); kept only
 * where this thread may run on 2 to DIRECT_GATE_MAX_RANKS CPUs. */
void direct_gate_init(direct_gate_t *g, const struct direct_view *v, int balance);
/* The CPU rank me (of n, on CPU cpu_of[me]) should move to, or -1: cpu_of[q] is where rank q was
 * last seen (-1: not yet), cpus[0, ncpus) the CPUs it may run on. It moves when it is the
 * highest-numbered rank seen on its CPU and the least crowded of cpus holds at least two ranks
 * fewer (ranks seen elsewhere do not count), so that after the move neither CPU holds more than
 * the other did. */
int direct_gate_balance_to(const int *cpu_of, int n, int me, const int *cpus, int ncpus);

/*
 * All-gathers choosing between the window and cross-memory attach at run time (direct_adapt.c),
 * per size class: a power of two of bytes a rank, from DIRECT_ADAPT_MIN_NBYTES (the last class
 * holds every larger size). Rank 0 times its calls and publishes the plan in its header; every
 * rank counts the calls it applies to, which are the same on every rank (they depend on the size
 * only), and takes a plan from the call it names.
 */
#define DIRECT_ADAPT_CLASSES 16
#define DIRECT_ADAPT_MIN_NBYTES (16 * 1024)
#define DIRECT_ADAPT_RECENT 3
typedef struct direct_adapt_class {
    /* [in place]: the current path's last DIRECT_ADAPT_RECENT call times (ns), a ring */
    int64_t recent[2][DIRECT_ADAPT_RECENT];
    uint32_t nrecent[2];
    int64_t ref[2]; /* [in place]: the least of recent when the trial's first call came;
                     * INT64_MAX: none */
    int64_t trial_best[2]; /* [in place]: the trial's least time on the other path */
    int64_t next_ns; /* no trial before then */
    int64_t busy_ns; /* the class's calls' time so far, up to the first trial's ADAPT_WARM_NS */
    int64_t period_ns; /* from one trial to the next: doubles after each the trial lost */
    uint32_t since; /* calls on the current path since the last trial */
    uint32_t trial_calls;
} direct_adapt_class_t;
typedef struct direct_adapt {
    uint32_t calls; /* all-gathers the plan applies to so far (mod 2^32) */
    uint32_t mask; /* the classes that read by cross-memory attach now, as this rank took it */
    uint64_t seen; /* the last plan word read */
    uint64_t switches; /* plans this rank has taken up (tests look) */
    int test; /* CHORUS_CMA_ADAPT=2: rank 0 turns every class the other way at every chance,
               * untimed */
    /* rank 0 only: */
    uint32_t planned; /* the mask it last published (or started with) */
    uint32_t plan_from; /* the call that plan holds from */
    int trial; /* the class under trial, or -1 */
    uint32_t trial_from; /* the call the trial's plan holds from */
    int trial_path; /* the path the trial times: 1 cross-memory attach */
    direct_adapt_class_t cls[DIRECT_ADAPT_CLASSES];
} direct_adapt_t;
/* The classes below this one (4 MiB a rank) start on cross-memory attach (all of them where the
 * setup found it pays, else those from DIRECT_ADAPT_TIMED_CLASSES); the larger ones start on the
 * window in any case. On the AMD VM of 2026-12-07, 2 ranks,
 * CHORUS_CMA_MIN=16K (the attach) against 0 (the window), four alternated rounds of
 * all_gather_perf -b 4M -e 32M -f 2 -w 3 -n 20, medians: 2 MiB a rank 304 us against 356, 4 MiB
 * 1208 against 1100, 8 MiB 3562 against 2927, 16 MiB 8010 against 5735 (Open MPI's attach ran
 * faster than these from 8 MiB). A benchmark's 20-odd calls of such a size do not reach a
 * class's first trial (ADAPT_WARM_NS), so its start decides there. */
#define DIRECT_ADAPT_CMA_CLASSES 8
/* Where the setup found the window faster than the attach (window.c: CMA_PAYS_WIN_PCT), the
 * classes from this one (64 KiB a rank, the size of the piece the setup times) to
 * DIRECT_ADAPT_CMA_CLASSES start on the attach all the same; the run-time choice may move them.
 * The setup times one piece's copies; a call through the window also waits for the peers'
 * copies, and moves larger data three times where the attach moves it twice. On the AMD VM of
 * 2026-12-07, 2 ranks, the setup timed the window's piece at 5.0-7.8 us against 7.6-13.7 by the
 * attach (20 setups), yet calls ran faster by the attach: 256 KiB all-gathers 15.9 us (15.6-16.8)
 * against 21.4 (18.7-22.1) through the window, 1 MiB 63.4 against 76.7, 4 MiB 260 against 298
 * (four alternated rounds; Open MPI over Chorus 1.05-1.08 against 0.83-0.84); 64 KiB (32 KiB a
 * rank) 6.1 against 5.3 and 32 KiB 4.1 against 3.2, where the setup's timing keeps its say. */
#define DIRECT_ADAPT_TIMED_CLASSES 2
/* The classes below DIRECT_ADAPT_CMA_CLASSES start reading by cross-memory attach (start 2), or
 * those from DIRECT_ADAPT_TIMED_CLASSES only (1); test: CHORUS_CMA_ADAPT=2. */
void direct_adapt_init(direct_adapt_t *ad, int start, int test);

/* What a rank last published in its done flag, and the last piece it has read but not yet
 * published (0: none); kept out of the shared line, which peers poll. */
typedef struct direct_done {
    uint64_t published;
    uint64_t pending;
} direct_done_t;

typedef struct direct_view {
    int nranks, rank;
    char *const *base; /* [nranks] */
    size_t buf_nbytes;
    uint64_t *seq; /* pieces run so far on the communicator (advanced by the program) */
    uint64_t *done_seen; /* [nranks]: each rank's done flag as this rank last read it */
    direct_done_t *done; /* this rank's own done flag, as direct.c last set it */
    /* Zero-copy, NULL where off: zc_find says whether [p, p + nbytes) lies in one chorusMemAlloc
     * region (and where); zc_map returns the address of rank r's data named by ref, nbytes of it
     * readable and writable (all-gathers push into outputs), or NULL with the error set. */
    int (*zc_find)(const void *p, size_t nbytes, mem_ref_t *ref);
    char *(*zc_map)(void *arg, int r, const mem_ref_t *ref, size_t nbytes);
    void *zc_arg;
    /* Calls of this many bytes and more (CHORUS_ZCOPY_MIN) read chorusMemAlloc inputs in place
     * and are never slotted (whatever their buffers). An all-reduce reads them in place only
     * after its ranks vote for two-shot in place (direct_zc_vote): read in place in the tuner's
     * one-shot or two-shot they cost more than the copy (2 ranks, 512 KiB-2 MiB: 1.3-1.5x the
     * time, three alternated rounds of all_reduce_perf -b 512K -e 8M -f 2 -w 10 -n 60 -R 1 with
     * CHORUS_ZCOPY 1 and 0; 4 ranks on 2 cores, where 4d78269 read them in place, two rounds of
     * all_reduce_perf -b 1M -e 16M -f 4 -R 0|1 there: 1 and 4 MiB 0.89-0.99x the copy's speed
     * with the inputs written once, 0.31-0.82x with them written again before each call by
     * memcpy, --rewrite 2). */
    size_t zc_min_nbytes;
    /* A broadcast's root exposes its input from this size (CHORUS_ZCOPY_BROADCAST_MIN, and not
     * below zc_min_nbytes); 0: never. With the root's input written before each call by
     * memcpy, the others' reads in place cost 2-3x the copy's time at 1-4 MiB and 1.0-1.4x at
     * 16 MiB, and gained 1.3-1.6x at 64 MiB, where memcpy streams; written by plain stores
     * they ran even with the copy at 16 and 64 MiB (perftests/README.md, "chorusMemAlloc
     * buffers", and "Why: the write that takes the lines back"). */
    size_t zc_bcast_min_nbytes;
    uint64_t *zc_reads; /* pieces of peers' inputs this rank has read in place (tests look) */
    /* All-gathers whose output is this many bytes and more (CHORUS_ZCOPY_ALLGATHER_MIN) ask
     * whether every rank's output is chorusMemAlloc memory; if so each rank writes its input
     * into every output (direct.c allgather_push). 0: never. */
    size_t zc_push_min_nbytes;
    uint64_t *zc_pushes; /* all-gather inputs this rank has written into peers' outputs */
    direct_gate_t *gate; /* NULL: waits yield whenever their spin is over */
    size_t stream_win_nbytes; /* all-gather pieces from this size go into the window with
                               * streaming stores; 0: never */
    size_t *win_slot; /* how the last piece that used the buffers cut them: its slot's size
                       * (slotted pieces, above; the buffer size where not slotted);
                       * 0: none yet */
    /* Cross-memory attach, NULL where off: copy nbytes of rank r's memory at addr (an address in
     * its process) into dst; an error (set) when it cannot. All-gathers of cma_min_nbytes a rank
     * and more use it (direct.c). */
    chorusResult_t (*cma_read)(void *arg, int r, void *dst, uint64_t addr, size_t nbytes);
    size_t cma_min_nbytes;
    size_t cma_bcast_min_nbytes; /* broadcasts from this size; 0: never */
    uint64_t *cma_reads; /* peers' inputs this rank has read so (tests look) */
    /* All-gathers of DIRECT_ADAPT_MIN_NBYTES a rank and more choose between the window and
     * cross-memory attach at run time (direct_adapt.c); NULL: cma_min_nbytes decides. */
    direct_adapt_t *cma_adapt;
    /* Two-shot all-reduces of this many bytes and more, out of place, the count a multiple of
     * the ranks (CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN), ask whether every rank's output is
     * chorusMemAlloc memory; if so they run by push (direct.c allreduce_push). 0: never. */
    size_t zc_arpush_min_nbytes;
    uint64_t *zc_arpushed; /* all-reduces run so (tests look) */
    /* Cross-memory attach the other way, NULL where off or where some rank cannot write some
     * peer's memory (alike on every rank): nbytes from src into rank r's memory at addr.
     * All-gathers write each rank's input, in-place broadcasts' roots a part of the data, and
     * two-shot all-reduces each rank's reduced part into the others' outputs (direct.c
     * allgather_cma, broadcast_cma, allreduce_cma). */
    chorusResult_t (*cma_write)(void *arg, int r, uint64_t addr, const void *src, size_t nbytes);
    uint64_t *cma_writes; /* outputs this rank wrote into so, CMA_W_KINDS counts (tests look) */
    size_t cma_ar_min_nbytes; /* two-shot all-reduces from this size run by cross-memory attach
                               * (direct.c allreduce_cma); 0: never */
    size_t stream_slot_nbytes; /* slotted broadcasts and reduces copy into their slots with
                                * streaming stores from this size (direct_copy_in); 0: never */
} direct_view_t;

/* direct_view_t.cma_writes[]: which collective wrote into peers' outputs. */
enum { CMA_W_ALLGATHER, CMA_W_BROADCAST, CMA_W_ALLREDUCE, CMA_W_KINDS };

/* The direct program for a.kind: all-reduce one-shot or two-shot (twoshot), broadcast, reduce,
 * all-gather, reduce-scatter. Runs on the caller's thread; waits use p's wait context. */
chorusResult_t direct_program(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                              int twoshot);
/* A large all-reduce, broadcast or reduce-scatter (CHORUS_ZCOPY_{ALLREDUCE,BROADCAST,
 * REDUCESCATTER}_MIN) the tuner gives the ring asks, in one flag round every rank joins, whether
 * the memory the direct program would read in place can be (chorusMemAlloc; all-reduce: every
 * rank's input and output, apart; broadcast: the root's input; reduce-scatter: every rank's
 * input, its output apart); *won_p is the same on every rank. If so, all-reduce runs
 * direct_allreduce_zc: two-shot with each rank's part reduced from the inputs in place straight
 * into its output, and copied from there by the others (no window buffer in between: two passes
 * over the data where the ring makes four); broadcast and reduce-scatter run direct_program,
 * whose ranks read the root's input (broadcast) or their part of every input (reduce-scatter)
 * in place. */
chorusResult_t direct_zc_vote(prims_t *p, const direct_view_t *v, const coll_args_t *a, int *won_p);
chorusResult_t direct_allreduce_zc(prims_t *p, const direct_view_t *v, const coll_args_t *a);

/* a mod n for any sign of a: a ring position. */
static inline int ring_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* How many hops after root's position this rank sits along the ring (root: 0). */
static inline int ring_distance(const ring_t *ring, int root)
{
    int root_idx = 0;
    for (int i = 0; i < ring->nranks; i++)
        if (ring->ranks[i] == root)
            root_idx = i;
    return ring_mod(ring->index - root_idx, ring->nranks);
}

/* Elements per ring step: half the FIFO, so a ring's first step always fits (no deadlock). */
size_t ring_chunk_elems(const prims_t *p);

/* The channel program for a collective kind and algorithm (0 ring, 1 tree); NULL when that
 * algorithm does not serve the kind (and for point-to-point kinds). */
channel_program_t algo_program(coll_kind_t kind, int tree);

/* Even split of total into nparts; part i is [*off_p, *off_p + *len_p). */
static inline void algo_part(size_t total, int nparts, int i, size_t *off_p, size_t *len_p)
{
    size_t base = total / (size_t)nparts, extra = total % (size_t)nparts;
    size_t ui = (size_t)i;
    *off_p = ui * base + (ui < extra ? ui : extra);
    *len_p = base + (ui < extra ? 1 : 0);
}

/* Ring order for every channel: node-major (ranks grouped by host in order of first appearance),
 * so a ring crosses each host boundary once. host_of[r] is a host index per rank. */
chorusResult_t graph_build_ring(int nranks, int rank, const int *host_of, ring_t *ring_p);
void graph_free_ring(ring_t *ring);
/* This rank's place in a tree (see tree.c): which 0 or 1 picks one tree of the double binary tree;
 * root >= 0 builds the tree rooted at that rank instead (which still applies). */
chorusResult_t graph_build_tree(int nranks, int rank, const int *host_of, int which, int root,
                                tree_t *tree_p);

/* Point-to-point: one rank's sends and receives of a group, progressed together. */
typedef struct p2p_op {
    conn_t *conn; /* NULL for a self send/recv */
    int peer;
    char *buf; /* const for sends */
    size_t nbytes; /* > 0 */
    size_t done;
    int prev; /* the list's previous op with the same peer; -1: none (the caller's) */
    int next, chain; /* p2p_run's: the next op with the same peer, and the next peer's op */
} p2p_op_t;

/* Progress every op to completion without deadlock: sends and receives to each peer advance in
 * issue order (an op waits for its prev), all peers at once; self sends are matched to self
 * receives in order. */
chorusResult_t p2p_run(p2p_op_t *sends, int nsends, p2p_op_t *recvs, int nrecvs,
                       const memops_ops_t *ops, const wait_ctx_t *w);

#endif /* CHORUS_ALGO_H */
