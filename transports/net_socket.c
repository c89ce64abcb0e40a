/*
 * net_socket.c: the TCP socket net plugin ("Socket", net.h), for hosts without RDMA.
 *
 * Devices are the interfaces CHORUS_SOCKET_IFNAME selects, chosen as the bootstrap chooses them. A
 * connection is nsocks TCP sockets, all opened by the connector; each proves the listener's nonce
 * with a hello before accept counts it. One message on the wire (host byte order, like NCCL):
 *
 *   socket 0: [hdr {magic, tag, nbytes, seq}] [chunk 0]   chunk = max(64 KiB, ceil(nbytes/nsocks)
 *   socket k: [chunk k]           for 0 < k < nchunks              rounded up to 4 KiB)
 *
 * Both ends derive the chunking from nbytes alone, so socket k carries chunk k of every message
 * that has one, in message order, with no negotiation. The receiver reads the header by itself and
 * checks tag and size against the posted irecv before any payload lands in the buffer.
 *
 * Work flows through one single-producer single-consumer queue of parts per socket: isend queues
 * every part of a message at once; irecv queues only the socket-0 part, and whoever reads that
 * header queues the parts of sockets 1..nchunks-1. A request is done when its parts are; test()
 * reports requests in posting order. The I/O is done either by test() itself (nthreads 0: the
 * core's proxy thread) or by helper threads, socket k owned by thread k % nthreads, which poll
 * their sockets and an eventfd and sleep when their queues are empty. isend/irecv/test/close of one
 * comm are called from one thread at a time (the proxy thread), as in NCCL.
 */
#define _GNU_SOURCE
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "debug.h"
#include "fifo.h"
#include "socket.h"

#define NS_MAGIC_HANDLE 0x4b434f5343524843ull /* "CHRCSOCK" */
#define NS_MAGIC_HELLO 0x4f4c4c4543524843ull /* "CHRCELLO" */
#define NS_MAGIC_MSG 0x4753434du /* "MCSG" */
#define NS_MAX_DEVS 4
#define NS_MAX_SOCKS 64 /* the bound params.c puts on nsocks_perthread x nthreads */
#define NS_MIN_CHUNK (64 * 1024)
#define NS_CHUNK_ALIGN 4096
#define NS_QDEPTH NET_MAX_REQUESTS /* a request has at most one part per socket */
/* A connection silent this long before its hello is complete is dropped. */
#define NS_HELLO_WAIT_NS 2000000000ll
#define NS_POLL_MS 100 /* longest poll: bounds how long close waits for a helper thread */
#define NS_MAX_PENDING 64 /* connections accepted but not yet verified */
#define NS_MAX_MEMBERS (2 * NS_MAX_SOCKS) /* verified sockets waiting for the rest of their set */

/* The handle the listener gives the connector (fits NET_HANDLE_BYTES). */
typedef struct ns_handle {
    uint64_t magic;
    uint64_t nonce; /* random per listen: a connection must echo it */
    uint32_t nsocks; /* sockets the listener expects: the connector opens exactly these */
    sock_addr_t addr; /* the listener's address, never a wildcard */
} ns_handle_t;
_Static_assert(sizeof(ns_handle_t) == 48, "ns_handle_t is a wire format");
_Static_assert(sizeof(ns_handle_t) <= NET_HANDLE_BYTES, "socket handle too large");

/* First bytes on every data socket, connector to listener. */
typedef struct ns_hello {
    uint64_t magic;
    uint64_t nonce;
    uint64_t conn_id; /* random per connect: sockets of two connect calls never mix */
    uint32_t index; /* this socket's place in the connection, 0..nsocks-1 */
    uint32_t nsocks;
} ns_hello_t;
_Static_assert(sizeof(ns_hello_t) == 32, "ns_hello_t is a wire format");

/* Header of one message, on socket 0 only. */
typedef struct ns_msg_hdr {
    uint32_t magic;
    int32_t tag;
    uint64_t nbytes;
    uint64_t seq; /* message number on this connection: catches a desynchronised stream */
} ns_msg_hdr_t;
_Static_assert(sizeof(ns_msg_hdr_t) == 24, "ns_msg_hdr_t is a wire format");

typedef struct ns_ctx {
    net_config_t cfg;
    char ifname_spec[256];
    int ndev;
    sock_addr_t addrs[NS_MAX_DEVS];
    char names[NS_MAX_DEVS][64];
} ns_ctx_t;

struct ns_comm;

typedef struct ns_req {
    struct ns_comm *comm;
    uint64_t seq;
    char *data;
    size_t maxsize; /* irecv: the most it accepts */
    int tag;
    size_t nbytes; /* bytes of the message (irecv: from the header) */
    ns_msg_hdr_t hdr; /* isend: what goes out; irecv: what came in */
    atomic_uint pending; /* parts not finished; 0: done */
    int reported; /* test() said done */
} ns_req_t;

/* One socket's share of one message. */
typedef struct ns_part {
    ns_req_t *req;
    char *buf;
    size_t nbytes;
    int with_hdr; /* socket 0: the header goes first */
} ns_part_t;

