// One writer per folder: an exclusive flock on a lock file inside it, held for as long as the
// writer runs (`skew prepare` on its output, `skew train` on its run folder). The kernel drops the
// lock when the process ends, however it ends, so a lock is never stale.
#pragma once
#include <string>

namespace skew {

/// A held lock on <dir>/<lock file>; the destructor (or release()) removes the file and unlocks.
struct DirLock {
    std::string path;  // the lock file
    int fd = -1;
    DirLock() = default;
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    ~DirLock() { release(); }
    /// Remove the lock file (while still locked) and unlock; a no-op when not held.
    void release();
};

/// Take an exclusive, non-blocking flock on dir/lock_file (created if missing; dir must exist).
/// `who` names the writer in the message ("skew prepare", "skew train"). Throws skew::Error
/// "<who>: another <who> is writing <dir> (it holds <lock file>); ..." when another process holds
/// it, or naming the file and the OS error when it cannot be created or locked. A lock file that
/// its holder removed between our open and flock (another inode under the name) is retried.
void dir_lock(DirLock& lock, const std::string& dir, const std::string& lock_file, const std::string& who);

}  // namespace skew
