// The op table of tests/backend_ops (docs/backend-ops.md): one Case per (Backend op, shape, dtype)
// with seeded inputs, a double-precision reference, an error limit derived from the arithmetic, and
// its FLOPs and bytes moved; one GradCase per backward op for central finite differences on the CPU.
// The same table runs in every mode of the backend_ops binary (test, grad, perf, support, list).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace skew::ops {

/// Element type of one tensor of a case.
enum class DT : uint8_t { BF16, F32, I32, I64, F64 };  // F64: host values only (returned scalars)

/// Bytes per element of a DT; its name ("bf16", "f32", "i32", "i64", "f64").
int64_t dt_bytes(DT t);
const char* dt_name(DT t);
/// The ScalarType of a floating DT (BF16 or F32).
ScalarType scalar(DT t);

/// The error limit of one output against its reference: Σ(out - ref)² <= nmse·Σ ref² + n·atol²,
/// every element finite (NaN and inf fail) except where the reference itself is infinite or NaN,
/// which the output must match (an op documented to propagate them). nmse = atol = 0: bit-exact.
/// `why` states the derivation next to the numbers (docs/backend-ops.md, "Tolerances").
struct Tol {
    Tol() = default;
    Tol(double nmse_, double atol_, std::string why_ = "exact") : nmse(nmse_), atol(atol_), why(std::move(why_)) {}
    double nmse = 0.0;
    double atol = 0.0;
    std::string why = "exact";
    /// > 0: the limit of another backend against the CPU, where its arithmetic legitimately differs
    /// more than cross_factor·nmse allows (e.g. bf16-rounded intermediates); its reason in cross_why.
    double cross_nmse = 0.0;
    std::string cross_why;
};

/// One tensor of a case: host values (exactly representable in dt: inputs are rounded before the
/// reference sees them), uploaded to the backend before the op. An output's initial values are its
/// contents before the op (the accumulating ops add to them); after the op it is read back and
/// compared with the reference under tol. A host tensor lives on the host only (a value the op
/// returns, e.g. sum_squares).
/// A floating tensor of more than kLazyElements elements (the perf shapes only) keeps no host values:
/// `lazy` elements drawn on the backend with init_normal(seed) (or zeros), never compared.
struct Tensor {
    std::string name;
    DT dt = DT::F32;
    std::vector<double> v;
    bool out = false;
    bool host = false;
    Tol tol;
    int64_t lazy = 0;   // > 0: element count of a tensor without host values
    uint32_t seed = 0;  // its init_normal seed; 0: zeros
    int64_t numel() const { return lazy > 0 ? lazy : int64_t(v.size()); }
};

/// Tensors above this many elements are lazy (see Tensor): no test shape comes near it.
inline constexpr int64_t kLazyElements = int64_t(1) << 24;

/// The tensors of a case as they live on one backend, handed to Case::run.
class Bufs {
public:
    virtual ~Bufs() = default;
    virtual void* ptr(size_t i) = 0;
    /// The host values of a host tensor (write the op's result there).
    virtual std::vector<double>& host(size_t i) = 0;
    /// `bytes` bytes of backend memory (16-byte aligned) that live until the case ends (workspaces).
    virtual void* scratch(int64_t bytes) = 0;
    virtual DT dt(size_t i) const = 0;

    template <class T>
    T* at(size_t i) {
        return static_cast<T*>(ptr(i));
    }
    TensorRef ref(size_t i) { return TensorRef(ptr(i), scalar(dt(i))); }
};

/// What a case's support predicate may ask of a backend (known for a compiled backend whether or not
/// a device is present, so the support table covers it).
struct BackendTraits {
    std::string name;
    bool runs_cuda = false;
};
BackendTraits traits_of(const Backend& be);
/// The traits of a backend compiled in ("cpu", "cuda").
BackendTraits traits_named(const std::string& name);

