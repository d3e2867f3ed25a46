// The test and grad modes of backend_ops (tests/backend_ops/runner.h): cases uploaded to each
// backend, run, read back and compared; finite differences for every backward.
#include "tests/backend_ops/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/error.h"
#include "kernels/common/bf16.h"

namespace skew::ops {

std::vector<unsigned char> pack(DT dt, const std::vector<double>& v) {
    std::vector<unsigned char> b(v.size() * size_t(dt_bytes(dt)));
    for (size_t i = 0; i < v.size(); ++i) {
        unsigned char* p = b.data() + i * size_t(dt_bytes(dt));
        switch (dt) {
            case DT::BF16: {
                const bf16 x = f32_to_bf16(float(v[i]));
                std::memcpy(p, &x, 2);
                break;
            }
            case DT::F32: {
                const float x = float(v[i]);
                std::memcpy(p, &x, 4);
                break;
            }
            case DT::I32: {
                const int32_t x = int32_t(v[i]);
                std::memcpy(p, &x, 4);
                break;
            }
            case DT::I64: {
                const int64_t x = int64_t(v[i]);
                std::memcpy(p, &x, 8);
                break;
            }
            case DT::F64: std::memcpy(p, &v[i], 8); break;
        }
    }
    return b;
}

std::vector<double> unpack(DT dt, const unsigned char* p, int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const unsigned char* q = p + i * dt_bytes(dt);
        switch (dt) {
            case DT::BF16: {
                bf16 x;
                std::memcpy(&x, q, 2);
                v[size_t(i)] = bf16_to_f32(x);
                break;
            }
            case DT::F32: {
                float x;
                std::memcpy(&x, q, 4);
                v[size_t(i)] = x;
                break;
            }
            case DT::I32: {
                int32_t x;
                std::memcpy(&x, q, 4);
                v[size_t(i)] = x;
                break;
            }
            case DT::I64: {
                int64_t x;
                std::memcpy(&x, q, 8);
                v[size_t(i)] = double(x);
                break;
            }
            case DT::F64: std::memcpy(&v[size_t(i)], q, 8); break;
        }
    }
    return v;
}

DeviceBufs::DeviceBufs(Backend& be, const std::vector<Tensor>& t, int64_t misalign_bytes)
    : be_(be), misalign_(misalign_bytes) {
    for (const auto& x : t) {
        n_.push_back(x.numel());
        dts_.push_back(x.dt);
        if (x.host) {
            mem_.push_back(nullptr);
            host_.push_back(x.v);
            continue;
        }
        host_.emplace_back();
        const int64_t bytes = x.numel() * dt_bytes(x.dt);
        mem_.push_back(std::make_unique<BackendMemory>(be, bytes + misalign_));  // zeroed
        void* p = ptr(mem_.size() - 1);
        if (x.lazy > 0) {
            if (x.seed != 0) be.init_normal(TensorRef(p, scalar(x.dt)), x.lazy, x.seed, 0, 1.0f);
        } else if (bytes > 0) {
            const auto b = pack(x.dt, x.v);
            be.copy_to_device(p, b.data(), bytes);
        }
    }
}

void* DeviceBufs::scratch(int64_t bytes) {
    scratch_.push_back(std::make_unique<BackendMemory>(be_, bytes));
    return scratch_.back()->get();
}

std::vector<std::vector<double>> DeviceBufs::download() {
    be_.synchronize();
    std::vector<std::vector<double>> out(n_.size());
    for (size_t i = 0; i < n_.size(); ++i) {
        if (!mem_[i]) {
            out[i] = host_[i];
            continue;
        }
        std::vector<unsigned char> b(static_cast<size_t>(n_[i] * dt_bytes(dts_[i])));
        if (!b.empty()) be_.copy_to_host(b.data(), ptr(i), int64_t(b.size()));
        out[i] = unpack(dts_[i], b.data(), n_[i]);
    }
    return out;
}

