// Megatron's tensor-parallel arithmetic over ranks as threads (tensor_parallel.h): a column- then
// row-parallel MLP, a vocabulary-parallel embedding and the loss-parallel cross-entropy give the
// whole layers' outputs and each rank's slice of their gradients.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <vector>

#include "ddp/parallel/tensor_parallel.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

constexpr int kParts = 2;

void check_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
  }
}

double largest_difference(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a - b).abs().max().item<double>();
}

}  // namespace

TEST_CASE("a column- then row-parallel MLP gives the whole MLP's output, input gradient and weight slices' gradients",
          "[parallel][tensor]") {
  torch::manual_seed(3);
  auto x = torch::randn({6, 8}), w1 = torch::randn({12, 8}), b1 = torch::randn({12}), w2 = torch::randn({5, 12}),
       b2 = torch::randn({5}), upstream = torch::randn({6, 5});
  // The whole MLP, once.
  auto xr = x.clone().requires_grad_(), w1r = w1.clone().requires_grad_(), b1r = b1.clone().requires_grad_(),
       w2r = w2.clone().requires_grad_(), b2r = b2.clone().requires_grad_();
  auto whole = torch::nn::functional::linear(torch::gelu(torch::nn::functional::linear(xr, w1r, b1r)), w2r, b2r);
  (whole * upstream).sum().backward();

  struct Result {
    torch::Tensor y, dx, dw1, db1, dw2, db2;
  };
  std::vector<Result> results(kParts);
  check_no_errors(ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    torch::NoGradGuard off;
    auto xi = x.clone(), w1i = ddp::tensor_slice(w1, 0, rank, kParts).clone(),
         b1i = ddp::tensor_slice(b1, 0, rank, kParts).clone(), w2i = ddp::tensor_slice(w2, 1, rank, kParts).clone(),
         b2i = b2.clone();
    torch::GradMode::set_enabled(true);
    for (auto* t : {&xi, &w1i, &b1i, &w2i, &b2i}) t->requires_grad_();
    auto hidden = torch::gelu(ddp::column_parallel_linear(xi, w1i, b1i, group));  // this rank's 6 hidden units
    auto y = ddp::row_parallel_linear(hidden, w2i, b2i, group);
    (y * upstream).sum().backward();
    results[rank] = {y.detach(), xi.grad(), w1i.grad(), b1i.grad(), w2i.grad(), b2i.grad()};
  }));
  for (int rank = 0; rank < kParts; ++rank) {
    INFO("rank " << rank);
    const Result& r = results[rank];
    CHECK(largest_difference(r.y, whole.detach()) < 1e-5);
    CHECK(largest_difference(r.dx, xr.grad()) < 1e-5);  // the copy's backward summed the slices' parts
    CHECK(largest_difference(r.dw1, ddp::tensor_slice(w1r.grad(), 0, rank, kParts)) < 1e-5);
    CHECK(largest_difference(r.db1, ddp::tensor_slice(b1r.grad(), 0, rank, kParts)) < 1e-5);
    CHECK(largest_difference(r.dw2, ddp::tensor_slice(w2r.grad(), 1, rank, kParts)) < 1e-5);
    CHECK(largest_difference(r.db2, b2r.grad()) < 1e-5);
  }
  // The check can fail: one slice alone is not the whole.
  CHECK(largest_difference(ddp::tensor_slice(w1r.grad(), 0, 0, kParts), ddp::tensor_slice(w1r.grad(), 0, 1, kParts)) > 1e-3);
}

TEST_CASE("a vocabulary-parallel embedding and the loss-parallel cross-entropy equal the whole table's and the "
          "gathered logits' within 1e-6, gradients too",
          "[parallel][tensor]") {
  torch::manual_seed(5);
  const int64_t vocab = 10, width = 4;
  auto table = torch::randn({vocab, width}), head = torch::randn({vocab, width});
  auto ids = torch::randint(vocab, {3, 7}, torch::kLong), targets = torch::randint(vocab, {21}, torch::kLong);
  targets[0] = 0;          // the first rank's first row
  targets[1] = vocab - 1;  // the last rank's last row
  auto tr = table.clone().requires_grad_(), hr = head.clone().requires_grad_();
  auto hidden = torch::embedding(tr, ids).reshape({21, width});
  auto logits = torch::nn::functional::linear(hidden, hr);
  auto whole_loss = torch::nn::functional::cross_entropy(logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  whole_loss.mean().backward();

  struct Result {
    torch::Tensor loss, dtable, dhead;
  };
  std::vector<Result> results(kParts);
  check_no_errors(ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    const int64_t first = rank * vocab / kParts;
    auto ti = ddp::tensor_slice(table, 0, rank, kParts).clone().requires_grad_();
    auto hi = ddp::tensor_slice(head, 0, rank, kParts).clone().requires_grad_();
    auto h = ddp::vocab_parallel_embedding(ids, ti, first, group).reshape({21, width});
    auto local_logits = ddp::column_parallel_linear(h, hi, torch::Tensor(), group);  // this rank's vocabulary slice
    auto loss = ddp::vocab_parallel_cross_entropy(local_logits, targets, first, group);
    loss.mean().backward();
    results[rank] = {loss.detach(), ti.grad(), hi.grad()};
  }));
  for (int rank = 0; rank < kParts; ++rank) {
    INFO("rank " << rank);
    const Result& r = results[rank];
    CHECK(largest_difference(r.loss, whole_loss.detach()) < 1e-6);
    CHECK(largest_difference(r.dtable, ddp::tensor_slice(tr.grad(), 0, rank, kParts)) < 1e-6);
    CHECK(largest_difference(r.dhead, ddp::tensor_slice(hr.grad(), 0, rank, kParts)) < 1e-6);
  }
}

TEST_CASE("the loss-parallel cross-entropy with label smoothing equals torch's within 1e-6, gradients too",
          "[parallel][tensor]") {
  torch::manual_seed(9);
  const int64_t vocab = 12;
  const double smoothing = 0.1;
  auto logits = torch::randn({15, vocab}).requires_grad_();
  auto targets = torch::randint(vocab, {15}, torch::kLong);
  auto whole = torch::nn::functional::cross_entropy(
      logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone).label_smoothing(smoothing));
  whole.mean().backward();
  std::vector<torch::Tensor> losses(kParts), grads(kParts);
  check_no_errors(ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    auto mine = ddp::tensor_slice(logits.detach(), 1, rank, kParts).clone().requires_grad_();
    auto loss = ddp::vocab_parallel_cross_entropy(mine, targets, rank * vocab / kParts, group, smoothing);
    loss.mean().backward();
    losses[rank] = loss.detach();
    grads[rank] = mine.grad();
  }));
  for (int rank = 0; rank < kParts; ++rank) {
    INFO("rank " << rank);
    CHECK(largest_difference(losses[rank], whole.detach()) < 1e-6);
    CHECK(largest_difference(grads[rank], ddp::tensor_slice(logits.grad(), 1, rank, kParts)) < 1e-6);
  }
}

}  // namespace DDP_TEST_FILE