typedef struct ns_sock {
    int fd;
    ns_part_t q[NS_QDEPTH];
    atomic_uint_fast64_t head; /* parts finished: written by the socket's I/O owner */
    atomic_uint_fast64_t tail; /* parts queued: written by the queue's one producer */
    size_t off; /* bytes of the current part moved, header included */
    short want; /* POLLIN/POLLOUT while blocked on the socket; 0 while the queue is empty */
    uint64_t seen_tail; /* tail when the queue was last seen empty */
} ns_sock_t;

typedef struct ns_thread {
    struct ns_comm *comm;
    int index;
    int efd; /* eventfd: a producer wakes a sleeping thread */
    atomic_int sleeping;
    pthread_t tid;
    int started;
} ns_thread_t;

typedef struct ns_comm {
    ns_ctx_t *ctx;
    int is_send;
    int nsocks;
    int nthreads; /* helper threads; 0: test() does the I/O */
    char peer[80];
    ns_sock_t *socks;
    ns_thread_t *threads;
    ns_req_t reqs[NS_QDEPTH];
    uint64_t posted; /* requests posted */
    uint64_t done_upto; /* requests [0, done_upto) are done */
    uint64_t freed; /* requests [0, freed) are reported and their slots free */
    atomic_int stop;
    pthread_mutex_t err_lock;
    atomic_int has_err;
    chorusResult_t err;
    char errmsg[384];
    int err_reported;
} ns_comm_t;

typedef struct ns_pending {
    int fd;
    int64_t since_ns;
    size_t got;
    ns_hello_t hello;
} ns_pending_t;

typedef struct ns_member {
    int fd;
    uint64_t conn_id;
    uint32_t index;
} ns_member_t;

typedef struct ns_listen {
    ns_ctx_t *ctx;
    int dev;
    int fd;
    sock_addr_t addr;
    uint64_t nonce;
    uint32_t nsocks;
    int npend;
    ns_pending_t pend[NS_MAX_PENDING];
    int nmem;
    ns_member_t mem[NS_MAX_MEMBERS];
} ns_listen_t;

static char ns_mr_token; /* what reg_mr hands out: sockets need no registration */

static int64_t ns_deadline(const ns_ctx_t *ctx)
{
    return fifo_now_ns() + ctx->cfg.timeout_ms * 1000000;
}

static int ns_aborted(const ns_ctx_t *ctx)
{
    /* Atomic: another thread (chorusCommAbort, a failed channel) raises the flag. */
    return ctx->cfg.abort_flag != NULL && __atomic_load_n(ctx->cfg.abort_flag, __ATOMIC_ACQUIRE);
}

/* ---- setup: init, devices, properties ---- */

static chorusResult_t ns_init(const net_config_t *cfg, void **ctx_p)
{
    if (cfg->nsocks_perthread < 1 || cfg->nthreads < 0 ||
        cfg->nsocks_perthread * (cfg->nthreads > 0 ? cfg->nthreads : 1) > NS_MAX_SOCKS)
        return ERR(chorusInvalidArgument, SUB_NET,
                   "Socket plugin: %d sockets per thread x %d threads is outside 1..%d sockets "
                   "per connection (CHORUS_NSOCKS_PERTHREAD, CHORUS_SOCKET_NTHREADS)",
                   cfg->nsocks_perthread, cfg->nthreads, NS_MAX_SOCKS);
    if (cfg->timeout_ms <= 0)
        return ERR(chorusInvalidArgument, SUB_NET, "Socket plugin: timeout_ms %lld is not positive",
                   (long long)cfg->timeout_ms);
    ns_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return ERR(chorusSystemError, SUB_NET, "Socket plugin: out of memory");
    ctx->cfg = *cfg;
    snprintf(ctx->ifname_spec, sizeof(ctx->ifname_spec), "%s",
             cfg->ifname_spec ? cfg->ifname_spec : "");
    ctx->cfg.ifname_spec = ctx->ifname_spec;
    chorusResult_t res = sock_list_addrs(ctx->ifname_spec, NS_MAX_DEVS, ctx->addrs,
                                         &ctx->names[0][0], sizeof(ctx->names[0]), &ctx->ndev);
    if (res != chorusSuccess) {
        free(ctx);
        return res;
    }
    if (ctx->ndev == 0)
        WARN(SUB_NET, "Socket plugin: no interface that is up matches CHORUS_SOCKET_IFNAME=\"%s\"",
             ctx->ifname_spec);
    for (int d = 0; d < ctx->ndev; d++) {
        char str[80];
        INFO(SUB_NET, "Socket plugin: device %d is %s (%s)", d, ctx->names[d],
             sock_addr_str(&ctx->addrs[d], str, sizeof(str)));
    }
    *ctx_p = ctx;
    return chorusSuccess;
}

static chorusResult_t ns_devices(void *vctx, int *ndev_p)
{
    *ndev_p = ((ns_ctx_t *)vctx)->ndev;
    return chorusSuccess;
}

static chorusResult_t ns_check_dev(const ns_ctx_t *ctx, int dev)
{
    if (dev < 0 || dev >= ctx->ndev)
        return ERR(chorusInvalidArgument, SUB_NET, "Socket plugin: device %d is not in 0..%d", dev,
                   ctx->ndev - 1);
    return chorusSuccess;
}

/* Link speed from sysfs; 0 when the file is absent, unreadable, or says -1 (virtual links). */
static int ns_read_speed(const char *ifname)
{
    char path[160];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int mbps = 0;
    if (fscanf(f, "%d", &mbps) != 1 || mbps < 0)
        mbps = 0;
    fclose(f);
    return mbps;
}

