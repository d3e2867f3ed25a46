// Faults found by replaying public bug reports of other training stacks: duplicate JSON keys (one
// safetensors tensor named twice, in either order), non-finite weights or optimizer state in a
// checkpoint, trainable tensors with an identically zero gradient, derived values that overflow
// (kept apart from "not measured" and never chosen as "best"), and hints that propose a value.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <regex>

#include "checkpoint/checkpoint.h"
#include "engine/config_hint.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "train/faults.h"
#include "train/metrics.h"
#include "train_test_util.h"

using namespace skew;
using namespace train_test;

namespace {

// A safetensors file from a header text and a data region (8-byte little-endian header length).
std::string safetensors_bytes(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
    return out + header + data;
}

}  // namespace

TEST_CASE("strict JSON refuses a key named twice, naming the key and its object") {
    CHECK(json_parse_strict(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]})", "ok.json")["b"]["a"] == 2);
    CHECK(error_of([] { json_parse_strict(R"({"a": 1, "a": 2})", "top.json"); }) ==
          "top.json: duplicate key 'a' in the top-level object");
    CHECK(error_of([] { json_parse_strict(R"({"x": {"k": 1, "k": 1}})", "nested.json"); }) ==
          "nested.json: duplicate key 'k' in 'x'");
    CHECK(error_of([] { json_parse_strict(R"({"s": [{"f": 1}, {"f": 1, "f": 2}]})", "list.json"); }) ==
          "list.json: duplicate key 'f' in 's[1]'");
    CHECK_THAT(error_of([] { json_parse_strict("{\"a\": ", "bad.json"); }),
               Catch::StartsWith("bad.json: parse error at line 1, column 7: ") && !Catch::Contains("json.exception"));
    // Nesting: 128 levels parse; deeper is refused before nlohmann's recursive copy or dump sees it.
    CHECK(json_parse_strict(std::string(128, '[') + std::string(128, ']'), "ok.json").is_array());
    CHECK_THAT(error_of([] {
                   json_parse_strict("{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
                                     "deep.json");
               }),
               Catch::StartsWith("deep.json: nested deeper than 128 levels at 'a[0][0][0]"));
}

TEST_CASE("a JSON field of the wrong type is one error naming the file and the key, never nlohmann's type_error") {
    const auto j = nlohmann::json::parse(R"({"s": "eot", "n": 3, "big": 18446744073709551615, "f": 1.5, "x": [1]})");
    CHECK(json_string_or(j, "s", "none", "m.json") == "eot");
    CHECK(json_string_or(j, "absent", "none", "m.json") == "none");
    CHECK(json_int_or(j, "n", -1, "m.json") == 3);
    CHECK(json_int_or(j, "absent", -1, "m.json") == -1);
    CHECK(error_of([&] { json_string_or(j, "n", "", "m.json"); }) == "m.json: 'n' must be a string, got 3");
    CHECK(error_of([&] { json_int_or(j, "s", 0, "m.json"); }) == "m.json: 's' must be an integer, got \"eot\"");
    CHECK(error_of([&] { json_int_or(j, "f", 0, "m.json"); }) == "m.json: 'f' must be an integer, got 1.5");
    CHECK(error_of([&] { json_int_or(j, "big", 0, "m.json"); }) ==
          "m.json: 'big' must be an integer, got 18446744073709551615");
    CHECK(error_of([&] { json_int_or(j["x"], "n", 0, "m.json"); }) == "m.json: not a JSON object");
}

