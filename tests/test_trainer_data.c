/*
 * test_trainer_data.c: proves the Fashion-MNIST loader (trainer/data.c).
 *
 * In a fresh temporary directory it writes small gzip IDX files and checks:
 * - a well-formed pair (3 images of 2x2, labels 0, 9, 5) loads: n 3, dim 4, labels as written,
 *   pixels 0, 255 and 73 normalised to (p/255 - 0.2860) / 0.3530;
 * - each fault returns -1 with an error naming the faulty file and the fault: images missing,
 *   labels missing, bad magic, a header cut short, fewer pixels than the header says, a gzip
 *   stream cut in the middle, a label of 12, 3 images against 2 labels. ds stays empty.
 * With the real dataset installed (Debian package dataset-fashion-mnist): train has 60000 and
 * t10k 10000 examples of 784 pixels, 6000 and 1000 per class, and the normalised training pixels
 * have mean within 0.01 of 0 and standard deviation within 0.01 of 1. Without it that part says
 * SKIP and the rest still runs.
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "nn.h"

static char dir[256];

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Write <dir>/<prefix>-<kind>.gz holding bytes. */
static void write_gz(const char *prefix, const char *kind, const uint8_t *bytes, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s-%s.gz", dir, prefix, kind);
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL && gzwrite(f, bytes, (unsigned)n) == (int)n && gzclose(f) == Z_OK,
          "cannot write %s", path);
}

/* An IDX image file of n images of 2x2 (pixels 0, 255, 73, i) declaring `declared` images and
 * holding `pixels` pixel bytes. */
static void write_images(const char *prefix, uint32_t magic, uint32_t declared, size_t pixels)
{
    uint8_t buf[16 + 64];
    put_be32(buf, magic);
    put_be32(buf + 4, declared);
    put_be32(buf + 8, 2);
    put_be32(buf + 12, 2);
    for (size_t i = 0; i < pixels; i++)
        buf[16 + i] = i % 4 == 0 ? 0 : i % 4 == 1 ? 255 : i % 4 == 2 ? 73 : (uint8_t)(i / 4);
    write_gz(prefix, "images-idx3-ubyte", buf, 16 + pixels);
}

static void write_labels(const char *prefix, uint32_t magic, const uint8_t *labels, uint32_t n)
{
    uint8_t buf[8 + 16];
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    memcpy(buf + 8, labels, n);
    write_gz(prefix, "labels-idx1-ubyte", buf, 8 + n);
}

/* data_load on prefix must fail naming <prefix>-<kind> and containing `what`. */
static void expect_error(const char *prefix, const char *kind, const char *what)
{
    char err[1024] = "", file[512];
    dataset_t ds;
    int rc = data_load(dir, prefix, &ds, err, sizeof(err));
    snprintf(file, sizeof(file), "%s/%s-%s.gz", dir, prefix, kind);
    CHECK(rc == -1, "%s: data_load returned %d", prefix, rc);
    CHECK(strstr(err, file) != NULL, "%s: error does not name %s: \"%s\"", prefix, file, err);
    CHECK(strstr(err, what) != NULL, "%s: error does not say \"%s\": \"%s\"", prefix, what, err);
    CHECK(ds.x == NULL && ds.y == NULL && ds.n == 0, "%s: dataset not left empty", prefix);
    printf("  %-10s -> %s\n", prefix, err);
}

