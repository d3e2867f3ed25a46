// libFuzzer target: a data folder's manifest.json as training reads it (token_split_check_manifest)
// and as --resume compares it with the run's copy (manifest_first_difference).
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "data/batch_stream.h"
#include "engine/error.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string dir = (skew::fuzz::scratch_dir() / "manifest").string();
    std::filesystem::create_directories(dir);
    skew::fuzz::write_scratch("manifest/manifest.json", data, size);
    try {
        skew::data::token_split_check_manifest(dir, "eot", 50257, 0.05);
    } catch (const skew::Error&) {}
    const std::string text(skew::fuzz::as_text(data, size));
    try {
        // A manifest is never different from itself.
        if (!skew::data::manifest_first_difference(text, text).empty()) std::abort();
    } catch (const skew::Error&) {}
    return 0;
}
