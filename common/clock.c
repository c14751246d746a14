/* common/clock.c — the monotonic clock (common/clock.h). */
#include "common/clock.h"

#include <time.h>

double clock_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
