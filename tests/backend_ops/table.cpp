// The op table's tensor builders, tolerances and the list of every case (tests/backend_ops/op_table.h).
#include <cmath>
#include <random>

#include "engine/error.h"
#include "kernels/common/bf16.h"
#include "tests/backend_ops/op_table.h"

namespace skew::ops {

int64_t dt_bytes(DT t) { return t == DT::BF16 ? 2 : (t == DT::I64 || t == DT::F64) ? 8 : 4; }

const char* dt_name(DT t) {
    switch (t) {
        case DT::BF16: return "bf16";
        case DT::F32: return "f32";
        case DT::I32: return "i32";
        case DT::I64: return "i64";
        case DT::F64: return "f64";
    }
    return "?";
}

ScalarType scalar(DT t) { return t == DT::BF16 ? ScalarType::BF16 : ScalarType::F32; }

BackendTraits traits_of(const Backend& be) { return BackendTraits{be.name(), be.runs_cuda()}; }

BackendTraits traits_named(const std::string& name) { return BackendTraits{name, name == "cuda"}; }

double round_to(DT dt, double x) {
    if (dt == DT::BF16) return double(bf16_to_f32(f32_to_bf16(float(x))));
    if (dt == DT::F32) return double(float(x));
    return x;
}

namespace {
// Uniform [0, 1) with 24 bits from a 32-bit Mersenne Twister draw: the same numbers on every machine.
double unit(std::mt19937& g) { return double(g() >> 8) * (1.0 / 16777216.0); }
}  // namespace

namespace {
Tensor lazy_tensor(std::string name, DT dt, int64_t n, uint32_t seed) {
    Tensor t{std::move(name), dt, {}, false, false, {}};
    t.lazy = n;
    t.seed = seed;
    return t;
}
}  // namespace

Tensor input(std::string name, DT dt, int64_t n, uint32_t seed, double lo, double hi) {
    if (n > kLazyElements) return lazy_tensor(std::move(name), dt, n, seed + 1);
    std::mt19937 g(seed);
    Tensor t{std::move(name), dt, std::vector<double>(size_t(n)), false, false, {}};
    for (auto& x : t.v) x = round_to(dt, lo + (hi - lo) * unit(g));
    return t;
}

Tensor input_normal(std::string name, DT dt, int64_t n, uint32_t seed, double stddev) {
    if (n > kLazyElements) return lazy_tensor(std::move(name), dt, n, seed + 1);
    std::mt19937 g(seed);
    Tensor t{std::move(name), dt, std::vector<double>(size_t(n)), false, false, {}};
    for (auto& x : t.v) {
        const double u1 = unit(g) + 1.0 / 16777216.0, u2 = unit(g);
        x = round_to(dt, stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    return t;
}

Tensor input_values(std::string name, DT dt, std::vector<double> v) {
    for (auto& x : v) x = round_to(dt, x);
    return Tensor{std::move(name), dt, std::move(v), false, false, {}};
}

Tensor output(std::string name, DT dt, int64_t n, Tol tol) {
    const double init = (dt == DT::I32 || dt == DT::I64) ? -7.0 : NAN;  // poison: unwritten elements fail
    if (n > kLazyElements) {
        Tensor t = lazy_tensor(std::move(name), dt, n, 0);
        t.out = true;
        return t;
    }
    return Tensor{std::move(name), dt, std::vector<double>(size_t(n), round_to(dt, init)), true, false, std::move(tol)};
}

Tensor output_values(std::string name, DT dt, std::vector<double> v, Tol tol) {
    Tensor t = input_values(std::move(name), dt, std::move(v));
    t.out = true;
    t.tol = std::move(tol);
    return t;
}

Tensor output_random(std::string name, DT dt, int64_t n, uint32_t seed, Tol tol) {
    Tensor t = input(std::move(name), dt, n, seed);
    t.out = true;
    t.tol = std::move(tol);
    return t;
}

double tensor_bytes(const std::vector<Tensor>& t, bool outputs_read) {
    double b = 0.0;
    for (const auto& x : t) {
        if (x.host) continue;
        const double one = double(x.numel()) * double(dt_bytes(x.dt));
        b += (x.out && outputs_read) ? 2.0 * one : one;
    }
    return b;
}

double unit_roundoff(DT dt) { return dt == DT::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24); }

Tol tol_rounded(DT dt, int64_t k, double atol_scale, double cond) {
    const double u = unit_roundoff(dt), acc = std::sqrt(double(std::max<int64_t>(k, 1))) * std::ldexp(1.0, -24) * cond;
    Tol t;
    t.nmse = 4.0 * (u + acc) * (u + acc);
    t.atol = atol_scale * u;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s output (u=%.3g) after fp32 sums of %lld terms: 4(u + sqrt(k)*2^-24*%g)^2",
                  dt_name(dt), u, (long long)k, cond);
    t.why = buf;
    return t;
}

std::vector<float> uniform_f32(int64_t n, uint32_t seed, double lo, double hi) {
    const Tensor t = input("", DT::F32, n, seed, lo, hi);
    return std::vector<float>(t.v.begin(), t.v.end());
}

double dot_f32(const std::vector<float>& a, const std::vector<float>& w) {
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(w[i]);
    return s;
}

const std::vector<std::string>& perf_shape_sets() {
    static const std::vector<std::string> sets{"paper", "moe10m"};
    return sets;
}

PerfDims perf_dims(const TableOptions& o) {
    PerfDims d;
    d.set = o.shape_set;
    if (o.shape_set == "paper") {
        d.batch = o.cpu_scaled ? 1 : 64, d.seq_len = 128, d.d_model = 4096, d.n_heads = 32, d.n_kv_heads = 8;
        d.head_dim = 128, d.n_experts = o.cpu_scaled ? 8 : 128, d.top_k = 2, d.d_ff = 4096;
        d.vocab = d.padded_vocab = 50304;
        // full size on the CPU too: cheap, and larger than its caches (the roofline's copy is from DRAM)
        d.elementwise_n = 8192 * int64_t(4096), d.init_n = 4096 * int64_t(4096);
        d.scaled = o.cpu_scaled;
    } else if (o.shape_set == "moe10m") {
        d.batch = 8, d.seq_len = 128, d.d_model = 128, d.n_heads = 4, d.n_kv_heads = 2, d.head_dim = 32;
        d.n_experts = 8, d.top_k = 2, d.d_ff = 1024, d.vocab = 50257, d.padded_vocab = 50304;
        d.elementwise_n = d.batch * d.seq_len * d.d_ff;  // the FFN's hidden activations
        d.init_n = 10'090'000;                           // the model's weights
    } else {
        std::string known;
        for (const auto& n : perf_shape_sets()) known += (known.empty() ? "" : ", ") + n;
        fail("backend_ops: --shapes {} is not a shape set ({})", o.shape_set, known);
    }
    return d;
}

std::vector<Case> all_cases(const TableOptions& o) {
    std::vector<Case> c;
    add_dense_cases(c, o);
    add_norm_rope_cases(c, o);
    add_bias_cases(c, o);
    add_attention_cases(c, o);
    add_moe_cases(c, o);
    add_loss_cases(c, o);
    add_elementwise_cases(c, o);
    add_memory_cases(c, o);
    add_gate_cases(c, o);
    for (auto& x : c) {
        if (x.covers.empty()) x.covers = {x.op};
        if (o.perf) x.shape = o.shape_set + ": " + x.shape;
    }
    return c;
}

std::vector<GradCase> all_grad_cases() {
    std::vector<GradCase> g;
    add_dense_grad_cases(g);
    add_norm_rope_grad_cases(g);
    add_bias_grad_cases(g);
    add_attention_grad_cases(g);
    add_moe_grad_cases(g);
    add_loss_grad_cases(g);
    add_gate_grad_cases(g);
    return g;
}

}  // namespace skew::ops
