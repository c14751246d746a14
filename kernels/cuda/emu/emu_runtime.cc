/* kernels/cuda/emu/emu_runtime.cc — the CPU emulation harness's scheduler and
 * CUDA runtime (docs/cuda_emulation.md).
 *
 * A launch runs its blocks one after another. The threads of a block are
 * fibers on their own stacks (a hand-written x86-64 context switch: glibc's
 * swapcontext makes a system call per switch); a fiber runs until it reaches
 * a synchronisation point, exits, or fails a check. The scheduler runs one
 * warp at a time as far as it gets, warps and lanes in the order
 * KF_CUDA_EMU_ORDER names — forward (thread 0 first), reverse, or
 * random[:SEED] (fresh permutations every round) — so a value read before
 * the barrier that should publish it differs between orders. Memory is host
 * memory and everything is synchronous.
 */
#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#error "the CUDA emulation harness switches fibers with x86-64 assembly"
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* ---- context switch: saves the callee-saved registers on the current stack,
 * stores its pointer in *save, continues on `load` ---- */
extern "C" void emu_ctx_switch(void **save, void *load);
asm(R"(
    .text
    .globl emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
)");

extern "C" char __start_emu_shared[] __attribute__((weak));
extern "C" char __stop_emu_shared[] __attribute__((weak));

