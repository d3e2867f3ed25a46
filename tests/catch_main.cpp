// The one Catch2 main shared by every test executable. Catch2 exits with the number of failed
// assertions; ctest reads exit code 77 as "skipped" (tests/skip.h), so a count of 77 (or any count
// above 255, which wraps) must not reach it: every failure exits 1.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
    const int failures = Catch::Session().run(argc, argv);
    return failures == 0 ? 0 : 1;
}