static chorusResult_t ns_get_properties(void *vctx, int dev, net_props_t *props_p)
{
    ns_ctx_t *ctx = vctx;
    CHECK(ns_check_dev(ctx, dev));
    net_props_t p;
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", ctx->names[dev]);
    char path[160], real[PATH_MAX];
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", ctx->names[dev]);
    if (realpath(path, real) != NULL)
        snprintf(p.pci_path, sizeof(p.pci_path), "%s", real);
    p.speed_mbps = ctx->cfg.speed_mbps > 0 ? ctx->cfg.speed_mbps : ns_read_speed(ctx->names[dev]);
    /* A guess, for the tuner's latency term: a NIC behind a bus costs tens of microseconds through
     * the kernel stack and the wire; loopback and veth (no device) only the stack. */
    p.latency_us = p.pci_path[0] != '\0' ? 50.0 : 5.0;
    p.port = 0;
    p.max_comms = 65536;
    p.ptr_support = NET_PTR_HOST;
    *props_p = p;
    return chorusSuccess;
}

/* ---- errors: recorded where detected (maybe a helper thread), reported by test() ---- */

static chorusResult_t ns_fail(ns_comm_t *c, chorusResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static chorusResult_t ns_fail(ns_comm_t *c, chorusResult_t res, const char *fmt, ...)
{
    pthread_mutex_lock(&c->err_lock);
    if (!atomic_load(&c->has_err)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
        va_end(ap);
        c->err = res;
        atomic_store(&c->has_err, 1);
    }
    pthread_mutex_unlock(&c->err_lock);
    return res;
}

/* On the caller's thread: log the comm's error once at WARN and record it as the last error. */
static chorusResult_t ns_report(ns_comm_t *c)
{
    pthread_mutex_lock(&c->err_lock);
    chorusResult_t res = c->err;
    char msg[sizeof(c->errmsg)];
    snprintf(msg, sizeof(msg), "%s", c->errmsg);
    int first = !c->err_reported;
    c->err_reported = 1;
    pthread_mutex_unlock(&c->err_lock);
    if (first)
        return ERR(res, SUB_NET, "Socket plugin: %s", msg);
    TRACE(SUB_NET, "Socket plugin: still failed: %s", msg);
    return res;
}

/* A send or recv on socket s failed with err (0: end of stream) during its current part. */
static chorusResult_t ns_io_error(ns_comm_t *c, const char *op, int err, const ns_sock_t *s)
{
    const ns_part_t *p = &s->q[atomic_load(&s->head) % NS_QDEPTH];
    char where[128];
    if (p->with_hdr && s->off == 0)
        snprintf(where, sizeof(where), "%s message #%llu", c->is_send ? "sending" : "waiting for",
                 (unsigned long long)p->req->seq);
    else
        snprintf(where, sizeof(where), "in message #%llu, socket %d at byte %zu of its part",
                 (unsigned long long)p->req->seq, (int)(s - c->socks), s->off);
    if (err == 0 || err == ECONNRESET || err == EPIPE)
        return ns_fail(c, chorusRemoteError, "peer %s closed the connection (%s: %s, %s)", c->peer,
                       op, err ? strerror(err) : "end of stream", where);
    return ns_fail(c, chorusRemoteError, "%s with peer %s failed: %s (%s)", op, c->peer,
                   strerror(err), where);
}

/* ---- queues and wakeups ---- */

static size_t ns_chunk(size_t nbytes, int nsocks)
{
    size_t c = nbytes / (size_t)nsocks + (nbytes % (size_t)nsocks != 0);
    c = (c + NS_CHUNK_ALIGN - 1) / NS_CHUNK_ALIGN * NS_CHUNK_ALIGN;
    return c < NS_MIN_CHUNK ? NS_MIN_CHUNK : c;
}

static int ns_nchunks(size_t nbytes, size_t chunk)
{
    return (int)(nbytes / chunk + (nbytes % chunk != 0));
}

static void ns_push(ns_comm_t *c, int k, ns_req_t *r, char *buf, size_t nbytes, int with_hdr)
{
    ns_sock_t *s = &c->socks[k];
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    s->q[tail % NS_QDEPTH] = (ns_part_t){r, buf, nbytes, with_hdr};
    atomic_store_explicit(&s->tail, tail + 1, memory_order_release);
}

/* Wake the helper threads owning sockets [k0, k1) if they sleep. The fence pairs with the one in
 * ns_thread_main: either the thread sees the new tail or we see it sleeping. */
static void ns_wake(ns_comm_t *c, int k0, int k1)
{
    if (c->nthreads == 0)
        return;
    atomic_thread_fence(memory_order_seq_cst);
    for (int k = k0; k < k1 && k < k0 + c->nthreads; k++) {
        ns_thread_t *th = &c->threads[k % c->nthreads];
        if (atomic_load_explicit(&th->sleeping, memory_order_relaxed)) {
            uint64_t one = 1;
            ssize_t rc = write(th->efd, &one, sizeof(one));
            (void)rc; /* a full counter already wakes the thread */
        }
    }
}

/* ---- progress: move bytes on one socket until it would block or its queue is empty ---- */

/* The header of message p->req arrived on socket 0: check it against the posted irecv before any
 * payload is read, then queue the message's other chunks on their sockets. */
static chorusResult_t ns_recv_header(ns_comm_t *c, ns_part_t *p)
{
    ns_req_t *r = p->req;
    const ns_msg_hdr_t *h = &r->hdr;
    if (h->magic != NS_MAGIC_MSG || h->seq != r->seq)
        return ns_fail(c, chorusRemoteError,
                       "peer %s sent a malformed message header (magic 0x%x, message #%llu where "
                       "#%llu was due): not a Chorus socket peer, or the stream is corrupt",
                       c->peer, h->magic, (unsigned long long)h->seq, (unsigned long long)r->seq);
    if (h->tag != r->tag)
        return ns_fail(c, chorusRemoteError,
                       "peer %s sent message #%llu with tag %d (%llu bytes) but the posted receive "
                       "has tag %d (at most %zu bytes)",
                       c->peer, (unsigned long long)r->seq, h->tag, (unsigned long long)h->nbytes,
                       r->tag, r->maxsize);
    if (h->nbytes > r->maxsize)
        return ns_fail(c, chorusRemoteError,
                       "peer %s sent message #%llu of %llu bytes (tag %d) but the posted receive "
                       "accepts at most %zu bytes (tag %d)",
                       c->peer, (unsigned long long)r->seq, (unsigned long long)h->nbytes, h->tag,
                       r->maxsize, r->tag);
    r->nbytes = (size_t)h->nbytes;
    size_t chunk = ns_chunk(r->nbytes, c->nsocks);
    int nch = ns_nchunks(r->nbytes, chunk);
    p->nbytes = r->nbytes < chunk ? r->nbytes : chunk;
    if (nch > 1) {
        /* Counted before the parts are visible, so no part can bring pending to 0 early. */
        atomic_fetch_add_explicit(&r->pending, (unsigned)(nch - 1), memory_order_relaxed);
        for (int k = 1; k < nch; k++) {
            size_t off = (size_t)k * chunk;
            size_t len = r->nbytes - off < chunk ? r->nbytes - off : chunk;
            ns_push(c, k, r, r->data + off, len, 0);
        }
        ns_wake(c, 1, nch);
    }
    return chorusSuccess;
}

static chorusResult_t ns_progress(ns_comm_t *c, ns_sock_t *s)
{
    for (;;) {
        uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        if (head == tail) {
            s->want = 0;
            s->seen_tail = tail;
            return chorusSuccess;
        }
        ns_part_t *p = &s->q[head % NS_QDEPTH];
        size_t hlen = p->with_hdr ? sizeof(ns_msg_hdr_t) : 0;
        if (s->off >= hlen && s->off - hlen == p->nbytes) {
            ns_req_t *r = p->req; /* read before head moves: the slot may be refilled after */
            s->off = 0;
            atomic_store_explicit(&s->head, head + 1, memory_order_release);
            atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel);
            continue;
        }
        size_t hdr_left = s->off < hlen ? hlen - s->off : 0;
        size_t pay_done = s->off - (hlen - hdr_left);
        char *hdr = (char *)&p->req->hdr + (hlen - hdr_left);
        ssize_t n;
        if (c->is_send) {
            /* Header and payload in one call; MSG_NOSIGNAL: a dead peer is EPIPE, not SIGPIPE. */
            struct iovec iov[2] = {{hdr, hdr_left}, {p->buf + pay_done, p->nbytes - pay_done}};
            int first = hdr_left ? 0 : 1;
            struct msghdr mh = {.msg_iov = iov + first, .msg_iovlen = (size_t)(2 - first)};
            n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else if (hdr_left) {
            /* The header alone first: its checks come before any byte lands in the buffer. */
            n = recv(s->fd, hdr, hdr_left, MSG_DONTWAIT);
        } else {
            n = recv(s->fd, p->buf + pay_done, p->nbytes - pay_done, MSG_DONTWAIT);
        }
        if (n == 0 && !c->is_send)
            return ns_io_error(c, "recv", 0, s);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                s->want = c->is_send ? POLLOUT : POLLIN;
                return chorusSuccess;
            }
            if (errno == EINTR)
                continue;
            return ns_io_error(c, c->is_send ? "send" : "recv", errno, s);
        }
        s->off += (size_t)n;
        if (!c->is_send && hdr_left && s->off == hlen)
            CHECK(ns_recv_header(c, p));
    }
}

