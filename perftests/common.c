/*
 * common.c: the driver shared by every *_perf benchmark (nccl-tests' common.cu, for Chorus).
 *
 * Flow: pick the launch mode (mpirun: MPI_Init + chorusCommInitMPI; CHORUS_RANK/RANK env:
 * chorusCommInitEnv; neither: a single rank), parse nccl-tests' flags (flags.c), then for every
 * dtype x op x root run the size sweep: per row, out-of-place then in-place, each timed over -n
 * iterations after a sync call (with --compare mpi, MPI's out-of-place call timed in the same
 * loop, in alternating blocks; --compare gloo: Gloo's, peer_gloo.h), then checked bit-exactly on
 * a fresh call against values computed on the host (data.c). Cross-rank aggregation (times,
 * #wrong) goes through MPI under mpirun, through Chorus otherwise. The measured row goes to
 * report.c, which prints the table on rank 0 and writes the -J file; errors go to stderr from the
 * rank that saw them.
 */
#define _GNU_SOURCE
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus_mpi.h"
#include "ctx.h"
#include "cuda_bufs.h"
#include "data.h"
#include "flags.h"
#include "peer_gloo.h"
#include "plain_store.h"
#include "report.h"

/* --compare mpi: the most blocks a row's -n iterations are cut into, alternating Chorus and MPI. */
#define PERF_COMPARE_BLOCKS 8

perf_ctx_t perf_ctx;

static const char *perf_rewrite_how(int mode);

/* Errors --------------------------------------------------------------------------------------- */

/* The end of a run that failed (the cause printed already): the whole job under mpirun. */
void perf_abort(void)
{
    fflush(stderr);
    if (perf_ctx.init == PERF_INIT_MPI) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    exit(1);
}

void perf_fail(const char *call, chorusResult_t res, const char *file, int line)
{
    const perf_ctx_t *ctx = &perf_ctx;
    const char *detail = chorusGetLastError(ctx->comm);
    if (detail == NULL || detail[0] == '\0') {
        detail = chorusGetLastError(NULL);
    }
    fprintf(stderr, "%s:%d: rank %d: %s failed: %s (%d): %s [%s:%d]\n", ctx->host, (int)getpid(),
            ctx->rank, call, chorusGetErrorString(res), (int)res,
            detail && detail[0] ? detail : "(no error text on this rank)", file, line);
    perf_abort();
}

/* Cross-rank helpers: MPI under mpirun, Chorus itself otherwise. ------------------------------- */

static void perf_barrier(void)
{
    if (perf_ctx.init == PERF_INIT_MPI) {
        MPI_Barrier(MPI_COMM_WORLD);
    } else {
        int32_t token = 0;
        PERF_CHECK(chorusAllReduce(&token, &token, 1, chorusInt32, chorusSum, perf_ctx.comm, NULL));
    }
}

static double perf_now(void);

/* A barrier whose waiters sleep: MPI_Barrier spins, and with more ranks than cores the ranks
 * waiting in it took rank 0's core from its memcpy (4 ranks: 5.1 GB/s against 15-21). */
static void perf_quiet_barrier(void)
{
    if (perf_ctx.init != PERF_INIT_MPI) {
        perf_barrier(); /* Chorus' waits sleep on a futex after a short spin */
        return;
    }
    MPI_Request req;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE), !done) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Single-core memcpy bandwidth over nbytes (both buffers touched before): GB/s, the mean over
 * enough copies to take 50 ms after one untimed copy. */
static double perf_memcpy_gbps(void *dst, const void *src, size_t nbytes)
{
    memcpy(dst, src, nbytes);
    double t0 = perf_now(), t = 0;
    long copies = 0;
    while (copies < 3 || t < 0.05) {
        memcpy(dst, src, nbytes);
        copies++;
        t = perf_now() - t0;
    }
    return (double)nbytes * (double)copies / t / 1e9;
}

long long perf_sum_ll(long long v)
{
    int64_t x = v;
    if (perf_ctx.init == PERF_INIT_MPI) {
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    } else {
        PERF_CHECK(chorusAllReduce(&x, &x, 1, chorusInt64, chorusSum, perf_ctx.comm, NULL));
    }
    return (long long)x;
}

/* Seconds per call across ranks as -a says: 0 rank 0's, 1 average, 2 min, 3 max. */
static double perf_aggregate_time(double sec)
{
    int mode = perf_ctx.o.average;
    if (perf_ctx.init == PERF_INIT_MPI) {
        if (mode == 0) {
            MPI_Bcast(&sec, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        } else {
            MPI_Op op = mode == 2 ? MPI_MIN : mode == 3 ? MPI_MAX : MPI_SUM;
            MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
        }
    } else if (mode == 0) {
        PERF_CHECK(chorusBroadcast(&sec, &sec, 1, chorusFloat64, 0, perf_ctx.comm, NULL));
    } else {
        chorusRedOp_t op = mode == 2 ? chorusMin : mode == 3 ? chorusMax : chorusSum;
        PERF_CHECK(chorusAllReduce(&sec, &sec, 1, chorusFloat64, op, perf_ctx.comm, NULL));
    }
    return mode == 1 ? sec / perf_ctx.nranks : sec;
}

/* The least of v over ranks, so that every rank sweeps the same sizes. */
size_t perf_min_size(size_t v)
{
    uint64_t x = v;
    if (perf_ctx.init == PERF_INIT_MPI) {
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    } else {
        PERF_CHECK(chorusAllReduce(&x, &x, 1, chorusUint64, chorusMin, perf_ctx.comm, NULL));
    }
    return (size_t)x;
}

/* Launch --------------------------------------------------------------------------------------- */

static perf_init_t perf_launch_mode(void)
{
    static const char *const mpi_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                           "PMI_RANK", "MV2_COMM_WORLD_SIZE"};
    for (size_t k = 0; k < sizeof(mpi_vars) / sizeof(mpi_vars[0]); k++) {
        if (getenv(mpi_vars[k]) != NULL) {
            return PERF_INIT_MPI;
        }
    }
    return getenv("CHORUS_RANK") || getenv("RANK") ? PERF_INIT_ENV : PERF_INIT_SINGLE;
}

