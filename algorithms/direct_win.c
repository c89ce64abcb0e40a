/*
 * direct_win.c: the window protocol under the direct algorithms (direct_win.h; the algorithms and
 * the window layout are described in direct.c and algo.h).
 */
#define _GNU_SOURCE /* sched_getcpu */
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "direct_win.h"

/*
 * Done flags. A rank that only reads small pieces (broadcast non-root, reduce root) would publish
 * one per call into a line the writer, running ahead, keeps reading: the line crossed between
 * the cores every call (2 ranks, 8 B broadcast: 0.27 us a call; 0.13 with the batches below).
 * So such a rank notes the piece (done->pending) and publishes every DONE_BATCH pieces, and before
 * any wait that is not over at once: a peer that needs its done flag has run ahead of it, so this
 * rank reaches its next wait or batch without that peer (calls are matched on every rank), and a
 * batch smaller than the LL lag lets the writer go on meanwhile. Calls that can be zero-copy
 * (whose writer waits for the done flag before it returns) publish at once.
 */
_Static_assert(DONE_BATCH < DIRECT_LL_SLOTS, "a done batch is shorter than the LL lag");

HOT_PATH static void done_publish(const direct_view_t *v, uint64_t s)
{
    fifo_set_flag(&hdr(v, v->rank)->done, s);
    v->done->published = s;
    v->done->pending = 0;
}

HOT_PATH static void done_flush(const direct_view_t *v)
{
    if (v->done->pending != 0)
        done_publish(v, v->done->pending);
}

/* This rank has read everything it reads of piece s: publish it now, or (lazy) batched. */
HOT_PATH void direct_piece_done(const direct_view_t *v, uint64_t s, int lazy)
{
    if (!lazy || s - v->done->published >= DONE_BATCH)
        done_publish(v, s);
    else
        v->done->pending = s;
}

/*
 * The gate of direct waits (fifo_gate_t). 4 ranks on 2 cores, 8 B all-reduce: a call needs both
 * ranks of each core to run, and each hand-over costs about 5 us here; yielding whenever a wait's
 * spin was over also handed the core to a rank that could not move on either (it waited for the
 * other core too), which then handed it back. A parked rank says what it waits for, so a rank
 * about to yield can tell whether a rank last seen on its CPU can move on: one that is not parked
 * (runnable: it is not running, this one is), or one whose flag has come and that waits for an
 * earlier piece or flag than this one (one as far on would only wait beside it: 4 ranks on 2
 * cores, 8-64 B broadcast 0.21-0.34 us against 0.37-0.68, reduce 0.23-0.29 against 0.37-0.98,
 * all-reduce about even; perftests/probes/sched_model's RULE 1 is the same rule).
 */
static void gate_balance(direct_gate_t *g, int cur);

HOT_PATH static void gate_park(void *arg)
{
    direct_gate_t *g = arg;
    direct_sched_t *me = &hdr(g->v, g->v->rank)->sched;
    int cpu = fifo_cpu();
    if (__atomic_load_n(&me->cpu, __ATOMIC_RELAXED) != cpu)
        __atomic_store_n(&me->cpu, cpu, __ATOMIC_RELAXED);
    if (g->balance && ++g->parks % DIRECT_GATE_BALANCE_EVERY == 0)
        gate_balance(g, cpu);
    __atomic_store_n(&me->rank, g->rank, __ATOMIC_RELAXED);
    __atomic_store_n(&me->off, g->off, __ATOMIC_RELAXED);
    __atomic_store_n(&me->s, g->s, __ATOMIC_RELAXED);
    __atomic_store_n(&me->parked, 1, __ATOMIC_RELEASE);
}

HOT_PATH static void gate_unpark(void *arg)
{
    direct_gate_t *g = arg;
    __atomic_store_n(&hdr(g->v, g->v->rank)->sched.parked, 0, __ATOMIC_RELEASE);
}

/* How far on a wait for the flag at header offset off to reach s is: a rank publishes piece s's
 * input (ready flag or tagged lines), reduced and done flags in that order, and all of them
 * before any of piece s + 1's. */
static inline uint64_t wait_stage(uint64_t s, uint32_t off)
{
    return s * 4 + (off == OFF_REDUCED ? 1 : off == OFF_DONE ? 2 : 0);
}

HOT_PATH static int gate_yield_useful(void *arg)
{
    const direct_gate_t *g = arg;
    const direct_view_t *v = g->v;
    int cpu = fifo_cpu();
    direct_sched_t *me = &hdr(v, v->rank)->sched;
    if (__atomic_load_n(&me->cpu, __ATOMIC_RELAXED) != cpu)
        __atomic_store_n(&me->cpu, cpu, __ATOMIC_RELAXED);
    for (int q = 0; q < v->nranks; q++) {
        const direct_sched_t *o = &hdr(v, q)->sched;
        if (q == v->rank || __atomic_load_n(&o->cpu, __ATOMIC_RELAXED) != cpu)
            continue;
        if (!__atomic_load_n(&o->parked, __ATOMIC_ACQUIRE))
            return 1;
        int r = __atomic_load_n(&o->rank, __ATOMIC_RELAXED);
        uint32_t off = __atomic_load_n(&o->off, __ATOMIC_RELAXED);
        uint64_t s = __atomic_load_n(&o->s, __ATOMIC_RELAXED);
        if (r < 0 || r >= v->nranks || off % 8 != 0 || off > DIRECT_HDR_NBYTES - 8)
            return 1; /* torn while it re-parks: cannot tell */
        if (wait_stage(s, off) >= wait_stage(g->s, g->off))
            continue; /* as far on as this rank: moving on, it would wait beside it */
        const uint64_t *flag = (const uint64_t *)(const void *)((const char *)hdr(v, r) + off);
        if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= s)
            return 1;
    }
    return 0;
}

