// Communicator over NCCL on CUDA device memory (dist/nccl_communicator.h). Every call checks its
// ncclResult_t and throws skew::Error naming the call and the rank.
#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <vector>

#include "dist/nccl_library.h"
#include "engine/error.h"

namespace skew {
namespace {

ncclDataType_t nccl_type(CommDType t) {
    switch (t) {
        case CommDType::F32: return ncclFloat32;
        case CommDType::BF16: return ncclBfloat16;
        case CommDType::F64: return ncclFloat64;
        case CommDType::I32: return ncclInt32;
        case CommDType::I64: return ncclInt64;
        case CommDType::BYTE: return ncclUint8;
    }
    return ncclUint8;
}

void check_cuda(cudaError_t rc, int rank, const char* call) {
    if (rc != cudaSuccess) fail("nccl rank {}: {} failed: {}", rank, call, cudaGetErrorString(rc));
}

/// The communication stream of the non-blocking sums and its two events, shared by a communicator
/// and every communicator split from it (one order of their sums on every rank). Made on the first
/// start_allreduce_sum: a non-blocking stream (no implicit synchronization with the legacy default
/// stream) of the device's highest priority, so NCCL's kernels are scheduled ahead of the
/// backward's when both are ready.
struct CommStream {
    cudaStream_t stream = nullptr;
    cudaEvent_t ready = nullptr;  // recorded on the backend's stream: the bucket's gradients are written
    cudaEvent_t done = nullptr;   // recorded on the communication stream after each sum
    bool in_flight = false;       // a sum was started and not yet waited for

    CommStream(int device, int rank) {
        check_cuda(cudaSetDevice(device), rank, "cudaSetDevice (communication stream)");
        int least = 0, greatest = 0;
        check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), rank, "cudaDeviceGetStreamPriorityRange");
        check_cuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest), rank,
                   "cudaStreamCreateWithPriority (communication stream)");
        check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), rank, "cudaEventCreateWithFlags");
        check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), rank, "cudaEventCreateWithFlags");
    }
    ~CommStream() {
        if (stream) cudaStreamSynchronize(stream);
        if (ready) cudaEventDestroy(ready);
        if (done) cudaEventDestroy(done);
        if (stream) cudaStreamDestroy(stream);
    }
    CommStream(const CommStream&) = delete;
    CommStream& operator=(const CommStream&) = delete;
};

/// An open ncclGroupStart ... ncclGroupEnd bracket: end() closes it and checks NCCL's answer; a
/// throw inside the bracket (a failed ncclSend, say) closes it in the destructor, so the thread is
/// not left inside a group whose calls NCCL would never launch.
class NcclGroup {
public:
    explicit NcclGroup(int rank) : rank_(rank) {
        const ncclResult_t rc = nccl_api().group_start();
        if (rc != ncclSuccess) fail("nccl rank {}: ncclGroupStart failed: {}", rank_, nccl_api().get_error_string(rc));
        open_ = true;
    }
    ~NcclGroup() {
        if (open_) nccl_api().group_end();  // already failing: the first error is the one reported
    }
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;
    /// Close the group (its calls are launched here); returns ncclGroupEnd's result.
    ncclResult_t end() {
        open_ = false;
        return nccl_api().group_end();
    }

private:
    int rank_;
    bool open_ = false;
};

/// Where a communicator's communication stream lives: made on first use, shared with splits.
struct CommStreamSlot {
    std::unique_ptr<CommStream> cs;
};

struct NcclCommunicator final : Communicator {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int device = 0;
    int rank_ = 0, size_ = 1;
    int32_t* barrier_word = nullptr;              // one device int for barrier()
    std::shared_ptr<CommStreamSlot> comm_stream;  // the non-blocking sums' stream (shared with splits)
    int64_t started = 0;                          // tickets handed out since the last wait_all