static void perf_comm_init(perf_ctx_t *ctx)
{
    int mpi_size = 1;
    if (ctx->init == PERF_INIT_MPI) {
        MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
        PERF_CHECK(chorusCommInitMPI(&ctx->comm, MPI_COMM_WORLD));
    } else if (ctx->init == PERF_INIT_ENV) {
        PERF_CHECK(chorusCommInitEnv(&ctx->comm));
    } else {
        chorusUniqueId id;
        PERF_CHECK(chorusGetUniqueId(&id));
        PERF_CHECK(chorusCommInitRank(&ctx->comm, 1, id, 0));
    }
    PERF_CHECK(chorusCommCount(ctx->comm, &ctx->nranks));
    PERF_CHECK(chorusCommUserRank(ctx->comm, &ctx->rank));
    if (ctx->init == PERF_INIT_MPI && ctx->nranks != mpi_size) {
        perf_fail("chorusCommCount == MPI_Comm_size", chorusInternalError, __FILE__, __LINE__);
    }
}

static void perf_print_banner(perf_ctx_t *ctx)
{
    static const char *const mode_names[] = {"mpi", "env", "single"};
    const perf_opts_t *o = &ctx->o;
    char line[PERF_LINE_BYTES] = {0};
    char *lines = calloc((size_t)ctx->nranks, PERF_LINE_BYTES);
    int version = 0, dev = -1;

    PERF_CHECK(chorusGetVersion(&version));
    PERF_CHECK(chorusCommCuDevice(ctx->comm, &dev));
    PERF_PRINT("# Chorus %s_perf: chorus version %d.%d.%d, %d ranks, init by %s\n", ctx->coll->name,
               version / 10000, version / 100 % 100, version % 100, ctx->nranks,
               mode_names[ctx->init]);
    PERF_PRINT("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
               "iters: %d agg iters: %d validation: %d graph: 0\n",
               o->minbytes, o->maxbytes, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
               o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg_iters, o->check);
    if (o->blocking) {
        PERF_PRINT("# Blocking Enabled: wait for completion and barrier after each collective \n");
    }
    PERF_PRINT("# Stream: %s, buffers: %s\n",
               o->device_bufs   ? (o->stream_null ? "NULL (legacy CUDA stream)" : "CUDA stream")
               : o->stream_null ? "NULL (blocking calls)"
                                : "host stream",
               o->device_bufs     ? "cudaMalloc (GPU to GPU or staged: CHORUS_CUDA_P2P)"
               : o->register_bufs ? "chorusMemAlloc"
                                  : "malloc");
    /* A --compare ignored clears both: nothing after the banner names the peer (the summary gave
     * Gloo's missing types as the reason where Gloo lacks the collective). */
    if (o->compare_mpi && o->device_bufs) {
        PERF_PRINT("# --compare %s ignored with --device cuda: it takes host buffers\n",
                   o->compare_gloo ? "gloo" : "mpi");
        ctx->o.compare_mpi = ctx->o.compare_gloo = 0;
    } else if (o->compare_mpi && (ctx->init != PERF_INIT_MPI || ctx->coll->mpi_run == NULL)) {
        PERF_PRINT("# --compare %s ignored: not launched by mpirun, or no MPI counterpart\n",
                   o->compare_gloo ? "gloo" : "mpi");
        ctx->o.compare_mpi = ctx->o.compare_gloo = 0;
    } else if (o->compare_gloo && perf_gloo_missing() != NULL) {
        PERF_PRINT("# --compare gloo ignored: %s\n", perf_gloo_missing());
        ctx->o.compare_mpi = ctx->o.compare_gloo = 0;
    } else if (o->compare_gloo &&
               !perf_gloo_supported(ctx->coll->name, chorusFloat32, chorusSum, 1)) {
        PERF_PRINT("# --compare gloo ignored: Gloo has no %s\n", ctx->coll->name);
        ctx->o.compare_mpi = ctx->o.compare_gloo = 0;
    } else if (o->compare_gloo) {
        const char *vs =
            ctx->coll->mpi_in_place && !ctx->coll->no_inplace ? "in-place" : "out-of-place";
        PERF_PRINT("# --compare gloo: %s (as PyTorch's gloo backend runs it on one host), its "
                   "call on the same buffers, its iterations interleaved with Chorus' %s ones "
                   "(int8, uint8, int32, int64, uint64, float32, float64; no avg, no call of "
                   "no element); ratio = gloo / chorus %s time, > 1: Chorus faster\n",
                   perf_gloo_version(), vs, vs);
    } else if (o->compare_mpi) {
        const char *vs =
            ctx->coll->mpi_in_place && !ctx->coll->no_inplace ? "in-place" : "out-of-place";
        PERF_PRINT("# --compare mpi: MPI's call on the same buffers, its iterations interleaved "
                   "with Chorus' %s ones (avg as MPI_SUM; none for half/bfloat16); ratio = mpi / "
                   "chorus %s time, > 1: Chorus faster\n",
                   vs, vs);
    }
    if (o->rewrite && o->device_bufs) {
        PERF_PRINT("# --rewrite ignored with --device cuda: the calls read device memory\n");
        ctx->o.rewrite = 0;
    } else if (o->rewrite) {
        PERF_PRINT("# --rewrite %d: each timed iteration first writes its input again (the same "
                   "values, %s; in %s times)\n",
                   o->rewrite, perf_rewrite_how(o->rewrite),
                   ctx->o.compare_mpi ? "both libraries'" : "the");
    }
    if (o->offset) {
        PERF_PRINT("# --offset %d: each host buffer starts %d bytes past a page boundary\n",
                   o->offset, o->offset);
    }
    if (o->cputime) {
        PERF_PRINT("# -C 1: the time columns are cputime (until the last call returned, before "
                   "waiting for the stream), as nccl-tests'; algbw, busbw%s are from wall time, "
                   "as nccl-tests' bandwidths\n",
                   ctx->o.compare_mpi ? ", the peer's time (its calls block), the ratio and the "
                                        "memcpy line"
                                      : "");
    }
    if (o->root_given && !ctx->coll->rooted) {
        PERF_PRINT("# -r %d ignored: %s has no root (as in nccl-tests)\n", o->root,
                   ctx->coll->name);
    }
    if (o->timeout_s > 0) {
        const char *ms = getenv("CHORUS_TIMEOUT_MS");
        if (ctx->timeout_set) {
            PERF_PRINT("# -T %d: CHORUS_TIMEOUT_MS=%s: a wait of a call that takes longer fails "
                       "it, and the run ends with the error\n",
                       o->timeout_s, ms != NULL ? ms : "?");
        } else {
            PERF_PRINT("# -T %d ignored: CHORUS_TIMEOUT_MS=%s is set\n", o->timeout_s,
                       ms != NULL ? ms : "?");
        }
    }
    if (o->json_path != NULL) {
        PERF_PRINT("# Writing JSON to %s\n", o->json_path);
    }
    perf_report_print_env(&ctx->report);
    PERF_PRINT("#\n# Using devices\n");
    snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s]\n",
             ctx->rank, 0, (int)getpid(), ctx->host, dev,
             o->device_bufs ? ctx->device_name : "host");
    if (lines == NULL) {
        perf_fail("calloc(banner lines)", chorusSystemError, __FILE__, __LINE__);
    }
    if (ctx->init == PERF_INIT_MPI) {
        MPI_Gather(line, PERF_LINE_BYTES, MPI_CHAR, lines, PERF_LINE_BYTES, MPI_CHAR, 0,
                   MPI_COMM_WORLD);
    } else {
        PERF_CHECK(chorusAllGather(line, lines, PERF_LINE_BYTES, chorusInt8, ctx->comm, NULL));
    }
    for (int r = 0; r < ctx->nranks; r++) {
        lines[(size_t)(r + 1) * PERF_LINE_BYTES - 1] = '\0';
        PERF_PRINT("%s", lines + (size_t)r * PERF_LINE_BYTES);
    }
    free(lines);
}

