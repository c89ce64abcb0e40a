/*
 * report.c: the output of a *_perf run (see report.h).
 *
 * The table is nccl-tests': size count type redop root | time algbw busbw #wrong (out of place)
 * | the same in place, then this driver's extra columns, each a single-word header so a script
 * can find it by name: with --compare mpi, MPI's out-of-place time and busbw and the ratio
 * mpi / chorus (> 1: Chorus faster); with a tuning_name, the tuner's algo and the model's pred.
 * The summary keeps nccl-tests' two lines and, with --compare mpi, adds the MPI busbw average and
 * the geometric mean, minimum and maximum of the ratio with the rows where Chorus was slower (rows
 * of 0 bytes, an empty call for both, left out). With -C 1 the time columns are cputime, as
 * nccl-tests'; bandwidths and ratios are from wall time (nccl-tests' bandwidths are too).
 *
 * The -J file is one JSON object per run, written as rows come so a long sweep leaves its rows
 * behind: run description first, then "rows", then "summary". Numbers that are not finite are
 * written as null, so the file always parses. Timings are reported, never judged.
 */
#define _GNU_SOURCE
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "data.h"
#include "peer_gloo.h"

extern char **environ;

/* JSON ----------------------------------------------------------------------------------------- */

/* Bytes of the well-formed UTF-8 sequence of 2 to 4 bytes at p, or 0 (RFC 3629's table: no
 * overlong form, no surrogate, nothing above U+10FFFF). Stops at a NUL, which is never a
 * continuation byte. */
