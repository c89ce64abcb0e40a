/*
 * softverbs_test.c: proves softverbs (the libibverbs emulator of tests/support/) as a consumer
 * uses it: dlopen() of argv[1], dlsym() of every call, the data path through context->ops. Forked
 * processes exchange QP descriptions over a socketpair and check bytes against closed forms.
 * rc: RDMA writes (with immediate too) both ways at once, SEND/RECV, every error completion and
 * the flushes after it, post/modify refusals, a full send queue, a completion channel, a killed
 * peer, SOFTVERBS_FAULT. eth: RoCE GIDs and addressing. list: devices and ports, two contexts and
 * two threads in one process, malformed env, fd hygiene. PASS/FAIL per check; exit 1 on a FAIL.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The functions a consumer resolves with dlsym; the data path goes through context->ops. */
static struct {
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t,
                        size_t);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
    int (*destroy_comp_channel)(struct ibv_comp_channel *);
    int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
    void (*ack_cq_events)(struct ibv_cq *, unsigned int);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
    int (*destroy_qp)(struct ibv_qp *);
    const char *(*wc_status_str)(enum ibv_wc_status);
    const char *(*port_state_str)(enum ibv_port_state);
    int (*fork_init)(void);
} V;

/* Resolves V's members in order from one space-separated list of names. */
static int load(const char *path)
{
    char names[] = "ibv_get_device_list ibv_free_device_list ibv_get_device_name ibv_open_device "
                   "ibv_close_device ibv_query_device ibv_query_port ibv_query_gid "
                   "_ibv_query_gid_ex ibv_alloc_pd ibv_dealloc_pd ibv_reg_mr ibv_dereg_mr "
                   "ibv_create_comp_channel ibv_destroy_comp_channel ibv_get_cq_event "
                   "ibv_ack_cq_events ibv_create_cq ibv_destroy_cq ibv_create_qp ibv_modify_qp "
                   "ibv_query_qp ibv_destroy_qp ibv_wc_status_str ibv_port_state_str "
                   "ibv_fork_init";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL), *f;
    size_t i = 0;
    if (!lib) {
        printf("FAIL: dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    for (char *save, *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save), i++) {
        if (i == sizeof(V) / sizeof(void *) || !(f = dlsym(lib, n))) {
            printf("FAIL: dlsym %s\n", n);
            return -1;
        }
        memcpy((char *)&V + i * sizeof(void *), &f, sizeof(f));
    }
    return i == sizeof(V) / sizeof(void *) ? 0 : -1;
}

static int g_fail;
static const char *g_who = "main";

static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s [%s] ", ok ? "PASS" : "FAIL", g_who);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    g_fail += !ok;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- one side of a connection: context, buffer, QPs ------------------------------------------ */

enum { Q_DATA, Q_FILL, Q_RKEY, Q_RANGE, Q_LKEY, Q_PSN, Q_RNR, Q_RNR7, Q_LEN, Q_CHAN, Q_DEAD, NQP };

#define MIB (1u << 20)
#define SRC 0 /* messages of the data phase, sender side */
#define DST (24 * MIB) /* where the peer writes them */
#define MISC (48 * MIB) /* the other phases */
#define CANARY (52 * MIB) /* receive sges that a write with immediate must not touch */
#define BUF_BYTES (53 * MIB)
#define NMSG 112
#define CHAN_CTX ((void *)0xc0ffee)

struct info {
    uint32_t qpn[NQP], psn[NQP];
    uint16_t lid;
    union ibv_gid gid[4];
    uint64_t addr;
    uint32_t rkey;
    int32_t pid;
};

struct side {
    int role, sock, eth, faults;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_comp_channel *ch;
    uint8_t *buf;
    struct ibv_cq *scq[NQP], *rcq[NQP];
    struct ibv_qp *qp[NQP];
    struct ibv_port_attr port;
    struct info me, peer;
};

static int side_open(struct side *s, int devidx, int nqp)
{
    struct ibv_device **list = V.get_device_list(NULL);
    s->ctx = list ? V.open_device(list[devidx]) : NULL;
    if (list)
        V.free_device_list(list);
    if (!s->ctx || V.query_port(s->ctx, 1, &s->port))
        return -1;
    s->pd = V.alloc_pd(s->ctx);
    s->buf = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!s->pd || s->buf == MAP_FAILED)
        return -1;
    s->mr = V.reg_mr(s->pd, s->buf, BUF_BYTES,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    s->ch = V.create_comp_channel(s->ctx);
    if (!s->mr || !s->ch)
        return -1;
    for (int i = 0; i < nqp; i++) {
        int chan = i == Q_CHAN && !s->faults;
        s->scq[i] = V.create_cq(s->ctx, 256, chan ? CHAN_CTX : NULL, chan ? s->ch : NULL, 0);
        s->rcq[i] = V.create_cq(s->ctx, 256, NULL, NULL, 0);
        /* send/recv WRs, send/recv sges, inline bytes */
        struct ibv_qp_cap cap = {i == Q_FILL ? 4 : 32, 128, 2, 2, 256};
        struct ibv_qp_init_attr ia = {
            .send_cq = s->scq[i], .recv_cq = s->rcq[i], .qp_type = IBV_QPT_RC, .cap = cap};
        s->qp[i] = s->scq[i] && s->rcq[i] ? V.create_qp(s->pd, &ia) : NULL;
        if (!s->qp[i])
            return -1;
        s->me.qpn[i] = s->qp[i]->qp_num;
        s->me.psn[i] = ((uint32_t)getpid() * 2654435761u + (uint32_t)i * 40503u) & 0xffffff;
    }
    s->me.lid = s->port.lid;
    for (int g = 0; g < (s->eth ? 4 : 1); g++)
        if (V.query_gid(s->ctx, 1, g, &s->me.gid[g]))
            return -1;
    s->me.addr = (uintptr_t)s->buf;
    s->me.rkey = s->mr->rkey;
    s->me.pid = getpid();
    return 0;
}

