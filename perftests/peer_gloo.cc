/*
 * peer_gloo.cc: Gloo as --compare's peer (peer_gloo.h). One context for the run, made the way
 * PyTorch's gloo backend makes its own: a TCP device on the loopback address, and a full mesh of
 * pairs through a rendezvous store (a file store here, in a directory rank 0 made). Each call
 * builds its options on the caller's buffers and runs Gloo's collective (allreduce, allgather,
 * broadcast, reduce, alltoall); Gloo's default algorithms, as PyTorch leaves them.
 * Gloo reports failures by throwing: every entry point catches and returns -1 with the text.
 * Gloo divides by the element count: a call of none never reaches it (perf_gloo_supported).
 */
#include "peer_gloo.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace
{

std::shared_ptr<gloo::rendezvous::Context> g_ctx;

/* A call waits this long for its peers (64 MiB over loopback TCP takes well under a second); set
 * on the context, whose timeout every collective's options take. */
constexpr std::chrono::milliseconds kTimeout(120 * 1000);

void set_err(char *err, size_t errlen, const std::string &what)
{
    if (err != nullptr && errlen > 0)
        snprintf(err, errlen, "%s", what.c_str());
}

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

template <typename T> ReduceFn reduce_fn(chorusRedOp_t op)
{
    switch (op) {
    case chorusSum:
        return &gloo::sum<T>;
    case chorusProd:
        return &gloo::product<T>;
    case chorusMax:
        return &gloo::max<T>;
    case chorusMin:
        return &gloo::min<T>;
    default:
        return nullptr;
    }
}

template <typename T>
void run_typed(const std::string &coll, const void *send, void *recv, size_t sendcount,
               size_t recvcount, chorusRedOp_t op, int root)
{
    T *in = static_cast<T *>(const_cast<void *>(send));
    T *out = static_cast<T *>(recv);
    if (coll == "all_reduce") {
        gloo::AllreduceOptions o(g_ctx);
        o.setInput(in, sendcount);
        o.setOutput(out, recvcount);
        o.setReduceFunction(reduce_fn<T>(op));
        gloo::allreduce(o);
    } else if (coll == "all_gather") {
        gloo::AllgatherOptions o(g_ctx);
        o.setInput(in, sendcount);
        o.setOutput(out, recvcount);
        gloo::allgather(o);
    } else if (coll == "broadcast") {
        gloo::BroadcastOptions o(g_ctx);
        o.setOutput(out, recvcount); /* one buffer, as MPI_Bcast: the root's data is in it */
        o.setRoot(root);
        gloo::broadcast(o);
    } else if (coll == "reduce") {
        gloo::ReduceOptions o(g_ctx);
        o.setInput(in, sendcount);
        o.setOutput(out, recvcount);
        o.setRoot(root);
        o.setReduceFunction(reduce_fn<T>(op));
        gloo::reduce(o);
    } else if (coll == "alltoall") {
        gloo::AlltoallOptions o(g_ctx);
        o.setInput(in, sendcount);
        o.setOutput(out, recvcount);
        gloo::alltoall(o);
    } else {
        throw std::runtime_error("Gloo has no " + coll + " here");
    }
}

using RunFn = void (*)(const std::string &, const void *, void *, size_t, size_t, chorusRedOp_t,
                       int);

/* In chorusDataType_t order: the types gloo/math.h reduces (none for uint32, half, bfloat16). */
const RunFn kRun[chorusNumTypes] = {run_typed<int8_t>,
                                    run_typed<uint8_t>,
                                    run_typed<int32_t>,
                                    nullptr,
                                    run_typed<int64_t>,
                                    run_typed<uint64_t>,
                                    nullptr,
                                    run_typed<float>,
                                    run_typed<double>,
                                    nullptr};

} // namespace

extern "C" {

const char *perf_gloo_missing(void)
{
    return nullptr;
}

const char *perf_gloo_version(void)
{
    static char v[64];
    snprintf(v, sizeof(v), "Gloo %d.%d.%d (TCP transport, loopback)", GLOO_VERSION_MAJOR,
             GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
    return v;
}

int perf_gloo_init(int rank, int nranks, const char *dir, char *err, size_t errlen)
{
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir);
        gloo::rendezvous::PrefixStore prefix("chorus-perf", store);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
        ctx->setTimeout(kTimeout);
        ctx->connectFullMesh(prefix, dev);
        g_ctx = ctx;
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, std::string("Gloo's rendezvous in ") + dir + ": " + e.what());
        return -1;
    }
}

int perf_gloo_supported(const char *coll, chorusDataType_t dtype, chorusRedOp_t op, size_t count)
{
    std::string c(coll);
    if (count == 0 || (c != "all_reduce" && c != "all_gather" && c != "broadcast" &&
                       c != "reduce" && c != "alltoall"))
        return 0;
    if ((unsigned)dtype >= chorusNumTypes || kRun[dtype] == nullptr)
        return 0;
    /* Gloo has no average (PyTorch's gloo backend refuses ReduceOp.AVG). */
    return (c != "all_reduce" && c != "reduce") || (op != chorusAvg && (unsigned)op < chorusNumOps);
}

int perf_gloo_run(const char *coll, const void *send, void *recv, size_t sendcount,
                  size_t recvcount, chorusDataType_t dtype, chorusRedOp_t op, int root, char *err,
                  size_t errlen)
{
    if (!g_ctx) {
        set_err(err, errlen, "Gloo is not connected (perf_gloo_init)");
        return -1;
    }
    RunFn run = (unsigned)dtype < chorusNumTypes ? kRun[dtype] : nullptr;
    if (run == nullptr) {
        set_err(err, errlen, "Gloo: no such datatype here");
        return -1;
    }
    try {
        run(coll, send, recv, sendcount, recvcount, op, root);
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, std::string("Gloo's ") + coll + ": " + e.what());
        return -1;
    }
}

void perf_gloo_finalize(void)
{
    g_ctx.reset();
}

} // extern "C"
