/*
 * data.c: Fashion-MNIST from its IDX files (gzip, read with zlib), as the Debian package
 * dataset-fashion-mnist installs them. An IDX file is a big-endian header, then raw bytes:
 *
 *   images: 0x00000803  n  rows  cols  | n*rows*cols pixels (uint8)
 *   labels: 0x00000801  n              | n labels (uint8, 0..9)
 *
 * Pixels become floats (pixel/255 - mean) / std; labels stay bytes. Every failure says which file
 * and what is wrong with it, because "could not load data" sends a person hunting.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "nn.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_EXAMPLES 10000000u /* far above any real split: guards the allocation */
#define IDX_MAX_DIM 65536u

/* Read exactly nbytes, or say why not: zlib's error for corrupt data, "truncated" for a short
 * file. what names the part being read ("the header", "the pixel data"). */
static int read_exact(gzFile f, const char *path, void *dst, size_t nbytes, const char *what,
                      char *err, size_t errlen)
{
    size_t done = 0;
    while (done < nbytes) {
        size_t chunk = nbytes - done > (1u << 30) ? (1u << 30) : nbytes - done;
        int got = gzread(f, (char *)dst + done, (unsigned)chunk);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_BUF_ERROR) /* the gzip stream itself was cut short */
                snprintf(err, errlen, "%s: truncated: %s ends after %zu of %zu bytes (%s)", path,
                         what, done, nbytes, msg);
            else
                snprintf(err, errlen, "%s: corrupt gzip data in %s: %s", path, what, msg);
            return -1;
        }
        if (got == 0) {
            snprintf(err, errlen, "%s: truncated: %s has %zu of %zu bytes", path, what, done,
                     nbytes);
            return -1;
        }
        done += (size_t)got;
    }
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Open path and read its header: magic, then ndims big-endian counts into dims. */
static gzFile open_idx(const char *path, uint32_t magic, int ndims, uint32_t *dims, char *err,
                       size_t errlen)
{
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s%s", path, errno ? strerror(errno) : "no memory",
                 errno == ENOENT ? " (install the Debian package dataset-fashion-mnist, or pass "
                                   "the directory that holds the IDX files)"
                                 : "");
        return NULL;
    }
    uint8_t header[16];
    if (read_exact(f, path, header, 4 + 4 * (size_t)ndims, "the header", err, errlen) != 0)
        goto err_close;
    uint32_t got = be32(header);
    if (got != magic) {
        snprintf(err, errlen, "%s: bad magic 0x%08x, want 0x%08x (an IDX %s file)", path, got,
                 magic, magic == IDX_MAGIC_IMAGES ? "image" : "label");
        goto err_close;
    }
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(header + 4 + 4 * i);
    if (dims[0] == 0 || dims[0] > IDX_MAX_EXAMPLES) {
        snprintf(err, errlen, "%s: implausible example count %u", path, dims[0]);
        goto err_close;
    }
    for (int i = 1; i < ndims; i++) {
        if (dims[i] == 0 || dims[i] > IDX_MAX_DIM) {
            snprintf(err, errlen, "%s: implausible dimension %u", path, dims[i]);
            goto err_close;
        }
    }
    return f;
err_close:
    gzclose(f);
    return NULL;
}

int data_load(const char *dir, const char *prefix, dataset_t *ds, char *err, size_t errlen)
{
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof(ipath), "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(lpath, sizeof(lpath), "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    memset(ds, 0, sizeof(*ds));
    uint8_t *pixels = NULL;
    uint32_t idims[3], ldims[1];

    gzFile f = open_idx(ipath, IDX_MAGIC_IMAGES, 3, idims, err, errlen);
    if (f == NULL)
        return -1;
    size_t dim = (size_t)idims[1] * idims[2], count = (size_t)idims[0] * dim;
    pixels = malloc(count);
    ds->x = malloc(count * sizeof(float));
    ds->y = malloc(idims[0]);
    if (pixels == NULL || ds->x == NULL || ds->y == NULL) {
        snprintf(err, errlen, "%s: no memory for %u images", ipath, idims[0]);
        goto err_close;
    }
    if (read_exact(f, ipath, pixels, count, "the pixel data", err, errlen) != 0)
        goto err_close;
    gzclose(f);

    f = open_idx(lpath, IDX_MAGIC_LABELS, 1, ldims, err, errlen);
    if (f == NULL)
        goto err_free;
    if (ldims[0] != idims[0]) {
        snprintf(err, errlen, "%s: %u labels but %s has %u images", lpath, ldims[0], ipath,
                 idims[0]);
        goto err_close;
    }
    if (read_exact(f, lpath, ds->y, idims[0], "the label data", err, errlen) != 0)
        goto err_close;
    gzclose(f);
    for (uint32_t i = 0; i < idims[0]; i++) {
        if (ds->y[i] > 9) {
            snprintf(err, errlen, "%s: label %u of example %u is out of range 0..9", lpath,
                     ds->y[i], i);
            goto err_free;
        }
    }

    /* One table for all 256 pixel values: every pixel normalises identically and cheaply. */
    float table[256];
    for (int v = 0; v < 256; v++)
        table[v] = ((float)v / 255.0f - DATA_MEAN) / DATA_STD;
    for (size_t i = 0; i < count; i++)
        ds->x[i] = table[pixels[i]];
    free(pixels);
    ds->n = (int)idims[0];
    ds->dim = (int)dim;
    return 0;

err_close:
    gzclose(f);
err_free:
    free(pixels);
    data_free(ds);
    return -1;
}

void data_free(dataset_t *ds)
{
    free(ds->x);
    free(ds->y);
    memset(ds, 0, sizeof(*ds));
}
