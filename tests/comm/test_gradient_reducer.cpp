// The gradient reducer over a real communicator: two ranks as threads of this process, meeting
// through a FileStore, summing through shared memory or through Gloo.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <array>
#include <thread>
#include <vector>

#include "ddp/comm/gradient_reducer.h"
#include "ddp/comm/process_group.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

using Gradients = std::vector<torch::Tensor>;

// Parameters 0..3: weight and bias of two layers; every rank starts from the same weights. It seeds
// the global generator: call it from one thread at a time (the tests build the models before the
// rank threads start).
torch::nn::Sequential make_model() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::ReLU(), torch::nn::Linear(5, 3));
}

torch::Tensor loss_of(torch::nn::Sequential& model, int rank) {
  return model->forward(torch::linspace(-1, 1, 24).reshape({4, 6}) * (rank + 1)).pow(2).sum();
}

// Rank `rank`'s own gradients, computed alone.
Gradients gradients_alone(int rank) {
  auto model = make_model();
  loss_of(model, rank).backward();
  Gradients grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad());
  return grads;
}

// Rank `rank` of `world` (two: the other a thread of this process), meeting through a FileStore in `store_dir`.
ddp::Communicator connect_rank(int rank, const std::string& store_dir, bool shared_memory, int world = 2) {
  ddp::WorkerIdentity env;
  env.rank = rank;
  env.world_size = env.local_world_size = world;
  env.store_path = store_dir;
  ddp::DistConfig config;
  config.shared_memory = shared_memory;
  return ddp::connect(env, config);
}

}  // namespace

TEST_CASE("reduced gradients are the average, stay in the buckets, and survive being replaced or dropped",
          "[dist][reducer]") {
  // Replaced or dropped before backward, as other code might do: backward then fills a tensor of
  // its own, which the reducer copies into the bucket, and finish() points the gradient back.
  Gradients mine = gradients_alone(0), theirs = gradients_alone(1);
  for (bool shared_memory : {true, false}) {
    ddp::test::TempDir store;
    std::vector<Gradients> result(2);
    std::vector<std::vector<double>> side(2);
    std::array<bool, 2> in_buckets{};  // not vector<bool>: its packed bits are no place for two threads' writes
    std::vector<torch::nn::Sequential> models{make_model(), make_model()};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ddp::Communicator comm = connect_rank(r, store.path(), shared_memory);
        auto& model = models[r];
        auto parameters = model->parameters();
        ddp::DistConfig config;
        config.first_bucket_mb = 1e-5;  // bucket 0: parameter 3 alone; bucket 1: parameters 2, 1, 0
        ddp::ValueSlots side_values;
        auto vote = side_values.reserve("vote");
        auto number = side_values.reserve("number");
        ddp::GradientReducer reducer(parameters, comm, config, &side_values);
        for (int step = 0; step < 2; ++step) {  // the second step shows zero_grad() at work
          side_values.value(vote) = r == 1 ? 1.0 : 0.0;
          side_values.value(number) = 2.0 + r;
          reducer.prepare();
          if (step == 1 && r == 0) {
            parameters[1].mutable_grad() = torch::zeros_like(parameters[1]);  // replaced
            parameters[3].mutable_grad().reset();                            // dropped
          }
          loss_of(model, r).backward();
          reducer.finish();
          side[r] = {side_values.value(vote), side_values.value(number)};
          if (step == 0) reducer.zero_grad();
        }
        for (auto& p : parameters) result[r].push_back(p.grad().clone());
        in_buckets[r] = parameters[0].grad().storage().is_alias_of(parameters[1].grad().storage()) &&
                        parameters[0].grad().storage().is_alias_of(parameters[2].grad().storage());
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      INFO("shared memory " << shared_memory << ", rank " << r);
      CHECK(in_buckets[r]);
      CHECK(side[r] == std::vector<double>{1.0, 5.0});  // summed over the ranks
      for (int i = 0; i < 4; ++i) {
        CHECK(torch::allclose(result[r][i], (mine[i] + theirs[i]) / 2, 1e-6, 1e-7));
        CHECK(torch::equal(result[r][i], result[1 - r][i]));
      }
    }
  }
}

TEST_CASE("parameters of two dtypes get buckets of their own, summed by shared memory and by Gloo", "[dist][reducer]") {
  ddp::test::TempDir store;
  std::vector<Gradients> result(2);
  std::vector<std::size_t> buckets(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ddp::Communicator comm = connect_rank(r, store.path(), /*shared_memory=*/true);
      std::vector<torch::Tensor> parameters{torch::ones({3}, torch::kFloat).requires_grad_(),
                                            torch::ones({2}, torch::kDouble).requires_grad_()};
      ddp::GradientReducer reducer(parameters, comm, ddp::DistConfig{});
      buckets[r] = reducer.bucket_layout().size();
      reducer.prepare();
      ((parameters[0] * (r + 1)).sum() + (parameters[1] * (10 * (r + 1))).sum()).backward();
      reducer.finish();
      for (auto& p : parameters) result[r].push_back(p.grad().clone());
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    CHECK(buckets[r] == 2);
    CHECK(torch::equal(result[r][0], torch::full({3}, 1.5f)));  // (1 + 2) / 2
    CHECK(torch::equal(result[r][1], torch::full({2}, 15.0, torch::kDouble)));  // (10 + 20) / 2
  }
}

