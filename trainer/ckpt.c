/*
 * ckpt.c: atomic checkpoint save and exact resume.
 *
 * File layout (little-endian, as the host writes it; checkpoints are not meant to cross
 * architectures):
 *
 *   ckpt_header_t (152 bytes) | params | buffers | optimizer m | optimizer v (AdamW) | crc32
 *
 * Counts are in the header; the trailing crc32 (zlib) covers everything before it, so a truncated
 * or damaged file is refused instead of resuming from garbage. Saving writes PATH.tmp.PID, fsyncs
 * it, renames it over PATH and fsyncs the directory: a crash at any point leaves either the old
 * checkpoint or the new one, never half of one.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt.h"

#define CKPT_MAGIC "CHTRAIN"
#define CKPT_VERSION 1

typedef struct ckpt_header {
    char magic[8]; /* "CHTRAIN\0" */
    uint32_t version;
    uint32_t optimizer; /* opt_kind_t */
    uint64_t nparams, nbuffers;
    int64_t epoch, step, global_step, opt_t;
    uint64_t seed;
    int32_t batch, accum, epochs, nsizes;
    int32_t sizes[CKPT_MAX_SIZES];
} ckpt_header_t;
_Static_assert(sizeof(ckpt_header_t) == 152, "checkpoint header layout");

/* The file's pieces in order: the header, then every array the optimizer has. */
typedef struct piece {
    void *p;
    size_t nbytes;
} piece_t;

static int pieces(ckpt_header_t *h, const model_t *m, const optim_t *o, piece_t *out)
{
    int n = 0;
    out[n++] = (piece_t){h, sizeof(*h)};
    out[n++] = (piece_t){m->params, m->nparams * sizeof(float)};
    out[n++] = (piece_t){m->buffers, m->nbuffers * sizeof(float)};
    out[n++] = (piece_t){o->m, o->m ? o->n * sizeof(float) : 0};
    out[n++] = (piece_t){o->v, o->v ? o->n * sizeof(float) : 0};
    return n;
}

static int write_all(int fd, const void *buf, size_t nbytes)
{
    const char *p = buf;
    while (nbytes > 0) {
        ssize_t k = write(fd, p, nbytes);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        nbytes -= (size_t)k;
    }
    return 0;
}

