/*
 * test_slot_adapt: the run-time choice of plain or streaming stores for the send slots
 * (src/slot_adapt.c), fed made-up call times: which class a size falls in, how each class starts,
 * when trials run, what they decide (medians, the threshold, a plan that weighs streaming
 * down), how far apart they fall, and the
 * tests' every-call mode. A
 * pure function of its inputs: no communicator, no clock.
 */
#include <stdint.h>
#include <stdio.h>

#include "slot_adapt.h"

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* One call of (key, k) taking plain_ns or stream_ns by the way it was given; its way, and in
 * *switched whether the class changed way at its end. */
static int call(slot_adapt_t *sa, int key, int k, int64_t plain_ns, int64_t stream_ns,
                int *switched)
{
    int stream = slot_adapt_begin(sa, key, k);
    int s = slot_adapt_end(sa, key, k, stream, stream ? stream_ns : plain_ns);
    if (switched != NULL)
        *switched = s;
    return stream;
}

static void classes(void)
{
    EXPECT(slot_adapt_class(0) == -1, "0 bytes: class %d", slot_adapt_class(0));
    EXPECT(slot_adapt_class(SLOT_ADAPT_MIN_NBYTES - 1) == -1, "below the least: class %d",
           slot_adapt_class(SLOT_ADAPT_MIN_NBYTES - 1));
    EXPECT(slot_adapt_class(SLOT_ADAPT_MIN_NBYTES) == 0, "32 KiB: class %d",
           slot_adapt_class(SLOT_ADAPT_MIN_NBYTES));
    EXPECT(slot_adapt_class(2 * SLOT_ADAPT_MIN_NBYTES - 1) == 0, "64 KiB - 1: class %d",
           slot_adapt_class(2 * SLOT_ADAPT_MIN_NBYTES - 1));
    EXPECT(slot_adapt_class(2 * SLOT_ADAPT_MIN_NBYTES) == 1, "64 KiB: class %d",
           slot_adapt_class(2 * SLOT_ADAPT_MIN_NBYTES));
    EXPECT(slot_adapt_class((size_t)1 << 40) == SLOT_ADAPT_CLASSES - 1, "1 TiB: class %d",
           slot_adapt_class((size_t)1 << 40));
}

/* Every class starts plain. */
static void starts(void)
{
    static slot_adapt_t sa;
    slot_adapt_init(&sa, 0, 100);
    for (int key = 0; key < SLOT_ADAPT_KEYS; key++)
        for (int k = 0; k < SLOT_ADAPT_CLASSES; k++)
            EXPECT(slot_adapt_begin(&sa, key, k) == 0, "key %d class %d starts streaming", key, k);
}

/* The other way faster: eight calls, a trial of five, then the other way until its own first
 * trial, 16 calls later. */
static void switches(void)
{
    static slot_adapt_t sa;
    slot_adapt_init(&sa, 0, 100);
    int key = SLOT_ADAPT_KEY(0, 0), other = SLOT_ADAPT_KEY(0, 1), k = 3, sw = 0;
    for (int c = 0; c < 8; c++)
        EXPECT(call(&sa, key, k, 100000, 40000, &sw) == 0 && !sw, "call %d: plain, no switch", c);
    for (int c = 8; c < 13; c++) {
        EXPECT(call(&sa, key, k, 100000, 40000, &sw) == 1, "call %d: the trial streams", c);
        EXPECT(sw == (c == 12), "call %d: %s", c,
               c == 12 ? "the trial's last call switches" : "no switch mid-trial");
    }
    EXPECT(sa.switches == 1, "%llu switches", (unsigned long long)sa.switches);
    for (int c = 13; c < 29; c++)
        EXPECT(call(&sa, key, k, 100000, 40000, NULL) == 1, "call %d: streams after the switch", c);
    EXPECT(call(&sa, key, k, 100000, 40000, NULL) == 0, "call 29: the next trial, plain");
    EXPECT(slot_adapt_begin(&sa, other, k) == 0 && slot_adapt_begin(&sa, key, k + 1) == 0,
           "in place, and the next class, are their own (still plain)");
    EXPECT(sa.calls[0] == 9 && sa.calls[1] == 21, "calls counted %llu plain, %llu streamed",
           (unsigned long long)sa.calls[0], (unsigned long long)sa.calls[1]);
}

