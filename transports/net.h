/*
 * net.h: the net plugin interface (DESIGN section 5), modelled on NCCL's ncclNet_t.
 *
 * A net plugin moves whole messages between two processes on different hosts. The net transport
 * (transports/net.c) builds a FIFO connection out of it: the executor fills and drains a local FIFO
 * as with any transport, and the communicator's proxy thread posts each filled slot with isend and
 * each free slot with irecv, and advances the FIFO counters when test() says a request is done.
 * transports/README.md explains how to write a plugin.
 *
 * Rules every plugin follows:
 * - One plugin context per communicator (init/finalize), so two communicators can differ in their
 *   settings. Nothing here is process-global except what the plugin chooses to cache.
 * - listen/connect/accept: the receiving end listens and puts what a connector needs into an
 *   opaque handle (at most NET_HANDLE_BYTES; the core carries it over the bootstrap). connect and
 *   accept block, but never beyond cfg->timeout_ms, and give up with chorusRemoteError when
 *   *cfg->abort_flag becomes non-zero. accept ignores (and closes) connections that do not prove
 *   the handle's nonce, and keeps waiting for the right one.
 * - isend/irecv never block. *request_p == NULL with chorusSuccess means "not now, call again".
 *   Messages on one connection are matched in order; irecv's size is the most it accepts: a
 *   longer message is chorusRemoteError (the peer broke the protocol), never an overflow. The tag
 *   of a message must equal the tag of the irecv it lands in.
 * - test() progresses the connection (non-blocking I/O) and reports completion once; a completed
 *   request is freed by the plugin. A dead peer (EOF, reset, error completion) is
 *   chorusRemoteError with a message naming the peer's address.
 * - A plugin never prints to stdout, never exits, and logs through debug.h (subsystem NET).
 */
#ifndef CHORUS_NET_H
#define CHORUS_NET_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#define NET_HANDLE_BYTES 96
#define NET_MAX_REQUESTS 64 /* outstanding requests per connection a plugin must accept */

/* What the communicator gives its plugin context. */
typedef struct net_config {
    const char *ifname_spec; /* CHORUS_SOCKET_IFNAME (NCCL syntax); "" automatic */
    int nsocks_perthread; /* CHORUS_NSOCKS_PERTHREAD */
    int nthreads; /* CHORUS_SOCKET_NTHREADS; 0: I/O happens inside test() */
    int speed_mbps; /* CHORUS_NET_SPEED_MBPS: the link speed to report; 0: what the system says */
    int64_t timeout_ms; /* bound of connect/accept */
    const volatile uint32_t *abort_flag; /* non-zero: give up */
    int rank; /* for logs */
    /* IB plugin */
    const char *ib_hca; /* CHORUS_IB_HCA (NCCL syntax); "" every device */
    int ib_gid_index; /* CHORUS_IB_GID_INDEX; -1 automatic */
    int ib_timeout; /* CHORUS_IB_TIMEOUT: the QP's 4.096 us x 2^timeout ack timeout */
    int ib_retry_cnt; /* CHORUS_IB_RETRY_CNT */
    int ib_qps; /* CHORUS_IB_QPS_PER_CONNECTION */
    int ib_tc; /* CHORUS_IB_TC: RoCE traffic class */
    int ib_sl; /* CHORUS_IB_SL: IB service level */
    const char *ibverbs_path; /* CHORUS_IBVERBS_PATH; "" libibverbs.so.1 */
} net_config_t;

/* Where a plugin's buffers may live. */
#define NET_PTR_HOST 0x1
#define NET_PTR_CUDA 0x2
#define NET_PTR_DMABUF 0x4

typedef struct net_props {
    char name[64]; /* device name: the interface (eth0) or HCA (mlx5_0) */
    char pci_path[256]; /* sysfs path of the device; "" when virtual (loopback, veth) */
    int speed_mbps; /* link speed; 0 when the system does not say */
    double latency_us; /* one-way latency estimate of the wire plus the stack */
    int port; /* IB port; 0 for sockets */
    int max_comms; /* connections the device can hold */
    int ptr_support; /* NET_PTR_* */
} net_props_t;

typedef struct net_handle {
    char bytes[NET_HANDLE_BYTES];
} net_handle_t;

typedef struct net_plugin {
    const char *name; /* "Socket", "IB" */
    chorusResult_t (*init)(const net_config_t *cfg, void **ctx_p);
    /* Usable devices (0 is not an error: the plugin is simply not usable here). */
    chorusResult_t (*devices)(void *ctx, int *ndev_p);
    chorusResult_t (*get_properties)(void *ctx, int dev, net_props_t *props_p);
    /* Receiving end: start listening on dev; fill the handle for the connector. */
    chorusResult_t (*listen)(void *ctx, int dev, net_handle_t *handle_p, void **listen_comm_p);
    /* Sending end: connect to the listener described by handle. */
    chorusResult_t (*connect)(void *ctx, int dev, const net_handle_t *handle, void **send_comm_p);
    /* Receiving end: wait for the connector of this listen_comm. */
    chorusResult_t (*accept)(void *listen_comm, void **recv_comm_p);
    /* Register a buffer for isend/irecv (sockets: nothing to do; IB: ibv_reg_mr). */
    chorusResult_t (*reg_mr)(void *comm, void *data, size_t size, int ptr_type, void **mhandle_p);
    chorusResult_t (*dereg_mr)(void *comm, void *mhandle);
    chorusResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request_p);
    chorusResult_t (*irecv)(void *recv_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request_p);
    /* *done_p = 1 once the request finished; *size_p = bytes moved (received size for irecv). */
    chorusResult_t (*test)(void *request, int *done_p, size_t *size_p);
    /* Optional (NULL: the proxy naps instead): the file descriptors whose readiness would let
     * test() move this send or recv comm now, with the poll events to wait for; returns how many
     * it wrote (at most max; 0 when the comm waits for nothing). The proxy sleeps in poll() on
     * them when no connection moves, so a plugin that cannot name such fds must return -1. */
    int (*poll_fds)(void *comm, struct pollfd *fds, int max);
    /* Close one end; outstanding requests are dropped. Never fails loudly (WARN only). */
    void (*close_send)(void *send_comm);
    void (*close_recv)(void *recv_comm);
    void (*close_listen)(void *listen_comm);
    void (*finalize)(void *ctx);
} net_plugin_t;

extern const net_plugin_t net_socket_plugin;
/* InfiniBand/RoCE verbs (net_ib.c; net_ib_none.c where the build has no verbs headers). */
extern const net_plugin_t net_ib_plugin;

#endif /* CHORUS_NET_H */
