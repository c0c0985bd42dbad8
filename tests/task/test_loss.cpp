// train.loss: each loss and its metrics against direct computations, and the shape checks.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "ddp/common/error.h"
#include "ddp/task/loss.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

namespace {

ddp::Loss loss(const std::string& name, double smoothing = 0) {
  ddp::LossConfig config;
  config.loss = name;
  config.label_smoothing = smoothing;
  return ddp::Loss(config);
}

}  // namespace

TEST_CASE("cross_entropy: mean loss with label smoothing, summed loss and accuracy", "[task][loss]") {
  auto ce = loss("cross_entropy", 0.1);
  auto logits = torch::tensor({{2.0f, 0.0f, -1.0f}, {0.0f, 1.0f, 0.0f}, {0.5f, 0.2f, 3.0f}});
  auto targets = torch::tensor({0, 2, 2}, torch::kLong);
  // By hand: smoothed targets (1 - ε) one-hot + ε / C, against log-softmax.
  auto smoothed = torch::one_hot(targets, 3).to(torch::kFloat) * 0.9 + 0.1 / 3;
  auto by_hand = -(smoothed * torch::log_softmax(logits, 1)).sum(1);
  CHECK(ce.mean(logits, targets).item<double>() == Approx(by_hand.mean().item<double>()).epsilon(1e-6));
  auto sums = ce.metric_sums(logits, targets);
  CHECK(ce.metric_names() == std::vector<std::string>{"loss", "accuracy"});
  CHECK(sums[0].item<double>() == Approx(by_hand.sum().item<double>()).epsilon(1e-6));
  CHECK(sums[1].item<double>() == 2);  // samples 0 and 2 right

  CHECK(torch::equal(ce.prepare_targets(torch::tensor({1.0, 3.0}), "f"), torch::tensor({1, 3}, torch::kLong)));
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({1.5}), "labels.npy"),
                    Contains("labels.npy: train.loss cross_entropy needs one whole-number class") &&
                        Contains("use train.loss: mse"));
  // In a split carved from the file (data.eval_fraction), a sample is named by its row in the file,
  // which np.load(...)[N] finds, not by its place in the shuffled split.
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({1.0, 2.5}), "labels.npy", torch::tensor({40, 17})),
                    Contains("label of sample 17 is 2.5"));
  CHECK_NOTHROW(ce.check_output(logits, targets, 2, "y.npy"));
  CHECK_THROWS_AS(ce.check_output(logits, targets, 3, "y.npy"), ddp::UserError);
  CHECK_THROWS_WITH(ce.check_output(logits, targets, 3, "y.npy"),
                    "the model's output is [3, 3] for targets [3]; train.loss cross_entropy needs logits [3, C] "
                    "with C > 3, the largest label (in y.npy)");
  CHECK_THROWS_WITH(ce.check_output(logits.reshape({9}), targets, 1, "y.npy"), Contains("output is [9]"));
}

TEST_CASE("cross_entropy takes labels [N, 1] as [N], and refuses other shapes and inf or fractional labels, naming the sample",
          "[task][loss]") {  // issue 22, item 14
  auto ce = loss("cross_entropy");
  const double kInf = std::numeric_limits<double>::infinity();
  auto column = torch::tensor({{2}, {0}, {1}}, torch::kLong);  // np.save of y.reshape(-1, 1)
  CHECK(torch::equal(ce.prepare_targets(column, "y.npy"), torch::tensor({2, 0, 1}, torch::kLong)));
  CHECK(torch::equal(ce.prepare_targets(column.to(torch::kDouble), "y.csv"), torch::tensor({2, 0, 1}, torch::kLong)));
  CHECK_THROWS_AS(ce.prepare_targets(torch::zeros({3, 2}, torch::kLong), "y.npy"), ddp::FileError);
  CHECK_THROWS_WITH(ce.prepare_targets(torch::zeros({3, 2}, torch::kLong), "y.npy"),
                    Contains("y.npy: train.loss cross_entropy needs one class per sample ([N] or [N, 1]); these labels "
                             "are Long [3, 2]"));
  const std::string whole = "y.npy: train.loss cross_entropy needs one whole-number class per sample; ";
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({1.0, 2.0, kInf}), "y.npy"), Contains(whole + "label of sample 2 is infinite"));
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({1.0, std::nan("")}), "y.npy"), Contains(whole + "label of sample 1 is NaN"));
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({1.0, 2.0, 3.0, 0.5}, torch::kDouble), "y.npy"),
                    Contains(whole + "label of sample 3 is 0.5 (these labels are Double [4]"));
  CHECK_THROWS_AS(ce.prepare_targets(torch::tensor({1.0, -kInf}), "y.npy"), ddp::FileError);
  // As int64 these would be INT64_MIN, named a negative label; and 1.00000001 is no class, as a float64.
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({1.0, 1e20}, torch::kDouble), "y.csv"),
                    Contains("label of sample 1 is 1e+20, beyond any class count"));
  CHECK_THROWS_WITH(ce.prepare_targets(torch::tensor({0.0, 1.00000001}, torch::kDouble), "y.npy"),
                    Contains(whole + "label of sample 1 is 1.00000001"));
}

