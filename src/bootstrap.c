/*
 * bootstrap.c: a rank's side of the bootstrap: meet the root, then tagged messages rank to rank.
 *
 * Each rank listens; a peer's first message opens a connection that starts with a hello proving
 * the secret, and a connection with a bad hello is closed while the listener keeps serving.
 * Messages that arrive before anyone asks for them wait in a FIFO queue keyed by (peer, tag);
 * every length is checked before anything is allocated, and every wait has a deadline.
 */
#define _GNU_SOURCE
#include "bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_wire.h"
#include "debug.h"
#include "fifo.h"

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
    char str[80], str2[80];
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
    char ifname[64] = "lo";
    if (id->root.sa.sa_family == AF_INET && ntohl(id->root.sin.sin_addr.s_addr) >> 24 == 127 &&
        (ifname_spec == NULL || ifname_spec[0] == '\0')) {
        mine = id->root;
        mine.sin.sin_port = 0;
    } else {
        CHECK_GOTO(sock_pick_addr(ifname_spec, &mine, ifname, sizeof(ifname)), res, err_free);
    }
    sock_addr_t bound;
    CHECK_GOTO(sock_listen(&mine, &b->listen_fd, &bound), res, err_free);
    INFO(SUB_BOOT, "rank %d: bootstrap listener on %s (%s); root at %s", rank,
         sock_addr_str(&bound, str, sizeof(str)), ifname,
         sock_addr_str(&id->root, str2, sizeof(str2)));

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

/* A queued message of nbytes; the caller fills data. */
static chorusResult_t queue_new(int peer, uint32_t tag, uint32_t nbytes, boot_msg_t **m_p)
{
    boot_msg_t *m = malloc(sizeof(*m) + nbytes);
    if (m == NULL)
        return ERR(chorusSystemError, SUB_BOOT, "out of memory for a %u-byte message", nbytes);
    m->next = NULL;
    m->peer = peer;
    m->tag = tag;
    m->nbytes = nbytes;
    *m_p = m;
    return chorusSuccess;
}

static void queue_append(boot_t *b, boot_msg_t *m)
{
    if (b->queue_tail)
        b->queue_tail->next = m;
    else
        b->queue_head = m;
    b->queue_tail = m;
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
        boot_msg_t *m = NULL;
        CHECK_GOTO(queue_new(peer, tag, (uint32_t)nbytes, &m), res, out);
        memcpy(m->data, buf, nbytes);
        queue_append(b, m);
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
    boot_msg_t *m = NULL;
    CHECK(queue_new(peer, f.tag, f.nbytes, &m));
    chorusResult_t res = sock_recv_all(b->in_fd[peer], m->data, f.nbytes, deadline);
    if (res != chorusSuccess) {
        free(m);
        return res;
    }
    queue_append(b, m);
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
            pending_refuse(p, "bootstrap listener",
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
            pending_refuse(p, "bootstrap listener", why);
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
