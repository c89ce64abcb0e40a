/*
 * softverbs_wire.c: the data path of softverbs (the libibverbs emulator of softverbs.c):
 * post_send and post_recv, the error paths of a QP, SOFTVERBS_FAULT injection, and the per-context
 * NIC thread that carries RC messages between endpoints with an acknowledged protocol.
 *
 * Each context is an endpoint: an abstract Unix stream socket "\0softverbs-<uid>-<lid>", served
 * by one NIC thread that owns every connection (non-blocking, with output queues, so two NIC
 * threads never wait on each other). A requester opens one connection per destination endpoint
 * and sends requests on it; the responder answers each on the same connection:
 *
 *   requester QP                              responder QP (in its own process)
 *   post_send: payload copied, PSN p  --REQ-->  p == expected PSN? else dropped, no answer
 *                                               checks; data placed; recv completion; PSN += n
 *   signaled: completion, in order    <--ACK--  or NAK: RNR (no recv posted), access, length
 *   no answer for (retry_cnt+1) x 4.096 us x 2^timeout: RETRY_EXC_ERR, QP to error
 *
 * After an RNR NAK the requester resends from that message (the responder dropped what followed
 * it) once the RNR delay has passed. The stream never loses a packet, so a timeout means the
 * peer is gone, dark or stopped, and nothing is retransmitted: the timer just runs out.
 */
#define _GNU_SOURCE
#include "softverbs_int.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SV_MAGIC 0x53565731u /* "SVW1" */
#define SV_OUT_HIGH (4u << 20) /* queue no new request on a connection with more pending */
#define SV_READ_BUDGET (8u << 20) /* bytes read from one connection per round */
#define MS 1000000ull

enum { SV_REQ = 1, SV_ACK = 2 };
enum { SV_ACK_OK, SV_NAK_RNR, SV_NAK_ACCESS, SV_NAK_INV_REQ, SV_NAK_OP };

/* Every packet; a request is followed by len payload bytes, an answer by none. */
struct sv_hdr {
    uint32_t magic;
    uint8_t type;
    uint8_t op; /* request: enum ibv_wr_opcode; answer: SV_ACK_OK or a NAK */
    uint16_t src_lid;
    uint32_t src_qpn;
    uint32_t dst_qpn;
    uint32_t psn;
    uint32_t npkts; /* request: PSNs it spans; RNR NAK: the responder's min_rnr_timer */
    uint32_t imm; /* __be32, passed through untouched */
    uint32_t rkey;
    uint64_t raddr;
    uint64_t len;
} __attribute__((packed));
_Static_assert(sizeof(struct sv_hdr) == 48, "softverbs wire header is 48 bytes");

struct sv_conn {
    struct sv_conn *next;
    int fd, outgoing, dead, blocked, pidx;
    uint16_t lid; /* outgoing: the peer endpoint */
    char *in, *out;
    size_t in_off, in_len, in_cap, out_off, out_len, out_cap;
};

static pthread_mutex_t g_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_env g_faults; /* SOFTVERBS_FAULT as read by the last ibv_open_device */
static uint64_t g_posts; /* post_send calls of this process */
static int g_dark; /* a drop fault fired: every endpoint of the process is dark */
static uint32_t g_lid_seq;

void sv_faults_set(const struct sv_env *e)
{
    pthread_mutex_lock(&g_fault_lock);
    g_faults = *e;
    pthread_mutex_unlock(&g_fault_lock);
}

int sv_dark(struct sv_ctx *c)
{
    return c->port_down || __atomic_load_n(&g_dark, __ATOMIC_ACQUIRE);
}

/* ---- GIDs: both forms embed the endpoint's LID ----------------------------------------------- */

/* Index 0/1: fe80::0253:56ff:fe00:<lid>; index 2/3: ::ffff:127.83.<lid hi>.<lid lo>. */
void sv_gid_make(uint16_t lid, int index, union ibv_gid *g)
{
    static const uint8_t ll[14] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x53, 0x56, 0xff, 0xfe, 0};
    static const uint8_t v4[14] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 83};
    memcpy(g->raw, index < 2 ? ll : v4, 14);
    g->raw[14] = (uint8_t)(lid >> 8);
    g->raw[15] = (uint8_t)lid;
}

