// The one checkpoint format in-process: boxes tile any run of elements, and a checkpoint written by
// one layout restores into another's pieces (flat runs of ZeRO shards, whole tensors), format 1's
// whole files included; the writer and reader over ranks as threads, a file per writer or one.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <mutex>
#include <random>

#include "ddp/checkpoint/checkpointer.h"
#include "ddp/checkpoint/checkpoint_format.h"
#include "ddp/parallel/tensor_box.h"
#include "ddp/common/atomic_file.h"
#include "ddp/model/model_registry.h"
#include "ddp/optim/optimizer_factory.h"
#include "ddp/parallel/optimizer_state.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using ddp::TensorBox;
using Catch::Contains;
using Catch::StartsWith;

namespace {

namespace fs = std::filesystem;

// The elements of `whole` in `box`, in the box's row-major order.
torch::Tensor elements_of(const torch::Tensor& whole, const TensorBox& box) {
  return ddp::narrow_to(whole, ddp::whole_box(whole.sizes().vec()), box).reshape(-1);
}

struct Trainee {
  std::shared_ptr<ddp::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

// An MLP under AdamW after two steps: every parameter has moments and a step count.
Trainee trained(uint64_t seed) {
  torch::manual_seed(seed);
  ddp::ModelConfig model_config;
  model_config.name = "mlp";
  model_config.mlp.hidden = {12, 5};
  ddp::OptimConfig optim;
  optim.name = "adamw";
  Trainee trainee{ddp::make_model(model_config), nullptr};
  trainee.optimizer = ddp::make_optimizer(trainee.model->parameters(), optim, 0.01);
  for (int step = 0; step < 2; ++step) {
    trainee.optimizer->zero_grad();
    auto x = torch::randn({3, ddp::kInputChannels, ddp::kInputHeight, ddp::kInputWidth});
    trainee.model->forward(x).square().mean().backward();
    trainee.optimizer->step();
  }
  return trainee;
}

ddp::CheckpointConfig keep(int64_t n) {
  ddp::CheckpointConfig config;
  config.keep_last = n;
  return config;
}

}  // namespace

TEST_CASE("the boxes of a run of elements tile exactly that run, in order, in at most 2 ndim - 1 boxes",
          "[checkpoint]") {
  std::mt19937 random(7);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{10}, {4, 6}, {3, 1, 5}, {2, 3, 4, 5}, {}}) {
    const int64_t numel = ddp::whole_box(shape).numel();
    torch::Tensor whole = torch::arange(numel).reshape(shape);
    for (int trial = 0; trial < 40; ++trial) {
      int64_t begin = static_cast<int64_t>(random() % static_cast<uint32_t>(numel));
      int64_t count = 1 + static_cast<int64_t>(random() % static_cast<uint32_t>(numel - begin));
      auto boxes = ddp::boxes_of_run(shape, begin, count);
      INFO("shape " << c10::IntArrayRef(shape) << ", elements [" << begin << ", " << begin + count << ")");
      CHECK(boxes.size() <= std::max<std::size_t>(1, 2 * shape.size() - 1));
      int64_t first = 0;
      std::vector<torch::Tensor> parts;
      for (const auto& piece : boxes) {
        CHECK(piece.first == first);
        first += piece.box.numel();
        parts.push_back(elements_of(whole, piece.box));
      }
      CHECK(torch::equal(torch::cat(parts), torch::arange(begin, begin + count)));
    }
  }
  CHECK(ddp::boxes_of_run({4, 6}, 0, 24).size() == 1);
  CHECK(ddp::boxes_of_run({4, 6}, 3, 0).empty());
  auto overlap = ddp::box_overlap({{0, 2}, {3, 4}}, {{2, 0}, {2, 3}});
  REQUIRE(overlap.has_value());
  CHECK(overlap->describe() == "[2:3, 2:3]");
  CHECK_FALSE(ddp::box_overlap({{0}, {3}}, {{3}, {2}}).has_value());
}

TEST_CASE("a run of a tensor-parallel slice is the boxes of the whole tensor it holds, in the run's order",
          "[checkpoint]") {
  auto described = [](const std::vector<ddp::TensorBox>& boxes) {
    std::string text;
    for (const auto& box : boxes) text += box.describe();
    return text;
  };
  // Rank 1 of 2 of a fused layer's three projections, 2 rows each of [6, 4]: rows 1, 3 and 5.
  std::vector<ddp::TensorBox> fused{{{1, 0}, {1, 4}}, {{3, 0}, {1, 4}}, {{5, 0}, {1, 4}}};
  CHECK(described(ddp::boxes_of_slice_run({3, 4}, fused, 2, 8)) == "[1:2, 2:4][3:4, 0:4][5:6, 0:2]");
  CHECK(described(ddp::boxes_of_slice_run({3, 4}, fused, 0, 12)) == "[1:2, 0:4][3:4, 0:4][5:6, 0:4]");
  // Rank 1 of 2 of a row-parallel weight [4, 8]: columns 4 to 8.
  std::vector<ddp::TensorBox> columns{{{0, 4}, {4, 4}}};
  CHECK(described(ddp::boxes_of_slice_run({4, 4}, columns, 2, 5)) == "[0:1, 6:8][1:2, 4:7]");
}

