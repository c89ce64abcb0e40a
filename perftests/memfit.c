/*
 * memfit.c: the largest -e this host's memory holds, as nccl-tests lowers maxBytes ("Reducing
 * maxBytes to ... due to memory limitation"): the least of MemAvailable, the memory cgroup's room
 * and RLIMIT_DATA, shared by the ranks on this host, over the buffers a rank allocates.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "chorus_mpi.h"
#include "ctx.h"

/* Ranks on this host (this one included): their buffers share its memory. Told by host name. */
static int perf_local_ranks(void)
{
    perf_ctx_t *ctx = &perf_ctx;
    size_t len = sizeof(ctx->host);
    char *hosts = calloc((size_t)ctx->nranks, len);
    int nlocal = 0;
    if (hosts == NULL) {
        perf_fail("calloc(host names)", chorusSystemError, __FILE__, __LINE__);
    }
    if (ctx->init == PERF_INIT_MPI) {
        MPI_Allgather(ctx->host, (int)len, MPI_CHAR, hosts, (int)len, MPI_CHAR, MPI_COMM_WORLD);
    } else {
        PERF_CHECK(chorusAllGather(ctx->host, hosts, len, chorusInt8, ctx->comm, NULL));
    }
    for (int r = 0; r < ctx->nranks; r++) {
        nlocal += strncmp(hosts + (size_t)r * len, ctx->host, len) == 0;
    }
    free(hosts);
    return nlocal > 0 ? nlocal : 1;
}

/* The number in the first line of path (a /proc or cgroup file), after prefix where the file has
 * several lines of "Name: value" (/proc/meminfo); -1 where there is none ("max": no limit). */