/* ---- helper threads ---- */

static void *ns_thread_main(void *arg)
{
    ns_thread_t *th = arg;
    ns_comm_t *c = th->comm;
    debug_set_rank(c->ctx->cfg.rank);
    struct pollfd pfd[NS_MAX_SOCKS + 1];
    while (!atomic_load(&c->stop)) {
        int ok = !atomic_load(&c->has_err);
        for (int k = th->index; ok && k < c->nsocks; k += c->nthreads)
            ok = ns_progress(c, &c->socks[k]) == chorusSuccess;
        int n = 0;
        pfd[n++] = (struct pollfd){th->efd, POLLIN, 0};
        for (int k = th->index; ok && k < c->nsocks; k += c->nthreads)
            if (c->socks[k].want)
                pfd[n++] = (struct pollfd){c->socks[k].fd, c->socks[k].want, 0};
        /* Say we sleep, then look once more at the queues we found empty. */
        atomic_store_explicit(&th->sleeping, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        int fresh = 0;
        for (int k = th->index; ok && k < c->nsocks; k += c->nthreads)
            if (!c->socks[k].want &&
                atomic_load_explicit(&c->socks[k].tail, memory_order_relaxed) !=
                    c->socks[k].seen_tail)
                fresh = 1;
        if (!fresh && !atomic_load(&c->stop))
            poll(pfd, (nfds_t)n, NS_POLL_MS);
        atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t rc = read(th->efd, &v, sizeof(v));
            (void)rc; /* EAGAIN: another read already drained it */
        }
    }
    return NULL;
}

