/*
 * harness.c: the helpers the functional and unit tests share (see harness.h): the failure counter
 * and its messages, PASS/FAIL lines, the clock, the splitmix64 byte pattern and uniform stream,
 * closeness, the refused-call check, and thread ranks. Nothing here decides what a test proves; it
 * only reports, compares and launches.
 */
#include "harness.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <sys/mman.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

long harness_failures;
int harness_fail_limit = 20;

/* Formatted into one buffer and printed with one call, so lines from rank threads do not mix. */
static void vfail(const char *file, int line, const char *fmt, va_list ap)
{
    if (__atomic_fetch_add(&harness_failures, 1, __ATOMIC_RELAXED) < harness_fail_limit) {
        char msg[1024];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        printf("FAIL %s:%d: %s\n", file, line, msg);
        fflush(stdout);
    }
}

void harness_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(file, line, fmt, ap);
    va_end(ap);
}

void harness_check_ok(const char *file, int line, const char *call, chorusResult_t res)
{
    if (res != chorusSuccess)
        harness_fail(file, line, "%s returned %d (%s): %s", call, (int)res,
                     chorusGetErrorString(res), chorusGetLastError(NULL));
}

void harness_check_res(const char *file, int line, const char *call, chorusResult_t res,
                       chorusResult_t want)
{
    if (res != want)
        harness_fail(file, line, "%s returned %d (%s), want %d", call, (int)res,
                     chorusGetErrorString(res), (int)want);
}

const char *harness_verdict(long before)
{
    return __atomic_load_n(&harness_failures, __ATOMIC_RELAXED) == before ? "PASS" : "FAIL";
}

static void vreport(long before, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    printf("%s %s\n", harness_verdict(before), msg);
}

void harness_report(long before, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(before, fmt, ap);
    va_end(ap);
}

int harness_finish(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(0, fmt, ap);
    va_end(ap);
    return harness_failures ? 1 : 0;
}

double harness_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

chorusResult_t harness_init_env_timed(double *took_s, char *text, size_t len)
{
    chorusComm_t comm = NULL;
    double t0 = harness_now_s();
    chorusResult_t res = chorusCommInitEnv(&comm);
    *took_s = harness_now_s() - t0;
    snprintf(text, len, "%s", chorusGetLastError(NULL));
    if (res == chorusSuccess)
        chorusCommDestroy(comm);
    return res;
}

size_t harness_dtype_nbytes(chorusDataType_t t)
{
    switch (t) {
    case chorusInt8:
    case chorusUint8:
        return 1;
    case chorusFloat16:
    case chorusBfloat16:
        return 2;
    case chorusInt32:
    case chorusUint32:
    case chorusFloat32:
        return 4;
    default:
        return 8;
    }
}

uint64_t harness_splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void harness_fill(void *buf, size_t nbytes, uint64_t seed)
{
    unsigned char *p = buf;
    for (size_t w = 0; w * 8 < nbytes; w++) {
        uint64_t h = harness_splitmix(seed + w);
        for (size_t b = 0; b < 8 && w * 8 + b < nbytes; b++)
            p[w * 8 + b] = (unsigned char)(h >> (8 * b));
    }
}

double harness_uniform01(uint64_t *state)
{
    uint64_t z = harness_splitmix(*state);
    *state += 0x9e3779b97f4a7c15ull;
    return (double)(z >> 11) * 0x1p-53;
}

/* Written without fabs and fmax: the functional tests that link this do not link libm. */
int harness_close(double got, double want, double tol)
{
    double err = got > want ? got - want : want - got; /* NaN when either is NaN */
    double scale = want > 1.0 ? want : want < -1.0 ? -want : 1.0;
    return err <= tol * scale;
}

long long harness_first_diff(const void *buf, size_t nbytes, uint64_t seed)
{
    const unsigned char *p = buf;
    for (size_t w = 0; w * 8 < nbytes; w++) {
        uint64_t h = harness_splitmix(seed + w);
        for (size_t b = 0; b < 8 && w * 8 + b < nbytes; b++)
            if (p[w * 8 + b] != (unsigned char)(h >> (8 * b)))
                return (long long)(w * 8 + b);
    }
    return -1;
}

void harness_expect_refused(const char *what, chorusResult_t got, chorusResult_t want,
                            const char *text, const char *word1, const char *word2)
{
    if (got != want) {
        FAIL("%s: returned %d (%s), want %d (%s)", what, (int)got, chorusGetErrorString(got),
             (int)want, chorusGetErrorString(want));
        return;
    }
    if (text == NULL || text[0] == '\0') {
        FAIL("%s: refused, but chorusGetLastError is empty", what);
        return;
    }
    if ((word1 && strstr(text, word1) == NULL) || (word2 && strstr(text, word2) == NULL))
        FAIL("%s: the last error does not name \"%s\"%s%s%s: \"%s\"", what, word1 ? word1 : "",
             word2 ? " and \"" : "", word2 ? word2 : "", word2 ? "\"" : "", text);
}

int harness_init_all(chorusComm_t *comms, int n)
{
    chorusResult_t res = chorusCommInitAll(comms, n, NULL);
    if (res == chorusSuccess)
        return 0;
    FAIL("chorusCommInitAll(%d): %s: %s", n, chorusGetErrorString(res), chorusGetLastError(NULL));
    return 1;
}

typedef struct rank_arg {
    harness_rank_fn *body;
    chorusComm_t comm;
    int rank, nranks;
} rank_arg_t;

static void *rank_thread(void *p)
{
    rank_arg_t *a = p;
    a->body(a->comm, a->rank, a->nranks);
    return NULL;
}

int harness_run_ranks(chorusComm_t *comms, int n, harness_rank_fn *body)
{
    pthread_t *threads = calloc(n, sizeof(pthread_t));
    rank_arg_t *args = calloc(n, sizeof(rank_arg_t));
    if (threads == NULL || args == NULL) {
        FAIL("out of memory for %d rank threads", n);
        free(threads);
        free(args);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        args[i] = (rank_arg_t){body, comms[i], i, n};
        int err = pthread_create(&threads[i], NULL, rank_thread, &args[i]);
        if (err != 0) {
            FAIL("pthread_create for rank %d of %d: %s", i, n, strerror(err));
            return 1; /* threads and args stay allocated: the started ranks still use them */
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    free(args);
    return 0;
}

void harness_destroy_all(chorusComm_t *comms, int n)
{
    for (int i = 0; i < n; i++)
        CHECK_OK(chorusCommDestroy(comms[i]));
}

int harness_count_dir(const char *path, int minus_self)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - minus_self;
}

int harness_mkdtemp(char *buf, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    if (mkdtemp(buf) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

void *harness_shared(size_t nbytes)
{
    void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return NULL;
    }
    memset(p, 0, nbytes);
    return p;
}

static int port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int got = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return got;
}

int harness_free_port(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    uint64_t x = harness_splitmix((uint64_t)getpid() << 32 ^ (uint64_t)time(NULL));
    for (int i = 0; lo > 12000 && i < 64; i++) {
        x = harness_splitmix(x);
        int port = 10000 + (int)(x % (uint64_t)(lo - 10000));
        if (port_bindable(port) == port)
            return port;
    }
    return port_bindable(0);
}
