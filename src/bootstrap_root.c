/*
 * bootstrap_root.c: the rendezvous root that chorusGetUniqueId starts, and the pending-hello set
 * both the root and the ranks' listeners use.
 *
 * The root is one detached thread per id, alive until every rank has said hello or the deadline
 * passes. It accepts connections without blocking on any one of them: a connection that sends a
 * bad or short hello (a port scan, a stale job, a wrong secret) is dropped and the root keeps
 * serving. When all nranks hellos are in, each rank gets the table of rank listener addresses.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_wire.h"
#include "debug.h"
#include "fifo.h"

typedef struct root_args {
    int listen_fd;
    uint64_t secret;
    int64_t deadline;
} root_args_t;

/* Roots of this process sending "who is missing" replies. A rank of this process that got its
 * reply waits for them (boot_root_wait_replies) before its init returns: a process that exits on
 * that error would otherwise take the root's thread with it before the other ranks hear. */
static pthread_mutex_t replying_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t replying_cv = PTHREAD_COND_INITIALIZER;
static int replying;

static void replying_add(int d)
{
    pthread_mutex_lock(&replying_lock);
    replying += d;
    if (replying == 0)
        pthread_cond_broadcast(&replying_cv);
    pthread_mutex_unlock(&replying_lock);
}

void boot_root_wait_replies(int64_t timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (timeout_ms % 1000) * 1000000;
    ts.tv_sec += timeout_ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&replying_lock);
    while (replying > 0 && pthread_cond_timedwait(&replying_cv, &replying_lock, &ts) == 0)
        ;
    pthread_mutex_unlock(&replying_lock);
}

static void *root_thread(void *arg)
{
    root_args_t a = *(root_args_t *)arg;
    free(arg);
    pending_set_t pend = {0};
    int nranks = -1, arrived = 0;
    /* Once a rank of this job gave another count, or a rank came twice, the job cannot form:
     * broken is then the reply's status and culprit the rank at fault, told at once to every
     * rank that came and to any that comes before the deadline (they waited for it, then blamed
     * a rank that was fine). */
    int broken = 0, culprit = -1;
    int *rank_fd = NULL;
    sock_addr_t *addrs = NULL;
    while ((broken || arrived != nranks) && fifo_now_ns() < a.deadline) {
        struct pollfd fds[257];
        int nfds = 0;
        fds[nfds++] = (struct pollfd){a.listen_fd, POLLIN, 0};
        for (int i = 0; i < pend.n && nfds < 257; i++)
            fds[nfds++] = (struct pollfd){pend.items[i].fd, POLLIN, 0};
        if (poll(fds, nfds, 100) < 0 && errno != EINTR)
            break;
        if (fds[0].revents & POLLIN)
            accept_all(a.listen_fd, &pend);
        int64_t now = fifo_now_ns();
        for (int i = pend.n - 1; i >= 0; i--) {
            pending_t *p = &pend.items[i];
            int rc = pending_read(p, sizeof(root_hello_t));
            if (rc == 0 && now < p->deadline)
                continue;
            if (rc <= 0) {
                pending_refuse(&pend, p, "bootstrap root",
                               rc < 0 ? "closed before a full hello" : "no hello within 5 s");
                pending_remove(&pend, i, 1);
                continue;
            }
            root_hello_t h;
            memcpy(&h, p->buf, sizeof(h));
            const char *why = boot_check_root_hello(&h, a.secret, nranks, rank_fd);
            if (why == NULL && nranks == -1) {
                nranks = h.nranks;
                rank_fd = malloc(sizeof(int) * nranks);
                addrs = calloc(nranks, sizeof(sock_addr_t));
                if (rank_fd == NULL || addrs == NULL) {
                    WARN(SUB_BOOT, "bootstrap root: out of memory for %d ranks", nranks);
                    goto out;
                }
                for (int r = 0; r < nranks; r++)
                    rank_fd[r] = -1;
            }
            int ours = h.magic == BOOT_MAGIC && h.secret == a.secret;
            if (ours && broken) {
                root_reply_t r = {BOOT_MAGIC, culprit, broken};
                sock_send_all(p->fd, &r, sizeof(r), now + 100000000);
                pending_refuse(&pend, p, "bootstrap root", "the job cannot form (told it)");
                pending_remove(&pend, i, 1);
                continue;
            }
            if (why != NULL && nranks > 0 && ours &&
                (h.nranks != nranks || (h.rank >= 0 && h.rank < nranks && rank_fd[h.rank] >= 0))) {
                broken = h.nranks != nranks ? ROOT_REPLY_JOB_NRANKS : ROOT_REPLY_DUP_RANK;
                culprit = h.rank;
                root_reply_t tell = {BOOT_MAGIC, culprit, broken};
                /* The one at fault first: told the root's count (another count), or told as the
                 * others (a rank twice). Then the ranks that came: one of them may host this
                 * root and exit once told, so the replies count as owed (replying_add) until
                 * sent, and a rank told waits for them (boot_root_wait_replies). */
                root_reply_t mine = {BOOT_MAGIC, nranks, ROOT_REPLY_NRANKS};
                replying_add(1);
                sock_send_all(p->fd, broken == ROOT_REPLY_DUP_RANK ? &tell : &mine, sizeof(tell),
                              now + 100000000);
                for (int q = 0; q < nranks; q++)
                    if (rank_fd[q] >= 0) {
                        sock_send_all(rank_fd[q], &tell, sizeof(tell), now + 100000000);
                        close(rank_fd[q]);
                        rank_fd[q] = -1;
                    }
                replying_add(-1);
                arrived = 0;
                char say[128];
                snprintf(say, sizeof(say), "%s %d; every rank of the job is told its init fails",
                         broken == ROOT_REPLY_DUP_RANK ? "two connections gave rank"
                                                       : "another rank count from rank",
                         culprit);
                pending_refuse(&pend, p, "bootstrap root", say);
                pending_remove(&pend, i, 1);
                continue;
            }
            if (why != NULL) {
                pending_refuse(&pend, p, "bootstrap root", why);
                pending_remove(&pend, i, 1);
                continue;
            }
            rank_fd[h.rank] = p->fd;
            addrs[h.rank] = h.listen;
            arrived++;
            pending_remove(&pend, i, 0);
        }
    }
    if (broken) {
        INFO(SUB_BOOT, "bootstrap root: the job could not form; its deadline passed");
    } else if (arrived == nranks) {
        root_reply_t r = {BOOT_MAGIC, nranks, ROOT_REPLY_OK};
        int64_t deadline = fifo_now_ns() + HELLO_TIMEOUT_NS * 2;
        for (int i = 0; i < nranks; i++) {
            if (sock_send_all(rank_fd[i], &r, sizeof(r), deadline) != chorusSuccess ||
                sock_send_all(rank_fd[i], addrs, sizeof(sock_addr_t) * nranks, deadline) !=
                    chorusSuccess)
                WARN(SUB_BOOT, "bootstrap root: could not send the address table to rank %d", i);
        }
        TRACE(SUB_BOOT, "bootstrap root served %d ranks", nranks);
    } else if (nranks > 0) {
        /* Tell the ranks that came who did not: their init fails now, naming the missing. */
        root_missing_t m;
        memset(&m, 0, sizeof(m));
        for (int r = 0; r < nranks; r++)
            if (rank_fd[r] < 0 && m.nmissing++ < ROOT_MISSING_MAX)
                m.ranks[m.nmissing - 1] = r;
        WARN(SUB_BOOT,
             "bootstrap root: only %d of %d ranks arrived before the deadline (first "
             "missing: rank %d)",
             arrived, nranks, m.ranks[0]);
        root_reply_t r = {BOOT_MAGIC, nranks, ROOT_REPLY_MISSING};
        int64_t deadline = fifo_now_ns() + 1000000000LL;
        replying_add(1);
        for (int i = 0; i < nranks; i++)
            if (rank_fd[i] >= 0 &&
                sock_send_all(rank_fd[i], &r, sizeof(r), deadline) == chorusSuccess)
                (void)sock_send_all(rank_fd[i], &m, sizeof(m), deadline);
        replying_add(-1);
    } else {
        INFO(SUB_BOOT, "bootstrap root: no rank arrived before the deadline");
    }
out:
    if (rank_fd != NULL)
        for (int i = 0; i < nranks; i++)
            if (rank_fd[i] >= 0)
                close(rank_fd[i]);
    free(rank_fd);
    free(addrs);
    pending_free(&pend);
    close(a.listen_fd);
    return NULL;
}