    NcclCommunicator(ncclComm_t c, cudaStream_t s, int dev, std::shared_ptr<CommStreamSlot> slot)
        : comm(c), stream(s), device(dev), comm_stream(std::move(slot)) {
        check(nccl_api().comm_user_rank(comm, &rank_), "ncclCommUserRank");
        check(nccl_api().comm_count(comm, &size_), "ncclCommCount");
        if (cudaMalloc(&barrier_word, sizeof(int32_t)) != cudaSuccess)
            fail("rank {}: cudaMalloc of the NCCL barrier word failed", rank_);
        // barrier() sums this word over the ranks: a defined value (0), not cudaMalloc's leftovers
        check_cuda(cudaMemsetAsync(barrier_word, 0, sizeof(int32_t), stream), rank_, "cudaMemsetAsync (barrier word)");
    }
    ~NcclCommunicator() override {
        // a sum still in flight on the communication stream reads this communicator
        if (comm_stream && comm_stream->cs) cudaStreamSynchronize(comm_stream->cs->stream);
        if (barrier_word) cudaFree(barrier_word);
        if (comm) nccl_api().comm_destroy(comm);
    }

    void check(ncclResult_t rc, const char* call) const {
        if (rc == ncclSuccess) return;
        fail("nccl rank {} of {}: {} failed: {}{}", rank_, size_, call, nccl_api().get_error_string(rc),
             rc == ncclSystemError || rc == ncclRemoteError ? " (a peer died or the network failed)" : "");
    }
    void sum_allowed(CommDType t) const {
        if (t == CommDType::BYTE) fail("nccl rank {}: a sum of raw bytes is not defined (CommDType::BYTE)", rank_);
    }
    int rank() const override { return rank_; }
    int world_size() const override { return size_; }
    bool device_memory() const override { return true; }

