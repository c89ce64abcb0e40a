/*
 * test_boot_flood.c: a real job comes up while a stranger floods its bootstrap.
 *
 * A job of 4 ranks (forked processes, chorusCommInitRank) whose unique id the parent makes, so
 * the parent hosts the rendezvous root, the way a launcher does. An attacker process reads the
 * id (it holds the root's address) and connects to the root again and again: it resets at once
 * (SO_LINGER 0), sends 0..7 bytes and closes, sends a hello with a wrong magic, the right magic
 * and a wrong secret, a frame header claiming 2^31 bytes, random bytes, the right secret with a
 * rank out of range, or stays silent (300 such held open to the end). The ranks start their init
 * once 2,000 of those are in, and the flood goes on until every rank is past init.
 *
 * Then each rank's own bootstrap listener (its address read from the rank's CHORUS_DEBUG=INFO
 * log, "bootstrap listener on ...") gets the same, plus a peer hello with the right secret and a
 * rank out of range (-1, 4, INT_MAX) or a root's hello, each followed by a frame header of 2^31
 * bytes; every connection that sent a whole bad hello must be closed by the rank within 6 s, 40
 * silent ones per rank stay open to the end. Only then the ranks all-reduce (3 sizes, int32, exact
 * sums) and destroy the communicator.
 *
 *   test_boot_flood flood        as above
 *   test_boot_flood lowfd        the parent (the root) runs with RLIMIT_NOFILE 200 and the
 *                                attacker keeps 400 silent connections open to the root, opening
 *                                a new one for each the root closes: the root runs out of
 *                                descriptors (EMFILE), must keep serving, and the ranks must get
 *                                through (they retry a dropped rendezvous). No listener attack.
 *   test_boot_flood lowfd-rank0  the same, but rank 0 makes the id (the MPI pattern), so the
 *                                root shares rank 0's process and its 200 descriptors, which
 *                                the silent connections must not all take from rank 0's init.
 * The id is handed over through shared memory; the children are forked before any thread exists.
 * Pass: every rank exits 0 (init, exact all-reduces, destroy), the attacker's checks hold, and the
 * whole job ends within 60 s (CHORUS_TIMEOUT_MS=30000 for every wait). Exit 0 pass, 1 fail.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_wire.h"
#include "chorus.h"
#include "harness.h"

#define NRANKS 4
#define FLOOD_MIN 2000
#define ROOT_SILENT 300
#define ROOT_SILENT_LOWFD 400
#define RANK_SILENT 40
#define JOB_LIMIT_S 60.0

/* What the processes share (an anonymous shared page, made before the forks). */
typedef struct shared {
    int inited; /* ranks past chorusCommInitRank */
    int attack_done; /* the attacker is done with the rank listeners */
    int finished; /* ranks done with everything */
    int failed; /* a rank failed: nobody waits for the rest */
    int id_ready; /* id holds the job's unique id */
    int flooding; /* the attacker has made FLOOD_MIN connections: the ranks may start */
    chorusUniqueId id;
} shared_t;

static shared_t *sh;
static int lowfd; /* lowfd or lowfd-rank0 */
static int rank0_root; /* lowfd-rank0: rank 0 makes the id, so its process hosts the root */
static char logdir[256];

