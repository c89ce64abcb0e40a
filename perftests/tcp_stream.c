/*
 * tcp_stream.c: what one TCP connection (or K striped ones) can carry here, iperf-style: the
 * yardstick the net transport's bandwidth is compared against (scripts/bench-net.sh).
 *
 * The client streams warm-up + timed messages of -b bytes to the server; with --sockets K each
 * message is cut into K contiguous stripes, stripe k always on connection k, one thread per
 * connection on both sides. Timing, per connection:
 *
 *   client: send W warm-up stripes -> wait for the server's 1-byte "warm" ack
 *           all threads meet; t0; send N stripes -> wait for the server's 1-byte "done" ack; t1
 *   server: recv W stripes -> ack; recv N stripes -> ack
 *
 * so the timed part is N messages plus one small-message round trip (negligible for large -b).
 * Bandwidth = N * bytes / (t1 - t0) in GB/s (1e9 bytes/s) and Gbit/s.
 *
 * Modes: no --server/--client: fork a server child on 127.0.0.1 (ephemeral port) and run the
 * client in the parent (loopback). --server [--port P]: serve one run on 0.0.0.0:P and exit.
 * --client ADDR[:PORT]: run against a server elsewhere (e.g. another network namespace), retrying
 * the connection for up to 10 s while the server starts. Plain POSIX C; no Chorus API.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TS_MAGIC 0x54435053u /* "TCPS" */
#define TS_MAX_SOCKETS 64
#define TS_DEFAULT_PORT 29600

/* Sent by the client first on every connection: what to expect and which stripe this is. */
typedef struct __attribute__((packed)) ts_hello {
    uint32_t magic;
    uint32_t index; /* this connection's stripe, 0..nsockets-1 */
    uint32_t nsockets;
    uint32_t iters;
    uint32_t warmup;
    uint32_t pad;
    uint64_t nbytes; /* whole message */
} ts_hello_t;
_Static_assert(sizeof(ts_hello_t) == 32, "ts_hello_t is a wire format");

typedef struct ts_opts {
    size_t nbytes;
    int iters, warmup, nsockets;
    int server, client;
    int port;
    char addr[256];
} ts_opts_t;

typedef struct ts_conn {
    int fd;
    int index;
    char *buf; /* the message; this connection uses [off, off + len) */
    size_t off, len;
    int iters, warmup;
    int is_client;
    pthread_barrier_t *meet; /* client: all connections warm before t0 */
    double t0, t1;
    int failed;
} ts_conn_t;

