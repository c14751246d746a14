/* kernels/cuda/emu/include/cublasLt.h — the project includes cuBLASLt but
 * calls none of its functions; the emulation harness has its types only
 * through cublas_v2.h. */
#ifndef KF_CUDA_EMU_CUBLASLT_H
#define KF_CUDA_EMU_CUBLASLT_H
#include <cublas_v2.h>
#endif
