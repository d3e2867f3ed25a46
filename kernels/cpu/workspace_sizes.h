// Workspace sizes of the CPU backend's fused LM head + cross-entropy: one source for the kernel
// (kernels/cpu/lm_head.cpp lays its workspace out by these formulas) and for the memory plan
// (cpu_backend_workspace reserves it in the arena), so a CPU step uses no memory beyond the plan.
// Pure integer math on shapes, header-only.
#pragma once
#include <algorithm>
#include <cstdint>

namespace skew::cpu_ws {

// ---- constants the fused head partitions its work by (changing one changes the workspace)
constexpr int64_t LM_HEAD_CHUNK_TOKENS = 512;  // tokens per chunk at most (chunks of equal size)
constexpr int64_t LM_HEAD_BLOCK_COLS = 256;    // vocabulary columns per tile (one product per tile)
constexpr int64_t LM_HEAD_VOCAB_GROUPS = 16;   // fixed vocabulary groups: the unit of parallel work

inline int64_t align64(int64_t x) { return (x + 63) / 64 * 64; }

/// Tokens per chunk for n_tokens: ceil(n / ceil(n / LM_HEAD_CHUNK_TOKENS)), at least 1.
inline int64_t lm_head_chunk_tokens(int64_t n_tokens) {
    const int64_t n = std::max<int64_t>(1, n_tokens);
    const int64_t chunks = (n + LM_HEAD_CHUNK_TOKENS - 1) / LM_HEAD_CHUNK_TOKENS;
    return (n + chunks - 1) / chunks;
}

/// Bytes of the fused head's workspace, each region 64-byte aligned: fp32 logits (chunk, Vp) |
/// the embedding widened to fp32 (Vp, C) | an fp32 accumulator of its gradient (Vp, C) | the
/// chunk's inputs in fp32 (chunk, C) | one fp32 input-gradient partial per vocabulary group
/// (LM_HEAD_VOCAB_GROUPS, chunk, C) | per group and token a running max (fp32), then per token
/// the row max and 1/sum (2 chunk fp32) | per group and token a running sum of exponentials (fp64)
/// | per-token target logits and losses (2 n fp32).
inline int64_t lm_head_workspace_bytes(int64_t n_tokens, int64_t d_model, int64_t padded_vocab_size) {
    const int64_t chunk = lm_head_chunk_tokens(n_tokens), n = std::max<int64_t>(1, n_tokens);
    const int64_t C = d_model, Vp = padded_vocab_size, G = LM_HEAD_VOCAB_GROUPS;
    return align64(chunk * Vp * 4) + 2 * align64(Vp * C * 4) + align64(chunk * C * 4) + align64(G * chunk * C * 4) +
           align64((G + 2) * chunk * 4) + align64(G * chunk * 8) + 2 * align64(n * 4);
}

}  // namespace skew::cpu_ws
