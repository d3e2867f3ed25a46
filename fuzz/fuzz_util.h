// Helpers shared by the libFuzzer targets: the readers under test take paths, so each input is
// written to a per-process scratch folder first.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace skew::fuzz {

/// A scratch folder for this fuzzing process (removed by the OS's tmp cleaning, not by us: libFuzzer
/// exits through _exit on a finding and the folder then holds the input's files).
inline const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path dir = [] {
        std::filesystem::path d = std::filesystem::temp_directory_path() / ("skew-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

/// Write bytes to scratch_dir()/name and return the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
    const std::string path = (scratch_dir() / name).string();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace skew::fuzz
