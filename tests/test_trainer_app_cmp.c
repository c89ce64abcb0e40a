/*
 * test_trainer_app_cmp.c: compare two chorus-train --dump-params files (raw float32).
 *
 *   test_trainer_app_cmp A B RTOL
 *
 * Passes when both hold the same number of floats and every pair is within RTOL relative:
 * |a - b| <= RTOL * max(|a|, |b|, max_j |B_j|), the normwise (infinity-norm) relative error. The
 * floor holds parameters that sit near zero to the same absolute accuracy as the large ones:
 * sums over a batch in another order differ by rounding relative to the sum of |terms|, not to
 * the (possibly cancelled) sum, so an element-only relative bound would demand more than float
 * arithmetic gives. RTOL 0 asks for identical bits. Prints the worst element either way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0) {
        fprintf(stderr, "FAIL: cannot read %s\n", path);
        exit(1);
    }
    long nbytes = ftell(f);
    rewind(f);
    float *x = malloc(nbytes > 0 ? (size_t)nbytes : 1);
    if (x == NULL || nbytes % 4 != 0 || fread(x, 1, (size_t)nbytes, f) != (size_t)nbytes) {
        fprintf(stderr, "FAIL: %s: %ld bytes is not a float32 array\n", path, nbytes);
        exit(1);
    }
    fclose(f);
    *n = (size_t)nbytes / 4;
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s A B RTOL\n", argv[0]);
        return 2;
    }
    size_t na, nb;
    float *a = slurp(argv[1], &na), *b = slurp(argv[2], &nb);
    double rtol = atof(argv[3]);
    if (na != nb || na == 0) {
        fprintf(stderr, "FAIL: %s has %zu floats, %s has %zu\n", argv[1], na, argv[2], nb);
        free(a);
        free(b);
        return 1;
    }
    if (rtol == 0.0) {
        int same = memcmp(a, b, na * 4) == 0;
        printf("%s: %zu floats %s\n", same ? "PASS" : "FAIL", na,
               same ? "bit-identical" : "differ in bits");
        free(a);
        free(b);
        return same ? 0 : 1;
    }
    double floor = 0.0, worst = 0.0;
    for (size_t i = 0; i < nb; i++)
        floor = fmax(floor, fabs(b[i]));
    size_t at = 0, nbad = 0;
    for (size_t i = 0; i < na; i++) {
        double scale = fmax(fmax(fabs(a[i]), fabs(b[i])), floor);
        double rel = fabs((double)a[i] - b[i]) / scale;
        if (!(rel <= rtol))
            nbad++;
        if (!(rel <= worst))
            worst = rel, at = i;
    }
    printf("%s: %zu floats, worst relative difference %.3g at [%zu] (%.9g vs %.9g), %zu over %g\n",
           nbad ? "FAIL" : "PASS", na, worst, at, a[at], b[at], nbad, rtol);
    free(a);
    free(b);
    return nbad ? 1 : 0;
}
