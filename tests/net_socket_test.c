/*
 * net_socket_test.c: the socket net plugin (transports/net_socket.c) over loopback, one process,
 * each end of a connection on its own thread with its own plugin context.
 *
 * Proves, for sockets x helper threads in {1x0, 4x0, 2x2, 3 sockets x 3 threads, and ends with
 * different settings}: messages of 0, 1, 4095, 64 KiB+3, 3 MiB+5 and other awkward sizes arrive
 * bit-exact, in order, with their sizes and tags, both ways at once with up to 8 requests
 * outstanding each way; no byte past the message is written; a later request never reports done
 * before an earlier one. And that the plugin refuses what it must: a message longer than the
 * posted receive and a wrong tag are chorusRemoteError with nothing written; a peer that closes
 * while a receive is posted is chorusRemoteError within 2 s; strangers (wrong nonce, garbage,
 * silence) are dropped while accept completes with the real connector; accept gives up promptly
 * on the abort flag and at its deadline; isend beyond NET_MAX_REQUESTS says "not now"; close with
 * requests in flight returns within 1 s; reg_mr refuses device memory. Prints loopback GB/s for
 * 16 MiB messages (4 MiB under ThreadSanitizer; information, not a check).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "net.h"

static const net_plugin_t *P = &net_socket_plugin;

/* Mirrors of the plugin's wire formats (net_socket.c): the stranger tests forge them. A drift
 * shows as the real connector failing or the forged hello being dropped for the wrong reason. */
typedef struct {
    uint64_t magic;
    uint64_t nonce;
    uint32_t nsocks;
    unsigned char addr[28];
} t_handle_t;
typedef struct {
    uint64_t magic;
    uint64_t nonce;
    uint64_t conn_id;
    uint32_t index;
    uint32_t nsocks;
} t_hello_t;
#define T_MAGIC_HELLO 0x4f4c4c4543524843ull

#define NMSG 48
#define WINDOW 8
#define GUARD 256
#define MAXMSG (3 * 1024 * 1024 + 5)

/* The throughput runs' message size. Under ThreadSanitizer every byte a socket call moves goes
 * through its shadow memory: 16 messages of 16 MiB took 14 s a run there (42 of the test's 57 s,
 * the TSan stage's longest test); 4 MiB ones still stripe over every socket and thread. */
#if defined(__SANITIZE_THREAD__)
#define TPUT_NBYTES (4u << 20)
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TPUT_NBYTES (4u << 20)
#endif
#endif
#ifndef TPUT_NBYTES
#define TPUT_NBYTES (16u << 20)
#endif

static size_t msg_size(int i)
{
    static const size_t sizes[] = {0,      1,      4095,         65536 + 3, MAXMSG, 7,
                                   131072, 200003, 4096 * 3 + 1, 1024,      65536,  262147};
    return sizes[i % (int)(sizeof(sizes) / sizeof(sizes[0]))];
}
static int msg_tag(int i)
{
    return i % 5 + 1;
}
/* The receive posts room for a little more than it gets, so *size_p must be the real size. */
static size_t msg_room(int i)
{
    return msg_size(i) + (size_t)(i % 3) * 97;
}

