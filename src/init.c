/*
 * init.c: a communicator's birth: unique ids, rendezvous, peer info, rings and their connections.
 *
 * chorusCommInitRank: read the environment into the communicator, meet the other ranks through the
 * bootstrap, all-gather peer info (host id, pid), build one ring per channel and connect each
 * channel's send and recv ends, then a barrier so no rank leaves before all are connected.
 * chorusCommInitAll runs the same on one thread per rank; chorusCommInitEnv derives the id from
 * environment variables (torchrun's too).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "comm.h"
#include "cuda_stage.h"
#include "debug.h"

static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* chorusCommInitAll's device for the rank its thread initializes; -1 elsewhere. */
static __thread int init_all_dev = -1;

static void fill_peer_info(const chorusComm_t comm, peer_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->rank = comm->rank;
    info->pid = (int32_t)getpid();
    info->start_time = health_start_time();
    info->pid_ns = health_pid_ns();
    /* NCCL's rule: the device current when the rank initializes (a CUDA build, CUDA loaded). */
    info->cuda_dev = init_all_dev >= 0  ? init_all_dev
                     : CHORUS_HAVE_CUDA ? cuda_current_device()
                                        : -1;
    if (CHORUS_HAVE_CUDA)
        cuda_device_busid(info->cuda_dev, info->cuda_busid, sizeof(info->cuda_busid));
    info->numa_node = -1;
    char host[64] = "", boot_id[64] = "";
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot_id, sizeof(boot_id), f) == NULL)
            boot_id[0] = '\0';
        fclose(f);
        boot_id[strcspn(boot_id, "\n")] = '\0';
    }
    snprintf(info->hostid, sizeof(info->hostid), "%s/%s", host, boot_id);
    info->machine_hash = fnv1a(info->hostid, 0xcbf29ce484222325ull);
    if (comm->params.hostid[0] != '\0')
        snprintf(info->hostid, sizeof(info->hostid), "%s", comm->params.hostid);
    info->hostid_hash = fnv1a(info->hostid, 0xcbf29ce484222325ull);
    info->nchannels = comm->nchannels;
    info->nchannels_forced = comm->nchannels_forced;
    info->max_nchannels = (int32_t)comm->params.max_nchannels;
    unsigned masks[TUNE_NCOLLS];
    int quiet = debug_set_quiet_errors(1);
    info->algo_ok = tune_parse_algo("CHORUS_ALGO", comm->params.algo, masks) == chorusSuccess;
    unsigned proto_mask;
    info->proto_ok =
        tune_parse_proto("CHORUS_PROTO", comm->params.proto, &proto_mask) == chorusSuccess;
    debug_set_quiet_errors(quiet);
    /* What it allows, and whether it is set: the zero-copy votes run only where it is not. */
    uint64_t key = 0xcbf29ce484222325ull;
    for (int c = 0; info->algo_ok && c < TUNE_NCOLLS; c++)
        key = (key ^ masks[c]) * 0x100000001b3ull;
    info->algo_key = (key ^ (comm->params.algo[0] != '\0')) * 0x100000001b3ull;
    snprintf(info->algo, sizeof(info->algo), "%s", comm->params.algo);
    snprintf(info->proto, sizeof(info->proto), "%s", comm->params.proto);
    const topo_t *topo = comm->topo;
    if (topo != NULL) {
        info->numa_node = topo->numa_node;
        info->ncores = topo->ncores;
        for (int d = 0; d < topo->ndevs; d++) {
            if (topo->devs[d].kind == TOPO_DEV_GPU) {
                info->ngpus++;
                continue;
            }
            if (info->nnics < PEER_MAX_NICS)
                snprintf(info->nics[info->nnics], PEER_NIC_NAME_BYTES, "%s", topo->devs[d].name);
            info->nnics++;
        }
    }
}

/*
 * Settings that decide how the ranks talk must be the same on every rank. With CHORUS_NCHANNELS
 * differing, the ranks built rings of different channel counts and init waited in the bootstrap
 * until CHORUS_TIMEOUT_MS (10 minutes by default), then asked "is it stuck, or still
 * initializing?"; with CHORUS_ALGO or CHORUS_ZCOPY_ALLREDUCE_MIN differing, the first call the
 * ranks ran differently waited as long and then blamed a slow or deadlocked peer. Every rank
 * compares every rank's settings with rank 0's, so all fail alike, naming the variable, both
 * values and what to do. Here CHORUS_ALGO and CHORUS_PROTO (from the peer info); the channels
 * in setup_channels (channels_alike, once the hosts are known: they decide the default), and
 * the one-host algorithms' settings in setup_tuner (settings_alike_direct).
 */
static chorusResult_t settings_alike(chorusComm_t comm)
{
    const peer_info_t *me = &comm->peers[comm->rank];
    if (!me->algo_ok || !me->proto_ok) { /* its own error, saying why */
        unsigned masks[TUNE_NCOLLS], mask;
        return !me->algo_ok ? tune_parse_algo("CHORUS_ALGO", comm->params.algo, masks)
                            : tune_parse_proto("CHORUS_PROTO", comm->params.proto, &mask);
    }
    for (int r = 0; r < comm->nranks; r++) {
        const peer_info_t *p = &comm->peers[r];
        if (!p->algo_ok || !p->proto_ok)
            return ERR(chorusInvalidUsage, SUB_INIT,
                       "rank %d's %s=\"%s\" is not valid (that rank's error says why)", r,
                       p->algo_ok ? "CHORUS_PROTO" : "CHORUS_ALGO",
                       p->algo_ok ? p->proto : p->algo);
    }
    const peer_info_t *p0 = &comm->peers[0];
    for (int r = 1; r < comm->nranks; r++) {
        const peer_info_t *p = &comm->peers[r];
        if (p->algo_key != p0->algo_key)
            return ERR(chorusInvalidUsage, SUB_INIT,
                       "CHORUS_ALGO is %s%s%s on rank %d and %s%s%s on rank 0: it must allow the "
                       "same algorithms on every rank (or be unset on all); export it alike to "
                       "all (mpirun -x CHORUS_ALGO)",
                       p->algo[0] ? "\"" : "", p->algo[0] ? p->algo : "unset",
                       p->algo[0] ? "\"" : "", r, p0->algo[0] ? "\"" : "",
                       p0->algo[0] ? p0->algo : "unset", p0->algo[0] ? "\"" : "");
    }
    return chorusSuccess;
}

