/*
 * ctx.h: the driver's state and helpers, shared by its parts (common.c: launch, timing, the
 * sweep; memfit.c: -e fitted to memory; gloo_store.c: --compare gloo's rendezvous). Internal to
 * perftests/.
 */
#ifndef CHORUS_PERF_CTX_H
#define CHORUS_PERF_CTX_H

#include <stddef.h>

#include "common.h"
#include "flags.h"
#include "report.h"

#define PERF_LINE_BYTES 256

typedef enum { PERF_INIT_MPI, PERF_INIT_ENV, PERF_INIT_SINGLE } perf_init_t;

typedef struct perf_ctx {
    const perf_coll_t *coll;
    perf_opts_t o;
    perf_init_t init;
    int rank, nranks;
    chorusComm_t comm;
    chorusStream_t stream;
    char host[64];
    char *sendbuf, *recvbuf, *expected;
    size_t bufbytes;
    /* --device cuda: the device buffers the calls use; sendbuf/recvbuf are their host mirrors,
     * filled and checked on the host and copied outside the timed loops. */
    char *dev_send, *dev_recv;
    char device_name[96];
    long long local_errors; /* checks of this rank that found wrong elements */
    /* --rewrite 1|2: this column's input as prepared, copied over the buffer the call reads
     * before each timed iteration (perf_rewrite) */
    char *fresh;
    size_t fresh_nbytes, fresh_cap;
    int timeout_set; /* -T set CHORUS_TIMEOUT_MS (the user had not) */
    perf_report_t report; /* the table, the summary and the -J file (report.c) */
} perf_ctx_t;

extern perf_ctx_t perf_ctx;

/* Ends the run (the whole job under mpirun) after the cause was printed. */
void perf_abort(void);
/* Prints which call failed, with res and the library's text, and ends the run. */
void perf_fail(const char *call, chorusResult_t res, const char *file, int line);
/* v summed over the ranks, and the least of v over them (MPI under mpirun, Chorus otherwise). */
long long perf_sum_ll(long long v);
size_t perf_min_size(size_t v);
/* memfit.c: -e lowered to what memory holds (printed); 0, or -1 (printed) when -b does not fit. */
int perf_fit_memory(perf_ctx_t *ctx);
/* gloo_store.c: Gloo connected on every rank through a file store in dir (0, or -1 where a rank
 * could not: printed); then closed, and the store removed. */
int perf_gloo_start(perf_ctx_t *ctx, char *dir, int dirlen);
void perf_gloo_stop(perf_ctx_t *ctx, const char *dir);

#define PERF_CHECK(call)                                                                           \
    do {                                                                                           \
        chorusResult_t perf_res_ = (call);                                                         \
        if (perf_res_ != chorusSuccess) {                                                          \
            perf_fail(#call, perf_res_, __FILE__, __LINE__);                                       \
        }                                                                                          \
    } while (0)

#define PERF_PRINT(...)                                                                            \
    do {                                                                                           \
        if (perf_ctx.rank == 0) {                                                                  \
            printf(__VA_ARGS__);                                                                   \
        }                                                                                          \
    } while (0)

#endif /* CHORUS_PERF_CTX_H */
