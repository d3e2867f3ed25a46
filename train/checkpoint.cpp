// Checkpoint I/O: durable (temp + fsync + rename) writers, a safetensors writer and a validating
// reader, and the checkpoint folder {model,optimizer}.safetensors + trainer_state.json swapped in
// atomically. Format: safetensors (docs/sources.md; an 8-byte LE header length, then JSON).
#include "train/checkpoint.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "engine/config_schema.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/text.h"
#include "train/faults.h"

namespace fs = std::filesystem;

namespace skew {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; skew assumes a little-endian host");

namespace {

constexpr int64_t CHUNK_BYTES = int64_t(64) << 20;        // staging / write granularity
constexpr int64_t MAX_HEADER_BYTES = int64_t(100) << 20;  // the safetensors reference limit
const char* const MODEL_FILE = "model.safetensors";
const char* const OPTIMIZER_FILE = "optimizer.safetensors";
const char* const STATE_FILE = "trainer_state.json";

WriteHook g_write_hook;

std::string os_error() { return std::strerror(errno); }

int64_t product(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

// Hidden temporary next to `path`: dir/.<name>.tmp-<pid>
std::string temp_path_for(const std::string& path) {
    fs::path p(path);
    return (p.parent_path() / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
}

std::string parent_of(const std::string& path) {
    fs::path p = fs::path(path).parent_path();
    return p.empty() ? std::string(".") : p.string();
}

void make_dirs(const std::string& dir, const std::string& for_path) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("{}: cannot create folder {}: {}", for_path, dir, ec.message());
}

// A file being written durably: data goes to a hidden temporary; commit() fsyncs and renames it
// over the final path; destruction without commit removes the temporary.
class DurableFile {
public:
    explicit DurableFile(std::string path) : path_(std::move(path)), temp_(temp_path_for(path_)) {
        // The rename replaces whatever the path names: only a new path or an ordinary file may be
        // replaced, never a device (skew export --out /dev/full), a pipe, a directory or a link.
        struct stat st {};
        if (::lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
            fail(
                "{}: exists and is not an ordinary file ({}); skew replaces a file whole: give a new path or an "
                "ordinary file",
                path_,
                S_ISDIR(st.st_mode)    ? "a directory"
                : S_ISLNK(st.st_mode)  ? "a symbolic link"
                : S_ISFIFO(st.st_mode) ? "a named pipe"
                : S_ISSOCK(st.st_mode) ? "a socket"
                                       : "a device");
        make_dirs(parent_of(path_), path_);
        fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0) fail("{}: cannot create temporary file {}: {}", path_, temp_, os_error());
    }
    DurableFile(const DurableFile&) = delete;
    DurableFile& operator=(const DurableFile&) = delete;
    ~DurableFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_) ::unlink(temp_.c_str());
    }

    void write(const void* data, int64_t bytes) {
        const char* p = static_cast<const char*>(data);
        while (bytes > 0) {
            int64_t n = std::min(bytes, CHUNK_BYTES);
            if (g_write_hook) g_write_hook(path_, offset_);
            int64_t done = 0;
            while (done < n) {
                ssize_t w = ::write(fd_, p + done, size_t(n - done));
                if (w < 0) {
                    if (errno == EINTR) continue;
                    fail("{}: write failed at byte {}: {}", path_, offset_ + done, os_error());
                }
                done += w;
            }
            p += n;
            bytes -= n;
            offset_ += n;
        }
    }

    void commit() {
        if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_, os_error());
        if (::close(fd_) != 0) {
            fd_ = -1;
            fail("{}: close failed: {}", path_, os_error());
        }
        fd_ = -1;
        if (::rename(temp_.c_str(), path_.c_str()) != 0)
            fail("{}: cannot rename {} over it: {}", path_, temp_, os_error());
        committed_ = true;
        fsync_directory(parent_of(path_));
    }

private:
    std::string path_, temp_;
    int fd_ = -1;
    int64_t offset_ = 0;
    bool committed_ = false;
};