/* ---- comms ---- */

static void ns_comm_free(ns_comm_t *c)
{
    atomic_store(&c->stop, 1);
    for (int t = 0; t < c->nthreads; t++) {
        if (c->threads[t].started) {
            uint64_t one = 1;
            ssize_t rc = write(c->threads[t].efd, &one, sizeof(one));
            (void)rc;
            int e = pthread_join(c->threads[t].tid, NULL);
            if (e != 0)
                WARN(SUB_NET, "Socket plugin: joining helper thread %d failed: %s", t, strerror(e));
        }
        if (c->threads[t].efd >= 0)
            close(c->threads[t].efd);
    }
    for (int k = 0; k < c->nsocks; k++)
        if (c->socks[k].fd >= 0)
            close(c->socks[k].fd);
    pthread_mutex_destroy(&c->err_lock);
    free(c->threads);
    free(c->socks);
    free(c);
}

static chorusResult_t ns_comm_alloc(ns_ctx_t *ctx, int is_send, int nsocks, ns_comm_t **comm_p)
{
    ns_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ERR(chorusSystemError, SUB_NET, "Socket plugin: out of memory");
    c->ctx = ctx;
    c->is_send = is_send;
    c->nsocks = nsocks;
    c->nthreads = ctx->cfg.nthreads < nsocks ? ctx->cfg.nthreads : nsocks;
    pthread_mutex_init(&c->err_lock, NULL);
    c->socks = calloc((size_t)nsocks, sizeof(ns_sock_t));
    c->threads = calloc(c->nthreads > 0 ? (size_t)c->nthreads : 1, sizeof(ns_thread_t));
    if (c->socks == NULL || c->threads == NULL) {
        c->nsocks = 0;
        c->nthreads = 0;
        ns_comm_free(c);
        return ERR(chorusSystemError, SUB_NET, "Socket plugin: out of memory");
    }
    for (int k = 0; k < nsocks; k++)
        c->socks[k].fd = -1;
    for (int t = 0; t < c->nthreads; t++)
        c->threads[t].efd = -1;
    for (int i = 0; i < NS_QDEPTH; i++)
        c->reqs[i].comm = c;
    *comm_p = c;
    return chorusSuccess;
}

