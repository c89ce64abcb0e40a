/*
 * cuda_memops.cu: the CUDA memops backend's kernels (contract in cuda_memops.h).
 *
 * One kernel body (map_body) runs every element-wise operation: a functor maps (x, y) to the
 * result, for reduce (x op y) and divide (x / divisor, y unused). Each launch splits the range in
 * three: a head of elements up to the first 16-byte boundary of dst, a body of 16-byte packs (one
 * vector load of each input and one vector store per pack, 16 / sizeof(T) elements), and a tail;
 * threads stride over the packs, then over head and tail together. The body runs only when a, b and
 * dst are equally aligned modulo 16 (always so for the slices the primitives pass); else every
 * element is loaded alone, and for a pointer not aligned to the element size, byte by byte.
 * Grids are capped at a few blocks per multiprocessor: the loops stride, and more blocks only
 * cost launches.
 *
 * The kernels themselves are the extern "C" entry points of cuda_module.h, one per dtype x op x
 * access mode, instantiated by MAP_KERNELS below: this runtime-API backend launches them with
 * <<<>>>, and the build compiles this file once more to a fatbin that the library loads with
 * cuModuleLoadData and launches by name, so both paths run the very same code.
 *
 * The arithmetic copies host_reduce.c's definitions so the two backends agree to the bit: integer
 * sum and product through the unsigned type (wrapping), max/min as x > y ? x : y, float16 and
 * bfloat16 widened to float, computed, narrowed with round-to-nearest-even (__float2half_rn,
 * __float2bfloat16_rn), float and double division IEEE (nvcc's default -prec-div=true; the build
 * never passes --use_fast_math). NaN payloads are the one place they may differ.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "cuda_memops.h"
#include "cuda_module.h"

namespace
{

constexpr int kThreads = CUDA_MODULE_THREADS;
constexpr int kBlocksPerSm = 8;
constexpr int kMaxDevices = 64;

/* How a stored type T is computed: in C, converted on load and store. */
template <class T> struct num {
    using C = T;
    static __device__ C in(T x)
    {
        return x;
    }
    static __device__ T out(C x)
    {
        return x;
    }
};
template <> struct num<__half> {
    using C = float;
    static __device__ C in(__half x)
    {
        return __half2float(x);
    }
    static __device__ __half out(C x)
    {
        return __float2half_rn(x);
    }
};
template <> struct num<__nv_bfloat16> {
    using C = float;
    static __device__ C in(__nv_bfloat16 x)
    {
        return __bfloat162float(x);
    }
    static __device__ __nv_bfloat16 out(C x)
    {
        return __float2bfloat16_rn(x);
    }
};

/* Integers wrap through their unsigned type (as in host_reduce.c); floats compute as themselves. */
template <class C> __device__ C wrap_add(C x, C y)
{
    if constexpr (std::is_integral<C>::value) {
        using U = typename std::make_unsigned<C>::type;
        return (C)(U)((U)x + (U)y);
    } else {
        return x + y;
    }
}

template <class C> __device__ C wrap_mul(C x, C y)
{
    if constexpr (std::is_integral<C>::value) {
        using U = typename std::make_unsigned<C>::type;
        return (C)(U)((U)x * (U)y);
    } else {
        return x * y;
    }
}

template <class T> struct op_sum {
    __device__ T operator()(T x, T y) const
    {
        return num<T>::out(wrap_add(num<T>::in(x), num<T>::in(y)));
    }
};
template <class T> struct op_prod {
    __device__ T operator()(T x, T y) const
    {
        return num<T>::out(wrap_mul(num<T>::in(x), num<T>::in(y)));
    }
};
template <class T> struct op_max {
    __device__ T operator()(T x, T y) const
    {
        typename num<T>::C u = num<T>::in(x), v = num<T>::in(y);
        return num<T>::out(u > v ? u : v);
    }
};
template <class T> struct op_min {
    __device__ T operator()(T x, T y) const
    {
        typename num<T>::C u = num<T>::in(x), v = num<T>::in(y);
        return num<T>::out(u < v ? u : v);
    }
};