static int load(int *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void bump(int *p)
{
    __atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Wait until *p reaches want, deadline_s passes or a rank fails; 1 when *p got there. */
static int wait_for(int *p, int want, double deadline_s)
{
    while (load(p) < want) {
        if (harness_now_s() > deadline_s || load(&sh->failed))
            return 0;
        sleep_ms(5);
    }
    return 1;
}

/* ---- a rank ---- */

static void check_allreduce(chorusComm_t comm, int rank, size_t count, int round)
{
    int32_t *buf = malloc(count * sizeof(int32_t));
    for (size_t i = 0; i < count; i++)
        buf[i] = (rank + 1) * 1000 + (int32_t)(i % 1000) + round;
    CHECK_OK(chorusAllReduce(buf, buf, count, chorusInt32, chorusSum, comm, NULL));
    for (size_t i = 0; i < count; i++) {
        int32_t want = 1000 * NRANKS * (NRANKS + 1) / 2 + NRANKS * ((int32_t)(i % 1000) + round);
        if (buf[i] != want) {
            FAIL("rank %d: all-reduce of %zu (round %d): element %zu is %d, want %d", rank, count,
                 round, i, buf[i], want);
            break;
        }
    }
    free(buf);
}

/* The unique id, once its maker published it; 0 when it never came. */
static int get_id(chorusUniqueId *id)
{
    if (!wait_for(&sh->id_ready, 1, harness_now_s() + 10))
        return 0;
    *id = sh->id;
    return 1;
}

static void publish_id(const chorusUniqueId *id)
{
    sh->id = *id;
    __atomic_store_n(&sh->id_ready, 1, __ATOMIC_RELEASE);
}

static void limit_fds(int n)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = (rlim_t)n;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        FAIL("setrlimit(RLIMIT_NOFILE, %d): %s", n, strerror(errno));
}

static int rank_main(int rank)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/rank%d.log", logdir, rank);
    setenv("CHORUS_DEBUG", "INFO", 1);
    setenv("CHORUS_DEBUG_SUBSYS", "BOOT", 1);
    setenv("CHORUS_DEBUG_FILE", path, 1);
    chorusUniqueId id;
    if (rank0_root && rank == 0) {
        /* The MPI pattern: rank 0 makes the id (and so hosts the root), then joins once the
         * stranger holds its silent connections to that root. */
        limit_fds(200);
        CHECK_OK(chorusGetUniqueId(&id));
        publish_id(&id);
        if (!wait_for(&sh->flooding, 1, harness_now_s() + 20))
            FAIL("rank 0: the attacker never got its flood going");
    } else {
        if (!get_id(&id)) {
            FAIL("rank %d: no unique id", rank);
            return 1;
        }
        if (!wait_for(&sh->flooding, 1, harness_now_s() + 20)) { /* meet the root mid-flood */
            FAIL("rank %d: the attacker never got its flood going", rank);
            return 1;
        }
    }
    double t0 = harness_now_s();
    chorusComm_t comm = NULL;
    chorusResult_t res = chorusCommInitRank(&comm, NRANKS, id, rank);
    if (res != chorusSuccess) {
        FAIL("rank %d: chorusCommInitRank under the flood: %s: %s", rank, chorusGetErrorString(res),
             chorusGetLastError(NULL));
        bump(&sh->failed);
        return 1;
    }
    printf("     rank %d: init took %.2f s under the flood\n", rank, harness_now_s() - t0);
    check_allreduce(comm, rank, 1000, 0);
    bump(&sh->inited);
    if (!wait_for(&sh->attack_done, 1, harness_now_s() + JOB_LIMIT_S))
        FAIL("rank %d: the attacker never finished", rank);
    check_allreduce(comm, rank, 1, 1);
    check_allreduce(comm, rank, 65537, 2);
    check_allreduce(comm, rank, 1 << 20, 3);
    CHECK_OK(chorusCommDestroy(comm));
    bump(&sh->finished);
    return harness_failures != 0;
}

/* ---- the attacker ---- */

/* Non-blocking connect to a, waited for up to 500 ms; -1 when refused or slow. */
static int attack_connect(const sock_addr_t *a)
{
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t len = a->sa.sa_family == AF_INET ? sizeof(a->sin) : sizeof(a->sin6);
    if (connect(fd, &a->sa, len) == 0)
        return fd;
    if (errno == EINPROGRESS) {
        struct pollfd p = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t elen = sizeof(err);
        if (poll(&p, 1, 500) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 &&
            err == 0)
            return fd;
    }
    close(fd);
    return -1;
}

