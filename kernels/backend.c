/* kernels/backend.c — picks a backend by name; names precisions; AdamW's
 * step factors, shared by the backends and the optimizer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "kernels/kernels.h"

#ifndef KF_CUDA
/* Builds without nvcc have no GPU backend; kernels/cuda/ defines this otherwise. */
kf_backend *kernels_cuda_create(int device, char *err_msg, size_t err_len) {
    if (err_msg && err_len)
        snprintf(err_msg, err_len, "this build has no CUDA backend (rebuild with make CUDA=1)");
    return NULL;
}
#endif

void kernels_adamw_factors(kf_grad_ctl *ctl, float lr, float beta1, float beta2, float weight_decay,
                           int64_t step) {
    KF_CHECK(step >= 1, "adamw: step is 1-based, got %lld", (long long)step);
    ctl->step_size = (float)((double)lr / (1.0 - pow((double)beta1, (double)step)));
    ctl->bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, (double)step));
    ctl->wd_decay = 1.0f - lr * weight_decay;
}

const char *kernels_precision_name(kf_precision p) {
    return p == KF_PREC_FP16 ? "fp16" : p == KF_PREC_BF16 ? "bf16" : "fp32";
}

kf_backend *kernels_create(const char *name, kf_err *err) {
    char msg[512] = "";
    if (!name || strcmp(name, "cpu") == 0) return kernels_cpu_create();
    if (strcmp(name, "cuda") == 0) {
        kf_backend *b = kernels_cuda_create(0, msg, sizeof msg);
        if (!b) kf_err_set(err, "backend \"cuda\" is unavailable: %s", msg);
        return b;
    }
    if (strcmp(name, "auto") == 0) {
        kf_backend *b = kernels_cuda_create(0, msg, sizeof msg);
        return b ? b : kernels_cpu_create();
    }
    kf_err_set(err, "unknown backend \"%s\" (expected cpu, cuda or auto)", name);
    return NULL;
}
