// Config validation: every rule of the schema refuses bad input with a message naming the key and
// the line (engine/config.cpp), and --set overrides follow the same rules.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/config.h"
#include "engine/config_schema.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    try {
        load_config_text(yaml, "test.yaml", overrides);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("the paper's config loads with Appendix A values") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    CHECK(c.model.d_model == 4096);
    CHECK(c.model.n_heads == 32);
    CHECK(c.model.n_kv_heads == 8);
    CHECK(c.model.n_experts == 128);
    CHECK(c.model.top_k == 2);
    CHECK(c.model.padded_vocab_size == 50304);
    CHECK(c.model.z_loss_coef == Approx(1e-4));
    CHECK(c.train.batch_size == 64);
    CHECK(c.train.microbatch == 8);
    CHECK(c.train.grad_accum_steps() == 8);
    REQUIRE(c.optimizers.size() == 4);
    CHECK(c.optimizers[0].name == "skewadam");
    CHECK(c.optimizers[2].name == "lion");
    CHECK(c.optimizers[2].lr == Approx(1e-4));
    CHECK(c.optimizers[3].lr == Approx(0.02));
    CHECK(c.optimizers[0].tiers[int(Tier::ROUTER)].second_moment == SecondMomentKind::FULL);
    CHECK(c.optimizers[0].tiers[int(Tier::EXPERTS)].momentum == MomentumKind::NONE);
}

TEST_CASE("tiny config loads") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml");
    CHECK(c.model.d_model == 64);
    CHECK(c.train.microbatch == 4);
}

TEST_CASE("an unknown key names file, line, column and the nearest valid key") {
    std::string e = error_of("model:\n  d_model: 64\n  n_head: 4\n");
    CHECK(e.find("test.yaml:3:3") != std::string::npos);
    CHECK(e.find("model.n_head") != std::string::npos);
    CHECK(e.find("did you mean 'n_heads'") != std::string::npos);
}

TEST_CASE("an unknown section is refused with a suggestion") {
    std::string e = error_of("modle:\n  d_model: 64\n");
    CHECK(e.find("test.yaml:1:1") != std::string::npos);
    CHECK(e.find("did you mean 'model'") != std::string::npos);
}

TEST_CASE("an unknown optimizer key is refused with a suggestion") {
    std::string e = error_of("optimizers:\n  skewadam:\n    lrr: 0.1\n");
    CHECK(e.find("test.yaml:3:5") != std::string::npos);
    CHECK(e.find("did you mean 'lr'") != std::string::npos);
    std::string t = error_of("optimizers:\n  skewadam:\n    tiers:\n      backbon: {momentum: none}\n");
    CHECK(t.find("did you mean 'backbone'") != std::string::npos);
}

TEST_CASE("a duplicated key is an error naming it and both lines") {
    std::string e = error_of("model:\n  d_model: 64\n  n_heads: 4\n  d_model: 128\n");
    CHECK(e.find("duplicated key 'model.d_model'") != std::string::npos);
    CHECK(e.find("test.yaml:4:3") != std::string::npos);
    CHECK(e.find("line 2") != std::string::npos);
}

TEST_CASE("wrong types name the key and what was expected") {
    CHECK(error_of("model:\n  d_model: big\n").find("model.d_model: expected an integer, got 'big'") !=
          std::string::npos);
    CHECK(error_of("model:\n  d_model: [1, 2]\n").find("expected integer, got a list") != std::string::npos);
    CHECK(error_of("optimizers:\n  adamw:\n    nesterov: 3\n").find("expected true or false") != std::string::npos);
    CHECK(error_of("train:\n  optimizers: skewadam\n").find("expected list of strings") != std::string::npos);
    CHECK(error_of("model:\n  init_std: abc\n").find("expected a number") != std::string::npos);
}

TEST_CASE("numbers in exponent form are numbers") {
    Config c = load_config_text("optimizers:\n  skewadam:\n    lr: 3e-4\ntrain:\n  steps: 1e4\n", "t.yaml");
    CHECK(c.find_optimizer("skewadam")->lr == Approx(3e-4));
    CHECK(c.train.steps == 10000);
    CHECK(error_of("train:\n  steps: 1.5e0\n").find("expected an integer") != std::string::npos);
}

