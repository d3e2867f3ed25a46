// comm_dtype_bytes and the one-process communicator (world size 1).
#include "dist/communicator.h"

#include <cstring>
#include <vector>

#include "engine/error.h"

namespace skew {

int64_t comm_dtype_bytes(CommDType t) {
    switch (t) {
        case CommDType::F32: return 4;
        case CommDType::BF16: return 2;
        case CommDType::F64: return 8;
        case CommDType::I32: return 4;
        case CommDType::I64: return 8;
        case CommDType::BYTE: return 1;
    }
    return 1;
}

void require_per_rank(const char* who, int rank, int world_size, std::span<const int64_t> v, const char* what) {
    if (int64_t(v.size()) != world_size)
        fail("{} {}: {} has {} entries for {} ranks", who, rank, what, v.size(), world_size);
}

void check_alltoallv_args(const char* who, int rank, int world_size, std::span<const int64_t> send_counts,
                          std::span<const int64_t> send_displs, std::span<const int64_t> recv_counts,
                          std::span<const int64_t> recv_displs) {
    require_per_rank(who, rank, world_size, send_counts, "alltoallv send_counts");
    require_per_rank(who, rank, world_size, send_displs, "alltoallv send_displs");
    require_per_rank(who, rank, world_size, recv_counts, "alltoallv recv_counts");
    require_per_rank(who, rank, world_size, recv_displs, "alltoallv recv_displs");
}

namespace {

/// World size 1: sums are the data itself; gathers and exchanges copy send to recv.
struct SelfCommunicator final : Communicator {
    int rank() const override { return 0; }
    int world_size() const override { return 1; }
    bool device_memory() const override { return false; }
    void allreduce_sum(void*, int64_t, CommDType) override {}
    int64_t start_allreduce_sum(void*, int64_t, CommDType) override { return started++; }
    void wait(int64_t ticket) override {
        if (ticket < 0 || ticket >= started)
            fail("wait: ticket {} was not started (one process, {} started)", ticket, started);
    }
    void wait_all() override { started = 0; }
    void reduce_scatter_sum(const void* send, void* recv, int64_t recv_count, CommDType t) override {
        copy(send, recv, recv_count, t);
    }
    void allgather(const void* send, void* recv, int64_t count, CommDType t) override { copy(send, recv, count, t); }
    void allgatherv(const void* send, void* recv, std::span<const int64_t> counts, std::span<const int64_t> displs,
                    CommDType t) override {
        if (counts.size() != 1 || displs.size() != 1) fail("allgatherv: one process needs one count and one displ");
        copy(send, static_cast<char*>(recv) + displs[0] * comm_dtype_bytes(t), counts[0], t);
    }
    void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                   void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                   CommDType t) override {
        if (send_counts.size() != 1 || recv_counts.size() != 1 || send_displs.size() != 1 || recv_displs.size() != 1 ||
            send_counts[0] != recv_counts[0])
            fail("alltoallv: one process sends to itself exactly what it receives");
        const int64_t es = comm_dtype_bytes(t);
        copy(static_cast<const char*>(send) + send_displs[0] * es, static_cast<char*>(recv) + recv_displs[0] * es,
             send_counts[0], t);
    }
    void broadcast(void*, int64_t, CommDType, int root) override {
        if (root != 0) fail("broadcast: root {} in a group of one process", root);
    }
    void barrier() override {}
    std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }
    std::string describe() const override { return "one process"; }

    int64_t started = 0;  // tickets handed out since the last wait_all

    static void copy(const void* send, void* recv, int64_t count, CommDType t) {
        if (send != recv && count > 0) std::memmove(recv, send, size_t(count * comm_dtype_bytes(t)));
    }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace skew
