/*
 * test_uniqueid.c: proves unique ids are unique and the rendezvous root trusts only its secret.
 *
 * 1. 64 calls to chorusGetUniqueId give 64 ids that differ pairwise in their bytes and in their
 *    64-bit secrets; each carries the bootstrap magic and a root address with a port.
 * 2. Rogue connections to the root of a fresh id (its address is in the id: uint64 magic, uint64
 *    secret, then a 28-byte sockaddr): a hello with a wrong secret, a hello with the right secret
 *    but a rank out of range, 56 bytes of garbage, a short hello then EOF, and a connection that
 *    sends nothing. Meanwhile 3 thread ranks join with chorusCommInitRank and all-reduce exactly,
 *    and the root closes every rogue connection (recv returns 0).
 * 3. A copy of a live id with its secret flipped, presented by "rank 1" with config timeoutMs
 *    1000 while the real ranks 0 and 2 wait: the init fails in bounded time (no hang), then the
 *    real rank 1 joins and all three all-reduce exactly. An id whose root port is closed fails the
 *    same way.
 * 4. Jobs that cannot form, two thread ranks each with config timeoutMs 20000: both pass rank 0;
 *    one passes nranks 2 and the other 3. Every rank fails at once (well inside the deadline)
 *    with chorusInvalidUsage naming the fault: the bootstrap root tells every rank of the job.
 *    Before, the rank the root did not refuse waited out its deadline and then blamed a rank
 *    that had come ("never reached the bootstrap root").
 * Exit 0: all passed; 1: a check failed (the first failures are printed).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define ID_MAGIC 0x43484f5255530001ull
#define NIDS 64
#define NRANKS 3

/* The documented layout of the id's first bytes and of the root hello (both packed). */
typedef union addr {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    char bytes[28];
} addr_t;
_Static_assert(sizeof(addr_t) == 28, "28-byte sockaddr");

typedef struct id_head {
    uint64_t magic;
    uint64_t secret;
    addr_t root;
} id_head_t;
_Static_assert(offsetof(id_head_t, root) == 16, "no padding: the layout is the id's");

typedef struct __attribute__((packed)) hello {
    uint64_t magic;
    uint64_t secret;
    int32_t rank;
    int32_t nranks;
    addr_t listen;
    uint32_t reserved;
} hello_t;
_Static_assert(sizeof(hello_t) == 56, "root hello is 56 bytes");

static id_head_t id_head(const chorusUniqueId *id)
{
    id_head_t h;
    memcpy(&h, id->internal, sizeof(h));
    return h;
}

/* ---- 1. distinct ids ---- */

static void distinct_ids(void)
{
    long before = harness_failures;
    chorusUniqueId *ids = calloc(NIDS, sizeof(chorusUniqueId));
    for (int i = 0; i < NIDS; i++)
        CHECK_OK(chorusGetUniqueId(&ids[i]));
    for (int i = 0; i < NIDS; i++) {
        id_head_t h = id_head(&ids[i]);
        if (h.magic != ID_MAGIC)
            FAIL("id %d: magic %#llx, want %#llx", i, (unsigned long long)h.magic,
                 (unsigned long long)ID_MAGIC);
        int fam = h.root.sa.sa_family;
        int port = fam == AF_INET    ? ntohs(h.root.sin.sin_port)
                   : fam == AF_INET6 ? ntohs(h.root.sin6.sin6_port)
                                     : 0;
        if (port == 0)
            FAIL("id %d: root address family %d port %d is not a listening address", i, fam, port);
        for (int j = 0; j < i; j++) {
            if (memcmp(&ids[i], &ids[j], sizeof(chorusUniqueId)) == 0)
                FAIL("ids %d and %d are byte-for-byte equal", j, i);
            if (id_head(&ids[j]).secret == h.secret)
                FAIL("ids %d and %d have the same secret %#llx", j, i,
                     (unsigned long long)h.secret);
        }
    }
    free(ids);
    harness_report(before,
                   "%d chorusGetUniqueId calls give %d distinct ids (bytes and secrets), "
                   "each with the magic and a root port",
                   NIDS, NIDS);
}

/* ---- a job of NRANKS thread ranks on an id ---- */

typedef struct job_rank {
    chorusUniqueId id;
    int rank;
    chorusResult_t res;
} job_rank_t;

