// GaLore on the GPU (optim/galore_cuda.h). Row-major products on column-major cuBLAS:
// C (m x n) = op(A) op(B) is C^T = op(B)^T op(A)^T; strided batches over a chunk of matrices.
#include "optim/galore_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/galore.h"
#include "kernels/cuda/workspace_sizes.h"
#include "optim/device_write.h"
#include "optim/optim_internal.h"

namespace skew {

namespace {

std::atomic<int64_t> g_projector_host_us{0};

/// Row-major C (m x n) = op(A) op(B) for `batch` matrices with element strides sA, sB, sC (fp32).
void gemm_rm_batched(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t sA,
                     const float* B, int64_t sB, float* C, int64_t sC, int64_t batch) {
    const float one = 1.0f, zero = 0.0f;
    cublas_check(cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n),
                                           int(m), int(k), &one, B, tb ? int(k) : int(n), sB, A, ta ? int(m) : int(k),
                                           sA, &zero, C, int(n), sC, int(batch)));
}

}  // namespace

double galore_cuda_projector_host_ms() { return double(g_projector_host_us.load()) / 1000.0; }

void galore_step_cuda(const OptimizerConfig& opt, const ParamSlot& s, const OptimStep& step,
                      const CudaOptimContext& ctx) {
    using namespace optim_detail;
    const ParamInfo& p = *s.info;
    const ParamPolicy pol = param_policy(opt, p);
    const bool paper = pol.kind == OptimizerType::GALORE_PAPER;
    const MatrixShape ms = matrix_shape(p);
    const int64_t m = ms.rows, n = ms.cols, r = pol.galore_rank, E = ms.count, mn = m * n;
    if (m > 2147483647 || n > 2147483647) fail("galore: tensor '{}' has a dimension beyond cuBLAS's int range", p.name);
    const int64_t need = cuda_ws::galore_scratch_bytes(E, m, n, r, paper);
    if (ctx.scratch_bytes < need)
        fail("optimizer '{}': tensor '{}' needs {} bytes of GaLore scratch, {} given", opt.name, p.name, need,
             ctx.scratch_bytes);
    float* P = need_state(s, StateKind::GALORE_P);
    float* Q = paper ? need_state(s, StateKind::GALORE_Q) : nullptr;
    float* M = need_state(s, StateKind::GALORE_M);
    float* V = need_state(s, StateKind::GALORE_V);
    const double t = double(step.t);
    const double bc1 = 1.0 - std::pow(opt.beta1, t), bc2 = 1.0 - std::pow(opt.beta2, t);
    const double alpha = paper ? step.lr : step.lr * std::sqrt(bc2) / bc1 * opt.galore_scale;
    const WriteBack wb = make_write_back(opt, s, step, alpha, step.lr, pol.weight_decay);
    const bool tall = m >= n;
    const int64_t p_numel = paper ? m * r : (tall ? r * n : m * r);
    const int64_t proj = cuda_ws::galore_proj_elems(m, n, r, paper);
    const int64_t chunk = cuda_ws::galore_chunk_matrices(E, m, n, r, paper);
    cudaStream_t st = ctx.stream;
    cublas_check(cublasSetStream(ctx.cublas, st));

    // Scratch layout (cuda_ws::galore_scratch_bytes): Gf | Nf | Gt | tmp | flags.
    char* sp = static_cast<char*>(ctx.scratch);
    float* Gf = reinterpret_cast<float*>(sp);
    sp += cuda_ws::align256(4 * chunk * mn);
    float* Nf = reinterpret_cast<float*>(sp);
    sp += cuda_ws::align256(4 * chunk * mn);
    float* Gt = reinterpret_cast<float*>(sp);
    sp += cuda_ws::align256(4 * chunk * proj);
    float* tmp = reinterpret_cast<float*>(sp);
    sp += cuda_ws::align256(paper ? 4 * chunk * m * r : 0);
    int32_t* flags = reinterpret_cast<int32_t*>(sp);

    // Which projectors are due: the paper form's when still zero, the reference form's every gap.
    std::vector<int32_t> nonzero(static_cast<size_t>(E), 1);
    const bool gap_step = !paper && (step.t - 1) % std::max<int64_t>(1, opt.update_proj_gap) == 0;
    if (!gap_step) {
        cuda::galore_nonzero_flags(P, E, p_numel, flags, st);
        cuda_check(cudaMemcpyAsync(nonzero.data(), flags, size_t(E) * 4, cudaMemcpyDeviceToHost, st));
        cuda_check(cudaStreamSynchronize(st));
    }
    cuda::OptimTensor dt;
    dt.weight = s.weight;
    dt.weight_f32 = p.dtype == DType::F32;
    const cuda::OptimWrite w = device_write(wb);
    std::vector<float> g_host, p_host, q_host;
    for (int64_t e0 = 0; e0 < E; e0 += chunk) {
        const int64_t c = std::min(chunk, E - e0);
        // fp32 gradient of the chunk
        const float* G;
        if (s.grad_dtype == DType::F32) {
            G = static_cast<const float*>(s.grad) + e0 * mn;
        } else {
            cuda::convert(TensorRef(Gf), ConstTensorRef(static_cast<const bf16*>(s.grad) + e0 * mn), c * mn, st);
            G = Gf;
        }
        // Projector refresh on the host where due.
        for (int64_t e = e0; e < e0 + c; ++e) {
            if (!galore_refresh_due(opt, pol, step.t, nonzero[size_t(e)] == 0)) continue;
            const auto t0 = std::chrono::steady_clock::now();
            g_host.resize(size_t(mn));
            p_host.assign(size_t(p_numel), 0.0f);
            q_host.assign(paper ? size_t(r * n) : 0, 0.0f);
            cuda_check(cudaMemcpyAsync(g_host.data(), G + (e - e0) * mn, size_t(mn) * 4, cudaMemcpyDeviceToHost, st));
            cuda_check(cudaStreamSynchronize(st));
            galore_projector(opt, pol, p, step, e + wb.element_base / mn, g_host.data(), p_host.data(),
                             paper ? q_host.data() : nullptr);
            cuda_check(
                cudaMemcpyAsync(P + e * p_numel, p_host.data(), size_t(p_numel) * 4, cudaMemcpyHostToDevice, st));
            if (paper)
                cuda_check(
                    cudaMemcpyAsync(Q + e * r * n, q_host.data(), size_t(r * n) * 4, cudaMemcpyHostToDevice, st));
            cuda_check(cudaStreamSynchronize(st));  // the host buffers are reused
            g_projector_host_us +=
                std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        }
        const float* Pc = P + e0 * p_numel;
        if (paper) {
            const float* Qc = Q + e0 * r * n;
            gemm_rm_batched(ctx.cublas, false, true, m, r, n, G, mn, Qc, r * n, tmp, m * r, c);        // G V (m x r)
            gemm_rm_batched(ctx.cublas, true, false, r, r, m, Pc, p_numel, tmp, m * r, Gt, r * r, c);  // U^T G V
        } else if (tall) {
            gemm_rm_batched(ctx.cublas, false, true, m, r, n, G, mn, Pc, p_numel, Gt, proj, c);  // G P^T (m x r)
        } else {
            gemm_rm_batched(ctx.cublas, true, false, r, n, m, Pc, p_numel, G, mn, Gt, proj, c);  // P^T G (r x n)
        }
        cuda::galore_adam(Gt, M + e0 * proj, V + e0 * proj, c * proj, float(opt.beta1), float(1.0 - opt.beta1),
                          float(opt.beta2), float(1.0 - opt.beta2), float(opt.eps), st);
        if (paper) {
            const float* Qc = Q + e0 * r * n;
            gemm_rm_batched(ctx.cublas, false, false, m, r, r, Pc, p_numel, Gt, r * r, tmp, m * r, c);  // U N (m x r)
            gemm_rm_batched(ctx.cublas, false, false, m, n, r, tmp, m * r, Qc, r * n, Nf, mn, c);       // U N V^T
        } else if (tall) {
            gemm_rm_batched(ctx.cublas, false, false, m, n, r, Gt, proj, Pc, p_numel, Nf, mn, c);  // N P
        } else {
            gemm_rm_batched(ctx.cublas, false, false, m, n, r, Pc, p_numel, Gt, proj, Nf, mn, c);  // P N
        }
        cuda::write_dense_update(dt, Nf, e0 * mn, c * mn, w, st);
    }
}

}  // namespace skew