/* The endpoint a GID names, or 0 if it is not a softverbs GID. */
uint16_t sv_gid_lid(const union ibv_gid *g)
{
    uint16_t lid = (uint16_t)(g->raw[14] << 8 | g->raw[15]);
    union ibv_gid a, b;
    sv_gid_make(lid, 0, &a);
    sv_gid_make(lid, 2, &b);
    if (!lid || lid > SV_LID_MAX || (memcmp(a.raw, g->raw, 16) && memcmp(b.raw, g->raw, 16)))
        return 0;
    return lid;
}

/* ---- completions of the send and receive queues ---------------------------------------------- */

static void wc_send(struct sv_qp *q, const struct sv_swqe *w, enum ibv_wc_status st,
                    struct ibv_wc *wc)
{
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = w->wr_id;
    wc->status = st;
    wc->opcode = w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND
                                                                               : IBV_WC_RDMA_WRITE;
    wc->vendor_err = st == IBV_WC_SUCCESS || st == IBV_WC_WR_FLUSH_ERR ? 0 : 0x100u + st;
    wc->byte_len = st == IBV_WC_SUCCESS ? w->len : 0;
    wc->qp_num = q->qp.qp_num;
}

static void wc_recv(struct sv_qp *q, uint64_t wr_id, enum ibv_wc_status st, struct ibv_wc *wc)
{
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = wr_id;
    wc->status = st;
    wc->opcode = IBV_WC_RECV;
    wc->vendor_err = st == IBV_WC_SUCCESS || st == IBV_WC_WR_FLUSH_ERR ? 0 : 0x100u + st;
    wc->qp_num = q->qp.qp_num;
}

/*
 * Error state: every outstanding send and receive completes with WR_FLUSH_ERR, in order. The
 * indices move before each push: a CQ overrun inside sv_cq_push flushes again, re-entering here.
 */
void sv_qp_flush(struct sv_ctx *c, struct sv_qp *q)
{
    struct ibv_wc wc;
    q->qp.state = q->a.qp_state = IBV_QPS_ERR;
    q->rnr_until = 0;
    q->rnr_single = 0;
    q->sq_head = q->sq_una; /* executed unsignaled requests: slots released without completions */
    while (q->sq_una != q->sq_tail) {
        struct sv_swqe *w = &q->sq[q->sq_una % q->sq_cap];
        wc_send(q, w, IBV_WC_WR_FLUSH_ERR, &wc);
        free(w->data);
        w->data = NULL;
        q->sq_head = q->sq_next = ++q->sq_una;
        sv_cq_push(c, (struct sv_cq *)q->qp.send_cq, &wc);
    }
    while (q->rq_head != q->rq_tail) {
        wc_recv(q, q->rq[q->rq_head++ % q->rq_cap].wr_id, IBV_WC_WR_FLUSH_ERR, &wc);
        sv_cq_push(c, (struct sv_cq *)q->qp.recv_cq, &wc);
    }
}

/* The oldest outstanding send fails with st (signaled or not), then the QP flushes. */
void sv_qp_fail(struct sv_ctx *c, struct sv_qp *q, enum ibv_wc_status st)
{
    q->qp.state = q->a.qp_state = IBV_QPS_ERR;
    if (q->sq_una != q->sq_tail) {
        struct sv_swqe *w = &q->sq[q->sq_una % q->sq_cap];
        struct ibv_wc wc;
        wc_send(q, w, st, &wc);
        free(w->data);
        w->data = NULL;
        q->sq_head = ++q->sq_una;
        if ((int32_t)(q->sq_next - q->sq_una) < 0)
            q->sq_next = q->sq_una;
        sv_trace(c, "QP 0x%x: wr_id %llu fails: %s", q->qp.qp_num, (unsigned long long)wc.wr_id,
                 ibv_wc_status_str(st));
        sv_cq_push(c, (struct sv_cq *)q->qp.send_cq, &wc);
    }
    sv_qp_flush(c, q);
}

/* ---- posting --------------------------------------------------------------------------------- */

