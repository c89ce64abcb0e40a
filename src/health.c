/*
 * health.c: failure notices, the status exchange on a deadline, and peer liveness (health.h).
 *
 * Control messages ride the bootstrap (BOOT_TAG_CONTROL) and are handled by its service thread,
 * so a rank answers a status query and learns of a peer's failure even while it is blocked in a
 * collective or busy outside Chorus. Answers are best effort: every send has a short deadline and
 * a rank that cannot be reached is reported as not answering, never waited for.
 */
#define _GNU_SOURCE
#include "health.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "debug.h"

/* How long one notice or answer may take to leave (a dead peer's refused connects end it). */
#define HEALTH_SEND_MS 500

enum { CTRL_NOTICE = 1, CTRL_STATUS_QUERY = 2 };

typedef struct notice {
    uint32_t kind; /* CTRL_NOTICE */
    int32_t culprit;
    int32_t code;
    int32_t reserved;
    char text[HEALTH_TEXT_BYTES];
} notice_t;

typedef struct status_query {
    uint32_t kind; /* CTRL_STATUS_QUERY */
    uint32_t reserved;
    uint64_t seq; /* the collective the asker is stuck in */
} status_query_t;

typedef struct status_answer {
    int32_t rank;
    int32_t in_op;
    uint64_t entered; /* collectives entered on this communicator */
    uint64_t completed;
} status_answer_t;

static uint64_t read_start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    /* open and read, not fopen: a wait asks this while it waits, and fopen allocates. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        return 0;
    buf[n] = '\0';
    /* Fields after the command name (which may hold spaces and parentheses): state is field 3,
     * starttime field 22. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    p++;
    unsigned long long v = 0;
    for (int field = 3; field <= 22 && p != NULL; field++) {
        while (*p == ' ')
            p++;
        if (field == 3 && (*p == 'Z' || *p == 'X'))
            return UINT64_MAX; /* a zombie: dead, not yet reaped */
        if (field == 22)
            v = strtoull(p, NULL, 10);
        p = strchr(p, ' ');
    }
    return v;
}

uint64_t health_start_time(void)
{
    return read_start_time((int)getpid());
}

uint64_t health_pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int health_peer_alive(void *arg, int peer)
{
    chorusComm_t comm = arg;
    const peer_info_t *p = &comm->peers[peer], *me = &comm->peers[comm->rank];
    /* Only a process this rank can see: same machine, same pid namespace. */
    if (p->machine_hash != me->machine_hash || p->pid_ns != me->pid_ns || p->pid_ns == 0 ||
        p->pid <= 0)
        return 1;
    if (kill(p->pid, 0) != 0 && errno == ESRCH)
        return 0;
    uint64_t start = read_start_time(p->pid);
    if (start == UINT64_MAX)
        return 0;
    /* Unreadable (0): assume alive. A different start time: the pid was reused. */
    return start == 0 || p->start_time == 0 || start == p->start_time;
}

int health_other_gone(void *arg, int peer)
{
    chorusComm_t comm = arg;
    for (int r = 0; r < comm->nranks; r++)
        if (r != comm->rank && r != peer && !health_peer_alive(comm, r))
            return r;
    return -1;
}

static int failure_known(chorusComm_t comm)
{
    pthread_mutex_lock(&comm->state_lock);
    int set = comm->failure.set;
    pthread_mutex_unlock(&comm->state_lock);
    return set;
}

static const char *host_of(chorusComm_t comm, int rank, char *buf, size_t len)
{
    /* hostid is "hostname/boot id" or CHORUS_HOSTID: the part before '/' names the host. */
    snprintf(buf, len, "%s", comm->peers[rank].hostid);
    buf[strcspn(buf, "/")] = '\0';
    return buf;
}

