/*
 * net_ib_none.c: the IB plugin of a build without the verbs headers (rdma-core's libibverbs-dev):
 * it finds no device, so the net transport uses sockets, and CHORUS_NET=IB says why.
 */
#include "net.h"

#include "debug.h"

static chorusResult_t ibn_init(const net_config_t *cfg, void **ctx_p)
{
    (void)cfg;
    INFO(SUB_NET, "IB plugin: this build has no verbs headers (install libibverbs-dev and "
                  "rebuild); using sockets");
    *ctx_p = NULL;
    return chorusSuccess;
}

static chorusResult_t ibn_devices(void *ctx, int *ndev_p)
{
    (void)ctx;
    *ndev_p = 0;
    return chorusSuccess;
}

static chorusResult_t ibn_refuse(void)
{
    return ERR(chorusInternalError, SUB_NET, "IB plugin: built without verbs; it has no device");
}

static chorusResult_t ibn_props(void *ctx, int dev, net_props_t *props_p)
{
    (void)ctx, (void)dev, (void)props_p;
    return ibn_refuse();
}

static chorusResult_t ibn_listen(void *ctx, int dev, net_handle_t *handle_p, void **lcomm_p)
{
    (void)ctx, (void)dev, (void)handle_p, (void)lcomm_p;
    return ibn_refuse();
}

static chorusResult_t ibn_connect(void *ctx, int dev, const net_handle_t *handle, void **comm_p)
{
    (void)ctx, (void)dev, (void)handle, (void)comm_p;
    return ibn_refuse();
}

static chorusResult_t ibn_accept(void *lcomm, void **comm_p)
{
    (void)lcomm, (void)comm_p;
    return ibn_refuse();
}

static chorusResult_t ibn_reg_mr(void *comm, void *data, size_t nbytes, int type, void **mh_p)
{
    (void)comm, (void)data, (void)nbytes, (void)type, (void)mh_p;
    return ibn_refuse();
}

static chorusResult_t ibn_dereg_mr(void *comm, void *mh)
{
    (void)comm, (void)mh;
    return ibn_refuse();
}

static chorusResult_t ibn_post(void *comm, void *data, size_t nbytes, int tag, void *mh,
                               void **req_p)
{
    (void)comm, (void)data, (void)nbytes, (void)tag, (void)mh, (void)req_p;
    return ibn_refuse();
}

static chorusResult_t ibn_test(void *req, int *done_p, size_t *nbytes_p)
{
    (void)req, (void)done_p, (void)nbytes_p;
    return ibn_refuse();
}

static void ibn_close(void *comm)
{
    (void)comm;
}

const net_plugin_t net_ib_plugin = {
    .name = "IB",
    .init = ibn_init,
    .devices = ibn_devices,
    .get_properties = ibn_props,
    .listen = ibn_listen,
    .connect = ibn_connect,
    .accept = ibn_accept,
    .reg_mr = ibn_reg_mr,
    .dereg_mr = ibn_dereg_mr,
    .isend = ibn_post,
    .irecv = ibn_post,
    .test = ibn_test,
    .poll_fds = NULL,
    .close_send = ibn_close,
    .close_recv = ibn_close,
    .close_listen = ibn_close,
    .finalize = ibn_close,
};