TEST_CASE("a negative count is refused, not wrapped around") {
    std::string e = error_of("model:\n  n_experts: -8\n");
    CHECK(e.find("model.n_experts: -8 is out of range: must be >= 1") != std::string::npos);
    CHECK(e.find("test.yaml:2:14") != std::string::npos);
    CHECK(error_of("train:\n  steps: 99999999999999999999999\n").find("out of range") != std::string::npos);
}

TEST_CASE(".inf and .nan are refused where a finite value is required") {
    CHECK(error_of("optimizers:\n  adamw:\n    lr: .inf\n").find("finite number is required") != std::string::npos);
    CHECK(error_of("model:\n  init_std: .nan\n").find("finite number is required") != std::string::npos);
    CHECK(error_of("optimizers:\n  adamw:\n    lr: 1e999\n").find("finite number is required") != std::string::npos);
}

TEST_CASE("a negative learning rate is refused") {
    CHECK(error_of("optimizers:\n  adamw:\n    lr: -0.001\n")
              .find("optimizers.adamw.lr: -0.001 is out of range: must be > 0") != std::string::npos);
}

TEST_CASE("inconsistent heads and experts name the key and the rule") {
    std::string e = error_of("model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 3\n");
    CHECK(e.find("test.yaml:4:15") != std::string::npos);
    CHECK(e.find("n_heads (4) must be divisible by n_kv_heads (3)") != std::string::npos);
    CHECK(error_of("model:\n  d_model: 65\n  n_heads: 4\n  n_kv_heads: 2\n")
              .find("d_model (65) must be divisible by n_heads (4)") != std::string::npos);
    CHECK(error_of("model:\n  n_experts: 2\n  top_k: 3\n").find("top_k (3) must not exceed n_experts (2)") !=
          std::string::npos);
    CHECK(error_of("model:\n  n_blocks: 2\n  moe_blocks: [2]\n").find("block index 2 is out of range") !=
          std::string::npos);
    CHECK(error_of("model:\n  vocab_size: 60000\n").find("padded_vocab_size (50304) must be >= vocab_size (60000)") !=
          std::string::npos);
    CHECK(error_of("train:\n  batch_size: 64\n  microbatch: 7\n").find("microbatch (7) must divide batch_size (64)") !=
          std::string::npos);
    CHECK(error_of("train:\n  seq_len: 512\n").find("seq_len (512) must not exceed model.max_seq_len (256)") !=
          std::string::npos);
}

TEST_CASE("enumerations list the allowed values") {
    std::string e = error_of("optimizers:\n  adamw:\n    rounding: stochastik\n");
    CHECK(e.find("'stochastik' is not one of stochastic, dithered, nearest") != std::string::npos);
    CHECK(e.find("did you mean 'stochastic'") != std::string::npos);
}

TEST_CASE("overrides apply after the file and follow the same rules") {
    Config c = load_config_text("train:\n  steps: 5\n", "t.yaml",
                                {"train.steps=100", "optimizers.lion.lr=3e-5", "train.optimizers=[lion, adamw]"});
    CHECK(c.train.steps == 100);
    REQUIRE(c.optimizers.size() == 2);
    CHECK(c.optimizers[0].name == "lion");
    CHECK(c.optimizers[0].lr == Approx(3e-5));
    CHECK(error_of("train:\n  steps: 5\n", {"train.stepz=5"})
              .find("--set train.stepz=5: unknown key 'train.stepz'; did you mean 'train.steps'") != std::string::npos);
    CHECK(error_of("train:\n  steps: 5\n", {"model.n_experts=-1"})
              .find("--set model.n_experts=-1: model.n_experts: -1 is out of range") != std::string::npos);
    CHECK(error_of("train:\n  steps: 5\n", {"model.n_kv_heads=5"}).find("--set model.n_kv_heads=5: model.n_kv_heads") !=
          std::string::npos);
    CHECK(error_of("train:\n  steps: 5\n", {"train.steps"}).find("expected key=value") != std::string::npos);
}

TEST_CASE("a custom optimizer needs a type, and unknown optimizer names are refused") {
    Config c = load_config_text(
        "optimizers:\n  my-adam:\n    type: adamw\n    lr: 1e-4\ntrain:\n  optimizers: [my-adam, skewadam]\n",
        "t.yaml");
    REQUIRE(c.optimizers.size() == 2);
    CHECK(c.optimizers[0].type == OptimizerType::ADAMW);
    CHECK(c.optimizers[0].lr == Approx(1e-4));
    CHECK(error_of("optimizers:\n  mine:\n    lr: 1e-4\n").find("needs a `type:`") != std::string::npos);
    CHECK(error_of("train:\n  optimizers: [adamw, skewadamm]\n").find("did you mean 'skewadam'") != std::string::npos);
}

