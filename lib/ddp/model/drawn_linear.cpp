#include "ddp/model/drawn_linear.h"

#include "ddp/model/deferred_init.h"

namespace ddp {

torch::nn::Linear drawn_linear(int64_t in, int64_t out) {
  torch::Tensor before = deferring() ? default_generator_state() : torch::Tensor();
  torch::nn::Linear linear(in, out);
  if (!before.defined()) return linear;
  set_default_generator_state(before);
  init_as_linear(linear->weight, linear->bias);
  return linear;
}

}  // namespace ddp