/* x / divisor, as host_reduce.c's DIVIDE_SIGNED, DIVIDE_UNSIGNED and DIVIDE_FLOAT. A zero
 * divisor leaves integers unchanged here too: divide_typed never launches for it, but a driver-API
 * caller of chorus_map_<int>_div_* may. */
template <class T> struct op_div {
    uint64_t divisor;
    __device__ T operator()(T x, T) const
    {
        using C = typename num<T>::C;
        C v = num<T>::in(x);
        if constexpr (std::is_floating_point<C>::value) {
            return num<T>::out(v / (C)divisor);
        } else if (divisor == 0) {
            return x;
        } else if constexpr (std::is_signed<C>::value) {
            if (divisor > (uint64_t)INT64_MAX)
                return (T)((int64_t)v == INT64_MIN && divisor == (1ull << 63) ? -1 : 0);
            return (T)((int64_t)v / (int64_t)divisor);
        } else {
            return (T)((uint64_t)v / divisor);
        }
    }
};

template <class T> struct alignas(16) pack_t {
    T v[16 / sizeof(T)];
};

/* The unsigned integer as wide as T. */
template <class T>
using bits_t = typename std::conditional<
    sizeof(T) == 1, uint8_t,
    typename std::conditional<
        sizeof(T) == 2, uint16_t,
        typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type>::type>::type;

/* One element at byte address p; Bytes: p may not be aligned to sizeof(T), so it moves a byte at
 * a time, assembled little-endian in a 64-bit integer (the address is never formed as a T
 * pointer). A result leaves through a volatile local: stored byte by byte straight from its
 * register, a float16 or bfloat16 result lost its low byte on an H200 (nvcc 13.0, sm_90; 0xc300
 * stored for 0xc3e8, also through __half_as_ushort), while the same bytes through memory were
 * right (test_cuda_memops' misaligned layouts catch it). */
template <class T, bool Bytes> __device__ T load(const unsigned char *p)
{
    T x;
    if constexpr (Bytes) {
        uint64_t v = 0;
        for (size_t k = 0; k < sizeof(T); k++)
            v |= (uint64_t)p[k] << (8 * k);
        bits_t<T> u = (bits_t<T>)v;
        memcpy(&x, &u, sizeof(T));
    } else {
        x = *reinterpret_cast<const T *>(p);
    }
    return x;
}

template <class T, bool Bytes> __device__ void store(unsigned char *p, T x)
{
    if constexpr (Bytes) {
        volatile bits_t<T> u; /* through memory: see above */
        memcpy((void *)&u, &x, sizeof(T));
        uint64_t v = u;
        for (size_t k = 0; k < sizeof(T); k++)
            p[k] = (unsigned char)((v >> (8 * k)) & 0xff);
    } else {
        *reinterpret_cast<T *>(p) = x;
    }
}

/* dst[i] = f(a[i], b[i]) for i < count elements of T at these byte addresses: elements
 * [0, head) and [head + npacks * N, count) one by one, the packs between as 16-byte vectors. */
template <class T, bool Bytes, class F>
__device__ __forceinline__ void map_body(unsigned char *dst, const unsigned char *a,
                                         const unsigned char *b, size_t count, size_t head,
                                         size_t npacks, F f)
{
    constexpr size_t N = 16 / sizeof(T);
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t p = tid; p < npacks; p += stride) {
        size_t off = (head + p * N) * sizeof(T);
        pack_t<T> x = *reinterpret_cast<const pack_t<T> *>(a + off);
        pack_t<T> y = *reinterpret_cast<const pack_t<T> *>(b + off);
        pack_t<T> r;
#pragma unroll
        for (size_t k = 0; k < N; k++)
            r.v[k] = f(x.v[k], y.v[k]);
        *reinterpret_cast<pack_t<T> *>(dst + off) = r;
    }
    size_t tail = head + npacks * N, rest = head + (count - tail);
    for (size_t j = tid; j < rest; j += stride) {
        size_t off = (j < head ? j : tail + (j - head)) * sizeof(T);
        store<T, Bytes>(dst + off, f(load<T, Bytes>(a + off), load<T, Bytes>(b + off)));
    }
}

/* An entry kernel's body: Op<T> on the operands. div reads a twice rather than b, which a
 * driver-API caller may leave NULL (b is unused), so the pack loop never touches it. */
