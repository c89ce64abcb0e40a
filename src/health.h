/*
 * health.h: what a rank knows of its peers' health, and how a failure becomes the error every
 * rank reports.
 *
 * A failed wait records what it saw (fifo.h: a dead peer process, a failed connection, a
 * deadline). The rank that saw it turns it into one sentence naming the collective, its sequence
 * number, the culprit rank and host and the transport, and sends that sentence to every other
 * rank over the bootstrap (a failure notice), whose service thread stops their waits at once.
 * On a deadline the rank first asks every rank which collective it last entered and completed,
 * so the report says who never arrived and who did not answer.
 */
#ifndef CHORUS_HEALTH_H
#define CHORUS_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

struct chorusComm;

#define HEALTH_TEXT_BYTES 768

/* The first failure a rank learned of (its own or a peer's notice); under the comm's state_lock. */
typedef struct comm_failure {
    int set;
    chorusResult_t code;
    int culprit; /* -1: unknown */
    int reported; /* a call of this rank has returned it (health_explain, health_report_once) */
    char text[HEALTH_TEXT_BYTES];
} comm_failure_t;

/* Bootstrap control callback (boot_control_fn): failure notices and status queries. */
void health_control(void *arg, int peer, uint32_t tag, const void *data, size_t nbytes);
/* wait_ctx_t.peer_alive: 0 when peer runs on this machine and its process is gone. */
int health_peer_alive(void *arg, int peer);
/* wait_ctx_t.other_gone: the first rank (not this one, not peer) on this machine whose process is
 * gone, or -1. */
int health_other_gone(void *arg, int peer);
/* This process's start time (clock ticks since boot, /proc/self/stat) and pid namespace id: with
 * the pid they tell a live peer from a reused pid. */
uint64_t health_start_time(void);
uint64_t health_pid_ns(void);
/* Record comm's first failure (later ones are kept out), stop its waits, and with notify tell
 * every other rank (except the culprit) in a failure notice. */
void health_fail(struct chorusComm *comm, chorusResult_t code, int culprit, int notify,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* An operation (described as "chorusAllReduce #7") failed with res: find the cause (the waits'
 * record, a peer's notice, a deadline explained by the status exchange), tell the others, and
 * return the code with the error text set (ERR). */
/* A failure this rank learned of between calls (a peer's notice) is the result of its next call,
 * once, named like one that failed while running: "chorusAllReduce #18 (rank 2) failed: ..." (a
 * collective, coll != 0, is counted as entered). chorusSuccess when there is none to report: the
 * caller then says the communicator was aborted (chorusInvalidUsage). */
chorusResult_t health_report_once(struct chorusComm *comm, const char *fn, int coll);
chorusResult_t health_explain(struct chorusComm *comm, const char *what, uint64_t seq,
                              chorusResult_t res);

#endif /* CHORUS_HEALTH_H */
