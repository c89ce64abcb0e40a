/*
 * net_ib.c: the InfiniBand / RoCE net plugin ("IB", net.h) over RC queue pairs.
 *
 * The receiver owns the buffers and says where data may go; the sender writes it there:
 *
 *   recv end: irecv(slot) ---- credit {addr, rkey, nbytes, tag, seq} ----> send end's fifo[seq % N]
 *             (RDMA write with immediate = seq, on QP 0: the send end's receive completion says
 *              the credit has landed)
 *   send end: isend(seq) waits for credit seq, then RDMA-writes the message into addr, striped
 *             over the connection's QPs, one write with immediate = nbytes per QP (0 bytes when
 *             the message has no stripe for it); the receive end's request is done when every QP
 *             delivered its immediate for it (RC keeps each QP's completions in order).
 *
 * A message that does not fit the credit (longer, or another tag) is never written: the sender
 * writes the immediate IB_IMM_REFUSED on every QP instead, and both ends fail with
 * chorusRemoteError. Queue pairs are set up through a TCP side channel (the listener's handle
 * carries its QP numbers, LID, GID and PSN; connect sends the same back, so connect never waits
 * for accept), kept open as a liveness signal: its EOF is the peer's death, seen at once rather
 * than after the transport's retry timeout. Completion errors become chorusRemoteError naming the
 * peer, the QP and ibv_wc_status_str. The proxy sleeps on each comm's completion channel.
 *
 * GPU buffers (NET_PTR_CUDA / NET_PTR_DMABUF) are refused for now; the hook is ib_reg_mr below
 * (ibv_reg_dmabuf_mr with the dma-buf fd of the device allocation).
 */
#define _GNU_SOURCE
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "debug.h"
#include "fifo.h"
#include "net_ib_verbs.h"
#include "socket.h"

#define IB_MAGIC_HANDLE 0x31424943u /* "CIB1" */
#define IB_MAGIC_INFO 0x4f464e4942524843ull /* "CHRBINFO" */
#define IB_N NET_MAX_REQUESTS /* requests in flight per comm, and credit slots */
#define IB_IMM_REFUSED 0xffffffffu /* immediate of a refused message (no real size is this big) */
#define IB_STRIPE_ALIGN 128
#define IB_INFO_WAIT_NS                                                                            \
    2000000000ll /* a connection that does not send its info in 2 s is dropped */
#define IB_LIVENESS_EVERY 64 /* progress passes between two looks at the side channel */
#define IB_MEMLOCK_HINT " (is the locked-memory limit, `ulimit -l`, high enough?)"
/* The side channel's TCP keepalive: a host that vanished (power, cable) sends no FIN; after
 * 10 s idle, 5 probes 2 s apart find it gone, and the comm fails at its next progress. */
#define IB_KEEPIDLE_S 10
#define IB_KEEPINTVL_S 2
#define IB_KEEPCNT 5

enum { WR_DATA = 1, WR_CREDIT = 2, WR_REFUSED = 3 };

/* The listener's handle (fits NET_HANDLE_BYTES). */
typedef struct ib_handle {
    uint32_t magic;
    uint8_t nqps;
    uint8_t link_layer;
    uint8_t mtu;
    uint8_t pad0;
    uint32_t psn;
    uint16_t lid;
    uint16_t pad1;
    uint32_t qpn[IB_MAX_QPS];
    uint8_t gid[16];
    uint64_t nonce;
    sock_addr_t addr; /* the side channel */
    uint32_t pad2;
} ib_handle_t;
_Static_assert(sizeof(ib_handle_t) == 88, "ib_handle_t is a wire format");
_Static_assert(sizeof(ib_handle_t) <= NET_HANDLE_BYTES, "IB handle too large");

/* What the connector sends over the side channel. */
typedef struct ib_info {
    uint64_t magic;
    uint64_t nonce;
    uint32_t qpn[IB_MAX_QPS];
    uint32_t psn;
    uint16_t lid;
    uint8_t link_layer;
    uint8_t mtu;
    uint8_t gid[16];
    uint64_t fifo_addr; /* where credits go */
    uint32_t fifo_rkey;
    uint32_t nqps;
} ib_info_t;
_Static_assert(sizeof(ib_info_t) == 72, "ib_info_t is a wire format");

/* One credit: where message seq may be written. */
typedef struct ib_credit {
    uint64_t addr;
    uint32_t rkey;
    uint32_t nbytes;
    int32_t tag;
    uint32_t seq;
    uint64_t pad;
} ib_credit_t;
_Static_assert(sizeof(ib_credit_t) == 32, "ib_credit_t is a wire format");

/* A registration, shared by every reg_mr it covers (the registration cache). */
typedef struct ib_mr_entry {
    struct ib_mr_entry *next;
    struct ibv_pd *pd;
    uintptr_t base;
    size_t nbytes;
    struct ibv_mr *mr;
    int refs;
} ib_mr_entry_t;

typedef struct ib_ctx {
    net_config_t cfg;
    char hca[256];
    const ib_verbs_t *v;
    int nports;
    ib_port_t ports[IB_MAX_DEVS];
    sock_addr_t addr; /* side-channel listen address */
    ib_qp_opts_t qp_opts;
    pthread_mutex_t mr_lock;
    ib_mr_entry_t *mrs;
} ib_ctx_t;

