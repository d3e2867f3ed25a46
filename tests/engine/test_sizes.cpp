// Sizes on the command line: GiB, GB and MiB, with the unit said back.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/sizes.h"

using namespace skew;

TEST_CASE("budget sizes accept GiB, GB and MiB and say which they used") {
    CHECK(parse_size("40GiB", "--budget").bytes == 40LL << 30);
    CHECK(parse_size("40GiB", "--budget").unit == "GiB (2^30 bytes)");
    CHECK(parse_size("40GB", "--budget").bytes == 40000000000LL);
    CHECK(parse_size("40 gb", "--budget").unit == "GB (10^9 bytes)");
    CHECK(parse_size("512MiB", "--budget").bytes == 512LL << 20);
    CHECK(parse_size("1.5TiB", "--budget").bytes == 3LL << 39);
    CHECK_THROWS_WITH(parse_size("40", "--budget"), Catch::Contains("has no unit"));
    CHECK_THROWS_WITH(parse_size("40XB", "--budget"), Catch::Contains("unknown unit 'XB'"));
    CHECK_THROWS_WITH(parse_size("-1GiB", "--budget"), Catch::Contains("not a size"));
    CHECK_THROWS_WITH(parse_size("lots", "--budget"), Catch::Contains("--budget"));
}
