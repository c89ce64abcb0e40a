/*
 * devbuf.h: device buffers for a test that checks collectives on them, kept beside host shadows:
 * on a real GPU (devbuf_cuda.c, the CUDA runtime) or on the fake driver of fake_cuda_*.c
 * (devbuf_fake.c, loaded from the path the test is given), so that the same test runs on every
 * machine. Each process is one rank with one device.
 */
#ifndef CHORUS_TEST_DEVBUF_H
#define CHORUS_TEST_DEVBUF_H

#include <stddef.h>

/* Pick rank's device (rank % count) and make the stream; the device count, or 0 with the reason
 * in *why (no GPU; for the fake, a driver that cannot be loaded from driver). */
int devbuf_setup(int rank, const char *driver, const char **why);
/* The stream the test passes to its calls (a cudaStream_t). */
void *devbuf_stream(void);
void *devbuf_alloc(size_t nbytes);
void devbuf_free(void *p);
/* Copy host into device memory before anything the caller queues on the stream next; 0 on
 * failure (said on stderr). */
int devbuf_put(void *dev, const void *host, size_t nbytes);
/* Copy device memory into host after everything queued on the stream so far, and wait. */
int devbuf_get(void *host, const void *dev, size_t nbytes);
/* Faults the fake driver counted (copies off the stream or outside a context, memory touched
 * after it was freed...); 0 on a GPU. */
int devbuf_faults(void);

#endif /* CHORUS_TEST_DEVBUF_H */