static void put(int fd, const void *buf, size_t n)
{
    (void)!send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void close_rst(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(fd);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
    rng = harness_splitmix(rng);
    return rng;
}

static root_hello_t root_hello(uint64_t magic, uint64_t secret, int rank, const sock_addr_t *a)
{
    root_hello_t h;
    memset(&h, 0, sizeof(h));
    h.magic = magic;
    h.secret = secret;
    h.rank = rank;
    h.nranks = NRANKS;
    h.listen = *a;
    return h;
}

/* The bad things a stranger sends to a listener. */
enum {
    K_RST,
    K_SHORT, /* 0..7 bytes, then close */
    K_MAGIC,
    K_SECRET,
    K_FRAME_2G,
    K_RANDOM,
    K_RANK, /* right magic and secret, rank out of range */
    K_SILENT,
    NKINDS
};
static const char *kind_names[NKINDS] = {
    "reset",      "0..7 bytes",   "wrong magic",       "wrong secret",
    "2^31 frame", "random bytes", "rank out of range", "silent"};

typedef struct held {
    int fd[1024];
    int n;
} held_t;

/* One bad connection of kind k to the root at a; silent ones go into held (while there is room).
 * Returns 0 when the connection could not be made. */
static int root_attack_one(const boot_id_t *id, int k, long i, held_t *held, int max_held)
{
    int fd = attack_connect(&id->root);
    if (fd < 0)
        return 0;
    root_hello_t h = root_hello(BOOT_MAGIC, id->secret, 0, &id->root);
    switch (k) {
    case K_RST:
        close_rst(fd);
        return 1;
    case K_SHORT:
        put(fd, &h, (size_t)(i / NKINDS) % 8);
        break;
    case K_MAGIC:
        h.magic = ~BOOT_MAGIC;
        put(fd, &h, sizeof(h));
        break;
    case K_SECRET:
        h.secret = id->secret ^ (1ull << (i % 64));
        put(fd, &h, sizeof(h));
        break;
    case K_FRAME_2G: {
        frame_hdr_t f = {BOOT_TAG_ALLGATHER, 1u << 31};
        put(fd, &f, sizeof(f));
        break;
    }
    case K_RANDOM: {
        uint64_t junk[16];
        for (int j = 0; j < 16; j++)
            junk[j] = next_rand();
        put(fd, junk, 8 + next_rand() % 120);
        break;
    }
    case K_RANK:
        h.rank = (i / NKINDS) % 2 ? NRANKS : -1;
        put(fd, &h, sizeof(h));
        break;
    case K_SILENT:
        if (held->n < max_held) {
            held->fd[held->n++] = fd;
            return 1;
        }
        break;
    }
    close(fd);
    return 1;
}

/* lowfd: keep max_held silent connections open, replacing each the root closes. */
static void refill_silent(const boot_id_t *id, held_t *held, int max_held, long *reopened)
{
    for (int j = 0; j < held->n; j++) {
        struct pollfd p = {held->fd[j], POLLIN, 0};
        char c;
        if (poll(&p, 1, 0) == 1 && recv(held->fd[j], &c, 1, MSG_DONTWAIT) <= 0) {
            close(held->fd[j]);
            held->fd[j] = held->fd[--held->n];
            j--;
        }
    }
    /* A few at a time: the flood goes on between refills. */
    for (int budget = 32; held->n < max_held && budget > 0; budget--) {
        int fd = attack_connect(&id->root);
        if (fd < 0)
            break;
        held->fd[held->n++] = fd;
        (*reopened)++;
    }
}

/* Every rank's listener address, from its log; 1 when all were found. */
static int read_listeners(sock_addr_t addrs[NRANKS])
{
    for (int r = 0; r < NRANKS; r++) {
        char path[300], line[1024];
        snprintf(path, sizeof(path), "%s/rank%d.log", logdir, r);
        FILE *f = fopen(path, "r");
        int found = 0;
        while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
            const char *p = strstr(line, "bootstrap listener on ");
            char host[64];
            int port;
            if (p == NULL || sscanf(p, "bootstrap listener on %63[0-9.]:%d", host, &port) != 2)
                continue;
            memset(&addrs[r], 0, sizeof(addrs[r]));
            addrs[r].sin.sin_family = AF_INET;
            addrs[r].sin.sin_port = htons((uint16_t)port);
            found = inet_pton(AF_INET, host, &addrs[r].sin.sin_addr) == 1;
        }
        if (f != NULL)
            fclose(f);
        if (!found)
            return 0;
    }
    return 1;
}

/* Wait until the listener hangs up each fd of bad (it sent a whole bad hello). */
static void expect_hangups(int *bad, int nbad, int rank, double deadline_s)
{
    int open = nbad;
    while (open > 0 && harness_now_s() < deadline_s) {
        for (int j = 0; j < nbad; j++) {
            if (bad[j] < 0)
                continue;
            struct pollfd p = {bad[j], POLLIN, 0};
            char c[64];
            if (poll(&p, 1, 0) == 1 && recv(bad[j], c, sizeof(c), MSG_DONTWAIT) <= 0) {
                close(bad[j]);
                bad[j] = -1;
                open--;
            }
        }
        sleep_ms(10);
    }
    if (open > 0)
        FAIL("rank %d's listener kept %d of %d connections with a bad hello open for 6 s", rank,
             open, nbad);
    for (int j = 0; j < nbad; j++)
        if (bad[j] >= 0)
            close(bad[j]);
}

