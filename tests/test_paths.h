// Where a test finds the `skew` program and the repository's files (configs/, tests/fixtures/):
// from the environment first, so that binaries built on one machine and carried to another
// (bench/gpu_check.sh sets both variables) find them there; the build machine's paths last.
// SKEW_BINARY and SKEW_SOURCE_DIR are also compile definitions of every test (tests/CMakeLists.txt).
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace skew::test {

/// The `skew` program the tests run: $SKEW_BINARY when set; else `skew` beside this test
/// executable when that file exists (a carry's bin/ folder); else the build's (SKEW_BINARY).
inline const std::string& skew_binary() {
    static const std::string path = [] {
        if (const char* e = std::getenv("SKEW_BINARY"); e && *e) return std::string(e);
        std::error_code ec;
        const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (!ec && std::filesystem::is_regular_file(self.parent_path() / "skew", ec))
            return (self.parent_path() / "skew").string();
        return std::string(SKEW_BINARY);
    }();
    return path;
}

/// The repository root the tests read configs and fixtures from: $SKEW_SOURCE_DIR when set; else
/// the build's source folder (SKEW_SOURCE_DIR) when it exists here; else the current directory
/// (bench/gpu_check.sh runs from the repository root).
inline const std::string& source_dir() {
    static const std::string path = [] {
        if (const char* e = std::getenv("SKEW_SOURCE_DIR"); e && *e) return std::string(e);
        std::error_code ec;
        if (std::filesystem::is_directory(std::string(SKEW_SOURCE_DIR) + "/configs", ec))
            return std::string(SKEW_SOURCE_DIR);
        return std::filesystem::current_path(ec).string();
    }();
    return path;
}

/// source_dir() + "/" + relative, e.g. source_path("configs/tiny.yaml").
inline std::string source_path(const std::string& relative) { return source_dir() + "/" + relative; }

}  // namespace skew::test