TEST_CASE("bce_with_logits refuses targets outside [0, 1], naming the sample and the value", "[task][loss]") {
  auto bce = loss("bce_with_logits");
  CHECK(bce.prepare_targets(torch::tensor({0.0, 1.0, 0.25}, torch::kDouble), "y.npy").scalar_type() == torch::kFloat);
  CHECK_THROWS_AS(bce.prepare_targets(torch::tensor({0.0, 1.0, 2.0}), "y.npy"), ddp::FileError);
  CHECK_THROWS_WITH(bce.prepare_targets(torch::tensor({0.0, 1.0, 2.0}), "y.npy"),
                    Contains("y.npy: train.loss bce_with_logits needs targets in [0, 1]; sample 2 has 2"));
  CHECK_THROWS_WITH(bce.prepare_targets(torch::tensor({{0.0, 1.0}, {1.0, -1.0}}), "y.npy"), Contains("sample 1 has -1"));
  CHECK_NOTHROW(loss("mse").prepare_targets(torch::tensor({0.0, 7.0}), "y.npy"));
}

TEST_CASE("float64 targets beyond float32's range are refused, naming the sample, where they trained to mse inf",
          "[task][loss]") {
  auto mse = loss("mse");
  CHECK_THROWS_WITH(mse.prepare_targets(torch::tensor({1.0, 2.0, 1e300}, torch::kDouble), "y.csv"),
                    "y.csv: the target of sample 2 is 1e+300, beyond float32's range (±3.4e38), in which training "
                    "computes (scale the targets, or fix that sample)");
  CHECK_THROWS_WITH(mse.prepare_targets(torch::tensor({{1.0, 2.0}, {-4e38, 0.0}}, torch::kDouble), "y.npy"),
                    Contains("the target of sample 1 is -4e+38"));
  CHECK(mse.prepare_targets(torch::tensor({3e38, -3e38}, torch::kDouble), "y.npy").isfinite().all().item<bool>());
}

TEST_CASE("mse gives per-sample MSE and MAE, bce_with_logits a loss and accuracy per element", "[task][loss]") {
  auto mse = loss("mse");
  auto out = torch::tensor({{1.0f}, {2.0f}, {0.0f}});  // [B, 1] against [B] targets
  auto targets = mse.prepare_targets(torch::tensor({1.5, 2.0, -2.0}), "t");
  CHECK(targets.scalar_type() == torch::kFloat);
  CHECK_NOTHROW(mse.check_output(out, targets, 0, "y.npy"));
  CHECK(mse.mean(out, targets).item<double>() == Approx((0.25 + 0 + 4) / 3));
  CHECK(mse.metric_names() == std::vector<std::string>{"mse", "mae"});
  auto sums = mse.metric_sums(out, targets);
  CHECK(sums[0].item<double>() == Approx(4.25));
  CHECK(sums[1].item<double>() == Approx(2.5));
  CHECK_THROWS_WITH(mse.check_output(torch::zeros({3, 2}), targets, 0, "y.npy"),
                    "the model's output is [3, 2] for targets [3]; train.loss mse needs as many values per sample as "
                    "the targets have");

  auto bce = loss("bce_with_logits");
  auto logits = torch::tensor({{2.0f, -1.0f}, {-3.0f, 0.5f}});
  auto labels = bce.prepare_targets(torch::tensor({{1, 1}, {0, 0}}, torch::kLong), "t");
  auto reference = torch::binary_cross_entropy_with_logits(logits, labels);
  CHECK(bce.mean(logits, labels).item<double>() == Approx(reference.item<double>()));
  auto bsums = bce.metric_sums(logits, labels);
  CHECK(bsums[0].item<double>() == Approx(2 * reference.item<double>()));  // per-sample means, summed
  CHECK(bsums[1].item<double>() == Approx(0.5 + 0.5));                   // one of two right in each sample
}

