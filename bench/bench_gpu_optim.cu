// The optimizer section of bench_gpu_ops: one step of each optimizer (SkewAdam, Adafactor, AdamW,
// Lion) on the CUDA backend over the paper's parameter set (configs/paper-6.78b.yaml: every tensor
// of the 6.78B model, synthetic bf16 weights and gradients of the exact shapes and tiers, zero state;
// no model). Each row: ms per step, the bytes the step must move (optimizer_bytes_per_param summed
// over the table: weights read and written, gradients read once per pass, state read and written),
// GB/s and the fraction of the device-to-device copy bandwidth measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_gpu_optim.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/common/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/init_kernels.h"
#include "optim/optimizer.h"
#include "optim/optimizer_cuda.h"

namespace skew::bench {

namespace {

__global__ void fill_bf16_noise_kernel(bf16* p, int64_t n, uint32_t seed, float amp) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = f32_to_bf16((float(h >> 8) * (1.0f / 16777216.0f) - 0.5f) * amp);
    }
}

void* dalloc(size_t bytes) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes));
    return p;
}

double event_ms(cudaStream_t s, cudaEvent_t a, cudaEvent_t b) {
    cuda_check(cudaEventSynchronize(b));
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, a, b));
    (void)s;
    return double(ms);
}

/// Device-to-device copy bandwidth (bytes read + written per second) of a 4 GiB copy.
double copy_gbs(cudaStream_t s, int iters) {
    const size_t bytes = size_t(1) << 32;
    void* a = dalloc(bytes);
    void* b = dalloc(bytes);
    cuda_check(cudaMemsetAsync(a, 1, bytes, s));
    cudaEvent_t e0, e1;
    cuda_check(cudaEventCreate(&e0));
    cuda_check(cudaEventCreate(&e1));
    cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    cuda_check(cudaEventRecord(e0, s));
    for (int i = 0; i < iters; ++i) cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    cuda_check(cudaEventRecord(e1, s));
    const double ms = event_ms(s, e0, e1) / iters;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

}  // namespace

