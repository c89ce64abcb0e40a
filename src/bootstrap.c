/*
 * bootstrap.c: the root rendezvous thread and the rank-to-rank tagged messages.
 *
 * Wire formats are packed fixed-size structs. The root accepts connections without blocking on
 * any one of them: a connection that sends a bad or short hello (a port scan, a stale job, a wrong
 * secret) is dropped after its own short deadline and the root keeps serving. Ranks do the same
 * for their own listeners. Messages that arrive before anyone asks for them wait in a FIFO queue
 * keyed by (peer, tag).
 */
#define _GNU_SOURCE
#include "bootstrap.h"

#include <errno.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "debug.h"
#include "fifo.h"

#define BOOT_MAX_RANKS (1 << 20)
#define BOOT_MAX_MSG ((uint32_t)64 << 20)
#define HELLO_TIMEOUT_NS (5LL * 1000 * 1000 * 1000)

typedef struct __attribute__((packed)) root_hello {
    uint64_t magic;
    uint64_t secret;
    int32_t rank;
    int32_t nranks;
    sock_addr_t listen;
    uint32_t reserved;
} root_hello_t;
_Static_assert(sizeof(root_hello_t) == 56, "wire format");

typedef struct __attribute__((packed)) root_reply {
    uint64_t magic;
    int32_t nranks;
    int32_t reserved;
} root_reply_t;
_Static_assert(sizeof(root_reply_t) == 16, "wire format");

typedef struct __attribute__((packed)) peer_hello {
    uint64_t magic;
    uint64_t secret;
    int32_t rank;
    int32_t reserved;
} peer_hello_t;
_Static_assert(sizeof(peer_hello_t) == 24, "wire format");

typedef struct __attribute__((packed)) frame_hdr {
    uint32_t tag;
    uint32_t nbytes;
} frame_hdr_t;
_Static_assert(sizeof(frame_hdr_t) == 8, "wire format");

/* An accepted connection that has not yet sent a complete, valid hello. */
typedef struct pending {
    int fd;
    size_t got;
    int64_t deadline;
    sock_addr_t from;
    char buf[64];
} pending_t;

typedef struct pending_set {
    pending_t *items;
    int n, cap;
} pending_set_t;

static void pending_add(pending_set_t *s, int fd, const sock_addr_t *from)
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

static void pending_remove(pending_set_t *s, int i, int close_fd)
{
    if (close_fd)
        close(s->items[i].fd);
    s->items[i] = s->items[--s->n];
}

static void pending_free(pending_set_t *s)
{
    while (s->n > 0)
        pending_remove(s, s->n - 1, 1);
    free(s->items);
    s->items = NULL;
    s->cap = 0;
}

static void accept_all(int listen_fd, pending_set_t *s)
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