static void test_files(void)
{
    long before = harness_failures;
    const uint8_t good[3] = {0, 9, 5}, bad[3] = {0, 12, 5};

    write_images("good", 0x803, 3, 12);
    write_labels("good", 0x801, good, 3);
    dataset_t ds;
    char err[1024] = "";
    CHECK(data_load(dir, "good", &ds, err, sizeof(err)) == 0, "good files: %s", err);
    CHECK(ds.n == 3 && ds.dim == 4, "n %d dim %d, want 3 and 4", ds.n, ds.dim);
    for (int i = 0; i < 3 && ds.y != NULL; i++) {
        CHECK(ds.y[i] == good[i], "label %d is %d", i, ds.y[i]);
        const double px[4] = {0, 255, 73, i};
        for (int k = 0; k < 4; k++) {
            double want = (px[k] / 255.0 - 0.2860) / 0.3530;
            CHECK(fabs(ds.x[i * 4 + k] - want) < 1e-6, "pixel %d,%d: %g, want %g", i, k,
                  ds.x[i * 4 + k], want);
        }
    }
    data_free(&ds);
    CHECK(ds.x == NULL && ds.y == NULL, "data_free left pointers");

    expect_error("absent", "images-idx3-ubyte", "No such file");
    write_images("nolabels", 0x803, 3, 12);
    expect_error("nolabels", "labels-idx1-ubyte", "No such file");
    write_images("magic", 0x801, 3, 12); /* a label magic on the image file */
    write_labels("magic", 0x801, good, 3);
    expect_error("magic", "images-idx3-ubyte", "bad magic");
    write_images("lmagic", 0x803, 3, 12);
    write_labels("lmagic", 0x803, good, 3);
    expect_error("lmagic", "labels-idx1-ubyte", "bad magic");
    write_gz("header", "images-idx3-ubyte", (const uint8_t *)"\0\0\x08\x03\0\0", 6);
    expect_error("header", "images-idx3-ubyte", "truncated");
    write_images("short", 0x803, 3, 10); /* 10 of 12 pixels */
    write_labels("short", 0x801, good, 3);
    expect_error("short", "images-idx3-ubyte", "truncated");
    write_images("label12", 0x803, 3, 12);
    write_labels("label12", 0x801, bad, 3);
    expect_error("label12", "labels-idx1-ubyte", "12");
    write_images("count", 0x803, 3, 12);
    write_labels("count", 0x801, good, 2);
    expect_error("count", "labels-idx1-ubyte", "2 labels");

    /* A gzip stream cut in the middle: compress 4000 pixels, keep half the compressed bytes. */
    char path[512];
    snprintf(path, sizeof(path), "%s/cut-images-idx3-ubyte.gz", dir);
    uint8_t *big = malloc(16 + 4000);
    put_be32(big, 0x803);
    put_be32(big + 4, 1000);
    put_be32(big + 8, 2);
    put_be32(big + 12, 2);
    for (int i = 0; i < 4000; i++)
        big[16 + i] = (uint8_t)(i * 2654435761u >> 24); /* incompressible enough */
    write_gz("cut", "images-idx3-ubyte", big, 16 + 4000);
    FILE *f = fopen(path, "rb");
    uint8_t *gz = malloc(8192);
    size_t ngz = f ? fread(gz, 1, 8192, f) : 0;
    if (f)
        fclose(f);
    f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(gz, 1, ngz / 2, f) == ngz / 2, "cannot cut %s", path);
    if (f)
        fclose(f);
    expect_error("cut", "images-idx3-ubyte", "truncated");
    free(big);
    free(gz);
    harness_report(
        before,
        "IDX files: a good pair loads and normalises; every fault names the file and says what");
}

static void test_real(void)
{
    char err[1024] = "", probe[512];
    snprintf(probe, sizeof(probe), "%s/train-images-idx3-ubyte.gz", DATA_DIR_DEFAULT);
    if (access(probe, R_OK) != 0) {
        printf("SKIP real Fashion-MNIST: %s not found (Debian package dataset-fashion-mnist)\n",
               probe);
        return;
    }
    long before = harness_failures;
    dataset_t tr, te;
    CHECK(data_load(DATA_DIR_DEFAULT, "train", &tr, err, sizeof(err)) == 0, "train: %s", err);
    CHECK(data_load(DATA_DIR_DEFAULT, "t10k", &te, err, sizeof(err)) == 0, "t10k: %s", err);
    CHECK(tr.n == 60000 && tr.dim == 784, "train: n %d dim %d", tr.n, tr.dim);
    CHECK(te.n == 10000 && te.dim == 784, "t10k: n %d dim %d", te.n, te.dim);
    if (tr.x != NULL && te.y != NULL) {
        double s = 0, s2 = 0;
        size_t n = (size_t)tr.n * tr.dim;
        for (size_t i = 0; i < n; i++)
            s += tr.x[i], s2 += (double)tr.x[i] * tr.x[i];
        double mean = s / n, sd = sqrt(s2 / n - mean * mean);
        printf("  train pixels normalised: mean %.4f, std %.4f\n", mean, sd);
        CHECK(fabs(mean) < 0.01, "normalised train mean %.4f", mean);
        CHECK(fabs(sd - 1.0) < 0.01, "normalised train std %.4f", sd);
        int ctr[10] = {0}, cte[10] = {0};
        for (int i = 0; i < tr.n; i++)
            ctr[tr.y[i]]++;
        for (int i = 0; i < te.n; i++)
            cte[te.y[i]]++;
        for (int k = 0; k < 10; k++)
            CHECK(ctr[k] == 6000 && cte[k] == 1000, "class %d: %d train, %d test", k, ctr[k],
                  cte[k]);
    }
    data_free(&tr);
    data_free(&te);
    harness_report(
        before, "real Fashion-MNIST: 60000 + 10000 examples, balanced, normalised to mean 0 std 1");
}

static void cleanup(void)
{
    const char *prefixes[] = {"good",  "nolabels", "magic", "lmagic", "header",
                              "short", "label12",  "count", "cut"};
    char path[512];
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, prefixes[i]);
        unlink(path);
        snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, prefixes[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/chorus-data-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_files();
    cleanup();
    test_real();
    return harness_finish("%ld failures", harness_failures);
}
