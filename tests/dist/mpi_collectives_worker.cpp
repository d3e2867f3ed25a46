// Run under `mpirun -np N` (tests/dist/CMakeLists.txt): every collective of the MPI communicator
// against hand-computed values, at the world size it was started with. Argument: the chunk limit
// (elements per MPI call; a small one sends every large-count branch through its chunks).
// Exits 0 when every check passes on every rank; prints the first failed check and exits 1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/launch.h"
#include "dist/mpi_communicator.h"
#include "engine/error.h"
#include "kernels/common/bf16.h"

namespace {

using namespace skew;

int g_failures = 0;
int g_rank = 0;

void check(bool ok, const std::string& what) {
    if (ok) return;
    ++g_failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}

template <typename T>
bool equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

void test_allreduce(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    std::vector<float> f(static_cast<size_t>(n)), fe(static_cast<size_t>(n));
    std::vector<double> d(static_cast<size_t>(n)), de(static_cast<size_t>(n));
    std::vector<int32_t> i32(static_cast<size_t>(n)), i32e(static_cast<size_t>(n));
    std::vector<int64_t> i64(static_cast<size_t>(n)), i64e(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        f[static_cast<size_t>(i)] = float(R + 1) + 0.5f * float(i);  // exact in fp32 for these sizes
        d[static_cast<size_t>(i)] = double(R + 1) * 0.25 + double(i);
        i32[static_cast<size_t>(i)] = int32_t(R * 1000 + i);
        i64[static_cast<size_t>(i)] = (int64_t(1) << 40) * (R + 1) + i;
        fe[static_cast<size_t>(i)] = float(N * (N + 1) / 2) + 0.5f * float(i) * float(N);
        de[static_cast<size_t>(i)] = 0.25 * double(N * (N + 1) / 2) + double(i) * N;
        i32e[static_cast<size_t>(i)] = int32_t(1000 * N * (N - 1) / 2 + N * i);
        i64e[static_cast<size_t>(i)] = (int64_t(1) << 40) * (N * (N + 1) / 2) + N * i;
    }
    c.allreduce_sum(f.data(), n, CommDType::F32);
    c.allreduce_sum(d.data(), n, CommDType::F64);
    c.allreduce_sum(i32.data(), n, CommDType::I32);
    c.allreduce_sum(i64.data(), n, CommDType::I64);
    check(equal(f, fe), "allreduce_sum f32");
    check(equal(d, de), "allreduce_sum f64");
    check(equal(i32, i32e), "allreduce_sum i32");
    check(equal(i64, i64e), "allreduce_sum i64");
}

void test_bf16(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    // Exactly representable sums (any order gives the same): small integers.
    std::vector<bf16> v(static_cast<size_t>(n)), e(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        v[static_cast<size_t>(i)] = f32_to_bf16(float((R + 1) * (i % 7)));
        e[static_cast<size_t>(i)] = f32_to_bf16(float(N * (N + 1) / 2 * (i % 7)));
    }
    c.allreduce_sum(v.data(), n, CommDType::BF16);
    check(equal(v, e), "allreduce_sum bf16 (exact sums)");
    if (N == 2) {
        // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> the even 1; (1 + 2^-7) + 2^-8 is
        // halfway between 1 + 2^-7 and 1 + 2^-6 -> the even 1 + 2^-6. Truncation would give
        // 1 + 2^-7 for the second, rounding half up 1 + 2^-7 for the first.
        const float tiny = std::ldexp(1.0f, -8);
        std::vector<bf16> t = {f32_to_bf16(R == 0 ? 1.0f : tiny), f32_to_bf16(R == 0 ? 1.0f + 2 * tiny : tiny),
                               f32_to_bf16(R == 0 ? 3.0f : -1.0f)};
        c.allreduce_sum(t.data(), 3, CommDType::BF16);
        check(bf16_to_f32(t[0]) == 1.0f, "bf16 sum: tie to even (down)");
        check(bf16_to_f32(t[1]) == 1.0f + 4 * tiny, "bf16 sum: tie to even (up)");
        check(bf16_to_f32(t[2]) == 2.0f, "bf16 sum: signed");
    }
}

void test_reduce_scatter(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    std::vector<float> send(static_cast<size_t>(n * N)), recv(static_cast<size_t>(n), -1.0f), e(static_cast<size_t>(n));
    for (int64_t j = 0; j < n * N; ++j) send[static_cast<size_t>(j)] = float(R * 1000 + j);
    for (int64_t i = 0; i < n; ++i) e[static_cast<size_t>(i)] = float(1000 * N * (N - 1) / 2 + N * (R * n + i));
    c.reduce_scatter_sum(send.data(), recv.data(), n, CommDType::F32);
    check(equal(recv, e), "reduce_scatter_sum f32 (count " + std::to_string(n) + ")");
    std::vector<bf16> s16(static_cast<size_t>(n * N)), r16(static_cast<size_t>(n)), e16(static_cast<size_t>(n));
    for (int64_t j = 0; j < n * N; ++j) s16[static_cast<size_t>(j)] = f32_to_bf16(float((j % 5) * (R + 1)));
    for (int64_t i = 0; i < n; ++i) e16[static_cast<size_t>(i)] = f32_to_bf16(float(((R * n + i) % 5) * N * (N + 1) / 2));
    c.reduce_scatter_sum(s16.data(), r16.data(), n, CommDType::BF16);
    check(equal(r16, e16), "reduce_scatter_sum bf16");
}

void test_allgather(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    std::vector<int32_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n * N), -1), e(static_cast<size_t>(n * N));
    for (int64_t i = 0; i < n; ++i) send[static_cast<size_t>(i)] = int32_t(100000 * R + i);
    for (int r = 0; r < N; ++r)
        for (int64_t i = 0; i < n; ++i) e[static_cast<size_t>(r * n + i)] = int32_t(100000 * r + i);
    c.allgather(send.data(), recv.data(), n, CommDType::I32);
    check(equal(recv, e), "allgather");
    // in place: this rank's block already sits at recv + rank * n
    std::vector<int32_t> inplace(static_cast<size_t>(n * N), -1);
    std::memcpy(inplace.data() + R * n, send.data(), static_cast<size_t>(n) * sizeof(int32_t));
    c.allgather(inplace.data() + R * n, inplace.data(), n, CommDType::I32);
    check(equal(inplace, e), "allgather in place");

    // v: rank r gives n + r elements, placed with a gap of 3 elements after each block
    std::vector<int64_t> counts(static_cast<size_t>(N)), displs(static_cast<size_t>(N));
    int64_t total = 0;
    for (int r = 0; r < N; ++r) counts[static_cast<size_t>(r)] = n + r, displs[static_cast<size_t>(r)] = total, total += n + r + 3;
    std::vector<float> vs(static_cast<size_t>(n + R)), vr(static_cast<size_t>(total), -7.0f), ve(static_cast<size_t>(total), -7.0f);
    for (int64_t i = 0; i < n + R; ++i) vs[static_cast<size_t>(i)] = float(R) * 0.5f + float(i);
    for (int r = 0; r < N; ++r)
        for (int64_t i = 0; i < n + r; ++i) ve[size_t(displs[static_cast<size_t>(r)] + i)] = float(r) * 0.5f + float(i);
    c.allgatherv(vs.data(), vr.data(), counts, displs, CommDType::F32);
    check(equal(vr, ve), "allgatherv");
    std::vector<float> vin(static_cast<size_t>(total), -7.0f);
    std::memcpy(vin.data() + displs[static_cast<size_t>(R)], vs.data(), vs.size() * sizeof(float));
    c.allgatherv(vin.data() + displs[static_cast<size_t>(R)], vin.data(), counts, displs, CommDType::F32);
    check(equal(vin, ve), "allgatherv in place");
}

