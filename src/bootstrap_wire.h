/*
 * bootstrap_wire.h: what the bootstrap root (bootstrap_root.c) and the ranks (bootstrap.c) share:
 * the packed wire formats, and the set of accepted connections still owing a hello. A connection
 * is served without blocking on it: a bad or silent one is dropped after its own deadline.
 */
#ifndef CHORUS_BOOTSTRAP_WIRE_H
#define CHORUS_BOOTSTRAP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"

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

/* Track an accepted connection until its hello is complete (or its deadline passes). */
void pending_add(pending_set_t *s, int fd, const sock_addr_t *from);
void pending_remove(pending_set_t *s, int i, int close_fd);
void pending_free(pending_set_t *s);
/* Accept every connection waiting on listen_fd into s. */
void accept_all(int listen_fd, pending_set_t *s);
/* Read what is available of a hello of want bytes. 1: complete; 0: not yet; -1: drop it. */
int pending_read(pending_t *p, size_t want);
/* Log (WARN) why who refused p's connection. */
void pending_refuse(const pending_t *p, const char *who, const char *why);

#endif /* CHORUS_BOOTSTRAP_WIRE_H */
