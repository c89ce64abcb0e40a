/*
 * softverbs.c: the verbs objects of softverbs, a user-space emulator of libibverbs (rdma-core 44
 * ABI) for tests: devices, contexts, PDs, MRs, completion channels, CQs, RC QPs and the data-path
 * ops (post_send, post_recv, poll_cq, req_notify_cq) that verbs.h's inline wrappers call through
 * context->ops. A test dlopen()s libsoftverbs.so where it would dlopen libibverbs.so.1; the bytes
 * then travel between processes of one machine through softverbs_wire.c. It is honest: what
 * hardware refuses (a missing modify_qp mask bit, a dead lkey, a write outside an MR, a full send
 * queue) fails here the same way, synchronously or as an error completion. Test support only;
 * never installed. Environment (read at ibv_get_device_list and ibv_open_device):
 *   SOFTVERBS_DEVICES=N (1), SOFTVERBS_PORTS_DOWN=name,... , SOFTVERBS_LINK_LAYER=ib|eth,
 *   SOFTVERBS_FAULT=kind@n,... (qp_err, drop, rkey; n counts post_send calls of the process),
 *   SOFTVERBS_DEBUG=0|1 (tracing on stderr).
 */
#define _GNU_SOURCE
#include "softverbs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_device {
    struct ibv_device dev;
} g_dev[SV_MAX_DEVICES];
static uint32_t g_key_seed;

uint64_t sv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- environment ----------------------------------------------------------------------------- */

static int env_uint(const char *name, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < lo || v > hi) {
        fprintf(stderr, "softverbs: %s: '%s' is not an integer in [%llu, %llu]\n", name, s,
                (unsigned long long)lo, (unsigned long long)hi);
        return EINVAL;
    }
    *out = v;
    return 0;
}