/// One row of the table at one shape and dtype.
struct Case {
    std::string op;                   // the Backend method (the row)
    std::string shape;                // a label of the shape, dtype and options
    std::vector<std::string> covers;  // the Backend methods the case calls (default: {op})
    std::vector<Tensor> t;
    std::function<void(Backend&, Bufs&)> run;
    /// Fill the outputs of `t` (a copy holding the initial values) with the exact result, in double.
    std::function<void(std::vector<Tensor>&)> ref;
    /// Whether a backend runs this case (default: all); unsupported cases are listed as such.
    std::function<bool(const BackendTraits&)> supports;
    double flops = 0.0;  // floating-point operations of one run
    double bytes = 0.0;  // bytes read and written by one run (each tensor once)
    std::string dtypes;  // "bf16", "f32", "bf16·f32", ... (the support table's column)
    /// Backends other than the CPU are compared with the CPU's output under this many times the
    /// limit (each side within the limit of the exact result: (a + b)² <= 2a² + 2b², so 4).
    double cross_factor = 4.0;
    /// The case checks an argument error: the op must throw skew::Error on every backend (no outputs
    /// compared).
    bool expect_error = false;
    /// Run the case twice on each backend and require the same bits (ops documented deterministic).
    bool deterministic = false;
    /// > 0: every tensor of the case starts this many bytes past a 16-byte boundary (e.g. 4: aligned
    /// for fp32 but not for 16-byte vector loads), so a backend's unaligned path runs.
    int64_t misalign_bytes = 0;
};

/// One backward op's finite-difference check on the CPU (fp32 instantiations of kernels/cpu):
/// loss() = Σ forward(inputs)·r in double; analytic() the backward's gradient of it for each input.
struct GradInput {
    std::string name;
    std::vector<float>* x = nullptr;
    float eps = 1e-2f;
    double atol = 1e-4, rtol = 1e-2;  // |analytic - fd| <= atol + rtol·|fd|, derivation in `why`
    std::string why;
};

struct GradCase {
    std::string op;  // the backward Backend method
    std::string shape;
    std::vector<GradInput> in;
    std::function<double()> loss;
    std::function<std::vector<std::vector<float>>()> analytic;
    std::shared_ptr<void> state;  // what loss and analytic capture
};

// ---- tensor builders (seeded; values exactly representable in dt)

/// n values uniform in [lo, hi) from seed, rounded to dt.
Tensor input(std::string name, DT dt, int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0);
/// n standard normal values times stddev from seed, rounded to dt.
Tensor input_normal(std::string name, DT dt, int64_t n, uint32_t seed, double stddev = 1.0);
/// An input with the given values (rounded to dt).
Tensor input_values(std::string name, DT dt, std::vector<double> v);
/// An output of n elements that the op overwrites, compared under tol. It starts as NaN (floats)
/// or -7 (integers), so that an element the op leaves unwritten fails the comparison.
Tensor output(std::string name, DT dt, int64_t n, Tol tol);
Tensor output_values(std::string name, DT dt, std::vector<double> v, Tol tol);
/// An output that starts as seeded uniform values (an accumulating op's previous contents).
Tensor output_random(std::string name, DT dt, int64_t n, uint32_t seed, Tol tol);

/// A case's printf-formatted label (at most 255 characters).
template <class... A>
std::string label(const char* f, A... a) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a...);
    return buf;
}
/// n fp32 values uniform in [lo, hi) from seed (input()'s generator): the grad cases' inputs.
std::vector<float> uniform_f32(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0);
/// Σ a_i·w_i in double: the grad cases' scalar loss.
double dot_f32(const std::vector<float>& a, const std::vector<float>& w);

/// x rounded to dt (bf16: nearest even; f32: nearest float; integers: unchanged).
double round_to(DT dt, double x);

/// Sum of the bytes of every tensor of the case (an output counted twice when it starts non-zero
/// and accumulates: read and written): the bytes-moved figure of most cases.
double tensor_bytes(const std::vector<Tensor>& t, bool outputs_read = false);

// ---- tolerances (tests/backend_ops/table.cpp; docs/backend-ops.md "Tolerances")

/// unit roundoff of a floating DT: bf16 2^-8, f32 2^-24.
double unit_roundoff(DT dt);
/// An output rounded once to dt after an fp32 computation with accumulations of length k whose
/// terms have mixed signs (relative error of the sum ~ sqrt(k)·2^-24·cond): limit
/// 4·(u_dt + sqrt(k)·2^-24·cond)², atol = atol_scale·u_dt.
Tol tol_rounded(DT dt, int64_t k, double atol_scale = 1.0, double cond = 8.0);

