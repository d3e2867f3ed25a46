// Checkpoint folders laid out as the published ones are, through the whole flow a user runs: Mixtral's
// tokenizer.json beside its tokenizer.model (tokenize and prepare read the import's tokenizer/, with
// the model's ids), `skew eval` and `skew sample` of an import folder as it is (its loss the imported
// model's own on the batch), transformers' RoPE buffers and a tied head (dropped as from_pretrained
// drops them; an untied one refused naming tie_word_embeddings), a head width the CUDA kernels do not
// take (the import runs on the CPU), `--init-from` with data of a larger vocabulary (the hint names the
// import's tokenizer), and the generation ids and generation_config.json kept through import and
// export.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "data/batch_stream.h"
#include "data/tokenizer.h"
#include "hf_test_util.h"
#include "tests/model/model_test_util.h"

using namespace skew;
using namespace skew::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kSource = SKEW_SOURCE_DIR;

// `skew import src --out <scratch>/<name>`; returns the folder.
std::string import_as(const std::string& src, const std::string& name) {
    const std::string out = hf_scratch("layouts-" + name) + "/import";
    const Run r = run_skew("import " + src + " --out " + out);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
}

// tests/fixtures/train/sample.jsonl prepared with the tokenizer folder `tokenizer` (half the documents
// in the validation split, so it holds a batch of 64 x 64 tokens).
std::string prepare_with(const std::string& tokenizer, const std::string& name) {
    const std::string out = hf_scratch("layouts-prep-" + name) + "/prep";
    const Run r = run_skew("prepare --input " + kSource + "/tests/fixtures/train/sample.jsonl --out " + out +
                           " --tokenizer " + tokenizer + " --val-ratio 0.5 --no-progress");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
}

std::vector<int32_t> ids_of(const std::string& line) {
    std::vector<int32_t> ids;
    std::istringstream in(line);
    for (int32_t id; in >> id;) ids.push_back(id);
    return ids;
}

}  // namespace

