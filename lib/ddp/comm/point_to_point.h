#pragma once
// Tensors between two ranks of a group, for pipeline stages: activations forward, their gradients
// back. A receiver that does not know the shape gets a small header first; one that knows it gets
// the data alone (Note [Shapes between stages]).

#include <torch/torch.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/comm/process_group.h"

namespace ddp {

/// A send that is under way; wait() before its tensor may change or the next step begins.
class PendingSend {
 public:
  PendingSend() = default;
  PendingSend(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::vector<torch::Tensor> keep)
      : works_(std::move(works)), keep_(std::move(keep)) {}
  /// Blocks until the receiver has the tensor; throws what the transport threw.
  void wait(std::chrono::milliseconds timeout);
  /// Whether the receiver has it already (then the tensor is free); does not block.
  bool done() const;

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<torch::Tensor> keep_;  // the buffers the transport reads from
};

/// Starts sending `tensor` (any shape and dtype, at most 8 dimensions) to rank `peer` of `comm`,
/// under `tag` (unique among the pair's messages in flight). Does not block.
PendingSend send_tensor(const Communicator& comm, const torch::Tensor& tensor, int peer, int tag);

/// Receives what rank `peer` of `comm` sent under `tag`, on `comm.device`. Waits at most `timeout`,
/// then throws std::runtime_error (the caller says who was waited for).
torch::Tensor recv_tensor(const Communicator& comm, int peer, int tag, std::chrono::milliseconds timeout);

/// send_tensor without the header, for a receiver that knows the shape and dtype.
PendingSend send_known_tensor(const Communicator& comm, const torch::Tensor& tensor, int peer, int tag);

/// Receives a tensor of `sizes` and `dtype` that send_known_tensor sent; as recv_tensor otherwise.
torch::Tensor recv_known_tensor(const Communicator& comm, int peer, int tag, c10::IntArrayRef sizes,
                                c10::ScalarType dtype, std::chrono::milliseconds timeout);

}  // namespace ddp
