/*
 * debug.h: logging and error recording.
 *
 * Log lines are `host:pid:tid [rank] CHORUS LEVEL SUBSYS message`, filtered by CHORUS_DEBUG
 * (WARN, INFO, TRACE) and CHORUS_DEBUG_SUBSYS, written to stderr or CHORUS_DEBUG_FILE. The level is
 * checked before anything is formatted. The place that detects a failure calls ERR(), which logs
 * once at WARN and records the text as this thread's last error (chorusGetLastError); callers
 * propagate with CHECK(), leaving a TRACE breadcrumb.
 */
#ifndef CHORUS_DEBUG_H
#define CHORUS_DEBUG_H

#include "chorus.h"

/* Small thread-local words every call reads: the initial-exec model (a fixed offset from the
 * thread pointer) instead of a __tls_get_addr call each (7% of a 1-rank call's profile). They
 * take a few dozen bytes of the static TLS that glibc keeps for libraries loaded later. */
#define TLS_HOT __attribute__((tls_model("initial-exec")))
/* The functions a small collective runs every call (all-reduce, broadcast, reduce, all-gather and
 * reduce-scatter through the windows): placed together (.text.hot), so that a call touches few
 * code pages; what larger calls, all-to-all and send/recv run is left out. A process switch
 * empties the TLB on this VM (no PCID), and 4 ranks on 2 cores switch about once a call, so every
 * page a call touches costs its walk again each time. The other pages kept off that path: no PLT
 * (-fno-plt) and no tables in .rodata (-fno-jump-tables, dtype_nbytes' immediate), the clock, CPU
 * number and yield without libc's wrappers (fifo.c), the communicator's hot fields in its first
 * page (comm.h), the first threads' call slots in .bss (comm.c). */
#define HOT_PATH __attribute__((hot))

enum { LOG_NONE = 0, LOG_VERSION = 1, LOG_WARN = 2, LOG_INFO = 3, LOG_TRACE = 4 };
enum {
    SUB_INIT = 1 << 0,
    SUB_COLL = 1 << 1,
    SUB_P2P = 1 << 2,
    SUB_SHM = 1 << 3,
    SUB_NET = 1 << 4,
    SUB_BOOT = 1 << 5,
    SUB_ENV = 1 << 6,
    SUB_ALLOC = 1 << 7,
    SUB_GRAPH = 1 << 8,
    SUB_TUNING = 1 << 9,
    SUB_PROXY = 1 << 10,
    SUB_ALL = 0xffff
};

extern int debug_level;
/* This thread has an error text recorded (chorusGetLastError); a call clears it. */
extern __thread int debug_has_error TLS_HOT;
extern unsigned debug_subsys;

/* Reads CHORUS_DEBUG* once per process; returns an error naming a malformed variable. */
chorusResult_t debug_init(void);
/* The rank printed in this thread's log lines (-1: none). */
void debug_set_rank(int rank);
int debug_get_rank(void);
void debug_log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6), cold));

/* Record res with a message as this thread's last error, log it at WARN, return res. */
chorusResult_t debug_error(chorusResult_t res, unsigned subsys, const char *file, int line,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6), cold));
/* 1: this thread's errors are logged at INFO, not WARN (the proxy thread: a failure it sees may
 * never matter, and the call it fails logs it at WARN then). */
int debug_set_quiet_errors(int quiet); /* returns the previous setting */
/* This thread's last error text ("" when none) and a way to clear it. */
const char *debug_last_error(void);
void debug_clear_error(void);

#define LOG(level, subsys, ...)                                                                    \
    do {                                                                                           \
        if (debug_level >= (level) && (debug_subsys & (subsys)))                                   \
            debug_log(level, subsys, __FILE__, __LINE__, __VA_ARGS__);                             \
    } while (0)
#define WARN(subsys, ...) LOG(LOG_WARN, subsys, __VA_ARGS__)
#define INFO(subsys, ...) LOG(LOG_INFO, subsys, __VA_ARGS__)
#define TRACE(subsys, ...) LOG(LOG_TRACE, subsys, __VA_ARGS__)

/* Detect-and-report: `return ERR(chorusInvalidArgument, SUB_COLL, "root %d ...", root);` */
#define ERR(res, subsys, ...) debug_error(res, subsys, __FILE__, __LINE__, __VA_ARGS__)

#define CHECK(call)                                                                                \
    do {                                                                                           \
        chorusResult_t check_res_ = (call);                                                        \
        if (__builtin_expect(check_res_ != chorusSuccess, 0)) {                                    \
            TRACE(SUB_ALL, "%s failed: %s", #call, chorusGetErrorString(check_res_));              \
            return check_res_;                                                                     \
        }                                                                                          \
    } while (0)

#define CHECK_GOTO(call, res, label)                                                               \
    do {                                                                                           \
        (res) = (call);                                                                            \
        if (__builtin_expect((res) != chorusSuccess, 0)) {                                         \
            TRACE(SUB_ALL, "%s failed: %s", #call, chorusGetErrorString(res));                     \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* For a libc call returning -1 on failure: report errno and return chorusSystemError. */
#define SYSCHECK(expr, what)                                                                       \
    do {                                                                                           \
        if ((expr) == -1)                                                                          \
            return ERR(chorusSystemError, SUB_ALL, "%s failed: %s", what, strerror(errno));        \
    } while (0)

#endif /* CHORUS_DEBUG_H */
