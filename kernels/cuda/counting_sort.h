// Stable counting sort of int32 keys on the device, shared by the MoE dispatch (token copies by
// expert) and the deterministic embedding backward (positions by token). Chunked: per-chunk key
// histograms, an ordered scan over chunks, then in-chunk ranks, so equal keys keep input order.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace skew::cuda {

/// Device scratch bytes counting_sort needs for n keys in [0, n_keys).
int64_t counting_sort_scratch_bytes(int64_t n, int64_t n_keys);

/// Stable sort of indices 0..n-1 by keys[i] in [0, n_keys): sorted_to_idx (n) int64, the index at
/// each sorted position (equal keys in increasing index); idx_to_sorted (n) int64 its inverse
/// (nullable); offsets (n_keys + 1) int64, key k owns sorted positions offsets[k] .. offsets[k+1]-1.
/// A key outside the range sets error_bit in *error_word (device int; nullable) and is left out
/// (its slots stay unwritten). All pointers device memory; scratch from counting_sort_scratch_bytes.
void counting_sort(int64_t* sorted_to_idx, int64_t* idx_to_sorted, int64_t* offsets, const int32_t* keys, int64_t n,
                   int64_t n_keys, int* error_word, int error_bit, void* scratch, cudaStream_t stream);

}  // namespace skew::cuda