// A file opened for validated reading.
struct ReadFile {
    std::string path;
    int fd = -1;
    int64_t size = 0;
    explicit ReadFile(const std::string& p) : path(p) {
        fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("{}: cannot open: {}", p, os_error());
        struct stat st {};
        if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", p, os_error());
        size = st.st_size;
    }
    ReadFile(const ReadFile&) = delete;
    ReadFile& operator=(const ReadFile&) = delete;
    ~ReadFile() {
        if (fd >= 0) ::close(fd);
    }
    void read_at(void* dst, int64_t offset, int64_t bytes) const {
        char* p = static_cast<char*>(dst);
        while (bytes > 0) {
            ssize_t r = ::pread(fd, p, size_t(std::min(bytes, CHUNK_BYTES)), off_t(offset));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) fail("{}: read failed at byte {}: {}", path, offset, os_error());
            if (r == 0) fail("{}: unexpected end of file at byte {} (file is {} bytes): truncated", path, offset, size);
            p += r;
            offset += r;
            bytes -= r;
        }
    }
};

// The element width of a safetensors dtype (the format's Dtype enum), or 0 for a name it does not have.
int64_t safetensors_dtype_bytes(const std::string& s) {
    static const std::map<std::string, int64_t> widths = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
        {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
    const auto it = widths.find(s);
    return it == widths.end() ? 0 : it->second;
}

bool parse_dtype(const std::string& s, DType* out) {
    for (DType t : {DType::BF16, DType::F32, DType::I32, DType::U16})
        if (s == safetensors_dtype(t)) {
            *out = t;
            return true;
        }
    return false;
}

void check_range(const NamedTensor& t, int64_t offset, int64_t bytes) {
    if (offset < 0 || bytes < 0 || offset + bytes > t.bytes())
        fail("tensor '{}': byte range [{}, {}) outside its {} bytes", t.name, offset, offset + bytes, t.bytes());
}

// Weights and optimizer state as loaded must be finite: a NaN or inf would make every later step
// non-finite (and be blamed on a gradient). Names the file, tensor and element.
void refuse_non_finite(const std::string& path, const std::vector<NamedTensor>& tensors) {
    const std::optional<NonFinite> bad = first_non_finite(tensors);
    if (!bad) return;
    fail(
        "{}: tensor '{}' holds a non-finite value ({}) at {}: the checkpoint is corrupt or was saved after a "
        "numerical fault; resume from another checkpoint (e.g. best/) or start a new run",
        path, bad->tensor,
        std::isnan(bad->value) ? "nan"
        : bad->value > 0       ? "inf"
                               : "-inf",
        shape_text(bad->coords));
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

// ---- tensors in memory

int64_t NamedTensor::numel() const { return product(shape); }

std::vector<NamedTensor> buffer_tensors(const Arena& arena, BufferKind kind, Backend* backend) {
    if (!arena.plan) fail("checkpoint: the arena has no memory plan");
    std::vector<NamedTensor> out;
    const auto& bufs = arena.plan->buffers;
    for (size_t i = 0; i < bufs.size(); ++i) {
        if (bufs[i].kind != kind) continue;
        out.push_back(
            NamedTensor{bufs[i].name, bufs[i].dtype, bufs[i].shape, arena.ptr(int(i)), arena.device, backend});
    }
    return out;
}

std::vector<NamedTensor> weight_tensors(const Arena& arena, Backend* backend) {
    std::vector<NamedTensor> out = buffer_tensors(arena, BufferKind::WEIGHT, backend);
    for (auto& t : out) t.name = param_of_weight_buffer(t.name);
    return out;
}

void copy_tensor_to_host(void* dst, const NamedTensor& t, int64_t offset, int64_t bytes) {
    check_range(t, offset, bytes);
    const char* src = static_cast<const char*>(t.data) + offset;
    if (t.device == ArenaDevice::HOST) {
        std::memcpy(dst, src, size_t(bytes));
        return;
    }
    if (!t.backend) fail("tensor '{}' is in device memory and no backend was given to copy it", t.name);
    try {
        t.backend->copy_to_host(dst, src, bytes);
    } catch (const Error& e) {
        fail("tensor '{}': copy from the device failed: {}", t.name, e.what());
    }
}

void copy_tensor_from_host(const NamedTensor& t, int64_t offset, const void* src, int64_t bytes) {
    check_range(t, offset, bytes);
    char* dst = static_cast<char*>(t.data) + offset;
    if (t.device == ArenaDevice::HOST) {
        std::memcpy(dst, src, size_t(bytes));
        return;
    }
    if (!t.backend) fail("tensor '{}' is in device memory and no backend was given to copy it", t.name);
    try {
        t.backend->copy_to_device(dst, src, bytes);  // returns once src may be reused
    } catch (const Error& e) {
        fail("tensor '{}': copy to the device failed: {}", t.name, e.what());
    }
}

// ---- durable files

void fsync_directory(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open folder to fsync it: {}", dir, os_error());
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL) fail("{}: fsync of the folder failed: {}", dir, std::strerror(err));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    DurableFile f(path);
    f.write(bytes.data(), int64_t(bytes.size()));
    f.commit();
}

void set_write_hook_for_testing(WriteHook hook) { g_write_hook = std::move(hook); }

// ---- safetensors

const char* safetensors_dtype(DType t) {
    switch (t) {
        case DType::BF16: return "BF16";
        case DType::F32: return "F32";
        case DType::I32: return "I32";
        case DType::U16: return "U16";
    }
    return "?";
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
    for (const auto& e : tensors)
        if (e.name == name) return &e;
    return nullptr;
}

std::string safetensors_header_bytes(const std::string& path, const std::vector<NamedTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    int64_t offset = 0;
    for (const auto& t : tensors) {
        if (t.name.empty() || t.name == "__metadata__") fail("{}: invalid tensor name '{}'", path, t.name);
        if (header.contains(t.name)) fail("{}: tensor name '{}' appears twice", path, t.name);
        header[t.name] = {
            {"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes()}}};
        offset += t.bytes();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
    return out + text;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    const std::string header = safetensors_header_bytes(path, tensors, metadata);
    DurableFile f(path);
    f.write(header.data(), int64_t(header.size()));
    std::vector<char> staging;
    for (const auto& t : tensors) {
        if (t.device == ArenaDevice::HOST) {
            f.write(t.data, t.bytes());
            continue;
        }
        staging.resize(size_t(std::min(CHUNK_BYTES, std::max<int64_t>(t.bytes(), 1))));
        for (int64_t o = 0; o < t.bytes(); o += CHUNK_BYTES) {
            int64_t n = std::min(CHUNK_BYTES, t.bytes() - o);
            copy_tensor_to_host(staging.data(), t, o, n);
            f.write(staging.data(), n);
        }
    }
    f.commit();
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
    ReadFile f(path);
    SafetensorsHeader h;
    h.path = path;
    h.file_bytes = f.size;
    if (f.size < 8) fail("{}: not a safetensors file: {} bytes, too short for the 8-byte header length", path, f.size);
    unsigned char len[8];
    f.read_at(len, 0, 8);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
    if (n > uint64_t(MAX_HEADER_BYTES))
        fail("{}: bad header length {} (limit {} bytes): not a safetensors file", path, n, MAX_HEADER_BYTES);
    if (int64_t(n) > f.size - 8)
        fail(
            "{}: bad header length {}: the file has only {} bytes after the length: truncated or not a safetensors "
            "file",
            path, n, f.size - 8);
    std::string text(size_t(n), '\0');
    f.read_at(text.data(), 8, int64_t(n));
    h.data_start = 8 + int64_t(n);
    const int64_t data_bytes = f.size - h.data_start;

    nlohmann::json j;
    std::string json_error;
    if (!json_try_parse_strict(text, j, json_error))
        fail("{}: header is not valid JSON: {}", path, escape_text(json_error));
    if (!j.is_object()) fail("{}: header JSON is a {}, not an object", path, j.type_name());
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& name = it.key();
        const std::string shown = escape_text(name);  // a name may hold control characters (\u0007)
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail("{}: __metadata__ is not an object", path);
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    fail("{}: __metadata__ value of '{}' is not a string", path, escape_text(m.key()));
                h.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        if (!v.is_object()) fail("{}: tensor '{}': header entry is not an object", path, shown);
        SafetensorsEntry e;
        e.name = name;
        if (!v.contains("dtype") || !v["dtype"].is_string()) fail("{}: tensor '{}': missing dtype", path, shown);
        e.dtype_name = v["dtype"].get<std::string>();
        const int64_t width = safetensors_dtype_bytes(e.dtype_name);
        if (width == 0)
            fail("{}: tensor '{}': dtype '{}' is not a safetensors dtype", path, shown, escape_text(e.dtype_name));
        e.dtype_known = parse_dtype(e.dtype_name, &e.dtype);
        if (!v.contains("shape") || !v["shape"].is_array()) fail("{}: tensor '{}': missing shape", path, shown);
        for (const auto& d : v["shape"]) {
            if (!d.is_number_integer() || d.get<int64_t>() < 0)
                fail("{}: tensor '{}': shape {} is not a list of sizes", path, shown, v["shape"].dump());
            e.shape.push_back(d.get<int64_t>());
        }
        const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer() ||
            off[0].get<int64_t>() < 0 || off[1].get<int64_t>() < off[0].get<int64_t>())
            fail("{}: tensor '{}': data_offsets {} is not [begin, end] with 0 <= begin <= end", path, shown,
                 off.dump());
        e.begin = off[0].get<int64_t>();
        e.end = off[1].get<int64_t>();
        if (e.end > data_bytes)
            fail(
                "{}: tensor '{}': data_offsets [{}, {}) lie outside the file's data region of {} bytes: the file is "
                "truncated",
                path, shown, e.begin, e.end, data_bytes);
        // The shape's byte count, refused where it overflows int64 (a crafted header) before it is compared.
        int64_t need = width;
        for (const int64_t d : e.shape)
            if (__builtin_mul_overflow(need, d, &need))
                fail("{}: tensor '{}': shape {} of {} holds more bytes than a file can", path, shown,
                     shape_text(e.shape), e.dtype_name);
        if (e.end - e.begin != need)
            fail("{}: tensor '{}': data_offsets span {} bytes but shape {} of {} needs {}", path, shown,
                 e.end - e.begin, shape_text(e.shape), e.dtype_name, need);
        h.tensors.push_back(std::move(e));
    }
    // In data order (begin, then end, then name, so the order and the messages do not depend on the
    // header's), the tensors that hold bytes tiling the data region; an empty one holds none.
    std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
        return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    int64_t expect = 0;
    const SafetensorsEntry* previous = nullptr;
    for (const auto& e : h.tensors) {
        if (e.begin == e.end) continue;
        if (e.begin < expect)
            fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) share bytes: an overlap in the data region", path,
                 escape_text(previous->name), previous->begin, previous->end, escape_text(e.name), e.begin, e.end);
        if (e.begin > expect)
            fail("{}: tensor '{}': data starts at byte {} but {}: a gap in the data region", path, escape_text(e.name),
                 e.begin,
                 previous ? fmt::format("tensor '{}' ends at {}", escape_text(previous->name), expect)
                          : std::string("the data region starts at byte 0"));
        expect = e.end;
        previous = &e;
    }
    if (expect != data_bytes)
        fail("{}: {} bytes after the last tensor's data: corrupt file", path, data_bytes - expect);
    return h;
}