/* The other way slower: trials five calls long, further apart each time, up to 1024 calls. */
static void keeps(void)
{
    static slot_adapt_t sa;
    slot_adapt_init(&sa, 0, 100);
    int key = SLOT_ADAPT_KEY(3, 0), k = 0, last_trial = -1, ntrials = 0, run = 0, first = -1;
    int gaps[16], ng = 0;
    for (int c = 0; c < 6000; c++) {
        int s = call(&sa, key, k, 100000, 150000, NULL);
        if (s) {
            run++;
            continue;
        }
        if (run != 0) {
            EXPECT(run == SLOT_ADAPT_TRIAL, "trial %d ran %d calls the other way", ntrials, run);
            int start = c - run;
            if (last_trial < 0)
                first = start;
            else if (ng < 16)
                gaps[ng++] = start - last_trial - SLOT_ADAPT_TRIAL;
            last_trial = start;
            ntrials++;
            run = 0;
        }
    }
    EXPECT(sa.switches == 0, "%llu switches where the other way is slower",
           (unsigned long long)sa.switches);
    EXPECT(first == 8, "the first trial at call %d", first);
    EXPECT(ntrials >= 8, "%d trials in 6000 calls", ntrials);
    EXPECT(ng >= 1 && gaps[0] == 32, "the second trial %d calls after the first",
           ng ? gaps[0] : -1);
    for (int i = 1; i < ng; i++) {
        int want = gaps[i - 1] * 2 > 1024 ? 1024 : gaps[i - 1] * 2;
        EXPECT(gaps[i] == want, "gap %d: %d calls, want %d", i, gaps[i], want);
    }
}

/* The threshold: the trial's median at 90% of the current way's switches, at 91% does not. */
static void threshold(void)
{
    static slot_adapt_t sa;
    for (int pct = 90; pct <= 91; pct++) {
        slot_adapt_init(&sa, 0, 100);
        for (int c = 0; c < 13; c++)
            call(&sa, SLOT_ADAPT_KEY(1, 0), 2, 100000, 1000 * pct, NULL);
        EXPECT((sa.switches == 1) == (pct == 90), "trial at %d%%: %llu switches", pct,
               (unsigned long long)sa.switches);
    }
}

/* A plan that counts streaming at 100/70 of its times (the window's, WIN_STREAM_PCT): from plain,
 * streaming at 63% of plain's time switches and at 64% does not; from streaming, plain at 128%
 * of streaming's switches back and at 129% does not (90% of 100/70 = 1.2857). */
static void stream_pct(void)
{
    static slot_adapt_t sa;
    int key = SLOT_ADAPT_KEY(0, 1), k = 4;
    for (int pct = 63; pct <= 64; pct++) {
        slot_adapt_init(&sa, 0, 70);
        for (int c = 0; c < 13; c++)
            call(&sa, key, k, 100000, 1000 * pct, NULL);
        EXPECT((sa.switches == 1) == (pct == 63), "streaming at %d%% of plain: %llu switches", pct,
               (unsigned long long)sa.switches);
    }
    for (int pct = 128; pct <= 129; pct++) {
        slot_adapt_init(&sa, 0, 70);
        int c = 0;
        for (; c < 13; c++) /* to streaming first: it times half of plain */
            call(&sa, key, k, 200000, 100000, NULL);
        EXPECT(sa.switches == 1 && sa.cls[key][k].stream == 1, "to streaming: %llu switches",
               (unsigned long long)sa.switches);
        for (; c < 13 + 8 + 16 + 5; c++) /* its warm calls, then plain's trial */
            call(&sa, key, k, 1000 * pct, 100000, NULL);
        EXPECT((sa.cls[key][k].stream == 0) == (pct == 128), "plain at %d%% of streaming: way %d",
               pct, sa.cls[key][k].stream);
    }
}

/* Medians on both sides: one slow call among the current way's does not make a slower way look
 * faster, and one fast trial call among slow ones does not win; two slow trial calls among five
 * do not lose. */
static void medians(void)
{
    static slot_adapt_t sa;
    int key = SLOT_ADAPT_KEY(2, 0), k = 5;
    int64_t plain[8] = {900000, 900000, 500000, 100000, 100000, 100000, 100000, 100000};
    int64_t lose[5] = {30000, 200000, 200000, 200000, 200000};
    int64_t win[5] = {900000, 40000, 900000, 40000, 40000};
    for (int t = 0; t < 2; t++) {
        slot_adapt_init(&sa, 0, 100);
        const int64_t *trial = t ? win : lose;
        for (int c = 0; c < 8; c++)
            call(&sa, key, k, plain[c], 0, NULL);
        for (int c = 0; c < 5; c++)
            call(&sa, key, k, 0, trial[c], NULL);
        EXPECT(sa.switches == (uint64_t)t, "trial %s: %llu switches", t ? "win" : "lose",
               (unsigned long long)sa.switches);
    }
}

/* CHORUS_SLOT_ADAPT=2: every call the other way. */
static void test_mode(void)
{
    static slot_adapt_t sa;
    slot_adapt_init(&sa, 1, 100);
    for (int c = 0; c < 10; c++)
        EXPECT(call(&sa, SLOT_ADAPT_KEY(0, 0), 0, 1, 1, NULL) == (c & 1), "test mode, call %d", c);
    EXPECT(sa.calls[0] == 5 && sa.calls[1] == 5, "test mode: %llu plain, %llu streamed",
           (unsigned long long)sa.calls[0], (unsigned long long)sa.calls[1]);
}

int main(void)
{
    classes();
    starts();
    switches();
    keeps();
    threshold();
    stream_pct();
    medians();
    test_mode();
    printf("%s: test_slot_adapt\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
