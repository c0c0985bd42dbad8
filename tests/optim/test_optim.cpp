// Optimizers, learning-rate schedules and clipping: values by formula, and PyTorch's Python
// implementation on the same steps (python3-torch).
#include <torch/torch.h>
#undef CHECK  // glog's CHECK (via LibTorch) must not shadow Catch's
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "ddp/optim/lr_schedule.h"
#include "ddp/optim/optimizer_factory.h"
#include "support/subprocess.h"

using namespace ddp;

namespace {

ScheduleConfig schedule(const std::string& name, int64_t warmup = 0) {
  ScheduleConfig config;
  config.name = name;
  config.warmup_steps = warmup;
  return config;
}

}  // namespace

TEST_CASE("LrSchedule: warmup, constant, step and cosine values", "[optim][schedule]") {
  LrSchedule constant(schedule("constant"), 0.1, 100);
  for (int64_t step : {0, 1, 50, 99, 500}) CHECK(constant.lr_at(step) == 0.1);

  // Warmup ramps linearly to the base lr, reaching it on its last step.
  LrSchedule warm(schedule("constant", 4), 0.2, 100);
  CHECK(warm.lr_at(0) == Approx(0.05).epsilon(1e-12));
  CHECK(warm.lr_at(1) == Approx(0.10).epsilon(1e-12));
  CHECK(warm.lr_at(3) == Approx(0.20).epsilon(1e-12));
  CHECK(warm.lr_at(4) == 0.2);

  ScheduleConfig step_config = schedule("step", 2);
  step_config.step_size = 10;
  step_config.gamma = 0.5;
  LrSchedule step(step_config, 1.0, 100);
  CHECK(step.lr_at(2) == 1.0);    // the first step after warmup
  CHECK(step.lr_at(11) == 1.0);
  CHECK(step.lr_at(12) == 0.5);   // 10 steps after warmup
  CHECK(step.lr_at(32) == 0.125);

  ScheduleConfig cosine_config = schedule("cosine", 10);
  cosine_config.min_lr = 0.01;
  LrSchedule cosine(cosine_config, 0.11, 110);
  CHECK(cosine.lr_at(10) == Approx(0.11).epsilon(1e-12));             // the top, after warmup
  CHECK(cosine.lr_at(60) == Approx(0.06).epsilon(1e-12));             // half way: the middle
  CHECK(cosine.lr_at(35) == Approx(0.01 + 0.05 * (1 + std::cos(M_PI / 4))).epsilon(1e-12));
  CHECK(cosine.lr_at(110) == Approx(0.01).epsilon(1e-12));            // the end
  CHECK(cosine.lr_at(1000) == Approx(0.01).epsilon(1e-12));           // and after it
}

TEST_CASE("scaled_lr: none, linear and sqrt scaling with the world size", "[optim]") {
  OptimConfig config;
  config.lr = 0.1;
  for (int world : {1, 2, 8}) {
    config.lr_scaling = "none";
    CHECK(scaled_lr(config, world) == 0.1);
    config.lr_scaling = "linear";
    CHECK(scaled_lr(config, world) == Approx(0.1 * world).epsilon(1e-15));
    config.lr_scaling = "sqrt";
    CHECK(scaled_lr(config, world) == Approx(0.1 * std::sqrt(world)).epsilon(1e-15));
  }
}

namespace {

// One comparison: the optimizer, schedule and clipping, as `key=value` words for the Python side.
struct Case {
  OptimConfig optim;
  ScheduleConfig schedule;
  double clip = 0;
  int64_t steps = 12;

  std::string words() const {
    std::ostringstream out;
    out.precision(17);
    out << "optim=" << optim.name << " lr=" << optim.lr << " momentum=" << optim.momentum
        << " nesterov=" << (optim.nesterov ? "true" : "false") << " weight_decay=" << optim.weight_decay
        << " beta1=" << optim.beta1 << " beta2=" << optim.beta2 << " eps=" << optim.eps << " schedule=" << schedule.name
        << " warmup=" << schedule.warmup_steps << " step_size=" << schedule.step_size << " gamma=" << schedule.gamma
        << " min_lr=" << schedule.min_lr << " clip=" << clip << " steps=" << steps;
    return out.str();
  }
};

struct Trajectory {
  std::vector<double> lrs;
  std::vector<double> params;
};

// The least-squares problem of optimizer_reference.py, stepped by our optimizer, schedule and clipping.
Trajectory run_ours(const Case& c) {
  auto a = torch::linspace(-1.0, 1.0, 24, torch::kDouble).reshape({4, 6}).cos();
  auto b = torch::linspace(0.5, -0.5, 4, torch::kDouble);
  auto p = torch::linspace(-0.3, 0.4, 6, torch::kDouble).requires_grad_();
  auto optimizer = make_optimizer({p}, c.optim, c.optim.lr);
  LrSchedule lr_schedule(c.schedule, c.optim.lr, c.steps);
  Trajectory out;
  for (int64_t step = 0; step < c.steps; ++step) {
    optimizer->zero_grad();
    (torch::matmul(a, p) - b).pow(2).sum().backward();
    if (c.clip > 0) torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{p}, c.clip);
    out.lrs.push_back(lr_schedule.lr_at(step));
    set_learning_rate(*optimizer, out.lrs.back());
    optimizer->step();
  }
  auto values = p.detach().contiguous();
  out.params.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  return out;
}