void health_fail(chorusComm_t comm, chorusResult_t code, int culprit, int notify, const char *fmt,
                 ...)
{
    notice_t n;
    memset(&n, 0, sizeof(n));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n.text, sizeof(n.text), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&comm->state_lock);
    if (comm->failure.set) {
        pthread_mutex_unlock(&comm->state_lock);
        return;
    }
    comm->failure.set = 1;
    comm->failure.code = code;
    comm->failure.culprit = culprit;
    memcpy(comm->failure.text, n.text, sizeof(n.text));
    if (comm->async_error == chorusSuccess)
        comm->async_error = code;
    pthread_mutex_unlock(&comm->state_lock);
    uint32_t zero = 0;
    __atomic_compare_exchange_n(&comm->abort_flag, &zero, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (!notify)
        return;
    WARN(SUB_INIT, "rank %d: %s; telling the other ranks", comm->rank, n.text);
    n.kind = CTRL_NOTICE;
    n.culprit = culprit;
    n.code = code;
    int quiet = debug_set_quiet_errors(1); /* an unreachable rank is expected here */
    /* The culprit of a timeout last: it may be alive, only late, and without the notice its
     * next call could complete where this rank's failed (a rank entering an all-reduce 1 s after
     * its peer's deadline found the peer's input published and returned success, the peer
     * chorusTimeout). A dead culprit is not told. */
    int last = code == chorusTimeout && culprit >= 0 && culprit != comm->rank ? culprit : -1;
    for (int k = 0; k <= comm->nranks; k++) {
        int r = k < comm->nranks ? k : last;
        if (r < 0 || r == comm->rank || (k < comm->nranks && r == culprit))
            continue;
        if (boot_send_timeout(comm->boot, r, BOOT_TAG_CONTROL, &n, sizeof(n), HEALTH_SEND_MS) !=
            chorusSuccess)
            WARN(SUB_INIT, "rank %d: could not send the failure notice to rank %d: %s", comm->rank,
                 r, debug_last_error());
    }
    debug_set_quiet_errors(quiet);
}

void health_control(void *arg, int peer, uint32_t tag, const void *data, size_t nbytes)
{
    chorusComm_t comm = arg;
    uint32_t kind = 0;
    if (nbytes >= sizeof(kind))
        memcpy(&kind, data, sizeof(kind));
    if (kind == CTRL_NOTICE && nbytes == sizeof(notice_t)) {
        notice_t n;
        memcpy(&n, data, sizeof(n));
        n.text[sizeof(n.text) - 1] = '\0';
        int culprit = n.culprit >= 0 && n.culprit < comm->nranks ? n.culprit : -1;
        chorusResult_t code =
            n.code == chorusTimeout ? chorusTimeout : chorusRemoteError; /* nothing else */
        INFO(SUB_INIT, "rank %d: failure notice from rank %d: %s", comm->rank, peer, n.text);
        health_fail(comm, code, culprit, 0, "%s (reported by rank %d)", n.text, peer);
    } else if (kind == CTRL_STATUS_QUERY && nbytes == sizeof(status_query_t)) {
        status_answer_t a = {comm->rank, __atomic_load_n(&comm->in_op, __ATOMIC_ACQUIRE),
                             __atomic_load_n(&comm->coll_entered, __ATOMIC_ACQUIRE),
                             __atomic_load_n(&comm->coll_completed, __ATOMIC_ACQUIRE)};
        int quiet = debug_set_quiet_errors(1);
        if (boot_send_timeout(comm->boot, peer, BOOT_TAG_STATUS | (tag & 0xffffff), &a, sizeof(a),
                              HEALTH_SEND_MS) != chorusSuccess)
            INFO(SUB_INIT, "rank %d: could not answer rank %d's status query: %s", comm->rank, peer,
                 debug_last_error());
        debug_set_quiet_errors(quiet);
    } else {
        WARN(SUB_BOOT, "rank %d: ignored a control message of %zu bytes (kind %u) from rank %d",
             comm->rank, nbytes, kind, peer);
    }
}

/* Append ", r" (or "r" first) to a list, keeping it within len. */
static void list_add(char *list, size_t len, int *count, int r)
{
    size_t used = strlen(list);
    if (*count < 12 && used + 16 < len)
        snprintf(list + used, len - used, "%s%d", *count ? ", " : "", r);
    else if (*count == 12 && used + 8 < len)
        snprintf(list + used, len - used, ", ...");
    (*count)++;
}

/* A deadline passed in collective seq while waiting on stuck_peer: ask every rank how far it
 * got, and say who is missing. Returns the culprit (-1: none found). */
