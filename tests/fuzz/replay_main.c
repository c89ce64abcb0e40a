/*
 * replay_main.c: main() for a fuzz target built without libFuzzer (gcc, ctest): every file of
 * every directory (or file) named on the command line goes once through LLVMFuzzerTestOneInput,
 * in name order, so a run is the same every time. A crash or a failed check aborts; a clean run
 * prints how many inputs passed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "FAIL: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    /* Exactly n bytes on the heap: a read past the input is a sanitizer report. */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    fprintf(stderr, "replay %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    int count = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "FAIL: %s does not exist\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += run_file(argv[i]);
            count++;
            continue;
        }
        struct dirent **list;
        int n = scandir(argv[i], &list, NULL, by_name);
        for (int j = 0; j < n; j++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], list[j]->d_name);
            if (list[j]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                bad += run_file(path);
                count++;
            }
            free(list[j]);
        }
        free(list);
    }
    if (count == 0) {
        fprintf(stderr, "FAIL: no inputs\n");
        return 1;
    }
    printf("%s: %d inputs replayed without a crash or a failed check\n", bad ? "FAIL" : "PASS",
           count - bad);
    return bad ? 1 : 0;
}
