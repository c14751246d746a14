/* tests/unit/test_cuda_graph.cu — the emulation harness's model of stream
 * capture (CUDA graphs, docs/cuda_emulation.md): work queued on a capturing
 * stream is recorded, not run; a launch replays it in issue order with the
 * arguments captured (values for scalars, addresses for buffers, so a buffer
 * written between launches is read anew); what CUDA refuses in a capture
 * fails it with CUDA's error code and invalidates it; a fork must join back.
 * Built with EMU=1 (make emu-tests). */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdarg.h>

#include "tests/test.h"

enum { N = 64 };

/* T_EQ_INT for C++ (its type check is C11's _Generic): each argument once */
static void eq(long long got, long long want, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    T_CHECK(got == want, "%s: got %lld want %lld", what, got, want);
}

/* x = a * x + b */
__global__ void k_axpb(float *x, float a, float b, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] = a * x[i] + b;
}

static float *dev_filled(float v) {
    float h[N], *d = NULL;
    for (int i = 0; i < N; i++) h[i] = v;
    cudaMalloc((void **)&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    return d;
}

static float dev_at(const float *d, int i) {
    float v;
    cudaMemcpy(&v, d + i, sizeof v, cudaMemcpyDeviceToHost);
    return v;
}

/* Launches, a memset and a device copy are recorded, run at each launch in
 * issue order, with the scalars they were captured with. */
static void check_replay(cudaStream_t s) {
    float *x = dev_filled(1.0f), *y = dev_filled(0.0f);
    float a = 2.0f;
    eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess, "begin capture");
    k_axpb<<<1, N, 0, s>>>(x, a, 0.0f, N);    /* x = 2x */
    a = 100.0f;                               /* after capture: the graph keeps 2 */
    k_axpb<<<1, N, 0, s>>>(x, 1.0f, 1.0f, N); /* x = x + 1 */
    cudaMemcpyAsync(y, x, N * sizeof(float), cudaMemcpyDeviceToDevice, s);
    cudaMemsetAsync(x, 0, sizeof(float), s); /* x[0] = 0 */
    cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(s, &st);
    eq(st, cudaStreamCaptureStatusActive, "status while capturing");
    /* read directly (the harness's device memory is the host's): a cudaMemcpy
     * to the host would fail the capture */
    T_NEAR(x[1], 1.0f, 0.0f, "x[1] during the capture (nothing ran)");
    T_NEAR(y[1], 0.0f, 0.0f, "y[1] during the capture (nothing ran)");
    cudaGraph_t g = NULL;
    eq(cudaStreamEndCapture(s, &g), cudaSuccess, "end capture");
    cudaStreamIsCapturing(s, &st);
    eq(st, cudaStreamCaptureStatusNone, "status after the capture");
    cudaGraphExec_t ge = NULL;
    eq(cudaGraphInstantiate(&ge, g, 0), cudaSuccess, "instantiate");
    cudaGraphDestroy(g); /* the executable graph stands alone */
    long long syncs = emu_host_syncs();
    eq(cudaGraphLaunch(ge, s), cudaSuccess, "first launch");
    eq(emu_host_syncs() - syncs, 0, "host syncs of a graph launch");
    /* in order: 2*1 + 1 = 3 (the reverse order would give 4) */
    T_NEAR(dev_at(x, 1), 3.0f, 0.0f, "x[1] after one launch");
    T_NEAR(dev_at(y, 0), 3.0f, 0.0f, "y[0] (the copy, before the memset) after one launch");
    T_NEAR(dev_at(x, 0), 0.0f, 0.0f, "x[0] (the memset, last) after one launch");
    cudaGraphLaunch(ge, s);
    T_NEAR(dev_at(x, 1), 7.0f, 0.0f, "x[1] after two launches (2*3 + 1)");
    T_NEAR(dev_at(x, 0), 0.0f, 0.0f, "x[0] after two launches");
    /* addresses, not values: new input in the same buffer is read by the next launch */
    cudaMemsetAsync(x, 0, N * sizeof(float), s);
    cudaGraphLaunch(ge, s);
    T_NEAR(dev_at(y, 5), 1.0f, 0.0f, "y[5] after a launch on a zeroed x (2*0 + 1)");
    cudaGraphExecDestroy(ge);
    cudaFree(x);
    cudaFree(y);
}