template <class T, template <class> class Op, bool Bytes>
__device__ __forceinline__ void map_entry(unsigned char *dst, const unsigned char *a,
                                          const unsigned char *b, size_t count, size_t head,
                                          size_t npacks, uint64_t divisor)
{
    if constexpr (std::is_same<Op<T>, op_div<T>>::value)
        map_body<T, Bytes>(dst, a, a, count, head, npacks, op_div<T>{divisor});
    else
        map_body<T, Bytes>(dst, a, b, count, head, npacks, Op<T>{});
}

/* The host side's handle on the entry kernel of (T, Op, Bytes): a specialization per kernel,
 * written by MAP_KERNEL, whose launch() runs it with <<<>>>. */
template <class T, template <class> class Op, bool Bytes> struct map_entry_kernel;

} // namespace

/* The entry kernels of cuda_module.h, extern "C" so that cuModuleGetFunction finds them by the
 * plain name; outside the unnamed namespace, which would make them local symbols. */
#define MAP_KERNEL(dname, T, oname, mname, Bytes)                                                  \
    extern "C" __global__ void __launch_bounds__(kThreads) chorus_map_##dname##_##oname##_##mname( \
        unsigned char *dst, const unsigned char *a, const unsigned char *b, size_t count,          \
        size_t head, size_t npacks, uint64_t divisor)                                              \
    {                                                                                              \
        map_entry<T, op_##oname, Bytes>(dst, a, b, count, head, npacks, divisor);                  \
    }                                                                                              \
    namespace                                                                                      \
    {                                                                                              \
    template <> struct map_entry_kernel<T, op_##oname, Bytes> {                                    \
        static void launch(unsigned grid, cudaStream_t s, unsigned char *dst,                      \
                           const unsigned char *a, const unsigned char *b, size_t count,           \
                           size_t head, size_t npacks, uint64_t divisor)                           \
        {                                                                                          \
            chorus_map_##dname##_##oname##_##mname<<<grid, kThreads, 0, s>>>(                      \
                dst, a, b, count, head, npacks, divisor);                                          \
        }                                                                                          \
    };                                                                                             \
    }
#define MAP_KERNELS_OP(dname, T, oname)                                                            \
    MAP_KERNEL(dname, T, oname, vec, false)                                                        \
    MAP_KERNEL(dname, T, oname, byte, true)
#define MAP_KERNELS(dname, T)                                                                      \
    MAP_KERNELS_OP(dname, T, sum)                                                                  \
    MAP_KERNELS_OP(dname, T, prod)                                                                 \
    MAP_KERNELS_OP(dname, T, max)                                                                  \
    MAP_KERNELS_OP(dname, T, min)                                                                  \
    MAP_KERNELS_OP(dname, T, div)

/* dtype_name() spellings, and by_dtype()'s types. */
MAP_KERNELS(int8, int8_t)
MAP_KERNELS(uint8, uint8_t)
MAP_KERNELS(int32, int32_t)
MAP_KERNELS(uint32, uint32_t)
MAP_KERNELS(int64, int64_t)
MAP_KERNELS(uint64, uint64_t)
MAP_KERNELS(float16, __half)
MAP_KERNELS(float32, float)
MAP_KERNELS(float64, double)
MAP_KERNELS(bfloat16, __nv_bfloat16)

namespace
{

int sm_count_cache[kMaxDevices];

/* Blocks for `items` units of work: enough to cover them, at most kBlocksPerSm per SM. */
unsigned grid_for(size_t items)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < kMaxDevices)
        sms = __atomic_load_n(&sm_count_cache[dev], __ATOMIC_RELAXED);
    if (sms == 0) {
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            sms <= 0)
            sms = 16;
        if (dev >= 0 && dev < kMaxDevices)
            __atomic_store_n(&sm_count_cache[dev], sms, __ATOMIC_RELAXED);
    }
    size_t want = (items + kThreads - 1) / kThreads, cap = (size_t)sms * kBlocksPerSm;
    return (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
}

/* Runs Op<T> on count elements: picks the access mode and splits head, packs and tail as
 * cuda_module.h describes it for a driver-API caller. */
