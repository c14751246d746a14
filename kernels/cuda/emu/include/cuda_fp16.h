/* kernels/cuda/emu/include/cuda_fp16.h — __half for the CPU emulation harness:
 * IEEE binary16 storage, conversions rounded to nearest even as on the device. */
#ifndef KF_CUDA_EMU_FP16_H
#define KF_CUDA_EMU_FP16_H

#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

struct __align__(2) __half {
    uint16_t bits;
};

static inline __half __float2half_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    __half h;
    if (ax >= 0x7f800000u) { /* inf; a NaN becomes the canonical 0x7fff, as on a GPU */
        h.bits = ax > 0x7f800000u ? 0x7fffu : (uint16_t)(sign | 0x7c00u);
        return h;
    }
    if (ax >= 0x477ff000u) { /* rounds to >= 65520: inf */
        h.bits = (uint16_t)(sign | 0x7c00u);
        return h;
    }
    if (ax < 0x38800000u) {     /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) { /* < 2^-25: rounds to zero (2^-25 itself is a tie to even 0) */
            h.bits = (uint16_t)sign;
            return h;
        }
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value = m * 2^(e-150); half subnormal unit 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1))) q++;
        h.bits = (uint16_t)(sign | q);
        return h;
    }
    uint32_t e = (ax >> 23) - 112, m = ax & 0x7fffffu; /* rebias 127 -> 15 */
    uint32_t q = (e << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) q++; /* carries into the exponent correctly */
    h.bits = (uint16_t)(sign | q);
    return h;
}

static inline float __half2float(__half h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16, e = h.bits >> 10 & 0x1fu,
             m = h.bits & 0x3ffu;
    uint32_t x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e != 0) x = sign | ((e + 112) << 23) | (m << 13);
    else if (m == 0) x = sign;
    else { /* subnormal: normalise */ int s = 0;
        while (!(m & 0x400u)) m <<= 1, s++;
        x = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline unsigned short __half_as_ushort(__half h) { return h.bits; }
static inline __half __ushort_as_half(unsigned short u) {
    __half h;
    h.bits = u;
    return h;
}

#endif