/* All sockets are connected: make them non-blocking with TCP_NODELAY and start the helpers. */
static chorusResult_t ns_comm_start(ns_comm_t *c)
{
    int one = 1;
    for (int k = 0; k < c->nsocks; k++) {
        int fl = fcntl(c->socks[k].fd, F_GETFL);
        if (fl == -1 || fcntl(c->socks[k].fd, F_SETFL, fl | O_NONBLOCK) == -1 ||
            setsockopt(c->socks[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
            return ERR(chorusSystemError, SUB_NET, "Socket plugin: setting up a socket to %s: %s",
                       c->peer, strerror(errno));
    }
    for (int t = 0; t < c->nthreads; t++) {
        ns_thread_t *th = &c->threads[t];
        th->comm = c;
        th->index = t;
        th->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (th->efd < 0)
            return ERR(chorusSystemError, SUB_NET, "Socket plugin: eventfd failed: %s",
                       strerror(errno));
        int e = pthread_create(&th->tid, NULL, ns_thread_main, th);
        if (e != 0)
            return ERR(chorusSystemError, SUB_NET,
                       "Socket plugin: cannot start helper thread %d of %d: %s", t, c->nthreads,
                       strerror(e));
        th->started = 1;
    }
    INFO(SUB_NET, "Socket plugin: %s %s over %d sockets, %d helper threads",
         c->is_send ? "connected to" : "accepted", c->peer, c->nsocks, c->nthreads);
    return chorusSuccess;
}

/* ---- listen, connect, accept ---- */

static chorusResult_t ns_listen(void *vctx, int dev, net_handle_t *handle_p, void **listen_comm_p)
{
    ns_ctx_t *ctx = vctx;
    CHECK(ns_check_dev(ctx, dev));
    ns_listen_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return ERR(chorusSystemError, SUB_NET, "Socket plugin: out of memory");
    l->ctx = ctx;
    l->dev = dev;
    l->nsocks =
        (uint32_t)(ctx->cfg.nsocks_perthread * (ctx->cfg.nthreads > 0 ? ctx->cfg.nthreads : 1));
    if (getrandom(&l->nonce, sizeof(l->nonce), 0) != sizeof(l->nonce)) {
        int e = errno;
        free(l);
        return ERR(chorusSystemError, SUB_NET, "Socket plugin: getrandom failed: %s", strerror(e));
    }
    chorusResult_t res = sock_listen(&ctx->addrs[dev], &l->fd, &l->addr);
    if (res != chorusSuccess) {
        free(l);
        return res;
    }
    ns_handle_t h;
    memset(&h, 0, sizeof(h));
    h.magic = NS_MAGIC_HANDLE;
    h.nonce = l->nonce;
    h.nsocks = l->nsocks;
    h.addr = l->addr;
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &h, sizeof(h));
    char str[80];
    INFO(SUB_NET, "Socket plugin: listening on %s (%s) for %u sockets", ctx->names[dev],
         sock_addr_str(&l->addr, str, sizeof(str)), l->nsocks);
    *listen_comm_p = l;
    return chorusSuccess;
}

static chorusResult_t ns_connect(void *vctx, int dev, const net_handle_t *handle,
                                 void **send_comm_p)
{
    ns_ctx_t *ctx = vctx;
    CHECK(ns_check_dev(ctx, dev));
    ns_handle_t h;
    memcpy(&h, handle->bytes, sizeof(h));
    if (h.magic != NS_MAGIC_HANDLE || h.nsocks < 1 || h.nsocks > NS_MAX_SOCKS)
        return ERR(
            chorusInvalidArgument, SUB_NET,
            "Socket plugin: the handle is not a Socket listener's (magic 0x%llx, %u sockets)",
            (unsigned long long)h.magic, h.nsocks);
    uint64_t conn_id;
    if (getrandom(&conn_id, sizeof(conn_id), 0) != sizeof(conn_id))
        return ERR(chorusSystemError, SUB_NET, "Socket plugin: getrandom failed: %s",
                   strerror(errno));
    /* The listener's socket count wins, so both ends stripe alike whatever this side's settings. */
    ns_comm_t *c;
    CHECK(ns_comm_alloc(ctx, 1, (int)h.nsocks, &c));
    sock_addr_str(&h.addr, c->peer, sizeof(c->peer));
    int64_t deadline = ns_deadline(ctx);
    chorusResult_t res;
    for (int k = 0; k < c->nsocks; k++) {
        if (ns_aborted(ctx)) {
            res = ERR(chorusRemoteError, SUB_NET, "Socket plugin: connect to %s stopped: aborted",
                      c->peer);
            goto err_free;
        }
        CHECK_GOTO(sock_connect(&h.addr, deadline, ctx->cfg.abort_flag, &c->socks[k].fd), res,
                   err_free);
        ns_hello_t hello = {NS_MAGIC_HELLO, h.nonce, conn_id, (uint32_t)k, h.nsocks};
        /* 32 bytes into a fresh socket's empty buffer: one send takes them all or fails. */
        if (send(c->socks[k].fd, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
            res = ERR(chorusRemoteError, SUB_NET, "Socket plugin: sending the hello to %s: %s",
                      c->peer, strerror(errno));
            goto err_free;
        }
    }
    CHECK_GOTO(ns_comm_start(c), res, err_free);
    *send_comm_p = c;
    return chorusSuccess;
err_free:
    ns_comm_free(c);
    return res;
}

static void ns_drop_pending(ns_listen_t *l, int i, const char *why)
{
    char str[80] = "?";
    sock_addr_t peer;
    socklen_t len = sizeof(peer);
    memset(&peer, 0, sizeof(peer));
    if (getpeername(l->pend[i].fd, &peer.sa, &len) == 0)
        sock_addr_str(&peer, str, sizeof(str));
    char me[80];
    WARN(SUB_NET, "Socket plugin: listener %s dropped a connection from %s: %s",
         sock_addr_str(&l->addr, me, sizeof(me)), str, why);
    close(l->pend[i].fd);
    l->pend[i] = l->pend[--l->npend];
}

/* A full hello arrived on pending connection i: keep it as a member of its set, or drop it. */
static void ns_check_hello(ns_listen_t *l, int i)
{
    const ns_hello_t *h = &l->pend[i].hello;
    if (h->magic != NS_MAGIC_HELLO) {
        ns_drop_pending(l, i, "its first bytes are not a Chorus socket hello");
        return;
    }
    if (h->nonce != l->nonce) {
        ns_drop_pending(l, i, "wrong nonce (a stale or foreign handle)");
        return;
    }
    if (h->nsocks != l->nsocks || h->index >= l->nsocks) {
        ns_drop_pending(l, i, "socket index or count does not match the handle");
        return;
    }
    for (int m = 0; m < l->nmem; m++)
        if (l->mem[m].conn_id == h->conn_id && l->mem[m].index == h->index) {
            ns_drop_pending(l, i, "duplicate socket index");
            return;
        }
    if (l->nmem == NS_MAX_MEMBERS) {
        ns_drop_pending(l, i, "too many incomplete connections");
        return;
    }
    l->mem[l->nmem++] = (ns_member_t){l->pend[i].fd, h->conn_id, h->index};
    l->pend[i] = l->pend[--l->npend];
}

/* 1 with *conn_id_p when some connector's nsocks sockets have all proved the nonce. */
static int ns_complete_set(const ns_listen_t *l, uint64_t *conn_id_p)
{
    for (int m = 0; m < l->nmem; m++) {
        uint32_t count = 0;
        for (int j = 0; j < l->nmem; j++)
            count += l->mem[j].conn_id == l->mem[m].conn_id;
        if (count == l->nsocks) {
            *conn_id_p = l->mem[m].conn_id;
            return 1;
        }
    }
    return 0;
}

/* Accept what the listen socket has queued and read hellos that arrived; never blocks. */
static void ns_listen_serve(ns_listen_t *l, const struct pollfd *pfd, int npfd, int64_t now)
{
    /* pfd[1..] are the pending connections in order, as they were when polled. */
    for (int p = npfd - 1; p >= 1; p--) {
        if (!pfd[p].revents)
            continue;
        ns_pending_t *q = &l->pend[p - 1];
        ssize_t n =
            recv(q->fd, (char *)&q->hello + q->got, sizeof(q->hello) - q->got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            ns_drop_pending(l, p - 1, n == 0 ? "closed before its hello" : strerror(errno));
            continue;
        }
        if (n > 0 && (q->got += (size_t)n) == sizeof(q->hello))
            ns_check_hello(l, p - 1);
    }
    for (int i = l->npend - 1; i >= 0; i--)
        if (now - l->pend[i].since_ns > NS_HELLO_WAIT_NS)
            ns_drop_pending(l, i, "no hello within 2 s");
    while ((pfd[0].revents & POLLIN) && l->npend < NS_MAX_PENDING) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break; /* EAGAIN: nothing more queued; other errors: the next poll retries */
        l->pend[l->npend++] = (ns_pending_t){fd, now, 0, {0}};
    }
}

static chorusResult_t ns_accept(void *vl, void **recv_comm_p)
{
    ns_listen_t *l = vl;
    ns_ctx_t *ctx = l->ctx;
    int64_t deadline = ns_deadline(ctx);
    char me[80];
    sock_addr_str(&l->addr, me, sizeof(me));
    uint64_t conn_id;
    while (!ns_complete_set(l, &conn_id)) {
        if (ns_aborted(ctx))
            return ERR(chorusRemoteError, SUB_NET, "Socket plugin: accept on %s stopped: aborted",
                       me);
        int64_t now = fifo_now_ns();
        if (now >= deadline)
            return ERR(chorusTimeout, SUB_NET,
                       "Socket plugin: no connector completed its %u sockets on %s within %lld ms "
                       "(is the peer alive and able to reach this address?)",
                       l->nsocks, me, (long long)ctx->cfg.timeout_ms);
        struct pollfd pfd[NS_MAX_PENDING + 1];
        int n = 0;
        pfd[n++] = (struct pollfd){l->fd, l->npend < NS_MAX_PENDING ? POLLIN : 0, 0};
        for (int i = 0; i < l->npend; i++)
            pfd[n++] = (struct pollfd){l->pend[i].fd, POLLIN, 0};
        int64_t left_ms = (deadline - now) / 1000000 + 1;
        int rc = poll(pfd, (nfds_t)n, left_ms < NS_POLL_MS ? (int)left_ms : NS_POLL_MS);
        if (rc < 0 && errno != EINTR)
            return ERR(chorusSystemError, SUB_NET, "Socket plugin: poll on %s failed: %s", me,
                       strerror(errno));
        if (rc < 0)
            continue;
        ns_listen_serve(l, pfd, n, fifo_now_ns());
    }
    ns_comm_t *c;
    CHECK(ns_comm_alloc(ctx, 0, (int)l->nsocks, &c));
    for (int m = l->nmem - 1; m >= 0; m--)
        if (l->mem[m].conn_id == conn_id) {
            c->socks[l->mem[m].index].fd = l->mem[m].fd;
            l->mem[m] = l->mem[--l->nmem];
        }
    sock_addr_t peer;
    socklen_t len = sizeof(peer);
    memset(&peer, 0, sizeof(peer));
    getpeername(c->socks[0].fd, &peer.sa, &len);
    sock_addr_str(&peer, c->peer, sizeof(c->peer));
    chorusResult_t res = ns_comm_start(c);
    if (res != chorusSuccess) {
        ns_comm_free(c);
        return res;
    }
    *recv_comm_p = c;
    return chorusSuccess;
}

/* ---- memory registration: nothing to register, but only host memory ---- */

static chorusResult_t ns_reg_mr(void *comm, void *data, size_t size, int ptr_type, void **mhandle_p)
{
    (void)comm;
    if (ptr_type != NET_PTR_HOST)
        return ERR(chorusInvalidArgument, SUB_NET,
                   "Socket plugin: cannot register buffer %p (%zu bytes) of pointer type 0x%x: "
                   "only host memory (NET_PTR_HOST)",
                   data, size, ptr_type);
    *mhandle_p = &ns_mr_token;
    return chorusSuccess;
}

static chorusResult_t ns_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    (void)mhandle;
    return chorusSuccess;
}

/* ---- requests ---- */

/* A free request slot, or NULL when NET_MAX_REQUESTS are outstanding. */
static ns_req_t *ns_new_req(ns_comm_t *c, void *data, size_t size, int tag)
{
    if (c->posted - c->freed >= NS_QDEPTH)
        return NULL;
    ns_req_t *r = &c->reqs[c->posted % NS_QDEPTH];
    r->seq = c->posted;
    r->data = data;
    r->maxsize = size;
    r->tag = tag;
    r->nbytes = 0;
    r->reported = 0;
    return r;
}

static chorusResult_t ns_check_post(ns_comm_t *c, int is_send, const void *data, size_t size)
{
    if (c->is_send != is_send)
        return ERR(chorusInvalidArgument, SUB_NET, "Socket plugin: %s on a %s comm",
                   is_send ? "isend" : "irecv", c->is_send ? "send" : "receive");
    if (data == NULL && size > 0)
        return ERR(chorusInvalidArgument, SUB_NET, "Socket plugin: NULL buffer of %zu bytes", size);
    if (atomic_load(&c->has_err))
        return ns_report(c);
    return chorusSuccess;
}

static chorusResult_t ns_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                               void **request_p)
{
    (void)mhandle;
    ns_comm_t *c = send_comm;
    CHECK(ns_check_post(c, 1, data, size));
    ns_req_t *r = ns_new_req(c, data, size, tag);
    *request_p = r;
    if (r == NULL)
        return chorusSuccess;
    r->nbytes = size;
    r->hdr = (ns_msg_hdr_t){NS_MAGIC_MSG, tag, size, r->seq};
    size_t chunk = ns_chunk(size, c->nsocks);
    int nch = ns_nchunks(size, chunk);
    int nparts = nch > 1 ? nch : 1; /* a message of 0 bytes is a header alone on socket 0 */
    atomic_store_explicit(&r->pending, (unsigned)nparts, memory_order_relaxed);
    for (int k = 0; k < nparts; k++) {
        size_t off = (size_t)k * chunk;
        size_t len = size - off < chunk ? size - off : chunk;
        ns_push(c, k, r, (char *)data + off, len, k == 0);
    }
    c->posted++;
    ns_wake(c, 0, nparts);
    return chorusSuccess;
}