void bench_gpu_optimizers(FILE* out, const std::string& config_path, bool quick) {
    Config cfg = load_config(config_path);
    const ParamTable table = build_param_table(cfg.model);
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreate(&s));
    cublasHandle_t cublas = nullptr;
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS)
        cuda::throw_op_error("bench_gpu_optimizers", "cublasCreate failed");
    const int iters = quick ? 2 : 5;
    int64_t n_total = 0;
    for (const ParamInfo& p : table.params) n_total += p.numel();
    const double copy = copy_gbs(s, iters);
    std::printf("%-58s %9s    %8.1f GB/s (read + write)\n", "device-to-device copy (4 GiB)", "", copy);
    if (out) std::fprintf(out, "{\"name\": \"optimizer: d2d copy 4 GiB\", \"gbs\": %.3f}\n", copy);
    std::fflush(stdout);
    // One weight and one gradient bank for all optimizers: bf16, the paper's dtypes (fp32 params fp32).
    std::vector<void*> weights, grads;
    double init_bytes = 0;
    for (const ParamInfo& p : table.params) {
        weights.push_back(dalloc(size_t(p.bytes())));
        grads.push_back(dalloc(size_t(p.numel()) * 2));
        fill_bf16_noise_kernel<<<4096, 256, 0, s>>>(static_cast<bf16*>(grads.back()), p.numel(), 1000 + p.index,
                                                    0.002f);
        cuda_check_kernel("fill_bf16_noise_kernel");
        init_bytes += double(p.bytes());
    }
    // Model initialization on the device (model_init's normals: Backend::init_normal), every weight.
    {
        cudaEvent_t e0, e1;
        cuda_check(cudaEventCreate(&e0));
        cuda_check(cudaEventCreate(&e1));
        cuda_check(cudaEventRecord(e0, s));
        for (size_t i = 0; i < table.params.size(); ++i) {
            const ParamInfo& p = table.params[i];
            cuda::init_normal(TensorRef(weights[i], p.dtype == DType::BF16 ? ScalarType::BF16 : ScalarType::F32),
                              p.numel(), 42, p.index, float(cfg.model.init_std), s);
        }
        cuda_check(cudaEventRecord(e1, s));
        const double ms = event_ms(s, e0, e1);
        std::printf("%-58s %9.3f ms %8.1f GB/s  %lld parameters\n", "model init on the device (Philox normals)", ms,
                    init_bytes / (ms * 1e-3) / 1e9, (long long)n_total);
        if (out)
            std::fprintf(out,
                         "{\"name\": \"model init on the device (Philox normals)\", \"ms\": %.6f, \"gbs\": %.3f, "
                         "\"params\": %lld}\n",
                         ms, init_bytes / (ms * 1e-3) / 1e9, (long long)n_total);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    struct Row {
        const char* name;
        bool matrix_by_matrix;
    };
    for (const Row& row_of : {Row{"skewadam", false}, Row{"skewadam", true}, Row{"adafactor", false},
                              Row{"adafactor", true}, Row{"adamw", false}, Row{"lion", false}}) {
        const char* name = row_of.name;
        OptimizerConfig opt = builtin_optimizer(name);
        for (const OptimizerConfig& o : cfg.optimizers)
            if (o.name == name) opt = o;  // the config's hyperparameters where it lists the optimizer
        std::vector<ParamSlot> slots(table.params.size());
        std::vector<void*> state;
        double bytes = 0;
        for (size_t i = 0; i < table.params.size(); ++i) {
            const ParamInfo& p = table.params[i];
            slots[i].info = &p;
            slots[i].weight = weights[i];
            slots[i].grad = grads[i];
            slots[i].grad_dtype = DType::BF16;
            for (const StateSlotSpec& sp : optimizer_param_state(opt, p)) {
                state.push_back(dalloc(size_t(sp.numel()) * 4));
                cuda_check(cudaMemsetAsync(state.back(), 0, size_t(sp.numel()) * 4, s));
                slots[i].state[size_t(sp.kind)] = static_cast<float*>(state.back());
            }
            bytes += optimizer_bytes_per_param(opt, p, DType::BF16) * double(p.numel());
        }
        CudaOptimContext ctx;
        ctx.scratch_bytes = optimizer_cuda_scratch_bytes(opt, slots);
        ctx.scratch = dalloc(size_t(std::max<int64_t>(ctx.scratch_bytes, 256)));
        ctx.cublas = cublas;
        ctx.stream = s;
        ctx.matrix_by_matrix = row_of.matrix_by_matrix;
        OptimStep st{1, opt.lr, 42};
        st.grad_scale = 0.5f;                      // the folded clip coefficient, as a clipped step reads it
        optimizer_step_cuda(opt, slots, st, ctx);  // warm-up
        cudaEvent_t e0, e1;
        cuda_check(cudaEventCreate(&e0));
        cuda_check(cudaEventCreate(&e1));
        cuda_check(cudaEventRecord(e0, s));
        for (int k = 0; k < iters; ++k) {
            st.t = 2 + k;
            optimizer_step_cuda(opt, slots, st, ctx);
        }
        cuda_check(cudaEventRecord(e1, s));
        const double ms = event_ms(s, e0, e1) / iters;
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        const std::string row = std::string("optimizer step ") + name + " (paper 6.78B, bf16 W and G" +
                                (row_of.matrix_by_matrix ? ", matrix by matrix)" : ")");
        std::printf("%-58s %9.3f ms %8.1f GB/s  %.1f GB moved, %.2f of copy, floor %.2f ms\n", row.c_str(), ms, gbs,
                    bytes / 1e9, gbs / copy, bytes / (copy * 1e9) * 1e3);
        if (out)
            std::fprintf(out,
                         "{\"name\": \"%s\", \"ms\": %.6f, \"gbs\": %.3f, \"bytes\": %.0f, \"params\": %lld, "
                         "\"copy_gbs\": %.3f, \"fraction_of_copy\": %.4f, \"floor_ms_at_copy\": %.4f}\n",
                         row.c_str(), ms, gbs, bytes, (long long)n_total, copy, gbs / copy, bytes / (copy * 1e9) * 1e3);
        if (out) std::fflush(out);
        std::fflush(stdout);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cuda_check(cudaStreamSynchronize(s));
        for (void* p : state) cudaFree(p);
        cudaFree(ctx.scratch);
    }
    for (void* p : weights) cudaFree(p);
    for (void* p : grads) cudaFree(p);
    cublasDestroy(cublas);
    cudaStreamDestroy(s);
}

}  // namespace skew::bench
