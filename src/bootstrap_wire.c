/*
 * bootstrap_wire.c: what the root and the ranks' listeners share: the checks of every
 * unauthenticated byte (pure functions, fuzzed by tests/fuzz), and the set of accepted
 * connections still owing a hello.
 *
 * A listener never trusts a stranger with more than the few bytes of a hello: lengths are checked
 * before anything is allocated, the secret before anything else is read, a silent connection is
 * dropped at its own deadline, and at most BOOT_MAX_PENDING connections wait at once (a flood
 * evicts the oldest, which a real peer never is: it sends its hello the moment it connects, and
 * retries if it was dropped anyway). Running out of descriptors (EMFILE) does not stop a
 * listener: it accepts into a spare descriptor and closes at once, so the backlog drains.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_wire.h"
#include "debug.h"
#include "fifo.h"

const char *boot_check_root_hello(const root_hello_t *h, uint64_t secret, int nranks_seen,
                                  const int *rank_fd)
{
    if (h->magic != BOOT_MAGIC)
        return "not a Chorus bootstrap hello (bad magic)";
    if (h->secret != secret)
        return "wrong secret (a different job's unique id?)";
    if (h->nranks <= 0 || h->nranks > BOOT_MAX_RANKS)
        return "nranks out of range";
    if (nranks_seen != -1 && h->nranks != nranks_seen)
        return "nranks differs from the first rank's";
    if (h->rank < 0 || h->rank >= h->nranks)
        return "rank out of range";
    if (h->listen.sa.sa_family != AF_INET && h->listen.sa.sa_family != AF_INET6)
        return "listener address is neither IPv4 nor IPv6";
    if (rank_fd != NULL && rank_fd[h->rank] >= 0)
        return "a second connection for the same rank";
    return NULL;
}

const char *boot_check_peer_hello(const peer_hello_t *h, uint64_t secret, int nranks)
{
    if (h->magic != BOOT_MAGIC)
        return "not a Chorus bootstrap hello (bad magic)";
    if (h->secret != secret)
        return "wrong secret";
    if (h->rank < 0 || h->rank >= nranks)
        return "rank out of range";
    return NULL;
}

const char *boot_check_frame(const frame_hdr_t *f, uint32_t max_nbytes)
{
    uint32_t kind = f->tag & 0xff000000u;
    if (kind < BOOT_TAG_ALLGATHER || kind > BOOT_TAG_LAST)
        return "unknown message kind";
    if (f->nbytes > max_nbytes)
        return "frame longer than the limit";
    return NULL;
}

const char *boot_check_root_reply(const root_reply_t *r, int nranks)
{
    if (r->magic != BOOT_MAGIC)
        return "not a Chorus bootstrap reply (bad magic)";
    if (r->nranks != nranks)
        return "the root serves a different number of ranks";
    return NULL;
}

/* How many connections may owe a hello at once: BOOT_MAX_PENDING, or a quarter of the process's
 * descriptor limit when that is lower (a flood then never takes the descriptors the job's own
 * connections need), and never fewer than 8. */
static int pending_limit(void)
{
    static int limit;
    int l = __atomic_load_n(&limit, __ATOMIC_RELAXED);
    if (l > 0)
        return l;
    l = BOOT_MAX_PENDING;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 4 < (rlim_t)l)
        l = (int)(rl.rlim_cur / 4);
    if (l < 8)
        l = 8;
    __atomic_store_n(&limit, l, __ATOMIC_RELAXED);
    return l;
}

/* Evict the oldest: the newest is the likeliest to be a real peer about to speak. */
static void pending_evict_oldest(pending_set_t *s)
{
    int oldest = 0;
    for (int i = 1; i < s->n; i++)
        if (s->items[i].deadline < s->items[oldest].deadline)
            oldest = i;
    s->evicted++;
    pending_remove(s, oldest, 1);
}

void pending_add(pending_set_t *s, int fd, const sock_addr_t *from)
{
    if (s->n >= pending_limit())
        pending_evict_oldest(s);
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

/* One descriptor held in reserve for the whole process: with none left (EMFILE), a listener
 * closes it, accepts the waiting connection into the freed number, closes that, and reopens it. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static int spare_fd = -1;

static void shed_one(int listen_fd)
{
    pthread_mutex_lock(&spare_lock);
    if (spare_fd >= 0) {
        close(spare_fd);
        spare_fd = -1;
    }
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0)
        close(fd);
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&spare_lock);
}

int accept_all(int listen_fd, pending_set_t *s)
{
    pthread_mutex_lock(&spare_lock);
    if (spare_fd < 0)
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&spare_lock);
    /* At most half a set per pass: the hellos of what was accepted are read before more come. */
    for (int k = 0; k < BOOT_MAX_PENDING / 2; k++) {
        sock_addr_t from;
        socklen_t len = sizeof(from);
        memset(&from, 0, sizeof(from));
        int fd = accept4(listen_fd, &from.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            pending_add(s, fd, &from);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE) {
            if (!s->fd_warned)
                WARN(SUB_BOOT,
                     "bootstrap listener: out of file descriptors (%s); dropping new connections "
                     "until some close (raise ulimit -n?)",
                     strerror(errno));
            s->fd_warned = 1;
            if (s->n > 0) {
                /* Our own silent connections hold descriptors: give up the oldest and take the
                 * newcomer, which may be the peer the job waits for. */
                pending_evict_oldest(s);
                continue;
            }
            shed_one(listen_fd);
            return 1;
        }
        return 0; /* EAGAIN: nothing more waiting */
    }
    return 1;
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

void pending_refuse(pending_set_t *s, const pending_t *p, const char *who, const char *why)
{
    char str[80];
    /* A port scan is not worth a warning per connection: the first few warn, the rest INFO. */
    if (s->refused++ < 3)
        WARN(SUB_BOOT, "%s refused a connection from %s: %s%s", who,
             sock_addr_str(&p->from, str, sizeof(str)), why,
             s->refused == 3 ? " (further refusals are logged at INFO)" : "");
    else
        INFO(SUB_BOOT, "%s refused a connection from %s: %s", who,
             sock_addr_str(&p->from, str, sizeof(str)), why);
}
