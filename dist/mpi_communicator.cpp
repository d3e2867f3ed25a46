// Communicator over Open MPI (host memory). Every call checks its return code (the communicator
// uses MPI_ERRORS_RETURN) and throws skew::Error naming the call and the rank. Counts above
// max_chunk_ elements (2^30 by default) are split into chunks (MPI 3.1 counts are int).
#include "dist/mpi_communicator.h"

#include <climits>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "kernels/common/bf16.h"

namespace skew {
namespace {

/// Sum of bf16 values (as uint16 patterns): widen, add in fp32, round to nearest even.
void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const bf16* a = static_cast<const bf16*>(in);
    bf16* b = static_cast<bf16*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

MPI_Datatype mpi_type(CommDType t) {
    switch (t) {
        case CommDType::F32: return MPI_FLOAT;
        case CommDType::BF16: return MPI_UINT16_T;
        case CommDType::F64: return MPI_DOUBLE;
        case CommDType::I32: return MPI_INT32_T;
        case CommDType::I64: return MPI_INT64_T;
        case CommDType::BYTE: return MPI_BYTE;
    }
    return MPI_BYTE;
}

struct MpiCommunicator final : Communicator {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Op bf16_sum = MPI_OP_NULL;
    int rank_ = 0, size_ = 1;
    int64_t max_chunk_ = MPI_MAX_CHUNK_ELEMENTS;  // elements per MPI call

    MpiCommunicator(MPI_Comm c, int64_t max_chunk) : comm(c), max_chunk_(max_chunk) {
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm, &rank_);
        MPI_Comm_size(comm, &size_);
        MPI_Op_create(&bf16_sum_op, 1, &bf16_sum);
    }
    ~MpiCommunicator() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        if (bf16_sum != MPI_OP_NULL) MPI_Op_free(&bf16_sum);
        if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }

