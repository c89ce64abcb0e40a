/*
 * slot_adapt.h: how a rank writes its pipelined algorithms' send slots (plain or streaming
 * stores), chosen per collective and size at run time from its own call times (slot_adapt.c).
 */
#ifndef CHORUS_SLOT_ADAPT_H
#define CHORUS_SLOT_ADAPT_H

#include <stddef.h>
#include <stdint.h>

#include "tuning.h"

#define SLOT_ADAPT_MIN_NBYTES (32 * 1024) /* calls below this size write their slots plainly */
#define SLOT_ADAPT_CLASSES 16 /* 32 KiB to twice that, ..., 1 GiB and more */
#define SLOT_ADAPT_RECENT 8 /* the current way's last calls a trial is held against */
#define SLOT_ADAPT_TRIAL 5 /* calls a trial runs the other way */
/* What a class is chosen for: a collective (coll_kind_t, < TUNE_NCOLLS), in place or not (the
 * two cost differently, and a benchmark runs a block of each). */
#define SLOT_ADAPT_KEYS (TUNE_NCOLLS * 2)
#define SLOT_ADAPT_KEY(kind, in_place) ((kind)*2 + ((in_place) != 0))

typedef struct slot_class {
    uint32_t calls; /* calls of the class so far (the same on every rank) */
    uint32_t next; /* the call the next trial starts at */
    uint32_t period; /* calls from a trial's end to the next */
    uint8_t stream; /* the way the class's calls take: 1 streaming stores */
    uint8_t trial_left; /* trial calls (the other way) still to run */
    uint8_t nrecent; /* of recent, filled (at most SLOT_ADAPT_RECENT) */
    uint8_t head; /* where the next goes */
    int64_t recent[SLOT_ADAPT_RECENT]; /* ns of the current way's last calls */
    int64_t ref; /* their median when the trial began */
    int64_t trial[SLOT_ADAPT_TRIAL]; /* ns of the trial's calls */
    int64_t trial_median; /* of the last trial, once over */
} slot_class_t;

typedef struct slot_adapt {
    int test; /* CHORUS_SLOT_ADAPT=2: every call the other way */
    /* Streaming counts as its times x 100 / stream_pct against plain's: 100 weighs them alike;
     * below 100, streaming must save more than the times show (a cost they leave out). */
    int stream_pct;
    slot_class_t cls[SLOT_ADAPT_KEYS][SLOT_ADAPT_CLASSES];
    uint64_t calls[2]; /* calls run with plain (0) and streaming (1) slot stores (tests look) */
    uint64_t switches; /* trials that changed a class's way */
} slot_adapt_t;

/* Every class starts plain. */
void slot_adapt_init(slot_adapt_t *sa, int test, int stream_pct);
/* The class of a call of nbytes (its larger buffer), or -1 below SLOT_ADAPT_MIN_NBYTES. */
int slot_adapt_class(size_t nbytes);
/* The way this call of key (SLOT_ADAPT_KEY) and class k writes its slots: 1 stream. */
int slot_adapt_begin(slot_adapt_t *sa, int key, int k);
/* The call begun with stream took ns: count it, and end or start a trial. 1 where the class's way
 * changed (for a log line), else 0. */
int slot_adapt_end(slot_adapt_t *sa, int key, int k, int stream, int64_t ns);

#endif
