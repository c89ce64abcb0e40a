/*
 * transport.h: how bytes cross between two ranks, as a table of function pointers.
 *
 * A transport builds one end of a directed connection that follows the FIFO contract (fifo.h).
 * Connecting is two-sided and driven by the core (src/connect.c):
 *   1. each end calls setup(), which allocates what it owns and fills a handle;
 *   2. the handles cross over the bootstrap; the send end calls connect() with the peer's handle;
 *   3. once the send end has said it is connected, the recv end calls connect() (shm unlinks its
 *      segment there: both sides have mapped it, so a crash from now on leaves nothing behind).
 * A transport knows nothing of collectives.
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "fifo.h"

#define TRANSPORT_HANDLE_BYTES 128
#define PEER_HOSTID_BYTES 128

/* What every rank tells every other at init (all-gathered over the bootstrap). */
typedef struct peer_info {
    int32_t rank;
    int32_t pid;
    uint64_t hostid_hash;
    char hostid[PEER_HOSTID_BYTES]; /* hostname + boot id, or CHORUS_HOSTID */
    int32_t cuda_dev; /* -1: host only */
    int32_t numa_node;
} peer_info_t;

typedef struct transport_handle {
    char bytes[TRANSPORT_HANDLE_BYTES];
} transport_handle_t;

typedef enum { CONN_SEND = 0, CONN_RECV = 1 } conn_dir_t;

/* What a transport needs to know to build one end. */
typedef struct conn_setup {
    conn_dir_t dir;
    const peer_info_t *self;
    const peer_info_t *peer;
    size_t slot_nbytes;
    int steps;
    int tag; /* distinguishes the connections of one pair (channel, p2p) in names and logs */
} conn_setup_t;

/* Transport-private state of one end, kept by the core beside the conn_t. */
typedef struct transport_res {
    void *map;
    size_t map_nbytes;
    char name[64];
    int unlinked;
} transport_res_t;

typedef struct transport_ops {
    const char *name;
    /* 1 when this transport can join self and peer. */
    int (*can_connect)(const peer_info_t *self, const peer_info_t *peer);
    /* Allocate what this end owns; fill *handle_p for the peer. */
    chorusResult_t (*setup)(const conn_setup_t *s, transport_res_t *res, conn_t *conn,
                            transport_handle_t *handle_p);
    /* Finish this end with the peer's handle (send end first, then recv end; see above). */
    chorusResult_t (*connect)(const conn_setup_t *s, const transport_handle_t *peer_handle,
                              transport_res_t *res, conn_t *conn);
    /* Release this end; never fails loudly (WARN only). */
    void (*close)(transport_res_t *res, conn_t *conn);
} transport_ops_t;

extern const transport_ops_t shm_transport;

/* Transports in order of preference; NULL-terminated. */
extern const transport_ops_t *const transport_table[];

#endif /* CHORUS_TRANSPORT_H */
