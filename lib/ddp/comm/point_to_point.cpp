#include "ddp/comm/point_to_point.h"

namespace ddp {
namespace {

constexpr int64_t kMaxDims = 8;
// Header: the dtype, the dimension count, then the sizes.
constexpr int64_t kHeaderSize = kMaxDims + 2;

// Gloo moves host memory; NCCL, device memory.
torch::Device transport_device(const Communicator& comm) {
  return comm.backend == "nccl" ? comm.device : torch::Device(torch::kCPU);
}

void wait_for(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  if (!work->wait(timeout)) throw std::runtime_error("timed out after " + std::to_string(timeout.count() / 1000) + " s");
}

}  // namespace

void PendingSend::wait(std::chrono::milliseconds timeout) {
  for (auto& work : works_) wait_for(work, timeout);
  works_.clear();
  keep_.clear();
}

bool PendingSend::done() const {
  for (const auto& work : works_)
    if (!work->isCompleted()) return false;
  return true;
}

PendingSend send_tensor(const Communicator& comm, const torch::Tensor& tensor, int peer, int tag) {
  TORCH_CHECK(tensor.dim() <= kMaxDims, "send_tensor: at most ", kMaxDims, " dimensions");
  auto header = torch::zeros({kHeaderSize}, torch::kLong);
  header[0] = static_cast<int64_t>(tensor.scalar_type());
  header[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) header[d + 2] = tensor.size(d);
  std::vector<torch::Tensor> head{header.to(transport_device(comm))};
  std::vector<torch::Tensor> body{tensor.detach().to(transport_device(comm)).contiguous()};
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(comm.group->send(head, peer, 2 * tag));
  works.push_back(comm.group->send(body, peer, 2 * tag + 1));
  return PendingSend(std::move(works), {head[0], body[0]});
}

torch::Tensor recv_tensor(const Communicator& comm, int peer, int tag, std::chrono::milliseconds timeout) {
  std::vector<torch::Tensor> head{torch::zeros({kHeaderSize}, torch::kLong).to(transport_device(comm))};
  wait_for(comm.group->recv(head, peer, 2 * tag), timeout);
  // Read as values (item()), each a wait for the device on NCCL: what a host-read count sees.
  auto header = head[0].to(torch::kCPU);
  const auto dtype = static_cast<c10::ScalarType>(header[0].item<int64_t>());
  const int64_t dims = header[1].item<int64_t>();
  TORCH_CHECK(dims >= 0 && dims <= kMaxDims, "recv_tensor: a header of ", dims, " dimensions");
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < dims; ++d) sizes.push_back(header[d + 2].item<int64_t>());
  return recv_known_tensor(comm, peer, tag, sizes, dtype, timeout);
}

PendingSend send_known_tensor(const Communicator& comm, const torch::Tensor& tensor, int peer, int tag) {
  std::vector<torch::Tensor> body{tensor.detach().to(transport_device(comm)).contiguous()};
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(comm.group->send(body, peer, 2 * tag + 1));
  return PendingSend(std::move(works), {body[0]});
}

torch::Tensor recv_known_tensor(const Communicator& comm, int peer, int tag, c10::IntArrayRef sizes,
                                c10::ScalarType dtype, std::chrono::milliseconds timeout) {
  std::vector<torch::Tensor> body{torch::empty(sizes, torch::dtype(dtype).device(transport_device(comm)))};
  wait_for(comm.group->recv(body, peer, 2 * tag + 1), timeout);
  return body[0].to(comm.device);
}

}  // namespace ddp
