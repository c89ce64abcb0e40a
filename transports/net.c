/*
 * net.c: the net transport, FIFO connections between hosts built on a net plugin (net.h), and the
 * communicator's proxy thread that drives them.
 *
 * Both ends keep a FIFO in their own memory; the executor uses it exactly as a shm FIFO. The
 * proxy thread plays the remote side of each local FIFO:
 *
 *   send end   executor --tail--> [slots] --proxy: isend slot--> wire; test() done --head-->
 * executor recv end   wire --proxy: irecv into a free slot; test() done: sizes[slot], tail-->
 * executor executor --head--> (slot free)
 *
 * A slot is posted to the plugin only when it may be: a filled send slot (tail), a receive slot
 * the executor has freed (head). Requests of a connection complete in order, so the counters move
 * exactly as the FIFO contract says.
 *
 * Sleeping: when a few passes move nothing, the proxy sleeps in poll() on a doorbell (an eventfd
 * that executors ring when they post on a net FIFO while the proxy sleeps, and that
 * transport_ops_begin rings) and on the fds the plugin waits on (net.h poll_fds). So a byte
 * arriving or a slot posted wakes it at once, and an idle communicator burns no CPU. Spinning or
 * yielding instead starved the executors when ranks outnumber cores (ms per hop on 2 cores).
 *
 * An error of the plugin (peer closed, protocol violation) fails that connection only: its
 * waiters give up (fifo_fail) and the call that fails reports the proxy's message
 * (transport_comm_error). Receives are not progressed between operations, so a peer that closes
 * after its last operation is not an error here.
 */
#define _GNU_SOURCE
#include "net.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "debug.h"
#include "params.h"
#include "topo.h"
#include "transport.h"

#define NET_HANDLE_MAGIC 0x4e455431u /* "NET1" */
#define PROXY_POLL_NS 100000 /* how long a working proxy polls before it sleeps in poll() */

struct net_state;

typedef struct net_conn {
    struct net_state *ns;
    conn_dir_t dir;
    int peer;
    int tag;
    fifo_ctrl_t *ctrl;
    char *slots;
    size_t slot_nbytes;
    int steps;
    void *listen_comm; /* recv end until accepted */
    void *comm; /* plugin send or recv comm */
    void *mhandle;
    uint64_t posted; /* slots handed to the plugin */
    uint64_t done; /* slots the plugin finished (published to the executor) */
    void *reqs[FIFO_MAX_STEPS];
    int in_proxy;
    int failed; /* the plugin reported an error: the proxy leaves it alone */
} net_conn_t;

typedef struct net_state {
    const net_plugin_t *plugin;
    void *ctx;
    int dev;
    net_props_t props;
    transport_comm_t *tc;
    pthread_mutex_t lock; /* conns; held by the proxy while it progresses them */
    net_conn_t **conns;
    int nconns, cap;
    int active; /* operations running (transport_ops_begin/end); atomic, read without the lock */
    fifo_bell_t bell; /* the proxy sleeps in poll() on it; executors and begin ring it */
    int stop;
    int started;
    pthread_t thread;
    chorusResult_t error; /* first error the proxy saw */
    char error_text[512];
} net_state_t;

typedef struct net_wire_handle {
    uint32_t magic;
    uint32_t steps;
    uint64_t slot_nbytes;
    char plugin[8]; /* the plugin this end runs: both ends must run the same */
    net_handle_t net; /* the listener (recv end only) */
} net_wire_handle_t;
_Static_assert(sizeof(net_wire_handle_t) <= TRANSPORT_HANDLE_BYTES, "net handle too large");

static const net_plugin_t *const net_plugins[] = {&net_ib_plugin, &net_socket_plugin, NULL};

/* ---- the proxy thread ---- */

/* A connection failed: its waiters give up (fifo_fail), and the first error's text is kept for
 * the call that fails on it. Not the communicator's abort flag: a peer that closes after its last
 * operation fails only the receives posted ahead, which nobody may ever wait for. */
