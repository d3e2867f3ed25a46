// mmap'ed input and output files (POSIX mmap, posix_fallocate, msync, fsync).
#include "hf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace skew::hf {

MappedFile::MappedFile(const std::string& p, int64_t expect_bytes) : path(p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", p, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail("{}: cannot stat: {}", p, std::strerror(err));
    }
    size = st.st_size;
    if (expect_bytes >= 0 && size != expect_bytes) {
        ::close(fd);
        fail("{}: the file changed size while being read ({} bytes, its header was read at {})", p, size, expect_bytes);
    }
    if (size > 0) {
        void* m = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
        const int err = errno;
        ::close(fd);
        if (m == MAP_FAILED) fail("{}: cannot map {} bytes: {}", p, size, std::strerror(err));
        data = static_cast<const std::byte*>(m);
    } else {
        ::close(fd);
    }
}

MappedFile::~MappedFile() {
    if (data) ::munmap(const_cast<std::byte*>(data), size_t(size));
}

OutputFile::OutputFile(const std::string& p, int64_t bytes) : path(p), size(bytes) {
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create: {}", p, std::strerror(errno));
    auto undo = [&](const char* what, int err) {
        ::close(fd_);
        fd_ = -1;
        ::unlink(p.c_str());
        fail("{}: {}: {}", p, what, std::strerror(err));
    };
    if (bytes == 0) return;
    if (const int err = ::posix_fallocate(fd_, 0, off_t(bytes)); err != 0)
        undo(fmt::format("cannot reserve {} bytes", bytes).c_str(), err);
    void* m = ::mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (m == MAP_FAILED) undo("cannot map the file for writing", errno);
    data = static_cast<std::byte*>(m);
}

void OutputFile::finish() {
    if (data && ::msync(data, size_t(size), MS_SYNC) != 0) fail("{}: flush failed: {}", path, std::strerror(errno));
    if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
    finished_ = true;
}

OutputFile::~OutputFile() {
    if (data) ::munmap(data, size_t(size));
    if (fd_ >= 0) ::close(fd_);
    if (!finished_) ::unlink(path.c_str());
}

}  // namespace skew::hf