/* Read what is available of a hello of want bytes. 1: complete; 0: not yet; -1: drop it. */
static int pending_read(pending_t *p, size_t want)
{
    ssize_t n = recv(p->fd, p->buf + p->got, want - p->got, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return -1;
    if (n > 0)
        p->got += (size_t)n;
    return p->got == want ? 1 : 0;
}

static void refuse(const pending_t *p, const char *who, const char *why)
{
    char str[80];
    WARN(SUB_BOOT, "%s refused a connection from %s: %s", who,
         sock_addr_str(&p->from, str, sizeof(str)), why);
}

/* ---- root ---- */

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
                refuse(p, "bootstrap root",
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
                refuse(p, "bootstrap root", why);
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

/* ---- ranks ---- */

typedef struct boot_msg {
    struct boot_msg *next;
    int peer;
    uint32_t tag;
    uint32_t nbytes;
    char data[];
} boot_msg_t;

struct boot {
    int rank, nranks;
    uint64_t secret;
    int listen_fd;
    sock_addr_t *addrs;
    int *out_fd;
    int *in_fd;
    char *in_closed;
    pending_set_t pend;
    boot_msg_t *queue_head, *queue_tail;
    int64_t timeout_ns;
    const volatile uint32_t *abort_flag;
    uint32_t seq;
    pthread_mutex_t lock;
};

chorusResult_t boot_init(const boot_id_t *id, int rank, int nranks, const char *ifname_spec,
                         int64_t timeout_ms, const volatile uint32_t *abort_flag, boot_t **boot_p)
{
    chorusResult_t res = chorusSuccess;
    char str[80];
    if (id->magic != BOOT_MAGIC)
        return ERR(chorusInvalidArgument, SUB_BOOT,
                   "commId is not a Chorus unique id (bad magic): was it made by "
                   "chorusGetUniqueId and carried intact to every rank?");
    boot_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return ERR(chorusSystemError, SUB_BOOT, "out of memory");
    b->rank = rank;
    b->nranks = nranks;
    b->secret = id->secret;
    b->timeout_ns = timeout_ms * 1000000;
    b->abort_flag = abort_flag;
    b->listen_fd = -1;
    pthread_mutex_init(&b->lock, NULL);
    b->addrs = calloc(nranks, sizeof(sock_addr_t));
    b->out_fd = malloc(sizeof(int) * nranks);
    b->in_fd = malloc(sizeof(int) * nranks);
    b->in_closed = calloc(nranks, 1);
    if (!b->addrs || !b->out_fd || !b->in_fd || !b->in_closed) {
        res = ERR(chorusSystemError, SUB_BOOT, "out of memory for %d ranks", nranks);
        goto err_free;
    }
    for (int i = 0; i < nranks; i++)
        b->out_fd[i] = b->in_fd[i] = -1;

    /* Listen on the same family as the root, on the chosen interface (loopback root: loopback). */
    sock_addr_t mine;
    if (id->root.sa.sa_family == AF_INET && ntohl(id->root.sin.sin_addr.s_addr) >> 24 == 127 &&
        (ifname_spec == NULL || ifname_spec[0] == '\0')) {
        mine = id->root;
        mine.sin.sin_port = 0;
    } else {
        CHECK_GOTO(sock_pick_addr(ifname_spec, &mine, NULL, 0), res, err_free);
    }
    sock_addr_t bound;
    CHECK_GOTO(sock_listen(&mine, &b->listen_fd, &bound), res, err_free);

    int64_t deadline = fifo_now_ns() + b->timeout_ns;
    int fd;
    CHECK_GOTO(sock_connect(&id->root, deadline, abort_flag, &fd), res, err_close);
    root_hello_t h;
    memset(&h, 0, sizeof(h));
    h.magic = BOOT_MAGIC;
    h.secret = id->secret;
    h.rank = rank;
    h.nranks = nranks;
    h.listen = bound;
    root_reply_t r;
    res = sock_send_all(fd, &h, sizeof(h), deadline);
    if (res == chorusSuccess)
        res = sock_recv_all(fd, &r, sizeof(r), deadline);
    if (res == chorusSuccess && (r.magic != BOOT_MAGIC || r.nranks != nranks))
        res = ERR(chorusInvalidUsage, SUB_BOOT,
                  "bootstrap root at %s answered for %d ranks where this rank expects %d: do all "
                  "ranks pass the same nranks?",
                  sock_addr_str(&id->root, str, sizeof(str)), r.nranks, nranks);
    if (res == chorusSuccess)
        res = sock_recv_all(fd, b->addrs, sizeof(sock_addr_t) * nranks, deadline);
    close(fd);
    if (res != chorusSuccess) {
        WARN(SUB_BOOT, "rank %d: rendezvous with the bootstrap root at %s failed", rank,
             sock_addr_str(&id->root, str, sizeof(str)));
        goto err_close;
    }
    *boot_p = b;
    return chorusSuccess;
err_close:
    close(b->listen_fd);
err_free:
    free(b->addrs);
    free(b->out_fd);
    free(b->in_fd);
    free(b->in_closed);
    pthread_mutex_destroy(&b->lock);
    free(b);
    return res;
}

static chorusResult_t queue_push(boot_t *b, int peer, uint32_t tag, const void *data,
                                 uint32_t nbytes)
{
    boot_msg_t *m = malloc(sizeof(*m) + nbytes);
    if (m == NULL)
        return ERR(chorusSystemError, SUB_BOOT, "out of memory for a %u-byte message", nbytes);
    m->next = NULL;
    m->peer = peer;
    m->tag = tag;
    m->nbytes = nbytes;
    if (data != NULL)
        memcpy(m->data, data, nbytes);
    if (b->queue_tail)
        b->queue_tail->next = m;
    else
        b->queue_head = m;
    b->queue_tail = m;
    return chorusSuccess;
}

chorusResult_t boot_send(boot_t *b, int peer, uint32_t tag, const void *buf, size_t nbytes)
{
    chorusResult_t res = chorusSuccess;
    char str[80];
    if (nbytes > BOOT_MAX_MSG)
        return ERR(chorusInternalError, SUB_BOOT, "bootstrap message of %zu bytes is too large",
                   nbytes);
    pthread_mutex_lock(&b->lock);
    if (peer == b->rank) {
        res = queue_push(b, peer, tag, buf, (uint32_t)nbytes);
        goto out;
    }
    int64_t deadline = fifo_now_ns() + b->timeout_ns;
    if (b->out_fd[peer] < 0) {
        int fd;
        CHECK_GOTO(sock_connect(&b->addrs[peer], deadline, b->abort_flag, &fd), res, out);
        peer_hello_t h = {BOOT_MAGIC, b->secret, b->rank, 0};
        res = sock_send_all(fd, &h, sizeof(h), deadline);
        if (res != chorusSuccess) {
            close(fd);
            goto out;
        }
        b->out_fd[peer] = fd;
    }
    frame_hdr_t f = {tag, (uint32_t)nbytes};
    res = sock_send_all(b->out_fd[peer], &f, sizeof(f), deadline);
    if (res == chorusSuccess)
        res = sock_send_all(b->out_fd[peer], buf, nbytes, deadline);
    if (res != chorusSuccess)
        WARN(SUB_BOOT, "rank %d: bootstrap send to rank %d at %s failed", b->rank, peer,
             sock_addr_str(&b->addrs[peer], str, sizeof(str)));
out:
    pthread_mutex_unlock(&b->lock);
    return res;
}

/* Read one frame from an established incoming connection into the queue. */
static chorusResult_t read_frame(boot_t *b, int peer, int64_t deadline)
{
    frame_hdr_t f;
    ssize_t n = recv(b->in_fd[peer], &f, 1, MSG_PEEK);
    if (n == 0) {
        close(b->in_fd[peer]);
        b->in_fd[peer] = -1;
        b->in_closed[peer] = 1;
        return chorusSuccess;
    }
    if (n < 0)
        return (errno == EAGAIN || errno == EINTR) ? chorusSuccess
                                                   : ERR(chorusRemoteError, SUB_BOOT,
                                                         "bootstrap connection from rank %d "
                                                         "failed: %s",
                                                         peer, strerror(errno));
    CHECK(sock_recv_all(b->in_fd[peer], &f, sizeof(f), deadline));
    if (f.nbytes > BOOT_MAX_MSG)
        return ERR(chorusRemoteError, SUB_BOOT,
                   "rank %d sent a bootstrap frame of %u bytes (limit %u): corrupt stream", peer,
                   f.nbytes, BOOT_MAX_MSG);
    boot_msg_t *m = malloc(sizeof(*m) + f.nbytes);
    if (m == NULL)
        return ERR(chorusSystemError, SUB_BOOT, "out of memory for a %u-byte message", f.nbytes);
    chorusResult_t res = sock_recv_all(b->in_fd[peer], m->data, f.nbytes, deadline);
    if (res != chorusSuccess) {
        free(m);
        return res;
    }
    m->next = NULL;
    m->peer = peer;
    m->tag = f.tag;
    m->nbytes = f.nbytes;
    if (b->queue_tail)
        b->queue_tail->next = m;
    else
        b->queue_head = m;
    b->queue_tail = m;
    return chorusSuccess;
}

/* Validate hellos of pending incoming connections; a bad one is dropped with a WARN. */
static void serve_pending(boot_t *b)
{
    int64_t now = fifo_now_ns();
    for (int i = b->pend.n - 1; i >= 0; i--) {
        pending_t *p = &b->pend.items[i];
        int rc = pending_read(p, sizeof(peer_hello_t));
        if (rc == 0 && now < p->deadline)
            continue;
        if (rc <= 0) {
            refuse(p, "bootstrap listener",
                   rc < 0 ? "closed before a full hello" : "no hello within 5 s");
            pending_remove(&b->pend, i, 1);
            continue;
        }
        peer_hello_t h;
        memcpy(&h, p->buf, sizeof(h));
        const char *why = NULL;
        if (h.magic != BOOT_MAGIC)
            why = "not a Chorus bootstrap hello (bad magic)";
        else if (h.secret != b->secret)
            why = "wrong secret";
        else if (h.rank < 0 || h.rank >= b->nranks)
            why = "rank out of range";
        else if (b->in_fd[h.rank] >= 0 || b->in_closed[h.rank])
            why = "a second connection for the same rank";
        if (why != NULL) {
            refuse(p, "bootstrap listener", why);
            pending_remove(&b->pend, i, 1);
            continue;
        }
        b->in_fd[h.rank] = p->fd;
        pending_remove(&b->pend, i, 0);
    }
}

chorusResult_t boot_recv(boot_t *b, int peer, uint32_t tag, void *buf, size_t nbytes)
{
    chorusResult_t res = chorusSuccess;
    pthread_mutex_lock(&b->lock);
    int64_t deadline = fifo_now_ns() + b->timeout_ns;
    struct pollfd *fds = malloc(sizeof(struct pollfd) * (1 + b->nranks + 256));
    int *who = malloc(sizeof(int) * (1 + b->nranks + 256));
    if (fds == NULL || who == NULL) {
        res = ERR(chorusSystemError, SUB_BOOT, "out of memory");
        goto out;
    }
    for (;;) {
        boot_msg_t *prev = NULL;
        for (boot_msg_t *m = b->queue_head; m; prev = m, m = m->next) {
            if (m->peer != peer || m->tag != tag)
                continue;
            if (prev)
                prev->next = m->next;
            else
                b->queue_head = m->next;
            if (b->queue_tail == m)
                b->queue_tail = prev;
            if (m->nbytes != nbytes)
                res = ERR(chorusInvalidUsage, SUB_BOOT,
                          "rank %d sent a %u-byte bootstrap message (tag 0x%x) where %zu bytes "
                          "were expected: do all ranks run the same Chorus version and calls?",
                          peer, m->nbytes, tag, nbytes);
            else
                memcpy(buf, m->data, nbytes);
            free(m);
            goto out;
        }
        if (b->in_closed[peer]) {
            res = ERR(chorusRemoteError, SUB_BOOT,
                      "rank %d closed its bootstrap connection (did it exit or fail?)", peer);
            goto out;
        }
        if (b->abort_flag && *b->abort_flag) {
            res = ERR(chorusRemoteError, SUB_BOOT, "bootstrap wait stopped: aborted");
            goto out;
        }
        if (fifo_now_ns() >= deadline) {
            res = ERR(chorusTimeout, SUB_BOOT,
                      "rank %d: no bootstrap message from rank %d within %lld ms "
                      "(CHORUS_TIMEOUT_MS): is it stuck, or still initializing?",
                      b->rank, peer, (long long)(b->timeout_ns / 1000000));
            goto out;
        }
        int nfds = 0;
        fds[nfds] = (struct pollfd){b->listen_fd, POLLIN, 0};
        who[nfds++] = -1;
        for (int r = 0; r < b->nranks; r++)
            if (b->in_fd[r] >= 0) {
                fds[nfds] = (struct pollfd){b->in_fd[r], POLLIN, 0};
                who[nfds++] = r;
            }
        for (int i = 0; i < b->pend.n && i < 256; i++) {
            fds[nfds] = (struct pollfd){b->pend.items[i].fd, POLLIN, 0};
            who[nfds++] = -2;
        }
        if (poll(fds, nfds, 100) < 0 && errno != EINTR) {
            res = ERR(chorusSystemError, SUB_BOOT, "poll failed: %s", strerror(errno));
            goto out;
        }
        accept_all(b->listen_fd, &b->pend);
        serve_pending(b);
        for (int i = 0; i < nfds; i++)
            if (who[i] >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                b->in_fd[who[i]] >= 0)
                CHECK_GOTO(read_frame(b, who[i], deadline), res, out);
    }
out:
    free(fds);
    free(who);
    pthread_mutex_unlock(&b->lock);
    return res;
}

chorusResult_t boot_allgather(boot_t *b, void *all, size_t nbytes_each)
{
    /* Ring: in step s, pass on the item that came from s ranks back. */
    uint32_t tag = BOOT_TAG_ALLGATHER | (b->seq++ & 0xffffff);
    int next = (b->rank + 1) % b->nranks, prev = (b->rank - 1 + b->nranks) % b->nranks;
    char *p = all;
    for (int s = 0; s < b->nranks - 1; s++) {
        int send_idx = (b->rank - s + b->nranks) % b->nranks;
        int recv_idx = (b->rank - s - 1 + b->nranks) % b->nranks;
        CHECK(boot_send(b, next, tag, p + send_idx * nbytes_each, nbytes_each));
        CHECK(boot_recv(b, prev, tag, p + recv_idx * nbytes_each, nbytes_each));
    }
    return chorusSuccess;
}

chorusResult_t boot_barrier(boot_t *b)
{
    char *tmp = calloc(b->nranks, 1);
    if (tmp == NULL)
        return ERR(chorusSystemError, SUB_BOOT, "out of memory");
    chorusResult_t res = boot_allgather(b, tmp, 1);
    free(tmp);
    return res;
}

void boot_close(boot_t *b)
{
    if (b == NULL)
        return;
    for (int i = 0; i < b->nranks; i++) {
        if (b->out_fd[i] >= 0)
            close(b->out_fd[i]);
        if (b->in_fd[i] >= 0)
            close(b->in_fd[i]);
    }
    pending_free(&b->pend);
    close(b->listen_fd);
    while (b->queue_head) {
        boot_msg_t *m = b->queue_head;
        b->queue_head = m->next;
        free(m);
    }
    free(b->addrs);
    free(b->out_fd);
    free(b->in_fd);
    free(b->in_closed);
    pthread_mutex_destroy(&b->lock);
    free(b);
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
