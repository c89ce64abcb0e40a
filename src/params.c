/*
 * params.c: the one table of environment variables, and the only getenv() in the library.
 *
 * Integer values accept a K/M/G suffix (powers of 1024) where the table says "bytes". A value that
 * does not parse, or is out of range, is an error naming the variable and what is allowed.
 */
#include "params.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

typedef enum { PT_INT, PT_BYTES, PT_STR } param_type_t;

typedef struct param_def {
    const char *name;
    param_type_t type;
    const char *def; /* default as text ("" for none) */
    int64_t min, max;
    ptrdiff_t offset; /* into params_t; -1: read elsewhere (process-wide or init-only) */
    const char *doc;
} param_def_t;

#define OFF(field) ((ptrdiff_t)offsetof(params_t, field))
#define NONE ((ptrdiff_t)-1)
#define BIG ((int64_t)1 << 40)

static const param_def_t param_table[] = {
    {"CHORUS_DEBUG", PT_STR, "WARN", 0, 0, NONE,
     "log level: VERSION, WARN, INFO (also lists the variables set), TRACE"},
    {"CHORUS_DEBUG_SUBSYS", PT_STR, "ALL", 0, 0, NONE,
     "comma list of INIT,COLL,P2P,SHM,NET,BOOT,ENV,ALLOC,GRAPH,TUNING,PROXY,ALL; ^ in front "
     "excludes"},
    {"CHORUS_DEBUG_FILE", PT_STR, "", 0, 0, NONE,
     "write logs to this file instead of stderr (%h: host, %p: pid)"},
    {"CHORUS_TIMEOUT_MS", PT_INT, "600000", 1, BIG, OFF(timeout_ms),
     "deadline of every wait in ms; a peer silent that long fails the call with chorusTimeout"},
    {"CHORUS_CHECK_ARGS", PT_INT, "0", 0, 1, OFF(check_args),
     "1: every collective first compares its collective, count, datatype, op and root across the "
     "ranks over the bootstrap connections (tens of microseconds a call: for debugging); where "
     "they differ, every rank gets chorusInvalidUsage naming them, nothing runs and the "
     "communicator stays usable; 0: not compared (as NCCL and MPI: a mismatch gives wrong "
     "results or a timeout)"},
    {"CHORUS_NCHANNELS", PT_INT, "0", 0, 32, OFF(nchannels),
     "channels (rings) per collective; 0: automatic"},
    {"CHORUS_MIN_NCHANNELS", PT_INT, "1", 1, 32, OFF(min_nchannels), "lower bound on channels"},
    {"CHORUS_MAX_NCHANNELS", PT_INT, "32", 1, 32, OFF(max_nchannels), "upper bound on channels"},
    {"CHORUS_BUFFSIZE", PT_BYTES, "4M", 64, 1 << 30, OFF(buffsize),
     "bytes of one collective FIFO (CHORUS_STEPS slots); a slot is the pipelining slice"},
    {"CHORUS_P2P_BUFFSIZE", PT_BYTES, "1M", 64, 1 << 30, OFF(p2p_buffsize),
     "bytes of one send/recv FIFO"},
    {"CHORUS_STEPS", PT_INT, "8", 2, 64, OFF(steps), "slots per FIFO"},
    {"CHORUS_SPIN", PT_INT, "2000", 0, BIG, OFF(spin),
     "polls of a FIFO counter before the waiter sleeps on a futex; where ranks outnumber cores "
     "at most 16 (then it yields), and none for the direct algorithms' waits, unless set"},
    {"CHORUS_WAIT_GATE", PT_INT, "1", 0, 1, OFF(wait_gate),
     "1: a one-host wait spins on where yielding would run no rank able to move on; 0: yields"},
    {"CHORUS_WAIT_BALANCE", PT_INT, "1", 0, 1, OFF(wait_balance),
     "1: where the machine's ranks outnumber its cores and no other task runs, a rank that waits "
     "on a CPU holding two of them more than another moves itself there (its affinity put back "
     "at once); 0: never"},
    {"CHORUS_DIRECT_BUFFSIZE", PT_BYTES, "512K", 4096, 1 << 30, OFF(direct_buffsize),
     "bytes of each of the two buffers of a rank's node-local window (one-shot, two-shot)"},
    {"CHORUS_NT_MIN_BYTES", PT_BYTES, "64M", 0, BIG, OFF(nt_min_bytes),
     "host calls whose output is at least this many bytes write it (out of place) and the "
     "pipelined algorithms' send slots with streaming (non-temporal) stores where a step copies "
     "into them; 0: never"},
    {"CHORUS_SLOT_ADAPT", PT_INT, "1", 0, 2, OFF(slot_adapt),
     "1: on one host, ring and tree calls from 32 KiB up to CHORUS_NT_MIN_BYTES write their "
     "send slots with plain or streaming stores, each rank choosing per collective, size, and "
     "in place or not, by timing a few calls the other way now and then (from "
     "CHORUS_NT_MIN_BYTES they stream); 0: plain below CHORUS_NT_MIN_BYTES (the default where "
     "the ranks outnumber the cores); 2 (tests): every call the other way"},
    {"CHORUS_WINDOW_ADAPT", PT_INT, "1", 0, 2, OFF(window_adapt),
     "1: on one host, one-shot and two-shot calls from 32 KiB copy a rank's input into its "
     "window with streaming stores; where the machine's ranks outnumber its cores, all-reduces, "
     "reduces and reduce-scatters choose plain or streaming stores instead, each rank per "
     "collective, size, and in place or not, by timing its own copies a few calls the other way "
     "now and then; 0: plain stores below CHORUS_NT_MIN_BYTES; 2 (tests): every call the other "
     "way"},
    {"CHORUS_ADAPT_TIMED_PCT", PT_INT, "0", 0, 100000, OFF(adapt_timed_pct),
     "tests: the run-time choices of CHORUS_SLOT_ADAPT and CHORUS_WINDOW_ADAPT take each call "
     "written with streaming stores as having taken this percent of its time, whatever the "
     "clock said; 0: as timed"},
    {"CHORUS_ZCOPY", PT_INT, "1", 0, 1, OFF(zcopy),
     "1: one-host direct algorithms read chorusMemAlloc inputs in place from CHORUS_ZCOPY_MIN "
     "(all-reduce: only after its vote, CHORUS_ZCOPY_ALLREDUCE_MIN); 0: copy"},
    {"CHORUS_ZCOPY_MIN", PT_BYTES, "16M", 4096, BIG, OFF(zcopy_min),
     "one-host reduces, all-gathers, reduce-scatters and all-to-alls whose input is at least "
     "this many bytes read chorusMemAlloc inputs in place (broadcasts: "
     "CHORUS_ZCOPY_BROADCAST_MIN); the thresholds below start here at the earliest (below it a "
     "read in place cost more than the copy once the input is written between calls with "
     "plain stores: perftests/README.md)"},
    {"CHORUS_ZCOPY_ALLREDUCE_MIN", PT_BYTES, "16M", 0, BIG, OFF(zcopy_allreduce_min),
     "one-host all-reduces of at least this many bytes, where the tuner takes the ring, run "
     "two-shot reading inputs and results in place when every rank's input and output are "
     "chorusMemAlloc memory (a flag round asks); 0: never (the default when ranks outnumber "
     "cores)"},
    {"CHORUS_ZCOPY_BROADCAST_MIN", PT_BYTES, "64M", 0, BIG, OFF(zcopy_broadcast_min),
     "one-host broadcasts of at least this many bytes read the root's input in place when it is "
     "chorusMemAlloc memory (where the tuner takes the ring they then run direct: a flag round "
     "asks); 0: never"},
    {"CHORUS_ZCOPY_REDUCESCATTER_MIN", PT_BYTES, "16M", 0, BIG, OFF(zcopy_reducescatter_min),
     "one-host reduce-scatters whose output is at least this many bytes, where the tuner takes "
     "the ring, run direct with every rank's input read in place when all are chorusMemAlloc "
     "memory (a flag round asks); 0: never"},
    {"CHORUS_ZCOPY_ALLGATHER_MIN", PT_BYTES, "256K", 0, BIG, OFF(zcopy_allgather_min),
     "one-host direct all-gathers whose output is at least this many bytes, where every rank's "
     "output is chorusMemAlloc memory (a flag round asks), write each rank's input straight into "
     "every rank's output (no rank reads another's input, so none need take lines back before "
     "its next write); 0: never (the default when ranks outnumber cores: the flag round costs "
     "a hand-over)"},
    {"CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN", PT_BYTES, "256K", 0, BIG, OFF(zcopy_allreduce_push_min),
     "one-host two-shot all-reduces of at least this many bytes, out of place, the count a "
     "multiple of the ranks, where every rank's output is chorusMemAlloc memory (a flag round "
     "asks), push: each rank copies its input's parts into their owners' outputs, reduces its "
     "own part there and copies it into every output (no rank reads another's buffers, no "
     "window copy); 0: never (the default when ranks outnumber cores: the flag round costs a "
     "hand-over)"},
    {"CHORUS_ALLTOALL_DIRECT_MAX", PT_BYTES, "0", 0, BIG, OFF(alltoall_direct_max),
     "one-host all-to-alls of at most this many bytes a rank (its whole input) run through the "
     "node-local windows instead of send/recv; 0: never (the default, unless ranks outnumber "
     "cores: then 1M)"},
    {"CHORUS_CMA_MIN", PT_BYTES, "16K", 0, BIG, OFF(cma_min),
     "one-host all-gathers of at least this many bytes a rank, and where the ranks do not "
     "outnumber the cores broadcasts of at least this many and 128 KiB and two-shot all-reduces "
     "of at least this many and 64 KiB, move data between the ranks' own buffers, any memory, "
     "with process_vm_readv and process_vm_writev (Linux cross-memory attach: one copy where the "
     "window takes two; all-gathers write each input into the others' outputs, broadcasts read "
     "the root's input while it writes about 1/n of it into each output in place, 1/(n+1) out "
     "of place, all-reduces "
     "read each part of the inputs and write its sum into every output); 0: never; unset: each "
     "communicator's setup times it "
     "against the window's copies and leaves it off for all-gathers where they time more than "
     "15% faster (with CHORUS_CMA_ADAPT, only those below 64 KiB a rank, and all choose again "
     "at run time), for broadcasts and all-reduces where they time nearly three times as "
     "fast"},
    {"CHORUS_CMA_ADAPT", PT_INT, "1", 0, 2, OFF(cma_adapt),
     "1: where CHORUS_CMA_MIN is unset, one-host all-gathers of at least 16 KiB a rank choose "
     "between the window and cross-memory attach per size at run time, by rank 0's timing of "
     "a few calls the other way now and then; 0: the setup's timing decides for the "
     "communicator's life (the default where the ranks outnumber the cores); 2 (tests): every "
     "size switches at every chance"},
    {"CHORUS_CMA_TIMED_PCT", PT_INT, "0", 0, 1000, OFF(cma_timed_pct),
     "tests: where the setup times cross-memory attach against the window (CHORUS_CMA_MIN "
     "unset), take the window's piece as costing this percent of the attach's, whatever the "
     "clocks said; 0: as timed"},
    {"CHORUS_CUDA_P2P", PT_INT, "-1", -1, 1, OFF(cuda_p2p),
     "device buffers inside a machine GPU to GPU (1), staged via host (0); -1: 1 unless GPUs "
     "shared"},
    {"CHORUS_CUDA_ASYNC", PT_INT, "1", 0, 1, OFF(cuda_async),
     "1: device-buffer calls return at once, ordered by stream memory operations; 0: they wait"},
    {"CHORUS_SOCKET_IFNAME", PT_STR, "", 0, 0, OFF(socket_ifname),
     "bootstrap interface: prefix list (eth,ib), ^ excludes, = exact; default: first up non-lo"},
    {"CHORUS_HOSTID", PT_STR, "", 0, 0, OFF(hostid),
     "override this rank's host identity (simulate several hosts on one machine)"},
    {"CHORUS_TOPO_FILE", PT_STR, "", 0, 0, OFF(topo_file),
     "read the host topology from this hwloc XML file instead of the live machine"},
    {"CHORUS_TOPO_DUMP_FILE", PT_STR, "", 0, 0, OFF(topo_dump_file),
     "write the detected host topology (hwloc XML) to this file (%h: host, %p: pid)"},
    {"CHORUS_NET", PT_STR, "", 0, 0, OFF(net),
     "net plugin between hosts: IB or Socket; default: IB when an active port exists, else Socket"},
    {"CHORUS_NSOCKS_PERTHREAD", PT_INT, "1", 1, 64, OFF(nsocks_perthread),
     "socket plugin: TCP sockets per helper thread of one connection (striped)"},
    {"CHORUS_SOCKET_NTHREADS", PT_INT, "0", 0, 16, OFF(socket_nthreads),
     "socket plugin: helper threads per connection; 0: the proxy thread does the I/O"},
    {"CHORUS_NET_SPEED_MBPS", PT_INT, "0", 0, 1 << 30, OFF(net_speed_mbps),
     "link speed the tuner assumes between hosts (Mb/s); 0: what the NIC reports"},
    {"CHORUS_IB_HCA", PT_STR, "", 0, 0, OFF(ib_hca),
     "IB devices to use: name[:port] prefixes (mlx5_0:1,mlx5_1), ^ excludes, = exact"},
    {"CHORUS_IB_GID_INDEX", PT_INT, "-1", -1, 255, OFF(ib_gid_index),
     "RoCE GID index; -1: automatic (RoCE v2 with an IPv4 address first)"},
    {"CHORUS_IB_TIMEOUT", PT_INT, "20", 1, 31, OFF(ib_timeout),
     "IB ack timeout exponent: 4.096 us x 2^value per retry"},
    {"CHORUS_IB_RETRY_CNT", PT_INT, "7", 0, 7, OFF(ib_retry_cnt),
     "IB transport retries before a silent peer is an error"},
    {"CHORUS_IB_QPS_PER_CONNECTION", PT_INT, "1", 1, 4, OFF(ib_qps),
     "IB queue pairs per connection; messages are striped over them"},
    {"CHORUS_IB_TC", PT_INT, "0", 0, 255, OFF(ib_tc),
     "RoCE traffic class of the GRH (DSCP x 4; the fabric's lossless class, e.g. 106)"},
    {"CHORUS_IB_SL", PT_INT, "0", 0, 15, OFF(ib_sl), "IB service level of the queue pairs"},
    {"CHORUS_IBVERBS_PATH", PT_STR, "", 0, 0, OFF(ibverbs_path),
     "the libibverbs the IB plugin loads; default libibverbs.so.1"},
    {"CHORUS_ALGO", PT_STR, "", 0, 0, OFF(algo),
     "algorithms allowed: ring,tree,oneshot,twoshot; ^ excludes; per collective: "
     "allreduce:tree;broadcast:ring"},
    {"CHORUS_PROTO", PT_STR, "", 0, 0, OFF(proto),
     "protocols allowed (NCCL syntax); Chorus has Simple only, LL and LL128 are refused"},
    {"CHORUS_RANK", PT_INT, "", 0, 1 << 30, NONE, "chorusCommInitEnv: this rank"},
    {"CHORUS_NRANKS", PT_INT, "", 1, 1 << 30, NONE, "chorusCommInitEnv: number of ranks"},
    {"CHORUS_ROOT", PT_STR, "", 0, 0, NONE,
     "chorusCommInitEnv: host:port where rank 0 listens for the rendezvous"},
    {"CHORUS_SECRET", PT_STR, "", 0, 0, NONE,
     "chorusCommInitEnv: shared 64-bit hex secret every rank must present (default: derived)"},
    {"RANK", PT_INT, "", 0, 1 << 30, NONE, "torchrun: this rank (when CHORUS_RANK is unset)"},
    {"WORLD_SIZE", PT_INT, "", 1, 1 << 30, NONE, "torchrun: number of ranks"},
    {"MASTER_ADDR", PT_STR, "", 0, 0, NONE, "torchrun: rank 0's host"},
    {"MASTER_PORT", PT_INT, "", 1, 65535, NONE, "torchrun: rendezvous port on MASTER_ADDR"},
};
#define NPARAMS ((int)(sizeof(param_table) / sizeof(param_table[0])))