/*
 * Balance. Unbound ranks that outnumber the cores are placed by the kernel, which keeps them even
 * (2 and 2 on 2 cores) until it moves one to the other core (1 and 3; what sets that off was not
 * found), and it takes 60-170 ms to move one back. Here that happened about once a second
 * (perf: sched:sched_migrate_task), and a 4-rank 8 B-2 KiB all-reduce took 15-21 us a call
 * meanwhile against 6-8. mpirun's binding (--bind-to core:overload-allowed) keeps them even but
 * costs the large sizes (4 ranks, 4-64 MiB all-reduce: 1.1-2x the time), where the kernel's
 * placement helps. So a rank that parks on a CPU holding two ranks more than the
 * least crowded one (and is the highest-numbered there, so one rank moves at a time) moves
 * itself there (sched_setaffinity to that CPU alone) and at once puts its affinity back, which
 * leaves it where it is until the kernel moves it again. It looks every DIRECT_GATE_BALANCE_EVERY
 * parks (about 0.1 ms of 4-rank 8 B calls), as reading every rank's CPU costs a line from the
 * other core each.
 */
__attribute__((cold)) int direct_gate_balance_to(const int *cpu_of, int n, int me, const int *cpus,
                                                 int ncpus)
{
    int cur = cpu_of[me], held[DIRECT_GATE_MAX_RANKS] = {0}, mine = -1;
    if (ncpus < 2 || ncpus > DIRECT_GATE_MAX_RANKS)
        return -1;
    for (int k = 0; k < ncpus; k++)
        if (cpus[k] == cur)
            mine = k;
    if (mine < 0)
        return -1;
    for (int q = 0; q < n; q++) {
        if (q > me && cpu_of[q] == cur)
            return -1; /* a higher-numbered rank here moves first */
        for (int k = 0; k < ncpus; k++)
            if (cpus[k] == cpu_of[q])
                held[k]++;
    }
    int least = mine;
    for (int k = 0; k < ncpus; k++)
        if (held[k] < held[least])
            least = k;
    return held[mine] - held[least] >= 2 ? cpus[least] : -1;
}

/* The machine's runnable tasks now, this one included (/proc/loadavg's fourth field, the
 * count /proc/stat calls procs_running), or -1. */
static int tasks_running(void)
{
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (got <= 0)
        return -1;
    buf[got] = '\0';
    int running = -1;
    return sscanf(buf, "%*s %*s %*s %d/", &running) == 1 ? running : -1;
}

/* Cold: once every DIRECT_GATE_BALANCE_EVERY parks, out of the pages every call runs. */
static __attribute__((noinline, cold)) void gate_balance(direct_gate_t *g, int cur)
{
    const direct_view_t *v = g->v;
    int cpu_of[DIRECT_GATE_MAX_RANKS];
    for (int q = 0; q < v->nranks; q++)
        cpu_of[q] = q == v->rank ? cur : __atomic_load_n(&hdr(v, q)->sched.cpu, __ATOMIC_RELAXED);
    int to = direct_gate_balance_to(cpu_of, v->nranks, v->rank, g->cpus, g->ncpus);
    if (to < 0)
        return;
    int64_t now = fifo_now_ns();
    if (g->moves != 0 || g->skipped != 0) {
        int64_t since = now - g->moved_ns;
        if (since < g->gap_ns)
            return;
        /* Crowded again soon after its last look: the kernel moved it (or another) back, or
         * other tasks run (below). Each such look doubles the gap, up to 5 s; one four gaps
         * after the last resets it. */
        g->gap_ns = since < 4 * g->gap_ns ? (g->gap_ns * 2 < DIRECT_GATE_MOVE_GAP_MAX_NS
                                                 ? g->gap_ns * 2
                                                 : DIRECT_GATE_MOVE_GAP_MAX_NS)
                                          : DIRECT_GATE_MOVE_GAP_NS;
    }
    g->moved_ns = now;
    /* Other tasks want the CPUs too: the kernel weighs them, this rule does not; leave the
     * placement to it. */
    int running = tasks_running();
    if (running < 0 || running > v->nranks) {
        g->skipped++;
        return;
    }
    cpu_set_t was, one;
    CPU_ZERO(&one);
    CPU_SET(to, &one);
    /* Someone narrowed this thread's affinity since: theirs to keep; stop moving. */
    if (sched_getaffinity(0, sizeof(was), &was) != 0 || CPU_COUNT(&was) < 2 ||
        !CPU_ISSET(to, &was) || sched_setaffinity(0, sizeof(one), &one) != 0) {
        g->balance = 0;
        return;
    }
    if (sched_setaffinity(0, sizeof(was), &was) != 0)
        WARN(SUB_COLL, "rank %d: could not put its CPU affinity back after moving to cpu %d",
             v->rank, to);
    int now_cpu = sched_getcpu();
    __atomic_store_n(&hdr(v, v->rank)->sched.cpu, now_cpu, __ATOMIC_RELAXED);
    g->moves++;
    INFO(SUB_COLL, "local rank %d moved from cpu %d to cpu %d (a crowded CPU; move %u)", v->rank,
         cur, now_cpu, g->moves);
}