TEST_CASE("Mixtral's tokenizer.json beside its tokenizer.model: tokenize and prepare read the import's tokenizer",
          "[hf]") {
    const std::string dir = import_as(hf_fixture("mixtral"), "mixtral-tokenizer");
    for (const char* file : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"})
        CHECK(fs::exists(dir + "/tokenizer/" + file));
    const data::Tokenizer model = data::tokenizer_load_sentencepiece(dir + "/tokenizer/tokenizer.model");
    const std::string text_file = hf_scratch("layouts-mixtral-text") + "/text.txt";
    const std::string text = "Hello world: Grüße, 你好, two  spaces\nand a new line";
    std::ofstream(text_file) << text;
    const Run t = run_skew("tokenize --tokenizer " + dir + "/tokenizer < " + text_file);
    INFO(t.output);
    REQUIRE(t.status == 0);
    CHECK(ids_of(t.output) == data::tokenizer_encode(model, text));  // tokenizer.json's rules, the model's ids
    const std::string prep = prepare_with(dir + "/tokenizer", "mixtral");
    const json manifest = json::parse(read_text_file(prep + "/manifest.json"));
    CHECK(manifest["tokenizer"]["kind"] == "hf-sentencepiece-bpe");
    CHECK(manifest["tokenizer"]["md5"].contains("tokenizer.json"));
}

TEST_CASE("skew eval and skew sample take a folder skew import wrote, as it is", "[hf]") {
    const std::string dir = import_as(hf_fixture("qwen3"), "qwen3-eval");
    const std::string prep = prepare_with(dir + "/tokenizer", "qwen3");
    const Run e = run_skew("eval " + dir + " --data " + prep + " --batches 1 --no-progress");
    INFO(e.output);
    REQUIRE(e.status == 0);
    CHECK(e.output.find(dir + " (a skew import)") != std::string::npos);
    const json result = json::parse(read_text_file(dir + "/eval_import.json"));
    CHECK(result["which"] == "import");
    // the loss is the imported model's on validation batch 0 (64 x 64 tokens: the import's defaults)
    auto t = make_test_model(read_text_file(dir + "/config.yaml"),
                             {"train.batch_size=64", "train.microbatch=64", "runtime.backend=cpu"}, 64);
    REQUIRE(t->cfg.train.seq_len == 64);
    read_safetensors_into(dir + "/model.safetensors", weight_tensors(t->arena));
    const data::TokenSplit val = data::token_split_open(prep, "val");
    const data::BatchStream stream = data::batch_stream_make(val, 64, 64, 0);
    std::vector<int32_t> x(64 * 64), y(64 * 64);
    data::batch_stream_get(stream, 0, x.data(), y.data());
    const double want = model_eval(t->model, x.data(), y.data()).lm_loss;
    CHECK(result["perplexity"]["loss"].get<double>() == Approx(want).epsilon(1e-5));

    const Run s = run_skew("sample " + dir + " --prompt 'hello world' --max-tokens 4 --temperature 0 --json");
    INFO(s.output);
    CHECK(s.status == 0);
    CHECK(s.output.find("\"samples\"") != std::string::npos);

    const Run opt = run_skew("eval " + dir + " --optimizer adamw --data " + prep + " --no-write");
    CHECK(opt.status == 1);
    CHECK(opt.output.find("--optimizer adamw: " + dir + " is a folder `skew import` wrote") != std::string::npos);
    // data of another tokenizer (GPT-2's) is refused against the import's tokenizer/
    const std::string gpt2 = prepare_with(kSource + "/tests/fixtures/data/gpt2", "gpt2-for-eval");
    const Run other = run_skew("eval " + dir + " --data " + gpt2 + " --no-write");
    INFO(other.output);
    CHECK(other.status == 1);
    CHECK(other.output.find("its shards were tokenized by another tokenizer than " + dir + "/tokenizer") !=
          std::string::npos);
}

TEST_CASE("import drops transformers' RoPE buffers and a tied head equal to the embedding, as from_pretrained does",
          "[hf]") {
    // older checkpoints saved each layer's rotary_emb.inv_freq (head_dim / 2 floats)
    const std::string buffers = copy_hf_fixture("mixtral", "layouts-inv-freq");
    auto t = read_raw_tensors(buffers + "/model.safetensors");
    for (const char* layer : {"0", "1"})
        t[std::string("model.layers.") + layer + ".self_attn.rotary_emb.inv_freq"] =
            RawTensor{DType::F32, {4}, std::string(16, '\1')};
    write_raw_tensors(buffers + "/model.safetensors", t);
    const Run r = run_skew("import " + buffers + " --out " + buffers + "-out");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("2 RoPE buffers (rotary_emb.inv_freq) dropped") != std::string::npos);
    CHECK(read_raw_tensors(buffers + "-out/model.safetensors") ==
          read_raw_tensors(import_as(hf_fixture("mixtral"), "mixtral-plain") + "/model.safetensors"));

    // tie_word_embeddings true with lm_head.weight the embedding's bytes: one matrix
    const std::string tied = copy_hf_fixture("qwen3", "layouts-tied");
    edit_config(tied, [](json& j) { j["tie_word_embeddings"] = true; });
    t = read_raw_tensors(tied + "/model.safetensors");
    t["lm_head.weight"] = t["model.embed_tokens.weight"];
    write_raw_tensors(tied + "/model.safetensors", t);
    const Run ok = run_skew("import " + tied + " --out " + tied + "-out");
    INFO(ok.output);
    REQUIRE(ok.status == 0);
    CHECK(ok.output.find("lm_head.weight is the embedding (tie_word_embeddings true)") != std::string::npos);
    CHECK(load_config(tied + "-out/config.yaml").model.tie_embeddings);
    CHECK(read_raw_tensors(tied + "-out/model.safetensors").count("lm_head") == 0);

    // one element of the head that is not the embedding's: refused naming the key and the element
    t["lm_head.weight"].bytes[2 * (3 * 32 + 7)] ^= 1;
    write_raw_tensors(tied + "/model.safetensors", t);
    const Run bad = run_skew("import " + tied + " --out " + tied + "-bad");
    INFO(bad.output);
    CHECK(bad.status == 1);
    CHECK(bad.output.find("tensor 'lm_head.weight' differs from model.embed_tokens.weight at [3, 7], but "
                          "config.json's tie_word_embeddings is true") != std::string::npos);
    CHECK_FALSE(fs::exists(tied + "-bad"));
}