static const param_def_t *param_find(const char *name)
{
    for (int i = 0; i < NPARAMS; i++)
        if (strcmp(param_table[i].name, name) == 0)
            return &param_table[i];
    return NULL;
}

const char *params_raw(const char *name)
{
    if (param_find(name) == NULL)
        return NULL;
    return getenv(name);
}

/* Parse text as an integer with an optional K/M/G suffix when bytes is set: decimal, or hex after
 * 0x (a leading 0 is no octal prefix: CHORUS_TIMEOUT_MS=010 was 8 ms). */
static chorusResult_t parse_int(const param_def_t *d, const char *text, int64_t *value_p)
{
    char *end = NULL;
    const char *t = text;
    while (*t == ' ' || *t == '\t')
        t++;
    if (*t == '+' || *t == '-')
        t++;
    errno = 0;
    long long v = strtoll(text, &end, t[0] == '0' && (t[1] == 'x' || t[1] == 'X') ? 16 : 10);
    if (errno != 0 || end == text)
        goto bad;
    if (d->type == PT_BYTES && *end != '\0') {
        int64_t mult = 0;
        switch (*end) {
        case 'k':
        case 'K':
            mult = 1 << 10;
            break;
        case 'm':
        case 'M':
            mult = 1 << 20;
            break;
        case 'g':
        case 'G':
            mult = 1 << 30;
            break;
        }
        if (mult == 0)
            goto bad;
        end++;
        if (*end == 'B' || *end == 'b')
            end++;
        /* Saturate: a product past int64 is out of every range, and reported as such. */
        if (v > LLONG_MAX / mult || v < LLONG_MIN / mult)
            v = v < 0 ? LLONG_MIN : LLONG_MAX;
        else
            v *= mult;
    }
    if (*end != '\0')
        goto bad;
    if (v < d->min || v > d->max)
        return ERR(chorusInvalidArgument, SUB_ENV,
                   "environment variable %s=%s is out of range: allowed %lld..%lld", d->name, text,
                   (long long)d->min, (long long)d->max);
    *value_p = v;
    return chorusSuccess;
bad:
    return ERR(chorusInvalidArgument, SUB_ENV, "environment variable %s=\"%s\" is not %s", d->name,
               text,
               d->type == PT_BYTES ? "a byte count (digits with an optional K, M or G suffix)"
                                   : "an integer");
}