TEST_CASE("bce_with_logits: the AUC ranks every score kept over the batches, exactly, whatever their scale or shift",
          "[task][loss]") {
  // Note [Exact AUC]
  auto bce = loss("bce_with_logits");
  torch::manual_seed(3);
  const int64_t n = 2000;
  auto labels = torch::rand({n, 1}).lt(0.3).to(torch::kFloat);
  auto logits = (torch::randn({n, 1}) + labels * 1.5).to(torch::kFloat);
  // The exact AUC: the share of (positive, negative) pairs the logits order rightly, ties a half.
  auto pairwise = [](const torch::Tensor& out, const torch::Tensor& targets) {
    auto pos = out.index({targets.eq(1)}).to(torch::kDouble), neg = out.index({targets.eq(0)}).to(torch::kDouble);
    auto diff = pos.unsqueeze(1) - neg.unsqueeze(0);
    return (diff.gt(0).to(torch::kDouble).sum() + 0.5 * diff.eq(0).to(torch::kDouble).sum()).item<double>() /
           static_cast<double>(pos.numel() * neg.numel());
  };
  const double exact = pairwise(logits, labels);
  CHECK(exact > 0.8);
  CHECK(bce.metric_names() == std::vector<std::string>{"loss", "accuracy"});
  ddp::RankedScores* ranked = bce.ranked_scores();
  REQUIRE(ranked != nullptr);
  // Two batches, as the evaluator meets them; then scaled, squeezed and shifted logits, which rank alike.
  bce.metric_sums(logits.narrow(0, 0, 700), labels.narrow(0, 0, 700));
  bce.metric_sums(logits.narrow(0, 700, n - 700), labels.narrow(0, 700, n - 700));
  auto kept = ranked->stacked(torch::kCPU);
  REQUIRE(kept.sizes() == torch::IntArrayRef({2, n}));
  CHECK(*ddp::area_under_roc(kept[0], kept[1]) == Approx(exact).epsilon(1e-12));
  for (auto changed : {logits * 30, logits * 0.002, logits + 18, logits - 40}) {
    ranked->clear();
    bce.metric_sums(changed, labels);
    kept = ranked->stacked(torch::kCPU);
    INFO("logits from " << changed.min().item<float>() << " to " << changed.max().item<float>());
    CHECK(*ddp::area_under_roc(kept[0], kept[1]) == Approx(pairwise(changed, labels)).epsilon(1e-12));
  }
  ranked->drop_last();
  CHECK(ranked->stacked(torch::kCPU).size(1) == 0);

  auto auc_of = [](std::vector<double> scores, std::vector<double> targets) {
    return ddp::area_under_roc(torch::tensor(scores, torch::kDouble), torch::tensor(targets, torch::kDouble));
  };
  CHECK(*auc_of({-2, -1, 1, 30}, {0, 0, 1, 1}) == 1.0);
  CHECK(*auc_of({2, 1, -1, -30}, {0, 0, 1, 1}) == 0.0);
  CHECK(*auc_of({0.5, 0.5, 0.5, 0.5}, {0, 0, 1, 1}) == 0.5);  // all tied
  CHECK(*auc_of({1, 2, 2, 3}, {0, 1, 0, 1}) == Approx(0.875));  // one tie of four pairs
  // Soft targets weigh a sample as a positive by its target and as a negative by the rest.
  // (0.25 × 0.5 × 0.75 + 0.75 × (0.75 + 0.5 × 0.25)) / (1 × 1): a sample's own halves tie.
  CHECK(*auc_of({1, 2}, {0.25, 0.75}) == Approx(0.75));
  CHECK_FALSE(auc_of({1, 2}, {1, 1}).has_value());  // no negatives: no AUC
  CHECK_FALSE(auc_of({}, {}).has_value());
  CHECK(loss("cross_entropy").ranked_scores() == nullptr);
}

}  // namespace DDP_TEST_FILE