TEST_CASE("trainer_state.json's 'extra' must be an object with a non-negative integer optimizer_t") {
    TrainerState s;
    s.optimizer = "lion";
    s.step = 4;
    auto j = trainer_state_to_json(s);
    j["extra"] = {{"optimizer_t", 3}};
    CHECK(trainer_state_from_json(j, "t.json").extra["optimizer_t"] == 3);
    j["extra"] = 5;
    CHECK(error_of([&] { trainer_state_from_json(j, "t.json"); }) == "t.json: 'extra' must be an object, got 5");
    j["extra"] = {{"optimizer_t", "three"}};
    CHECK(error_of([&] { trainer_state_from_json(j, "t.json"); }) ==
          "t.json 'extra': 'optimizer_t' must be an integer, got \"three\"");
    j["extra"] = {{"optimizer_t", -2}};
    CHECK(error_of([&] { trainer_state_from_json(j, "t.json"); }) == "t.json: extra.optimizer_t must be >= 0, got -2");
    // Counters a resume increments: negative, wrapped or beyond any run is refused before they overflow.
    j = trainer_state_to_json(s);
    j["tokens_seen"] = -1;
    CHECK(error_of([&] { trainer_state_from_json(j, "t.json"); }) ==
          "t.json: step, data_position, skipped_steps and tokens_seen must be >= 0");
    j["tokens_seen"] = INT64_MAX;
    CHECK(error_of([&] { trainer_state_from_json(j, "t.json"); }) ==
          "t.json: 'tokens_seen' is 9223372036854775807, beyond any run (at most 2^53)");
    j = trainer_state_to_json(s);
    j["data_position"] = uint64_t(1) << 63;
    CHECK(error_of([&] { trainer_state_from_json(j, "t.json"); }) ==
          "t.json: 'data_position' must be an integer, got 9223372036854775808");
}

TEST_CASE("a resumed checkpoint's counters must be ones a run writes: position, updates taken, seed") {
    TrainerState s;
    s.optimizer = "lion";
    s.step = 6;
    s.data_position = 6;
    s.skipped_steps = 1;
    s.seed = 42;
    s.extra["optimizer_t"] = 5;
    check_trainer_state_counters(s, 42, "t.json");
    s.extra["optimizer_t"] = 6;  // stopped on a skipped step: counted in skipped_steps, not yet in step
    check_trainer_state_counters(s, 42, "t.json");
    s.extra["optimizer_t"] = 3;
    CHECK(error_of([&] { check_trainer_state_counters(s, 42, "t.json"); }) ==
          "t.json: extra.optimizer_t 3 but step 6 with 1 skipped: the optimizer took 5 updates (was the file edited?)");
    s.extra["optimizer_t"] = 5;
    s.data_position = 99999999999;
    CHECK(error_of([&] { check_trainer_state_counters(s, 42, "t.json"); }) ==
          "t.json: data_position 99999999999 but step 6: each step takes one batch, so a checkpoint of step 6 resumes "
          "at batch 6 (was the file edited?)");
    s.data_position = 6;
    CHECK(error_of([&] { check_trainer_state_counters(s, 7, "t.json"); }) ==
          "t.json: seed 42 but the run's config says train.seed 7 (was the file edited?)");
    s.skipped_steps = 8;
    CHECK_THAT(error_of([&] { check_trainer_state_counters(s, 42, "t.json"); }),
               Catch::Contains("more steps skipped than run"));
}