TEST_CASE("gradient accumulation communicates only on the last micro-step", "[dist][reducer]") {
  // Three micro-steps per optimizer step, prepare() before the last one only, as the trainer does:
  // the collectives started are counted after each backward.
  for (bool overlap : {true, false}) {
    ddp::test::TempDir store;
    std::vector<std::vector<int64_t>> started(2);
    std::vector<std::size_t> buckets(2);
    std::vector<Gradients> result(2);
    std::vector<torch::nn::Sequential> models{make_model(), make_model()};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ddp::Communicator comm = connect_rank(r, store.path(), /*shared_memory=*/false);
        auto& model = models[r];
        ddp::DistConfig config;
        config.overlap = overlap;
        config.first_bucket_mb = 1e-5;  // two buckets
        ddp::GradientReducer reducer(model->parameters(), comm, config);
        buckets[r] = reducer.bucket_layout().size();
        for (int micro = 0; micro < 3; ++micro) {
          int64_t before = comm.tracker->started();
          if (micro == 2) reducer.prepare();
          loss_of(model, r).backward();
          if (micro == 2) reducer.finish();
          started[r].push_back(comm.tracker->started() - before);
        }
        for (auto& p : model->parameters()) result[r].push_back(p.grad().clone());
      });
    for (auto& t : threads) t.join();
    Gradients alone = gradients_alone(0), other = gradients_alone(1);
    for (int r = 0; r < 2; ++r) {
      INFO("overlap " << overlap << ", rank " << r);
      REQUIRE(buckets[r] == 2);
      CHECK(started[r] == std::vector<int64_t>{0, 0, 2});  // one all-reduce per bucket, at the end
      for (int i = 0; i < 4; ++i)  // three micro-steps accumulated, then averaged over the ranks
        CHECK(torch::allclose(result[r][i], (alone[i] + other[i]) * 1.5, 1e-5, 1e-6));
    }
  }
}

TEST_CASE("a parameter no rank used is left without a gradient, and one used on one rank is averaged with zeros",
          "[dist][reducer]") {
  // Note [Unused parameters]: parameter 0 is used on both ranks, 1 on rank 1 only, 2 on neither.
  for (bool overlap : {true, false})
    for (bool shared_memory : {true, false}) {
      ddp::test::TempDir store;
      std::vector<std::vector<bool>> defined(2);
      std::vector<Gradients> result(2);
      std::array<bool, 2> restored{};
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          ddp::Communicator comm = connect_rank(r, store.path(), shared_memory);
          std::vector<torch::Tensor> parameters{torch::ones({3}).requires_grad_(), torch::ones({3}).requires_grad_(),
                                                torch::ones({3}).requires_grad_()};
          ddp::DistConfig config;
          config.overlap = overlap;
          ddp::GradientReducer reducer(parameters, comm, config);
          // Two micro-steps: rank 1 uses parameter 1 in the first, which the step must remember.
          auto loss = (parameters[0] * (r + 1)).sum();
          if (r == 1) loss = loss + (parameters[1] * 4).sum();
          loss.backward();
          reducer.prepare();
          (parameters[0] * (r + 1)).sum().backward();
          reducer.finish();
          for (auto& p : parameters) {
            defined[r].push_back(p.grad().defined());
            result[r].push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
          }
          reducer.zero_grad();
          restored[r] = parameters[2].grad().defined() && parameters[2].grad().abs().sum().item<float>() == 0;
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < 2; ++r) {
        INFO("overlap " << overlap << ", shared memory " << shared_memory << ", rank " << r);
        CHECK(defined[r] == std::vector<bool>{true, true, false});
        CHECK(torch::equal(result[r][0], torch::full({3}, 3.0f)));  // (2·1 + 2·2) / 2
        CHECK(torch::equal(result[r][1], torch::full({3}, 2.0f)));  // (0 + 4) / 2
        CHECK(restored[r]);  // zero_grad() points it back at its bucket
      }
    }
}

TEST_CASE("alone, the reducer reads nothing back: its side values stay exactly its own, and a parameter it did not "
          "use is left without a gradient",
          "[dist][reducer]") {
  // At world 1 finish() keeps the sums on the host (on a GPU a read back would wait for the backward).
  ddp::test::TempDir store;
  ddp::Communicator comm = connect_rank(0, store.path(), /*shared_memory=*/false, /*world=*/1);
  std::vector<torch::Tensor> parameters{torch::ones({3}).requires_grad_(), torch::ones({3}).requires_grad_()};
  ddp::ValueSlots side;
  auto slot = side.reserve("test", 2);
  ddp::GradientReducer reducer(parameters, comm, ddp::DistConfig{}, &side);
  for (int step = 0; step < 2; ++step) {
    side[slot][0] = 0.1;  // not a float32: a trip through the bucket would round it
    side[slot][1] = 1e300;
    reducer.prepare();
    (parameters[0] * 2).sum().backward();
    reducer.finish();
    CHECK(side[slot][0] == 0.1);
    CHECK(side[slot][1] == 1e300);
    REQUIRE(parameters[0].grad().defined());
    CHECK(torch::equal(parameters[0].grad(), torch::full({3}, 2.0f)));
    CHECK_FALSE(parameters[1].grad().defined());
    reducer.zero_grad();
  }
}

}  // namespace DDP_TEST_FILE
