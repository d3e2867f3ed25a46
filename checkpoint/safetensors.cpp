// The safetensors writer and its validating reader (checkpoint/safetensors.h).
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "checkpoint/durable_file.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/text.h"

namespace skew {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; skew assumes a little-endian host");

namespace {

constexpr int64_t MAX_HEADER_BYTES = int64_t(100) << 20;  // the safetensors reference limit

std::string os_error() { return std::strerror(errno); }

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
            ssize_t r = ::pread(fd, p, size_t(std::min(bytes, IO_CHUNK_BYTES)), off_t(offset));
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

}  // namespace

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
        staging.resize(size_t(std::min(IO_CHUNK_BYTES, std::max<int64_t>(t.bytes(), 1))));
        for (int64_t o = 0; o < t.bytes(); o += IO_CHUNK_BYTES) {
            int64_t n = std::min(IO_CHUNK_BYTES, t.bytes() - o);
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
        staging.resize(size_t(std::min(IO_CHUNK_BYTES, std::max<int64_t>(t.bytes(), 1))));
        for (int64_t o = 0; o < t.bytes(); o += IO_CHUNK_BYTES) {
            int64_t n = std::min(IO_CHUNK_BYTES, t.bytes() - o);
            f.read_at(staging.data(), h.data_start + e->begin + o, n);
            copy_tensor_from_host(t, o, staging.data(), n);
        }
    }
    return h.metadata;
}

}  // namespace skew