static net_config_t make_cfg(int npt, int nthr, int64_t timeout_ms,
                             const volatile uint32_t *abort_p)
{
    static const volatile uint32_t never = 0;
    net_config_t c = {.ifname_spec = "=lo",
                      .nsocks_perthread = npt,
                      .nthreads = nthr,
                      .timeout_ms = timeout_ms,
                      .abort_flag = abort_p ? abort_p : &never};
    return c;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- a pair of ends: each listens, takes the other's handle, connects, accepts ---- */

typedef struct pair {
    int npt[2], nthr[2];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int have[2];
    net_handle_t handle[2];
    int bidir; /* 1: both ways; 0: end 0 sends, end 1 receives (throughput) */
    size_t tput_nbytes;
    int tput_count;
    double tput_gbs;
} pair_t;

typedef struct end {
    pair_t *pair;
    int me;
    void *ctx, *lcomm, *scomm, *rcomm;
} end_t;

/* Bring one end up: ctx, listen, publish the handle, wait for the peer's, connect, accept. */
static int end_setup(end_t *e)
{
    pair_t *p = e->pair;
    net_config_t cfg = make_cfg(p->npt[e->me], p->nthr[e->me], 10000, NULL);
    net_handle_t mine, theirs;
    CHECK_OK(P->init(&cfg, &e->ctx));
    if (e->ctx == NULL)
        return 1;
    CHECK_OK(P->listen(e->ctx, 0, &mine, &e->lcomm));
    pthread_mutex_lock(&p->lock);
    p->handle[e->me] = mine;
    p->have[e->me] = 1;
    pthread_cond_broadcast(&p->cond);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    int rc = 0;
    while (!p->have[1 - e->me] && rc == 0)
        rc = pthread_cond_timedwait(&p->cond, &p->lock, &dl);
    theirs = p->handle[1 - e->me];
    int ok = p->have[1 - e->me];
    pthread_mutex_unlock(&p->lock);
    if (!ok) {
        FAIL("end %d: the peer's handle never came", e->me);
        return 1;
    }
    /* connect only needs the peer's listen backlog, so both ends connect before they accept. */
    CHECK_OK(P->connect(e->ctx, 0, &theirs, &e->scomm));
    CHECK_OK(P->accept(e->lcomm, &e->rcomm));
    return e->scomm == NULL || e->rcomm == NULL;
}

static void end_close_comms(end_t *e)
{
    if (e->scomm)
        P->close_send(e->scomm);
    if (e->rcomm)
        P->close_recv(e->rcomm);
    e->scomm = e->rcomm = NULL;
}

static void end_teardown(end_t *e)
{
    end_close_comms(e);
    if (e->lcomm)
        P->close_listen(e->lcomm);
    if (e->ctx)
        P->finalize(e->ctx);
}

/* Test request slot `slot` of a window; returns 1 when it reported done. */
static int test_req(void **req, size_t *nbytes, const char *what, int i)
{
    int done = 0;
    chorusResult_t res = P->test(*req, &done, nbytes);
    if (res != chorusSuccess) {
        FAIL("%s #%d: test: %s: %s", what, i, chorusGetErrorString(res), chorusGetLastError(NULL));
        return -1;
    }
    if (done)
        *req = NULL;
    return done;
}

#define EARLY ((void *)1) /* a window entry that reported done while it was the newest */

/* A window of requests posted in order, [done, posted) outstanding. */
typedef struct window {
    void *req[WINDOW];
    int posted, done;
    int must_upto; /* [0, must_upto) must be done: a later request said so */
} window_t;

/* Ask the newest outstanding request first: once it says done, every older one must be done too
 * (requests complete in posting order). Returns -1 on a failed test. */
static int test_newest(window_t *w, const char *what)
{
    int j = w->posted - 1;
    if (w->posted - w->done < 2 || w->req[j % WINDOW] == EARLY)
        return 0;
    void *r = w->req[j % WINDOW];
    size_t n = 0;
    int d = test_req(&r, &n, what, j);
    if (d > 0) {
        CHECK(n == msg_size(j), "%s #%d: size %zu, want %zu", what, j, n, msg_size(j));
        w->must_upto = j + 1;
        w->req[j % WINDOW] = EARLY;
    }
    return d < 0 ? -1 : 0;
}

/* Test the oldest request: 1 when done (size in *n_p), 0 when not yet, -1 on failure. */
static int test_oldest(window_t *w, size_t *n_p, const char *what)
{
    void **slot = &w->req[w->done % WINDOW];
    if (*slot == EARLY) {
        *slot = NULL;
        *n_p = msg_size(w->done);
        return 1;
    }
    int d = test_req(slot, n_p, what, w->done);
    if (d == 0)
        CHECK(w->done >= w->must_upto, "%s #%d: not done though the later #%d was", what, w->done,
              w->must_upto - 1);
    return d;
}

/* Send NMSG messages and receive NMSG, WINDOW outstanding each way, checking every byte. */
static void end_traffic(end_t *e)
{
    uint64_t sseed = 1000 + (uint64_t)e->me * 100000, rseed = 1000 + (uint64_t)(1 - e->me) * 100000;
    char *sbuf[WINDOW], *rbuf[WINDOW];
    window_t sw, rw;
    memset(&sw, 0, sizeof(sw));
    memset(&rw, 0, sizeof(rw));
    for (int w = 0; w < WINDOW; w++) {
        sbuf[w] = xmalloc(MAXMSG);
        rbuf[w] = xmalloc(MAXMSG + 2 * 97 + GUARD);
    }
    double deadline = harness_now_s() + 60;
    while ((sw.done < NMSG || rw.done < NMSG) && harness_now_s() < deadline) {
        int before = sw.done + rw.done;
        while (sw.posted < NMSG && sw.posted - sw.done < WINDOW) {
            int i = sw.posted, w = i % WINDOW;
            harness_fill(sbuf[w], msg_size(i), sseed + (uint64_t)i);
            void *r = NULL;
            CHECK_OK(P->isend(e->scomm, sbuf[w], msg_size(i), msg_tag(i), NULL, &r));
            if (r == NULL)
                break;
            sw.req[w] = r;
            sw.posted++;
        }
        while (rw.posted < NMSG && rw.posted - rw.done < WINDOW) {
            int i = rw.posted, w = i % WINDOW;
            memset(rbuf[w], 0xEE, msg_room(i) + GUARD);
            void *r = NULL;
            CHECK_OK(P->irecv(e->rcomm, rbuf[w], msg_room(i), msg_tag(i), NULL, &r));
            if (r == NULL)
                break;
            rw.req[w] = r;
            rw.posted++;
        }
        if (test_newest(&sw, "send") < 0 || test_newest(&rw, "recv") < 0)
            break;
        size_t n = 0;
        int d;
        while (sw.done < sw.posted && (d = test_oldest(&sw, &n, "send")) != 0) {
            if (d < 0)
                goto out;
            CHECK(n == msg_size(sw.done), "send #%d: size %zu, want %zu", sw.done, n,
                  msg_size(sw.done));
            sw.done++;
        }
        while (rw.done < rw.posted && (d = test_oldest(&rw, &n, "recv")) != 0) {
            if (d < 0)
                goto out;
            int i = rw.done, w = i % WINDOW;
            size_t want = msg_size(i);
            CHECK(n == want, "recv #%d: size %zu, want %zu", i, n, want);
            long long at = harness_first_diff(rbuf[w], want, rseed + (uint64_t)i);
            CHECK(at < 0, "recv #%d (%zu bytes, end %d): byte %lld differs", i, want, e->me, at);
            for (size_t b = want; b < msg_room(i) + GUARD; b++)
                if ((unsigned char)rbuf[w][b] != 0xEE) {
                    FAIL("recv #%d: byte %zu past the %zu-byte message was written", i, b, want);
                    break;
                }
            rw.done++;
        }
        if (sw.done + rw.done == before)
            sched_yield(); /* as the core's proxy does when idle: the host may be oversubscribed */
    }
out:
    CHECK(sw.done == NMSG && rw.done == NMSG, "end %d: %d/%d sends and %d/%d receives completed",
          e->me, sw.done, NMSG, rw.done, NMSG);
    if (sw.done < sw.posted || rw.done < rw.posted)
        end_close_comms(e); /* requests in flight: close before their buffers go */
    for (int w = 0; w < WINDOW; w++) {
        free(sbuf[w]);
        free(rbuf[w]);
    }
}

/* One direction of TPUT_NBYTES messages as fast as it goes; the receiver measures. */
static void end_throughput(end_t *e)
{
    pair_t *p = e->pair;
    char *buf[WINDOW];
    void *req[WINDOW] = {0};
    for (int w = 0; w < WINDOW; w++) {
        buf[w] = xmalloc(p->tput_nbytes);
        memset(buf[w], w, p->tput_nbytes);
    }
    int posted = 0, done = 0;
    double t0 = harness_now_s(), deadline = t0 + 60;
    while (done < p->tput_count && harness_now_s() < deadline) {
        while (posted < p->tput_count && posted - done < 4) {
            int w = posted % WINDOW;
            void *r = NULL;
            chorusResult_t res = e->me == 0
                                     ? P->isend(e->scomm, buf[w], p->tput_nbytes, 9, NULL, &r)
                                     : P->irecv(e->rcomm, buf[w], p->tput_nbytes, 9, NULL, &r);
            CHECK_OK(res);
            if (res != chorusSuccess || r == NULL)
                break;
            req[w] = r;
            posted++;
        }
        size_t n = 0;
        int d = test_req(&req[done % WINDOW], &n, "throughput", done);
        if (d < 0)
            break;
        done += d;
        if (d == 0)
            sched_yield();
    }
    double dt = harness_now_s() - t0;
    CHECK(done == p->tput_count, "throughput: %d of %d messages", done, p->tput_count);
    if (done < posted)
        end_close_comms(e);
    if (e->me == 1 && dt > 0)
        p->tput_gbs = (double)p->tput_nbytes * done / dt / 1e9;
    for (int w = 0; w < WINDOW; w++)
        free(buf[w]);
}

static void *end_main(void *arg)
{
    end_t *e = arg;
    if (end_setup(e) == 0) {
        if (e->pair->bidir)
            end_traffic(e);
        else
            end_throughput(e);
    }
    end_teardown(e);
    return NULL;
}

static void run_pair(pair_t *p)
{
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    end_t e[2] = {{p, 0, NULL, NULL, NULL, NULL}, {p, 1, NULL, NULL, NULL, NULL}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, end_main, &e[i]) != 0) {
            FAIL("pthread_create");
            exit(1);
        }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
}