struct ib_comm;

typedef struct ib_req {
    struct ib_comm *comm;
    uint64_t seq;
    char *data;
    size_t nbytes; /* isend: message size; irecv: room */
    int tag;
    ib_mr_entry_t *mh;
    int pending; /* send: write completions awaited; recv: immediates awaited */
    size_t got; /* irecv: the size the immediates carried */
} ib_req_t;

typedef struct ib_comm {
    ib_ctx_t *ctx;
    const ib_port_t *port;
    int is_send;
    int nqps;
    struct ibv_qp *qps[IB_MAX_QPS];
    uint32_t remote_qpn[IB_MAX_QPS];
    struct ibv_cq *cq;
    struct ibv_comp_channel *chan;
    int armed;
    int fd; /* side channel; -1 before connect/accept */
    uint32_t psn;
    char peer[96];
    ib_credit_t *fifo; /* send: where credits land; recv: credits staged for writing */
    struct ibv_mr *fifo_mr;
    uint64_t rfifo_addr; /* recv: the send end's fifo */
    uint32_t rfifo_rkey;
    ib_req_t reqs[IB_N];
    uint64_t nposted; /* isend/irecv accepted */
    uint64_t nreported; /* test() said done */
    uint64_t nwritten; /* send: messages whose writes are posted */
    uint64_t ncredits; /* send: credits arrived */
    uint64_t narrived[IB_MAX_QPS]; /* recv: immediates per QP */
    uint64_t moved; /* completions handled and writes posted: poll_fds sees progress by it */
    unsigned liveness;
    int failed;
    char why[384]; /* what failed it */
} ib_comm_t;

typedef struct ib_listen {
    ib_ctx_t *ctx;
    int fd;
    sock_addr_t addr;
    uint64_t nonce;
    ib_comm_t *comm; /* created at listen (its QPs are in the handle); accept hands it over */
} ib_listen_t;

static int64_t ib_deadline(const ib_ctx_t *ctx)
{
    return fifo_now_ns() + ctx->cfg.timeout_ms * 1000000;
}

static int ib_aborted(const ib_ctx_t *ctx)
{
    return ctx->cfg.abort_flag != NULL && __atomic_load_n(ctx->cfg.abort_flag, __ATOMIC_ACQUIRE);
}

/* ---- init, devices, properties ---- */

static chorusResult_t ib_init(const net_config_t *cfg, void **ctx_p)
{
    if (cfg->ib_qps < 1 || cfg->ib_qps > IB_MAX_QPS)
        return ERR(chorusInvalidArgument, SUB_NET,
                   "IB plugin: CHORUS_IB_QPS_PER_CONNECTION=%d is outside 1..%d", cfg->ib_qps,
                   IB_MAX_QPS);
    if (cfg->timeout_ms <= 0)
        return ERR(chorusInvalidArgument, SUB_NET, "IB plugin: timeout_ms %lld is not positive",
                   (long long)cfg->timeout_ms);
    ib_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: out of memory");
    ctx->cfg = *cfg;
    snprintf(ctx->hca, sizeof(ctx->hca), "%s", cfg->ib_hca ? cfg->ib_hca : "");
    ctx->cfg.ib_hca = ctx->hca;
    ctx->cfg.ifname_spec = NULL;
    ctx->cfg.ibverbs_path = NULL;
    ctx->qp_opts = (ib_qp_opts_t){cfg->ib_timeout, cfg->ib_retry_cnt, cfg->ib_tc, cfg->ib_sl};
    pthread_mutex_init(&ctx->mr_lock, NULL);
    chorusResult_t res = ib_verbs_load(cfg->ibverbs_path, &ctx->v);
    if (res == chorusSuccess && ctx->v != NULL)
        res = ib_open_ports(ctx->v, ctx->hca, cfg->ib_gid_index, ctx->ports, &ctx->nports);
    if (res == chorusSuccess && ctx->nports > 0) {
        char ifname[64];
        res = sock_pick_addr(cfg->ifname_spec ? cfg->ifname_spec : "", &ctx->addr, ifname,
                             sizeof(ifname));
        if (res != chorusSuccess)
            ib_close_ports(ctx->v, ctx->ports, ctx->nports);
    }
    if (res != chorusSuccess) {
        pthread_mutex_destroy(&ctx->mr_lock);
        free(ctx);
        return res;
    }
    *ctx_p = ctx;
    return chorusSuccess;
}

static chorusResult_t ib_devices(void *vctx, int *ndev_p)
{
    *ndev_p = ((ib_ctx_t *)vctx)->nports;
    return chorusSuccess;
}

static chorusResult_t ib_check_dev(const ib_ctx_t *ctx, int dev)
{
    if (dev < 0 || dev >= ctx->nports)
        return ERR(chorusInvalidArgument, SUB_NET, "IB plugin: device %d is not one of the %d", dev,
                   ctx->nports);
    return chorusSuccess;
}

