#pragma once
// Note [Buffers read in training]
// DDP copies rank 0's buffers to every rank before each forward (broadcast_buffers). BatchNorm reads
// none of its own in training, so ddprun shares buffers only before they are read, at evaluations
// (Note [Lazy buffer broadcast]). A TorchScript module may read one of its own in training (a running
// mean of its inputs it subtracts), which each rank's batches change otherwise: shared at
// evaluations only, the weights depended on how often the run evaluated, and a resume (every rank
// from rank 0's buffers) was not the run that went on. Such buffers (Model::buffers_read_in_training)
// are watched here. After the first step, the ones that step changed on any rank (by their version
// counters, bumped by every in-place write and by the scripted mirror's copy of a reassigned one;
// agreed in one all-reduce) are shared before every later step, as DDP would, with no collective
// but the broadcast; the others (a causal mask, a table) are taken as constant. One of those that
// changes later is said once, and shared at evaluations only. The choice is made again by a resumed
// run, at its own first step: a buffer that changes only now and then may be chosen otherwise.

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "ddp/comm/process_group.h"

namespace ddp {

class TrainingBuffers {
 public:
  /// `buffers` by name, already equal on every replica (the plan broadcast them).
  void watch(std::vector<std::pair<std::string, torch::Tensor>> buffers);
  /// Before a training step's first forward, over `replicas` (every one calls it at each step).
  void before_step(const Communicator& replicas);
  /// Around any other broadcast of them (an evaluation's): the changes before it are noted, then
  /// its own writes are not taken for changes.
  void before_share() { note_changes(); }
  void shared();

 private:
  struct Watched {
    std::string name;
    torch::Tensor tensor;
    int64_t version = 0;   // its version counter when last looked at
    bool changed = false;  // on this rank, since the first step began
    bool live = false;     // changed in the first step on some rank: shared before every step
    bool said = false;     // a constant one that changed later, said
  };
  void note_changes();
  std::vector<Watched> watched_;
  int steps_begun_ = 0;
};

}  // namespace ddp