    void check(int rc, const char* call) const {
        if (rc == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        fail("rank {} of {}: {} failed: {}", rank_, size_, call, std::string(text, size_t(len)));
    }
    MPI_Op sum_op(CommDType t) const {
        if (t == CommDType::BYTE) fail("rank {}: a sum of raw bytes is not defined (CommDType::BYTE)", rank_);
        return t == CommDType::BF16 ? bf16_sum : MPI_SUM;
    }

    int rank() const override { return rank_; }
    int world_size() const override { return size_; }
    bool device_memory() const override { return false; }

    void allreduce_sum(void* data, int64_t count, CommDType t) override {
        char* p = static_cast<char*>(data);
        const int64_t es = comm_dtype_bytes(t);
        for (int64_t off = 0; off < count; off += max_chunk_) {
            const int n = int(std::min(max_chunk_, count - off));
            check(MPI_Allreduce(MPI_IN_PLACE, p + off * es, n, mpi_type(t), sum_op(t), comm), "MPI_Allreduce");
        }
    }

    // Non-blocking sums: the requests of each ticket (one per chunk), until a wait completes them.
    std::vector<std::vector<MPI_Request>> pending_;

    int64_t start_allreduce_sum(void* data, int64_t count, CommDType t) override {
        char* p = static_cast<char*>(data);
        const int64_t es = comm_dtype_bytes(t);
        std::vector<MPI_Request> reqs;
        for (int64_t off = 0; off < count; off += max_chunk_) {
            const int n = int(std::min(max_chunk_, count - off));
            reqs.push_back(MPI_REQUEST_NULL);
            check(MPI_Iallreduce(MPI_IN_PLACE, p + off * es, n, mpi_type(t), sum_op(t), comm, &reqs.back()),
                  "MPI_Iallreduce");
        }
        pending_.push_back(std::move(reqs));
        // Open MPI progresses a non-blocking collective only inside MPI calls: test every sum in
        // flight, so the earlier buckets move while the caller computes the next ones.
        for (std::vector<MPI_Request>& r : pending_) {
            int done = 0;
            if (!r.empty()) check(MPI_Testall(int(r.size()), r.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
        }
        return int64_t(pending_.size()) - 1;
    }
    void wait(int64_t ticket) override {
        if (ticket < 0 || ticket >= int64_t(pending_.size()))
            fail("rank {}: wait: ticket {} was not started ({} in flight)", rank_, ticket, pending_.size());
        std::vector<MPI_Request>& r = pending_[size_t(ticket)];
        if (!r.empty()) check(MPI_Waitall(int(r.size()), r.data(), MPI_STATUSES_IGNORE), "MPI_Waitall (allreduce)");
        r.clear();
    }
    void wait_all() override {
        for (int64_t k = 0; k < int64_t(pending_.size()); ++k) wait(k);
        pending_.clear();
    }

    void reduce_scatter_sum(const void* send, void* recv, int64_t recv_count, CommDType t) override {
        const int64_t es = comm_dtype_bytes(t);
        if (recv_count <= max_chunk_) {
            check(MPI_Reduce_scatter_block(send, recv, int(recv_count), mpi_type(t), sum_op(t), comm),
                  "MPI_Reduce_scatter_block");
            return;
        }
        // Large: each rank's block reduced to it in chunks.
        const char* s = static_cast<const char*>(send);
        for (int r = 0; r < size_; ++r)
            for (int64_t off = 0; off < recv_count; off += max_chunk_) {
                const int n = int(std::min(max_chunk_, recv_count - off));
                const char* src = s + (int64_t(r) * recv_count + off) * es;
                void* dst = static_cast<char*>(recv) + off * es;
                check(MPI_Reduce(src, r == rank_ ? dst : nullptr, n, mpi_type(t), sum_op(t), r, comm), "MPI_Reduce");
            }
    }

    void allgather(const void* send, void* recv, int64_t count, CommDType t) override {
        std::vector<int64_t> counts(size_t(size_), count);
        std::vector<int64_t> displs(size_t(size_), 0);
        for (int r = 0; r < size_; ++r) displs[size_t(r)] = int64_t(r) * count;
        allgatherv(send, recv, counts, displs, t);
    }

    void allgatherv(const void* send, void* recv, std::span<const int64_t> counts, std::span<const int64_t> displs,
                    CommDType t) override {
        require_per_rank("rank", rank_, size_, counts, "allgatherv counts");
        require_per_rank("rank", rank_, size_, displs, "allgatherv displs");
        const int64_t es = comm_dtype_bytes(t);
        char* out = static_cast<char*>(recv);
        const bool small = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c <= max_chunk_; }) &&
                           std::all_of(displs.begin(), displs.end(), [&](int64_t d) { return d <= max_chunk_; });
        const void* mine = send == out + displs[size_t(rank_)] * es ? MPI_IN_PLACE : send;
        if (small) {
            std::vector<int> c(counts.begin(), counts.end()), d(displs.begin(), displs.end());
            check(MPI_Allgatherv(mine, c[size_t(rank_)], mpi_type(t), recv, c.data(), d.data(), mpi_type(t), comm),
                  "MPI_Allgatherv");
            return;
        }
        // Large: each rank's segment broadcast from it in chunks.
        if (mine != MPI_IN_PLACE)
            std::memcpy(out + displs[size_t(rank_)] * es, send, size_t(counts[size_t(rank_)] * es));
        for (int r = 0; r < size_; ++r)
            for (int64_t off = 0; off < counts[size_t(r)]; off += max_chunk_) {
                const int n = int(std::min(max_chunk_, counts[size_t(r)] - off));
                check(MPI_Bcast(out + (displs[size_t(r)] + off) * es, n, mpi_type(t), r, comm), "MPI_Bcast");
            }
    }

    void alltoallv(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                   void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                   CommDType t) override {
        check_alltoallv_args("rank", rank_, size_, send_counts, send_displs, recv_counts, recv_displs);
        auto fits = [&](std::span<const int64_t> v) {
            return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x <= max_chunk_; });
        };
        const int64_t es = comm_dtype_bytes(t);
        // Every rank must take the same branch, and each sees only its own counts: agree first.
        int large = fits(send_counts) && fits(send_displs) && fits(recv_counts) && fits(recv_displs) ? 0 : 1;
        check(MPI_Allreduce(MPI_IN_PLACE, &large, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (alltoallv branch)");
        if (!large) {
            std::vector<int> sc(send_counts.begin(), send_counts.end()), sd(send_displs.begin(), send_displs.end());
            std::vector<int> rc(recv_counts.begin(), recv_counts.end()), rd(recv_displs.begin(), recv_displs.end());
            check(MPI_Alltoallv(send, sc.data(), sd.data(), mpi_type(t), recv, rc.data(), rd.data(), mpi_type(t), comm),
                  "MPI_Alltoallv");
            return;
        }
        // Large: every pair's data in chunks of at most max_chunk_ elements, nonblocking. The sender of
        // a pair cuts send_counts[to] into the same chunks as the receiver cuts its recv_counts[from]
        // (the two are equal by MPI semantics), and messages between two ranks with one tag arrive in
        // order, so chunk i meets chunk i.
        const char* s = static_cast<const char*>(send);
        char* d = static_cast<char*>(recv);
        std::vector<MPI_Request> reqs;
        for (int r = 0; r < size_; ++r)
            for (int64_t off = 0; off < recv_counts[size_t(r)]; off += max_chunk_) {
                reqs.emplace_back();
                check(MPI_Irecv(d + (recv_displs[size_t(r)] + off) * es,
                                int(std::min(max_chunk_, recv_counts[size_t(r)] - off)), mpi_type(t), r, 7, comm,
                                &reqs.back()),
                      "MPI_Irecv");
            }
        for (int k = 0; k < size_; ++k) {
            const int r = (rank_ + k) % size_;
            for (int64_t off = 0; off < send_counts[size_t(r)]; off += max_chunk_) {
                reqs.emplace_back();
                check(MPI_Isend(s + (send_displs[size_t(r)] + off) * es,
                                int(std::min(max_chunk_, send_counts[size_t(r)] - off)), mpi_type(t), r, 7, comm,
                                &reqs.back()),
                      "MPI_Isend");
            }
        }
        check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall (alltoallv)");
    }

    void broadcast(void* data, int64_t count, CommDType t, int root) override {
        char* p = static_cast<char*>(data);
        const int64_t es = comm_dtype_bytes(t);
        for (int64_t off = 0; off < count; off += max_chunk_)
            check(MPI_Bcast(p + off * es, int(std::min(max_chunk_, count - off)), mpi_type(t), root, comm),
                  "MPI_Bcast");
    }

    void barrier() override { check(MPI_Barrier(comm), "MPI_Barrier"); }

    std::unique_ptr<Communicator> split(int color, int key) override {
        MPI_Comm sub = MPI_COMM_NULL;
        check(MPI_Comm_split(comm, color, key, &sub), "MPI_Comm_split");
        return std::make_unique<MpiCommunicator>(sub, max_chunk_);
    }

    std::string describe() const override { return fmt::format("mpi rank {} of {}", rank_, size_); }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world_communicator(int64_t max_chunk_elements) {
    if (max_chunk_elements < 1 || max_chunk_elements > MPI_MAX_CHUNK_ELEMENTS)
        fail("make_mpi_world_communicator: chunk limit {} elements outside [1, {}]", max_chunk_elements,
             MPI_MAX_CHUNK_ELEMENTS);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) fail("make_mpi_world_communicator: MPI is not initialized (launch under mpirun or srun)");
    MPI_Comm dup = MPI_COMM_NULL;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS) fail("MPI_Comm_dup(MPI_COMM_WORLD) failed");
    return std::make_unique<MpiCommunicator>(dup, max_chunk_elements);
}

}  // namespace skew
