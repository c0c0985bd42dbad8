#include "ddp/comm/collectives.h"

#include <cstring>
#include <map>
#include <sstream>

#include "ddp/common/error.h"

namespace ddp {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream left(a), right(b);
  std::string l, r;
  while (true) {
    bool more_left = static_cast<bool>(std::getline(left, l));
    bool more_right = static_cast<bool>(std::getline(right, r));
    if (!more_left && !more_right) return "";
    if (!more_left) l = "(nothing)";
    if (!more_right) r = "(nothing)";
    if (l != r) return "'" + l + "' vs '" + r + "'";
  }
}

}  // namespace

void broadcast_coalesced(const Communicator& comm, const std::vector<torch::Tensor>& tensors, int root) {
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  // At most 64 MiB in one flat copy (and one more tensor): a whole model's copy would double the
  // memory a rank needs at start-up.
  constexpr int64_t kMaxBytes = 64 << 20;
  std::vector<std::pair<c10::ScalarType, std::vector<torch::Tensor>>> chunks;
  for (auto& [type, typed] : by_type) {
    int64_t bytes = kMaxBytes;
    for (const auto& t : typed) {
      if (bytes >= kMaxBytes) {
        chunks.emplace_back(type, std::vector<torch::Tensor>{});
        bytes = 0;
      }
      chunks.back().second.push_back(t);
      bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
  }
  for (auto& [type, group_tensors] : chunks) {
    std::vector<torch::Tensor> flat_views;
    for (const auto& t : group_tensors) flat_views.push_back(t.detach().reshape(-1));
    std::vector<torch::Tensor> flat{torch::cat(flat_views)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    int64_t seq = comm.tracker->begin("broadcast");
    comm.tracker->wait(comm.group->broadcast(flat, options), seq);
    int64_t offset = 0;
    torch::NoGradGuard no_grad;
    for (auto& t : group_tensors) {
      t.copy_(flat[0].narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

void broadcast_bytes(const Communicator& comm, std::string& bytes, int root) {
  auto length = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong).to(comm.collective_device);
  broadcast_coalesced(comm, {length}, root);
  const int64_t size = length.item<int64_t>();
  auto payload = torch::empty({size}, torch::kUInt8);
  if (comm.rank == root && size > 0) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
  if (size > 0) {
    payload = payload.to(comm.collective_device);
    broadcast_coalesced(comm, {payload}, root);
    payload = payload.to(torch::kCPU);
  }
  if (comm.rank != root) bytes.assign(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(size));
}

torch::Tensor all_reduce_sum(const Communicator& comm, torch::Tensor values) {
  std::vector<torch::Tensor> buffer{values.to(comm.collective_device)};
  int64_t seq = comm.tracker->begin("all_reduce");
  comm.tracker->wait(comm.group->allreduce(buffer), seq);
  return buffer[0].to(values.device());
}

torch::Tensor all_to_all(const Communicator& comm, const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& recv_counts, torch::Tensor into) {
  if (comm.world_size == 1) return into.defined() ? into.copy_(input) : input;
  int64_t rows = 0;
  for (int64_t n : recv_counts) rows += n;
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = rows;
  // On the backend's device (NCCL: the GPU, whatever `input`'s), and back.
  torch::Tensor in = input.to(comm.collective_device).contiguous();
  const bool in_place = into.defined() && into.device() == comm.collective_device;
  torch::Tensor out = in_place ? into : torch::empty(shape, in.options());
  std::vector<int64_t> out_splits = recv_counts, in_splits = send_counts;
  int64_t seq = comm.tracker->begin("all_to_all");
  comm.tracker->wait(comm.group->alltoall_base(out, in, out_splits, in_splits), seq);
  if (in_place) return into;
  return into.defined() ? into.copy_(out) : out.to(input.device());
}

void barrier(const Communicator& comm) {
  int64_t seq = comm.tracker->begin("barrier");
  comm.tracker->wait(comm.group->barrier(), seq);
}

void check_identical_across_ranks(const Communicator& comm, const std::string& what, const std::string& text,
                                  const std::string& fix,
                                  const std::function<std::string(const std::string&, const std::string&)>& describe) {
  if (comm.world_size == 1) return;
  // Cheap common case: compare hashes with one all-gather; only a mismatch reads the texts.
  int64_t hash = static_cast<int64_t>(std::hash<std::string>{}(text) & 0x7fffffffffffffffULL);
  auto on_device = torch::TensorOptions(torch::kLong).device(comm.collective_device);
  std::vector<torch::Tensor> mine{torch::tensor({hash}, on_device)};
  std::vector<std::vector<torch::Tensor>> all(1);
  for (int r = 0; r < comm.world_size; ++r) all[0].push_back(torch::zeros({1}, on_device));
  int64_t seq = comm.tracker->begin("all_gather");
  comm.tracker->wait(comm.group->allgather(all, mine), seq);
  int differing = -1;
  for (int r = 1; r < comm.world_size && differing < 0; ++r)
    if (all[0][r].item<int64_t>() != all[0][0].item<int64_t>()) differing = r;
  std::string key = "ddp/identical/" + what + "/";
  comm.store->set(key + std::to_string(comm.rank), bytes(text));
  if (differing < 0) return;
  auto reference = comm.store->get(key + "0");
  auto other = comm.store->get(key + std::to_string(differing));
  const std::string ours(reference.begin(), reference.end()), theirs(other.begin(), other.end());
  std::string difference = describe ? describe(ours, theirs) : "";
  if (difference.empty()) difference = first_difference(ours, theirs);
  throw UserError("rank " + std::to_string(differing) + "'s " + what + " differs from rank 0's: " + difference + "; " +
                  fix);
}

}  // namespace ddp
