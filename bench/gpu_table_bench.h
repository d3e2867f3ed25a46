// bench_gpu_ops section: the op table's perf rows (tests/backend_ops, docs/backend-ops.md) on the
// CUDA backend at the paper's shapes, and the grouped expert GEMM's rows again under its second
// algorithm. Host C++ (the table is not for nvcc); linked into bench_gpu_ops.
#pragma once
#include <cstdio>

namespace skew::bench {

/// Time every perf case of the op table's "paper" set on the CUDA backend (each for at least 0.1 s
/// when quick, else 0.3 s), then the moe_matmul rows with SKEW_GROUPED_GEMM=cublas_grouped. One
/// line each on stdout; one JSON line each to `out` when given: {"name": "table <op> <shape>",
/// "op", "shape", "dtypes", "algo", "ms", "tflops", "gbs", "roofline_fraction"}, and a
/// {"name": "table roofline", ...} line first. Returns the failure count (a case that threw);
/// throws skew::Error without a CUDA device.
int bench_table(FILE* out, bool quick);

}  // namespace skew::bench