static int post_one(struct sv_ctx *c, struct sv_qp *q, struct ibv_send_wr *wr, int bad_rkey)
{
    int op = wr->opcode, inl = wr->send_flags & IBV_SEND_INLINE;
    uint64_t len = 0;
    if ((op != IBV_WR_RDMA_WRITE && op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_SEND &&
         op != IBV_WR_SEND_WITH_IMM) ||
        wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge ||
        (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR))
        return EINVAL;
    for (int i = 0; i < wr->num_sge; i++)
        len += wr->sg_list[i].length;
    if (inl && len > q->cap.max_inline_data)
        return EINVAL;
    if (q->qp.state == IBV_QPS_ERR) {
        struct sv_swqe w = {.wr_id = wr->wr_id, .opcode = (uint8_t)op};
        struct ibv_wc wc;
        wc_send(q, &w, IBV_WC_WR_FLUSH_ERR, &wc);
        sv_cq_push(c, (struct sv_cq *)q->qp.send_cq, &wc);
        return 0;
    }
    if (q->sq_tail - q->sq_head >= q->cap.max_send_wr)
        return ENOMEM;
    struct sv_swqe *w = &q->sq[q->sq_tail % q->sq_cap];
    memset(w, 0, sizeof(*w));
    w->wr_id = wr->wr_id;
    w->opcode = (uint8_t)op;
    w->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    w->len = (uint32_t)len;
    w->imm = wr->imm_data;
    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) {
        w->raddr = wr->wr.rdma.remote_addr;
        w->rkey = wr->wr.rdma.rkey;
        if (bad_rkey) {
            w->rkey = ~w->rkey;
            fprintf(stderr, "softverbs: fault rkey@%llu fired on QP 0x%x\n",
                    (unsigned long long)__atomic_load_n(&g_posts, __ATOMIC_RELAXED), q->qp.qp_num);
        }
    }
    if (len > SV_MAX_MSG)
        w->err = IBV_WC_LOC_LEN_ERR;
    else if (len && !(w->data = malloc(len)))
        return ENOMEM;
    /* Inline data needs no lkey; anything else must lie in a live MR of the QP's PD. */
    for (int i = 0, off = 0; i < wr->num_sge && !w->err; i++) {
        const struct ibv_sge *s = &wr->sg_list[i];
        const void *src =
            inl ? (const void *)(uintptr_t)s->addr
                : sv_mr_range(sv_mr_find(c, s->lkey, 0), q->qp.pd, s->addr, s->length, 0);
        if (!s->length)
            continue;
        if (!src) {
            w->err = IBV_WC_LOC_PROT_ERR;
            free(w->data);
            w->data = NULL;
            break;
        }
        memcpy(w->data + off, src, s->length);
        off += (int)s->length;
    }
    if (!w->err) {
        uint32_t mtu = 128u << q->a.path_mtu;
        w->npkts = len ? (uint32_t)((len + mtu - 1) / mtu) : 1;
        w->psn = q->next_psn;
        q->next_psn = (q->next_psn + w->npkts) & SV_PSN_MASK;
    }
    q->sq_tail++;
    return 0;
}

int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct sv_ctx *c = (struct sv_ctx *)ibqp->context;
    struct sv_qp *q = (struct sv_qp *)ibqp;
    uint64_t nth = __atomic_add_fetch(&g_posts, 1, __ATOMIC_RELAXED);
    int fire[3] = {0, 0, 0}, err = 0;
    pthread_mutex_lock(&g_fault_lock);
    for (int i = 0; i < g_faults.nfaults; i++)
        if (g_faults.fault[i].n == nth)
            fire[g_faults.fault[i].kind] = 1;
    pthread_mutex_unlock(&g_fault_lock);
    pthread_mutex_lock(&c->lock);
    if (fire[SV_FAULT_QP_ERR]) {
        fprintf(stderr, "softverbs: fault qp_err@%llu fired on QP 0x%x\n", (unsigned long long)nth,
                ibqp->qp_num);
        sv_qp_flush(c, q);
    }
    if (fire[SV_FAULT_DROP]) {
        fprintf(stderr, "softverbs: fault drop@%llu fired on QP 0x%x: this process goes dark\n",
                (unsigned long long)nth, ibqp->qp_num);
        __atomic_store_n(&g_dark, 1, __ATOMIC_RELEASE);
    }
    for (int first = 1; wr; wr = wr->next, first = 0) {
        err = post_one(c, q, wr, first && fire[SV_FAULT_RKEY]);
        if (err) {
            *bad = wr;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    sv_nic_wake(c);
    return err;
}

int sv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct sv_ctx *c = (struct sv_ctx *)ibqp->context;
    struct sv_qp *q = (struct sv_qp *)ibqp;
    int err = 0;
    pthread_mutex_lock(&c->lock);
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_recv_sge ||
            q->qp.state == IBV_QPS_RESET) {
            err = EINVAL;
        } else if (q->qp.state == IBV_QPS_ERR) {
            struct ibv_wc wc;
            wc_recv(q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, &wc);
            sv_cq_push(c, (struct sv_cq *)q->qp.recv_cq, &wc);
            continue;
        } else if (q->rq_tail - q->rq_head >= q->cap.max_recv_wr) {
            err = ENOMEM;
        }
        if (err) {
            *bad = wr;
            break;
        }
        struct sv_rwqe *r = &q->rq[q->rq_tail++ % q->rq_cap];
        r->wr_id = wr->wr_id;
        r->nsge = wr->num_sge;
        if (wr->num_sge > 0) /* a receive without sges (write with immediate) may pass NULL */
            memcpy(r->sge, wr->sg_list, sizeof(*r->sge) * (size_t)wr->num_sge);
    }
    pthread_mutex_unlock(&c->lock);
    return err;
}

