// alltoallv's argument checks (dist/communicator.h check_alltoallv_args), the one set the MPI and
// NCCL communicators run: each of the four per-rank spans must have one entry per rank, and a bad
// one is refused with the message that names it. The MPI communicator's own refusal is checked
// under mpirun (mpi_collectives_worker), the NCCL one's on a GPU (tests/gpu/test_nccl_args.cpp),
// both against this function's message.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "engine/error.h"

using namespace skew;

namespace {

/// The message check_alltoallv_args throws, or "" when it accepts.
std::string refusal(const char* who, int rank, int world, const std::vector<int64_t>& sc,
                    const std::vector<int64_t>& sd, const std::vector<int64_t>& rc, const std::vector<int64_t>& rd) {
    try {
        check_alltoallv_args(who, rank, world, sc, sd, rc, rd);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("alltoallv refuses a count or displacement list without one entry per rank, naming it") {
    const std::vector<int64_t> two{1, 2}, three{1, 2, 3}, none{};
    CHECK(refusal("rank", 1, 2, two, two, two, two).empty());
    CHECK(refusal("rank", 1, 2, three, two, two, two) == "rank 1: alltoallv send_counts has 3 entries for 2 ranks");
    CHECK(refusal("rank", 1, 2, two, none, two, two) == "rank 1: alltoallv send_displs has 0 entries for 2 ranks");
    CHECK(refusal("rank", 0, 2, two, two, three, two) == "rank 0: alltoallv recv_counts has 3 entries for 2 ranks");
    CHECK(refusal("nccl rank", 1, 2, two, two, two, three) ==
          "nccl rank 1: alltoallv recv_displs has 3 entries for 2 ranks");
    // the first bad list is the one named
    CHECK(refusal("rank", 0, 3, two, none, two, two) == "rank 0: alltoallv send_counts has 2 entries for 3 ranks");
    CHECK(refusal("rank", 0, 3, three, three, three, three).empty());
    CHECK_THROWS_WITH(require_per_rank("rank", 2, 4, two, "allgatherv counts"),
                      "rank 2: allgatherv counts has 2 entries for 4 ranks");
}