void test_alltoallv(Communicator& c, int64_t n, bool one_large_pair) {
    const int R = c.rank(), N = c.world_size();
    // rank s sends (s + d + 1) * k elements to rank d, value s * 1e6 + d * 1e3 + i; with
    // one_large_pair only 0 -> N-1 is large (n elements), so ranks disagree on "large" locally.
    auto count = [&](int s, int d) -> int64_t {
        if (one_large_pair) return s == 0 && d == N - 1 ? n : s + d;
        return int64_t(s + d + 1) * n;
    };
    std::vector<int64_t> sc(static_cast<size_t>(N)), sd(static_cast<size_t>(N)), rc(static_cast<size_t>(N)), rd(static_cast<size_t>(N));
    int64_t st = 0, rt = 0;
    for (int r = 0; r < N; ++r) {
        sc[static_cast<size_t>(r)] = count(R, r), sd[static_cast<size_t>(r)] = st, st += sc[static_cast<size_t>(r)] + 1;  // a gap of one
        rc[static_cast<size_t>(r)] = count(r, R), rd[static_cast<size_t>(r)] = rt, rt += rc[static_cast<size_t>(r)] + 2;  // a gap of two
    }
    std::vector<int64_t> send(static_cast<size_t>(st), -1), recv(static_cast<size_t>(rt), -5), e(static_cast<size_t>(rt), -5);
    for (int d = 0; d < N; ++d)
        for (int64_t i = 0; i < sc[static_cast<size_t>(d)]; ++i) send[size_t(sd[static_cast<size_t>(d)] + i)] = R * 1000000 + d * 1000 + i;
    for (int s = 0; s < N; ++s)
        for (int64_t i = 0; i < rc[static_cast<size_t>(s)]; ++i) e[size_t(rd[static_cast<size_t>(s)] + i)] = s * 1000000 + R * 1000 + i;
    c.alltoallv(send.data(), sc, sd, recv.data(), rc, rd, CommDType::I64);
    check(equal(recv, e), std::string("alltoallv") + (one_large_pair ? " (one large pair)" : ""));
}

