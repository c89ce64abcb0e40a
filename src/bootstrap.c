/*
 * bootstrap.c: a rank's side of the bootstrap: meet the root, then tagged messages rank to rank.
 *
 * Each rank listens; a peer's first message opens a connection that starts with a hello proving
 * the secret, and a connection with a bad hello is closed while the listener keeps serving.
 * The service thread owns the listener and every incoming connection: it validates hellos, reads
 * frames (length checked before anything is allocated) into a queue keyed by (peer, tag), and
 * hands control frames to the communicator's callback. Receivers wait on a condition variable with
 * a deadline and the abort flag; senders own the outgoing connections under their own lock.
 */
#define _GNU_SOURCE
#include "bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_wire.h"
#include "debug.h"
#include "fifo.h"

/* How long the service thread gives a peer to finish a frame it has started. */
#define FRAME_BODY_TIMEOUT_NS (5LL * 1000 * 1000 * 1000)

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
    int64_t timeout_ns;
    const volatile uint32_t *abort_flag;
    uint32_t seq;
    boot_control_fn control;
    void *control_arg;
    /* Outgoing connections: the senders', under send_lock. */
    pthread_mutex_t send_lock;
    int *out_fd;
    /* Incoming connections and pending hellos: the service thread's alone. */
    int *in_fd;
    pending_set_t pend;
    struct pollfd *fds;
    int *who;
    /* Shared with receivers, under lock. */
    pthread_mutex_t lock;
    pthread_cond_t cv; /* a message arrived or a connection closed */
    boot_msg_t *queue_head, *queue_tail;
    char *in_closed; /* [nranks]: the peer closed its connection */
    char **in_error; /* [nranks]: why the peer's connection was dropped (NULL: it was not) */
    int64_t cap_deadline;
    /* The service thread. */
    pthread_t thread;
    int thread_started;
    int wake_fd;
    uint32_t stop;
};

static void *service_main(void *arg);

static void boot_free(boot_t *b)
{
    if (b->listen_fd >= 0)
        close(b->listen_fd);
    if (b->wake_fd >= 0)
        close(b->wake_fd);
    for (int i = 0; b->out_fd && b->in_fd && i < b->nranks; i++) {
        if (b->out_fd[i] >= 0)
            close(b->out_fd[i]);
        if (b->in_fd[i] >= 0)
            close(b->in_fd[i]);
        if (b->in_error)
            free(b->in_error[i]);
    }
    pending_free(&b->pend);
    while (b->queue_head) {
        boot_msg_t *m = b->queue_head;
        b->queue_head = m->next;
        free(m);
    }
    free(b->addrs);
    free(b->out_fd);
    free(b->in_fd);
    free(b->in_closed);
    free(b->in_error);
    free(b->fds);
    free(b->who);
    pthread_mutex_destroy(&b->lock);
    pthread_mutex_destroy(&b->send_lock);
    pthread_cond_destroy(&b->cv);
    free(b);
}

/* Meet the root: send the hello, get the address table. A connection the root dropped (a flood
 * of strangers can crowd it out) is retried until the deadline. */
