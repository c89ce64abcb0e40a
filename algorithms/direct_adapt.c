/*
 * direct_adapt.c: all-gathers that choose between the window and cross-memory attach at run
 * time, per size class (algo.h, direct_adapt_t).
 *
 * Which is faster changes while a job runs on the VMs measured: where a core's plain stores over
 * lines another core has just read cost 5-7x a private write, the window wins (2 ranks, 4 MiB:
 * 135-145 us against 201-206 by cross-memory attach); where they cost about the same, reading
 * the peer's input where it lies wins, as Open MPI's single copy did against the window (0.68-0.98
 * of Chorus' time at 256 KiB-16 MiB). The state changed within minutes, so a timing at setup
 * (window.c, cma_pays) cannot say it for a job's life.
 *
 * Rank 0 decides, from its own call times: a synchronous all-gather returns on rank 0 once every
 * rank's part has arrived, so its time is the call's. Once a size class's calls have taken
 * ADAPT_WARM_NS, and then every ADAPT_PERIOD_NS or more (doubling, up to ADAPT_PERIOD_MAX_NS,
 * after each trial the other path lost), the class runs ADAPT_TRIAL_CALLS calls the other way;
 * the other path is kept where its least time was at most ADAPT_KEEP_PCT percent of the least of
 * the current path's last DIRECT_ADAPT_RECENT calls before them (neighbours in time: a path's times
 * here ran at 27 us for some forty calls, then at 38-50 for the next forty, with nothing else
 * running), compared for calls in place and out of place apart (rank 0's own; the two cost
 * differently: in place, cross-memory attach has no local copy to make).
 *
 * The plan travels in rank 0's header (cma_plan): the call it holds from and the classes that
 * read by cross-memory attach. Every rank counts the calls it applies to (the same calls on every
 * rank: the class depends on the size alone) and, at each, reads the word and takes the plan up
 * once the count reaches the call it names. Rank 0 publishes after its call c ends, for call
 * c + 2, and only once every rank has taken up the plan before:
 *   - no rank starts call c + 2 before rank 0's part of call c + 1 has arrived (an all-gather does
 *     not end without every rank's part), which rank 0 gives after publishing: every rank reads
 *     the new word by then;
 *   - rank 0's call c ended, so every rank started call c and read the word there; publishing
 *     only where c has reached the last plan's call means every rank read that plan at a call it
 *     holds for, and took it up, before it can see the next.
 * So every rank runs every call the same way, without a flag round of its own.
 */
#include <stdint.h>
#include <string.h>

#include "debug.h"
#include "direct_win.h"

#define ADAPT_WARM_CALLS 8 /* calls of a class on its path before a trial */
/* A class's first trial waits until its calls have taken this long: a rank's first reads of a
 * peer's pages by process_vm_readv cost about 25 of the window's calls here (2 ranks, 128 KiB a
 * rank: 214 us, then 29, 15, 15, against 7.5-11 by the window; 8 MiB a rank: 12.9 ms against
 * 0.6), which a job that calls it for long pays once, and a benchmark of 100 calls a size would
 * pay in every size's time. */
#define ADAPT_WARM_NS (100LL * 1000 * 1000)
/* Calls a trial times the other way: the first after a switch ran up to 2x the later ones here. */
#define ADAPT_TRIAL_CALLS 3
#define ADAPT_KEEP_PCT 92
#define ADAPT_PERIOD_NS (200LL * 1000 * 1000)
#define ADAPT_PERIOD_MAX_NS (3200LL * 1000 * 1000)
/* A trial whose class is not called again ends (the path as it was) after this many calls. */
#define ADAPT_GIVE_UP_CALLS 64

/* A least time in us for INFO (-1: none). */
static double us(int64_t ns)
{
    return ns == INT64_MAX ? -1.0 : ns / 1e3;
}

void direct_adapt_init(direct_adapt_t *ad, int start, int test)
{
    memset(ad, 0, sizeof(*ad));
    uint32_t below = (1u << DIRECT_ADAPT_CMA_CLASSES) - 1;
    ad->mask = start == 2 ? below : below & ~((1u << DIRECT_ADAPT_TIMED_CLASSES) - 1);
    ad->planned = ad->mask;
    ad->test = test;
    ad->trial = -1;
    for (int k = 0; k < DIRECT_ADAPT_CLASSES; k++) {
        direct_adapt_class_t *cl = &ad->cls[k];
        cl->ref[0] = cl->ref[1] = INT64_MAX;
        cl->trial_best[0] = cl->trial_best[1] = INT64_MAX;
        cl->period_ns = ADAPT_PERIOD_NS;
    }
}

int direct_adapt_class(const direct_view_t *v, size_t nbytes)
{
    if (v->cma_adapt == NULL || v->cma_read == NULL || nbytes < DIRECT_ADAPT_MIN_NBYTES ||
        nbytes <= DIRECT_LL_NBYTES || nbytes <= LINES_MAX_NBYTES)
        return -1;
    int k = 0;
    for (size_t b = nbytes / DIRECT_ADAPT_MIN_NBYTES; b > 1 && k < DIRECT_ADAPT_CLASSES - 1; b /= 2)
        k++;
    return k;
}