TEST_CASE("a whole checkpoint restores into three ranks' flat runs, values and optimizer state alike, and back",
          "[checkpoint]") {
  TempDir dir;
  Trainee saved = trained(1);
  ddp::Checkpointer checkpointer(keep(3), dir.file("checkpoints"));
  ddp::TrainProgress progress;
  progress.step = 2;
  ddp::save_whole_checkpoint(checkpointer, *saved.model, *saved.optimizer, progress, 1);
  auto info = ddp::checkpoint_at(dir.file("checkpoints/step_0000000002.json"));
  const std::string manifest = ddp::read_whole_file(info.manifest_path);
  CHECK_THAT(manifest, Contains("format_version: 2") && Contains("pieces:") && Contains("file: step_0000000002.pt"));
  const std::string data = ddp::read_whole_file(ddp::common_file(manifest, info.manifest_path));

  // Three ranks, each keeping a third of every parameter's flattened elements (ZeRO's cut, not rows).
  ddp::CheckpointLayout whole = ddp::whole_layout(*saved.model);
  Trainee fresh = trained(2);  // other values everywhere
  std::vector<torch::Tensor> mine;
  for (int rank = 0; rank < 3; ++rank) {
    ddp::CheckpointLayout layout = ddp::whole_layout(*fresh.model);
    layout.ranges.clear();
    std::vector<torch::Tensor> pieces;
    for (std::size_t i = 0; i < layout.parameters.size(); ++i) {
      const int64_t numel = layout.parameters[i].numel(), lo = numel * rank / 3, hi = numel * (rank + 1) / 3;
      pieces.push_back(torch::zeros({hi - lo}).requires_grad_());
      layout.ranges.push_back({i, lo, pieces.back().detach(), pieces.back(), {}});
    }
    auto optimizer = std::make_unique<torch::optim::AdamW>(pieces);
    ddp::CheckpointReader reader(manifest, info.manifest_path, data);
    CHECK(reader.describe() == "whole");
    reader.check_fits(layout, *fresh.model, *optimizer);
    REQUIRE(reader.read_pieces(layout).empty());
    reader.restore(layout, *fresh.model, *optimizer, 0);
    for (const auto& range : layout.ranges) {
      const torch::Tensor& p = whole.parameters[range.parameter];
      auto expected = p.detach().reshape(-1).narrow(0, range.begin, range.value.numel());
      CHECK(torch::equal(range.value, expected));
      ddp::StateTensors theirs = ddp::read_state(*saved.optimizer, p), ours = ddp::read_state(*optimizer, range.stepped);
      CHECK(ours.step.item<int64_t>() == theirs.step.item<int64_t>());
      for (std::size_t s = 0; s < theirs.slots.size(); ++s)
        CHECK(torch::equal(ours.slots[s], theirs.slots[s].reshape(-1).narrow(0, range.begin, range.value.numel())));
    }
  }
}

TEST_CASE("a format-1 whole checkpoint (the model by name and LibTorch's optimizer archive) still resumes",
          "[checkpoint]") {
  TempDir dir;
  Trainee saved = trained(3);
  fs::create_directories(dir.file("checkpoints"));
  // What ddprun wrote before format 2, written here as it was.
  torch::serialize::OutputArchive archive;
  ddp::TrainProgress progress;
  progress.step = 4;
  ddp::write_progress(archive, progress, 1, {});
  for (const auto& item : saved.model->named_parameters()) archive.write("model/" + item.key(), item.value());
  torch::serialize::OutputArchive optimizer_archive;
  saved.optimizer->save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  const std::string path = dir.file("checkpoints/step_0000000004.pt");
  archive.save_to(path);
  const std::string data = ddp::read_whole_file(path);
  const std::string manifest = "{\"format_version\": 1, \"step\": 4, \"epoch\": 0, \"world_size\": 1, \"bytes\": " +
                               std::to_string(data.size()) + ", \"crc32\": " + std::to_string(ddp::crc32_of(data)) + "}\n";
  ddp::write_file_atomically(dir.file("checkpoints/step_0000000004.json"), manifest);

  ddp::Checkpointer checkpointer(keep(3), dir.file("checkpoints"));
  auto found = checkpointer.find_resume_point();
  REQUIRE(found.has_value());
  Trainee fresh = trained(4);
  auto loaded = ddp::load_whole_checkpoint(manifest, found->manifest_path, data, *fresh.model, *fresh.optimizer);
  CHECK(loaded.step == 4);
  auto theirs = saved.model->parameters(), ours = fresh.model->parameters();
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    CHECK(torch::equal(ours[i], theirs[i]));
    auto a = ddp::read_state(*saved.optimizer, theirs[i]), b = ddp::read_state(*fresh.optimizer, ours[i]);
    CHECK(a.step.item<int64_t>() == b.step.item<int64_t>());
    for (std::size_t s = 0; s < a.slots.size(); ++s) CHECK(torch::equal(a.slots[s], b.slots[s]));
  }
}

