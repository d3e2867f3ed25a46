// The head widths the CUDA attention kernels are instantiated for (docs/attention.md): one list for
// the kernels' shape check (kernels/cuda/attention.cu) and the config's model.head_dim rule
// (engine/config.cpp), so a config the loader accepts runs on the GPU. The CPU kernels take any width.
#pragma once
#include <cstdint>

namespace skew {

/// True for the head_dim values the CUDA attention kernels take: 16, 32, 64 and 128.
constexpr bool attention_head_dim_supported(int64_t head_dim) {
    return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

}  // namespace skew