static chorusResult_t ib_get_properties(void *vctx, int dev, net_props_t *props_p)
{
    ib_ctx_t *ctx = vctx;
    CHECK(ib_check_dev(ctx, dev));
    const ib_port_t *p = &ctx->ports[dev];
    net_props_t props;
    memset(&props, 0, sizeof(props));
    snprintf(props.name, sizeof(props.name), "%s", p->name);
    char link[128];
    snprintf(link, sizeof(link), "/sys/class/infiniband/%s/device", p->name);
    char *real = realpath(link, NULL);
    if (real != NULL) {
        snprintf(props.pci_path, sizeof(props.pci_path), "%s", real);
        free(real);
    }
    props.speed_mbps = ctx->cfg.speed_mbps > 0 ? ctx->cfg.speed_mbps : p->speed_mbps;
    props.latency_us = 2.0;
    props.port = p->port;
    props.max_comms = p->max_qp > 0 ? p->max_qp / ctx->cfg.ib_qps : 0;
    props.ptr_support = NET_PTR_HOST;
    *props_p = props;
    return chorusSuccess;
}

/* ---- comms: queues, credits, failure ---- */

/* Fail the comm (first failure wins) and return chorusRemoteError with the message. */
static chorusResult_t ib_fail(ib_comm_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static chorusResult_t ib_fail(ib_comm_t *c, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->failed = 1;
    snprintf(c->why, sizeof(c->why), "%s", msg);
    return ERR(chorusRemoteError, SUB_NET, "IB plugin: %s %s (%s:%d): %s",
               c->is_send ? "connection to" : "connection from", c->peer, c->port->name,
               c->port->port, msg);
}

static chorusResult_t ib_post_recv(ib_comm_t *c, int q)
{
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uint64_t)q << 2; /* kind 0: a receive */
    int err = c->qps[q]->context->ops.post_recv(c->qps[q], &wr, &bad);
    if (err != 0)
        return ib_fail(c, "ibv_post_recv on QP 0x%x: %s", c->qps[q]->qp_num, strerror(err));
    return chorusSuccess;
}

static void ib_comm_free(ib_comm_t *c)
{
    const ib_verbs_t *v = c->ctx->v;
    for (int q = c->nqps - 1; q >= 0; q--)
        if (c->qps[q] != NULL && v->destroy_qp(c->qps[q]) != 0)
            WARN(SUB_NET, "IB plugin: ibv_destroy_qp failed");
    /* No completion comes once the QPs are gone: ack the last event, or destroy_cq would wait
     * for it. */
    if (c->armed) {
        struct ibv_cq *cq;
        void *cq_ctx;
        while (v->get_cq_event(c->chan, &cq, &cq_ctx) == 0)
            v->ack_cq_events(cq, 1);
    }
    if (c->cq != NULL && v->destroy_cq(c->cq) != 0)
        WARN(SUB_NET, "IB plugin: ibv_destroy_cq failed");
    if (c->chan != NULL && v->destroy_comp_channel(c->chan) != 0)
        WARN(SUB_NET, "IB plugin: ibv_destroy_comp_channel failed");
    if (c->fifo_mr != NULL && v->dereg_mr(c->fifo_mr) != 0)
        WARN(SUB_NET, "IB plugin: ibv_dereg_mr of the credit fifo failed");
    free(c->fifo);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

/* A comm with its completion channel, CQ, nqps QPs in INIT with receives posted, and its fifo. */
static chorusResult_t ib_comm_alloc(ib_ctx_t *ctx, int dev, int is_send, int nqps,
                                    ib_comm_t **comm_p)
{
    const ib_verbs_t *v = ctx->v;
    ib_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: out of memory");
    c->ctx = ctx;
    c->port = &ctx->ports[dev];
    c->is_send = is_send;
    c->nqps = nqps;
    c->fd = -1;
    snprintf(c->peer, sizeof(c->peer), "(not connected)");
    chorusResult_t res = chorusSuccess;
    uint32_t psn;
    if (getrandom(&psn, sizeof(psn), 0) != sizeof(psn)) {
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: getrandom failed: %s", strerror(errno));
        goto err;
    }
    c->psn = psn & 0xffffff;
    struct ibv_context *dctx = c->port->context;
    c->chan = v->create_comp_channel(dctx);
    if (c->chan == NULL) {
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_create_comp_channel on %s: %s",
                  c->port->name, strerror(errno));
        goto err;
    }
    int fl = fcntl(c->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(c->chan->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: completion channel fd: %s",
                  strerror(errno));
        goto err;
    }
    /* Per QP: 2 IB_N sends (data or credits, and a refusal), 2 IB_N receives. */
    int cqe = 4 * IB_N * nqps + 16;
    c->cq = v->create_cq(dctx, cqe, c, c->chan, 0);
    if (c->cq == NULL) {
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_create_cq(%d) on %s: %s%s", cqe,
                  c->port->name, strerror(errno), IB_MEMLOCK_HINT);
        goto err;
    }
    for (int q = 0; q < nqps; q++) {
        struct ibv_qp_init_attr qa;
        memset(&qa, 0, sizeof(qa));
        qa.send_cq = c->cq;
        qa.recv_cq = c->cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = 2 * IB_N; /* a credit's slot frees only when its ack is polled */
        qa.cap.max_recv_wr = 2 * IB_N;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        c->qps[q] = v->create_qp(c->port->pd, &qa);
        if (c->qps[q] == NULL) {
            res = ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_create_qp (RC) on %s: %s%s",
                      c->port->name, strerror(errno), IB_MEMLOCK_HINT);
            goto err;
        }
        CHECK_GOTO(ib_qp_init(v, c->qps[q], c->port), res, err);
        for (int i = 0; i < 2 * IB_N; i++)
            CHECK_GOTO(ib_post_recv(c, q), res, err);
    }
    if (posix_memalign((void **)&c->fifo, 4096, IB_N * sizeof(ib_credit_t)) != 0) {
        c->fifo = NULL;
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: out of memory");
        goto err;
    }
    memset(c->fifo, 0, IB_N * sizeof(ib_credit_t));
    /* The send end's fifo takes the peer's credit writes; the receive end's is only read. */
    int access = is_send ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
    c->fifo_mr = v->reg_mr(c->port->pd, c->fifo, IB_N * sizeof(ib_credit_t), access);
    if (c->fifo_mr == NULL) {
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_reg_mr of the credit fifo: %s%s",
                  strerror(errno), IB_MEMLOCK_HINT);
        goto err;
    }
    *comm_p = c;
    return chorusSuccess;
