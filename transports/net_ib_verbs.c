/*
 * net_ib_verbs.c: libibverbs through dlopen, and the setup chores of the IB plugin: which
 * (device, port) pairs are usable (CHORUS_IB_HCA, port state, link layer), which GID a RoCE port
 * uses, and the INIT -> RTR -> RTS walk of an RC queue pair (rdma-core's rc_pingpong is the model).
 */
#define _GNU_SOURCE
#include "net_ib_verbs.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "params.h"

static pthread_mutex_t verbs_lock = PTHREAD_MUTEX_INITIALIZER;
static ib_verbs_t verbs;
static int verbs_state; /* 0: not tried, 1: loaded, -1: failed */
static char verbs_path[256];
static char verbs_why[512];

#define SYM(field, name, required)                                                                 \
    do {                                                                                           \
        *(void **)&verbs.field = dlsym(lib, name);                                                 \
        if (verbs.field == NULL && (required)) {                                                   \
            snprintf(verbs_why, sizeof(verbs_why), "%s lacks %s", path, name);                     \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

chorusResult_t ib_verbs_load(const char *path, const ib_verbs_t **verbs_p)
{
    if (path == NULL || path[0] == '\0')
        path = "libibverbs.so.1";
    pthread_mutex_lock(&verbs_lock);
    if (verbs_state != 0 && strcmp(path, verbs_path) != 0) {
        pthread_mutex_unlock(&verbs_lock);
        return ERR(chorusInvalidUsage, SUB_NET,
                   "IB plugin: CHORUS_IBVERBS_PATH=%s, but this process already loaded %s: one "
                   "verbs library per process",
                   path, verbs_path);
    }
    if (verbs_state == 0) {
        snprintf(verbs_path, sizeof(verbs_path), "%s", path);
        /* Never closed: a provider library may keep threads and handlers of its own. */
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            snprintf(verbs_why, sizeof(verbs_why), "%s", dlerror());
            goto fail;
        }
        SYM(get_device_list, "ibv_get_device_list", 1);
        SYM(free_device_list, "ibv_free_device_list", 1);
        SYM(get_device_name, "ibv_get_device_name", 1);
        SYM(open_device, "ibv_open_device", 1);
        SYM(close_device, "ibv_close_device", 1);
        SYM(query_device, "ibv_query_device", 1);
        SYM(query_port, "ibv_query_port", 1);
        SYM(query_gid, "ibv_query_gid", 1);
        SYM(query_gid_ex, "_ibv_query_gid_ex", 0);
        SYM(alloc_pd, "ibv_alloc_pd", 1);
        SYM(dealloc_pd, "ibv_dealloc_pd", 1);
        SYM(reg_mr, "ibv_reg_mr", 1);
        SYM(dereg_mr, "ibv_dereg_mr", 1);
        SYM(create_comp_channel, "ibv_create_comp_channel", 1);
        SYM(destroy_comp_channel, "ibv_destroy_comp_channel", 1);
        SYM(get_cq_event, "ibv_get_cq_event", 1);
        SYM(ack_cq_events, "ibv_ack_cq_events", 1);
        SYM(create_cq, "ibv_create_cq", 1);
        SYM(destroy_cq, "ibv_destroy_cq", 1);
        SYM(create_qp, "ibv_create_qp", 1);
        SYM(modify_qp, "ibv_modify_qp", 1);
        SYM(destroy_qp, "ibv_destroy_qp", 1);
        SYM(wc_status_str, "ibv_wc_status_str", 1);
        SYM(fork_init, "ibv_fork_init", 0);
        /* Before any registration: on kernels older than 5.13 a fork() (a Python subprocess)
         * would otherwise copy-on-write registered pages under the HCA. Newer kernels need
         * nothing and rdma-core makes it a no-op there. */
        if (verbs.fork_init != NULL && verbs.fork_init() != 0)
            INFO(SUB_NET,
                 "IB plugin: ibv_fork_init failed (%s); a fork() after registering "
                 "memory may corrupt it on old kernels",
                 strerror(errno));
        verbs_state = 1;
        INFO(SUB_NET, "IB plugin: loaded %s", path);
    }
    *verbs_p = verbs_state == 1 ? &verbs : NULL;
    if (verbs_state != 1)
        INFO(SUB_NET, "IB plugin: no libibverbs (%s); using sockets", verbs_why);
    pthread_mutex_unlock(&verbs_lock);
    return chorusSuccess;
fail:
    verbs_state = -1;
    INFO(SUB_NET, "IB plugin: no libibverbs (%s); using sockets", verbs_why);
    *verbs_p = NULL;
    pthread_mutex_unlock(&verbs_lock);
    return chorusSuccess;
}
#undef SYM

/* ---- CHORUS_IB_HCA ---- */

int ib_hca_match(const char *spec, const char *name, int port)
{
    return spec == NULL || spec[0] == '\0' || params_list_match(spec, name, port);
}

/* ---- ports and GIDs ---- */

int ib_mtu_bytes(enum ibv_mtu mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

const char *ib_link_layer_str(int link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB";
}

/* Mb/s from the port's speed and width codes (IBTA encodings, as ibv_devinfo prints them). */
static int port_speed_mbps(const struct ibv_port_attr *a)
{
    int lane_mbps;
    switch (a->active_speed) {
    case 1:
        lane_mbps = 2500;
        break; /* SDR */
    case 2:
        lane_mbps = 5000;
        break; /* DDR */
    case 4: /* QDR */
    case 8:
        lane_mbps = 10000;
        break; /* FDR10 */
    case 16:
        lane_mbps = 14000;
        break; /* FDR */
    case 32:
        lane_mbps = 25000;
        break; /* EDR */
    case 64:
        lane_mbps = 50000;
        break; /* HDR */
    case 128:
        lane_mbps = 100000;
        break; /* NDR */
    default:
        lane_mbps = 0;
    }
    int lanes;
    switch (a->active_width) {
    case 1:
        lanes = 1;
        break;
    case 2:
        lanes = 4;
        break;
    case 4:
        lanes = 8;
        break;
    case 8:
        lanes = 12;
        break;
    case 16:
        lanes = 2;
        break;
    default:
        lanes = 0;
    }
    return lane_mbps * lanes;
}

/* 4: RoCE v2 with an IPv4-mapped address, 3: RoCE v2 routable IPv6, 2: RoCE v2 link-local
 * (fe80::, not routed across L3), 1: RoCE v1, 0: unusable. */
static int gid_score(const struct ibv_gid_entry *e)
{
    static const uint8_t zero[16];
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(e->gid.raw, zero, 16) == 0)
        return 0;
    if (e->gid_type != IBV_GID_TYPE_ROCE_V2)
        return 1;
    if (memcmp(e->gid.raw, v4mapped, 12) == 0)
        return 4;
    return e->gid.raw[0] == 0xfe && (e->gid.raw[1] & 0xc0) == 0x80 ? 2 : 3;
}

static chorusResult_t pick_gid(const ib_verbs_t *v, ib_port_t *p, int gid_tbl_len, int want)
{
    if (want >= 0) {
        if (want >= gid_tbl_len || v->query_gid(p->context, (uint8_t)p->port, want, &p->gid) != 0)
            return ERR(chorusInvalidArgument, SUB_NET,
                       "IB plugin: CHORUS_IB_GID_INDEX=%d is not a GID of %s:%d (its table has %d "
                       "entries; `show_gids` lists them)",
                       want, p->name, p->port, gid_tbl_len);
        p->gid_index = want;
        return chorusSuccess;
    }
    if (p->link_layer != IBV_LINK_LAYER_ETHERNET || v->query_gid_ex == NULL) {
        /* IB addresses by LID; GID 0 is the port's own. Without query_gid_ex a RoCE port cannot
         * tell v1 from v2: index 0, as rdma-core's examples do. */
        if (v->query_gid(p->context, (uint8_t)p->port, 0, &p->gid) != 0)
            return ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_query_gid(%s:%d, 0) failed",
                       p->name, p->port);
        p->gid_index = 0;
        return chorusSuccess;
    }
    int best = -1, best_score = 0;
    for (int i = 0; i < gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        memset(&e, 0, sizeof(e));
        if (v->query_gid_ex(p->context, (uint32_t)p->port, (uint32_t)i, &e, 0, sizeof(e)) != 0)
            continue;
        int s = gid_score(&e);
        if (s > best_score) {
            best = i;
            best_score = s;
            p->gid = e.gid;
        }
    }
    if (best < 0)
        return ERR(chorusSystemError, SUB_NET,
                   "IB plugin: RoCE port %s:%d has no usable GID (set CHORUS_IB_GID_INDEX)",
                   p->name, p->port);
    p->gid_index = best;
    return chorusSuccess;
}

