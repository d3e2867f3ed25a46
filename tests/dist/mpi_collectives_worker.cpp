// Run under `mpirun -np N` (tests/CMakeLists.txt): every collective of the MPI communicator
// against hand-computed values, at the world size it was started with. Argument: the chunk limit
// (elements per MPI call; a small one sends every large-count branch through its chunks).
// The non-blocking sums are checked against the blocking ones bit for bit (test_nonblocking).
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
    for (int64_t i = 0; i < n; ++i)
        e16[static_cast<size_t>(i)] = f32_to_bf16(float(((R * n + i) % 5) * N * (N + 1) / 2));
    c.reduce_scatter_sum(s16.data(), r16.data(), n, CommDType::BF16);
    check(equal(r16, e16), "reduce_scatter_sum bf16");
}

void test_allgather(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    std::vector<int32_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n * N), -1),
        e(static_cast<size_t>(n * N));
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
    for (int r = 0; r < N; ++r)
        counts[static_cast<size_t>(r)] = n + r, displs[static_cast<size_t>(r)] = total, total += n + r + 3;
    std::vector<float> vs(static_cast<size_t>(n + R)), vr(static_cast<size_t>(total), -7.0f),
        ve(static_cast<size_t>(total), -7.0f);
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
    std::vector<int64_t> sc(static_cast<size_t>(N)), sd(static_cast<size_t>(N)), rc(static_cast<size_t>(N)),
        rd(static_cast<size_t>(N));
    int64_t st = 0, rt = 0;
    for (int r = 0; r < N; ++r) {
        sc[static_cast<size_t>(r)] = count(R, r), sd[static_cast<size_t>(r)] = st,
        st += sc[static_cast<size_t>(r)] + 1;  // a gap of one
        rc[static_cast<size_t>(r)] = count(r, R), rd[static_cast<size_t>(r)] = rt,
        rt += rc[static_cast<size_t>(r)] + 2;  // a gap of two
    }
    std::vector<int64_t> send(static_cast<size_t>(st), -1), recv(static_cast<size_t>(rt), -5),
        e(static_cast<size_t>(rt), -5);
    for (int d = 0; d < N; ++d)
        for (int64_t i = 0; i < sc[static_cast<size_t>(d)]; ++i)
            send[size_t(sd[static_cast<size_t>(d)] + i)] = R * 1000000 + d * 1000 + i;
    for (int s = 0; s < N; ++s)
        for (int64_t i = 0; i < rc[static_cast<size_t>(s)]; ++i)
            e[size_t(rd[static_cast<size_t>(s)] + i)] = s * 1000000 + R * 1000 + i;
    c.alltoallv(send.data(), sc, sd, recv.data(), rc, rd, CommDType::I64);
    check(equal(recv, e), std::string("alltoallv") + (one_large_pair ? " (one large pair)" : ""));
}

/// A list without one entry per rank is refused on every rank before any transfer, with the message
/// of the shared check (dist/communicator.h check_alltoallv_args; tests/dist/test_collective_args.cpp).
void test_alltoallv_refused(Communicator& c) {
    const int R = c.rank(), N = c.world_size();
    const std::vector<int64_t> ok(static_cast<size_t>(N), 0), bad(static_cast<size_t>(N + 1), 0);
    std::string expected, got;
    try {
        check_alltoallv_args("rank", R, N, ok, ok, ok, bad);
    } catch (const Error& e) {
        expected = e.what();
    }
    int64_t x = 0;
    try {
        c.alltoallv(&x, ok, ok, &x, ok, bad, CommDType::I64);
    } catch (const Error& e) {
        got = e.what();
    }
    check(!expected.empty() && got == expected, "alltoallv refuses a short recv_displs with the shared message (got '" +
                                                    got + "', expected '" + expected + "')");
}