err:
    ib_comm_free(c);
    return res;
}

static ib_peer_addr_t ib_peer(uint32_t qpn, uint32_t psn, uint16_t lid, uint8_t ll, uint8_t mtu,
                              const uint8_t gid[16])
{
    ib_peer_addr_t p;
    memset(&p, 0, sizeof(p));
    p.qpn = qpn;
    p.psn = psn;
    p.lid = lid;
    p.link_layer = ll;
    p.mtu = mtu;
    memcpy(p.gid.raw, gid, 16);
    return p;
}

/* ---- listen, connect, accept ---- */

/* The side channel outlives the handshake as a liveness signal: non-blocking, with keepalive. */
static void ib_side_channel(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int on = 1, idle = IB_KEEPIDLE_S, intvl = IB_KEEPINTVL_S, cnt = IB_KEEPCNT;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0)
        INFO(SUB_NET,
             "IB plugin: side-channel keepalive not set (%s): a vanished host is seen "
             "only by the transport's retries",
             strerror(errno));
}

static chorusResult_t ib_listen(void *vctx, int dev, net_handle_t *handle_p, void **listen_comm_p)
{
    ib_ctx_t *ctx = vctx;
    CHECK(ib_check_dev(ctx, dev));
    ib_listen_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: out of memory");
    l->ctx = ctx;
    l->fd = -1;
    chorusResult_t res;
    if (getrandom(&l->nonce, sizeof(l->nonce), 0) != sizeof(l->nonce)) {
        res = ERR(chorusSystemError, SUB_NET, "IB plugin: getrandom failed: %s", strerror(errno));
        goto err;
    }
    CHECK_GOTO(ib_comm_alloc(ctx, dev, 0, ctx->cfg.ib_qps, &l->comm), res, err);
    CHECK_GOTO(sock_listen(&ctx->addr, &l->fd, &l->addr), res, err);
    const ib_port_t *p = l->comm->port;
    ib_handle_t h;
    memset(&h, 0, sizeof(h));
    h.magic = IB_MAGIC_HANDLE;
    h.nqps = (uint8_t)l->comm->nqps;
    h.link_layer = (uint8_t)p->link_layer;
    h.mtu = (uint8_t)p->mtu;
    h.psn = l->comm->psn;
    h.lid = p->lid;
    for (int q = 0; q < l->comm->nqps; q++)
        h.qpn[q] = l->comm->qps[q]->qp_num;
    memcpy(h.gid, p->gid.raw, 16);
    h.nonce = l->nonce;
    h.addr = l->addr;
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &h, sizeof(h));
    *listen_comm_p = l;
    return chorusSuccess;
err:
    if (l->comm != NULL)
        ib_comm_free(l->comm);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
    return res;
}