static void test_traffic(int npt0, int nthr0, int npt1, int nthr1)
{
    long before = harness_failures;
    pair_t p;
    memset(&p, 0, sizeof(p));
    p.npt[0] = npt0;
    p.npt[1] = npt1;
    p.nthr[0] = nthr0;
    p.nthr[1] = nthr1;
    p.bidir = 1;
    run_pair(&p);
    harness_report(before,
                   "traffic %dx%d <-> %dx%d: %d messages each way, 0..3 MiB+5 bytes, %d in "
                   "flight, bit-exact and in order",
                   npt0, nthr0, npt1, nthr1, NMSG, WINDOW);
}

static void test_throughput(int npt, int nthr)
{
    long before = harness_failures;
    pair_t p;
    memset(&p, 0, sizeof(p));
    p.npt[0] = p.npt[1] = npt;
    p.nthr[0] = p.nthr[1] = nthr;
    p.tput_nbytes = TPUT_NBYTES;
    p.tput_count = 16;
    run_pair(&p);
    printf("INFO throughput over loopback, %d sockets/thread x %d threads: %.2f GB/s "
           "(%u MiB messages; information, not a check)\n",
           npt, nthr, p.tput_gbs, TPUT_NBYTES >> 20);
    harness_report(before, "throughput run %dx%d completed", npt, nthr);
}