static void die(const char *what)
{
    fprintf(stderr, "tcp_stream: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int send_all(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len > 0) {
        ssize_t n = send(fd, c, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t len)
{
    char *c = p;
    while (len > 0) {
        ssize_t n = recv(fd, c, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ECONNRESET;
            return -1;
        }
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One connection's life, on either side. */
static void *conn_main(void *arg)
{
    ts_conn_t *c = arg;
    char *p = c->buf + c->off;
    char ack = 1;
    for (int phase = 0; phase < 2; phase++) {
        int n = phase == 0 ? c->warmup : c->iters;
        if (phase == 1 && c->is_client) {
            pthread_barrier_wait(c->meet);
            c->t0 = now_sec();
        }
        for (int i = 0; i < n; i++) {
            int rc = c->is_client ? send_all(c->fd, p, c->len) : recv_all(c->fd, p, c->len);
            if (rc != 0)
                goto fail;
        }
        if (c->is_client ? recv_all(c->fd, &ack, 1) : send_all(c->fd, &ack, 1))
            goto fail;
        if (phase == 1 && c->is_client)
            c->t1 = now_sec();
    }
    return NULL;
fail:
    fprintf(stderr, "tcp_stream: connection %d: %s\n", c->index, strerror(errno));
    c->failed = 1;
    if (c->is_client && c->t0 == 0)
        pthread_barrier_wait(c->meet); /* the others must not wait for us forever */
    return NULL;
}

static void stripe(size_t nbytes, int k, int nsockets, size_t *off_p, size_t *len_p)
{
    size_t chunk = (nbytes + (size_t)nsockets - 1) / (size_t)nsockets;
    size_t off = chunk * (size_t)k;
    *off_p = off < nbytes ? off : nbytes;
    *len_p = off < nbytes ? (nbytes - off < chunk ? nbytes - off : chunk) : 0;
}

static void tune_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* the 1-byte acks */
}

/* Run the connections' threads; the client side reports. */
static int run_conns(ts_conn_t *conns, int nsockets, const ts_opts_t *o, const char *peer)
{
    pthread_t tid[TS_MAX_SOCKETS];
    for (int k = 0; k < nsockets; k++)
        if (pthread_create(&tid[k], NULL, conn_main, &conns[k]) != 0)
            die("pthread_create");
    int failed = 0;
    double t0 = 0, t1 = 0;
    for (int k = 0; k < nsockets; k++) {
        pthread_join(tid[k], NULL);
        failed |= conns[k].failed;
        if (k == 0 || conns[k].t0 < t0)
            t0 = conns[k].t0;
        if (conns[k].t1 > t1)
            t1 = conns[k].t1;
        close(conns[k].fd);
    }
    if (failed)
        return 1;
    if (!conns[0].is_client) {
        printf("# tcp_stream server: received %d x %zu bytes from %s over %d connection(s)\n",
               o->iters + o->warmup, o->nbytes, peer, nsockets);
        return 0;
    }
    double sec = t1 - t0;
    double bytes = (double)o->nbytes * o->iters;
    double gbs = sec > 0 ? bytes / sec / 1e9 : 0;
    printf("# tcp_stream: %s, %d connection(s), %d warm-up + %d timed messages\n", peer, nsockets,
           o->warmup, o->iters);
    printf("# %12s  %6s  %7s  %10s  %8s  %8s\n", "bytes", "iters", "sockets", "time(us)", "GB/s",
           "Gbit/s");
    printf("  %12zu  %6d  %7d  %10.1f  %8.3f  %8.3f\n", o->nbytes, o->iters, nsockets,
           sec / o->iters * 1e6, gbs, gbs * 8);
    printf("tcp_stream: %zu B x %d over %d socket(s): %.3f GB/s (%.3f Gbit/s)\n", o->nbytes,
           o->iters, nsockets, gbs, gbs * 8);
    return 0;
}

static char *alloc_message(size_t nbytes)
{
    char *buf = malloc(nbytes ? nbytes : 1);
    if (buf == NULL)
        die("malloc(message)");
    for (size_t i = 0; i < nbytes; i++)
        buf[i] = (char)(i * 131u); /* touch every page before timing */
    return buf;
}

static int listen_on(int port, int *port_p, const char *bind_addr)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = inet_addr(bind_addr);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("bind");
    if (listen(fd, TS_MAX_SOCKETS) != 0)
        die("listen");
    socklen_t len = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        die("getsockname");
    *port_p = ntohs(sa.sin_port);
    return fd;
}

/* Serve one run on the listening socket: the first connection's hello says how many follow. */
static int serve(int lfd, ts_opts_t *o)
{
    ts_conn_t conns[TS_MAX_SOCKETS];
    char *buf = NULL;
    char peer[INET_ADDRSTRLEN] = "?";
    int nsockets = 1;
    memset(conns, 0, sizeof(conns));
    for (int got = 0; got < nsockets; got++) {
        struct sockaddr_in sa;
        socklen_t len = sizeof(sa);
        int fd = accept(lfd, (struct sockaddr *)&sa, &len);
        if (fd < 0)
            die("accept");
        inet_ntop(AF_INET, &sa.sin_addr, peer, sizeof(peer));
        tune_socket(fd);
        ts_hello_t h;
        if (recv_all(fd, &h, sizeof(h)) != 0)
            die("recv(hello)");
        uint32_t k = ntohl(h.index);
        if (ntohl(h.magic) != TS_MAGIC || ntohl(h.nsockets) < 1 ||
            ntohl(h.nsockets) > TS_MAX_SOCKETS || k >= ntohl(h.nsockets) ||
            (got > 0 && (int)ntohl(h.nsockets) != nsockets) || conns[k].buf != NULL) {
            fprintf(stderr, "tcp_stream: bad hello from %s\n", peer);
            return 1;
        }
        if (got == 0) {
            nsockets = (int)ntohl(h.nsockets);
            o->nbytes = (size_t)be64toh(h.nbytes);
            o->iters = (int)ntohl(h.iters);
            o->warmup = (int)ntohl(h.warmup);
            buf = alloc_message(o->nbytes);
        }
        conns[k] = (ts_conn_t){
            .fd = fd, .index = (int)k, .buf = buf, .iters = o->iters, .warmup = o->warmup};
        stripe(o->nbytes, (int)k, nsockets, &conns[k].off, &conns[k].len);
    }
    int rc = run_conns(conns, nsockets, o, peer);
    free(buf);
    return rc;
}

static int connect_to(const char *addr, int port)
{
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int err = getaddrinfo(addr, service, &hints, &ai);
    if (err != 0) {
        fprintf(stderr, "tcp_stream: %s: %s\n", addr, gai_strerror(err));
        exit(1);
    }
    double deadline = now_sec() + 10; /* the server may still be starting */
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            die("socket");
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(ai);
            tune_socket(fd);
            return fd;
        }
        int e = errno;
        close(fd);
        if ((e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH) || now_sec() > deadline) {
            errno = e;
            die("connect");
        }
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

static int client(const ts_opts_t *o, const char *addr, int port)
{
    ts_conn_t conns[TS_MAX_SOCKETS];
    pthread_barrier_t meet;
    char *buf = alloc_message(o->nbytes);
    char peer[300];
    snprintf(peer, sizeof(peer), "%s:%d", addr, port);
    pthread_barrier_init(&meet, NULL, (unsigned)o->nsockets);
    for (int k = 0; k < o->nsockets; k++) {
        int fd = connect_to(addr, port);
        ts_hello_t h = {.magic = htonl(TS_MAGIC),
                        .index = htonl((uint32_t)k),
                        .nsockets = htonl((uint32_t)o->nsockets),
                        .iters = htonl((uint32_t)o->iters),
                        .warmup = htonl((uint32_t)o->warmup),
                        .nbytes = htobe64((uint64_t)o->nbytes)};
        if (send_all(fd, &h, sizeof(h)) != 0)
            die("send(hello)");
        conns[k] = (ts_conn_t){.fd = fd,
                               .index = k,
                               .buf = buf,
                               .iters = o->iters,
                               .warmup = o->warmup,
                               .is_client = 1,
                               .meet = &meet};
        stripe(o->nbytes, k, o->nsockets, &conns[k].off, &conns[k].len);
    }
    int rc = run_conns(conns, o->nsockets, o, peer);
    pthread_barrier_destroy(&meet);
    free(buf);
    return rc;
}

static size_t parse_bytes(const char *text)
{
    char *end = NULL;
    double v = strtod(text, &end);
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1024;
        end++;
        break;
    case 'm':
    case 'M':
        v *= 1024 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        v *= 1024.0 * 1024 * 1024;
        end++;
        break;
    }
    if (end == text || (*end != '\0' && strcmp(end, "B") != 0) || v < 1) {
        fprintf(stderr, "tcp_stream: bad byte count '%s'\n", text);
        exit(2);
    }
    return (size_t)v;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [-b BYTES] [-n ITERS] [-w WARMUP] [--sockets K]\n"
            "          [--server [--port P] | --client ADDR[:PORT]]\n"
            "  -b BYTES      message size (K/M/G suffixes), default 16M\n"
            "  -n ITERS      timed messages, default 20;  -w WARMUP  untimed first, default 5\n"
            "  --sockets K   stripe each message over K connections (1..%d), default 1\n"
            "  (no mode)     fork a server on 127.0.0.1 and stream to it (loopback)\n"
            "  --server      serve one run on 0.0.0.0:P (default %d), then exit\n"
            "  --client A    stream to the server at A[:PORT]\n",
            argv0, TS_MAX_SOCKETS, TS_DEFAULT_PORT);
    exit(2);
}

