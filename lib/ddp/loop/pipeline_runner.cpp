#include "ddp/loop/pipeline_runner.h"

#include <malloc.h>

#include <algorithm>
#include <map>

#include "ddp/comm/point_to_point.h"
#include "ddp/common/error.h"
#include "ddp/loop/autocast_scope.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Heap in use: what the step's activations add to it is what a stage holds for them. glibc counts
// the main arena (where the stage's thread allocates) and every mmapped block.
int64_t heap_in_use() {
  struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

// Tags: a microbatch's activations forward and its gradients backward, apart.
int forward_tag(int microbatch) { return 2 * microbatch; }
int backward_tag(int microbatch) { return 2 * microbatch + 1; }

}  // namespace

PipelineRunner::PipelineRunner(std::vector<PipelineLayer> layers, Task& task, const Communicator& pipeline,
                               std::string schedule, std::chrono::milliseconds timeout, bool mixed_precision)
    : layers_(std::move(layers)),
      task_(task),
      pipeline_(pipeline),
      schedule_(std::move(schedule)),
      timeout_(timeout),
      mixed_precision_(mixed_precision) {}

torch::Tensor PipelineRunner::run_layers(torch::Tensor x) {
  for (const auto& layer : layers_) x = layer.forward(x);
  return x;
}

torch::Tensor PipelineRunner::receive(int from, int tag, int microbatch, const char* what) {
  auto start = Clock::now();
  try {
    torch::Tensor t = recv_tensor(pipeline_, from, tag, timeout_);
    waited_ms_ += ms_since(start);
    return t;
  } catch (const std::exception& e) {
    throw CollectiveError("pipeline stage " + std::to_string(pipeline_.rank) + " waited for the " + what +
                          " of microbatch " + std::to_string(microbatch) + " from stage " + std::to_string(from) +
                          " (dist.timeout_s " + std::to_string(timeout_.count() / 1000) + "): " + e.what());
  }
}

int PipelineRunner::in_flight(int count) const {
  return peak_in_flight(pipeline_schedule(schedule_, pipeline_.world_size, pipeline_.rank, count));
}

torch::Tensor PipelineRunner::train(const std::vector<Batch>& microbatches,
                                    const std::function<void()>& before_last_backward,
                                    const std::function<void(int)>& after_action) {
  const int count = static_cast<int>(microbatches.size());
  auto actions = pipeline_schedule(schedule_, pipeline_.world_size, pipeline_.rank, count);
  struct InFlight {
    torch::Tensor input, output;  // output: the loss, on the last stage
  };
  std::map<int, InFlight> held;
  std::vector<PendingSend> sends;
  torch::Tensor loss_sum;
  const int64_t heap_before = heap_in_use();
  int64_t heap_peak = heap_before;
  int backwards = 0;
  waited_ms_ = 0;
  const auto start = Clock::now();
  for (const auto& action : actions) {
    const int m = action.microbatch;
    const Batch& batch = microbatches[static_cast<std::size_t>(m)];
    if (action.kind == PipelineAction::kForward) {
      InFlight flight;
      if (first()) {
        flight.input = batch.inputs[0];
      } else {
        flight.input = receive(pipeline_.rank - 1, forward_tag(m), m, "activations");
        if (flight.input.is_floating_point()) flight.input.requires_grad_(true);
      }
      AutocastScope autocast(pipeline_.device, mixed_precision_);  // the loss too, as without stages
      torch::Tensor output = run_layers(flight.input);
      if (last()) {
        flight.output = task_.output_loss(output, batch);
        auto loss = flight.output.detach().to(torch::kDouble);
        loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      } else {
        flight.output = output;
        sends.push_back(send_tensor(pipeline_, output, pipeline_.rank + 1, forward_tag(m)));
      }
      held.emplace(m, std::move(flight));
      heap_peak = std::max(heap_peak, heap_in_use());
    } else {
      if (++backwards == count) before_last_backward();
      InFlight& flight = held.at(m);
      if (last()) {
        (flight.output / static_cast<double>(count)).backward();
      } else {
        torch::Tensor grad = receive(pipeline_.rank + 1, backward_tag(m), m, "gradients");
        flight.output.backward(grad);
      }
      if (!first() && flight.input.requires_grad())
        sends.push_back(send_tensor(pipeline_, flight.input.grad(), pipeline_.rank - 1, backward_tag(m)));
      held.erase(m);
    }
    after_action(m);
  }
  for (auto& send : sends) send.wait(timeout_);
  // The first step connects the stages and allocates the gradients: not what a step costs.
  if (steps_run_++ == 0) return loss_sum;
  double step_ms = ms_since(start);
  timing_.step_ms += step_ms;
  timing_.compute_ms += std::max(0.0, step_ms - waited_ms_);
  timing_.steps += 1;
  timing_.peak_activation_bytes = std::max(timing_.peak_activation_bytes, heap_peak - heap_before);
  return loss_sum;
}

torch::Tensor PipelineRunner::evaluate(const Batch& batch) {
  torch::Tensor x = first() ? batch.inputs[0] : receive(pipeline_.rank - 1, forward_tag(0), 0, "activations");
  AutocastScope autocast(pipeline_.device, mixed_precision_);
  torch::Tensor output = run_layers(x);
  if (last()) return task_.output_metric_sums(output, batch);
  send_tensor(pipeline_, output, pipeline_.rank + 1, forward_tag(0)).wait(timeout_);
  return {};
}

PipelineTiming PipelineRunner::take_timing() { return std::exchange(timing_, {}); }

}  // namespace ddp
