// ZeRO-2 and ZeRO-3 (and HSDP) in-process (Note [Flat shards], Note [Unit hooks]): four ranks as
// threads over Gloo train a three-layer network, each on its own samples, against one process that
// trains the same network on all of them.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "ddp/model/deferred_init.h"
#include "ddp/model/safetensors.h"
#include "ddp/model/state_dict_file.h"
#include "ddp/parallel/sharded_blocks.h"
#include "ddp/parallel/sharded_data_parallel.h"
#include "support/three_layers.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using ddp::ShardedDataParallel;

namespace {

constexpr int kWorld = 4;
constexpr int kSteps = 3;
constexpr int64_t kBatch = 6;  // per rank
using ddp::test::make_three_layer_parameters;  // three units of (weight, bias)

// Rank `rank`'s samples at `step`: inputs [kBatch, 8] and targets [kBatch, 4].
std::pair<torch::Tensor, torch::Tensor> samples(int rank, int step) {
  auto at = torch::arange(kBatch * 8, torch::kFloat).reshape({kBatch, 8});
  auto x = torch::cos(at * 0.13 + rank * 1.7 + step * 0.5);
  auto y = torch::sin(torch::arange(kBatch * 4, torch::kFloat).reshape({kBatch, 4}) * 0.29 + rank - step);
  return {x, y};
}

// The network as a model declares it (Note [Blocks]): three blocks, each a layer of (weight, bias).
std::vector<ddp::ModelBlock> blocks_of(const std::vector<torch::Tensor>& p) {
  std::vector<ddp::ModelBlock> blocks;
  for (std::size_t i = 0; i < 3; ++i)
    blocks.push_back({"layer" + std::to_string(i), {p[2 * i], p[2 * i + 1]}, {}, [&p, i](torch::Tensor h) {
                        h = torch::nn::functional::linear(h, p[2 * i], p[2 * i + 1]);
                        return i < 2 ? torch::tanh(h) : h;
                      }});
  return blocks;
}

// The loss, the blocks run in order or, when set, by `runner` (stage 3: inside the engine's gathers).
torch::Tensor loss_of(const std::vector<ddp::ModelBlock>& blocks, const torch::Tensor& x, const torch::Tensor& y,
                      ddp::BlockRunner* runner) {
  return torch::mse_loss(runner ? runner->run(blocks, x) : ddp::run_in_order(blocks, x), y);
}

// SGD with momentum, not Adam: Adam's update hardly changes when a gradient is scaled, so it would hide
// a wrong divisor.
torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.2).momentum(0.9); }

// One process, every rank's samples: the mean of the ranks' losses is what data parallelism averages.
std::vector<torch::Tensor> reference_after(int steps) {
  auto parameters = make_three_layer_parameters();
  auto blocks = blocks_of(parameters);
  torch::optim::SGD optimizer(parameters, sgd());
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (int r = 0; r < kWorld; ++r) {
      auto [x, y] = samples(r, step);
      loss = loss + loss_of(blocks, x, y, nullptr) / kWorld;
    }
    loss.backward();
    optimizer.step();
  }
  return parameters;
}

// What a rank read of a weights file, in elements: whole tensors, and parts alone.
struct FileReads {
  int64_t whole = 0, parts = 0;
};

struct RankResult {
  std::string error;
  int64_t at_rest_bytes = -1;  // parameter bytes held between steps
  int64_t gradients_at_rest = -1;  // bytes the pieces' gradients hold between steps
  int64_t gradients_stepped = -1;  // and when the optimizer steps
  std::vector<torch::Tensor> whole;  // the parameters, gathered, after training
  std::size_t stored_before = 0;  // built deferred: parameters with storage before the engine
  std::size_t pending_after = 0;  // built deferred: parameters still without values after it
  int64_t gathered_bytes = -1;    // parameter bytes held once gathered for model.pt
  FileReads reads;                // built deferred from a file
};

