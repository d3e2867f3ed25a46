// Run metrics: metrics_<optimizer>.json (history + summary, written atomically) and the per-step
// JSONL log (whole-line appends, trimmed to the checkpoint's step on resume). Field meanings:
// docs/training.md; what the paper reports from them: Table 1, Figures 2-3, Appendix C.
#include "train/metrics.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "kernels/cpu/blas_core.h"

namespace skew {

namespace {

// A derived value in JSON: a number; null when not measured (NaN); "inf" / "-inf" when it overflowed
// (exp of a diverged loss), so a diverged run is never read back as one that was not measured.
nlohmann::json number_or_null(double v) {
    if (std::isnan(v)) return nullptr;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

nlohmann::json yaml_to_json(const YAML::Node& n) {
    if (n.IsMap()) {
        nlohmann::json j = nlohmann::json::object();
        for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
        return j;
    }
    if (n.IsSequence()) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& v : n) j.push_back(yaml_to_json(v));
        return j;
    }
    if (n.IsNull()) return nullptr;
    const std::string s = n.Scalar();
    if (n.Tag() == "!") return s;  // quoted in the YAML: a string
    if (s == "true") return true;
    if (s == "false") return false;
    if (!s.empty()) {
        char* end = nullptr;
        errno = 0;
        long long i = std::strtoll(s.c_str(), &end, 10);
        if (*end == '\0' && errno == 0) return int64_t(i);
        double d = std::strtod(s.c_str(), &end);
        if (*end == '\0') return d;
    }
    return s;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Typed field access with errors that name the file and key.
struct Fields {
    const nlohmann::json& j;
    const std::string& source;
    const nlohmann::json& need(const char* key) const {
        if (!j.contains(key)) fail("{}: missing key '{}'", source, key);
        return j[key];
    }
    int64_t integer(const char* key) const {
        need(key);
        return json_int_or(j, key, 0, source);
    }
    double number(const char* key) const {  // null reads as NaN ("not measured"), "inf" as overflowed
        const auto& v = need(key);
        if (v.is_null()) return NO_VALUE;
        if (v == "inf") return std::numeric_limits<double>::infinity();
        if (v == "-inf") return -std::numeric_limits<double>::infinity();
        if (!v.is_number()) fail("{}: '{}' must be a number, \"inf\", \"-inf\" or null, got {}", source, key, v.dump());
        return v.get<double>();
    }
    std::string text(const char* key) const {
        const auto& v = need(key);
        if (!v.is_string()) fail("{}: '{}' must be a string, got {}", source, key, v.dump());
        return v.get<std::string>();
    }
    bool boolean(const char* key) const {
        const auto& v = need(key);
        if (!v.is_boolean()) fail("{}: '{}' must be true or false, got {}", source, key, v.dump());
        return v.get<bool>();
    }
};

}  // namespace

nlohmann::json config_to_json(const std::string& resolved_yaml) {
    try {
        return yaml_to_json(YAML::Load(resolved_yaml));
    } catch (const YAML::Exception& e) {
        fail("resolved config does not parse as YAML: {}", e.what());
    }
}

RunMetrics make_run_metrics(const Config& cfg, const OptimizerConfig& opt, const MemoryPlan& plan) {
    RunMetrics m;
    m.optimizer = opt.name;
    m.type = choice_name(opt.type);
    m.config = cfg.resolved_yaml.empty() ? nlohmann::json::object() : config_to_json(cfg.resolved_yaml);
    m.param_count = plan.param_count;
    m.state_bytes = plan.state_bytes;
    m.paper_state_bytes = plan.paper_state_bytes;
    m.plan_peak_bytes = plan.peak_bytes;
    m.plan_bytes = plan.peak_bytes;
    m.blas_core = cpu::blas_core_name();
    return m;
}

void add_eval(RunMetrics& m, const EvalRecord& e) {
    m.history.push_back(e);
    m.peak_memory_bytes = std::max(m.peak_memory_bytes, e.peak_memory_bytes);
}

void truncate_history(RunMetrics& m, int64_t step) {
    std::erase_if(m.history, [&](const EvalRecord& e) { return e.step > step; });
    m.peak_memory_bytes = 0;
    for (const auto& e : m.history) m.peak_memory_bytes = std::max(m.peak_memory_bytes, e.peak_memory_bytes);
}

int64_t process_peak_rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with("VmHWM:")) return std::strtoll(line.c_str() + 6, nullptr, 10) * 1024;  // "VmHWM:  1234 kB"
    return 0;
}