    void allreduce_sum(void* data, int64_t count, CommDType t) override {
        sum_allowed(t);
        check(nccl_api().all_reduce(data, data, size_t(count), nccl_type(t), ncclSum, comm, stream), "ncclAllReduce");
    }
    int64_t start_allreduce_sum(void* data, int64_t count, CommDType t) override {
        sum_allowed(t);
        if (!comm_stream->cs) comm_stream->cs = std::make_unique<CommStream>(device, rank_);
        CommStream& cs = *comm_stream->cs;
        // the communication stream waits for what the backend's stream has enqueued so far (the
        // bucket's gradients), then sums; `done` marks the last sum started
        check_cuda(cudaEventRecord(cs.ready, stream), rank_, "cudaEventRecord (gradients ready)");
        check_cuda(cudaStreamWaitEvent(cs.stream, cs.ready, 0), rank_, "cudaStreamWaitEvent (communication stream)");
        check(nccl_api().all_reduce(data, data, size_t(count), nccl_type(t), ncclSum, comm, cs.stream),
              "ncclAllReduce (started)");
        check_cuda(cudaEventRecord(cs.done, cs.stream), rank_, "cudaEventRecord (sum done)");
        cs.in_flight = true;
        return started++;
    }
    void wait(int64_t ticket) override {
        if (ticket < 0 || ticket >= started)
            fail("nccl rank {}: wait: ticket {} was not started ({} started)", rank_, ticket, started);
        // the sums run in order on one stream: waiting for the last one covers this one
        wait_stream();
    }
    void wait_all() override {
        wait_stream();
        started = 0;
    }
    // The backend's stream waits for every sum started so far on the communication stream.
    void wait_stream() {
        if (!comm_stream->cs || !comm_stream->cs->in_flight) return;
        CommStream& cs = *comm_stream->cs;
        check_cuda(cudaStreamWaitEvent(stream, cs.done, 0), rank_, "cudaStreamWaitEvent (backend stream)");
        cs.in_flight = false;
    }
    void reduce_scatter_sum(const void* send, void* recv, int64_t recv_count, CommDType t) override {
        sum_allowed(t);
        check(nccl_api().reduce_scatter(send, recv, size_t(recv_count), nccl_type(t), ncclSum, comm, stream),
              "ncclReduceScatter");
    }
    void allgather(const void* send, void* recv, int64_t count, CommDType t) override {
        check(nccl_api().all_gather(send, recv, size_t(count), nccl_type(t), comm, stream), "ncclAllGather");
    }
    void allgatherv(const void* send, void* recv, std::span<const int64_t> counts, std::span<const int64_t> displs,
                    CommDType t) override {
        require_per_rank("nccl rank", rank_, size_, counts, "allgatherv counts");
        require_per_rank("nccl rank", rank_, size_, displs, "allgatherv displs");
        const int64_t es = comm_dtype_bytes(t);
        char* out = static_cast<char*>(recv);
        NcclGroup group(rank_);
        for (int r = 0; r < size_; ++r) {
            void* dst = out + displs[size_t(r)] * es;
            const void* src = r == rank_ ? send : dst;
            check(nccl_api().broadcast(src, dst, size_t(counts[size_t(r)]), nccl_type(t), r, comm, stream),
                  "ncclBroadcast");
        }
        check(group.end(), "ncclGroupEnd (allgatherv)");
    }
    void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                   void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                   CommDType t) override {
        check_alltoallv_args("nccl rank", rank_, size_, send_counts, send_displs, recv_counts, recv_displs);
        const int64_t es = comm_dtype_bytes(t);
        const char* s = static_cast<const char*>(send);
        char* d = static_cast<char*>(recv);
        NcclGroup group(rank_);
        for (int r = 0; r < size_; ++r) {
            if (send_counts[size_t(r)] > 0)
                check(nccl_api().send(s + send_displs[size_t(r)] * es, size_t(send_counts[size_t(r)]), nccl_type(t), r,
                                      comm, stream),
                      "ncclSend");
            if (recv_counts[size_t(r)] > 0)
                check(nccl_api().recv(d + recv_displs[size_t(r)] * es, size_t(recv_counts[size_t(r)]), nccl_type(t), r,
                                      comm, stream),
                      "ncclRecv");
        }
        check(group.end(), "ncclGroupEnd (alltoallv)");
    }
    void broadcast(void* data, int64_t count, CommDType t, int root) override {
        check(nccl_api().broadcast(data, data, size_t(count), nccl_type(t), root, comm, stream), "ncclBroadcast");
    }
    void barrier() override {
        check(nccl_api().all_reduce(barrier_word, barrier_word, 1, ncclInt32, ncclSum, comm, stream),
              "ncclAllReduce (barrier)");
        if (cudaStreamSynchronize(stream) != cudaSuccess)
            fail("nccl rank {}: cudaStreamSynchronize (barrier) failed", rank_);
    }
    std::unique_ptr<Communicator> split(int color, int key) override {
        ncclComm_t sub = nullptr;
        check(nccl_api().comm_split(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr), "ncclCommSplit");
        if (!sub) fail("nccl rank {}: ncclCommSplit with color {} gave no communicator", rank_, color);
        return std::make_unique<NcclCommunicator>(sub, stream, device, comm_stream);
    }
    std::string describe() const override {
        return fmt::format("nccl rank {} of {} (device {})", rank_, size_, device);
    }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device, void* stream) {
    if (host.device_memory()) fail("make_nccl_communicator: the bootstrap communicator must move host memory");
    if (cudaSetDevice(device) != cudaSuccess) fail("rank {}: cudaSetDevice({}) failed", host.rank(), device);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (host.rank() == 0) {
        const ncclResult_t rc = nccl_api().get_unique_id(&id);
        if (rc != ncclSuccess) fail("rank 0: ncclGetUniqueId failed: {}", nccl_api().get_error_string(rc));
    }
    host.broadcast(&id, int64_t(sizeof(id)), CommDType::BYTE, 0);
    ncclComm_t comm = nullptr;
    const ncclResult_t rc = nccl_api().comm_init_rank(&comm, host.world_size(), id, host.rank());
    if (rc != ncclSuccess)
        fail("rank {}: ncclCommInitRank ({} ranks, device {}) failed: {}", host.rank(), host.world_size(), device,
             nccl_api().get_error_string(rc));
    return std::make_unique<NcclCommunicator>(comm, static_cast<cudaStream_t>(stream), device,
                                              std::make_shared<CommStreamSlot>());
}

}  // namespace skew
