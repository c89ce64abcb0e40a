/*
 * net_ib_test.c: the IB net plugin (transports/net_ib.c) against the verbs emulator
 * (tests/support/libsoftverbs.so, named by argv[1]), both ends in one process, each with its own
 * plugin context (so its own emulated port: two hosts as far as the wire can tell).
 *
 * Proves: messages of 0, 1, 7, 4095, 64 KiB+3, 1 MiB+5, 3 MiB and other sizes arrive bit-exact,
 * in order, with their sizes, with 8 outstanding each way, over 1 and 3 QPs per connection and
 * when the connector asked for another QP count (the listener's wins); no byte past a message is
 * written; a message longer than the posted receive, or with another tag, is chorusRemoteError at
 * both ends with nothing written; isend/irecv outside the registration are refused before anything
 * is posted; a peer that closes is chorusRemoteError within 2 s; the registration cache hands out
 * one registration for buffers it covers; more than NET_MAX_REQUESTS receives say "not now".
 * In fresh processes (this program re-run with --scenario): completion errors the emulator
 * injects (wrong rkey, a QP flipped to error, a link gone dark) are chorusRemoteError naming the
 * QP and ibv_wc_status_str's text; RoCE ports pick the RoCE v2 IPv4 GID by themselves and honour
 * CHORUS_IB_GID_INDEX; CHORUS_IB_HCA selects and excludes ports as NCCL's NCCL_IB_HCA does, and
 * ports that are down are skipped; a missing libibverbs means no device, not an error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "net.h"
#include "net_ib_verbs.h"

const char *debug_last_error(void); /* src/debug.h's, without its CHECK macro */

static const net_plugin_t *P = &net_ib_plugin;
static const char *lib;
/* 4.096 us x 2^18 = 1.07 s per try, 4 tries: a sanitizer-slowed emulator placing 3 MiB is not a
 * dead peer. The link-gone-dark scenario lowers it to 14 (67 ms) to fail fast. */
static int ib_timeout = 18;

#define WINDOW 8
#define GUARD 64
#define MAXMSG (3 * 1024 * 1024)
#define NMSG 40

static const size_t sizes[] = {0, 1, 7, 128, 4095, 4096, 65539, (1 << 20) + 5, MAXMSG, 33};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static net_config_t make_cfg(int qps)
{
    net_config_t c;
    memset(&c, 0, sizeof(c));
    c.ifname_spec = "";
    c.nsocks_perthread = 1;
    c.timeout_ms = 10000;
    c.ib_hca = "";
    c.ib_gid_index = -1;
    c.ib_timeout = ib_timeout;
    c.ib_retry_cnt = 3;
    c.ib_qps = qps;
    c.ibverbs_path = lib;
    return c;
}

typedef struct link {
    void *sctx, *rctx, *lcomm, *scomm, *rcomm;
    char *sbuf, *rbuf;
    void *smh, *rmh;
} link_t;

#define SLOT (MAXMSG + GUARD)

/* Two contexts; the receiver listens with qps_r QPs, the sender connects asking for qps_s. */
static int link_open(link_t *l, int qps_r, int qps_s)
{
    memset(l, 0, sizeof(*l));
    net_config_t cr = make_cfg(qps_r), cs = make_cfg(qps_s);
    net_handle_t h;
    int ndev = 0;
    CHECK_OK(P->init(&cr, &l->rctx));
    CHECK_OK(P->init(&cs, &l->sctx));
    if (l->rctx == NULL || l->sctx == NULL)
        return 1;
    CHECK_OK(P->devices(l->rctx, &ndev));
    CHECK(ndev == 1, "the emulator has %d usable ports, want 1", ndev);
    if (ndev < 1)
        return 1;
    CHECK_OK(P->listen(l->rctx, 0, &h, &l->lcomm));
    /* connect needs only the listener's backlog: one thread does both ends. */
    CHECK_OK(P->connect(l->sctx, 0, &h, &l->scomm));
    CHECK_OK(P->accept(l->lcomm, &l->rcomm));
    if (l->scomm == NULL || l->rcomm == NULL)
        return 1;
    l->sbuf = malloc((size_t)WINDOW * SLOT);
    l->rbuf = malloc((size_t)WINDOW * SLOT);
    if (l->sbuf == NULL || l->rbuf == NULL)
        return 1;
    CHECK_OK(P->reg_mr(l->scomm, l->sbuf, (size_t)WINDOW * SLOT, NET_PTR_HOST, &l->smh));
    CHECK_OK(P->reg_mr(l->rcomm, l->rbuf, (size_t)WINDOW * SLOT, NET_PTR_HOST, &l->rmh));
    return l->smh == NULL || l->rmh == NULL;
}