/* ---- one connection in one thread: listen, connect (the backlog completes it), accept ---- */

typedef struct conn {
    void *sctx, *rctx, *l, *s, *r;
    net_handle_t handle;
} conn_t;

static int conn_open(conn_t *c, int npt, int nthr)
{
    memset(c, 0, sizeof(*c));
    net_config_t cfg = make_cfg(npt, nthr, 5000, NULL);
    CHECK_OK(P->init(&cfg, &c->sctx));
    CHECK_OK(P->init(&cfg, &c->rctx));
    if (c->sctx == NULL || c->rctx == NULL)
        return 1;
    CHECK_OK(P->listen(c->rctx, 0, &c->handle, &c->l));
    if (c->l == NULL)
        return 1;
    CHECK_OK(P->connect(c->sctx, 0, &c->handle, &c->s));
    CHECK_OK(P->accept(c->l, &c->r));
    return c->s == NULL || c->r == NULL;
}

static void conn_close(conn_t *c)
{
    if (c->s)
        P->close_send(c->s);
    if (c->r)
        P->close_recv(c->r);
    if (c->l)
        P->close_listen(c->l);
    if (c->sctx)
        P->finalize(c->sctx);
    if (c->rctx)
        P->finalize(c->rctx);
}

/* Test req until it is done or fails or `seconds` pass; returns the result, *done_p the state. */
static chorusResult_t wait_req(void *req, double seconds, int *done_p, size_t *n_p)
{
    double deadline = harness_now_s() + seconds;
    chorusResult_t res = chorusSuccess;
    *done_p = 0;
    while (res == chorusSuccess && !*done_p && harness_now_s() < deadline)
        res = P->test(req, done_p, n_p);
    return res;
}

