// train.init_from (`skew train CONFIG --init-from DIR`; docs/huggingface.md, "Training from an
// import"): every optimizer of the run starts from the weights of a folder `skew import` wrote
// instead of the initializer, with fresh optimizer state.
#pragma once
#include <string>

#include "engine/arena.h"
#include "engine/config.h"
#include "kernels/backend.h"

namespace skew {

/// Refuse the folder cfg.train.init_from names before a run starts: it must hold config.yaml and
/// model.safetensors, config.yaml's model section must equal cfg's key for key (the first key that
/// differs, in schema order, is named with both values), and parallel.expert must be 1 (the folder
/// holds whole expert banks). Throws skew::Error naming cfg.source, the folder and the key.
void check_init_from(const Config& cfg);

/// Load DIR/model.safetensors into the arena's weights (every parameter, named by the table, with
/// its shape and dtype; no other tensor), refusing a non-finite value by tensor and element.
/// Throws skew::Error naming the file. `backend` copies into a device arena (nullptr: host).
void load_init_weights(const std::string& dir, const Arena& arena, Backend* backend);

}  // namespace skew
