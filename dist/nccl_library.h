// NCCL's entry points, resolved from libnccl.so.2 when a run first needs them (docs/distributed.md,
// "The NCCL path"): a CUDA build of skew does not link NCCL, so single-GPU runs, CPU runs and the
// tests start on a machine without it; only a multi-rank CUDA run (mpirun or srun) loads it.
#pragma once
#include <nccl.h>

#include <string>
#include <vector>

namespace skew {

/// The NCCL functions the NCCL communicator calls, with nccl.h's signatures.
struct NcclApi {
    decltype(&ncclGetVersion) get_version = nullptr;
    decltype(&ncclGetErrorString) get_error_string = nullptr;
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) comm_init_rank = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclCommSplit) comm_split = nullptr;
    decltype(&ncclCommUserRank) comm_user_rank = nullptr;
    decltype(&ncclCommCount) comm_count = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclReduceScatter) reduce_scatter = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclBroadcast) broadcast = nullptr;
    decltype(&ncclSend) send = nullptr;
    decltype(&ncclRecv) recv = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;
    int version = 0;  // ncclGetVersion's code, e.g. 22809 for 2.28.9
};

/// The oldest NCCL the communicator accepts (ncclCommSplit arrived in 2.18).
inline constexpr int kNcclMinVersion = 21800;

/// NCCL's API, loaded on the first call (thread-safe) with dlopen: the file named by the
/// environment variable SKEW_NCCL_LIBRARY when it is set, else "libnccl.so.2" on the dynamic
/// loader's search path (LD_LIBRARY_PATH, ldconfig), else the library the build found
/// (SKEW_NCCL_BUILD_PATH, the CUDA toolkit's). Throws skew::Error naming each file tried and the
/// loader's reason when none loads, a symbol missing from it, or a version older than
/// kNcclMinVersion; the error is remembered and thrown again by later calls.
const NcclApi& nccl_api();

/// The files nccl_api() tries, in its order: $SKEW_NCCL_LIBRARY (when set), "libnccl.so.2", the
/// build's library (when the build found one).
std::vector<std::string> nccl_library_candidates();

/// Load NCCL from the first of `candidates` that dlopen accepts, as nccl_api() does, without
/// touching what nccl_api() holds: "" when it loads with every symbol and a version of at least
/// kNcclMinVersion, else the message nccl_api() would throw (every file tried, with the loader's
/// reason, and a hint).
std::string nccl_load_error(const std::vector<std::string>& candidates);

/// Whether NCCL could be loaded (nccl_api() would not throw); loads it if not yet tried.
bool nccl_available();

}  // namespace skew