void test_broadcast_split(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    std::vector<double> b(static_cast<size_t>(n)), e(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) b[static_cast<size_t>(i)] = R == N - 1 ? 3.25 * double(i) : -1.0, e[static_cast<size_t>(i)] = 3.25 * double(i);
    c.broadcast(b.data(), n, CommDType::F64, N - 1);
    check(equal(b, e), "broadcast from the last rank");

    // split by parity, ordered by descending rank
    std::unique_ptr<Communicator> sub = c.split(R % 2, -R);
    const int members = (N + 1 - R % 2) / 2;
    check(sub->world_size() == members, "split: size");
    int above = 0;  // same-parity ranks above R come first
    for (int r = R + 1; r < N; ++r) above += r % 2 == R % 2;
    check(sub->rank() == above, "split: rank ordered by key");
    int32_t sum = R;
    sub->allreduce_sum(&sum, 1, CommDType::I32);
    int32_t expect = 0;
    for (int r = R % 2; r < N; r += 2) expect += r;
    check(sum == expect, "split: allreduce within the group");
    sub->barrier();
    c.barrier();
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const LaunchInfo& info = launch_init(&argc, &argv);
        if (!info.mpi) {
            std::fprintf(stderr, "mpi_collectives_worker: start it with mpirun\n");
            return 2;
        }
        g_rank = info.rank;
        const int64_t chunk = argc > 1 ? std::atoll(argv[1]) : MPI_MAX_CHUNK_ELEMENTS;
        std::unique_ptr<Communicator> c = make_mpi_world_communicator(chunk);
        check(c->rank() == info.rank && c->world_size() == info.world_size, "rank and world size");
        check(info.local_rank == info.rank && info.local_size == info.world_size, "local rank on one node");
        check(c->describe() == "mpi rank " + std::to_string(info.rank) + " of " + std::to_string(info.world_size),
              "describe");
        for (int64_t n : {int64_t(1), int64_t(5), int64_t(37), int64_t(1000)}) {
            test_allreduce(*c, n);
            test_bf16(*c, n);
            test_reduce_scatter(*c, n);
            test_allgather(*c, n);
            test_alltoallv(*c, n, false);
            test_alltoallv(*c, n, true);
            test_broadcast_split(*c, n);
        }
        bool refused = false;
        try {
            char x = 0;
            c->allreduce_sum(&x, 1, CommDType::BYTE);
        } catch (const Error&) {
            refused = true;
        }
        check(refused, "a sum of bytes is refused");
        c.reset();
        // every rank learns whether any failed, so that the exit codes agree
        Communicator& w = launch_world();
        int32_t failures = g_failures;
        w.allreduce_sum(&failures, 1, CommDType::I32);
        if (info.rank == 0) std::printf("mpi_collectives_worker: %d ranks, chunk %lld: %d failed checks\n",
                                        info.world_size, static_cast<long long>(chunk), failures);
        launch_finalize();
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        launch_fail(e.what(), 1);
        return 1;
    }
}