void direct_gate_init(direct_gate_t *g, const direct_view_t *v, int balance)
{
    *g = (direct_gate_t){.gate = {gate_park, gate_yield_useful, gate_unpark, g},
                         .v = v,
                         .gap_ns = DIRECT_GATE_MOVE_GAP_NS};
    __atomic_store_n(&hdr(v, v->rank)->sched.cpu, -1, __ATOMIC_RELAXED);
    cpu_set_t mask;
    if (!balance || v->nranks > DIRECT_GATE_MAX_RANKS ||
        sched_getaffinity(0, sizeof(mask), &mask) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && g->ncpus <= DIRECT_GATE_MAX_RANKS; c++)
        if (CPU_ISSET(c, &mask)) {
            if (g->ncpus < DIRECT_GATE_MAX_RANKS)
                g->cpus[g->ncpus] = c;
            g->ncpus++;
        }
    g->balance = g->ncpus >= 2 && g->ncpus <= DIRECT_GATE_MAX_RANKS;
}

/* Wait until rank r's flag (ready, reduced or done, at offset off in its header) reaches s. */
chorusResult_t direct_wait_flag(prims_t *p, const direct_view_t *v, int r, size_t off, uint64_t s,
                                const char *what)
{
    fifo_flag_t *f = (fifo_flag_t *)(void *)((char *)hdr(v, r) + off);
    p->wait.peer = r;
    if (__atomic_load_n(&f->value, __ATOMIC_ACQUIRE) < s) {
        done_flush(v);
        /* What the gate publishes if this wait parks (only a wait that saw the flag short can) */
        if (v->gate != NULL) {
            v->gate->rank = r;
            v->gate->off = (uint32_t)(off + offsetof(fifo_flag_t, value));
            v->gate->s = s;
            p->wait.gate = &v->gate->gate;
        }
    }
    CHECK(fifo_wait_flag(f, s, &p->wait, "shm", what));
    /* A rank publishes ready for piece s only after finishing piece s - 1 (done included): seeing
     * it spares reading r's done flag later. */
    if (off == OFF_READY(s) && v->done_seen[r] < s - 1)
        v->done_seen[r] = s - 1;
    return chorusSuccess;
}

/* Wait for every other rank's flag, starting after this rank (spreads who waits on whom). */
chorusResult_t direct_wait_all(prims_t *p, const direct_view_t *v, size_t off, uint64_t s,
                               const char *what)
{
    for (int k = 1, r = v->rank + 1; k < v->nranks; k++, r++)
        CHECK(direct_wait_flag(p, v, r < v->nranks ? r : r - v->nranks, off, s, what));
    return chorusSuccess;
}

/* Start piece s: wait until every rank has finished reading piece s - lag, whose buffer (lag 2:
 * s % 2) or LL slot (lag DIRECT_LL_SLOTS: s % DIRECT_LL_SLOTS) piece s reuses. A done flag read
 * once covers the pieces it is ahead by: most calls read none. */
HOT_PATH chorusResult_t direct_piece_begin(prims_t *p, const direct_view_t *v, uint64_t *s_p,
                                           uint64_t lag, size_t win)
{
    uint64_t s = ++*v->seq;
    *s_p = s;
    if (win != 0 && v->win_slot != NULL) {
        if (*v->win_slot != win && *v->win_slot != 0)
            lag = 1;
        *v->win_slot = win;
    }
    /* Peers from the next rank on, without a division (every call runs this). */
    for (int k = 1, r = v->rank + 1; s > lag && k < v->nranks; k++, r++) {
        if (r == v->nranks)
            r = 0;
        if (v->done_seen[r] >= s - lag)
            continue;
        CHECK(direct_wait_flag(p, v, r, OFF_DONE, s - lag, "direct window done flag"));
        v->done_seen[r] = __atomic_load_n(&hdr(v, r)->done.value, __ATOMIC_ACQUIRE);
    }
    return chorusSuccess;
}

/*
 * LL pieces (up to DIRECT_LL_NBYTES): the data goes as 8-byte words, 4 data bytes beside the low
 * 32 bits of the piece number, into the writer's LL slot s % DIRECT_LL_SLOTS (ll_slot: pieces of
 * up to 8 bytes four to a line). A reader loads
 * every word of the piece in one pass, so their lines cross between cores together, and has the
 * data when each word carries its piece number (no flag to see first, then the data); it passes
 * again until then. The writer sets its ready flag after the words, and a reader that spun too
 * long sleeps on it. DIRECT_LL_SLOTS slots let a rank that only writes (broadcast root, reduce
 * non-root) run that many pieces ahead.
 */

