/* kernels/cuda/emu/include/cuda_bf16.h — __nv_bfloat16 for the CPU emulation
 * harness: the top 16 bits of an fp32 pattern, converted with round to
 * nearest even; a NaN becomes the canonical 0x7fff, as CUDA's conversion. */
#ifndef KF_CUDA_EMU_BF16_H
#define KF_CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

struct __align__(2) __nv_bfloat16 {
    uint16_t bits;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    __nv_bfloat16 h;
    if ((x & 0x7fffffffu) > 0x7f800000u) h.bits = 0x7fffu;
    else h.bits = (uint16_t)((x + 0x7fffu + (x >> 16 & 1u)) >> 16); /* carries into the exponent */
    return h;
}

static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t x = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }

#endif
