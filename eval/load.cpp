// Checkpoint loading for `skew eval` and `skew sample` (docs/evaluation.md): weights only, through
// the checkpoint reader (safetensors), into an arena planned like the trainer's without state.
#include "eval/load.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/sharded_checkpoint.h"
#include "data/tokenizer_identity.h"
#include "engine/config_schema.h"
#include "engine/error.h"
#include "kernels/common/attention_head_dims.h"
#include "runtime/backend_registry.h"

namespace fs = std::filesystem;

namespace skew::eval {

std::string checkpoint_label(const CheckpointRef& ref) {
    return ref.import_folder ? fmt::format("{} (a skew import)", ref.dir)
                             : fmt::format("{} ({} step {})", ref.dir, ref.optimizer, ref.step);
}

data::Tokenizer load_run_tokenizer(const CheckpointRef& ref, const Config& run_cfg, const std::string& flag_dir) {
    const std::string own = ref.import_folder ? ImportFolder{ref.dir}.tokenizer() : run_cfg.data.tokenizer_dir;
    const std::string dir = flag_dir.empty() ? own : flag_dir;
    const std::string what = !flag_dir.empty() ? "--tokenizer " + dir
                             : ref.import_folder
                                 ? fmt::format("{} (the import's tokenizer)", dir)
                                 : fmt::format("data.tokenizer_dir {} of {}/config.yaml", dir, ref.run_dir);
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        fail(
            "{}: is a file, not a tokenizer folder (one holding tokenizer.json, tokenizer.model, or encoder.json + "
            "vocab.bpe)",
            what);
    if (!fs::is_directory(dir, ec))
        fail("{}: no such folder{}", what, flag_dir.empty() ? "; give --tokenizer DIR" : "");
    data::Tokenizer tok = data::tokenizer_load(dir);
    data::check_run_tokenizer(ref.run_dir, dir, std::string(choice_name(tok.kind)), what);
    if (tok.vocab_size() > run_cfg.model.vocab_size)
        fail(
            "{}: the tokenizer has {} ids, more than the model's vocabulary (model.vocab_size {} in {}/config.yaml): "
            "its "
            "ids past that have no embedding; give the run's own tokenizer",
            what, tok.vocab_size(), run_cfg.model.vocab_size, ref.run_dir);
    return tok;
}

void check_data_tokenizer(const CheckpointRef& ref, const std::string& data_dir, const std::string& what) {
    if (ref.import_folder) data::check_data_tokenizer(data_dir, ImportFolder{ref.dir}.tokenizer(), what);
    else data::check_run_data_tokenizer(ref.run_dir, data_dir, what);
}

CheckpointRef resolve_checkpoint(const std::string& path, const std::string& optimizer, const std::string& which) {
    std::error_code ec;
    if (fs::exists(path, ec) && !fs::is_directory(path, ec))
        fail("{}: is a file, not a folder (give a run folder, a checkpoint folder or a folder `skew import` wrote)",
             path);
    if (!fs::is_directory(path, ec))
        fail("{}: no such folder (a run folder, a checkpoint folder or a folder `skew import` wrote)", path);
    CheckpointRef r;
    if (is_import_folder(path)) {  // the imported weights as they are: no optimizer, no step
        if (!optimizer.empty())
            fail("--optimizer {}: {} is a folder `skew import` wrote, which holds no optimizer's checkpoints; drop it",
                 optimizer, path);
        if (!which.empty())
            fail("--which {}: {} is a folder `skew import` wrote, which holds one set of weights; drop it", which,
                 path);
        r.dir = r.run_dir = path;
        r.which = "import";
        r.import_folder = true;
        return r;
    }
    if (fs::exists(CheckpointFolder{path}.trainer_state(), ec)) {
        r.dir = path;
        r.run_dir = CheckpointFolder{path}.run().dir;
        r.which = fs::path(path).lexically_normal().filename().string();
        if (r.which.empty()) r.which = fs::path(path).lexically_normal().parent_path().filename().string();
    } else {
        const RunFolder run{path};
        const fs::path ck = run.checkpoints();
        if (!fs::is_directory(ck, ec))
            fail(
                "{}: neither a checkpoint folder (no trainer_state.json), a run folder (no checkpoints/) nor a folder "
                "`skew import` wrote (config.yaml and model.safetensors)",
                path);
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
        const fs::path od = run.optimizer_checkpoints(opt);
        if (!fs::is_directory(od, ec))
            fail("{}: no checkpoints of optimizer '{}' ({} is missing)", path, opt, od.string());
        std::string w = which;
        if (w.empty()) w = checkpoint_exists(run.checkpoint(opt, RunFolder::BEST)) ? RunFolder::BEST : RunFolder::LAST;
        if (!checkpoint_exists(run.checkpoint(opt, w)))
            fail("{}: no '{}' checkpoint of optimizer '{}' ({} has no trainer_state.json)", path, w, opt,
                 run.checkpoint(opt, w));
        r.dir = run.checkpoint(opt, w);
        r.run_dir = path;
        r.which = w;
    }
    const std::string state_path = CheckpointFolder{r.dir}.trainer_state();
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
    const std::string config_path = RunFolder{ref.run_dir}.config();
    std::error_code ec;
    if (!fs::exists(config_path, ec))
        fail("{}: missing; the checkpoint {} must sit in its run folder (RUN/checkpoints/<optimizer>/<which>)",
             config_path, ref.dir);
    Config cfg = load_config(config_path);
    if (!ref.model_config.empty()) {
        check_model_config(cfg, ref.model_config, config_path, ref.dir,
                           "its weights would be read as another model; put config.yaml back as the run wrote it");
    } else if (const std::string hash = config_hash(cfg.resolved_yaml);
               !ref.config_hash.empty() && !config_hash_matches(cfg, config_path, ref.config_hash)) {
        spdlog::warn(
            "{}: not the config the checkpoint {} was trained under (config hash {} vs {}; the checkpoint "
            "predates the model record that would say which setting differs): if config.yaml was edited, "
            "the results are another model's",
            config_path, ref.dir, ref.config_hash, hash);
    }
    return cfg;
}

std::unique_ptr<LoadedModel> load_model(const CheckpointRef& ref, const std::string& backend, int64_t microbatch,
                                        int64_t seq_len) {
    const std::string config_path = RunFolder{ref.run_dir}.config();
    auto lm = std::make_unique<LoadedModel>();
    lm->ref = ref;
    lm->cfg = load_run_config(ref);
    if (seq_len < 1 || seq_len > lm->cfg.model.max_seq_len)
        fail("sequence length {} is outside [1, model.max_seq_len {}] of {}", seq_len, lm->cfg.model.max_seq_len,
             config_path);
    lm->cfg.train.batch_size = microbatch;
    lm->cfg.train.microbatch = microbatch;
    lm->cfg.train.seq_len = seq_len;
    // a head width the CUDA attention kernels do not take runs on the CPU (an import writes runtime.backend: cpu)
    const int64_t hd = lm->cfg.model.head_dim_key;
    lm->backend =
        make_named_backend(backend == "auto" && hd != 0 && !attention_head_dim_supported(hd) ? "cpu" : backend);
    lm->cfg.runtime.backend = backend_choice_of(*lm->backend);
    SessionSpec spec;
    spec.kind = SessionKind::INFERENCE;
    spec.optimizer = lm->cfg.find_optimizer(ref.optimizer);  // activations planned as in its training
    spec.microbatch = microbatch;
    lm->session = open_session(lm->cfg, *lm->backend, spec);
    Session& s = *lm->session;
    if (checkpoint_is_sharded(ref.dir)) {  // a run over several ranks: its shards merged (docs/distributed.md)
        const std::vector<HostTensor> w = read_checkpoint_weights(ref.dir, s.table);
        const std::vector<NamedTensor> dst = weight_tensors(s.arena, lm->backend.get());
        for (size_t i = 0; i < dst.size(); ++i)
            copy_tensor_from_host(dst[i], 0, w[i].data.data(), int64_t(w[i].data.size()));
    } else {
        read_safetensors_into(CheckpointFolder{ref.dir}.weights(), weight_tensors(s.arena));
    }
    lm->model = &s.model;
    return lm;
}

}  // namespace skew::eval