static void link_close(link_t *l)
{
    if (l->smh)
        P->dereg_mr(l->scomm, l->smh);
    if (l->rmh)
        P->dereg_mr(l->rcomm, l->rmh);
    if (l->scomm)
        P->close_send(l->scomm);
    if (l->rcomm)
        P->close_recv(l->rcomm);
    if (l->lcomm)
        P->close_listen(l->lcomm);
    if (l->sctx)
        P->finalize(l->sctx);
    if (l->rctx)
        P->finalize(l->rctx);
    free(l->sbuf);
    free(l->rbuf);
}

/* Test req until done, an error, or seconds pass. */
static chorusResult_t wait_req(void *req, double seconds, int *done_p, size_t *n_p)
{
    double end = harness_now_s() + seconds;
    *done_p = 0;
    while (harness_now_s() < end) {
        chorusResult_t r = P->test(req, done_p, n_p);
        if (r != chorusSuccess || *done_p)
            return r;
    }
    return chorusSuccess;
}

static int guard_intact(const char *p)
{
    for (int i = 0; i < GUARD; i++)
        if ((unsigned char)p[i] != 0xa5)
            return 0;
    return 1;
}

static void test_traffic(int qps_r, int qps_s)
{
    long before = harness_failures;
    link_t l;
    if (link_open(&l, qps_r, qps_s) == 0) {
        void *sreq[WINDOW] = {0}, *rreq[WINDOW] = {0};
        int sent = 0, recvd = 0, sposted = 0, rposted = 0;
        double end = harness_now_s() + 60;
        while ((sent < NMSG || recvd < NMSG) && harness_now_s() < end &&
               harness_failures == before) {
            if (rposted < NMSG && rposted - recvd < WINDOW) {
                char *slot = l.rbuf + (size_t)(rposted % WINDOW) * SLOT;
                memset(slot, 0xa5, SLOT);
                void *req = NULL;
                CHECK_OK(P->irecv(l.rcomm, slot, MAXMSG, rposted + 1, l.rmh, &req));
                if (req != NULL)
                    rreq[rposted++ % WINDOW] = req;
            }
            if (sposted < NMSG && sposted - sent < WINDOW) {
                size_t n = sizes[sposted % NSIZES];
                char *slot = l.sbuf + (size_t)(sposted % WINDOW) * SLOT;
                harness_fill(slot, n, 1000 + (uint64_t)sposted);
                void *req = NULL;
                CHECK_OK(P->isend(l.scomm, slot, n, sposted + 1, l.smh, &req));
                if (req != NULL)
                    sreq[sposted++ % WINDOW] = req;
            }
            int done = 0;
            size_t n = 0;
            if (sent < sposted) {
                CHECK_OK(P->test(sreq[sent % WINDOW], &done, &n));
                if (done) {
                    CHECK(n == sizes[sent % NSIZES], "isend %d reported %zu bytes", sent, n);
                    sent++;
                }
            }
            if (recvd < rposted) {
                CHECK_OK(P->test(rreq[recvd % WINDOW], &done, &n));
                if (done) {
                    size_t want = sizes[recvd % NSIZES];
                    char *slot = l.rbuf + (size_t)(recvd % WINDOW) * SLOT;
                    CHECK(n == want, "message %d: %zu bytes, want %zu", recvd, n, want);
                    long long d = harness_first_diff(slot, want, 1000 + (uint64_t)recvd);
                    CHECK(d < 0, "message %d (%zu bytes, %d/%d QPs): byte %lld differs", recvd,
                          want, qps_r, qps_s, d);
                    CHECK(guard_intact(slot + want), "message %d: bytes past its end written",
                          recvd);
                    recvd++;
                }
            }
        }
        CHECK(sent == NMSG && recvd == NMSG, "%d sent, %d received of %d", sent, recvd, NMSG);
    }
    link_close(&l);
    harness_report(before,
                   "traffic: %d messages of 0..3 MiB, window %d, listener %d QPs, "
                   "connector asked %d",
                   NMSG, WINDOW, qps_r, qps_s);
}