/* Write nbytes from src as LL words of piece s; then the ready flag. */
HOT_PATH void direct_ll_write(const direct_view_t *v, uint64_t s, const char *src, size_t nbytes)
{
    uint64_t *w = ll_slot(v, v->rank, s, nbytes);
    uint64_t tag = (uint64_t)(uint32_t)s << 32;
    size_t nw = LL_WORDS(nbytes), full = nbytes / 4;
    for (size_t i = 0; i < full; i++) {
        uint32_t d;
        memcpy(&d, src + 4 * i, 4);
        __atomic_store_n(&w[i], tag | d, __ATOMIC_RELAXED);
    }
    if (full < nw) { /* a part word: 1 to 3 bytes */
        uint32_t d = 0;
        memcpy(&d, src + 4 * full, nbytes - 4 * full);
        __atomic_store_n(&w[full], tag | d, __ATOMIC_RELAXED);
    }
    /* The whole slot is written when it was last 2^31 pieces ago or more: every word then
     * carries a number within 2^31 of s, so no stale one matches s in 32 bits. */
    int small = nbytes <= DIRECT_LL_SMALL_NBYTES;
    direct_hdr_t *h = hdr(v, v->rank);
    uint64_t *fresh =
        small ? &h->ll_small_fresh[s % DIRECT_LL_SLOTS] : &h->ll_fresh[s % DIRECT_LL_SLOTS];
    if (s - *fresh >= (uint64_t)1 << 31) {
        for (uint64_t *x = w + nw; x < w + (small ? DIRECT_LL_SMALL_WORDS : DIRECT_LL_WORDS); x++)
            __atomic_store_n(x, tag, __ATOMIC_RELAXED);
        *fresh = s;
    }
    fifo_set_flag(&h->ready[s & 1], s);
    /* The next piece's slot was last read by the peers: have it back before writing it (the
     * stores would otherwise stall this rank's next locked instruction; 8 B broadcast root). */
    fifo_prefetch_write(ll_slot(v, v->rank, s + 1, nbytes), nw * sizeof(uint64_t));
}

/* A pass over rank r's LL words (kind) of piece s found some not there yet: the first time
 * publish this rank's pending done flag, spin p->wait.spin passes, then sleep on r's ready flag
 * (set after them), after which one more pass must find them all. (Tagged lines wait on their
 * own numbers: lines_wait.) */
HOT_PATH static chorusResult_t not_yet(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                       int64_t *polls, int *flagged, const char *kind)
{
    if (*flagged)
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "rank %d published piece %llu but some of its %s carry another piece: do the "
                   "ranks call the same collective with the same count and root? "
                   "(CHORUS_CHECK_ARGS=1 compares them)",
                   r, (unsigned long long)s, kind);
    if ((*polls)++ == 0)
        done_flush(v);
    if (*polls < p->wait.spin) {
        fifo_cpu_relax();
        return chorusSuccess;
    }
    CHECK(direct_wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag (small piece)"));
    *flagged = 1;
    return chorusSuccess;
}

/* Read nbytes of rank r's LL words of piece s into dst: passes over the words until all carry s,
 * then sleeps on r's ready flag (set after them). */
HOT_PATH chorusResult_t direct_ll_read(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                       void *dst, size_t nbytes)
{
    const uint64_t *w = ll_slot(v, r, s, nbytes);
    uint32_t tag = (uint32_t)s;
    unsigned char *b = dst;
    size_t full = nbytes / 4, nw = LL_WORDS(nbytes);
    int64_t polls = 0;
    int flagged = 0;
    for (;;) {
        /* One pass over every word (their lines load together); again until all carry s. */
        uint32_t bad = 0;
        for (size_t i = 0; i < nw; i++) {
            uint64_t x = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
            bad |= (uint32_t)(x >> 32) ^ tag;
            uint32_t d = (uint32_t)x;
            if (i < full)
                memcpy(b + 4 * i, &d, 4);
            else
                memcpy(b + 4 * i, &d, nbytes - 4 * i);
        }
        if (bad == 0)
            return chorusSuccess;
        CHECK(not_yet(p, v, r, s, &polls, &flagged, "LL words"));
    }
}

/* out = LL input of rank 0 op rank 1 op ... (rank order); avg's division last. */
HOT_PATH chorusResult_t direct_ll_reduce_all(prims_t *p, const direct_view_t *v, uint64_t s,
                                             void *out, size_t count)
{
    _Alignas(64) unsigned char tmp[DIRECT_LL_NBYTES];
    CHECK(direct_ll_read(p, v, 0, s, out, count * p->esize));
    for (int r = 1; r < v->nranks; r++) {
        CHECK(direct_ll_read(p, v, r, s, tmp, count * p->esize));
        p->ops->reduce(out, out, tmp, count, p->dtype, p->op);
    }
    if (p->divisor)
        p->ops->divide(out, out, count, p->dtype, p->divisor);
    return chorusSuccess;
}

/*
 * Tagged lines (up to DIRECT_LINES_NBYTES): each 64-byte line of the writer's lines[s % 2] holds
 * 56 data bytes and the piece number, stored (release) after them; a reader that loads the
 * number (acquire) and sees s finds the line's data after it. A reader loads every line's number
 * in one pass, so the lines cross between cores together, and has the data when all carry s. The
 * lines region is only ever written this way, so no data word is taken for a number.
 * A reader that spun too long waits on the number of the last line it needs (the writer stores
 * them in line order): no ready flag is set. Waiting on a flag written after the lines cost the
 * reader two lines from the other core, one after the other, where this costs one (4 ranks on
 * 2 cores, 8 B all-reduce: every call of a rank that yields waits so). A sleeper counts itself in
 * the sleepers word of the writer's ready[s % 2], which the writer reads after its lines and
 * which nothing else writes meanwhile (it stays in both cores' caches).
 */
