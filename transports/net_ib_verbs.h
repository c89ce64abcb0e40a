/*
 * net_ib_verbs.h: the IB plugin's view of libibverbs, loaded with dlopen, and the device, port,
 * GID and queue-pair chores of transports/net_ib.c.
 *
 * Only the structs and constants come from <infiniband/verbs.h> (rdma-core); every function is
 * reached through ib_verbs_t, filled by dlsym from the library CHORUS_IBVERBS_PATH names (default
 * libibverbs.so.1), so libchorus links against no RDMA library and runs where rdma-core is absent.
 * The data path (post_send, post_recv, poll_cq, req_notify_cq) goes through the context's ops
 * table, exactly as verbs.h's inline wrappers do.
 */
#ifndef CHORUS_NET_IB_VERBS_H
#define CHORUS_NET_IB_VERBS_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#define IB_MAX_DEVS 16 /* (device, port) pairs a context keeps */
#define IB_MAX_QPS 4 /* CHORUS_IB_QPS_PER_CONNECTION's bound: what the handle has room for */

/* The entry points the plugin uses; NULL where the library lacks an optional one. */
typedef struct ib_verbs {
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    /* optional (rdma-core >= 32): the GID's type (RoCE v1/v2) */
    int (*query_gid_ex)(struct ibv_context *context, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    int (*fork_init)(void); /* optional */
} ib_verbs_t;

/* Load the library at path ("" : libibverbs.so.1) once per process; a later call with another
 * path is refused. *verbs_p = NULL with chorusSuccess when it cannot be loaded (the reason is
 * logged at INFO: the caller falls back to sockets). */
chorusResult_t ib_verbs_load(const char *path, const ib_verbs_t **verbs_p);

/* One usable (device, port): what a connection needs to address it. */
typedef struct ib_port {
    char name[64]; /* device name, as CHORUS_IB_HCA matches it */
    int port;
    struct ibv_context *context;
    struct ibv_pd *pd;
    int link_layer; /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
    uint16_t lid;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu mtu; /* active MTU */
    int speed_mbps;
    int max_qp_wr;
    int max_qp;
} ib_port_t;

/* Open every device, keep the ACTIVE ports CHORUS_IB_HCA selects (NCCL syntax: comma list of
 * name[:port], prefix match unless '=' leads, '^' excludes), each with a PD and its GID
 * (gid_index >= 0: that index; -1: automatic, RoCE v2 with an IPv4 address first). Fills at most
 * IB_MAX_DEVS ports; *nports_p = 0 is not an error (no device: logged at INFO). */
chorusResult_t ib_open_ports(const ib_verbs_t *v, const char *hca_spec, int gid_index,
                             ib_port_t *ports, int *nports_p);
void ib_close_ports(const ib_verbs_t *v, ib_port_t *ports, int nports);

/* 1 when name:port is selected by spec (pure: tests). */
int ib_hca_match(const char *spec, const char *name, int port);

/* Where a queue pair's peer is, and how to reach it. */
typedef struct ib_peer_addr {
    uint32_t qpn;
    uint32_t psn;
    uint16_t lid;
    uint8_t link_layer;
    uint8_t mtu;
    union ibv_gid gid;
} ib_peer_addr_t;

/* RESET -> INIT with remote-write access. */
chorusResult_t ib_qp_init(const ib_verbs_t *v, struct ibv_qp *qp, const ib_port_t *port);
/* What the user set for a QP's path (CHORUS_IB_TIMEOUT, _RETRY_CNT, _TC, _SL). */
typedef struct ib_qp_opts {
    int timeout;
    int retry_cnt;
    int traffic_class; /* RoCE: the GRH's traffic class (DSCP << 2) */
    int sl; /* IB service level */
} ib_qp_opts_t;

/* INIT -> RTR -> RTS towards peer, with the smaller of the two MTUs, the user's options, infinite
 * RNR retry. */
chorusResult_t ib_qp_connect(const ib_verbs_t *v, struct ibv_qp *qp, const ib_port_t *port,
                             const ib_peer_addr_t *peer, uint32_t my_psn, const ib_qp_opts_t *opts);

/* "mtu 4096"-style helpers for logs. */
int ib_mtu_bytes(enum ibv_mtu mtu);
const char *ib_link_layer_str(int link_layer);

#endif /* CHORUS_NET_IB_VERBS_H */
