/*
 * socket.c: TCP helpers for the bootstrap. Sockets are non-blocking; reads and writes loop on
 * poll() until done or the deadline passes, and say which peer address failed and why.
 */
#define _GNU_SOURCE
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "debug.h"
#include "params.h"
#include "fifo.h"

const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (addr->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%d", host, ntohs(addr->sin.sin_port));
    } else if (addr->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%d", host, ntohs(addr->sin6.sin6_port));
    } else {
        snprintf(buf, len, "(no address)");
    }
    return buf;
}

int sock_addr_port(const sock_addr_t *addr)
{
    return ntohs(addr->sa.sa_family == AF_INET6 ? addr->sin6.sin6_port : addr->sin.sin_port);
}

/* NCCL_SOCKET_IFNAME syntax: "^" excludes the list, "=" matches names exactly, else prefixes. */
static int ifname_matches(const char *spec, const char *name)
{
    return params_list_match(spec, name, -1);
}

chorusResult_t sock_pick_addr(const char *ifname_spec, sock_addr_t *addr_p, char *ifname_p,
                              size_t ifname_len)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return ERR(chorusSystemError, SUB_BOOT, "getifaddrs failed: %s", strerror(errno));
    const struct ifaddrs *best = NULL, *loop = NULL;
    int spec = ifname_spec != NULL && ifname_spec[0] != '\0';
    /* Two passes: IPv4 first, then IPv6, so the common case gets a plain address. */
    for (int family = AF_INET; best == NULL; family = AF_INET6) {
        for (const struct ifaddrs *i = ifs; i && !best; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP))
                continue;
            if (family == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr))
                continue;
            int is_loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (spec) {
                if (ifname_matches(ifname_spec, i->ifa_name))
                    best = i;
            } else if (!is_loop) {
                best = i;
            } else if (loop == NULL) {
                loop = i;
            }
        }
        if (family == AF_INET6)
            break;
    }
    if (best == NULL && !spec)
        best = loop;
    if (best == NULL) {
        freeifaddrs(ifs);
        return ERR(chorusInvalidArgument, SUB_BOOT,
                   "no network interface that is up matches CHORUS_SOCKET_IFNAME=\"%s\"",
                   spec ? ifname_spec : "");
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(addr_p, best->ifa_addr,
           best->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6));
    if (ifname_p != NULL)
        snprintf(ifname_p, ifname_len, "%s", best->ifa_name);
    freeifaddrs(ifs);
    return chorusSuccess;
}

chorusResult_t sock_list_addrs(const char *ifname_spec, int max, sock_addr_t *addrs, char *names,
                               size_t name_len, int *count_p)
{
    if (ifname_spec == NULL || ifname_spec[0] == '\0') {
        if (max < 1) {
            *count_p = 0;
            return chorusSuccess;
        }
        CHECK(sock_pick_addr(ifname_spec, &addrs[0], names, name_len));
        *count_p = 1;
        return chorusSuccess;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return ERR(chorusSystemError, SUB_NET, "getifaddrs failed: %s", strerror(errno));
    int n = 0;
    /* IPv4 addresses first, then IPv6 for interfaces that have no IPv4 one: the same preference as
     * sock_pick_addr, so entry 0 is the address the bootstrap picks for this spec. */
    for (int family = AF_INET;; family = AF_INET6) {
        for (const struct ifaddrs *i = ifs; i && n < max; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP))
                continue;
            if (family == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr))
                continue;
            if (!ifname_matches(ifname_spec, i->ifa_name))
                continue;
            int seen = 0;
            for (int j = 0; j < n; j++)
                if (strncmp(names + (size_t)j * name_len, i->ifa_name, name_len - 1) == 0)
                    seen = 1;
            if (seen)
                continue;
            memset(&addrs[n], 0, sizeof(addrs[n]));
            memcpy(&addrs[n], i->ifa_addr,
                   family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
            snprintf(names + (size_t)n * name_len, name_len, "%s", i->ifa_name);
            n++;
        }
        if (family == AF_INET6)
            break;
    }
    freeifaddrs(ifs);
    *count_p = n;
    return chorusSuccess;
}

chorusResult_t sock_resolve(const char *host, int port, sock_addr_t *addr_p)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL)
        return ERR(chorusInvalidArgument, SUB_BOOT, "cannot resolve host \"%s\": %s", host,
                   gai_strerror(rc));
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(addr_p, res->ai_addr,
           res->ai_addrlen < sizeof(*addr_p) ? res->ai_addrlen : sizeof(*addr_p));
    freeaddrinfo(res);
    if (addr_p->sa.sa_family == AF_INET)
        addr_p->sin.sin_port = htons((uint16_t)port);
    else
        addr_p->sin6.sin6_port = htons((uint16_t)port);
    return chorusSuccess;
}

static socklen_t addr_len(const sock_addr_t *a)
{
    return a->sa.sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static void sock_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

chorusResult_t sock_listen(const sock_addr_t *addr, int *fd_p, sock_addr_t *bound_p)
{
    char str[80];
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ERR(chorusSystemError, SUB_BOOT, "socket() failed: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, &addr->sa, addr_len(addr)) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        return ERR(chorusSystemError, SUB_BOOT, "cannot listen on %s: %s",
                   sock_addr_str(addr, str, sizeof(str)), strerror(e));
    }
    sock_addr_t bound;
    socklen_t len = sizeof(bound);
    memset(&bound, 0, sizeof(bound));
    getsockname(fd, &bound.sa, &len);
    *fd_p = fd;
    *bound_p = bound;
    return chorusSuccess;
}

