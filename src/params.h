/*
 * params.h: the one table of environment variables.
 *
 * Every variable Chorus reads is declared once in params.c with its type, default and a one-line
 * doc; getenv() appears only there. Values are read into a params_t owned by each communicator,
 * so two communicators in one process can differ. A malformed value is an error that names the
 * variable; it never falls back silently to the default.
 */
#ifndef CHORUS_PARAMS_H
#define CHORUS_PARAMS_H

#include <stdint.h>
#include <stdio.h>

#include "chorus.h"

#define PARAM_STR_MAX 256

typedef struct params {
    int64_t nchannels; /* CHORUS_NCHANNELS; 0: automatic */
    int64_t min_nchannels; /* CHORUS_MIN_NCHANNELS */
    int64_t max_nchannels; /* CHORUS_MAX_NCHANNELS */
    int64_t buffsize; /* CHORUS_BUFFSIZE: bytes of one collective FIFO (all steps) */
    int64_t p2p_buffsize; /* CHORUS_P2P_BUFFSIZE: bytes of one send/recv FIFO */
    int64_t steps; /* CHORUS_STEPS: slots per FIFO */
    int64_t timeout_ms; /* CHORUS_TIMEOUT_MS: deadline of every wait */
    int64_t spin; /* CHORUS_SPIN: polls before a wait sleeps */
    int64_t direct_buffsize; /* CHORUS_DIRECT_BUFFSIZE: each of a direct window's two buffers */
    int64_t check_args; /* CHORUS_CHECK_ARGS: collectives compare their arguments first */
    int64_t wait_gate; /* CHORUS_WAIT_GATE: direct waits yield only where it may help */
    int64_t wait_balance; /* CHORUS_WAIT_BALANCE: move off a CPU crowded with ranks */
    int64_t zcopy; /* CHORUS_ZCOPY: direct algorithms read chorusMemAlloc inputs in place */
    int64_t zcopy_min; /* CHORUS_ZCOPY_MIN: from this many bytes */
    int64_t zcopy_allreduce_min; /* CHORUS_ZCOPY_ALLREDUCE_MIN: large all-reduces vote for two-shot
                                  * zero-copy from this many bytes; 0: never */
    int64_t zcopy_broadcast_min; /* CHORUS_ZCOPY_BROADCAST_MIN: the same for broadcast (direct) */
    int64_t zcopy_reducescatter_min; /* CHORUS_ZCOPY_REDUCESCATTER_MIN: and reduce-scatter */
    int64_t zcopy_allgather_min; /* CHORUS_ZCOPY_ALLGATHER_MIN: all-gathers push into outputs */
    int64_t zcopy_allreduce_push_min; /* CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN: and all-reduces */
    int64_t alltoall_direct_max; /* CHORUS_ALLTOALL_DIRECT_MAX: all-to-alls up to this many bytes
                                  * a rank go through the direct windows; 0: never */
    int64_t cma_min; /* CHORUS_CMA_MIN: all-gathers read peers' inputs with process_vm_readv from
                      * this many bytes a rank; 0: never */
    int64_t cma_timed_pct; /* CHORUS_CMA_TIMED_PCT (tests): the setup's timing made up */
    int64_t cma_adapt; /* CHORUS_CMA_ADAPT: where CHORUS_CMA_MIN is unset, all-gathers choose
                        * between the window and cross-memory attach at run time; 2: tests */
    int64_t nt_min_bytes; /* CHORUS_NT_MIN_BYTES: out-of-place outputs this big stream; 0: never */
    int64_t slot_adapt; /* CHORUS_SLOT_ADAPT: ring slots plain or streamed, chosen at run time */
    int64_t window_adapt; /* CHORUS_WINDOW_ADAPT: direct windows' copies, the same */
    int64_t adapt_timed_pct; /* CHORUS_ADAPT_TIMED_PCT (tests): streamed calls' times scaled */
    int64_t cuda_p2p; /* CHORUS_CUDA_P2P: device buffers move GPU to GPU inside a machine */
    int64_t cuda_async; /* CHORUS_CUDA_ASYNC: device-buffer calls return before they run */
    char socket_ifname[PARAM_STR_MAX]; /* CHORUS_SOCKET_IFNAME */
    char hostid[PARAM_STR_MAX]; /* CHORUS_HOSTID */
    char topo_file[PARAM_STR_MAX]; /* CHORUS_TOPO_FILE: hwloc XML instead of the live machine */
    char topo_dump_file[PARAM_STR_MAX]; /* CHORUS_TOPO_DUMP_FILE: write what was detected */
    char net[PARAM_STR_MAX]; /* CHORUS_NET: force a net plugin by name ("" automatic) */
    int64_t nsocks_perthread; /* CHORUS_NSOCKS_PERTHREAD */
    int64_t socket_nthreads; /* CHORUS_SOCKET_NTHREADS */
    int64_t net_speed_mbps; /* CHORUS_NET_SPEED_MBPS */
    char ib_hca[PARAM_STR_MAX]; /* CHORUS_IB_HCA */
    int64_t ib_gid_index; /* CHORUS_IB_GID_INDEX */
    int64_t ib_timeout; /* CHORUS_IB_TIMEOUT */
    int64_t ib_retry_cnt; /* CHORUS_IB_RETRY_CNT */
    int64_t ib_qps; /* CHORUS_IB_QPS_PER_CONNECTION */
    int64_t ib_tc; /* CHORUS_IB_TC */
    int64_t ib_sl; /* CHORUS_IB_SL */
    char ibverbs_path[PARAM_STR_MAX]; /* CHORUS_IBVERBS_PATH */
    char algo[PARAM_STR_MAX]; /* CHORUS_ALGO (NCCL syntax) */
    char proto[PARAM_STR_MAX]; /* CHORUS_PROTO (NCCL syntax) */
} params_t;

/* Read every communicator-level variable into *params_p (defaults where unset). */
chorusResult_t params_load(params_t *params_p);
/* Raw value of a variable declared in the table (NULL when unset). Names outside the table are a
 * programming error and return NULL. */
const char *params_raw(const char *name);
/* Parse helpers that report the variable by name on a malformed value. */
chorusResult_t params_get_int(const char *name, int64_t min, int64_t max, int64_t *value_p,
                              int *set_p);
/* Parse text as a value of the table's variable name, as params_load does, without reading the
 * environment: an integer variable into *int_p, a string one into str. Pure (tests/fuzz). */
chorusResult_t params_parse_text(const char *name, const char *text, int64_t *int_p,
                                 char str[PARAM_STR_MAX]);
/* NCCL's list syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA): comma-separated prefixes of name, "="
 * in front for exact names, "^" in front to exclude the list. port >= 0: items may end in
 * ":port", which must then equal port; port < 0: ':' is part of a name (eth0:1). */
int params_list_match(const char *spec, const char *name, int port);
/* Log (at INFO) every variable of the table that is set. */
void params_log_set(void);
/* Print the table (name, default, doc) as Markdown rows: used to write the README's table. */
void params_print_table(FILE *out);

#endif /* CHORUS_PARAMS_H */