static void *job_rank_thread(void *p)
{
    job_rank_t *a = p;
    chorusComm_t comm = NULL;
    a->res = chorusCommInitRank(&comm, NRANKS, a->id, a->rank);
    if (a->res != chorusSuccess) {
        FAIL("rank %d: chorusCommInitRank: %s: %s", a->rank, chorusGetErrorString(a->res),
             chorusGetLastError(NULL));
        return NULL;
    }
    enum { COUNT = 65537 };
    int32_t *buf = malloc(COUNT * sizeof(int32_t));
    for (int i = 0; i < COUNT; i++)
        buf[i] = (a->rank + 1) * 100000 + i;
    CHECK_OK(chorusAllReduce(buf, buf, COUNT, chorusInt32, chorusSum, comm, NULL));
    for (int i = 0; i < COUNT; i++)
        if (buf[i] != 100000 * NRANKS * (NRANKS + 1) / 2 + NRANKS * i) {
            FAIL("rank %d: all-reduce element %d is %d, want %d", a->rank, i, buf[i],
                 100000 * NRANKS * (NRANKS + 1) / 2 + NRANKS * i);
            break;
        }
    free(buf);
    CHECK_OK(chorusCommDestroy(comm));
    return NULL;
}

/* ---- 2. rogue connections ---- */

