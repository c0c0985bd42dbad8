// Optimizers, learning-rate schedules and clipping: values by formula, and PyTorch's Python
// implementation on the same steps (python3-torch).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "ddp/optim/foreach_adamw.h"
#include "ddp/optim/lr_schedule.h"
#include "ddp/optim/optimizer_factory.h"
#include "ddp/optim/row_updates.h"
#include "support/gpu.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {

// Whether `key` is `p`'s in an optimizer's state: its TensorImpl's address as text (LibTorch 1.x) or itself (2.x).
template <typename Key>
bool is_key_of(const Key& key, const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str() == key;
  } else {
    return key == static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

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
  // A floor above the lr the cosine decays from (optim.lr as optim.lr_scaling made it) would climb.
  CHECK_THROWS_WITH(LrSchedule(cosine_config, 0.005, 110),
                    Catch::Contains("schedule.min_lr: 0.01 is above the lr the cosine decays from, 0.005"));

  // schedule.decay_steps fixes the cosine's end whatever the run's length: a longer run's lr at
  // each step is a shorter one's, and stays at min_lr after the end.
  cosine_config.decay_steps = 60;
  LrSchedule fixed_short(cosine_config, 0.11, 60), fixed_long(cosine_config, 0.11, 500);
  for (int64_t step : {0, 9, 10, 35, 59, 60, 61, 200}) CHECK(fixed_short.lr_at(step) == fixed_long.lr_at(step));
  CHECK(fixed_long.lr_at(35) == Approx(0.06).epsilon(1e-12));  // half way from 10 to 60
  CHECK(fixed_long.lr_at(60) == Approx(0.01).epsilon(1e-12));
  CHECK(fixed_long.lr_at(400) == Approx(0.01).epsilon(1e-12));
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

// Parameters 0 and 2 under the defaults' weight decay, 1 and 3 in a group without decay.
std::vector<torch::optim::OptimizerParamGroup> two_groups(const std::vector<torch::Tensor>& p) {
  torch::optim::AdamWOptions plain(0.01);
  plain.weight_decay(0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p[0], p[2]});
  groups.emplace_back(std::vector<torch::Tensor>{p[1], p[3]}, std::make_unique<torch::optim::AdamWOptions>(plain));
  return groups;
}

// Counts, on this thread, the ATen ops of one name run while it lives (the trainer's HostReadCounter's
// way). Several may live at once: one callback serves them all.
class OpCounter {
 public:
  explicit OpCounter(std::string name) : name_(std::move(name)) {
    if (t_live.empty())
      t_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_op).scopes({at::RecordScope::FUNCTION}));
    t_live.push_back(this);
  }
  ~OpCounter() {
    t_live.erase(std::find(t_live.begin(), t_live.end(), this));
    if (t_live.empty()) at::removeCallback(t_handle);
  }
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;
  int64_t count() const { return count_; }

 private:
  static std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
    for (OpCounter* counter : t_live)
      if (counter->name_ == fn.name()) ++counter->count_;
    return nullptr;
  }
  static inline thread_local std::vector<OpCounter*> t_live;
  static inline thread_local at::CallbackHandle t_handle = 0;
  std::string name_;
  int64_t count_ = 0;
};

TEST_CASE("ForeachAdamW steps bit for bit as torch::optim::AdamW: groups, no decay, a skipped parameter",
          "[optim]") {
  torch::manual_seed(3);
  std::vector<torch::Tensor> start{torch::randn({5, 7}), torch::randn({7}), torch::randn({3, 2, 2}), torch::randn({4})};
  auto copies = [&] {
    std::vector<torch::Tensor> out;
    for (const auto& t : start) out.push_back(t.clone().set_requires_grad(true));
    return out;
  };
  auto ours = copies(), theirs = copies();
  torch::optim::AdamWOptions defaults(0.01);
  defaults.betas({0.9, 0.95}).weight_decay(0.1).eps(1e-8);
  ForeachAdamW foreach_form(two_groups(ours), defaults, /*always=*/true);
  torch::optim::AdamW reference(two_groups(theirs), defaults);
  for (int step = 0; step < 6; ++step) {
    for (auto* params : {&ours, &theirs}) {
      for (std::size_t i = 0; i < params->size(); ++i) {
        auto& p = (*params)[i];
        // Parameter 3 has no gradient on even steps (an unused branch): its step count falls behind.
        if (i == 3 && step % 2 == 0) {
          p.mutable_grad() = torch::Tensor();
          continue;
        }
        p.mutable_grad() = torch::sin(p.detach() * (step + 1) + static_cast<double>(i));
      }
    }
    OpCounter host_reads("aten::_local_scalar_dense");  // a tensor's value read as a number
    foreach_form.step();
    CHECK(host_reads.count() == 0);
    if (step == 0) {  // the counter counts: one read is one
      OpCounter probe("aten::_local_scalar_dense");
      CHECK(ours[0].sum().item<double>() != 0);
      CHECK(probe.count() == 1);
    }
    reference.step();
    for (std::size_t i = 0; i < ours.size(); ++i) REQUIRE(torch::equal(ours[i], theirs[i]));
  }
  // The state is the base class's, so checkpoints and the sharded state gathering read it unchanged.
  for (std::size_t i = 0; i < ours.size(); ++i) {
    auto key = [](const torch::optim::Optimizer& o, const torch::Tensor& p) -> const torch::optim::AdamWParamState& {
      for (const auto& [k, state] : o.state())
        if (is_key_of(k, p)) return static_cast<const torch::optim::AdamWParamState&>(*state);
      FAIL("no state for a parameter");
      throw;
    };
    const auto &a = key(foreach_form, ours[i]), &b = key(reference, theirs[i]);
    CHECK(a.step() == b.step());
    CHECK(torch::equal(a.exp_avg(), b.exp_avg()));
    CHECK(torch::equal(a.exp_avg_sq(), b.exp_avg_sq()));
  }
  CHECK(dynamic_cast<ForeachAdamW*>(make_optimizer(ours, [] {
          OptimConfig config;
          config.name = "adamw";
          return config;
        }(), 0.1).get()) != nullptr);
}

