/* kernels/cuda/cuda_tc_guard.cu — the run-time check shared by the
 * tensor-core paths (the attention, cuda_attention_guard.cu; the
 * batch-invariant GEMM, cuda_gemm.cu) before they replace their SIMT kernels.
 *
 * Those kernels have run only under the emulation harness, so each is
 * compared with its SIMT reference on a small fixed problem at its first use
 * per case (precision, head dim); when a launch fails or the results differ
 * beyond the path's tolerance, one warning is logged and the SIMT kernels
 * run it for the rest of the run. The check waits for the device once; it
 * cannot while a graph is being captured, so a call made then takes the SIMT
 * kernels and the check waits for a later call.
 *
 * KF_CUDA_TC_CHECK_BREAK=NAME adds 0.05 to every value of the tensor-core
 * result that the check named NAME compares (gemm16: to the values the GEMM
 * check makes its 16-bit copies from): how the tests see the fallback
 * happen without a broken GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
extern "C" {
#include "common/log.h"
}

double cu_rel_l2(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}

void cu_tc_check_break(const char *name, float *x, int64_t n) {
    const char *brk = getenv("KF_CUDA_TC_CHECK_BREAK");
    if (!brk || strcmp(brk, name)) return;
    for (int64_t i = 0; i < n; i++) x[i] += 0.05f;
}

int cu_tc_guard_use(kf_backend *b, cu_tc_guard *g, int bit, const char *what, cu_tc_check_fn check,
                    const void *arg) {
    if (g->force >= 0) return g->force;
    if (!g->on) return 0;
    if (g->checked & bit) return 1;
    if (cu_impl(b)->capturing) return 0;
    g->checked |= bit;
    char why[256];
    g->err = cudaSuccess;
    if (check(b, arg, why, sizeof why)) return 1;
    kf_log_warn(
        "CUDA: the tensor-core %s (%s) %s; the SIMT kernels run it for the rest of this run",
        g->name, what, why);
    g->on = 0;
    return 0;
}

void cu_tc_guard_launched(cu_tc_guard *g, cudaError_t e) {
    g->launches++;
    if (e == cudaSuccess) return;
    KF_CHECK(g->force == 1, "CUDA: the tensor-core %s: %s", g->name, cudaGetErrorString(e));
    cudaGetLastError(); /* the check falls back; clear the error for later launches */
    g->err = e;
}
