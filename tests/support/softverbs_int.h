/*
 * softverbs_int.h: the private structures of softverbs, the user-space libibverbs emulator that
 * tests load instead of libibverbs.so.1 (softverbs.c: the verbs objects and calls;
 * softverbs_wire.c: the per-context "NIC" thread and its wire protocol). Every public verbs
 * object is the rdma-core struct embedded first in a private one, so a consumer sees exactly the
 * fields it would see on hardware. One mutex per context guards every object of that context;
 * the NIC thread takes it for each batch of work and never blocks while holding it.
 */
#ifndef SOFTVERBS_INT_H
#define SOFTVERBS_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#define SV_MAX_DEVICES 16
#define SV_MAX_WR 4096
#define SV_MAX_SGE 16
#define SV_MAX_INLINE 256
#define SV_MAX_CQE 65536
#define SV_MAX_RD_ATOMIC 16
#define SV_MAX_MSG (1u << 30) /* port max_msg_sz; larger messages fail with LOC_LEN_ERR */
#define SV_LID_MAX 0xbfff /* unicast LIDs are 1..0xbfff */
#define SV_MAX_FAULTS 8
#define SV_PSN_MASK 0xffffffu

/* The library is built with hidden visibility; only the libibverbs API is exported. */
#define SV_EXPORT __attribute__((visibility("default")))

enum sv_fault_kind { SV_FAULT_QP_ERR, SV_FAULT_DROP, SV_FAULT_RKEY };

/* The SOFTVERBS_* environment, parsed whole so a malformed value is an error, never a default. */
struct sv_env {
    int ndevices;
    int eth; /* SOFTVERBS_LINK_LAYER=eth */
    int debug;
    char port_down[SV_MAX_DEVICES];
    int nfaults;
    struct {
        int kind;
        uint64_t n;
    } fault[SV_MAX_FAULTS];
};

struct sv_pd {
    struct ibv_pd pd;
    struct sv_pd *next;
    int nmr, nqp; /* dealloc_pd is EBUSY while either is non-zero */
};

struct sv_mr {
    struct ibv_mr mr;
    struct sv_mr *next;
    int access;
    uint64_t iova; /* the address remote and local sges name; addr + (x - iova) is the byte */
};

struct sv_chan {
    struct ibv_comp_channel ch;
    struct sv_chan *next;
    int wfd; /* write end of the pipe whose read end is ch.fd: one struct sv_cq * per event */
    int ncq;
};

struct sv_cq {
    struct ibv_cq cq;
    struct sv_cq *next;
    struct ibv_wc *ring;
    uint32_t cap, head;
    uint32_t count; /* written under the lock, read without it (atomic) by an empty poll */
    int armed, overrun, nqp;
    uint32_t events; /* events written to the channel; destroy needs as many acks */
};

enum sv_wqe_state { SV_WQE_POSTED, SV_WQE_SENT };

/* A send work request, its payload copied at post time. */
struct sv_swqe {
    uint64_t wr_id;
    char *data;
    uint64_t raddr;
    uint32_t len, psn, npkts, rkey, imm; /* imm: the __be32 exactly as posted */
    uint8_t opcode; /* enum ibv_wr_opcode */
    uint8_t signaled;
    uint8_t err; /* a local error found at post (LOC_PROT/LOC_LEN), reported in order */
    uint8_t rnr_tries;
};

struct sv_rwqe {
    uint64_t wr_id;
    int nsge;
    struct ibv_sge *sge; /* max_recv_sge entries in qp->rsge */
};

/*
 * Send queue indices are free-running counters, slot = index % sq_cap:
 * [sq_head, sq_una) executed but unsignaled (their slots wait for a later signaled completion),
 * [sq_una, sq_next) sent and awaiting an acknowledgement, [sq_next, sq_tail) not yet sent.
 */
struct sv_qp {
    struct ibv_qp qp;
    struct sv_qp *next;
    struct ibv_qp_cap cap;
    int sq_sig_all;
    struct ibv_qp_attr a; /* every attribute as last set by modify_qp */
    uint16_t dlid; /* the peer's endpoint, resolved from the AV at RTR; 0: unreachable */
    struct sv_swqe *sq;
    uint32_t sq_cap, sq_head, sq_una, sq_next, sq_tail;
    uint32_t next_psn; /* requester: PSN of the next posted message */
    uint32_t epsn; /* responder: the PSN the next request must carry */
    uint64_t timer_start, rnr_until; /* ns, CLOCK_MONOTONIC */
    int rnr_single; /* after an RNR NAK: resend only the oldest until it is acknowledged */
    struct sv_rwqe *rq;
    struct ibv_sge *rsge;
    uint32_t rq_cap, rq_head, rq_tail;
};

struct sv_conn;

struct sv_ctx {
    struct ibv_context ctx;
    pthread_mutex_t lock;
    struct sv_env env;
    int devidx;
    int port_down;
    uint16_t lid; /* this context's endpoint: \0softverbs-<uid>-<lid> */
    int listen_fd, wake_fd;
    pthread_t nic;
    int nic_started, stop;
    uint32_t next_qpn;
    uint64_t connect_retry; /* ns: a connect found the peer's backlog full; retry then */
    struct sv_pd *pds;
    struct sv_mr *mrs;
    struct sv_chan *chans;
    struct sv_cq *cqs;
    struct sv_qp *qps;
    struct sv_conn *conns; /* NIC thread only */
};

/* softverbs.c */
uint64_t sv_now_ns(void);
void sv_cq_push(struct sv_ctx *c, struct sv_cq *cq, const struct ibv_wc *wc);
struct sv_mr *sv_mr_find(struct sv_ctx *c, uint32_t key, int is_rkey);
void *sv_mr_range(struct sv_mr *m, struct ibv_pd *pd, uint64_t addr, uint64_t len, int need);
struct sv_qp *sv_qp_find(struct sv_ctx *c, uint32_t qpn);

#define sv_trace(c, ...)                                                                           \
    do {                                                                                           \
        if ((c)->env.debug) {                                                                      \
            fprintf(stderr, "softverbs[%u]: ", (unsigned)(c)->lid);                                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* softverbs_wire.c */
int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void sv_faults_set(const struct sv_env *e);
int sv_dark(struct sv_ctx *c);
void sv_qp_fail(struct sv_ctx *c, struct sv_qp *q, enum ibv_wc_status st);
void sv_qp_flush(struct sv_ctx *c, struct sv_qp *q);
int sv_nic_start(struct sv_ctx *c);
void sv_nic_stop(struct sv_ctx *c);
void sv_nic_wake(struct sv_ctx *c);
void sv_gid_make(uint16_t lid, int index, union ibv_gid *gid);
uint16_t sv_gid_lid(const union ibv_gid *gid);

#endif
