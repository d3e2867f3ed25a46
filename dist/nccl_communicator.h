// The NCCL implementation of Communicator over device memory (docs/distributed.md): the CUDA
// backend's collectives, on the backend's stream. Built only with the CUDA backend (SKEW_HAVE_CUDA).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace skew {

/// A communicator over the same ranks as `host` (an MPI communicator, or the one-process one),
/// moving device memory of CUDA device `device` with NCCL. Rank 0 makes the NCCL unique id and
/// broadcasts it over `host`; every rank then joins with ncclCommInitRank. Collectives are
/// enqueued on `stream` (a cudaStream_t: the backend's, so they follow the kernels that wrote
/// their buffers) and return before they complete, except barrier(), which waits. All-reduce,
/// reduce-scatter, all-gather and broadcast are NCCL's; allgatherv is a group of broadcasts;
/// alltoallv is a group of ncclSend/ncclRecv pairs. BF16 sums are ncclBfloat16 ncclSum (NCCL
/// adds in fp32 and rounds to bf16 per reduction step). Counts are size_t (no chunking).
/// start_allreduce_sum enqueues ncclAllReduce on a communication stream of its own (made on first
/// use, shared with the communicators split from this one) after a cudaStreamWaitEvent on an event
/// recorded on `stream`; wait()/wait_all() make `stream` wait on an event recorded after the last
/// such sum (docs/distributed.md, "Overlap with the backward pass").
/// NCCL itself is loaded here on first use (dist/nccl_library.h), not at program start.
/// Throws skew::Error naming the call, the NCCL error string and the rank on any failure, and
/// the files tried when NCCL cannot be loaded.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device, void* stream);

}  // namespace skew
