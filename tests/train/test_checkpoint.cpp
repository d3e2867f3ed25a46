// Checkpoints: bit-exact round trip of weights and optimizer state, safetensors readable by an
// independent reader, atomic replacement under failed writes and crashes, and refusal of corrupt,
// truncated or mismatched files with a message naming the file and the problem.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "engine/error.h"
#include "engine/text.h"
#include "tests/skip.h"
#include "train_test_util.h"

using namespace skew;
using namespace train_test;
namespace fs = std::filesystem;

namespace {

// The bytes of every weight and state buffer, concatenated.
std::string snapshot(const Run& r) {
    std::string s;
    for (const auto& t : weight_tensors(r.arena)) s.append(static_cast<const char*>(t.data), size_t(t.bytes()));
    for (const auto& t : buffer_tensors(r.arena, BufferKind::STATE))
        s.append(static_cast<const char*>(t.data), size_t(t.bytes()));
    return s;
}

TrainerState state_at(int64_t step, const std::string& opt = "skewadam") {
    TrainerState s;
    s.step = step;
    s.optimizer = opt;
    s.data_position = step;
    s.seed = 42;
    s.skipped_steps = 1;
    s.best_val_loss = 4.25;
    s.best_val_step = step;
    s.tokens_seen = step * 32;
    s.train_seconds = 1.5;
    s.config_hash = "0123456789abcdef";
    s.extra = {{"muon_t", step}};
    return s;
}

// The visible (not hidden) entries of a folder.
std::vector<std::string> visible(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        std::string n = e.path().filename().string();
        if (n[0] != '.') out.push_back(n);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// A checkpoint of step 1 in a scratch run folder; returns the checkpoint folder.
std::string saved_checkpoint(Run& r, const std::string& name) {
    std::string run_dir = scratch(name);
    std::string dir = RunFolder{run_dir}.checkpoint("skewadam", RunFolder::LAST);
    fill(r, 1);
    save_checkpoint(dir, r.arena, state_at(1));
    return dir;
}

}  // namespace

TEST_CASE("a checkpoint round trip restores weights, optimizer state and trainer state bit for bit") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "roundtrip");
    const std::string before = snapshot(*r);
    fill(*r, 2);
    REQUIRE(snapshot(*r) != before);
    TrainerState s = load_checkpoint(dir, r->arena);
    CHECK(snapshot(*r) == before);
    CHECK(trainer_state_to_json(s) == trainer_state_to_json(state_at(1)));
    CHECK(s.extra["muon_t"] == 1);
    CHECK(visible(dir) == std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "trainer_state.json"});
    CHECK(fs::path(dir).parent_path().filename() == "skewadam");
}

TEST_CASE("the weights file names tensors from the parameter table with their BF16/F32 dtypes") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "names");
    SafetensorsHeader h = read_safetensors_header(dir + "/model.safetensors");
    REQUIRE(h.tensors.size() == r->table.params.size());
    for (const auto& p : r->table.params) {
        const SafetensorsEntry* e = h.find(p.name);
        REQUIRE(e);
        CHECK(e->dtype == p.dtype);
        CHECK(e->shape == p.shape);
    }
    REQUIRE(h.find("blocks.1.moe.router.weight"));
    CHECK(h.find("blocks.1.moe.router.weight")->dtype == DType::F32);
    CHECK(h.metadata.at("step") == "1");
    CHECK(h.metadata.at("format") == "pt");
    CHECK(h.data_start % 8 == 0);
    SafetensorsHeader o = read_safetensors_header(dir + "/optimizer.safetensors");
    CHECK(o.tensors.size() == buffer_tensors(r->arena, BufferKind::STATE).size());
    CHECK(o.tensors.size() > 0);
    for (const auto& e : o.tensors) CHECK(e.name.rfind("state.", 0) == 0);
}

