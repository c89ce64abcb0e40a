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
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_wire.h"
#include "debug.h"
#include "fifo.h"

void pending_add(pending_set_t *s, int fd, const sock_addr_t *from)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        pending_t *items = realloc(s->items, sizeof(pending_t) * cap);
        if (items == NULL) {
            close(fd);
            return;
        }
        s->items = items;
        s->cap = cap;
    }
    pending_t *p = &s->items[s->n++];
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->from = *from;
    p->deadline = fifo_now_ns() + HELLO_TIMEOUT_NS;
}

void pending_remove(pending_set_t *s, int i, int close_fd)
{
    if (close_fd)
        close(s->items[i].fd);
    s->items[i] = s->items[--s->n];
}

void pending_free(pending_set_t *s)
{
    while (s->n > 0)
        pending_remove(s, s->n - 1, 1);
    free(s->items);
    s->items = NULL;
    s->cap = 0;
}

void accept_all(int listen_fd, pending_set_t *s)
{
    for (;;) {
        sock_addr_t from;
        socklen_t len = sizeof(from);
        memset(&from, 0, sizeof(from));
        int fd = accept4(listen_fd, &from.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        pending_add(s, fd, &from);
    }
}

int pending_read(pending_t *p, size_t want)
{
    ssize_t n = recv(p->fd, p->buf + p->got, want - p->got, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return -1;
    if (n > 0)
        p->got += (size_t)n;
    return p->got == want ? 1 : 0;
}

void pending_refuse(const pending_t *p, const char *who, const char *why)
{
    char str[80];
    WARN(SUB_BOOT, "%s refused a connection from %s: %s", who,
         sock_addr_str(&p->from, str, sizeof(str)), why);
}

typedef struct root_args {
    int listen_fd;
    uint64_t secret;
    int64_t deadline;
} root_args_t;

static void *root_thread(void *arg)
{
    root_args_t a = *(root_args_t *)arg;
    free(arg);
    pending_set_t pend = {0};
    int nranks = -1, arrived = 0;
    int *rank_fd = NULL;
    sock_addr_t *addrs = NULL;
    while (arrived != nranks && fifo_now_ns() < a.deadline) {
        struct pollfd fds[257];
        int nfds = 0;
        fds[nfds++] = (struct pollfd){a.listen_fd, POLLIN, 0};
        for (int i = 0; i < pend.n && nfds < 257; i++)
            fds[nfds++] = (struct pollfd){pend.items[i].fd, POLLIN, 0};
        if (poll(fds, nfds, 100) < 0 && errno != EINTR)
            break;
        accept_all(a.listen_fd, &pend);
        int64_t now = fifo_now_ns();
        for (int i = pend.n - 1; i >= 0; i--) {
            pending_t *p = &pend.items[i];
            int rc = pending_read(p, sizeof(root_hello_t));
            if (rc == 0 && now < p->deadline)
                continue;
            if (rc <= 0) {
                pending_refuse(p, "bootstrap root",
                               rc < 0 ? "closed before a full hello" : "no hello within 5 s");
                pending_remove(&pend, i, 1);
                continue;
            }
            root_hello_t h;
            memcpy(&h, p->buf, sizeof(h));
            const char *why = NULL;
            if (h.magic != BOOT_MAGIC)
                why = "not a Chorus bootstrap hello (bad magic)";
            else if (h.secret != a.secret)
                why = "wrong secret (a different job's unique id?)";
            else if (h.nranks <= 0 || h.nranks > BOOT_MAX_RANKS)
                why = "nranks out of range";
            else if (nranks != -1 && h.nranks != nranks)
                why = "nranks differs from the first rank's";
            else if (h.rank < 0 || h.rank >= h.nranks)
                why = "rank out of range";
            else if (rank_fd != NULL && rank_fd[h.rank] >= 0)
                why = "a second connection for the same rank";
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
            if (why != NULL) {
                pending_refuse(p, "bootstrap root", why);
                pending_remove(&pend, i, 1);
                continue;
            }
            rank_fd[h.rank] = p->fd;
            addrs[h.rank] = h.listen;
            arrived++;
            pending_remove(&pend, i, 0);
        }
    }
    if (arrived == nranks) {
        root_reply_t r = {BOOT_MAGIC, nranks, 0};
        int64_t deadline = fifo_now_ns() + HELLO_TIMEOUT_NS * 2;
        for (int i = 0; i < nranks; i++) {
            if (sock_send_all(rank_fd[i], &r, sizeof(r), deadline) != chorusSuccess ||
                sock_send_all(rank_fd[i], addrs, sizeof(sock_addr_t) * nranks, deadline) !=
                    chorusSuccess)
                WARN(SUB_BOOT, "bootstrap root: could not send the address table to rank %d", i);
        }
        TRACE(SUB_BOOT, "bootstrap root served %d ranks", nranks);
    } else {
        WARN(SUB_BOOT, "bootstrap root: only %d of %d ranks arrived before the deadline", arrived,
             nranks);
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
    a->deadline = fifo_now_ns() + timeout_ms * 1000000;
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