/* Splits a comma list in place into at most max tokens; an empty token is malformed. */
static int env_split(const char *name, char *s, char **tok, int max, int *n)
{
    *n = 0;
    if (!*s)
        return 0;
    for (char *p = s;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = 0;
        if (!*p || *n == max) {
            fprintf(stderr, "softverbs: %s: empty entry or more than %d entries\n", name, max);
            return EINVAL;
        }
        tok[(*n)++] = p;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static int env_read(struct sv_env *e)
{
    char buf[512], *tok[SV_MAX_DEVICES > SV_MAX_FAULTS ? SV_MAX_DEVICES : SV_MAX_FAULTS];
    const char *s;
    uint64_t v;
    int n;

    memset(e, 0, sizeof(*e));
    e->ndevices = 1;
    if ((s = getenv("SOFTVERBS_DEVICES"))) {
        if (env_uint("SOFTVERBS_DEVICES", s, 0, SV_MAX_DEVICES, &v))
            return EINVAL;
        e->ndevices = (int)v;
    }
    if ((s = getenv("SOFTVERBS_DEBUG"))) {
        if (env_uint("SOFTVERBS_DEBUG", s, 0, 1, &v))
            return EINVAL;
        e->debug = (int)v;
    }
    if ((s = getenv("SOFTVERBS_LINK_LAYER"))) {
        if (strcmp(s, "ib") && strcmp(s, "eth")) {
            fprintf(stderr, "softverbs: SOFTVERBS_LINK_LAYER: '%s' is neither ib nor eth\n", s);
            return EINVAL;
        }
        e->eth = !strcmp(s, "eth");
    }
    if ((s = getenv("SOFTVERBS_PORTS_DOWN"))) {
        snprintf(buf, sizeof(buf), "%s", s);
        if (env_split("SOFTVERBS_PORTS_DOWN", buf, tok, SV_MAX_DEVICES, &n))
            return EINVAL;
        for (int i = 0; i < n; i++) {
            if (strncmp(tok[i], "softverbs", 9) ||
                env_uint("SOFTVERBS_PORTS_DOWN", tok[i] + 9, 0, SV_MAX_DEVICES - 1, &v))
                return EINVAL;
            e->port_down[v] = 1;
        }
    }
    if ((s = getenv("SOFTVERBS_FAULT"))) {
        static const char *kinds[] = {"qp_err", "drop", "rkey"};
        snprintf(buf, sizeof(buf), "%s", s);
        if (env_split("SOFTVERBS_FAULT", buf, tok, SV_MAX_FAULTS, &n))
            return EINVAL;
        for (int i = 0; i < n; i++) {
            char *at = strchr(tok[i], '@');
            int k = -1;
            if (at) {
                *at = 0;
                for (int j = 0; j < 3; j++)
                    k = strcmp(tok[i], kinds[j]) ? k : j;
            }
            if (k < 0) {
                fprintf(stderr,
                        "softverbs: SOFTVERBS_FAULT: entry %d is not qp_err@n, drop@n or "
                        "rkey@n\n",
                        i + 1);
                return EINVAL;
            }
            if (env_uint("SOFTVERBS_FAULT", at + 1, 1, UINT64_MAX, &v))
                return EINVAL;
            e->fault[i].kind = k;
            e->fault[i].n = v;
        }
        e->nfaults = n;
    }
    return 0;
}

/* ---- devices, contexts, queries -------------------------------------------------------------- */

SV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct sv_env e;
    if (env_read(&e)) {
        errno = EINVAL;
        return NULL;
    }
    struct ibv_device **list = calloc((size_t)e.ndevices + 1, sizeof(*list));
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < e.ndevices; i++) {
        struct ibv_device *d = &g_dev[i].dev;
        list[i] = d;
        if (d->name[0]) /* filled once: an open context reads it without the lock */
            continue;
        d->node_type = IBV_NODE_CA;
        d->transport_type = IBV_TRANSPORT_IB;
        snprintf(d->name, sizeof(d->name), "softverbs%d", i);
        snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
        snprintf(d->dev_path, sizeof(d->dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
        snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/softverbs%d", i);
    }
    pthread_mutex_unlock(&g_lock);
    if (num_devices)
        *num_devices = e.ndevices;
    return list;
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device ? device->name : NULL;
}

static int sv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc);
static int sv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct sv_device *d = (struct sv_device *)device;
    struct sv_env e;
    if (d < g_dev || d >= g_dev + SV_MAX_DEVICES || env_read(&e)) {
        errno = EINVAL;
        return NULL;
    }
    struct sv_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->env = e;
    c->devidx = (int)(d - g_dev);
    c->port_down = e.port_down[c->devidx];
    c->ctx.device = device;
    c->ctx.ops.post_send = sv_post_send;
    c->ctx.ops.post_recv = sv_post_recv;
    c->ctx.ops.poll_cq = sv_poll_cq;
    c->ctx.ops.req_notify_cq = sv_req_notify_cq;
    c->ctx.cmd_fd = -1;
    c->ctx.async_fd = -1;
    c->ctx.num_comp_vectors = 1;
    pthread_mutex_init(&c->ctx.mutex, NULL);
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_lock(&g_lock);
    g_key_seed = g_key_seed * 1103515245u + (uint32_t)sv_now_ns() + (uint32_t)getpid();
    c->next_qpn = (g_key_seed >> 8) & SV_PSN_MASK;
    pthread_mutex_unlock(&g_lock);
    sv_faults_set(&e);
    int err = sv_nic_start(c);
    if (err) {
        pthread_mutex_destroy(&c->lock);
        pthread_mutex_destroy(&c->ctx.mutex);
        free(c);
        errno = err;
        return NULL;
    }
    sv_trace(c, "opened %s: lid %u, link layer %s%s", device->name, c->lid, e.eth ? "eth" : "ib",
             c->port_down ? ", port down" : "");
    return &c->ctx;
}

static void qp_free(struct sv_qp *q);

/* Frees what the consumer left: the kernel would reclaim it on a real close. */
SV_EXPORT int ibv_close_device(struct ibv_context *context)
{
    struct sv_ctx *c = (struct sv_ctx *)context;
    sv_nic_stop(c);
    for (struct sv_qp *q = c->qps, *n; q; q = n) {
        n = q->next;
        qp_free(q);
    }
    for (struct sv_cq *q = c->cqs, *n; q; q = n) {
        n = q->next;
        free(q->ring);
        free(q);
    }
    for (struct sv_chan *q = c->chans, *n; q; q = n) {
        n = q->next;
        close(q->ch.fd);
        close(q->wfd);
        free(q);
    }
    for (struct sv_mr *q = c->mrs, *n; q; q = n) {
        n = q->next;
        free(q);
    }
    for (struct sv_pd *q = c->pds, *n; q; q = n) {
        n = q->next;
        free(q);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->ctx.mutex);
    free(c);
    return 0;
}

static uint64_t node_guid(struct sv_ctx *c)
{
    return 0x0253560000000000ull | ((uint64_t)getuid() << 8) | (uint64_t)c->devidx;
}