namespace {

enum fiber_state { F_READY, F_WAIT, F_DONE };

/* A cp.async copy issued but not yet completed (group -1: not committed). */
struct cp_pending {
    void *dst;
    const void *src;
    unsigned src_bytes;
    int64_t group;
};

struct fiber {
    void *sp;
    char *stack;
    uint3 tid;
    unsigned lane, warp;
    fiber_state state;
    const uint64_t *wait_ctr; /* F_WAIT: runnable again once *wait_ctr != wait_gen */
    uint64_t wait_gen;
    const char *wait_what, *wait_file;
    int wait_line;
    std::vector<cp_pending> cp; /* cp.async copies not yet waited for */
    int64_t cp_groups;          /* groups committed so far */
};

struct warp_state {
    unsigned exists, exited, arrived, mask;
    emu::sync_kind kind;
    const char *file;
    int line;
    uint64_t gen;
    uint64_t vals[2][32]; /* by generation parity: a fast lane's next collective
                           * cannot overwrite what a slow lane has yet to read */
    /* the generation of the last collective whose work (an mma.sync's D,
     * an ldmatrix's reads) the last lane to arrive did for all 32 */
    uint64_t done_gen;
};

struct launch_state {
    const char *name, *file;
    int line;
    void (*fn)(void *);
    void *ctx;
    unsigned nthreads, exited, arrived;
    uint64_t bar_gen;
    const char *bar_file;
    int bar_line;
    std::vector<fiber> fibers;
    std::vector<warp_state> warps;
    void *smem;
    size_t smem_len;
};

#define COLOR(i) ((size_t)((i) % 64) * 64) /* a fiber's offset below its stack top */
const size_t STACK = 256 * 1024, GUARD = 4096;
std::vector<char *> stacks; /* grown on demand, never freed */
launch_state *L;            /* the running launch */
fiber *cur;                 /* the running fiber (NULL: the scheduler) */
void *sched_sp;
int order = -1; /* 0 forward, 1 reverse, 2 random */
uint64_t rng = 0x9e3779b97f4a7c15ull;
#if EMU_ASAN
const void *main_bottom;
size_t main_size;
#endif

const char *sync_name(emu::sync_kind k) {
    switch (k) {
    case emu::SYNC_SHFL: return "a shuffle";
    case emu::SYNC_BALLOT: return "a ballot";
    case emu::SYNC_SYNCWARP: return "__syncwarp";
    case emu::SYNC_MMA: return "an mma.sync";
    case emu::SYNC_LDMATRIX: return "an ldmatrix";
    default: return "a wmma operation";
    }
}

void read_order() {
    const char *o = getenv("KF_CUDA_EMU_ORDER");
    order = 0;
    if (!o || !*o || !strcmp(o, "forward")) return;
    if (!strcmp(o, "reverse")) {
        order = 1;
    } else if (!strncmp(o, "random", 6) && (o[6] == 0 || o[6] == ':')) {
        order = 2;
        if (o[6] == ':') rng ^= strtoull(o + 7, NULL, 10) * 0x2545f4914f6cdd1dull;
    } else {
        emu_fatal("KF_CUDA_EMU_ORDER=%s: expected forward, reverse or random[:SEED]", o);
    }
}

uint64_t next_rand() {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

void shuffle(std::vector<unsigned> &v) {
    for (size_t i = v.size() - 1; i > 0; i--) std::swap(v[i], v[next_rand() % (i + 1)]);
}

char *stack_for(unsigned i) {
    while (stacks.size() <= i) {
        char *p = (char *)mmap(NULL, STACK + GUARD, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) emu_fatal("no memory for fiber stacks (%s)", strerror(errno));
        mprotect(p, GUARD, PROT_NONE); /* an overflow faults instead of corrupting a neighbour */
        stacks.push_back(p + GUARD);
    }
    return stacks[i];
}

/* Where the scheduler is in a block (run_block): rounds over the warps, in
 * wperm's order; each warp's lanes scanned in passes, in lperm's order,
 * until a pass runs none; order 2 draws a fresh wperm each round and a
 * fresh lperm each pass. */
struct sched_state {
    std::vector<unsigned> wperm, lperm;
    unsigned wi, li;    /* the warp at hand (index in wperm), the next lane to scan */
    bool ran, progress; /* a fiber ran in this pass, in this round */
    bool deadlock;      /* a round ran no fiber while some had not exited */
} S;

void start_pass() {
    S.ran = false;
    if (order == 2) shuffle(S.lperm);
    S.li = 0;
}

void start_round() {
    if (order == 2) shuffle(S.wperm);
    S.progress = false;
    S.wi = 0;
    start_pass();
}

/* The fiber to run next, or NULL once the block has finished or deadlocked
 * (S.deadlock). A fiber that waits calls it and switches to that fiber
 * itself, so a collective costs one switch per lane, not two. */
fiber *sched_next() {
    launch_state &l = *L;
    unsigned nw = (unsigned)S.wperm.size();
    for (;;) {
        if (S.wi < nw) {
            unsigned w = S.wperm[S.wi];
            while (S.li < 32) {
                unsigned i = w * 32 + S.lperm[S.li++];
                if (i >= l.nthreads) continue;
                fiber &f = l.fibers[i];
                if (f.state == F_DONE || (f.state == F_WAIT && *f.wait_ctr == f.wait_gen)) continue;
                S.ran = S.progress = true;
                return &f;
            }
            if (!S.ran) S.wi++; /* a pass that ran none: the next warp */
            if (S.wi < nw) {
                start_pass();
                continue;
            }
        }
        if (!S.progress) {
            S.deadlock = true;
            return NULL;
        }
        if (l.exited == l.nthreads) return NULL;
        start_round();
    }
}

bool from_main; /* the switch under way leaves the scheduler's stack */

/* Switch from the running fiber to the next one, or to the scheduler when
 * the block is over; `done`: never resumed. */
void yield_fiber(bool done) {
    fiber *f = cur, *n = sched_next();
    if (n) {
        cur = n;
        threadIdx = n->tid;
        n->state = F_READY;
    }
    from_main = false;
#if EMU_ASAN
    void *fake = NULL;
    if (n) __sanitizer_start_switch_fiber(done ? NULL : &fake, n->stack, STACK);
    else __sanitizer_start_switch_fiber(done ? NULL : &fake, main_bottom, main_size);
    emu_ctx_switch(&f->sp, n ? n->sp : sched_sp);
    if (from_main) __sanitizer_finish_switch_fiber(fake, &main_bottom, &main_size);
    else __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    (void)done;
    emu_ctx_switch(&f->sp, n ? n->sp : sched_sp);
#endif
}

void wait_on(const uint64_t *ctr, const char *what, const char *file, int line) {
    fiber *f = cur;
    f->state = F_WAIT;
    f->wait_ctr = ctr;
    f->wait_gen = *ctr;
    f->wait_what = what;
    f->wait_file = file;
    f->wait_line = line;
    yield_fiber(false);
}

void fiber_exit() {
    fiber *f = cur;
    warp_state &w = L->warps[f->warp];
    if (L->arrived)
        emu::fail("thread exits while %u threads of its block wait at the __syncthreads at %s:%d "
                  "(divergent barrier)",
                  L->arrived, L->bar_file, L->bar_line);
    if (w.arrived && (w.mask >> f->lane & 1u))
        emu::fail("lane %u exits while its warp waits for it in %s at %s:%d", f->lane,
                  sync_name(w.kind), w.file, w.line);
    if (!f->cp.empty())
        emu::fail("thread exits with %zu cp.async copies it never waited for", f->cp.size());
    f->state = F_DONE;
    w.exited |= 1u << f->lane;
    L->exited++;
    yield_fiber(true);
    __builtin_unreachable();
}

void fiber_main() {
#if EMU_ASAN
    if (from_main) __sanitizer_finish_switch_fiber(NULL, &main_bottom, &main_size);
    else __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    L->fn(L->ctx);
    fiber_exit();
}

/* Runs the block's fibers from the scheduler's stack, f first; returns when
 * the block has finished or deadlocked. */
void resume(fiber *f) {
    cur = f;
    threadIdx = f->tid;
    f->state = F_READY;
    from_main = true;
#if EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, STACK);
    emu_ctx_switch(&sched_sp, f->sp);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    emu_ctx_switch(&sched_sp, f->sp);
#endif
    cur = NULL;
}

[[noreturn]] void deadlock() {
    std::map<std::string, int> sites;
    for (fiber &f : L->fibers)
        if (f.state == F_WAIT) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s at %s:%d", f.wait_what, f.wait_file, f.wait_line);
            sites[buf]++;
        }
    fprintf(stderr,
            "cuda-emu: error: kernel %s (launched at %s:%d), block (%u,%u,%u): deadlock, "
            "threads wait at different synchronisation points:\n",
            L->name, L->file, L->line, blockIdx.x, blockIdx.y, blockIdx.z);
    for (auto &s : sites) fprintf(stderr, "  %d threads in %s\n", s.second, s.first.c_str());
    abort();
}

void run_block() {
    launch_state &l = *L;
    size_t shared_len = (uintptr_t)__stop_emu_shared - (uintptr_t)__start_emu_shared;
    if (shared_len) /* unwritten shared memory reads as NaN / -1 */
        memset(__start_emu_shared, 0xff, shared_len);
    if (l.smem_len) memset(l.smem, 0xff, l.smem_len);
    l.exited = l.arrived = 0;
    for (warp_state &w : l.warps) w.exited = w.arrived = 0;
    for (unsigned i = 0; i < l.nthreads; i++) {
        fiber &f = l.fibers[i];
        f.state = F_READY;
        f.cp.clear();
        f.cp_groups = 0;
        /* each stack's frames start COLOR(i) below its top: stacks lie a
         * multiple of 4 KiB apart, so uncoloured every fiber's frames would
         * share the same few L1 sets and a switch would miss them */
        char *top = f.stack + STACK - COLOR(i);
#if EMU_ASAN
        /* the frames a finished fiber left (fiber_main down to the switch,
         * which never return) keep their poisoned redzones: clear them */
        __asan_unpoison_memory_region(top - 16384, 16384);
#endif
        /* a frame as emu_ctx_switch leaves it: six registers, then fiber_main as
         * the return address above a dummy one (so fiber_main sees the ABI's
         * alignment: rsp + 8 a multiple of 16 at entry) */
        uintptr_t *s = (uintptr_t *)top;
        *--s = 0;
        *--s = (uintptr_t)fiber_main;
        for (int r = 0; r < 6; r++) *--s = 0;
        f.sp = s;
    }
    /* A warp runs until none of its lanes can (all wait at a __syncthreads or
     * have exited) before the next warp starts: warps drift as far apart as
     * the block's barriers allow, so a missing one lets a warp overwrite or
     * read shared memory another warp has not finished with. */
    unsigned nw = (unsigned)l.warps.size();
    S.wperm.resize(nw);
    S.lperm.resize(32);
    for (unsigned i = 0; i < nw; i++) S.wperm[i] = order == 1 ? nw - 1 - i : i;
    for (unsigned i = 0; i < 32; i++) S.lperm[i] = order == 1 ? 31 - i : i;
    S.deadlock = false;
    start_round();
    resume(sched_next()); /* a block has a thread, and it can run */
    if (S.deadlock) deadlock();
}

struct mem_map {
    std::map<uintptr_t, size_t> dev, host;
};
mem_map &mem() {
    static mem_map m;
    return m;
}
std::set<void *> &streams() {
    static std::set<void *> s;
    return s;
}
std::set<void *> &events() {
    static std::set<void *> s;
    return s;
}
std::map<const void *, int> &dyn_smem_limit() {
    static std::map<const void *, int> m;
    return m;
}
cudaError_t last_error = cudaSuccess;
int current_device = 0;
long long n_host_syncs = 0;

/* A call that blocks the host until the device has finished queued work (or
 * may, as cudaMalloc/cudaFree and copies with pageable host memory do on a
 * GPU). KF_CUDA_EMU_TRACE_SYNCS=1 prints each one with its call stack, to
 * find the one a test counted. */
void host_sync(const char *api) {
    n_host_syncs++;
    const char *e = getenv("KF_CUDA_EMU_TRACE_SYNCS");
    if (!e || strcmp(e, "1")) return;
    fprintf(stderr, "cuda-emu: host sync %lld: %s\n", n_host_syncs, api);
    void *frames[16];
    backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
}

/* H100 SXM limits */
const int SMEM_DEFAULT = 48 * 1024, SMEM_OPTIN = 232448;

bool inside(const std::map<uintptr_t, size_t> &m, const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

cudaError_t fail_api(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t fail_api(cudaError_t e, const char *fmt, ...) {
    /* as the runtime: an error code, kept for cudaGetLastError; the message
     * says what the emulator saw, since codes alone are hard to trace */
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (%s)\n", cudaGetErrorString(e));
    va_end(ap);
    last_error = e;
    return e;
}

/* ---- stream capture ----
 * One capture at a time: the origin stream and the streams an event recorded
 * in it joined. Their work is appended to `nodes` in issue order (the host
 * issues it in an order that respects every stream and event dependency, so
 * replaying it in that order is a valid schedule of the graph). */
struct graph_node {
    std::function<void()> run;
    const char *what;
};
struct capture {
    uint64_t id;
    void *origin;
    cudaStreamCaptureMode mode;
    bool invalid;
    std::vector<graph_node> nodes;
    /* per joined stream: activity count (1 for the join, +1 per node), and
     * the count the origin has waited for */
    std::map<void *, uint64_t> count, joined;
};
capture *cap;
uint64_t n_captures;

bool capturing(const void *s) { return cap && (s == cap->origin || cap->count.count((void *)s)); }

/* A call the capture forbids: the capture is invalidated, as the runtime does. */
cudaError_t cap_fail(cudaError_t e, const char *what) {
    if (cap) cap->invalid = true;
    return fail_api(e, "%s during a stream capture (the capture is invalidated)", what);
}

/* A call CUDA calls potentially unsafe in a global or thread-local capture:
 * one that allocates, frees or may block the host. */
bool unsafe_now() { return cap && cap->mode != cudaStreamCaptureModeRelaxed; }

} // namespace

/* ---- device side ---- */

namespace emu {

void fail(const char *fmt, ...) {
    fprintf(stderr, "cuda-emu: error: ");
    if (L)
        fprintf(stderr,
                "kernel %s (launched at %s:%d), block (%u,%u,%u), thread (%u,%u,%u): ", L->name,
                L->file, L->line, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
                threadIdx.z);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

unsigned lane_id() { return cur->lane; }

void *dyn_smem() { return L->smem; }

int stream_work(void *stream, const char *what, std::function<void()> work) {
    if (!emu_stream_valid((cudaStream_t)stream))
        emu_fatal("%s queued on a destroyed or unknown stream", what);
    if (!capturing(stream)) {
        work();
        return cudaSuccess;
    }
    if (cap->invalid) {
        last_error = cudaErrorStreamCaptureInvalidated;
        return last_error;
    }
    cap->nodes.push_back(graph_node{std::move(work), what});
    if (stream != cap->origin) cap->count[stream]++;
    return cudaSuccess;
}

static bool in_shared(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)L->smem;
    if (L->smem_len && a >= s && a + n <= s + L->smem_len) return true;
    return a >= (uintptr_t)__start_emu_shared && a + n <= (uintptr_t)__stop_emu_shared;
}

/* The 16-bit halves `half` (0: low, 1: high) of n registers widened: bf16
 * by a shift; fp16 exactly as __half2float, without branches for the
 * compiler to vectorise (exponent and mantissa moved into a float's and
 * scaled by 2^112, exact for normal and subnormal values; inf and NaN keep
 * their mantissa under an all-ones exponent). */
static void widen_halves(float *out, const uint32_t *r, int n, int half, bool bf16) {
    for (int q = 0; q < n; q++) {
        uint32_t h = r[q] >> (16 * half) & 0xffffu, x;
        if (bf16) {
            x = h << 16;
        } else {
            uint32_t em = h & 0x7fffu, y = em << 13;
            float f;
            memcpy(&f, &y, 4);
            f *= 0x1p112f;
            memcpy(&x, &f, 4);
            x = (em >= 0x7c00u ? y | 0x7f800000u : x) | (h & 0x8000u) << 16;
        }
        memcpy(&out[q], &x, 4);
    }
}

void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf16, const char *file,
                  int line) {
    struct regs {
        const uint32_t *a, *b;
        float *d;
    } mine = {a, b, d};
    /* mma.sync waits until every lane executes it: the last lane to arrive
     * returns from the gather while the other 31 wait in it, their registers
     * as they left them, and computes the warp's D into every lane's d */
    const uint64_t *all =
        warp_collective(SYNC_MMA, 0xffffffffu, (uint64_t)(uintptr_t)&mine, file, line);
    warp_state &w = L->warps[cur->warp];
    if (w.done_gen == w.gen) return; /* a waiting lane: its d is written */
    const regs *r[32];
    uint32_t ra[32][4], rb[32][2];
    for (int l = 0; l < 32; l++) {
        r[l] = (const regs *)(uintptr_t)all[l];
        memcpy(ra[l], r[l]->a, sizeof ra[l]);
        memcpy(rb[l], r[l]->b, sizeof rb[l]);
    }
    float ha[2][32][4], hb[2][32][2]; /* half h of lane l's register q at [h][l][q] */
    for (int h = 0; h < 2; h++) {
        widen_halves(&ha[h][0][0], &ra[0][0], 32 * 4, h, bf16);
        widen_halves(&hb[h][0][0], &rb[0][0], 32 * 2, h, bf16);
    }
    /* the owner of each element (PTX ISA, "Matrix fragments for mma.m16n8k16
     * with floating point type"): A(i,k) in lane (i%8)*4 + (k%8)/2, register
     * (i/8) + 2*(k/8), half k%2; B(k,j) in lane j*4 + (k%8)/2, register k/8,
     * half k%2; C(i,j) in lane (i%8)*4 + j/2, element 2*(i/8) + j%2 */
    float A[16][16], B[16][8], D[16][8];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++)
            A[i][k] = ha[k % 2][(i % 8) * 4 + (k % 8) / 2][i / 8 + 2 * (k / 8)];
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 8; j++) B[k][j] = hb[k % 2][j * 4 + (k % 8) / 2][k / 8];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) D[i][j] = r[(i % 8) * 4 + j / 2]->d[2 * (i / 8) + j % 2];
    /* each D(i,j) adds its exact products in k order; j innermost, so the
     * 8 sums of a row proceed side by side (vectorised) */
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++)
            for (int j = 0; j < 8; j++) D[i][j] += A[i][k] * B[k][j];
    for (int l = 0; l < 32; l++) /* C's layout is D's */
        for (int q = 0; q < 4; q++) r[l]->d[q] = D[l / 4 + 8 * (q / 2)][l % 4 * 2 + q % 2];
    w.done_gen = w.gen;
}