TEST_CASE("an independent reader (Python json + numpy) reads the same values from the weights file") {
    if (!fs::exists("/usr/bin/python3") || shell("/usr/bin/python3 -c 'import numpy'").status != 0) {
        SKEW_SKIP_TEST("no /usr/bin/python3 with numpy: independent reader not run");
    }
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "python");
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
        Output out = shell(std::string("/usr/bin/python3 ") + SKEW_SOURCE_DIR + "/tests/train/read_safetensors.py " +
                           dir + "/" + file);
        REQUIRE(out.status == 0);
        auto j = nlohmann::json::parse(out.text);
        CHECK(j["metadata"]["step"] == "1");
        auto tensors = std::string(file) == "model.safetensors" ? weight_tensors(r->arena)
                                                                : buffer_tensors(r->arena, BufferKind::STATE);
        REQUIRE(j["tensors"].size() == tensors.size());
        for (const auto& t : tensors) {
            const auto& e = j["tensors"][t.name];
            CHECK(e["dtype"] == safetensors_dtype(t.dtype));
            CHECK(e["shape"].get<std::vector<int64_t>>() == t.shape);
            const auto& values = e["values"];
            REQUIRE(int64_t(values.size()) == t.numel());
            int64_t mismatches = 0;
            for (int64_t i = 0; i < t.numel(); ++i) {
                float v;
                if (t.dtype == DType::BF16) {
                    uint16_t h;
                    std::memcpy(&h, static_cast<const char*>(t.data) + 2 * i, 2);
                    v = std::bit_cast<float>(uint32_t(h) << 16);
                } else {
                    std::memcpy(&v, static_cast<const char*>(t.data) + 4 * i, 4);
                }
                if (values[size_t(i)].get<double>() != double(v)) ++mismatches;
            }
            CHECK(mismatches == 0);
        }
    }
}

TEST_CASE("a failed write leaves the previous checkpoint intact and no half-written file visible") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "failed-write");
    const std::string before = snapshot(*r);
    fill(*r, 2);
    set_write_hook_for_testing([](const std::string& path, int64_t offset) {
        if (path.ends_with("optimizer.safetensors") && offset > 8)
            fail("{}: simulated disk full at byte {}", path, offset);
    });
    std::string msg = error_of([&] { save_checkpoint(dir, r->arena, state_at(2)); });
    set_write_hook_for_testing(nullptr);
    CHECK_THAT(msg, Catch::Contains("simulated disk full"));
    CHECK(visible(fs::path(dir).parent_path().string()) == std::vector<std::string>{"last"});
    CHECK(std::distance(fs::directory_iterator(fs::path(dir).parent_path()), fs::directory_iterator{}) ==
          1);  // no temp left
    fill(*r, 3);
    CHECK(load_checkpoint(dir, r->arena).step == 1);
    CHECK(snapshot(*r) == before);
}

TEST_CASE("a crash in the middle of a save leaves the previous checkpoint loadable") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "crash");
    const std::string before = snapshot(*r);
    fill(*r, 2);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the child dies while writing the weights' data, like a kill -9
        set_write_hook_for_testing([](const std::string& path, int64_t offset) {
            if (path.ends_with("model.safetensors") && offset > 8) ::_exit(7);
        });
        try {
            save_checkpoint(dir, r->arena, state_at(2));
        } catch (...) {}
        ::_exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 7);
    const std::string parent = fs::path(dir).parent_path().string();
    CHECK(visible(parent) == std::vector<std::string>{"last"});
    CHECK(load_checkpoint(dir, r->arena).step == 1);
    CHECK(snapshot(*r) == before);
    // The next save succeeds and clears the crashed save's hidden temporary.
    fill(*r, 4);
    save_checkpoint(dir, r->arena, state_at(3));
    CHECK(std::distance(fs::directory_iterator(parent), fs::directory_iterator{}) == 1);
    CHECK(load_checkpoint(dir, r->arena).step == 3);
}

TEST_CASE("a truncated checkpoint is refused with a message naming the file") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "truncated");
    const std::string path = dir + "/model.safetensors";
    fs::resize_file(path, fs::file_size(path) - 10);
    std::string msg = error_of([&] { load_checkpoint(dir, r->arena); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("outside the file's data region") &&
                        Catch::Contains("truncated"));
    fs::resize_file(path, 20);  // cut inside the header
    msg = error_of([&] { load_checkpoint(dir, r->arena); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("bad header length"));
    fs::resize_file(path, 3);
    msg = error_of([&] { load_checkpoint(dir, r->arena); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("too short for the 8-byte header length"));
}

TEST_CASE("a header length larger than the limit is refused as a bad header length") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "badlen");
    const std::string path = dir + "/optimizer.safetensors";
    std::string bytes = read_file(path);
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(0x7f);
    write_file(path, bytes);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains(path) && Catch::Contains("bad header length"));
}

TEST_CASE("a header that is not JSON is refused with the parser's message") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "badjson");
    const std::string path = dir + "/model.safetensors";
    std::string bytes = read_file(path);
    bytes[8] = 'x';  // the opening brace
    write_file(path, bytes);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains(path) && Catch::Contains("header is not valid JSON"));
}