TEST_CASE("a safetensors header naming one tensor twice is refused naming it, in either order") {
    const std::string dir = scratch("dup-safetensors");
    const std::string data(8, '\0');
    // Same entry twice (the last would win), and entries whose second copy would make a gap.
    for (
        const std::string& header :
        {std::string(
             R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
         std::string(
             R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"),
         std::string(
             R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})")}) {
        const std::string path = dir + "/dup.safetensors";
        write_file(path, safetensors_bytes(header, data));
        INFO(header);
        CHECK_THAT(error_of([&] { read_safetensors_header(path); }),
                   Catch::Contains(path) && Catch::Contains("duplicate key 'w'"));
    }
}

TEST_CASE("trainer_state.json with a key twice is refused by load_checkpoint naming the file and key") {
    auto r = make_run();
    fill(*r, 3);
    const std::string dir = scratch("dup-state") + "/last";
    TrainerState s;
    s.optimizer = "skewadam";
    s.step = 1;
    save_checkpoint(dir, r->arena, s);
    std::string text = read_file(dir + "/trainer_state.json");
    text.insert(text.find('{') + 1, "\"step\": 7,");
    write_file(dir + "/trainer_state.json", text);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains("trainer_state.json") && Catch::Contains("duplicate key 'step'"));
}

TEST_CASE("a checkpoint holding a NaN weight or an inf optimizer state is refused naming tensor and element") {
    auto r = make_run();
    fill(*r, 5);
    TrainerState s;
    s.optimizer = "skewadam";
    s.step = 2;
    const std::string dir = scratch("nonfinite") + "/last";
    // A NaN in element 0 of final_ln.weight, as a bit pattern of its dtype.
    std::vector<NamedTensor> weights = weight_tensors(r->arena);
    const NamedTensor* ln = nullptr;
    for (const auto& t : weights)
        if (t.name == "final_ln.weight") ln = &t;
    REQUIRE(ln);
    std::string saved(static_cast<const char*>(ln->data), 4);
    if (ln->dtype == DType::BF16) {
        const uint16_t nan = 0x7fc0;
        std::memcpy(ln->data, &nan, 2);
    } else {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(ln->data, &nan, 4);
    }
    save_checkpoint(dir, r->arena, s);
    auto loaded = make_run();
    CHECK_THAT(error_of([&] { load_checkpoint(dir, loaded->arena); }), Catch::Contains("model.safetensors") &&
                                                                           Catch::Contains("'final_ln.weight'") &&
                                                                           Catch::Contains("(nan) at [0]"));
    // Finite again, but +inf in element 3 of the last state tensor.
    std::memcpy(ln->data, saved.data(), ln->dtype == DType::BF16 ? 2 : 4);
    std::vector<NamedTensor> state = buffer_tensors(r->arena, BufferKind::STATE);
    REQUIRE(!state.empty());
    const NamedTensor& st = state.back();
    REQUIRE(st.numel() > 3);
    if (st.dtype == DType::BF16) {
        const uint16_t inf = 0x7f80;
        std::memcpy(static_cast<char*>(st.data) + 6, &inf, 2);
    } else {
        const float inf = std::numeric_limits<float>::infinity();
        std::memcpy(static_cast<char*>(st.data) + 12, &inf, 4);
    }
    save_checkpoint(dir, r->arena, s);
    const std::string e = error_of([&] { load_checkpoint(dir, loaded->arena); });
    CHECK_THAT(e, Catch::Contains("optimizer.safetensors") && Catch::Contains("'" + st.name + "'") &&
                      Catch::Contains("(inf)"));
    // The shape-aware index of flat element 3.
    std::string at;
    int64_t rest = 3;
    std::vector<int64_t> c(st.shape.size());
    for (size_t d = st.shape.size(); d-- > 0;) c[d] = rest % st.shape[d], rest /= st.shape[d];
    for (size_t d = 0; d < c.size(); ++d) at += (d ? ", " : "") + std::to_string(c[d]);
    CHECK_THAT(e, Catch::Contains("at [" + at + "]"));
}

TEST_CASE("all_zero_tensors names exactly the tensors whose every element is +0 or -0") {
    std::vector<float> a = {0.0f, -0.0f, 0.0f}, b = {0.0f, 1e-30f, 0.0f};
    std::vector<uint16_t> c = {0x8000, 0x0000}, d = {0x0001, 0x0000};
    std::vector<NamedTensor> t = {{"grad.a", DType::F32, {3}, a.data()},
                                  {"grad.b", DType::F32, {3}, b.data()},
                                  {"grad.c", DType::BF16, {2}, c.data()},
                                  {"grad.d", DType::BF16, {2}, d.data()}};
    CHECK(all_zero_tensors(t) == std::vector<std::string>{"grad.a", "grad.c"});
}

TEST_CASE("an overflowed perplexity is written as \"inf\", not as null, and read back as inf") {
    RunMetrics m;
    m.optimizer = "adamw";
    m.type = "adamw";
    EvalRecord e;
    e.step = 2;
    e.val_loss = 987.0;
    e.val_ppl = std::exp(987.0);  // overflows to inf
    e.tokens_per_sec = 1000;
    m.history.push_back(e);
    m.summary = summarize(m.history, RunTotals{2, 0, 64, 1.0, 1.0});
    const nlohmann::json j = metrics_to_json(m);
    CHECK(j["history"][0]["val_ppl"] == "inf");
    CHECK(j["history"][0]["train_lm_loss"].is_null());  // not measured stays null
    CHECK(j["summary"]["final_val_ppl"] == "inf");
    CHECK(j["summary"]["best_val_step"] == 2);  // the best is taken from the loss
    CHECK(j["summary"]["best_val_ppl"] == "inf");
    const RunMetrics back = metrics_from_json(j, "m.json");
    CHECK(std::isinf(back.history[0].val_ppl));
    CHECK(std::isnan(back.history[0].train_lm_loss));
    CHECK(std::isinf(back.summary.final_val_ppl));
    CHECK(run_diverged(back));
}

TEST_CASE("summary's best evaluation is the lowest finite validation loss, whatever its perplexity") {
    std::vector<EvalRecord> h(3);
    h[0].step = 10, h[0].val_loss = 800, h[0].val_ppl = std::exp(800.0);
    h[1].step = 20, h[1].val_loss = 750, h[1].val_ppl = std::exp(750.0);
    h[2].step = 30, h[2].val_loss = std::nan(""), h[2].val_ppl = std::nan("");
    const MetricsSummary s = summarize(h, RunTotals{30, 0, 0, 0, 0});
    CHECK(s.best_val_step == 20);
    CHECK(std::isinf(s.best_val_ppl));
    h[0].val_loss = 5.0, h[0].val_ppl = std::exp(5.0);
    CHECK(summarize(h, RunTotals{}).best_val_step == 10);
    CHECK(summarize(h, RunTotals{}).best_val_ppl == Approx(std::exp(5.0)));
}

TEST_CASE("derived values print missing as a dash, overflow as inf and large values in exponent form") {
    CHECK(metric_text(std::nan(""), 2) == "-");
    CHECK(metric_text(std::numeric_limits<double>::infinity(), 2) == "inf");
    CHECK(metric_text(std::exp(345.0), 2) == "6.786e+149");
    CHECK(metric_text(123.456, 2) == "123.46");
    RunMetrics m;
    m.config = {{"model", {{"vocab_size", 50257}}}};
    EvalRecord e;
    e.val_loss = 12.0, e.val_ppl = std::exp(12.0);
    m.history = {e};
    CHECK_FALSE(run_diverged(m));  // above ln(50257) = 10.8 but below twice it
    m.history[0].val_loss = 345.0, m.history[0].val_ppl = std::exp(345.0);
    CHECK(run_diverged(m));
}

TEST_CASE("every hint that proposes a config value proposes one the config validator accepts") {
    // The proposals the engine's messages make, each through the validator.
    CHECK(config_value_error("data.val_ratio", "0.1") == "");
    CHECK(config_set_hint("data.val_ratio", "0.1") == "set data.val_ratio: 0.1");
    CHECK(config_value_error("data.val_ratio", "0") != "");  // no validation split: the schema refuses it
    CHECK(config_set_hint("data.val_ratio", "0") == "");
    CHECK(config_value_error("runtime.backend", "cpu") == "");
    CHECK(config_value_error("optimizers.mine.type", "skewadam") == "");
    CHECK(config_value_error("model.vocab_size", "50257") == "");
    CHECK(config_value_error("train.microbatch", "0") == "");
}

TEST_CASE("a config with a stray ',' at the top level is a syntax error, not a hang (a fuzzing finding)") {
    // yaml-cpp's LoadAll returns the same empty document forever on these (fuzz/regressions/config).
    for (const char* text : {",:", ",", ", a:\nmodel:\n  d_model: 64\n", "model:\n  d_model: 64\n---\n,"}) {
        INFO(text);
        CHECK_THAT(error_of([&] { load_config_text(text, "stray.yaml"); }),
                   Catch::StartsWith("stray.yaml") &&
                       (Catch::Contains("YAML syntax error") || Catch::Contains("second YAML document")));
    }
}