static chorusResult_t ib_connect(void *vctx, int dev, const net_handle_t *handle,
                                 void **send_comm_p)
{
    ib_ctx_t *ctx = vctx;
    CHECK(ib_check_dev(ctx, dev));
    ib_handle_t h;
    memcpy(&h, handle->bytes, sizeof(h));
    if (h.magic != IB_MAGIC_HANDLE || h.nqps < 1 || h.nqps > IB_MAX_QPS)
        return ERR(chorusInvalidArgument, SUB_NET,
                   "IB plugin: the handle is not an IB listener's (magic 0x%x, %u QPs): do both "
                   "ranks run with the same CHORUS_NET?",
                   h.magic, h.nqps);
    /* The listener's QP count wins, so both ends stripe alike whatever this side's settings. */
    ib_comm_t *c;
    CHECK(ib_comm_alloc(ctx, dev, 1, h.nqps, &c));
    sock_addr_str(&h.addr, c->peer, sizeof(c->peer));
    chorusResult_t res;
    for (int q = 0; q < c->nqps; q++) {
        ib_peer_addr_t peer = ib_peer(h.qpn[q], h.psn, h.lid, h.link_layer, h.mtu, h.gid);
        CHECK_GOTO(ib_qp_connect(ctx->v, c->qps[q], c->port, &peer, c->psn, &ctx->qp_opts), res,
                   err);
        c->remote_qpn[q] = h.qpn[q];
    }
    ib_info_t info;
    memset(&info, 0, sizeof(info));
    info.magic = IB_MAGIC_INFO;
    info.nonce = h.nonce;
    for (int q = 0; q < c->nqps; q++)
        info.qpn[q] = c->qps[q]->qp_num;
    info.psn = c->psn;
    info.lid = c->port->lid;
    info.link_layer = (uint8_t)c->port->link_layer;
    info.mtu = (uint8_t)c->port->mtu;
    memcpy(info.gid, c->port->gid.raw, 16);
    info.fifo_addr = (uint64_t)(uintptr_t)c->fifo;
    info.fifo_rkey = c->fifo_mr->rkey;
    info.nqps = (uint32_t)c->nqps;
    int64_t deadline = ib_deadline(ctx);
    CHECK_GOTO(sock_connect(&h.addr, deadline, ctx->cfg.abort_flag, &c->fd), res, err);
    /* 72 bytes into a fresh socket's empty buffer: this never waits for accept. */
    CHECK_GOTO(sock_send_all(c->fd, &info, sizeof(info), deadline), res, err);
    ib_side_channel(c->fd);
    TRACE(SUB_NET, "IB plugin: connected to %s, %d QP(s), first QP 0x%x -> 0x%x", c->peer, c->nqps,
          c->qps[0]->qp_num, c->remote_qpn[0]);
    *send_comm_p = c;
    return chorusSuccess;
err:
    ib_comm_free(c);
    return res;
}

/* Read one connector's info within IB_INFO_WAIT_NS; 1 when it proves the nonce. */
static int ib_read_info(ib_listen_t *l, int fd, ib_info_t *info)
{
    int64_t deadline = fifo_now_ns() + IB_INFO_WAIT_NS;
    if (sock_recv_until(fd, info, sizeof(*info), deadline, l->ctx->cfg.abort_flag) != chorusSuccess)
        return 0;
    return info->magic == IB_MAGIC_INFO && info->nonce == l->nonce &&
           info->nqps == (uint32_t)l->comm->nqps;
}

static chorusResult_t ib_accept(void *vl, void **recv_comm_p)
{
    ib_listen_t *l = vl;
    ib_ctx_t *ctx = l->ctx;
    int64_t deadline = ib_deadline(ctx);
    char me[80];
    sock_addr_str(&l->addr, me, sizeof(me));
    ib_info_t info;
    int fd = -1;
    for (;;) {
        if (ib_aborted(ctx))
            return ERR(chorusRemoteError, SUB_NET, "IB plugin: accept on %s stopped: aborted", me);
        int64_t now = fifo_now_ns();
        if (now >= deadline)
            return ERR(chorusTimeout, SUB_NET,
                       "IB plugin: no connector reached %s within %lld ms (is the peer alive and "
                       "able to reach this address?)",
                       me, (long long)ctx->cfg.timeout_ms);
        struct pollfd pfd = {l->fd, POLLIN, 0};
        int64_t left_ms = (deadline - now) / 1000000 + 1;
        if (poll(&pfd, 1, left_ms < 100 ? (int)left_ms : 100) <= 0)
            continue;
        fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (ib_read_info(l, fd, &info))
            break;
        WARN(SUB_NET, "IB plugin: listener %s dropped a connection that did not prove its nonce",
             me);
        close(fd);
    }
    ib_comm_t *c = l->comm;
    c->fd = fd;
    ib_side_channel(fd);
    sock_addr_t peer;
    socklen_t len = sizeof(peer);
    memset(&peer, 0, sizeof(peer));
    getpeername(fd, &peer.sa, &len);
    sock_addr_str(&peer, c->peer, sizeof(c->peer));
    for (int q = 0; q < c->nqps; q++) {
        ib_peer_addr_t pa =
            ib_peer(info.qpn[q], info.psn, info.lid, info.link_layer, info.mtu, info.gid);
        CHECK(ib_qp_connect(ctx->v, c->qps[q], c->port, &pa, c->psn, &ctx->qp_opts));
        c->remote_qpn[q] = info.qpn[q];
    }
    c->rfifo_addr = info.fifo_addr;
    c->rfifo_rkey = info.fifo_rkey;
    TRACE(SUB_NET, "IB plugin: accepted %s, %d QP(s), first QP 0x%x -> 0x%x", c->peer, c->nqps,
          c->qps[0]->qp_num, c->remote_qpn[0]);
    l->comm = NULL;
    *recv_comm_p = c;
    return chorusSuccess;
}

/* ---- the registration cache ---- */

