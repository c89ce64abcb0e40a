/*
 * harness.h: what the functional tests (tests/test_*.c in functional.cmake) and the unit tests of
 * the trainer and the host reduce (trainer_nn.cmake, reduce.cmake) share: counting and printing
 * failures (FAIL, CHECK, CHECK_OK, CHECK_RES), PASS/FAIL lines, a monotonic clock, byte patterns
 * and a uniform stream that a check can recompute, closeness of floating-point results, the check
 * that a call was refused with an error text naming its argument, and ranks as threads of one
 * process (chorusCommInitAll, one pthread per rank).
 *
 * A test never stops at the first failure: every failed check adds one to harness_failures, and
 * the first harness_fail_limit are printed as "FAIL file:line: message". Every check may run on
 * any thread. Built as the static library chorus_test_harness; test support only.
 */
#ifndef CHORUS_TEST_HARNESS_H
#define CHORUS_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

/* Failed checks so far (updated atomically; read it once the ranks have joined). */
extern long harness_failures;
/* How many failures are printed; the rest are only counted. 20 unless the test sets it. */
extern int harness_fail_limit;

/* Count one failure and print it (while under the limit) with the caller's file and line. */
void harness_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* FAIL unless res is chorusSuccess; the message names the call, the result and the last error. */
void harness_check_ok(const char *file, int line, const char *call, chorusResult_t res);
/* FAIL unless res is want. */
void harness_check_res(const char *file, int line, const char *call, chorusResult_t res,
                       chorusResult_t want);

#define FAIL(...) harness_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK_OK(call) harness_check_ok(__FILE__, __LINE__, #call, (call))
#define CHECK_RES(call, want) harness_check_res(__FILE__, __LINE__, #call, (call), (want))
/* FAIL with the printf-style message unless cond holds. Not src/debug.h's CHECK(call), which
 * propagates a result inside the library; a test includes one or the other. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL(__VA_ARGS__);                                                                     \
    } while (0)

/* "PASS" when no check failed since harness_failures was before, else "FAIL". */
const char *harness_verdict(long before);
/* Print "PASS text" or "FAIL text" (harness_verdict(before)) and a newline. */
void harness_report(long before, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last line of a test: harness_report(0, ...); returns the exit status, 0 or 1. */
int harness_finish(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Seconds on CLOCK_MONOTONIC. */
double harness_now_s(void);
/* chorusCommInitEnv, timed: its result, *took_s its seconds, and its last error copied into text
 * (len bytes); a communicator it made is destroyed at once (tests that expect a refusal). */
chorusResult_t harness_init_env_timed(double *took_s, char *text, size_t len);
/* Entries of a directory (without . and ..), less minus_self (a /proc/self/fd listing counts the
 * DIR's own descriptor); -1 when it cannot be read. */
int harness_count_dir(const char *path, int minus_self);
/* A fresh directory $TMPDIR/<name>.XXXXXX (or under /tmp) into buf; 0, or -1 with perror. */
int harness_mkdtemp(char *buf, size_t len, const char *name);
/* nbytes of zeroed memory shared with the processes this one forks; NULL with perror. */
void *harness_shared(size_t nbytes);

/* Bytes of one element of t, written out here rather than asked of the library under test. */
size_t harness_dtype_nbytes(chorusDataType_t t);

/* Byte i of the pattern for seed: byte i%8 of splitmix64(seed + i/8). */
void harness_fill(void *buf, size_t nbytes, uint64_t seed);
/* Index of the first byte of buf that differs from harness_fill(seed), or -1. */
long long harness_first_diff(const void *buf, size_t nbytes, uint64_t seed);
/* The splitmix64 step behind the pattern, for tests that derive seeds from it. */
/* A loopback TCP port nothing listens on, for a bootstrap root: picked below the kernel's
 * ephemeral range (ip_local_port_range), where no outgoing connection of a test running beside
 * this one can take it between the pick and the root's bind; a kernel-chosen one if none is free
 * there; 0 on failure. */
int harness_free_port(void);
uint64_t harness_splitmix(uint64_t x);
/* The next value in [0, 1) (53 bits) of the splitmix64 stream whose state is *state; advances it.
 * A test seeds its own state, so its inputs are the same on every run. */
double harness_uniform01(uint64_t *state);

/* Nonzero when |got - want| <= tol * max(1, |want|): relative above 1, absolute below; zero when
 * either is NaN. */
int harness_close(double got, double want, double tol);

/* FAIL unless got is want and the error text is non-empty and contains word1 and word2 (each may
 * be NULL). what names the call in the message. */
void harness_expect_refused(const char *what, chorusResult_t got, chorusResult_t want,
                            const char *text, const char *word1, const char *word2);

/* chorusCommInitAll of n ranks into comms; on failure FAIL (with the last error) and return 1. */
int harness_init_all(chorusComm_t *comms, int n);
/* One rank's work: comm is rank `rank` of `nranks`. */
typedef void harness_rank_fn(chorusComm_t comm, int rank, int nranks);
/* Run body on n threads, thread i with comms[i], and join them all. Returns 0; 1 (and FAIL) when a
 * thread could not be started, in which case the ones started are left running: exit. */
int harness_run_ranks(chorusComm_t *comms, int n, harness_rank_fn *body);
/* CHECK_OK(chorusCommDestroy) of each of the n communicators. */
void harness_destroy_all(chorusComm_t *comms, int n);

#endif