/* A receive that the message does not fit (too long, or another tag) fails, writing nothing. */
static void test_refused(int npt, int nthr, size_t nbytes, int tag, size_t room, int rtag,
                         const char *word1, const char *word2)
{
    long before = harness_failures;
    conn_t c;
    char *sbuf = xmalloc(nbytes), *rbuf = xmalloc(room + GUARD);
    if (conn_open(&c, npt, nthr) == 0) {
        harness_fill(sbuf, nbytes, 7);
        memset(rbuf, 0xEE, room + GUARD);
        void *sr = NULL, *rr = NULL;
        CHECK_OK(P->isend(c.s, sbuf, nbytes, tag, NULL, &sr));
        CHECK_OK(P->irecv(c.r, rbuf, room, rtag, NULL, &rr));
        CHECK(sr != NULL && rr != NULL, "requests not posted");
        if (sr != NULL && rr != NULL) {
            int done = 0;
            size_t n = 0;
            /* The send may need the receiver to drain (nthreads 0): test both until one fails. */
            double deadline = harness_now_s() + 5;
            chorusResult_t res = chorusSuccess;
            int sdone = 0;
            while (res == chorusSuccess && !done && harness_now_s() < deadline) {
                if (!sdone)
                    CHECK_OK(P->test(sr, &sdone, &n));
                res = P->test(rr, &done, &n);
            }
            harness_expect_refused("irecv that the message does not fit", res, chorusRemoteError,
                                   chorusGetLastError(NULL), word1, word2);
            CHECK(!done, "the refused receive reported done");
            for (size_t b = 0; b < room + GUARD; b++)
                if ((unsigned char)rbuf[b] != 0xEE) {
                    FAIL("byte %zu of the refused receive's buffer was written", b);
                    break;
                }
        }
    }
    conn_close(&c); /* before the buffers go: a helper thread may still be sending */
    free(sbuf);
    free(rbuf);
    harness_report(before,
                   "%dx%d: a %zu-byte message with tag %d into a receive of %zu bytes with "
                   "tag %d is chorusRemoteError, buffer untouched",
                   npt, nthr, nbytes, tag, room, rtag);
}

/* The sender closes while a receive is posted: test() fails within 2 s naming the peer. */
static void test_peer_close(int npt, int nthr)
{
    long before = harness_failures;
    conn_t c;
    if (conn_open(&c, npt, nthr) == 0) {
        char sbuf[100], rbuf[100];
        harness_fill(sbuf, sizeof(sbuf), 3);
        void *sr = NULL, *rr = NULL;
        int done = 0;
        size_t n = 0;
        CHECK_OK(P->isend(c.s, sbuf, sizeof(sbuf), 1, NULL, &sr));
        CHECK_OK(P->irecv(c.r, rbuf, sizeof(rbuf), 1, NULL, &rr));
        CHECK_OK(wait_req(sr, 5, &done, &n));
        CHECK_OK(wait_req(rr, 5, &done, &n));
        CHECK(done && harness_first_diff(rbuf, sizeof(rbuf), 3) < 0, "first message wrong");
        CHECK_OK(P->irecv(c.r, rbuf, sizeof(rbuf), 1, NULL, &rr));
        double t0 = harness_now_s();
        P->close_send(c.s);
        c.s = NULL;
        chorusResult_t res = wait_req(rr, 5, &done, &n);
        double dt = harness_now_s() - t0;
        harness_expect_refused("test after the peer closed", res, chorusRemoteError,
                               chorusGetLastError(NULL), "closed the connection", "127.0.0.1");
        CHECK(dt < 2.0, "the closed peer was noticed after %.2f s", dt);
        /* The error stays: a second test says the same without blocking. */
        CHECK_RES(P->test(rr, &done, &n), chorusRemoteError);
    }
    conn_close(&c);
    harness_report(before,
                   "%dx%d: a peer that closes while a receive is posted is "
                   "chorusRemoteError within 2 s",
                   npt, nthr);
}

