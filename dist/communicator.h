// Collectives between the ranks of one run (docs/distributed.md): the one interface the trainer,
// the ZeRO-1 optimizer step and the expert-parallel MoE layer use, with three implementations:
// one process (no peers), MPI over host memory (the CPU backend) and NCCL over device memory (the
// CUDA backend). No home-made transport: MPI and NCCL move every byte.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace skew {

/// Element type of a collective's buffers. BF16 sums are formed in fp32 and rounded to nearest
/// even once per addition of two ranks' values (MPI: a user-defined operation; NCCL: ncclBfloat16).
enum class CommDType : uint8_t { F32, BF16, F64, I32, I64, BYTE };

/// Bytes per element of a CommDType.
int64_t comm_dtype_bytes(CommDType t);

/// A group of ranks that run the same program on disjoint data. Every collective is called by
/// every rank of the group in the same order with matching counts (MPI semantics); buffers are in
/// host memory when device_memory() is false, in device memory on the backend's stream otherwise.
/// Counts are in elements and may exceed 2^31 (implementations split the call). Errors (a failed
/// call, a peer that died) throw skew::Error naming the collective and this rank.
struct Communicator {
    virtual ~Communicator() = default;
    /// This process's position in the group, [0, world_size()).
    virtual int rank() const = 0;
    /// Number of ranks in the group.
    virtual int world_size() const = 0;
    /// Whether buffers are device pointers (NCCL) rather than host pointers (MPI, one process).
    virtual bool device_memory() const = 0;
    /// Sum `count` elements of `data` over the group, in place; every rank gets the sum.
    virtual void allreduce_sum(void* data, int64_t count, CommDType t) = 0;
    /// Start the in-place sum of allreduce_sum without waiting for it (docs/distributed.md,
    /// "Overlap with the backward pass"); `data` must stay untouched until a wait completes it.
    /// MPI: MPI_Iallreduce (counts above the chunk limit as several), progressed by every later
    /// start and by the wait. NCCL: ncclAllReduce on a second, communication stream that first
    /// waits for an event recorded on the backend's stream now (so the sum reads what the kernels
    /// enqueued so far wrote); communicators split from one another share that stream, so their
    /// sums run in the order they were started. One process: nothing to do. Every rank starts the
    /// same sums in the same order. No other collective of this communicator may run before the
    /// sums started on it are waited for. Returns the ticket wait() takes (tickets count from 0
    /// again after wait_all()).
    virtual int64_t start_allreduce_sum(void* data, int64_t count, CommDType t) = 0;
    /// Complete the sum of `ticket` (and, on NCCL, every sum started before it): on MPI it has
    /// arrived in `data` on return; on NCCL the backend's stream waits for it (an event recorded
    /// on the communication stream), so kernels enqueued after the call read the sum.
    virtual void wait(int64_t ticket) = 0;
    /// Complete every sum started and not yet waited for, as wait() does; tickets start over.
    virtual void wait_all() = 0;
    /// Sum over the group of `send` (world_size() * recv_count elements); rank r gets elements
    /// [r * recv_count, (r + 1) * recv_count) of the sum in `recv`.
    virtual void reduce_scatter_sum(const void* send, void* recv, int64_t recv_count, CommDType t) = 0;
    /// Concatenate every rank's `count` elements of `send` into `recv` (world_size() * count
    /// elements, rank order). `send` may alias recv + rank() * count (in place).
    virtual void allgather(const void* send, void* recv, int64_t count, CommDType t) = 0;
    /// Like allgather with per-rank counts: rank r contributes counts[r] elements placed at
    /// element offset displs[r] of `recv`. `send` may alias recv + displs[rank()].
    virtual void allgatherv(const void* send, void* recv, std::span<const int64_t> counts,
                            std::span<const int64_t> displs, CommDType t) = 0;
    /// Personalized exchange: this rank sends send_counts[r] elements from send + send_displs[r]
    /// to rank r and receives recv_counts[r] elements from rank r into recv + recv_displs[r].
    virtual void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                           void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                           CommDType t) = 0;
    /// Copy `count` elements of `data` on rank `root` to every rank.
    virtual void broadcast(void* data, int64_t count, CommDType t, int root) = 0;
    /// Wait until every rank of the group has called barrier().
    virtual void barrier() = 0;
    /// A sub-group of the ranks that pass the same `color`, ordered by `key` (MPI_Comm_split),
    /// e.g. the ranks that hold the same experts. Collective over this group.
    virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
    /// Description for logs and messages, e.g. "mpi rank 1 of 4".
    virtual std::string describe() const = 0;
};

/// Throw skew::Error unless `v` has world_size entries (one per rank):
/// "<who> <rank>: <what> has <n> entries for <world_size> ranks", who naming the communicator in
/// its messages ("rank" for MPI, "nccl rank" for NCCL).
void require_per_rank(const char* who, int rank, int world_size, std::span<const int64_t> v, const char* what);

/// The argument checks of Communicator::alltoallv, the one set every multi-rank implementation runs
/// before moving a byte: send_counts, send_displs, recv_counts and recv_displs each one entry per
/// rank, checked in that order (require_per_rank, named "alltoallv send_counts" and so on).
void check_alltoallv_args(const char* who, int rank, int world_size, std::span<const int64_t> send_counts,
                          std::span<const int64_t> send_displs, std::span<const int64_t> recv_counts,
                          std::span<const int64_t> recv_displs);

/// The group of one process (world size 1): every collective copies send to recv or does nothing.
/// Host or device memory per `device_memory`; device copies are not supported (use the backend).
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace skew
