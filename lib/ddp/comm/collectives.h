#pragma once
// The few collectives the trainer needs besides gradient sync, over a Communicator.

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "ddp/comm/process_group.h"

namespace ddp {

/// Copies `root`'s values into `tensors` on every rank, one broadcast per dtype (coalesced).
void broadcast_coalesced(const Communicator& comm, const std::vector<torch::Tensor>& tensors, int root = 0);

/// Makes `bytes` on every rank what it is on `root` (a file's contents, say); the length travels
/// first. Through tensors on the communication device, which NCCL needs.
void broadcast_bytes(const Communicator& comm, std::string& bytes, int root = 0);

/// Sums `values` (float64) over all ranks, in place; returns it.
torch::Tensor all_reduce_sum(const Communicator& comm, torch::Tensor values);

/// All-to-all along dimension 0: `input`'s first `send_counts[0]` rows go to rank 0, the next
/// `send_counts[1]` to rank 1, ...; returns what every rank sent this one, `recv_counts[r]` rows from
/// rank r, in rank order, on `input`'s device. Every rank calls it; one rank returns `input` as it is.
/// With `into` (contiguous, of the received shape) the rows arrive there, and it is returned.
torch::Tensor all_to_all(const Communicator& comm, const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& recv_counts, torch::Tensor into = {});

/// Waits until every rank has arrived.
void barrier(const Communicator& comm);

/// Fails on every rank unless every rank passed the same `text` (a config, a parameter list).
/// The error names the first rank that differs from rank 0 and what differs, then `fix`: `describe`
/// (rank 0's text, the other's) says what, where it knows the text's form (a config's keys), and
/// says "" where it does not; the first line that differs then.
void check_identical_across_ranks(
    const Communicator& comm, const std::string& what, const std::string& text,
    const std::string& fix = "start every rank with the same config and build",
    const std::function<std::string(const std::string& rank_0, const std::string& theirs)>& describe = {});

}  // namespace ddp
