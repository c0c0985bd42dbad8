#pragma once
// Whether a TorchScript module's forward is a chain of its submodules' forwards, each taking the
// one before's output, and which (Note [Scripted chains] in scripted_chain.cpp).

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace ddp {

/// The submodules a forward calls one after another.
struct ScriptedChain {
  /// Their dotted paths, in call order ("embed", "layers.0", …, "head"); empty when it is no chain.
  std::vector<std::string> paths;
  /// When it is none: what in the forward breaks the chain, for a message.
  std::string why_not;
};

ScriptedChain scripted_chain(const torch::jit::Module& module);

}  // namespace ddp