/* Timing and checking -------------------------------------------------------------------------- */

static double perf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The tuner's choice and the model's time for this row (chorusCommTuningInfo). */
static void perf_tuning(const perf_case_t *c, perf_row_t *row)
{
    row->algo = "?";
    row->pred_us = 0;
    PERF_CHECK(chorusCommTuningInfo(perf_ctx.comm, perf_ctx.coll->tuning_name, c->counts.paramcount,
                                    c->dtype, &row->algo, &row->pred_us));
}

/* The send and receive pointers of a call: separate buffers, or in place inside recvbuf. */
static void perf_buffers(const perf_case_t *c, int in_place, char **send_p, char **recv_p)
{
    size_t es = perf_dtype_size(c->dtype);
    if (in_place) {
        *send_p = perf_ctx.recvbuf + c->counts.send_inplace_offset * (size_t)c->rank * es;
        *recv_p = perf_ctx.recvbuf + c->counts.recv_inplace_offset * (size_t)c->rank * es;
    } else {
        *send_p = perf_ctx.sendbuf;
        *recv_p = perf_ctx.recvbuf;
    }
}

/* The pointer a call passes for host pointer p into sendbuf or recvbuf: p itself, or with
 * --device cuda the same offset into the device buffer. */
static char *perf_dev(char *p)
{
    const perf_ctx_t *ctx = &perf_ctx;
    if (!ctx->o.device_bufs) {
        return p;
    }
    if (p >= ctx->recvbuf && p < ctx->recvbuf + ctx->bufbytes) {
        return ctx->dev_recv + (p - ctx->recvbuf);
    }
    return ctx->dev_send + (p - ctx->sendbuf);
}

/* --device cuda: host mirrors to the device (to_device) or recvbuf back (!to_device). */
static void perf_mirror(int to_device)
{
    perf_ctx_t *ctx = &perf_ctx;
    if (!ctx->o.device_bufs) {
        return;
    }
    int bad = to_device ? perf_cuda_copy(ctx->dev_send, ctx->sendbuf, ctx->bufbytes) ||
                              perf_cuda_copy(ctx->dev_recv, ctx->recvbuf, ctx->bufbytes)
                        : perf_cuda_copy(ctx->recvbuf, ctx->dev_recv, ctx->bufbytes);
    if (bad) {
        perf_fail("cudaMemcpy (device buffer mirror)", chorusUnhandledCudaError, __FILE__,
                  __LINE__);
    }
}

