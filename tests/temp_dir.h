// The test process's own temporary folder: made by mkdtemp under the system's temporary directory
// (a unique name, so two checkouts or two concurrent ctest runs never share a path) and removed with
// everything in it when the process exits. Every test writes its scratch files below it.
#pragma once
#include <system_error>

#include <filesystem>
#include <stdlib.h>
#include <string>

#include "engine/error.h"

namespace skew::test {

struct TempRoot {
    std::filesystem::path path;
    TempRoot() {
        std::string pattern = (std::filesystem::temp_directory_path() / "skew-test-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) fail("tests: mkdtemp({}) failed", pattern);
        path = pattern;
    }
    ~TempRoot() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

/// The process's temporary folder (created on first use, removed at exit).
inline const std::filesystem::path& test_temp_root() {
    static const TempRoot root;
    return root.path;
}

}  // namespace skew::test