static int connect_root(const addr_t *root)
{
    int fd = socket(root->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len =
        root->sa.sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (fd < 0 || connect(fd, &root->sa, len) != 0) {
        FAIL("rogue connect to the root failed");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const void *buf, size_t nbytes)
{
    if (send(fd, buf, nbytes, MSG_NOSIGNAL) != (ssize_t)nbytes)
        FAIL("rogue send of %zu bytes failed", nbytes);
}

/* The root must close fd: recv returns 0 (EOF) before the deadline. */
static void expect_closed(int fd, const char *what, double deadline_s)
{
    for (;;) {
        double left = deadline_s - harness_now_s();
        if (left <= 0) {
            FAIL("rogue connection (%s) still open at the deadline", what);
            return;
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        char c;
        ssize_t n = recv(fd, &c, 1, 0);
        if (n == 0)
            return;
        FAIL("rogue connection (%s): recv returned %zd, want 0 (closed by the root)", what, n);
        return;
    }
}

static void rogue_connections(void)
{
    long before = harness_failures;
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    id_head_t h = id_head(&id);
    enum { WRONG_SECRET, BAD_RANK, GARBAGE, SHORT, SILENT, NROGUE };
    static const char *names[NROGUE] = {
        "hello with a wrong secret", "hello with the right secret but rank 3 of 3",
        "56 bytes of garbage", "20 bytes then EOF", "connects and sends nothing"};
    int fds[NROGUE];
    for (int k = 0; k < NROGUE; k++)
        fds[k] = connect_root(&h.root);
    hello_t hello;
    memset(&hello, 0, sizeof(hello));
    hello.magic = ID_MAGIC;
    hello.secret = h.secret ^ 0x8000000000000001ull;
    hello.rank = 0;
    hello.nranks = NRANKS;
    hello.listen = h.root;
    if (fds[WRONG_SECRET] >= 0)
        send_all(fds[WRONG_SECRET], &hello, sizeof(hello));
    hello.secret = h.secret;
    hello.rank = NRANKS;
    if (fds[BAD_RANK] >= 0)
        send_all(fds[BAD_RANK], &hello, sizeof(hello));
    unsigned char junk[56];
    for (int i = 0; i < 56; i++)
        junk[i] = (unsigned char)(i * 37 + 11);
    if (fds[GARBAGE] >= 0)
        send_all(fds[GARBAGE], junk, sizeof(junk));
    if (fds[SHORT] >= 0) {
        send_all(fds[SHORT], &hello, 20);
        shutdown(fds[SHORT], SHUT_WR);
    }

    /* The real job, while the silent connection is still pending at the root. */
    job_rank_t ranks[NRANKS];
    pthread_t threads[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        ranks[r] = (job_rank_t){id, r, chorusSuccess};
        pthread_create(&threads[r], NULL, job_rank_thread, &ranks[r]);
    }
    for (int r = 0; r < NRANKS; r++)
        pthread_join(threads[r], NULL);
    double deadline = harness_now_s() + 30;
    for (int k = 0; k < NROGUE; k++)
        if (fds[k] >= 0) {
            expect_closed(fds[k], names[k], deadline);
            close(fds[k]);
        }
    harness_report(before, "the root closes rogue connections (wrong secret, rank out of range, "
                           "garbage, short hello, silent) and 3 ranks still join and all-reduce "
                           "exactly");
}

/* ---- 3. a tampered id ---- */

static void tampered(void)
{
    long before = harness_failures;
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    job_rank_t ranks[NRANKS];
    pthread_t threads[NRANKS];
    for (int r = 0; r < NRANKS; r += 2) { /* real ranks 0 and 2 start waiting */
        ranks[r] = (job_rank_t){id, r, chorusSuccess};
        pthread_create(&threads[r], NULL, job_rank_thread, &ranks[r]);
    }
    chorusUniqueId bad = id;
    id_head_t h = id_head(&bad);
    h.secret = ~h.secret;
    memcpy(bad.internal, &h, sizeof(h));
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 1000;
    chorusComm_t comm = NULL;
    double t0 = harness_now_s();
    chorusResult_t res = chorusCommInitRankConfig(&comm, NRANKS, bad, 1, &cfg);
    double dt = harness_now_s() - t0;
    if (res == chorusSuccess) {
        FAIL("init with a tampered secret succeeded");
        chorusCommDestroy(comm);
    } else {
        printf("     tampered id: %s after %.2f s: %s\n", chorusGetErrorString(res), dt,
               chorusGetLastError(NULL));
    }
    if (dt > 20.0) /* a hang check, not a performance bound */
        FAIL("init with a tampered secret took %.1f s with timeoutMs 1000", dt);
    /* Now the real rank 1: the root kept serving. */
    ranks[1] = (job_rank_t){id, 1, chorusSuccess};
    pthread_create(&threads[1], NULL, job_rank_thread, &ranks[1]);
    for (int r = 0; r < NRANKS; r++)
        pthread_join(threads[r], NULL);

    /* An id whose root port refuses connections (bound, not listening). */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sin);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        FAIL("could not bind a loopback socket");
    } else {
        chorusUniqueId dead = id;
        addr_t a;
        memset(&a, 0, sizeof(a));
        a.sin = sin;
        memcpy(dead.internal + offsetof(id_head_t, root), &a, sizeof(a));
        t0 = harness_now_s();
        comm = NULL;
        res = chorusCommInitRankConfig(&comm, 2, dead, 1, &cfg);
        dt = harness_now_s() - t0;
        if (res == chorusSuccess) {
            FAIL("init against a closed root port succeeded");
            chorusCommDestroy(comm);
        } else {
            printf("     closed root port: %s after %.2f s\n", chorusGetErrorString(res), dt);
        }
        if (dt > 20.0)
            FAIL("init against a closed root port took %.1f s with timeoutMs 1000", dt);
    }
    if (fd >= 0)
        close(fd);
    harness_report(before, "an id with a flipped secret fails init in bounded time (timeoutMs "
                           "1000) while the real ranks complete; an id whose root is gone fails "
                           "the same way");
}

/* ---- 4. jobs that cannot form ---- */

typedef struct bad_rank {
    chorusUniqueId id;
    int rank, nranks;
    chorusResult_t res;
    char text[1024];
    double took_s;
} bad_rank_t;

static void *bad_rank_thread(void *p)
{
    bad_rank_t *a = p;
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.timeoutMs = 20000;
    chorusComm_t comm = NULL;
    double t0 = harness_now_s();
    a->res = chorusCommInitRankConfig(&comm, a->nranks, a->id, a->rank, &cfg);
    a->took_s = harness_now_s() - t0;
    snprintf(a->text, sizeof(a->text), "%s", chorusGetLastError(NULL));
    if (a->res == chorusSuccess)
        chorusCommDestroy(comm);
    return NULL;
}

/* Ranks (rank, nranks) of one fresh id at once; each must fail with chorusInvalidUsage within
 * 10 s (a hang check: the deadline is 20 s) and a text holding one of want0, want1. */
static void cannot_form(const char *what, int rank0, int nranks0, int rank1, int nranks1,
                        const char *want0, const char *want1)
{
    chorusUniqueId id;
    CHECK_OK(chorusGetUniqueId(&id));
    bad_rank_t r[2] = {{id, rank0, nranks0, chorusSuccess, "", 0},
                       {id, rank1, nranks1, chorusSuccess, "", 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, bad_rank_thread, &r[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (r[i].res != chorusInvalidUsage || r[i].took_s > 10.0 ||
            (strstr(r[i].text, want0) == NULL && strstr(r[i].text, want1) == NULL))
            FAIL("%s: the init of rank %d (nranks %d) gave %s after %.2f s: %s", what, r[i].rank,
                 r[i].nranks, chorusGetErrorString(r[i].res), r[i].took_s, r[i].text);
        else
            printf("     %s: rank %d after %.2f s: %s\n", what, r[i].rank, r[i].took_s, r[i].text);
    }
}

static void cannot_form_jobs(void)
{
    long before = harness_failures;
    cannot_form("two ranks 0", 0, 2, 0, 2, "two processes passed rank 0", "two processes");
    cannot_form("nranks 2 and 3", 0, 2, 1, 3, "another nranks", "answered for");
    harness_report(before, "a job whose ranks pass one rank twice, or two rank counts: every "
                           "rank's init fails at once with chorusInvalidUsage naming it");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_uniqueid\n");
    distinct_ids();
    rogue_connections();
    tampered();
    cannot_form_jobs();
    return harness_finish("test_uniqueid");
}