static void proxy_fail(net_state_t *ns, net_conn_t *c, chorusResult_t res)
{
    c->failed = 1;
    fifo_fail(c->ctrl);
    if (ns->error == chorusSuccess) {
        snprintf(ns->error_text, sizeof(ns->error_text),
                 "net transport (%s over %s): connection %s rank %d: %s", ns->plugin->name,
                 ns->props.name, c->dir == CONN_SEND ? "to" : "from", c->peer, debug_last_error());
        __atomic_store_n(&ns->error, res, __ATOMIC_RELEASE);
        INFO(SUB_PROXY, "%s", ns->error_text);
    }
}

/* Move what can move on one connection now; returns 1 when something did, -1 on error. A post
 * that fails (the plugin found the peer gone) still lets the requests that completed before it
 * be published first: a peer that closed right after its last message is no error for that
 * message's receiver. */
static int progress_conn(net_state_t *ns, net_conn_t *c)
{
    const net_plugin_t *pl = ns->plugin;
    int moved = 0;
    chorusResult_t res, post_res = chorusSuccess;
    if (c->dir == CONN_SEND) {
        uint64_t tail = __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE);
        while (c->posted < tail && c->posted - c->done < (uint64_t)c->steps) {
            int s = (int)(c->posted % (uint64_t)c->steps);
            void *req = NULL;
            res = pl->isend(c->comm, c->slots + (size_t)s * c->slot_nbytes, c->ctrl->sizes[s],
                            c->tag, c->mhandle, &req);
            if ((post_res = res) != chorusSuccess)
                break;
            if (req == NULL)
                break;
            c->reqs[s] = req;
            c->posted++;
            moved = 1;
        }
    } else {
        uint64_t head = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
        while (c->posted - head < (uint64_t)c->steps) {
            int s = (int)(c->posted % (uint64_t)c->steps);
            void *req = NULL;
            res = pl->irecv(c->comm, c->slots + (size_t)s * c->slot_nbytes, c->slot_nbytes, c->tag,
                            c->mhandle, &req);
            if ((post_res = res) != chorusSuccess)
                break;
            if (req == NULL)
                break;
            c->reqs[s] = req;
            c->posted++;
            moved = 1;
        }
    }
    while (c->done < c->posted) {
        int s = (int)(c->done % (uint64_t)c->steps);
        int done = 0;
        size_t size = 0;
        res = pl->test(c->reqs[s], &done, &size);
        if (res != chorusSuccess)
            goto fail;
        if (!done)
            break;
        c->reqs[s] = NULL;
        c->done++;
        moved = 1;
        if (c->dir == CONN_SEND) {
            fifo_publish_head(c->ctrl, c->done);
        } else {
            c->ctrl->sizes[s] = (uint32_t)size;
            fifo_publish_tail(c->ctrl, c->done);
        }
    }
    if ((res = post_res) != chorusSuccess)
        goto fail;
    return moved;
fail:
    proxy_fail(ns, c, res);
    return -1;
}

/* 1 when a send end still holds filled slots the wire has not taken. */
static int conn_busy(const net_conn_t *c)
{
    if (c->dir != CONN_SEND)
        return 0;
    return c->done < c->posted || __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) > c->posted;
}

/* One pass over every connection; *busy_p: a send end still holds data for the wire. */
static int progress_all(net_state_t *ns, int active, int *busy_p)
{
    int moved = 0, busy = 0;
    for (int i = 0; i < ns->nconns; i++) {
        net_conn_t *c = ns->conns[i];
        /* Receives move only while operations run: between them a peer that finished may close
         * its end, and that must not read as an error of the next operation here. */
        if (c->failed || (c->dir == CONN_RECV && active == 0))
            continue;
        if (progress_conn(ns, c) > 0)
            moved = 1;
        busy |= !c->failed && conn_busy(c);
    }
    *busy_p = busy;
    return moved;
}

/* Sleep until a bell ring (an executor posted on a net FIFO, or an operation began) or until a
 * plugin fd is ready, at most timeout_ms. Returns 0 when a plugin cannot name its fds (the caller
 * naps instead). Called with the lock held; drops it while asleep. */
