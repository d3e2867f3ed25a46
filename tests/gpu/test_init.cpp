// Model initialization on the device: model_init draws every weight with Backend::init_normal
// (kernels/cuda/init_kernels.cu) without a host buffer of a tensor's size, and the bank holds the
// documented draw. init_normal's values against the host draw are rows of the op table
// (docs/backend-ops.md: init_normal n4194304 and n1000003 bf16, n100003 f32).
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/common/init_math.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/test_paths.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("gpu model_init draws the weights on the device with no host buffer of a tensor's size", "[gpu][init]") {
    SKEW_REQUIRE_GPU();
    // three expert banks of 16 x 2048 x 4096 bf16 (134M elements, 512 MiB as fp32 each on the host)
    const Config cfg = load_config(
        skew::test::source_path("configs/tiny.yaml"),
        {"runtime.backend=cuda", "model.d_model=2048", "model.n_heads=16", "model.n_kv_heads=4", "model.d_expert=4096",
         "model.n_experts=16", "model.d_ff=256", "train.batch_size=1", "train.microbatch=1", "train.seq_len=8"});
    const OptimizerConfig adamw = builtin_optimizer("adamw");
    SessionSpec spec;
    spec.optimizer = &adamw;
    spec.microbatch = 1;
    const auto session = open_session(cfg, gpu(), spec);
    const ParamTable& table = session->table;
    const MemoryPlan& plan = session->plan;
    const Arena& arena = session->arena;
    Model& model = session->model;
    // the process's peak resident memory, reset to the current one first (Linux: clear_refs 5)
    auto status_kib = [](const char* key) {
        std::ifstream in("/proc/self/status");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
        return -1LL;
    };
    const bool reset = bool(std::ofstream("/proc/self/clear_refs") << "5");
    const long long rss_before = status_kib("VmRSS:");
    model_init(model, 42);
    gpu().synchronize();
    const long long peak = status_kib("VmHWM:");
    if (!reset || rss_before < 0 || peak < 0) {
        WARN("cannot reset or read the peak resident memory (/proc/self/clear_refs, VmHWM): not measured");
    } else {
        const double grew_mib = double(peak - rss_before) / 1024.0;
        INFO("peak resident memory grew by " << grew_mib << " MiB during model_init");
        CHECK(grew_mib < 128.0);  // a host copy of one bank would be 512 MiB
    }
    // the bank holds the documented draw
    const ParamInfo* w1 = table.find("blocks.1.moe.experts.w1");
    REQUIRE(w1);
    const int pi = plan.find("weight." + w1->name);
    REQUIRE(pi >= 0);
    bf16 v{};
    gpu().copy_to_host(&v, static_cast<const char*>(arena.ptr(pi)) + 777 * sizeof(bf16), sizeof(bf16));
    CHECK(std::abs(int(v.bits) -
                   int(f32_to_bf16(init_normal_value(42, w1->index, 777, float(cfg.model.init_std))).bits)) <= 1);
}
