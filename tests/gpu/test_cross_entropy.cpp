// GPU tests of the cross-entropy over the padded vocabulary and of the fused tied LM head against
// the CPU backend: losses, dlogits (padding columns zero), large logits, several token chunks, bf16
// and fp32 gradients of the embedding.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/workspace_sizes.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("gpu cross-entropy forward and backward match the CPU, padding masked") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const int64_t n = 67, V = 1000, Vp = 1024;
    auto logits = random_normal(n * Vp, 1, 3.0f);
    // large logits stay finite; only every third row, so the other rows have a spread-out softmax
    // (on an all-but-one-hot row a broken sum over the vocabulary would go unnoticed)
    for (int64_t i = 0; i < n; i += 3) logits[static_cast<size_t>(i * Vp + 7)] += 200.0f;
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tg[static_cast<size_t>(i)] = int32_t((i * 37) % V);
    std::vector<float> losses(static_cast<size_t>(n)), dl(static_cast<size_t>(n * Vp));
    Dev<float> glog(logits), glosses(losses.size()), gdl(dl.size());
    Dev<int32_t> gtg(tg);
    cpu->cross_entropy_forward(losses.data(), logits.data(), tg.data(), n, V, Vp);
    gpu().cross_entropy_forward(glosses.p, glog.p, gtg.p, n, V, Vp);
    require_close("ce losses", glosses.get(), losses, 1e-10);
    cpu->cross_entropy_backward(dl.data(), logits.data(), tg.data(), 0.5f, n, V, Vp);
    gpu().cross_entropy_backward(gdl.p, glog.p, gtg.p, 0.5f, n, V, Vp);
    require_close("ce dlogits", gdl.get(), dl, 1e-9);
    // in place (dlogits aliasing logits)
    gpu().cross_entropy_backward(glog.p, glog.p, gtg.p, 0.5f, n, V, Vp);
    require_close("ce dlogits in place", glog.get(), dl, 1e-9);
}