/* A message that does not fit: both ends fail, nothing lands. */
static void test_refused(size_t room, int rtag, size_t nbytes, int tag)
{
    long before = harness_failures;
    link_t l;
    if (link_open(&l, 1, 1) == 0) {
        memset(l.rbuf, 0xa5, GUARD + room);
        harness_fill(l.sbuf, nbytes, 7);
        void *rreq = NULL, *sreq = NULL;
        CHECK_OK(P->irecv(l.rcomm, l.rbuf, room, rtag, l.rmh, &rreq));
        /* The refusal comes from isend itself when the credit is already there, else from a
         * later test: either way before a byte is written. */
        chorusResult_t rs = P->isend(l.scomm, l.sbuf, nbytes, tag, l.smh, &sreq);
        int done = 0;
        size_t n;
        double t0 = harness_now_s();
        if (rs == chorusSuccess && sreq != NULL)
            rs = wait_req(sreq, 5, &done, &n);
        CHECK(rs == chorusRemoteError,
              "send of %zu bytes tag %d into %zu tag %d: %d, want "
              "chorusRemoteError",
              nbytes, tag, room, rtag, (int)rs);
        CHECK(strstr(debug_last_error(), "does not fit") != NULL, "send error text: %s",
              debug_last_error());
        chorusResult_t rr = wait_req(rreq, 5, &done, &n);
        CHECK(rr == chorusRemoteError,
              "the receive of the refused message: %d, want "
              "chorusRemoteError",
              (int)rr);
        CHECK(harness_now_s() - t0 < 2, "refusal took %.2f s", harness_now_s() - t0);
        CHECK(guard_intact(l.rbuf) && guard_intact(l.rbuf + room),
              "the receive buffer was written");
    }
    link_close(&l);
    harness_report(before, "refused: %zu bytes tag %d into a %zu-byte receive with tag %d", nbytes,
                   tag, room, rtag);
}

static void test_outside(void)
{
    long before = harness_failures;
    link_t l;
    if (link_open(&l, 1, 1) == 0) {
        void *req = NULL;
        size_t total = (size_t)WINDOW * SLOT;
        char other[256];
        CHECK_RES(P->isend(l.scomm, l.sbuf + total - 10, 4096 + 100, 1, l.smh, &req),
                  chorusInvalidArgument);
        CHECK_RES(P->irecv(l.rcomm, other, sizeof(other), 1, l.rmh, &req), chorusInvalidArgument);
        CHECK(req == NULL, "a refused post returned a request");
        void *mh2 = NULL;
        CHECK_OK(P->reg_mr(l.rcomm, l.rbuf + 4096, 8192, NET_PTR_HOST, &mh2));
        CHECK(mh2 == l.rmh, "a buffer inside a registration got a registration of its own");
        if (mh2 != NULL)
            CHECK_OK(P->dereg_mr(l.rcomm, mh2));
        CHECK_RES(P->reg_mr(l.rcomm, l.rbuf, 4096, NET_PTR_CUDA, &mh2), chorusInvalidArgument);
        net_props_t pr;
        CHECK_OK(P->get_properties(l.rctx, 0, &pr));
        CHECK(strcmp(pr.name, "softverbs0") == 0 && pr.port == 1 && pr.ptr_support == NET_PTR_HOST,
              "properties: name %s port %d ptr 0x%x", pr.name, pr.port, pr.ptr_support);
        int n = 0;
        for (int i = 0; i < NET_MAX_REQUESTS + 1; i++) {
            req = NULL;
            CHECK_OK(P->irecv(l.rcomm, l.rbuf, 64, 1, l.rmh, &req));
            n += req != NULL;
        }
        CHECK(n == NET_MAX_REQUESTS, "%d receives taken, want %d then \"not now\"", n,
              NET_MAX_REQUESTS);
    }
    link_close(&l);
    harness_report(before,
                   "posts outside a registration refused; cache hit; properties; "
                   "%d requests outstanding",
                   NET_MAX_REQUESTS);
}