// The three layers built deferred (Note [Deferred initialisation]): shapes without storage, each
// given its values by the engine, filled as a seeded build would, or read from `file` (a
// safetensors file of them in order) as model.init_from reads, counting into `reads`.
std::vector<torch::Tensor> deferred_three_layers(ddp::DeferredInit& deferred, const std::string& file = "",
                                                 FileReads* reads = nullptr) {
  std::vector<torch::Tensor> parameters;
  const ddp::StoredTensors stored = file.empty() ? ddp::StoredTensors{} : ddp::open_state_dict_file(file);
  ddp::DeferredBuild scope(deferred);
  const auto all = make_three_layer_parameters();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& values = all[i];
    auto p = torch::empty_like(values).requires_grad_(values.requires_grad());
    if (file.empty()) {
      ddp::init_parameter(p, [values](torch::Tensor& t) { t.copy_(values); });
    } else {
      const ddp::StoredTensor s = stored.at(i).second;
      ddp::init_parameter_without_draws(
          p,
          [s, reads](torch::Tensor& t) {
            reads->whole += t.numel();
            t.copy_(s.read());
          },
          [s, reads](c10::IntArrayRef view, const ddp::TensorPart& part) {
            auto values = s.read_part(view, part);
            reads->parts += values.numel();
            return values;
          });
    }
    parameters.push_back(p);
  }
  return parameters;
}

// Bytes of memory under the pieces' gradients, each storage once.
int64_t gradient_storage_bytes(const std::vector<torch::Tensor>& pieces) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& p : pieces)
    if (p.grad().defined() && seen.insert(p.grad().storage().unsafeGetStorageImpl()).second)
      bytes += static_cast<int64_t>(p.grad().storage().nbytes());
  return bytes;
}

// How train_sharded runs.
struct Layout {
  bool shard_parameters = false;  // ZeRO-3, else ZeRO-2
  int shard_size = kWorld;        // consecutive ranks per shard group, replicated across them
  bool deferred = false;          // the layers built deferred
  bool writer_only = false;       // gathered for model.pt on rank 0 alone, the others taking part
  std::string from_file;          // deferred: read from this safetensors file of the layers
};

// Trains on `kWorld` threads as `layout` says.
std::vector<RankResult> train_sharded(const Layout& layout) {
  const bool shard_parameters = layout.shard_parameters, deferred = layout.deferred,
             writer_only = layout.writer_only;
  const int shard_size = layout.shard_size;
  ddp::test::TempDir stores;
  const int replicas = kWorld / shard_size;
  // Each group meets through a FileStore of its own.
  std::filesystem::create_directories(stores.file("world"));
  for (int g = 0; g < kWorld; ++g) {
    std::filesystem::create_directories(stores.file("shard" + std::to_string(g)));
    std::filesystem::create_directories(stores.file("replicate" + std::to_string(g)));
  }
  std::vector<RankResult> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      try {
        auto world = ddp::test::connect_thread_rank(r, kWorld, stores.file("world"));
        auto shard_group = ddp::test::connect_thread_rank(r % shard_size, shard_size,
                                                          stores.file("shard" + std::to_string(r / shard_size)));
        auto replicate_group = ddp::test::connect_thread_rank(r / shard_size, replicas,
                                                              stores.file("replicate" + std::to_string(r % shard_size)));
        ddp::DeferredInit deferred_init;
        auto parameters = deferred ? deferred_three_layers(deferred_init, layout.from_file, &results[r].reads)
                                   : make_three_layer_parameters();
        for (const auto& p : parameters) results[r].stored_before += p.storage().nbytes() > 0 ? 1 : 0;
        ddp::ShardedOptions options;
        options.shard_parameters = shard_parameters;
        options.data_parallel_size = kWorld;
        if (deferred) options.deferred = &deferred_init;
        auto blocks = blocks_of(parameters);
        ddp::ShardedBlocks sharded_blocks(blocks, {});  // its units: each layer's (weight, bias)
        ShardedDataParallel engine(parameters, {{}, {0, 1}, {2, 3}, {4, 5}}, shard_group, replicate_group, world,
                                   options, nullptr);
        sharded_blocks.attach(engine);
        results[r].pending_after = deferred_init.pending();
        torch::optim::SGD optimizer(engine.pieces(), sgd());
        for (int step = 0; step < kSteps; ++step) {
          auto [x, y] = samples(r, step);
          engine.prepare();
          loss_of(blocks, x, y, shard_parameters ? &sharded_blocks : nullptr).backward();
          engine.finish();
          results[r].gradients_stepped = gradient_storage_bytes(engine.pieces());
          optimizer.step();
          engine.after_optimizer_step();
          engine.zero_grad();
        }
        results[r].gradients_at_rest = gradient_storage_bytes(engine.pieces());
        results[r].at_rest_bytes = engine.parameter_bytes();
        const bool keep = !writer_only || r == 0;
        if (shard_parameters && keep) engine.gather_parameters();
        if (shard_parameters && !keep) engine.take_part_in_gather();
        results[r].gathered_bytes = engine.parameter_bytes();
        if (keep)
          for (const auto& p : parameters) results[r].whole.push_back(p.detach().clone());
        if (shard_parameters) engine.release_parameters();
      } catch (const std::exception& e) {
        results[r].error = e.what();
      }
    });
  for (auto& thread : threads) thread.join();
  return results;
}

