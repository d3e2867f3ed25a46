// `skew train --init-from` and `skew export --format hf` end to end on the tiny checkpoints: a run
// from an import starts from the imported weights (its first step's loss is the imported model's
// forward loss on that batch, computed here by the same model code), a run's export is a checkpoint
// folder of the family with the published names and config fields (the token ids and
// generation_config.json of the import it started from among them), and importing the export gives
// back the run's weights byte for byte (the padded vocabulary rows are zero in both: no gradient
// reaches them). A model section other than the import's, and a model no family represents, are
// refused naming the key.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "data/batch_stream.h"
#include "hf_test_util.h"
#include "tests/model/model_test_util.h"

using namespace skew;
using namespace skew::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string& work() {
    static const std::string dir = hf_scratch("train-export");
    return dir;
}

// `skew import` of the family's fixture (once per process).
std::string imported(const std::string& family) {
    const std::string out = work() + "/import-" + family;
    if (!fs::exists(out)) {
        const Run r = run_skew("import " + hf_fixture(family) + " --out " + out);
        INFO(r.output);
        REQUIRE(r.status == 0);
    }
    return out;
}

// The committed sample text in shards of the tiny tokenizer the import copied (302 ids).
const std::string& prepared() {
    static const std::string dir = [] {
        const std::string out = work() + "/prep";
        const Run r =
            run_skew("prepare --input " + std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/train/sample.jsonl --out " +
                     out + " --tokenizer " + imported("qwen3") + "/tokenizer --no-progress");
        INFO(r.output);
        REQUIRE(r.status == 0);
        return out;
    }();
    return dir;
}

const char* TRAIN_SETS =
    " --plain --set train.steps=2 --set train.batch_size=2 --set train.microbatch=2 --set train.seq_len=16"
    " --set train.eval_batches=1 --set train.eval_every=2 --set train.checkpoint_every=2"
    " --set train.optimizers=[adamw] --set runtime.backend=cpu";

// `skew train DIR/config.yaml [--init-from DIR] <extra>` into run folder `run`.
Run train(const std::string& dir, bool init_from, const std::string& run, const std::string& extra = "") {
    return run_skew("train " + dir + "/config.yaml" + (init_from ? " --init-from " + dir : std::string()) +
                    " --set data.dir=" + prepared() + TRAIN_SETS + " --out " + run + " " + extra);
}

double first_step_loss(const std::string& run) {
    std::ifstream in(run + "/steps_adamw.jsonl");
    std::string line;
    REQUIRE(std::getline(in, line));
    return json::parse(line)["lm_loss"].get<double>();
}

// The LM loss of the imported weights on training batch 0 (step 1's), by the trainer's own call.
double imported_forward_loss(const std::string& dir) {
    auto t = make_test_model(read_text_file(dir + "/config.yaml"),
                             {"train.batch_size=2", "train.microbatch=2", "train.seq_len=16", "runtime.backend=cpu",
                              "train.optimizers=[adamw]"},
                             2);
    read_safetensors_into(dir + "/model.safetensors", weight_tensors(t->arena));
    const data::TokenSplit split = data::token_split_open(prepared(), "train");
    const data::BatchStream stream = data::batch_stream_make(split, 2, 16, 0);
    std::vector<int32_t> x(32), y(32);
    data::batch_stream_get(stream, 0, x.data(), y.data());
    model_zero_grads(t->model);
    return model_forward_backward(t->model, x.data(), y.data(), 0, 1, 1, true).lm_loss;
}

// Every tensor of a checkpoint folder (one file or the index's shards): name -> shape.
std::map<std::string, std::vector<int64_t>> tensor_shapes(const std::string& dir) {
    std::map<std::string, std::vector<int64_t>> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".safetensors")
            for (const auto& [name, t] : read_raw_tensors(e.path().string())) out[name] = t.shape;
    return out;
}

}  // namespace

