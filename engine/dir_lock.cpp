// Folder locks by flock(2) on a lock file (see dir_lock.h).
#include "engine/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/error.h"

namespace skew {

void DirLock::release() {
    if (fd < 0) return;
    ::unlink(path.c_str());
    ::close(fd);
    fd = -1;
}

void dir_lock(DirLock& lock, const std::string& dir, const std::string& lock_file, const std::string& who) {
    lock.path = (std::filesystem::path(dir) / lock_file).string();
    for (int attempt = 0; attempt < 100; attempt++) {
        const int fd = ::open(lock.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) fail("{}: cannot create the lock file {}: {}", who, lock.path, std::strerror(errno));
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            ::close(fd);
            if (err == EWOULDBLOCK)
                fail("{}: another {} is writing {} (it holds {}); wait for it to finish or choose another folder", who,
                     who, dir, lock.path);
            fail("{}: cannot lock {}: {}", who, lock.path, std::strerror(err));
        }
        struct stat held {
        }, named{};
        if (::fstat(fd, &held) == 0 && ::stat(lock.path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev) {
            lock.fd = fd;
            return;
        }
        ::close(fd);  // its holder finished and removed it: lock the file now under that name
    }
    fail("{}: cannot take the lock {}: it keeps being replaced", who, lock.path);
}

}  // namespace skew