void ldmatrix_x4(uint32_t r[4], const void *row, bool trans, const char *file, int line) {
    if (!in_shared(row, 16))
        fail("ldmatrix at %s:%d: row %p is not in shared memory", file, line, row);
    if ((uintptr_t)row % 16)
        fail("ldmatrix at %s:%d: row %p is not 16-byte aligned", file, line, row);
    struct lane_args {
        const char *row;
        uint32_t *r;
    } mine = {(const char *)row, r};
    /* the last lane to arrive reads every lane's registers while the others
     * wait in the gather, so none has moved on to write the rows before all
     * are read, as on the device */
    const uint64_t *all =
        warp_collective(SYNC_LDMATRIX, 0xffffffffu, (uint64_t)(uintptr_t)&mine, file, line);
    warp_state &w = L->warps[cur->warp];
    if (w.done_gen == w.gen) return; /* a waiting lane: its r is written */
    const lane_args *la[32];
    for (int l = 0; l < 32; l++) la[l] = (const lane_args *)(uintptr_t)all[l];
    for (unsigned me = 0; me < 32; me++) {
        uint32_t out[4];
        for (int i = 0; i < 4; i++) {
            uint16_t e[2];
            for (int h = 0; h < 2; h++) {
                /* element (me / 4, c): of the tile, or of its transpose (row c
                 * of the tile, column me / 4) */
                int c = (int)(me % 4) * 2 + h, row_i = trans ? c : (int)(me / 4),
                    col = trans ? (int)(me / 4) : c;
                memcpy(&e[h], la[i * 8 + row_i]->row + 2 * col, 2);
            }
            out[i] = e[0] | (uint32_t)e[1] << 16;
        }
        memcpy(la[me]->r, out, sizeof out);
    }
    w.done_gen = w.gen;
}

