/* kernels/cuda/emu/emu_blas.cc — the cuBLAS calls the project makes, as
 * reference code for the CPU emulation harness (docs/cuda_emulation.md).
 *
 * Arguments are checked as cuBLAS checks them (status codes for sizes,
 * leading dimensions, operations, type and compute-type combinations), and
 * operands must lie in device memory. The product is summed in k order,
 * except that small outputs with a long k are split into k chunks added in
 * order, as cuBLAS's split-K kernels do: like the library, a row's result may
 * depend on the problem's shape, which is what batch-invariant code must not
 * rely on.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

struct emu_blas {
    cudaStream_t stream;
    cublasMath_t math;
    void *workspace; /* cublasSetWorkspace's (NULL: the library's own) */
};

static int handle_ok(cublasHandle_t h) { return h && emu_stream_valid(h->stream); }

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!emu_stream_valid(s)) return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !emu_is_device(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = bytes ? workspace : NULL;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode < CUBLAS_DEFAULT_MATH || mode > CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

static size_t type_size(cudaDataType t) {
    return t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : t == CUDA_R_64F ? 8 : 4;
}

static float load(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

/* Elements a column-major rows x cols operand with leading dimension ld spans
 * over the batch. */
static size_t extent(int rows, int cols, int ld, long long stride, int batch) {
    if (rows == 0 || cols == 0) return 0;
    return (size_t)(batch - 1) * (size_t)(stride > 0 ? stride : 0) + (size_t)ld * (cols - 1) + rows;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha_p, const void *A, cudaDataType At,
                                          int lda, long long sa, const void *B, cudaDataType Bt,
                                          int ldb, long long sb, const void *beta_p, void *C,
                                          cudaDataType Ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C))
        return CUBLAS_STATUS_INVALID_VALUE;
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the emulator models the default algorithms only */
    bool f32 = ct == CUBLAS_COMPUTE_32F || ct == CUBLAS_COMPUTE_32F_PEDANTIC ||
               ct == CUBLAS_COMPUTE_32F_FAST_TF32 || ct == CUBLAS_COMPUTE_32F_FAST_16F;
    bool types =
        At == Bt && ((f32 && At == CUDA_R_32F && Ct == CUDA_R_32F) ||
                     (f32 && At == CUDA_R_16F && (Ct == CUDA_R_32F || Ct == CUDA_R_16F)) ||
                     (f32 && At == CUDA_R_16BF && (Ct == CUDA_R_32F || Ct == CUDA_R_16BF)));
    if (!types) return CUBLAS_STATUS_NOT_SUPPORTED; /* the combinations the project may use */
    if (At != CUDA_R_32F && h->math == CUBLAS_PEDANTIC_MATH)
        emu_fatal("cublasGemmStridedBatchedEx: 16-bit operands on a handle in CUBLAS_PEDANTIC_MATH "
                  "(prescribed-precision arithmetic for every phase, off the tensor cores' fast "
                  "path); ask for pedantic fp32 per call with CUBLAS_COMPUTE_32F_PEDANTIC instead");
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    size_t ea = extent(ar, ac, lda, sa, batch), eb = extent(br, bc, ldb, sb, batch);
    size_t ec = extent(m, n, ldc, sc, batch);
    if ((ea && !emu_is_device(A, ea * type_size(At))) ||
        (eb && !emu_is_device(B, eb * type_size(Bt))) || !emu_is_device(C, ec * type_size(Ct)))
        emu_fatal("cublasGemmStridedBatchedEx: an operand lies outside device memory (m %d n %d "
                  "k %d, lda %d ldb %d ldc %d, strides %lld %lld %lld, batch %d)",
                  m, n, k, lda, ldb, ldc, sa, sb, sc, batch);
    /* a lint: without a workspace of its own, cuBLAS may allocate one inside the
     * capture, which the graph then replays without owning */
    if (emu_stream_capturing(h->stream) && !h->workspace)
        emu_fatal("cublasGemmStridedBatchedEx captured on a handle without cublasSetWorkspace");
    /* host pointer mode: alpha and beta are read now, the operands when the
     * work runs (at each launch of a graph that captured it) */
    float alpha = *(const float *)alpha_p, beta = *(const float *)beta_p;
    emu::stream_work(h->stream, "cublasGemmStridedBatchedEx", [=] {
        /* split-K model: fewer 64x64 output tiles than the H100's 132 SMs and a
         * long k gives k chunks, summed one after the other */
        long long tiles = (long long)((m + 63) / 64) * ((n + 63) / 64) * batch;
        int splits = 1;
        if (tiles < 132 && k >= 256) {
            splits = (int)(132 / tiles);
            if (splits > k / 128) splits = k / 128;
            if (splits > 8) splits = 8;
            if (splits < 1) splits = 1;
        }
        int chunk = (k + splits - 1) / splits;
        for (int z = 0; z < batch; z++) {
            const char *a = (const char *)A + (size_t)z * sa * type_size(At);
            const char *b = (const char *)B + (size_t)z * sb * type_size(Bt);
            char *c = (char *)C + (size_t)z * sc * type_size(Ct);
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    float acc = 0.0f;
                    for (int k0 = 0; k0 < k; k0 += chunk) {
                        float part = 0.0f;
                        for (int kk = k0; kk < k0 + chunk && kk < k; kk++) {
                            float av = load(a, At,
                                            ta == CUBLAS_OP_N ? (size_t)kk * lda + i
                                                              : (size_t)i * lda + kk);
                            float bv = load(b, Bt,
                                            tb == CUBLAS_OP_N ? (size_t)j * ldb + kk
                                                              : (size_t)kk * ldb + j);
                            part = fmaf(av, bv, part);
                        }
                        acc += part;
                    }
                    size_t ci = (size_t)j * ldc + i;
                    float v = alpha * acc;
                    if (beta != 0.0f) v += beta * load(c, Ct, ci); /* beta = 0: C is not read */
                    if (Ct == CUDA_R_16F) ((__half *)c)[ci] = __float2half_rn(v);
                    else if (Ct == CUDA_R_16BF) ((__nv_bfloat16 *)c)[ci] = __float2bfloat16_rn(v);
                    else ((float *)c)[ci] = v;
                }
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