// Writes DIR/t.safetensors with `header` as its JSON and `data_bytes` zero bytes after it; returns
// read_safetensors_header's error ("(no error)" when it reads).
static std::string header_error(const std::string& dir, const std::string& header, size_t data_bytes) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    write_file(dir + "/t.safetensors", out + header + std::string(data_bytes, '\0'));
    return error_of([&] { read_safetensors_header(dir + "/t.safetensors"); });
}

TEST_CASE("data offsets outside the file, gaps and trailing bytes are refused") {
    const std::string dir = scratch("offsets");
    auto make = [&](const std::string& header, size_t data_bytes) { return header_error(dir, header, data_bytes); };
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})", 8),
               Catch::Contains("t.safetensors: tensor 'a': data_offsets [0, 1000) lie outside"));
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               Catch::Contains("span 4 bytes but shape [2] of F32 needs 8"));
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), Catch::Contains("gap"));
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12),
               Catch::Contains("8 bytes after the last tensor"));
    // every dtype of the format is read (its width checked); a name outside the format is refused
    CHECK(make(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8) == "(no error)");
    CHECK_THAT(make(R"({"a":{"dtype":"F17","shape":[1],"data_offsets":[0,8]}})", 8),
               Catch::Contains("tensor 'a': dtype 'F17' is not a safetensors dtype"));
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[1]}})", 4),
               Catch::Contains("data_offsets null is not [begin, end]"));
    CHECK_THAT(make(R"([1,2])", 0), Catch::Contains("header JSON is a array, not an object"));
    CHECK(make(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4) == "(no error)");
    // A shape whose byte count overflows int64 (it once wrapped, to 0 for [2^32, 2^32]) is refused.
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
               Catch::Contains("tensor 'a': shape [4294967296, 4294967296] of F32 holds more bytes than a file can"));
    CHECK_THAT(make(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0),
               Catch::Contains("holds more bytes than a file can"));
    CHECK(make(R"({"a":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]}})", 0) == "(no error)");
}

TEST_CASE("an empty tensor holds no bytes: [0, 0] beside [0, N] is read, anywhere inside the data region") {
    const std::string dir = scratch("empty-tensor");
    auto make = [&](const std::string& header, size_t data_bytes) { return header_error(dir, header, data_bytes); };
    // "z" sorts after "a" in the header's object: a reader that orders by begin alone put it after [0, 4)
    CHECK(
        make(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})",
            4) == "(no error)");
    CHECK(
        make(
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"BF16","shape":[0,3],"data_offsets":[4,4]}})",
            8) == "(no error)");
    CHECK_THAT(
        make(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0],"data_offsets":[9,9]}})",
            4),
        Catch::Contains("tensor 'z': data_offsets [9, 9) lie outside the file's data region of 4 bytes"));
    const SafetensorsHeader h = read_safetensors_header((
        make(
            R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})",
            4),
        dir + "/t.safetensors"));
    REQUIRE(h.tensors.size() == 2);
    CHECK(h.tensors[0].name == "a");  // data order: begin, then end
}

