// bench_gpu_ops section: one GaLore step (both forms) at the paper's parameter set, against the
// fp32 GEMM rate of the projection's own shape measured in the same run. Host C++ (the optimizer
// headers are not for nvcc); linked into bench_gpu_ops.
#pragma once
#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace skew::bench {

/// report(name, ms, flops, bytes, extra_json_fields) as bench_gpu_ops prints and writes a row.
using ReportFn = std::function<void(const std::string&, double, double, double, const std::string&)>;

/// Time GaLore's CUDA step (projectors pre-filled, so no refresh) over the paper model's projected
/// matrices, one host projector refresh of a 4096 x 4096 matrix, and the fp32 GEMM rate.
void bench_galore(cudaStream_t stream, bool quick, const ReportFn& report);

}  // namespace skew::bench
