/*
 * fuzz_common.c: the fake root, the listener client and the oracles of fuzz_common.h.
 *
 * The fake root is one loopback listener for the whole process, served by a thread only while a
 * boot_init runs, so every fuzz input meets a fresh rank and nothing carries over between inputs.
 */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "debug.h"
#include "fifo.h"

static int root_fd = -1;
static int wake_pipe[2] = {-1, -1}; /* a byte ends the fake root's thread at once */
static sock_addr_t root_addr;

void fuzz_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FUZZ CHECK FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static void setup_once(void)
{
    signal(SIGPIPE, SIG_IGN);
    (void)debug_init();
    if (getenv("FUZZ_LOG") == NULL)
        debug_level = LOG_NONE;
    root_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&root_addr, 0, sizeof(root_addr));
    root_addr.sin.sin_family = AF_INET;
    root_addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(root_addr.sin);
    if (root_fd < 0 || bind(root_fd, &root_addr.sa, len) != 0 || listen(root_fd, 64) != 0 ||
        getsockname(root_fd, &root_addr.sa, &len) != 0)
        fuzz_die("cannot open the fake root's loopback listener: %s", strerror(errno));
    if (pipe2(wake_pipe, O_CLOEXEC) != 0)
        fuzz_die("pipe2 failed: %s", strerror(errno));
}

void fuzz_setup(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup_once);
}

