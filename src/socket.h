/*
 * socket.h: TCP helpers for the bootstrap: interface choice, listen, connect, and reads and
 * writes that honour a deadline. Every blocking call polls with a deadline; none waits forever.
 */
#ifndef CHORUS_SOCKET_H
#define CHORUS_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "chorus.h"

typedef union sock_addr {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
} sock_addr_t;
_Static_assert(sizeof(sock_addr_t) == 28, "sock_addr_t is a wire format");

/* Pick the address to listen on: CHORUS_SOCKET_IFNAME spec (NCCL syntax: prefixes, ^ excludes,
 * = exact), else the first up non-loopback interface, else loopback. Port 0. */
chorusResult_t sock_pick_addr(const char *ifname_spec, sock_addr_t *addr_p, char *ifname_p,
                              size_t ifname_len);
/* Every up interface the spec matches, one address each (IPv4 preferred, else a non-link-local
 * IPv6), in sock_pick_addr's order, at most max; with an empty spec, sock_pick_addr's one choice.
 * *count_p = 0 (success) when nothing matches. names holds max strings of name_len bytes. */
chorusResult_t sock_list_addrs(const char *ifname_spec, int max, sock_addr_t *addrs, char *names,
                               size_t name_len, int *count_p);
/* Resolve "host" and port into an address. */
chorusResult_t sock_resolve(const char *host, int port, sock_addr_t *addr_p);
/* Listen on addr (port 0: any free port); *bound_p is the address peers should connect to. */
chorusResult_t sock_listen(const sock_addr_t *addr, int *fd_p, sock_addr_t *bound_p);
/* Connect to addr, retrying refused attempts until deadline (the listener may come up later). */
chorusResult_t sock_connect(const sock_addr_t *addr, int64_t deadline_ns,
                            const volatile uint32_t *abort_flag, int *fd_p);
/* The same for an address whose listener is known to have been up (a bootstrap peer after the
 * rendezvous) when listening is set: a refused connection then fails at once (the process is
 * gone) instead of being retried until the deadline. */
chorusResult_t sock_connect_listening(const sock_addr_t *addr, int64_t deadline_ns,
                                      const volatile uint32_t *abort_flag, int listening,
                                      int *fd_p);
chorusResult_t sock_send_all(int fd, const void *buf, size_t nbytes, int64_t deadline_ns);
chorusResult_t sock_recv_all(int fd, void *buf, size_t nbytes, int64_t deadline_ns);
/* sock_recv_all that also gives up (chorusRemoteError) once *abort_flag is set. */
chorusResult_t sock_recv_until(int fd, void *buf, size_t nbytes, int64_t deadline_ns,
                               const volatile uint32_t *abort_flag);
/* "a.b.c.d:port" (or [v6]:port) for logs. */
const char *sock_addr_str(const sock_addr_t *addr, char *buf, size_t len);
int sock_addr_port(const sock_addr_t *addr);

#endif /* CHORUS_SOCKET_H */