int direct_adapt_begin(const direct_view_t *v, int k)
{
    direct_adapt_t *ad = v->cma_adapt;
    uint64_t w = __atomic_load_n(&hdr(v, 0)->cma_plan, __ATOMIC_ACQUIRE);
    /* 0 is never published (the first plan holds from call 2 at least) */
    if (w != ad->seen && (int32_t)(ad->calls - (uint32_t)(w >> 32)) >= 0) {
        ad->seen = w;
        ad->switches += ad->mask != (uint32_t)w;
        ad->mask = (uint32_t)w;
    }
    ad->calls++;
    return (int)(ad->mask >> k & 1);
}

/* Rank 0: the plan mask from call c + 2 on. */
static void publish(const direct_view_t *v, direct_adapt_t *ad, uint32_t c, uint32_t mask)
{
    ad->planned = mask;
    ad->plan_from = c + 2;
    __atomic_store_n(&hdr(v, 0)->cma_plan, (uint64_t)(c + 2) << 32 | mask, __ATOMIC_RELEASE);
}

/* Rank 0, the trial under way: over (its calls made, or its class not called for long) and may
 * publish? Then keep its path or go back, and set the class's next trial. */
static void trial_end(const direct_view_t *v, direct_adapt_t *ad, uint32_t c, int64_t now)
{
    direct_adapt_class_t *cl = &ad->cls[ad->trial];
    int made = cl->trial_calls >= ADAPT_TRIAL_CALLS;
    if ((!made && (int32_t)(c - ad->trial_from) < ADAPT_GIVE_UP_CALLS) ||
        (int32_t)(c - ad->plan_from) < 0)
        return;
    int was = !ad->trial_path, compared = 0, keep = made;
    for (int ip = 0; ip < 2; ip++) {
        if (cl->trial_best[ip] == INT64_MAX || cl->ref[ip] == INT64_MAX)
            continue;
        compared = 1;
        keep &= cl->trial_best[ip] * 100 <= cl->ref[ip] * ADAPT_KEEP_PCT;
    }
    keep &= compared;
    if (!keep)
        publish(v, ad, c, ad->planned ^ 1u << ad->trial);
    int64_t period =
        cl->period_ns * 2 > ADAPT_PERIOD_MAX_NS ? ADAPT_PERIOD_MAX_NS : cl->period_ns * 2;
    cl->period_ns = keep ? ADAPT_PERIOD_NS : period;
    static const char *const path[2] = {"the window", "cross-memory attach"};
    INFO(SUB_TUNING,
         "all-gathers of %zu KiB a rank%s: %s now (%s %.1f/%.1f us against %.1f/%.1f, least out "
         "of place/in place; next trial in %lld ms or more)",
         (size_t)(DIRECT_ADAPT_MIN_NBYTES / 1024) << ad->trial,
         ad->trial == DIRECT_ADAPT_CLASSES - 1 ? " and more" : " to twice that",
         path[keep ? ad->trial_path : was], path[ad->trial_path], us(cl->trial_best[0]),
         us(cl->trial_best[1]), us(cl->ref[0]), us(cl->ref[1]),
         (long long)(cl->period_ns / 1000000));
    for (int ip = 0; ip < 2; ip++) { /* the path's recent calls start again after a trial */
        cl->nrecent[ip] = 0;
        cl->ref[ip] = INT64_MAX;
        cl->trial_best[ip] = INT64_MAX;
    }
    cl->next_ns = now + cl->period_ns;
    cl->since = 0;
    cl->trial_calls = 0;
    ad->trial = -1;
}

void direct_adapt_end(const direct_view_t *v, int k, int cma, int in_place, int64_t t0)
{
    direct_adapt_t *ad = v->cma_adapt;
    if (v->rank != 0)
        return;
    int64_t now = fifo_now_ns(), ns = now - t0;
    uint32_t c = ad->calls - 1;
    if (ad->test) { /* every class the other way, at every chance */
        if ((int32_t)(c - ad->plan_from) >= 0)
            publish(v, ad, c, ad->planned ^ ((1u << DIRECT_ADAPT_CLASSES) - 1));
        return;
    }
    direct_adapt_class_t *cl = &ad->cls[k];
    int ip = in_place != 0;
    if (ad->trial == k && cma == ad->trial_path) {
        for (int i = 0; cl->trial_calls == 0 && i < 2; i++) /* the last calls before it */
            for (uint32_t j = 0; j < cl->nrecent[i] && j < DIRECT_ADAPT_RECENT; j++)
                cl->ref[i] = cl->recent[i][j] < cl->ref[i] ? cl->recent[i][j] : cl->ref[i];
        cl->trial_best[ip] = ns < cl->trial_best[ip] ? ns : cl->trial_best[ip];
        cl->trial_calls++;
    } else if (cma == (ad->trial == k ? !ad->trial_path : (int)(ad->planned >> k & 1))) {
        cl->recent[ip][cl->nrecent[ip]++ % DIRECT_ADAPT_RECENT] = ns;
        cl->since++;
        cl->busy_ns += cl->busy_ns < ADAPT_WARM_NS ? ns : 0;
    }
    if (ad->trial >= 0) {
        trial_end(v, ad, c, now);
        return; /* one trial at a time, and one plan a call */
    }
    if (cl->since < ADAPT_WARM_CALLS || cl->busy_ns < ADAPT_WARM_NS || now < cl->next_ns ||
        (int32_t)(c - ad->plan_from) < 0)
        return;
    ad->trial = k;
    ad->trial_path = !(ad->planned >> k & 1);
    publish(v, ad, c, ad->planned ^ 1u << k);
    ad->trial_from = ad->plan_from;
    cl->trial_calls = 0;
}
