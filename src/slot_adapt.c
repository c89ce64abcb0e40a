/*
 * slot_adapt.c: plain or streaming stores into the pipelined algorithms' send slots, chosen per
 * collective, size class, and in place or not, while a job runs (CHORUS_SLOT_ADAPT; enqueue.c
 * run_channels).
 *
 * A slot's lines were read by the peer a few slices before the writer comes back to them. With
 * plain stores the writer first takes each line back from the peer's cache; streaming stores do
 * not, and the peer then reads the slice from memory. Which costs less changes while a job runs
 * on the AMD VM of 2026-12-07 (2 ranks, runs seconds apart): plain stores ran at a third to a
 * fifth of their speed in some runs (reduce-scatter 256 KiB 62-80 us against 10-17, all-reduce
 * 16 MiB 6.7-8.3 ms against 2.2-3.8) and were the faster way in the others (reduce-scatter 256
 * KiB 11-17 us against 18-25 streamed; ring all-reduce 1 MiB 85-92 against 123-150); streaming
 * stores never collapsed. The way a rank writes its slots is its own affair (a reader reads a
 * slot the same either way), so each rank chooses alone, from its own call times, with no flag
 * round.
 *
 * Calls from CHORUS_NT_MIN_BYTES stream without a choice (enqueue.c): trials of plain stores cost
 * too much there (2 ranks, 256 MiB all-reduce, -w 3 -n 10: 43-87 ms with them, 30-58 streamed
 * throughout, six alternated runs). Below it each class starts plain (the way with no run-time
 * choice). After SLOT_WARM calls of its way, and then every period calls (doubling, up to
 * SLOT_PERIOD_MAX, after each trial the other way lost), its next SLOT_ADAPT_TRIAL calls run the
 * other way, kept where their median time is at most SLOT_KEEP_PCT percent of the median of the
 * current way's last SLOT_ADAPT_RECENT calls. Medians, not least times: the two ways' times
 * spread unlike each other (with least times, three streamed calls at 64 KiB beat the plain ones
 * while their mean ran 1.6x as long), and a median of eight keeps out the few first calls of a
 * size, which touch its buffers' pages the first time. The schedule counts calls, the same on every
 * rank, so the ranks' trials fall on the same calls and each times both ranks' change together;
 * ranks whose times disagree may choose differently.
 *
 * Six alternated pairs of runs against CHORUS_SLOT_ADAPT=0 (reduce_scatter_perf -b 64K -e 16M -f
 * 4 -w 5 -n 40; all_reduce_perf -b 8M -e 32M -f 2 -w 5 -n 20; broadcast_perf -b 16M -e 32M -f 2
 * -w 5 -n 20): with 0, two runs of six ran their all-reduces at 2-3x (32 MiB 15.9-16.9 ms against
 * 5.7-6.4); chosen at run time none did, and the runs that did not collapse paid for the trials
 * (all-reduce 32 MiB 6.3-8.0 ms, reduce-scatter and broadcast even).
 */
#include "slot_adapt.h"

#include <string.h>

#include "comm.h"
#include "debug.h"

#define SLOT_WARM 8
#define SLOT_KEEP_PCT 90
#define SLOT_PERIOD 16
#define SLOT_PERIOD_MAX 1024

void slot_adapt_init(slot_adapt_t *sa, int test, int stream_pct)
{
    memset(sa, 0, sizeof(*sa));
    sa->test = test;
    sa->stream_pct = stream_pct;
    for (int c = 0; c < SLOT_ADAPT_KEYS; c++)
        for (int k = 0; k < SLOT_ADAPT_CLASSES; k++) {
            slot_class_t *cl = &sa->cls[c][k];
            cl->period = SLOT_PERIOD;
            cl->next = SLOT_WARM;
        }
}

int slot_adapt_class(size_t nbytes)
{
    if (nbytes < SLOT_ADAPT_MIN_NBYTES)
        return -1;
    int k = 0;
    for (size_t b = nbytes / SLOT_ADAPT_MIN_NBYTES; b > 1 && k < SLOT_ADAPT_CLASSES - 1; b /= 2)
        k++;
    return k;
}

int slot_adapt_begin(slot_adapt_t *sa, int key, int k)
{
    const slot_class_t *cl = &sa->cls[key][k];
    return cl->trial_left != 0 ? !cl->stream : cl->stream;
}

_Static_assert(SLOT_ADAPT_TRIAL <= SLOT_ADAPT_RECENT, "median() sorts at most SLOT_ADAPT_RECENT");

/* The median of n (at most SLOT_ADAPT_RECENT) times; the lower of the middle two where n is
 * even. */
