// libFuzzer target: the checkpoint's trainer_state.json (strict JSON, then trainer_state_from_json).
// An accepted state written back and read again is the same state.
#include <cstdint>
#include <cstdlib>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const nlohmann::json j =
            skew::json_parse_strict(skew::fuzz::as_text(data, size), skew::CheckpointFolder::TRAINER_STATE_FILE);
        const skew::TrainerState s = skew::trainer_state_from_json(j, skew::CheckpointFolder::TRAINER_STATE_FILE);
        const nlohmann::json out = skew::trainer_state_to_json(s);
        const skew::TrainerState back = skew::trainer_state_from_json(out, "written");
        if (skew::trainer_state_to_json(back) != out) std::abort();
    } catch (const skew::Error&) {}
    return 0;
}