/* One end closes: the other's posted request fails within 2 s. */
static void test_peer_close(int close_sender)
{
    long before = harness_failures;
    link_t l;
    if (link_open(&l, 1, 1) == 0) {
        void *req = NULL;
        if (close_sender)
            CHECK_OK(P->irecv(l.rcomm, l.rbuf, 64, 1, l.rmh, &req));
        else
            CHECK_OK(P->isend(l.scomm, l.sbuf, 64, 1, l.smh, &req));
        if (close_sender) {
            P->dereg_mr(l.scomm, l.smh);
            P->close_send(l.scomm);
            l.scomm = l.smh = NULL;
        } else {
            P->dereg_mr(l.rcomm, l.rmh);
            P->close_recv(l.rcomm);
            l.rcomm = l.rmh = NULL;
        }
        int done = 0;
        size_t n;
        double t0 = harness_now_s();
        chorusResult_t r = wait_req(req, 5, &done, &n);
        CHECK(r == chorusRemoteError, "%s after the peer closed: %d, want chorusRemoteError",
              close_sender ? "irecv" : "isend", (int)r);
        CHECK(harness_now_s() - t0 < 2, "noticed after %.2f s", harness_now_s() - t0);
    }
    link_close(&l);
    harness_report(before, "the %s closes: the other end's request fails",
                   close_sender ? "sender" : "receiver");
}

/* A stranger connects to the side channel first and goes silent after 3 bytes: accept drops it
 * (2 s) and takes the real connector; it never blocks on the stranger. */
static void test_stranger(void)
{
    long before = harness_failures;
    net_config_t cfg = make_cfg(1);
    void *rctx = NULL, *sctx = NULL, *lcomm = NULL, *scomm = NULL, *rcomm = NULL;
    net_handle_t h;
    CHECK_OK(P->init(&cfg, &rctx));
    CHECK_OK(P->init(&cfg, &sctx));
    if (rctx != NULL && sctx != NULL && P->listen(rctx, 0, &h, &lcomm) == chorusSuccess) {
        struct sockaddr_storage sa;
        memset(&sa, 0, sizeof(sa));
        memcpy(&sa, h.bytes + 56, 28); /* ib_handle_t's side-channel address (net_ib.c) */
        int fd = socket(sa.ss_family, SOCK_STREAM, 0);
        socklen_t len =
            sa.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, len) == 0, "stranger connect: %s",
              strerror(errno));
        CHECK(fd < 0 || write(fd, "abc", 3) == 3, "stranger write");
        CHECK_OK(P->connect(sctx, 0, &h, &scomm));
        double t0 = harness_now_s();
        CHECK_OK(P->accept(lcomm, &rcomm));
        double dt = harness_now_s() - t0;
        CHECK(rcomm != NULL && dt < 4, "accept with a silent stranger queued took %.2f s", dt);
        if (fd >= 0)
            close(fd);
    }
    if (scomm)
        P->close_send(scomm);
    if (rcomm)
        P->close_recv(rcomm);
    if (lcomm)
        P->close_listen(lcomm);
    if (sctx)
        P->finalize(sctx);
    if (rctx)
        P->finalize(rctx);
    harness_report(before,
                   "a silent stranger on the side channel: dropped, the real peer accepted");
}

/* ---- scenarios in a fresh process (the emulator reads its SOFTVERBS_* variables at open) ---- */