std::map<std::string, std::string> read_safetensors_into(const std::string& path,
                                                         const std::vector<NamedTensor>& tensors) {
    SafetensorsHeader h = read_safetensors_header(path);
    std::map<std::string, const NamedTensor*> want;
    for (const auto& t : tensors) want[t.name] = &t;
    for (const auto& e : h.tensors)
        if (!want.count(e.name))
            fail("{}: holds tensor '{}' that the plan does not have (another model or optimizer?)", path, e.name);
    for (const auto& t : tensors) {
        const SafetensorsEntry* e = h.find(t.name);
        if (!e) fail("{}: missing tensor '{}' ({} {})", path, t.name, safetensors_dtype(t.dtype), shape_text(t.shape));
        if (!e->dtype_known || e->dtype != t.dtype)
            fail("{}: tensor '{}' is {} in the file but {} in the plan", path, t.name, e->dtype_name,
                 safetensors_dtype(t.dtype));
        if (e->shape != t.shape)
            fail("{}: tensor '{}' has shape {} in the file but {} in the plan", path, t.name, shape_text(e->shape),
                 shape_text(t.shape));
    }
    ReadFile f(path);
    if (f.size != h.file_bytes) fail("{}: the file changed size while being read", path);
    std::vector<char> staging;
    for (const auto& t : tensors) {
        const SafetensorsEntry* e = h.find(t.name);
        if (t.device == ArenaDevice::HOST) {
            f.read_at(t.data, h.data_start + e->begin, t.bytes());
            continue;
        }
        staging.resize(size_t(std::min(CHUNK_BYTES, std::max<int64_t>(t.bytes(), 1))));
        for (int64_t o = 0; o < t.bytes(); o += CHUNK_BYTES) {
            int64_t n = std::min(CHUNK_BYTES, t.bytes() - o);
            f.read_at(staging.data(), h.data_start + e->begin + o, n);
            copy_tensor_from_host(t, o, staging.data(), n);
        }
    }
    return h.metadata;
}

