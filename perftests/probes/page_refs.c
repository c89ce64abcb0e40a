/*
 * page_refs WINDOW_US PID...: the pages each process touched in a window (perftests/pages).
 * Clears every process' referenced bits (/proc/PID/clear_refs), sleeps WINDOW_US microseconds,
 * then prints, per process, each mapping with referenced memory ("Referenced" of
 * /proc/PID/smaps: its kB, the mapping's start address and file offset, its name) and the total.
 * With page_split.so preloaded each mapping is one page. Pages of shared files (libc) may show as
 * referenced because another process faulted them in meanwhile; private and shared memory,
 * and files only these processes map, count what these processes touched.
 * Plain C, no Chorus and no MPI.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SMAPS_MAX_BYTES (64u << 20)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: page_refs WINDOW_US PID...\n");
        return 2;
    }
    long us = atol(argv[1]);
    char path[64];
    for (int i = 2; i < argc; i++) {
        snprintf(path, sizeof(path), "/proc/%s/clear_refs", argv[i]);
        FILE *f = fopen(path, "w");
        if (f == NULL || fputs("1", f) < 0) {
            fprintf(stderr, "page_refs: cannot write %s\n", path);
            return 1;
        }
        fclose(f);
    }
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    char *buf = malloc(SMAPS_MAX_BYTES);
    if (buf == NULL)
        return 1;
    for (int i = 2; i < argc; i++) {
        snprintf(path, sizeof(path), "/proc/%s/smaps", argv[i]);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            fprintf(stderr, "page_refs: cannot read %s\n", path);
            return 1;
        }
        size_t n = fread(buf, 1, SMAPS_MAX_BYTES - 1, f);
        fclose(f);
        buf[n] = '\0';
        printf("== %s\n", argv[i]);
        unsigned long start = 0, offset = 0, total = 0;
        char name[512] = "";
        char *save = NULL;
        for (char *l = strtok_r(buf, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
            unsigned long a, b, kb;
            char perms[8];
            int used = 0;
            if (sscanf(l, "%lx-%lx %7s %lx %*s %*s %n", &a, &b, perms, &offset, &used) == 4 &&
                used > 0) {
                start = a;
                snprintf(name, sizeof(name), "%s", l + used);
            } else if (sscanf(l, "Referenced: %lu kB", &kb) == 1 && kb > 0) {
                printf("%6lu kB %lx %lx %s\n", kb, start, offset, name[0] ? name : "[anon]");
                total += kb;
            }
        }
        printf("total %lu kB\n", total);
    }
    free(buf);
    return 0;
}