int main(int argc, char **argv)
{
    ts_opts_t o = {
        .nbytes = 16u << 20, .iters = 20, .warmup = 5, .nsockets = 1, .port = TS_DEFAULT_PORT};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-b") == 0 && v)
            o.nbytes = parse_bytes(argv[++i]);
        else if (strcmp(a, "-n") == 0 && v)
            o.iters = atoi(argv[++i]);
        else if (strcmp(a, "-w") == 0 && v)
            o.warmup = atoi(argv[++i]);
        else if (strcmp(a, "--sockets") == 0 && v)
            o.nsockets = atoi(argv[++i]);
        else if (strcmp(a, "--port") == 0 && v)
            o.port = atoi(argv[++i]);
        else if (strcmp(a, "--server") == 0)
            o.server = 1;
        else if (strcmp(a, "--client") == 0 && v) {
            o.client = 1;
            snprintf(o.addr, sizeof(o.addr), "%s", argv[++i]);
        } else
            usage(argv[0]);
    }
    if (o.iters < 1 || o.warmup < 0 || o.nsockets < 1 || o.nsockets > TS_MAX_SOCKETS ||
        o.port < 0 || o.port > 65535 || (o.server && o.client))
        usage(argv[0]);

    if (o.server) {
        int port;
        int lfd = listen_on(o.port, &port, "0.0.0.0");
        printf("# tcp_stream server: listening on 0.0.0.0:%d\n", port);
        fflush(stdout);
        int rc = serve(lfd, &o);
        close(lfd);
        return rc;
    }
    if (o.client) {
        char *colon = strrchr(o.addr, ':');
        if (colon != NULL) {
            *colon = '\0';
            o.port = atoi(colon + 1);
        }
        return client(&o, o.addr, o.port);
    }
    /* Loopback: the child serves, the parent measures. */
    int port;
    int lfd = listen_on(0, &port, "127.0.0.1");
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        ts_opts_t so = o;
        if (freopen("/dev/null", "w", stdout) == NULL) /* the client reports */
            _exit(1);
        _exit(serve(lfd, &so));
    }
    close(lfd);
    int rc = client(&o, "127.0.0.1", port);
    int status = 0;
    if (rc != 0)
        kill(child, SIGTERM);
    if (waitpid(child, &status, 0) < 0)
        die("waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "tcp_stream: the server child failed (status %d)\n", status);
        rc = 1;
    }
    return rc;
}