/* The channels rank p builds in a communicator of nhosts hosts: its CHORUS_NCHANNELS (or
 * chorusConfig_t's), clamped to its minimum and maximum; across hosts two by default (one per
 * tree of the double binary tree, and two rings whose traffic the proxy can overlap). */
static int channels_built(const peer_info_t *p, int nhosts)
{
    return !p->nchannels_forced && nhosts > 1 && p->nchannels < 2 && p->max_nchannels >= 2
               ? 2
               : p->nchannels;
}

/* Every rank must build as many channels as rank 0 (settings_alike's rule). */
static chorusResult_t channels_alike(const chorusComm_t comm, int nhosts)
{
    const peer_info_t *p0 = &comm->peers[0];
    int want = channels_built(p0, nhosts);
    for (int r = 1; r < comm->nranks; r++) {
        const peer_info_t *p = &comm->peers[r];
        int got = channels_built(p, nhosts);
        if (got != want)
            return ERR(chorusInvalidUsage, SUB_INIT,
                       "rank %d would build %d channel%s where rank 0 builds %d (rank %d: %s, "
                       "at most %d; rank 0: %s, at most %d): CHORUS_NCHANNELS, "
                       "CHORUS_MIN_NCHANNELS and CHORUS_MAX_NCHANNELS (or chorusConfig_t's "
                       "minChannels and maxChannels) must be the same on every rank; export them "
                       "alike to all (mpirun -x)",
                       r, got, got == 1 ? "" : "s", want, r,
                       p->nchannels_forced ? "CHORUS_NCHANNELS" : "automatic", p->max_nchannels,
                       p0->nchannels_forced ? "CHORUS_NCHANNELS" : "automatic", p0->max_nchannels);
    }
    return chorusSuccess;
}

/* The one-host algorithms' settings (where they may run): the values each rank took, an unset
 * one its default, which depends on whether the machine's ranks outnumber its cores (agreed). */