SV_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
    struct sv_ctx *c = (struct sv_ctx *)context;
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "44.0.1 (softverbs)");
    a->node_guid = htobe64(node_guid(c));
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = 1ull << 46;
    a->page_size_cap = 0xfffff000;
    a->vendor_id = 0x5356;
    a->hw_ver = 1;
    a->max_qp = 1 << 20;
    a->max_qp_wr = SV_MAX_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = SV_MAX_SGE;
    a->max_sge_rd = SV_MAX_SGE;
    a->max_cq = 1 << 20;
    a->max_cqe = SV_MAX_CQE;
    a->max_mr = 1 << 20;
    a->max_pd = 1 << 20;
    a->max_qp_rd_atom = SV_MAX_RD_ATOMIC;
    a->max_res_rd_atom = SV_MAX_RD_ATOMIC << 20;
    a->max_qp_init_rd_atom = SV_MAX_RD_ATOMIC;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
    return 0;
}

/* The real symbol behind verbs.h's ibv_query_port macro; callers pass a struct ibv_port_attr. */
SV_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                             struct _compat_ibv_port_attr *compat)
{
    struct sv_ctx *c = (struct sv_ctx *)context;
    struct ibv_port_attr *p = (struct ibv_port_attr *)compat;
    if (port_num != 1)
        return EINVAL;
    memset(p, 0, sizeof(*p));
    p->state = c->port_down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    p->phys_state = c->port_down ? 3 /* disabled */ : 5 /* link up */;
    p->max_mtu = IBV_MTU_4096;
    p->active_mtu = c->env.eth ? IBV_MTU_1024 : IBV_MTU_4096;
    p->gid_tbl_len = c->env.eth ? 4 : 1;
    p->max_msg_sz = SV_MAX_MSG;
    p->pkey_tbl_len = 1;
    p->lid = c->env.eth ? 0 : c->lid;
    p->sm_lid = c->env.eth ? 0 : 1;
    p->max_vl_num = 4;
    p->subnet_timeout = 18;
    p->active_width = 2; /* 4x */
    p->active_speed = 128; /* NDR: 400 Gb/s at 4x */
    p->link_layer = c->env.eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

static int gid_entry(struct sv_ctx *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e)
{
    if (port != 1 || index >= (c->env.eth ? 4u : 1u))
        return ENODATA;
    memset(e, 0, sizeof(*e));
    sv_gid_make(c->lid, (int)index, &e->gid);
    e->gid_index = index;
    e->port_num = port;
    e->gid_type = !c->env.eth ? IBV_GID_TYPE_IB
                  : index % 2 ? IBV_GID_TYPE_ROCE_V2
                              : IBV_GID_TYPE_ROCE_V1;
    return 0;
}

SV_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                            union ibv_gid *gid)
{
    struct ibv_gid_entry e;
    if (index < 0 || gid_entry((struct sv_ctx *)context, port_num, (uint32_t)index, &e))
        return -1;
    memcpy(gid, &e.gid, sizeof(e.gid)); /* consumers pass GIDs inside packed wire structs */
    return 0;
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                                struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    struct ibv_gid_entry e;
    if (flags || entry_size < sizeof(e))
        return EINVAL;
    int err = gid_entry((struct sv_ctx *)context, port_num, gid_index, &e);
    if (!err)
        *entry = e;
    return err;
}

/* ---- protection domains and memory regions --------------------------------------------------- */

SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct sv_ctx *c = (struct sv_ctx *)context;
    struct sv_pd *p = calloc(1, sizeof(*p));
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    p->pd.context = context;
    pthread_mutex_lock(&c->lock);
    p->pd.handle = c->pds ? c->pds->pd.handle + 1 : 1;
    p->next = c->pds;
    c->pds = p;
    pthread_mutex_unlock(&c->lock);
    return &p->pd;
}

SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    struct sv_ctx *c = (struct sv_ctx *)pd->context;
    struct sv_pd *p = (struct sv_pd *)pd, **pp;
    pthread_mutex_lock(&c->lock);
    if (p->nmr || p->nqp) {
        pthread_mutex_unlock(&c->lock);
        return EBUSY;
    }
    for (pp = &c->pds; *pp != p; pp = &(*pp)->next)
        ;
    *pp = p->next;
    pthread_mutex_unlock(&c->lock);
    free(p);
    return 0;
}