static int raw_connect(const net_handle_t *h)
{
    t_handle_t th;
    memcpy(&th, h->bytes, sizeof(th));
    struct sockaddr_in sin;
    memcpy(&sin, th.addr, sizeof(sin));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        FAIL("stranger cannot connect: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the listener closed fd (EOF or reset) within `seconds`. */
static int was_dropped(int fd, double seconds)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(seconds * 1000)) <= 0)
        return 0;
    char b[64];
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* A wrong nonce and garbage reach the listener before the real connector: accept ignores them. */
static void test_strangers(void)
{
    long before = harness_failures;
    net_config_t cfg = make_cfg(2, 0, 5000, NULL);
    void *sctx = NULL, *rctx = NULL, *l = NULL, *s = NULL, *r = NULL;
    net_handle_t h;
    CHECK_OK(P->init(&cfg, &sctx));
    CHECK_OK(P->init(&cfg, &rctx));
    CHECK_OK(P->listen(rctx, 0, &h, &l));
    t_handle_t th;
    memcpy(&th, h.bytes, sizeof(th));
    int bad_nonce = raw_connect(&h), garbage = raw_connect(&h);
    t_hello_t hello = {T_MAGIC_HELLO, th.nonce ^ 1, 42, 0, th.nsocks};
    const char junk[32] = "GET / HTTP/1.0\r\n\r\nnot a hello!";
    CHECK(bad_nonce >= 0 && send(bad_nonce, &hello, sizeof(hello), MSG_NOSIGNAL) == 32,
          "stranger hello not sent");
    CHECK(garbage >= 0 && send(garbage, junk, sizeof(junk), MSG_NOSIGNAL) == 32,
          "stranger junk not sent");
    CHECK_OK(P->connect(sctx, 0, &h, &s));
    CHECK_OK(P->accept(l, &r));
    CHECK(bad_nonce >= 0 && was_dropped(bad_nonce, 2), "the wrong-nonce stranger was not dropped");
    CHECK(garbage >= 0 && was_dropped(garbage, 2), "the garbage stranger was not dropped");
    if (s != NULL && r != NULL) {
        char sbuf[4095], rbuf[4095];
        harness_fill(sbuf, sizeof(sbuf), 11);
        void *sr = NULL, *rr = NULL;
        int done = 0;
        size_t n = 0;
        CHECK_OK(P->isend(s, sbuf, sizeof(sbuf), 5, NULL, &sr));
        CHECK_OK(P->irecv(r, rbuf, sizeof(rbuf), 5, NULL, &rr));
        CHECK_OK(wait_req(sr, 5, &done, &n));
        CHECK_OK(wait_req(rr, 5, &done, &n));
        CHECK(done && n == sizeof(rbuf) && harness_first_diff(rbuf, n, 11) < 0,
              "the real connection does not carry a message");
    }
    if (bad_nonce >= 0)
        close(bad_nonce);
    if (garbage >= 0)
        close(garbage);
    if (s)
        P->close_send(s);
    if (r)
        P->close_recv(r);
    if (l)
        P->close_listen(l);
    P->finalize(sctx);
    P->finalize(rctx);
    harness_report(before, "strangers with a wrong nonce or garbage are dropped; accept completes "
                           "with the real connector");
}

/* No connector: accept fails at its deadline; a silent or half-hello stranger is dropped at 2 s. */
static void test_accept_deadline(int64_t timeout_ms, int strangers)
{
    long before = harness_failures;
    net_config_t cfg = make_cfg(1, 0, timeout_ms, NULL);
    void *ctx = NULL, *l = NULL, *r = NULL;
    net_handle_t h;
    CHECK_OK(P->init(&cfg, &ctx));
    CHECK_OK(P->listen(ctx, 0, &h, &l));
    int silent = -1, half = -1;
    if (strangers) {
        silent = raw_connect(&h);
        half = raw_connect(&h);
        t_handle_t th;
        memcpy(&th, h.bytes, sizeof(th));
        t_hello_t hello = {T_MAGIC_HELLO, th.nonce, 42, 0, th.nsocks};
        CHECK(half >= 0 && send(half, &hello, 16, MSG_NOSIGNAL) == 16, "half hello not sent");
    }
    double t0 = harness_now_s();
    chorusResult_t res = P->accept(l, &r);
    double dt = harness_now_s() - t0, want = (double)timeout_ms / 1000;
    harness_expect_refused("accept without a connector", res, chorusTimeout,
                           chorusGetLastError(NULL), "127.0.0.1", "within");
    CHECK(dt >= want - 0.05 && dt < want + 1.0, "accept returned after %.2f s, deadline %.2f s", dt,
          want);
    if (strangers) {
        CHECK(silent >= 0 && was_dropped(silent, 0), "a silent stranger was not dropped");
        CHECK(half >= 0 && was_dropped(half, 0), "a stranger with half a hello was not dropped");
        close(silent);
        close(half);
    }
    if (r)
        P->close_recv(r);
    P->close_listen(l);
    P->finalize(ctx);
    harness_report(before, "accept with no connector%s is chorusTimeout after %lld ms%s",
                   strangers ? " (but silent strangers)" : "", (long long)timeout_ms,
                   strangers ? "; strangers silent for 2 s were dropped" : "");
}

typedef struct aborter {
    volatile uint32_t *flag;
    double set_at;
} aborter_t;

