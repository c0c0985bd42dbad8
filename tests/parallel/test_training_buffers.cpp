// Note [Buffers read in training] in-process: ranks as threads over Gloo, buffers each rank's own
// steps change otherwise.
#include <torch/torch.h>

#include <array>
#include <catch2/catch.hpp>
#include <mutex>
#include <vector>

#include "ddp/comm/collectives.h"
#include "ddp/parallel/training_buffers.h"
#include "support/log_capture.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE(
    "training buffers: those the first step changes are rank 0's before every later step, the others cost "
    "nothing and a late change is not shared",
    "[parallel][buffers]") {
  constexpr int kWorld = 2, kSteps = 5;
  std::mutex mutex;
  std::array<std::vector<torch::Tensor>, kWorld> ends;
  ddp::test::LogCapture log;
  const auto errors = ddp::test::run_ranks(kWorld, [&](int rank, const ddp::Communicator& group) {
    // Equal on every rank at the start, as the plan's first broadcast leaves them.
    auto running = torch::zeros({3}), mask = torch::ones({4}), late = torch::zeros({2});
    ddp::TrainingBuffers buffers;
    buffers.watch({{"running", running}, {"mask", mask}, {"late", late}});
    for (int step = 1; step <= kSteps; ++step) {
      buffers.before_step(group);
      if (step > 1) {  // what this step's forward reads: rank 0's, as last step left it
        auto expected = torch::zeros({3});
        for (int s = 1; s < step; ++s) expected.mul_(0.5).add_(1.0);  // rank 0 adds rank + 1 = 1 a step
        CHECK(torch::allclose(running, expected));
      }
      running.mul_(0.5).add_(rank + 1.0);    // the forward: each rank's own batch
      if (step >= 3) late.add_(rank + 1.0);  // constant in the first step: taken as such
      if (step == 2) {                       // an evaluation between steps shares everything, and is no change
        buffers.before_share();
        ddp::broadcast_coalesced(group, {running, mask, late}, 0);
        buffers.shared();
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    ends[static_cast<std::size_t>(rank)] = {running.clone(), mask.clone(), late.clone()};
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(errors[static_cast<std::size_t>(r)].empty());
  }
  // The late buffer differs by rank: shared at evaluations only (said, once, by each rank).
  CHECK(torch::equal(ends[0][2], torch::full({2}, 3.0f)));  // steps 3, 4 and 5 added 1 each after step 2's evaluation
  CHECK(torch::equal(ends[1][2], torch::full({2}, 6.0f)));
  CHECK(torch::equal(ends[0][1], ends[1][1]));
  // Said once by each rank, naming the buffer; the live and constant ones say nothing.
  CHECK(log.count("the model's buffer late changed after the first step, in which it did not: it is taken as "
                  "constant, and shared from rank 0 at evaluations only") == kWorld);
  CHECK(log.count("buffer running") == 0);
  CHECK(log.count("buffer mask") == 0);
}

}  // namespace DDP_TEST_FILE