Compare compare(const std::vector<double>& out, const std::vector<double>& ref, const Tol& tol, double factor) {
    Compare c;
    if (out.size() != ref.size()) fail("compare: {} values against a reference of {}", out.size(), ref.size());
    double num = 0.0, den = 0.0, worst = -1.0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(ref[i])) {  // propagated inf / NaN: the output must be the same
            const bool same = std::isnan(ref[i]) ? std::isnan(out[i]) : out[i] == ref[i];
            if (!same) ++c.nonfinite, c.worst = int64_t(i), worst = INFINITY;
            continue;
        }
        if (!std::isfinite(out[i])) ++c.nonfinite;
        const double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        if (worst != INFINITY && !(std::fabs(d) <= worst)) {
            worst = std::isnan(d) ? INFINITY : std::fabs(d);
            c.worst = int64_t(i);
        }
    }
    if (c.worst >= 0) c.worst_out = out[size_t(c.worst)], c.worst_ref = ref[size_t(c.worst)];
    const double atol = tol.atol * std::sqrt(factor);
    const double bound = factor * tol.nmse * den + double(out.size()) * atol * atol;
    c.err = den > 0.0 ? num / den : num;
    c.limit = den > 0.0 ? bound / den : bound;
    c.ok = c.nonfinite == 0 && num <= bound;
    return c;
}

std::vector<std::vector<double>> run_case(Backend& be, const Case& c) {
    DeviceBufs b(be, c.t, c.misalign_bytes);
    c.run(be, b);
    return b.download();
}

namespace {

bool selected(const std::string& op, const ModeOptions& o) {
    return o.filter.empty() || op.find(o.filter) != std::string::npos;
}

// Compare every output of `got` with `want`; print one line; add a JSON row. Returns ok.
bool report(const Case& c, const std::string& backend, const std::string& against,
            const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want, double factor,
            const ModeOptions& o, nlohmann::json& rows) {
    bool ok = true;
    std::string worst_name;
    Compare worst;
    double worst_ratio = -1.0;
    nlohmann::json outs = nlohmann::json::array();
    for (size_t i = 0; i < c.t.size(); ++i) {
        if (!c.t[i].out) continue;
        Tol tol = c.t[i].tol;
        double f = factor;
        if (factor != 1.0 && tol.cross_nmse > 0.0) tol.nmse = tol.cross_nmse, f = 1.0;  // another backend's own limit
        const Compare r = compare(got[i], want[i], tol, f);
        ok = ok && r.ok;
        const double ratio = r.nonfinite ? INFINITY : (r.limit > 0 ? r.err / r.limit : (r.err > 0 ? INFINITY : 0.0));
        if (!r.ok || ratio > worst_ratio) {
            if (!(worst_ratio == INFINITY && r.ok)) worst = r, worst_name = c.t[i].name, worst_ratio = ratio;
        }
        outs.push_back({{"name", c.t[i].name},
                        {"ok", r.ok},
                        {"err", r.err},
                        {"limit", r.limit},
                        {"nonfinite", r.nonfinite},
                        {"tolerance", c.t[i].tol.why}});
    }
    if (o.json)
        rows.push_back({{"op", c.op},
                        {"shape", c.shape},
                        {"dtypes", c.dtypes},
                        {"backend", backend},
                        {"against", against},
                        {"ok", ok},
                        {"outputs", outs}});
    else
        std::printf("%-4s %-22s %-5s vs %-6s %-50s %-16s worst %s: err %.3g limit %.3g%s\n", ok ? "ok" : "FAIL",
                    c.op.c_str(), backend.c_str(), against.c_str(), c.shape.c_str(), c.dtypes.c_str(),
                    worst_name.c_str(), worst.err, worst.limit,
                    ok ? ""
                       : (" (element " + std::to_string(worst.worst) + ": " + std::to_string(worst.worst_out) + " vs " +
                          std::to_string(worst.worst_ref) + ", non-finite " + std::to_string(worst.nonfinite) + ")")
                             .c_str());
    return ok;
}

}  // namespace