/* A fresh key no live MR of this context uses as lkey or rkey. Caller holds the lock. */
static uint32_t new_key(struct sv_ctx *c)
{
    for (;;) {
        g_key_seed = g_key_seed * 1664525u + 1013904223u;
        uint32_t k = g_key_seed ^ (g_key_seed >> 13) ^ (uint32_t)c->lid;
        int used = k == 0;
        for (struct sv_mr *m = c->mrs; m && !used; m = m->next)
            used = m->mr.lkey == k || m->mr.rkey == k;
        if (!used)
            return k;
    }
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                          uint64_t iova, unsigned int access)
{
    struct sv_ctx *c = (struct sv_ctx *)pd->context;
    const unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                               IBV_ACCESS_OPTIONAL_RANGE;
    /* As hardware: remote write or atomic access needs local write access too. */
    if ((access & ~known) ||
        ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE)) ||
        (uintptr_t)addr + length < (uintptr_t)addr || iova + length < iova) {
        errno = EINVAL;
        return NULL;
    }
    /* Pinning fails on unmapped pages: mincore() says ENOMEM for them. */
    if (length) {
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t lo = (uintptr_t)addr & ~(pg - 1), hi = ((uintptr_t)addr + length + pg - 1);
        size_t npages = (hi & ~(pg - 1)) / pg - lo / pg;
        unsigned char *vec = malloc(npages);
        int bad = !vec || mincore((void *)lo, npages * pg, vec) != 0;
        free(vec);
        if (bad) {
            errno = EFAULT;
            return NULL;
        }
    }
    struct sv_mr *m = calloc(1, sizeof(*m));
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->access = (int)access;
    m->iova = iova;
    pthread_mutex_lock(&c->lock);
    m->mr.lkey = new_key(c);
    m->mr.rkey = new_key(c);
    m->mr.handle = m->mr.lkey;
    m->next = c->mrs;
    c->mrs = m;
    ((struct sv_pd *)pd)->nmr++;
    pthread_mutex_unlock(&c->lock);
    return &m->mr;
}

SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
                                         uint64_t iova, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    struct sv_ctx *c = (struct sv_ctx *)mr->context;
    struct sv_mr *m = (struct sv_mr *)mr, **pp;
    pthread_mutex_lock(&c->lock);
    for (pp = &c->mrs; *pp && *pp != m; pp = &(*pp)->next)
        ;
    if (!*pp) {
        pthread_mutex_unlock(&c->lock);
        return EINVAL;
    }
    *pp = m->next;
    ((struct sv_pd *)mr->pd)->nmr--;
    pthread_mutex_unlock(&c->lock);
    free(m);
    return 0;
}

/* Caller holds the lock. */
struct sv_mr *sv_mr_find(struct sv_ctx *c, uint32_t key, int is_rkey)
{
    for (struct sv_mr *m = c->mrs; m; m = m->next)
        if ((is_rkey ? m->mr.rkey : m->mr.lkey) == key)
            return m;
    return NULL;
}

/* The host address of [addr, addr + len) if m is an MR of pd that covers it with access need. */
void *sv_mr_range(struct sv_mr *m, struct ibv_pd *pd, uint64_t addr, uint64_t len, int need)
{
    if (!m || m->mr.pd != pd || (m->access & need) != need || addr < m->iova ||
        addr - m->iova > m->mr.length || len > m->mr.length - (addr - m->iova))
        return NULL;
    return (char *)m->mr.addr + (addr - m->iova);
}

/* ---- completion channels and CQs ------------------------------------------------------------- */