/* Parse text as d's value into field: an int64_t, or a string of PARAM_STR_MAX bytes. */
static chorusResult_t parse_value(const param_def_t *d, const char *text, void *field)
{
    if (d->type != PT_STR)
        return parse_int(d, text, field);
    if (strlen(text) >= PARAM_STR_MAX)
        return ERR(chorusInvalidArgument, SUB_ENV,
                   "environment variable %s is longer than %d characters", d->name,
                   PARAM_STR_MAX - 1);
    strcpy(field, text);
    return chorusSuccess;
}

chorusResult_t params_parse_text(const char *name, const char *text, int64_t *int_p,
                                 char str[PARAM_STR_MAX])
{
    const param_def_t *d = param_find(name);
    if (d == NULL)
        return ERR(chorusInternalError, SUB_ENV, "%s is not a variable of the table", name);
    return parse_value(d, text, d->type == PT_STR ? (void *)str : (void *)int_p);
}

chorusResult_t params_get_int(const char *name, int64_t min, int64_t max, int64_t *value_p,
                              int *set_p)
{
    const param_def_t *d = param_find(name);
    if (d == NULL || d->type == PT_STR)
        return ERR(chorusInternalError, SUB_ENV, "%s is not an integer variable of the table",
                   name);
    const char *text = getenv(name);
    int64_t v = 0;
    if (text == NULL || text[0] == '\0') {
        *set_p = 0;
        return chorusSuccess;
    }
    param_def_t bounded = *d;
    bounded.min = min > d->min ? min : d->min;
    bounded.max = max < d->max ? max : d->max;
    CHECK(parse_int(&bounded, text, &v));
    *value_p = v;
    *set_p = 1;
    return chorusSuccess;
}

