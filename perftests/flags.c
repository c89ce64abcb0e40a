/*
 * flags.c: nccl-tests' command line for the *_perf benchmarks (see flags.h).
 *
 * Short and long names as nccl-tests' (plus --compare and --json), byte sizes with
 * K/M/G suffixes (whole bytes that fit a size_t), every integer range-checked, dtype and op names
 * looked up in data.c. -T is nccl-tests' timeout in seconds (common.c turns it into
 * CHORUS_TIMEOUT_MS). Flags nccl-tests has but a host-stream, one-rank-per-process driver cannot
 * honour (-t, -g, -p, -G, -F) are accepted and ignored. A refused flag is named as typed (-b, or
 * --minbytes) with the reason. Only rank 0 prints, so a bad flag is reported once.
 */
#define _GNU_SOURCE
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

/* printf on rank 0 only. */
#define PERF_PRINT(rank, ...)                                                                      \
    do {                                                                                           \
        if ((rank) == 0) {                                                                         \
            printf(__VA_ARGS__);                                                                   \
        }                                                                                          \
    } while (0)

/* A byte size: a number (decimal, exponent or hex, as strtod reads it) with an optional K, M or G
 * (x1024 each) and an optional B. NULL and *out written, or why s is not one. The value must be
 * a whole number of bytes that a size_t holds: strtod gives inf, nan and 1e30 too, and a cast of
 * those is undefined (1e30 became 0). */
static const char *perf_parse_bytes(const char *s, size_t *out)
{
    static const char units[] = "KMG";
    const char *unit, *p = s;
    char *end;
    double v;
    while (isspace((unsigned char)*p)) {
        p++;
    }
    if (*p == '-') {
        return "a size cannot be negative";
    }
    errno = 0;
    v = strtod(p, &end);
    if (end == p) {
        return "not a number";
    }
    if (isnan(v)) {
        return "not a number (nan)";
    }
    if (isinf(v) && errno != ERANGE) {
        return "not a finite size";
    }
    unit = *end != '\0' ? strchr(units, toupper((unsigned char)*end)) : NULL;
    for (const char *u = units; unit != NULL && u <= unit; u++) {
        v *= 1024.0;
    }
    end += unit != NULL;
    end += *end == 'B' || *end == 'b';
    if (*end != '\0') {
        return "not a size (a number, then K, M or G for KiB, MiB, GiB)";
    }
    if (v >= (double)SIZE_MAX + 1.0) {
        return "too large for a size (2^64 - 1 bytes at most)";
    }
    if (v != floor(v) || (v == 0 && errno == ERANGE)) {
        return "not a whole number of bytes";
    }
    *out = (size_t)v;
    return NULL;
}

static int perf_parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 0);
    if (end == s || *end != '\0' || v < lo || v > hi) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* "all" (every value below nvalues) or one name lookup knows, into list and *count_p. */
static int perf_parse_names(const char *s, int (*lookup)(const char *name), int nvalues, int *list,
                            int *count_p)
{
    int value;
    if (strcmp(s, "all") == 0) {
        for (int k = 0; k < nvalues; k++) {
            list[k] = k;
        }
        *count_p = nvalues;
        return 0;
    }
    value = lookup(s);
    if (value >= 0) {
        list[0] = value;
        *count_p = 1;
        return 0;
    }
    return -1;
}

static void perf_usage(const char *prog, int rank)
{
    PERF_PRINT(
        rank,
        "USAGE: %s [-b minbytes] [-e maxbytes] (whole bytes; K/M/G: KiB/MiB/GiB)\n"
        "\t[-i stepbytes (K/M/G) | -f stepfactor (an integer; 0 or 1: step by -i)]\n"
        "\t[-n iters] [-w warmup_iters] [-m calls per group] [-c checks, 0: none]\n"
        "\t[-d int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|all]\n"
        "\t[-o sum|prod|max|min|avg|all] [-r root, -1: all (collectives with a root)]\n"
        "\t[-z 1: barrier after each call] [-y 1: NULL stream (default), 0: host stream]\n"
        "\t[-R 1: chorusMemAlloc buffers] [-a 0|1|2|3: time of rank 0|avg|min|max]\n"
        "\t[-C 1: report cputime (time columns; bandwidths and ratio from wall time)]\n"
        "\t[-T,--timeout seconds: a wait of a call that takes longer fails it (sets "
        "CHORUS_TIMEOUT_MS unless set); 0: the library's default]\n"
        "\t[-M,--compare mpi|gloo: time MPI's (or Gloo's) collective too, interleaved with "
        "Chorus']\n"
        "\t[-D,--device cuda|host: cudaMalloc'd buffers (CUDA builds), or host (default)]\n"
        "\t[-J,--output_file FILE: write the results as JSON too] [-t/-g/-p/-G/-F: ignored]\n"
        "\t[--rewrite 1|2: write each timed iteration's input again first, as a training step "
        "does (Chorus and MPI alike): 1 with plain vector stores, 2 with memcpy]\n"
        "\t[--offset bytes (0-4095): each host buffer that many bytes past a page boundary "
        "(default 0; glibc's malloc puts buffers of 128 KiB and more 16 bytes past one)]\n"
        "Long names as nccl-tests'. Launch by mpirun, by CHORUS_RANK/CHORUS_NRANKS/"
        "CHORUS_ROOT (or torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), or alone.\n",
        prog);
}

