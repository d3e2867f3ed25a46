// Experts that received no token in a step are skipped (see idle_experts.h).
#include "train/idle_experts.h"

#include "engine/error.h"
#include "engine/memory_plan.h"

namespace skew {

void add_expert_tokens(ExpertTokenCounts& c, const std::vector<MoeStats>& moe) {
    for (size_t i = 0; i < moe.size(); ++i) {
        if (c.counts.size() <= i) {
            c.blocks.push_back(moe[i].block);
            c.counts.emplace_back(moe[i].counts.size(), 0);
        }
        if (c.counts[i].size() != moe[i].counts.size() || c.blocks[i] != moe[i].block)
            fail("expert token counts: block {} reports {} experts, expected {}", moe[i].block, moe[i].counts.size(),
                 c.counts[i].size());
        for (size_t e = 0; e < moe[i].counts.size(); ++e) c.counts[i][e] += moe[i].counts[e];
    }
}

std::vector<IdleExpert> idle_experts(const ExpertTokenCounts& c) {
    std::vector<IdleExpert> out;
    for (size_t i = 0; i < c.counts.size(); ++i)
        for (size_t e = 0; e < c.counts[i].size(); ++e)
            if (c.counts[i][e] == 0) out.push_back({c.blocks[i], int64_t(e)});
    return out;
}

namespace {

void save_slice(Backend& backend, IdleExpertSnapshot& snap, void* base, int64_t slice_bytes, int64_t expert) {
    IdleExpertSnapshot::Piece piece;
    piece.device = static_cast<std::byte*>(base) + expert * slice_bytes;
    piece.bytes.resize(size_t(slice_bytes));
    backend.copy_to_host(piece.bytes.data(), piece.device, slice_bytes);
    snap.pieces.push_back(std::move(piece));
}
}  // namespace

IdleExpertSnapshot save_idle_experts(Backend& backend, const OptimizerConfig& opt, std::span<const ParamSlot> slots,
                                     const std::vector<IdleExpert>& idle) {
    IdleExpertSnapshot snap;
    if (idle.empty()) return snap;
    for (const ParamSlot& s : slots) {
        if (!s.info || !is_expert_bank(*s.info)) continue;
        const int64_t n_experts = s.info->n_matrices();
        const auto states = optimizer_param_state(opt, *s.info);
        for (const IdleExpert& ie : idle) {
            if (ie.block != s.info->block) continue;
            if (ie.expert < 0 || ie.expert >= n_experts)
                fail("idle experts: expert {} of block {} is outside '{}' ({} experts)", ie.expert, ie.block,
                     s.info->name, n_experts);
            save_slice(backend, snap, s.weight, s.info->bytes() / n_experts, ie.expert);
            for (const StateSlotSpec& spec : states) {
                float* st = s.st(spec.kind);
                if (!st) continue;
                if (spec.numel() % n_experts != 0)
                    fail("idle experts: state {} of '{}' has {} values, not a multiple of its {} experts",
                         choice_name(spec.kind), s.info->name, spec.numel(), n_experts);
                save_slice(backend, snap, st, spec.numel() / n_experts * int64_t(sizeof(float)), ie.expert);
            }
        }
    }
    return snap;
}

std::vector<IdleExpert> held_idle_experts(const std::vector<IdleExpert>& idle, const Model& m) {
    if (!m.ep.on()) return idle;
    const int64_t first = m.ep.comm ? m.ep.comm->rank() * m.ep.El : 0;
    std::vector<IdleExpert> out;
    for (const IdleExpert& ie : idle)
        if (ie.expert >= first && ie.expert < first + m.ep.El) out.push_back(IdleExpert{ie.block, ie.expert - first});
    return out;
}

void restore_idle_experts(Backend& backend, const IdleExpertSnapshot& snap) {
    for (const auto& piece : snap.pieces)
        backend.copy_to_device(piece.device, piece.bytes.data(), int64_t(piece.bytes.size()));
}

}  // namespace skew
