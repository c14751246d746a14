/* common/clock.h — the one monotonic clock for timings.
 *
 * Every duration the project reports (tokens/s, ms/step, progress rates,
 * benchmark times) is a difference of clock_now_s() readings (or, where a
 * command offers it, of clock_cpu_s() readings); benchmarks summarise
 * rounds of them with clock_median().
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

/** The median of the n >= 1 timings in t: the middle one for odd n, the
 *  mean of the two middle ones for even n. Sorts t in place. For
 *  benchmarks on shared machines, where a bad minute makes outliers of a
 *  few rounds. */
double clock_median(double *t, int n);

#endif