namespace {

// The GPU head's dx as its arithmetic defines it, for the first `rows` tokens (dx rows depend on
// their own token only): the CPU's fp32 dlogits = (softmax - onehot)/n rounded to bf16 (the GPU
// stores them so for its tensor-core products), times wte with fp32 accumulation, rounded to bf16.
std::vector<bf16> emulated_gpu_dx(const std::vector<bf16>& x, const std::vector<bf16>& wte,
                                  const std::vector<int32_t>& tg, const ClassifierShape& s, int64_t rows) {
    const int64_t C = s.d_model, Vp = s.padded_vocab_size;
    std::vector<float> logits(static_cast<size_t>(rows * Vp));
    cpu::matmul(TensorRef(logits.data()), ConstTensorRef(x.data()), ConstTensorRef(wte.data()),
                MatmulShape{rows, Vp, C, false, true});
    cpu::cross_entropy_backward_scaled(logits.data(), logits.data(), tg.data(), 1.0f / float(s.n_tokens), rows,
                                       s.vocab_size, Vp);
    const std::vector<bf16> dlog16 = to_bf16(logits);
    std::vector<bf16> dx(static_cast<size_t>(rows * C));
    cpu::matmul(TensorRef(dx.data()), ConstTensorRef(dlog16.data()), ConstTensorRef(wte.data()),
                MatmulShape{rows, C, Vp});
    return dx;
}

// The fused head on both backends with bf16 x and wte, dwte fp32 and bf16, then forward only.
void check_fused_head(const ClassifierShape& s) {
    auto cpu = cpu_backend();
    const int64_t n = s.n_tokens, C = s.d_model, Vp = s.padded_vocab_size;
    const auto x = random_bf16(n * C, 1), wte = to_bf16(random_normal(Vp * C, 2, 0.5f));
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tg[static_cast<size_t>(i)] = int32_t((i * 7919) % s.vocab_size);
    Dev<bf16> gx(x), gwte(wte);
    Dev<int32_t> gtg(tg);
    std::vector<uint8_t> cws(static_cast<size_t>(cpu->lm_head_workspace_bytes(s)));
    Dev<uint8_t> gws(static_cast<size_t>(gpu().lm_head_workspace_bytes(s)));
    const int64_t em_rows = std::min<int64_t>(n, 128);
    const std::vector<bf16> dx_emulated = emulated_gpu_dx(x, wte, tg, s, em_rows);
    for (int bf16grad = 0; bf16grad < 2; ++bf16grad) {
        float mean = 0.0f;
        std::vector<float> losses(static_cast<size_t>(n)), dwte_f(static_cast<size_t>(Vp * C), 0.0f);
        std::vector<bf16> dx(static_cast<size_t>(n * C)), dwte_b(static_cast<size_t>(Vp * C), bf16{0});
        Dev<float> gmean(1), glosses(losses.size()), gdwte_f(dwte_f);
        Dev<bf16> gdx(dx.size()), gdwte_b(dwte_b);
        const TensorRef cdw = bf16grad ? TensorRef(dwte_b.data()) : TensorRef(dwte_f.data());
        const TensorRef gdw = bf16grad ? TensorRef(gdwte_b.p) : TensorRef(gdwte_f.p);
        cpu->lm_head_cross_entropy(&mean, losses.data(), dx.data(), cdw, x.data(), wte.data(), tg.data(), 1.0f, s,
                                   cws.data());
        gpu().lm_head_cross_entropy(gmean.p, glosses.p, gdx.p, gdw, gx.p, gwte.p, gtg.p, 1.0f, s, gws.p);
        INFO("dwte " << (bf16grad ? "bf16" : "fp32"));
        const float gm = gmean.get()[0];
        CHECK(std::fabs(gm - mean) <= 1e-4f * std::fabs(mean));
        require_close("lm head losses", glosses.get(), losses, 1e-8);
        // The GPU rounds dlogits to bf16 before the two backward products (tensor cores). Against
        // that arithmetic done on the CPU (first em_rows tokens) only fp32 summation order and the
        // bf16 roundings it flips remain (~1e-8; a dx off by 0.1% is 1e-6); against the CPU head
        // the dlogits rounding itself (measured on the CPU: 7.3e-6 at d_model 64, 4.0e-6 at 576), so at most 1.5x what the
        // emulation shows. atol 1e-9: dx is ~1e-4 (dlogits / n), the default floor would swamp it.
        const std::vector<bf16> gdx_host = gdx.get();
        const std::vector<bf16> gdx_rows(gdx_host.begin(), gdx_host.begin() + em_rows * C);
        const std::vector<bf16> dx_rows(dx.begin(), dx.begin() + em_rows * C);
        const double emulated_nmse = nmse(f32(dx_emulated), f32(dx_rows));
        INFO("the GPU arithmetic emulated on the CPU: normalized MSE " << emulated_nmse << " against the CPU head");
        CHECK(emulated_nmse > 0.0);  // the roundings differ: else the emulation emulates nothing
        require_close("lm head dx vs the emulated GPU arithmetic", gdx_rows, dx_emulated, 1e-6, 1e-9);
        require_close("lm head dx", gdx_host, dx, 1.5 * emulated_nmse + 1e-7, 1e-9);
        if (bf16grad) require_close("lm head dwte bf16", gdwte_b.get(), dwte_b, 1e-4);
        else require_close("lm head dwte fp32", gdwte_f.get(), dwte_f, 1e-4);
    }
    // forward only
    float mean = 0.0f;
    Dev<float> gmean(1);
    cpu->lm_head_cross_entropy(&mean, nullptr, nullptr, nullptr, x.data(), wte.data(), tg.data(), 1.0f, s, cws.data());
    gpu().lm_head_cross_entropy(gmean.p, nullptr, nullptr, nullptr, gx.p, gwte.p, gtg.p, 1.0f, s, gws.p);
    CHECK(std::fabs(gmean.get()[0] - mean) <= 1e-4f * std::fabs(mean));
}
}  // namespace

