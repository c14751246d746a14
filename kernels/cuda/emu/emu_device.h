/* kernels/cuda/emu/emu_device.h — the CUDA device language for host C++: what
 * the project's .cu files use inside kernels, for the CPU emulation harness
 * (docs/cuda_emulation.md). Included (through the emulated <cuda_runtime.h>)
 * only when a .cu file is compiled by g++ with `make EMU=1`.
 *
 * Each thread of a block runs as a fiber (emu_runtime.cc); the built-in
 * indices are globals the scheduler sets before it resumes a fiber, and every
 * synchronising operation (__syncthreads, warp shuffles, ballots, __syncwarp,
 * WMMA collectives) is a point where the fiber may be switched out. Shared
 * memory: static __shared__ variables are static locals placed in the linker
 * section "emu_shared", dynamic shared memory is one buffer per launch; both
 * are filled with 0xff bytes (NaN, -1) before every block, so reading a slot
 * no thread of this block wrote shows.
 */
#ifndef KF_KERNELS_CUDA_EMU_DEVICE_H
#define KF_KERNELS_CUDA_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("emu_shared")))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __align__(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

/* Set by the scheduler for the fiber it resumes (one host thread launches). */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

namespace emu {

/* What a fiber waits in; the error messages name it. */
enum sync_kind { SYNC_SHFL, SYNC_BALLOT, SYNC_SYNCWARP, SYNC_WMMA, SYNC_MMA, SYNC_LDMATRIX };

/** __syncthreads at file:line: every thread of the block must reach the same one. */
void syncthreads(const char *file, int line);

/** A warp collective: the calling lane (in `mask`) contributes `value`; when
 *  every lane of mask has arrived, returns a pointer to the 32 contributions
 *  (valid until this lane's next collective). Reports lanes of the mask that
 *  have exited or do not exist, a calling lane outside the mask, and lanes
 *  that wait in different collectives or with different masks. */
const uint64_t *warp_collective(sync_kind kind, unsigned mask, uint64_t value, const char *file,
                                int line);

/** Aborts with "cuda-emu: error: ..." naming the current block and thread. */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** This thread's lane (threadIdx linearised, mod 32). */
unsigned lane_id();

/** Dynamic shared memory of the running launch. */
void *dyn_smem();

/** PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 with
 *  d as C and D (kernels/cuda/cuda_mma.cuh documents the operands): a warp
 *  collective of all 32 lanes that gathers every lane's a, b and d by the PTX
 *  ISA's fragment layout and gives each lane its four elements of the exact
 *  product, summed in k order in float onto C. */
void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf16, const char *file,
                  int line);

/** PTX ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: a warp collective;
 *  lane l names row l % 8 of tile l / 8 (16 bytes of shared memory) in
 *  `row` and receives in r[i] the two 16-bit elements (row l / 4, columns
 *  2 (l % 4) and +1) of tile i, or of its transpose when trans. */
void ldmatrix_x4(uint32_t r[4], const void *row, bool trans, const char *file, int line);

/** PTX cp.async.cg.shared.global of 16 bytes, the last 16 - src_bytes of them
 *  zeros. The destination reads as 0xff bytes from here until the
 *  cp_async_wait that covers it copies the data, so a read before the wait,
 *  or a copy into a tile another warp still reads, shows as NaN. Reports a
 *  destination outside shared memory and unaligned addresses. */
void cp_async16(void *dst, const void *src, unsigned src_bytes, const char *file, int line);
/** cp.async.commit_group: this thread's uncommitted copies become a group. */
void cp_async_commit();
/** cp.async.wait_group n: completes this thread's committed groups but the
 *  newest n. A thread that exits with copies still pending is reported. */
void cp_async_wait(int n);

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "shuffle of a 1-8 byte value");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> static inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

template <typename T>
static inline T shfl_from(unsigned mask, T v, int src, const char *file, int line) {
    const uint64_t *all = warp_collective(SYNC_SHFL, mask, to_bits(v), file, line);
    if (!(mask >> src & 1u))
        fail("%s:%d: shuffle reads lane %d, which is not in the mask 0x%08x", file, line, src,
             mask);
    return from_bits<T>(all[src]);
}

/* ---- kernel launches: `k<<<g, b, s, st>>>(args)` is rewritten by cu2cc.sh
 * into EMU_LAUNCH(k, g, b, s, st)(args) ---- */

/** Runs fn(ctx) as every thread of every block of the grid (blocks in order),
 *  after checking the configuration against an H100's limits. */
void run_grid(const void *kernel, const char *name, const char *file, int line, dim3 grid,
              dim3 block, size_t smem, void (*fn)(void *), void *ctx);

/** Work queued on a stream (what): run now, or recorded when the stream is
 *  capturing a graph and run at each launch of it. Returns the runtime's code
 *  (0: cudaSuccess), e.g. cudaErrorStreamCaptureInvalidated once the capture
 *  has failed. An unknown or destroyed stream aborts (the runtime calls that
 *  return an error code for one check it first). */
int stream_work(void *stream, const char *what, std::function<void()> work);

template <typename... P> struct launcher {
    void (*k)(P...);
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t smem;
    void *stream;
    template <typename... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P),
                      "kernel launched with the wrong argument count");
        /* converted once, like the launch's parameter buffer (a capture keeps
         * it: a graph replays the arguments it was captured with); each
         * thread gets copies */
        struct ctx_t {
            void (*k)(P...);
            std::tuple<typename std::decay<P>::type...> args;
        };
        auto c = std::make_shared<ctx_t>(
            ctx_t{k, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)});
        launcher l = *this;
        stream_work(stream, name, [l, c] {
            run_grid((const void *)l.k, l.name, l.file, l.line, l.grid, l.block, l.smem,
                     [](void *p) {
                         ctx_t *c = (ctx_t *)p;
                         std::apply(c->k, c->args);
                     },
                     c.get());
        });
    }
};

