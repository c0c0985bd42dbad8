#include "ddp/model/drawn_layers.h"

#include "ddp/model/deferred_init.h"

namespace ddp {
namespace {

// Builds `make()`'s layer; in a deferred build, rewinds the generator and draws its weight and
// bias again through init_parameter.
template <typename Make>
auto drawn(const Make& make) {
  torch::Tensor before = deferring() ? default_generator_state() : torch::Tensor();
  auto layer = make();
  if (!before.defined()) return layer;
  set_default_generator_state(before);
  init_as_layer(layer->weight, layer->bias);
  return layer;
}

}  // namespace

torch::nn::Linear drawn_linear(int64_t in, int64_t out) {
  return drawn([&] { return torch::nn::Linear(in, out); });
}

torch::nn::Conv2d drawn_conv2d(const torch::nn::Conv2dOptions& options) {
  return drawn([&] { return torch::nn::Conv2d(options); });
}

}  // namespace ddp
