// The config's choices as types: each key whose value is one of a few names (model.positions,
// model.norm, model.qk_norm, model.shared_expert_gate, train.expert_grads, train.idle_experts, train.recompute, runtime.backend,
// runtime.grad_dtype, an optimizer's type) is
// parsed once into an enum. One name table per enum serves the schema's allowed values, the parser,
// the resolved config and every message (docs/config-reference.md: `skew config --reference`).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skew {

/// train.expert_grads: expert weight gradients stored in a buffer, or deferred into the optimizer
/// step (docs/design.md, "Deferred expert gradients").
enum class ExpertGrads : uint8_t { STORED, DEFERRED };
/// train.idle_experts: an expert that received no token in a step is skipped by the optimizer, or
/// stepped with a zero gradient (docs/optimizers.md).
enum class IdleExperts : uint8_t { SKIP, STEP };
/// train.recompute, ordered by what the forward keeps: BLOCK keeps each block's input and
/// recomputes the whole block in the backward; ATTENTION keeps every block's working slots but the
/// attention core (attention output and logsumexp), recomputed from the kept q, k, v; NONE keeps
/// everything and recomputes nothing.
enum class Recompute : uint8_t { BLOCK = 0, ATTENTION = 1, NONE = 2 };
/// runtime.backend: where a run computes; AUTO takes CUDA when built with it and a GPU is visible.
enum class BackendChoice : uint8_t { AUTO, CPU, CUDA };
/// runtime.grad_dtype: how gradients are stored.
enum class GradDtype : uint8_t { BF16, FP32 };
/// model.positions: learned absolute position embeddings (GPT-2, the paper) or rotary position
/// embedding on q and k (Llama-family models; docs/architectures.md).
enum class Positions : uint8_t { LEARNED, ROPE };
/// model.norm: LayerNorm with bias (the paper) or RMSNorm without (Llama-family models).
enum class NormKind : uint8_t { LAYERNORM, RMSNORM };
/// model.qk_norm: no normalization of q and k (the paper, Mixtral), RMSNorm over the whole q and k
/// projection widths (OLMoE), or over each head's head_dim lanes with one weight shared by the
/// heads (Qwen3); docs/architectures.md, "QK-norm".
enum class QkNorm : uint8_t { NONE, FULL, PER_HEAD };
/// model.shared_expert_gate: the shared experts' output added as is (DeepSeekMoE), or scaled per
/// token by sigmoid(x · w_gate) (Qwen2-MoE's shared_expert_gate; docs/architectures.md).
enum class SharedExpertGate : uint8_t { NONE, SIGMOID };
/// An optimizer's `type`: its algorithm (docs/optimizers.md).
enum class OptimizerType : uint8_t { SKEWADAM, ADAMW, LION, MUON, MUON_KJ, ADAFACTOR, GALORE, GALORE_PAPER };

/// The name table of an enum: every value with the name the config spells, in documentation order.
template <typename E>
struct ChoiceNames;

template <>
struct ChoiceNames<ExpertGrads> {
    static constexpr std::array<std::pair<ExpertGrads, std::string_view>, 2> items{
        {{ExpertGrads::STORED, "stored"}, {ExpertGrads::DEFERRED, "deferred"}}};
};
template <>
struct ChoiceNames<IdleExperts> {
    static constexpr std::array<std::pair<IdleExperts, std::string_view>, 2> items{
        {{IdleExperts::SKIP, "skip"}, {IdleExperts::STEP, "step"}}};
};
template <>
struct ChoiceNames<Recompute> {
    static constexpr std::array<std::pair<Recompute, std::string_view>, 3> items{
        {{Recompute::BLOCK, "block"}, {Recompute::ATTENTION, "attention"}, {Recompute::NONE, "none"}}};
};
template <>
struct ChoiceNames<BackendChoice> {
    static constexpr std::array<std::pair<BackendChoice, std::string_view>, 3> items{
        {{BackendChoice::AUTO, "auto"}, {BackendChoice::CPU, "cpu"}, {BackendChoice::CUDA, "cuda"}}};
};
template <>
struct ChoiceNames<GradDtype> {
    static constexpr std::array<std::pair<GradDtype, std::string_view>, 2> items{
        {{GradDtype::BF16, "bf16"}, {GradDtype::FP32, "fp32"}}};
};
template <>
struct ChoiceNames<Positions> {
    static constexpr std::array<std::pair<Positions, std::string_view>, 2> items{
        {{Positions::LEARNED, "learned"}, {Positions::ROPE, "rope"}}};
};
template <>
struct ChoiceNames<NormKind> {
    static constexpr std::array<std::pair<NormKind, std::string_view>, 2> items{
        {{NormKind::LAYERNORM, "layernorm"}, {NormKind::RMSNORM, "rmsnorm"}}};
};
template <>
struct ChoiceNames<QkNorm> {
    static constexpr std::array<std::pair<QkNorm, std::string_view>, 3> items{
        {{QkNorm::NONE, "none"}, {QkNorm::FULL, "full"}, {QkNorm::PER_HEAD, "per_head"}}};
};
template <>
struct ChoiceNames<SharedExpertGate> {
    static constexpr std::array<std::pair<SharedExpertGate, std::string_view>, 2> items{
        {{SharedExpertGate::NONE, "none"}, {SharedExpertGate::SIGMOID, "sigmoid"}}};
};
template <>
struct ChoiceNames<OptimizerType> {
    static constexpr std::array<std::pair<OptimizerType, std::string_view>, 8> items{
        {{OptimizerType::SKEWADAM, "skewadam"},
         {OptimizerType::ADAMW, "adamw"},
         {OptimizerType::LION, "lion"},
         {OptimizerType::MUON, "muon"},
         {OptimizerType::MUON_KJ, "muon-kj"},
         {OptimizerType::ADAFACTOR, "adafactor"},
         {OptimizerType::GALORE, "galore"},
         {OptimizerType::GALORE_PAPER, "galore-paper"}}};
};

/// The config's name of `e` (e.g. "deferred").
template <typename E>
constexpr std::string_view choice_name(E e) {
    for (const auto& [v, n] : ChoiceNames<E>::items)
        if (v == e) return n;
    return "?";
}

/// The value named `name`, or nullopt for a name the table lacks.
template <typename E>
std::optional<E> parse_choice(std::string_view name) {
    for (const auto& [v, n] : ChoiceNames<E>::items)
        if (n == name) return v;
    return std::nullopt;
}

/// Every name of the table, in its order (the schema's allowed values).
template <typename E>
std::vector<std::string> choice_names() {
    std::vector<std::string> out;
    for (const auto& [v, n] : ChoiceNames<E>::items) out.emplace_back(n);
    return out;
}

/// "a, b or c": the names for a message.
template <typename E>
std::string choice_list() {
    std::string out;
    const auto& items = ChoiceNames<E>::items;
    for (size_t i = 0; i < items.size(); ++i)
        out += std::string(i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + std::string(items[i].second);
    return out;
}

/// The enums that have a name table.
template <typename E>
concept ConfigChoice = requires {
    ChoiceNames<E>::items;
};

}  // namespace skew

#ifndef __CUDACC__  // fmt is not for nvcc; the CUDA sources print no choice
#include <fmt/format.h>

/// A choice formats as its config name, so messages spell it as the config does.
template <skew::ConfigChoice E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
    template <typename Ctx>
    auto format(E e, Ctx& ctx) const {
        return fmt::formatter<std::string_view>::format(skew::choice_name(e), ctx);
    }
};
#endif