/* Fill this rank's input (and, when want_expected, the expected output, with the checked part of
 * recvbuf poisoned to differ from it everywhere); returns the element count to check. */
static size_t perf_prepare(const perf_case_t *c, int in_place, int want_expected)
{
    size_t es = perf_dtype_size(c->dtype), ncheck;
    char *sendp, *recvp;
    perf_buffers(c, in_place, &sendp, &recvp);
    ncheck = perf_ctx.coll->init(c, perf_ctx.sendbuf, want_expected ? perf_ctx.expected : NULL);
    if (want_expected) {
        for (size_t b = 0; b < ncheck * es; b++) {
            recvp[b] = (char)~perf_ctx.expected[b];
        }
    }
    if (in_place) {
        memmove(sendp, perf_ctx.sendbuf, c->counts.sendcount * es);
    }
    perf_mirror(1);
    return ncheck;
}

/* sendp/recvp point into the host buffers; the call gets perf_dev's. */
static void perf_call(const perf_case_t *c, const void *sendp, void *recvp)
{
    PERF_CHECK(perf_ctx.coll->run(perf_dev((char *)sendp), perf_dev(recvp), c, perf_ctx.comm,
                                  perf_ctx.stream));
}

static void perf_complete(void)
{
    if (perf_ctx.o.device_bufs) {
        if (perf_cuda_stream_sync(perf_ctx.stream) != 0) {
            perf_fail("cudaStreamSynchronize", chorusUnhandledCudaError, __FILE__, __LINE__);
        }
    } else if (perf_ctx.stream != NULL) {
        PERF_CHECK(chorusStreamSynchronize(perf_ctx.stream));
    }
}

/* Whether the peer (MPI, or Gloo with --compare gloo) has the row's call, and MPI's types. */
static int perf_mpi_types(const perf_case_t *c, MPI_Datatype *dt_p, MPI_Op *op_p)
{
    /* In chorusDataType_t order; half and bfloat16 have no MPI datatype. */
    MPI_Datatype types[chorusNumTypes] = {
        MPI_INT8_T,   MPI_UINT8_T,       MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T,
        MPI_UINT64_T, MPI_DATATYPE_NULL, MPI_FLOAT,   MPI_DOUBLE,   MPI_DATATYPE_NULL};
    MPI_Op ops[chorusNumOps] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_SUM}; /* avg: as sum */
    *dt_p = types[c->dtype];
    *op_p = perf_ctx.coll->reduces ? ops[c->op] : MPI_OP_NULL;
    if (perf_ctx.o.compare_gloo) {
        return perf_gloo_supported(perf_ctx.coll->name, c->dtype, c->op, c->counts.paramcount);
    }
    return *dt_p != MPI_DATATYPE_NULL;
}