/* A call CUDA refuses in a capture: it returns `want`, the capture is
 * invalidated, ends with cudaErrorStreamCaptureInvalidated and no graph, and
 * the kernel captured before the call never runs. */
#define REFUSED(s, call, want, what)                                                               \
    do {                                                                                           \
        float *x_ = dev_filled(1.0f);                                                              \
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);                                    \
        k_axpb<<<1, N, 0, s>>>(x_, 2.0f, 0.0f, N);                                                 \
        cudaError_t e_ = (call);                                                                   \
        eq(e_, want, "%s in a capture: its error", what);                                          \
        cudaStreamCaptureStatus st_;                                                               \
        cudaStreamIsCapturing(s, &st_);                                                            \
        eq(st_, cudaStreamCaptureStatusInvalidated, "%s: the capture's status", what);             \
        cudaGraph_t g_ = (cudaGraph_t)1;                                                           \
        eq(cudaStreamEndCapture(s, &g_), cudaErrorStreamCaptureInvalidated, "%s: end capture",     \
           what);                                                                                  \
        T_CHECK(g_ == NULL, "%s: end capture gave a graph, want none", what);                      \
        T_NEAR(dev_at(x_, 0), 1.0f, 0.0f, "%s: the captured kernel ran", what);                    \
        cudaGetLastError();                                                                        \
        cudaFree(x_);                                                                              \
    } while (0)

static void check_refusals(cudaStream_t s) {
    float host[N], *pinned = NULL, *d = dev_filled(0.0f), *d2 = NULL;
    void *p = NULL;
    cudaMallocHost((void **)&pinned, sizeof host);
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    REFUSED(s, cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported,
            "cudaStreamSynchronize");
    REFUSED(s, cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize");
    REFUSED(s, cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost),
            cudaErrorStreamCaptureUnsupported, "cudaMemcpy to the host");
    REFUSED(s, cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice),
            cudaErrorStreamCaptureUnsupported, "cudaMemcpy from the host");
    REFUSED(s, cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s),
            cudaErrorStreamCaptureUnsupported, "cudaMemcpyAsync to pageable memory");
    REFUSED(s, cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported, "cudaMalloc (global mode)");
    REFUSED(s, cudaFree(d), cudaErrorStreamCaptureUnsupported, "cudaFree (global mode)");
    REFUSED(s, (cudaEventRecord(ev, s), cudaEventQuery(ev)), cudaErrorStreamCaptureUnsupported,
            "cudaEventQuery of an event recorded in the capture");
    REFUSED(s, (cudaEventRecord(ev, s), cudaEventSynchronize(ev)),
            cudaErrorStreamCaptureUnsupported, "cudaEventSynchronize of a captured event");
    cudaEventRecord(ev, s); /* outside any capture */
    REFUSED(s, cudaStreamWaitEvent(s, ev, 0), cudaErrorStreamCaptureIsolation,
            "waiting on an event recorded outside the capture");

    /* relaxed mode allows the allocation; a pinned copy is recorded and reads
     * the host buffer at each launch */
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    eq(cudaMalloc((void **)&d2, sizeof host), cudaSuccess, "cudaMalloc (relaxed mode)");
    eq(cudaMemcpyAsync(d, pinned, sizeof host, cudaMemcpyHostToDevice, s), cudaSuccess,
       "cudaMemcpyAsync from pinned memory in a capture");
    cudaGraph_t g = NULL;
    eq(cudaStreamEndCapture(s, &g), cudaSuccess, "end of the relaxed capture");
    cudaGraphExec_t ge = NULL;
    cudaGraphInstantiate(&ge, g, 0);
    pinned[3] = 42.0f;
    cudaGraphLaunch(ge, s);
    T_NEAR(dev_at(d, 3), 42.0f, 0.0f, "the pinned copy reads the host buffer at launch");
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);

    eq(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported,
       "capture of the legacy stream");
    cudaGetLastError();
    cudaEventDestroy(ev);
    cudaFreeHost(pinned);
    cudaFree(d);
    cudaFree(d2);
}