/* ---- connections ----------------------------------------------------------------------------- */

static socklen_t ep_addr(uint16_t lid, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "softverbs-%u-%u",
                     (unsigned)getuid(), (unsigned)lid);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Room for need more bytes at *len; compacts before it grows. */
static int buf_room(char **buf, size_t *off, size_t *len, size_t *cap, size_t need)
{
    if (*cap - *len >= need)
        return 0;
    if (*off) {
        memmove(*buf, *buf + *off, *len - *off);
        *len -= *off;
        *off = 0;
    }
    size_t ncap = *cap ? *cap : 65536;
    while (ncap - *len < need)
        ncap *= 2;
    if (ncap == *cap)
        return 0;
    char *n = realloc(*buf, ncap);
    if (!n)
        return ENOMEM;
    *buf = n;
    *cap = ncap;
    return 0;
}

static void conn_put(struct sv_conn *k, const struct sv_hdr *h, const void *data, size_t len)
{
    if (k->dead || buf_room(&k->out, &k->out_off, &k->out_len, &k->out_cap, sizeof(*h) + len)) {
        k->dead = 1;
        return;
    }
    memcpy(k->out + k->out_len, h, sizeof(*h));
    if (len)
        memcpy(k->out + k->out_len + sizeof(*h), data, len);
    k->out_len += sizeof(*h) + len;
}

static struct sv_conn *conn_new(struct sv_ctx *c, int fd, int outgoing, uint16_t lid)
{
    struct sv_conn *k = calloc(1, sizeof(*k));
    if (!k) {
        close(fd);
        return NULL;
    }
    k->fd = fd;
    k->outgoing = outgoing;
    k->lid = lid;
    k->pidx = -1;
    k->next = c->conns;
    c->conns = k;
    return k;
}

/*
 * The connection to endpoint lid, made if needed. NULL with *again set: its backlog is full, try
 * later; NULL alone: nobody listens there, so what is sent is lost (the requester times out).
 */
static struct sv_conn *conn_get(struct sv_ctx *c, uint16_t lid, int *again)
{
    struct sockaddr_un sa;
    for (struct sv_conn *k = c->conns; k; k = k->next)
        if (k->outgoing && !k->dead && k->lid == lid)
            return k;
    int fd = c->connect_retry ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *again = 1;
        if (!c->connect_retry)
            c->connect_retry = sv_now_ns() + MS;
        return NULL;
    }
    if (connect(fd, (struct sockaddr *)&sa, ep_addr(lid, &sa)) == 0 || errno == EINPROGRESS)
        return conn_new(c, fd, 1, lid);
    if (errno == EAGAIN) {
        *again = 1;
        c->connect_retry = sv_now_ns() + MS;
    }
    sv_trace(c, "connect to lid %u: %s", lid, strerror(errno));
    close(fd);
    return NULL;
}

static void answer(struct sv_ctx *c, struct sv_conn *k, const struct sv_hdr *req, int op,
                   uint32_t extra)
{
    struct sv_hdr h = {.magic = SV_MAGIC,
                       .type = SV_ACK,
                       .op = (uint8_t)op,
                       .src_lid = c->lid,
                       .src_qpn = req->dst_qpn,
                       .dst_qpn = req->src_qpn,
                       .psn = req->psn,
                       .npkts = extra};
    conn_put(k, &h, NULL, 0);
}

/* ---- the responder --------------------------------------------------------------------------- */

/*
 * The NIC's DMA into the consumer's memory. Hardware writes are invisible to ThreadSanitizer, and
 * a consumer learns of a plain RDMA write through its peer (a flag it polls, a message), an order
 * TSan cannot see across processes; so under TSan the placement is hidden too (weak symbols: a
 * no-op elsewhere).
 */
