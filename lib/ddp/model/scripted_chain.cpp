#include "ddp/model/scripted_chain.h"

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <map>

namespace ddp {

// Note [Scripted chains]
// A scripted module's forward is compiled code that may call its children anywhere, in any order,
// with arithmetic between them, so nothing outside can in general run it child by child, which
// pipeline stages and dist.shard: parameters must. Its graph says when it can: TorchScript unrolls
// a loop over an nn.ModuleList or an nn.Sequential into one call per child, so
//     x = self.embed(x); for layer in self.layers: x = layer(x); return self.head(x)
// (and any nn.Sequential's own forward) compiles to attribute reads of submodules and calls of
// their forward, each on the output of the call before, the last one returned. Such a forward is
// its calls in order; anything else in the graph (an operator, a second use of a value, a call
// with more arguments, a submodule that returns anything but one tensor) is named as the reason
// it is not.

namespace {

std::string join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }

bool is_module(const torch::jit::Value* value) {
  auto type = value->type()->cast<c10::ClassType>();
  return type && type->is_module();
}

}  // namespace

ScriptedChain scripted_chain(const torch::jit::Module& module) {
  ScriptedChain chain;
  auto no = [&chain](std::string why) {
    chain.paths.clear();
    chain.why_not = std::move(why);
    return chain;
  };
  auto graph = module.get_method("forward").graph();
  if (graph->inputs().size() != 2) return no("its forward takes " + std::to_string(graph->inputs().size() - 1) + " inputs");
  std::map<const torch::jit::Value*, std::string> submodules{{graph->inputs()[0], ""}};
  const torch::jit::Value* current = graph->inputs()[1];
  for (const torch::jit::Node* node : graph->nodes()) {
    const auto kind = node->kind();
    if (kind == c10::prim::Constant) continue;
    if (kind == c10::prim::GetAttr && submodules.count(node->input(0)) && is_module(node->output())) {
      submodules[node->output()] = join(submodules[node->input(0)], node->s(c10::attr::name));
      continue;
    }
    if (kind == c10::prim::CallMethod && node->s(c10::attr::name) == "forward" && node->inputs().size() == 2 &&
        submodules.count(node->input(0)) && node->input(1) == current && current->uses().size() == 1) {
      const std::string& path = submodules[node->input(0)];
      if (std::find(chain.paths.begin(), chain.paths.end(), path) != chain.paths.end())
        return no("its forward calls " + path + " twice");
      if (node->output()->type()->kind() != c10::TypeKind::TensorType)
        return no("its submodule " + path + " returns " + node->output()->type()->str() + ", not one tensor");
      chain.paths.push_back(path);
      current = node->output();
      continue;
    }
    if (kind == c10::prim::GetAttr) return no("its forward reads " + node->s(c10::attr::name) + ", which is no submodule");
    if (kind == c10::prim::CallMethod)
      return no("its forward calls " + node->s(c10::attr::name) + " on something other than the last output");
    return no(std::string("its forward computes ") + kind.toQualString() + " itself, between or around its children");
  }
  if (graph->outputs().size() != 1 || graph->outputs()[0] != current || chain.paths.empty())
    return no("its forward does not return its last child's output");
  return chain;
}

}  // namespace ddp