static int64_t median(const int64_t *v, int n)
{
    int64_t a[SLOT_ADAPT_RECENT];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && a[j - 1] > v[i]; j--)
            a[j] = a[j - 1];
        a[j] = v[i];
    }
    return a[(n - 1) / 2];
}

int slot_adapt_end(slot_adapt_t *sa, int key, int k, int stream, int64_t ns)
{
    slot_class_t *cl = &sa->cls[key][k];
    sa->calls[stream != 0]++;
    cl->calls++;
    if (sa->test) {
        cl->stream = !cl->stream;
        sa->switches++;
        return 0;
    }
    if ((stream != 0) != cl->stream) { /* a trial call */
        cl->trial[SLOT_ADAPT_TRIAL - cl->trial_left] = ns;
        if (--cl->trial_left != 0)
            return 0;
        cl->trial_median = median(cl->trial, SLOT_ADAPT_TRIAL);
        /* Streaming's times count x 100 / stream_pct: the trial's (from plain), or the current
         * way's (a trial of plain). */
        int keep = cl->stream
                       ? cl->trial_median * sa->stream_pct <= cl->ref * SLOT_KEEP_PCT
                       : cl->trial_median * 100 * 100 <= cl->ref * SLOT_KEEP_PCT * sa->stream_pct;
        if (keep) {
            cl->stream = !cl->stream;
            cl->period = SLOT_PERIOD;
            sa->switches++;
        } else {
            cl->period = cl->period * 2 > SLOT_PERIOD_MAX ? SLOT_PERIOD_MAX : cl->period * 2;
        }
        cl->nrecent = cl->head = 0;
        cl->next = cl->calls + cl->period;
        return keep;
    }
    cl->recent[cl->head] = ns;
    cl->head = (uint8_t)((cl->head + 1) % SLOT_ADAPT_RECENT);
    cl->nrecent += cl->nrecent < SLOT_ADAPT_RECENT;
    if ((int32_t)(cl->calls - cl->next) < 0 || cl->nrecent < SLOT_WARM)
        return 0;
    cl->ref = median(cl->recent, cl->nrecent);
    cl->trial_left = SLOT_ADAPT_TRIAL;
    return 0;
}

/* The way plan gives call a (on: the plan is in use), its clock started. */
void adapt_begin(chorusComm_t comm, int64_t on, slot_adapt_t *plan, const coll_args_t *a,
                 adapt_call_t *c)
{
    /* The class of the call's larger buffer (what nccl-tests call its size). */
    size_t call_nbytes =
        a->count * dtype_nbytes(a->dtype) *
        (a->kind == COLL_ALLGATHER || a->kind == COLL_REDUCESCATTER ? comm->nranks : 1);
    c->plan = plan;
    c->k = on && (unsigned)a->kind < TUNE_NCOLLS && comm->nranks > 1 &&
                   (comm->nt_min <= 0 || coll_out_nbytes(comm, a) < (uint64_t)comm->nt_min)
               ? slot_adapt_class(call_nbytes)
               : -1;
    c->key = c->k >= 0 ? SLOT_ADAPT_KEY((int)a->kind, coll_in_place(comm, a)) : 0;
    c->stream = c->k >= 0 ? slot_adapt_begin(plan, c->key, c->k) : 0;
    c->t0 = c->k >= 0 ? fifo_now_ns() : 0;
}

/* Call a, begun with adapt_begin, ended well: ns (the call's time where -1) counts in the plan.
 * what: the copies the plan chooses for (a log line where their way changes). */
void adapt_end(chorusComm_t comm, const coll_args_t *a, const adapt_call_t *c, int64_t ns,
               const char *what)
{
    if (c->k < 0)
        return;
    if (ns < 0)
        ns = fifo_now_ns() - c->t0;
    if (c->stream && comm->params.adapt_timed_pct > 0) /* tests: made up */
        ns = ns * comm->params.adapt_timed_pct / 100;
    if (slot_adapt_end(c->plan, c->key, c->k, c->stream, ns))
        INFO(SUB_TUNING,
             "%s of %zu KiB%s, %s: %s written with %s stores now (%.1f us the median of a few "
             "calls, against %.1f)",
             coll_name(a->kind), (size_t)(SLOT_ADAPT_MIN_NBYTES / 1024) << c->k,
             c->k == SLOT_ADAPT_CLASSES - 1 ? " and more" : " to twice that",
             coll_in_place(comm, a) ? "in place" : "out of place", what,
             c->stream ? "streaming" : "plain", c->plan->cls[c->key][c->k].trial_median / 1e3,
             c->plan->cls[c->key][c->k].ref / 1e3);
}