void test_broadcast_split(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    std::vector<double> b(static_cast<size_t>(n)), e(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        b[static_cast<size_t>(i)] = R == N - 1 ? 3.25 * double(i) : -1.0, e[static_cast<size_t>(i)] = 3.25 * double(i);
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

// Values whose sums round (so the order of additions shows in the last bits): element i of rank R
// spread over magnitudes 2^-10 .. 2^10, of either sign.
float rounding_value(int R, int64_t i, int salt) {
    uint32_t h = uint32_t(R) * 0x9E3779B9u ^ uint32_t(i) * 0x85EBCA6Bu ^ uint32_t(salt) * 0xC2B2AE35u;
    h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12;
    const float mant = float(h & 0xFFFFFF) / float(1 << 24) - 0.5f;
    return std::ldexp(mant, int((h >> 24) % 21) - 10);
}

// Non-blocking sums (start_allreduce_sum), the gradient reduction's collective
// (train/data_parallel.cpp): several buckets of fp32 and bf16 in flight at once, each started twice
// (two copies in flight together), one waited for in the middle, the rest by wait_all. Asserted:
// exact sums where the values add exactly; both copies of a bucket bit-equal (the order of additions
// depends on the count and the group, not on timing: overlap on and off give the same bits); and
// against the blocking allreduce_sum: fp32 bit-equal (Open MPI 4.1 at 2 and 4 ranks, measured), bf16
// bit-equal at 2 ranks (one addition per element), at more ranks within the rounding of N - 1
// additions (Open MPI's non-blocking all-reduce of a user-defined operation groups the four ranks'
// values another way than its blocking one). Tickets start over after wait_all; a ticket never
// started is refused.
void test_nonblocking(Communicator& c, int64_t n) {
    const int R = c.rank(), N = c.world_size();
    const std::vector<int64_t> sizes = {1, n, 3 * n + 1, 2 * n + 5, n + 2};
    std::vector<std::vector<float>> f, f2, fe;
    std::vector<std::vector<bf16>> b, b2, be;
    for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<float> v(size_t(sizes[k]));
        std::vector<bf16> w(size_t(sizes[k]));
        for (int64_t i = 0; i < sizes[k]; ++i) {
            v[size_t(i)] = rounding_value(R, i, int(k));
            w[size_t(i)] = f32_to_bf16(rounding_value(R, i, int(k) + 100));
        }
        f.push_back(v), f2.push_back(v), fe.push_back(v), b.push_back(w), b2.push_back(w), be.push_back(w);
    }
    for (size_t k = 0; k < sizes.size(); ++k) {  // the reference: blocking, one after another
        c.allreduce_sum(fe[k].data(), sizes[k], CommDType::F32);
        c.allreduce_sum(be[k].data(), sizes[k], CommDType::BF16);
    }
    std::vector<int64_t> tickets;
    for (size_t k = 0; k < sizes.size(); ++k) {  // interleaved, every one in flight before any wait
        tickets.push_back(c.start_allreduce_sum(f[k].data(), sizes[k], CommDType::F32));
        tickets.push_back(c.start_allreduce_sum(b[k].data(), sizes[k], CommDType::BF16));
        tickets.push_back(c.start_allreduce_sum(f2[k].data(), sizes[k], CommDType::F32));
        tickets.push_back(c.start_allreduce_sum(b2[k].data(), sizes[k], CommDType::BF16));
    }
    bool counted = true;
    for (size_t t = 0; t < tickets.size(); ++t) counted = counted && tickets[t] == int64_t(t);
    check(counted, "start_allreduce_sum: tickets 0, 1, 2, ... in start order");
    c.wait(tickets[4]);  // fp32 bucket 1 alone: complete on return
    check(equal(f[1], fe[1]),
          "wait(ticket): that sum has arrived, equal to the blocking sum (n " + std::to_string(n) + ")");
    c.wait_all();
    for (size_t k = 0; k < sizes.size(); ++k) {
        const std::string at = ", bucket " + std::to_string(k) + ", n " + std::to_string(sizes[k]);
        check(equal(f[k], f2[k]) && equal(b[k], b2[k]), "start_allreduce_sum: two sums of the same values equal" + at);
        check(equal(f[k], fe[k]), "start_allreduce_sum f32 == allreduce_sum" + at);
        if (N == 2) check(equal(b[k], be[k]), "start_allreduce_sum bf16 == allreduce_sum" + at);
        for (int64_t i = 0; i < sizes[k]; ++i) {  // bf16: each within the rounding of N - 1 additions
            double exact = 0, magnitude = 0;
            for (int r = 0; r < N; ++r) {
                const double x = bf16_to_f32(f32_to_bf16(rounding_value(r, i, int(k) + 100)));
                exact += x, magnitude += std::abs(x);
            }
            const double bound = (N - 1) * std::ldexp(magnitude, -8);
            if (std::abs(bf16_to_f32(b[k][size_t(i)]) - exact) > bound ||
                std::abs(bf16_to_f32(be[k][size_t(i)]) - exact) > bound) {
                check(false,
                      "bf16 sums within N - 1 roundings of the exact sum" + at + ", element " + std::to_string(i));
                break;
            }
        }
    }
    // exact sums (small integers) in both dtypes
    std::vector<float> xf(static_cast<size_t>(n));
    std::vector<bf16> xb(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        xf[size_t(i)] = float((R + 1) * (i % 5)), xb[size_t(i)] = f32_to_bf16(float(R + i % 3));
    check(c.start_allreduce_sum(xf.data(), n, CommDType::F32) == 0, "tickets start over after wait_all");
    c.start_allreduce_sum(xb.data(), n, CommDType::BF16);
    c.wait_all();
    bool exact = true;
    for (int64_t i = 0; i < n; ++i)
        exact = exact && xf[size_t(i)] == float(N * (N + 1) / 2 * (i % 5)) &&
                bf16_to_f32(xb[size_t(i)]) == float(N * (N - 1) / 2 + N * (i % 3));
    check(exact, "start_allreduce_sum: exact sums (n " + std::to_string(n) + ")");
    bool refused = false;
    try {
        c.wait(3);
    } catch (const Error&) {
        refused = true;
    }
    check(refused, "wait on a ticket never started is refused");
}

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
            test_nonblocking(*c, n);
        }
        test_alltoallv_refused(*c);
        // large buckets (Open MPI's blocking all-reduce takes another algorithm there); with the small
        // chunk limit that would be ~10^5 requests in flight, so only with the large one
        if (chunk >= 1000) test_nonblocking(*c, 100000);
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
        if (info.rank == 0)
            std::printf("mpi_collectives_worker: %d ranks, chunk %lld: %d failed checks\n", info.world_size,
                        static_cast<long long>(chunk), failures);
        launch_finalize();
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        launch_fail(e.what(), 1);
        return 1;
    }
}
