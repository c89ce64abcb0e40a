/*
 * report.h: what a *_perf run prints (report.c): nccl-tests' table and summary on stdout, the
 * --compare mpi columns and summary, and the -J JSON file. The driver (common.c) measures a row
 * into a perf_row_t and hands it here; only rank 0 prints or writes anything.
 */
#ifndef CHORUS_PERF_REPORT_H
#define CHORUS_PERF_REPORT_H

#include <stdio.h>

#include "common.h"
#include "flags.h"

/* One column group of a row: seconds per call (aggregated over ranks as -a says) and bandwidths. */
typedef struct perf_result {
    double sec; /* wall time: the bandwidths and the ratio are from it */
    double cpu_sec; /* -C 1: until the last call returned (the time column then); else sec */
    double algbw, busbw; /* GB/s */
    long long wrong; /* wrong elements summed over ranks; -1: not checked (-c 0) */
} perf_result_t;

/* One row of the table: a size of one dtype x op x root. */
typedef struct perf_row {
    size_t nbytes; /* the size column: the larger of the send and receive buffers */
    size_t count; /* the count column: the call's count argument */
    chorusDataType_t dtype;
    chorusRedOp_t op;
    int root; /* -1 for collectives without a root */
    perf_result_t oop, ip; /* out of place, in place (ip unused when the collective has none) */
    int has_mpi; /* mpi holds MPI's call, timed interleaved with oop (or ip: mpi_vs_ip) */
    int mpi_vs_ip; /* MPI's call is in place by nature (perf_coll_t's mpi_in_place) */
    perf_result_t mpi;
    const char *algo; /* the tuner's choice, NULL when the collective has no tuning_name */
    double pred_us; /* the model's time of algo */
} perf_row_t;

/* What the report knows of the run, and what it accumulates for the summary. */
typedef struct perf_report {
    const perf_coll_t *coll;
    const perf_opts_t *o;
    int rank, nranks;
    const char *init_name; /* "mpi", "env" or "single" */
    const char *host;
    FILE *json; /* rank 0's -J file, NULL without -J */
    long rows;
    double bw_sum; /* Chorus busbw, out of place and in place, as nccl-tests' average */
    long bw_count;
    /* rows of more than 0 bytes with a ratio; of them, where MPI took less time. Rows of 0 bytes
     * (an empty call for both libraries: argument checks, at the timer's resolution) are left out
     * of the ratio's summary and counted in mpi_empty. */
    long mpi_rows, mpi_slower, mpi_empty;
    long mpi_bw_rows; /* rows with an MPI time, 0 bytes too (the busbw average, as nccl-tests') */
    double log_ratio_sum, mpi_bw_sum;
    double min_ratio, max_ratio;
    char min_row[64], max_row[64]; /* "8 B float sum" of the row with min_ratio / max_ratio */
    /* The yardstick row's out-of-place busbw (the 64 MiB row where the sweep has one: issue 6's
     * "busbw at 64 MiB against single-core memcpy"; else the largest row), and (with --compare
     * mpi) rank 0's single-core memcpy of that many bytes, measured after the sweep while the
     * other ranks wait asleep (0: not measured): the summary gives the one as a share of the
     * other. */
    chorusDataType_t yard_dtype; /* the sweep the yardstick row comes from (common.c): */
    chorusRedOp_t yard_op; /* float32, sum, the first root where the run has them */
    int yard_root;
    size_t largest_nbytes; /* the yardstick row's size */
    double largest_busbw;
    double memcpy_gbps;
} perf_report_t;
/* The size issue 6 compares with single-core memcpy. */
#define PERF_YARDSTICK_NBYTES ((size_t)64 << 20)

/* The variables a run records and prints because they change what is measured: CHORUS_* (not
 * CHORUS_PERF_*, the test driver's), MALLOC_* and GLIBC_TUNABLES (glibc's allocator:
 * MALLOC_MMAP_MAX_=0 serves large buffers from the heap instead of fresh mmaps, so freed memory is
 * reused), LD_PRELOAD, OMP_NUM_THREADS, UCX_* and Open MPI's transport and collective selection
 * (OMPI_MCA_btl/pml/mtl/coll/osc*). */
int perf_env_recorded(const char *name_value);

/* Rank 0: the banner's "# Environment:" line of the recorded variables that are set, if any. */
void perf_report_print_env(const perf_report_t *r);
/* Rank 0: create the -J file and write the run's description (program, versions, flags,
 * environment). Returns 0, or -1 with the reason on stderr when the file cannot be written. */
int perf_report_open(perf_report_t *r, int argc, char **argv);
/* nccl-tests' table header, with the compare and tuning columns the run prints. */
void perf_report_header(const perf_report_t *r);
/* One row: the table line, the JSON record, and the summary's sums. */
void perf_report_row(perf_report_t *r, const perf_row_t *row);
/* The summary lines ("# Out of bounds values", "# Avg bus bandwidth", and with --compare mpi the
 * MPI ones), the JSON summary; closes the file. errors: ranks' checks that found wrong elements.
 * Returns 0, or -1 when the JSON file could not be written in full (reason on stderr). */
int perf_report_finish(perf_report_t *r, long long errors);

#endif /* CHORUS_PERF_REPORT_H */