static chorusResult_t ns_irecv(void *recv_comm, void *data, size_t size, int tag, void *mhandle,
                               void **request_p)
{
    (void)mhandle;
    ns_comm_t *c = recv_comm;
    CHECK(ns_check_post(c, 0, data, size));
    ns_req_t *r = ns_new_req(c, data, size, tag);
    *request_p = r;
    if (r == NULL)
        return chorusSuccess;
    /* The socket-0 part; its size and the other chunks follow from the header. */
    atomic_store_explicit(&r->pending, 1, memory_order_relaxed);
    ns_push(c, 0, r, data, 0, 1);
    c->posted++;
    ns_wake(c, 0, 1);
    return chorusSuccess;
}

static chorusResult_t ns_test(void *request, int *done_p, size_t *size_p)
{
    ns_req_t *r = request;
    ns_comm_t *c = r->comm;
    if (c->nthreads == 0 && !atomic_load(&c->has_err))
        for (int k = 0; k < c->nsocks; k++)
            if (ns_progress(c, &c->socks[k]) != chorusSuccess)
                break;
    while (c->done_upto < c->posted &&
           atomic_load_explicit(&c->reqs[c->done_upto % NS_QDEPTH].pending, memory_order_acquire) ==
               0)
        c->done_upto++;
    if (r->seq < c->done_upto) {
        *done_p = 1;
        if (size_p != NULL)
            *size_p = r->nbytes;
        r->reported = 1;
        while (c->freed < c->done_upto && c->reqs[c->freed % NS_QDEPTH].reported)
            c->freed++;
        return chorusSuccess;
    }
    if (atomic_load(&c->has_err))
        return ns_report(c);
    *done_p = 0;
    return chorusSuccess;
}

