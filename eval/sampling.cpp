// Token choice for generation: softmax with temperature, top-k and top-p cuts, an inverse-CDF draw
// from a counter-based Philox uniform (kernels/common/philox.h), so sampling is reproducible.
#include "eval/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/error.h"
#include "kernels/common/philox.h"

namespace skew::eval {
namespace {
constexpr uint32_t PHILOX_STREAM_SAMPLING = 5;  // next after kernels/common/philox.h's streams
}

std::vector<double> sampling_distribution(std::span<const float> logits, int64_t V, const SamplingOptions& o) {
    if (V < 1 || int64_t(logits.size()) < V) fail("sampling: {} logits for a vocabulary of {}", logits.size(), V);
    if (o.temperature < 0 || !std::isfinite(o.temperature)) fail("--temperature {}: must be >= 0", o.temperature);
    if (o.top_k < 0) fail("--top-k {}: must be >= 0", o.top_k);
    if (!(o.top_p > 0 && o.top_p <= 1)) fail("--top-p {}: must be in (0, 1]", o.top_p);
    std::vector<double> p(size_t(V), 0.0);
    if (o.temperature == 0.0 || o.top_k == 1) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; ++i)
            if (logits[size_t(i)] > logits[size_t(best)]) best = i;
        p[size_t(best)] = 1.0;
        return p;
    }
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(logits[size_t(i)]));
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += p[size_t(i)] = std::exp((double(logits[size_t(i)]) - mx) / o.temperature);
    for (double& x : p) x /= sum;
    if ((o.top_k > 0 && o.top_k < V) || o.top_p < 1.0) {
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
        size_t keep = size_t(o.top_k > 0 ? std::min<int64_t>(o.top_k, V) : V);
        if (o.top_p < 1.0) {
            double cum = 0.0;
            size_t n = 0;
            while (n < keep) {
                cum += p[size_t(order[n])];
                ++n;
                if (cum >= o.top_p) break;
            }
            keep = n;
        }
        std::vector<double> q(size_t(V), 0.0);
        double s = 0.0;
        for (size_t i = 0; i < keep; ++i) s += q[size_t(order[i])] = p[size_t(order[i])];
        for (double& x : q) x /= s;
        p.swap(q);
    }
    return p;
}

double sampling_uniform(uint64_t seed, uint32_t sample, uint64_t position) {
    const PhiloxKey key{seed, PHILOX_STREAM_SAMPLING};
    const Philox4 r = philox_block(key, sample, 0, position);
    const uint64_t bits = (uint64_t(r.v[0]) << 21) ^ uint64_t(r.v[1] >> 11);  // 53 bits
    return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

int32_t sample_token(std::span<const float> logits, int64_t V, const SamplingOptions& o, uint32_t sample,
                     uint64_t position) {
    const std::vector<double> p = sampling_distribution(logits, V, o);
    const double u = sampling_uniform(o.seed, sample, position);
    double cum = 0.0;
    int32_t last = 0;
    for (int64_t i = 0; i < V; ++i) {
        if (p[size_t(i)] <= 0.0) continue;
        last = int32_t(i);
        cum += p[size_t(i)];
        if (u < cum) return int32_t(i);
    }
    return last;  // round-off: u beyond the last cumulative sum
}

}  // namespace skew::eval