MetricsSummary summarize(const std::vector<EvalRecord>& history, const RunTotals& totals) {
    MetricsSummary s;
    s.steps = totals.steps;
    s.skipped_steps = totals.skipped_steps;
    s.total_tokens = totals.tokens;
    s.train_seconds = totals.train_seconds;
    s.wall_seconds = totals.wall_seconds;
    s.mean_tokens_per_sec = totals.train_seconds > 0 ? double(totals.tokens) / totals.train_seconds : NO_VALUE;
    if (!history.empty()) {
        s.final_val_ppl = history.back().val_ppl;
        s.final_balance_loss = history.back().val_balance_loss;
    }
    // The best evaluation is the lowest finite validation loss (as the `best` checkpoint is chosen);
    // its perplexity may have overflowed to inf all the same.
    double best_loss = std::numeric_limits<double>::infinity();
    for (const auto& e : history)
        if (std::isfinite(e.val_loss) && e.val_loss < best_loss) {  // first of equal bests
            best_loss = e.val_loss;
            s.best_val_ppl = std::isnan(e.val_ppl) ? std::exp(e.val_loss) : e.val_ppl;
            s.best_val_step = e.step;
        }
    return s;
}

nlohmann::json metrics_to_json(const RunMetrics& m) {
    nlohmann::json hist = nlohmann::json::array();
    for (const auto& e : m.history)
        hist.push_back({
            {"step", e.step},
            {"train_lm_loss", number_or_null(e.train_lm_loss)},
            {"aux_loss", number_or_null(e.aux_loss)},
            {"balance_loss", number_or_null(e.balance_loss)},
            {"z_loss", number_or_null(e.z_loss)},
            {"val_loss", number_or_null(e.val_loss)},
            {"val_ppl", number_or_null(e.val_ppl)},
            {"val_balance_loss", number_or_null(e.val_balance_loss)},
            {"tokens_per_sec", number_or_null(e.tokens_per_sec)},
            {"peak_memory_bytes", e.peak_memory_bytes},
            {"lr", number_or_null(e.lr)},
            {"grad_norm", number_or_null(e.grad_norm)},
        });
    const MetricsSummary& s = m.summary;
    nlohmann::json j = {
        {"optimizer", m.optimizer},
        {"type", m.type},
        {"config", m.config},
        {"param_count", m.param_count},
        {"state_bytes", m.state_bytes},
        {"state_gib", double(m.state_bytes) / GIB},
        {"paper_state_bytes", m.paper_state_bytes},
        {"paper_state_gib", double(m.paper_state_bytes) / GIB},
        {"plan_peak_bytes", m.plan_peak_bytes},
        {"plan_bytes", m.plan_bytes},
        {"blas_core", m.blas_core},
        {"device_overhead_bytes",
         m.device_overhead_bytes >= 0 ? nlohmann::json(m.device_overhead_bytes) : nlohmann::json()},
        {"device_overhead_constant_bytes",
         m.device_overhead_constant_bytes >= 0 ? nlohmann::json(m.device_overhead_constant_bytes) : nlohmann::json()},
        {"unigram_val_ppl", number_or_null(m.unigram_val_ppl)},
        {"peak_memory_bytes", m.peak_memory_bytes},
        {"peak_memory_gib", double(m.peak_memory_bytes) / GIB},
        {"history", hist},
        {"summary",
         {
             {"final_val_ppl", number_or_null(s.final_val_ppl)},
             {"best_val_ppl", number_or_null(s.best_val_ppl)},
             {"best_val_step", s.best_val_step},
             {"final_balance_loss", number_or_null(s.final_balance_loss)},
             {"mean_tokens_per_sec", number_or_null(s.mean_tokens_per_sec)},
             {"total_tokens", s.total_tokens},
             {"train_seconds", s.train_seconds},
             {"wall_seconds", s.wall_seconds},
             {"steps", s.steps},
             {"skipped_steps", s.skipped_steps},
         }},
    };
    // A run the trainer stopped on a fault (non-finite steps past train.max_skipped_steps) says where and why.
    if (!s.stop_reason.empty()) j["summary"]["stopped"] = {{"step", s.stopped_at_step}, {"reason", s.stop_reason}};
    return j;
}

