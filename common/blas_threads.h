/* common/blas_threads.h — stopping the BLAS library's idle threads. */
#ifndef KF_COMMON_BLAS_THREADS_H
#define KF_COMMON_BLAS_THREADS_H

/** OpenBLAS (linked for the trainer) starts its worker threads when the
 * program loads, and they spin for about 0.1 s of CPU before sleeping: time
 * taken from a command's own threads when those use every core. Commands
 * that never call BLAS (tokenize, shards build) call this first. A no-op
 * with a BLAS library that has no such threads. */
void blas_threads_stop(void);

#endif
