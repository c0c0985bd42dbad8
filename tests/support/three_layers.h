#pragma once
// The small network the in-process engine tests train: W1 [16, 8], b1, W2 [16, 16], b2, W3 [4, 16],
// b3, three layers of (weight, bias). Values are functions of the index, alike on every thread (the
// global RNG is one for all threads, so no draws).

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace ddp::test {

inline const std::vector<std::vector<int64_t>> kThreeLayerShapes{{16, 8}, {16}, {16, 16}, {16}, {4, 16}, {4}};

inline std::vector<torch::Tensor> make_three_layer_parameters() {
  std::vector<torch::Tensor> parameters;
  for (std::size_t i = 0; i < kThreeLayerShapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : kThreeLayerShapes[i]) n *= d;
    parameters.push_back((torch::sin(torch::arange(n, torch::kFloat) * 0.7 + static_cast<double>(i)) * 0.3)
                             .reshape(kThreeLayerShapes[i])
                             .requires_grad_());
  }
  return parameters;
}

}  // namespace ddp::test