RunMetrics metrics_from_json(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object()) fail("{}: not a JSON object", source);
    Fields f{j, source};
    RunMetrics m;
    m.optimizer = f.text("optimizer");
    m.type = f.text("type");
    m.config = f.need("config");
    m.param_count = f.integer("param_count");
    m.state_bytes = f.integer("state_bytes");
    m.paper_state_bytes = f.integer("paper_state_bytes");
    m.plan_peak_bytes = f.integer("plan_peak_bytes");
    // written since the start-up measurement (older files lack them)
    m.plan_bytes = j.contains("plan_bytes") ? f.integer("plan_bytes") : m.plan_peak_bytes;
    if (j.contains("blas_core")) m.blas_core = f.text("blas_core");
    if (j.contains("device_overhead_bytes") && !j["device_overhead_bytes"].is_null())
        m.device_overhead_bytes = f.integer("device_overhead_bytes");
    if (j.contains("device_overhead_constant_bytes") && !j["device_overhead_constant_bytes"].is_null())
        m.device_overhead_constant_bytes = f.integer("device_overhead_constant_bytes");
    if (j.contains("unigram_val_ppl") && !j["unigram_val_ppl"].is_null())
        m.unigram_val_ppl = f.number("unigram_val_ppl");
    m.peak_memory_bytes = f.integer("peak_memory_bytes");
    const auto& hist = f.need("history");
    if (!hist.is_array()) fail("{}: 'history' must be a list", source);
    for (size_t i = 0; i < hist.size(); ++i) {
        std::string where = fmt::format("{}: history[{}]", source, i);
        if (!hist[i].is_object()) fail("{}: not an object", where);
        Fields h{hist[i], where};
        EvalRecord e;
        e.step = h.integer("step");
        e.train_lm_loss = h.number("train_lm_loss");
        e.aux_loss = h.number("aux_loss");
        e.balance_loss = h.number("balance_loss");
        e.z_loss = h.number("z_loss");
        e.val_loss = h.number("val_loss");
        e.val_ppl = h.number("val_ppl");
        e.val_balance_loss = h.number("val_balance_loss");
        e.tokens_per_sec = h.number("tokens_per_sec");
        e.peak_memory_bytes = h.integer("peak_memory_bytes");
        e.lr = h.number("lr");
        e.grad_norm = h.number("grad_norm");
        m.history.push_back(e);
    }
    const auto& sj = f.need("summary");
    if (!sj.is_object()) fail("{}: 'summary' must be an object", source);
    std::string where = source + ": summary";
    Fields s{sj, where};
    m.summary.final_val_ppl = s.number("final_val_ppl");
    m.summary.best_val_ppl = s.number("best_val_ppl");
    m.summary.best_val_step = s.integer("best_val_step");
    m.summary.final_balance_loss = s.number("final_balance_loss");
    m.summary.mean_tokens_per_sec = s.number("mean_tokens_per_sec");
    m.summary.total_tokens = s.integer("total_tokens");
    m.summary.train_seconds = s.number("train_seconds");
    m.summary.wall_seconds = s.number("wall_seconds");
    m.summary.steps = s.integer("steps");
    m.summary.skipped_steps = s.integer("skipped_steps");
    if (m.summary.steps < 0 || m.summary.skipped_steps < 0 || m.summary.total_tokens < 0)
        fail("{}: 'steps', 'skipped_steps' and 'total_tokens' must be >= 0", where);
    if (sj.contains("stopped")) {  // optional: written only by a run stopped on a fault
        const std::string stop_where = where + ": stopped";
        if (!sj["stopped"].is_object()) fail("{} must be an object with 'step' and 'reason'", stop_where);
        Fields st{sj["stopped"], stop_where};
        m.summary.stopped_at_step = st.integer("step");
        m.summary.stop_reason = st.text("reason");
        if (m.summary.stopped_at_step < 1)
            fail("{}: 'step' must be at least 1, got {}", stop_where, m.summary.stopped_at_step);
    }
    return m;
}

void write_metrics(const std::string& run_dir, const RunMetrics& m) {
    write_file_atomic(RunFolder{run_dir}.metrics(m.optimizer), json_text(metrics_to_json(m)) + "\n");
}

RunMetrics read_metrics(const std::string& path) {
    std::string text = read_text(path);
    nlohmann::json j;
    std::string json_error;
    if (!json_try_parse_strict(text, j, json_error)) fail("{}: not valid JSON: {}", path, json_error);
    return metrics_from_json(j, path);
}

// ---- per-step JSONL log

nlohmann::json step_record_to_json(const StepRecord& r) {
    return {
        {"step", r.step},
        {"lr", number_or_null(r.lr)},
        {"lm_loss", number_or_null(r.lm_loss)},
        {"balance_loss", number_or_null(r.balance_loss)},
        {"z_loss", number_or_null(r.z_loss)},
        {"grad_norm", number_or_null(r.grad_norm)},
        {"tokens_per_sec", number_or_null(r.tokens_per_sec)},
        {"step_ms", number_or_null(r.step_ms)},
        {"fwd_bwd_ms", number_or_null(r.fwd_bwd_ms)},
        {"grad_norm_ms", number_or_null(r.grad_norm_ms)},
        {"optimizer_ms", number_or_null(r.optimizer_ms)},
        {"skipped", r.skipped},
    };
}