// ---- checkpoints

bool record_validation(TrainerState& s, int64_t step, double val_loss) {
    if (!std::isfinite(val_loss) || !(val_loss < s.best_val_loss)) return false;
    s.best_val_loss = val_loss;
    s.best_val_step = step;
    return true;
}

nlohmann::json trainer_state_to_json(const TrainerState& s) {
    nlohmann::json j = {
        {"step", s.step},
        {"optimizer", s.optimizer},
        {"data_position", s.data_position},
        {"seed", s.seed},
        {"skipped_steps", s.skipped_steps},
        {"best_val_step", s.best_val_step},
        {"tokens_seen", s.tokens_seen},
        {"train_seconds", s.train_seconds},
        {"config_hash", s.config_hash},
        {"extra", s.extra},
    };
    j["best_val_loss"] = std::isfinite(s.best_val_loss) ? nlohmann::json(s.best_val_loss) : nlohmann::json(nullptr);
    if (!s.model_config.empty()) j["model"] = s.model_config;
    return j;
}

TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object()) fail("{}: not a JSON object", source);
    auto need = [&](const char* key) -> const nlohmann::json& {
        if (!j.contains(key)) fail("{}: missing key '{}'", source, key);
        return j[key];
    };
    auto integer = [&](const char* key) {
        need(key);
        return json_int_or(j, key, 0, source);
    };
    auto number = [&](const char* key) {
        const auto& v = need(key);
        if (!v.is_number()) fail("{}: '{}' must be a number, got {}", source, key, v.dump());
        return v.get<double>();
    };
    auto text = [&](const char* key) {
        const auto& v = need(key);
        if (!v.is_string()) fail("{}: '{}' must be a string, got {}", source, key, v.dump());
        return v.get<std::string>();
    };
    TrainerState s;
    s.step = integer("step");
    s.optimizer = text("optimizer");
    s.data_position = integer("data_position");
    s.seed = integer("seed");
    s.skipped_steps = integer("skipped_steps");
    s.best_val_step = integer("best_val_step");
    s.tokens_seen = integer("tokens_seen");
    s.train_seconds = number("train_seconds");
    s.config_hash = text("config_hash");
    const auto& best = need("best_val_loss");
    if (best.is_null()) s.best_val_loss = std::numeric_limits<double>::infinity();
    else if (best.is_number()) s.best_val_loss = best.get<double>();
    else fail("{}: 'best_val_loss' must be a number or null, got {}", source, best.dump());
    if (j.contains("model")) {
        const auto& m = j["model"];
        if (!m.is_object()) fail("{}: 'model' must be an object of the model settings, got {}", source, m.dump());
        for (const auto& [key, v] : m.items()) {
            if (!v.is_string()) fail("{}: model.{} must be a string, got {}", source, key, v.dump());
            s.model_config[key] = v.get<std::string>();
        }
    }
    if (j.contains("extra")) {
        s.extra = j["extra"];
        if (!s.extra.is_object()) fail("{}: 'extra' must be an object, got {}", source, s.extra.dump());
        if (json_int_or(s.extra, "optimizer_t", 0, source + " 'extra'") < 0)
            fail("{}: extra.optimizer_t must be >= 0, got {}", source, s.extra["optimizer_t"].dump());
    }
    if (s.step < 0 || s.data_position < 0 || s.skipped_steps < 0 || s.tokens_seen < 0)
        fail("{}: step, data_position, skipped_steps and tokens_seen must be >= 0", source);
    // Counters a run only ever increments: 2^53 is beyond any run and leaves them far from overflow.
    constexpr int64_t MAX_COUNT = int64_t(1) << 53;
    for (const auto& [key, v] : {std::pair<const char*, int64_t>{"step", s.step},
                                 {"data_position", s.data_position},
                                 {"skipped_steps", s.skipped_steps},
                                 {"tokens_seen", s.tokens_seen}})
        if (v > MAX_COUNT) fail("{}: '{}' is {}, beyond any run (at most 2^53)", source, key, v);
    return s;
}

