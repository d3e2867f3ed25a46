// Running one case of the op table on one backend (upload, run, read back) and comparing outputs
// with a reference under the case's limits; the test and grad modes over the whole table.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tests/backend_ops/backends.h"
#include "tests/backend_ops/op_table.h"

namespace skew::ops {

/// The tensors of a case on one backend (BackendMemory each, uploaded from the host values).
class DeviceBufs final : public Bufs {
public:
    /// misalign_bytes: each tensor starts this many bytes past its allocation's 16-byte boundary.
    DeviceBufs(Backend& be, const std::vector<Tensor>& t, int64_t misalign_bytes = 0);
    void* ptr(size_t i) override { return mem_[i] ? static_cast<char*>(mem_[i]->get()) + misalign_ : nullptr; }
    std::vector<double>& host(size_t i) override { return host_[i]; }
    void* scratch(int64_t bytes) override;
    DT dt(size_t i) const override { return dts_[i]; }
    /// The values of every tensor after the op (device tensors read back; host tensors as written).
    std::vector<std::vector<double>> download();

private:
    Backend& be_;
    int64_t misalign_ = 0;
    std::vector<int64_t> n_;
    std::vector<DT> dts_;
    std::vector<std::unique_ptr<BackendMemory>> mem_;
    std::vector<std::vector<double>> host_;
    std::vector<std::unique_ptr<BackendMemory>> scratch_;
};

/// Values in backend byte layout and back.
std::vector<unsigned char> pack(DT dt, const std::vector<double>& v);
std::vector<double> unpack(DT dt, const unsigned char* p, int64_t n);

/// One output compared with its reference.
struct Compare {
    bool ok = true;
    double err = 0.0;       // Σ(out - ref)² / Σ ref² (or Σ(out - ref)² when Σ ref² = 0)
    double limit = 0.0;     // the bound on Σ(out - ref)² as a fraction of Σ ref² (for the line)
    int64_t nonfinite = 0;  // non-finite elements of the output
    int64_t worst = -1;     // element of the largest |out - ref|
    double worst_out = 0.0, worst_ref = 0.0;
};

/// Compare out with ref: every element finite (a NaN in out fails), Σ(out - ref)² <=
/// factor·nmse·Σ ref² + n·(factor·atol)²... with factor scaling nmse (atol scaled by sqrt(factor)).
Compare compare(const std::vector<double>& out, const std::vector<double>& ref, const Tol& tol, double factor = 1.0);

/// The comparison on hand-made vectors whose verdicts are known (a 1-ulp miss under an exact limit,
/// NaN under a wide one, inf matched and missed, the absolute floor): the failure count, printed.
/// Test mode runs it first, so a comparison that can no longer fail fails the mode.
int compare_self_check();

/// Run `c` on `be`: the values of every tensor after the op. Throws what the op throws.
std::vector<std::vector<double>> run_case(Backend& be, const Case& c);

struct ModeOptions {
    std::string filter;  // run only ops whose name contains this
    bool json = false;
    bool large = false;  // test: the large rows too (TableOptions::large)
};

/// --mode test: every case on every present backend, the CPU against the double reference and the
/// other backends against the CPU. One line per (case, backend). Returns the failure count.
int run_test_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, nlohmann::json& rows);

/// --mode grad: every GradCase's analytic gradient against central finite differences.
int run_grad_mode(const ModeOptions& o, nlohmann::json& rows);

}  // namespace skew::ops