static void side_close(struct side *s, int nqp)
{
    for (int i = nqp - 1; i >= 0; i--) {
        V.destroy_qp(s->qp[i]);
        V.destroy_cq(s->rcq[i]);
        V.destroy_cq(s->scq[i]);
    }
    V.destroy_comp_channel(s->ch);
    V.dereg_mr(s->mr);
    V.dealloc_pd(s->pd);
    V.close_device(s->ctx);
    munmap(s->buf, BUF_BYTES);
}

enum {
    M_INIT = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
    M_RTR = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
    M_RTS = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
            IBV_QP_MAX_QP_RD_ATOMIC,
};

static int to_init(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    return V.modify_qp(qp, &a, M_INIT);
}

/* The RTR attributes that reach the peer's QP i: by LID, or by its GID gidx if gidx >= 0. */
static void rtr_attr(struct side *s, int i, int gidx, struct ibv_qp_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->qp_state = IBV_QPS_RTR;
    a->path_mtu = s->port.active_mtu;
    a->dest_qp_num = s->peer.qpn[i];
    a->rq_psn = (s->peer.psn[i] + (i == Q_PSN && s->role == 1 && !s->faults)) & 0xffffff;
    a->max_dest_rd_atomic = 1;
    a->min_rnr_timer = 12;
    a->ah_attr.port_num = 1;
    a->ah_attr.dlid = gidx < 0 ? s->peer.lid : 0;
    a->ah_attr.is_global = gidx >= 0;
    a->ah_attr.grh.dgid = s->peer.gid[gidx < 0 ? 0 : gidx];
    a->ah_attr.grh.sgid_index = (uint8_t)(gidx < 0 ? 0 : gidx);
    a->ah_attr.grh.hop_limit = 64;
}

/* RESET -> INIT -> RTR -> RTS with the masks the spec requires. */
static int connect_qp(struct side *s, int i, int gidx)
{
    struct ibv_qp_attr a;
    int quick = i == Q_PSN || i == Q_DEAD || s->faults, rc = to_init(s->qp[i]);
    rtr_attr(s, i, gidx, &a);
    rc = rc ? rc : V.modify_qp(s->qp[i], &a, M_RTR);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = quick ? 12 : 18; /* 16.8 ms or 1.07 s per try */
    a.retry_cnt = quick ? 2 : 7;
    a.rnr_retry = i == Q_RNR && !s->faults ? 1 : 7;
    a.sq_psn = s->me.psn[i];
    a.max_rd_atomic = 1;
    return rc ? rc : V.modify_qp(s->qp[i], &a, M_RTS);
}

/* A QP in RESET for the refusal checks. */
static struct ibv_qp *spare_qp(struct side *s)
{
    struct ibv_qp_init_attr ia = {.send_cq = s->scq[0],
                                  .recv_cq = s->rcq[0],
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1}};
    return V.create_qp(s->pd, &ia);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    return V.query_qp(qp, &a, IBV_QP_STATE, &ia) ? IBV_QPS_UNKNOWN : a.qp_state;
}

/* ---- tokens over the socketpair, completions, posting ---------------------------------------- */

static void tok_send(struct side *s, int32_t v)
{
    if (write(s->sock, &v, sizeof(v)) != sizeof(v))
        check(0, "token write: %s", strerror(errno));
}

static int32_t tok_recv(struct side *s, int ms)
{
    struct pollfd p = {.fd = s->sock, .events = POLLIN};
    int32_t v;
    if (poll(&p, 1, ms) != 1 || read(s->sock, &v, sizeof(v)) != sizeof(v)) {
        check(0, "token from the peer within %d ms", ms);
        return INT32_MIN;
    }
    return v;
}

static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, double ms)
{
    double end = now_ms() + ms;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n == 1)
            return 1;
        if (n < 0 || now_ms() > end) {
            memset(wc, 0, sizeof(*wc));
            return 0;
        }
        usleep(20);
    }
}

static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st, uint32_t qpn,
                      const char *what)
{
    struct ibv_wc wc;
    int got = wait_wc(cq, &wc, 5000);
    check(got && wc.wr_id == wr_id && wc.status == st && wc.qp_num == qpn,
          "%s: completion %s (got %s, wr_id %llu)", what, V.wc_status_str(st),
          got ? V.wc_status_str(wc.status) : "nothing", (unsigned long long)wc.wr_id);
}

/* The next send completion of this side's QP i. */
static void expect_sq(struct side *s, int i, uint64_t wr_id, enum ibv_wc_status st,
                      const char *what)
{
    expect_wc(s->scq[i], wr_id, st, s->qp[i]->qp_num, what);
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, const void *src,
                uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm, int flags)
{
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = (unsigned)flags,
                             .imm_data = imm};
    struct ibv_send_wr *bad = NULL;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

/* A signaled 64-byte RDMA write from this side's MISC area. */
static int wr64(struct side *s, struct ibv_qp *qp, uint64_t wr_id, uint64_t raddr, uint32_t rkey)
{
    return post(qp, IBV_WR_RDMA_WRITE, wr_id, s->buf + MISC, 64, s->mr->lkey, raddr, rkey, 0,
                IBV_SEND_SIGNALED);
}

static int post_recv2(struct ibv_qp *qp, uint64_t wr_id, void *a, uint32_t alen, void *b,
                      uint32_t blen, uint32_t lkey)
{
    struct ibv_sge sge[2] = {{(uintptr_t)a, alen, lkey}, {(uintptr_t)b, blen, lkey}};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sge, .num_sge = b ? 2 : 1}, *bad;
    return ibv_post_recv(qp, &wr, &bad);
}

/* ---- patterns: every byte known in closed form ----------------------------------------------- */

static const uint32_t g_sizes[7] = {0, 1, 4096, MIB, 3, 65541, 4095};

static uint32_t msg_len(int i)
{
    return g_sizes[i % 7];
}

static size_t msg_off(int i) /* one untouched byte between messages */
{
    size_t off = 0;
    for (int j = 0; j < i; j++)
        off += msg_len(j) + 1;
    return off;
}

static uint8_t pat(int role, int i, size_t j)
{
    return (uint8_t)(i * 131 + (int)(j * 7) + (int)(j >> 9) + role * 29 + 1);
}