StepRecord step_record_from_json(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object()) fail("{}: not a JSON object", source);
    Fields f{j, source};
    StepRecord r;
    r.step = f.integer("step");
    r.lr = f.number("lr");
    r.lm_loss = f.number("lm_loss");
    r.balance_loss = f.number("balance_loss");
    r.z_loss = f.number("z_loss");
    r.grad_norm = f.number("grad_norm");
    r.tokens_per_sec = f.number("tokens_per_sec");
    // Phase times came later: logs written before them lack the keys.
    for (auto [key, field] : {std::pair{"step_ms", &r.step_ms}, std::pair{"fwd_bwd_ms", &r.fwd_bwd_ms},
                              std::pair{"grad_norm_ms", &r.grad_norm_ms}, std::pair{"optimizer_ms", &r.optimizer_ms}})
        if (j.contains(key)) *field = f.number(key);
    r.skipped = f.boolean("skipped");
    return r;
}

namespace {

// The complete lines of a log with their records; a partial last line (no newline) is dropped.
std::vector<std::pair<std::string, StepRecord>> read_lines(const std::string& path) {
    std::vector<std::pair<std::string, StepRecord>> out;
    std::string text = read_text(path);
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) break;  // interrupted mid-line: not a record
        ++line_no;
        std::string line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.empty()) continue;
        std::string where = fmt::format("{}:{}", path, line_no);
        nlohmann::json j;
        std::string json_error;
        if (!json_try_parse_strict(line, j, json_error)) fail("{}: not valid JSON: {}", where, json_error);
        out.emplace_back(std::move(line), step_record_from_json(j, where));
    }
    return out;
}

}  // namespace

StepLog::StepLog(StepLog&& o) noexcept : path(std::move(o.path)), fd(o.fd) { o.fd = -1; }
StepLog& StepLog::operator=(StepLog&& o) noexcept {
    if (this != &o) {
        if (fd >= 0) ::close(fd);
        path = std::move(o.path);
        fd = o.fd;
        o.fd = -1;
    }
    return *this;
}
StepLog::~StepLog() {
    if (fd >= 0) ::close(fd);
}

StepLog open_step_log(const std::string& path, int64_t keep_through) {
    std::string kept;
    if (std::filesystem::exists(path) && keep_through > 0)
        for (const auto& [line, rec] : read_lines(path))
            if (rec.step <= keep_through) kept += line + "\n";
    write_file_atomic(path, kept);
    StepLog log;
    log.path = path;
    log.fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (log.fd < 0) fail("{}: cannot open for appending: {}", path, std::strerror(errno));
    return log;
}

void append_step(StepLog& log, const StepRecord& r) {
    if (log.fd < 0) fail("{}: step log is not open", log.path);
    const std::string line = step_record_to_json(r).dump() + "\n";
    for (;;) {
        ssize_t w = ::write(log.fd, line.data(), line.size());
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) fail("{}: cannot append step {}: {}", log.path, r.step, std::strerror(errno));
        if (size_t(w) != line.size()) fail("{}: short write appending step {} (disk full?)", log.path, r.step);
        return;
    }
}

void sync_step_log(StepLog& log) {
    if (log.fd >= 0 && ::fsync(log.fd) != 0) fail("{}: fsync failed: {}", log.path, std::strerror(errno));
}

std::vector<StepRecord> read_step_log(const std::string& path) {
    std::vector<StepRecord> out;
    for (auto& [line, rec] : read_lines(path)) out.push_back(rec);
    return out;
}

std::string metric_text(double v, int decimals, const std::string& missing) {
    if (std::isnan(v)) return missing;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (std::fabs(v) >= 1e6) return fmt::format("{:.3e}", v);
    return fmt::format("{:.{}f}", v, decimals);
}

bool run_diverged(const RunMetrics& m) {
    if (m.history.empty()) return false;
    const EvalRecord& last = m.history.back();
    if (std::isinf(last.val_ppl) || std::isinf(last.val_loss)) return true;
    int64_t vocab = 0;
    if (m.config.is_object() && m.config.contains("model") && m.config["model"].is_object() &&
        m.config["model"].contains("vocab_size") && m.config["model"]["vocab_size"].is_number_integer())
        vocab = m.config["model"]["vocab_size"].get<int64_t>();
    return vocab > 1 && std::isfinite(last.val_loss) && last.val_loss > 2.0 * std::log(double(vocab));
}

}  // namespace skew
