// libFuzzer target: the YAML config loader and its schema (load_config_text). Any input either
// loads or is refused with a skew::Error; a resolved config loads again to the same config.
#include <cstdint>
#include <cstdlib>

#include "engine/config.h"
#include "engine/error.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(skew::fuzz::as_text(data, size));
    try {
        const skew::Config cfg = skew::load_config_text(text, "fuzz.yaml");
        // The resolved YAML of an accepted config is itself a config that resolves the same way.
        const skew::Config again = skew::load_config_text(cfg.resolved_yaml, "resolved.yaml");
        if (again.resolved_yaml != cfg.resolved_yaml) std::abort();
    } catch (const skew::Error&) {}
    return 0;
}
