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

#define TRANSPORT_HANDLE_BYTES 192
#define PEER_HOSTID_BYTES 128
#define PEER_MAX_NICS 4
#define PEER_NIC_NAME_BYTES 16
#define PEER_ALGO_BYTES 64

/* What every rank tells every other at init (all-gathered over the bootstrap). */
typedef struct peer_info {
    int32_t rank;
    int32_t pid;
    uint64_t start_time; /* the process's start (clock ticks since boot): tells a reused pid */
    uint64_t pid_ns; /* pid namespace id: a pid means something only inside the same one */
    uint64_t hostid_hash;
    uint64_t machine_hash; /* hostname + boot id even when CHORUS_HOSTID overrides hostid */
    char hostid[PEER_HOSTID_BYTES]; /* hostname + boot id, or CHORUS_HOSTID */
    int32_t cuda_dev; /* -1: host only */
    char cuda_busid[16]; /* its PCI bus id: the same GPU whatever each process's numbering */
    int32_t numa_node; /* NUMA node the rank is bound inside; -1: several or unknown */
    int32_t ncores; /* physical cores of its host */
    int32_t ngpus; /* GPUs of its host */
    int32_t nnics; /* NICs of its host (names of the first PEER_MAX_NICS below) */
    char nics[PEER_MAX_NICS][PEER_NIC_NAME_BYTES];
    /* Settings every rank must share before the rings are built (init.c: settings_alike, then
     * channels_alike): what decides the channels it builds (CHORUS_NCHANNELS or chorusConfig_t,
     * clamped; whether forced; CHORUS_MAX_NCHANNELS), and CHORUS_ALGO: whether it parses, what it
     * allows (and whether it is set at all) as a key, and its text for the message; CHORUS_PROTO:
     * whether it parses (every valid value allows Simple, the only protocol), and its text. */
    int32_t nchannels, nchannels_forced, max_nchannels;
    int32_t algo_ok, proto_ok;
    uint64_t algo_key;
    char algo[PEER_ALGO_BYTES];
    char proto[PEER_ALGO_BYTES];
} peer_info_t;

struct net_state;
struct topo;

/* What transports share per communicator: its settings, its abort flag, and state a transport
 * builds on first use (the net transport's plugin context and proxy thread). */
typedef struct transport_comm {
    const struct params *params;
    uint32_t *abort_flag;
    int64_t timeout_ms;
    int rank;
    const struct topo *topo; /* NULL when the topology could not be read */
    struct net_state *net; /* built by the net transport on its first connection */
    /* Operations under way (transport_ops_begin/end, counted by the exec lock's holder): a net
     * state built during one (a rank whose first net connection is a send/recv or a tree's)
     * starts with them counted, or its proxy never posted that operation's receives. */
    int ops_depth;
} transport_comm_t;

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
    transport_comm_t *tc;
} conn_setup_t;

/* Transport-private state of one end, kept by the core beside the conn_t. */
typedef struct transport_res {
    void *map;
    size_t map_nbytes;
    char name[64];
    int unlinked;
    void *priv; /* a transport's own state (cuda_p2p: the device memory and its context) */
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
extern const transport_ops_t net_transport;
/* FIFO slots in the receiver's GPU memory, opened by the sender with CUDA IPC; the counters in a
 * shm segment, as for shm. Never picked from transport_table: the device path (cuda_dev.c) asks
 * for it by name, for the connections its device-buffer collectives use. The calling thread has
 * the device's context current. */
extern const transport_ops_t cuda_p2p_transport;

/* Shared-memory segments for other users of shm (the direct algorithms' node-local windows):
 * a fresh name /chorus-<pid>-<random>-<from>-<to>-<tag>, and a mapping of nbytes (create: a new
 * segment, 0600, its pages allocated so a full /dev/shm is an error, not SIGBUS; else the
 * existing one by name). peer names the other rank in errors (the owner for a window: window
 * set). The creator unlinks it. */
void shm_segment_name(char *name, size_t len, int from, int to, int tag);
/* A FIFO's segment in res (res->name, res->map, res->map_nbytes), as shm and cuda_p2p keep it:
 * the receiver drops the name once the sender mapped it (connect), and close unmaps it (and
 * unlinks it if still named). Failures are WARNs. */
void shm_res_unlink(transport_res_t *res);
void shm_res_release(transport_res_t *res);
chorusResult_t shm_segment_map(const char *name, size_t nbytes, int create, int peer, int window,
                               void **map_p);
/* Undo one shm_segment_map: a segment this process created and another of its ranks still maps
 * stays mapped (one mapping per process, counted). munmap's result. */
int shm_segment_unmap(void *map, size_t nbytes);

/* The communicator is about to run operations / has finished them: the net transport's proxy
 * thread works between the two and sleeps otherwise. Cheap no-ops without net connections. */
void transport_ops_begin(transport_comm_t *tc);
void transport_ops_end(transport_comm_t *tc);
/* An error the proxy thread saw (chorusSuccess if none); its text goes to the thread's last error
 * through ERR, so the failed call reports the proxy's cause rather than "aborted". */
chorusResult_t transport_comm_error(transport_comm_t *tc);
/* The net plugin's link speed (Gbit/s) and latency (us) when a net connection exists; zeros
 * otherwise. */
void transport_net_speed(const transport_comm_t *tc, double *gbps_p, double *latency_us_p);
/* Wait (at most timeout_ms; not at all once aborted) until the proxy has handed every filled send
 * slot to the wire: the last operation's data must leave before its connections close. */
void transport_comm_drain(transport_comm_t *tc, int64_t timeout_ms);
/* Stop the proxy thread and release the plugin context (after every connection is closed). */
void transport_comm_free(transport_comm_t *tc);

/* Transports in order of preference; NULL-terminated. */
extern const transport_ops_t *const transport_table[];

#endif /* CHORUS_TRANSPORT_H */
