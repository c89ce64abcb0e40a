/*
 * memops.h: the data-movement backend contract used by the primitives (DESIGN section 6).
 *
 * A backend is one const table: copy bytes, reduce two inputs element-wise, divide (avg's last
 * step). The host backend (host_memops.c, host_reduce.c) uses memcpy and loops the compiler
 * vectorizes; a CUDA backend later fills the same table with kernels. Backends never see a
 * communicator. float16 and bfloat16 reduce through float with round-to-nearest-even.
 */
#ifndef CHORUS_MEMOPS_H
#define CHORUS_MEMOPS_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

typedef struct memops_ops {
    const char *name;
    /* dst = src, nbytes bytes; the ranges do not overlap unless dst == src. */
    void (*copy)(void *dst, const void *src, size_t nbytes);
    /* The same into a caller's output that outgrows the caches and is not read again in the
     * call: streaming (non-temporal) stores where the backend has them, so the output's lines
     * are not first read in (stores fenced before it returns); else as copy. */
    void (*copy_out)(void *dst, const void *src, size_t nbytes);
    /* dst = src with copy's stores and dst_stream = src with copy_out's, from one read of src
     * (a rank's own part of an all-gather into its output and its window); the three ranges do
     * not overlap. NULL where the backend has none: copy and copy_out then. */
    void (*copy_dup)(void *dst, void *dst_stream, const void *src, size_t nbytes);
    /* dst[i] = a[i] op b[i] for count elements; avg reduces as sum; dst may equal a or b. */
    void (*reduce)(void *dst, const void *a, const void *b, size_t count, chorusDataType_t dtype,
                   chorusRedOp_t op);
    /* dst[i] = src[i] / divisor (avg's last step; integer division, truncating, for integers). */
    void (*divide)(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                   uint64_t divisor);
    /* dst[i] = src[0][i] op src[1][i] op ... op src[nsrc - 1][i], left to right (nsrc >= 1):
     * the same bits as reduce applied nsrc - 1 times into dst; dst may be src[0], no other
     * source. NULL where the backend has none (callers then chain reduce). */
    void (*reduce_n)(void *dst, const void *const *src, int nsrc, size_t count,
                     chorusDataType_t dtype, chorusRedOp_t op);
} memops_ops_t;

extern const memops_ops_t host_memops;

/* A copy with copy_out's stores where stream, else copy's: the one choice the primitives' outputs
 * (prims_copy_out), the send slots (prims.c slot_copy) and the direct windows' slots
 * (direct_copy_in) each make by their own rule. */
static inline void memops_copy(const memops_ops_t *ops, int stream, void *dst, const void *src,
                               size_t nbytes)
{
    if (stream)
        ops->copy_out(dst, src, nbytes);
    else
        ops->copy(dst, src, nbytes);
}

/* Bytes per element of a valid dtype; 0 for an invalid value (inline: every call asks). One
 * nibble a dtype in an immediate (chorusInt8 lowest), where a switch became a table in .rodata:
 * one more page for a call to touch after every process switch (debug.h's HOT_PATH). */
#define DTYPE_NBYTES_NIBBLES 0x2842884411ull
static inline size_t dtype_nbytes(chorusDataType_t dtype)
{
    if ((unsigned)dtype >= chorusNumTypes)
        return 0;
    return (size_t)(DTYPE_NBYTES_NIBBLES >> (4 * (unsigned)dtype)) & 0xf;
}
_Static_assert(chorusInt8 == 0 && chorusUint8 == 1 && chorusInt32 == 2 && chorusUint32 == 3 &&
                   chorusInt64 == 4 && chorusUint64 == 5 && chorusFloat16 == 6 &&
                   chorusFloat32 == 7 && chorusFloat64 == 8 && chorusBfloat16 == 9 &&
                   chorusNumTypes == 10,
               "dtype_nbytes' nibbles follow chorusDataType_t's order");
/* Short names ("float32", "sum") for logs and errors; "?" for invalid values. */
const char *dtype_name(chorusDataType_t dtype);
const char *redop_name(chorusRedOp_t op);

/* Round-to-nearest-even conversions used by the float16/bfloat16 reductions (exported for tests).
 */
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

#endif /* CHORUS_MEMOPS_H */