/* nccl-tests' long names, and --compare, --device, --json (an alias of --output_file),
 * --rewrite and --offset (long only: no letter of nccl-tests' taken) */
/* clang-format off */
static const struct option perf_longopts[] = {
    {"nthreads", 1, 0, 't'}, {"ngpus", 1, 0, 'g'}, {"minbytes", 1, 0, 'b'},
    {"maxbytes", 1, 0, 'e'}, {"stepbytes", 1, 0, 'i'}, {"stepfactor", 1, 0, 'f'},
    {"iters", 1, 0, 'n'}, {"agg_iters", 1, 0, 'm'}, {"warmup_iters", 1, 0, 'w'},
    {"parallel_init", 1, 0, 'p'}, {"check", 1, 0, 'c'}, {"op", 1, 0, 'o'},
    {"datatype", 1, 0, 'd'}, {"root", 1, 0, 'r'}, {"blocking", 1, 0, 'z'},
    {"stream_null", 1, 0, 'y'}, {"timeout", 1, 0, 'T'}, {"cudagraph", 1, 0, 'G'},
    {"report_cputime", 1, 0, 'C'}, {"average", 1, 0, 'a'}, {"output_file", 1, 0, 'J'},
    {"json", 1, 0, 'J'}, {"local_register", 1, 0, 'R'}, {"compare", 1, 0, 'M'},
    {"device", 1, 0, 'D'}, {"rewrite", 1, 0, 'W'}, {"offset", 1, 0, 'O'},
    {"help", 0, 0, 'h'},
    {NULL, 0, NULL, 0},
};
/* clang-format on */

/* An integer flag: its letter, where it goes, its smallest and largest value. */
typedef struct perf_int_flag {
    int letter;
    int *field;
    long lo, hi;
} perf_int_flag_t;

/* The option getopt_long just returned, as typed, into buf: "-b" for a letter (also inside a
 * group like -qn), "--iters" for a long name or its abbreviation (without its =value). long_opt:
 * it came as a long option. */
static const char *perf_opt_name(char *buf, size_t len, int letter, int long_opt, char **argv)
{
    if (long_opt) {
        /* --name=value, or --name then its value as the next argument */
        const char *tok = optarg != NULL && optind >= 2 && optarg == argv[optind - 1]
                              ? argv[optind - 2]
                              : argv[optind - 1];
        snprintf(buf, len, "%.*s", (int)strcspn(tok, "="), tok);
    } else {
        snprintf(buf, len, "-%c", letter);
    }
    return buf;
}

/* Long names that start with the typed --prefix (without its =value): 2 or more is ambiguous. */
static int perf_long_matches(const char *typed)
{
    size_t n = strcspn(typed + 2, "=");
    int matches = 0;
    for (const struct option *opt = perf_longopts; opt->name != NULL; opt++) {
        matches += strncmp(opt->name, typed + 2, n) == 0;
    }
    return matches;
}