static int poll_one(int fd, short events, int64_t deadline_ns)
{
    int64_t left = deadline_ns - fifo_now_ns();
    if (left <= 0)
        return 0;
    struct pollfd p = {fd, events, 0};
    int ms = (int)(left / 1000000) + 1;
    int rc = poll(&p, 1, ms > 100 ? 100 : ms);
    return rc < 0 && errno == EINTR ? 0 : rc;
}

chorusResult_t sock_connect(const sock_addr_t *addr, int64_t deadline_ns,
                            const volatile uint32_t *abort_flag, int *fd_p)
{
    return sock_connect_listening(addr, deadline_ns, abort_flag, 0, fd_p);
}

chorusResult_t sock_connect_listening(const sock_addr_t *addr, int64_t deadline_ns,
                                      const volatile uint32_t *abort_flag, int listening, int *fd_p)
{
    char str[80];
    int last_errno = 0;
    int64_t backoff_ns = 1000000;
    while (fifo_now_ns() < deadline_ns) {
        if (abort_flag != NULL && *abort_flag)
            return ERR(chorusRemoteError, SUB_BOOT, "connect to %s stopped: aborted",
                       sock_addr_str(addr, str, sizeof(str)));
        int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            /* Out of descriptors for now (a flood on this process's own listener holds them
             * until their hello deadline): wait for some to close, up to the deadline. */
            last_errno = errno;
            struct timespec ts = {0, backoff_ns};
            nanosleep(&ts, NULL);
            if (backoff_ns < 100000000)
                backoff_ns *= 2;
            continue;
        }
        if (fd < 0)
            return ERR(chorusSystemError, SUB_BOOT, "socket() failed: %s", strerror(errno));
        int rc = connect(fd, &addr->sa, addr_len(addr));
        if (rc != 0 && errno == EINPROGRESS) {
            while (fifo_now_ns() < deadline_ns && (rc = poll_one(fd, POLLOUT, deadline_ns)) == 0 &&
                   !(abort_flag != NULL && *abort_flag))
                ;
            int err = 0;
            socklen_t len = sizeof(err);
            if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
                rc = 0;
            else {
                errno = err ? err : ETIMEDOUT;
                rc = -1;
            }
        }
        if (rc == 0) {
            sock_tune(fd);
            *fd_p = fd;
            return chorusSuccess;
        }
        last_errno = errno;
        close(fd);
        if (last_errno == ECONNREFUSED && listening)
            return ERR(chorusRemoteError, SUB_BOOT,
                       "connect to %s refused: the listener there was up and is gone (its "
                       "process exited or closed it)",
                       sock_addr_str(addr, str, sizeof(str)));
        if (last_errno != ECONNREFUSED && last_errno != ETIMEDOUT && last_errno != EAGAIN &&
            last_errno != ENETUNREACH && last_errno != EHOSTUNREACH)
            break;
        /* The listener is not up yet (env init: ranks start in any order); back off. */
        struct timespec ts = {0, backoff_ns};
        nanosleep(&ts, NULL);
        if (backoff_ns < 100000000)
            backoff_ns *= 2;
    }
    return ERR(last_errno == 0 || last_errno == ECONNREFUSED || last_errno == ETIMEDOUT
                   ? chorusTimeout
                   : chorusSystemError,
               SUB_BOOT, "cannot connect to %s: %s", sock_addr_str(addr, str, sizeof(str)),
               last_errno ? strerror(last_errno) : "deadline passed");
}

chorusResult_t sock_send_all(int fd, const void *buf, size_t nbytes, int64_t deadline_ns)
{
    const char *p = buf;
    size_t done = 0;
    while (done < nbytes) {
        ssize_t n = send(fd, p + done, nbytes - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return ERR(chorusRemoteError, SUB_BOOT,
                       "send on bootstrap socket failed: %s "
                       "(did the peer exit?)",
                       strerror(errno));
        if (fifo_now_ns() >= deadline_ns)
            return ERR(chorusTimeout, SUB_BOOT, "send on bootstrap socket timed out");
        poll_one(fd, POLLOUT, deadline_ns);
    }
    return chorusSuccess;
}

chorusResult_t sock_recv_all(int fd, void *buf, size_t nbytes, int64_t deadline_ns)
{
    return sock_recv_until(fd, buf, nbytes, deadline_ns, NULL);
}

chorusResult_t sock_recv_until(int fd, void *buf, size_t nbytes, int64_t deadline_ns,
                               const volatile uint32_t *abort_flag)
{
    char *p = buf;
    size_t done = 0;
    while (done < nbytes) {
        if (abort_flag != NULL && __atomic_load_n(abort_flag, __ATOMIC_ACQUIRE))
            return ERR(chorusRemoteError, SUB_BOOT, "bootstrap receive stopped: aborted");
        ssize_t n = recv(fd, p + done, nbytes - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return ERR(chorusRemoteError, SUB_BOOT,
                       "bootstrap peer closed the connection "
                       "(did it exit or fail?)");
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return ERR(chorusRemoteError, SUB_BOOT, "recv on bootstrap socket failed: %s",
                       strerror(errno));
        if (fifo_now_ns() >= deadline_ns)
            return ERR(chorusTimeout, SUB_BOOT, "recv on bootstrap socket timed out");
        poll_one(fd, POLLIN, deadline_ns);
    }
    return chorusSuccess;
}
