// Durable writers: temp + fsync + rename (checkpoint/durable_file.h).
#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/error.h"

namespace fs = std::filesystem;

namespace skew {

namespace {

WriteHook g_write_hook;

std::string os_error() { return std::strerror(errno); }

// Hidden temporary next to `path`: dir/.<name>.tmp-<pid>
std::string temp_path_for(const std::string& path) {
    fs::path p(path);
    return (p.parent_path() / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
}

}  // namespace

std::string parent_folder(const std::string& path) {
    fs::path p = fs::path(path).parent_path();
    return p.empty() ? std::string(".") : p.string();
}

void create_folders(const std::string& dir, const std::string& for_path) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("{}: cannot create folder {}: {}", for_path, dir, ec.message());
}

DurableFile::DurableFile(std::string path) : path_(std::move(path)), temp_(temp_path_for(path_)) {
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
    create_folders(parent_folder(path_), path_);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create temporary file {}: {}", path_, temp_, os_error());
}

DurableFile::~DurableFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
}

void DurableFile::write(const void* data, int64_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        int64_t n = std::min(bytes, IO_CHUNK_BYTES);
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

void DurableFile::commit() {
    if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_, os_error());
    if (::close(fd_) != 0) {
        fd_ = -1;
        fail("{}: close failed: {}", path_, os_error());
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("{}: cannot rename {} over it: {}", path_, temp_, os_error());
    committed_ = true;
    fsync_directory(parent_folder(path_));
}

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

}  // namespace skew