static int who_is_missing(chorusComm_t comm, uint64_t seq, int stuck_peer, int *dead_p, char *out,
                          size_t len)
{
    int n = comm->nranks, me = comm->rank;
    uint32_t qid = (__atomic_add_fetch(&comm->status_queries, 1, __ATOMIC_RELAXED) & 0xffff) |
                   ((uint32_t)(me & 0xff) << 16);
    status_query_t q = {CTRL_STATUS_QUERY, 0, seq};
    int quiet = debug_set_quiet_errors(1);
    char *sent = calloc(n, 1);
    for (int r = 0; sent && r < n; r++)
        sent[r] = r != me && boot_send_timeout(comm->boot, r, BOOT_TAG_CONTROL | qid, &q, sizeof(q),
                                               HEALTH_SEND_MS) == chorusSuccess;
    /* Live ranks answer from their service threads within milliseconds; the window only bounds
     * the wait for those that cannot (stopped, dead, unreachable). */
    int64_t window_ms = comm->timeout_ms / 10;
    window_ms = window_ms < 200 ? 200 : window_ms > 2000 ? 2000 : window_ms;
    int64_t deadline = fifo_now_ns() + window_ms * 1000000;
    char silent[160] = "", never[200] = "", stuck[160] = "", dead[160] = "";
    int nsilent = 0, nnever = 0, nstuck = 0, ndead = 0, culprit = -1, first_never = -1;
    int first_dead = -1;
    uint64_t never_last = 0;
    for (int r = 0; r < n; r++) {
        if (r == me)
            continue;
        status_answer_t a;
        int64_t left_ms = (deadline - fifo_now_ns()) / 1000000;
        if (sent == NULL || !sent[r] ||
            boot_recv_timeout(comm->boot, r, BOOT_TAG_STATUS | qid, &a, sizeof(a),
                              left_ms > 0 ? left_ms : 0, &comm->user_abort) != chorusSuccess) {
            /* Silent: a process of this machine that is gone died (its death went unseen by
             * this rank's waits, on another rank's connection); else it is stopped or cut off. */
            if (!health_peer_alive(comm, r)) {
                list_add(dead, sizeof(dead), &ndead, r);
                if (first_dead < 0)
                    first_dead = r;
                continue;
            }
            list_add(silent, sizeof(silent), &nsilent, r);
            if (culprit < 0)
                culprit = r;
        } else if (seq == 0) {
            continue; /* point-to-point: no common numbering to compare */
        } else if (a.entered < seq) {
            list_add(never, sizeof(never), &nnever, r);
            if (first_never < 0) {
                first_never = r;
                never_last = a.entered;
            }
        } else if (a.completed < seq) {
            list_add(stuck, sizeof(stuck), &nstuck, r);
        }
    }
    debug_set_quiet_errors(quiet);
    free(sent);
    *dead_p = first_dead >= 0;
    if (first_dead >= 0)
        culprit = first_dead;
    if (culprit < 0)
        culprit = first_never >= 0 ? first_never : stuck_peer;
    size_t used = 0;
    char host[PEER_HOSTID_BYTES];
    out[0] = '\0';
    if (ndead)
        used += snprintf(out + used, len - used,
                         "rank%s %s died (process gone, found by the status exchange); ",
                         ndead > 1 ? "s" : "", dead);
    if (nsilent && used < len)
        used += snprintf(out + used, len - used,
                         "rank%s %s did not answer the status exchange (stopped, hung or "
                         "unreachable); ",
                         nsilent > 1 ? "s" : "", silent);
    if (nnever && used < len)
        used += snprintf(out + used, len - used,
                         "rank%s %s never entered collective #%llu (rank %d last entered #%llu); ",
                         nnever > 1 ? "s" : "", never, (unsigned long long)seq, first_never,
                         (unsigned long long)never_last);
    if (nstuck && used < len)
        used += snprintf(out + used, len - used, "rank%s %s entered it and wait%s too; ",
                         nstuck > 1 ? "s" : "", stuck, nstuck > 1 ? "" : "s");
    if (!ndead && !nsilent && !nnever && seq != 0 && used < len)
        used += snprintf(out + used, len - used,
                         "every rank entered it: rank %d is slow or deadlocked%s; ", stuck_peer,
                         comm->params.check_args
                             ? ""
                             : ", or the ranks called it with different counts, datatypes or "
                               "roots (CHORUS_CHECK_ARGS=1 compares them)");
    if (used < len)
        snprintf(out + used, len - used, "this rank waited on rank %d (host %s)", stuck_peer,
                 host_of(comm, stuck_peer, host, sizeof(host)));
    return culprit;
}