void check_trainer_state_counters(const TrainerState& s, int64_t config_seed, const std::string& source) {
    if (s.data_position != s.step)
        fail(
            "{}: data_position {} but step {}: each step takes one batch, so a checkpoint of step {} resumes at batch "
            "{} (was the file edited?)",
            source, s.data_position, s.step, s.step, s.step);
    const int64_t taken = s.step - s.skipped_steps;
    if (s.skipped_steps > s.step + 1)
        fail("{}: skipped_steps {} but step {}: more steps skipped than run", source, s.skipped_steps, s.step);
    if (s.extra.is_object() && s.extra.contains("optimizer_t")) {
        const int64_t t = s.extra["optimizer_t"].get<int64_t>();
        if (t != taken && t != taken + 1)
            fail(
                "{}: extra.optimizer_t {} but step {} with {} skipped: the optimizer took {} updates (was the file "
                "edited?)",
                source, t, s.step, s.skipped_steps, taken);
    }
    if (s.seed != config_seed)
        fail("{}: seed {} but the run's config says train.seed {} (was the file edited?)", source, s.seed, config_seed);
}

std::string config_hash(std::string_view resolved_yaml) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(resolved_yaml.data(), resolved_yaml.size(), digest, &len, EVP_sha256(), nullptr) != 1)
        fail("config hash: OpenSSL SHA-256 failed");
    std::string hex;
    for (unsigned int i = 0; i < 8 && i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
    return hex;
}

