/*
 * fuzz_common.h: what the bootstrap fuzz targets share: a quiet process, a rank's bootstrap
 * (boot_init) against a scripted fake root, a client that feeds bytes to a listener and waits for
 * it to hang up, and independent oracles: what the wire formats say must be accepted, written
 * from the format (bootstrap_wire.h), not from the checks under test.
 */
#ifndef CHORUS_FUZZ_COMMON_H
#define CHORUS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "bootstrap_wire.h"

#define FUZZ_SECRET 0x5ec12e7f00dfacedull
#define FUZZ_NRANKS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Once per process: logs off (FUZZ_LOG=1 keeps them), SIGPIPE ignored, the fake root listening. */
void fuzz_setup(void);
/* Stop the run with a message: libFuzzer and the replay driver both report abort() as a crash. */
void fuzz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Blocking TCP client to addr; -1 on failure. */
int fuzz_connect(const sock_addr_t *addr);
/* Send what the peer takes (it may hang up early: that is not an error here). */
void fuzz_send(int fd, const void *buf, size_t n);
/* Read exactly n bytes within timeout_ms; 1: got them, 0: EOF, reset or timeout first. */
int fuzz_recv(int fd, void *buf, size_t n, int timeout_ms);
/* Read and drop until the peer hangs up; 1: it did within timeout_ms, 0: it did not. */
int fuzz_wait_hangup(int fd, int timeout_ms);

/* boot_init as rank 0 of FUZZ_NRANKS against the fake root, which answers the first rendezvous
 * with reply (NULL: a valid table whose entry 0 is the rank's own listener) and every retry with
 * "rank 3 missing". *res_p: boot_init's result; the rank's listener address in *listen_p. */
boot_t *fuzz_boot_start(const uint8_t *reply, size_t nreply, chorusResult_t *res_p,
                        sock_addr_t *listen_p);

/* Control frames the service thread handed over since fuzz_control_reset. */
typedef struct fuzz_control {
    int peer;
    uint32_t tag, nbytes;
    uint64_t hash;
} fuzz_control_t;
void fuzz_control_reset(void);
int fuzz_control_count(void);
const fuzz_control_t *fuzz_control_get(int i);
uint64_t fuzz_hash(const void *p, size_t n);

/* Oracles: what the wire format allows (bootstrap_wire.h, bootstrap.h). */
int fuzz_root_hello_ok(const root_hello_t *h, uint64_t secret, int nranks_seen, const int *rank_fd);
int fuzz_peer_hello_ok(const peer_hello_t *h, uint64_t secret, int nranks);
int fuzz_frame_ok(const frame_hdr_t *f, uint32_t max_nbytes);

/* Frames of a stream as the service thread must take them: each whole frame up to the first bad
 * header, truncated header or truncated body. Returns how many (at most max); *clean_p: the stream
 * ended exactly after the last of them. */
typedef struct fuzz_frame {
    uint32_t tag, nbytes;
    const uint8_t *data;
} fuzz_frame_t;
int fuzz_model_frames(const uint8_t *p, size_t n, fuzz_frame_t *out, int max, int *clean_p);

/* Feed bytes (a peer hello and frames) to the listener of b at addr, wait until it hangs up, and
 * check that exactly the frames the model accepts arrived (queued or handed to the control
 * callback) when the hello is valid, and none when it is not. */
void fuzz_listener_check(boot_t *b, const sock_addr_t *addr, const uint8_t *p, size_t n);

#endif
