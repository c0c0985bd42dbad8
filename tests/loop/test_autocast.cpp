// train.precision: bf16 — the autocast scope, and GraphSAGE's own arithmetic under it.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ddp/loop/autocast_scope.h"
#include "ddp/model/graphsage.h"
#include "ddp/model/sync_batchnorm.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

TEST_CASE("the autocast scope runs products in bfloat16 inside, float32 outside, and nests", "[precision]") {
  auto a = torch::randn({8, 16}), b = torch::randn({16, 4});
  CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
  {
    AutocastScope off(torch::kCPU, false);
    CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
  }
  {
    AutocastScope outer(torch::kCPU, true);
    CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    {
      AutocastScope inner(torch::kCPU, true);
      CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    }
    CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);  // the inner scope left the outer's on
  }
  CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
}

TEST_CASE("GraphSAGE under bf16 autocast: near its float32 output, float32 gradients", "[precision][graph]") {
  for (std::string aggregation : {"mean", "max", "sum"}) {
    INFO(aggregation);
    GraphSageOptions options;
    options.in = 12;
    options.out = 3;
    options.hidden = {8};
    options.aggregation = aggregation;
    torch::manual_seed(1);
    GraphSage model(options);
    auto x = torch::randn({40, 12});
    std::vector<BlockEdges> blocks{{torch::randint(0, 40, {120}), torch::randint(0, 20, {120}), 20},
                                   {torch::randint(0, 20, {50}), torch::randint(0, 5, {50}), 5}};
    torch::Tensor reference;
    {
      torch::NoGradGuard no_grad;
      reference = model->forward(x, blocks);
    }
    torch::Tensor mixed;
    {
      AutocastScope autocast(torch::kCPU, true);
      mixed = model->forward(x, blocks);  // both layers mix bfloat16 outputs with float32 weights
    }
    CHECK(mixed.scalar_type() == torch::kBFloat16);
    CHECK(torch::allclose(mixed.to(torch::kFloat), reference, /*rtol=*/0.05, /*atol=*/0.05));
    mixed.to(torch::kFloat).sum().backward();
    for (const auto& p : model->parameters()) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().scalar_type() == torch::kFloat);
    }
  }
}

TEST_CASE("SyncBatchNorm under bf16 autocast keeps float32 statistics", "[precision]") {
  // 3 × 11 × 11 = 363 values per channel: a count bfloat16 cannot hold (above 256 it steps by 2),
  // and sums of that many bfloat16 values lose most of their digits.
  torch::manual_seed(2);
  auto x = torch::randn({3, 4, 11, 11}) * 3 + 1;
  auto identity = [](const torch::Tensor& t) { return t; };
  SyncBatchNorm2d reference(4, identity), mixed(4, identity);
  reference(x);
  {
    AutocastScope autocast(torch::kCPU, true);
    mixed(x.to(torch::kBFloat16));  // what a bfloat16 convolution hands it
  }
  // Only the input's rounding to bfloat16 separates the two, and it averages out over 363 values; a
  // bfloat16 count (364) or bfloat16 sums are off by ~0.3%.
  CHECK(torch::allclose(mixed->running_mean, reference->running_mean, /*rtol=*/5e-4, /*atol=*/1e-5));
  CHECK(torch::allclose(mixed->running_var, reference->running_var, /*rtol=*/5e-4, /*atol=*/1e-5));
  CHECK(mixed->running_var.scalar_type() == torch::kFloat);
}

TEST_CASE("train.tf32 sets what torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 set",
          "[precision]") {
  ddp::use_tf32(false);
  CHECK_FALSE(at::globalContext().allowTF32CuBLAS());
  CHECK_FALSE(at::globalContext().allowTF32CuDNN());
  ddp::use_tf32(true);
  CHECK(at::globalContext().allowTF32CuBLAS());
  CHECK(at::globalContext().allowTF32CuDNN());
  ddp::use_tf32(false);  // LibTorch's default for matrix products, as the other tests expect
  CHECK_FALSE(at::globalContext().allowTF32CuBLAS());
}

}  // namespace DDP_TEST_FILE
