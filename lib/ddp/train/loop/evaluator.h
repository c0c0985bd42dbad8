#pragma once
// Evaluation over the whole eval split, sharded across ranks without padding, so the numbers
// are the same for any world size.

#include <torch/torch.h>

#include "ddp/train/data/dataset.h"
#include "ddp/train/dist/process_group.h"
#include "ddp/train/model/model_registry.h"

namespace ddp {

/// Mean loss and accuracy over every sample of the eval set.
struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;
};

/// Runs `model` in eval mode over this rank's shard and all-reduces the sums.
EvalResult evaluate(Model& model, const Dataset& data, double mean, double std, int64_t batch_size, const Communicator& comm);

}  // namespace ddp