static int proxy_sleep(net_state_t *ns, int active, int busy, int timeout_ms)
{
    struct pollfd fds[256];
    int n = 0;
    fds[n++] = (struct pollfd){.fd = ns->bell.fd, .events = POLLIN};
    for (int i = 0; (active || busy) && i < ns->nconns; i++) {
        net_conn_t *c = ns->conns[i];
        if (c->failed || c->done == c->posted || (c->dir == CONN_RECV && !active))
            continue; /* nothing posted (only the executor, by the bell, can give it work), or a
                       * receive between operations (progress_all leaves those alone) */
        if (ns->plugin->poll_fds == NULL || (int)(sizeof(fds) / sizeof(fds[0])) - n < 64)
            return 0; /* no fds, or more than fit here: nap instead of sleeping blind */
        int k = ns->plugin->poll_fds(c->comm, fds + n, (int)(sizeof(fds) / sizeof(fds[0])) - n);
        if (k < 0)
            return 0;
        n += k;
    }
    pthread_mutex_unlock(&ns->lock);
    poll(fds, (nfds_t)n, timeout_ms);
    uint64_t v;
    if (fds[0].revents & POLLIN) {
        ssize_t r = read(ns->bell.fd, &v, sizeof(v));
        (void)r;
    }
    pthread_mutex_lock(&ns->lock);
    return 1;
}

static void nap_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/*
 * The proxy's loop: pass over every connection; when a pass moves nothing a few times in a row,
 * raise the bell's sleeping flag, make one more pass (a post that came before the flag is seen
 * there, one after it rings), and sleep in poll() on the bell and on the fds the plugin waits
 * on. Idle (no operation, nothing left to send) it sleeps on the bell alone.
 */
static void *proxy_main(void *arg)
{
    net_state_t *ns = arg;
    debug_set_rank(ns->tc->rank);
    debug_set_quiet_errors(1);
    unsigned idle_polls = 0;
    int64_t idle_since = 0;
    pthread_mutex_lock(&ns->lock);
    while (!__atomic_load_n(&ns->stop, __ATOMIC_SEQ_CST)) {
        int busy = 0;
        int active = __atomic_load_n(&ns->active, __ATOMIC_SEQ_CST);
        if (progress_all(ns, active, &busy)) {
            idle_polls = 0;
            pthread_mutex_unlock(&ns->lock); /* let new connections in */
            pthread_mutex_lock(&ns->lock);
            continue;
        }
        /* Working: keep passing (yielding the core between passes) for PROXY_POLL_NS before
         * sleeping, since a wake-up costs tens of microseconds on a loaded host. */
        if (idle_polls++ == 0)
            idle_since = fifo_now_ns();
        if ((active || busy) && fifo_now_ns() - idle_since < PROXY_POLL_NS) {
            if (idle_polls > 16) {
                pthread_mutex_unlock(&ns->lock);
                sched_yield();
                pthread_mutex_lock(&ns->lock);
            }
            continue;
        }
        __atomic_store_n(&ns->bell.sleeping, 1, __ATOMIC_SEQ_CST);
        fifo_fence_heavy(); /* pairs with the light fence of every post (fifo.c) */
        active = __atomic_load_n(&ns->active, __ATOMIC_SEQ_CST);
        if (progress_all(ns, active, &busy) || __atomic_load_n(&ns->stop, __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&ns->bell.sleeping, 0, __ATOMIC_SEQ_CST);
            idle_polls = 0;
            continue;
        }
        int working = active || busy;
        if (!proxy_sleep(ns, active, busy, working ? 100 : 1000)) {
            pthread_mutex_unlock(&ns->lock);
            nap_ns(20000);
            pthread_mutex_lock(&ns->lock);
        }
        __atomic_store_n(&ns->bell.sleeping, 0, __ATOMIC_SEQ_CST);
        idle_polls = 0;
    }
    pthread_mutex_unlock(&ns->lock);
    return NULL;
}

