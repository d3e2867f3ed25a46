// The one op-test harness (docs/architecture.md, "Tests"): seeded random inputs,
// bf16 helpers, central finite-difference gradients with a stated tolerance, and the normalized
// mean squared error used to compare a backend's output with the CPU reference (GPU tests reuse it).
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"
#include "kernels/backend.h"
#include "kernels/common/bf16.h"

namespace skew::test {

/// The largest value of a reduction that propagates NaN: max_nan(a, b) is NaN when either is NaN
/// (std::max(m, NaN) keeps m, so a partly-NaN output would look fine).
inline double max_nan(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b); }

/// n floats uniform in [lo, hi) from a seeded generator (same numbers on every machine).
inline std::vector<float> random_vector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = lo + (hi - lo) * float(gen() >> 8) * (1.0f / 16777216.0f);
    return v;
}

/// n standard normal floats (Box-Muller on the seeded generator).
inline std::vector<float> random_normal(int64_t n, uint32_t seed, float stddev = 1.0f) {
    std::mt19937 gen(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) {
        const double u1 = (double(gen() >> 8) + 1.0) / 16777216.0, u2 = double(gen() >> 8) / 16777216.0;
        x = float(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    return v;
}

/// Round every value to bf16 (RNE), kept as fp32: inputs exactly representable in both dtypes.
inline std::vector<float> round_to_bf16(std::vector<float> v) {
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
    return out;
}

inline std::vector<float> to_f32(const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
    return out;
}

/// Σ a_i·w_i in double: the scalar "loss" whose gradient w.r.t. an op's output is w.
inline double dot(const std::vector<float>& a, const std::vector<float>& w) {
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(w[i]);
    return s;
}

/// Central finite differences of loss() w.r.t. every element of x (x is perturbed in place and
/// restored). The step actually taken (fl(x ± eps) - x) is used, so fp32 rounding of x ± eps does
/// not bias the quotient.
inline std::vector<double> fd_gradient(std::vector<float>& x, const std::function<double()>& loss, float eps) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const float x0 = x[i];
        const float xp = x0 + eps, xm = x0 - eps;
        x[i] = xp;
        const double lp = loss();
        x[i] = xm;
        const double lm = loss();
        x[i] = x0;
        g[i] = (lp - lm) / (double(xp) - double(xm));
    }
    return g;
}

/// Require |analytic_i - fd_i| <= atol + rtol·|fd_i| for every i; on failure report the worst
/// element. Returns the largest |analytic - fd| (for the test log).
template <class A>
double check_gradient(const std::string& name, const std::vector<A>& analytic, const std::vector<double>& fd,
                      double atol, double rtol) {
    REQUIRE(analytic.size() == fd.size());
    double worst_excess = -1.0, worst_err = 0.0;
    size_t worst = 0;
    bool ok = true;
    for (size_t i = 0; i < fd.size(); ++i) {
        const double err = std::fabs(double(analytic[i]) - fd[i]);
        const double excess = err - (atol + rtol * std::fabs(fd[i]));
        if (!(excess <= 0.0)) ok = false;
        if (excess > worst_excess || std::isnan(err)) {
            worst_excess = excess;
            worst = i;
        }
        worst_err = max_nan(worst_err, err);
    }
    INFO(name << ": worst element " << worst << " analytic " << double(analytic[worst]) << " vs finite difference "
              << fd[worst] << " (atol " << atol << ", rtol " << rtol << ")");
    CHECK(ok);
    return worst_err;
}

/// max_i |a_i - b_i| in double; NaN when any element of either side is NaN.
template <class A, class B>
double max_abs_diff(std::span<const A> a, std::span<const B> b) {
    REQUIRE(a.size() == b.size());
    double m = 0.0;
    for (size_t i = 0; i < a.size(); ++i) m = max_nan(m, std::fabs(double(a[i]) - double(b[i])));
    return m;
}

/// Number of elements that are NaN or infinite.
template <class T>
int64_t count_nonfinite(std::span<const T> v) {
    int64_t n = 0;
    for (const auto& x : v) n += std::isfinite(double(x)) ? 0 : 1;
    return n;
}

/// The sums behind a normalized comparison of `out` against the reference `ref`: num = Σ(out -
/// ref)^2, den = Σ ref^2 (both NaN as soon as one element is NaN) and the count n.
struct ErrorSums {
    double num = 0.0, den = 0.0;
    int64_t n = 0;
};

inline ErrorSums error_sums(std::span<const float> out, std::span<const float> ref) {
    REQUIRE(out.size() == ref.size());
    ErrorSums s;
    s.n = int64_t(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = double(out[i]) - double(ref[i]);
        s.num += d * d;
        s.den += double(ref[i]) * double(ref[i]);
    }
    return s;
}

/// Normalized mean squared error Σ(out - ref)^2 / Σ ref^2: how far a backend's output is from the
/// reference, independent of scale. 0 when both are exactly zero, inf when only the reference is,
/// NaN when any element of either is NaN.
inline double nmse(std::span<const float> out, std::span<const float> ref) {
    const ErrorSums s = error_sums(out, ref);
    if (std::isnan(s.num) || std::isnan(s.den)) return NAN;
    if (s.den == 0.0) return s.num == 0.0 ? 0.0 : INFINITY;
    return s.num / s.den;
}

/// The absolute floor of require_nmse unless a test states its own: 1e-6, i.e. an element-wise
/// RMS difference of one millionth always passes. It matters only where the reference is (close to)
/// zero, e.g. the exactly-zero dq/dk of a single-position attention, where a backend leaves values
/// of rounding size; next to Σ ref^2 of values ~1 its n·atol^2 is 1e-12 of the sum.
inline constexpr double DEFAULT_ATOL = 1e-6;

/// Require every element of `out` to be finite and Σ(out - ref)^2 <= limit·Σ ref^2 + n·atol^2
/// (a normalized MSE of at most `limit`, with an absolute floor so that a zero reference does
/// not turn rounding noise into an infinite error). The reference must be finite too.
inline void require_nmse(const std::string& name, std::span<const float> out, std::span<const float> ref, double limit,
                         double atol = DEFAULT_ATOL) {
    const ErrorSums s = error_sums(out, ref);
    const int64_t bad_out = count_nonfinite(out), bad_ref = count_nonfinite(ref);
    const double bound = limit * s.den + double(s.n) * atol * atol;
    INFO(name << ": normalized MSE " << (s.den > 0 ? s.num / s.den : s.num) << " (limit " << limit << ", atol " << atol
              << "; sum sq err " << s.num << " vs bound " << bound << "; non-finite: " << bad_out << " in the output, "
              << bad_ref << " in the reference)");
    CHECK(bad_out == 0);
    CHECK(bad_ref == 0);
    CHECK(s.num <= bound);
}

/// The backends every cross-backend test runs (the CPU reference first; GPU tests add theirs).
inline std::unique_ptr<Backend> cpu_backend() { return make_cpu_backend(); }

}  // namespace skew::test