/* Keep port `port` of an open device when it is usable and selected; *kept_p = 1 when kept. */
static chorusResult_t add_port(const ib_verbs_t *v, struct ibv_context *ctx, const char *name,
                               int port, const struct ibv_device_attr *dattr, int gid_index,
                               ib_port_t *p, int *kept_p)
{
    *kept_p = 0;
    struct ibv_port_attr a;
    memset(&a, 0, sizeof(a));
    if (v->query_port(ctx, (uint8_t)port, &a) != 0) {
        INFO(SUB_NET, "IB plugin: %s:%d: ibv_query_port failed (%s); skipped", name, port,
             strerror(errno));
        return chorusSuccess;
    }
    if (a.state != IBV_PORT_ACTIVE) {
        INFO(SUB_NET, "IB plugin: %s:%d is not active (state %d); skipped", name, port, a.state);
        return chorusSuccess;
    }
    if (a.link_layer != IBV_LINK_LAYER_INFINIBAND && a.link_layer != IBV_LINK_LAYER_ETHERNET) {
        INFO(SUB_NET, "IB plugin: %s:%d has link layer %d (neither IB nor Ethernet); skipped", name,
             port, a.link_layer);
        return chorusSuccess;
    }
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->port = port;
    p->context = ctx;
    p->link_layer = a.link_layer;
    p->lid = a.lid;
    p->mtu = a.active_mtu;
    p->speed_mbps = port_speed_mbps(&a);
    p->max_qp_wr = dattr->max_qp_wr;
    p->max_qp = dattr->max_qp;
    chorusResult_t res = pick_gid(v, p, a.gid_tbl_len, gid_index);
    if (res != chorusSuccess && gid_index < 0) {
        INFO(SUB_NET, "IB plugin: %s:%d skipped: %s", name, port, debug_last_error());
        return chorusSuccess;
    }
    if (res != chorusSuccess)
        return res;
    p->pd = v->alloc_pd(ctx);
    if (p->pd == NULL)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: ibv_alloc_pd on %s failed: %s", name,
                   strerror(errno));
    char gid[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, p->gid.raw, gid, sizeof(gid));
    INFO(SUB_NET, "IB plugin: using %s:%d (%s, lid %u, GID %d %s, mtu %d, %d Mb/s)", name, port,
         ib_link_layer_str(p->link_layer), p->lid, p->gid_index, gid, ib_mtu_bytes(p->mtu),
         p->speed_mbps);
    *kept_p = 1;
    return chorusSuccess;
}