static void proxy_bind(net_state_t *ns)
{
    const topo_t *topo = ns->tc->topo;
    char buf[128];
    if (topo == NULL) {
        INFO(SUB_PROXY, "proxy thread not bound: no topology");
        return;
    }
    int dev = topo_find_dev_by_name(topo, ns->props.name);
    cpu_set_t cpus;
    topo_cpus_near(topo, dev, &cpus);
    if (dev < 0 || CPU_COUNT(&cpus) == 0) {
        INFO(SUB_PROXY, "proxy thread not bound: NIC %s has no known locality", ns->props.name);
        return;
    }
    int err = pthread_setaffinity_np(ns->thread, sizeof(cpus), &cpus);
    if (err != 0)
        INFO(SUB_PROXY, "proxy thread: binding near NIC %s failed (%s); left unbound",
             ns->props.name, strerror(err));
    else
        INFO(SUB_PROXY, "proxy thread bound to cpus %s (near NIC %s)",
             topo_cpus_str(&cpus, buf, sizeof(buf)), ns->props.name);
}

/* ---- per-communicator state ---- */

static const net_plugin_t *pick_plugin(const char *want)
{
    for (int i = 0; net_plugins[i] != NULL; i++)
        if (strcasecmp(want, net_plugins[i]->name) == 0)
            return net_plugins[i];
    return NULL;
}

/* Init plugin pl and count its devices; on failure nothing is left open. */
static chorusResult_t plugin_open(const net_plugin_t *pl, const net_config_t *cfg, void **ctx_p,
                                  int *ndev_p)
{
    void *ctx = NULL;
    int ndev = 0;
    CHECK(pl->init(cfg, &ctx));
    chorusResult_t res = pl->devices(ctx, &ndev);
    if (res != chorusSuccess) {
        pl->finalize(ctx);
        return res;
    }
    *ctx_p = ctx;
    *ndev_p = ndev;
    return chorusSuccess;
}

/*
 * Which plugin: CHORUS_NET names one (an error when it has no usable device); unset, IB when it
 * finds an active port, else sockets. IB settings that are wrong are errors either way; IB
 * failing for another reason (no rdma-core, no device, a verb refused) falls back to sockets.
 */
static chorusResult_t pick_and_open(const params_t *p, const net_config_t *cfg,
                                    const net_plugin_t **pl_p, void **ctx_p)
{
    const net_plugin_t *pl;
    int ndev = 0;
    void *ctx = NULL;
    if (p->net[0] == '\0') {
        chorusResult_t res = plugin_open(&net_ib_plugin, cfg, &ctx, &ndev);
        if (res == chorusInvalidArgument || res == chorusInvalidUsage)
            return res;
        if (res == chorusSuccess && ndev > 0) {
            *pl_p = &net_ib_plugin;
            *ctx_p = ctx;
            return chorusSuccess;
        }
        if (res == chorusSuccess)
            net_ib_plugin.finalize(ctx);
        else
            WARN(SUB_NET, "IB plugin unusable (%s); using sockets", debug_last_error());
        pl = &net_socket_plugin;
    } else {
        pl = pick_plugin(p->net);
        if (pl == NULL)
            return ERR(chorusInvalidArgument, SUB_NET,
                       "CHORUS_NET=%s names no net plugin of this build (available: IB, Socket)",
                       p->net);
    }
    CHECK(plugin_open(pl, cfg, &ctx, &ndev));
    if (ndev == 0) {
        pl->finalize(ctx);
        if (pl == &net_ib_plugin)
            return ERR(chorusSystemError, SUB_NET,
                       "CHORUS_NET=IB, but no active IB port was found (CHORUS_IB_HCA=\"%s\", "
                       "CHORUS_IBVERBS_PATH=\"%s\"; CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=NET "
                       "says why)",
                       p->ib_hca, p->ibverbs_path);
        return ERR(chorusSystemError, SUB_NET,
                   "net plugin %s found no usable device (CHORUS_SOCKET_IFNAME=\"%s\")", pl->name,
                   p->socket_ifname);
    }
    *pl_p = pl;
    *ctx_p = ctx;
    return chorusSuccess;
}

