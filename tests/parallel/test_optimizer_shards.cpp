// ZeRO-1's engine in-process (Note [Optimizer shards]): ranks as threads over Gloo, small tensors,
// against a replicated AdamW that sees the same gradients.
#include <torch/torch.h>
#undef CHECK  // glog's CHECK (via LibTorch) must not shadow Catch's
#include <catch2/catch.hpp>

#include <array>
#include <mutex>
#include <vector>

#include "ddp/parallel/optimizer_shards.h"
#include "ddp/parallel/optimizer_state.h"
#include "support/thread_ranks.h"

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

TEST_CASE("ZeRO-1: the gathered state is the replicated optimizer's, and each rank keeps its part of it, so a run "
          "resumes at world 3, 2 and 1 bit for bit",
          "[parallel][zero]") {
  constexpr int kSaved = 3, kResumed = 2;
  const auto saved_reference = replicated_after(kSaved);
  const auto expected = replicated_after(kSaved + kResumed);

  // World 4 trains three steps; every rank gathers the whole state, rank 0 keeps it as a checkpoint would.
  std::vector<torch::Tensor> saved_values;
  std::vector<StateTensors> saved_states;
  std::vector<int> state_mismatches(4, -1);
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
    torch::optim::AdamW whole(parameters, adamw());
    shards.gather_state(optimizer, whole);
    state_mismatches[rank] = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i)
      state_mismatches[rank] += !same_state(ddp::read_state(whole, parameters[i]), ddp::read_state(replicated, reference[i]));
    if (rank == 0)
      for (const auto& p : parameters) {
        saved_values.push_back(p.detach().clone());
        saved_states.push_back(ddp::read_state(whole, p));
      }
  }));
  CHECK(state_mismatches == std::vector<int>(4, 0));
  REQUIRE(saved_values.size() == kSizes.size());
  for (std::size_t i = 0; i < kSizes.size(); ++i) CHECK(torch::equal(saved_values[i], saved_reference[i]));

  for (int world : {3, 2, 1}) {
    DYNAMIC_SECTION("resumed at world " << world) {
      std::vector<int> differing(world, -1);
      check_no_errors(ddp::test::run_ranks(world, [&](int rank, const ddp::Communicator& group) {
        std::vector<torch::Tensor> parameters;
        for (const auto& value : saved_values) parameters.push_back(value.clone().requires_grad_());
        torch::optim::AdamW whole(parameters, adamw());
        for (std::size_t i = 0; i < parameters.size(); ++i) {
          StateTensors state{saved_states[i].step.clone(), {}};
          for (const auto& slot : saved_states[i].slots) state.slots.push_back(slot.clone());
          ddp::write_state(whole, parameters[i], state);
        }
        OptimizerShards shards(parameters, group);
        torch::optim::AdamW optimizer(shards.owned(), adamw());
        shards.keep_owned_state(whole, optimizer);
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
