/*
 * bootstrap.h: TCP rendezvous and the out-of-band messages of a communicator (DESIGN section 3).
 *
 * chorusGetUniqueId opens a root listener (served by a detached thread) and packs {magic, root
 * address, 64-bit secret} into the id. Every rank opens its own listener, connects to the root,
 * proves the secret and receives the table of rank listeners. Later messages (peer info, connection
 * handles) go rank to rank, tagged, with a length check before any allocation and a deadline on
 * every wait; a connection with a bad hello is closed and the listener keeps serving.
 *
 * Each rank's listener and incoming connections are served by one service thread for the life of
 * the communicator: messages are queued as they arrive (a receiver waits on a condition variable,
 * never holding the sockets), and control messages (failure notices, status queries) are handed
 * to the communicator's callback at once, even while the rank is busy in a collective.
 */
#ifndef CHORUS_BOOTSTRAP_H
#define CHORUS_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "socket.h"

#define BOOT_MAGIC 0x43484f5255530001ull /* "CHORUS" v1 */

/* The unique id's contents. */
typedef struct boot_id {
    uint64_t magic;
    uint64_t secret;
    sock_addr_t root;
    uint32_t reserved;
} boot_id_t;
_Static_assert(sizeof(boot_id_t) <= CHORUS_UNIQUE_ID_BYTES, "boot id must fit the unique id");

/* Message kinds (top byte of a tag); the low 24 bits are a sequence or an index. */
enum {
    BOOT_TAG_ALLGATHER = 1 << 24,
    BOOT_TAG_HANDLE = 2 << 24,
    BOOT_TAG_ACK = 3 << 24,
    BOOT_TAG_SPLIT = 4 << 24,
    BOOT_TAG_STATUS = 5 << 24, /* answers to a status query; low bits: the query's id */
    BOOT_TAG_CONTROL = 6 << 24, /* handed to the control callback, never queued */
    BOOT_TAG_LAST = BOOT_TAG_CONTROL,
};

/* The service thread calls this for each control message (tag BOOT_TAG_CONTROL | sub), outside
 * every bootstrap lock; it may call boot_send. */
typedef void (*boot_control_fn)(void *arg, int peer, uint32_t tag, const void *data, size_t nbytes);

typedef struct boot boot_t;

/* Start a root listener on bind_addr (port 0: any) served for timeout_ms; fill *id_p. */
chorusResult_t boot_root_start(const sock_addr_t *bind_addr, uint64_t secret, int64_t timeout_ms,
                               boot_id_t *id_p);
/* Fill a fresh id: a root listener on the interface CHORUS_SOCKET_IFNAME picks. */
chorusResult_t boot_new_id(const char *ifname_spec, int64_t timeout_ms, boot_id_t *id_p);

/* Join: listen, meet the root, get the table of rank addresses, start the service thread. Every
 * wait of the join ends by deadline_ns (absolute, fifo_now_ns clock); later waits get timeout_ms
 * each, capped by boot_set_deadline. */
chorusResult_t boot_init(const boot_id_t *id, int rank, int nranks, const char *ifname_spec,
                         int64_t timeout_ms, int64_t deadline_ns,
                         const volatile uint32_t *abort_flag, boot_control_fn control,
                         void *control_arg, boot_t **boot_p);
/* Cap every later wait at deadline_ns (0: no cap): init holds one deadline for all its steps. */
void boot_set_deadline(boot_t *b, int64_t deadline_ns);
chorusResult_t boot_send(boot_t *b, int peer, uint32_t tag, const void *buf, size_t nbytes);
/* boot_send that gives up after timeout_ms and ignores the abort flag: failure notices and status
 * answers go out after the communicator has stopped. */
chorusResult_t boot_send_timeout(boot_t *b, int peer, uint32_t tag, const void *buf, size_t nbytes,
                                 int64_t timeout_ms);
/* boot_recv with its own timeout (capped as usual) and abort flag (NULL: the communicator's);
 * chorusTimeout when nothing came. */
chorusResult_t boot_recv_timeout(boot_t *b, int peer, uint32_t tag, void *buf, size_t nbytes,
                                 int64_t timeout_ms, const volatile uint32_t *abort_flag);
chorusResult_t boot_recv(boot_t *b, int peer, uint32_t tag, void *buf, size_t nbytes);
/* all holds nranks items of nbytes_each; this rank's item is at index rank. */
chorusResult_t boot_allgather(boot_t *b, void *all, size_t nbytes_each);
chorusResult_t boot_barrier(boot_t *b);
/* Stop the service thread (joined), close every socket, free everything. */
void boot_close(boot_t *b);

#endif /* CHORUS_BOOTSTRAP_H */