int compare_self_check() {
    struct Probe {
        const char* what;
        std::vector<double> out, ref;
        Tol tol;
        bool expect_ok;
    };
    const double one_ulp = 1.0 + std::ldexp(1.0, -23);
    const std::vector<Probe> probes{
        {"exact limit, one fp32 ulp off", {1.0, one_ulp}, {1.0, 1.0}, Tol{}, false},
        {"exact limit, equal", {1.0, 2.0}, {1.0, 2.0}, Tol{}, true},
        {"NaN output under a wide limit", {1.0, NAN}, {1.0, 1.0}, Tol{1.0, 1.0}, false},
        {"inf output under a wide limit", {INFINITY, 1.0}, {1.0, 1.0}, Tol{1.0, 1.0}, false},
        {"inf reference matched", {INFINITY, 1.0}, {INFINITY, 1.0}, Tol{}, true},
        {"inf reference missed", {1e30, 1.0}, {INFINITY, 1.0}, Tol{1.0, 1.0}, false},
        {"1% error under nmse 2e-4", {1.01, 2.02}, {1.0, 2.0}, Tol{2e-4, 0.0}, true},
        {"1% error over nmse 5e-5", {1.01, 2.02}, {1.0, 2.0}, Tol{5e-5, 0.0}, false},
        {"zero reference, 1e-7 noise, atol 1e-6", {1e-7, -1e-7}, {0.0, 0.0}, Tol{1e-4, 1e-6}, true},
        {"zero reference, 1e-7 noise, no atol", {1e-7, -1e-7}, {0.0, 0.0}, Tol{1e-4, 0.0}, false},
    };
    int bad = 0;
    for (const auto& p : probes) {
        const bool ok = compare(p.out, p.ref, p.tol).ok;
        if (ok != p.expect_ok) {
            std::printf("FAIL compare self-check: %s gave %s\n", p.what, ok ? "pass" : "fail");
            ++bad;
        }
    }
    return bad;
}

int run_test_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, nlohmann::json& rows) {
    int failures = compare_self_check();
    TableOptions to;
    to.large = o.large;
    for (const Case& c : all_cases(to)) {
        if (!selected(c.op, o)) continue;
        if (std::any_of(c.t.begin(), c.t.end(), [](const Tensor& t) { return t.lazy > 0; })) {
            std::printf("FAIL %-22s %s: a tensor above %lld elements has no host values (perf shapes only)\n",
                        c.op.c_str(), c.shape.c_str(), (long long)kLazyElements);
            ++failures;
            continue;
        }
        std::vector<Tensor> exact = c.t;
        if (!c.expect_error) {
            c.ref(exact);
            // the outputs start poisoned (NaN): a reference that leaves one unwritten would excuse a
            // backend that does the same
            for (const auto& t : exact)
                if (t.out && std::any_of(t.v.begin(), t.v.end(), [](double x) { return std::isnan(x); })) {
                    std::printf("FAIL %-22s %s: the reference leaves %s partly unwritten (NaN)\n", c.op.c_str(),
                                c.shape.c_str(), t.name.c_str());
                    ++failures;
                }
        }
        std::vector<std::vector<double>> want(exact.size()), cpu_out;
        for (size_t i = 0; i < exact.size(); ++i) want[i] = exact[i].v;
        for (auto& b : backends) {
            if (c.supports && !c.supports(traits_of(*b.be))) {
                if (!o.json)
                    std::printf("%-4s %-24s %-6s %s: not supported\n", "skip", c.op.c_str(), b.name.c_str(),
                                c.shape.c_str());
                continue;
            }
            if (c.expect_error) {
                std::string what;
                try {
                    run_case(*b.be, c);
                } catch (const Error& e) {
                    what = e.what();
                }
                const bool ok = !what.empty();
                failures += !ok;
                if (o.json)
                    rows.push_back(
                        {{"op", c.op}, {"shape", c.shape}, {"backend", b.name}, {"ok", ok}, {"error", what}});
                else
                    std::printf("%-4s %-22s %-5s %s: %s\n", ok ? "ok" : "FAIL", c.op.c_str(), b.name.c_str(),
                                c.shape.c_str(), ok ? ("threw: " + what.substr(0, 80)).c_str() : "did not throw");
                continue;
            }
            std::vector<std::vector<double>> got;
            try {
                got = run_case(*b.be, c);
            } catch (const std::exception& e) {
                std::printf("FAIL %-24s %-6s %s: threw: %s\n", c.op.c_str(), b.name.c_str(), c.shape.c_str(), e.what());
                if (o.json)
                    rows.push_back(
                        {{"op", c.op}, {"shape", c.shape}, {"backend", b.name}, {"ok", false}, {"error", e.what()}});
                ++failures;
                continue;
            }
            if (c.deterministic) {
                const auto again = run_case(*b.be, c);
                size_t differ = 0;
                for (size_t i = 0; i < c.t.size(); ++i)
                    if (c.t[i].out)
                        for (size_t j = 0; j < got[i].size(); ++j)
                            differ += std::memcmp(&got[i][j], &again[i][j], sizeof(double)) != 0;
                if (differ) {
                    std::printf("FAIL %-22s %-5s %s: %zu elements differ between two runs (deterministic op)\n",
                                c.op.c_str(), b.name.c_str(), c.shape.c_str(), differ);
                    ++failures;
                }
            }
            if (b.name == "cpu") {
                cpu_out = got;
                failures += !report(c, b.name, "double", got, want, 1.0, o, rows);
            } else if (!cpu_out.empty()) {
                failures += !report(c, b.name, "cpu", got, cpu_out, c.cross_factor, o, rows);
            } else {
                failures += !report(c, b.name, "double", got, want, c.cross_factor, o, rows);
            }
        }
    }
    return failures;
}