TEST_CASE("an import whose head_dim the CUDA attention kernels do not take runs on the CPU", "[hf]") {
    // Qwen3-MoE with head_dim 24 (4 heads over d_model 32): q, k, v, o and the per-head norms resized
    const std::string dir = copy_hf_fixture("qwen3", "layouts-head-dim");
    edit_config(dir, [](json& j) { j["head_dim"] = 24; });
    auto t = read_raw_tensors(dir + "/model.safetensors");
    const std::string bf16_small = std::string("\x00\x3c", 2);  // 0.0078125
    auto filled = [&](std::vector<int64_t> shape) {
        std::string bytes;
        for (int64_t i = 0; i < shape[0] * (shape.size() > 1 ? shape[1] : 1); ++i) bytes += bf16_small;
        return RawTensor{DType::BF16, shape, bytes};
    };
    for (const char* layer : {"0", "1"}) {
        const std::string a = std::string("model.layers.") + layer + ".self_attn.";
        t[a + "q_proj.weight"] = filled({96, 32});
        t[a + "k_proj.weight"] = filled({48, 32});
        t[a + "v_proj.weight"] = filled({48, 32});
        t[a + "o_proj.weight"] = filled({32, 96});
        t[a + "q_norm.weight"] = filled({24});
        t[a + "k_norm.weight"] = filled({24});
    }
    write_raw_tensors(dir + "/model.safetensors", t);
    const Run r = run_skew("import " + dir + " --out " + dir + "-out");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("runtime.backend: cpu in config.yaml: head_dim 24") != std::string::npos);
    const Config cfg = load_config(dir + "-out/config.yaml");
    CHECK(cfg.model.head_dim() == 24);
    CHECK(cfg.runtime.backend == BackendChoice::CPU);
    const Run s = run_skew("sample " + dir + "-out --prompt hello --max-tokens 2 --temperature 0");
    INFO(s.output);
    CHECK(s.status == 0);
}

TEST_CASE("train --init-from with data of a larger vocabulary names the import's tokenizer, not model.vocab_size",
          "[hf]") {
    const std::string dir = import_as(hf_fixture("qwen3"), "qwen3-vocab");
    const std::string gpt2 = prepare_with(kSource + "/tests/fixtures/data/gpt2", "gpt2-for-train");
    const std::string run = hf_scratch("layouts-vocab-run") + "/run";
    const Run r = run_skew("train " + dir + "/config.yaml --init-from " + dir + " --set data.dir=" + gpt2 +
                           " --plain --set train.steps=1 --set runtime.backend=cpu --out " + run);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("but model.vocab_size is 302; it is the vocabulary of the weights in " + dir +
                        " (train.init_from): prepare the data with their tokenizer (skew prepare --tokenizer " + dir +
                        "/tokenizer)") != std::string::npos);
    CHECK(r.output.find("set model.vocab_size") == std::string::npos);
}

TEST_CASE("bos, eos and pad token ids and generation_config.json go through import and export", "[hf]") {
    const std::string dir = import_as(hf_fixture("qwen3"), "qwen3-generation");
    CHECK(read_text_file(dir + "/hf/config.json") == read_text_file(hf_fixture("qwen3") + "/config.json"));
    CHECK(read_text_file(dir + "/hf/generation_config.json") ==
          read_text_file(hf_fixture("qwen3") + "/generation_config.json"));
    const std::string out = hf_scratch("layouts-generation-export") + "/export";
    const Run e = run_skew("export " + dir + " --format hf --out " + out);
    INFO(e.output);
    REQUIRE(e.status == 0);
    const json config = json::parse(read_text_file(out + "/config.json"));
    CHECK(config.value("eos_token_id", json()) == 300);  // <|endoftext|>: generation stops there
    CHECK(config.value("bos_token_id", json()) == 300);
    CHECK_FALSE(config.contains("pad_token_id"));  // Qwen3's config.json has none
    CHECK(read_text_file(out + "/generation_config.json") ==
          read_text_file(hf_fixture("qwen3") + "/generation_config.json"));
    // OLMoE's: bos null and pad 1 as published, no generation_config.json to keep
    const std::string olmoe = import_as(hf_fixture("olmoe"), "olmoe-generation");
    const std::string olmoe_out = hf_scratch("layouts-generation-olmoe") + "/export";
    REQUIRE(run_skew("export " + olmoe + " --format hf --out " + olmoe_out).status == 0);
    const json o = json::parse(read_text_file(olmoe_out + "/config.json"));
    CHECK((o.contains("bos_token_id") && o["bos_token_id"].is_null()));
    CHECK(o.value("eos_token_id", json()) == 300);
    CHECK(o.value("pad_token_id", json()) == 1);
    CHECK_FALSE(fs::exists(olmoe_out + "/generation_config.json"));
}