TEST_CASE("tiers under an optimizer that is not SkewAdam is an error naming the file, optimizer and key") {
    const std::string yaml =
        "optimizers:\n  my-adam:\n    type: adamw\n    lr: 1e-4\n    tiers:\n      router: {momentum: fp32}\n";
    CHECK(error_of(yaml) ==
          "test.yaml:6:26: optimizers.my-adam.tiers.router.momentum: tiers.* is a SkewAdam setting, but optimizer "
          "'my-adam' "
          "has type adamw, which ignores it; remove the key or set `type: skewadam`");
    // A built-in of another type, and a --set override, are held to the same rule.
    CHECK(error_of("optimizers:\n  lion:\n    tiers:\n      backbone:\n        weight_decay: 0.1\n")
              .find("test.yaml:5:23: optimizers.lion.tiers.backbone.weight_decay: tiers.* is a SkewAdam setting, but "
                    "optimizer 'lion' has type lion") != std::string::npos);
    CHECK(error_of("train:\n  steps: 5\n", {"optimizers.adamw.tiers.experts.second_moment=full"})
              .find("--set optimizers.adamw.tiers.experts.second_moment=full: "
                    "optimizers.adamw.tiers.experts.second_moment: "
                    "tiers.* is a SkewAdam setting, but optimizer 'adamw' has type adamw") != std::string::npos);
    // Under SkewAdam (by name or by type) tiers are read.
    Config c = load_config_text(
        "optimizers:\n  mine:\n    type: skewadam\n    tiers:\n      router: {momentum: fp32}\n"
        "train:\n  optimizers: [mine]\n",
        "t.yaml");
    CHECK(c.optimizers[0].tiers[int(Tier::ROUTER)].momentum == MomentumKind::FP32);
    CHECK(error_of("train:\n  steps: 5\n", {"optimizers.skewadam.tiers.router.momentum=fp32"}) == "");
    // A resolved config lists every optimizer key, unused tiers at their defaults: it reloads (resume),
    // but not with a tier changed.
    const std::string resolved = load_config_text("train:\n  optimizers: [adamw]\n", "t.yaml").resolved_yaml;
    REQUIRE(resolved.find("tiers.router.momentum: none") != std::string::npos);
    CHECK(load_config_text(resolved, "resolved.yaml").optimizers[0].type == OptimizerType::ADAMW);
    std::string changed = resolved;
    changed.replace(changed.find("tiers.router.momentum: none"), 27, "tiers.router.momentum: fp32");
    CHECK(error_of(changed).find("optimizers.adamw.tiers.router.momentum: tiers.* is a SkewAdam setting") !=
          std::string::npos);
}

TEST_CASE("presets reproduce the paper's Table 3 policies") {
    CHECK(builtin_optimizer("skewadam-expert-momentum").tiers[int(Tier::EXPERTS)].momentum == MomentumKind::FP32);
    CHECK(builtin_optimizer("skewadam-factored-router").tiers[int(Tier::ROUTER)].second_moment ==
          SecondMomentKind::FACTORED);
    OptimizerConfig u = builtin_optimizer("uniform");
    for (const auto& t : u.tiers) {
        CHECK(t.momentum == MomentumKind::FP32);
        CHECK(t.second_moment == SecondMomentKind::FACTORED);
    }
    CHECK_THROWS_AS(builtin_optimizer("sgd"), Error);
}

TEST_CASE("YAML syntax errors name the line") {
    std::string e = error_of("model:\n  d_model: [64\n");
    CHECK(e.find("YAML syntax error") != std::string::npos);
    CHECK(e.find("test.yaml:") != std::string::npos);
}

TEST_CASE("a missing config file is named") {
    try {
        load_config("/nonexistent/x.yaml");
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(std::string(e.what()).find("/nonexistent/x.yaml: cannot open") != std::string::npos);
    }
}