/* Bytes read, which is less than nbytes only at the end of the file; -1 on an error. */
static ssize_t read_all(int fd, void *buf, size_t nbytes)
{
    char *p = buf;
    size_t done = 0;
    while (done < nbytes) {
        ssize_t k = read(fd, p + done, nbytes - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

/* The directory entry of the rename must reach the disk too, or a crash could lose it. */
static int fsync_dir(const char *path)
{
    char copy[PATH_MAX];
    snprintf(copy, sizeof(copy), "%s", path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int ckpt_save(const char *path, const ckpt_meta_t *meta, const model_t *m, const optim_t *o,
              char *err, size_t errlen)
{
    ckpt_header_t h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, CKPT_MAGIC, sizeof(CKPT_MAGIC));
    h.version = CKPT_VERSION;
    h.optimizer = (uint32_t)o->kind;
    h.nparams = m->nparams;
    h.nbuffers = m->nbuffers;
    h.epoch = meta->epoch;
    h.step = meta->step;
    h.global_step = meta->global_step;
    h.opt_t = o->t;
    h.seed = meta->seed;
    h.batch = meta->batch;
    h.accum = meta->accum;
    h.epochs = meta->epochs;
    h.nsizes = meta->nsizes;
    memcpy(h.sizes, meta->sizes, sizeof(h.sizes));

    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    piece_t p[5];
    int n = pieces(&h, m, o, p);
    uLong crc = crc32(0L, Z_NULL, 0);
    const char *what = "write";
    for (int i = 0; i < n; i++) {
        if (p[i].nbytes == 0)
            continue;
        crc = crc32_z(crc, p[i].p, p[i].nbytes);
        if (write_all(fd, p[i].p, p[i].nbytes) != 0)
            goto err_unlink;
    }
    uint32_t crc32v = (uint32_t)crc;
    if (write_all(fd, &crc32v, sizeof(crc32v)) != 0)
        goto err_unlink;
    what = "fsync";
    if (fsync(fd) != 0)
        goto err_unlink;
    what = "close";
    if (close(fd) != 0) {
        fd = -1;
        goto err_unlink;
    }
    fd = -1;
    what = "rename";
    if (rename(tmp, path) != 0)
        goto err_unlink;
    if (fsync_dir(path) != 0) {
        snprintf(err, errlen, "%s: fsync of its directory: %s", path, strerror(errno));
        return -1;
    }
    return 0;

err_unlink:
    snprintf(err, errlen, "%s: %s: %s", tmp, what, strerror(errno));
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return -1;
}

int ckpt_load(const char *path, ckpt_meta_t *meta, model_t *m, optim_t *o, char *err, size_t errlen)
{
    ckpt_header_t h;
    piece_t want[5], scratch[5]; /* where the arrays go; where they are read to first */
    int n = 0;
    memset(scratch, 0, sizeof(scratch));
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    ssize_t got = read_all(fd, &h, sizeof(h));
    if (got != (ssize_t)sizeof(h) || memcmp(h.magic, CKPT_MAGIC, sizeof(CKPT_MAGIC)) != 0) {
        snprintf(err, errlen, "%s: not a chorus-train checkpoint (%s)", path,
                 got < 0 ? strerror(errno) : "bad magic or too short");
        goto err_close;
    }
    if (h.version != CKPT_VERSION) {
        snprintf(err, errlen, "%s: checkpoint version %u, this program reads %d", path, h.version,
                 CKPT_VERSION);
        goto err_close;
    }
    if (h.nparams != m->nparams || h.nbuffers != m->nbuffers || h.nsizes < 2 ||
        h.nsizes > CKPT_MAX_SIZES) {
        snprintf(err, errlen, "%s: holds a model of %llu parameters, this run's has %zu (--layers)",
                 path, (unsigned long long)h.nparams, m->nparams);
        goto err_close;
    }
    if (h.optimizer != (uint32_t)o->kind) {
        snprintf(err, errlen, "%s: was written with --optimizer %s, this run uses %s", path,
                 h.optimizer == OPT_SGD ? "sgd" : "adamw", o->kind == OPT_SGD ? "sgd" : "adamw");
        goto err_close;
    }
    /* Read into scratch copies first: on any failure the caller's model stays as it was. */
    n = pieces(&h, m, o, want);
    uLong crc = crc32_z(crc32(0L, Z_NULL, 0), (const Bytef *)&h, sizeof(h));
    for (int i = 1; i < n; i++) {
        scratch[i].nbytes = want[i].nbytes;
        if (want[i].nbytes == 0)
            continue;
        scratch[i].p = malloc(want[i].nbytes);
        if (scratch[i].p == NULL) {
            snprintf(err, errlen, "%s: no memory for %zu bytes", path, want[i].nbytes);
            goto err_free;
        }
        got = read_all(fd, scratch[i].p, want[i].nbytes);
        if (got != (ssize_t)want[i].nbytes) {
            snprintf(err, errlen, "%s: truncated (%s)", path,
                     got < 0 ? strerror(errno) : "ends before the optimizer state");
            goto err_free;
        }
        crc = crc32_z(crc, scratch[i].p, want[i].nbytes);
    }
    uint32_t stored = 0;
    char extra;
    if (read_all(fd, &stored, sizeof(stored)) != (ssize_t)sizeof(stored) ||
        read_all(fd, &extra, 1) != 0 || stored != (uint32_t)crc) {
        snprintf(err, errlen, "%s: corrupt (crc32 or length does not match)", path);
        goto err_free;
    }
    for (int i = 1; i < n; i++) {
        if (want[i].nbytes > 0)
            memcpy(want[i].p, scratch[i].p, want[i].nbytes);
        free(scratch[i].p);
    }
    close(fd);
    o->t = h.opt_t;
    meta->epoch = h.epoch;
    meta->step = h.step;
    meta->global_step = h.global_step;
    meta->seed = h.seed;
    meta->batch = h.batch;
    meta->accum = h.accum;
    meta->epochs = h.epochs;
    meta->nsizes = h.nsizes;
    memcpy(meta->sizes, h.sizes, sizeof(meta->sizes));
    return 0;

err_free:
    for (int i = 1; i < n; i++)
        free(scratch[i].p);
err_close:
    close(fd);
    return -1;
}
