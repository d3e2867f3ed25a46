// Checkpoint loading for `skew eval` and `skew sample` (docs/evaluation.md): weights only, through
// the checkpoint reader (safetensors), into an arena planned like the trainer's without state.
#include "eval/load.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "train/checkpoint.h"
#include "train/sharded_checkpoint.h"
#include "plan/plan.h"
#include "engine/config_schema.h"
#include "data/tokenizer_identity.h"
#include "engine/error.h"
#if defined(SKEW_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#endif

namespace fs = std::filesystem;

namespace skew::eval {

std::unique_ptr<Backend> make_named_backend(const std::string& b) {
    if (b == "cpu") return make_cpu_backend();
#if defined(SKEW_HAVE_CUDA)
    const int n = cuda::device_count();
    if (b == "cuda") {
        if (n == 0) fail("--backend cuda: no CUDA device is visible (see nvidia-smi)\n--> HINT: use --backend cpu");
        return cuda::make_cuda_backend(0);
    }
    if (b == "auto") return n > 0 ? cuda::make_cuda_backend(0) : make_cpu_backend();
#else
    if (b == "cuda") fail("--backend cuda: this skew was built without the CUDA backend\n--> HINT: use --backend cpu");
    if (b == "auto") return make_cpu_backend();
#endif
    fail("--backend {}: unknown backend (expected cpu, cuda or auto)", b);
}

data::Tokenizer load_run_tokenizer(const CheckpointRef& ref, const Config& run_cfg, const std::string& flag_dir) {
    const std::string dir = flag_dir.empty() ? run_cfg.data.tokenizer_dir : flag_dir;
    const std::string what = flag_dir.empty()
                                 ? fmt::format("data.tokenizer_dir {} of {}/config.yaml", dir, ref.run_dir)
                                 : "--tokenizer " + dir;
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        fail("{}: is a file, not a tokenizer folder (one holding tokenizer.json, tokenizer.model, or encoder.json + vocab.bpe)",
             what);
    if (!fs::is_directory(dir, ec))
        fail("{}: no such folder{}", what, flag_dir.empty() ? "; give --tokenizer DIR" : "");
    data::Tokenizer tok = data::tokenizer_load(dir);
    data::check_run_tokenizer(ref.run_dir, dir, what);
    if (tok.vocab_size() > run_cfg.model.vocab_size)
        fail("{}: the tokenizer has {} ids, more than the model's vocabulary (model.vocab_size {} in {}/config.yaml): its "
             "ids past that have no embedding; give the run's own tokenizer", what, tok.vocab_size(), run_cfg.model.vocab_size,
             ref.run_dir);
    return tok;
}

CheckpointRef resolve_checkpoint(const std::string& path, const std::string& optimizer, const std::string& which) {
    std::error_code ec;
    if (fs::exists(path, ec) && !fs::is_directory(path, ec))
        fail("{}: is a file, not a folder (give a run folder or a checkpoint folder)", path);
    if (!fs::is_directory(path, ec)) fail("{}: no such folder (a run folder or a checkpoint folder)", path);
    CheckpointRef r;
    if (fs::exists(fs::path(path) / "trainer_state.json", ec)) {
        r.dir = path;
        r.run_dir = (fs::path(path).lexically_normal() / ".." / ".." / "..").lexically_normal().string();
        r.which = fs::path(path).lexically_normal().filename().string();
        if (r.which.empty()) r.which = fs::path(path).lexically_normal().parent_path().filename().string();
    } else {
        const fs::path ck = fs::path(path) / "checkpoints";
        if (!fs::is_directory(ck, ec))
            fail("{}: neither a checkpoint folder (no trainer_state.json) nor a run folder (no checkpoints/)", path);
        std::string opt = optimizer;
        if (opt.empty()) {
            std::vector<std::string> names;
            for (const auto& e : fs::directory_iterator(ck, ec))
                if (e.is_directory()) names.push_back(e.path().filename().string());
            if (names.size() != 1) {
                std::string list;
                for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
                fail("{}: the run has checkpoints of {} optimizers ({}); choose one with --optimizer", path,
                     names.size(), list);
            }
            opt = names[0];
        }
        const fs::path od = ck / opt;
        if (!fs::is_directory(od, ec)) fail("{}: no checkpoints of optimizer '{}' ({} is missing)", path, opt, od.string());
        std::string w = which;
        if (w.empty()) w = checkpoint_exists((od / "best").string()) ? "best" : "last";
        if (!checkpoint_exists((od / w).string()))
            fail("{}: no '{}' checkpoint of optimizer '{}' ({} has no trainer_state.json)", path, w, opt, (od / w).string());
        r.dir = (od / w).string();
        r.run_dir = path;
        r.which = w;
    }
    const std::string state_path = (fs::path(r.dir) / "trainer_state.json").string();
    std::ifstream in(state_path);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", state_path);
    const TrainerState st = trainer_state_from_json(j, state_path);
    r.optimizer = st.optimizer;
    r.step = st.step;
    r.config_hash = st.config_hash;
    r.model_config = st.model_config;
    if (!optimizer.empty() && optimizer != r.optimizer)
        fail("{}: the checkpoint is of optimizer '{}', not '{}'", r.dir, r.optimizer, optimizer);
    return r;
}

Config load_run_config(const CheckpointRef& ref) {
    const std::string config_path = (fs::path(ref.run_dir) / "config.yaml").string();
    std::error_code ec;
    if (!fs::exists(config_path, ec))
        fail("{}: missing; the checkpoint {} must sit in its run folder (RUN/checkpoints/<optimizer>/<which>)",
             config_path, ref.dir);
    Config cfg = load_config(config_path);
    if (!ref.model_config.empty()) {
        std::map<std::string, std::string> now;
        for (auto& [key, value] : config_section_values(cfg, "model")) now[key] = value;
        for (const auto& [key, was] : ref.model_config) {
            const auto it = now.find(key);
            if (it == now.end() || it->second != was)
                fail("{}: model.{} is {} but the checkpoint {} was trained with {}: its weights would be read as "
                     "another model; put config.yaml back as the run wrote it",
                     config_path, key, it == now.end() ? "absent" : it->second, ref.dir, was);
        }
    } else if (const std::string hash = config_hash(cfg.resolved_yaml); !ref.config_hash.empty() && ref.config_hash != hash) {
        spdlog::warn("{}: not the config the checkpoint {} was trained under (config hash {} vs {}; the checkpoint "
                     "predates the model record that would say which setting differs): if config.yaml was edited, "
                     "the results are another model's", config_path, ref.dir, ref.config_hash, hash);
    }
    return cfg;
}

std::unique_ptr<LoadedModel> load_model(const CheckpointRef& ref, const std::string& backend, int64_t microbatch,
                                        int64_t seq_len) {
    const std::string config_path = (fs::path(ref.run_dir) / "config.yaml").string();
    auto lm = std::make_unique<LoadedModel>();
    lm->ref = ref;
    lm->cfg = load_run_config(ref);
    if (seq_len < 1 || seq_len > lm->cfg.model.max_seq_len)
        fail("sequence length {} is outside [1, model.max_seq_len {}] of {}", seq_len, lm->cfg.model.max_seq_len,
             config_path);
    lm->cfg.train.batch_size = microbatch;
    lm->cfg.train.microbatch = microbatch;
    lm->cfg.train.seq_len = seq_len;
    lm->backend = make_named_backend(backend);
    const bool on_cuda = std::string(lm->backend->name()) == "cuda";
    lm->cfg.runtime.backend = lm->backend->name();
    lm->table = build_param_table(lm->cfg.model);
    const OptimizerConfig* opt = lm->cfg.find_optimizer(ref.optimizer);
    MemoryPlan plan = build_memory_plan(lm->cfg, lm->table, opt ? *opt : builtin_optimizer("adamw"), microbatch);
    // inference holds no optimizer state
    std::vector<BufferSpec> kept;
    for (const BufferSpec& b : plan.buffers)
        if (b.kind != BufferKind::STATE) kept.push_back(b);
    plan.buffers = kept;
    plan.offsets = layout_arena(plan.buffers, &plan.peak_bytes);
    plan.state_bytes = 0;
    lm->plan = std::make_unique<MemoryPlan>(std::move(plan));
#if defined(SKEW_HAVE_CUDA)
    lm->arena = on_cuda ? allocate_cuda_arena(*lm->plan) : allocate_host_arena(*lm->plan);
#else
    (void)on_cuda;
    lm->arena = allocate_host_arena(*lm->plan);
#endif
    lm->arena.plan = lm->plan.get();
#if defined(SKEW_HAVE_CUDA)
    if (on_cuda) {  // the backend's scratch, widening buffer and library workspace from the arena, as in training
        auto& cb = static_cast<cuda::CudaBackend&>(*lm->backend);
        const MemoryPlan& p = *lm->plan;
        if (const int i = p.find("ws.cuda_scratch"); i >= 0) cb.set_scratch(lm->arena.ptr(i), p.buffers[size_t(i)].bytes());
        if (const int i = p.find("ws.cuda_widen"); i >= 0)
            cb.set_matmul_widen_buffer(static_cast<float*>(lm->arena.ptr(i)), p.buffers[size_t(i)].numel());
        if (const int i = p.find("ws.library"); i >= 0)
            cb.set_matmul_workspace(lm->arena.ptr(i), p.buffers[size_t(i)].bytes());
    }
#endif
    if (checkpoint_is_sharded(ref.dir)) {  // a run over several ranks: its shards merged (docs/distributed.md)
        const std::vector<HostTensor> w = read_checkpoint_weights(ref.dir, lm->table);
        const std::vector<NamedTensor> dst = weight_tensors(lm->arena, lm->backend.get());
        for (size_t i = 0; i < dst.size(); ++i)
            copy_tensor_from_host(dst[i], 0, w[i].data.data(), int64_t(w[i].data.size()));
    } else {
        read_safetensors_into((fs::path(ref.dir) / "model.safetensors").string(), weight_tensors(lm->arena));
    }
    lm->model = model_bind(lm->cfg, lm->table, lm->arena, *lm->backend);
    return lm;
}

}  // namespace skew::eval
