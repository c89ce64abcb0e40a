/*
 * connect.c: builds connection ends with their peers over the bootstrap (transport.h's protocol).
 *
 *   phase 1  every end: pick a transport, setup(); then, all set up, send the handles to the peers
 *   phase 2  every end: receive the peer's handle; a send end connects and acks
 *   phase 3  every recv end: wait for the ack, then connect (shm unlinks its segment here)
 *
 * Bootstrap sends never wait on the peer's progress (small messages, queued at the receiver), so
 * the phases cannot deadlock whatever order the ranks list their ends in.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "debug.h"

static uint32_t handle_tag(int tag, conn_dir_t from_dir)
{
    return BOOT_TAG_HANDLE | ((uint32_t)tag << 1) | (uint32_t)from_dir;
}

/* Transports in order of preference: shm inside a host, net between hosts. */
const transport_ops_t *const transport_table[] = {&shm_transport, &net_transport, NULL};

static void conn_label(int tag, char *buf, size_t len)
{
    if (tag == P2P_TAG)
        snprintf(buf, len, "p2p");
    else if (tag == SENDRECV_TAG)
        snprintf(buf, len, "sendrecv");
    else if (tag == DEVICE_RING_TAG)
        snprintf(buf, len, "device-ring");
    else if (tag >= TREE_UP_TAG(0))
        snprintf(buf, len, "tree%d", (tag - TREE_UP_TAG(0)) / 2);
    else
        snprintf(buf, len, "ring%d", tag);
}

static const transport_ops_t *pick_transport(const peer_info_t *self, const peer_info_t *peer)
{
    for (int i = 0; transport_table[i] != NULL; i++)
        if (transport_table[i]->can_connect(self, peer))
            return transport_table[i];
    return NULL;
}

/* A bootstrap exchange with peer, or the transport's connect to it (over: the transport's
 * name), failed mid-operation: record it as the operation's failure on that peer's connection,
 * so the error names the peer (and a dead process as a death). A timeout waited the
 * communicator's deadline (the error said "after 0 ms"). */
static chorusResult_t peer_failed(chorusComm_t comm, int peer, const char *over, chorusResult_t res)
{
    wait_ctx_t w;
    memset(&w, 0, sizeof(w));
    w.fail = &comm->op_fail;
    if (res == chorusTimeout)
        fifo_note_failure(&w, FAIL_TIMEOUT, peer, over, comm->timeout_ms * 1000000);
    else if (res != chorusSuccess)
        fifo_note_failure(&w, FAIL_CONN, peer, over, 0);
    return res;
}

static chorusResult_t boot_failed(chorusComm_t comm, int peer, chorusResult_t res)
{
    return peer_failed(comm, peer, "bootstrap", res);
}

/* The transport's connect to peer failed: where the peer's process is gone (or goes within
 * CONNECT_GONE_NS: a process's sockets close before it exits), a death on that connection,
 * which the error then names; otherwise the transport's own error (a configuration mismatch,
 * say) as it is. 1 of 60 faults_kill_ib trials, a rank killed just before a call that opened a
 * new connection to it, failed with "rank 3: cannot connect to ...: Connection reset by peer"
 * on every rank, the killed rank named nowhere. */