static chorusResult_t ib_reg_mr(void *comm, void *data, size_t nbytes, int ptr_type,
                                void **mhandle_p)
{
    ib_comm_t *c = comm;
    ib_ctx_t *ctx = c->ctx;
    if (ptr_type != NET_PTR_HOST)
        /* GPU buffers: register the allocation's dma-buf fd with ibv_reg_dmabuf_mr here. */
        return ERR(chorusInvalidArgument, SUB_NET,
                   "IB plugin: cannot register buffer %p (%zu bytes) of pointer type 0x%x: only "
                   "host memory (NET_PTR_HOST) for now",
                   data, nbytes, ptr_type);
    uintptr_t page = 4096;
    uintptr_t base = (uintptr_t)data & ~(page - 1);
    uintptr_t end = ((uintptr_t)data + nbytes + page - 1) & ~(page - 1);
    if (end == base)
        end = base + page;
    pthread_mutex_lock(&ctx->mr_lock);
    ib_mr_entry_t *e;
    for (e = ctx->mrs; e != NULL; e = e->next)
        if (e->pd == c->port->pd && e->base <= base && end <= e->base + e->nbytes)
            break;
    if (e != NULL) {
        e->refs++;
        pthread_mutex_unlock(&ctx->mr_lock);
        *mhandle_p = e;
        return chorusSuccess;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        pthread_mutex_unlock(&ctx->mr_lock);
        return ERR(chorusSystemError, SUB_NET, "IB plugin: out of memory");
    }
    e->pd = c->port->pd;
    e->base = base;
    e->nbytes = end - base;
    e->mr = ctx->v->reg_mr(c->port->pd, (void *)base, e->nbytes,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (e->mr == NULL) {
        int err = errno;
        pthread_mutex_unlock(&ctx->mr_lock);
        free(e);
        return ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_reg_mr(%p, %zu bytes) on %s: %s%s",
                   data, nbytes, c->port->name, strerror(err), IB_MEMLOCK_HINT);
    }
    e->refs = 1;
    e->next = ctx->mrs;
    ctx->mrs = e;
    pthread_mutex_unlock(&ctx->mr_lock);
    *mhandle_p = e;
    return chorusSuccess;
}

static chorusResult_t ib_dereg_mr(void *comm, void *mhandle)
{
    ib_ctx_t *ctx = ((ib_comm_t *)comm)->ctx;
    ib_mr_entry_t *e = mhandle;
    pthread_mutex_lock(&ctx->mr_lock);
    if (--e->refs > 0) {
        pthread_mutex_unlock(&ctx->mr_lock);
        return chorusSuccess;
    }
    for (ib_mr_entry_t **pp = &ctx->mrs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&ctx->mr_lock);
    int err = ctx->v->dereg_mr(e->mr);
    free(e);
    if (err != 0)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_dereg_mr: %s", strerror(err));
    return chorusSuccess;
}

/* ---- the data path ---- */

static chorusResult_t ib_post_write(ib_comm_t *c, int q, uint64_t wr_id, void *local,
                                    uint32_t nbytes, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                                    uint32_t imm)
{
    struct ibv_sge sge = {(uint64_t)(uintptr_t)local, nbytes, lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = nbytes > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    int err = c->qps[q]->context->ops.post_send(c->qps[q], &wr, &bad);
    if (err != 0)
        return ib_fail(c, "ibv_post_send on QP 0x%x: %s", c->qps[q]->qp_num, strerror(err));
    return chorusSuccess;
}

/* The send end has credit for message r: write it, or refuse it when it does not fit. */
static chorusResult_t ib_write_msg(ib_comm_t *c, ib_req_t *r)
{
    const ib_credit_t *cr = &c->fifo[r->seq % IB_N];
    if (cr->seq != (uint32_t)r->seq)
        return ib_fail(c, "credit %u arrived where credit %u was due: the peer broke the protocol",
                       cr->seq, (uint32_t)r->seq);
    if (r->nbytes > cr->nbytes || r->tag != cr->tag) {
        for (int q = 0; q < c->nqps; q++)
            CHECK(ib_post_write(c, q, WR_REFUSED, NULL, 0, 0, cr->addr, cr->rkey, IB_IMM_REFUSED));
        return ib_fail(c,
                       "message %llu (%zu bytes, tag %d) does not fit the peer's receive (%u "
                       "bytes, tag %d): not sent",
                       (unsigned long long)r->seq, r->nbytes, r->tag, cr->nbytes, cr->tag);
    }
    size_t stripe = r->nbytes;
    if (c->nqps > 1) {
        stripe = (r->nbytes + (size_t)c->nqps - 1) / (size_t)c->nqps;
        stripe = (stripe + IB_STRIPE_ALIGN - 1) / IB_STRIPE_ALIGN * IB_STRIPE_ALIGN;
    }
    for (int q = 0; q < c->nqps; q++) {
        size_t off = (size_t)q * stripe;
        size_t len = off < r->nbytes ? r->nbytes - off : 0;
        if (len > stripe)
            len = stripe;
        if (len == 0)
            off = 0;
        CHECK(ib_post_write(c, q, r->seq << 2 | WR_DATA, r->data + off, (uint32_t)len,
                            r->mh->mr->lkey, cr->addr + off, cr->rkey, (uint32_t)r->nbytes));
    }
    r->pending = c->nqps;
    return chorusSuccess;
}

static int ib_qp_index(const ib_comm_t *c, uint32_t qp_num)
{
    for (int q = 0; q < c->nqps; q++)
        if (c->qps[q]->qp_num == qp_num)
            return q;
    return -1;
}

static chorusResult_t ib_handle_wc(ib_comm_t *c, const struct ibv_wc *wc)
{
    int q = ib_qp_index(c, wc->qp_num);
    if (wc->status != IBV_WC_SUCCESS) {
        unsigned kind = (unsigned)(wc->wr_id & 3);
        const char *what = kind == WR_DATA      ? "data write"
                           : kind == WR_CREDIT  ? "credit write"
                           : kind == WR_REFUSED ? "refusal"
                                                : "receive";
        const char *hint = wc->status == IBV_WC_RETRY_EXC_ERR
                               ? ": the peer did not acknowledge (a dead host, or ports not on one "
                                 "fabric: check CHORUS_IB_HCA and CHORUS_IB_GID_INDEX)"
                               : "";
        return ib_fail(c,
                       "%s completed with error on QP 0x%x (peer QP 0x%x): %s (status %d, "
                       "vendor error 0x%x)%s",
                       what, wc->qp_num, q >= 0 ? c->remote_qpn[q] : 0,
                       c->ctx->v->wc_status_str(wc->status), (int)wc->status, wc->vendor_err, hint);
    }
    if (q < 0)
        return ib_fail(c, "completion for QP 0x%x, not one of this connection's", wc->qp_num);
    c->moved++;
    if (wc->opcode == IBV_WC_RDMA_WRITE) {
        if ((wc->wr_id & 3) == WR_DATA)
            c->reqs[(wc->wr_id >> 2) % IB_N].pending--;
        return chorusSuccess;
    }
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM))
        return ib_fail(c, "unexpected completion opcode %d on QP 0x%x", (int)wc->opcode,
                       wc->qp_num);
    CHECK(ib_post_recv(c, q));
    uint32_t imm = ntohl(wc->imm_data);
    if (c->is_send) {
        if (q != 0 || imm != (uint32_t)c->ncredits)
            return ib_fail(c, "credit %u arrived on QP %d where credit %u was due", imm, q,
                           (uint32_t)c->ncredits);
        c->ncredits++;
        return chorusSuccess;
    }
    if (imm == IB_IMM_REFUSED)
        return ib_fail(c, "the peer refused to send a message: it did not fit the receive posted "
                          "here (longer, or another tag; its log says which)");
    uint64_t k = c->narrived[q]++;
    if (k >= c->nposted)
        return ib_fail(c, "data arrived on QP %d for message %llu, which has no receive", q,
                       (unsigned long long)k);
    ib_req_t *r = &c->reqs[k % IB_N];
    if (imm > r->nbytes)
        return ib_fail(c, "message %llu of %u bytes overran its %zu-byte receive",
                       (unsigned long long)k, imm, r->nbytes);
    r->got = imm;
    r->pending--;
    return chorusSuccess;
}