TEST_CASE("gpu fused LM head + cross-entropy matches the CPU over several chunks") {
    SKEW_REQUIRE_GPU();
    const ClassifierShape s{3000, 64, 50257, 50304};      // 3000 tokens: several chunks of the GPU head
    REQUIRE(cuda::lm_head_chunk_tokens(s) < s.n_tokens);  // the fp32 dwte accumulator path
    REQUIRE(!cuda_ws::lm_head_layout(s.n_tokens, s.d_model, s.padded_vocab_size, true).whole_dlogits);
    check_fused_head(s);
}

TEST_CASE("gpu fused LM head keeping every token's bf16 dlogits (one dx and one dwte product) matches the CPU") {
    SKEW_REQUIRE_GPU();
    // 700 tokens: two chunks of fp32 logits (640 + 60), and 700 <= 640 + 2 x 64, so the head keeps
    // the (700, 50304) bf16 dlogits and runs dx and dwte once over all tokens (the paper's 8,192
    // tokens at d_model 4096 take this path; dwte bf16 is then rounded once without an accumulator)
    const ClassifierShape s{700, 64, 50257, 50304};
    REQUIRE(cuda::lm_head_chunk_tokens(s) < s.n_tokens);
    REQUIRE(cuda_ws::lm_head_layout(s.n_tokens, s.d_model, s.padded_vocab_size, true).whole_dlogits);
    check_fused_head(s);
    // the paper's shape takes it too, in no more memory than the chunked layout with its accumulator
    REQUIRE(cuda_ws::lm_head_layout(8192, 4096, 50304, true).whole_dlogits);
    const int64_t chunk = cuda_ws::lm_head_layout(8192, 4096, 50304, true).chunk_tokens;
    CHECK(cuda_ws::lm_head_workspace_bytes(8192, 4096, 50304, true) <=
          cuda_ws::align256(chunk * 50304 * 4) + cuda_ws::align256(chunk * 50304 * 2) + cuda_ws::align256(8192 * 4) +
              cuda_ws::align256(int64_t(50304) * 4096 * 4));
}

TEST_CASE("gpu fused LM head in one chunk (bf16 dwte added into directly, no accumulator) matches the CPU") {
    SKEW_REQUIRE_GPU();
    // 600 tokens: within the 640-token chunk, so one chunk of fp32 logits and bf16 dlogits
    const ClassifierShape s{600, 576, 50257, 50304};
    REQUIRE(cuda::lm_head_chunk_tokens(s) == s.n_tokens);
    check_fused_head(s);
}

