// What one `skew train` invocation created in its run folder, so that a run failing before its
// first checkpoint is taken back whole (docs/training.md, "The run folder").
#pragma once
#include <system_error>

#include <filesystem>
#include <vector>

namespace skew {

/// What this invocation of `skew train` created in the run folder (files and folders that did not
/// exist before it), so that a run failing before any checkpoint can be taken back whole and the
/// same --out (or --resume) works again once the command is fixed. `committed` turns true with the
/// first checkpoint written; from then on the folder is a run to resume and nothing is removed.
struct RunWrites {
    std::vector<std::filesystem::path> files;
    std::vector<std::filesystem::path> dirs;  // outermost first
    bool committed = false;

    /// Note `path` as this invocation's unless it exists already; call before creating it.
    void file(const std::filesystem::path& path) {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) files.push_back(path);
    }
    /// Note `dir` and its parents that do not exist yet as this invocation's (it creates them next,
    /// or save_checkpoint does).
    void dir(const std::filesystem::path& dir) {
        std::vector<std::filesystem::path> missing;
        std::error_code ec;
        std::filesystem::path start = dir.lexically_normal();
        if (start.filename().empty()) start = start.parent_path();  // "runs/x/"
        for (std::filesystem::path p = start; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
            missing.push_back(p);
            if (p == p.parent_path()) break;
        }
        dirs.insert(dirs.end(), missing.rbegin(), missing.rend());
    }
    /// Remove the noted files, then the noted folders innermost first, each only if empty.
    void undo() {
        std::error_code ec;
        for (const std::filesystem::path& f : files) std::filesystem::remove(f, ec);
        for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
            std::filesystem::remove(*it, ec);  // fails (kept) when not empty
    }
};

}  // namespace skew
