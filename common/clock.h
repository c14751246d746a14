/* common/clock.h — the one monotonic clock for timings.
 *
 * Every duration the project reports (tokens/s, ms/step, progress rates,
 * benchmark times) is a difference of clock_now_s() readings.
 */
#ifndef KF_COMMON_CLOCK_H
#define KF_COMMON_CLOCK_H

/** Seconds on CLOCK_MONOTONIC (an arbitrary origin: only differences mean
 *  anything; never goes back, unaffected by changes to the wall clock). */
double clock_now_s(void);

#endif
