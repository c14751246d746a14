/* common/clock.h — the one monotonic clock for timings.
 *
 * Every duration the project reports (tokens/s, ms/step, progress rates,
 * benchmark times) is a difference of clock_now_s() readings (or, where a
 * command offers it, of clock_cpu_s() readings).
 */
#ifndef KF_COMMON_CLOCK_H
#define KF_COMMON_CLOCK_H

/** Seconds on CLOCK_MONOTONIC (an arbitrary origin: only differences mean
 *  anything; never goes back, unaffected by changes to the wall clock). */
double clock_now_s(void);

/** Seconds of CPU time used by this process, all threads together
 *  (CLOCK_PROCESS_CPUTIME_ID): for timings on a loaded machine, where other
 *  processes stretch wall-clock time but barely change this. */
double clock_cpu_s(void);

#endif
