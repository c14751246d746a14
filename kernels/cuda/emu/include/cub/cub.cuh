/* kernels/cuda/emu/include/cub/cub.cuh — cub::DeviceRadixSort::SortPairs for
 * the CPU emulation harness: a stable sort on key bits [begin_bit, end_bit)
 * (signed keys ordered as cub orders them), with cub's two-phase temporary
 * storage protocol and its argument checks. */
#ifndef KF_CUDA_EMU_CUB_CUH
#define KF_CUDA_EMU_CUB_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *vals_in, V *vals_out, int n, int begin_bit = 0,
                                 int end_bit = sizeof(K) * 8, cudaStream_t s = 0) {
        static_assert(std::is_integral<K>::value, "emulated cub: integer keys only");
        size_t need = (size_t)(n > 0 ? n : 0) * (sizeof(K) + sizeof(V)) + 256;
        if (!temp) { /* size query */
            temp_bytes = need;
            return cudaSuccess;
        }
        if (n < 0 || begin_bit < 0 || end_bit > (int)(sizeof(K) * 8) || begin_bit >= end_bit)
            emu_fatal("cub::DeviceRadixSort::SortPairs: n = %d, bits [%d, %d)", n, begin_bit,
                      end_bit);
        if (temp_bytes < need)
            emu_fatal("cub::DeviceRadixSort::SortPairs: %zu temporary bytes, %zu needed",
                      temp_bytes, need);
        if (!emu_is_device(temp, temp_bytes) || !emu_stream_valid(s))
            emu_fatal("cub::DeviceRadixSort::SortPairs: temporary storage not device memory, or a "
                      "bad stream");
        if (n == 0) return cudaSuccess;
        if (!emu_is_device(keys_in, n * sizeof(K)) || !emu_is_device(keys_out, n * sizeof(K)) ||
            !emu_is_device(vals_in, n * sizeof(V)) || !emu_is_device(vals_out, n * sizeof(V)))
            emu_fatal("cub::DeviceRadixSort::SortPairs: keys or values are not device memory");
        /* on a capturing stream: sorts at each launch of the graph */
        return (cudaError_t)emu::stream_work(s, "cub::DeviceRadixSort::SortPairs", [=] {
            typedef typename std::make_unsigned<K>::type U;
            U flip = std::is_signed<K>::value ? (U)((U)1 << (sizeof(K) * 8 - 1)) : 0;
            U mask = (U)(((end_bit - begin_bit) >= (int)(sizeof(U) * 8)
                              ? ~(U)0
                              : (((U)1 << (end_bit - begin_bit)) - 1))
                         << begin_bit);
            std::vector<int> idx(n);
            for (int i = 0; i < n; i++) idx[i] = i;
            std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
                return (U)(((U)keys_in[a] ^ flip) & mask) < (U)(((U)keys_in[b] ^ flip) & mask);
            });
            std::vector<K> k(n);
            std::vector<V> v(n);
            for (int i = 0; i < n; i++) k[i] = keys_in[idx[i]], v[i] = vals_in[idx[i]];
            std::copy(k.begin(), k.end(), keys_out);
            std::copy(v.begin(), v.end(), vals_out);
        });
    }
};
} // namespace cub

#endif
