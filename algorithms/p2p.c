/*
 * p2p.c: send/recv and all-to-all as one progress loop over many connections.
 *
 * A group may send to and receive from any set of peers, itself included, in any order on each
 * rank. Blocking on one connection could deadlock (A and B both sending more than a FIFO holds to
 * each other), so every connection advances as far as it can without waiting, and the loop sleeps
 * only when no connection moved. Operations to one peer in one direction go in issue order, so
 * matching follows NCCL's rule (the k-th send from A to B meets the k-th recv on B from A).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include <time.h>

#include "algo.h"
#include "debug.h"

/* Links each list's ops to a peer (next), and the first op of each peer into a chain that starts
 * at *head: only a chain's current op may move, so a pass visits one op per peer. (A scan of
 * every op, each checking every earlier one, the way until 2026-12-07, made a group of m sends
 * cost m^2: 2000 8-byte send/recv pairs to one peer took 115 us each.) */
static void p2p_chain(p2p_op_t *ops, int n, int *head)
{
    *head = -1;
    for (int i = n - 1; i >= 0; i--) {
        ops[i].next = -1;
        if (ops[i].prev >= 0) {
            continue;
        }
        ops[i].chain = *head;
        *head = i;
    }
    for (int i = 0; i < n; i++)
        if (ops[i].prev >= 0)
            ops[ops[i].prev].next = i;
}

/* One pass over a list's chains: each peer's current op moves as far as it can, and a finished
 * one hands its place to the peer's next op, which tries at once. */
static chorusResult_t p2p_pass(p2p_op_t *ops, int *head, int send, const memops_ops_t *mops,
                               const wait_ctx_t *w, int *progressed)
{
    int *at = head;
    while (*at >= 0) {
        p2p_op_t *o = &ops[*at];
        if (o->done < o->nbytes) {
            size_t before = o->done;
            chorusResult_t res = send ? prims_try_send(o->conn, mops, o->buf, o->nbytes, &o->done)
                                      : prims_try_recv(o->conn, mops, o->buf, o->nbytes, &o->done);
            if (res != chorusSuccess) {
                if (fifo_failed(o->conn))
                    fifo_note_failure(w, FAIL_CONN, o->peer, o->conn->transport, 0);
                return res;
            }
            *progressed |= o->done != before;
        }
        if (o->done < o->nbytes) {
            at = &o->chain;
        } else if (o->next >= 0) {
            ops[o->next].chain = o->chain;
            *at = o->next;
        } else {
            *at = o->chain;
        }
    }
    return chorusSuccess;
}

static chorusResult_t match_self(p2p_op_t *sends, int nsends, p2p_op_t *recvs, int nrecvs,
                                 const memops_ops_t *ops)
{
    int r = 0;
    for (int s = 0; s < nsends; s++) {
        if (sends[s].conn != NULL)
            continue;
        while (r < nrecvs && recvs[r].conn != NULL)
            r++;
        if (r == nrecvs)
            return ERR(chorusInvalidUsage, SUB_P2P,
                       "a chorusSend to this rank itself has no matching chorusRecv from itself "
                       "in the same group");
        if (recvs[r].nbytes != sends[s].nbytes)
            return ERR(chorusInvalidUsage, SUB_P2P,
                       "a self chorusSend of %zu bytes meets a self chorusRecv of %zu bytes",
                       sends[s].nbytes, recvs[r].nbytes);
        if (recvs[r].buf != sends[s].buf)
            ops->copy(recvs[r].buf, sends[s].buf, sends[s].nbytes);
        sends[s].done = sends[s].nbytes;
        recvs[r].done = recvs[r].nbytes;
        r++;
    }
    for (; r < nrecvs; r++)
        if (recvs[r].conn == NULL && recvs[r].done < recvs[r].nbytes)
            return ERR(chorusInvalidUsage, SUB_P2P,
                       "a chorusRecv from this rank itself has no matching chorusSend to itself "
                       "in the same group");
    return chorusSuccess;
}

