// Memory-mapped files for `skew import` (docs/huggingface.md, "Import"): a checkpoint's safetensors
// read in place (mmap, read-only), and the output written in place, each tensor converted once from
// the source mapping into the destination mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace skew::hf {

/// A whole file mapped read-only. Throws skew::Error naming the path when it cannot be opened or
/// mapped, or when its size is not `expect_bytes` (>= 0: the size its validated header promised).
struct MappedFile {
    std::string path;
    const std::byte* data = nullptr;
    int64_t size = 0;

    explicit MappedFile(const std::string& path, int64_t expect_bytes = -1);
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();
};

/// A new file of `bytes` bytes, its blocks reserved up front (posix_fallocate: a full disk is an
/// error here, not a fault while writing through the mapping) and mapped read-write. finish() flushes
/// the mapping and fsyncs the file; destruction without finish() unmaps and removes the file.
/// Throws skew::Error naming the path (exists already, no space, cannot map, flush failed).
struct OutputFile {
    std::string path;
    std::byte* data = nullptr;
    int64_t size = 0;

    OutputFile(const std::string& path, int64_t bytes);
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;
    ~OutputFile();
    void finish();

private:
    int fd_ = -1;
    bool finished_ = false;
};

}  // namespace skew::hf
