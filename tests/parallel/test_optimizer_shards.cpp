// ZeRO-1's engine in-process (Note [Optimizer shards]): ranks as threads over Gloo, small tensors,
// against a replicated AdamW that sees the same gradients.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <array>
#include <mutex>
#include <vector>

#include "ddp/parallel/optimizer_shards.h"
#include "ddp/parallel/optimizer_state.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using ddp::OptimizerShards;
using ddp::StateTensors;

namespace {

// Sizes that do not split evenly, so that the owners' balance shows.
constexpr std::array<int64_t, 7> kSizes{1000, 10, 300, 300, 7, 2000, 50};

// Values and gradients are functions of the index and the step, alike on every thread (the global
// RNG is one for all threads, so no draws).
std::vector<torch::Tensor> make_parameters() {
  std::vector<torch::Tensor> parameters;
  for (std::size_t i = 0; i < kSizes.size(); ++i)
    parameters.push_back((torch::sin(torch::arange(kSizes[i], torch::kFloat) * 0.37 + static_cast<double>(i)))
                             .requires_grad_());
  return parameters;
}

void set_gradients(std::vector<torch::Tensor>& parameters, int step) {
  for (std::size_t i = 0; i < parameters.size(); ++i)
    parameters[i].mutable_grad() =
        torch::cos(torch::arange(kSizes[i], torch::kFloat) * (0.11 * (step + 1)) + static_cast<double>(i)) * 0.01;
}

torch::optim::AdamWOptions adamw() { return torch::optim::AdamWOptions(1e-2).weight_decay(0.1); }

// `steps` steps of the replicated optimizer, from the start.
std::vector<torch::Tensor> replicated_after(int steps) {
  auto parameters = make_parameters();
  torch::optim::AdamW optimizer(parameters, adamw());
  for (int step = 0; step < steps; ++step) {
    set_gradients(parameters, step);
    optimizer.step();
  }
  return parameters;
}

bool same_state(const StateTensors& a, const StateTensors& b) {
  if (!torch::equal(a.step, b.step) || a.slots.size() != b.slots.size()) return false;
  for (std::size_t k = 0; k < a.slots.size(); ++k)
    if (!torch::equal(a.slots[k], b.slots[k])) return false;
  return true;
}

void check_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
  }
}

}  // namespace

TEST_CASE("ZeRO-1: every rank picks the same owners, largest first to the least-loaded rank, and sharded AdamW "
          "steps equal the replicated optimizer's bit for bit",
          "[parallel][zero]") {
  constexpr int kWorld = 4;
  constexpr int kSteps = 4;
  const auto expected = replicated_after(kSteps);
  std::vector<std::vector<int>> owners(kWorld), first_owners(kWorld);
  std::vector<int> owned_count(kWorld, -1), differing(kWorld, -1);
  check_no_errors(ddp::test::run_ranks(kWorld, [&](int rank, const ddp::Communicator& group) {
    auto parameters = make_parameters();
    OptimizerShards shards(parameters, group);
    owners[rank] = shards.owners();
    first_owners[rank] = OptimizerShards(parameters, group, {1}).owners();
    owned_count[rank] = static_cast<int>(shards.owned().size());
    torch::optim::AdamW optimizer(shards.owned(), adamw());
    for (int step = 0; step < kSteps; ++step) {
      set_gradients(parameters, step);
      optimizer.step();
      shards.share_updated_parameters();
    }
    differing[rank] = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i) differing[rank] += !torch::equal(parameters[i], expected[i]);
  }));
  // 2000 → 0; 1000 → 1; 300 → 2; 300 → 3; 50 → 2 (loads 2000, 1000, 300, 300); 10 → 3; 7 → 3 (310 < 350).
  const std::vector<int> by_size{1, 3, 2, 3, 3, 0, 2};
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(owners[r] == by_size);
    CHECK(first_owners[r][1] == 0);  // on_first: a tied weight's owner is the group's rank 0
    CHECK(first_owners[r] == first_owners[0]);
    CHECK(owned_count[r] == std::count(by_size.begin(), by_size.end(), r));
    CHECK(differing[r] == 0);
  }
}

TEST_CASE("ZeRO-1: the owners' ranges hold the replicated optimizer's state, each tensor once, and restoring "
          "each rank's ranges from them resumes a run at world 3, 2 and 1 bit for bit",
          "[parallel][zero]") {
  constexpr int kSaved = 3, kResumed = 2;
  const auto saved_reference = replicated_after(kSaved);
  const auto expected = replicated_after(kSaved + kResumed);

  // World 4 trains three steps; each owner saves its ranges' values and state, as a checkpoint does.
  std::vector<torch::Tensor> saved_values(kSizes.size());
  std::vector<StateTensors> saved_states(kSizes.size());
  std::vector<int> state_mismatches(4, -1);
  std::mutex saving;
  check_no_errors(ddp::test::run_ranks(4, [&](int rank, const ddp::Communicator& group) {
    auto parameters = make_parameters();
    OptimizerShards shards(parameters, group);
    torch::optim::AdamW optimizer(shards.owned(), adamw());
    auto reference = make_parameters();
    torch::optim::AdamW replicated(reference, adamw());
    for (int step = 0; step < kSaved; ++step) {
      set_gradients(parameters, step);
      set_gradients(reference, step);
      optimizer.step();
      shards.share_updated_parameters();
      replicated.step();
    }
    std::lock_guard<std::mutex> lock(saving);
    state_mismatches[rank] = 0;
    for (const ddp::OwnedRange& range : shards.owned_ranges()) {
      StateTensors state = ddp::read_state(optimizer, range.stepped);
      state_mismatches[rank] += saved_values[range.parameter].defined() || range.begin != 0 ||
                                !same_state(state, ddp::read_state(replicated, reference[range.parameter]));
      saved_values[range.parameter] = range.value.detach().clone();
      saved_states[range.parameter] = state;
    }
  }));
  CHECK(state_mismatches == std::vector<int>(4, 0));
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    REQUIRE(saved_values[i].defined());
    CHECK(torch::equal(saved_values[i], saved_reference[i]));
  }

  for (int world : {3, 2, 1}) {
    DYNAMIC_SECTION("resumed at world " << world) {
      std::vector<int> differing(world, -1);
      check_no_errors(ddp::test::run_ranks(world, [&](int rank, const ddp::Communicator& group) {
        auto parameters = make_parameters();  // other values: the ranges' restore must reach every rank
        OptimizerShards shards(parameters, group);
        torch::optim::AdamW optimizer(shards.owned(), adamw());
        torch::NoGradGuard no_grad;
        for (const ddp::OwnedRange& range : shards.owned_ranges()) {
          range.value.copy_(saved_values[range.parameter]);
          StateTensors state{saved_states[range.parameter].step.clone(), {}};
          for (const auto& slot : saved_states[range.parameter].slots) state.slots.push_back(slot.clone());
          ddp::write_state(optimizer, range.stepped, state);
        }
        shards.share_updated_parameters();
        for (int step = kSaved; step < kSaved + kResumed; ++step) {
          set_gradients(parameters, step);
          optimizer.step();
          shards.share_updated_parameters();
        }
        differing[rank] = 0;
        for (std::size_t i = 0; i < parameters.size(); ++i) differing[rank] += !torch::equal(parameters[i], expected[i]);
      }));
      CHECK(differing == std::vector<int>(world, 0));
    }
  }
}

}  // namespace DDP_TEST_FILE