static chorusResult_t net_state_get(transport_comm_t *tc, net_state_t **ns_p)
{
    if (tc->net != NULL) {
        *ns_p = tc->net;
        return chorusSuccess;
    }
    const params_t *p = tc->params;
    net_state_t *ns = calloc(1, sizeof(*ns));
    if (ns == NULL)
        return ERR(chorusSystemError, SUB_NET, "out of memory");
    ns->tc = tc;
    pthread_mutex_init(&ns->lock, NULL);
    ns->bell.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ns->bell.fd < 0) {
        pthread_mutex_destroy(&ns->lock);
        free(ns);
        return ERR(chorusSystemError, SUB_PROXY, "eventfd for the proxy thread: %s",
                   strerror(errno));
    }
    net_config_t cfg = {.ifname_spec = p->socket_ifname,
                        .nsocks_perthread = (int)p->nsocks_perthread,
                        .nthreads = (int)p->socket_nthreads,
                        .speed_mbps = (int)p->net_speed_mbps,
                        .timeout_ms = tc->timeout_ms,
                        .abort_flag = tc->abort_flag,
                        .rank = tc->rank,
                        .ib_hca = p->ib_hca,
                        .ib_gid_index = (int)p->ib_gid_index,
                        .ib_timeout = (int)p->ib_timeout,
                        .ib_retry_cnt = (int)p->ib_retry_cnt,
                        .ib_qps = (int)p->ib_qps,
                        .ib_tc = (int)p->ib_tc,
                        .ib_sl = (int)p->ib_sl,
                        .ibverbs_path = p->ibverbs_path};
    const net_plugin_t *pl = NULL;
    chorusResult_t res = pick_and_open(p, &cfg, &pl, &ns->ctx);
    ns->plugin = pl;
    if (res == chorusSuccess)
        res = pl->get_properties(ns->ctx, 0, &ns->props);
    /* Built during an operation (its first net connection made on first use): the operation
     * counts, as transport_ops_begin would have counted it, so its receives get posted. */
    ns->active = tc->ops_depth;
    if (res == chorusSuccess) {
        int err = pthread_create(&ns->thread, NULL, proxy_main, ns);
        if (err != 0)
            res = ERR(chorusSystemError, SUB_PROXY, "cannot start the proxy thread: %s",
                      strerror(err));
        else
            ns->started = 1;
    }
    if (res != chorusSuccess) {
        if (ns->ctx != NULL)
            pl->finalize(ns->ctx);
        close(ns->bell.fd);
        pthread_mutex_destroy(&ns->lock);
        free(ns);
        return res;
    }
    proxy_bind(ns);
    INFO(SUB_NET, "net plugin %s, device %s (%d Mb/s, %s), proxy thread started", pl->name,
         ns->props.name, ns->props.speed_mbps,
         ns->props.pci_path[0] ? ns->props.pci_path : "virtual");
    tc->net = ns;
    *ns_p = ns;
    return chorusSuccess;
}

static chorusResult_t proxy_add(net_state_t *ns, net_conn_t *c)
{
    pthread_mutex_lock(&ns->lock);
    if (ns->nconns == ns->cap) {
        int cap = ns->cap ? 2 * ns->cap : 16;
        net_conn_t **a = realloc(ns->conns, sizeof(*a) * cap);
        if (a == NULL) {
            pthread_mutex_unlock(&ns->lock);
            return ERR(chorusSystemError, SUB_NET, "out of memory");
        }
        ns->conns = a;
        ns->cap = cap;
    }
    ns->conns[ns->nconns++] = c;
    c->in_proxy = 1;
    pthread_mutex_unlock(&ns->lock);
    /* A connection made during an operation (trees connect on first use) has receives to post
     * at once: a proxy asleep on the other connections' fds would not see it for 100 ms. */
    fifo_bell_ring(&ns->bell);
    return chorusSuccess;
}

static void proxy_remove(net_state_t *ns, net_conn_t *c)
{
    pthread_mutex_lock(&ns->lock);
    for (int i = 0; i < ns->nconns; i++)
        if (ns->conns[i] == c) {
            ns->conns[i] = ns->conns[--ns->nconns];
            break;
        }
    c->in_proxy = 0;
    pthread_mutex_unlock(&ns->lock);
}

HOT_PATH void transport_ops_begin(transport_comm_t *tc)
{
    tc->ops_depth++;
    net_state_t *ns = tc->net;
    if (ns == NULL)
        return;
    /* No lock on this path: the proxy holds it while it works, and an executor queueing behind
     * it for every operation starved on this 2-core box (unfair mutex, ms per call). */
    __atomic_add_fetch(&ns->active, 1, __ATOMIC_SEQ_CST);
    fifo_bell_ring(&ns->bell);
}

