// Safetensors files (docs/sources.md): an 8-byte little-endian header length, the header JSON
// (each tensor's dtype, shape and byte range; string metadata), then the raw little-endian data;
// readable by PyTorch's `safetensors`. Written durably (checkpoint/durable_file.h), read validated.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/named_tensor.h"

namespace skew {

/// Safetensors dtype string of a DType: "BF16", "F32", "I32", "U16".
const char* safetensors_dtype(DType t);

/// One tensor entry of a safetensors header; offsets are bytes relative to the data region.
struct SafetensorsEntry {
    std::string name;
    std::string dtype_name;    // as the header writes it: "BF16", "F16", "F64", ...
    bool dtype_known = false;  // one of skew's dtypes (BF16, F32, I32, U16): `dtype` holds it
    DType dtype = DType::F32;  // meaningful only where dtype_known; readers refuse the others by dtype_name
    std::vector<int64_t> shape;
    int64_t begin = 0;
    int64_t end = 0;
};

/// A validated safetensors header.
struct SafetensorsHeader {
    std::string path;
    int64_t file_bytes = 0;
    int64_t data_start = 0;                       // 8 + header length
    std::vector<SafetensorsEntry> tensors;        // in data order
    std::map<std::string, std::string> metadata;  // "__metadata__"

    /// The entry of that name, or nullptr.
    const SafetensorsEntry* find(const std::string& name) const;
};

/// The safetensors header of `tensors` laid out in the given order, contiguous from offset 0: the
/// 8-byte little-endian length, then the JSON (string `metadata` as __metadata__ when not empty)
/// padded with spaces to 8 bytes, so the data starts aligned. Only names, dtypes and shapes are
/// read. Throws skew::Error naming `path` on an empty, reserved or repeated tensor name.
std::string safetensors_header_bytes(const std::string& path, const std::vector<NamedTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata);

/// Write tensors (in the given order, contiguous, header padded with spaces to 8 bytes) and the
/// string metadata to `path` durably (as write_file_atomic). Device tensors are staged through a
/// bounded host buffer. Throws skew::Error naming the file.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Read and validate the header of `path`: 8-byte little-endian length within the file, JSON that
/// parses to an object, each entry with a dtype of the safetensors format (BOOL, U8, I8, F8_E5M2,
/// F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64; those skew holds have dtype_known), a
/// shape and data_offsets of exactly numel * dtype bytes inside the file, the non-empty entries
/// tiling the data region (in order of begin, then end) with no gap, overlap or trailing bytes;
/// empty entries may sit at any offset inside it. Throws skew::Error naming the file and what is
/// wrong (an overlap names both tensors), bytes of the file that are not printable UTF-8 escaped.
SafetensorsHeader read_safetensors_header(const std::string& path);

/// Load `path` into `tensors`: every tensor must be in the file with the same dtype and shape,
/// and the file may hold no other tensor. Returns the metadata. Throws skew::Error naming the file
/// and the tensor (missing, extra, dtype or shape mismatch, unreadable).
std::map<std::string, std::string> read_safetensors_into(const std::string& path,
                                                         const std::vector<NamedTensor>& tensors);

}  // namespace skew