void cp_async16(void *dst, const void *src, unsigned src_bytes, const char *file, int line) {
    if (!in_shared(dst, 16))
        fail("cp.async at %s:%d: destination %p is not in shared memory", file, line, dst);
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16)
        fail("cp.async at %s:%d: 16-byte copy from %p to %p, both must be 16-byte aligned", file,
             line, src, dst);
    if (src_bytes > 16) fail("cp.async at %s:%d: source size %u > 16", file, line, src_bytes);
    memset(dst, 0xff, 16); /* undefined until the wait */
    cur->cp.push_back(cp_pending{dst, src, src_bytes, -1});
}

void cp_async_commit() {
    for (cp_pending &c : cur->cp)
        if (c.group < 0) c.group = cur->cp_groups;
    cur->cp_groups++;
}

void cp_async_wait(int n) {
    std::vector<cp_pending> &v = cur->cp;
    size_t kept = 0;
    for (size_t i = 0; i < v.size(); i++) {
        cp_pending &c = v[i];
        if (c.group >= 0 && c.group < cur->cp_groups - n) {
            memcpy(c.dst, c.src, c.src_bytes);
            memset((char *)c.dst + c.src_bytes, 0, 16 - c.src_bytes);
        } else {
            v[kept++] = c;
        }
    }
    v.resize(kept);
}