#define CONNECT_GONE_NS (200LL * 1000 * 1000)
static chorusResult_t connect_failed(chorusComm_t comm, int peer, const char *over,
                                     chorusResult_t res)
{
    if (res == chorusSuccess)
        return res;
    for (int64_t until = fifo_now_ns() + CONNECT_GONE_NS;;) {
        if (!health_peer_alive(comm, peer))
            return peer_failed(comm, peer, over, res);
        if (fifo_now_ns() >= until)
            return res;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

chorusResult_t comm_connect(chorusComm_t comm, conn_req_t *reqs, int n)
{
    chorusResult_t res = chorusSuccess;
    transport_handle_t *peer_handles = calloc(n > 0 ? n : 1, sizeof(*peer_handles));
    transport_handle_t *my_handles = calloc(n > 0 ? n : 1, sizeof(*my_handles));
    conn_setup_t *setups = calloc(n > 0 ? n : 1, sizeof(*setups));
    if (peer_handles == NULL || my_handles == NULL || setups == NULL) {
        res = ERR(chorusSystemError, SUB_INIT, "out of memory");
        goto out;
    }
    const peer_info_t *self = &comm->peers[comm->rank];
    for (int i = 0; i < n; i++) {
        conn_req_t *r = &reqs[i];
        const peer_info_t *peer = &comm->peers[r->peer];
        r->cc->tp = r->tp != NULL ? r->tp : pick_transport(self, peer);
        if (r->cc->tp == NULL) {
            res = ERR(chorusInvalidUsage, SUB_INIT,
                      "no transport connects rank %d (host %s) to rank %d (host %s)", comm->rank,
                      self->hostid, r->peer, peer->hostid);
            goto out;
        }
        setups[i] = (conn_setup_t){.dir = r->dir,
                                   .self = self,
                                   .peer = peer,
                                   .slot_nbytes = r->slot_nbytes,
                                   .steps = (int)comm->params.steps,
                                   .tag = r->tag,
                                   .tc = &comm->tc};
        CHECK_GOTO(r->cc->tp->setup(&setups[i], &r->cc->res, &r->cc->conn, &my_handles[i]), res,
                   out);
        r->cc->ready = 1; /* resources exist from here on: close() must release them */
    }
    /* Handles go out only once every setup of this rank succeeded: a setup that fails (a full
     * /dev/shm) then leaves no peer mapping a segment this rank is about to tear down. */
    for (int i = 0; i < n; i++)
        CHECK_GOTO(
            boot_failed(comm, reqs[i].peer,
                        boot_send(comm->boot, reqs[i].peer, handle_tag(reqs[i].tag, reqs[i].dir),
                                  &my_handles[i], sizeof(my_handles[i]))),
            res, out);
    for (int i = 0; i < n; i++) {
        conn_req_t *r = &reqs[i];
        conn_dir_t other = r->dir == CONN_SEND ? CONN_RECV : CONN_SEND;
        CHECK_GOTO(boot_failed(comm, r->peer,
                               boot_recv(comm->boot, r->peer, handle_tag(r->tag, other),
                                         &peer_handles[i], sizeof(peer_handles[i]))),
                   res, out);
        if (r->dir != CONN_SEND)
            continue;
        CHECK_GOTO(connect_failed(
                       comm, r->peer, r->cc->tp->name,
                       r->cc->tp->connect(&setups[i], &peer_handles[i], &r->cc->res, &r->cc->conn)),
                   res, out);
        char label[16];
        conn_label(r->tag, label, sizeof(label));
        INFO(SUB_INIT, "conn %s: rank %d -> rank %d via %s", label, comm->rank, r->peer,
             r->cc->tp->name);
        char ack = 1;
        CHECK_GOTO(boot_failed(comm, r->peer,
                               boot_send(comm->boot, r->peer,
                                         BOOT_TAG_ACK | ((uint32_t)r->tag << 1), &ack, 1)),
                   res, out);
    }
    for (int i = 0; i < n; i++) {
        conn_req_t *r = &reqs[i];
        if (r->dir != CONN_RECV)
            continue;
        char ack;
        CHECK_GOTO(boot_failed(comm, r->peer,
                               boot_recv(comm->boot, r->peer,
                                         BOOT_TAG_ACK | ((uint32_t)r->tag << 1), &ack, 1)),
                   res, out);
        CHECK_GOTO(connect_failed(
                       comm, r->peer, r->cc->tp->name,
                       r->cc->tp->connect(&setups[i], &peer_handles[i], &r->cc->res, &r->cc->conn)),
                   res, out);
        TRACE(SUB_INIT, "connected %s from rank %d (tag %d)", r->cc->tp->name, r->peer, r->tag);
    }
    /* Send/recv inside a host: slot headers (fifo_slot_hdr_t), the same on both ends. */
    for (int i = 0; i < n; i++) {
        conn_t *c = &reqs[i].cc->conn;
        c->slot_hdr = reqs[i].tag == SENDRECV_TAG && reqs[i].cc->tp == &shm_transport &&
                      c->slot_nbytes >= 128;
    }
out:
    free(peer_handles);
    free(my_handles);
    free(setups);
    return res;
}

void comm_conn_close(comm_conn_t *cc)
{
    if (cc->ready && cc->tp != NULL)
        cc->tp->close(&cc->res, &cc->conn);
    cc->ready = 0;
}