void __tsan_ignore_thread_begin(void) __attribute__((weak));
void __tsan_ignore_thread_end(void) __attribute__((weak));

static void dma_write(void *dst, const void *src, size_t n)
{
    if (__tsan_ignore_thread_begin)
        __tsan_ignore_thread_begin();
    memcpy(dst, src, n);
    if (__tsan_ignore_thread_end)
        __tsan_ignore_thread_end();
}

/* A responder error: the receive (if one was consumed) completes with st, the QP goes to error. */
static void responder_fail(struct sv_ctx *c, struct sv_qp *q, struct ibv_wc *wc)
{
    q->qp.state = q->a.qp_state = IBV_QPS_ERR;
    if (wc)
        sv_cq_push(c, (struct sv_cq *)q->qp.recv_cq, wc);
    sv_qp_flush(c, q);
}

static void on_request(struct sv_ctx *c, struct sv_conn *k, const struct sv_hdr *h,
                       const char *payload)
{
    struct sv_qp *q = sv_qp_find(c, h->dst_qpn);
    struct ibv_wc wc;
    if (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) || q->dlid != h->src_lid ||
        q->a.dest_qp_num != h->src_qpn) {
        sv_trace(c, "request for QP 0x%x from lid %u QP 0x%x: no such connected QP, dropped",
                 h->dst_qpn, h->src_lid, h->src_qpn);
        return;
    }
    if (h->psn != q->epsn) {
        sv_trace(c, "QP 0x%x: PSN 0x%x, expected 0x%x: dropped", q->qp.qp_num, h->psn, q->epsn);
        return;
    }
    int imm = h->op == IBV_WR_RDMA_WRITE_WITH_IMM || h->op == IBV_WR_SEND_WITH_IMM;
    int recv = h->op != IBV_WR_RDMA_WRITE; /* consumes a receive */
    uint32_t len = (uint32_t)h->len;
    if (h->op == IBV_WR_RDMA_WRITE || h->op == IBV_WR_RDMA_WRITE_WITH_IMM) {
        /* A zero-length write names no memory: no R_Key or range check (IBA C9-88). */
        void *dst = NULL;
        if (len && (q->a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
            dst = sv_mr_range(sv_mr_find(c, h->rkey, 1), q->qp.pd, h->raddr, len,
                              IBV_ACCESS_REMOTE_WRITE);
        if (len && !dst) {
            sv_trace(c, "QP 0x%x: write of %u bytes at 0x%llx rkey 0x%x refused", q->qp.qp_num, len,
                     (unsigned long long)h->raddr, h->rkey);
            answer(c, k, h, SV_NAK_ACCESS, 0);
            responder_fail(c, q, NULL);
            return;
        }
        if (imm && q->rq_head == q->rq_tail) {
            answer(c, k, h, SV_NAK_RNR, q->a.min_rnr_timer);
            return;
        }
        if (len)
            dma_write(dst, payload, len);
        q->epsn = (q->epsn + h->npkts) & SV_PSN_MASK;
        answer(c, k, h, SV_ACK_OK, 0);
        if (imm) {
            wc_recv(q, q->rq[q->rq_head++ % q->rq_cap].wr_id, IBV_WC_SUCCESS, &wc);
            wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        }
    } else {
        if (q->rq_head == q->rq_tail) {
            answer(c, k, h, SV_NAK_RNR, q->a.min_rnr_timer);
            return;
        }
        struct sv_rwqe *r = &q->rq[q->rq_head++ % q->rq_cap];
        char *dst[SV_MAX_SGE];
        uint64_t room = 0;
        int prot = 0;
        for (int i = 0; i < r->nsge; i++) {
            dst[i] = sv_mr_range(sv_mr_find(c, r->sge[i].lkey, 0), q->qp.pd, r->sge[i].addr,
                                 r->sge[i].length, IBV_ACCESS_LOCAL_WRITE);
            prot |= r->sge[i].length && !dst[i];
            room += r->sge[i].length;
        }
        if (prot || len > room) {
            wc_recv(q, r->wr_id, prot ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR, &wc);
            answer(c, k, h, prot ? SV_NAK_OP : SV_NAK_INV_REQ, 0);
            responder_fail(c, q, &wc);
            return;
        }
        for (int i = 0, off = 0; i < r->nsge && (uint32_t)off < len; i++) {
            uint32_t n =
                len - (uint32_t)off < r->sge[i].length ? len - (uint32_t)off : r->sge[i].length;
            dma_write(dst[i], payload + off, n);
            off += (int)n;
        }
        q->epsn = (q->epsn + h->npkts) & SV_PSN_MASK;
        answer(c, k, h, SV_ACK_OK, 0);
        wc_recv(q, r->wr_id, IBV_WC_SUCCESS, &wc);
    }
    if (recv) {
        wc.byte_len = len;
        wc.src_qp = h->src_qpn;
        wc.slid = c->env.eth ? 0 : h->src_lid;
        if (imm) {
            wc.wc_flags = IBV_WC_WITH_IMM;
            wc.imm_data = h->imm;
        }
        sv_cq_push(c, (struct sv_cq *)q->qp.recv_cq, &wc);
    }
}

/* ---- the requester --------------------------------------------------------------------------- */

/* The RNR NAK timer of IBA table 45, in 10 us units, kept within 1..10 ms so tests stay quick. */
static uint64_t rnr_delay_ns(uint32_t code)
{
    static const uint16_t t[32] = {65535, 1,    2,    3,     4,     6,     8,     12,
                                   16,    24,   32,   48,    64,    96,    128,   192,
                                   256,   384,  512,  768,   1024,  1536,  2048,  3072,
                                   4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};
    uint64_t ns = (uint64_t)t[code & 31] * 10000;
    return ns < MS ? MS : ns > 10 * MS ? 10 * MS : ns;
}

static void on_answer(struct sv_ctx *c, const struct sv_hdr *h)
{
    struct sv_qp *q = sv_qp_find(c, h->dst_qpn);
    if (!q || q->qp.state != IBV_QPS_RTS || q->a.dest_qp_num != h->src_qpn ||
        q->sq_una == q->sq_next)
        return;
    struct sv_swqe *w = &q->sq[q->sq_una % q->sq_cap];
    if (w->psn != h->psn)
        return;
    switch (h->op) {
    case SV_ACK_OK: {
        struct ibv_wc wc;
        wc_send(q, w, IBV_WC_SUCCESS, &wc);
        free(w->data);
        w->data = NULL;
        q->sq_una++;
        q->timer_start = sv_now_ns();
        q->rnr_single = 0;
        if (w->signaled) {
            q->sq_head = q->sq_una; /* releases the unsignaled slots before it too */
            sv_cq_push(c, (struct sv_cq *)q->qp.send_cq, &wc);
        }
        break;
    }
    case SV_NAK_RNR:
        if (q->a.rnr_retry != 7 && ++w->rnr_tries > q->a.rnr_retry) {
            sv_qp_fail(c, q, IBV_WC_RNR_RETRY_EXC_ERR);
            break;
        }
        q->sq_next = q->sq_una;
        q->rnr_single = 1;
        q->rnr_until = sv_now_ns() + rnr_delay_ns(h->npkts);
        break;
    case SV_NAK_ACCESS:
        sv_qp_fail(c, q, IBV_WC_REM_ACCESS_ERR);
        break;
    case SV_NAK_INV_REQ:
        sv_qp_fail(c, q, IBV_WC_REM_INV_REQ_ERR);
        break;
    default:
        sv_qp_fail(c, q, IBV_WC_REM_OP_ERR);
        break;
    }
}

/* Queues one request; EAGAIN: not now (backlog or output queue full). Lost packets return 0. */
static int send_req(struct sv_ctx *c, struct sv_qp *q, const struct sv_swqe *w)
{
    int again = 0;
    if (sv_dark(c) || !q->dlid)
        return 0;
    struct sv_conn *k = conn_get(c, q->dlid, &again);
    if (!k)
        return again ? EAGAIN : 0;
    if (k->out_len - k->out_off > SV_OUT_HIGH) {
        k->blocked = 1;
        return EAGAIN;
    }
    struct sv_hdr h = {.magic = SV_MAGIC,
                       .type = SV_REQ,
                       .op = w->opcode,
                       .src_lid = c->lid,
                       .src_qpn = q->qp.qp_num,
                       .dst_qpn = q->a.dest_qp_num,
                       .psn = w->psn,
                       .npkts = w->npkts,
                       .imm = w->imm,
                       .rkey = w->rkey,
                       .raddr = w->raddr,
                       .len = w->len};
    conn_put(k, &h, w->data, w->len);
    return 0;
}

/* Sends what a QP may send now and runs its timers; *wake: when to look again. */
static void qp_progress(struct sv_ctx *c, struct sv_qp *q, uint64_t now, uint64_t *wake)
{
    uint64_t limit = (uint64_t)(q->a.retry_cnt + 1) * (4096ull << q->a.timeout);
    if (q->qp.state != IBV_QPS_RTS)
        return;
    if (q->sq_una != q->sq_next && q->a.timeout) {
        if (now >= q->timer_start + limit) {
            sv_qp_fail(c, q, IBV_WC_RETRY_EXC_ERR);
            return;
        }
    }
    if (q->rnr_until && now < q->rnr_until) {
        *wake = *wake < q->rnr_until ? *wake : q->rnr_until;
        return;
    }
    q->rnr_until = 0;
    while (q->sq_next != q->sq_tail && (!q->rnr_single || q->sq_next == q->sq_una)) {
        struct sv_swqe *w = &q->sq[q->sq_next % q->sq_cap];
        if (w->err) { /* reported in order, once everything before it is acknowledged */
            if (q->sq_una == q->sq_next)
                sv_qp_fail(c, q, w->err);
            return;
        }
        if (send_req(c, q, w))
            break;
        if (q->sq_una == q->sq_next)
            q->timer_start = now;
        q->sq_next++;
    }
    if (q->sq_una != q->sq_next && q->a.timeout && q->timer_start + limit < *wake)
        *wake = q->timer_start + limit;
}

/* ---- the NIC thread -------------------------------------------------------------------------- */

static void conn_read(struct sv_ctx *c, struct sv_conn *k)
{
    struct sv_hdr h;
    for (size_t got = 0; got < SV_READ_BUDGET && !k->dead;) {
        size_t need = 65536, have = k->in_len - k->in_off;
        if (have >= sizeof(h)) {
            memcpy(&h, k->in + k->in_off, sizeof(h));
            if (h.len <= SV_MAX_MSG && sizeof(h) + h.len - have > need)
                need = sizeof(h) + h.len - have;
        }
        if (buf_room(&k->in, &k->in_off, &k->in_len, &k->in_cap, need)) {
            k->dead = 1;
            return;
        }
        ssize_t r = recv(k->fd, k->in + k->in_len, k->in_cap - k->in_len, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (r <= 0) {
            k->dead = 1;
            return;
        }
        k->in_len += (size_t)r;
        got += (size_t)r;
        while (k->in_len - k->in_off >= sizeof(h)) {
            memcpy(&h, k->in + k->in_off, sizeof(h));
            int op_ok = h.type == SV_ACK ? h.op <= SV_NAK_OP && !h.len
                                         : h.op == IBV_WR_RDMA_WRITE || h.op == IBV_WR_SEND ||
                                               h.op == IBV_WR_RDMA_WRITE_WITH_IMM ||
                                               h.op == IBV_WR_SEND_WITH_IMM;
            if (h.magic != SV_MAGIC || h.len > SV_MAX_MSG || !op_ok ||
                h.type != (k->outgoing ? SV_ACK : SV_REQ)) {
                sv_trace(c, "malformed packet: connection closed");
                k->dead = 1;
                return;
            }
            if (k->in_len - k->in_off < sizeof(h) + h.len)
                break;
            const char *payload = k->in + k->in_off + sizeof(h);
            k->in_off += sizeof(h) + h.len;
            if (sv_dark(c))
                continue; /* a dark link neither places nor acknowledges anything */
            if (h.type == SV_REQ)
                on_request(c, k, &h, payload);
            else
                on_answer(c, &h);
        }
        if (k->in_off == k->in_len)
            k->in_off = k->in_len = 0;
    }
}

/* Writes what the connections have queued; 1 if a blocked sender may go on now. */
static int conns_flush(struct sv_ctx *c)
{
    int go = 0;
    for (struct sv_conn *k = c->conns; k; k = k->next) {
        if (sv_dark(c))
            k->out_off = k->out_len = 0;
        while (!k->dead && k->out_off < k->out_len) {
            ssize_t r = send(k->fd, k->out + k->out_off, k->out_len - k->out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (r > 0)
                k->out_off += (size_t)r;
            else if (r < 0 && errno == EINTR)
                continue;
            else {
                k->dead = r < 0 && errno != EAGAIN;
                break;
            }
        }
        if (k->out_off == k->out_len)
            k->out_off = k->out_len = 0;
        go |= k->blocked && k->out_len - k->out_off <= SV_OUT_HIGH;
        k->blocked = 0;
    }
    for (struct sv_conn **pp = &c->conns, *k; (k = *pp);) {
        if (!k->dead) {
            pp = &k->next;
            continue;
        }
        *pp = k->next;
        close(k->fd);
        free(k->in);
        free(k->out);
        free(k);
    }
    return go;
}

static void *nic_main(void *arg)
{
    struct sv_ctx *c = arg;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    int timeout = 0;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        size_t n = 2;
        for (struct sv_conn *k = c->conns; k; k = k->next)
            n++;
        if (n > pcap) {
            struct pollfd *p = realloc(pfd, n * 2 * sizeof(*p));
            if (!p) { /* no memory for the poll set: try again soon */
                poll(NULL, 0, 10);
                continue;
            }
            pfd = p;
            pcap = n * 2;
        }
        pfd[0] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = c->listen_fd, .events = POLLIN};
        size_t i = 2;
        for (struct sv_conn *k = c->conns; k; k = k->next, i++) {
            k->pidx = (int)i;
            pfd[i] = (struct pollfd){.fd = k->fd, .events = POLLIN};
            if (k->out_len > k->out_off)
                pfd[i].events |= POLLOUT;
        }
        if (poll(pfd, i, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            if (read(c->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                break;
        }
        pthread_mutex_lock(&c->lock);
        if (pfd[1].revents & POLLIN) {
            int fd;
            while ((fd = accept4(c->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
                conn_new(c, fd, 0, 0);
        }
        for (struct sv_conn *k = c->conns; k; k = k->next)
            if (k->pidx >= 0 && (pfd[k->pidx].revents & (POLLIN | POLLHUP | POLLERR)))
                conn_read(c, k);
        uint64_t now = sv_now_ns(), wake = now + 1000 * MS;
        if (c->connect_retry && now >= c->connect_retry)
            c->connect_retry = 0;
        for (struct sv_qp *q = c->qps; q; q = q->next)
            qp_progress(c, q, now, &wake);
        if (c->connect_retry && c->connect_retry < wake)
            wake = c->connect_retry;
        pthread_mutex_unlock(&c->lock);
        timeout = (int)((wake - now + MS - 1) / MS);
        if (conns_flush(c))
            timeout = 0;
    }
    free(pfd);
    return NULL;
}

/* Binds a free LID's endpoint and starts the NIC thread. */
int sv_nic_start(struct sv_ctx *c)
{
    struct sockaddr_un sa;
    int err = 0;
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->wake_fd < 0 || c->listen_fd < 0) {
        err = errno;
        goto err_close;
    }
    uint32_t seq = __atomic_fetch_add(&g_lid_seq, 1, __ATOMIC_RELAXED);
    uint32_t start =
        ((uint32_t)getpid() * 7919u + seq * 104729u + (uint32_t)sv_now_ns()) % SV_LID_MAX;
    for (uint32_t i = 0;; i++) {
        if (i == SV_LID_MAX) {
            err = EADDRINUSE;
            goto err_close;
        }
        c->lid = (uint16_t)((start + i) % SV_LID_MAX + 1);
        if (bind(c->listen_fd, (struct sockaddr *)&sa, ep_addr(c->lid, &sa)) == 0)
            break;
        if (errno != EADDRINUSE) {
            err = errno;
            goto err_close;
        }
    }
    if (listen(c->listen_fd, SOMAXCONN)) {
        err = errno;
        goto err_close;
    }
    /* Signals go to the consumer's threads, never to the NIC thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&c->nic, NULL, nic_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        goto err_close;
    c->nic_started = 1;
    return 0;
err_close:
    fprintf(stderr, "softverbs: cannot open an endpoint: %s\n", strerror(err));
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    return err;
}

void sv_nic_wake(struct sv_ctx *c)
{
    uint64_t one = 1;
    if (write(c->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        fprintf(stderr, "softverbs: waking the NIC thread: %s\n", strerror(errno));
}

void sv_nic_stop(struct sv_ctx *c)
{
    if (!c->nic_started)
        return;
    __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
    sv_nic_wake(c);
    pthread_join(c->nic, NULL);
    c->nic_started = 0;
    for (struct sv_conn *k = c->conns; k; k = k->next)
        k->dead = 1;
    conns_flush(c);
    close(c->listen_fd);
    close(c->wake_fd);
}

/* ---- strings --------------------------------------------------------------------------------- */

SV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const str[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status >= sizeof(str) / sizeof(str[0]) || !str[status])
        return "unknown";
    return str[status];
}
