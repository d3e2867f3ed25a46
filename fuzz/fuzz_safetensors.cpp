// libFuzzer target: the safetensors reader of checkpoints (read_safetensors_header, then
// read_safetensors_into with tensors of the header's own shapes). Any file is either read or
// refused with a skew::Error naming it.
#include <cstdint>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "engine/error.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = skew::fuzz::write_scratch(skew::CheckpointFolder::WEIGHTS_FILE, data, size);
    try {
        const skew::SafetensorsHeader h = skew::read_safetensors_header(path);
        std::vector<std::vector<char>> storage;
        std::vector<skew::NamedTensor> tensors;
        for (const auto& e : h.tensors) {
            if (!e.dtype_known) continue;  // read_safetensors_into refuses the file for it
            skew::NamedTensor t{e.name, e.dtype, e.shape, nullptr, skew::ArenaDevice::HOST};
            storage.emplace_back(size_t(t.bytes()));
            t.data = storage.back().data();
            tensors.push_back(t);
        }
        skew::read_safetensors_into(path, tensors);
    } catch (const skew::Error&) {}
    return 0;
}
