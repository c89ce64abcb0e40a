/*
 * host_memops.c: the host memops backend table (memops.h) and the dtype/op facts every layer
 * asks for: element sizes and the short names used in logs and errors.
 *
 * copy is memcpy: the primitives move whole slices, and libc's memcpy already picks the best
 * vector width for the CPU. reduce and divide, the element arithmetic, live in host_reduce.c.
 */
#include <string.h>

#include "memops.h"

/* Defined in host_reduce.c; reached only through host_memops (memops.h declares no more). */
void host_reduce(void *dst, const void *a, const void *b, size_t count, chorusDataType_t dtype,
                 chorusRedOp_t op);
void host_divide(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                 uint64_t divisor);

/* In-place steps call copy with dst == src; memcpy on identical ranges is undefined, so skip. */
static void host_copy(void *dst, const void *src, size_t nbytes)
{
    if (dst != src && nbytes != 0)
        memcpy(dst, src, nbytes);
}

const memops_ops_t host_memops = {
    .name = "host",
    .copy = host_copy,
    .reduce = host_reduce,
    .divide = host_divide,
};

const char *dtype_name(chorusDataType_t dtype)
{
    switch (dtype) {
    case chorusInt8:
        return "int8";
    case chorusUint8:
        return "uint8";
    case chorusInt32:
        return "int32";
    case chorusUint32:
        return "uint32";
    case chorusInt64:
        return "int64";
    case chorusUint64:
        return "uint64";
    case chorusFloat16:
        return "float16";
    case chorusFloat32:
        return "float32";
    case chorusFloat64:
        return "float64";
    case chorusBfloat16:
        return "bfloat16";
    default:
        return "?";
    }
}

const char *redop_name(chorusRedOp_t op)
{
    switch (op) {
    case chorusSum:
        return "sum";
    case chorusProd:
        return "prod";
    case chorusMax:
        return "max";
    case chorusMin:
        return "min";
    case chorusAvg:
        return "avg";
    default:
        return "?";
    }
}