static chorusResult_t ib_poll_all(ib_comm_t *c) /* every completion the CQ holds */
{
    struct ibv_wc wc[16];
    int n;
    do {
        n = c->cq->context->ops.poll_cq(c->cq, 16, wc);
        if (n < 0)
            return ib_fail(c, "ibv_poll_cq failed (%d)", n);
        for (int i = 0; i < n; i++)
            CHECK(ib_handle_wc(c, &wc[i]));
    } while (n == 16);
    return chorusSuccess;
}

/* Look at the side channel now and then: EOF is the peer gone, after the completions queued
 * here are taken (a peer may finish and close right after its last message landed). */
static chorusResult_t ib_check_alive(ib_comm_t *c, int now)
{
    if (!now && ++c->liveness % IB_LIVENESS_EVERY != 0)
        return chorusSuccess;
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0) {
        CHECK(ib_poll_all(c));
        return ib_fail(c, "the peer closed the connection (process exited or closed its end)");
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return ib_fail(c, "side channel: %s", strerror(errno));
    return chorusSuccess;
}

/* Take completion events, handle every completion, post the writes credits allow. */
static chorusResult_t ib_progress(ib_comm_t *c)
{
    if (c->failed)
        return ERR(chorusRemoteError, SUB_NET, "IB plugin: connection %s %s failed earlier: %s",
                   c->is_send ? "to" : "from", c->peer, c->why);
    const ib_verbs_t *v = c->ctx->v;
    if (c->armed) {
        struct ibv_cq *cq;
        void *cq_ctx;
        while (v->get_cq_event(c->chan, &cq, &cq_ctx) == 0) {
            v->ack_cq_events(cq, 1);
            c->armed = 0;
        }
    }
    CHECK(ib_poll_all(c));
    while (c->is_send && c->nwritten < c->nposted && c->nwritten < c->ncredits) {
        CHECK(ib_write_msg(c, &c->reqs[c->nwritten % IB_N]));
        c->nwritten++;
        c->moved++;
    }
    return ib_check_alive(c, 0);
}

static chorusResult_t ib_check_post(ib_comm_t *c, const void *data, size_t nbytes,
                                    const ib_mr_entry_t *mh)
{
    if (mh == NULL || (uintptr_t)data < mh->base ||
        (uintptr_t)data + nbytes > mh->base + mh->nbytes || nbytes >= IB_IMM_REFUSED)
        return ERR(chorusInvalidArgument, SUB_NET,
                   "IB plugin: %s of %zu bytes at %p is outside its registration (%p, %zu "
                   "bytes): register the buffer with reg_mr first",
                   c->is_send ? "isend" : "irecv", nbytes, data, mh ? (void *)mh->base : NULL,
                   mh ? mh->nbytes : 0);
    return chorusSuccess;
}