static chorusResult_t rendezvous(boot_t *b, const boot_id_t *id, const sock_addr_t *bound,
                                 int64_t deadline)
{
    char str[80], cause[512];
    sock_addr_str(&id->root, str, sizeof(str));
    for (int attempt = 0;; attempt++) {
        int fd;
        chorusResult_t res = sock_connect(&id->root, deadline, b->abort_flag, &fd);
        snprintf(cause, sizeof(cause), "%s", debug_last_error());
        if (res != chorusSuccess)
            return ERR(res, SUB_BOOT,
                       "rank %d: cannot reach the bootstrap root at %s (%s): is the process that "
                       "called chorusGetUniqueId (or rank 0 for env init) alive, and the address "
                       "reachable from here?",
                       b->rank, str, cause);
        root_hello_t h;
        memset(&h, 0, sizeof(h));
        h.magic = BOOT_MAGIC;
        h.secret = b->secret;
        h.rank = b->rank;
        h.nranks = b->nranks;
        h.listen = *bound;
        root_reply_t r;
        res = sock_send_all(fd, &h, sizeof(h), deadline);
        if (res == chorusSuccess)
            res = sock_recv_until(fd, &r, sizeof(r), deadline, b->abort_flag);
        snprintf(cause, sizeof(cause), "%s", debug_last_error());
        if (res == chorusRemoteError && fifo_now_ns() < deadline &&
            !(b->abort_flag && *b->abort_flag)) {
            /* Dropped before the answer (or the root went away): try again, slower each time. */
            close(fd);
            INFO(SUB_BOOT,
                 "rank %d: the bootstrap root at %s dropped the connection (%s); "
                 "retrying",
                 b->rank, str, cause);
            struct timespec ts = {0, (attempt < 10 ? attempt + 1 : 10) * 10000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (res != chorusSuccess) {
            close(fd);
            if (res == chorusTimeout)
                return ERR(res, SUB_BOOT,
                           "rank %d: the bootstrap root at %s did not answer before the deadline "
                           "(CHORUS_TIMEOUT_MS): not every rank arrived, or the root is stuck",
                           b->rank, str);
            return ERR(res, SUB_BOOT,
                       "rank %d: rendezvous with the bootstrap root at %s failed: %s", b->rank, str,
                       cause);
        }
        if (r.magic == BOOT_MAGIC && r.status == ROOT_REPLY_MISSING) {
            root_missing_t m;
            memset(&m, 0, sizeof(m));
            res = sock_recv_until(fd, &m, sizeof(m), deadline, b->abort_flag);
            close(fd);
            boot_root_wait_replies(1500); /* the others hear it before this process can exit */
            if (res != chorusSuccess || m.nmissing <= 0 || m.nmissing > b->nranks)
                return ERR(chorusTimeout, SUB_BOOT,
                           "rank %d: init failed: not every rank reached the bootstrap root at %s "
                           "before its deadline (CHORUS_TIMEOUT_MS), and the root closed before "
                           "naming them (not started, crashed, or given another unique id?)",
                           b->rank, str);
            char list[200] = "";
            int shown = m.nmissing < ROOT_MISSING_MAX ? m.nmissing : ROOT_MISSING_MAX;
            for (int i = 0, len = 0; i < shown && len < 180; i++)
                len += snprintf(list + len, sizeof(list) - len, "%s%d", i ? ", " : "", m.ranks[i]);
            return ERR(chorusTimeout, SUB_BOOT,
                       "rank %d: init failed: %d of %d rank(s) never reached the bootstrap root "
                       "at %s before its deadline (CHORUS_TIMEOUT_MS): rank(s) %s%s (not started, "
                       "crashed, or given another unique id?)",
                       b->rank, m.nmissing, b->nranks, str, list,
                       m.nmissing > shown ? ", ..." : "");
        }
        if (r.magic == BOOT_MAGIC &&
            (r.status == ROOT_REPLY_DUP_RANK || r.status == ROOT_REPLY_JOB_NRANKS)) {
            close(fd);
            boot_root_wait_replies(1500); /* the others hear it before this process can exit */
            if (r.status == ROOT_REPLY_DUP_RANK)
                return ERR(chorusInvalidUsage, SUB_BOOT,
                           "rank %d: init failed: two processes passed rank %d with this unique "
                           "id (the bootstrap root at %s refused the job): does every process "
                           "pass its own rank, 0..nranks-1?",
                           b->rank, r.nranks, str);
            return ERR(chorusInvalidUsage, SUB_BOOT,
                       "rank %d: init failed: rank %d passed another nranks than the first rank's "
                       "with this unique id (the bootstrap root at %s refused the job): do all "
                       "ranks pass the same nranks?",
                       b->rank, r.nranks, str);
        }
        const char *why = boot_check_root_reply(&r, b->nranks);
        if (why != NULL && r.magic != BOOT_MAGIC) {
            close(fd);
            return ERR(chorusInvalidUsage, SUB_BOOT,
                       "rank %d: what answered at %s is %s: is the address another program's, "
                       "or is its port taken?",
                       b->rank, str, why);
        }
        if (why != NULL || r.status != ROOT_REPLY_OK) {
            close(fd);
            return ERR(chorusInvalidUsage, SUB_BOOT,
                       "rank %d: the bootstrap root at %s answered for %d ranks where this rank "
                       "expects %d (%s): do all ranks pass the same nranks and unique id?",
                       b->rank, str, r.nranks, b->nranks, why ? why : "bad status");
        }
        res =
            sock_recv_until(fd, b->addrs, sizeof(sock_addr_t) * b->nranks, deadline, b->abort_flag);
        snprintf(cause, sizeof(cause), "%s", debug_last_error());
        close(fd);
        if (res != chorusSuccess)
            return ERR(res, SUB_BOOT,
                       "rank %d: the address table from the bootstrap root at %s "
                       "did not arrive: %s",
                       b->rank, str, cause);
        return chorusSuccess;
    }
}

chorusResult_t boot_init(const boot_id_t *id, int rank, int nranks, const char *ifname_spec,
                         int64_t timeout_ms, int64_t deadline_ns,
                         const volatile uint32_t *abort_flag, boot_control_fn control,
                         void *control_arg, boot_t **boot_p)
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
    b->control = control;
    b->control_arg = control_arg;
    b->listen_fd = -1;
    b->wake_fd = -1;
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->send_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    b->addrs = calloc(nranks, sizeof(sock_addr_t));
    b->out_fd = malloc(sizeof(int) * nranks);
    b->in_fd = malloc(sizeof(int) * nranks);
    b->in_closed = calloc(nranks, 1);
    b->in_error = calloc(nranks, sizeof(char *));
    b->fds = malloc(sizeof(struct pollfd) * (2 + nranks + BOOT_MAX_PENDING));
    b->who = malloc(sizeof(int) * (2 + nranks + BOOT_MAX_PENDING));
    if (!b->addrs || !b->out_fd || !b->in_fd || !b->in_closed || !b->in_error || !b->fds ||
        !b->who) {
        free(b->out_fd);
        free(b->in_fd);
        b->out_fd = b->in_fd = NULL;
        res = ERR(chorusSystemError, SUB_BOOT, "out of memory for %d ranks", nranks);
        goto err;
    }
    for (int i = 0; i < nranks; i++)
        b->out_fd[i] = b->in_fd[i] = -1;
    b->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (b->wake_fd < 0) {
        res = ERR(chorusSystemError, SUB_BOOT, "eventfd failed: %s", strerror(errno));
        goto err;
    }

    /* Listen on the same family as the root, on the chosen interface (loopback root: loopback). */
    sock_addr_t mine;
    char ifname[64] = "lo";
    if (id->root.sa.sa_family == AF_INET && ntohl(id->root.sin.sin_addr.s_addr) >> 24 == 127 &&
        (ifname_spec == NULL || ifname_spec[0] == '\0')) {
        mine = id->root;
        mine.sin.sin_port = 0;
    } else {
        CHECK_GOTO(sock_pick_addr(ifname_spec, &mine, ifname, sizeof(ifname)), res, err);
    }
    sock_addr_t bound;
    CHECK_GOTO(sock_listen(&mine, &b->listen_fd, &bound), res, err);
    INFO(SUB_BOOT, "rank %d: bootstrap listener on %s (%s); root at %s", rank,
         sock_addr_str(&bound, str, sizeof(str)), ifname,
         sock_addr_str(&id->root, str2, sizeof(str2)));
    CHECK_GOTO(rendezvous(b, id, &bound, deadline_ns), res, err);
    /* Published before the thread starts: its control callback may use the handle at once. */
    *boot_p = b;
    int rc = pthread_create(&b->thread, NULL, service_main, b);
    if (rc != 0) {
        *boot_p = NULL;
        res = ERR(chorusSystemError, SUB_BOOT, "pthread_create for the bootstrap service: %s",
                  strerror(rc));
        goto err;
    }
    b->thread_started = 1;
    *boot_p = b;
    return chorusSuccess;
err:
    boot_free(b);
    return res;
}

void boot_set_deadline(boot_t *b, int64_t deadline_ns)
{
    pthread_mutex_lock(&b->lock);
    b->cap_deadline = deadline_ns;
    pthread_mutex_unlock(&b->lock);
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

/* Under b->lock. */
static void queue_append(boot_t *b, boot_msg_t *m)
{
    if (b->queue_tail)
        b->queue_tail->next = m;
    else
        b->queue_head = m;
    b->queue_tail = m;
    pthread_cond_broadcast(&b->cv);
}

static int64_t capped(boot_t *b, int64_t deadline)
{
    pthread_mutex_lock(&b->lock);
    if (b->cap_deadline != 0 && b->cap_deadline < deadline)
        deadline = b->cap_deadline;
    pthread_mutex_unlock(&b->lock);
    return deadline;
}

static chorusResult_t send_msg(boot_t *b, int peer, uint32_t tag, const void *buf, size_t nbytes,
                               int64_t deadline, const volatile uint32_t *abort_flag)
{
    chorusResult_t res = chorusSuccess;
    char str[80];
    if (nbytes > BOOT_MAX_MSG)
        return ERR(chorusInternalError, SUB_BOOT, "bootstrap message of %zu bytes is too large",
                   nbytes);
    if (peer < 0 || peer >= b->nranks)
        return ERR(chorusInternalError, SUB_BOOT, "bootstrap send to rank %d of %d", peer,
                   b->nranks);
    if (peer == b->rank) {
        boot_msg_t *m = NULL;
        CHECK(queue_new(peer, tag, (uint32_t)nbytes, &m));
        memcpy(m->data, buf, nbytes);
        pthread_mutex_lock(&b->lock);
        queue_append(b, m);
        pthread_mutex_unlock(&b->lock);
        return chorusSuccess;
    }
    pthread_mutex_lock(&b->send_lock);
    if (b->out_fd[peer] < 0) {
        int fd;
        /* Every peer listened before the rendezvous: a refusal means it is gone. */
        CHECK_GOTO(sock_connect_listening(&b->addrs[peer], deadline, abort_flag, 1, &fd), res, out);
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
    pthread_mutex_unlock(&b->send_lock);
    return res;
}

chorusResult_t boot_send(boot_t *b, int peer, uint32_t tag, const void *buf, size_t nbytes)
{
    return send_msg(b, peer, tag, buf, nbytes, capped(b, fifo_now_ns() + b->timeout_ns),
                    b->abort_flag);
}

chorusResult_t boot_send_timeout(boot_t *b, int peer, uint32_t tag, const void *buf, size_t nbytes,
                                 int64_t timeout_ms)
{
    return send_msg(b, peer, tag, buf, nbytes, fifo_now_ns() + timeout_ms * 1000000, NULL);
}

/* Service thread: drop the incoming connection of peer, saying why (NULL: it closed cleanly). */
static void drop_in(boot_t *b, int peer, const char *why)
{
    close(b->in_fd[peer]);
    b->in_fd[peer] = -1;
    pthread_mutex_lock(&b->lock);
    b->in_closed[peer] = 1;
    if (why != NULL && b->in_error[peer] == NULL)
        b->in_error[peer] = strdup(why);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->lock);
}

/* Service thread: read one frame from peer's established connection. */
static void read_frame(boot_t *b, int peer)
{
    char why[300];
    frame_hdr_t f;
    ssize_t n = recv(b->in_fd[peer], &f, 1, MSG_PEEK);
    if (n == 0) {
        drop_in(b, peer, NULL);
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(why, sizeof(why), "bootstrap connection from rank %d failed: %s", peer,
                     strerror(errno));
            drop_in(b, peer, why);
        }
        return;
    }
    int64_t deadline = fifo_now_ns() + FRAME_BODY_TIMEOUT_NS;
    if (sock_recv_all(b->in_fd[peer], &f, sizeof(f), deadline) != chorusSuccess) {
        snprintf(why, sizeof(why), "bootstrap frame header from rank %d: %s", peer,
                 debug_last_error());
        drop_in(b, peer, why);
        return;
    }
    const char *bad = boot_check_frame(&f, BOOT_MAX_MSG);
    if (bad != NULL) {
        snprintf(why, sizeof(why), "rank %d sent a bad bootstrap frame (tag 0x%x, %u bytes): %s",
                 peer, f.tag, f.nbytes, bad);
        WARN(SUB_BOOT, "%s", why);
        drop_in(b, peer, why);
        return;
    }
    boot_msg_t *m = NULL;
    if (queue_new(peer, f.tag, f.nbytes, &m) != chorusSuccess) {
        snprintf(why, sizeof(why), "%s", debug_last_error());
        drop_in(b, peer, why);
        return;
    }
    if (sock_recv_all(b->in_fd[peer], m->data, f.nbytes, deadline) != chorusSuccess) {
        snprintf(why, sizeof(why), "bootstrap frame from rank %d: %s", peer, debug_last_error());
        free(m);
        drop_in(b, peer, why);
        return;
    }
    if ((f.tag & 0xff000000u) == BOOT_TAG_CONTROL) {
        if (b->control != NULL)
            b->control(b->control_arg, peer, f.tag, m->data, f.nbytes);
        free(m);
        return;
    }
    pthread_mutex_lock(&b->lock);
    queue_append(b, m);
    pthread_mutex_unlock(&b->lock);
}

/* Service thread: validate hellos of pending incoming connections; a bad one is dropped. */
static void serve_pending(boot_t *b)
{
    int64_t now = fifo_now_ns();
    for (int i = b->pend.n - 1; i >= 0; i--) {
        pending_t *p = &b->pend.items[i];
        int rc = pending_read(p, sizeof(peer_hello_t));
        if (rc == 0 && now < p->deadline)
            continue;
        if (rc <= 0) {
            pending_refuse(&b->pend, p, "bootstrap listener",
                           rc < 0 ? "closed before a full hello" : "no hello within 5 s");
            pending_remove(&b->pend, i, 1);
            continue;
        }
        peer_hello_t h;
        memcpy(&h, p->buf, sizeof(h));
        const char *why = boot_check_peer_hello(&h, b->secret, b->nranks);
        if (why == NULL && (b->in_fd[h.rank] >= 0 || b->in_closed[h.rank]))
            why = "a second connection for the same rank";
        if (why != NULL) {
            pending_refuse(&b->pend, p, "bootstrap listener", why);
            pending_remove(&b->pend, i, 1);
            continue;
        }
        b->in_fd[h.rank] = p->fd;
        pending_remove(&b->pend, i, 0);
    }
}

static void *service_main(void *arg)
{
    boot_t *b = arg;
    debug_set_rank(b->rank);
    while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
        int nfds = 0;
        b->fds[nfds] = (struct pollfd){b->wake_fd, POLLIN, 0};
        b->who[nfds++] = -3;
        b->fds[nfds] = (struct pollfd){b->listen_fd, POLLIN, 0};
        b->who[nfds++] = -1;
        for (int r = 0; r < b->nranks; r++)
            if (b->in_fd[r] >= 0) {
                b->fds[nfds] = (struct pollfd){b->in_fd[r], POLLIN, 0};
                b->who[nfds++] = r;
            }
        for (int i = 0; i < b->pend.n && i < BOOT_MAX_PENDING; i++) {
            b->fds[nfds] = (struct pollfd){b->pend.items[i].fd, POLLIN, 0};
            b->who[nfds++] = -2;
        }
        /* 100 ms: silent pending connections are dropped on time without any traffic. */
        if (poll(b->fds, nfds, 100) < 0 && errno != EINTR) {
            WARN(SUB_BOOT, "bootstrap service: poll failed: %s", strerror(errno));
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (b->fds[0].revents & POLLIN) {
            uint64_t v;
            ssize_t n = read(b->wake_fd, &v, sizeof(v));
            (void)n;
        }
        if (b->fds[1].revents & POLLIN)
            accept_all(b->listen_fd, &b->pend);
        serve_pending(b);
        for (int i = 2; i < nfds; i++)
            if (b->who[i] >= 0 && (b->fds[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                b->in_fd[b->who[i]] >= 0)
                read_frame(b, b->who[i]);
    }
    return NULL;
}

chorusResult_t boot_recv_timeout(boot_t *b, int peer, uint32_t tag, void *buf, size_t nbytes,
                                 int64_t timeout_ms, const volatile uint32_t *abort_flag)
{
    if (abort_flag == NULL)
        abort_flag = b->abort_flag;
    chorusResult_t res = chorusSuccess;
    int64_t deadline = capped(b, fifo_now_ns() + timeout_ms * 1000000);
    pthread_mutex_lock(&b->lock);
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
        if (b->in_error[peer] != NULL) {
            res = ERR(chorusRemoteError, SUB_BOOT, "%s", b->in_error[peer]);
            goto out;
        }
        if (b->in_closed[peer]) {
            res = ERR(chorusRemoteError, SUB_BOOT,
                      "rank %d closed its bootstrap connection (did it exit or fail?)", peer);
            goto out;
        }
        if (abort_flag && __atomic_load_n(abort_flag, __ATOMIC_ACQUIRE)) {
            res = ERR(chorusRemoteError, SUB_BOOT, "bootstrap wait stopped: aborted");
            goto out;
        }
        int64_t now = fifo_now_ns();
        if (now >= deadline) {
            res = ERR(chorusTimeout, SUB_BOOT,
                      "rank %d: no bootstrap message from rank %d within %lld ms "
                      "(CHORUS_TIMEOUT_MS): is it stuck, or still initializing?",
                      b->rank, peer, (long long)(timeout_ms));
            goto out;
        }
        /* Wake at least every 50 ms to look at the abort flag. */
        int64_t until = deadline < now + 50000000 ? deadline : now + 50000000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (until - now);
        ts.tv_sec = (time_t)(t / 1000000000);
        ts.tv_nsec = (long)(t % 1000000000);
        pthread_cond_timedwait(&b->cv, &b->lock, &ts);
    }
out:
    pthread_mutex_unlock(&b->lock);
    return res;
}

chorusResult_t boot_recv(boot_t *b, int peer, uint32_t tag, void *buf, size_t nbytes)
{
    return boot_recv_timeout(b, peer, tag, buf, nbytes, b->timeout_ns / 1000000, NULL);
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
    if (b->thread_started) {
        __atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        ssize_t n = write(b->wake_fd, &one, sizeof(one));
        (void)n;
        pthread_join(b->thread, NULL);
    }
    boot_free(b);
}