static chorusResult_t settings_alike_direct(chorusComm_t comm)
{
    static const char *const names[] = {"CHORUS_ZCOPY",
                                        "CHORUS_ZCOPY_MIN",
                                        "CHORUS_ZCOPY_ALLREDUCE_MIN",
                                        "CHORUS_ZCOPY_BROADCAST_MIN",
                                        "CHORUS_ZCOPY_REDUCESCATTER_MIN",
                                        "CHORUS_ZCOPY_ALLGATHER_MIN",
                                        "CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN",
                                        "CHORUS_ALLTOALL_DIRECT_MAX",
                                        "CHORUS_CMA_MIN",
                                        "CHORUS_CMA_ADAPT",
                                        "CHORUS_CMA_TIMED_PCT"};
    enum { N = sizeof(names) / sizeof(names[0]) };
    int64_t *all = calloc((size_t)comm->nranks * N, sizeof(int64_t));
    if (all == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    int64_t *mine = all + (size_t)N * comm->rank;
    mine[0] = comm->params.zcopy;
    mine[1] = comm->params.zcopy_min;
    mine[2] = comm->zc_allreduce_min;
    mine[3] = comm->zc_broadcast_min;
    mine[4] = comm->zc_reducescatter_min;
    mine[5] = comm->zc_allgather_min;
    mine[6] = comm->zc_arpush_min;
    mine[7] = comm->alltoall_direct_max;
    mine[8] = comm->params.cma_min;
    mine[9] = comm->cma_adapt;
    mine[10] = comm->params.cma_timed_pct;
    chorusResult_t res = boot_allgather(comm->boot, all, N * sizeof(int64_t));
    for (int r = 1; res == chorusSuccess && r < comm->nranks; r++)
        for (int k = 0; k < N; k++)
            if (all[(size_t)N * r + k] != all[k]) {
                res = ERR(chorusInvalidUsage, SUB_INIT,
                          "%s is %lld on rank %d and %lld on rank 0 (as each took it: unset is "
                          "its default%s): the one-host algorithms' settings must be the same on "
                          "every rank; export it alike to all (mpirun -x %s) or unset it on all",
                          names[k], (long long)all[(size_t)N * r + k], r, (long long)all[k],
                          k == 9 ? "; 0 where CHORUS_CMA_MIN is set" : "", names[k]);
                break;
            }
    free(all);
    return res;
}

/* One GRAPH line per channel: the ring and this rank's place in the channel's tree. */
static void log_graph(chorusComm_t comm, int c)
{
    if (debug_level < LOG_INFO || !(debug_subsys & SUB_GRAPH))
        return;
    channel_t *ch = &comm->channels[c];
    char buf[512];
    size_t len = 0;
    for (int i = 0; i < ch->ring.nranks && len < sizeof(buf) - 16; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, " %d", ch->ring.ranks[i]);
    INFO(SUB_GRAPH, "channel %d ring:%s", c, buf);
    len = 0;
    buf[0] = '\0';
    for (int i = 0; i < ch->tree.ndown; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, " %d", ch->tree.down[i]);
    INFO(SUB_GRAPH, "channel %d tree %d: rank %d up %d down%s", c, c % 2, comm->rank, ch->tree.up,
         ch->tree.ndown ? buf : " none");
}

/* Apply config fields that are set (not CHORUS_CONFIG_UNDEF_INT) over the environment's values. */
static chorusResult_t apply_config(params_t *params, const chorusConfig_t *config)
{
    if (config == NULL)
        return chorusSuccess;
    if (config->magic != CHORUS_CONFIG_MAGIC || config->size < offsetof(chorusConfig_t, netName))
        return ERR(chorusInvalidArgument, SUB_INIT,
                   "config was not initialized with CHORUS_CONFIG_INITIALIZER");
    if (config->blocking != CHORUS_CONFIG_UNDEF_INT && config->blocking != 1 &&
        config->blocking != 0)
        return ERR(chorusInvalidArgument, SUB_INIT, "config->blocking=%d: allowed 0 or 1",
                   config->blocking);
    if (config->timeoutMs != CHORUS_CONFIG_UNDEF_INT) {
        if (config->timeoutMs <= 0)
            return ERR(chorusInvalidArgument, SUB_INIT,
                       "config->timeoutMs=%d: must be a positive number of ms", config->timeoutMs);
        params->timeout_ms = config->timeoutMs;
    }
    if (config->minChannels != CHORUS_CONFIG_UNDEF_INT) {
        if (config->minChannels < 1 || config->minChannels > MAX_CHANNELS)
            return ERR(chorusInvalidArgument, SUB_INIT, "config->minChannels=%d: allowed 1..%d",
                       config->minChannels, MAX_CHANNELS);
        params->min_nchannels = config->minChannels;
    }
    if (config->maxChannels != CHORUS_CONFIG_UNDEF_INT) {
        if (config->maxChannels < 1 || config->maxChannels > MAX_CHANNELS)
            return ERR(chorusInvalidArgument, SUB_INIT, "config->maxChannels=%d: allowed 1..%d",
                       config->maxChannels, MAX_CHANNELS);
        params->max_nchannels = config->maxChannels;
    }
    if (config->size >= offsetof(chorusConfig_t, netName) + sizeof(config->netName) &&
        config->netName != NULL) {
        if (strcasecmp(config->netName, "IB") != 0 && strcasecmp(config->netName, "Socket") != 0)
            return ERR(chorusInvalidArgument, SUB_INIT,
                       "config->netName=\"%s\" names no net plugin (IB or Socket; NULL: "
                       "automatic)",
                       config->netName);
        snprintf(params->net, sizeof(params->net), "%s", config->netName);
    }
    if (params->min_nchannels > params->max_nchannels)
        return ERR(chorusInvalidArgument, SUB_INIT, "minChannels %lld is above maxChannels %lld",
                   (long long)params->min_nchannels, (long long)params->max_nchannels);
    return chorusSuccess;
}

static chorusResult_t check_fifo_params(const params_t *p)
{
    int64_t slot = p->buffsize / p->steps, p2p_slot = p->p2p_buffsize / p->steps;
    if (slot < 64 || slot % 64 != 0 || p2p_slot < 64 || p2p_slot % 64 != 0)
        return ERR(chorusInvalidArgument, SUB_ENV,
                   "CHORUS_BUFFSIZE=%lld and CHORUS_P2P_BUFFSIZE=%lld must each split into "
                   "CHORUS_STEPS=%lld slots that are multiples of 64 bytes",
                   (long long)p->buffsize, (long long)p->p2p_buffsize, (long long)p->steps);
    return chorusSuccess;
}

/* Build rings and connect every channel's ends. */
static chorusResult_t setup_channels(chorusComm_t comm)
{
    int n = comm->nranks;
    if (n < 1) /* checked by every init entry; said again for the sizes below */
        return ERR(chorusInternalError, SUB_INIT, "nranks=%d", n);
    int *host_of = comm->host_of = malloc(sizeof(int) * n);
    int *nlocal = calloc(n, sizeof(int));
    conn_req_t *reqs = malloc(sizeof(conn_req_t) * 2 * MAX_CHANNELS);
    chorusResult_t res = chorusSuccess;
    if (host_of == NULL || reqs == NULL || nlocal == NULL) {
        res = ERR(chorusSystemError, SUB_INIT, "out of memory");
        goto out;
    }
    int nhosts = 0;
    for (int r = 0; r < n; r++) {
        host_of[r] = -1;
        for (int q = 0; q < r && host_of[r] < 0; q++)
            if (comm->peers[q].hostid_hash == comm->peers[r].hostid_hash)
                host_of[r] = host_of[q];
        if (host_of[r] < 0)
            host_of[r] = nhosts++;
        if (++nlocal[host_of[r]] > comm->max_local)
            comm->max_local = nlocal[host_of[r]];
    }
    /* Ranks per physical machine (hosts may be simulated with CHORUS_HOSTID): for the tuner. */
    for (int r = 0; r < n; r++) {
        int same = 0;
        for (int q = 0; q < n; q++)
            same += comm->peers[q].machine_hash == comm->peers[r].machine_hash;
        if (same > comm->machine_ranks)
            comm->machine_ranks = same;
    }
    comm->nhosts = nhosts;
    CHECK_GOTO(channels_alike(comm, nhosts), res, out);
    comm->cuda_direct = cuda_dev_decide(comm);
    comm->nchannels = channels_built(&comm->peers[comm->rank], nhosts);
    int nreq = 0;
    size_t slot = (size_t)(comm->params.buffsize / comm->params.steps);
    for (int c = 0; c < comm->nchannels; c++) {
        channel_t *ch = &comm->channels[c];
        CHECK_GOTO(graph_build_ring(n, comm->rank, host_of, &ch->ring), res, out);
        CHECK_GOTO(graph_build_tree(n, comm->rank, host_of, c % 2, -1, &ch->tree), res, out);
        log_graph(comm, c);
        if (n == 1)
            continue;
        int next = ch->ring.ranks[(ch->ring.index + 1) % n];
        int prev = ch->ring.ranks[(ch->ring.index - 1 + n) % n];
        reqs[nreq++] = (conn_req_t){CONN_SEND, next, c, slot, &ch->send, NULL};
        reqs[nreq++] = (conn_req_t){CONN_RECV, prev, c, slot, &ch->recv, NULL};
    }
    CHECK_GOTO(comm_connect(comm, reqs, nreq), res, out);
    INFO(SUB_INIT, "%d ranks on %d host(s), %d channel(s), FIFO %lld x %zu bytes", n, nhosts,
         comm->nchannels, (long long)comm->params.steps, slot);
out:
    free(nlocal);
    free(reqs);
    return res;
}

/* All-to-alls of up to this many bytes a rank (its whole input) run through the direct windows
 * where the machine's ranks outnumber its cores (enqueue.c, run_alltoall): there a rank that
 * waits in the send/recv loop yields to whatever runs, where the windows' waits ask their gate.
 * 2 vCPUs (AMD VM, 2026-12-06), `alltoall_perf -w 50 -n 500`, the loop against the windows, two
 * alternated runs each: 4 ranks 64 B-1 KiB 10.9-12.4 us against 6.3-8.1, 64 KiB 17.9-19.1
 * against 13.9-16.8, 1 MiB 134-182 against 128-159, 4 MiB 645-794 against 593-610, 16 MiB
 * 3180-3599 against 3550-3646; 8 ranks (-w 20 -n 200) 256 B 40-43 against 29-30, 1 MiB 456-496
 * against 363-425, 4 MiB 2027-2337 against 2029-2443; 3 ranks even up to 384 KiB, 1.5 MiB
 * 156-182 against 198-199. With a core a rank (2 ranks) neither won over three rounds (64 B
 * 0.13-0.47 us against 0.18-0.43, as the machine went), so the loop stays there. */
#define ALLTOALL_OVER_MAX (1 << 20)

/* A zero-copy vote's threshold: 0 (never) stays; anything else is at least floor. */
static int64_t zc_floor(int64_t value, int64_t floor)
{
    return value > 0 && value < floor ? floor : value;
}

/* A setting where the machine's ranks outnumber its cores (over): over_value, unless the
 * variable name is set (then as set). */
static int64_t unless_set(const char *name, int64_t value, int over, int64_t over_value)
{
    const char *set = params_raw(name);
    return over && (set == NULL || set[0] == '\0') ? over_value : value;
}

/* The tuner sees ranks, hosts and the slowest link the net plugin reports. */
static chorusResult_t setup_tuner(chorusComm_t comm)
{
    tune_topo_t t = {.nranks = comm->nranks,
                     .nhosts = comm->nhosts,
                     .max_local = comm->max_local,
                     .max_channels = comm->nchannels,
                     .host_cores = comm->topo != NULL ? CPU_COUNT(&comm->topo->cpus) : 0,
                     .machine_ranks = comm->machine_ranks,
                     .slice_nbytes = (size_t)(comm->params.buffsize / comm->params.steps),
                     .direct_nbytes = (size_t)comm->params.direct_buffsize,
                     .direct_zc_min = comm->params.zcopy ? (size_t)comm->params.zcopy_min : 0};
    transport_net_speed(&comm->tc, &t.net_gbps, &t.net_latency_us);
    /* Cores a host's ranks share: the union of their bindings (mpirun binds each of 2 ranks to
     * its own core; the host still has both for the two). */
    if (comm->topo != NULL) {
        cpu_set_t *sets = calloc((size_t)comm->nranks, sizeof(cpu_set_t));
        if (sets == NULL)
            return ERR(chorusSystemError, SUB_TUNING, "out of memory");
        sets[comm->rank] = comm->topo->cpus;
        chorusResult_t r = boot_allgather(comm->boot, sets, sizeof(cpu_set_t));
        if (r != chorusSuccess) {
            free(sets);
            return r;
        }
        int fewest = 0;
        for (int h = 0; h < comm->nhosts; h++) {
            cpu_set_t u;
            CPU_ZERO(&u);
            for (int r2 = 0; r2 < comm->nranks; r2++)
                if (comm->host_of[r2] == h)
                    CPU_OR(&u, &u, &sets[r2]);
            int k = CPU_COUNT(&u);
            if (k > 0 && (fewest == 0 || k < fewest))
                fewest = k;
        }
        free(sets);
        t.host_cores = fewest;
    }
    /* Every rank must pick the same algorithm for a call, so the model's machine-dependent
     * inputs are agreed on: the fewest cores, the slowest link, the longest latency. A rank whose
     * ring neighbours are all local has no net state (0: unknown) and takes the others' word;
     * before this, such a rank assumed 10 Gbit/s where its peers knew 1, picked another
     * algorithm at 16 MiB, and the job hung (2 hosts x 4 ranks). The same exchange agrees on
     * whether device buffers go GPU to GPU (each rank can tell only which GPUs it can open). */
    enum { NAGREE = 6 };
    int64_t *all = calloc((size_t)comm->nranks * NAGREE, sizeof(int64_t));
    if (all == NULL)
        return ERR(chorusSystemError, SUB_TUNING, "out of memory");
    int64_t *mine = all + NAGREE * comm->rank;
    mine[0] = t.host_cores;
    mine[1] = (int64_t)(t.net_gbps * 1000.0);
    mine[2] = (int64_t)(t.net_latency_us * 1000.0);
    mine[3] = window_possible(comm); /* direct algorithms: only where every rank can map */
    /* Device buffers GPU to GPU: only where every rank can open every other's GPU memory. */
    int cant_reach = -1;
    mine[4] = comm->cuda_direct && cuda_dev_reachable(comm, &cant_reach);
    mine[5] = cant_reach;
    chorusResult_t res = boot_allgather(comm->boot, all, NAGREE * sizeof(int64_t));
    for (int r = 0; res == chorusSuccess && r < comm->nranks; r++) {
        const int64_t *v = all + NAGREE * r;
        if (comm->cuda_direct && !v[4]) {
            if (r != comm->rank && v[5] >= 0)
                INFO(SUB_INIT,
                     "rank %d cannot open rank %lld's GPU memory: device-buffer collectives "
                     "stage through host memory",
                     r, (long long)v[5]);
            else if (r != comm->rank)
                INFO(SUB_INIT,
                     "rank %d cannot run device-buffer collectives GPU to GPU (its CUDA driver "
                     "or device): they stage through host memory",
                     r);
            comm->cuda_direct = 0;
        }
        if (v[3] < mine[3])
            mine[3] = v[3];
        if (v[0] > 0 && (mine[0] == 0 || v[0] < mine[0]))
            mine[0] = v[0];
        if (v[1] > 0 && (mine[1] == 0 || v[1] < mine[1]))
            mine[1] = v[1];
        if (v[2] > mine[2])
            mine[2] = v[2];
    }
    t.host_cores = (int)mine[0];
    t.net_gbps = (double)mine[1] / 1000.0;
    t.net_latency_us = (double)mine[2] / 1000.0;
    t.direct = (int)mine[3];
    free(all);
    /* Where the machine's ranks outnumber its cores, unless the variable is set: waits yield
     * almost at once, and the direct algorithms' waits ask their gate from the first poll (a
     * rank they wait for is then often one not running: on this CPU, or parked on the other;
     * 4 ranks on 2 cores, 8 B all-reduce 6.2-6.7 us against 6.7-7.1 with 16 polls of 18 ns
     * first); no all-gather's streamed window pieces (comm->over, window.c); no
     * all-reduce zero-copy vote (16-64 MiB: 0.90-1.42x of the ring, run
     * to run). The broadcast and reduce-scatter votes stay on: 4 ranks on 2 cores, out of place,
     * broadcast 1-4 MiB 68-251 us against 87-474, reduce-scatter 16 MiB 1376-1496 against
     * 2475-2731 (commit ba5b48e). No all-gather push vote either: its flag round cost malloc'd
     * all-gathers a hand-over each (4 ranks, 256 KiB 33-35 us against 27-31, 4 MiB 369-377
     * against 331-354, three alternated rounds), more than the push gained with chorusMemAlloc
     * outputs below 1 MiB. */
    int over = t.host_cores > 0 && comm->machine_ranks > t.host_cores;
    comm->over = over;
    const params_t *pa = &comm->params;
    comm->spin = unless_set("CHORUS_SPIN", pa->spin, over, pa->spin > 16 ? 16 : pa->spin);
    comm->direct_spin = unless_set("CHORUS_SPIN", pa->spin, over, 0);
    /* Streaming stores from CHORUS_NT_MIN_BYTES here too. They were off where ranks outnumber
     * the cores (4 ranks, 2 cores, 64 MiB broadcast: 18.6-19.8 ms streamed against 11.7-12.9,
     * an earlier library); on the AMD VM of 2026-12-07, 4 ranks, CHORUS_NT_MIN_BYTES=64M against
     * 0, alternated rounds of P_perf -b 16M -e 256M -f 4 -w 1 -n 5 (medians): all-reduce 64 MiB
     * 35.7 ms against 50.9, 256 MiB 143.5 against 205.6 (six rounds); broadcast 64 MiB 13.1
     * against 16.5, 256 MiB 53.2 against 63.2; all-gathers even (four rounds), reduce-scatters
     * even (64 MiB 21.5 against 24.1, 256 MiB 87.7 against 97.0, six rounds). */
    comm->nt_min = pa->nt_min_bytes;
    /* The votes' thresholds start at CHORUS_ZCOPY_MIN: below it no input is read in place. */
    comm->zc_allreduce_min = zc_floor(
        unless_set("CHORUS_ZCOPY_ALLREDUCE_MIN", pa->zcopy_allreduce_min, over, 0), pa->zcopy_min);
    comm->zc_broadcast_min = zc_floor(pa->zcopy_broadcast_min, pa->zcopy_min);
    comm->zc_reducescatter_min = zc_floor(pa->zcopy_reducescatter_min, pa->zcopy_min);
    comm->zc_allgather_min =
        unless_set("CHORUS_ZCOPY_ALLGATHER_MIN", pa->zcopy_allgather_min, over, 0);
    comm->zc_arpush_min =
        unless_set("CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN", pa->zcopy_allreduce_push_min, over, 0);
    comm->alltoall_direct_max =
        unless_set("CHORUS_ALLTOALL_DIRECT_MAX", pa->alltoall_direct_max, over, ALLTOALL_OVER_MAX);
    comm->cma_adapt = params_raw("CHORUS_CMA_MIN") == NULL
                          ? unless_set("CHORUS_CMA_ADAPT", pa->cma_adapt, over, 0)
                          : 0;
    /* Where ranks share a core, the reader of a slot often shares the writer's caches too. */
    comm->slot_adapt =
        comm->nhosts == 1 ? unless_set("CHORUS_SLOT_ADAPT", pa->slot_adapt, over, 0) : 0;
    slot_adapt_init(&comm->slot_plan, comm->slot_adapt == 2, 100);
    /* The window's plan times a rank's own copies (enqueue.c run_direct). A plain copy over lines
     * a peer has read cost 1.0-1.2x a private one where the cores hand lines back cheaply and
     * 5-24x where they do not; a streamed one 1.3-1.8x in both (take_back, 64 KiB-1 MiB). What
     * the copy's time leaves out, the readers' reads from memory instead of a cache, cost 4 ranks
     * on 2 cores 1.3-1.5x in all-reduces of 128 KiB-2 MiB where plain stores did not collapse:
     * streaming is kept only where it times at most WIN_STREAM_PCT percent of plain. */
    comm->win_adapt = comm->nhosts == 1 ? pa->window_adapt : 0;
    slot_adapt_init(&comm->win_plan, comm->win_adapt == 2, WIN_STREAM_PCT);
    CHECK(res);
    if (t.direct)
        CHECK(settings_alike_direct(comm));
    CHECK(tune_init(&t, comm->params.algo, comm->params.proto, &comm->tuner));
    if (comm->rank == 0)
        tune_log(&comm->tuner);
    return chorusSuccess;
}

/* Read the host's topology: an error when CHORUS_TOPO_FILE names a file that fails, else a
 * warning (a communicator works without it: no proxy binding, no device list). */
static chorusResult_t setup_topo(chorusComm_t comm)
{
    chorusResult_t res = topo_load(&comm->params, &comm->topo);
    if (res == chorusSuccess || comm->params.topo_file[0] != '\0')
        return res;
    WARN(SUB_GRAPH, "host topology unavailable (%s); continuing without it", debug_last_error());
    comm->topo = NULL;
    return chorusSuccess;
}

chorusResult_t comm_init(chorusComm_t *comm_p, int nranks, const boot_id_t *id, int rank,
                         const chorusConfig_t *config)
{
    chorusResult_t res;
    debug_set_rank(rank);
    CHECK(debug_init());
    fifo_fence_setup(); /* off the first call's path (registers for membarrier) */
    /* Page-aligned: the fields every call reads fill part of one page (comm.h). */
    chorusComm_t comm = NULL;
    if (posix_memalign((void **)&comm, 4096, sizeof(*comm)) != 0)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    memset(comm, 0, sizeof(*comm));
    comm->magic = COMM_MAGIC;
    comm->rank = rank;
    comm->nranks = nranks;
    pthread_mutex_init(&comm->state_lock, NULL);
    CHECK_GOTO(params_load(&comm->params), res, err);
    CHECK_GOTO(apply_config(&comm->params, config), res, err);
    CHECK_GOTO(check_fifo_params(&comm->params), res, err);
    comm->timeout_ms = comm->params.timeout_ms;
    if (comm->params.nchannels > 0) {
        comm->nchannels = (int)comm->params.nchannels;
        comm->nchannels_forced = 1;
    } else {
        comm->nchannels = 1;
    }
    if (comm->nchannels < comm->params.min_nchannels)
        comm->nchannels = (int)comm->params.min_nchannels;
    if (comm->nchannels > comm->params.max_nchannels)
        comm->nchannels = (int)comm->params.max_nchannels;

    /* One deadline for the whole of init: a missing or dead rank fails it within the timeout. */
    int64_t init_deadline = fifo_now_ns() + comm->timeout_ms * 1000000;
    CHECK_GOTO(boot_init(id, rank, nranks, comm->params.socket_ifname, comm->timeout_ms,
                         init_deadline, &comm->abort_flag, health_control, comm, &comm->boot),
               res, err);
    boot_set_deadline(comm->boot, init_deadline);
    comm->peers = calloc(nranks, sizeof(peer_info_t));
    comm->p2p_send = calloc(nranks, sizeof(comm_conn_t));
    comm->p2p_recv = calloc(nranks, sizeof(comm_conn_t));
    comm->sr_send = calloc(nranks, sizeof(comm_conn_t));
    comm->sr_recv = calloc(nranks, sizeof(comm_conn_t));
    if (comm->peers == NULL || comm->p2p_send == NULL || comm->p2p_recv == NULL ||
        comm->sr_send == NULL || comm->sr_recv == NULL) {
        res = ERR(chorusSystemError, SUB_INIT, "out of memory for %d ranks", nranks);
        goto err;
    }
    comm->tc = (transport_comm_t){.params = &comm->params,
                                  .abort_flag = &comm->abort_flag,
                                  .timeout_ms = comm->timeout_ms,
                                  .rank = rank};
    CHECK_GOTO(setup_topo(comm), res, err);
    comm->tc.topo = comm->topo;
    fill_peer_info(comm, &comm->peers[rank]);
    CHECK_GOTO(boot_allgather(comm->boot, comm->peers, sizeof(peer_info_t)), res, err);
    for (int r = 0; r < nranks; r++)
        if (comm->peers[r].rank != r) {
            res = ERR(chorusInternalError, SUB_INIT, "peer info of rank %d says rank %d", r,
                      comm->peers[r].rank);
            goto err;
        }
    CHECK_GOTO(settings_alike(comm), res, err);
    CHECK_GOTO(setup_channels(comm), res, err);
    CHECK_GOTO(setup_tuner(comm), res, err);
    CHECK_GOTO(window_connect(comm), res, err); /* where the direct algorithms can run */
    CHECK_GOTO(exec_pool_create(comm->nchannels - 1, &comm->pool), res, err);
    CHECK_GOTO(boot_barrier(comm->boot), res, err);
    boot_set_deadline(comm->boot, 0);
    INFO(SUB_INIT, "communicator ready: rank %d of %d, pid %d, host %s", rank, nranks,
         (int)getpid(), comm->peers[rank].hostid);
    CHECK_GOTO(comm_register(comm), res, err);
    *comm_p = comm;
    return chorusSuccess;
err:
    comm_free(comm);
    return res;
}

void comm_free(chorusComm_t comm)
{
    if (comm == NULL)
        return;
    comm_unregister(comm, 0); /* no-op unless still registered (Abort unregisters first) */
    exec_pool_destroy(comm->pool);
    /* A rank's last operation returns once its data is in its FIFOs; over net the proxy may still
     * be sending it. Closing now would cut the peer off (it saw "peer closed"). */
    transport_comm_drain(&comm->tc, comm->timeout_ms < 30000 ? comm->timeout_ms : 30000);
    for (int c = 0; c < MAX_CHANNELS; c++) {
        comm_conn_close(&comm->channels[c].send);
        comm_conn_close(&comm->channels[c].recv);
        comm_conn_close(&comm->channels[c].tree_up_send);
        comm_conn_close(&comm->channels[c].tree_down_recv);
        for (int i = 0; i < TREE_MAX_DOWN; i++) {
            comm_conn_close(&comm->channels[c].tree_up_recv[i]);
            comm_conn_close(&comm->channels[c].tree_down_send[i]);
        }
        graph_free_ring(&comm->channels[c].ring);
    }
    window_close(comm);
    cuda_stage_free(comm);
    cuda_dev_free(comm);
    for (int r = 0; comm->p2p_send && comm->p2p_recv && r < comm->nranks; r++) {
        comm_conn_close(&comm->p2p_send[r]);
        comm_conn_close(&comm->p2p_recv[r]);
    }
    for (int r = 0; comm->sr_send && comm->sr_recv && r < comm->nranks; r++) {
        comm_conn_close(&comm->sr_send[r]);
        comm_conn_close(&comm->sr_recv[r]);
    }
    transport_comm_free(&comm->tc);
    topo_free(comm->topo);
    free(comm->host_of);
    boot_close(comm->boot);
    free(comm->peers);
    free(comm->p2p_send);
    free(comm->p2p_recv);
    free(comm->sr_send);
    free(comm->sr_recv);
    scratch_free(&comm->exec_scratch);
    scratch_free(&comm->p2p_scratch);
    pthread_mutex_destroy(&comm->state_lock);
    comm->magic = COMM_DEAD_MAGIC;
    free(comm);
}

chorusResult_t chorusGetUniqueId(chorusUniqueId *uniqueId)
{
    debug_clear_error();
    CHECK(debug_init());
    if (uniqueId == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusGetUniqueId: uniqueId is NULL");
    params_t p;
    CHECK(params_load(&p));
    boot_id_t id;
    CHECK(boot_new_id(p.socket_ifname, p.timeout_ms, &id));
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId->internal, &id, sizeof(id));
    return chorusSuccess;
}

chorusResult_t config_check(const chorusConfig_t *config)
{
    params_t p;
    CHECK(params_load(&p));
    CHECK(apply_config(&p, config));
    return check_fifo_params(&p);
}

/* Inside a group: the checks init makes before it connects, then the init held for
 * chorusGroupEnd (group.c). */
static chorusResult_t init_rank_held(chorusComm_t *comm, int nranks, const boot_id_t *id, int rank,
                                     const chorusConfig_t *config)
{
    CHECK(debug_init());
    if (id->magic != BOOT_MAGIC)
        return ERR(chorusInvalidArgument, SUB_BOOT,
                   "commId is not a Chorus unique id (bad magic): was it made by "
                   "chorusGetUniqueId and carried intact to every rank?");
    CHECK(config_check(config));
    group_init_t gi;
    memset(&gi, 0, sizeof(gi));
    gi.comm_p = comm;
    gi.nranks = nranks;
    gi.rank = rank;
    gi.dev = CHORUS_HAVE_CUDA ? cuda_current_device() : -1;
    gi.id = *id;
    group_init_keep_config(&gi, config);
    CHECK(group_add_init(&gi));
    *comm = NULL;
    return chorusSuccess;
}

void group_init_keep_config(group_init_t *gi, const chorusConfig_t *config)
{
    if (config == NULL)
        return;
    /* config_check took its size: at least up to netName; later fields keep their defaults. */
    gi->has_config = 1;
    gi->config = (chorusConfig_t)CHORUS_CONFIG_INITIALIZER;
    memcpy(&gi->config, config,
           config->size < sizeof(gi->config) ? config->size : sizeof(gi->config));
    gi->config.size = sizeof(gi->config);
}

void group_init_run(group_init_t *gi)
{
    const chorusConfig_t *config = gi->has_config ? &gi->config : NULL;
    init_all_dev = gi->dev;
    if (gi->parent != NULL) {
        /* Destroyed or aborted since the call? (The registry's look; no read of its memory.) */
        gi->res = comm_check(gi->parent, "chorusCommSplit (held by the group)");
        if (gi->res == chorusSuccess)
            gi->res = comm_split(gi->parent, gi->color, gi->key, gi->comm_p, config);
    } else
        gi->res = comm_init(gi->comm_p, gi->nranks, &gi->id, gi->rank, config);
    init_all_dev = -1;
    if (gi->res != chorusSuccess)
        snprintf(gi->error, sizeof(gi->error), "%s", debug_last_error());
}

static chorusResult_t init_rank_checked(chorusComm_t *comm, int nranks, chorusUniqueId commId,
                                        int rank, chorusConfig_t *config)
{
    debug_clear_error();
    if (comm == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "comm (the output pointer) is NULL");
    if (nranks < 1)
        return ERR(chorusInvalidArgument, SUB_INIT, "nranks=%d: must be at least 1", nranks);
    if (rank < 0 || rank >= nranks)
        return ERR(chorusInvalidArgument, SUB_INIT, "rank=%d is outside 0..%d (nranks-1)", rank,
                   nranks - 1);
    boot_id_t id;
    memcpy(&id, commId.internal, sizeof(id));
    if (group_active())
        return init_rank_held(comm, nranks, &id, rank, config);
    return comm_init(comm, nranks, &id, rank, config);
}

chorusResult_t chorusCommInitRank(chorusComm_t *comm, int nranks, chorusUniqueId commId, int rank)
{
    return init_rank_checked(comm, nranks, commId, rank, NULL);
}

chorusResult_t chorusCommInitRankConfig(chorusComm_t *comm, int nranks, chorusUniqueId commId,
                                        int rank, chorusConfig_t *config)
{
    return init_rank_checked(comm, nranks, commId, rank, config);
}

/* chorusCommInitAll's threads start initializing only once all of them exist: where one cannot
 * be made, the others return at once rather than wait their whole deadline for its rank. */
typedef struct init_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int state; /* 0: wait; 1: go; 2: give up */
} init_gate_t;