template <class T, template <class> class Op>
int launch(void *dst, const void *a, const void *b, size_t count, uint64_t divisor, void *stream)
{
    if (count == 0)
        return cudaSuccess;
    constexpr uintptr_t es = sizeof(T), per_pack = 16 / sizeof(T);
    uintptr_t d = (uintptr_t)dst, x = (uintptr_t)a, y = (uintptr_t)b;
    unsigned char *dp = (unsigned char *)dst;
    const unsigned char *ap = (const unsigned char *)a, *bp = (const unsigned char *)b;
    cudaStream_t s = (cudaStream_t)stream;
    if (((d | x | y) & (es - 1)) != 0) {
        map_entry_kernel<T, Op, true>::launch(grid_for(count), s, dp, ap, bp, count, count, 0,
                                              divisor);
        return cudaGetLastError();
    }
    size_t head = count, npacks = 0;
    if (((d ^ x) & 15) == 0 && ((d ^ y) & 15) == 0) {
        size_t lead = ((16 - (d & 15)) & 15) / es;
        head = lead < count ? lead : count;
        npacks = (count - head) / per_pack;
    }
    size_t single = count - npacks * per_pack; /* head and tail, element by element */
    size_t items = npacks > single ? npacks : single;
    map_entry_kernel<T, Op, false>::launch(grid_for(items), s, dp, ap, bp, count, head, npacks,
                                           divisor);
    return cudaGetLastError();
}

template <class T>
int reduce_typed(void *dst, const void *a, const void *b, size_t count, chorusRedOp_t op,
                 void *stream)
{
    switch (op) {
    case chorusSum:
    case chorusAvg:
        return launch<T, op_sum>(dst, a, b, count, 0, stream);
    case chorusProd:
        return launch<T, op_prod>(dst, a, b, count, 0, stream);
    case chorusMax:
        return launch<T, op_max>(dst, a, b, count, 0, stream);
    case chorusMin:
        return launch<T, op_min>(dst, a, b, count, 0, stream);
    default:
        return cudaErrorInvalidValue;
    }
}

template <class T>
int divide_typed(void *dst, const void *src, size_t count, uint64_t divisor, void *stream)
{
    if (std::is_integral<T>::value && divisor == 0)
        return dst == src ? (int)cudaSuccess
                          : cuda_memops_copy(dst, src, count * sizeof(T), stream);
    return launch<T, op_div>(dst, src, src, count, divisor, stream);
}

} // namespace

extern "C" int cuda_memops_copy(void *dst, const void *src, size_t nbytes, void *stream)
{
    if (dst == src || nbytes == 0)
        return cudaSuccess;
    return cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, (cudaStream_t)stream);
}

/* fn(T{}) for the C type T of dtype: the one table from chorusDataType_t to element types. */
template <class Fn> int by_dtype(chorusDataType_t dtype, Fn fn)
{
    switch (dtype) {
    case chorusInt8:
        return fn(int8_t{});
    case chorusUint8:
        return fn(uint8_t{});
    case chorusInt32:
        return fn(int32_t{});
    case chorusUint32:
        return fn(uint32_t{});
    case chorusInt64:
        return fn(int64_t{});
    case chorusUint64:
        return fn(uint64_t{});
    case chorusFloat16:
        return fn(__half{});
    case chorusFloat32:
        return fn(float{});
    case chorusFloat64:
        return fn(double{});
    case chorusBfloat16:
        return fn(__nv_bfloat16{});
    default:
        return cudaErrorInvalidValue;
    }
}

extern "C" int cuda_memops_reduce(void *dst, const void *a, const void *b, size_t count,
                                  chorusDataType_t dtype, chorusRedOp_t op, void *stream)
{
    return by_dtype(
        dtype, [&](auto tag) { return reduce_typed<decltype(tag)>(dst, a, b, count, op, stream); });
}

extern "C" int cuda_memops_divide(void *dst, const void *src, size_t count, chorusDataType_t dtype,
                                  uint64_t divisor, void *stream)
{
    return by_dtype(dtype, [&](auto tag) {
        return divide_typed<decltype(tag)>(dst, src, count, divisor, stream);
    });
}

extern "C" const char *cuda_memops_error_string(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}