HOT_PATH void direct_lines_write(const direct_view_t *v, uint64_t s, const char *src, size_t nbytes)
{
    direct_line_t *l = hdr(v, v->rank)->lines[s & 1], *first = l;
    for (size_t off = 0; off < nbytes; off += DIRECT_LINE_DATA, l++) {
        memcpy(l->data, src + off,
               nbytes - off < DIRECT_LINE_DATA ? nbytes - off : DIRECT_LINE_DATA);
        __atomic_store_n(&l->tag, s, __ATOMIC_RELEASE);
    }
    fifo_fence_light();
    if (__atomic_load_n(&hdr(v, v->rank)->ready[s & 1].sleepers, __ATOMIC_RELAXED) != 0)
        for (direct_line_t *x = first; x < l; x++)
            fifo_wake(&x->tag);
}

_Static_assert(DIRECT_LINE_DATA % 8 == 0, "no element straddles two tagged lines");

/* Wait until rank r's tagged lines [l0, l1) of piece s all carry s: passes over them (spinning
 * p->wait.spin passes), then waits on the last one's number, after which one more pass must find
 * them all. */
HOT_PATH static chorusResult_t lines_wait(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                          size_t l0, size_t l1)
{
    direct_line_t *l = hdr(v, r)->lines[s & 1];
    int64_t polls = 0;
    for (int waited = 0;;) {
        int bad = 0;
        for (size_t i = l0; i < l1; i++)
            bad |= __atomic_load_n(&l[i].tag, __ATOMIC_ACQUIRE) != s;
        if (!bad)
            break;
        if (waited)
            return ERR(chorusInternalError, SUB_COLL,
                       "rank %d's tagged line %zu carries piece %llu but an earlier one does not",
                       r, l1 - 1, (unsigned long long)s);
        if (polls++ == 0)
            done_flush(v);
        if (polls < p->wait.spin) {
            fifo_cpu_relax();
            continue;
        }
        uint64_t *tag = &l[l1 - 1].tag;
        p->wait.peer = r;
        if (v->gate != NULL) {
            v->gate->rank = r;
            v->gate->off = (uint32_t)((char *)tag - (char *)hdr(v, r));
            v->gate->s = s;
            p->wait.gate = &v->gate->gate;
        }
        CHECK(fifo_wait_word(tag, &hdr(v, r)->ready[s & 1].sleepers, s, &p->wait, "shm",
                             "direct window tagged lines (small piece)"));
        waited = 1;
    }
    /* r writes piece s only after finishing piece s - 1 (done included). */
    if (v->done_seen[r] < s - 1)
        v->done_seen[r] = s - 1;
    return chorusSuccess;
}

/* Copy bytes [first, first + nbytes) of rank r's piece s from its tagged lines into dst once
 * the lines that hold them all carry s. */
HOT_PATH chorusResult_t direct_lines_read(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                          size_t first, void *dst, size_t nbytes)
{
    if (nbytes == 0)
        return chorusSuccess;
    const direct_line_t *l = hdr(v, r)->lines[s & 1];
    CHECK(lines_wait(p, v, r, s, first / DIRECT_LINE_DATA,
                     (first + nbytes - 1) / DIRECT_LINE_DATA + 1));
    char *d = dst;
    for (size_t pos = first, end = first + nbytes; pos < end;) {
        size_t i = pos / DIRECT_LINE_DATA, in_line = pos - i * DIRECT_LINE_DATA;
        size_t k = DIRECT_LINE_DATA - in_line < end - pos ? DIRECT_LINE_DATA - in_line : end - pos;
        memcpy(d, l[i].data + in_line, k);
        d += k;
        pos += k;
    }
    return chorusSuccess;
}

/* out = tagged-line input of rank 0 op rank 1 op ... (rank order), each from byte first of its
 * stream; avg's division last. This rank's own input is read back from its lines too (out may
 * be its input: in place). */
HOT_PATH chorusResult_t direct_lines_reduce_all(prims_t *p, const direct_view_t *v, uint64_t s,
                                                size_t first, void *out, size_t count)
{
    size_t nbytes = count * p->esize;
    if (nbytes == 0)
        return chorusSuccess;
    size_t l0 = first / DIRECT_LINE_DATA, l1 = (first + nbytes - 1) / DIRECT_LINE_DATA + 1;
    if (v->nranks == 2) {
        /* Each rank's lines copied out, then one reduce call: 2 ranks, 8 B, 0.26 us against
         * 0.29 reduced where they lie (medians of 16, alternated; not understood). */
        _Alignas(64) char tmp[DIRECT_LINES_NBYTES];
        CHECK(direct_lines_read(p, v, 0, s, first, out, nbytes));
        CHECK(direct_lines_read(p, v, 1, s, first, tmp, nbytes));
        p->ops->reduce(out, out, tmp, count, p->dtype, p->op);
        if (p->divisor)
            p->ops->divide(out, out, count, p->dtype, p->divisor);
        return chorusSuccess;
    }
    /* Every rank's lines asked for at once: those written on the other core cross together
     * rather than one rank's after another's. */
    for (int r = 0; r < v->nranks; r++)
        for (size_t i = l0; i < l1; i++)
            __builtin_prefetch(&hdr(v, r)->lines[s & 1][i]);
    for (int r = 0; r < v->nranks; r++)
        CHECK(lines_wait(p, v, r, s, l0, l1));
    /* Reduced where they lie, a line at a time (no element straddles two: the line's data
     * bytes are a multiple of every element size). 4 ranks, 8 B: the copies of three lines into
     * a buffer and a reduce call for each, about 400 instructions, went. */
    char *src[DIRECT_MAX_RANKS];
    for (size_t pos = first, end = first + nbytes; pos < end;) {
        size_t i = pos / DIRECT_LINE_DATA, in_line = pos - i * DIRECT_LINE_DATA;
        size_t k = DIRECT_LINE_DATA - in_line < end - pos ? DIRECT_LINE_DATA - in_line : end - pos;
        for (int r = 0; r < v->nranks; r++)
            src[r] = (char *)hdr(v, r)->lines[s & 1][i].data + in_line;
        direct_reduce_list(p, (char *)out + (pos - first), src, v->nranks, k / p->esize);
        pos += k;
    }
    return chorusSuccess;
}

