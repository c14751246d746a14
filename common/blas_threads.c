/* common/blas_threads.c — see blas_threads.h. */
#include "common/blas_threads.h"

/* OpenBLAS's; weak, so another BLAS library (or none) links too. */
int blas_thread_shutdown_(void) __attribute__((weak));

void blas_threads_stop(void) {
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}