namespace {

// Central differences with the step actually taken (fl(x ± eps) - x), so that fp32 rounding of
// x ± eps does not bias the quotient (as tests/kernels/harness.h fd_gradient).
std::vector<double> fd_gradient(std::vector<float>& x, const std::function<double()>& loss, float eps) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const float x0 = x[i], xp = x0 + eps, xm = x0 - eps;
        x[i] = xp;
        const double lp = loss();
        x[i] = xm;
        const double lm = loss();
        x[i] = x0;
        g[i] = (lp - lm) / (double(xp) - double(xm));
    }
    return g;
}

}  // namespace

int run_grad_mode(const ModeOptions& o, nlohmann::json& rows) {
    int failures = 0;
    for (GradCase& g : all_grad_cases()) {
        if (!selected(g.op, o)) continue;
        const auto analytic = g.analytic();
        for (size_t j = 0; j < g.in.size(); ++j) {
            const GradInput& in = g.in[j];
            const auto fd = fd_gradient(*in.x, g.loss, in.eps);
            bool ok = analytic[j].size() == fd.size();
            double worst_excess = -INFINITY, max_err = 0.0;
            size_t worst = 0;
            for (size_t i = 0; ok && i < fd.size(); ++i) {
                const double err = std::fabs(double(analytic[j][i]) - fd[i]);
                const double excess = err - (in.atol + in.rtol * std::fabs(fd[i]));
                if (!(excess <= 0.0)) ok = false;
                if (excess > worst_excess || std::isnan(err))
                    worst_excess = std::isnan(err) ? INFINITY : excess, worst = i;
                max_err = std::isnan(err) ? NAN : std::max(max_err, err);
            }
            failures += !ok;
            const double a = fd.empty() ? 0.0 : analytic[j][worst], f = fd.empty() ? 0.0 : fd[worst];
            if (o.json)
                rows.push_back({{"op", g.op},
                                {"shape", g.shape},
                                {"input", in.name},
                                {"ok", ok},
                                {"max_err", max_err},
                                {"atol", in.atol},
                                {"rtol", in.rtol},
                                {"eps", in.eps},
                                {"tolerance", in.why}});
            else
                std::printf(
                    "%-4s %-24s d%-8s %-44s max |analytic - fd| %.3g (atol %.2g rtol %.2g; worst %zu: %.6g "
                    "vs %.6g)\n",
                    ok ? "ok" : "FAIL", g.op.c_str(), in.name.c_str(), g.shape.c_str(), max_err, in.atol, in.rtol,
                    worst, a, f);
        }
    }
    return failures;
}

}  // namespace skew::ops