int64_t whole_bytes() {
  int64_t bytes = 0;
  for (const auto& p : make_three_layer_parameters()) bytes += p.numel() * 4;
  return bytes;
}

}  // namespace

TEST_CASE("ZeRO-2, ZeRO-3 and HSDP in-process: four ranks on their own samples train to one process's weights on "
          "all of them, ZeRO-3 keeps only its shards between steps, and no gradient memory is held between them",
          "[parallel][zero]") {
  const auto expected = reference_after(kSteps);
  struct Named {
    const char* name;
    Layout layout;
  };
  for (const auto& [name, layout] : {Named{"ZeRO-2", {.shard_parameters = false, .shard_size = 4}},
                                     Named{"ZeRO-3", {.shard_parameters = true, .shard_size = 4}},
                                     Named{"HSDP: ZeRO-3 in pairs, replicated twice",
                                           {.shard_parameters = true, .shard_size = 2}}}) {
    DYNAMIC_SECTION(name) {
      auto results = train_sharded(layout);
      for (int r = 0; r < kWorld; ++r) {
        INFO("rank " << r);
        REQUIRE(results[r].error == "");
        REQUIRE(results[r].whole.size() == expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
          INFO("parameter " << i << ": largest difference "
                            << (results[r].whole[i] - expected[i]).abs().max().item<double>());
          CHECK(torch::allclose(results[r].whole[i], expected[i], 1e-5, 1e-6));
          CHECK(torch::equal(results[r].whole[i], results[0].whole[i]));  // the replicas agree exactly
        }
        if (layout.shard_parameters) {
          // Its shards alone: a shard_size-th of each unit, rounded up to whole elements.
          CHECK(results[r].at_rest_bytes <= whole_bytes() / layout.shard_size + 4 * 3);
        } else {
          CHECK(results[r].at_rest_bytes == whole_bytes());  // ZeRO-2 keeps whole parameters
        }
        // Gradient shards hold memory from their reduce-scatter to the optimizer's step only.
        CHECK(results[r].gradients_stepped >= whole_bytes() / layout.shard_size);
        CHECK(results[r].gradients_at_rest == 0);
      }
    }
  }
}

TEST_CASE("ZeRO-3 over layers built deferred gives each unit its values as it flattens it and trains to one "
          "process's weights, and gathered for model.pt's writer alone no other rank holds more than its shards",
          "[parallel][zero][deferred]") {
  const auto expected = reference_after(kSteps);
  auto results = train_sharded({.shard_parameters = true, .deferred = true, .writer_only = true});
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    REQUIRE(results[r].error == "");
    CHECK(results[r].stored_before == 0);  // no layer had values before the engine
    CHECK(results[r].pending_after == 0);  // every one has them after
    if (r == 0) {
      CHECK(results[r].gathered_bytes >= whole_bytes());
      REQUIRE(results[r].whole.size() == expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) CHECK(torch::allclose(results[r].whole[i], expected[i], 1e-5, 1e-6));
    } else {
      CHECK(results[r].gathered_bytes == results[r].at_rest_bytes);  // its shards, nothing gathered kept
      CHECK(results[r].whole.empty());
    }
  }
}