SV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    struct sv_ctx *c = (struct sv_ctx *)context;
    struct sv_chan *ch = calloc(1, sizeof(*ch));
    int fds[2];
    if (!ch || pipe2(fds, O_CLOEXEC)) {
        free(ch);
        errno = errno ? errno : ENOMEM;
        return NULL;
    }
    /* The NIC thread must never block on a consumer that stopped reading events. */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->ch.context = context;
    ch->ch.fd = fds[0];
    ch->wfd = fds[1];
    pthread_mutex_lock(&c->lock);
    ch->next = c->chans;
    c->chans = ch;
    pthread_mutex_unlock(&c->lock);
    return &ch->ch;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct sv_ctx *c = (struct sv_ctx *)channel->context;
    struct sv_chan *ch = (struct sv_chan *)channel, **pp;
    pthread_mutex_lock(&c->lock);
    if (ch->ncq) {
        pthread_mutex_unlock(&c->lock);
        return EBUSY;
    }
    for (pp = &c->chans; *pp != ch; pp = &(*pp)->next)
        ;
    *pp = ch->next;
    pthread_mutex_unlock(&c->lock);
    close(ch->ch.fd);
    close(ch->wfd);
    free(ch);
    return 0;
}

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                       struct ibv_comp_channel *channel, int comp_vector)
{
    struct sv_ctx *c = (struct sv_ctx *)context;
    if (cqe < 1 || cqe > SV_MAX_CQE || comp_vector != 0 ||
        (channel && channel->context != context)) {
        errno = EINVAL;
        return NULL;
    }
    struct sv_cq *q = calloc(1, sizeof(*q));
    if (q)
        q->ring = calloc((size_t)cqe, sizeof(*q->ring));
    if (!q || !q->ring) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->cap = (uint32_t)cqe;
    q->cq.context = context;
    q->cq.channel = channel;
    q->cq.cq_context = cq_context;
    q->cq.cqe = cqe;
    pthread_mutex_init(&q->cq.mutex, NULL);
    pthread_cond_init(&q->cq.cond, NULL);
    pthread_mutex_lock(&c->lock);
    q->cq.handle = c->cqs ? c->cqs->cq.handle + 1 : 1;
    if (channel)
        ((struct sv_chan *)channel)->ncq++;
    q->next = c->cqs;
    c->cqs = q;
    pthread_mutex_unlock(&c->lock);
    return &q->cq;
}

/* rdma-core blocks until every event is acknowledged; a test would rather see EBUSY. */
SV_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    struct sv_ctx *c = (struct sv_ctx *)cq->context;
    struct sv_cq *q = (struct sv_cq *)cq, **pp;
    pthread_mutex_lock(&c->lock);
    if (q->nqp || q->events != cq->comp_events_completed) {
        if (!q->nqp)
            fprintf(stderr, "softverbs: destroy_cq: %u events but %u acknowledged\n", q->events,
                    cq->comp_events_completed);
        pthread_mutex_unlock(&c->lock);
        return EBUSY;
    }
    for (pp = &c->cqs; *pp != q; pp = &(*pp)->next)
        ;
    *pp = q->next;
    if (cq->channel)
        ((struct sv_chan *)cq->channel)->ncq--;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&cq->mutex);
    pthread_cond_destroy(&cq->cond);
    free(q->ring);
    free(q);
    return 0;
}

/*
 * Appends a completion; caller holds the lock. Callers update their queues before pushing and
 * touch them no more after: an overrun moves QPs to the error state from in here.
 */
void sv_cq_push(struct sv_ctx *c, struct sv_cq *q, const struct ibv_wc *wc)
{
    if (q->overrun)
        return;
    if (q->count == q->cap) {
        q->overrun = 1;
        fprintf(stderr, "softverbs: CQ %p overrun (%u entries unpolled): its QPs go to error\n",
                (void *)q, q->cap);
        for (struct sv_qp *p = c->qps; p; p = p->next)
            if (p->qp.send_cq == &q->cq || p->qp.recv_cq == &q->cq)
                sv_qp_flush(c, p);
        return;
    }
    q->ring[(q->head + q->count) % q->cap] = *wc;
    __atomic_store_n(&q->count, q->count + 1, __ATOMIC_RELEASE);
    if (q->armed && q->cq.channel) {
        struct sv_cq *self = q;
        q->armed = 0;
        if (write(((struct sv_chan *)q->cq.channel)->wfd, &self, sizeof(self)) == sizeof(self))
            q->events++;
        else
            fprintf(stderr, "softverbs: completion channel full: an event is lost\n");
    }
}

static int sv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct sv_cq *q = (struct sv_cq *)ibcq;
    struct sv_ctx *c = (struct sv_ctx *)ibcq->context;
    /* An empty poll takes no lock, so a busy-polling thread cannot starve the NIC thread. */
    if (n <= 0 || !__atomic_load_n(&q->count, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&c->lock);
    int k = 0;
    for (; k < n && q->count; k++) {
        wc[k] = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        __atomic_store_n(&q->count, q->count - 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->lock);
    return k;
}

/* The next completion added to the CQ raises one event; solicited_only is treated as 0. */
static int sv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    struct sv_ctx *c = (struct sv_ctx *)ibcq->context;
    (void)solicited_only;
    pthread_mutex_lock(&c->lock);
    ((struct sv_cq *)ibcq)->armed = 1;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* Blocks on channel->fd unless the consumer made it O_NONBLOCK (then -1, errno EAGAIN). */
SV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                               void **cq_context)
{
    struct sv_cq *q;
    ssize_t r;
    do
        r = read(channel->fd, &q, sizeof(q));
    while (r < 0 && errno == EINTR);
    if (r != sizeof(q)) {
        if (r >= 0)
            errno = EIO;
        return -1;
    }
    *cq = &q->cq;
    *cq_context = q->cq.cq_context;
    return 0;
}