HOT_PATH void transport_ops_end(transport_comm_t *tc)
{
    tc->ops_depth--;
    net_state_t *ns = tc->net;
    if (ns == NULL)
        return;
    __atomic_sub_fetch(&ns->active, 1, __ATOMIC_SEQ_CST);
}

chorusResult_t transport_comm_error(transport_comm_t *tc)
{
    net_state_t *ns = tc->net;
    if (ns == NULL)
        return chorusSuccess;
    chorusResult_t res = __atomic_load_n(&ns->error, __ATOMIC_ACQUIRE);
    if (res == chorusSuccess)
        return chorusSuccess;
    return ERR(res, SUB_NET, "%s", ns->error_text);
}

void transport_net_speed(const transport_comm_t *tc, double *gbps_p, double *latency_us_p)
{
    *gbps_p = tc->net != NULL ? tc->net->props.speed_mbps / 1000.0 : 0;
    *latency_us_p = tc->net != NULL ? tc->net->props.latency_us : 0;
}

void transport_comm_drain(transport_comm_t *tc, int64_t timeout_ms)
{
    net_state_t *ns = tc->net;
    if (ns == NULL)
        return;
    int64_t deadline = fifo_now_ns() + timeout_ms * 1000000;
    for (;;) {
        int busy = 0;
        pthread_mutex_lock(&ns->lock);
        for (int i = 0; i < ns->nconns; i++)
            busy |= !ns->conns[i]->failed && conn_busy(ns->conns[i]);
        pthread_mutex_unlock(&ns->lock);
        if (!busy)
            return;
        if (__atomic_load_n(tc->abort_flag, __ATOMIC_ACQUIRE) || fifo_now_ns() > deadline) {
            WARN(SUB_NET,
                 "closing net connections with data not yet sent after %lld ms (%s): a peer "
                 "still waiting for it will fail",
                 (long long)timeout_ms,
                 __atomic_load_n(tc->abort_flag, __ATOMIC_ACQUIRE) ? "aborted"
                                                                   : "peer not reading");
            return;
        }
        fifo_bell_ring(&ns->bell);
        nap_ns(100000);
    }
}

void transport_comm_free(transport_comm_t *tc)
{
    net_state_t *ns = tc->net;
    if (ns == NULL)
        return;
    __atomic_store_n(&ns->stop, 1, __ATOMIC_SEQ_CST);
    uint64_t one = 1;
    ssize_t w = write(ns->bell.fd, &one, sizeof(one));
    (void)w;
    if (ns->started)
        pthread_join(ns->thread, NULL);
    if (ns->nconns > 0)
        WARN(SUB_NET, "%d net connection(s) still registered at teardown", ns->nconns);
    ns->plugin->finalize(ns->ctx);
    close(ns->bell.fd);
    pthread_mutex_destroy(&ns->lock);
    free(ns->conns);
    free(ns);
    tc->net = NULL;
}

/* ---- the transport table ---- */

static int net_can_connect(const peer_info_t *self, const peer_info_t *peer)
{
    return self->hostid_hash != peer->hostid_hash || strcmp(self->hostid, peer->hostid) != 0;
}

static void conn_release(net_conn_t *c)
{
    net_state_t *ns = c->ns;
    if (c->in_proxy)
        proxy_remove(ns, c);
    if (c->mhandle != NULL)
        ns->plugin->dereg_mr(c->comm, c->mhandle);
    if (c->comm != NULL) {
        if (c->dir == CONN_SEND)
            ns->plugin->close_send(c->comm);
        else
            ns->plugin->close_recv(c->comm);
    }
    if (c->listen_comm != NULL)
        ns->plugin->close_listen(c->listen_comm);
    free(c->ctrl);
    free(c);
}