void syncthreads(const char *file, int line) {
    launch_state &l = *L;
    if (l.exited)
        fail("__syncthreads at %s:%d after %u threads of the block exited (divergent barrier)",
             file, line, l.exited);
    if (l.arrived == 0) {
        l.bar_file = file;
        l.bar_line = line;
    } else if (line != l.bar_line || (file != l.bar_file && strcmp(file, l.bar_file))) {
        fail("divergent __syncthreads: this thread is at %s:%d, %u others wait at %s:%d", file,
             line, l.arrived, l.bar_file, l.bar_line);
    }
    if (++l.arrived == l.nthreads) {
        l.arrived = 0;
        l.bar_gen++;
        return;
    }
    wait_on(&l.bar_gen, "__syncthreads", file, line);
}

const uint64_t *warp_collective(sync_kind kind, unsigned mask, uint64_t value, const char *file,
                                int line) {
    fiber *f = cur;
    warp_state &w = L->warps[f->warp];
    unsigned bit = 1u << f->lane;
    if (!(mask & bit))
        fail("%s at %s:%d: the calling lane %u is not in the mask 0x%08x", sync_name(kind), file,
             line, f->lane, mask);
    if (mask & ~w.exists)
        fail("%s at %s:%d: the mask 0x%08x names lane %d, which does not exist (%u threads per "
             "block)",
             sync_name(kind), file, line, mask, __builtin_ctz(mask & ~w.exists), L->nthreads);
    if (mask & w.exited)
        fail("%s at %s:%d: the mask 0x%08x names lane %d, which has exited", sync_name(kind), file,
             line, mask, __builtin_ctz(mask & w.exited));
    if (w.arrived == 0) {
        w.mask = mask;
        w.kind = kind;
        w.file = file;
        w.line = line;
    } else if (w.mask != mask || w.kind != kind) {
        fail("divergent warp: this lane is in %s at %s:%d (mask 0x%08x), lanes 0x%08x in %s at "
             "%s:%d (mask 0x%08x)",
             sync_name(kind), file, line, mask, w.arrived, sync_name(w.kind), w.file, w.line,
             w.mask);
    }
    uint64_t *vals = w.vals[w.gen & 1];
    vals[f->lane] = value;
    w.arrived |= bit;
    if (w.arrived == mask) {
        w.arrived = 0;
        w.gen++;
        return vals;
    }
    wait_on(&w.gen, sync_name(kind), file, line);
    return vals;
}