bool config_hash_matches(const Config& cfg, const std::string& config_path, const std::string& hash) {
    if (hash == config_hash(cfg.resolved_yaml)) return true;
    std::ifstream in(config_path, std::ios::binary);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return hash == config_hash(text);
}

std::string checkpoint_dir(const std::string& run_dir, const std::string& optimizer, const std::string& which) {
    return (fs::path(run_dir) / "checkpoints" / optimizer / which).string();
}

bool checkpoint_exists(const std::string& dir) { return fs::exists(fs::path(dir) / STATE_FILE); }

std::string begin_checkpoint_folder(const std::string& dir, const std::string& tag) {
    fs::path target = fs::path(dir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();
    const std::string parent = parent_of(target.string());
    make_dirs(parent, target.string());
    const std::string base = target.filename().string();

    // A save interrupted between the fallback path's two renames left only <dir>.old: put it back.
    std::error_code ec;
    const std::string old_dir = target.string() + ".old";
    if (!fs::exists(target) && fs::exists(fs::path(old_dir) / STATE_FILE)) {
        if (::rename(old_dir.c_str(), target.c_str()) != 0)
            fail("{}: cannot restore {}: {}", target.string(), old_dir, os_error());
        fsync_directory(parent);
    }
    // Remove what a crashed save left behind (hidden temporaries, a superseded .old; never read).
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
        std::string n = entry.path().filename().string();
        if (n.starts_with(fmt::format(".{}.tmp-", base)) || n == base + ".old") fs::remove_all(entry.path(), ec);
    }
    const fs::path temp = fs::path(parent) / fmt::format(".{}.tmp-{}", base, tag);
    make_dirs(temp.string(), target.string());
    return temp.string();
}

void commit_checkpoint_folder(const std::string& temp_dir, const std::string& dir) {
    fs::path target = fs::path(dir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();
    const std::string parent = parent_of(target.string());
    const std::string old_dir = target.string() + ".old";
    const fs::path temp(temp_dir);
    std::error_code ec;
    try {
        fsync_directory(temp.string());
        if (fs::exists(target)) {
            // Swap the complete new folder in with one atomic exchange, then drop the old one.
            if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
                if (errno != EINVAL && errno != ENOSYS)
                    fail("{}: cannot swap in the new checkpoint: {}", target.string(), os_error());
                // File system without RENAME_EXCHANGE: two renames; load_checkpoint falls back to .old.
                const std::string& old = old_dir;
                if (::rename(target.c_str(), old.c_str()) != 0)
                    fail("{}: cannot move the old checkpoint aside: {}", target.string(), os_error());
                if (::rename(temp.c_str(), target.c_str()) != 0)
                    fail("{}: cannot move the new checkpoint in: {}", target.string(), os_error());
                fsync_directory(parent);
                fs::remove_all(old, ec);
            } else {
                fsync_directory(parent);
                fs::remove_all(temp, ec);
            }
        } else {
            if (::rename(temp.c_str(), target.c_str()) != 0)
                fail("{}: cannot move the new checkpoint in: {}", target.string(), os_error());
            fsync_directory(parent);
        }
    } catch (...) {
        fs::remove_all(temp, ec);
        throw;
    }
}