int perf_parse(int argc, char **argv, int rank, perf_opts_t *o)
{
    int ignored = 0;
    /* -t/-g: one rank per process, so only 1; -p, -G: accepted and ignored. -f: nccl-tests'
     * step factor is an integer (strtol); 0 or 1, its default, step by -i bytes instead. */
    int stepfactor = 1;
    const perf_int_flag_t ints[] = {
        {'n', &o->iters, 1, 1L << 30},  {'m', &o->agg_iters, 1, 1L << 20},
        {'w', &o->warmup, 0, 1L << 30}, {'c', &o->check, 0, 1L << 20},
        {'r', &o->root, -1, 1L << 30},  {'z', &o->blocking, 0, 1},
        {'y', &o->stream_null, 0, 1},   {'C', &o->cputime, 0, 1},
        {'a', &o->average, 0, 3},       {'R', &o->register_bufs, 0, 1},
        {'t', &ignored, 1, 1},          {'g', &ignored, 1, 1},
        {'p', &ignored, 0, 1L << 30},   {'T', &o->timeout_s, 0, 1L << 30},
        {'G', &ignored, 0, 1L << 30},   {'W', &o->rewrite, 0, 2},
        {'O', &o->offset, 0, 4095},     {'f', &stepfactor, 0, 1L << 30}};

    /* nccl-tests' defaults, except the NULL stream (blocking host calls) */
    *o = (perf_opts_t){.minbytes = 32u << 20,
                       .maxbytes = 32u << 20,
                       .stepbytes = 1u << 20,
                       .stepfactor = 1,
                       .iters = 20,
                       .warmup = 5,
                       .agg_iters = 1,
                       .check = 1,
                       .stream_null = 1,
                       .average = 1,
                       .ntypes = 1,
                       .types = {chorusFloat32},
                       .nops = 1,
                       .ops = {chorusSum}};
    opterr = 0;
    for (;;) {
        /* Leading ':': a missing value returns ':', told apart from an unknown option ('?'). */
        int longindex = -1;
        int c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:G:C:a:F:J:R:M:D:h",
                            perf_longopts, &longindex);
        const perf_int_flag_t *flag = NULL;
        const char *why = NULL; /* a refused value: why */
        char name[64], range[64];
        int bad = 0;
        if (c == -1) {
            break;
        }
        if (c == '?' || c == ':') {
            /* getopt_long sets no longindex here. optopt: the letter (also inside a group, where
             * argv[optind - 1] is still the argument before it), the letter a long option
             * missing its value stands for, or 0 for an unknown or ambiguous long option. A
             * missing value is the last argument, so its token tells long from short. */
            const char *tok = argv[optind - 1];
            int long_opt = c == ':' ? strncmp(tok, "--", 2) == 0 : optopt == 0;
            perf_opt_name(name, sizeof(name), optopt, long_opt, argv);
            if (c == ':') {
                PERF_PRINT(rank, "option '%s' needs a value\n", name);
            } else if (long_opt && perf_long_matches(tok) > 1) {
                PERF_PRINT(rank, "ambiguous option '%s'\n", name);
            } else {
                PERF_PRINT(rank, "unknown option '%s'\n", name);
            }
            perf_usage(argv[0], rank);
            return -1;
        }
        for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
            flag = ints[k].letter == c ? &ints[k] : flag;
        }
        if (flag != NULL) {
            bad = perf_parse_int(optarg, flag->lo, flag->hi, flag->field);
            if (bad) {
                snprintf(range, sizeof(range), "an integer from %ld to %ld", flag->lo, flag->hi);
                why = c == 'f' ? "the step factor is an integer, 2 or more to multiply the size "
                                 "(0 or 1: step by -i bytes), with no K/M/G"
                               : range;
            }
            o->root_given |= c == 'r';
            if (!bad && c == 'G' && ignored > 0) {
                PERF_PRINT(rank, "# -G (CUDA graphs) ignored: host buffers, NULL or host stream\n");
            }
        } else if (c == 'b' || c == 'e' || c == 'i') {
            size_t *field = c == 'b' ? &o->minbytes : c == 'e' ? &o->maxbytes : &o->stepbytes;
            why = perf_parse_bytes(optarg, field); /* writes only on success */
            bad = why != NULL;
        } else if (c == 'o') {
            bad = perf_parse_names(optarg, perf_op_lookup, chorusNumOps, o->ops, &o->nops);
            why = "sum, prod, max, min, avg or all";
        } else if (c == 'd') {
            bad = perf_parse_names(optarg, perf_type_lookup, chorusNumTypes, o->types, &o->ntypes);
            why = "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16 or all";
        } else if (c == 'M') {
            o->compare_gloo = strcmp(optarg, "gloo") == 0;
            o->compare_mpi =
                o->compare_gloo || strcmp(optarg, "mpi") == 0 || strcmp(optarg, "1") == 0;
            bad = !o->compare_mpi && strcmp(optarg, "0") != 0 && strcmp(optarg, "none") != 0;
            why = "mpi, gloo, or none (0)";
        } else if (c == 'D') {
            o->device_bufs = strcmp(optarg, "cuda") == 0;
            bad = !o->device_bufs && strcmp(optarg, "host") != 0;
            why = "cuda or host";
        } else if (c == 'J') {
            o->json_path = optarg;
            bad = optarg[0] == '\0';
            why = "a file name";
        } else if (c == 'F') {
            PERF_PRINT(rank, "# -F (CSV output) is not supported; printing to stdout\n");
        } else if (c == 'h') {
            perf_usage(argv[0], rank);
            return 1;
        }
        if (bad) {
            perf_opt_name(name, sizeof(name), c, longindex >= 0, argv);
            PERF_PRINT(rank, "invalid value '%s' for option %s%s%s\n", optarg, name,
                       why != NULL ? ": " : "", why != NULL ? why : "");
            return -1;
        }
    }
    o->stepfactor = (size_t)stepfactor;
    if (optind < argc) {
        PERF_PRINT(rank, "unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->minbytes > o->maxbytes) {
        PERF_PRINT(rank, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", o->minbytes,
                   o->maxbytes);
        return -1;
    }
    if (o->stepfactor <= 1 && o->stepbytes == 0) {
        PERF_PRINT(rank, "invalid step: stepfactor <= 1 needs stepbytes > 0\n");
        return -1;
    }
    return 0;
}
