// Durable files (docs/design.md, "Errors, not crashes": a file on disk is never left half-written):
// every writer goes through a hidden temporary in the same folder, fsynced and renamed over the
// final name, then the folder fsynced.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace skew {

/// Bytes a durable writer puts into a file per write (and stages per device copy).
constexpr int64_t IO_CHUNK_BYTES = int64_t(64) << 20;

/// A file being written durably: data goes to the hidden temporary ".<name>.tmp-<pid>" beside
/// `path`; commit() fsyncs it, renames it over `path` and fsyncs the folder; destruction without
/// commit removes the temporary. Creates missing parent folders. Throws skew::Error naming `path`
/// and the OS error, or when `path` exists and is not an ordinary file (a directory, a link, a
/// device such as /dev/full, a pipe, a socket): it is replaced whole, never written through.
class DurableFile {
public:
    explicit DurableFile(std::string path);
    DurableFile(const DurableFile&) = delete;
    DurableFile& operator=(const DurableFile&) = delete;
    ~DurableFile();

    /// Append `bytes` bytes in chunks of IO_CHUNK_BYTES (the write hook runs before each).
    void write(const void* data, int64_t bytes);
    /// fsync, rename over the final path, fsync the folder.
    void commit();

private:
    std::string path_, temp_;
    int fd_ = -1;
    int64_t offset_ = 0;
    bool committed_ = false;
};

/// Write `bytes` to `path` so that a reader sees either the old file or the whole new one: write
/// to a hidden temporary in the same folder (".<name>.tmp-<pid>"), fsync it, rename it over path,
/// fsync the folder. Creates missing parent folders. Throws skew::Error naming path and the OS
/// error; the temporary is removed on failure.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// fsync a folder so that renames and creations inside it are durable. Throws skew::Error.
void fsync_directory(const std::string& dir);

/// The folder holding `path` ("." for a bare name).
std::string parent_folder(const std::string& path);

/// Create `dir` and its missing parents. Throws skew::Error naming `for_path` (what the folder is
/// made for), the folder and the OS error.
void create_folders(const std::string& dir, const std::string& for_path);

/// Testing hook: called before every chunk a durable writer puts into a file, with the final path
/// and the byte offset about to be written. A hook that throws simulates a failed write (disk full);
/// one that calls _exit simulates a crash. Pass nullptr to remove it. Not thread-safe.
using WriteHook = std::function<void(const std::string& path, int64_t offset)>;
void set_write_hook_for_testing(WriteHook hook);

}  // namespace skew