SV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    struct sv_ctx *c = (struct sv_ctx *)cq->context;
    pthread_mutex_lock(&c->lock);
    cq->comp_events_completed += nevents;
    pthread_mutex_unlock(&c->lock);
}

/* Removes the completions of QP qpn from q (what mlx5 does on destroy and reset). */
static void cq_clean(struct sv_cq *q, uint32_t qpn)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < q->count; i++) {
        struct ibv_wc wc = q->ring[(q->head + i) % q->cap];
        if (wc.qp_num != qpn)
            q->ring[(q->head + kept++) % q->cap] = wc;
    }
    __atomic_store_n(&q->count, kept, __ATOMIC_RELEASE);
}

/* ---- queue pairs: creation, the state machine, queries --------------------------------------- */

struct sv_qp *sv_qp_find(struct sv_ctx *c, uint32_t qpn)
{
    for (struct sv_qp *q = c->qps; q; q = q->next)
        if (q->qp.qp_num == qpn)
            return q;
    return NULL;
}

static void qp_free(struct sv_qp *q)
{
    for (uint32_t i = q->sq_head; i != q->sq_tail; i++)
        free(q->sq[i % q->sq_cap].data);
    free(q->sq);
    free(q->rq);
    free(q->rsge);
    pthread_mutex_destroy(&q->qp.mutex);
    pthread_cond_destroy(&q->qp.cond);
    free(q);
}

SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
    struct sv_ctx *c = (struct sv_ctx *)pd->context;
    struct ibv_qp_cap *cap = &ia->cap;
    if (ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || ia->srq ||
        ia->send_cq->context != pd->context || ia->recv_cq->context != pd->context ||
        cap->max_send_wr > SV_MAX_WR || cap->max_recv_wr > SV_MAX_WR ||
        cap->max_send_sge > SV_MAX_SGE || cap->max_recv_sge > SV_MAX_SGE ||
        cap->max_inline_data > SV_MAX_INLINE) {
        errno = EINVAL;
        return NULL;
    }
    struct sv_qp *q = calloc(1, sizeof(*q));
    uint32_t nrsge = cap->max_recv_sge ? cap->max_recv_sge : 1;
    if (q) {
        q->sq_cap = cap->max_send_wr ? cap->max_send_wr : 1;
        q->rq_cap = cap->max_recv_wr ? cap->max_recv_wr : 1;
        q->sq = calloc(q->sq_cap, sizeof(*q->sq));
        q->rq = calloc(q->rq_cap, sizeof(*q->rq));
        q->rsge = calloc((size_t)q->rq_cap * nrsge, sizeof(*q->rsge));
    }
    if (!q || !q->sq || !q->rq || !q->rsge) {
        if (q)
            qp_free(q);
        errno = ENOMEM;
        return NULL;
    }
    for (uint32_t i = 0; i < q->rq_cap; i++)
        q->rq[i].sge = q->rsge + (size_t)i * nrsge;
    q->cap = *cap;
    q->sq_sig_all = ia->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = ia->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = ia->send_cq;
    q->qp.recv_cq = ia->recv_cq;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    pthread_mutex_lock(&c->lock);
    do /* 24-bit, unique in the context; 0 and 1 name the special QPs */
        q->qp.qp_num = c->next_qpn++ & SV_PSN_MASK;
    while (q->qp.qp_num < 2 || sv_qp_find(c, q->qp.qp_num));
    q->qp.handle = q->qp.qp_num;
    q->next = c->qps;
    c->qps = q;
    ((struct sv_pd *)pd)->nqp++;
    ((struct sv_cq *)ia->send_cq)->nqp++;
    ((struct sv_cq *)ia->recv_cq)->nqp++;
    pthread_mutex_unlock(&c->lock);
    sv_trace(c, "created QP 0x%x", q->qp.qp_num);
    return &q->qp;
}