/* MPI's call on the same buffers (MPI_ERRORS_ARE_FATAL: a failure aborts the job). */
static void perf_mpi_call(const perf_case_t *c, MPI_Datatype dt, MPI_Op op)
{
    if (perf_ctx.o.compare_gloo) { /* Gloo's call (peer_gloo.h); a failure aborts the job */
        char err[PERF_LINE_BYTES];
        if (perf_gloo_run(perf_ctx.coll->name, perf_ctx.sendbuf, perf_ctx.recvbuf,
                          c->counts.sendcount, c->counts.recvcount, c->dtype, c->op, c->root, err,
                          sizeof(err)) != 0) {
            fprintf(stderr, "%s: rank %d: %s\n", perf_ctx.host, perf_ctx.rank, err);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        return;
    }
    perf_ctx.coll->mpi_run(perf_ctx.sendbuf, perf_ctx.recvbuf, c, dt, op, MPI_COMM_WORLD);
}

/*
 * --rewrite 1|2: the input written again before each timed iteration (each -m group), as a
 * training step writes fresh gradients before it reduces them, for Chorus and MPI alike: the same
 * values, copied from perf_ctx.fresh (in both libraries' times). 1 writes it with plain vector
 * stores, as a compute kernel writes its output (plain_store.h); 2 with libc's memcpy, which
 * picks its stores by size (glibc on x86-64: `rep movsb` below a threshold, 1 MiB on the AMD VM,
 * streaming stores from another, 24 MiB there; plain vector stores between). The difference
 * matters where a library's peers read the input in place: its lines then sit in their caches
 * (the input written once, as in nccl-tests and without --rewrite, they are still there for the
 * next call), and the next write must take them back; plain stores do it line by line, `rep
 * movsb` and streaming stores at a fraction of the cost (perftests/README.md, "chorusMemAlloc
 * buffers").
 */
static void perf_fresh(const perf_case_t *c, const char *sendp)
{
    perf_ctx_t *ctx = &perf_ctx;
    ctx->fresh_nbytes = 0;
    if (!ctx->o.rewrite) {
        return;
    }
    size_t nbytes = c->counts.sendcount * perf_dtype_size(c->dtype);
    if (nbytes > ctx->fresh_cap) {
        free(ctx->fresh);
        ctx->fresh = malloc(nbytes);
        ctx->fresh_cap = ctx->fresh != NULL ? nbytes : 0;
        if (ctx->fresh == NULL) {
            perf_fail("malloc (--rewrite's copy of the input)", chorusSystemError, __FILE__,
                      __LINE__);
        }
    }
    memcpy(ctx->fresh, sendp, nbytes);
    ctx->fresh_nbytes = nbytes;
}

/* What --rewrite mode writes with, for the banner. */
static const char *perf_rewrite_how(int mode)
{
    return mode == 2 ? "libc's memcpy" : plain_store_how();
}

static inline void perf_rewrite(void *input)
{
    if (perf_ctx.fresh_nbytes == 0) {
        return;
    }
    if (perf_ctx.o.rewrite == 2) {
        memcpy(input, perf_ctx.fresh, perf_ctx.fresh_nbytes);
    } else {
        plain_store_copy(input, perf_ctx.fresh, perf_ctx.fresh_nbytes);
    }
}

/* --rewrite: the check's call reads what perf_rewrite writes over an input made wrong first (each
 * byte inverted), so a rewrite that wrote nothing, or other values, fails the check. */
static void perf_rewrite_checked(void *input)
{
    unsigned char *p = input;
    if (perf_ctx.fresh_nbytes == 0) {
        return;
    }
    for (size_t b = 0; b < perf_ctx.fresh_nbytes; b++) {
        p[b] = (unsigned char)~p[b];
    }
    perf_rewrite(input);
}

/* iters timed Chorus iterations (each -m calls, grouped) after a barrier and one untimed call:
 * this rank's seconds, with the time until the last call returned (before waiting for the
 * stream) in *cpu_p. The untimed call lines the ranks up as the collective itself does: ranks
 * leave a barrier apart (4 ranks on 2 cores under MPICH, whose barrier spins: a 4-rank 8 B
 * broadcast timed from the barrier took Chorus 0.49-30 us in four runs, from the untimed call
 * 0.17-0.20), and the first call after the other library's block pays for what it left (Open
 * MPI's large calls unmap fresh temporaries: 2 ranks, 64 MiB, such a Chorus call took 10-12 ms,
 * others 8.1-9.3). */
static double perf_time_chorus(const perf_case_t *c, const void *sendp, void *recvp, int iters,
                               double *cpu_p)
{
    const perf_opts_t *o = &perf_ctx.o;
    double t0;
    perf_barrier();
    perf_call(c, sendp, recvp);
    perf_complete();
    t0 = perf_now();
    for (int it = 0; it < iters; it++) {
        perf_rewrite((void *)sendp);
        if (o->agg_iters > 1) {
            PERF_CHECK(chorusGroupStart());
        }
        for (int a = 0; a < o->agg_iters; a++) {
            perf_call(c, sendp, recvp);
        }
        if (o->agg_iters > 1) {
            PERF_CHECK(chorusGroupEnd());
        }
        if (o->blocking) {
            perf_complete();
            perf_barrier();
        }
    }
    *cpu_p = perf_now() - t0;
    perf_complete();
    return perf_now() - t0;
}

/* The same for MPI (or Gloo): iters x -m calls after a barrier and one untimed call, a barrier
 * after each with -z 1. */
static double perf_time_mpi(const perf_case_t *c, MPI_Datatype dt, MPI_Op op, int iters)
{
    double t0;
    MPI_Barrier(MPI_COMM_WORLD);
    perf_mpi_call(c, dt, op);
    t0 = perf_now();
    for (int it = 0; it < iters * perf_ctx.o.agg_iters; it++) {
        if (it % perf_ctx.o.agg_iters == 0) { /* MPI_Bcast reads recvbuf (mpi_in_place) */
            perf_rewrite(perf_ctx.coll->mpi_in_place ? perf_ctx.recvbuf : perf_ctx.sendbuf);
        }
        perf_mpi_call(c, dt, op);
        if (perf_ctx.o.blocking) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    return perf_now() - t0;
}

/* res from this rank's total seconds over -n x -m calls, and the time until the last call
 * returned (-C 1): aggregated across ranks (-a), then nccl-tests' bandwidths, which are from
 * the wall time whatever -C says (nccl-tests' BenchTime). */
static void perf_result(const perf_case_t *c, double total, double cpu_total, perf_result_t *res)
{
    const perf_opts_t *o = &perf_ctx.o;
    double calls = (double)o->iters * o->agg_iters;
    res->sec = perf_aggregate_time(total / calls);
    res->cpu_sec = o->cputime ? perf_aggregate_time(cpu_total / calls) : res->sec;
    res->algbw = res->busbw = 0;
    if (res->sec > 0) {
        perf_ctx.coll->get_bw(c->counts.paramcount, perf_dtype_size(c->dtype), res->sec, c->nranks,
                              &res->algbw, &res->busbw);
    }
}

/*
 * One column group (time algbw busbw #wrong) of a row into *res. With mpi_p (--compare mpi, out
 * of place), MPI's call on the same buffers is timed in the same loop, interleaved so machine
 * noise hits both alike: the -n iterations are cut into up to PERF_COMPARE_BLOCKS blocks, and
 * block b runs Chorus then MPI when b is even, MPI then Chorus when odd (ABBA: a drift within the
 * row cancels too). Each block starts after a barrier and one untimed call of its library
 * (perf_time_chorus); the times summed are the blocks' own.
 * The check (-c) runs afterwards on Chorus' result only; MPI is no oracle here (Open MPI 4.1
 * saturates int8/uint8 sums on AVX-512, open-mpi/ompi#8045).
 */
static void perf_bench(const perf_case_t *c, int in_place, perf_result_t *res, perf_result_t *mpi_p)
{
    const perf_opts_t *o = &perf_ctx.o;
    char *sendp, *recvp;
    double total = 0, cpu = 0, mpi_total = 0;
    MPI_Datatype dt = MPI_DATATYPE_NULL;
    MPI_Op op = MPI_OP_NULL;
    int nblocks = mpi_p == NULL                    ? 1
                  : o->iters < PERF_COMPARE_BLOCKS ? o->iters
                                                   : PERF_COMPARE_BLOCKS;

    perf_buffers(c, in_place, &sendp, &recvp);
    perf_prepare(c, in_place, 0);
    perf_fresh(c, sendp);
    perf_call(c, sendp, recvp); /* sync call */
    perf_complete();
    if (mpi_p != NULL) {
        perf_mpi_types(c, &dt, &op);
        perf_mpi_call(c, dt, op); /* MPI's sync call */
    }
    for (int b = 0; b < nblocks; b++) {
        int iters = o->iters / nblocks + (b < o->iters % nblocks);
        double block_cpu;
        if (mpi_p != NULL && b % 2 == 1) {
            mpi_total += perf_time_mpi(c, dt, op, iters);
        }
        total += perf_time_chorus(c, sendp, recvp, iters, &block_cpu);
        cpu += block_cpu;
        if (mpi_p != NULL && b % 2 == 0) {
            mpi_total += perf_time_mpi(c, dt, op, iters);
        }
    }
    perf_result(c, total, cpu, res);
    if (mpi_p != NULL) { /* MPI's and Gloo's calls block: their cputime is their time */
        perf_result(c, mpi_total, mpi_total, mpi_p);
    }
    perf_barrier();

    res->wrong = o->check ? 0 : -1;
    for (int k = 0; k < o->check; k++) {
        size_t ncheck = perf_prepare(c, in_place, 1);
        long long local;
        perf_rewrite_checked(sendp);
        perf_call(c, sendp, recvp);
        perf_complete();
        perf_mirror(0);
        local = perf_compare(perf_ctx.coll, perf_ctx.host, c, in_place, recvp, perf_ctx.expected,
                             ncheck);
        if (local) {
            perf_ctx.local_errors++;
        }
        res->wrong = perf_sum_ll(local);
        if (res->wrong) {
            break;
        }
    }
    /* Gloo's result is checked too, once: a call built wrong here (counts, root, buffers) would
     * time something else. (MPI's is not: it is no oracle for 8-bit sums, ompi#8045.) */
    if (mpi_p != NULL && o->compare_gloo && o->check) {
        size_t ncheck = perf_prepare(c, in_place, 1);
        long long local;
        perf_mpi_call(c, dt, op);
        local = perf_compare(perf_ctx.coll, perf_ctx.host, c, in_place, recvp, perf_ctx.expected,
                             ncheck);
        if (local) {
            fprintf(stderr,
                    "%s: rank %d: Gloo's %s gave %lld wrong elements: its times are not "
                    "comparable\n",
                    perf_ctx.host, perf_ctx.rank, perf_ctx.coll->name, local);
            perf_ctx.local_errors++;
        }
        res->wrong += perf_sum_ll(local);
    }
}

static void perf_setup(perf_case_t *c, size_t nbytes, chorusDataType_t dtype, chorusRedOp_t op,
                       int root)
{
    memset(c, 0, sizeof(*c));
    c->dtype = dtype;
    c->op = op;
    c->root = root;
    c->rank = perf_ctx.rank;
    c->nranks = perf_ctx.nranks;
    perf_ctx.coll->get_counts(nbytes / perf_dtype_size(dtype), c->nranks, &c->counts);
}

/* -w calls of Chorus' collective (and, when compared, MPI's) at nbytes. */
static void perf_warmup(size_t nbytes, chorusDataType_t dtype, chorusRedOp_t op, int root)
{
    perf_case_t c;
    MPI_Datatype dt;
    MPI_Op mop;
    perf_setup(&c, nbytes, dtype, op, root);
    perf_prepare(&c, 0, 0);
    for (int it = 0; it < perf_ctx.o.warmup; it++) {
        perf_call(&c, perf_ctx.sendbuf, perf_ctx.recvbuf);
    }
    perf_complete();
    if (perf_ctx.o.compare_mpi && perf_mpi_types(&c, &dt, &mop)) {
        for (int it = 0; it < perf_ctx.o.warmup; it++) {
            perf_mpi_call(&c, dt, mop);
        }
    }
}

/* The size after nbytes (SIZE_MAX where it would overflow). From 0 a factor steps to 1: nccl-tests
 * stays at 0 for ever there. */
static size_t perf_next_size(size_t nbytes)
{
    const perf_opts_t *o = &perf_ctx.o;
    if (o->stepfactor > 1) {
        return nbytes == 0                         ? 1
               : nbytes > SIZE_MAX / o->stepfactor ? SIZE_MAX
                                                   : nbytes * o->stepfactor;
    }
    return nbytes > SIZE_MAX - o->stepbytes ? SIZE_MAX : nbytes + o->stepbytes;
}

/* The size sweep of one dtype x op x root (nccl-tests' TimeTest). */
static void perf_time_test(chorusDataType_t dtype, chorusRedOp_t op, int root)
{
    const perf_coll_t *coll = perf_ctx.coll;
    const perf_opts_t *o = &perf_ctx.o;
    perf_barrier();
    perf_warmup(o->maxbytes, dtype, op, root);
    perf_warmup(o->minbytes, dtype, op, root);
    for (size_t nbytes = o->minbytes; nbytes <= o->maxbytes; nbytes = perf_next_size(nbytes)) {
        perf_case_t c;
        perf_row_t row = {0};
        MPI_Datatype dt;
        MPI_Op mop;
        perf_setup(&c, nbytes, dtype, op, root);
        row.nbytes =
            (c.counts.sendcount > c.counts.recvcount ? c.counts.sendcount : c.counts.recvcount) *
            perf_dtype_size(dtype);
        row.count = c.counts.paramcount;
        row.dtype = dtype;
        row.op = op;
        row.root = coll->rooted ? root : -1;
        row.has_mpi = o->compare_mpi && perf_mpi_types(&c, &dt, &mop);
        row.mpi_vs_ip = row.has_mpi && coll->mpi_in_place && !coll->no_inplace;
        perf_bench(&c, 0, &row.oop, row.has_mpi && !row.mpi_vs_ip ? &row.mpi : NULL);
        if (!coll->no_inplace) {
            perf_bench(&c, 1, &row.ip, row.mpi_vs_ip ? &row.mpi : NULL);
        }
        if (coll->tuning_name != NULL) {
            perf_tuning(&c, &row);
        }
        perf_report_row(&perf_ctx.report, &row);
        if (nbytes == SIZE_MAX || perf_next_size(nbytes) <= nbytes) {
            break;
        }
    }
}

/* One of the run's buffers (what: "send", "receive", "expected"), touched, so that a machine
 * short of memory fails here, naming the buffer and its size, rather than in a timed loop; it
 * starts --offset bytes past a page boundary. */
static void *perf_alloc(size_t nbytes, int chorus_mem, const char *what)
{
    perf_ctx_t *ctx = &perf_ctx;
    void *p = NULL;
    char call[128];
    int err;
    size_t off = (size_t)ctx->o.offset;
    if (chorus_mem) {
        chorusResult_t res = chorusMemAlloc(&p, nbytes + off);
        if (res != chorusSuccess) {
            snprintf(call, sizeof(call), "chorusMemAlloc of the %s buffer (%zu bytes; -e %zu)",
                     what, nbytes, ctx->o.maxbytes);
            perf_fail(call, res, __FILE__, __LINE__);
        }
    } else if ((err = posix_memalign(&p, 4096, nbytes + off)) != 0) {
        fprintf(stderr,
                "%s:%d: rank %d: cannot allocate the %s buffer: posix_memalign of %zu bytes "
                "failed: %s (-e %zu; a lower -e needs less)\n",
                ctx->host, (int)getpid(), ctx->rank, what, nbytes, strerror(err), ctx->o.maxbytes);
        perf_abort();
    }
    return memset((char *)p + off, 0, nbytes);
}

/* A buffer of perf_alloc's. */
static void perf_free(void *p, int chorus_mem)
{
    if (p == NULL) {
        return;
    }
    p = (char *)p - perf_ctx.o.offset;
    if (chorus_mem) {
        PERF_CHECK(chorusMemFree(p));
    }
    free(chorus_mem ? NULL : p);
}

static void perf_stream_destroy(perf_ctx_t *ctx)
{
    if (ctx->stream != NULL && ctx->o.device_bufs) {
        perf_cuda_stream_destroy(ctx->stream);
    } else if (ctx->stream != NULL) {
        PERF_CHECK(chorusStreamDestroy(ctx->stream));
    }
    ctx->stream = NULL;
}

/* A run that stops before its buffers (a flag found wrong once the ranks are known, a -J file
 * that cannot be written): the stream, the communicator and MPI closed; returns rc. */
static int perf_close(perf_ctx_t *ctx, int rc)
{
    perf_stream_destroy(ctx);
    PERF_CHECK(chorusCommDestroy(ctx->comm));
    ctx->comm = NULL;
    if (ctx->init == PERF_INIT_MPI) {
        MPI_Finalize();
    }
    return rc;
}

int perf_main(int argc, char **argv, const perf_coll_t *coll)
{
    perf_ctx_t *ctx = &perf_ctx;
    long long errors;
    int parsed, nroots, root0, written;
    char gloo_dir[PERF_LINE_BYTES] = "";

    setlinebuf(stdout);
    memset(ctx, 0, sizeof(*ctx));
    ctx->coll = coll;
    gethostname(ctx->host, sizeof(ctx->host) - 1);
    ctx->init = perf_launch_mode();
    if (ctx->init == PERF_INIT_MPI) {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &ctx->rank);
    } else {
        /* Before the communicator exists: who prints flag errors. */
        ctx->rank = atoi(getenv("CHORUS_RANK") ? getenv("CHORUS_RANK")
                         : getenv("RANK")      ? getenv("RANK")
                                               : "0");
    }
    parsed = perf_parse(argc, argv, ctx->rank, &ctx->o);
    if (parsed != 0) {
        if (ctx->init == PERF_INIT_MPI) {
            MPI_Finalize();
        }
        return parsed > 0 ? 0 : 2;
    }

    if (ctx->o.device_bufs) {
        const char *why = perf_cuda_init(ctx->rank, ctx->device_name, sizeof(ctx->device_name));
        if (why != NULL) {
            fprintf(stderr, "rank %d: --device cuda: %s\n", ctx->rank, why);
            if (ctx->init == PERF_INIT_MPI) {
                MPI_Finalize();
            }
            return 2;
        }
    }
    if (ctx->o.timeout_s > 0 && getenv("CHORUS_TIMEOUT_MS") == NULL) {
        /* nccl-tests' -T: seconds before a stuck call is given up. The library reads its
         * variables when a communicator is made, so before that; the user's setting wins. */
        char ms[32];
        snprintf(ms, sizeof(ms), "%lld", (long long)ctx->o.timeout_s * 1000);
        setenv("CHORUS_TIMEOUT_MS", ms, 1);
        ctx->timeout_set = 1;
    }
    perf_comm_init(ctx);
    if (coll->rooted && ctx->o.root >= ctx->nranks) {
        PERF_PRINT("invalid value '%d' for option -r: %d ranks have roots 0 to %d (-1: each in "
                   "turn)\n",
                   ctx->o.root, ctx->nranks, ctx->nranks - 1);
        return perf_close(ctx, 2);
    }
    if (!ctx->o.stream_null && ctx->o.device_bufs) {
        if ((ctx->stream = perf_cuda_stream_create()) == NULL) {
            perf_fail("cudaStreamCreate", chorusUnhandledCudaError, __FILE__, __LINE__);
        }
    } else if (!ctx->o.stream_null) {
        PERF_CHECK(chorusStreamCreate(&ctx->stream));
    }
    ctx->report = (perf_report_t){.coll = coll,
                                  .o = &ctx->o,
                                  .rank = ctx->rank,
                                  .nranks = ctx->nranks,
                                  .init_name = ctx->init == PERF_INIT_MPI   ? "mpi"
                                               : ctx->init == PERF_INIT_ENV ? "env"
                                                                            : "single",
                                  .host = ctx->host};
    perf_print_banner(ctx);
    if (perf_fit_memory(ctx) != 0) {
        return perf_close(ctx, 2);
    }
    /* After the banner, which may turn --compare off: the file records what runs. Every rank
     * learns whether rank 0 could create it. */
    if ((ctx->o.compare_gloo && ctx->o.compare_mpi &&
         perf_gloo_start(ctx, gloo_dir, (int)sizeof(gloo_dir)) != 0) ||
        perf_sum_ll(perf_report_open(&ctx->report, argc, argv) != 0) != 0) {
        if (gloo_dir[0] != '\0') {
            perf_gloo_stop(ctx, gloo_dir);
        }
        return perf_close(ctx, 2);
    }

    ctx->bufbytes = (ctx->o.maxbytes < 64 ? 64 : ctx->o.maxbytes) + 64;
    ctx->sendbuf = perf_alloc(ctx->bufbytes, ctx->o.register_bufs, "send");
    ctx->recvbuf = perf_alloc(ctx->bufbytes, ctx->o.register_bufs, "receive");
    /* The expected values serve the checks (-c, and Gloo's result, checked with -c) only. */
    ctx->expected = ctx->o.check > 0 ? perf_alloc(ctx->bufbytes, 0, "expected") : NULL;
    if (ctx->o.device_bufs && ((ctx->dev_send = perf_cuda_alloc(ctx->bufbytes)) == NULL ||
                               (ctx->dev_recv = perf_cuda_alloc(ctx->bufbytes)) == NULL)) {
        perf_fail("cudaMalloc", chorusUnhandledCudaError, __FILE__, __LINE__);
    }
    perf_report_header(&ctx->report);

    nroots = coll->rooted && ctx->o.root == -1 ? ctx->nranks : 1;
    root0 = coll->rooted ? (ctx->o.root == -1 ? 0 : ctx->o.root) : -1;
    /* The memcpy line's row: float32 (else the first dtype), sum (else the first op), the first
     * root, not whichever sweep came last. */
    ctx->report.yard_dtype = (chorusDataType_t)ctx->o.types[0];
    for (int t = 0; t < ctx->o.ntypes; t++) {
        ctx->report.yard_dtype =
            ctx->o.types[t] == chorusFloat32 ? chorusFloat32 : ctx->report.yard_dtype;
    }
    ctx->report.yard_op = coll->reduces ? (chorusRedOp_t)ctx->o.ops[0] : chorusSum;
    for (int k = 0; coll->reduces && k < ctx->o.nops; k++) {
        ctx->report.yard_op = ctx->o.ops[k] == chorusSum ? chorusSum : ctx->report.yard_op;
    }
    ctx->report.yard_root = root0;
    for (int t = 0; t < ctx->o.ntypes; t++) {
        for (int k = 0; k < (coll->reduces ? ctx->o.nops : 1); k++) {
            for (int r = 0; r < nroots; r++) {
                perf_time_test((chorusDataType_t)ctx->o.types[t],
                               coll->reduces ? (chorusRedOp_t)ctx->o.ops[k] : chorusSum, root0 + r);
            }
        }
    }

    errors = perf_sum_ll(ctx->local_errors);
    if (ctx->o.compare_mpi && ctx->report.largest_nbytes > 0) {
        perf_barrier();
        if (ctx->rank == 0) {
            ctx->report.memcpy_gbps =
                perf_memcpy_gbps(ctx->recvbuf, ctx->sendbuf, ctx->report.largest_nbytes);
        }
        perf_quiet_barrier();
    }
    written = perf_report_finish(&ctx->report, errors);
    if (ctx->o.compare_gloo && ctx->o.compare_mpi) {
        perf_gloo_stop(ctx, gloo_dir);
    }

    perf_free(ctx->sendbuf, ctx->o.register_bufs);
    perf_free(ctx->recvbuf, ctx->o.register_bufs);
    free(ctx->fresh);
    perf_free(ctx->expected, 0);
    if (ctx->o.device_bufs) {
        perf_cuda_free(ctx->dev_send);
        perf_cuda_free(ctx->dev_recv);
    }
    perf_stream_destroy(ctx);
    PERF_CHECK(chorusCommDestroy(ctx->comm));
    ctx->comm = NULL;
    if (ctx->init == PERF_INIT_MPI) {
        MPI_Finalize();
    }
    return errors || written != 0 ? 1 : 0;
}