chorusResult_t ib_open_ports(const ib_verbs_t *v, const char *hca_spec, int gid_index,
                             ib_port_t *ports, int *nports_p)
{
    int ndev = 0, n = 0;
    chorusResult_t res = chorusSuccess;
    struct ibv_device **list = v->get_device_list(&ndev);
    if (list == NULL) {
        INFO(SUB_NET, "IB plugin: no IB device (ibv_get_device_list: %s); using sockets",
             strerror(errno));
        *nports_p = 0;
        return chorusSuccess;
    }
    for (int d = 0; d < ndev && n < IB_MAX_DEVS; d++) {
        const char *name = v->get_device_name(list[d]);
        struct ibv_context *ctx = v->open_device(list[d]);
        if (ctx == NULL) {
            INFO(SUB_NET, "IB plugin: cannot open %s (%s); skipped", name, strerror(errno));
            continue;
        }
        struct ibv_device_attr dattr;
        memset(&dattr, 0, sizeof(dattr));
        int used = 0;
        if (v->query_device(ctx, &dattr) != 0) {
            INFO(SUB_NET, "IB plugin: ibv_query_device(%s) failed; skipped", name);
        } else {
            for (int port = 1; port <= dattr.phys_port_cnt && n < IB_MAX_DEVS; port++) {
                if (!ib_hca_match(hca_spec, name, port)) {
                    INFO(SUB_NET, "IB plugin: %s:%d not selected by CHORUS_IB_HCA=%s", name, port,
                         hca_spec);
                    continue;
                }
                int kept = 0;
                res = add_port(v, ctx, name, port, &dattr, gid_index, &ports[n], &kept);
                if (res != chorusSuccess)
                    break;
                n += kept;
                used += kept;
            }
        }
        if (!used)
            v->close_device(ctx);
        if (res != chorusSuccess)
            break;
    }
    v->free_device_list(list);
    if (res != chorusSuccess) {
        ib_close_ports(v, ports, n);
        return res;
    }
    if (n == 0)
        INFO(SUB_NET, "IB plugin: no IB device%s (%d found); using sockets",
             hca_spec && hca_spec[0] ? " selected by CHORUS_IB_HCA" : " with an active port", ndev);
    *nports_p = n;
    return chorusSuccess;
}