namespace {

const std::vector<std::vector<int64_t>> kShapes{{7, 5}, {13}, {3, 4, 2}, {}};

// Whole values, and gradients for one AdamW step, alike on every thread (no global RNG draws).
std::vector<torch::Tensor> whole_values() {
  std::vector<torch::Tensor> values;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const int64_t numel = ddp::whole_box(kShapes[i]).numel();
    values.push_back(torch::sin(torch::arange(numel, torch::kFloat) * 0.3 + static_cast<double>(i)).reshape(kShapes[i]));
  }
  return values;
}
torch::Tensor gradient_of(std::size_t i) {
  return torch::cos(torch::arange(ddp::whole_box(kShapes[i]).numel(), torch::kFloat) * 0.7 + static_cast<double>(i));
}

// Rank `rank` of `world`: a contiguous share of every parameter's flattened elements, as ZeRO cuts
// them, with an AdamW over those pieces; `step` takes one step with the whole gradient's matching part.
struct RankPieces {
  ddp::CheckpointLayout layout;
  std::vector<torch::Tensor> pieces;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

RankPieces rank_pieces(int rank, int world, bool step) {
  RankPieces mine;
  auto values = whole_values();
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const int64_t numel = values[i].numel(), lo = numel * rank / world, hi = numel * (rank + 1) / world;
    mine.layout.names.push_back("w" + std::to_string(i));
    mine.layout.parameters.push_back(values[i]);
    mine.layout.shapes.push_back(kShapes[i]);
    mine.pieces.push_back((step ? values[i].reshape(-1).narrow(0, lo, hi - lo).clone() : torch::zeros({hi - lo}))
                              .requires_grad_());
    mine.layout.ranges.push_back({i, lo, mine.pieces.back().detach(), mine.pieces.back(), {}});
  }
  mine.optimizer = std::make_unique<torch::optim::AdamW>(mine.pieces, torch::optim::AdamWOptions(0.01));
  if (step) {
    for (const auto& range : mine.layout.ranges)
      mine.pieces[range.parameter].mutable_grad() = gradient_of(range.parameter).narrow(0, range.begin, range.value.numel());
    mine.optimizer->step();
  }
  mine.layout.shard = rank;
  mine.layout.shards = world;
  mine.layout.writes = true;
  mine.layout.data_parallel_size = world;
  mine.layout.mesh = "data_shard " + std::to_string(world);
  return mine;
}

}  // namespace