/* A stream joins the capture by waiting on an event recorded in it; its work
 * is recorded, and the capture ends only once the origin waited for it. */
static void check_fork_join(cudaStream_t s, cudaStream_t s2) {
    float *x = dev_filled(1.0f), *y = dev_filled(1.0f);
    cudaEvent_t fork, join;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    for (int joined = 0; joined < 2; joined++) {
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        k_axpb<<<1, N, 0, s>>>(x, 3.0f, 0.0f, N);
        cudaEventRecord(fork, s);
        cudaStreamWaitEvent(s2, fork, 0);
        cudaStreamCaptureStatus st;
        cudaStreamIsCapturing(s2, &st);
        eq(st, cudaStreamCaptureStatusActive, "the forked stream's status");
        k_axpb<<<1, N, 0, s2>>>(y, 5.0f, 0.0f, N);
        cudaEventRecord(join, s2);
        if (joined) cudaStreamWaitEvent(s, join, 0);
        cudaGraph_t g = NULL;
        cudaError_t e = cudaStreamEndCapture(s, &g);
        cudaGetLastError();
        eq(e, joined ? cudaSuccess : cudaErrorStreamCaptureUnjoined, "end capture, fork %s",
           joined ? "joined" : "never joined");
        cudaStreamIsCapturing(s2, &st);
        eq(st, cudaStreamCaptureStatusNone, "the forked stream after the capture");
        T_NEAR(dev_at(y, 0), 1.0f, 0.0f, "the forked stream's kernel ran during capture");
        if (!g) continue;
        cudaGraphExec_t ge = NULL;
        cudaGraphInstantiate(&ge, g, 0);
        cudaGraphLaunch(ge, s);
        T_NEAR(dev_at(x, 0), 3.0f, 0.0f, "the origin's kernel at launch");
        T_NEAR(dev_at(y, 0), 5.0f, 0.0f, "the forked stream's kernel at launch");
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaFree(x);
    cudaFree(y);
}

/* cuBLAS on a capturing stream (with a workspace of its own): recorded, run
 * at launch, reading the operands then. */
static void check_blas(cudaStream_t s) {
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, s);
    float *a = dev_filled(2.0f), *b = dev_filled(3.0f), *c = dev_filled(0.0f);
    void *ws = NULL;
    cudaMalloc(&ws, 1 << 20);
    cublasSetWorkspace(h, ws, 1 << 20);
    float one = 1.0f, zero = 0.0f;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    /* c [1 x 1] = a [1 x N] . b [N x 1] */
    cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, N, &one, a, CUDA_R_32F, N, 0, b,
                               CUDA_R_32F, N, 0, &zero, c, CUDA_R_32F, 1, 0, 1, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT);
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(s, &g);
    T_NEAR(dev_at(c, 0), 0.0f, 0.0f, "captured GEMM output before launch");
    cudaGraphExec_t ge = NULL;
    cudaGraphInstantiate(&ge, g, 0);
    cudaMemsetAsync(b, 0, N * sizeof(float) / 2, s); /* half of b zeroed before the launch */
    cudaGraphLaunch(ge, s);
    T_NEAR(dev_at(c, 0), 6.0f * N / 2, 0.0f, "captured GEMM output after launch");
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cublasDestroy(h);
    cudaFree(ws);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
}

int main(void) {
    cudaStream_t s, s2;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    check_replay(s);
    check_refusals(s);
    check_fork_join(s, s2);
    check_blas(s);
    cudaStreamDestroy(s);
    cudaStreamDestroy(s2);
    return T_DONE();
}
