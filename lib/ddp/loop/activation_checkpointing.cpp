#include "ddp/loop/activation_checkpointing.h"

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <set>

#include "ddp/common/error.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/model/rank_random.h"

namespace ddp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a checkpointed block's recomputation needs: its own forward and the parameters it uses.
struct CheckpointedBlock {
  std::function<torch::Tensor(torch::Tensor)> forward;
  std::vector<torch::Tensor> parameters;
};

// The random generators a block's forward may draw from (dropout): the CPU one current at its start
// (`cpu`, taken in forward: backward may run on an autograd device thread, which is no rank's), the
// rank's where that is a tensor-parallel region's (`rank`: its routes reseed regions from it, Note
// [Tensor parallelism]), and its device's.
std::vector<at::Generator> generators_for(const torch::Device& device, const at::Generator& cpu,
                                          const at::Generator& rank) {
  std::vector<at::Generator> generators = {cpu};
  if (rank.unsafeGetGeneratorImpl() != cpu.unsafeGetGeneratorImpl()) generators.push_back(rank);
  if (!device.is_cpu()) generators.push_back(at::globalContext().defaultGenerator(device));
  return generators;
}

std::vector<torch::Tensor> states_of(std::vector<at::Generator>& generators) {
  std::vector<torch::Tensor> states;
  for (auto& generator : generators) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    states.push_back(generator.get_state());
  }
  return states;
}

void set_states(std::vector<at::Generator>& generators, const std::vector<torch::Tensor>& states) {
  for (std::size_t i = 0; i < generators.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators[i].mutex());
    generators[i].set_state(states[i]);
  }
}

// One checkpointed block's forward and backward (Note [Activation checkpointing]).
struct Recompute : torch::autograd::Function<Recompute> {
  // `parameters` are the block's, inputs here only so that autograd gives them their gradients.
  static variable_list forward(AutogradContext* ctx, const CheckpointedBlock* block, torch::Tensor x,
                               at::TensorList parameters) {
    (void)parameters;
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["x_needs_grad"] = x.requires_grad();
    auto generators = generators_for(x.device(), cpu_generator(), rank_cpu_generator());
    ctx->saved_data["cpu_generator"] = generators[0];
    ctx->saved_data["rank_generator"] = rank_cpu_generator();
    ctx->saved_data["rng"] = c10::List<torch::Tensor>(states_of(generators));
    ctx->saved_data["autocast"] = autocast_enabled(x.device());
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(autocast_dtype(x.device()));
    ctx->save_for_backward({x});
    return {block->forward(x)};  // gradients are off here: nothing inside the block is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* block = reinterpret_cast<const CheckpointedBlock*>(ctx->saved_data["block"].toInt());
    const torch::Tensor saved = ctx->get_saved_variables()[0];
    torch::Tensor x = saved.detach();
    const bool x_needs_grad = ctx->saved_data["x_needs_grad"].toBool();
    if (x_needs_grad) x.requires_grad_(true);
    torch::Tensor out;
    {
      auto generators = generators_for(x.device(), ctx->saved_data["cpu_generator"].toGenerator(),
                                       ctx->saved_data["rank_generator"].toGenerator());
      const std::vector<torch::Tensor> now = states_of(generators);
      set_states(generators, ctx->saved_data["rng"].toTensorVector());
      torch::AutoGradMode enabled(true);
      AutocastScope autocast(x.device(), ctx->saved_data["autocast"].toBool(),
                             static_cast<torch::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
      out = block->forward(x);
      set_states(generators, now);  // the draws after backward are those there would have been
    }
    const auto& parameters = block->parameters;
    variable_list result(2 + parameters.size());  // for each input: the block, x, each parameter
    std::vector<torch::Tensor> wanted;
    if (x_needs_grad) wanted.push_back(x);
    for (const torch::Tensor& p : parameters)
      if (p.requires_grad()) wanted.push_back(p);
    if (wanted.empty() || !out.requires_grad()) return result;
    variable_list found = torch::autograd::grad({out}, wanted, {grads[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    std::size_t next = 0;
    if (x_needs_grad) result[1] = found[next++];
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (parameters[i].requires_grad()) result[2 + i] = found[next++];
    return result;
  }
};

}  // namespace

std::vector<std::string> checkpoint_activations(Model& model, const std::string& mode) {
  std::vector<std::string> names;
  if (mode == "none") return names;
  if (model.blocks().empty())
    throw ConfigError("model.activation_checkpointing: the model cannot be checkpointed block by block: " +
                      model.why_no_blocks() + "; use model.activation_checkpointing: none");
  if (mode != "full" && mode.rfind("every_", 0) != 0)  // the config's rule allows no other
    throw std::logic_error("checkpoint_activations: mode '" + mode + "'");
  const std::size_t every = mode == "full" ? 1 : std::stoul(mode.substr(6));
  model.wrap_blocks([every, &names](std::size_t index, ModelBlock& block) {
    if (index % every != 0) return;
    names.push_back(block.name);
    auto inner = std::make_shared<CheckpointedBlock>(CheckpointedBlock{block.forward, {}});
    std::set<const c10::TensorImpl*> seen;  // each parameter one input, so its gradient is given once
    for (const auto& p : block.parameters)
      if (seen.insert(p.unsafeGetTensorImpl()).second) inner->parameters.push_back(p);
    block.forward = [inner](torch::Tensor x) {
      if (!torch::GradMode::is_enabled()) return inner->forward(std::move(x));  // evaluation keeps nothing anyway
      return Recompute::apply(inner.get(), std::move(x), at::TensorList(inner->parameters))[0];
    };
  });
  return names;
}

}  // namespace ddp
