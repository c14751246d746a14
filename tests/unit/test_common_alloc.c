/* kf_alloc_stream at seeded random sizes around the huge-page threshold:
 * the alignment it promises (64 bytes, 2 MiB from 2 MiB up), zeroing when
 * asked, and every byte of the request writable and read back (ASan checks
 * the bounds in the sanitizer run). Huge pages themselves are only advice,
 * so they are not required. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "tests/test.h"

int main(void) {
    const size_t huge = (size_t)2 << 20;
    for (int i = 0; i < 24; i++) {
        /* below, at and above the threshold, and tiny ones (0 included) */
        uint64_t r = rng_u64(7, 0, (uint64_t)i);
        size_t n = i % 4 == 0   ? (size_t)(r % 100)
                   : i % 4 == 1 ? huge - 64 + r % 128
                                : (size_t)(r % (5 * huge));
        int zero = i % 2;
        unsigned char *p = kf_alloc_stream(n, zero);
        size_t want_align = n >= huge ? huge : 64;
        T_EQ_INT((uint64_t)((uintptr_t)p % want_align), (uint64_t)0,
                 "size %zu: address %p not aligned to %zu", n, (void *)p, want_align);
        if (zero) {
            size_t nonzero = 0;
            for (size_t j = 0; j < n; j++) nonzero += p[j] != 0;
            T_EQ_INT((uint64_t)nonzero, (uint64_t)0, "size %zu zeroed: %zu bytes not 0", n,
                     nonzero);
        }
        for (size_t j = 0; j < n; j++) p[j] = (unsigned char)(j * 131 + 7);
        size_t wrong = 0;
        for (size_t j = 0; j < n; j++) wrong += p[j] != (unsigned char)(j * 131 + 7);
        T_EQ_INT((uint64_t)wrong, (uint64_t)0, "size %zu: %zu bytes read back wrong", n, wrong);
        free(p);
    }
    return T_DONE();
}