namespace {
std::string file_error_of(const std::string& path) {
    try {
        load_config(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("an empty or comment-only config is an error naming the file instead of the paper's defaults") {
    CHECK(error_of("").find("test.yaml: has no settings") != std::string::npos);
    CHECK(error_of("# only a comment\n\n   \n# another\n").find("test.yaml: has no settings") != std::string::npos);
    CHECK(error_of("---\n").find("test.yaml: has no settings") != std::string::npos);
    CHECK(file_error_of("/dev/null").find("/dev/null: has no settings") != std::string::npos);
}

TEST_CASE("a config of several YAML documents is an error naming the line of the second") {
    std::string e = error_of("model:\n  d_model: 64\n---\ntrain:\n  steps: 5\n");
    CHECK(e.find("test.yaml:3: a second YAML document") != std::string::npos);
    std::string trailing = error_of("---\nmodel:\n  d_model: 64\n---\n# nothing\n");
    CHECK(trailing.find("test.yaml:4: a second YAML document") != std::string::npos);
}

TEST_CASE("YAML aliases are refused at their line (a self-referencing one loaded as a cycle)") {
    CHECK(error_of("model: &m {d_model: *m}\n").find("test.yaml:1:") != std::string::npos);
    CHECK(error_of("model: &m {d_model: *m}\n").find("YAML alias (*name) in a config") != std::string::npos);
    CHECK(error_of("a: &x [*x]\n").find("aliases and anchors are not supported") != std::string::npos);
    CHECK(error_of("model:\n  d_model: &w 64\n  d_ff: *w\n").find("test.yaml:3:") != std::string::npos);
}

TEST_CASE("a lone sign is not an integer") {
    CHECK(error_of("runtime:\n  threads: +\n").find("expected an integer, got '+'") != std::string::npos);
    CHECK(error_of("train:\n  microbatch: +\n").find("train.microbatch: expected an integer, got '+'") !=
          std::string::npos);
}

TEST_CASE("a config that is not text or is too large is refused naming the file and the size") {
    std::string zero = file_error_of("/dev/zero");
    CHECK(zero.find("/dev/zero: ") != std::string::npos);
    CHECK(zero.find("not a text file") != std::string::npos);
    const std::string big = (skew::test::test_temp_root() / "skew-test-big-config.yaml").string();
    {
        std::ofstream f(big);
        f << "train:\n  steps: 5\n";
        const std::string comment = "# " + std::string(1022, 'x') + "\n";
        for (int i = 0; i < 5 * 1024; i++) f << comment;
    }
    const auto size = std::filesystem::file_size(big);
    std::string e = file_error_of(big);
    CHECK(e.find(big + ": " + std::to_string(size) + " bytes") != std::string::npos);
    CHECK(e.find("at most 4 MiB") != std::string::npos);
    std::filesystem::remove(big);
}

TEST_CASE("an integer beyond the 64-bit range is out of the key's range rather than not an integer") {
    CHECK(error_of("model:\n  d_model: 1e30\n")
              .find("model.d_model: 1e30 is out of range: must be >= 1 and <= 1048576") != std::string::npos);
    CHECK(error_of("train:\n  steps: 99999999999999999999\n")
              .find("train.steps: 99999999999999999999 is out of range: must be >= 1 and <= 1000000000000") !=
          std::string::npos);
    CHECK(error_of("model:\n  d_model: -1e30\n").find("out of range: must be >= 1") != std::string::npos);
    CHECK(error_of("model:\n  d_model: 64.5\n").find("expected an integer, got '64.5'") != std::string::npos);
}

TEST_CASE("bytes that are not printable UTF-8 are escaped in messages") {
    std::string e = error_of("runtime:\n  backend: c\xff\x01pu\n");
    CHECK(e.find("'c\\xFF\\x01pu' is not one of") != std::string::npos);
    CHECK(e.find('\xff') == std::string::npos);
    std::string o = error_of("train:\n  steps: 5\n", {"train.steps=1\xfe"});
    CHECK(o.find("--set train.steps=1\\xFE") != std::string::npos);
    CHECK(o.find('\xfe') == std::string::npos);
    std::string k = error_of("model:\n  d_m\xe9odel: 64\n");
    CHECK(k.find("d_m\\xE9odel") != std::string::npos);
    CHECK(error_of("runtime:\n  backend: caf\xc3\xa9\n").find("'caf\xc3\xa9'") !=
          std::string::npos);  // valid UTF-8 stays
}

TEST_CASE("an empty path is an error naming the key") {
    CHECK(error_of("train:\n  steps: 5\n", {"runtime.out_dir=\"\""}).find("runtime.out_dir: the path is empty") !=
          std::string::npos);
    CHECK(error_of("train:\n  steps: 5\n", {"data.dir=''"}).find("data.dir: the path is empty") != std::string::npos);
    CHECK(error_of("data:\n  tokenizer_dir: \"\"\n").find("test.yaml:2:18: data.tokenizer_dir: the path is empty") !=
          std::string::npos);
}

TEST_CASE("the resolved config reloads to the same values") {
    Config a = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml", {"train.steps=77"});
    Config b = load_config_text(a.resolved_yaml, "resolved.yaml");
    CHECK(b.train.steps == 77);
    CHECK(b.resolved_yaml == a.resolved_yaml);
}

namespace {
// Every leaf key of a YAML tree as "a.b.c"; keys under `optimizers:` become "optimizers.<name>.key".
void leaf_keys(const YAML::Node& n, const std::string& prefix, std::vector<std::string>& out) {
    if (!n.IsMap()) {
        out.push_back(prefix);
        return;
    }
    for (const auto& kv : n) {
        std::string key = kv.first.as<std::string>();
        if (prefix == "optimizers") key = "<name>";
        leaf_keys(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
}
}  // namespace

TEST_CASE("the config reference (docs/config-reference.md) lists every key the shipped configs use") {
    // The expectation comes from files people wrote (configs/*.yaml), not from the schema that
    // generates the reference: a key a config uses but the reference lacks fails here.
    const std::string ref = config_reference_markdown();
    int64_t keys = 0;
    for (const auto& e : std::filesystem::directory_iterator(std::string(SKEW_SOURCE_DIR) + "/configs")) {
        if (e.path().extension() != ".yaml") continue;
        std::vector<std::string> leaves;
        leaf_keys(YAML::LoadFile(e.path().string()), "", leaves);
        for (const std::string& k : leaves) {
            INFO(e.path().filename().string() << ": " << k);
            CHECK(ref.find("`" + k + "`") != std::string::npos);
            ++keys;
        }
    }
    CHECK(keys > 20);
    CHECK(ref.find("`optimizers.<name>.tiers.router.second_moment`") != std::string::npos);
}

namespace {
// The text of `bound` moved by `steps` units in the last place of the key's type: the next
// integers (in 64-bit integer arithmetic), or relative steps of 1e-9 for numbers (far above a
// double's resolution, far below any key's meaningful scale), with 17 significant digits.
std::string bound_text(const KeySpec& k, double bound, int steps) {
    if (k.type != KeyType::FLOAT) return fmt::format("{}", int64_t(bound) + steps);
    return fmt::format("{:.17g}", bound + steps * 1e-9 * std::max(1.0, std::fabs(bound)));
}

struct Probe {
    std::string value;
    bool inside;
    std::string what;
};

// For each finite end of the key's interval: a value just inside and one just outside, from the
// spec's bounds and open/closed flags alone.
std::vector<Probe> boundary_probes(const KeySpec& k) {
    std::vector<Probe> p;
    if (k.min > -1e299) {
        p.push_back({bound_text(k, k.min, k.min_exclusive ? 1 : 0), true, "just inside the lower end"});
        p.push_back({bound_text(k, k.min, k.min_exclusive ? 0 : -1), false, "just outside the lower end"});
    }
    if (k.max < 1e299) {
        p.push_back({bound_text(k, k.max, k.max_exclusive ? -1 : 0), true, "just inside the upper end"});
        p.push_back({bound_text(k, k.max, k.max_exclusive ? 0 : 1), false, "just outside the upper end"});
    }
    return p;
}

// Run one probe of `key` through --set; a value inside must pass the range check (another rule,
// e.g. n_kv_heads dividing n_heads, may still refuse it, but never as out of range), a value
// outside must be refused naming the key and the interval.
void check_probe(const KeySpec& k, const std::string& key, const Probe& p, bool list) {
    const std::string value = list ? "[" + p.value + "]" : p.value;
    const std::string e = error_of("train:\n  steps: 5\n", {key + "=" + value});
    INFO(key << " = " << value << " (" << p.what << " of " << key_range_text(k)
             << "): " << (e.empty() ? "accepted" : e));
    if (p.inside) {
        CHECK(e.find("out of range: must be") == std::string::npos);
    } else {
        CHECK(e.find(key) != std::string::npos);
        CHECK(e.find("out of range: must be " + key_range_text(k)) != std::string::npos);
    }
}
}  // namespace

TEST_CASE("every numeric key accepts values just inside its interval and refuses values just outside") {
    int64_t probes = 0;
    for (const KeySpec& k : section_key_specs()) {
        if (k.type != KeyType::INT && k.type != KeyType::FLOAT && k.type != KeyType::INT_LIST) continue;
        for (const Probe& p : boundary_probes(k)) {
            check_probe(k, k.path, p, k.type == KeyType::INT_LIST);
            ++probes;
        }
    }
    for (const KeySpec& k : optimizer_key_specs()) {
        if (k.type != KeyType::INT && k.type != KeyType::FLOAT) continue;
        // tier keys belong to the SkewAdam family; the others are probed on an AdamW entry
        const std::string name = k.path.rfind("tiers.", 0) == 0 ? "skewadam" : "adamw";
        for (const Probe& p : boundary_probes(k)) {
            check_probe(k, "optimizers." + name + "." + k.path, p, false);
            ++probes;
        }
    }
    INFO(probes << " probes");
    CHECK(probes > 100);
}

TEST_CASE(
    "decay betas are at least 0 and below 1: a beta of 1 is refused before it divides by a zero bias correction") {
    for (const char* key : {"beta1", "beta2", "muon_momentum"}) {
        const std::string e = error_of("train:\n  steps: 5\n", {fmt::format("optimizers.adamw.{}=1", key)});
        INFO(e);
        CHECK(e.find(fmt::format("optimizers.adamw.{}: 1 is out of range: must be >= 0 and < 1", key)) !=
              std::string::npos);
        CHECK(error_of("train:\n  steps: 5\n", {fmt::format("optimizers.adamw.{}=0.999999", key)}).empty());
    }
    CHECK(error_of("optimizers:\n  adamw:\n    beta1: 1\n")
              .find("test.yaml:3:12: optimizers.adamw.beta1: 1 is out of range") != std::string::npos);
}

TEST_CASE("a --set key= with nothing after '=' says so for every key type, never 'remove the quotes'") {
    const std::string base = "train:\n  steps: 5\n";
    const std::string e = error_of("train:\n  steps: 5\n", {"model.d_model="});
    CHECK(e == "--set model.d_model=: no value after '='; give one, e.g. --set model.d_model=4096");
    CHECK(error_of(base, {"data.dir="}).find("--set data.dir=: no value after '='; give one, e.g. --set data.dir=") ==
          0);
    CHECK(error_of(base, {"optimizers.adamw.lr="}) ==
          "--set optimizers.adamw.lr=: no value after '='; give one after it");
    CHECK(error_of(base, {"model.bogus="}).find("unknown key 'model.bogus'") != std::string::npos);
    // quotes the user wrote are still called quotes
    CHECK(error_of(base, {"model.d_model=\"64\""}).find("got the string \"64\" (remove the quotes)") !=
          std::string::npos);
    CHECK(error_of(base, {"model.d_model=!!str 64"}).find("(remove the !!str tag)") != std::string::npos);
}

TEST_CASE("a YAML tag ('!x') is refused as a tag, in --set and in a file, with the quoting that makes it text") {
    const std::string base = "train:\n  steps: 5\n";
    CHECK(
        error_of(base, {"data.dir=!x"}) ==
        "--set data.dir=!x: data.dir: '!x' is a YAML tag (a value starting with '!' names a type), which a config does "
        "not use; for the text, quote it: --set 'data.dir=\"!x\"'");
    CHECK(error_of("data:\n  dir: !x\n").find("test.yaml:2:8: data.dir: '!x' is a YAML tag") == 0);
    CHECK(error_of("data:\n  dir: !x\n").find("quote it: dir: \"!x\"") != std::string::npos);
    CHECK(error_of("data:\n  dir: !x runs\n").find("'!x runs' is a YAML tag") != std::string::npos);  // not "runs"
    CHECK(error_of(base, {"train.optimizers=[adamw, !x]"}).find("train.optimizers[1]: '!x' is a YAML tag") !=
          std::string::npos);
    CHECK(error_of(base, {"data.dir=\"!x\""}).empty());  // quoted: the text "!x"
}

TEST_CASE("YAML nested past yaml-cpp's depth limit names the nesting and its line, not 'bad file'") {
    std::string deep = "model:\n  d_model:\n";
    for (int i = 0; i < 600; ++i) deep += std::string(size_t(i) + 4, ' ') + "-\n";
    const std::string e = error_of(deep);
    CHECK(e.find("bad file") == std::string::npos);
    // the top mapping, model's, then 497 lists: the 497th opens on line 2 + 497
    CHECK(e.find("test.yaml:499:") == 0);
    CHECK(e.find("YAML nested too deeply: 499 lists or mappings inside one another here") != std::string::npos);
    const std::string flow = error_of("model:\n  d_model: " + std::string(3000, '{'));
    CHECK(flow.find("test.yaml:2:") == 0);
    CHECK(flow.find("YAML nested too deeply") != std::string::npos);
    const std::string set = error_of("train:\n  steps: 5\n", {"model.d_model=" + std::string(3000, '[')});
    CHECK(set.find("--set model.d_model: YAML nested too deeply") == 0);
}

// model.head_dim, model.qk_norm, model.attention_bias (docs/architectures.md): one test per rule.
TEST_CASE(
    "model.head_dim absent or 0 is d_model / n_heads, and given it is the head width and lifts d_model % n_heads") {
    const Config plain = load_config_text("model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 2\n", "test.yaml");
    CHECK(plain.model.head_dim_key == 0);
    CHECK(plain.model.head_dim() == 16);
    CHECK(plain.model.qk_norm == QkNorm::NONE);
    CHECK_FALSE(plain.model.attention_bias);
    // Qwen3-30B-A3B's attention: 32 heads of 128 over d_model 2048 (q 4096 wide)
    const Config qwen = load_config_text(
        "model:\n  d_model: 2048\n  n_heads: 32\n  n_kv_heads: 4\n  head_dim: 128\n  qk_norm: per_head\n", "test.yaml");
    CHECK(qwen.model.head_dim() == 128);
    CHECK(qwen.model.qk_norm == QkNorm::PER_HEAD);
    // d_model 72 is not a multiple of 5 heads: allowed when head_dim is given, refused when it is not
    CHECK(error_of("model:\n  d_model: 72\n  n_heads: 5\n  n_kv_heads: 1\n  head_dim: 32\n").empty());
    CHECK(error_of("model:\n  d_model: 72\n  n_heads: 5\n  n_kv_heads: 1\n")
              .find("d_model (72) must be divisible by "
                    "n_heads (5)") != std::string::npos);
}

TEST_CASE("model.head_dim must be one the CUDA attention kernels take, unless the run is on the CPU") {
    const std::string e = error_of("model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 24\n");
    CHECK(e.find("test.yaml:5:13") != std::string::npos);
    CHECK(e.find("model.head_dim: head_dim (24) must be 16, 32, 64 or 128") != std::string::npos);
    CHECK(error_of("model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 24\nruntime:\n  backend: cpu\n")
              .empty());
    // the key's range: not negative
    CHECK(error_of("model:\n  head_dim: -16\n").find("model.head_dim") != std::string::npos);
}

TEST_CASE("model.head_dim must be even with rope") {
    const std::string yaml =
        "model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 23\nruntime:\n  backend: cpu\n";
    CHECK(error_of(yaml).empty());  // learned positions: any width on the CPU
    const std::string e = error_of(yaml, {"model.positions=rope"});
    CHECK(e.find("model.head_dim: rope pairs lane i with lane i + head_dim/2: head_dim (23) must be even") !=
          std::string::npos);
    CHECK(e.find("--set model.positions=rope") != std::string::npos);  // the option that broke the rule is named
}

TEST_CASE("model.qk_norm takes none, full or per_head, and model.attention_bias a bool") {
    CHECK(load_config_text("model:\n  qk_norm: full\n", "test.yaml").model.qk_norm == QkNorm::FULL);
    const std::string e = error_of("model:\n  qk_norm: per-head\n");
    CHECK(e.find("model.qk_norm") != std::string::npos);
    CHECK(e.find("per_head") != std::string::npos);  // the allowed values are listed
    CHECK(load_config_text("model:\n  attention_bias: true\n", "test.yaml").model.attention_bias);
    CHECK(error_of("model:\n  attention_bias: 2\n").find("model.attention_bias") != std::string::npos);
}