template <typename... P>
launcher<P...> make_launch(void (*k)(P...), const char *name, const char *file, int line, dim3 grid,
                           dim3 block, size_t smem = 0, void *stream = nullptr) {
    return launcher<P...>{k, name, file, line, grid, block, smem, stream};
}

} // namespace emu

#define EMU_LAUNCH(k, ...) emu::make_launch(k, #k, __FILE__, __LINE__, __VA_ARGS__)

/* ---- synchronisation ---- */
#define __syncthreads() emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) emu_syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
static inline void emu_syncwarp(const char *file, int line, unsigned mask = 0xffffffffu) {
    emu::warp_collective(emu::SYNC_SYNCWARP, mask, 0, file, line);
}
#define __shfl_sync(...) emu_shfl_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) emu_shfl_xor_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) emu_shfl_down_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) emu_shfl_up_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(...) emu_ballot_sync(__FILE__, __LINE__, __VA_ARGS__)
#define __any_sync(m, p) (__ballot_sync(m, p) != 0)
#define __all_sync(m, p) (__ballot_sync(m, p) == (m))

/* width splits the warp into segments of `width` lanes, as on the device */
template <typename T>
static inline T emu_shfl_sync(const char *file, int line, unsigned mask, T v, int src,
                              int width = 32) {
    unsigned l = emu::lane_id(), base = l & ~(unsigned)(width - 1);
    return emu::shfl_from(mask, v, (int)(base + ((unsigned)src & (unsigned)(width - 1))), file,
                          line);
}
template <typename T>
static inline T emu_shfl_xor_sync(const char *file, int line, unsigned mask, T v, int lm,
                                  int width = 32) {
    unsigned l = emu::lane_id(), base = l & ~(unsigned)(width - 1);
    unsigned s = l ^ (unsigned)lm;
    if (s < base || s >= base + (unsigned)width) s = l; /* outside the segment: own value */
    return emu::shfl_from(mask, v, (int)s, file, line);
}
template <typename T>
static inline T emu_shfl_down_sync(const char *file, int line, unsigned mask, T v, unsigned d,
                                   int width = 32) {
    unsigned l = emu::lane_id(), base = l & ~(unsigned)(width - 1);
    unsigned s = l + d < base + (unsigned)width ? l + d : l;
    return emu::shfl_from(mask, v, (int)s, file, line);
}
template <typename T>
static inline T emu_shfl_up_sync(const char *file, int line, unsigned mask, T v, unsigned d,
                                 int width = 32) {
    unsigned l = emu::lane_id(), base = l & ~(unsigned)(width - 1);
    unsigned s = l >= base + d ? l - d : l;
    return emu::shfl_from(mask, v, (int)s, file, line);
}
static inline unsigned emu_ballot_sync(const char *file, int line, unsigned mask, int pred) {
    const uint64_t *all = emu::warp_collective(emu::SYNC_BALLOT, mask, pred != 0, file, line);
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1u && all[l]) r |= 1u << l;
    return r;
}

/* ---- atomics: fibers switch only at synchronisation points, so a plain
 * read-modify-write is atomic here ---- */
template <typename T> static inline T atomicAdd(T *p, T v) {
    T o = *p;
    *p = o + v;
    return o;
}
template <typename T> static inline T atomicSub(T *p, T v) {
    T o = *p;
    *p = o - v;
    return o;
}
template <typename T> static inline T atomicMin(T *p, T v) {
    T o = *p;
    if (v < o) *p = v;
    return o;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    T o = *p;
    if (v > o) *p = v;
    return o;
}
template <typename T> static inline T atomicExch(T *p, T v) {
    T o = *p;
    *p = v;
    return o;
}
template <typename T> static inline T atomicOr(T *p, T v) {
    T o = *p;
    *p = o | v;
    return o;
}
template <typename T> static inline T atomicAnd(T *p, T v) {
    T o = *p;
    *p = o & v;
    return o;
}
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) {
    T o = *p;
    if (o == cmp) *p = v;
    return o;
}

/* ---- device math: host libm stands in for the device's (see the doc) ---- */
template <typename A, typename B>
static inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type T;
    return (T)b < (T)a ? (T)b : (T)a;
}
template <typename A, typename B>
static inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type T;
    return (T)a < (T)b ? (T)b : (T)a;
}
/* floating point as the device's: fminf/fmaxf, a NaN loses */
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
/* fmaf: x86-64-v2 has no FMA instruction, so g++ calls glibc's for every one,
 * which took a quarter of test_cuda_ops' time (the attention kernels' inner
 * loops); the host's FMA instruction where it has one, inline. Both round
 * a * b + c once: the same result. */
static inline float emu_fmaf(float a, float b, float c) {
    if (__builtin_expect(__builtin_cpu_supports("fma"), 1)) {
        __asm__("vfmadd231ss %2, %1, %0" : "+x"(c) : "x"(a), "x"(b));
        return c;
    }
    return fmaf(a, b, c);
}
#define fmaf emu_fmaf
#define __expf emu_expf /* glibc declares an __expf of its own */
static inline float emu_expf(float x) { return expf(x); }
static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }

#endif