chorusResult_t boot_root_start(const sock_addr_t *bind_addr, uint64_t secret, int64_t timeout_ms,
                               boot_id_t *id_p)
{
    int fd;
    sock_addr_t bound;
    CHECK(sock_listen(bind_addr, &fd, &bound));
    root_args_t *a = malloc(sizeof(*a));
    if (a == NULL) {
        close(fd);
        return ERR(chorusSystemError, SUB_BOOT, "out of memory");
    }
    a->listen_fd = fd;
    a->secret = secret;
    /* The root gives up a little before the ranks do, so they hear who is missing. */
    int64_t margin_ms = timeout_ms / 20 > 250 ? timeout_ms / 20 : 250;
    int64_t root_ms =
        timeout_ms - margin_ms > timeout_ms / 2 ? timeout_ms - margin_ms : timeout_ms / 2;
    a->deadline = fifo_now_ns() + root_ms * 1000000;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, root_thread, a);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(a);
        close(fd);
        return ERR(chorusSystemError, SUB_BOOT, "pthread_create for the bootstrap root: %s",
                   strerror(rc));
    }
    /* A wildcard bind is reached through the address the caller gave, if any. */
    if (bind_addr->sa.sa_family == AF_INET && bind_addr->sin.sin_addr.s_addr != 0)
        bound.sin.sin_addr = bind_addr->sin.sin_addr;
    memset(id_p, 0, sizeof(*id_p));
    id_p->magic = BOOT_MAGIC;
    id_p->secret = secret;
    id_p->root = bound;
    return chorusSuccess;
}

chorusResult_t boot_new_id(const char *ifname_spec, int64_t timeout_ms, boot_id_t *id_p)
{
    sock_addr_t addr;
    CHECK(sock_pick_addr(ifname_spec, &addr, NULL, 0));
    uint64_t secret = 0;
    if (getrandom(&secret, sizeof(secret), 0) != sizeof(secret))
        return ERR(chorusSystemError, SUB_BOOT, "getrandom failed: %s", strerror(errno));
    return boot_root_start(&addr, secret, timeout_ms, id_p);
}
