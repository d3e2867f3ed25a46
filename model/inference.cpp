// Inference on a trained model (docs/evaluation.md): per-token log-probabilities through the
// trainer's forward, and the KV-cache forward of generation (prefill + decode) through the
// trainer's block forward (model/block.h) over the cache's slots (paper Section 4's model, router
// without noise).
#include "model/inference.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/error.h"
#include "model/layers.h"

namespace skew {

std::vector<std::vector<float>> model_token_logprobs(Model& m, const std::vector<std::vector<int32_t>>& seqs) {
    const int64_t B = m.microbatch, T = m.seq_len, V = m.cfg->model.vocab_size;
    for (size_t s = 0; s < seqs.size(); ++s) {
        const int64_t n = int64_t(seqs[s].size());
        if (n < 1 || n > T + 1)
            fail("inference: sequence {} has {} tokens; scoring needs 1 to seq_len + 1 = {}", s, n, T + 1);
        for (int64_t i = 0; i < n; ++i)
            if (seqs[s][size_t(i)] < 0 || seqs[s][size_t(i)] >= V)
                fail("inference: sequence {} token {} is {}, outside the vocabulary [0, {})", s, i, seqs[s][size_t(i)],
                     V);
    }
    std::vector<std::vector<float>> out(seqs.size());
    std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T));
    std::vector<float> losses(size_t(B * T));
    for (size_t s0 = 0; s0 < seqs.size(); s0 += size_t(B)) {
        std::fill(tokens.begin(), tokens.end(), 0);
        std::fill(targets.begin(), targets.end(), 0);
        const size_t n_here = std::min(size_t(B), seqs.size() - s0);
        for (size_t b = 0; b < n_here; ++b) {
            const std::vector<int32_t>& q = seqs[s0 + b];
            for (size_t i = 0; i + 1 < q.size(); ++i) {
                tokens[b * size_t(T) + i] = q[i];
                targets[b * size_t(T) + i] = q[i + 1];
            }
        }
        model_eval(m, tokens.data(), targets.data());
        m.backend->copy_to_host(losses.data(), m.act.losses, int64_t(losses.size() * sizeof(float)));
        for (size_t b = 0; b < n_here; ++b) {
            const size_t n = seqs[s0 + b].size() - 1;
            out[s0 + b].resize(n);
            for (size_t i = 0; i < n; ++i) out[s0 + b][i] = -losses[b * size_t(T) + i];
        }
    }
    return out;
}

void kv_cache_widen_weights(KvCache& kc, const Model& m) {
    auto widen = [&](const ParamRef& p) {
        if (p.info->dtype != DType::BF16) return;
        std::vector<float>& w = kc.widened[p.weight];
        w.resize(size_t(p.numel()));
        m.backend->convert(TensorRef(w.data()), p.w(), p.numel());
    };
    widen(m.head);
    for (const BlockParams& b : m.blocks)
        for (const ParamRef* p :
             {&b.wq, &b.wk, &b.wv, &b.wo, &b.ffn_w1, &b.ffn_w2, &b.ffn_w3, &b.shared_w1, &b.shared_w2, &b.shared_w3})
            if (p->info) widen(*p);
}

std::vector<float> kv_cache_forward(Model& m, KvCache& kc, std::span<const int32_t> tokens, bool all_logits) {
    const ModelConfig& c = m.cfg->model;
    Backend& be = *m.backend;
    const int64_t n = int64_t(tokens.size()), p0 = kc.length, L = p0 + n;
    if (n < 1) fail("inference: kv_cache_forward needs at least one token");
    if (L > kc.max_len)
        fail("inference: {} new tokens after {} cached overflow the KV cache of {} positions (model.max_seq_len {})", n,
             p0, kc.max_len, c.max_seq_len);
    for (int64_t i = 0; i < n; ++i)
        if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= c.padded_vocab_size)
            fail("inference: token {} at position {} is outside the embedding table [0, {})", tokens[size_t(i)], p0 + i,
                 c.padded_vocab_size);
    const int64_t d = c.d_model, Vp = c.padded_vocab_size;
    const ActSlots& a = kc.act;

    be.copy_to_device(a.tokens, tokens.data(), n * int64_t(sizeof(int32_t)));
    // positions p0.. : the position table read from row p0 (learned), or q and k rotated to them (rope)
    const bf16* wpe = m.wpe.info ? static_cast<const bf16*>(m.wpe.weight) + p0 * d : nullptr;
    bf16 *x = a.block_input[0], *y = a.final_input;  // a block's input and output, swapped after each block
    be.embedding_forward(x, a.tokens, static_cast<const bf16*>(m.wte.weight), wpe, 1, n, d, Vp);
    for (size_t b = 0; b < m.blocks.size(); ++b) {
        BlockView v;  // the n new rows at positions p0.., attending over the L cached ones
        v.act = &a;
        v.block = int64_t(b);
        v.rows = n;
        v.pos0 = p0;
        v.input = x;
        v.out = y;
        if (m.blocks[b].moe) v.experts = stored_expert_slots(a, b);
        v.widened = &kc.widened;
        block_forward(m, v, nullptr);
        std::swap(x, y);
    }
    norm_forward(be, c, a.final_ln_out, a.final_ln_mean, a.final_ln_rstd, x, m.lnf_w, m.lnf_b, n);
    const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
    const int64_t chunk = std::max<int64_t>(1, a.logits_bytes / (Vp * int64_t(sizeof(float))));
    std::vector<float> out(size_t(rows * Vp));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {  // the LM head in chunks of act.logits
        const int64_t nr = std::min(chunk, rows - r0);
        be.matmul_forward(a.logits, a.final_ln_out + (first + r0) * d, linear_weight(&kc.widened, m.head), nr, d, Vp);
        be.copy_to_host(out.data() + r0 * Vp, a.logits, nr * Vp * int64_t(sizeof(float)));
    }
    kc.length = L;
    return out;
}

}  // namespace skew