/* Reduce-scatter as tagged lines: rank w's lines hold the others' parts only (part j at index
 * j - (j > w)), so each carries n - 1 parts; out = part me of rank 0 op ... op rank n-1 (rank
 * order), this rank's own from own (its input, which out may be: in place); avg last. */
HOT_PATH chorusResult_t direct_lines_reduce_part(prims_t *p, const direct_view_t *v, uint64_t s,
                                                 const void *own, void *out, size_t count)
{
    _Alignas(64) char tmp[DIRECT_LINES_NBYTES], mine[DIRECT_LINES_NBYTES];
    size_t nbytes = count * p->esize;
    int me = v->rank;
    if (me != 0 && own == out) { /* in place: rank 0's part lands in out first */
        memcpy(mine, own, nbytes);
        own = mine;
    }
    for (int r = 0; r < v->nranks; r++) {
        const void *src = own;
        if (r != me) {
            src = r == 0 ? out : tmp;
            CHECK(direct_lines_read(p, v, r, s, (size_t)(me - (me > r)) * nbytes, (void *)src,
                                    nbytes));
        }
        if (r == 0) {
            if (src != out)
                memcpy(out, src, nbytes);
        } else {
            p->ops->reduce(out, out, src, count, p->dtype, p->op);
        }
    }
    if (p->divisor)
        p->ops->divide(out, out, count, p->dtype, p->divisor);
    return chorusSuccess;
}

_Static_assert(sizeof(mem_ref_t) <= sizeof(((fifo_flag_t *)0)->payload),
               "a mem_ref_t rides in a ready flag's payload");

/* Zero-copy: 1 (and *ref) when this rank's input in[0, nbytes) can be read in place by its
 * peers: it lies in a chorusMemAlloc region and this rank writes none of it during the call (out,
 * out_nbytes: what it writes; NULL: nothing). */
HOT_PATH int direct_zc_expose(const direct_view_t *v, const void *in, size_t nbytes,
                              const void *out, size_t out_nbytes, mem_ref_t *ref)
{
    if (v->zc_find == NULL || nbytes == 0 || nbytes < v->zc_min_nbytes)
        return 0;
    const char *i = in, *o = out;
    if (o != NULL && i < o + out_nbytes && o < i + nbytes)
        return 0;
    return v->zc_find(in, nbytes, ref);
}

void direct_publish_ready(const direct_view_t *v, uint64_t s, const mem_ref_t *ref, size_t off)
{
    fifo_flag_t *f = &hdr(v, v->rank)->ready[s & 1];
    mem_ref_t r;
    memset(&r, 0, sizeof(r));
    if (ref != NULL) {
        r = *ref;
        r.offset += off;
        r.addr += off;
        r.span = r.span > off ? r.span - off : 0;
    }
    memcpy(f->payload, &r, sizeof(r));
    fifo_set_flag(f, s);
}

void direct_slot_ready(const direct_view_t *v, uint64_t s)
{
    fifo_set_flag(&hdr(v, v->rank)->ready[s & 1], s);
}

/* Publish this rank's input of piece s, len elements from element off of in: in place at ref
 * (zero-copy), or copied into its window buffer (ref NULL). */
void direct_publish_input(prims_t *p, const direct_view_t *v, uint64_t s, const mem_ref_t *ref,
                          const char *in, size_t off, size_t len)
{
    if (ref == NULL) /* streamed where the call's plan says so (direct_copy_in) */
        direct_window_copy(p, p->stream_send, buf(v, v->rank, s), in + off * p->esize,
                           len * p->esize);
    direct_publish_ready(v, s, ref, off * p->esize);
}

/* Rank r's memory named by the ref in f's payload, from skip bytes on, mapped here (*at NULL:
 * the ref names none). */