static void attack_listeners(const boot_id_t *id, held_t *held)
{
    sock_addr_t addrs[NRANKS];
    double deadline = harness_now_s() + 10;
    while (!read_listeners(addrs)) {
        if (harness_now_s() > deadline) {
            FAIL("no \"bootstrap listener on\" line in every rank's log (%s/rank*.log)", logdir);
            return;
        }
        sleep_ms(20);
    }
    long sent = 0;
    int held_before = held->n;
    for (int r = 0; r < NRANKS; r++) {
        int bad[200], nbad = 0;
        for (int i = 0; i < 112; i++) {
            int k = i % 14;
            int fd = attack_connect(&addrs[r]);
            if (fd < 0) {
                FAIL("rank %d's listener refused a connection (attack %d)", r, i);
                continue;
            }
            sent++;
            peer_hello_t p = {BOOT_MAGIC, id->secret, 0, 0};
            frame_hdr_t f2g = {BOOT_TAG_ALLGATHER | 1, 1u << 31};
            switch (k) {
            case 0:
                close_rst(fd);
                continue;
            case 1:
            case 2:
                put(fd, &p, (size_t)(i % 8));
                close(fd);
                continue;
            case 3:
                p.magic = ~BOOT_MAGIC;
                break;
            case 4:
                p.secret = ~id->secret;
                break;
            case 5:
                p.rank = -1;
                break;
            case 6:
                p.rank = NRANKS;
                break;
            case 7:
                p.rank = INT_MAX;
                break;
            case 8: {
                root_hello_t h = root_hello(BOOT_MAGIC, id->secret, 1, &addrs[r]);
                put(fd, &h, sizeof(h));
                put(fd, &f2g, sizeof(f2g));
                bad[nbad++] = fd;
                continue;
            }
            case 9: {
                put(fd, &f2g, sizeof(f2g));
                put(fd, &f2g, sizeof(f2g));
                put(fd, &f2g, sizeof(f2g));
                bad[nbad++] = fd;
                continue;
            }
            case 10: {
                uint64_t junk[8];
                for (int j = 0; j < 8; j++)
                    junk[j] = next_rand();
                put(fd, junk, sizeof(junk));
                bad[nbad++] = fd;
                continue;
            }
            default:
                if (held->n < (int)(sizeof(held->fd) / sizeof(held->fd[0])) && k < 13) {
                    held->fd[held->n++] = fd; /* silent, to the end */
                    continue;
                }
                close(fd);
                continue;
            }
            put(fd, &p, sizeof(p));
            put(fd, &f2g, sizeof(f2g));
            bad[nbad++] = fd;
        }
        expect_hangups(bad, nbad, r, harness_now_s() + 6);
    }
    printf("     attacker: %ld bad connections to the 4 rank listeners (%d silent held); every "
           "one with a whole bad hello was closed by the rank\n",
           sent, held->n - held_before);
}

static int attacker_main(void)
{
    chorusUniqueId uid;
    if (!get_id(&uid)) {
        FAIL("attacker: no unique id");
        return 1;
    }
    boot_id_t id;
    memcpy(&id, uid.internal, sizeof(id));
    static held_t held;
    long made = 0, failed = 0, by_kind[NKINDS] = {0}, reopened = 0;
    double t0 = harness_now_s(), deadline = t0 + JOB_LIMIT_S;
    int max_held = lowfd ? ROOT_SILENT_LOWFD : ROOT_SILENT, peak_held = 0;
    if (lowfd)
        refill_silent(&id, &held, max_held, &reopened);
    /* Until every rank is past init, and at least FLOOD_MIN connections. */
    /* The ranks start once FLOOD_MIN connections are in; the flood goes on until every rank is
     * past init. */
    for (long i = 0; harness_now_s() < deadline && !load(&sh->failed); i++) {
        if (load(&sh->inited) == NRANKS)
            break;
        int k = (int)(i % NKINDS);
        if (root_attack_one(&id, k, i, &held, max_held)) {
            made++;
            by_kind[k]++;
        } else {
            failed++; /* the root is gone (all ranks met it) or too busy to accept */
            sleep_ms(1);
        }
        if (lowfd && i % 16 == 0)
            refill_silent(&id, &held, max_held, &reopened);
        if (made == FLOOD_MIN)
            __atomic_store_n(&sh->flooding, 1, __ATOMIC_RELEASE);
        peak_held = held.n > peak_held ? held.n : peak_held;
    }
    printf("     attacker: %ld bad connections to the root in %.2f s (%ld could not connect: the "
           "root had finished or was full); up to %d silent held at once",
           made, harness_now_s() - t0, failed, peak_held);
    if (lowfd)
        printf("; %ld silent ones reopened after the root dropped them", reopened);
    printf("\n     attacker: by kind:");
    for (int k = 0; k < NKINDS; k++)
        printf(" %s %ld%s", kind_names[k], by_kind[k], k + 1 < NKINDS ? "," : "\n");
    if (made < FLOOD_MIN && !load(&sh->failed))
        FAIL("attacker: only %ld connections reached the root", made);
    if (!lowfd)
        attack_listeners(&id, &held);
    __atomic_store_n(&sh->attack_done, 1, __ATOMIC_RELEASE);
    wait_for(&sh->finished, NRANKS, deadline);
    for (int j = 0; j < held.n; j++)
        close(held.fd[j]);
    return harness_failures != 0;
}