// ---- the table (cases_*.cpp)

/// Which list a family builds: the test shapes (small, edge cases) or the perf shapes (the paper's,
/// scaled by `perf_scale` on the token and expert counts: 1 on a GPU, see docs/backend-ops.md).
struct TableOptions {
    bool perf = false;
    bool cpu_scaled = true;  // perf: the CPU runs the paper shapes scaled (1 x 128 tokens, 8 experts)
    /// test: also the large rows, shapes that exist to cross a device kernel's tile, chunk or layout
    /// limits and cost seconds of double-precision reference each (`--large`; the GPU check passes it).
    bool large = false;
    /// perf: the named shape set (perf_shape_sets(): "paper", "moe10m").
    std::string shape_set = "paper";
};

/// The model dimensions of a perf shape set (docs/backend-ops.md "Shape sets"): every family's perf
/// rows are these ops at these sizes.
struct PerfDims {
    std::string set;  // its name
    int64_t batch = 0, seq_len = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_experts = 0, top_k = 0,
            d_ff = 0, vocab = 0, padded_vocab = 0;
    int64_t elementwise_n = 0;  // elements of the element-wise rows
    int64_t init_n = 0;         // elements of the init_normal row (a weight, or the whole model)
    bool scaled = false;        // the paper's shapes scaled for the CPU (1 x 128 tokens, 8 experts)
};

/// The names perf mode knows, the first the default: "paper" (docs/design.md: d_model 4096, 32/8
/// heads of 128, 128 experts of 4096 top-2, batch 64 x 128, vocabulary 50,304) and "moe10m"
/// (bench_step's CPU model: d_model 128, 4/2 heads of 32, 8 experts of 1024 top-2, batch 8 x 128,
/// GPT-2's vocabulary padded to 50,304).
const std::vector<std::string>& perf_shape_sets();
/// The dimensions of o.shape_set; o.cpu_scaled scales "paper" (1 x 128 tokens, 8 experts). Throws
/// skew::Error naming the set when it is not one of perf_shape_sets().
PerfDims perf_dims(const TableOptions& o);

void add_dense_cases(std::vector<Case>& out, const TableOptions& o);        // cases_dense.cpp
void add_attention_cases(std::vector<Case>& out, const TableOptions& o);    // cases_attention.cpp
void add_moe_cases(std::vector<Case>& out, const TableOptions& o);          // cases_moe.cpp
void add_loss_cases(std::vector<Case>& out, const TableOptions& o);         // cases_loss.cpp
void add_memory_cases(std::vector<Case>& out, const TableOptions& o);       // cases_memory.cpp
void add_elementwise_cases(std::vector<Case>& out, const TableOptions& o);  // cases_elementwise.cpp
void add_norm_rope_cases(std::vector<Case>& out, const TableOptions& o);    // cases_norm_rope.cpp
void add_bias_cases(std::vector<Case>& out, const TableOptions& o);         // cases_bias.cpp
void add_gate_cases(std::vector<Case>& out, const TableOptions& o);         // cases_gate.cpp

void add_dense_grad_cases(std::vector<GradCase>& out);
void add_attention_grad_cases(std::vector<GradCase>& out);
void add_moe_grad_cases(std::vector<GradCase>& out);
void add_loss_grad_cases(std::vector<GradCase>& out);
void add_norm_rope_grad_cases(std::vector<GradCase>& out);
void add_bias_grad_cases(std::vector<GradCase>& out);
void add_gate_grad_cases(std::vector<GradCase>& out);

/// The matmul row C (m x n, dc) = alpha·op(A)·op(B) + beta·C of seeded inputs (cases_dense.cpp); other
/// families time a product of theirs with it (the fused LM head's).
Case matmul_case(int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha, float beta, DT da, DT db, DT dc,
                 uint32_t seed);

/// A large row (TableOptions::large): `c` with " [large]" appended to its shape.
inline Case large_row(Case c) {
    c.shape += " [large]";
    return c;
}

/// Every case of the table (test or perf shapes), families in a fixed order.
std::vector<Case> all_cases(const TableOptions& o);
std::vector<GradCase> all_grad_cases();

}  // namespace skew::ops
