#include "ddp/loop/pipeline_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "ddp/comm/collectives.h"
#include "ddp/comm/point_to_point.h"
#include "ddp/common/error.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/loop/memory_in_use.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Tags: a microbatch's activations forward and its gradients backward, apart.
int forward_tag(int microbatch) { return 2 * microbatch; }
int backward_tag(int microbatch) { return 2 * microbatch + 1; }

std::string shape_text(c10::IntArrayRef sizes, c10::ScalarType dtype = c10::ScalarType::Undefined) {
  std::ostringstream out;
  out << sizes;
  if (dtype != c10::ScalarType::Undefined) out << " of " << c10::toString(dtype);
  return out.str();
}

}  // namespace

PipelineRunner::PipelineRunner(std::vector<ModelBlock> layers, Task& task, const Communicator& pipeline,
                               std::string schedule, std::chrono::milliseconds timeout, bool mixed_precision)
    : layers_(std::move(layers)),
      task_(task),
      pipeline_(pipeline),
      schedule_(std::move(schedule)),
      timeout_(timeout),
      mixed_precision_(mixed_precision) {}

torch::Tensor PipelineRunner::run_layers(torch::Tensor x) {
  return runner_ ? runner_->run(layers_, std::move(x)) : run_in_order(layers_, std::move(x));
}

torch::Tensor PipelineRunner::receive(int from, int tag, int microbatch, const char* what,
                                      const std::optional<StageShapes::Shape>& shape) {
  auto start = Clock::now();
  try {
    torch::Tensor t = shape ? recv_known_tensor(pipeline_, from, tag, shape->sizes, shape->dtype, timeout_)
                            : recv_tensor(pipeline_, from, tag, timeout_);
    waited_ms_ += ms_since(start);
    return t;
  } catch (const std::exception& e) {
    throw CollectiveError("pipeline stage " + std::to_string(pipeline_.rank) + " waited for the " + what +
                          " of microbatch " + std::to_string(microbatch) + " from stage " + std::to_string(from) +
                          " (dist.timeout_s " + std::to_string(timeout_.count() / 1000) + "): " + e.what());
  }
}

torch::Tensor PipelineRunner::receive_activations(int microbatch, const std::vector<int64_t>& key,
                                                  StageShapes& received) {
  auto shape = received.known(key);
  torch::Tensor t = receive(pipeline_.rank - 1, forward_tag(microbatch), microbatch, "activations", shape);
  if (!shape) received.learn(key, {t.sizes().vec(), t.scalar_type()});
  return t;
}

PendingSend PipelineRunner::send_activations(const torch::Tensor& output, int microbatch,
                                             const std::vector<int64_t>& key, StageShapes& sent) {
  StageShapes::Shape shape{output.sizes().vec(), output.scalar_type()};
  auto known = sent.known(key);
  if (!known) {
    sent.learn(key, shape);
    return send_tensor(pipeline_, output, pipeline_.rank + 1, forward_tag(microbatch));
  }
  if (*known != shape)
    throw UserError(fmt::format("pipeline stage {}: microbatch {}'s activations are {}, where earlier ones, for inputs "
                                "of shape {}, were {}: a stage's output shape must follow its input's shape, not "
                                "its values (Note [Shapes between stages])",
                                pipeline_.rank, microbatch, shape_text(shape.sizes, shape.dtype), shape_text(key),
                                shape_text(known->sizes, known->dtype)));
  return send_known_tensor(pipeline_, output, pipeline_.rank + 1, forward_tag(microbatch));
}

torch::Tensor PipelineRunner::train(const std::vector<Batch>& microbatches,
                                    const std::function<void()>& before_last_backward,
                                    const std::function<void(int)>& after_action) {
  const int count = static_cast<int>(microbatches.size());
  microbatches_ = std::max(microbatches_, count);
  int64_t step_samples = 0;  // Note [Micro-batches of unequal size]
  for (const Batch& batch : microbatches) step_samples += batch.size();
  auto actions = pipeline_schedule(schedule_, pipeline_.world_size, pipeline_.rank, count);
  struct InFlight {
    torch::Tensor input, output;  // output: the loss, on the last stage
  };
  std::map<int, InFlight> held;
  std::vector<PendingSend> sends;
  torch::Tensor loss_sum;
  const int64_t memory_before = memory_in_use(pipeline_.device);
  int64_t memory_peak = memory_before;
  int backwards = 0;
  waited_ms_ = 0;
  const auto start = Clock::now();
  for (const auto& action : actions) {
    const int m = action.microbatch;
    const Batch& batch = microbatches[static_cast<std::size_t>(m)];
    const std::vector<int64_t> key = batch.inputs[0].sizes().vec();  // every stage loads the batch
    if (action.kind == PipelineAction::kForward) {
      InFlight flight;
      if (first()) {
        flight.input = batch.inputs[0];
      } else {
        flight.input = receive_activations(m, key, received_);
        if (flight.input.is_floating_point()) flight.input.requires_grad_(true);
      }
      AutocastScope autocast(pipeline_.device, mixed_precision_);  // the loss too, as without stages
      torch::Tensor output = run_layers(flight.input);
      if (last()) {
        flight.output = task_.output_loss(output, batch);
        auto loss = flight.output.detach().to(torch::kDouble) * static_cast<double>(batch.size());  // summed, as PlainStep's
        loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      } else {
        flight.output = output;
        sends.push_back(send_activations(output, m, key, sent_));
      }
      held.emplace(m, std::move(flight));
      memory_peak = std::max(memory_peak, memory_in_use(pipeline_.device));
    } else {
      if (++backwards == count) before_last_backward();
      InFlight& flight = held.at(m);
      if (last()) {
        (flight.output / (static_cast<double>(step_samples) / static_cast<double>(batch.size()))).backward();
      } else {
        // An output's gradient has the output's shape and dtype: no header (Note [Shapes between stages]).
        StageShapes::Shape shape{flight.output.sizes().vec(), flight.output.scalar_type()};
        torch::Tensor grad = receive(pipeline_.rank + 1, backward_tag(m), m, "gradients", shape);
        flight.output.backward(grad);
      }
      if (!first() && flight.input.requires_grad())
        sends.push_back(send_known_tensor(pipeline_, flight.input.grad(), pipeline_.rank - 1, backward_tag(m)));
      held.erase(m);
    }
    after_action(m);
    // A finished send lets go of its tensor: an activation stays held only while its backward needs it.
    std::erase_if(sends, [this](PendingSend& send) {
      if (!send.done()) return false;
      send.wait(timeout_);  // at once: raises what the transport raised, if anything
      return true;
    });
  }
  for (auto& send : sends) send.wait(timeout_);
  received_.step_ends();
  sent_.step_ends();
  // The first step connects the stages and allocates the gradients: not what a step costs.
  if (steps_run_++ == 0) return loss_sum;
  double step_ms = ms_since(start);
  timing_.step_ms += step_ms;
  timing_.compute_ms += std::max(0.0, step_ms - waited_ms_);
  timing_.steps += 1;
  timing_.peak_activation_bytes = std::max(timing_.peak_activation_bytes, memory_peak - memory_before);
  return loss_sum;
}