enum {
    M_REQ_INIT = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
    M_REQ_RTR = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
    M_OPT_RTR = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
    M_REQ_RTS = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC,
    M_OPT_RTS = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                IBV_QP_PATH_MIG_STATE,
};

/*
 * The RC rows of the kernel's qp_state_table (ib_modify_qp_is_ok): a transition is valid, needs
 * every req bit, and may carry opt bits; any other bit is an error. SQD/SQE are not emulated, and
 * RESET -> ERR is refused as the kernel refuses it.
 */
static const struct {
    int ok, req, opt;
} g_trans[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
    [IBV_QPS_RESET] = {[IBV_QPS_RESET] = {1, 0, 0}, [IBV_QPS_INIT] = {1, M_REQ_INIT, 0}},
    [IBV_QPS_INIT] = {[IBV_QPS_RESET] = {1, 0, 0},
                      [IBV_QPS_ERR] = {1, 0, 0},
                      [IBV_QPS_INIT] = {1, 0, M_REQ_INIT},
                      [IBV_QPS_RTR] = {1, M_REQ_RTR, M_OPT_RTR}},
    [IBV_QPS_RTR] = {[IBV_QPS_RESET] = {1, 0, 0},
                     [IBV_QPS_ERR] = {1, 0, 0},
                     [IBV_QPS_RTS] = {1, M_REQ_RTS, M_OPT_RTS}},
    [IBV_QPS_RTS] = {[IBV_QPS_RESET] = {1, 0, 0},
                     [IBV_QPS_ERR] = {1, 0, 0},
                     [IBV_QPS_RTS] = {1, 0, M_OPT_RTS & ~IBV_QP_CUR_STATE}},
    [IBV_QPS_ERR] = {[IBV_QPS_RESET] = {1, 0, 0}, [IBV_QPS_ERR] = {1, 0, 0}},
};

/* The attribute values the kernel and the device would refuse. */
static int qp_attr_bad(struct sv_ctx *c, const struct ibv_qp_attr *a, int mask)
{
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC;
    const struct ibv_ah_attr *ah = &a->ah_attr;
    enum ibv_mtu active = c->env.eth ? IBV_MTU_1024 : IBV_MTU_4096;
    return ((mask & IBV_QP_PORT) && a->port_num != 1) ||
           ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) ||
           ((mask & IBV_QP_ACCESS_FLAGS) && (a->qp_access_flags & ~(unsigned)access)) ||
           ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > active)) ||
           ((mask & IBV_QP_AV) &&
            (ah->port_num != 1 || (c->env.eth && !ah->is_global) ||
             (ah->is_global && ah->grh.sgid_index >= (c->env.eth ? 4 : 1)))) ||
           ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > SV_PSN_MASK) ||
           ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) ||
           ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) ||
           ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) ||
           ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) ||
           ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SV_MAX_RD_ATOMIC) ||
           ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SV_MAX_RD_ATOMIC);
}

/* RESET discards both queues and the QP's unpolled completions without reporting anything. */
static void qp_reset(struct sv_qp *q)
{
    for (uint32_t i = q->sq_head; i != q->sq_tail; i++) {
        free(q->sq[i % q->sq_cap].data);
        q->sq[i % q->sq_cap].data = NULL;
    }
    q->sq_head = q->sq_una = q->sq_next = q->sq_tail = 0;
    q->rq_head = q->rq_tail = 0;
    q->rnr_until = 0;
    q->rnr_single = 0;
    memset(&q->a, 0, sizeof(q->a));
    cq_clean((struct sv_cq *)q->qp.send_cq, q->qp.qp_num);
    cq_clean((struct sv_cq *)q->qp.recv_cq, q->qp.qp_num);
}

/* Returns an errno value, as rdma-core's ibv_modify_qp does. */
SV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
    struct sv_ctx *c = (struct sv_ctx *)ibqp->context;
    struct sv_qp *q = (struct sv_qp *)ibqp;
    pthread_mutex_lock(&c->lock);
    enum ibv_qp_state cur = q->qp.state;
    enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
    if (next > IBV_QPS_ERR || !g_trans[cur][next].ok ||
        (mask & g_trans[cur][next].req) != g_trans[cur][next].req ||
        (mask & ~(g_trans[cur][next].req | g_trans[cur][next].opt | IBV_QP_STATE)) ||
        ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) || qp_attr_bad(c, a, mask)) {
        sv_trace(c, "modify_qp 0x%x %d -> %d, mask 0x%x: EINVAL", ibqp->qp_num, cur, next, mask);
        pthread_mutex_unlock(&c->lock);
        return EINVAL;
    }