int params_list_match(const char *spec, const char *name, int port)
{
    int exclude = 0, exact = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    int hit = 0;
    while (*spec != '\0' && !hit) {
        size_t len = strcspn(spec, ",");
        char item[256];
        snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) ? len : sizeof(item) - 1),
                 spec);
        int want_port = -1;
        char *colon = port >= 0 ? strchr(item, ':') : NULL;
        if (colon != NULL) {
            *colon = '\0';
            want_port = atoi(colon + 1);
        }
        int name_ok = item[0] != '\0' &&
                      (exact ? strcmp(item, name) == 0 : strncmp(item, name, strlen(item)) == 0);
        hit = name_ok && (want_port < 0 || want_port == port);
        spec += len;
        if (*spec == ',')
            spec++;
    }
    return exclude ? !hit : hit;
}

chorusResult_t params_load(params_t *params_p)
{
    params_t p;
    memset(&p, 0, sizeof(p));
    for (int i = 0; i < NPARAMS; i++) {
        const param_def_t *d = &param_table[i];
        if (d->offset == NONE)
            continue;
        const char *text = getenv(d->name);
        int set = text != NULL && text[0] != '\0';
        if (!set)
            text = d->def;
        CHECK(parse_value(d, text, (char *)&p + d->offset));
    }
    if (p.nsocks_perthread * (p.socket_nthreads > 0 ? p.socket_nthreads : 1) > 64)
        return ERR(chorusInvalidArgument, SUB_ENV,
                   "CHORUS_NSOCKS_PERTHREAD=%lld times CHORUS_SOCKET_NTHREADS=%lld is above 64 "
                   "sockets per connection",
                   (long long)p.nsocks_perthread, (long long)p.socket_nthreads);
    if (p.min_nchannels > p.max_nchannels)
        return ERR(chorusInvalidArgument, SUB_ENV,
                   "CHORUS_MIN_NCHANNELS=%lld is above CHORUS_MAX_NCHANNELS=%lld",
                   (long long)p.min_nchannels, (long long)p.max_nchannels);
    *params_p = p;
    return chorusSuccess;
}

void params_log_set(void)
{
    for (int i = 0; i < NPARAMS; i++) {
        const char *v = getenv(param_table[i].name);
        if (v != NULL)
            INFO(SUB_ENV, "%s set by environment to %s", param_table[i].name, v);
    }
}

void params_print_table(FILE *out)
{
    fprintf(out, "| variable | default | meaning |\n|---|---|---|\n");
    for (int i = 0; i < NPARAMS; i++)
        fprintf(out, "| `%s` | %s | %s |\n", param_table[i].name,
                param_table[i].def[0] ? param_table[i].def : "unset", param_table[i].doc);
}