TEST_CASE("on a GPU: ForeachAdamW steps each group with ATen's fused Adam kernel, as torch::optim::AdamW "
          "within float rounding, reads nothing back, and resumes from a saved state",
          "[optim][gpu]") {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  std::vector<torch::Tensor> start{torch::randn({5, 7}), torch::randn({7}), torch::randn({3, 2, 2}), torch::randn({4})};
  auto copies = [&] {
    std::vector<torch::Tensor> out;
    for (const auto& t : start) out.push_back(t.to(gpu).set_requires_grad(true));
    return out;
  };
  auto ours = copies(), theirs = copies();
  torch::optim::AdamWOptions defaults(0.01);
  defaults.betas({0.9, 0.95}).weight_decay(0.1).eps(1e-8);
  auto fused_form = std::make_unique<ForeachAdamW>(two_groups(ours), defaults);
  torch::optim::AdamW reference(two_groups(theirs), defaults);
  for (int step = 0; step < 8; ++step) {
    if (step == 4) {  // saved and loaded into a fresh optimizer: its device step counts come from the state's
      torch::serialize::OutputArchive out;
      fused_form->save(out);
      std::stringstream bytes;
      out.save_to(bytes);
      torch::serialize::InputArchive in;
      in.load_from(bytes, gpu);
      fused_form = std::make_unique<ForeachAdamW>(two_groups(ours), defaults);
      fused_form->load(in);
    }
    for (auto* params : {&ours, &theirs})
      for (std::size_t i = 0; i < params->size(); ++i) {
        auto& p = (*params)[i];
        if (i == 3 && step % 2 == 0) {  // no gradient on even steps: its count falls behind
          p.mutable_grad() = torch::Tensor();
          continue;
        }
        p.mutable_grad() = torch::sin(p.detach() * (step + 1) + static_cast<double>(i));
      }
    // AdamW's kernel from LibTorch 2.3, Adam's (after a decay of our own) before it.
    OpCounter adamw_kernel("aten::_fused_adamw_"), adam_kernel("aten::_fused_adam_"),
        host_reads("aten::_local_scalar_dense");
    fused_form->step();
    CHECK(adamw_kernel.count() + adam_kernel.count() == 2);  // one launch per group
    CHECK(host_reads.count() == 0);
    reference.step();
    for (std::size_t i = 0; i < ours.size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      REQUIRE(torch::allclose(ours[i], theirs[i], /*rtol=*/1e-5, /*atol=*/1e-7));
    }
  }
}

TEST_CASE("row updates: rowwise_adagrad and sgd step only the rows given, by the formula, and coalesce sums repeated rows",
          "[optim][tables]") {
  auto [rows, summed] = coalesce_rows(torch::tensor({5, 2, 5, 0}, torch::kLong),
                                      torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).unsqueeze(1).repeat({1, 2}));
  CHECK(torch::equal(rows, torch::tensor({0, 2, 5}, torch::kLong)));
  CHECK(torch::equal(summed.select(1, 0), torch::tensor({4.0f, 2.0f, 4.0f})));

  torch::Tensor table = torch::arange(12, torch::kFloat).reshape({6, 2});
  const torch::Tensor before = table.clone();
  RowUpdater adagrad("rowwise_adagrad", 6, 1e-8, table.options());
  torch::Tensor g = torch::tensor({{0.5f, -1.5f}, {2.0f, 2.0f}});
  adagrad.update(table, torch::tensor({1, 4}, torch::kLong), g, 0.1);
  adagrad.update(table, torch::tensor({1, 4}, torch::kLong), g, 0.1);
  // s = mean(g²) per row after each step; w -= lr·g/(sqrt(s) + eps).
  for (int k : {0, 1}) {
    const int row = k == 0 ? 1 : 4;
    const double m = g[k].square().mean().item<double>();
    for (int j = 0; j < 2; ++j) {
      const double gj = g[k][j].item<double>();
      const double expected = before[row][j].item<double>() - 0.1 * gj / (std::sqrt(m) + 1e-8) -
                              0.1 * gj / (std::sqrt(2 * m) + 1e-8);
      CHECK(table[row][j].item<double>() == Approx(expected).epsilon(1e-6));
    }
    CHECK(adagrad.state()[row].item<double>() == Approx(2 * m).epsilon(1e-6));
  }
  for (int row : {0, 2, 3, 5}) {  // untouched: the same bits, and no state
    CHECK(torch::equal(table[row], before[row]));
    CHECK(adagrad.state()[row].item<float>() == 0.0f);
  }

  torch::Tensor plain = before.clone();
  RowUpdater sgd("sgd", 6, 1e-8, plain.options());
  sgd.update(plain, torch::tensor({3}, torch::kLong), torch::tensor({{1.0f, -2.0f}}), 0.5);
  CHECK(torch::allclose(plain[3], before[3] - 0.5 * torch::tensor({1.0f, -2.0f})));
  CHECK(torch::equal(plain.narrow(0, 0, 3), before.narrow(0, 0, 3)));
  CHECK_FALSE(sgd.state().defined());
}

}  // namespace DDP_TEST_FILE
