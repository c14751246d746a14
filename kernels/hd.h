/* kernels/hd.h — KF_HD marks a static inline function that both the CPU
 * backend and CUDA kernels call: __host__ __device__ under nvcc, nothing
 * otherwise, so one definition serves both backends. */
#ifndef KF_KERNELS_HD_H
#define KF_KERNELS_HD_H

#ifdef __CUDACC__
#define KF_HD __host__ __device__
#else
#define KF_HD
#endif

#endif