TEST_CASE("tensors that share bytes are refused naming both, and header bytes that are not UTF-8 are escaped") {
    const std::string dir = scratch("alias");
    auto make = [&](const std::string& header, size_t data_bytes) { return header_error(dir, header, data_bytes); };
    const std::string f32 = R"({"dtype":"F32","shape":[1],"data_offsets":)";  // one float at the offsets that follow
    const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":)";
    const struct {
        std::string header;
        size_t data_bytes;
        std::string message;
    } cases[] = {
        // "big" aliases the two halves "lo" and "hi"
        {"{\"lo\":" + f32 + "[0,4]},\"hi\":" + f32 + "[4,8]},\"big\":" + f32x2 + "[0,8]}}", 8,
         "tensors 'lo' [0, 4) and 'big' [0, 8) share bytes"},
        {"{\"a\":" + f32 + "[0,4]},\"b\":" + f32 + "[0,4]}}", 4, "tensors 'a' [0, 4) and 'b' [0, 4) share bytes"},
        {"{\"a\":" + f32 + "[0,4]},\"b\":" + f32 + "[2,6]}}", 6, "tensors 'a' [0, 4) and 'b' [2, 6) share bytes"},
        {"{\"a\":" + f32 + "[4,8]}}", 8,
         "tensor 'a': data starts at byte 4 but the data region starts at byte 0: a gap"},
    };
    for (const auto& c : cases) {
        INFO(c.header);
        CHECK_THAT(make(c.header, c.data_bytes), Catch::Contains(c.message));
    }
    // a name with a byte that is not UTF-8: the parser's message quotes it, escaped
    const std::string bad = make("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    CHECK_THAT(bad, Catch::Contains("header is not valid JSON") && Catch::Contains("\\xFF"));
    CHECK(utf8_valid(bad));
    // a control character written as \u0007 in a name is echoed as \x07
    const std::string bell = make(R"({"a\u0007":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4);
    CHECK_THAT(bell, Catch::Contains("tensor 'a\\x07': data_offsets span 4 bytes"));
    CHECK(bell.find('\a') == std::string::npos);
}

TEST_CASE("a tensor with another shape or dtype than the plan is refused naming it") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "mismatch");
    const std::string path = dir + "/model.safetensors";
    const std::map<std::string, std::string> meta = {{"step", "1"}};
    auto tensors = weight_tensors(r->arena);
    auto q = std::find_if(tensors.begin(), tensors.end(),
                          [](const NamedTensor& t) { return t.shape.size() == 2 && t.shape[0] != t.shape[1]; });
    REQUIRE(q != tensors.end());
    std::swap(q->shape[0], q->shape[1]);  // same bytes, transposed shape
    write_safetensors(path, tensors, meta);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains(path) && Catch::Contains("tensor '" + q->name + "' has shape") &&
                   Catch::Contains("in the plan"));

    tensors = weight_tensors(r->arena);
    auto ln = std::find_if(tensors.begin(), tensors.end(), [](const NamedTensor& t) { return t.dtype == DType::F32; });
    REQUIRE(ln != tensors.end());
    ln->dtype = DType::I32;  // same bytes, another dtype
    write_safetensors(path, tensors, meta);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains("tensor '" + ln->name + "' is I32 in the file but F32 in the plan"));
}

TEST_CASE("a missing or an extra tensor is refused naming it") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "missing");
    const std::string path = dir + "/model.safetensors";
    const std::map<std::string, std::string> meta = {{"step", "1"}};
    auto tensors = weight_tensors(r->arena);
    const std::string dropped = tensors.back().name;
    tensors.pop_back();
    write_safetensors(path, tensors, meta);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains(path) && Catch::Contains("missing tensor '" + dropped + "'"));
    tensors = weight_tensors(r->arena);
    float extra = 1.0f;
    tensors.push_back(NamedTensor{"blocks.9.surprise", DType::F32, {1}, &extra});
    write_safetensors(path, tensors, meta);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains("holds tensor 'blocks.9.surprise' that the plan does not have"));
}

TEST_CASE("a checkpoint of another optimizer is refused") {
    auto r = make_run("skewadam");
    std::string dir = saved_checkpoint(*r, "other-opt");
    auto a = make_run("adamw");
    CHECK_THAT(
        error_of([&] { load_checkpoint(dir, a->arena); }),
        Catch::Contains(
            "trainer_state.json: checkpoint of optimizer 'skewadam' cannot be loaded into a run of optimizer 'adamw'"));
    // The state file alone, put into an adamw checkpoint, is refused for its tensors.
    std::string adir = scratch("other-opt-adamw") + "/last";
    save_checkpoint(adir, a->arena, state_at(1, "adamw"));
    fs::copy_file(dir + "/optimizer.safetensors", adir + "/optimizer.safetensors",
                  fs::copy_options::overwrite_existing);
    CHECK_THAT(error_of([&] { load_checkpoint(adir, a->arena); }), Catch::Contains(adir + "/optimizer.safetensors"));
}

TEST_CASE("files of two different saves in one folder are refused") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "mixed");
    std::string other = scratch("mixed-2") + "/last";
    save_checkpoint(other, r->arena, state_at(5));
    fs::copy_file(other + "/model.safetensors", dir + "/model.safetensors", fs::copy_options::overwrite_existing);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains("written at step 5") && Catch::Contains("mixes two saves"));
}

TEST_CASE("a corrupt trainer_state.json is refused naming the file and the key") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "state-json");
    const std::string path = dir + "/trainer_state.json";
    write_file(path, "{\"step\": 3");
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains(path) && Catch::Contains("not valid JSON"));
    auto j = trainer_state_to_json(state_at(1));
    j.erase("data_position");
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }),
               Catch::Contains(path) && Catch::Contains("missing key 'data_position'"));
    j = trainer_state_to_json(state_at(1));
    j["step"] = "three";
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }), Catch::Contains("'step' must be an integer"));
    fs::remove(path);
    CHECK_THAT(error_of([&] { load_checkpoint(dir, r->arena); }), Catch::Contains("no checkpoint here"));
}