torch::Tensor PipelineRunner::evaluate(const Batch& batch) {
  // Each batch is a step of its own for the tables: a shape new at one batch is known at the next.
  const std::vector<int64_t> key = batch.inputs[0].sizes().vec();
  torch::Tensor x = first() ? batch.inputs[0] : receive_activations(0, key, eval_received_);
  eval_received_.step_ends();
  AutocastScope autocast(pipeline_.device, mixed_precision_);
  torch::Tensor output = run_layers(x);
  if (last()) return task_.output_metric_sums(output, batch);
  send_activations(output, 0, key, eval_sent_).wait(timeout_);
  eval_sent_.step_ends();
  return {};
}

MetricsRecord PipelineRunner::report(const Communicator& world, int replicas) {
  const int stages = pipeline_.world_size;
  PipelineTiming mine = std::exchange(timing_, {});
  auto all = torch::zeros({stages, 4}, torch::kDouble);
  const double share = 1.0 / replicas;
  all[pipeline_.rank][0] = mine.step_ms * share;
  all[pipeline_.rank][1] = mine.compute_ms * share;
  all[pipeline_.rank][2] = static_cast<double>(mine.steps) * share;
  all[pipeline_.rank][3] = static_cast<double>(mine.peak_activation_bytes) * share;
  all = all_reduce_sum(world, all);
  if (world.rank != 0) return {};
  const double ideal = ideal_bubble_fraction(stages, microbatches_);
  MetricsRecord record{{"pipeline_ideal_bubble", ideal}};
  for (int s = 0; s < stages; ++s) {
    PipelineTiming timing;
    timing.step_ms = all[s][0].item<double>();
    timing.compute_ms = all[s][1].item<double>();
    double steps = std::max(1.0, all[s][2].item<double>());
    double peak_mib = all[s][3].item<double>() / kMiB;
    int held = peak_in_flight(pipeline_schedule(schedule_, stages, s, microbatches_));
    spdlog::info("pipeline stage {}: {:.1f} ms a step, {:.1f} ms computing: bubble {:.3f} (ideal {:.3f}); peak "
                 "activation memory {:.2f} MiB ({} of {} microbatches held at once, {})",
                 s, timing.step_ms / steps, timing.compute_ms / steps, timing.bubble(), ideal, peak_mib, held,
                 microbatches_, schedule_);
    std::string key = "pipeline_stage" + std::to_string(s);
    record.emplace_back(key + "_bubble", timing.bubble());
    record.emplace_back(key + "_compute_ms", timing.compute_ms / steps);
    record.emplace_back(key + "_step_ms", timing.step_ms / steps);
    record.emplace_back(key + "_peak_activation_mib", peak_mib);
  }
  return record;
}

void describe_stages(const std::string& mesh, const std::vector<std::string>& names, const std::vector<int>& bounds,
                     const std::vector<std::vector<torch::Tensor>>& used, const std::vector<torch::Tensor>& whole,
                     int64_t microbatches, const std::string& schedule) {
  auto bytes_of = [](const std::vector<torch::Tensor>& tensors) {
    std::set<const c10::TensorImpl*> seen;
    double bytes = 0;
    for (const auto& p : tensors)
      if (seen.insert(p.unsafeGetTensorImpl()).second) bytes += static_cast<double>(p.numel() * p.element_size());
    return bytes;
  };
  const double all = bytes_of(whole);
  const int stages = static_cast<int>(used.size());
  spdlog::info("dist.pipeline {}: mesh {}, schedule {}; ideal bubble at {} microbatches (P-1)/(M+P-1) = {:.3f}",
               stages, mesh, schedule, microbatches, ideal_bubble_fraction(stages, static_cast<int>(microbatches)));
  for (int s = 0; s < stages; ++s) {
    double bytes = bytes_of(used[s]);
    spdlog::info("  stage {}: layers {} .. {} ({}), parameters {:.2f} MiB per rank: {:.2f} of the model's {:.2f} MiB",
                 s, names[bounds[s]], names[bounds[s + 1] - 1], bounds[s + 1] - bounds[s], bytes / kMiB, bytes / all,
                 all / kMiB);
  }
}

}  // namespace ddp