#define SV_SET(bit, field)                                                                         \
    if (mask & (bit))                                                                              \
    q->a.field = a->field
    SV_SET(IBV_QP_PKEY_INDEX, pkey_index);
    SV_SET(IBV_QP_PORT, port_num);
    SV_SET(IBV_QP_ACCESS_FLAGS, qp_access_flags);
    SV_SET(IBV_QP_AV, ah_attr);
    SV_SET(IBV_QP_PATH_MTU, path_mtu);
    SV_SET(IBV_QP_DEST_QPN, dest_qp_num);
    SV_SET(IBV_QP_RQ_PSN, rq_psn);
    SV_SET(IBV_QP_SQ_PSN, sq_psn);
    SV_SET(IBV_QP_TIMEOUT, timeout);
    SV_SET(IBV_QP_RETRY_CNT, retry_cnt);
    SV_SET(IBV_QP_RNR_RETRY, rnr_retry);
    SV_SET(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
    SV_SET(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
    SV_SET(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    SV_SET(IBV_QP_PATH_MIG_STATE, path_mig_state);
#undef SV_SET
    q->a.rq_psn &= SV_PSN_MASK;
    q->a.sq_psn &= SV_PSN_MASK;
    if (next == IBV_QPS_RESET) {
        qp_reset(q);
    } else if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
        sv_qp_flush(c, q);
    } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        const struct ibv_ah_attr *ah = &q->a.ah_attr;
        q->epsn = q->a.rq_psn;
        if (!c->env.eth && ah->dlid)
            q->dlid = ah->dlid <= SV_LID_MAX ? ah->dlid : 0;
        else
            q->dlid = ah->is_global ? sv_gid_lid(&ah->grh.dgid) : 0;
    } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
        q->next_psn = q->a.sq_psn;
    }
    q->qp.state = next;
    q->a.qp_state = next;
    sv_trace(c, "QP 0x%x: %d -> %d (peer lid %u qpn 0x%x)", ibqp->qp_num, cur, next, q->dlid,
             q->a.dest_qp_num);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
                           struct ibv_qp_init_attr *init_attr)
{
    struct sv_ctx *c = (struct sv_ctx *)ibqp->context;
    struct sv_qp *q = (struct sv_qp *)ibqp;
    (void)mask; /* everything is filled, as providers do */
    pthread_mutex_lock(&c->lock);
    *attr = q->a;
    attr->qp_state = attr->cur_qp_state = q->qp.state;
    attr->cap = q->cap;
    memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = ibqp->qp_context;
    init_attr->send_cq = ibqp->send_cq;
    init_attr->recv_cq = ibqp->recv_cq;
    init_attr->cap = q->cap;
    init_attr->qp_type = IBV_QPT_RC;
    init_attr->sq_sig_all = q->sq_sig_all;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct sv_ctx *c = (struct sv_ctx *)ibqp->context;
    struct sv_qp *q = (struct sv_qp *)ibqp, **pp;
    pthread_mutex_lock(&c->lock);
    for (pp = &c->qps; *pp && *pp != q; pp = &(*pp)->next)
        ;
    if (!*pp) {
        pthread_mutex_unlock(&c->lock);
        return EINVAL;
    }
    *pp = q->next;
    ((struct sv_pd *)ibqp->pd)->nqp--;
    ((struct sv_cq *)ibqp->send_cq)->nqp--;
    ((struct sv_cq *)ibqp->recv_cq)->nqp--;
    cq_clean((struct sv_cq *)ibqp->send_cq, ibqp->qp_num);
    cq_clean((struct sv_cq *)ibqp->recv_cq, ibqp->qp_num);
    pthread_mutex_unlock(&c->lock);
    qp_free(q);
    return 0;
}

/* ---- strings and the rest -------------------------------------------------------------------- */

SV_EXPORT const char *ibv_port_state_str(enum ibv_port_state port_state)
{
    static const char *const str[] = {"PORT_NOP",   "PORT_DOWN",   "PORT_INIT",
                                      "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
    if ((unsigned)port_state >= sizeof(str) / sizeof(str[0]))
        return "invalid state";
    return str[port_state];
}

/* Nothing is pinned, so fork() needs no preparation. */
SV_EXPORT int ibv_fork_init(void)
{
    return 0;
}
