// The multi-versioned CPU loops (SKEW_CPU_CLONES, kernels/cpu/cpu_ops.h) give the same bits at
// every vector width: this program is built three times from the real sources (lm_head.cpp,
// swiglu.cpp, elementwise.cpp) with the clones off and -mavx512f, -mavx2 or baseline x86-64, and prints one FNV-1a
// hash per output; check_clone_bits.sh requires the three to print the same line. Inputs: random
// finite values in a wide range, +-inf, rows and lengths with vector tails (no NaN: its sign may
// differ, see cpu_ops.h).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

using namespace skew;

namespace {

uint32_t lcg(uint32_t& s) { return s = s * 1664525u + 1013904223u; }
float uniform(uint32_t& s, float lo, float hi) { return lo + (hi - lo) * float(lcg(s) >> 8) * (1.0f / 16777216.0f); }

void print_hash(const char* name, const void* p, size_t bytes) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
    std::printf("%s %016llx\n", name, static_cast<unsigned long long>(h));
}

}  // namespace

int main() {
    uint32_t s = 1;
    // the LM head's tiles: 37 rows of 253 real columns in a 256-column tile
    const int64_t rows = 37, ld = 256, cols = 253;
    std::vector<float> t(static_cast<size_t>(rows * ld));
    for (float& x : t) x = uniform(s, -30.0f, 30.0f);
    std::vector<float> gmax(static_cast<size_t>(rows), -INFINITY);
    std::vector<double> gsum(static_cast<size_t>(rows), 0.0);
    cpu::lm_head_tile_softmax_stats(t.data(), ld, rows, cols, gmax.data(), gsum.data());
    for (float& x : t) x -= 3.0f;  // a second tile whose max is lower: the rescaling path
    cpu::lm_head_tile_softmax_stats(t.data(), ld, rows, cols, gmax.data(), gsum.data());
    print_hash("softmax_stats_max", gmax.data(), gmax.size() * sizeof(float));
    print_hash("softmax_stats_sum", gsum.data(), gsum.size() * sizeof(double));
    std::vector<float> inv(static_cast<size_t>(rows));
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        inv[size_t(r)] = float(1.0 / gsum[size_t(r)]);
        targets[size_t(r)] = int32_t(lcg(s) % 300);  // some outside the tile
    }
    cpu::lm_head_tile_dlogits(t.data(), ld, rows, 0, ld, cols, gmax.data(), inv.data(), targets.data(), 0.25f);
    print_hash("dlogits", t.data(), t.size() * sizeof(float));

    // SwiGLU, bf16 and fp32, with +-inf among the gates and a length of 16 k + 13
    const int64_t n = 16 * 70 + 13;
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        a[size_t(i)] = uniform(s, -40.0f, 40.0f);
        b[size_t(i)] = uniform(s, -4.0f, 4.0f);
        g[size_t(i)] = uniform(s, -1.0f, 1.0f);
    }
    a[7] = INFINITY;
    a[8] = -INFINITY;
    const size_t un = static_cast<size_t>(n);
    std::vector<bf16> ab(un), bb(un), gb(un), hb(un), dab(un), dbb(un);
    for (int64_t i = 0; i < n; ++i) {
        ab[size_t(i)] = f32_to_bf16(a[size_t(i)]);
        bb[size_t(i)] = f32_to_bf16(b[size_t(i)]);
        gb[size_t(i)] = f32_to_bf16(g[size_t(i)]);
    }
    std::vector<float> h(un), da(un), db(un);
    cpu::swiglu_forward(hb.data(), ab.data(), bb.data(), n);
    cpu::swiglu_backward(dab.data(), dbb.data(), gb.data(), ab.data(), bb.data(), n);
    cpu::swiglu_forward(h.data(), a.data(), b.data(), n);
    cpu::swiglu_backward(da.data(), db.data(), g.data(), a.data(), b.data(), n);
    print_hash("swiglu_forward_bf16", hb.data(), hb.size() * sizeof(bf16));
    print_hash("swiglu_backward_bf16", dab.data(), dab.size() * sizeof(bf16));
    print_hash("swiglu_backward_bf16_db", dbb.data(), dbb.size() * sizeof(bf16));
    print_hash("swiglu_forward_f32", h.data(), h.size() * sizeof(float));
    print_hash("swiglu_backward_f32", da.data(), da.size() * sizeof(float));
    print_hash("swiglu_backward_f32_db", db.data(), db.size() * sizeof(float));

    // the element-wise ops (elementwise.cpp): residual, accumulate (every type pair), scale, narrowing
    std::vector<bf16> rb(un);
    std::vector<float> rf(un);
    cpu::residual_forward(rb.data(), ab.data(), bb.data(), n);
    cpu::residual_forward(rf.data(), a.data(), b.data(), n);
    cpu::accumulate(TensorRef(rb.data()), ConstTensorRef(gb.data()), n);
    cpu::accumulate(TensorRef(rb.data()), ConstTensorRef(g.data()), n);
    cpu::accumulate(TensorRef(rf.data()), ConstTensorRef(gb.data()), n);
    cpu::accumulate(TensorRef(rf.data()), ConstTensorRef(g.data()), n);
    cpu::scale(TensorRef(rb.data()), 0.37f, n);
    cpu::scale(TensorRef(rf.data()), 0.37f, n);
    print_hash("elementwise_bf16", rb.data(), rb.size() * sizeof(bf16));
    cpu::convert(TensorRef(rb.data()), ConstTensorRef(rf.data()), n);  // narrowing
    print_hash("convert_f32_to_bf16", rb.data(), rb.size() * sizeof(bf16));
    print_hash("elementwise_f32", rf.data(), rf.size() * sizeof(float));
    return 0;
}