TEST_CASE("train --init-from starts from the imported weights, export --format hf and import give them back", "[hf]") {
    for (const std::string family : {"mixtral", "olmoe", "qwen3"}) {
        INFO(family);
        const std::string dir = imported(family), run = work() + "/run-" + family;
        const Run r = train(dir, true, run);
        INFO(r.output);
        REQUIRE(r.status == 0);
        CHECK(r.output.find("weights from " + dir + " (train.init_from), fresh optimizer state") != std::string::npos);
        // step 1's loss is the imported model's on batch 0
        const double loss = first_step_loss(run), want = imported_forward_loss(dir);
        CHECK(loss == Approx(want).epsilon(1e-12));

        // the export: the family's names and shapes, the published config fields
        const std::string hf = work() + "/export-" + family;
        const Run e = run_skew("export " + run + " --format hf --out " + hf);
        INFO(e.output);
        REQUIRE(e.status == 0);
        CHECK(tensor_shapes(hf) == tensor_shapes(hf_fixture(family)));
        const json got = json::parse(read_text_file(hf + "/config.json"));
        const json was = json::parse(read_text_file(hf_fixture(family) + "/config.json"));
        for (const auto& [key, value] : was.items()) {
            INFO("config.json " << key);
            if (key != "torch_dtype") CHECK((got.contains(key) && got[key] == value));  // skew's dtypes: bfloat16
        }
        CHECK(got["torch_dtype"] == "bfloat16");
        // the published generation_config.json, from the import the run started from (train.init_from)
        const std::string generation = hf_fixture(family) + "/generation_config.json";
        CHECK(fs::exists(hf + "/generation_config.json") == fs::exists(generation));
        if (fs::exists(generation)) CHECK(read_text_file(hf + "/generation_config.json") == read_text_file(generation));

        // import of the export: the run's weights, every byte
        const std::string back = work() + "/reimport-" + family;
        const Run i = run_skew("import " + hf + " --out " + back);
        INFO(i.output);
        REQUIRE(i.status == 0);
        const auto trained = read_raw_tensors(run + "/checkpoints/adamw/last/model.safetensors");
        const auto again = read_raw_tensors(back + "/model.safetensors");
        REQUIRE(trained.size() == again.size());
        for (const auto& [name, t] : trained) {
            INFO(name);
            REQUIRE(again.count(name));
            CHECK(again.at(name).dtype == t.dtype);
            CHECK(again.at(name).shape == t.shape);
            CHECK(again.at(name).bytes == t.bytes);
        }
        CHECK(trained.at("lm_head").bytes != read_raw_tensors(dir + "/model.safetensors").at("lm_head").bytes);
    }
}

TEST_CASE("without --init-from the same config starts from the initializer, not the import", "[hf]") {
    const std::string dir = imported("qwen3"), run = work() + "/run-initializer";
    const Run r = train(dir, false, run);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(std::fabs(first_step_loss(run) - imported_forward_loss(dir)) > 0.1);
}

TEST_CASE("train --init-from refuses a model section other than the import's, naming the key", "[hf]") {
    const std::string dir = imported("qwen3"), run = work() + "/run-other-model";
    const Run r = train(dir, true, run, "--set model.top_k=2");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find("model.top_k is 2 but the weights in " + dir + " (train.init_from) are of a model with 4") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(run));
}

TEST_CASE("export --format hf refuses a model no family represents, naming the key", "[hf]") {
    const std::string dir = imported("qwen3"), run = work() + "/run-layernorm";
    const Run r = train(dir, false, run, "--set model.norm=layernorm");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const Run e = run_skew("export " + run + " --format hf --out " + work() + "/export-layernorm");
    INFO(e.output);
    CHECK(e.status == 1);
    CHECK(e.output.find("config.yaml: model.norm is layernorm: no Hugging Face family skew writes") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(work() + "/export-layernorm"));
}

TEST_CASE("export --format hf of an import folder writes the fixture's tensors back, and its import the same bytes",
          "[hf]") {
    for (const std::string family : {"mixtral", "olmoe", "qwen3"}) {
        INFO(family);
        const std::string dir = imported(family), hf = work() + "/export-import-" + family;
        const Run e = run_skew("export " + dir + " --format hf --out " + hf);
        INFO(e.output);
        REQUIRE(e.status == 0);
        CHECK(e.output.find("(a skew import)") != std::string::npos);
        CHECK(tensor_shapes(hf) == tensor_shapes(hf_fixture(family)));
        CHECK(fs::exists(hf + "/tokenizer.json"));  // the import's tokenizer/ travels with it
        // the bf16 fixtures (Mixtral, Qwen3-MoE) come back bit for bit: an import changes no bf16 matrix
        if (family != "olmoe") {
            const auto back = read_raw_tensors(hf + "/model.safetensors");
            int64_t matrices = 0;
            for (const auto& [name, t] : read_raw_tensors(hf_fixture(family) + "/model.safetensors")) {
                REQUIRE(back.count(name));
                if (back.at(name).dtype != DType::BF16) continue;  // norms and router: widened to fp32 by the import
                CHECK(back.at(name).bytes == t.bytes);
                ++matrices;
            }
            CHECK(matrices > 10);
        }
        const std::string again = work() + "/import-export-import-" + family;
        const Run i = run_skew("import " + hf + " --out " + again);
        INFO(i.output);
        REQUIRE(i.status == 0);
        const auto first = read_raw_tensors(dir + "/model.safetensors"),
                   second = read_raw_tensors(again + "/model.safetensors");
        REQUIRE(first.size() == second.size());
        for (const auto& [name, t] : first) {
            REQUIRE(second.count(name));
            CHECK(second.at(name).dtype == t.dtype);
            CHECK(second.at(name).shape == t.shape);
            CHECK(second.at(name).bytes == t.bytes);
        }
    }
}