void run_grid(const void *kernel, const char *name, const char *file, int line, dim3 grid,
              dim3 block, size_t smem, void (*fn)(void *), void *ctx) {
    if (order < 0) read_order();
    if (L) emu_fatal("%s:%d: launch of %s from inside kernel %s", file, line, name, L->name);
    uint64_t nt = (uint64_t)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || nt > 1024 || block.x > 1024 ||
        block.y > 1024 || block.z > 64)
        emu_fatal("%s:%d: launch of %s with block (%u,%u,%u): at most (1024,1024,64) and 1024 "
                  "threads",
                  file, line, name, block.x, block.y, block.z);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
        grid.z > 65535)
        emu_fatal(
            "%s:%d: launch of %s with grid (%u,%u,%u): x in [1, 2^31-1], y and z in [1, 65535]",
            file, line, name, grid.x, grid.y, grid.z);
    auto lim = dyn_smem_limit().find(kernel);
    size_t max_smem = lim != dyn_smem_limit().end() ? (size_t)lim->second : (size_t)SMEM_DEFAULT;
    if (smem > max_smem)
        emu_fatal("%s:%d: launch of %s with %zu bytes of dynamic shared memory; the limit is %zu "
                  "(cudaFuncSetAttribute(MaxDynamicSharedMemorySize) raises it)",
                  file, line, name, smem, max_smem);
    launch_state l = {};
    l.name = name;
    l.file = file;
    l.line = line;
    l.fn = fn;
    l.ctx = ctx;
    l.nthreads = (unsigned)nt;
    l.fibers.resize(nt);
    l.warps.resize((nt + 31) / 32);
    for (unsigned i = 0; i < nt; i++) {
        fiber &f = l.fibers[i];
        f.stack = stack_for(i);
        f.tid = uint3{i % block.x, i / block.x % block.y, i / (block.x * block.y)};
        f.lane = i % 32;
        f.warp = i / 32;
        l.warps[f.warp].exists |= 1u << f.lane;
    }
    l.smem_len = smem;
    if (smem && posix_memalign(&l.smem, 256, smem)) emu_fatal("no memory for shared memory");
    gridDim = grid;
    blockDim = block;
    L = &l;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = uint3{x, y, z};
                run_block();
            }
    L = NULL;
    free(l.smem);
}

} // namespace emu

cudaError_t emu_func_set_attribute(const void *f, cudaFuncAttribute a, int v) {
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return fail_api(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d not emulated",
                        (int)a);
    if (v < 0 || v > SMEM_OPTIN)
        return fail_api(cudaErrorInvalidValue,
                        "cudaFuncSetAttribute: %d bytes of dynamic shared memory (at most %d)", v,
                        SMEM_OPTIN);
    dyn_smem_limit()[f] = v;
    return cudaSuccess;
}

/* ---- host API ---- */

extern "C" {

void emu_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

int emu_is_device(const void *p, size_t bytes) { return inside(mem().dev, p, bytes ? bytes : 1); }

int emu_stream_valid(cudaStream_t s) { return !s || streams().count((void *)s); }

long long emu_host_syncs(void) { return n_host_syncs; }

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined:
        return "capture sequence contains a fork that was not joined to the primary stream";
    case cudaErrorStreamCaptureIsolation:
        return "dependency created on uncaptured work in another stream";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

/* KF_CUDA_EMU_DEVICES (default 8, a node's worth: one per MPI rank); they
 * all share the host's memory */
static int device_count() {
    const char *e = getenv("KF_CUDA_EMU_DEVICES");
    int n = e ? atoi(e) : 8;
    return n > 0 ? n : 1;
}
cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= device_count())
        return fail_api(cudaErrorInvalidDevice, "cudaSetDevice(%d): %d emulated devices", d,
                        device_count());
    current_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = current_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d < 0 || d >= device_count())
        return fail_api(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", d);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda-emu (H100 limits, run on the CPU)");
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = SMEM_OPTIN;
    p->multiProcessorCount = 132;
    p->major = 9;
    p->minor = 0;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->clockRate = 1980000;
    p->memoryClockRate = 2619000;
    p->memoryBusWidth = 5120;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (d < 0 || d >= device_count() || a != cudaDevAttrMultiProcessorCount)
        return fail_api(cudaErrorInvalidValue, "cudaDeviceGetAttribute(%d, device %d)", (int)a, d);
    *v = 132;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (cap) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize");
    host_sync("cudaDeviceSynchronize");
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (unsafe_now()) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaMalloc");
    host_sync("cudaMalloc");
    void *q = NULL;
    if (posix_memalign(&q, 256, bytes ? bytes : 1))
        return fail_api(cudaErrorMemoryAllocation, "cudaMalloc(%zu)", bytes);
    memset(q, 0xff, bytes); /* device memory starts undefined: NaN here */
    mem().dev[(uintptr_t)q] = bytes ? bytes : 1;
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    if (unsafe_now()) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaFree");
    host_sync("cudaFree");
    if (!mem().dev.erase((uintptr_t)p))
        return fail_api(cudaErrorInvalidValue, "cudaFree(%p): not a cudaMalloc pointer", p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    if (unsafe_now()) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaMallocHost");
    host_sync("cudaMallocHost");
    void *q = malloc(bytes ? bytes : 1);
    if (!q) return fail_api(cudaErrorMemoryAllocation, "cudaMallocHost(%zu)", bytes);
    mem().host[(uintptr_t)q] = bytes ? bytes : 1;
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    if (unsafe_now()) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaFreeHost");
    host_sync("cudaFreeHost");
    if (!mem().host.erase((uintptr_t)p))
        return fail_api(cudaErrorInvalidValue, "cudaFreeHost(%p): not a cudaMallocHost pointer", p);
    free(p);
    return cudaSuccess;
}

