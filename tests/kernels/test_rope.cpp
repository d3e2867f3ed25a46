// Properties of the rotary position embedding (kernels/cpu/rope.cpp, kernels/common/rope_math.h)
// beyond its op-table rows (tests/backend_ops: the double evaluation, the inverse as the backward by
// finite differences, an odd head_dim refused): the inverse undoes the rotation, norms are kept,
// and positions offset by pos0 equal the rows of a longer sequence, as a KV cache uses them.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("rope's inverse undoes it and every lane pair keeps its norm") {
    const int64_t B = 1, T = 9, H = 2, d = 16;
    auto x = random_vector(B * T * H * d, 3);
    const auto x0 = x;
    cpu::rope(x.data(), B, T, H, d, 0, 1e4f, false);
    for (int64_t r = 0; r < B * T * H; ++r)
        for (int64_t i = 0; i < d / 2; ++i) {
            const size_t lo = size_t(r * d + i), hi = lo + size_t(d / 2);
            CHECK(std::hypot(x[lo], x[hi]) == Approx(std::hypot(x0[lo], x0[hi])).epsilon(1e-6));
        }
    cpu::rope(x.data(), B, T, H, d, 0, 1e4f, true);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == Approx(x0[i]).margin(1e-6));
}

TEST_CASE("rope at pos0 equals the rows of a longer sequence at those positions") {
    const int64_t H = 2, d = 32, T = 12, p = 7;
    auto full = random_vector(T * H * d, 8);
    std::vector<float> tail(full.begin() + p * H * d, full.end());
    cpu::rope(full.data(), 1, T, H, d, 0, 1e4f, false);
    cpu::rope(tail.data(), 1, T - p, H, d, p, 1e4f, false);
    for (size_t i = 0; i < tail.size(); ++i) REQUIRE(tail[i] == full[size_t(p * H * d) + i]);
}