static ib_req_t *ib_new_req(ib_comm_t *c, void *data, size_t nbytes, int tag, ib_mr_entry_t *mh)
{
    ib_req_t *r = &c->reqs[c->nposted % IB_N];
    memset(r, 0, sizeof(*r));
    r->comm = c;
    r->seq = c->nposted++;
    r->data = data;
    r->nbytes = nbytes;
    r->tag = tag;
    r->mh = mh;
    r->pending = c->nqps;
    return r;
}

static chorusResult_t ib_isend(void *send_comm, void *data, size_t nbytes, int tag, void *mhandle,
                               void **request_p)
{
    ib_comm_t *c = send_comm;
    CHECK(ib_check_post(c, data, nbytes, mhandle));
    ib_req_t *r = NULL;
    if (c->nposted - c->nreported < IB_N)
        r = ib_new_req(c, data, nbytes, tag, mhandle);
    CHECK(ib_progress(c)); /* writes it at once when its credit is here */
    *request_p = r;
    return chorusSuccess;
}

static chorusResult_t ib_irecv(void *recv_comm, void *data, size_t nbytes, int tag, void *mhandle,
                               void **request_p)
{
    ib_comm_t *c = recv_comm;
    CHECK(ib_check_post(c, data, nbytes, mhandle));
    *request_p = NULL;
    CHECK(ib_progress(c));
    if (c->nposted - c->nreported >= IB_N)
        return chorusSuccess;
    ib_mr_entry_t *mh = mhandle;
    ib_req_t *r = ib_new_req(c, data, nbytes, tag, mh);
    ib_credit_t *cr = &c->fifo[r->seq % IB_N];
    *cr = (ib_credit_t){
        (uint64_t)(uintptr_t)data, mh->mr->rkey, (uint32_t)nbytes, tag, (uint32_t)r->seq, 0};
    CHECK(ib_post_write(c, 0, WR_CREDIT, cr, sizeof(*cr), c->fifo_mr->lkey,
                        c->rfifo_addr + (r->seq % IB_N) * sizeof(*cr), c->rfifo_rkey,
                        (uint32_t)r->seq));
    *request_p = r;
    return chorusSuccess;
}

/* A request done before its connection failed (a peer closed after it) is still done. */
static chorusResult_t ib_test(void *request, int *done_p, size_t *size_p)
{
    ib_req_t *r = request;
    ib_comm_t *c = r->comm;
    chorusResult_t res = c->failed ? chorusRemoteError : ib_progress(c);
    int done = r->pending == 0 && r->seq == c->nreported && (!c->is_send || r->seq < c->nwritten);
    *done_p = done;
    if (done) {
        *size_p = c->is_send ? r->nbytes : r->got;
        c->nreported++;
        return chorusSuccess;
    }
    return res == chorusSuccess ? res : ib_progress(c); /* failed: "failed earlier" and why */
}

/* The completion channel (armed here, then the CQ polled once more so that nothing that came
 * before the arming is missed) and the side channel. -1 when there is progress to make now. */
static int ib_poll_fds(void *comm, struct pollfd *fds, int max)
{
    ib_comm_t *c = comm;
    if (max < 2 || c->failed)
        return -1;
    if (!c->armed) {
        if (c->cq->context->ops.req_notify_cq(c->cq, 0) != 0)
            return -1;
        c->armed = 1;
    }
    uint64_t moved = c->moved;
    if (ib_progress(c) != chorusSuccess || c->moved != moved || !c->armed ||
        ib_check_alive(c, 1) != chorusSuccess)
        return -1;
    fds[0] = (struct pollfd){.fd = c->chan->fd, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = c->fd, .events = POLLIN};
    return 2;
}

static void ib_close_comm(void *comm)
{
    ib_comm_free(comm);
}

static void ib_close_listen(void *listen_comm)
{
    ib_listen_t *l = listen_comm;
    if (l->comm != NULL)
        ib_comm_free(l->comm);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
}

static void ib_finalize(void *vctx)
{
    ib_ctx_t *ctx = vctx;
    while (ctx->mrs != NULL) {
        ib_mr_entry_t *e = ctx->mrs;
        WARN(SUB_NET, "IB plugin: registration %p (%zu bytes) still held at finalize",
             (void *)e->base, e->nbytes);
        ctx->mrs = e->next;
        ctx->v->dereg_mr(e->mr);
        free(e);
    }
    if (ctx->v != NULL)
        ib_close_ports(ctx->v, ctx->ports, ctx->nports);
    pthread_mutex_destroy(&ctx->mr_lock);
    free(ctx);
}

const net_plugin_t net_ib_plugin = {
    .name = "IB",
    .init = ib_init,
    .devices = ib_devices,
    .get_properties = ib_get_properties,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .poll_fds = ib_poll_fds,
    .close_send = ib_close_comm,
    .close_recv = ib_close_comm,
    .close_listen = ib_close_listen,
    .finalize = ib_finalize,
};