/* sync: the caller blocks the host whatever the memory (cudaMemcpy) */
static cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                        cudaStream_t s, bool sync) {
    if (!emu_stream_valid(s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: bad stream");
    /* stricter than a GPU, where a synchronous copy on the legacy stream may
     * run beside a non-blocking capturing stream: it waits for the host, which
     * the captured work never does */
    if (sync && unsafe_now())
        return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaMemcpy (synchronous)");
    if (sync) host_sync("cudaMemcpy");
    if (!bytes) return cudaSuccess;
    bool dd = emu_is_device(dst, bytes), sd = emu_is_device(src, bytes);
    bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dd && !sd) ||
              (kind == cudaMemcpyDeviceToHost && !dd && sd) ||
              (kind == cudaMemcpyDeviceToDevice && dd && sd) ||
              (kind == cudaMemcpyHostToHost && !dd && !sd);
    if (!ok)
        return fail_api(cudaErrorInvalidValue, "cudaMemcpy kind %d: %zu bytes from %s %p to %s %p",
                        (int)kind, bytes, sd ? "device" : "host", src, dd ? "device" : "host", dst);
    /* with pageable host memory the copy returns only once the host side is
     * consumed (H2D) or written (D2H): after the stream's earlier work */
    if (!sync &&
        ((!sd && !inside(mem().host, src, bytes)) || (!dd && !inside(mem().host, dst, bytes)))) {
        if (capturing(s))
            return cap_fail(cudaErrorStreamCaptureUnsupported,
                            "cudaMemcpyAsync with pageable host memory");
        host_sync("cudaMemcpyAsync with pageable host memory");
    }
    /* captured: the graph copies from and to these addresses at each launch */
    return (cudaError_t)emu::stream_work(s, "cudaMemcpyAsync", [=] { memmove(dst, src, bytes); });
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
    return copy(dst, src, bytes, kind, s, false);
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    return copy(dst, src, bytes, kind, 0, true);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
    if (!emu_stream_valid(s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: bad stream");
    if (!bytes) return cudaSuccess;
    if (!emu_is_device(p, bytes))
        return fail_api(cudaErrorInvalidValue, "cudaMemset of %zu bytes at %p: not device memory",
                        bytes, p);
    return (cudaError_t)emu::stream_work(s, "cudaMemsetAsync", [=] { memset(p, v, bytes); });
}
cudaError_t cudaMemset(void *p, int v, size_t bytes) { return cudaMemsetAsync(p, v, bytes, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    if (flags > cudaStreamNonBlocking)
        return fail_api(cudaErrorInvalidValue, "cudaStreamCreateWithFlags(%u)", flags);
    *s = (cudaStream_t)malloc(1);
    streams().insert((void *)*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
/* The range an H100 reports. One emulated stream runs at a time, so a
 * priority changes nothing here; CUDA clamps one outside the range. */
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) {
    (void)priority;
    return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (capturing(s)) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaStreamDestroy");
    if (!s || !streams().erase((void *)s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p)", (void *)s);
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (capturing(s)) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize");
    host_sync("cudaStreamSynchronize");
    return emu_stream_valid(s)
               ? cudaSuccess
               : fail_api(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize(%p)", (void *)s);
}

struct emu_event {
    unsigned flags;
    int recorded;
    double t;
    uint64_t capture; /* the capture it was last recorded in (0: none) */
    void *stream;     /* that capture's stream, and its activity count then */
    uint64_t count;
};
/* The event was last recorded in the capture under way. */
static bool captured_event(cudaEvent_t e) { return cap && e->capture == cap->id; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    emu_event *ev = (emu_event *)calloc(1, sizeof *ev);
    ev->flags = flags;
    events().insert(ev);
    *e = ev;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e || !events().erase(e))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p)", (void *)e);
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!events().count(e) || !emu_stream_valid(s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaEventRecord(%p, %p)", (void *)e,
                        (void *)s);
    e->capture = 0;
    if (capturing(s)) { /* a dependency marker in the graph, not a node */
        if (cap->invalid) return cudaErrorStreamCaptureInvalidated;
        e->capture = cap->id;
        e->stream = s;
        e->count = s == cap->origin ? 0 : cap->count[s];
        return cudaSuccess;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->t = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    e->recorded = 1;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (events().count(e) && captured_event(e))
        return cap_fail(cudaErrorStreamCaptureUnsupported,
                        "cudaEventSynchronize of an event recorded in the capture");
    host_sync("cudaEventSynchronize");
    return events().count(e)
               ? cudaSuccess
               : fail_api(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p)", (void *)e);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    if (!events().count(e) || !emu_stream_valid(s) || flags)
        return fail_api(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent(%p, %p)", (void *)s,
                        (void *)e);
    if (captured_event(e)) {
        if (cap->invalid) return cudaErrorStreamCaptureInvalidated;
        if (!capturing(s)) {
            if (!s)
                return cap_fail(cudaErrorStreamCaptureUnsupported,
                                "the legacy stream waiting on an event of the capture");
            cap->count[s] = 1; /* a fork: s joins the capture */
            cap->joined[s] = 0;
        } else if (s == cap->origin && e->stream != cap->origin) {
            uint64_t &j = cap->joined[e->stream]; /* a join back to the origin */
            if (e->count > j) j = e->count;
        }
    } else if (capturing(s) && e->recorded) {
        return cap_fail(cudaErrorStreamCaptureIsolation,
                        "a capturing stream waiting on an event recorded outside the capture");
    }
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!events().count(a) || !events().count(b) || !a->recorded || !b->recorded ||
        (a->flags | b->flags) & cudaEventDisableTiming)
        return fail_api(cudaErrorInvalidResourceHandle,
                        "cudaEventElapsedTime: events not recorded, or created without timing");
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!events().count(e))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p)", (void *)e);
    if (captured_event(e))
        return cap_fail(cudaErrorStreamCaptureUnsupported,
                        "cudaEventQuery of an event recorded in the capture");
    return cudaSuccess; /* synchronous streams: always complete */
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!emu_stream_valid(s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaStreamQuery(%p)", (void *)s);
    if (capturing(s)) return cap_fail(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery");
    return cudaSuccess;
}

int emu_stream_capturing(cudaStream_t s) { return capturing(s); }

struct emu_graph {
    std::vector<graph_node> nodes;
};
struct emu_graph_exec {
    std::vector<graph_node> nodes;
};

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (!s) /* the legacy stream cannot be captured */
        return fail_api(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture(legacy stream)");
    if (!emu_stream_valid(s) || mode > cudaStreamCaptureModeRelaxed)
        return fail_api(cudaErrorInvalidValue, "cudaStreamBeginCapture(%p, mode %d)", (void *)s,
                        (int)mode);
    if (capturing(s))
        return fail_api(cudaErrorIllegalState, "cudaStreamBeginCapture: %p is already capturing",
                        (void *)s);
    if (cap) /* CUDA allows several; the project never needs two */
        return fail_api(cudaErrorIllegalState,
                        "cudaStreamBeginCapture: the harness models one capture at a time");
    cap = new capture();
    cap->id = ++n_captures;
    cap->origin = s;
    cap->mode = mode;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!capturing(s))
        return fail_api(cudaErrorIllegalState, "cudaStreamEndCapture(%p): not capturing",
                        (void *)s);
    if (s != cap->origin)
        return fail_api(cudaErrorStreamCaptureUnmatched,
                        "cudaStreamEndCapture(%p): the capture began on %p", (void *)s,
                        cap->origin);
    capture *c = cap;
    cap = NULL; /* the capture ends whatever the outcome */
    *g = NULL;
    cudaError_t e = cudaSuccess;
    if (c->invalid) {
        e = fail_api(cudaErrorStreamCaptureInvalidated,
                     "cudaStreamEndCapture: a call during the capture failed it");
    } else {
        for (auto &j : c->count)
            if (c->joined[j.first] < j.second) {
                e = fail_api(cudaErrorStreamCaptureUnjoined,
                             "cudaStreamEndCapture: stream %p has work the origin stream never "
                             "waited for",
                             j.first);
                break;
            }
    }
    if (e == cudaSuccess) *g = new emu_graph{std::move(c->nodes)};
    delete c;
    return e;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status) {
    if (!emu_stream_valid(s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaStreamIsCapturing(%p)", (void *)s);
    *status = !capturing(s)  ? cudaStreamCaptureStatusNone
              : cap->invalid ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    if (!g || flags)
        return fail_api(cudaErrorInvalidValue, "cudaGraphInstantiate(%p, flags %llu)", (void *)g,
                        flags);
    *exec = new emu_graph_exec{g->nodes}; /* independent of g from now on, as in CUDA */
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec || !emu_stream_valid(s))
        return fail_api(cudaErrorInvalidResourceHandle, "cudaGraphLaunch(%p, %p)", (void *)exec,
                        (void *)s);
    /* the nodes in their capture order, with the arguments they were captured
     * with; into a capturing stream the whole graph is one node */
    std::vector<graph_node> nodes = exec->nodes;
    return (cudaError_t)emu::stream_work(s, "cudaGraphLaunch", [nodes] {
        for (const graph_node &n : nodes) n.run();
    });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (!exec) return fail_api(cudaErrorInvalidValue, "cudaGraphExecDestroy(NULL)");
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    if (!g) return fail_api(cudaErrorInvalidValue, "cudaGraphDestroy(NULL)");
    delete g;
    return cudaSuccess;
}

} // extern "C"