void save_checkpoint(const std::string& dir, const Arena& arena, const TrainerState& state, Backend* backend) {
    if (!arena.plan) fail("{}: the arena has no memory plan", dir);
    const fs::path temp = begin_checkpoint_folder(dir, std::to_string(::getpid()));
    try {
        const std::map<std::string, std::string> meta = {
            {"format", "pt"}, {"step", std::to_string(state.step)}, {"optimizer", state.optimizer}};
        write_safetensors((temp / MODEL_FILE).string(), weight_tensors(arena, backend), meta);
        write_safetensors((temp / OPTIMIZER_FILE).string(), buffer_tensors(arena, BufferKind::STATE, backend), meta);
        write_file_atomic((temp / STATE_FILE).string(), json_text(trainer_state_to_json(state)) + "\n");
    } catch (...) {
        std::error_code ec;
        fs::remove_all(temp, ec);
        throw;
    }
    commit_checkpoint_folder(temp.string(), dir);
}

namespace {

/// The folder of checkpoint `dir`: itself, or `dir`.old where a save was interrupted between the
/// two renames of the fallback path (only <dir>.old is left then).
fs::path resolve_checkpoint(const std::string& dir) {
    fs::path d(dir);
    if (checkpoint_exists(dir)) return d;
    fs::path old = fs::path(fs::path(dir).lexically_normal().string() + ".old");
    if (fs::exists(old / STATE_FILE)) return old;
    fail("{}: no checkpoint here ({} is missing)", dir, (d / STATE_FILE).string());
}

TrainerState parse_trainer_state(const fs::path& d) {
    const std::string state_path = (d / STATE_FILE).string();
    std::ifstream in(state_path);
    if (!in) fail("{}: cannot open", state_path);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    std::string json_error;
    if (!json_try_parse_strict(ss.str(), j, json_error)) fail("{}: not valid JSON: {}", state_path, json_error);
    return trainer_state_from_json(j, state_path);
}

}  // namespace

TrainerState read_trainer_state(const std::string& dir) { return parse_trainer_state(resolve_checkpoint(dir)); }

void check_model_config(const Config& cfg, const std::map<std::string, std::string>& recorded,
                        const std::string& config_path, const std::string& checkpoint_dir,
                        const std::string& what_to_do) {
    if (recorded.empty()) return;
    std::map<std::string, std::string> now;
    for (auto& [key, value] : config_section_values(cfg, "model")) now[key] = value;
    for (const auto& [recorded_key, was] : recorded) {
        // a key recorded under its former name (model.layernorm_eps) is compared as the key it now is
        const std::string key = canonical_section_key("model." + recorded_key).substr(6);
        const auto it = now.find(key);
        if (it == now.end() || it->second != was)
            fail("{}: model.{} is {} but the checkpoint {} was trained with {}: {}", config_path, key,
                 it == now.end() ? "absent" : it->second, checkpoint_dir, was, what_to_do);
    }
}

TrainerState load_checkpoint(const std::string& dir, const Arena& arena, Backend* backend) {
    if (!arena.plan) fail("{}: the arena has no memory plan", dir);
    const fs::path d = resolve_checkpoint(dir);
    const std::string state_path = (d / STATE_FILE).string();
    TrainerState s = parse_trainer_state(d);
    if (fs::exists(d / "layout.json"))
        fail(
            "{}: a sharded checkpoint (written by several ranks, see its layout.json); this run is one process: resume "
            "it with mpirun and the same layout, or `skew export` its weights",
            d.string());
    if (s.optimizer != arena.plan->optimizer)
        fail("{}: checkpoint of optimizer '{}' cannot be loaded into a run of optimizer '{}'", state_path, s.optimizer,
             arena.plan->optimizer);
    for (const char* file : {MODEL_FILE, OPTIMIZER_FILE}) {
        const std::string path = (d / file).string();
        const std::vector<NamedTensor> tensors = std::string_view(file) == MODEL_FILE
                                                     ? weight_tensors(arena, backend)
                                                     : buffer_tensors(arena, BufferKind::STATE, backend);
        auto meta = read_safetensors_into(path, tensors);
        auto it = meta.find("step");
        if (it == meta.end()) fail("{}: metadata has no 'step'", path);
        if (it->second != std::to_string(s.step))
            fail("{}: written at step {} but {} says step {}: the folder mixes two saves", path, it->second, state_path,
                 s.step);
        refuse_non_finite(path, tensors);
    }
    return s;
}

}  // namespace skew
