// The NCCL communicator refuses a bad alltoallv argument with the shared check's message
// (dist/communicator.h check_alltoallv_args; the MPI twin: tests/dist/mpi_collectives_worker.cpp).
// One rank over the one-process bootstrap, so no mpirun is needed.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/nccl_communicator.h"
#include "engine/error.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using skew::test::gpu;

TEST_CASE("NCCL alltoallv refuses a list without one entry per rank with the shared message", "[gpu][dist]") {
    SKEW_REQUIRE_GPU();
    std::unique_ptr<Communicator> self = make_self_communicator();
    std::unique_ptr<Communicator> nccl = make_nccl_communicator(*self, 0, gpu().stream());
    const std::vector<int64_t> ok{0}, bad{0, 0};
    std::string expected;
    try {
        check_alltoallv_args("nccl rank", 0, 1, bad, ok, ok, ok);
    } catch (const Error& e) {
        expected = e.what();
    }
    CHECK(expected == "nccl rank 0: alltoallv send_counts has 2 entries for 1 ranks");
    CHECK_THROWS_WITH(nccl->alltoallv(nullptr, bad, ok, nullptr, ok, ok, CommDType::F32), expected);
    CHECK_THROWS_WITH(nccl->alltoallv(nullptr, ok, ok, nullptr, ok, bad, CommDType::F32),
                      "nccl rank 0: alltoallv recv_displs has 2 entries for 1 ranks");
}