/* One message through a link whose emulator injects a fault; the sender must fail with text. */
static int scenario_fault(const char *want_text)
{
    link_t l;
    if (link_open(&l, 1, 1) == 0) {
        void *rreq = NULL, *sreq = NULL;
        CHECK_OK(P->irecv(l.rcomm, l.rbuf, 4096, 1, l.rmh, &rreq));
        CHECK_OK(P->isend(l.scomm, l.sbuf, 4096, 1, l.smh, &sreq));
        int done = 0;
        size_t n;
        chorusResult_t r = sreq ? wait_req(sreq, 10, &done, &n) : chorusInternalError;
        CHECK(r == chorusRemoteError, "isend under the fault: %d (done %d), want chorusRemoteError",
              (int)r, done);
        const char *e = debug_last_error();
        CHECK(strstr(e, want_text) != NULL && strstr(e, "QP 0x") != NULL,
              "error text lacks \"%s\" or the QP: %s", want_text, e);
        printf("  error: %s\n", e);
    }
    link_close(&l);
    return harness_failures > 0;
}

static int scenario_roce(void)
{
    const ib_verbs_t *v = NULL;
    ib_port_t ports[IB_MAX_DEVS];
    int n = 0;
    CHECK_OK(ib_verbs_load(lib, &v));
    if (v == NULL)
        return 1;
    CHECK_OK(ib_open_ports(v, "", -1, ports, &n));
    CHECK(n == 1 && ports[0].link_layer == IBV_LINK_LAYER_ETHERNET && ports[0].gid_index == 3,
          "RoCE automatic GID: %d ports, link layer %d, index %d; want RoCE v2 IPv4 (3)", n,
          n ? ports[0].link_layer : -1, n ? ports[0].gid_index : -1);
    ib_close_ports(v, ports, n);
    CHECK_OK(ib_open_ports(v, "", 1, ports, &n));
    CHECK(n == 1 && ports[0].gid_index == 1, "CHORUS_IB_GID_INDEX=1 gave index %d",
          n ? ports[0].gid_index : -1);
    ib_close_ports(v, ports, n);
    CHECK_RES(ib_open_ports(v, "", 9, ports, &n), chorusInvalidArgument);
    /* And data moves between RoCE ports (routed by GID). */
    link_t l;
    if (link_open(&l, 2, 2) == 0) {
        void *rreq = NULL, *sreq = NULL;
        harness_fill(l.sbuf, 100000, 3);
        CHECK_OK(P->irecv(l.rcomm, l.rbuf, 100000, 5, l.rmh, &rreq));
        CHECK_OK(P->isend(l.scomm, l.sbuf, 100000, 5, l.smh, &sreq));
        int done = 0;
        size_t got = 0;
        CHECK_OK(sreq ? wait_req(sreq, 10, &done, &got) : chorusInternalError);
        CHECK_OK(rreq ? wait_req(rreq, 10, &done, &got) : chorusInternalError);
        CHECK(done && got == 100000 && harness_first_diff(l.rbuf, 100000, 3) < 0,
              "RoCE message: done %d, %zu bytes", done, got);
    }
    link_close(&l);
    return harness_failures > 0;
}