static long long perf_read_number(const char *path, const char *prefix)
{
    char line[256];
    long long v = -1;
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        size_t n = prefix != NULL ? strlen(prefix) : 0;
        if (n == 0 || strncmp(line, prefix, n) == 0) {
            char *end;
            v = strtoll(line + n, &end, 10);
            v = end == line + n ? -1 : v;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return v;
}

/* Bytes the memory cgroup of this process and its ancestors can still take (cgroup v2
 * memory.max - memory.current, v1 memory.limit_in_bytes - memory.usage_in_bytes, the least over
 * the levels that set a limit), or -1 where none is set or seen. A container's OOM killer acts
 * at its cgroup's limit, which /proc/meminfo does not show. */
static long long perf_cgroup_room(void)
{
    char line[512], path[1024];
    long long room = -1;
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        /* "0::/path" (v2) or "N:a,memory,b:/path" (v1) */
        char *ctrl = strchr(line, ':'), *rel = ctrl != NULL ? strchr(ctrl + 1, ':') : NULL;
        int v2 = ctrl != NULL && ctrl[1] == ':', v1_memory = 0;
        if (rel == NULL) {
            continue;
        }
        *rel = '\0'; /* the controllers field alone */
        v1_memory = strstr(ctrl + 1, "memory") != NULL;
        *rel = ':';
        if (!v2 && !v1_memory) {
            continue;
        }
        rel[strcspn(rel, "\n")] = '\0';
        for (char *cut = rel + 1;;) {
            const char *base = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
            long long limit, used;
            snprintf(path, sizeof(path), "%s/%s/%s", base, rel + 1,
                     v2 ? "memory.max" : "memory.limit_in_bytes");
            limit = perf_read_number(path, NULL);
            snprintf(path, sizeof(path), "%s/%s/%s", base, rel + 1,
                     v2 ? "memory.current" : "memory.usage_in_bytes");
            used = perf_read_number(path, NULL);
            /* v1 writes "no limit" as a huge number (2^63 rounded down to a page) */
            if (limit >= 0 && limit < (1LL << 62) && used >= 0) {
                long long left = limit > used ? limit - used : 0;
                room = room < 0 || left < room ? left : room;
            }
            if ((cut = strrchr(rel + 1, '/')) == NULL) {
                if (rel[1] == '\0') {
                    break;
                }
                rel[1] = '\0'; /* the root of the hierarchy last */
            } else {
                *cut = '\0';
            }
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return room;
}

/*
 * nccl-tests' memory limit (it lowers maxBytes to fit the GPU's memory, less 1 GiB): the largest
 * maxbytes whose nbufs buffers fit this rank's share of memory. The share is the least of the
 * host's MemAvailable and the cgroup's room, each split between the nlocal ranks on this host,
 * and of RLIMIT_DATA less this process's data (ulimit -d: malloc's mmaps count there); of it,
 * min(1 GiB, a quarter) is left for the rest (the library's windows, MPI's own memory). SIZE_MAX
 * where nothing is known. *what_p says which limit it was.
 */
static size_t perf_mem_cap(int nbufs, int nlocal, const char **what_p)
{
    long long avail = perf_read_number("/proc/meminfo", "MemAvailable:");
    long long room = perf_cgroup_room();
    long long share = -1;
    struct rlimit rl;
    *what_p = "no limit known";
    if (avail >= 0) {
        share = avail * 1024 / nlocal; /* meminfo counts kB */
        *what_p = "MemAvailable of /proc/meminfo";
    }
    if (room >= 0 && (share < 0 || room / nlocal < share)) {
        share = room / nlocal;
        *what_p = "the memory cgroup's limit";
    }
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        long long data = perf_read_number("/proc/self/status", "VmData:");
        long long left = (long long)rl.rlim_cur - (data > 0 ? data * 1024 : 0);
        left = left > 0 ? left : 0;
        if (share < 0 || left < share) {
            share = left;
            *what_p = "RLIMIT_DATA (ulimit -d)";
        }
    }
    if (share < 0) {
        return SIZE_MAX;
    }
    share -= share / 4 < (1LL << 30) ? share / 4 : (1LL << 30);
    /* perf_main allocates maxbytes + 64 bytes a buffer */
    return (size_t)share / (size_t)nbufs > 64 ? (size_t)share / (size_t)nbufs - 64 : 0;
}

/*
 * nccl-tests lowers maxBytes to what memory holds ("Reducing maxBytes to ... due to memory
 * limitation"); without it a too large -e had the kernel's OOM killer end a rank in perf_alloc,
 * with no message. The buffers a rank allocates: send and receive, expected with -c, --rewrite's
 * copy of the input, and one for the peer's temporaries with --compare (Open MPI's large
 * reductions allocate one of the message's size a call); every rank on the host allocates as
 * many. All ranks take the least cap, so they sweep the same sizes. 0, or -1 (printed) when even
 * -b does not fit.
 */
int perf_fit_memory(perf_ctx_t *ctx)
{
    perf_opts_t *o = &ctx->o;
    int nbufs = 2 + (o->check > 0) + (o->rewrite != 0) + (o->compare_mpi != 0);
    int nlocal = perf_local_ranks();
    const char *what;
    size_t cap = perf_min_size(perf_mem_cap(nbufs, nlocal, &what));
    if (cap >= o->maxbytes) {
        return 0;
    }
    PERF_PRINT("#\n# Reducing maxBytes to %zu due to memory limitation (-e %zu: %d buffers a rank: "
               "send, receive%s%s%s; %d rank%s on this host; rank 0 bound by %s)\n",
               cap, o->maxbytes, nbufs, o->check > 0 ? ", expected" : "",
               o->rewrite ? ", --rewrite's copy" : "",
               o->compare_mpi ? ", the peer's temporaries" : "", nlocal, nlocal > 1 ? "s" : "",
               what);
    if (cap < o->minbytes) {
        PERF_PRINT("not enough memory for -b %zu: %d buffers a rank of at most %zu bytes fit "
                   "(lower -b%s)\n",
                   o->minbytes, nbufs, cap, o->check > 0 ? ", or -c 0 for one buffer less" : "");
        return -1;
    }
    o->maxbytes = cap;
    return 0;
}