static void fill(uint8_t *p, size_t n, int role, int i)
{
    for (size_t j = 0; j < n; j++)
        p[j] = pat(role, i, j);
}

/* Bytes of p[0..n) that differ from pat(role, i, j0 + j), or from the byte i if role < 0. */
static size_t diff(const uint8_t *p, size_t n, int role, int i, size_t j0)
{
    size_t bad = 0;
    for (size_t j = 0; j < n; j++)
        bad += p[j] != (role < 0 ? (uint8_t)i : pat(role, i, j0 + j));
    return bad;
}

/* ---- rc: data in both directions at once ----------------------------------------------------- */

static void phase_data(struct side *s)
{
    struct ibv_qp *qp = s->qp[Q_DATA];
    int peer = !s->role, posted = 0, scomp = 0, rcomp = 0, nsig = 0, sig[NMSG];
    int bad_send = 0, bad_recv = 0, bad_place = 0, enomem = 0, other_err = 0;
    struct ibv_wc wc[16];
    for (int i = 0; i < NMSG; i++) { /* writes with immediate signaled, plain ones half */
        fill(s->buf + SRC + msg_off(i), msg_len(i), s->role, i);
        if ((i & 1) || i % 4 == 0)
            sig[nsig++] = i;
    }
    memset(s->buf + CANARY, 0xee, 64);
    for (int k = 0; k < NMSG / 2; k++)
        if (post_recv2(qp, 5000 + k, s->buf + CANARY, 64, NULL, 0, s->mr->lkey))
            other_err++;
    tok_send(s, 1); /* both have their receives posted before either writes */
    tok_recv(s, 10000);
    double end = now_ms() + 20000;
    while ((posted < NMSG || scomp < nsig || rcomp < NMSG / 2) && now_ms() < end) {
        if (posted < NMSG) {
            int i = posted;
            int rc = post(qp, i & 1 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, (uint64_t)i,
                          s->buf + SRC + msg_off(i), msg_len(i), s->mr->lkey,
                          s->peer.addr + DST + msg_off(i), s->peer.rkey, htonl(0x1000u + i),
                          (i & 1) || i % 4 == 0 ? IBV_SEND_SIGNALED : 0);
            posted += rc == 0;
            enomem += rc == ENOMEM;
            other_err += rc && rc != ENOMEM;
        }
        int n = ibv_poll_cq(s->scq[Q_DATA], 16, wc);
        for (int k = 0; k < n; k++, scomp++)
            bad_send += scomp >= nsig || wc[k].status != IBV_WC_SUCCESS ||
                        wc[k].wr_id != (uint64_t)sig[scomp] || wc[k].opcode != IBV_WC_RDMA_WRITE ||
                        wc[k].qp_num != qp->qp_num;
        n = ibv_poll_cq(s->rcq[Q_DATA], 16, wc);
        for (int k = 0; k < n; k++, rcomp++) {
            int i = 2 * rcomp + 1; /* the rcomp-th write with immediate */
            bad_recv += wc[k].status != IBV_WC_SUCCESS || wc[k].wr_id != 5000u + rcomp ||
                        wc[k].opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
                        !(wc[k].wc_flags & IBV_WC_WITH_IMM) ||
                        wc[k].imm_data != htonl(0x1000u + i) || wc[k].byte_len != msg_len(i) ||
                        wc[k].src_qp != s->peer.qpn[Q_DATA] || wc[k].qp_num != qp->qp_num;
            /* Placed before its completion, and so was the plain write posted before it. */
            bad_place += diff(s->buf + DST + msg_off(i), msg_len(i), peer, i, 0) != 0 ||
                         diff(s->buf + DST + msg_off(i - 1), msg_len(i - 1), peer, i - 1, 0) != 0;
        }
        if (n == 0)
            usleep(10);
    }
    check(posted == NMSG && scomp == nsig && rcomp == NMSG / 2 && !other_err,
          "data: %d writes (%d ENOMEM: queue full), %d/%d send, %d/%d recv completions", posted,
          enomem, scomp, nsig, rcomp, NMSG / 2);
    check(!bad_send, "data: send completions successful, in posting order (%d wrong)", bad_send);
    check(!bad_recv, "data: write-with-imm completions carry imm, byte_len, src_qp (%d wrong)",
          bad_recv);
    check(!bad_place, "data: bytes placed in order before the receive completion (%d late)",
          bad_place);
    tok_send(s, 2); /* everything of both directions is acknowledged: check the whole area */
    tok_recv(s, 10000);
    size_t bad = 0, gaps = 0;
    for (int i = 0; i < NMSG; i++) {
        bad += diff(s->buf + DST + msg_off(i), msg_len(i), peer, i, 0);
        gaps += s->buf[DST + msg_off(i) + msg_len(i)] != 0;
    }
    check(!bad && !gaps && !diff(s->buf + CANARY, 64, -1, 0xee, 0),
          "data: %d messages of 0 B..1 MiB land exactly (%zu wrong bytes, %zu gaps written, "
          "receive sges untouched)",
          NMSG, bad, gaps);
}

/* A's completion of a plain write means the bytes are in B's memory already. */
static void phase_placement(struct side *s)
{
    static const uint32_t lens[4] = {1, 4096, MIB, 17};
    size_t late = 0;
    for (int r = 0; r < 20; r++) {
        uint32_t len = lens[r % 4];
        if (s->role == 0) {
            struct ibv_wc wc;
            fill(s->buf + SRC, len, 0, 1000 + r);
            post(s->qp[Q_DATA], IBV_WR_RDMA_WRITE, 9000 + r, s->buf + SRC, len, s->mr->lkey,
                 s->peer.addr + MISC, s->peer.rkey, 0, IBV_SEND_SIGNALED);
            late += !wait_wc(s->scq[Q_DATA], &wc, 5000) || wc.status != IBV_WC_SUCCESS;
            tok_send(s, r);
            late += tok_recv(s, 10000) != r;
        } else {
            late += tok_recv(s, 10000) != r;
            late += diff(s->buf + MISC, len, 0, 1000 + r, 0) != 0;
            tok_send(s, r);
        }
    }
    check(!late, "placement: 20 writes seen by the target as soon as the requester completes");
}