TEST_CASE("ZeRO-3 over layers deferred to a weights file reads each rank's share of each unit's elements alone, "
          "and trains to one process's weights",
          "[parallel][zero][deferred]") {
  ddp::test::TempDir dir;
  std::vector<std::pair<std::string, torch::Tensor>> layers;
  for (const auto& p : make_three_layer_parameters()) layers.emplace_back("p" + std::to_string(layers.size()), p);
  ddp::write_safetensors(dir.file("layers.safetensors"), layers);
  const auto expected = reference_after(kSteps);
  auto results = train_sharded({.shard_parameters = true, .deferred = true, .from_file = dir.file("layers.safetensors")});
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    REQUIRE(results[r].error == "");
    CHECK(results[r].stored_before == 0);
    CHECK(results[r].reads.whole == 0);
    int64_t share = 0;  // of each unit, (weight, bias) flat, cut in kWorld
    for (std::size_t u = 0; u < 3; ++u) {
      const int64_t numel = layers[2 * u].second.numel() + layers[2 * u + 1].second.numel();
      const int64_t each = (numel + kWorld - 1) / kWorld;
      share += std::max<int64_t>(0, std::min(numel, (r + 1) * each) - r * each);
    }
    CHECK(results[r].reads.parts == share);
    REQUIRE(results[r].whole.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(torch::allclose(results[r].whole[i], expected[i], 1e-5, 1e-6));
  }
}

TEST_CASE("a model's blocks make the shard units: a weight two blocks use, or one named for the root, stays with "
          "the root, and a block left with no parameters is no unit",
          "[parallel][zero]") {
  auto tensor = [](int64_t n) { return torch::zeros({n}); };
  torch::Tensor tied = tensor(6), a = tensor(1), b = tensor(2), c = tensor(3), kept = tensor(4);
  auto block = [](std::vector<torch::Tensor> parameters) {
    return ddp::ModelBlock{"", std::move(parameters), {}, [](torch::Tensor x) { return x; }};
  };
  // An embedding whose weight the head reuses, a parameter-free block, a layer, and the head.
  std::vector<ddp::ModelBlock> blocks{block({tied, a}), block({}), block({b, kept}), block({c, tied})};
  ddp::ShardedBlocks sharded(blocks, {kept});
  const auto& units = sharded.units();
  REQUIRE(units.size() == 3);
  CHECK((units[0].size() == 1 && units[0][0].is_same(a)));
  CHECK((units[1].size() == 1 && units[1][0].is_same(b)));
  CHECK((units[2].size() == 1 && units[2][0].is_same(c)));
  // Unattached, it runs the blocks in order; run on other blocks than its own, it says so.
  CHECK(torch::equal(sharded.run(blocks, torch::ones({2})), torch::ones({2})));
  CHECK_THROWS_WITH(sharded.run({block({a})}, torch::ones({2})), Catch::Contains("1 blocks, built for 4"));
}

TEST_CASE("the sharding engine refuses a tensor given twice, which it would take once and copy unwritten",
          "[parallel][zero]") {
  auto errors = ddp::test::run_ranks(1, [](int, const ddp::Communicator& world) {
    auto p = torch::zeros({4}, torch::requires_grad());
    ShardedDataParallel engine({p, p}, {{0, 1}}, world, world, world, ddp::ShardedOptions{}, nullptr);
  });
  CHECK_THAT(errors[0], Catch::Contains("ShardedDataParallel: a parameter is given twice"));
}

}  // namespace DDP_TEST_FILE
