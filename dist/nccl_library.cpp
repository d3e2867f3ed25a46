// Loading NCCL at run time (dist/nccl_library.h).
#include "dist/nccl_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "engine/error.h"

namespace skew {
namespace {

struct Loaded {
    NcclApi api;
    std::string error;  // empty when api is usable
};

template <typename F>
bool resolve(void* lib, const char* name, F& fn, std::string& error) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    if (!fn && error.empty()) error = fmt::format("symbol {} not found", name);
    return fn != nullptr;
}

Loaded load(const std::vector<std::string>& candidates) {
    Loaded out;
    void* lib = nullptr;
    std::string tried, used;
    for (const std::string& c : candidates) {
        lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            used = c;
            break;
        }
        const char* why = dlerror();
        tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", c, why ? why : "not found");
    }
    if (!lib) {
        out.error = fmt::format(
            "NCCL could not be loaded, and a multi-rank CUDA run sums gradients with it: tried {}\n"
            "--> HINT: install NCCL (Debian/Ubuntu: libnccl2; pip: nvidia-nccl-cu13), put the folder holding "
            "libnccl.so.2 on LD_LIBRARY_PATH, or set SKEW_NCCL_LIBRARY to the file",
            tried);
        return out;
    }
    NcclApi& a = out.api;
    std::string missing;
    resolve(lib, "ncclGetVersion", a.get_version, missing);
    resolve(lib, "ncclGetErrorString", a.get_error_string, missing);
    resolve(lib, "ncclGetUniqueId", a.get_unique_id, missing);
    resolve(lib, "ncclCommInitRank", a.comm_init_rank, missing);
    resolve(lib, "ncclCommDestroy", a.comm_destroy, missing);
    resolve(lib, "ncclCommSplit", a.comm_split, missing);
    resolve(lib, "ncclCommUserRank", a.comm_user_rank, missing);
    resolve(lib, "ncclCommCount", a.comm_count, missing);
    resolve(lib, "ncclAllReduce", a.all_reduce, missing);
    resolve(lib, "ncclReduceScatter", a.reduce_scatter, missing);
    resolve(lib, "ncclAllGather", a.all_gather, missing);
    resolve(lib, "ncclBroadcast", a.broadcast, missing);
    resolve(lib, "ncclSend", a.send, missing);
    resolve(lib, "ncclRecv", a.recv, missing);
    resolve(lib, "ncclGroupStart", a.group_start, missing);
    resolve(lib, "ncclGroupEnd", a.group_end, missing);
    if (!missing.empty()) {
        out.error = fmt::format("NCCL library {}: {} (NCCL {}.{} or newer is needed)", used, missing,
                                kNcclMinVersion / 10000, kNcclMinVersion / 100 % 100);
        return out;
    }
    if (a.get_version(&a.version) != ncclSuccess || a.version < kNcclMinVersion)
        out.error = fmt::format("NCCL library {} is version code {}; skew needs {}.{} or newer ({})", used, a.version,
                                kNcclMinVersion / 10000, kNcclMinVersion / 100 % 100, kNcclMinVersion);
    return out;
}

const Loaded& loaded() {
    static std::once_flag once;
    static Loaded l;
    std::call_once(once, [] { l = load(nccl_library_candidates()); });
    return l;
}

}  // namespace

std::vector<std::string> nccl_library_candidates() {
    std::vector<std::string> candidates;
    if (const char* p = std::getenv("SKEW_NCCL_LIBRARY"); p && *p) candidates.emplace_back(p);
    candidates.emplace_back("libnccl.so.2");
#if defined(SKEW_NCCL_BUILD_PATH)
    candidates.emplace_back(SKEW_NCCL_BUILD_PATH);
#endif
    return candidates;
}

std::string nccl_load_error(const std::vector<std::string>& candidates) { return load(candidates).error; }

const NcclApi& nccl_api() {
    const Loaded& l = loaded();
    if (!l.error.empty()) throw Error(l.error);
    return l.api;
}

bool nccl_available() { return loaded().error.empty(); }

}  // namespace skew