chorusResult_t p2p_run(p2p_op_t *sends, int nsends, p2p_op_t *recvs, int nrecvs,
                       const memops_ops_t *ops, const wait_ctx_t *w)
{
    CHECK(match_self(sends, nsends, recvs, nrecvs, ops));
    /* The clock is read only once the loop has spun without progress (a read costs about 26 ns
     * on a VM, and a small send/recv read it three times a call): progress since the last read
     * counts as made at the next one, a spin's length later at most. */
    int64_t last_progress = 0, last_check = 0;
    int moved = 1;
    /* Polls with nothing moving before the loop yields: the communicator's (CHORUS_SPIN, 2000
     * by default; 16 where ranks outnumber cores). Until 2026-12-06 it was 64 whatever the
     * machine, and 2 ranks with a core each yielded in most calls: an 8-byte send/recv pair took
     * 2.2 us against 0.9 after. */
    unsigned idle = 0, spin = w->spin <= 0 ? 0 : w->spin > 1000000 ? 1000000 : (unsigned)w->spin;
    int head_s, head_r;
    p2p_chain(sends, nsends, &head_s);
    p2p_chain(recvs, nrecvs, &head_r);
    for (;;) {
        int progressed = 0;
        CHECK(p2p_pass(sends, &head_s, 1, ops, w, &progressed));
        CHECK(p2p_pass(recvs, &head_r, 0, ops, w, &progressed));
        int remaining = head_s >= 0 || head_r >= 0;
        if (remaining == 0)
            return chorusSuccess;
        if (progressed) {
            moved = 1;
            idle = 0;
            continue;
        }
        /* Nothing moved: spin, then yield, then sleep in growing steps (max 1 ms). */
        idle++;
        if (idle < spin) {
            fifo_cpu_relax();
            continue;
        }
        if (w->abort_flag && __atomic_load_n(w->abort_flag, __ATOMIC_ACQUIRE))
            return ERR(chorusRemoteError, SUB_P2P,
                       "send/recv stopped: the communicator was "
                       "aborted");
        int64_t now = fifo_now_ns();
        if (moved) {
            moved = 0;
            last_progress = now;
            if (last_check == 0)
                last_check = now;
        }
        if (now - last_progress > w->timeout_ns) {
            int peer = -1;
            for (int i = 0; i < nsends && peer < 0; i++)
                if (sends[i].done < sends[i].nbytes)
                    peer = sends[i].peer;
            for (int i = 0; i < nrecvs && peer < 0; i++)
                if (recvs[i].done < recvs[i].nbytes)
                    peer = recvs[i].peer;
            const conn_t *pc = NULL;
            for (int i = 0; i < nsends && pc == NULL; i++)
                if (sends[i].peer == peer)
                    pc = sends[i].conn;
            for (int i = 0; i < nrecvs && pc == NULL; i++)
                if (recvs[i].peer == peer)
                    pc = recvs[i].conn;
            fifo_note_failure(w, FAIL_TIMEOUT, peer, pc ? pc->transport : NULL,
                              now - last_progress);
            return ERR(chorusTimeout, SUB_P2P,
                       "send/recv with peer rank %d made no progress for %lld ms "
                       "(CHORUS_TIMEOUT_MS): does the peer post the matching call?",
                       peer, (long long)(w->timeout_ns / 1000000));
        }
        /* A peer we still wait on whose process is gone will never move: say so now. Only the
         * chains' current ops wait, one a peer and direction. (Every unfinished op asked, the
         * way until 2026-12-07: a group of 10000 sends, stalled past the interval by other
         * processes on the cores, spent its time in 20000 liveness syscalls a check.) */
        if (now - last_check >= FIFO_LIVENESS_NS) {
            last_check = now;
            for (int list = 0; list < 2; list++) {
                p2p_op_t *l = list == 0 ? sends : recvs;
                for (int i = list == 0 ? head_s : head_r; i >= 0; i = l[i].chain) {
                    p2p_op_t *o = &l[i];
                    int64_t ask_now = 0;
                    if (o->conn != NULL && fifo_peer_gone(w, o->peer, o->conn->transport, &ask_now,
                                                          now - last_progress))
                        return ERR(chorusRemoteError, SUB_P2P,
                                   "send/recv: peer rank %d's process is gone (it died while "
                                   "this rank waited on it over %s)",
                                   o->peer, o->conn->transport);
                }
            }
        }
        if (idle < spin + 192) {
            sched_yield();
        } else {
            unsigned slept = idle - spin - 191; /* 1, 2, ... us, then 1 ms */
            long ns = 1000L * (long)(slept < 1000 ? slept : 1000);
            struct timespec ts = {0, ns};
            nanosleep(&ts, NULL);
        }
    }
}
