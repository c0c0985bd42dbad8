// SyncBatchNorm2d against BatchNorm2d: with an identity "sum over ranks" they are the same layer,
// and with two halves of a batch summed by hand they give the whole batch's results.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <barrier>
#include <thread>
#include <vector>

#include "ddp/model/python_state_dict.h"
#include "ddp/model/sync_batchnorm.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("SyncBatchNorm2d over one rank is BatchNorm2d: outputs, gradients, running statistics, names",
          "[model][syncbn]") {
  torch::manual_seed(3);
  auto x = torch::randn({8, 4, 5, 5}) * 3 + 1;
  auto upstream = torch::randn({8, 4, 5, 5});
  torch::nn::BatchNorm2d plain(4);
  SyncBatchNorm2d synced(4, [](const torch::Tensor& t) { return t.clone(); });
  {
    torch::NoGradGuard no_grad;
    plain->weight.uniform_(0.5, 1.5);
    plain->bias.uniform_(-0.5, 0.5);
    synced->weight.copy_(plain->weight);
    synced->bias.copy_(plain->bias);
  }
  auto x_plain = x.clone().requires_grad_(), x_synced = x.clone().requires_grad_();
  auto y_plain = plain->forward(x_plain), y_synced = synced->forward(x_synced);
  CHECK(max_difference(y_plain, y_synced) < 1e-5);
  (y_plain * upstream).sum().backward();
  (y_synced * upstream).sum().backward();
  CHECK(max_difference(x_plain.grad(), x_synced.grad()) < 1e-5);
  CHECK(max_difference(plain->weight.grad(), synced->weight.grad()) < 1e-4);
  CHECK(max_difference(plain->bias.grad(), synced->bias.grad()) < 1e-4);
  CHECK(max_difference(plain->running_mean, synced->running_mean) < 1e-6);
  CHECK(max_difference(plain->running_var, synced->running_var) < 1e-6);
  CHECK(synced->num_batches_tracked.item<int64_t>() == 1);
  plain->eval();
  synced->eval();
  CHECK(max_difference(plain->forward(x), synced->forward(x)) < 1e-5);

  std::vector<std::string> plain_names, synced_names;
  for (const auto& [name, tensor] : python_state_dict(*plain)) plain_names.push_back(name);
  for (const auto& [name, tensor] : python_state_dict(*synced)) synced_names.push_back(name);
  CHECK(plain_names == synced_names);
}

namespace {

// A sum over two "ranks" that are threads of this process: each posts its tensor and waits for the
// other's; both get slot 0 + slot 1, in that order, so the same bits.
class TwoThreadSum {
 public:
  torch::Tensor operator()(int rank, const torch::Tensor& t) {
    slots_[rank] = t;
    meet_.arrive_and_wait();
    auto sum = slots_[0] + slots_[1];
    meet_.arrive_and_wait();  // nobody posts the next one before both have read this one
    return sum;
  }

 private:
  std::barrier<> meet_{2};
  torch::Tensor slots_[2];
};

}  // namespace

TEST_CASE("two ranks with half a batch each get the whole batch's outputs and gradients", "[model][syncbn]") {
  torch::manual_seed(4);
  auto x = torch::randn({6, 3, 4, 4}) * 2 - 1;
  auto upstream = torch::randn({6, 3, 4, 4});
  torch::nn::BatchNorm2d whole(3);
  auto x_whole = x.clone().requires_grad_();
  auto y_whole = whole->forward(x_whole);
  (y_whole * upstream).sum().backward();

  TwoThreadSum sum;
  std::vector<torch::Tensor> y(2), x_grad(2), weight_grad(2), bias_grad(2), running_var(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      SyncBatchNorm2d layer(3, [&, r](const torch::Tensor& t) { return sum(r, t); });
      auto x_half = x.chunk(2)[r].clone().requires_grad_();
      y[r] = layer->forward(x_half);
      // Each rank's loss covers its own samples; the layer's backward sums across ranks.
      (y[r] * upstream.chunk(2)[r]).sum().backward();
      x_grad[r] = x_half.grad();
      weight_grad[r] = layer->weight.grad();
      bias_grad[r] = layer->bias.grad();
      running_var[r] = layer->running_var.clone();
    });
  for (auto& t : ranks) t.join();
  CHECK(max_difference(torch::cat(y), y_whole) < 1e-5);
  CHECK(max_difference(torch::cat(x_grad), x_whole.grad()) < 1e-5);
  // Parameter gradients are per rank; the gradient reducer sums (averages) them.
  CHECK(max_difference(weight_grad[0] + weight_grad[1], whole->weight.grad()) < 1e-4);
  CHECK(max_difference(bias_grad[0] + bias_grad[1], whole->bias.grad()) < 1e-4);
  CHECK(torch::equal(running_var[0], running_var[1]));
  CHECK(max_difference(running_var[0], whole->running_var) < 1e-6);
}

}  // namespace DDP_TEST_FILE