static chorusResult_t map_ref(const direct_view_t *v, int r, const fifo_flag_t *f, size_t skip,
                              size_t nbytes, char **at)
{
    mem_ref_t ref;
    memcpy(&ref, f->payload, sizeof(ref));
    *at = NULL;
    if (ref.id == 0)
        return chorusSuccess;
    if (ref.id == DIRECT_REF_CMA) /* its call moves data by cross-memory attach, this one not */
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "rank %d took cross-memory attach for this call, rank %d another path: do the "
                   "ranks call the same collective with the same count and datatype? "
                   "(CHORUS_CHECK_ARGS=1 compares them)",
                   r, v->rank);
    if (skip > ref.span || nbytes > ref.span - skip)
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "rank %d's call exposes %llu bytes of its chorusMemAlloc memory where rank "
                   "%d's would take %zu from byte %zu (nothing was copied): do the ranks call "
                   "the same collective with the same count and datatype? (CHORUS_CHECK_ARGS=1 "
                   "compares them)",
                   r, (unsigned long long)ref.span, v->rank, nbytes, skip);
    ref.offset += skip;
    ref.addr += skip;
    if (v->zc_map == NULL)
        return ERR(chorusInternalError, SUB_COLL,
                   "rank %d published its data in place, but this rank has zero-copy off", r);
    *at = v->zc_map(v->zc_arg, r, &ref, nbytes);
    return *at == NULL ? chorusSystemError : chorusSuccess;
}

chorusResult_t direct_ref_of(const direct_view_t *v, int r, const fifo_flag_t *f, size_t skip,
                             size_t nbytes, const char **src)
{
    char *at;
    CHECK(map_ref(v, r, f, skip, nbytes, &at));
    *src = at;
    if (at != NULL)
        (*v->zc_reads)++;
    return chorusSuccess;
}

chorusResult_t direct_out_of(const direct_view_t *v, int r, const fifo_flag_t *f, size_t skip,
                             size_t nbytes, char **dst)
{
    CHECK(map_ref(v, r, f, skip, nbytes, dst));
    if (*dst == NULL)
        return ERR(chorusInternalError, SUB_COLL,
                   "rank %d voted to take pushed data into its output but published none", r);
    return chorusSuccess;
}

void direct_publish_where(const direct_view_t *v, uint64_t s, const mem_ref_t *ref, const void *in,
                          size_t span)
{
    mem_ref_t where;
    if (ref != NULL) {
        where = *ref;
    } else {
        memset(&where, 0, sizeof(where));
        where.id = DIRECT_REF_CMA;
        where.addr = (uint64_t)(uintptr_t)in;
        where.span = span;
    }
    direct_publish_ready(v, s, &where, 0);
}

chorusResult_t direct_cma_span(const direct_view_t *v, int r, const mem_ref_t *ref, size_t span)
{
    if (ref->id != DIRECT_REF_CMA)
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "rank %d took another path than rank %d's cross-memory attach for this call: "
                   "do the ranks call the same collective with the same count and datatype? "
                   "(CHORUS_CHECK_ARGS=1 compares them)",
                   r, v->rank);
    if (ref->span != span)
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "rank %d's call covers %llu bytes where rank %d's covers %zu (nothing was "
                   "copied between them): do the ranks call the same collective with the same "
                   "count and datatype? (CHORUS_CHECK_ARGS=1 compares them)",
                   r, (unsigned long long)ref->span, v->rank, span);
    return chorusSuccess;
}

chorusResult_t direct_cma_where(prims_t *p, const direct_view_t *v, int r, uint64_t s, size_t span,
                                mem_ref_t *ref)
{
    CHECK(direct_ready_ref(p, v, r, s, ref));
    return direct_cma_span(v, r, ref, span);
}