TEST_CASE("gpu fused LM head with fp32 x and wte (fp32 dlogits in place) matches the CPU over several chunks") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    ClassifierShape s{1300, 32, 50257, 50304};  // GPU chunks of 640 tokens: 640, 640, 20
    s.bf16_operands = false;
    const int64_t n = s.n_tokens, C = s.d_model, Vp = s.padded_vocab_size;
    const auto x = random_vector(n * C, 3), wte = random_normal(Vp * C, 4, 0.5f);
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tg[static_cast<size_t>(i)] = int32_t((i * 104729) % s.vocab_size);
    Dev<float> gx(x), gwte(wte);
    Dev<int32_t> gtg(tg);
    std::vector<uint8_t> cws(static_cast<size_t>(cpu->lm_head_workspace_bytes(s)));
    Dev<uint8_t> gws(static_cast<size_t>(gpu().lm_head_workspace_bytes(s)));
    float mean = 0.0f;
    std::vector<float> losses(static_cast<size_t>(n)), dx(static_cast<size_t>(n * C));
    // accumulated into; values the size of the gradient (~1e-4) so that its errors are not swamped
    std::vector<float> dwte = random_vector(Vp * C, 5, -1e-4f, 1e-4f);
    Dev<float> gmean(1), glosses(losses.size()), gdwte(dwte);
    Dev<float> gdx(random_vector(n * C, 6));  // overwritten
    cpu->lm_head_cross_entropy(&mean, losses.data(), dx.data(), dwte.data(), x.data(), wte.data(), tg.data(), 0.5f, s,
                               cws.data());
    gpu().lm_head_cross_entropy(gmean.p, glosses.p, gdx.p, gdwte.p, gx.p, gwte.p, gtg.p, 0.5f, s, gws.p);
    CHECK(std::fabs(gmean.get()[0] - mean) <= 1e-5f * std::fabs(mean));
    require_close("lm head fp32 losses", glosses.get(), losses, 1e-10);
    require_close("lm head fp32 dx", gdx.get(), dx, 1e-8);
    require_close("lm head fp32 dwte", gdwte.get(), dwte, 1e-8);
    // dx only (no embedding gradient): dx overwritten again, the same values
    Dev<float> gdx2(random_vector(n * C, 7));
    gpu().lm_head_cross_entropy(gmean.p, nullptr, gdx2.p, nullptr, gx.p, gwte.p, gtg.p, 0.5f, s, gws.p);
    require_close("lm head fp32 dx (no dwte)", gdx2.get(), dx, 1e-8);
    // fp32 operands with a shape that says bf16 (whose workspace layout differs): an error, not a
    // write past the workspace
    ClassifierShape wrong = s;
    wrong.bf16_operands = true;
    CHECK_THROWS_AS(
        gpu().lm_head_cross_entropy(gmean.p, nullptr, gdx2.p, nullptr, gx.p, gwte.p, gtg.p, 0.5f, wrong, gws.p),
        skew::Error);
}

TEST_CASE("gpu fused LM head with fp32 x and wte and a bf16 dwte over several chunks matches the CPU") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    // 660 tokens: two chunks (640 + 20); fp32 operands keep their dlogits in place and put the fp32
    // dwte accumulator (a bf16 dwte is rounded once) at the start of the dlogits region.
    ClassifierShape s{660, 32, 50257, 50304};
    s.bf16_operands = false;
    REQUIRE(cuda::lm_head_chunk_tokens(s) < s.n_tokens);
    REQUIRE(!cuda_ws::lm_head_layout(s.n_tokens, s.d_model, s.padded_vocab_size, false).whole_dlogits);
    const int64_t n = s.n_tokens, C = s.d_model, Vp = s.padded_vocab_size;
    const auto x = random_vector(n * C, 13), wte = random_normal(Vp * C, 14, 0.5f);
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tg[static_cast<size_t>(i)] = int32_t((i * 7321) % s.vocab_size);
    Dev<float> gx(x), gwte(wte);
    Dev<int32_t> gtg(tg);
    std::vector<uint8_t> cws(static_cast<size_t>(cpu->lm_head_workspace_bytes(s)));
    Dev<uint8_t> gws(static_cast<size_t>(gpu().lm_head_workspace_bytes(s)));
    float mean = 0.0f;
    std::vector<float> losses(static_cast<size_t>(n)), dx(static_cast<size_t>(n * C));
    std::vector<bf16> dwte = to_bf16(random_vector(Vp * C, 15, -1e-4f, 1e-4f));  // accumulated into
    Dev<float> gmean(1), glosses(losses.size()), gdx(dx.size());
    Dev<bf16> gdwte(dwte);
    cpu->lm_head_cross_entropy(&mean, losses.data(), dx.data(), dwte.data(), x.data(), wte.data(), tg.data(), 1.0f, s,
                               cws.data());
    gpu().lm_head_cross_entropy(gmean.p, glosses.p, gdx.p, gdwte.p, gx.p, gwte.p, gtg.p, 1.0f, s, gws.p);
    CHECK(std::fabs(gmean.get()[0] - mean) <= 1e-5f * std::fabs(mean));
    require_close("lm head fp32 operands losses", glosses.get(), losses, 1e-10);
    require_close("lm head fp32 operands dx", gdx.get(), dx, 1e-8);
    require_close("lm head fp32 operands dwte bf16", gdwte.get(), dwte, 1e-5);
}