static void phase_send(struct side *s)
{
    struct ibv_qp *qp = s->qp[Q_DATA];
    uint8_t *m = s->buf + MISC, inl[200];
    fill(inl, sizeof(inl), 0, 3);
    if (s->role == 1) {
        memset(m, 0xcc, 8192);
        post_recv2(qp, 777, m, 100, m + 200, 4000, s->mr->lkey);
        post_recv2(qp, 778, m + 5000, 256, NULL, 0, s->mr->lkey);
        post_recv2(qp, 779, m + 6000, 16, NULL, 0, s->mr->lkey);
        tok_send(s, 3);
        struct ibv_wc wc[3];
        int ok = 1;
        for (int k = 0; k < 3; k++)
            ok &= wait_wc(s->rcq[Q_DATA], &wc[k], 5000) && wc[k].status == IBV_WC_SUCCESS &&
                  wc[k].opcode == IBV_WC_RECV && wc[k].wr_id == 777u + k;
        check(ok && wc[0].byte_len == 3000 && (wc[0].wc_flags & IBV_WC_WITH_IMM) &&
                  wc[0].imm_data == htonl(0xabcd) && wc[1].byte_len == 200 &&
                  !(wc[1].wc_flags & IBV_WC_WITH_IMM) && wc[2].byte_len == 0,
              "send: RECV completions with byte_len 3000/200/0 and the immediate");
        check(!diff(m, 100, 0, 2, 0) && !diff(m + 100, 100, -1, 0xcc, 0) &&
                  !diff(m + 3100, 1100, -1, 0xcc, 0),
              "send: 3000 bytes scattered into sges of 100 and 4000, nothing else written");
        check(!diff(m + 200, 2900, 0, 2, 100) && !memcmp(m + 5000, inl, 200) &&
                  !diff(m + 5200, 56, -1, 0xcc, 0),
              "send: the second sge holds bytes 100..2999, the inline send its 200 bytes");
        return;
    }
    fill(m, 3000, 0, 2);
    tok_recv(s, 10000);
    post(qp, IBV_WR_SEND_WITH_IMM, 1, m, 3000, s->mr->lkey, 0, 0, htonl(0xabcd), IBV_SEND_SIGNALED);
    /* Inline data needs no lkey: this one is garbage. */
    post(qp, IBV_WR_SEND, 2, inl, 200, 0xdeadbeef, 0, 0, 0, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    post(qp, IBV_WR_SEND, 3, m, 0, s->mr->lkey, 0, 0, 0, IBV_SEND_SIGNALED);
    for (int k = 1; k <= 3; k++)
        expect_wc(s->scq[Q_DATA], (uint64_t)k, IBV_WC_SUCCESS, qp->qp_num, "send: SEND");
}

/* ---- rc: what hardware refuses --------------------------------------------------------------- */

#define TARGET (MISC + 8192) /* B's bytes that no refused write may touch */

static void phase_errors(struct side *s)
{
    struct ibv_wc wc;
    uint8_t *m = s->buf + MISC;
    if (s->role == 1) {
        memset(s->buf + TARGET, 0xab, 4096);
        post_recv2(s->qp[Q_LEN], 81, m + 12288, 500, m + 13000, 500, s->mr->lkey);
        tok_send(s, 4);
        expect_wc(s->rcq[Q_LEN], 81, IBV_WC_LOC_LEN_ERR, s->qp[Q_LEN]->qp_num,
                  "errors: the receive a too-long SEND hits");
        if (tok_recv(s, 10000) == 5) { /* A's RNR-retried SEND waits for this receive */
            post_recv2(s->qp[Q_RNR7], 71, m + 14000, 64, NULL, 0, s->mr->lkey);
            check(wait_wc(s->rcq[Q_RNR7], &wc, 5000) && wc.status == IBV_WC_SUCCESS &&
                      wc.byte_len == 64,
                  "errors: with rnr_retry=7 a SEND waits until a receive is posted");
        }
        tok_recv(s, 10000);
        check(!diff(s->buf + TARGET, 4096, -1, 0xab, 0),
              "errors: refused writes (wrong rkey, PSN mismatch) left the target untouched");
        tok_send(s, 7);
        return;
    }
    struct ibv_qp **qp = s->qp;
    uint64_t target = s->peer.addr + TARGET;
    tok_recv(s, 10000);
    fill(m, 4096, 0, 4);
    wr64(s, qp[Q_RKEY], 11, target, s->peer.rkey ^ 0x5a5a);
    expect_sq(s, Q_RKEY, 11, IBV_WC_REM_ACCESS_ERR, "errors: write with a wrong rkey");
    wr64(s, qp[Q_RKEY], 12, target, s->peer.rkey);
    expect_sq(s, Q_RKEY, 12, IBV_WC_WR_FLUSH_ERR, "errors: the next write on that QP");
    wr64(s, qp[Q_RANGE], 21, s->peer.addr + BUF_BYTES - 8, s->peer.rkey);
    expect_sq(s, Q_RANGE, 21, IBV_WC_REM_ACCESS_ERR, "errors: write 56 bytes past the MR's end");
    /* A bad lkey fails asynchronously, and what was posted after it flushes. */
    check(!post(qp[Q_LKEY], IBV_WR_RDMA_WRITE, 31, m, 64, s->mr->lkey ^ 0x55, target, s->peer.rkey,
                0, IBV_SEND_SIGNALED) &&
              !wr64(s, qp[Q_LKEY], 32, target, s->peer.rkey),
          "errors: a bad lkey is accepted at post");
    expect_sq(s, Q_LKEY, 31, IBV_WC_LOC_PROT_ERR, "errors: write from a bad lkey");
    expect_sq(s, Q_LKEY, 32, IBV_WC_WR_FLUSH_ERR, "errors: the write posted after it");
    check(qp_state(qp[Q_LKEY]) == IBV_QPS_ERR, "errors: the QP is in the error state");
    wr64(s, qp[Q_PSN], 41, target, s->peer.rkey);
    expect_sq(s, Q_PSN, 41, IBV_WC_RETRY_EXC_ERR, "errors: sq_psn is not the peer's rq_psn");
    post(qp[Q_RNR], IBV_WR_SEND, 61, m, 8, s->mr->lkey, 0, 0, 0, IBV_SEND_SIGNALED);
    expect_sq(s, Q_RNR, 61, IBV_WC_RNR_RETRY_EXC_ERR, "errors: SEND, no receive, rnr_retry=1");
    post(qp[Q_LEN], IBV_WR_SEND, 81, m, 3000, s->mr->lkey, 0, 0, 0, IBV_SEND_SIGNALED);
    expect_sq(s, Q_LEN, 81, IBV_WC_REM_INV_REQ_ERR, "errors: SEND of 3000 B into a 1000 B recv");
    post(qp[Q_RNR7], IBV_WR_SEND, 71, m, 64, s->mr->lkey, 0, 0, 0, IBV_SEND_SIGNALED);
    tok_send(s, 5);
    expect_sq(s, Q_RNR7, 71, IBV_WC_SUCCESS, "errors: SEND retried on RNR (rnr_retry=7)");
    tok_send(s, 6);
    tok_recv(s, 10000);
}

/* Local refusals: post_send before RTS, missing mask bits, bad arguments, a full send queue. */
static void phase_local(struct side *s)
{
    struct ibv_qp *qp = spare_qp(s);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
    uint8_t *m = s->buf + MISC;
    check(qp && wr64(s, qp, 1, s->peer.addr, s->peer.rkey) == EINVAL,
          "state: post_send in RESET is EINVAL");
    check(V.modify_qp(qp, &a, M_INIT & ~IBV_QP_PORT) == EINVAL,
          "state: RESET->INIT without IBV_QP_PORT is EINVAL");
    check(V.modify_qp(qp, &a, M_INIT | IBV_QP_SQ_PSN) == EINVAL,
          "state: RESET->INIT with an extra IBV_QP_SQ_PSN is EINVAL");
    check(V.modify_qp(qp, &a, M_INIT) == 0, "state: RESET->INIT");
    check(wr64(s, qp, 1, s->peer.addr, s->peer.rkey) == EINVAL, "state: post_send in INIT: EINVAL");
    rtr_attr(s, Q_DATA, -1, &a);
    check(V.modify_qp(qp, &a, M_RTR & ~IBV_QP_MIN_RNR_TIMER) == EINVAL,
          "state: INIT->RTR without IBV_QP_MIN_RNR_TIMER is EINVAL");
    a.qp_state = IBV_QPS_RTS;
    check(V.modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "state: INIT->RTS is EINVAL");
    a.qp_state = IBV_QPS_RTR;
    check(V.modify_qp(qp, &a, M_RTR) == 0, "state: INIT->RTR");
    check(wr64(s, qp, 1, s->peer.addr, s->peer.rkey) == EINVAL, "state: post_send in RTR: EINVAL");
    a.qp_state = IBV_QPS_RTS;
    check(V.modify_qp(qp, &a, M_RTS & ~IBV_QP_SQ_PSN) == EINVAL,
          "state: RTR->RTS without IBV_QP_SQ_PSN is EINVAL");
    check(post(qp, IBV_WR_RDMA_READ, 1, m, 8, s->mr->lkey, s->peer.addr, s->peer.rkey, 0, 0) ==
              EINVAL,
          "state: an RDMA read is EINVAL");
    check(V.dealloc_pd(s->pd) == EBUSY, "objects: dealloc_pd with QPs and MRs on it is EBUSY");
    check(V.destroy_qp(qp) == 0, "objects: destroy_qp");
    errno = 0;
    check(!V.reg_mr(s->pd, m, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
          "objects: reg_mr with REMOTE_WRITE but not LOCAL_WRITE is EINVAL");
    struct ibv_qp_init_attr ia = {
        .send_cq = s->scq[0], .recv_cq = s->rcq[0], .qp_type = IBV_QPT_UD};
    check(!V.create_qp(s->pd, &ia), "objects: a UD QP is refused");
    /* Three flush completions on a CQ of 2: the overrun puts its other QP in error too. */
    struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
    ia = (struct ibv_qp_init_attr){.qp_type = IBV_QPT_RC,
                                   .cap = {.max_recv_wr = 4, .max_recv_sge = 1}};
    ia.send_cq = ia.recv_cq = V.create_cq(s->ctx, 2, NULL, NULL, 0);
    struct ibv_qp *q1 = V.create_qp(s->pd, &ia), *q2 = V.create_qp(s->pd, &ia);
    check(!to_init(q1) && !to_init(q2) && !V.modify_qp(q1, &qa, IBV_QP_STATE),
          "overrun: two QPs on a CQ of 2, one in error");
    for (int k = 0; k < 3; k++)
        post_recv2(q1, (uint64_t)k, m, 8, NULL, 0, s->mr->lkey);
    check(qp_state(q2) == IBV_QPS_ERR,
          "overrun: 3 completions on a CQ of 2 move the other QP to the error state");
    V.destroy_qp(q2);
    V.destroy_qp(q1);
    V.destroy_cq(ia.send_cq);
    /* Four unsignaled writes fill a 4-deep send queue for good: only a signaled completion
     * releases slots, and none can be posted. */
    int rc[5];
    for (int k = 0; k < 5; k++)
        rc[k] = post(s->qp[Q_FILL], IBV_WR_RDMA_WRITE, 100u + k, m, 8, s->mr->lkey,
                     s->peer.addr + MISC + 16384 + 8 * k, s->peer.rkey, 0, 0);
    check(!rc[0] && !rc[1] && !rc[2] && !rc[3] && rc[4] == ENOMEM,
          "fill: 4 unsignaled writes fill a queue of 4; the 5th is ENOMEM");
    tok_send(s, 8); /* B waits for the 4 writes to land; then the queue is still full */
    tok_recv(s, 10000);
    check(wr64(s, s->qp[Q_FILL], 105, s->peer.addr + MISC, s->peer.rkey) == ENOMEM,
          "fill: still ENOMEM after the writes were placed");
}

static void phase_chan(struct side *s)
{
    struct ibv_cq *cq = s->scq[Q_CHAN], *ev = NULL;
    void *evctx = NULL;
    int fd = s->ch->fd;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    check(V.get_cq_event(s->ch, &ev, &evctx) == -1 && errno == EAGAIN,
          "channel: no event yet (O_NONBLOCK: EAGAIN)");
    ibv_req_notify_cq(cq, 0);
    wr64(s, s->qp[Q_CHAN], 91, s->peer.addr + MISC + 20000, s->peer.rkey);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    check(poll(&p, 1, 5000) == 1, "channel: fd readable after arming and a completion");
    check(V.get_cq_event(s->ch, &ev, &evctx) == 0 && ev == cq && evctx == CHAN_CTX,
          "channel: get_cq_event returns the CQ and its cq_context");
    V.ack_cq_events(cq, 1);
    expect_sq(s, Q_CHAN, 91, IBV_WC_SUCCESS, "channel: the completion");
    wr64(s, s->qp[Q_CHAN], 92, s->peer.addr + MISC + 20000, s->peer.rkey);
    expect_sq(s, Q_CHAN, 92, IBV_WC_SUCCESS, "channel: unarmed completion");
    check(poll(&p, 1, 0) == 0, "channel: one arming, one event");
}

/* B is SIGKILLed; A's write to it fails after (retry_cnt+1) x 4.096 us x 2^timeout. */
static void phase_dead(struct side *s, int32_t peer_fails)
{
    const double nominal = 3 * 4.096e-3 * 4096; /* retry_cnt 2, timeout 12: 50.3 ms */
    g_fail += peer_fails;
    check(kill(s->peer.pid, SIGKILL) == 0, "dead: SIGKILL the peer");
    double t0 = now_ms();
    wr64(s, s->qp[Q_DEAD], 111, s->peer.addr + MISC, s->peer.rkey);
    expect_sq(s, Q_DEAD, 111, IBV_WC_RETRY_EXC_ERR, "dead: write to a killed peer");
    double ms = now_ms() - t0;
    check(ms >= 0.9 * nominal && ms < 2000, "dead: failed after %.1f ms (nominal %.1f ms)", ms,
          nominal);
    post(s->qp[Q_DEAD], IBV_WR_SEND, 112, s->buf + MISC, 8, s->mr->lkey, 0, 0, 0, 0);
    expect_sq(s, Q_DEAD, 112, IBV_WC_WR_FLUSH_ERR, "dead: a later unsignaled post flushes");
}

static int setup(struct side *s, int role, int sock, int nqp)
{
    s->role = role;
    s->sock = sock;
    if (side_open(s, 0, nqp) || write(sock, &s->me, sizeof(s->me)) != sizeof(s->me) ||
        recv(sock, &s->peer, sizeof(s->peer), MSG_WAITALL) != sizeof(s->peer)) {
        check(0, "setup: open, create %d QPs, exchange: %s", nqp, strerror(errno));
        return -1;
    }
    int rc = 0, i = 0; /* eth: GIDs 3 and 1; ib: LIDs, and one QP through its GID */
    for (; i < nqp && !rc; i++)
        rc = connect_qp(s, i, s->eth ? (i % 2 ? 1 : 3) : i == Q_RNR7 ? 0 : -1);
    if (rc)
        check(0, "setup: connect QP %d: %s", i - 1, strerror(rc));
    return rc ? -1 : 0;
}

static int run_rc(int role, int sock)
{
    struct side s = {0};
    g_who = role ? "B" : "A";
    if (setup(&s, role, sock, NQP))
        return 1;
    check(s.port.state == IBV_PORT_ACTIVE && s.port.link_layer == IBV_LINK_LAYER_INFINIBAND &&
              s.port.lid != 0 && s.port.lid != s.peer.lid && s.port.active_mtu == IBV_MTU_4096,
          "port: active, InfiniBand, LID %u (peer %u), MTU 4096", s.port.lid, s.peer.lid);
    phase_data(&s);
    phase_placement(&s);
    phase_send(&s);
    phase_errors(&s);
    if (role == 0) {
        phase_local(&s);
        phase_chan(&s);
        phase_dead(&s, tok_recv(&s, 10000));
        side_close(&s, NQP);
    } else {
        uint8_t *t = s.buf + MISC + 16384; /* phase_local's unsignaled writes land, in order */
        double end = now_ms() + 5000;
        for (tok_recv(&s, 10000); diff(t + 24, 8, 0, 4, 0) && now_ms() < end;)
            usleep(100);
        check(!diff(t, 8, 0, 4, 0) && !diff(t + 24, 8, 0, 4, 0),
              "fill: 4 unsignaled writes landed");
        tok_send(&s, 9);
        tok_send(&s, g_fail);
        tok_recv(&s, 60000); /* killed here */
    }
    return g_fail;
}

/* SOFTVERBS_FAULT=qp_err@2,rkey@3,drop@5 in A: post_send calls are counted per process. */
static int run_faults(int role, int sock)
{
    struct side s = {.faults = 1};
    g_who = role ? "B" : "A";
    if (setup(&s, role, sock, 4))
        return 1;
    uint64_t misc = s.peer.addr + MISC;
    if (role == 1) {
        memset(s.buf + TARGET, 0xab, 4096);
        tok_send(&s, 1);
        tok_recv(&s, 10000);
        check(!diff(s.buf + TARGET, 4096, -1, 0xab, 0), "faults: the corrupted-rkey write refused");
        wr64(&s, s.qp[3], 4, misc, s.peer.rkey);
        expect_sq(&s, 3, 4, IBV_WC_RETRY_EXC_ERR, "faults: a write to the dark process");
        tok_send(&s, g_fail);
    } else {
        tok_recv(&s, 10000);
        wr64(&s, s.qp[0], 1, misc, s.peer.rkey);
        expect_sq(&s, 0, 1, IBV_WC_SUCCESS, "faults: post 1");
        wr64(&s, s.qp[0], 2, misc, s.peer.rkey);
        expect_sq(&s, 0, 2, IBV_WC_WR_FLUSH_ERR, "faults: qp_err@2");
        check(qp_state(s.qp[0]) == IBV_QPS_ERR, "faults: qp_err@2 left the QP in the error state");
        wr64(&s, s.qp[1], 3, s.peer.addr + TARGET, s.peer.rkey);
        expect_sq(&s, 1, 3, IBV_WC_REM_ACCESS_ERR, "faults: rkey@3");
        wr64(&s, s.qp[2], 4, misc, s.peer.rkey);
        expect_sq(&s, 2, 4, IBV_WC_SUCCESS, "faults: post 4");
        wr64(&s, s.qp[2], 5, misc, s.peer.rkey);
        expect_sq(&s, 2, 5, IBV_WC_RETRY_EXC_ERR, "faults: drop@5");
        tok_send(&s, 2);
        g_fail += tok_recv(&s, 10000);
    }
    side_close(&s, 4);
    return g_fail;
}

/* ---- eth: RoCE addressing -------------------------------------------------------------------- */

static int run_eth(int role, int sock)
{
    struct side s = {.eth = 1};
    struct ibv_wc wc;
    g_who = role ? "B" : "A";
    if (setup(&s, role, sock, 2))
        return 1;
    check(s.port.link_layer == IBV_LINK_LAYER_ETHERNET && s.port.active_mtu == IBV_MTU_1024 &&
              s.port.lid == 0 && s.port.gid_tbl_len == 4,
          "eth: port is Ethernet, MTU 1024, no LID, 4 GIDs");
    struct ibv_gid_entry e;
    union ibv_gid gid;
    int types_ok = V.query_gid(s.ctx, 1, 4, &gid) == -1;
    for (uint32_t g = 0; g < 5; g++) {
        int rc = V.query_gid_ex(s.ctx, 1, g, &e, 0, sizeof(e));
        types_ok &= g == 4
                        ? rc != 0
                        : !rc && e.gid_index == g && e.port_num == 1 && !e.ndev_ifindex &&
                              e.gid_type == (g % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1) &&
                              !memcmp(e.gid.raw, s.me.gid[g].raw, 16);
    }
    const uint8_t *v4 = s.me.gid[2].raw;
    check(types_ok && s.me.gid[0].raw[0] == 0xfe && s.me.gid[0].raw[1] == 0x80 &&
              !memcmp(&s.me.gid[0], &s.me.gid[1], 16) && !memcmp(&s.me.gid[2], &s.me.gid[3], 16) &&
              v4[10] == 0xff && v4[11] == 0xff && v4[12] == 127 && !diff(v4, 10, -1, 0, 0),
          "eth: GIDs fe80::/64 RoCE v1, v2, ::ffff:127.%u.%u.%u RoCE v1, v2; no index 4", v4[13],
          v4[14], v4[15]);
    if (role == 1) {
        for (int i = 0; i < 2; i++)
            post_recv2(s.qp[i], 50u + i, s.buf + CANARY, 0, NULL, 0, s.mr->lkey);
        tok_send(&s, 1);
        for (int i = 0; i < 2; i++)
            check(wait_wc(s.rcq[i], &wc, 5000) && wc.status == IBV_WC_SUCCESS &&
                      wc.wr_id == 50u + i && wc.byte_len == MIB && wc.imm_data == htonl(7u + i) &&
                      !diff(s.buf + DST + (size_t)i * MIB, MIB, 0, 60 + i, 0),
                  "eth: 1 MiB write with immediate through GID %d lands", i ? 1 : 3);
        tok_send(&s, 2);
    } else {
        tok_recv(&s, 10000);
        for (int i = 0; i < 2; i++) {
            fill(s.buf + SRC + (size_t)i * MIB, MIB, 0, 60 + i);
            post(s.qp[i], IBV_WR_RDMA_WRITE_WITH_IMM, 60u + i, s.buf + SRC + (size_t)i * MIB, MIB,
                 s.mr->lkey, s.peer.addr + DST + (size_t)i * MIB, s.peer.rkey, htonl(7u + i),
                 IBV_SEND_SIGNALED);
            expect_wc(s.scq[i], 60u + i, IBV_WC_SUCCESS, s.qp[i]->qp_num, "eth: the write");
        }
        tok_recv(&s, 10000);
        /* RoCE needs a GRH, and no path MTU beyond the port's active MTU. */
        struct ibv_qp *qp = spare_qp(&s);
        struct ibv_qp_attr a;
        rtr_attr(&s, 0, -1, &a);
        a.ah_attr.dlid = 1;
        check(!to_init(qp) && V.modify_qp(qp, &a, M_RTR) == EINVAL,
              "eth: RTR without a GRH is EINVAL");
        rtr_attr(&s, 0, 3, &a);
        a.path_mtu = IBV_MTU_4096;
        check(V.modify_qp(qp, &a, M_RTR) == EINVAL, "eth: path MTU 4096 over a 1024 port: EINVAL");
        a.path_mtu = IBV_MTU_1024;
        check(V.modify_qp(qp, &a, M_RTR) == 0, "eth: RTR with a GRH");
        V.destroy_qp(qp);
    }
    side_close(&s, 2);
    return g_fail;
}

/* ---- list: devices, one process with two contexts, threads, malformed env, fd hygiene -------- */

/* A proxy thread writes from a to b while the main thread creates and destroys objects. */
static void *proxy_main(void *arg)
{
    struct side *a = arg, *b = (struct side *)arg + 1;
    struct ibv_wc wc;
    intptr_t bad = 0;
    for (int r = 0; r < 200; r++) {
        uint32_t len = (uint32_t)(r * 997) % 65536 + 1;
        fill(a->buf + SRC, len, 0, r);
        post(a->qp[0], IBV_WR_RDMA_WRITE, (uint64_t)r, a->buf + SRC, len, a->mr->lkey,
             b->me.addr + DST, b->me.rkey, 0, IBV_SEND_SIGNALED);
        bad += !wait_wc(a->scq[0], &wc, 5000) || wc.status != IBV_WC_SUCCESS ||
               wc.wr_id != (uint64_t)r || diff(b->buf + DST, len, 0, r, 0);
    }
    return (void *)bad;
}

static void two_contexts(void)
{
    struct side ab[2] = {{0}, {.role = 1}}, *a = &ab[0], *b = &ab[1];
    void *bad = NULL;
    pthread_t t;
    if (side_open(a, 0, 1) || side_open(b, 0, 1)) {
        check(0, "threads: open two contexts of softverbs0");
        return;
    }
    a->peer = b->me;
    b->peer = a->me;
    check(a->port.lid != b->port.lid && !connect_qp(a, 0, -1) && !connect_qp(b, 0, -1),
          "threads: two contexts of one device get LIDs %u and %u and connect", a->port.lid,
          b->port.lid);
    pthread_create(&t, NULL, proxy_main, ab);
    int churn_bad = 0;
    for (int r = 0; r < 200; r++) {
        struct side *s = &ab[r % 2];
        struct ibv_cq *cq = V.create_cq(s->ctx, 16, NULL, NULL, 0);
        struct ibv_qp_init_attr ia = {
            .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 8}};
        struct ibv_qp *qp = cq ? V.create_qp(s->pd, &ia) : NULL;
        struct ibv_mr *mr = V.reg_mr(s->pd, s->buf + MISC, 4096, IBV_ACCESS_LOCAL_WRITE);
        churn_bad +=
            !qp || !mr || to_init(qp) || V.destroy_qp(qp) || V.dereg_mr(mr) || V.destroy_cq(cq);
    }
    pthread_join(t, &bad);
    check(!bad && !churn_bad,
          "threads: 200 writes between the contexts while another thread made and destroyed 200 "
          "QPs, CQs and MRs (%d bad writes, %d bad objects)",
          (int)(intptr_t)bad, churn_bad);
    side_close(b, 1);
    side_close(a, 1);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    return d && !closedir(d) ? n : -1;
}

static int run_list(void)
{
    int n = -1;
    g_who = "list";
    struct ibv_device **l = V.get_device_list(&n);
    check(l && n == 2 && !l[2] && !strcmp(V.get_device_name(l[0]), "softverbs0") &&
              !strcmp(V.get_device_name(l[1]), "softverbs1"),
          "list: SOFTVERBS_DEVICES=2 lists softverbs0 and softverbs1");
    for (int d = 0; l && d < n && d < 2; d++) {
        struct ibv_context *ctx = V.open_device(l[d]);
        struct ibv_port_attr port;
        struct ibv_device_attr da;
        enum ibv_port_state want = d ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
        check(ctx && !V.query_port(ctx, 1, &port) && port.state == want &&
                  !strcmp(V.port_state_str(port.state), d ? "PORT_DOWN" : "PORT_ACTIVE") &&
                  !V.query_device(ctx, &da) && da.phys_port_cnt == 1 && da.max_qp_wr >= 4096 &&
                  da.max_sge >= 16 && da.max_cqe >= 65536,
              "list: %s port 1 is %s", l[d]->name, V.port_state_str(want));
        if (ctx)
            V.close_device(ctx);
    }
    if (l)
        V.free_device_list(l);
    two_contexts();
    int before = count_fds();
    for (int r = 0; r < 20; r++) {
        struct side s = {0};
        if (side_open(&s, 0, 2)) {
            check(0, "hygiene: open/close cycle %d", r);
            break;
        }
        side_close(&s, 2);
    }
    check(count_fds() == before, "hygiene: 20 open/close cycles leave %d fds (before: %d)",
          count_fds(), before);
    /* Last, as each unsetenv leaves the defaults behind. */
    static const char *const bad[][2] = {
        {"SOFTVERBS_DEVICES", "two"},       {"SOFTVERBS_DEVICES", "99"},
        {"SOFTVERBS_FAULT", "boom@1"},      {"SOFTVERBS_FAULT", "drop@0"},
        {"SOFTVERBS_FAULT", "qp_err"},      {"SOFTVERBS_LINK_LAYER", "fddi"},
        {"SOFTVERBS_PORTS_DOWN", "mlx5_0"}, {"SOFTVERBS_DEBUG", "yes"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        errno = 0;
        l = V.get_device_list(&n);
        check(!l && errno == EINVAL, "env: %s=%s is refused with EINVAL", bad[i][0], bad[i][1]);
        unsetenv(bad[i][0]);
    }
    return g_fail;
}

/* Runs fn as A and B in two processes joined by a socketpair. */
static void run_pair(int (*fn)(int, int), const char *faults_a, int b_killed)
{
    int sv[2], st[2];
    pid_t pid[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        check(0, "socketpair: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            close(sv[!r]);
            if (r == 0 && faults_a)
                setenv("SOFTVERBS_FAULT", faults_a, 1);
            alarm(40); /* a hang fails here, before ctest's TIMEOUT */
            g_fail = 0;
            exit(fn(r, sv[r]) ? 1 : 0); /* not _exit: LeakSanitizer checks the children too */
        }
    }
    close(sv[0]);
    close(sv[1]);
    for (int r = 0; r < 2; r++)
        waitpid(pid[r], &st[r], 0);
    check(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 0, "process A passed (status 0x%x)", st[0]);
    check(b_killed ? WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL
                   : WIFEXITED(st[1]) && WEXITSTATUS(st[1]) == 0,
          "process B %s (status 0x%x)", b_killed ? "was SIGKILLed by A" : "passed", st[1]);
}

int main(int argc, char **argv)
{
    const char *mode = argc == 3 ? argv[2] : "";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "rc") && strcmp(mode, "eth") && strcmp(mode, "list")) {
        fprintf(stderr, "usage: %s path/to/libsoftverbs.so rc|eth|list\n", argv[0]);
        return 2;
    }
    if (load(argv[1]))
        return 1;
    double t0 = now_ms();
    check(V.fork_init() == 0, "fork_init returns 0");
    if (!strcmp(mode, "rc")) {
        run_pair(run_rc, NULL, 1);
        run_pair(run_faults, "qp_err@2,rkey@3,drop@5", 0);
    } else if (!strcmp(mode, "eth")) {
        run_pair(run_eth, NULL, 0);
    } else {
        run_list();
    }
    printf("%s: softverbs %s, %d failure(s), %.0f ms\n", g_fail ? "FAIL" : "PASS", mode, g_fail,
           now_ms() - t0);
    return g_fail ? 1 : 0;
}