static chorusResult_t net_setup(const conn_setup_t *s, transport_res_t *res, conn_t *conn,
                                transport_handle_t *handle_p)
{
    net_state_t *ns = NULL;
    CHECK(net_state_get(s->tc, &ns));
    net_conn_t *c = calloc(1, sizeof(*c));
    size_t nbytes = sizeof(fifo_ctrl_t) + s->slot_nbytes * (size_t)s->steps;
    void *mem = NULL;
    if (c == NULL || posix_memalign(&mem, 4096, nbytes) != 0) {
        free(c);
        return ERR(chorusSystemError, SUB_NET, "out of memory for a %zu-byte net FIFO", nbytes);
    }
    memset(mem, 0, sizeof(fifo_ctrl_t));
    c->ns = ns;
    c->dir = s->dir;
    c->peer = s->peer->rank;
    c->ctrl = mem;
    c->slots = (char *)mem + sizeof(fifo_ctrl_t);
    c->slot_nbytes = s->slot_nbytes;
    c->steps = s->steps;
    net_wire_handle_t h;
    memset(&h, 0, sizeof(h));
    h.magic = NET_HANDLE_MAGIC;
    h.steps = (uint32_t)s->steps;
    h.slot_nbytes = s->slot_nbytes;
    snprintf(h.plugin, sizeof(h.plugin), "%s", ns->plugin->name);
    if (s->dir == CONN_RECV) {
        chorusResult_t r = ns->plugin->listen(ns->ctx, ns->dev, &h.net, &c->listen_comm);
        if (r != chorusSuccess) {
            conn_release(c);
            return r;
        }
    }
    res->map = c;
    res->map_nbytes = nbytes;
    snprintf(res->name, sizeof(res->name), "net %s rank %d", s->dir == CONN_SEND ? "to" : "from",
             c->peer);
    memset(conn, 0, sizeof(*conn));
    conn->ctrl = c->ctrl;
    conn->slots = c->slots;
    conn->slot_nbytes = s->slot_nbytes;
    conn->steps = s->steps;
    conn->peer = c->peer;
    conn->transport = "net";
    conn->bell = &ns->bell;
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &h, sizeof(h));
    return chorusSuccess;
}

static chorusResult_t net_connect(const conn_setup_t *s, const transport_handle_t *peer_handle,
                                  transport_res_t *res, conn_t *conn)
{
    (void)s;
    (void)conn;
    net_conn_t *c = res->map;
    net_state_t *ns = c->ns;
    net_wire_handle_t h;
    memcpy(&h, peer_handle->bytes, sizeof(h));
    if (h.magic != NET_HANDLE_MAGIC || h.steps != (uint32_t)c->steps ||
        h.slot_nbytes != c->slot_nbytes)
        return ERR(chorusInvalidUsage, SUB_NET,
                   "rank %d's net connection handle does not match ours (steps %u vs %d, slot %llu "
                   "vs %zu bytes): the ranks run with different CHORUS_STEPS/CHORUS_BUFFSIZE",
                   c->peer, h.steps, c->steps, (unsigned long long)h.slot_nbytes, c->slot_nbytes);
    h.plugin[sizeof(h.plugin) - 1] = '\0';
    if (strcmp(h.plugin, ns->plugin->name) != 0)
        return ERR(chorusInvalidUsage, SUB_NET,
                   "rank %d runs the %s net plugin, this rank %s: every rank must use the same "
                   "(an IB port is active on one host and not on the other? set CHORUS_NET=IB or "
                   "CHORUS_NET=Socket on every rank)",
                   c->peer, h.plugin, ns->plugin->name);
    if (c->dir == CONN_SEND) {
        CHECK(ns->plugin->connect(ns->ctx, ns->dev, &h.net, &c->comm));
    } else {
        CHECK(ns->plugin->accept(c->listen_comm, &c->comm));
        ns->plugin->close_listen(c->listen_comm);
        c->listen_comm = NULL;
    }
    CHECK(ns->plugin->reg_mr(c->comm, c->slots, c->slot_nbytes * (size_t)c->steps, NET_PTR_HOST,
                             &c->mhandle));
    return proxy_add(ns, c);
}

static void net_close(transport_res_t *res, conn_t *conn)
{
    (void)conn;
    if (res->map != NULL)
        conn_release(res->map);
    res->map = NULL;
}

const transport_ops_t net_transport = {"net", net_can_connect, net_setup, net_connect, net_close};
