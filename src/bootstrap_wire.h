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
#define BOOT_MAX_PENDING 256 /* connections owing a hello, per listener */

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
    int32_t status; /* ROOT_REPLY_OK: the address table follows; _MISSING: a root_missing_t */
} root_reply_t;
_Static_assert(sizeof(root_reply_t) == 16, "wire format");
/* ROOT_REPLY_NRANKS: a rank of this job (its secret) gave another rank count; the reply's nranks
 * is the root's, and nothing follows. ROOT_REPLY_JOB_NRANKS, ROOT_REPLY_DUP_RANK: the job cannot
 * form (a rank gave another count; two processes gave one rank), told to every rank of it that
 * came or comes before the root's deadline; the reply's nranks is the rank at fault. */
enum {
    ROOT_REPLY_OK = 0,
    ROOT_REPLY_MISSING = 1,
    ROOT_REPLY_NRANKS = 2,
    ROOT_REPLY_JOB_NRANKS = 3,
    ROOT_REPLY_DUP_RANK = 4
};

#define ROOT_MISSING_MAX 16
typedef struct __attribute__((packed)) root_missing {
    int32_t nmissing;
    int32_t ranks[ROOT_MISSING_MAX]; /* the first ones */
} root_missing_t;

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
    int evicted; /* dropped to make room (a flood) */
    int refused; /* dropped for a bad or missing hello */
    int fd_warned;
} pending_set_t;

/* Wait (at most timeout_ms) until no bootstrap root of this process is sending "who is missing"
 * replies (bootstrap_root.c). */
void boot_root_wait_replies(int64_t timeout_ms);

/* Checks of unauthenticated bytes. NULL: acceptable; else why not (for the log). Pure. */
/* nranks_seen: -1 before the first valid hello; rank_fd: NULL or [nranks_seen], -1 = free. */
const char *boot_check_root_hello(const root_hello_t *h, uint64_t secret, int nranks_seen,
                                  const int *rank_fd);
const char *boot_check_peer_hello(const peer_hello_t *h, uint64_t secret, int nranks);
const char *boot_check_root_reply(const root_reply_t *r, int nranks);
/* A frame from an authenticated peer: known kind, at most max_nbytes of payload. */
const char *boot_check_frame(const frame_hdr_t *f, uint32_t max_nbytes);

/* Track an accepted connection until its hello is complete (or its deadline passes). */
void pending_add(pending_set_t *s, int fd, const sock_addr_t *from);
void pending_remove(pending_set_t *s, int i, int close_fd);
void pending_free(pending_set_t *s);
/* Accept connections waiting on listen_fd into s (at most half a set). 1: more may be waiting. */
int accept_all(int listen_fd, pending_set_t *s);
/* Read what is available of a hello of want bytes. 1: complete; 0: not yet; -1: drop it. */
int pending_read(pending_t *p, size_t want);
/* Log (WARN) why who refused p's connection. */
void pending_refuse(pending_set_t *s, const pending_t *p, const char *who, const char *why);

#endif /* CHORUS_BOOTSTRAP_WIRE_H */