chorusResult_t health_explain(chorusComm_t comm, const char *what, uint64_t seq, chorusResult_t res)
{
    char why[HEALTH_TEXT_BYTES], host[PEER_HOSTID_BYTES];
    if (__atomic_load_n(&comm->user_abort, __ATOMIC_ACQUIRE))
        return ERR(res, SUB_COLL, "%s (rank %d) stopped: chorusCommAbort was called", what,
                   comm->rank);
    fail_record_t f = comm->op_fail;
    int peer = f.peer;
    const char *tp = f.transport ? f.transport : "?";
    /* A failed connection to a process that is gone is a death, and says so. */
    if (f.kind == FAIL_CONN && !health_peer_alive(comm, peer))
        f.kind = FAIL_DEAD;
    if (f.kind == FAIL_DEAD) {
        health_fail(comm, chorusRemoteError, peer, 1,
                    "rank %d (host %s, pid %d) died: its process is gone (seen over its %s "
                    "connection)",
                    peer, host_of(comm, peer, host, sizeof(host)), (int)comm->peers[peer].pid, tp);
    } else if (f.kind == FAIL_CONN && !failure_known(comm)) {
        chorusResult_t cause = transport_comm_error(&comm->tc);
        snprintf(why, sizeof(why), "%s", cause != chorusSuccess ? debug_last_error() : "");
        health_fail(comm, chorusRemoteError, peer, 1,
                    "rank %d (host %s): its %s connection failed%s%s (did it exit or crash?)", peer,
                    host_of(comm, peer, host, sizeof(host)), tp, why[0] ? ": " : "", why);
    } else if (f.kind == FAIL_TIMEOUT && !failure_known(comm)) {
        int dead = 0;
        int culprit = who_is_missing(comm, seq, peer, &dead, why, sizeof(why));
        WARN(SUB_COLL, "rank %d: %s: %s", comm->rank, what, why);
        if (dead)
            health_fail(comm, chorusRemoteError, culprit, 1,
                        "rank %d (host %s, pid %d) died; this rank noticed only at its deadline "
                        "after %lld ms (CHORUS_TIMEOUT_MS): %s",
                        culprit, host_of(comm, culprit, host, sizeof(host)),
                        (int)comm->peers[culprit].pid, (long long)(f.waited_ns / 1000000), why);
        else
            health_fail(comm, chorusTimeout, culprit, 1,
                        "timed out after %lld ms (CHORUS_TIMEOUT_MS): %s",
                        (long long)(f.waited_ns / 1000000), why);
    } else if (!failure_known(comm)) {
        /* Not a peer's fault as far as this rank can tell (a size mismatch, say): still tell the
         * others, whose waits on this rank would otherwise run to their deadline. */
        snprintf(why, sizeof(why), "%s", debug_last_error());
        health_fail(comm, res, -1, 1, "rank %d: %s", comm->rank, why);
    }
    pthread_mutex_lock(&comm->state_lock);
    chorusResult_t code = comm->failure.code;
    snprintf(why, sizeof(why), "%s", comm->failure.text);
    comm->failure.reported = 1;
    pthread_mutex_unlock(&comm->state_lock);
    return ERR(code, SUB_COLL, "%s (rank %d) failed: %s", what, comm->rank, why);
}

chorusResult_t health_report_once(chorusComm_t comm, const char *fn, int coll)
{
    char why[HEALTH_TEXT_BYTES], what[96];
    if (__atomic_load_n(&comm->user_abort, __ATOMIC_ACQUIRE))
        return chorusSuccess;
    pthread_mutex_lock(&comm->state_lock);
    int report = comm->failure.set && !comm->failure.reported;
    chorusResult_t code = comm->failure.code;
    snprintf(why, sizeof(why), "%s", comm->failure.text);
    comm->failure.reported |= report;
    pthread_mutex_unlock(&comm->state_lock);
    if (!report)
        return chorusSuccess;
    if (coll)
        snprintf(what, sizeof(what), "%s #%llu", fn,
                 (unsigned long long)__atomic_add_fetch(&comm->coll_entered, 1, __ATOMIC_ACQ_REL));
    else
        snprintf(what, sizeof(what), "%s", fn);
    return ERR(code, SUB_COLL, "%s (rank %d) failed: %s", what, comm->rank, why);
}