typedef struct init_all_arg {
    chorusComm_t *comm_p;
    int nranks, rank;
    int dev; /* devlist[rank], the caller's current device, or -1 */
    boot_id_t id;
    init_gate_t *gate;
    chorusResult_t res;
    char error[1024];
} init_all_arg_t;

static void init_gate_set(init_gate_t *g, int state)
{
    pthread_mutex_lock(&g->lock);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->lock);
}

static void *init_all_thread(void *arg)
{
    init_all_arg_t *a = arg;
    pthread_mutex_lock(&a->gate->lock);
    while (a->gate->state == 0)
        pthread_cond_wait(&a->gate->cv, &a->gate->lock);
    int go = a->gate->state == 1;
    pthread_mutex_unlock(&a->gate->lock);
    if (!go) {
        a->res = chorusSystemError; /* the caller reports why */
        return NULL;
    }
    init_all_dev = a->dev;
    a->res = comm_init(a->comm_p, a->nranks, &a->id, a->rank, NULL);
    init_all_dev = -1;
    if (a->res != chorusSuccess)
        snprintf(a->error, sizeof(a->error), "%s", debug_last_error());
    return NULL;
}

chorusResult_t chorusCommInitAll(chorusComm_t *comms, int ndev, const int *devlist)
{
    debug_clear_error();
    CHECK(debug_init());
    if (comms == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommInitAll: comms is NULL");
    if (ndev < 1)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommInitAll: ndev=%d must be >= 1",
                   ndev);
    if (devlist != NULL && !CHORUS_HAVE_CUDA)
        return ERR(chorusInvalidArgument, SUB_INIT,
                   "chorusCommInitAll: devlist names CUDA devices but this build of Chorus has "
                   "no CUDA support; pass devlist=NULL for host ranks");
    int ndevices = devlist != NULL ? cuda_device_count() : 0;
    if (devlist != NULL && ndevices < 0)
        return ERR(chorusInvalidArgument, SUB_INIT,
                   "chorusCommInitAll: devlist names CUDA devices but this process has not "
                   "initialized CUDA (call cudaSetDevice or cudaFree(0) first)");
    for (int i = 0; devlist != NULL && i < ndev; i++)
        if (devlist[i] < 0 || devlist[i] >= ndevices)
            return ERR(chorusInvalidArgument, SUB_INIT,
                       "chorusCommInitAll: devlist[%d]=%d is not a CUDA device (this process "
                       "sees %d: 0..%d)",
                       i, devlist[i], ndevices, ndevices - 1);
    /* Without a list every rank takes the caller's current device (its threads have none). */
    int caller = CHORUS_HAVE_CUDA ? cuda_current_device() : -1;
    chorusUniqueId uid;
    CHECK(chorusGetUniqueId(&uid));
    init_all_arg_t *args = calloc(ndev, sizeof(*args));
    pthread_t *threads = calloc(ndev, sizeof(*threads));
    if (args == NULL || threads == NULL) {
        free(args);
        free(threads);
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    chorusResult_t res = chorusSuccess;
    int started = 0;
    init_gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    for (int i = 0; i < ndev; i++) {
        comms[i] = NULL;
        args[i] = (init_all_arg_t){.comm_p = &comms[i],
                                   .nranks = ndev,
                                   .rank = i,
                                   .dev = devlist ? devlist[i] : caller,
                                   .gate = &gate};
        memcpy(&args[i].id, uid.internal, sizeof(boot_id_t));
        int rc = pthread_create(&threads[i], NULL, init_all_thread, &args[i]);
        if (rc != 0) {
            res = ERR(chorusSystemError, SUB_INIT,
                      "chorusCommInitAll: cannot start the thread of rank %d of %d "
                      "(pthread_create: %s): ask for fewer ranks, or raise the process's "
                      "thread or memory limits (ulimit -u, ulimit -v)",
                      i, ndev, strerror(rc));
            break;
        }
        started++;
    }
    init_gate_set(&gate, res == chorusSuccess ? 1 : 2);
    for (int i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
        if (args[i].res != chorusSuccess && res == chorusSuccess) { /* not when given up */
            res = args[i].res;
            ERR(res, SUB_INIT, "chorusCommInitAll: rank %d failed: %s", i, args[i].error);
        }
    }
    if (res != chorusSuccess)
        for (int i = 0; i < ndev; i++) {
            comm_free(comms[i]);
            comms[i] = NULL;
        }
    free(args);
    free(threads);
    return res;
}

/* host:port, [v6]:port */
static chorusResult_t parse_hostport(const char *var, const char *text, char *host, size_t len,
                                     int *port_p)
{
    const char *colon = strrchr(text, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (colon == NULL || colon == text || end == colon + 1 || *end != '\0' || port < 1 ||
        port > 65535)
        return ERR(chorusInvalidArgument, SUB_ENV,
                   "environment variable %s=\"%s\" is not host:port (port 1..65535)", var, text);
    size_t hl = (size_t)(colon - text);
    if (text[0] == '[' && hl >= 2 && text[hl - 1] == ']') {
        text++;
        hl -= 2;
    }
    if (hl >= len)
        return ERR(chorusInvalidArgument, SUB_ENV, "%s: host name too long", var);
    memcpy(host, text, hl);
    host[hl] = '\0';
    *port_p = (int)port;
    return chorusSuccess;
}

chorusResult_t chorusCommInitEnv(chorusComm_t *comm)
{
    debug_clear_error();
    CHECK(debug_init());
    if (comm == NULL)
        return ERR(chorusInvalidArgument, SUB_INIT, "chorusCommInitEnv: comm is NULL");
    int64_t rank = 0, nranks = 0, port = 0;
    int have_rank, have_nranks, have_port = 0;
    char host[256], root_text[300];
    CHECK(params_get_int("CHORUS_RANK", 0, 1 << 30, &rank, &have_rank));
    CHECK(params_get_int("CHORUS_NRANKS", 1, 1 << 30, &nranks, &have_nranks));
    const char *root = params_raw("CHORUS_ROOT");
    const char *rank_var = "CHORUS_RANK", *nranks_var = "CHORUS_NRANKS";
    if (have_rank || have_nranks || root != NULL) {
        if (!have_rank || !have_nranks || root == NULL || root[0] == '\0')
            return ERR(chorusInvalidArgument, SUB_ENV,
                       "chorusCommInitEnv needs all of CHORUS_RANK, CHORUS_NRANKS and "
                       "CHORUS_ROOT=host:port (found %s%s%s)",
                       have_rank ? "CHORUS_RANK " : "", have_nranks ? "CHORUS_NRANKS " : "",
                       root ? "CHORUS_ROOT" : "");
        int p = 0;
        CHECK(parse_hostport("CHORUS_ROOT", root, host, sizeof(host), &p));
        port = p;
    } else {
        rank_var = "RANK";
        nranks_var = "WORLD_SIZE";
        CHECK(params_get_int("RANK", 0, 1 << 30, &rank, &have_rank));
        CHECK(params_get_int("WORLD_SIZE", 1, 1 << 30, &nranks, &have_nranks));
        CHECK(params_get_int("MASTER_PORT", 1, 65535, &port, &have_port));
        const char *addr = params_raw("MASTER_ADDR");
        if (!have_rank || !have_nranks || !have_port || addr == NULL || addr[0] == '\0')
            return ERR(chorusInvalidArgument, SUB_ENV,
                       "chorusCommInitEnv: set CHORUS_RANK, CHORUS_NRANKS and CHORUS_ROOT, or "
                       "torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
        snprintf(host, sizeof(host), "%s", addr);
    }
    if (rank >= nranks)
        return ERR(chorusInvalidArgument, SUB_ENV, "%s=%lld is not below %s=%lld", rank_var,
                   (long long)rank, nranks_var, (long long)nranks);
    snprintf(root_text, sizeof(root_text), "%s:%lld", host, (long long)port);
    params_t p;
    CHECK(params_load(&p));
    boot_id_t id;
    memset(&id, 0, sizeof(id));
    id.magic = BOOT_MAGIC;
    CHECK(sock_resolve(host, (int)port, &id.root));
    /* Every rank must present the same secret; without a way to carry a random one, it comes
     * from CHORUS_SECRET or, failing that, from the job's own coordinates. */
    const char *secret = params_raw("CHORUS_SECRET");
    if (secret != NULL && secret[0] != '\0') {
        char *end = NULL;
        errno = 0;
        id.secret = strtoull(secret, &end, 16);
        if (errno != 0 || end == secret || *end != '\0')
            return ERR(chorusInvalidArgument, SUB_ENV,
                       "environment variable CHORUS_SECRET=\"%s\" is not a hex number", secret);
    } else {
        char buf[400];
        snprintf(buf, sizeof(buf), "%s/%lld", root_text, (long long)nranks);
        id.secret = fnv1a(buf, 0xcbf29ce484222325ull);
    }
    if (rank == 0) {
        /* Listen on the address CHORUS_ROOT names, never a wildcard: a job's root is not served
         * on interfaces nobody chose. */
        boot_id_t served;
        chorusResult_t res = boot_root_start(&id.root, id.secret, p.timeout_ms, &served);
        if (res != chorusSuccess) {
            char str[80];
            return ERR(res, SUB_ENV,
                       "rank 0 hosts the bootstrap root but cannot listen on %s (from %s=%s): set "
                       "it to an address of rank 0's own host, and check that the port is free",
                       sock_addr_str(&id.root, str, sizeof(str)),
                       rank_var[0] == 'C' ? "CHORUS_ROOT" : "MASTER_ADDR:MASTER_PORT", root_text);
        }
    }
    return comm_init(comm, (int)nranks, &id, (int)rank, NULL);
}
