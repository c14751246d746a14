/* kernels/noise_freq.h — the angular frequencies of the noise encoder's
 * sinusoidal features (kernels.h noise_features), one definition for the CPU
 * and CUDA backends so both compute the same float64 products. */
#ifndef KF_KERNELS_NOISE_FREQ_H
#define KF_KERNELS_NOISE_FREQ_H

#include <math.h>
#include <stdint.h>

#include "kernels/hd.h"

/** Frequency i of half (radians per unit). cycles == 0: the released
 *  encoder's 2*pi*10000^(-i/half), from one cycle over [0, 1] down to
 *  almost none; cycles >= 1: 2*pi*cycles^(i/(half-1)), geometric from one
 *  cycle over [0, 1] up to `cycles` of them (2*pi when half == 1). */
static inline KF_HD double kf_noise_freq(int64_t i, int64_t half, int64_t cycles) {
    const double two_pi = 6.283185307179586476925286766559;
    if (cycles == 0) return two_pi * pow(10000.0, -(double)i / (double)half);
    if (half < 2) return two_pi;
    return two_pi * pow((double)cycles, (double)i / (double)(half - 1));
}

#endif