static void *aborter_main(void *arg)
{
    aborter_t *a = arg;
    struct timespec ts = {0, 200 * 1000000}; /* let accept settle into its wait */
    nanosleep(&ts, NULL);
    a->set_at = harness_now_s();
    __atomic_store_n(a->flag, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_abort(void)
{
    long before = harness_failures;
    volatile uint32_t flag = 0;
    net_config_t cfg = make_cfg(1, 0, 30000, &flag);
    void *ctx = NULL, *l = NULL, *r = NULL;
    net_handle_t h;
    CHECK_OK(P->init(&cfg, &ctx));
    CHECK_OK(P->listen(ctx, 0, &h, &l));
    aborter_t a = {&flag, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, aborter_main, &a) != 0) {
        FAIL("pthread_create");
        return;
    }
    chorusResult_t res = P->accept(l, &r);
    double end = harness_now_s();
    pthread_join(t, NULL);
    harness_expect_refused("accept with the abort flag raised", res, chorusRemoteError,
                           chorusGetLastError(NULL), "abort", NULL);
    CHECK(end - a.set_at < 1.0, "accept returned %.2f s after the abort flag", end - a.set_at);
    /* connect gives up too, before it even tries. */
    void *s = NULL;
    CHECK_RES(P->connect(ctx, 0, &h, &s), chorusRemoteError);
    if (r)
        P->close_recv(r);
    if (s)
        P->close_send(s);
    P->close_listen(l);
    P->finalize(ctx);
    harness_report(before, "accept and connect stop promptly when the abort flag is raised");
}

/* NET_MAX_REQUESTS outstanding: one more is "not now" (NULL, success), for both directions. */
static void test_max_requests(int npt, int nthr)
{
    long before = harness_failures;
    conn_t c;
    static char rbuf[NET_MAX_REQUESTS + 1][16];
    static char sbuf[16];
    if (conn_open(&c, npt, nthr) == 0) {
        void *sr[NET_MAX_REQUESTS + 1] = {0}, *rr[NET_MAX_REQUESTS + 1] = {0};
        for (int i = 0; i <= NET_MAX_REQUESTS; i++) {
            CHECK_OK(P->isend(c.s, sbuf, (size_t)(i % 16), 1, NULL, &sr[i]));
            CHECK_OK(P->irecv(c.r, rbuf[i], 16, 1, NULL, &rr[i]));
            CHECK((sr[i] != NULL) == (i < NET_MAX_REQUESTS), "isend #%d: request %p", i, sr[i]);
            CHECK((rr[i] != NULL) == (i < NET_MAX_REQUESTS), "irecv #%d: request %p", i, rr[i]);
        }
        for (int i = 0; i < NET_MAX_REQUESTS; i++) {
            int done = 0;
            size_t n = 0;
            CHECK_OK(wait_req(sr[i], 5, &done, &n));
            CHECK(done, "send #%d not done", i);
            CHECK_OK(wait_req(rr[i], 5, &done, &n));
            CHECK(done && n == (size_t)(i % 16), "recv #%d: done %d, %zu bytes", i, done, n);
        }
        /* Completed requests are free again. */
        void *s1 = NULL, *r1 = NULL;
        CHECK_OK(P->isend(c.s, sbuf, 3, 1, NULL, &s1));
        CHECK_OK(P->irecv(c.r, rbuf[0], 16, 1, NULL, &r1));
        CHECK(s1 != NULL && r1 != NULL, "no request after the window drained");
        int done = 0;
        size_t n = 0;
        if (s1 && r1) {
            CHECK_OK(wait_req(s1, 5, &done, &n)); /* nthreads 0: the sender's test sends */
            CHECK_OK(wait_req(r1, 5, &done, &n));
            CHECK(done && n == 3, "the request after the window: done %d, %zu bytes", done, n);
        }
    }
    conn_close(&c);
    harness_report(before, "%dx%d: %d requests outstanding, the next is NULL with success", npt,
                   nthr, NET_MAX_REQUESTS);
}

/* close with sends and receives in flight (the receiver never drains) returns within 1 s. */
static void test_close_inflight(int npt, int nthr)
{
    long before = harness_failures;
    conn_t c;
    size_t nbytes = 16u << 20;
    char *buf = xmalloc(nbytes);
    memset(buf, 1, nbytes);
    if (conn_open(&c, npt, nthr) == 0) {
        void *req = NULL;
        for (int i = 0; i < 4; i++) {
            CHECK_OK(P->isend(c.s, buf, nbytes, 1, NULL, &req));
            int done = 0;
            CHECK_OK(P->test(req, &done, NULL));
        }
        CHECK_OK(P->irecv(c.r, buf, 16, 2, NULL, &req)); /* wrong tag: stays posted, never done */
        double t0 = harness_now_s();
        P->close_send(c.s);
        c.s = NULL;
        double t1 = harness_now_s();
        P->close_recv(c.r);
        c.r = NULL;
        double t2 = harness_now_s();
        CHECK(t1 - t0 < 1.0 && t2 - t1 < 1.0, "close_send took %.2f s, close_recv %.2f s", t1 - t0,
              t2 - t1);
    }
    conn_close(&c);
    free(buf);
    harness_report(before, "%dx%d: close with requests in flight returns within 1 s", npt, nthr);
}

static void test_props(void)
{
    long before = harness_failures;
    net_config_t cfg = make_cfg(1, 0, 1000, NULL);
    void *ctx = NULL;
    CHECK_OK(P->init(&cfg, &ctx));
    int ndev = -1;
    CHECK_OK(P->devices(ctx, &ndev));
    CHECK(ndev == 1, "\"=lo\" gives %d devices, want 1", ndev);
    net_props_t p;
    memset(&p, 0x55, sizeof(p));
    CHECK_OK(P->get_properties(ctx, 0, &p));
    CHECK(strcmp(p.name, "lo") == 0, "device name \"%.64s\"", p.name);
    CHECK(p.pci_path[0] == '\0', "loopback has a pci path \"%.256s\"", p.pci_path);
    CHECK(p.speed_mbps == 0, "loopback speed %d", p.speed_mbps);
    CHECK(p.latency_us > 0 && p.latency_us < 1000, "latency %g us", p.latency_us);
    CHECK(p.port == 0 && p.max_comms == 65536 && p.ptr_support == NET_PTR_HOST,
          "port %d, max_comms %d, ptr_support 0x%x", p.port, p.max_comms, p.ptr_support);
    CHECK_RES(P->get_properties(ctx, 1, &p), chorusInvalidArgument);
    void *mh = NULL;
    char buf[8];
    CHECK_OK(P->reg_mr(NULL, buf, sizeof(buf), NET_PTR_HOST, &mh));
    CHECK_OK(P->dereg_mr(NULL, mh));
    chorusResult_t res = P->reg_mr(NULL, buf, sizeof(buf), NET_PTR_CUDA, &mh);
    harness_expect_refused("reg_mr of device memory", res, chorusInvalidArgument,
                           chorusGetLastError(NULL), "NET_PTR_HOST", NULL);
    P->finalize(ctx);
    /* An interface that does not exist: a usable context with no devices. */
    cfg.ifname_spec = "=nosuchif0";
    ctx = NULL;
    CHECK_OK(P->init(&cfg, &ctx));
    ndev = -1;
    if (ctx) {
        CHECK_OK(P->devices(ctx, &ndev));
        P->finalize(ctx);
    }
    CHECK(ndev == 0, "\"=nosuchif0\" gives %d devices, want 0", ndev);
    cfg = make_cfg(0, 0, 1000, NULL);
    ctx = NULL;
    CHECK_RES(P->init(&cfg, &ctx), chorusInvalidArgument);
    cfg = make_cfg(8, 9, 1000, NULL);
    CHECK_RES(P->init(&cfg, &ctx), chorusInvalidArgument);
    harness_report(before, "devices and properties of \"=lo\"; reg_mr takes host memory only; bad "
                           "settings are refused");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_props();
    test_traffic(1, 0, 1, 0);
    test_traffic(4, 0, 4, 0);
    test_traffic(2, 2, 2, 2);
    test_traffic(1, 3, 1, 3);
    test_traffic(2, 2, 1, 0); /* ends with different settings: the listener's socket count wins */
    static const int cfgs[2][2] = {{1, 0}, {2, 2}};
    for (int i = 0; i < 2; i++) {
        int npt = cfgs[i][0], nthr = cfgs[i][1];
        test_refused(npt, nthr, 1000, 1, 999, 1, "1000 bytes", "999 bytes");
        test_refused(npt, nthr, 200003, 1, 200002, 1, "200003 bytes", "200002 bytes");
        test_refused(npt, nthr, 100, 3, 100, 4, "tag 3", "tag 4");
        test_peer_close(npt, nthr);
        test_max_requests(npt, nthr);
        test_close_inflight(npt, nthr);
    }
    test_strangers();
    test_accept_deadline(300, 0);
    test_accept_deadline(2600, 1);
    test_abort();
    test_throughput(1, 0);
    test_throughput(4, 0);
    test_throughput(2, 2);
    return harness_finish("net_socket: the TCP socket net plugin over loopback");
}
