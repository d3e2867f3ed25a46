// NCCL loaded at run time (dist/nccl_library.h): a CUDA build links no NCCL; the loader finds the
// library on demand and, when it cannot, says which files it tried and why. No GPU needed.
#include <catch2/catch.hpp>

#if defined(SKEW_HAVE_NCCL)
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dist/nccl_library.h"
#include "tests/skip.h"
#include "tests/temp_dir.h"

TEST_CASE("NCCL loads on demand from the loader's search path or the build's toolkit, version 2.18 or newer",
          "[dist][nccl]") {
    const std::vector<std::string> candidates = skew::nccl_library_candidates();
    REQUIRE(!candidates.empty());
    CHECK(std::find(candidates.begin(), candidates.end(), "libnccl.so.2") != candidates.end());
    if (!skew::nccl_available()) SKEW_SKIP_TEST("no NCCL library on this machine to load");
    CHECK(skew::nccl_load_error(candidates).empty());
    const skew::NcclApi& api = skew::nccl_api();
    CHECK(api.version >= skew::kNcclMinVersion);
    REQUIRE(api.get_error_string != nullptr);
    CHECK(std::string(api.get_error_string(ncclInvalidArgument)).size() > 3);
}

TEST_CASE("NCCL that cannot be loaded is one error naming every file tried and the loader's reason", "[dist][nccl]") {
    const std::string missing = (skew::test::test_temp_root() / "no-such-dir" / "libnccl.so.2").string();
    const std::string fake = (skew::test::test_temp_root() / "nccl-fake.so").string();
    std::filesystem::create_directories(skew::test::test_temp_root());
    std::ofstream(fake) << "not an ELF file\n";
    const std::string err = skew::nccl_load_error({missing, fake});
    INFO(err);
    CHECK(err.find("NCCL could not be loaded") != std::string::npos);
    CHECK(err.find(missing + " (") != std::string::npos);
    CHECK(err.find(fake + " (") != std::string::npos);
    CHECK(err.find("SKEW_NCCL_LIBRARY") != std::string::npos);  // the hint names the variable
    CHECK(err.find('\n') == err.find("\n--> HINT:"));           // one line, then the hint
}
#endif
