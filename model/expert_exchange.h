// Expert parallelism's exchange of a MoE block's rows (model/expert_exchange.cpp): used by the
// block's forward and backward (model/model.cpp).
#pragma once
#include <cstdint>

#include "model/model.h"

namespace skew {

/// Plan microbatch's exchange of MoE block `bi`'s rows from its routing (act.expert_offsets over
/// all experts, this rank's tokens): the per-expert row counts shared with every rank of the group,
/// the received rows laid out in expert order (within an expert by source rank) and that
/// permutation both ways and the local expert offsets uploaded; host state in m.ep. Throws
/// skew::Error when no expert-parallel group is attached or the counts exceed the plan.
void ep_plan_exchange(Model& m, int64_t bi);

/// Rows (NK, C) bf16 of this rank's token copies in global expert order -> the owners'
/// expert-order rows `dst` (R, C): the all-to-all into act.ep_recv, then the permutation.
void ep_to_owners(Model& m, const bf16* rows, bf16* dst, int64_t C);

/// The reverse of ep_to_owners: expert-order rows `src` (R, C) -> each source rank's rows (NK, C).
void ep_from_owners(Model& m, const bf16* src, bf16* rows, int64_t C);

}  // namespace skew