chorusResult_t direct_ready_ref(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                mem_ref_t *ref)
{
    CHECK(direct_wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag"));
    memcpy(ref, hdr(v, r)->ready[s & 1].payload, sizeof(*ref));
    return chorusSuccess;
}

chorusResult_t direct_read_where(prims_t *p, const direct_view_t *v, int r, uint64_t s, void *dst,
                                 size_t nbytes, size_t span)
{
    mem_ref_t where;
    CHECK(direct_ready_ref(p, v, r, s, &where));
    const fifo_flag_t *f = &hdr(v, r)->ready[s & 1];
    if (where.id == DIRECT_REF_CMA) {
        CHECK(direct_cma_span(v, r, &where, span));
        CHECK(direct_cma_copy(v, r, s, dst, where.addr, nbytes, 0));
        (*v->cma_reads)++;
        return chorusSuccess;
    }
    const char *src;
    CHECK(direct_ref_of(v, r, f, 0, nbytes, &src));
    if (src == NULL)
        return ERR(chorusInvalidUsage, SUB_COLL,
                   "cross-memory attach: rank %d published neither an address nor a region: do "
                   "the ranks call the same collective with the same count? (CHORUS_CHECK_ARGS=1 "
                   "compares them)",
                   r);
    p->ops->copy(dst, src, nbytes);
    return chorusSuccess;
}

/* Rank r's input of piece s, nbytes, once its ready flag is seen: its window buffer, or its own
 * memory read in place (this rank's: mine, when it exposed it). */
chorusResult_t direct_input_of(const direct_view_t *v, int r, uint64_t s, const char *mine,
                               size_t nbytes, char **src)
{
    if (r == v->rank) {
        *src = mine != NULL ? (char *)mine : buf(v, r, s);
        return chorusSuccess;
    }
    const char *in_place;
    CHECK(direct_ref_of(v, r, &hdr(v, r)->ready[s & 1], 0, nbytes, &in_place));
    *src = in_place != NULL ? (char *)in_place : buf(v, r, s);
    return chorusSuccess;
}

/* direct_zc_vote's flag round: one piece whose ready flags carry the answers, of every rank, or
 * of rank `decides` alone (>= 0: the others only read its answer, and it waits for nobody, so
 * back-to-back broadcasts still overlap as the chain lets them). */
chorusResult_t direct_vote(prims_t *p, const direct_view_t *v, int decides, int mine, int *all_p)
{
    uint64_t s;
    CHECK(direct_piece_begin(p, v, &s, 2, 0));
    int32_t yes = mine != 0;
    if (decides < 0 || decides == v->rank) {
        fifo_flag_t *f = &hdr(v, v->rank)->ready[s & 1];
        memset(f->payload, 0, sizeof(f->payload));
        memcpy(f->payload, &yes, sizeof(yes));
        fifo_set_flag(f, s);
    }
    int all = yes;
    if (decides < 0) {
        CHECK(direct_wait_all(p, v, OFF_READY(s), s, "direct window ready flag (zero-copy vote)"));
        for (int r = 0; r < v->nranks; r++) {
            memcpy(&yes, hdr(v, r)->ready[s & 1].payload, sizeof(yes));
            all &= yes != 0;
        }
    } else if (decides != v->rank) {
        CHECK(direct_wait_flag(p, v, decides, OFF_READY(s), s,
                               "direct window ready flag (zero-copy vote)"));
        memcpy(&yes, hdr(v, decides)->ready[s & 1].payload, sizeof(yes));
        all = yes != 0;
    }
    direct_piece_done(v, s, 0);
    *all_p = all;
    return chorusSuccess;
}

/* Zero-copy, at the end of a call: peers read this rank's memory until their done flags reach
 * s, the call's last piece; the caller may change it once this returns. */
chorusResult_t direct_zc_release(prims_t *p, const direct_view_t *v, uint64_t s)
{
    for (int k = 1; k < v->nranks; k++) {
        int r = (v->rank + k) % v->nranks;
        if (v->done_seen[r] >= s)
            continue;
        CHECK(direct_wait_flag(p, v, r, OFF_DONE, s, "direct window done flag (reading in place)"));
        v->done_seen[r] = __atomic_load_n(&hdr(v, r)->done.value, __ATOMIC_ACQUIRE);
    }
    return chorusSuccess;
}

/* dst = src[0] op src[1] op ... in the given order; avg's division when final. reduce_n where it
 * saves calls: with two sources one reduce call is as fast (2 ranks, 8 B all-reduce: 0.29 us
 * against 0.30-0.33 through reduce_n, alternated). */
HOT_PATH void direct_reduce_list(prims_t *p, void *dst, char *const *src, int nsrc, size_t count)
{
    if (nsrc == 1) {
        p->ops->copy(dst, src[0], count * p->esize);
    } else if (nsrc > 2 && p->ops->reduce_n != NULL) {
        p->ops->reduce_n(dst, (const void *const *)src, nsrc, count, p->dtype, p->op);
    } else {
        p->ops->reduce(dst, src[0], src[1], count, p->dtype, p->op);
        for (int k = 2; k < nsrc; k++)
            p->ops->reduce(dst, dst, src[k], count, p->dtype, p->op);
    }
    if (p->divisor)
        p->ops->divide(dst, dst, count, p->dtype, p->divisor);
}

/* A peer's copy in flight is one process_vm_readv/writev or memcpy of at most a call's bytes; one
 * stopped mid-copy (SIGSTOP) is not waited for longer than this. */
#define DIRECT_CMA_CLOSE_NS (200LL * 1000 * 1000)

/* Counted in rank r's cma_users around the copy, and the count raised before r's cma_closed is
 * read (both sequentially consistent): either r's direct_cma_close sees this copy and waits for
 * it, or this copy sees r gone and does not start. So a rank leaving a call with an error (an
 * abort, a timeout) returns only once no peer touches its buffers, which the job may then free:
 * ranks that are threads of one process copy by address, and one freed mapping would be a
 * SIGSEGV (test_faults abort busy, two-shot all-reduces by the attach). */
chorusResult_t direct_cma_copy(const direct_view_t *v, int r, uint64_t s, void *mine, uint64_t addr,
                               size_t nbytes, int write)
{
    direct_hdr_t *h = hdr(v, r);
    chorusResult_t res;
    __atomic_add_fetch(&h->cma_users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->cma_closed, __ATOMIC_SEQ_CST) >= s)
        res = ERR(chorusRemoteError, SUB_COLL,
                  "rank %d left the call (an abort or an error there) before rank %d had copied "
                  "%s its memory",
                  r, v->rank, write ? "into" : "out of");
    else if (write)
        res = v->cma_write(v->zc_arg, r, addr, mine, nbytes);
    else
        res = v->cma_read(v->zc_arg, r, mine, addr, nbytes);
    __atomic_sub_fetch(&h->cma_users, 1, __ATOMIC_SEQ_CST);
    return res;
}

void direct_cma_close(const direct_view_t *v, uint64_t s)
{
    direct_hdr_t *h = hdr(v, v->rank);
    if (__atomic_load_n(&h->cma_closed, __ATOMIC_RELAXED) < s)
        __atomic_store_n(&h->cma_closed, s, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int64_t end = fifo_now_ns() + DIRECT_CMA_CLOSE_NS;
    while (__atomic_load_n(&h->cma_users, __ATOMIC_SEQ_CST) != 0 && fifo_now_ns() < end)
        fifo_yield();
}
