/*
 * gloo_store.c: --compare gloo's rendezvous: a file store in a directory rank 0 makes under
 * TMPDIR (or /tmp), which every rank of this host reads; removed once Gloo is closed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus_mpi.h"
#include "ctx.h"
#include "peer_gloo.h"

/* --compare gloo: Gloo's rendezvous, a file store in a directory rank 0 makes (the ranks share
 * this host's /tmp, or TMPDIR); every rank connects, and all learn whether every one could. */
int perf_gloo_start(perf_ctx_t *ctx, char *dir, int dirlen)
{
    char err[PERF_LINE_BYTES] = "";
    int bad;
    memset(dir, 0, (size_t)dirlen);
    if (ctx->rank == 0) {
        const char *tmp =
            getenv("TMPDIR") != NULL && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
        snprintf(dir, (size_t)dirlen, "%s/chorus-gloo-XXXXXX", tmp);
        if (mkdtemp(dir) == NULL) {
            snprintf(err, sizeof(err), "cannot make a rendezvous directory under %s (set TMPDIR)",
                     tmp);
            dir[0] = '\0';
        }
    }
    MPI_Bcast(dir, dirlen, MPI_CHAR, 0, MPI_COMM_WORLD);
    bad = dir[0] == '\0' || perf_gloo_init(ctx->rank, ctx->nranks, dir, err, sizeof(err)) != 0;
    if (bad && (ctx->rank == 0 || dir[0] != '\0')) {
        fprintf(stderr, "%s: rank %d: --compare gloo: %s\n", ctx->host, ctx->rank, err);
    }
    return perf_sum_ll(bad) != 0 ? -1 : 0;
}

/* Gloo's context closed on every rank, then rank 0 removes the store's files and directory. */
void perf_gloo_stop(perf_ctx_t *ctx, const char *dir)
{
    DIR *d;
    struct dirent *e;
    char path[PERF_LINE_BYTES * 2];
    perf_gloo_finalize();
    MPI_Barrier(MPI_COMM_WORLD);
    if (ctx->rank != 0 || dir[0] == '\0' || (d = opendir(dir)) == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
    rmdir(dir);
}