static int utf8_len(const unsigned char *p)
{
    int n = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
            : p[0] >= 0xe0 && p[0] <= 0xef ? 3
            : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                           : 0;
    unsigned char lo = p[0] == 0xe0 ? 0xa0 : p[0] == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = p[0] == 0xed ? 0x9f : p[0] == 0xf4 ? 0x8f : 0xbf;
    if (n == 0 || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (int k = 2; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return n;
}

/* s as a JSON string: quotes, backslashes and control bytes escaped; UTF-8 (a path, an argument
 * like é) passes through as it is; a byte that is not part of well-formed UTF-8 is escaped as the
 * code point of the same value (read as Latin-1), so any input gives valid JSON. NULL: null. */
static void json_str(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        int n = *p >= 0x80 ? utf8_len(p) : 0;
        if (n > 0) {
            fwrite(p, 1, (size_t)n, f);
            p += n - 1;
        } else if (*p == '"' || *p == '\\') {
            fputc('\\', f);
            fputc(*p, f);
        } else if (*p < 0x20 || *p >= 0x7f) {
            fprintf(f, "\\u%04x", *p);
        } else {
            fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v)
{
    if (isfinite(v)) {
        fprintf(f, "%.9g", v);
    } else {
        fputs("null", f);
    }
}

/* A column group's numbers; time_us is the table's time column (cputime: -C 1, with the wall
 * time the bandwidths are from in wall_us). */
static void json_result(FILE *f, const perf_result_t *res, int with_wrong, int cputime)
{
    fputs("{\"time_us\": ", f);
    json_num(f, (cputime ? res->cpu_sec : res->sec) * 1e6);
    if (cputime) {
        fputs(", \"wall_us\": ", f);
        json_num(f, res->sec * 1e6);
    }
    fputs(", \"algbw\": ", f);
    json_num(f, res->algbw);
    fputs(", \"busbw\": ", f);
    json_num(f, res->busbw);
    if (with_wrong && res->wrong >= 0) {
        fprintf(f, ", \"wrong\": %lld", res->wrong);
    } else if (with_wrong) {
        fputs(", \"wrong\": null", f);
    }
}

static void json_time_now(FILE *f)
{
    char buf[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", localtime_r(&now, &tm));
    json_str(f, buf);
}

/* Environment ---------------------------------------------------------------------------------- */

int perf_env_recorded(const char *name_value)
{
    static const char *const prefixes[] = {"CHORUS_",       "MALLOC_",          "GLIBC_TUNABLES=",
                                           "LD_PRELOAD=",   "OMP_NUM_THREADS=", "UCX_",
                                           "OMPI_MCA_btl",  "OMPI_MCA_pml",     "OMPI_MCA_mtl",
                                           "OMPI_MCA_coll", "OMPI_MCA_osc"};
    if (strncmp(name_value, "CHORUS_PERF_", 12) == 0) {
        return 0; /* the test driver's (tests/perftests_run.sh), not the library's */
    }
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
        if (strncmp(name_value, prefixes[k], strlen(prefixes[k])) == 0) {
            return strchr(name_value, '=') != NULL;
        }
    }
    return 0;
}

static void json_environment(FILE *f)
{
    const char *mmap_max = getenv("MALLOC_MMAP_MAX_");
    int first = 1;
    fputs("  \"environment\": {", f);
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char name[256];
        if (!perf_env_recorded(*e) || (size_t)(eq - *e) >= sizeof(name)) {
            continue;
        }
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        fputs(first ? "" : ", ", f);
        json_str(f, name);
        fputs(": ", f);
        json_str(f, eq + 1);
        first = 0;
    }
    fputs("},\n  \"malloc_mmap_max\": ", f);
    json_str(f, mmap_max);
    fputs(",\n", f);
}

void perf_report_print_env(const perf_report_t *r)
{
    int any = 0;
    for (char **e = environ; r->rank == 0 && e != NULL && *e != NULL; e++) {
        if (perf_env_recorded(*e)) {
            printf("%s %s", any ? "" : "# Environment:", *e);
            any = 1;
        }
    }
    if (any) {
        printf("\n");
    }
}

/* The run's description ------------------------------------------------------------------------ */

static void json_names(FILE *f, const int *values, int n, const char *(*name)(int value))
{
    fputc('[', f);
    for (int k = 0; k < n; k++) {
        fputs(k ? ", " : "", f);
        json_str(f, name(values[k]));
    }
    fputc(']', f);
}

static const char *perf_type_name_int(int v)
{
    return perf_type_name((chorusDataType_t)v);
}

static const char *perf_op_name_int(int v)
{
    return perf_op_name((chorusRedOp_t)v);
}

static void json_flags(FILE *f, const perf_report_t *r)
{
    const perf_opts_t *o = r->o;
    fprintf(f,
            "  \"flags\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"stepbytes\": %zu, "
            "\"stepfactor\": %zu, \"iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, "
            "\"check\": %d, \"blocking\": %d, \"stream_null\": %d, \"average\": %d, "
            "\"report_cputime\": %d, \"root\": %d, \"local_register\": %d, \"rewrite\": %d, "
            "\"offset\": %d, \"compare\": %s, \"datatypes\": ",
            o->minbytes, o->maxbytes, o->stepbytes, o->stepfactor, o->iters, o->warmup,
            o->agg_iters, o->check, o->blocking, o->stream_null, o->average, o->cputime, o->root,
            o->register_bufs, o->rewrite, o->offset,
            !o->compare_mpi   ? "null"
            : o->compare_gloo ? "\"gloo\""
                              : "\"mpi\"");
    json_names(f, o->types, o->ntypes, perf_type_name_int);
    fputs(", \"ops\": ", f);
    json_names(f, o->ops, r->coll->reduces ? o->nops : 0, perf_op_name_int);
    fputs("},\n", f);
}

int perf_report_open(perf_report_t *r, int argc, char **argv)
{
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    char program[64];
    int version = 0, len = 0;
    FILE *f;

    r->min_ratio = INFINITY;
    r->max_ratio = -INFINITY;
    if (r->rank != 0 || r->o->json_path == NULL) {
        return 0;
    }
    f = fopen(r->o->json_path, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: rank 0: cannot write -J %s: %m\n", r->host, r->o->json_path);
        return -1;
    }
    chorusGetVersion(&version);
    MPI_Get_library_version(mpi_version, &len);
    mpi_version[strcspn(mpi_version, "\n")] = '\0';
    snprintf(program, sizeof(program), "%s_perf", r->coll->name);

    fputs("{\n  \"program\": ", f);
    json_str(f, program);
    fprintf(f, ",\n  \"chorus_version\": \"%d.%d.%d\",\n  \"mpi_library\": ", version / 10000,
            version / 100 % 100, version % 100);
    json_str(f, mpi_version);
    if (r->o->compare_mpi && r->o->compare_gloo) { /* the peer each row's "mpi" object times */
        fputs(",\n  \"peer_library\": ", f);
        json_str(f, perf_gloo_version());
    }
    fprintf(f, ",\n  \"init\": \"%s\",\n  \"nranks\": %d,\n  \"host\": ", r->init_name, r->nranks);
    json_str(f, r->host);
    fprintf(f, ",\n  \"cores\": %ld,\n  \"start_time\": ", sysconf(_SC_NPROCESSORS_ONLN));
    json_time_now(f);
    fputs(",\n  \"args\": [", f);
    for (int k = 0; k < argc; k++) {
        fputs(k ? ", " : "", f);
        json_str(f, argv[k]);
    }
    fputs("],\n", f);
    json_flags(f, r);
    json_environment(f);
    fputs("  \"rows\": [", f);
    r->json = f;
    return 0;
}

/* The table ------------------------------------------------------------------------------------ */

#define REPORT_PRINT(r, ...)                                                                       \
    do {                                                                                           \
        if ((r)->rank == 0) {                                                                      \
            printf(__VA_ARGS__);                                                                   \
        }                                                                                          \
    } while (0)

/* nccl-tests' time format: width wide (7 for a time), fewer decimals as it grows. Ratios too (6
 * wide: Gloo's small calls take thousands of times Chorus', and 5766.85 overflowed %6.2f). */
static void perf_format_num(char *buf, size_t len, double v, int width)
{
    snprintf(buf, len, "%*.*f", width, v >= 10000.0 ? 0 : v >= 100.0 ? 1 : 2, v);
}

static void perf_format_time(char *buf, size_t len, double usec)
{
    perf_format_num(buf, len, usec, 7);
}

/* The widths of the peer's time and busbw columns: their headers' ("gloo(us)" is 8 wide). */
static int perf_peer_time_width(const perf_report_t *r)
{
    return r->o->compare_gloo ? 8 : 7;
}

static int perf_peer_bw_width(const perf_report_t *r)
{
    return r->o->compare_gloo ? 9 : 8;
}

void perf_report_header(const perf_report_t *r)
{
    const char *t = r->o->cputime ? "cputime" : "time";
    int compare = r->o->compare_mpi, tuning = r->coll->tuning_name != NULL;
    int tw = perf_peer_time_width(r), bw = perf_peer_bw_width(r);
    REPORT_PRINT(r,
                 "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                 "in-place          %s\n",
                 "", "", "", "", "",
                 !compare ? ""
                 : r->o->compare_gloo
                     ? (r->coll->mpi_in_place ? " gloo vs in-place" : " gloo out-of-place")
                 : r->coll->mpi_in_place ? "  mpi vs in-place"
                                         : "  mpi out-of-place");
    REPORT_PRINT(r, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size",
                 "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw",
                 "busbw", "#wrong");
    if (compare) {
        REPORT_PRINT(r, "  %*s  %*s  %6s", tw, r->o->compare_gloo ? "gloo(us)" : "mpi(us)", bw,
                     r->o->compare_gloo ? "gloobusbw" : "mpibusbw", "ratio");
    }
    if (tuning) {
        REPORT_PRINT(r, "  %7s  %8s", "algo", "pred");
    }
    REPORT_PRINT(r, "\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
                 "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                 "(GB/s)", "");
    if (compare) {
        REPORT_PRINT(r, "  %*s  %*s  %6s", tw, "(us)", bw, "(GB/s)", "");
    }
    if (tuning) {
        REPORT_PRINT(r, "  %7s  %8s", "", "(us)");
    }
    REPORT_PRINT(r, "\n");
}

static void perf_print_result(const perf_report_t *r, const perf_result_t *res)
{
    char tstr[32], wstr[32] = "N/A";
    perf_format_time(tstr, sizeof(tstr), (r->o->cputime ? res->cpu_sec : res->sec) * 1e6);
    if (res->wrong >= 0) {
        snprintf(wstr, sizeof(wstr), "%lld", res->wrong);
    }
    REPORT_PRINT(r, "  %7s  %6.2f  %6.2f  %5s", tstr, res->algbw, res->busbw, wstr);
}

/* mpi / chorus wall time (out of place, or in place where MPI's call is; with -C 1 too: MPI's
 * calls block, and a cputime of Chorus' would compare a time to return with a time to finish), 0
 * when either is not positive. */
static double perf_row_ratio(const perf_row_t *row)
{
    double chorus = row->mpi_vs_ip ? row->ip.sec : row->oop.sec;
    return row->has_mpi && chorus > 0 && row->mpi.sec > 0 ? row->mpi.sec / chorus : 0;
}

static void perf_json_row(perf_report_t *r, const perf_row_t *row, double ratio)
{
    FILE *f = r->json;
    fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": ", r->rows ? "," : "",
            row->nbytes, row->count);
    json_str(f, perf_type_name(row->dtype));
    fputs(", \"redop\": ", f);
    json_str(f, r->coll->reduces ? perf_op_name(row->op) : "none");
    fprintf(f, ", \"root\": %d,\n     \"out_of_place\": ", row->root);
    json_result(f, &row->oop, 1, r->o->cputime);
    fputs("},\n     \"in_place\": ", f);
    if (r->coll->no_inplace) {
        fputs("null", f);
    } else {
        json_result(f, &row->ip, 1, r->o->cputime);
        fputc('}', f);
    }
    fputs(",\n     \"mpi\": ", f);
    if (row->has_mpi) {
        json_result(f, &row->mpi, 0, 0);
        fprintf(f, ", \"vs\": \"%s\", \"ratio\": ", row->mpi_vs_ip ? "in_place" : "out_of_place");
        json_num(f, ratio > 0 ? ratio : NAN);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(", \"algo\": ", f);
    json_str(f, row->algo);
    fputs(", \"pred_us\": ", f);
    json_num(f, row->algo != NULL ? row->pred_us : NAN);
    fputc('}', f);
}

void perf_report_row(perf_report_t *r, const perf_row_t *row)
{
    double ratio = perf_row_ratio(row);

    REPORT_PRINT(r, "%12zu  %12zu  %8s  %6s  %6i", row->nbytes, row->count,
                 perf_type_name(row->dtype), r->coll->reduces ? perf_op_name(row->op) : "none",
                 row->root);
    perf_print_result(r, &row->oop);
    r->bw_sum += row->oop.busbw;
    r->bw_count++;
    if (r->coll->no_inplace) {
        REPORT_PRINT(r, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    } else {
        perf_print_result(r, &row->ip);
        r->bw_sum += row->ip.busbw;
        r->bw_count++;
    }
    if (r->o->compare_mpi && row->has_mpi) {
        char tstr[32], rstr[32];
        perf_format_time(tstr, sizeof(tstr), row->mpi.sec * 1e6);
        perf_format_num(rstr, sizeof(rstr), ratio, 6);
        REPORT_PRINT(r, "  %*s  %*.2f  %6s", perf_peer_time_width(r), tstr, perf_peer_bw_width(r),
                     row->mpi.busbw, rstr);
    } else if (r->o->compare_mpi) {
        REPORT_PRINT(r, "  %*s  %*s  %6s", perf_peer_time_width(r), "N/A", perf_peer_bw_width(r),
                     "N/A", "N/A");
    }
    if (row->algo != NULL) {
        char tstr[32];
        perf_format_time(tstr, sizeof(tstr), row->pred_us);
        REPORT_PRINT(r, "  %7s  %8s", row->algo, tstr);
    }
    REPORT_PRINT(r, "\n");

    /* The yardstick: the 64 MiB (else the largest) row of one sweep, common.c's pick; every sweep
     * has the same sizes, and the last one's (bfloat16 avg under -d all -o all) stood before. */
    if (row->dtype == r->yard_dtype && row->op == r->yard_op && row->root == r->yard_root &&
        r->largest_nbytes != PERF_YARDSTICK_NBYTES &&
        (row->nbytes >= r->largest_nbytes || row->nbytes == PERF_YARDSTICK_NBYTES)) {
        r->largest_nbytes = row->nbytes;
        r->largest_busbw = row->oop.busbw;
    }
    if (ratio > 0) {
        r->mpi_bw_rows++;
        r->mpi_bw_sum += row->mpi.busbw;
    }
    if (ratio > 0 && row->nbytes == 0) {
        r->mpi_empty++;
    } else if (ratio > 0) {
        char desc[64];
        snprintf(desc, sizeof(desc), "%zu B %s", row->nbytes, perf_type_name(row->dtype));
        if (r->coll->reduces) {
            snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " %s",
                     perf_op_name(row->op));
        }
        if (r->coll->rooted) {
            snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " root %d", row->root);
        }
        r->mpi_rows++;
        r->mpi_slower += ratio < 1.0;
        r->log_ratio_sum += log(ratio);
        if (ratio < r->min_ratio) {
            r->min_ratio = ratio;
            snprintf(r->min_row, sizeof(r->min_row), "%s", desc);
        }
        if (ratio > r->max_ratio) {
            r->max_ratio = ratio;
            snprintf(r->max_row, sizeof(r->max_row), "%s", desc);
        }
    }
    if (r->json != NULL) {
        perf_json_row(r, row, ratio);
    }
    r->rows++;
}

/* The summary ---------------------------------------------------------------------------------- */

int perf_report_finish(perf_report_t *r, long long errors)
{
    double avg_bw = r->bw_count ? r->bw_sum / (double)r->bw_count : 0.0;
    double mpi_bw = r->mpi_bw_rows ? r->mpi_bw_sum / (double)r->mpi_bw_rows : 0.0;
    double geomean = r->mpi_rows ? exp(r->log_ratio_sum / (double)r->mpi_rows) : 0.0;
    FILE *f = r->json;

    REPORT_PRINT(r, "# Out of bounds values : %lld %s\n", errors, errors ? "FAILED" : "OK");
    REPORT_PRINT(r, "# Avg bus bandwidth    : %g \n", avg_bw);
    if (r->o->compare_mpi && r->mpi_bw_rows > 0) {
        const char *peer = r->o->compare_gloo ? "Gloo" : "MPI";
        char empty[128] = "";
        if (r->mpi_empty > 0) {
            snprintf(empty, sizeof(empty),
                     "; %ld row%s of 0 bytes (an empty call for both) left out", r->mpi_empty,
                     r->mpi_empty > 1 ? "s" : "");
        }
        REPORT_PRINT(r, "# Avg %s bus bandwidth: %g \n", peer, mpi_bw);
        if (r->mpi_rows > 0) {
            REPORT_PRINT(r,
                         "# %s/Chorus time ratio: geomean %.3f, min %.3f (%s), max %.3f (%s); "
                         "Chorus slower in %ld of %ld rows%s\n",
                         peer, geomean, r->min_ratio, r->min_row, r->max_ratio, r->max_row,
                         r->mpi_slower, r->mpi_rows, empty);
        } else {
            REPORT_PRINT(r, "# %s/Chorus time ratio: no row of more than 0 bytes has a %s time%s\n",
                         peer, peer, empty);
        }
    } else if (r->o->compare_gloo) {
        REPORT_PRINT(r, "# Gloo/Chorus time ratio: no row has a Gloo time (Gloo lacks half, "
                        "bfloat16, uint32, avg and calls of no element)\n");
    } else if (r->o->compare_mpi) {
        REPORT_PRINT(r, "# MPI/Chorus time ratio: no row has an MPI time (half and bfloat16 have "
                        "no MPI datatype)\n");
    }
    if (r->memcpy_gbps > 0) {
        REPORT_PRINT(r,
                     "# Single-core memcpy  : %.2f GB/s at %zu bytes (rank 0); busbw there %.2f "
                     "GB/s, %.0f%% of it\n",
                     r->memcpy_gbps, r->largest_nbytes, r->largest_busbw,
                     100.0 * r->largest_busbw / r->memcpy_gbps);
    }
    REPORT_PRINT(r, "#\n");
    if (f == NULL) {
        return 0;
    }
    fprintf(f, "\n  ],\n  \"summary\": {\"rows\": %ld, \"out_of_bounds\": %lld, \"avg_busbw\": ",
            r->rows, errors);
    json_num(f, avg_bw);
    fputs(", \"mpi\": ", f);
    if (r->o->compare_mpi && r->mpi_rows > 0) {
        fprintf(f, "{\"rows\": %ld, \"slower_rows\": %ld, \"empty_rows\": %ld, \"avg_busbw\": ",
                r->mpi_rows, r->mpi_slower, r->mpi_empty);
        json_num(f, mpi_bw);
        fputs(", \"geomean_ratio\": ", f);
        json_num(f, geomean);
        fputs(", \"min_ratio\": ", f);
        json_num(f, r->min_ratio);
        fputs(", \"min_row\": ", f);
        json_str(f, r->min_row);
        fputs(", \"max_ratio\": ", f);
        json_num(f, r->max_ratio);
        fputs(", \"max_row\": ", f);
        json_str(f, r->max_row);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(", \"memcpy\": ", f);
    if (r->memcpy_gbps > 0) {
        fprintf(f, "{\"nbytes\": %zu, \"gbps\": ", r->largest_nbytes);
        json_num(f, r->memcpy_gbps);
        fputs(", \"busbw\": ", f);
        json_num(f, r->largest_busbw);
        fputs(", \"busbw_fraction\": ", f);
        json_num(f, r->largest_busbw / r->memcpy_gbps);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs("},\n  \"end_time\": ", f);
    json_time_now(f);
    fputs("\n}\n", f);
    int failed = ferror(f);
    r->json = NULL;
    failed |= fclose(f);
    if (failed) {
        fprintf(stderr, "%s: rank 0: writing -J %s failed: %m\n", r->host, r->o->json_path);
        return -1;
    }
    return 0;
}