TEST_CASE("best_val_loss before any evaluation is written as null and read back as infinity") {
    TrainerState s;
    s.optimizer = "lion";
    auto j = trainer_state_to_json(s);
    CHECK(j["best_val_loss"].is_null());
    CHECK(std::isinf(trainer_state_from_json(j, "x").best_val_loss));
}

TEST_CASE("an atomic write refuses to replace a pipe, a link or a directory, and leaves it as it was") {
    const std::string dir = scratch("not-regular");
    const std::string fifo = dir + "/pipe", link = dir + "/link", sub = dir + "/sub", target = dir + "/target";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    write_file(target, "kept\n");
    fs::create_symlink(target, link);
    fs::create_directories(sub);
    CHECK_THAT(error_of([&] { write_file_atomic(fifo, "x"); }),
               Catch::Contains(fifo + ": exists and is not an ordinary file (a named pipe)"));
    CHECK_THAT(error_of([&] { write_file_atomic(link, "x"); }), Catch::Contains("(a symbolic link)"));
    CHECK_THAT(error_of([&] { write_safetensors(sub, {}, {}); }),
               Catch::Contains(sub + ": exists and is not an ordinary file (a directory)"));
    CHECK(fs::is_fifo(fs::symlink_status(fifo)));
    CHECK(fs::is_symlink(fs::symlink_status(link)));
    CHECK(read_file(target) == "kept\n");
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}) == 4);  // no temporary left
    write_file_atomic(target, "new\n");                                                // an ordinary file is replaced
    CHECK(read_file(target) == "new\n");
}

TEST_CASE("an atomic write replaces a file whole or not at all") {
    const std::string dir = scratch("atomic");
    const std::string path = dir + "/metrics_x.json";
    write_file_atomic(path, "old contents\n");
    set_write_hook_for_testing([](const std::string&, int64_t) { throw Error("simulated failure"); });
    CHECK_THROWS_WITH(write_file_atomic(path, std::string(1000, 'n')), Catch::Contains("simulated failure"));
    set_write_hook_for_testing(nullptr);
    CHECK(read_file(path) == "old contents\n");
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}) == 1);
    write_file_atomic(path, "new\n");
    CHECK(read_file(path) == "new\n");
    write_file_atomic(dir + "/sub/folder/f.txt", "x");  // parents are created
    CHECK(read_file(dir + "/sub/folder/f.txt") == "x");
}

TEST_CASE("the config hash is stable and tells configs apart") {
    CHECK(config_hash("") == "e3b0c44298fc1c14");  // SHA-256 of the empty string, first 64 bits
    CHECK(config_hash("train:\n  steps: 10\n") == config_hash("train:\n  steps: 10\n"));
    CHECK(config_hash("train:\n  steps: 10\n") != config_hash("train:\n  steps: 11\n"));
}

TEST_CASE("a save interrupted between the fallback renames is recovered from <dir>.old") {
    auto r = make_run();
    std::string dir = saved_checkpoint(*r, "old-recovery");
    const std::string before = snapshot(*r);
    fs::rename(dir, dir + ".old");  // the state after `rename(last, last.old)` and a crash
    fill(*r, 2);
    CHECK(load_checkpoint(dir, r->arena).step == 1);
    CHECK(snapshot(*r) == before);
    fill(*r, 3);
    save_checkpoint(dir, r->arena, state_at(2));
    CHECK(visible(fs::path(dir).parent_path().string()) == std::vector<std::string>{"last"});
    CHECK(load_checkpoint(dir, r->arena).step == 2);
}

TEST_CASE("only a lower finite validation loss makes a new best checkpoint") {
    TrainerState s;
    CHECK(record_validation(s, 10, 5.0));
    CHECK(s.best_val_step == 10);
    CHECK(!record_validation(s, 20, 5.0));  // equal is not better
    CHECK(!record_validation(s, 30, std::nan("")));
    CHECK(!record_validation(s, 40, 6.0));
    CHECK(record_validation(s, 50, 4.5));
    CHECK(s.best_val_loss == 4.5);
    CHECK(s.best_val_step == 50);
}