/* net.h poll_fds. With the I/O in test() (no helper threads): the sockets the last pass left
 * waiting on the kernel (a header or payload to read, a full send buffer). Helper threads wait on
 * their sockets themselves and cannot wake the proxy: -1, so the proxy naps instead. */
static int ns_poll_fds(void *comm, struct pollfd *fds, int max)
{
    ns_comm_t *c = comm;
    if (c->nthreads > 0)
        return -1;
    int n = 0;
    for (int k = 0; k < c->nsocks && n < max; k++)
        if (c->socks[k].want != 0)
            fds[n++] = (struct pollfd){.fd = c->socks[k].fd, .events = c->socks[k].want};
    return n;
}

/* ---- teardown ---- */

static void ns_close_comm(void *comm)
{
    if (comm != NULL)
        ns_comm_free(comm);
}

static void ns_close_listen(void *listen_comm)
{
    ns_listen_t *l = listen_comm;
    if (l == NULL)
        return;
    for (int i = 0; i < l->npend; i++)
        close(l->pend[i].fd);
    for (int m = 0; m < l->nmem; m++)
        close(l->mem[m].fd);
    close(l->fd);
    free(l);
}

static void ns_finalize(void *ctx)
{
    free(ctx);
}

const net_plugin_t net_socket_plugin = {
    .name = "Socket",
    .init = ns_init,
    .devices = ns_devices,
    .get_properties = ns_get_properties,
    .listen = ns_listen,
    .connect = ns_connect,
    .accept = ns_accept,
    .reg_mr = ns_reg_mr,
    .dereg_mr = ns_dereg_mr,
    .isend = ns_isend,
    .irecv = ns_irecv,
    .test = ns_test,
    .poll_fds = ns_poll_fds,
    .close_send = ns_close_comm,
    .close_recv = ns_close_comm,
    .close_listen = ns_close_listen,
    .finalize = ns_finalize,
};