/* ---- the parent ---- */

static void dump_logs(void)
{
    for (int r = 0; r < NRANKS; r++) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd),
                 "echo '--- rank %d log (last 15 lines)'; tail -n 15 %s/rank%d.log", r, logdir, r);
        (void)!system(cmd);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "flood";
    if (strcmp(mode, "flood") != 0 && strcmp(mode, "lowfd") != 0 &&
        strcmp(mode, "lowfd-rank0") != 0) {
        fprintf(stderr, "usage: %s [flood|lowfd|lowfd-rank0]\n", argv[0]);
        return 2;
    }
    lowfd = strncmp(mode, "lowfd", 5) == 0;
    rank0_root = strcmp(mode, "lowfd-rank0") == 0;
    setenv("CHORUS_TIMEOUT_MS", "30000", 1);
    printf("test_boot_flood %s\n", mode);
    signal(SIGPIPE, SIG_IGN);

    if (harness_mkdtemp(logdir, sizeof(logdir), "boot_flood") != 0 ||
        (sh = harness_shared(sizeof(*sh))) == NULL)
        return 1;

    /* Fork before any thread exists (chorusGetUniqueId starts the root's). */
    pid_t pids[NRANKS + 1];
    for (int i = 0; i <= NRANKS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int rc = i < NRANKS ? rank_main(i) : attacker_main();
            if (rc != 0)
                bump(&sh->failed);
            fflush(stdout);
            _exit(rc);
        }
    }
    double t0 = harness_now_s();
    if (!rank0_root) {
        /* A launcher's id: this process hosts the root. */
        if (lowfd)
            limit_fds(200);
        chorusUniqueId id;
        CHECK_OK(chorusGetUniqueId(&id));
        publish_id(&id);
    }

    int left = NRANKS + 1, killed = 0;
    double failed_at = 0;
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p == 0) {
            double now = harness_now_s();
            if (failed_at == 0 && load(&sh->failed))
                failed_at = now;
            /* A failed rank leaves the others waiting out CHORUS_TIMEOUT_MS: 2 s of grace to
             * report their own errors, then the test ends. */
            if (!killed &&
                (now - t0 > JOB_LIMIT_S + 10 || (failed_at > 0 && now > failed_at + 2))) {
                if (failed_at == 0)
                    FAIL("the job did not finish within %.0f s: killing it", JOB_LIMIT_S + 10);
                else
                    printf("     a process failed: stopping the others\n");
                for (int i = 0; i <= NRANKS; i++)
                    kill(pids[i], SIGKILL);
                killed = 1;
            }
            sleep_ms(20);
            continue;
        }
        if (p < 0)
            break;
        left--;
        for (int i = 0; i <= NRANKS; i++)
            if (pids[i] == p && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
                !(killed && failed_at > 0))
                FAIL("%s %d %s %d", i < NRANKS ? "rank" : "attacker", i,
                     WIFEXITED(status) ? "exited with" : "was killed by signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    double dt = harness_now_s() - t0;
    printf("     the job took %.2f s in all (limit %.0f s)\n", dt, JOB_LIMIT_S);
    if (dt > JOB_LIMIT_S)
        FAIL("the job took %.1f s, over the %.0f s bound (CHORUS_TIMEOUT_MS=30000)", dt,
             JOB_LIMIT_S);
    if (harness_failures != 0)
        dump_logs();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", logdir);
    if (getenv("BOOT_FLOOD_KEEP") == NULL) /* set: keep the ranks' logs */
        (void)!system(cmd);
    else
        printf("     logs kept in %s\n", logdir);
    return harness_finish("test_boot_flood %s: 4 ranks init%s, all-reduce exactly and destroy "
                          "while a stranger floods the root with %d+ bad connections%s",
                          mode, lowfd ? " (root at RLIMIT_NOFILE 200)" : "", FLOOD_MIN,
                          lowfd ? " and holds 400 silent ones"
                                : " and then attacks each rank's "
                                  "listener");
}
