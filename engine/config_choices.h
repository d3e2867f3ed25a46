// The config's choices as types: each key whose value is one of a few names (model.positions,
// model.norm, model.qk_norm, model.shared_expert_gate, train.expert_grads, train.idle_experts,
// train.recompute, runtime.backend, runtime.grad_dtype, an optimizer's type, its tiers' momentum and
// second_moment, its rounding and weight_decay_mode) is parsed once into an enum. One name table
// per enum (engine/choice_names.h) serves the schema's allowed values, the parser, the resolved
// config and every message (docs/config-reference.md: `skew config --reference`).
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "engine/choice_names.h"

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
/// An optimizer's `type`: its algorithm (docs/optimizers.md). muon and muon-kj share the Muon
/// step and differ in settings only.
enum class OptimizerType : uint8_t { SKEWADAM, ADAMW, LION, MUON, MUON_KJ, ADAFACTOR, GALORE, GALORE_PAPER };
/// Whether an optimizer of type `t` takes the Muon step (muon, muon-kj).
constexpr bool uses_muon_step(OptimizerType t) { return t == OptimizerType::MUON || t == OptimizerType::MUON_KJ; }
/// tiers.<tier>.momentum: a tier's momentum, an fp32 buffer or none (docs/design.md, "Optimizers").
enum class MomentumKind : uint8_t { NONE, FP32 };
/// tiers.<tier>.second_moment: none, full, or factored into row and column statistics.
enum class SecondMomentKind : uint8_t { NONE, FULL, FACTORED };
/// An optimizer's `rounding`: how the fp32 update is rounded into the bf16 weights.
enum class Rounding : uint8_t { STOCHASTIC, DITHERED, NEAREST };
/// An optimizer's `weight_decay_mode`: decay fused into the update, or premultiplied in bf16.
enum class WeightDecayMode : uint8_t { FUSED, BF16_PREMULTIPLY };

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

template <>
struct ChoiceNames<MomentumKind> {
    static constexpr std::array<std::pair<MomentumKind, std::string_view>, 2> items{
        {{MomentumKind::NONE, "none"}, {MomentumKind::FP32, "fp32"}}};
};
template <>
struct ChoiceNames<SecondMomentKind> {
    static constexpr std::array<std::pair<SecondMomentKind, std::string_view>, 3> items{
        {{SecondMomentKind::NONE, "none"}, {SecondMomentKind::FULL, "full"}, {SecondMomentKind::FACTORED, "factored"}}};
};
template <>
struct ChoiceNames<Rounding> {
    static constexpr std::array<std::pair<Rounding, std::string_view>, 3> items{
        {{Rounding::STOCHASTIC, "stochastic"}, {Rounding::DITHERED, "dithered"}, {Rounding::NEAREST, "nearest"}}};
};
template <>
struct ChoiceNames<WeightDecayMode> {
    static constexpr std::array<std::pair<WeightDecayMode, std::string_view>, 2> items{
        {{WeightDecayMode::FUSED, "fused"}, {WeightDecayMode::BF16_PREMULTIPLY, "bf16_premultiply"}}};
};

}  // namespace skew
