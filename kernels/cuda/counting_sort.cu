// Stable device counting sort (the dropless MoE dispatch of docs/design.md "Router (fp32)": a
// permutation that groups token copies by expert; embedding backward: positions grouped by
// token). Integer counts only, so the result is exact and independent of timing. CPU twins:
// moe_dispatch / embedding_backward in kernels/cpu/.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/counting_sort.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kChunk =
    cuda_ws::COUNTING_SORT_CHUNK;  // keys per chunk (= threads per block of the histogram and place kernels)
constexpr int kScanThreads = 1024;

int64_t n_chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

// chunk_counts[chunk][key] = occurrences of key in the chunk (zeroed before).
__global__ void chunk_histogram_kernel(int32_t* __restrict__ chunk_counts, const int32_t* __restrict__ keys, int64_t n,
                                       int64_t n_keys, int* error_word, int error_bit) {
    const int64_t i = int64_t(blockIdx.x) * kChunk + threadIdx.x;
    if (i >= n) return;
    const int32_t k = keys[i];
    if (k < 0 || k >= n_keys) {
        if (error_word) atomicOr(error_word, error_bit);
        return;
    }
    atomicAdd(chunk_counts + int64_t(blockIdx.x) * n_keys + k, 1);
}

// Per key: exclusive running count over chunks (in place) and the key's total.
__global__ void chunk_scan_kernel(int32_t* __restrict__ chunk_counts, int64_t* __restrict__ totals, int64_t chunks,
                                  int64_t n_keys) {
    for (int64_t k = thread_index(); k < n_keys; k += grid_stride()) {
        int64_t run = 0;
        for (int64_t c = 0; c < chunks; ++c) {
            const int32_t v = chunk_counts[c * n_keys + k];
            chunk_counts[c * n_keys + k] = int32_t(run);
            run += v;
        }
        totals[k] = run;
    }
}

// One block: offsets = exclusive prefix sum of totals (n_keys + 1 entries).
__global__ void offsets_scan_kernel(int64_t* __restrict__ offsets, const int64_t* __restrict__ totals, int64_t n_keys) {
    __shared__ int64_t part[kScanThreads];
    const int64_t per = (n_keys + kScanThreads - 1) / kScanThreads;
    const int64_t k0 = int64_t(threadIdx.x) * per, k1 = min(n_keys, k0 + per);
    int64_t s = 0;
    for (int64_t k = k0; k < k1; ++k) s += totals[k];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t run = 0;
        for (int i = 0; i < kScanThreads; ++i) {
            const int64_t v = part[i];
            part[i] = run;
            run += v;
        }
        offsets[n_keys] = run;
    }
    __syncthreads();
    int64_t run = part[threadIdx.x];
    for (int64_t k = k0; k < k1; ++k) {
        offsets[k] = run;
        run += totals[k];
    }
}

// Block per chunk: rank of each key among equal keys earlier in the chunk, then its final slot.
__global__ void place_kernel(int64_t* __restrict__ sorted_to_idx, int64_t* __restrict__ idx_to_sorted,
                             const int64_t* __restrict__ offsets, const int32_t* __restrict__ chunk_base,
                             const int32_t* __restrict__ keys, int64_t n, int64_t n_keys) {
    __shared__ int32_t sk[kChunk];
    const int64_t c0 = int64_t(blockIdx.x) * kChunk;
    const int64_t i = c0 + threadIdx.x;
    sk[threadIdx.x] = i < n ? keys[i] : -1;
    __syncthreads();
    if (i >= n) return;
    const int32_t k = sk[threadIdx.x];
    if (k < 0 || k >= n_keys) return;
    int32_t rank = 0;
    for (int j = 0; j < int(threadIdx.x); ++j) rank += sk[j] == k;
    const int64_t p = offsets[k] + chunk_base[int64_t(blockIdx.x) * n_keys + k] + rank;
    sorted_to_idx[p] = i;
    if (idx_to_sorted) idx_to_sorted[i] = p;
}

}  // namespace

// ---- launchers

int64_t counting_sort_scratch_bytes(int64_t n, int64_t n_keys) {
    return cuda_ws::counting_sort_scratch_bytes(n, n_keys);
}

void counting_sort(int64_t* sorted_to_idx, int64_t* idx_to_sorted, int64_t* offsets, const int32_t* keys, int64_t n,
                   int64_t n_keys, int* error_word, int error_bit, void* scratch, cudaStream_t stream) {
    check_nonneg("counting_sort n", n);
    if (n_keys <= 0) throw_op_error("counting_sort", "n_keys must be positive");
    const int64_t chunks = n_chunks(n);
    auto* chunk_counts = static_cast<int32_t*>(scratch);
    auto* totals = reinterpret_cast<int64_t*>(static_cast<char*>(scratch) + (chunks * n_keys * 4 + 15) / 16 * 16);
    if (chunks > 0) {
        cuda_check(cudaMemsetAsync(chunk_counts, 0, size_t(chunks * n_keys * 4), stream));
        chunk_histogram_kernel<<<unsigned(chunks), kChunk, 0, stream>>>(chunk_counts, keys, n, n_keys, error_word,
                                                                        error_bit);
        cuda_check_kernel("chunk_histogram_kernel");
    }
    chunk_scan_kernel<<<grid_for(n_keys, 256), 256, 0, stream>>>(chunk_counts, totals, chunks, n_keys);
    cuda_check_kernel("chunk_scan_kernel");
    offsets_scan_kernel<<<1, kScanThreads, 0, stream>>>(offsets, totals, n_keys);
    cuda_check_kernel("offsets_scan_kernel");
    if (chunks > 0) {
        place_kernel<<<unsigned(chunks), kChunk, 0, stream>>>(sorted_to_idx, idx_to_sorted, offsets, chunk_counts, keys,
                                                              n, n_keys);
        cuda_check_kernel("place_kernel");
    }
}

}  // namespace skew::cuda
