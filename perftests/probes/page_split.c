/*
 * page_split.so: an LD_PRELOAD library for perftests/pages. PAGE_SPLIT_DELAY_S seconds (default 3)
 * after the process starts, a thread of its own splits each mapping of this process of at most
 * 4 MiB (the vDSO and vvar aside) into one mapping a page: madvise(MADV_RANDOM) on every other
 * page, a read-ahead hint that changes nothing for memory already there. /proc/PID/smaps then
 * reports "Referenced" page by page, and page_refs can say which pages a steady loop touches.
 * Plain C, no Chorus and no MPI.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SPLIT_MAX_NBYTES (4ul << 20)

static void *split_main(void *arg)
{
    (void)arg;
    const char *d = getenv("PAGE_SPLIT_DELAY_S");
    sleep(d != NULL ? (unsigned)atoi(d) : 3);
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return NULL;
    static unsigned long spans[8192][2];
    int n = 0;
    char line[512];
    while (n < 8192 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) != 2 || b - a > SPLIT_MAX_NBYTES)
            continue;
        if (strstr(line, "[vdso]") != NULL || strstr(line, "[vvar]") != NULL ||
            strstr(line, "[vsyscall]") != NULL)
            continue;
        spans[n][0] = a;
        spans[n][1] = b;
        n++;
    }
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n; i++)
        for (unsigned long p = spans[i][0]; p < spans[i][1]; p += 2 * (unsigned long)page)
            madvise((void *)p, (size_t)page, MADV_RANDOM);
    return NULL;
}

__attribute__((constructor)) static void page_split_start(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, split_main, NULL) == 0)
        pthread_detach(t);
}