std::vector<double> numbers_after(const std::string& line, const std::string& label) {
  REQUIRE(line.rfind(label + " ", 0) == 0);
  std::istringstream in(line.substr(label.size() + 1));
  std::vector<double> values;
  for (double v; in >> v;) values.push_back(v);
  return values;
}

}  // namespace

TEST_CASE("optimizers, step decay, cosine, warmup and clipping match PyTorch's Python within 1e-6",
          "[optim][python]") {
  std::vector<std::pair<std::string, Case>> cases;
  auto add = [&](const std::string& name, auto edit) {
    Case c;
    c.optim.lr = 0.05;
    edit(c);
    cases.emplace_back(name, c);
  };
  add("sgd, momentum, weight decay", [](Case& c) { c.optim.weight_decay = 0.01; });
  add("sgd, nesterov", [](Case& c) { c.optim.nesterov = true; });
  add("sgd, clipped to norm 0.5", [](Case& c) { c.clip = 0.5; });
  add("adam, step decay", [](Case& c) {
    c.optim.name = "adam";
    c.optim.beta2 = 0.99;
    c.optim.weight_decay = 0.01;
    c.schedule.name = "step";
    c.schedule.step_size = 3;
    c.schedule.gamma = 0.5;
  });
  add("adamw, cosine", [](Case& c) {
    c.optim.name = "adamw";
    c.optim.weight_decay = 0.1;
    c.schedule.name = "cosine";
    c.schedule.min_lr = 0.001;
  });
  add("adamw, warmup, clipped", [](Case& c) {
    c.optim.name = "adamw";
    c.optim.eps = 1e-6;
    c.schedule.warmup_steps = 4;
    c.clip = 0.3;
  });

  std::string input;
  for (const auto& [name, c] : cases) input += c.words() + "\n";
  ddp::test::TempDir dir;
  ddp::test::write_file(dir.file("cases"), input);
  auto python = ddp::test::run_shell("/usr/bin/python3 " + std::string(DDP_SOURCE_DIR) +
                                         "/tests/optim/optimizer_reference.py < " + dir.file("cases"),
                                     std::chrono::seconds(120));
  INFO(python.err);
  REQUIRE(python.exit_code == 0);
  std::istringstream lines(python.out);
  for (const auto& [name, c] : cases) {
    INFO(name << ": " << c.words());
    std::string lrs_line, params_line;
    REQUIRE(std::getline(lines, lrs_line));
    REQUIRE(std::getline(lines, params_line));
    Trajectory ours = run_ours(c);
    auto lrs = numbers_after(lrs_line, "lrs");
    auto params = numbers_after(params_line, "params");
    REQUIRE(lrs.size() == ours.lrs.size());
    for (std::size_t i = 0; i < lrs.size(); ++i) CHECK(ours.lrs[i] == Approx(lrs[i]).margin(1e-6).epsilon(0));
    REQUIRE(params.size() == ours.params.size());
    for (std::size_t i = 0; i < params.size(); ++i) CHECK(ours.params[i] == Approx(params[i]).margin(1e-6).epsilon(0));
    // The comparison can fail: the parameters moved well beyond the tolerance.
    CHECK(std::abs(ours.params[0] - (-0.3)) > 1e-3);
  }
}

TEST_CASE("optim.decay_params matrices decays weights of two or more dimensions only, as nanoGPT groups them",
          "[optim]") {
  auto weight = torch::ones({2, 3}, torch::requires_grad()), bias = torch::ones({3}, torch::requires_grad());
  ddp::OptimConfig config;
  config.name = "adamw";
  config.weight_decay = 0.5;
  config.decay_params = "matrices";
  auto optimizer = ddp::make_optimizer({bias, weight}, config, 0.1);
  REQUIRE(optimizer->param_groups().size() == 2);
  // Zero gradients: AdamW's update is its decoupled decay alone, p ← p·(1 − lr·wd).
  weight.mutable_grad() = torch::zeros_like(weight);
  bias.mutable_grad() = torch::zeros_like(bias);
  optimizer->step();
  CHECK(weight.min().item<double>() == Approx(1 - 0.1 * 0.5));
  CHECK(bias.min().item<double>() == 1.0);
  config.decay_params = "all";
  CHECK(ddp::make_optimizer({bias, weight}, config, 0.1)->param_groups().size() == 1);
}