TEST_CASE("four ranks as threads write their pieces (a file each, or one file on rank 0), and three ranks and one "
          "restore theirs: every value and moment where it was",
          "[checkpoint][parallel]") {
  // What the writers held, assembled whole: each parameter's values and AdamW moments, flattened.
  std::vector<torch::Tensor> saved;
  std::vector<std::vector<torch::Tensor>> saved_slots;
  for (const auto& shape : kShapes) {
    saved.push_back(torch::zeros({ddp::whole_box(shape).numel()}));
    saved_slots.push_back({torch::zeros_like(saved.back()), torch::zeros_like(saved.back())});
  }
  std::mutex saving;

  for (bool one_file : {false, true}) {
    DYNAMIC_SECTION((one_file ? "one file" : "a file per writer")) {
      TempDir dir;
      ddp::CheckpointConfig config;
      config.keep_last = 2;
      ddp::TrainProgress progress;
      progress.step = 1;
      torch::nn::Module no_buffers;
      auto errors = ddp::test::run_ranks(4, [&](int rank, const ddp::Communicator& group) {
        RankPieces mine = rank_pieces(rank, 4, /*step=*/true);
        mine.layout.single_file = one_file;
        {
          std::lock_guard<std::mutex> lock(saving);
          for (const auto& range : mine.layout.ranges) {
            const int64_t n = range.value.numel();
            saved[range.parameter].narrow(0, range.begin, n).copy_(range.value);
            auto state = ddp::read_state(*mine.optimizer, range.stepped);
            for (std::size_t s = 0; s < 2; ++s) saved_slots[range.parameter][s].narrow(0, range.begin, n).copy_(state.slots[s]);
          }
        }
        ddp::Checkpointer checkpointer(config, dir.file("checkpoints"));
        ddp::write_checkpoint(checkpointer, group, mine.layout, no_buffers, *mine.optimizer, progress, {});
      });
      for (const auto& error : errors) CHECK(error.empty());
      CHECK(fs::exists(dir.file("checkpoints/step_0000000001.pt")) == one_file);
      CHECK(fs::exists(dir.file("checkpoints/step_0000000001.shard-3-of-4.pt")) == !one_file);

      const std::string manifest_path = dir.file("checkpoints/step_0000000001.json");
      const std::string manifest = ddp::read_whole_file(manifest_path);
      const std::string common = ddp::read_whole_file(ddp::common_file(manifest, manifest_path));
      for (int world : {3, 1}) {
        std::vector<int> wrong(static_cast<std::size_t>(world), -1);
        errors = ddp::test::run_ranks(world, [&](int rank, const ddp::Communicator&) {
          RankPieces mine = rank_pieces(rank, world, /*step=*/false);
          ddp::CheckpointReader reader(manifest, manifest_path, common);
          reader.check_fits(mine.layout, no_buffers, *mine.optimizer);
          if (auto problem = reader.read_pieces(mine.layout); !problem.empty()) throw std::runtime_error(problem);
          reader.restore(mine.layout, no_buffers, *mine.optimizer, rank);
          int differing = 0;
          for (const auto& range : mine.layout.ranges) {
            if (range.value.numel() == 0) continue;  // a share of no elements: no state either
            auto part = [&](const torch::Tensor& t) { return t.narrow(0, range.begin, range.value.numel()); };
            differing += !torch::equal(range.value, part(saved[range.parameter]));
            auto ours = ddp::read_state(*mine.optimizer, range.stepped);
            differing += ours.step.item<int64_t>() != 1;
            for (std::size_t s = 0; s < 2; ++s) differing += !torch::equal(ours.slots[s], part(saved_slots[range.parameter][s]));
          }
          wrong[static_cast<std::size_t>(rank)] = differing;
        });
        INFO("restored at world " << world);
        for (const auto& error : errors) CHECK(error == "");  // the rank's error, if any, in the expansion
        CHECK(wrong == std::vector<int>(static_cast<std::size_t>(world), 0));
      }
    }
  }
}

TEST_CASE("when rank 0 cannot write its own file of a checkpoint every rank fails naming its cause, and none is "
          "committed",
          "[checkpoint][parallel]") {
  // A directory where rank 0's file goes (the common state, or the one file it merges): its rename
  // fails there alone, after the other writers wrote their shards. The others used to fail in the
  // next broadcast, as rank 0 left it, with "never arrived: rank 0 ... Connection closed by peer".
  for (bool one_file : {false, true}) {
    DYNAMIC_SECTION((one_file ? "one file" : "a file per writer")) {
      TempDir dir;
      ddp::CheckpointConfig config;
      ddp::TrainProgress progress;
      progress.step = 1;
      const std::string blocked = one_file ? "step_0000000001.pt" : "step_0000000001.common.pt";
      fs::create_directories(dir.file("checkpoints/" + blocked));
      torch::nn::Module no_buffers;
      auto errors = ddp::test::run_ranks(4, [&](int rank, const ddp::Communicator& group) {
        RankPieces mine = rank_pieces(rank, 4, /*step=*/true);
        mine.layout.single_file = one_file;
        ddp::Checkpointer checkpointer(config, dir.file("checkpoints"));
        ddp::write_checkpoint(checkpointer, group, mine.layout, no_buffers, *mine.optimizer, progress, {});
      });
      REQUIRE(errors.size() == 4);
      CHECK_THAT(errors[0], Contains(blocked));
      CHECK_THAT(errors[0], !Contains("rank 0: "));  // its own, as it was thrown
      for (std::size_t r = 1; r < errors.size(); ++r) {
        INFO("rank " << r);
        CHECK_THAT(errors[r], StartsWith("rank 0: ") && Contains(blocked));
      }
      CHECK_FALSE(fs::exists(dir.file("checkpoints/step_0000000001.json")));  // nothing committed
    }
  }
}

}  // namespace DDP_TEST_FILE