void ib_close_ports(const ib_verbs_t *v, ib_port_t *ports, int nports)
{
    for (int i = nports - 1; i >= 0; i--) {
        if (ports[i].pd != NULL && v->dealloc_pd(ports[i].pd) != 0)
            WARN(SUB_NET, "IB plugin: ibv_dealloc_pd(%s) failed", ports[i].name);
        /* Ports of one device share its context: close it with its first port. */
        int first = 1;
        for (int j = 0; j < i; j++)
            first &= ports[j].context != ports[i].context;
        if (first && v->close_device(ports[i].context) != 0)
            WARN(SUB_NET, "IB plugin: ibv_close_device(%s) failed", ports[i].name);
    }
}

/* ---- queue pairs ---- */

chorusResult_t ib_qp_init(const ib_verbs_t *v, struct ibv_qp *qp, const ib_port_t *port)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = (uint8_t)port->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    int err =
        v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (err != 0)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: QP 0x%x on %s:%d to INIT: %s",
                   qp->qp_num, port->name, port->port, strerror(err));
    return chorusSuccess;
}

chorusResult_t ib_qp_connect(const ib_verbs_t *v, struct ibv_qp *qp, const ib_port_t *port,
                             const ib_peer_addr_t *peer, uint32_t my_psn, const ib_qp_opts_t *opts)
{
    if (peer->link_layer != port->link_layer)
        return ERR(chorusInvalidUsage, SUB_NET,
                   "IB plugin: %s:%d is %s but the peer's port is %s: both ends need the same link "
                   "layer (CHORUS_IB_HCA selects the ports)",
                   port->name, port->port, ib_link_layer_str(port->link_layer),
                   ib_link_layer_str(peer->link_layer));
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = peer->mtu < port->mtu ? (enum ibv_mtu)peer->mtu : port->mtu;
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)port->port;
    a.ah_attr.sl = (uint8_t)opts->sl;
    if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
        /* RoCE routes by GID: a global route header with the chosen source GID. */
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = peer->gid;
        a.ah_attr.grh.sgid_index = (uint8_t)port->gid_index;
        a.ah_attr.grh.hop_limit = 255;
        a.ah_attr.grh.traffic_class = (uint8_t)opts->traffic_class;
    } else {
        a.ah_attr.dlid = peer->lid;
    }
    int err = v->modify_qp(qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err != 0) {
        char where[INET6_ADDRSTRLEN + 16];
        if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
            char gid[INET6_ADDRSTRLEN];
            inet_ntop(AF_INET6, peer->gid.raw, gid, sizeof(gid));
            snprintf(where, sizeof(where), "GID %s", gid);
        } else {
            snprintf(where, sizeof(where), "lid %u", peer->lid);
        }
        return ERR(chorusSystemError, SUB_NET,
                   "IB plugin: QP 0x%x on %s:%d to RTR (peer QP 0x%x at %s; own GID index %d, "
                   "mtu %d): %s",
                   qp->qp_num, port->name, port->port, peer->qpn, where, port->gid_index,
                   ib_mtu_bytes(a.path_mtu), strerror(err));
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)opts->timeout;
    a.retry_cnt = (uint8_t)opts->retry_cnt;
    a.rnr_retry = 7; /* receives are always posted ahead; 7 = retry for ever */
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    err = v->modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (err != 0)
        return ERR(chorusSystemError, SUB_NET, "IB plugin: QP 0x%x on %s:%d to RTS: %s", qp->qp_num,
                   port->name, port->port, strerror(err));
    return chorusSuccess;
}