int fuzz_connect(const sock_addr_t *addr)
{
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len =
        addr->sa.sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (fd >= 0 && connect(fd, &addr->sa, len) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* poll one fd until it is ready or timeout_ms pass; a signal (libFuzzer's timer) is no reason to
 * stop waiting. */
static int poll_wait(int fd, short events, int timeout_ms)
{
    int64_t deadline = fifo_now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        int64_t left = (deadline - fifo_now_ns()) / 1000000;
        if (left < 0)
            return 0;
        struct pollfd pfd = {fd, events, 0};
        int rc = poll(&pfd, 1, (int)left + 1);
        if (rc >= 0 || errno != EINTR)
            return rc;
    }
}

void fuzz_send(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        if (poll_wait(fd, POLLOUT, 5000) <= 0)
            return;
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

int fuzz_recv(int fd, void *buf, size_t n, int timeout_ms)
{
    char *p = buf;
    int64_t deadline = fifo_now_ns() + (int64_t)timeout_ms * 1000000;
    while (n > 0) {
        int64_t left = (deadline - fifo_now_ns()) / 1000000;
        if (left <= 0 || poll_wait(fd, POLLIN, (int)left) <= 0)
            return 0;
        ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k <= 0)
            return 0;
        p += k;
        n -= (size_t)k;
    }
    return 1;
}

int fuzz_wait_hangup(int fd, int timeout_ms)
{
    char buf[4096];
    int64_t deadline = fifo_now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        int64_t left = (deadline - fifo_now_ns()) / 1000000;
        if (left <= 0 || poll_wait(fd, POLLIN, (int)left) <= 0)
            return 0;
        ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            return 1;
    }
}

static void record_control(void *arg, int peer, uint32_t tag, const void *data, size_t nbytes);

/* ---- the fake root ---- */

typedef struct fake_job {
    const uint8_t *reply;
    size_t nreply;
    sock_addr_t listen;
    int served;
} fake_job_t;

static void fake_answer(fake_job_t *j, int c)
{
    root_hello_t h;
    if (!fuzz_recv(c, &h, sizeof(h), 2000))
        return;
    if (j->served++ > 0) {
        /* A retry: end it at once, the way a root whose deadline passed does. */
        root_reply_t r = {BOOT_MAGIC, FUZZ_NRANKS, ROOT_REPLY_MISSING};
        root_missing_t m;
        memset(&m, 0, sizeof(m));
        m.nmissing = 1;
        m.ranks[0] = FUZZ_NRANKS - 1;
        fuzz_send(c, &r, sizeof(r));
        fuzz_send(c, &m, sizeof(m));
        return;
    }
    j->listen = h.listen;
    if (j->reply != NULL) {
        fuzz_send(c, j->reply, j->nreply);
        return;
    }
    root_reply_t r = {BOOT_MAGIC, FUZZ_NRANKS, ROOT_REPLY_OK};
    sock_addr_t table[FUZZ_NRANKS];
    for (int i = 0; i < FUZZ_NRANKS; i++) {
        /* Peers other than rank 0 are never contacted: nothing here sends to them. */
        memset(&table[i], 0, sizeof(table[i]));
        table[i].sin.sin_family = AF_INET;
        table[i].sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        table[i].sin.sin_port = htons(9);
    }
    table[0] = h.listen;
    fuzz_send(c, &r, sizeof(r));
    fuzz_send(c, table, sizeof(table));
}

static void *fake_root_main(void *arg)
{
    fake_job_t *j = arg;
    for (;;) {
        struct pollfd pfd[2] = {{root_fd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
        if (poll(pfd, 2, 1000) <= 0 || !(pfd[0].revents & POLLIN)) {
            char c;
            if ((pfd[1].revents & POLLIN) && read(wake_pipe[0], &c, 1) == 1)
                return NULL;
            continue;
        }
        int c = accept4(root_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        fake_answer(j, c);
        close(c);
    }
    return NULL;
}

boot_t *fuzz_boot_start(const uint8_t *reply, size_t nreply, chorusResult_t *res_p,
                        sock_addr_t *listen_p)
{
    fuzz_setup();
    fake_job_t job;
    memset(&job, 0, sizeof(job));
    job.reply = reply;
    job.nreply = nreply;
    pthread_t t;
    if (pthread_create(&t, NULL, fake_root_main, &job) != 0)
        fuzz_die("pthread_create for the fake root failed");
    boot_id_t id;
    memset(&id, 0, sizeof(id));
    id.magic = BOOT_MAGIC;
    id.secret = FUZZ_SECRET;
    id.root = root_addr;
    boot_t *b = NULL;
    *res_p = boot_init(&id, 0, FUZZ_NRANKS, NULL, 2000, fifo_now_ns() + 5000000000LL, NULL,
                       record_control, NULL, &b);
    if (write(wake_pipe[1], "", 1) != 1)
        fuzz_die("cannot wake the fake root: %s", strerror(errno));
    pthread_join(t, NULL);
    if (listen_p != NULL)
        *listen_p = job.listen;
    return *res_p == chorusSuccess ? b : NULL;
}

/* ---- control frames ---- */

static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER;
static fuzz_control_t controls[4096];
static int ncontrols;

uint64_t fuzz_hash(const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void record_control(void *arg, int peer, uint32_t tag, const void *data, size_t nbytes)
{
    (void)arg;
    pthread_mutex_lock(&control_lock);
    if (ncontrols < (int)(sizeof(controls) / sizeof(controls[0])))
        controls[ncontrols++] =
            (fuzz_control_t){peer, tag, (uint32_t)nbytes, fuzz_hash(data, nbytes)};
    pthread_mutex_unlock(&control_lock);
}

void fuzz_control_reset(void)
{
    pthread_mutex_lock(&control_lock);
    ncontrols = 0;
    pthread_mutex_unlock(&control_lock);
}

int fuzz_control_count(void)
{
    pthread_mutex_lock(&control_lock);
    int n = ncontrols;
    pthread_mutex_unlock(&control_lock);
    return n;
}

const fuzz_control_t *fuzz_control_get(int i)
{
    return &controls[i];
}

/* ---- oracles, from the wire format ---- */

int fuzz_root_hello_ok(const root_hello_t *h, uint64_t secret, int nranks_seen, const int *rank_fd)
{
    if (h->magic != BOOT_MAGIC || h->secret != secret)
        return 0;
    if (h->nranks < 1 || h->nranks > (1 << 20))
        return 0;
    if (nranks_seen != -1 && h->nranks != nranks_seen)
        return 0;
    if (h->rank < 0 || h->rank >= h->nranks)
        return 0;
    int fam = h->listen.sa.sa_family;
    if (fam != AF_INET && fam != AF_INET6)
        return 0;
    return rank_fd == NULL || rank_fd[h->rank] < 0;
}

int fuzz_peer_hello_ok(const peer_hello_t *h, uint64_t secret, int nranks)
{
    return h->magic == BOOT_MAGIC && h->secret == secret && h->rank >= 0 && h->rank < nranks;
}

int fuzz_frame_ok(const frame_hdr_t *f, uint32_t max_nbytes)
{
    uint32_t kind = f->tag >> 24;
    return kind >= 1 && kind <= 6 && f->nbytes <= max_nbytes;
}

int fuzz_model_frames(const uint8_t *p, size_t n, fuzz_frame_t *out, int max, int *clean_p)
{
    int count = 0;
    *clean_p = 0;
    for (;;) {
        if (n == 0) {
            *clean_p = 1;
            return count;
        }
        frame_hdr_t f;
        if (n < sizeof(f))
            return count;
        memcpy(&f, p, sizeof(f));
        if (!fuzz_frame_ok(&f, BOOT_MAX_MSG) || n - sizeof(f) < f.nbytes || count == max)
            return count;
        out[count++] = (fuzz_frame_t){f.tag, f.nbytes, p + sizeof(f)};
        p += sizeof(f) + f.nbytes;
        n -= sizeof(f) + f.nbytes;
    }
}

/* ---- the listener ---- */

static void check_frames(boot_t *b, int peer, const fuzz_frame_t *frames, int nframes, int clean)
{
    int ctl = 0;
    for (int i = 0; i < nframes; i++) {
        const fuzz_frame_t *f = &frames[i];
        if ((f->tag >> 24) == (BOOT_TAG_CONTROL >> 24)) {
            const fuzz_control_t *c = ctl < fuzz_control_count() ? fuzz_control_get(ctl) : NULL;
            if (c == NULL || c->peer != peer || c->tag != f->tag || c->nbytes != f->nbytes ||
                c->hash != fuzz_hash(f->data, f->nbytes))
                fuzz_die("control frame %d (tag 0x%x, %u bytes) from rank %d was not handed "
                         "over intact",
                         i, f->tag, f->nbytes, peer);
            ctl++;
            continue;
        }
        char *buf = malloc(f->nbytes ? f->nbytes : 1);
        chorusResult_t res = boot_recv_timeout(b, peer, f->tag, buf, f->nbytes, 0, NULL);
        if (res != chorusSuccess || memcmp(buf, f->data, f->nbytes) != 0)
            fuzz_die("frame %d (tag 0x%x, %u bytes) from rank %d: %s", i, f->tag, f->nbytes, peer,
                     res != chorusSuccess ? debug_last_error() : "payload differs");
        free(buf);
    }
    if (ctl != fuzz_control_count())
        fuzz_die("%d control frames handed over, %d sent", fuzz_control_count(), ctl);
    /* Nothing more: the connection is closed, cleanly only if the stream ended on a frame. The
     * service thread closes the socket just before it marks the rank closed: wait for the mark. */
    char one;
    chorusResult_t res = boot_recv_timeout(b, peer, BOOT_TAG_ACK | 0xfedcba, &one, 1, 5000, NULL);
    int said_closed = strstr(debug_last_error(), "closed its bootstrap connection") != NULL;
    if (res != chorusRemoteError || said_closed != clean)
        fuzz_die("after the stream from rank %d ended (%s), a receive gave %d: %s", peer,
                 clean ? "cleanly" : "mid-frame or on a bad frame", (int)res, debug_last_error());
}

void fuzz_listener_check(boot_t *b, const sock_addr_t *addr, const uint8_t *p, size_t n)
{
    peer_hello_t h;
    memset(&h, 0, sizeof(h));
    int whole = n >= sizeof(h);
    if (whole)
        memcpy(&h, p, sizeof(h));
    int ok = whole && fuzz_peer_hello_ok(&h, FUZZ_SECRET, FUZZ_NRANKS);
    if (whole && ok != (boot_check_peer_hello(&h, FUZZ_SECRET, FUZZ_NRANKS) == NULL))
        fuzz_die("boot_check_peer_hello disagrees with the format");
    fuzz_control_reset();
    int fd = fuzz_connect(addr);
    if (fd < 0)
        fuzz_die("cannot connect to the rank's listener: %s", strerror(errno));
    fuzz_send(fd, p, n);
    shutdown(fd, SHUT_WR);
    if (!fuzz_wait_hangup(fd, 10000))
        fuzz_die("the listener kept a connection open 10 s after its %zu bytes ended", n);
    close(fd);
    if (ok) {
        size_t rest = n - sizeof(h);
        fuzz_frame_t *frames = malloc(sizeof(*frames) * (rest / sizeof(frame_hdr_t) + 1));
        int clean = 0;
        int nframes = fuzz_model_frames(p + sizeof(h), rest, frames,
                                        (int)(rest / sizeof(frame_hdr_t) + 1), &clean);
        check_frames(b, h.rank, frames, nframes, clean);
        free(frames);
    } else if (whole && h.rank >= 0 && h.rank < FUZZ_NRANKS) {
        /* A stranger claiming rank r leaves r untouched: no message, not closed, no error. */
        char one;
        chorusResult_t res = boot_recv_timeout(b, h.rank, BOOT_TAG_ALLGATHER, &one, 1, 0, NULL);
        if (res != chorusTimeout)
            fuzz_die("a refused hello claiming rank %d changed that rank's state (%d: %s)", h.rank,
                     (int)res, debug_last_error());
        if (fuzz_control_count() != 0)
            fuzz_die("a refused connection reached the control callback");
    }
}