static int scenario_hca(void)
{
    const ib_verbs_t *v = NULL;
    CHECK_OK(ib_verbs_load(lib, &v));
    if (v == NULL)
        return 1;
    static const struct {
        const char *spec;
        const char *want; /* the ports kept, in order */
    } cases[] = {{"", "softverbs0:1,softverbs2:1"},
                 {"^softverbs0", "softverbs2:1"},
                 {"=softverbs", ""},
                 {"softverbs", "softverbs0:1,softverbs2:1"},
                 {"softverbs2:1", "softverbs2:1"},
                 {"softverbs2:2", ""},
                 {"=softverbs1", ""},
                 {"mlx5_0,softverbs0", "softverbs0:1"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ib_port_t ports[IB_MAX_DEVS];
        int n = -1;
        CHECK_OK(ib_open_ports(v, cases[i].spec, -1, ports, &n));
        char got[256] = "";
        for (int k = 0; k < n; k++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s:%d", k ? "," : "",
                     ports[k].name, ports[k].port);
        CHECK(strcmp(got, cases[i].want) == 0, "CHORUS_IB_HCA=\"%s\": kept \"%s\", want \"%s\"",
              cases[i].spec, got, cases[i].want);
        ib_close_ports(v, ports, n > 0 ? n : 0);
    }
    return harness_failures > 0;
}

static int scenario_nolib(void)
{
    net_config_t c = make_cfg(1);
    c.ibverbs_path = "/nonexistent/libibverbs.so.1";
    void *ctx = NULL;
    int n = -1;
    CHECK_OK(P->init(&c, &ctx));
    if (ctx != NULL) {
        CHECK_OK(P->devices(ctx, &n));
        P->finalize(ctx);
    }
    CHECK(n == 0, "without libibverbs: %d devices, want 0", n);
    return harness_failures > 0;
}

static int run_scenario(const char *name)
{
    if (strcmp(name, "rkey") == 0)
        return scenario_fault("remote access error");
    if (strcmp(name, "qp_err") == 0)
        return scenario_fault("Work Request Flushed Error");
    if (strcmp(name, "drop") == 0) {
        ib_timeout = 14;
        return scenario_fault("transport retry counter exceeded");
    }
    if (strcmp(name, "roce") == 0)
        return scenario_roce();
    if (strcmp(name, "hca") == 0)
        return scenario_hca();
    if (strcmp(name, "nolib") == 0)
        return scenario_nolib();
    fprintf(stderr, "unknown scenario %s\n", name);
    return 2;
}

/* This program again, with env (NAME=VALUE list, NULL-terminated) set, running one scenario. */
static void fresh(const char *name, const char *const *env, const char *what)
{
    long before = harness_failures;
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; env[i] != NULL; i++)
            putenv((char *)env[i]);
        execl("/proc/self/exe", "net_ib_test", lib, "--scenario", name, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        FAIL("fork/wait for scenario %s: %s", name, strerror(errno));
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("scenario %s: status 0x%x", name, status);
    harness_report(before, "%s", what);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBSOFTVERBS [--scenario NAME]\n", argv[0]);
        return 2;
    }
    lib = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[2], "--scenario") == 0)
        return run_scenario(argv[3]);
    if (access(lib, R_OK) != 0) {
        printf("FAIL: the emulator %s is not there: %s\n", lib, strerror(errno));
        return 1;
    }
    test_traffic(1, 1);
    test_traffic(3, 3);
    test_traffic(2, 1);
    test_refused(4096, 1, 4097, 1);
    test_refused(4096, 1, 100, 2);
    test_outside();
    test_peer_close(1);
    test_peer_close(0);
    test_stranger();
    static const char *const none[] = {NULL};
    static const char *const rkey[] = {"SOFTVERBS_FAULT=rkey@2", NULL};
    static const char *const qp_err[] = {"SOFTVERBS_FAULT=qp_err@2", NULL};
    static const char *const drop[] = {"SOFTVERBS_FAULT=drop@2", NULL};
    static const char *const eth[] = {"SOFTVERBS_LINK_LAYER=eth", NULL};
    static const char *const three[] = {"SOFTVERBS_DEVICES=3", "SOFTVERBS_PORTS_DOWN=softverbs1",
                                        NULL};
    fresh("rkey", rkey, "a write with a wrong rkey: chorusRemoteError with the QP and status");
    fresh("qp_err", qp_err, "a QP flipped to error: chorusRemoteError, flushed");
    fresh("drop", drop, "a link gone dark: retry exceeded after CHORUS_IB_TIMEOUT");
    fresh("roce", eth, "RoCE: automatic GID index, CHORUS_IB_GID_INDEX, data routed by GID");
    fresh("hca", three, "CHORUS_IB_HCA selection and exclusion; a down port skipped");
    fresh("nolib", none, "no libibverbs: no device, not an error");
    return harness_finish("IB plugin over the verbs emulator");
}
