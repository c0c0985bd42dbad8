// A TorchScript module (torch.jit.script(model).save(path) in Python) trained as a built-in model.
//
// Note [Mirrored parameters]
// The loop, the reducer, the optimizer and the checkpointer all work on a torch::nn::Module. A
// torch::jit::Module is not one, so ScriptedModel mirrors it: one plain nn::Module per submodule,
// holding the very same tensors (not copies) under the same names. Every in-place change, by the
// optimizer, the broadcast from rank 0, a checkpoint load or BatchNorm's running statistics, is then
// seen by both, and the names are Python's state_dict names, so model.pt loads into the Python module.
// Nothing may replace a parameter (assign a new one to an attribute) rather than change it in place.
//
// Note [Reassigned buffers]
// Python code may replace a buffer in forward (`self.running_mean = 0.9 * self.running_mean + ...`),
// which leaves the mirror holding the stale tensor: model.pt and the checkpoints would keep it
// (issue 22, item 2). After each forward, a buffer whose attribute is a new tensor has that value
// copied into the mirrored tensor, which is then put back as the attribute: identity is restored,
// the value is the module's. A new shape or dtype cannot be mirrored, and is refused.
//
// Note [Scripted units]
// Pipeline stages and dist.shard: parameters run the model block by block (Note [Blocks]): the
// stages to cut it, sharding to gather each block's parameters just before it runs. A scripted
// module can be run so when its forward is a chain of its submodules (Note [Scripted chains]): an
// nn.Sequential, or embed, a loop over an nn.ModuleList, head. Its blocks are then the submodules
// the chain calls, and forward calls them in turn once a pass installs a runner (otherwise the
// compiled forward runs whole); any other scripted module has none, and says why.
//
// Note [Scripted routes]
// A tensor-parallel pass splits a scripted module's nn.Linear and nn.Embedding layers as it splits a
// built-in model's (Note [Routed layers]): their mirrors are RoutedLinear and RoutedEmbedding, over
// the very same tensors. Once a pass routes one, forward runs a copy of the module that shares every
// tensor, whose compiled code calls each nn.Linear and nn.Embedding through ddprun::routed_linear or
// ddprun::routed_embedding; these find the layer's mirror by its weight and call it. By the weight,
// as TorchScript compiles one class, and one forward, for all submodules of a shape (the layers of
// every block): the code cannot name the instance. A copy, as model_scripted.pt must keep Python's
// code, and TorchScript compiles a method at its first call, which has passed (the task probes the
// module's output).

#include <caffe2/serialize/inline_container.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/library.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/config/config_schema.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/rank_random.h"
#include "ddp/model/routed_layers.h"
#include "ddp/model/scripted_chain.h"
#include "ddp/model/zip_checksums.h"

namespace ddp {
namespace {

// The first non-empty line of a LibTorch error, without its backtrace (TorchScript's compiler
// starts its messages with a newline).
std::string first_line(const std::exception& e) {
  std::string text = without_backtrace(e.what());
  text.erase(0, text.find_first_not_of("\n "));
  return text.substr(0, text.find('\n'));
}

std::string describe(const torch::Tensor& x) {
  return std::string(c10::toString(x.scalar_type())) + " " + format_shape(x.sizes().vec());
}

// Note [torch.save's checksums]: LibTorch's reader skips the records' CRCs, and a flipped bit in a
// weight loaded as a wrong weight: a finite loss, exit 0. Each record is checked before the load;
// a file that is no zip is left to torch::jit::load, whose words say what it is.
void check_records(const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception&) {
    return;
  }
  try {
    const ZipChecksums checksums(path);
    for (const auto& record : zip->getAllRecords()) {
      auto [data, size] = zip->getRecord(record);
      checksums.check(record, data.get(), size);
    }
  } catch (const FileError& e) {
    throw FileError(std::string("model.path: ") + e.what());
  } catch (const std::exception& e) {  // a record's own header damaged: the zip reader's c10::Error
    throw FileError("model.path: " + path + ": damaged: " + first_line(e));
  }
}

// What the module computes, as 16 hex digits: a digest of its archive's code records (their
// debug_pkl source ranges left out) and constants.pkl, not of its weights, so the same module saved
// again with other weights has the same one. The file's bytes, not LibTorch's graph, so that every
// LibTorch version agrees; but what varies between two saves of the same code is left out: the
// order of a class's attribute lines ("  in_features : Final[int] = 20"), which torch.jit's save
// writes in Python's hash order, and the ___torch_mangle_N that scripting a class again numbers anew.
std::string module_code_fingerprint(const std::string& path) {
  static const std::regex kMangle("___torch_mangle_[0-9]+"), kAttribute("  [A-Za-z_][A-Za-z0-9_]* : .*");
  caffe2::serialize::PyTorchStreamReader zip(path);
  std::vector<std::string> names;
  for (const std::string& name : zip.getAllRecords()) {
    const bool code = name.rfind("code/", 0) == 0 && !name.ends_with(".debug_pkl");
    if (code || name == "constants.pkl") names.push_back(name);
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return std::regex_replace(a, kMangle, "") < std::regex_replace(b, kMangle, "");  // the writer's order is its own
  });
  uint64_t digest = 0xcbf29ce484222325ULL;  // FNV-1a: the same on every build and machine
  auto add = [&](std::string_view text) {
    for (unsigned char c : text) digest = (digest ^ c) * 0x100000001b3ULL;
  };
  for (const std::string& name : names) {
    auto [data, size] = zip.getRecord(name);
    std::string text(static_cast<const char*>(data.get()), size);
    add(std::regex_replace(name, kMangle, "") + "\n");
    if (name == "constants.pkl") {
      add(text);
      continue;
    }
    text = std::regex_replace(text, kMangle, "");
    std::set<std::string> attributes;  // the class's, in one order
    for (const auto& line : split(text, '\n')) {
      if (std::regex_match(line, kAttribute))
        attributes.insert(line);
      else
        add(line + "\n");
    }
    for (const auto& line : attributes) add(line + "\n");
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return hex;
}

torch::jit::Module load_module(const std::string& path) {
  if (!std::filesystem::exists(path)) throw FileError("model.path: " + path + ": no such file");
  check_records(path);
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {  // c10::Error, or the TorchScript compiler's own ErrorReport
    std::string text = e.what();
    std::smatch found;
    if (std::regex_search(text, found, std::regex("PyTorch file with version (\\d+)")))
      throw FileError("model.path: " + path + " was saved by a newer PyTorch: its file format version is " +
                      found[1].str() + ", this ddprun's LibTorch " + TORCH_VERSION + " reads up to " +
                      std::to_string(caffe2::serialize::kMaxSupportedFileFormatVersion) +
                      "; save it with the same PyTorch version, or build ddprun against a newer LibTorch");
    if (text.find("Unknown builtin op") != std::string::npos || text.find("operator version") != std::string::npos)
      throw FileError("model.path: " + path + " uses an operator LibTorch " + TORCH_VERSION +
                      " does not have (was it saved by a newer PyTorch?): " + first_line(e));
    throw FileError("model.path: cannot load " + path + " as TorchScript (" + first_line(e) +
                    "); save the module with torch.jit.script(model).save(path)");
  }
}

// Whether a graph, with its nested blocks, reads `self.training`, or runs an op whose behaviour
// depends on the mode.
void scan(const torch::jit::Block* block, bool& reads_training, bool& mode_ops) {
  static const std::set<std::string> kModeOps = {"aten::dropout", "aten::dropout_", "aten::feature_dropout",
                                                 "aten::alpha_dropout", "aten::batch_norm", "aten::instance_norm",
                                                 "aten::rrelu"};
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == "training") reads_training = true;
    if (kModeOps.count(node->kind().toQualString())) mode_ops = true;
    for (const torch::jit::Block* inner : node->blocks()) scan(inner, reads_training, mode_ops);
  }
}

// The first op in the module's forward that draws random numbers (its dropout), which LibTorch
// draws from the process's default generator whatever thread runs it; "" when none does.
std::string random_op(const torch::jit::Module& module) {
  static const std::set<std::string> kRandomOps = {"aten::dropout",
                                                   "aten::dropout_",
                                                   "aten::feature_dropout",
                                                   "aten::feature_dropout_",
                                                   "aten::alpha_dropout",
                                                   "aten::alpha_dropout_",
                                                   "aten::feature_alpha_dropout",
                                                   "aten::feature_alpha_dropout_",
                                                   "aten::rrelu",
                                                   "aten::rrelu_",
                                                   "aten::rrelu_with_noise",
                                                   "aten::bernoulli",
                                                   "aten::bernoulli_",
                                                   "aten::rand",
                                                   "aten::rand_like",
                                                   "aten::randn",
                                                   "aten::randn_like",
                                                   "aten::randint",
                                                   "aten::randint_like",
                                                   "aten::randperm",
                                                   "aten::normal",
                                                   "aten::normal_",
                                                   "aten::uniform_",
                                                   "aten::multinomial",
                                                   "aten::exponential_",
                                                   "aten::geometric_",
                                                   "aten::cauchy_",
                                                   "aten::log_normal_",
                                                   "aten::random_"};
  std::function<std::string(const torch::jit::Block*)> in_block = [&](const torch::jit::Block* block) {
    for (const torch::jit::Node* node : block->nodes()) {
      if (kRandomOps.count(node->kind().toQualString())) return std::string(node->kind().toQualString());
      for (const torch::jit::Block* inner : node->blocks())
        if (auto found = in_block(inner); !found.empty()) return found;
    }
    return std::string();
  };
  // Inlined: nn.Dropout's forward reaches aten::dropout through torch.nn.functional's dropout.
  std::shared_ptr<torch::jit::Graph> forward = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*forward);
  return in_block(forward->block());
}

// Whether any of the module's methods calls `.view`, which fails on a channels-last tensor whose
// channels and pixels it would merge ("view size is not compatible with input tensor's size and
// stride"): `x.view(x.size(0), -1)` in an ordinary CNN (issue 22, item 11).
bool calls_view(const torch::jit::Module& module) {
  std::function<bool(const torch::jit::Block*)> in_block = [&](const torch::jit::Block* block) {
    for (const torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::aten::view) return true;
      for (const torch::jit::Block* inner : node->blocks())
        if (in_block(inner)) return true;
    }
    return false;
  };
  for (const auto& sub : module.modules())
    for (const auto& method : sub.get_methods())
      if (in_block(method.graph()->block())) return true;
  return false;
}

// A traced module fixed its train/eval behaviour when it was traced: its code never reads
// `self.training`, and its submodules' inputs carry the tracer's names (argument_1, ...).
bool looks_traced(const torch::jit::Module& module) {
  bool reads_training = false, mode_ops = false, tracer_names = false;
  for (const auto& sub : module.modules()) {
    for (const auto& method : sub.get_methods()) {
      scan(method.graph()->block(), reads_training, mode_ops);
      for (const auto& argument : method.function().getSchema().arguments())
        if (argument.name().rfind("argument_", 0) == 0) tracer_names = true;
    }
  }
  return !reads_training && (mode_ops || tracer_names);
}

// "Linear" or "Embedding" for torch.nn's own classes of those names that a pass can route: an
// Embedding without the options a split table cannot keep (padding_idx, max_norm, scale_grad_by_freq,
// sparse); "" for any other class.
std::string routable_kind(const c10::ClassTypePtr& type) {
  const std::string name = type->name() ? type->name()->qualifiedName() : "";
  if (name.rfind("__torch__.torch.nn.modules.", 0) != 0) return "";
  const std::string kind = type->name()->name();
  if (kind == "Linear") return kind;
  if (kind != "Embedding") return "";
  for (const char* option : {"padding_idx", "max_norm"})
    if (auto value = type->findConstant(option); value && !value->isNone()) return "";
  for (const char* option : {"scale_grad_by_freq", "sparse"})
    if (auto value = type->findConstant(option); value && value->isBool() && value->toBool()) return "";
  return kind;
}

// What a mirror is called in messages: its class's name (LayerNorm, Block).
std::string class_name(const torch::jit::Module& module) {
  return module.type()->name() ? module.type()->name()->name() : "Module";
}

// Note [Scripted routes]: the routed mirrors of every scripted model, by their weight.
struct Routes {
  std::mutex mutex;
  std::unordered_map<const c10::TensorImpl*, const RoutedLinear*> linears;
  std::unordered_map<const c10::TensorImpl*, const RoutedEmbedding*> embeddings;
};
Routes& routes() {
  static Routes all;
  return all;
}
template <typename Layer>
const Layer* find_route(const std::unordered_map<const c10::TensorImpl*, const Layer*>& layers,
                        const torch::Tensor& weight) {
  std::lock_guard<std::mutex> lock(routes().mutex);
  auto found = layers.find(weight.unsafeGetTensorImpl());
  return found == layers.end() ? nullptr : found->second;
}

torch::Tensor routed_linear(const torch::Tensor& x, const torch::Tensor& weight, const c10::optional<torch::Tensor>& bias) {
  if (const RoutedLinear* layer = find_route(routes().linears, weight)) return layer->forward(x);
  return torch::linear(x, weight, bias);
}
torch::Tensor routed_embedding(const torch::Tensor& ids, const torch::Tensor& weight) {
  if (const RoutedEmbedding* layer = find_route(routes().embeddings, weight)) return layer->forward(ids);
  return torch::embedding(weight, ids);
}

TORCH_LIBRARY(ddprun, m) {
  m.def("routed_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", routed_linear);
  m.def("routed_embedding(Tensor ids, Tensor weight) -> Tensor", routed_embedding);
}

// Every call of an nn.Linear's or nn.Embedding's forward in `block` (and the blocks in it) through
// the routed ops.
void route_calls(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* inner : node->blocks()) route_calls(inner);
    if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward" || node->inputs().size() != 2)
      continue;
    auto type = node->input(0)->type()->cast<c10::ClassType>();
    const std::string kind = type ? routable_kind(type) : "";
    if (kind.empty()) continue;
    torch::jit::Graph& graph = *node->owningGraph();
    torch::jit::WithInsertPoint here(node);
    torch::jit::Value* weight = graph.insertGetAttr(node->input(0), "weight");
    torch::jit::Value* routed =
        kind == "Linear"
            ? graph.insert(c10::Symbol::fromQualString("ddprun::routed_linear"),
                           {torch::jit::NamedValue(node->input(1)), torch::jit::NamedValue(weight),
                            torch::jit::NamedValue(graph.insertGetAttr(node->input(0), "bias"))})
            : graph.insert(c10::Symbol::fromQualString("ddprun::routed_embedding"),
                           {torch::jit::NamedValue(node->input(1)), torch::jit::NamedValue(weight)});
    node->output()->replaceAllUsesWith(routed);
    node->destroy();
  }
}

class ScriptedModel : public Model {
 public:
  ScriptedModel(const TorchScriptConfig& config, bool warn)
      : path_(config.path),
        module_(load_module(config.path)),
        code_fingerprint_(module_code_fingerprint(config.path)),
        channels_last_(config.channels_last) {
    chain_ = scripted_chain(module_);
    random_op_ = random_op(module_);
    // Process-wide, and this process trains one model. Unoptimised, the interpreter runs the saved
    // graph op by op; the profiling executor's specialisation measured 13% slower for CPU training.
    torch::jit::setGraphExecutorOptimize(config.jit_optimize);
    // ddprun's optimizers, collectives and inputs are float32 (train.precision casts for compute):
    // a module saved in another dtype would fail at its first batch or collective in other words.
    for (const auto& parameter : module_.named_parameters())
      if (parameter.value.scalar_type() != torch::kFloat)
        throw FileError("model.path: " + path_ + "'s parameter " + parameter.name + " is " +
                        std::string(c10::toString(parameter.value.scalar_type())) +
                        "; ddprun trains float32 parameters (train.precision bf16 computes in bfloat16 over them): "
                        "save the module after .float()" +
                        (c10::isIntegralType(parameter.value.scalar_type(), /*includeBool=*/true)
                             ? ", and keep integer tensors as buffers (register_buffer), not parameters"
                             : ""));
    std::vector<std::string> frozen;
    mirror(module_, *this, "", frozen);
    // As the built-in ConvNet: NHWC conv weights and inputs take LibTorch's faster CPU kernels. The
    // tensors keep their identity (Note [Mirrored parameters]); only their layout changes.
    if (channels_last_ && calls_view(module_)) {
      channels_last_ = false;
      if (warn)
        spdlog::info("model.channels_last: off for {}: its code calls .view, which cannot take a channels-last "
                     "tensor; .reshape or torch.flatten there would keep the faster layout",
                     path_);
    }
    if (channels_last_) {
      torch::NoGradGuard no_grad;
      for (auto& p : parameters())
        if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
    if (parameters().empty())
      throw FileError("model.path: " + path_ + " has no parameters to train (a frozen or optimize_for_inference "
                      "module keeps its weights as constants); save torch.jit.script(model) before freezing");
    if (!warn) return;
    if (!frozen.empty())
      spdlog::warn("model.path: {} of {}'s {} parameters did not require grad (first: {}); ddprun trains them all",
                   frozen.size(), path_, parameters().size(), frozen.front());
    if (looks_traced(module_))
      spdlog::warn("model.path: {} looks traced (torch.jit.trace): its train/eval behaviour (dropout, batch norm) "
                   "was fixed when it was traced, so train() and eval() do not change it; save "
                   "torch.jit.script(model) instead",
                   path_);
  }

  torch::Tensor forward(torch::Tensor x) override {
    if (channels_last_ && x.dim() == 4) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    const bool turns = takes_turns(x);
    c10::IValue output;
    try {
      // Run by blocks, each block takes its own turn: a pass's collectives come between them.
      if (pass_acts_on_blocks())
        output = run_blocks(x);
      else
        in_turn(turns, [&] { output = running().forward({x}); });
    } catch (const std::exception& e) {
      std::string hint;
      if (channels_last_ && x.dim() == 4 && std::string(e.what()).find("stride") != std::string::npos)
        hint = " (model.channels_last made the batch channels-last: set model.channels_last: false if the module "
               "needs contiguous NCHW tensors)";
      throw UserError("model.path: " + path_ + " failed on a batch of " + describe(x) + ": " + first_line(e) + hint);
    }
    adopt_reassigned_buffers();
    if (!output.isTensor())
      throw UserError("model.path: " + path_ + "'s forward returned " + output.tagKind() +
                      "; ddprun needs it to return one tensor");
    torch::Tensor y = output.toTensor();
    if (!y.is_floating_point())
      throw UserError("model.path: " + path_ + "'s forward returned a " + describe(y) +
                      " tensor; ddprun needs floating-point outputs (logits or values) to train on");
    if (is_training() && torch::GradMode::is_enabled() && !y.requires_grad())
      throw UserError("model.path: " + path_ + "'s forward returned a tensor that does not depend on the "
                      "parameters (detached, or made without them), so nothing can be trained; return the "
                      "output of the layers, without .detach() or torch.no_grad()");
    return y;
  }

  ~ScriptedModel() override {
    std::lock_guard<std::mutex> lock(routes().mutex);
    for (const RoutedLinear* layer : linears_) routes().linears.erase(layer->weight.unsafeGetTensorImpl());
    for (const RoutedEmbedding* layer : embeddings_) routes().embeddings.erase(layer->weight.unsafeGetTensorImpl());
  }

  void train(bool on) override {
    torch::nn::Module::train(on);
    module_.train(on);
    if (routed_) routed_->train(on);
  }

  std::vector<int64_t> input_shape() const override { return {}; }

  // Note [Scripted units]: the chain's submodules are its blocks, in order.
  std::vector<ModelBlock> declare_blocks() override {
    std::vector<ModelBlock> blocks;
    for (const auto& path : chain_.paths) {
      auto mirror = mirror_of(path);
      blocks.push_back({path, mirror->parameters(), mirror->buffers(), [this, path](torch::Tensor x) {
                          c10::IValue y;
                          in_turn(takes_turns(x), [&] { y = submodule(running(), path).forward({x}); });
                          adopt_reassigned_buffers();
                          if (!y.isTensor())
                            throw UserError("model.path: " + path_ + "'s submodule " + path + " returned " +
                                            y.tagKind() + "; its forward runs submodule by submodule "
                                            "(dist.pipeline, dist.shard parameters), each returning one tensor");
                          return y.toTensor();
                        }});
    }
    return blocks;
  }
  std::string why_no_blocks() const override {
    return chain_.why_not + "; a forward that only passes its input through its submodules one after another (an "
           "nn.Sequential, or x = self.embed(x); for layer in self.layers: x = layer(x); return self.head(x)) can be";
  }

  std::string code_fingerprint() const override { return code_fingerprint_; }

  // Python code may read any buffer of its own in training; torch.nn's norms read their running
  // statistics only in eval mode.
  std::vector<std::pair<std::string, torch::Tensor>> buffers_read_in_training() const override {
    std::vector<std::pair<std::string, torch::Tensor>> read;
    for (const auto& buffer : buffers_) {
      const auto type = buffer.owner.type()->name();
      const std::string owner = type ? type->qualifiedName() : "";
      if (owner.rfind("__torch__.torch.nn.modules.batchnorm.", 0) == 0 ||
          owner.rfind("__torch__.torch.nn.modules.instancenorm.", 0) == 0)
        continue;
      read.emplace_back(buffer.path, buffer.tensor);
    }
    return read;
  }

  void save_extras(const std::string& output_dir) const override {
    std::ostringstream bytes;
    module_.save(bytes);
    write_file_atomically(output_dir + "/model_scripted.pt", bytes.str());
  }

 private:
  // A buffer as the module holds it: its owner submodule's attribute `name`, mirrored by `tensor`.
  struct MirroredBuffer {
    torch::jit::Module owner;
    std::string name, path;
    torch::Tensor tensor;
  };

  // A submodule of `from` (a chain's: Note [Scripted units]), and a mirror.
  static torch::jit::Module submodule(const torch::jit::Module& from, const std::string& path) {
    torch::jit::Module m = from;
    if (path.empty()) return m;
    for (const auto& name : split(path, '.')) m = m.attr(name).toModule();
    return m;
  }
  // The module forward runs (Note [Scripted routes]): the loaded one until a pass routes a layer.
  // Whether a pass routed any of the module's Linear or Embedding layers (Note [Scripted routes]).
  bool any_routed() const {
    const auto routed = [](const auto* layer) { return layer->routed(); };
    return std::any_of(linears_.begin(), linears_.end(), routed) ||
           std::any_of(embeddings_.begin(), embeddings_.end(), routed);
  }
  torch::jit::Module& running() {
    if (routed_) return *routed_;
    if (!any_routed()) return module_;
    {
      std::lock_guard<std::mutex> lock(routes().mutex);
      for (const RoutedLinear* layer : linears_) routes().linears[layer->weight.unsafeGetTensorImpl()] = layer;
      for (const RoutedEmbedding* layer : embeddings_) routes().embeddings[layer->weight.unsafeGetTensorImpl()] = layer;
    }
    routed_ = module_.clone(/*inplace=*/true);  // new classes, the same tensors
    std::set<const c10::ClassType*> done;
    for (const auto& sub : routed_->modules())
      if (done.insert(sub.type().get()).second)
        for (const auto& method : sub.get_methods()) route_calls(method.graph()->block());
    for (auto& buffer : buffers_)  // Note [Reassigned buffers]: forward now assigns the copy's
      buffer.owner = submodule(*routed_, buffer.path.substr(0, buffer.path.size() - buffer.name.size() -
                                                                   (buffer.path == buffer.name ? 0 : 1)));
    return *routed_;
  }
  std::shared_ptr<torch::nn::Module> mirror_of(const std::string& path) {
    return named_modules(/*name_prefix=*/"", /*include_self=*/false)[path];
  }
  // Note [Reassigned buffers]
  void adopt_reassigned_buffers() {
    for (auto& buffer : buffers_) {
      c10::IValue now = buffer.owner.attr(buffer.name);
      if (now.isTensor() && now.toTensor().is_same(buffer.tensor)) continue;
      if (!now.isTensor() || now.toTensor().sizes() != buffer.tensor.sizes() ||
          now.toTensor().scalar_type() != buffer.tensor.scalar_type())
        throw UserError("model.path: " + path_ + "'s forward replaced buffer " + buffer.path + " (" +
                        describe(buffer.tensor) + ") with " +
                        (now.isTensor() ? describe(now.toTensor()) : std::string(now.tagKind())) +
                        "; a buffer may get new values but must keep its shape and dtype");
      torch::NoGradGuard no_grad;
      buffer.tensor.copy_(now.toTensor());
      buffer.owner.setattr(buffer.name, buffer.tensor);
    }
  }

  // Note [Mirrored parameters]
  void mirror(const torch::jit::Module& from, torch::nn::Module& to, const std::string& prefix,
              std::vector<std::string>& frozen) {
    for (const auto& parameter : from.named_parameters(/*recurse=*/false)) {
      if (!parameter.value.requires_grad()) frozen.push_back(prefix + parameter.name);
      to.register_parameter(parameter.name, parameter.value, /*requires_grad=*/true);
    }
    for (const auto& buffer : from.named_buffers(/*recurse=*/false)) {
      if (!buffer.value.defined()) continue;
      to.register_buffer(buffer.name, buffer.value);
      buffers_.push_back({from, buffer.name, prefix + buffer.name, buffer.value});
    }
    for (const auto& child : from.named_children()) {
      std::shared_ptr<torch::nn::Module> mirrored = routable_mirror(child.value, prefix + child.name + ".", frozen);
      if (!mirrored) {
        mirrored = std::make_shared<torch::nn::Module>(class_name(child.value));
        mirror(child.value, *mirrored, prefix + child.name + ".", frozen);
      }
      to.register_module(child.name, mirrored);
    }
  }
  // Note [Scripted routes]: a torch.nn Linear or Embedding's mirror, as a layer a pass can route;
  // null for any other module.
  std::shared_ptr<torch::nn::Module> routable_mirror(const torch::jit::Module& from, const std::string& prefix,
                                                     std::vector<std::string>& frozen) {
    const std::string kind = routable_kind(from.type());
    if (kind.empty()) return nullptr;
    for (const auto& parameter : from.named_parameters(/*recurse=*/false))
      if (!parameter.value.requires_grad()) frozen.push_back(prefix + parameter.name);
    const torch::Tensor weight = from.attr("weight").toTensor();
    if (kind == "Embedding") {
      auto layer = std::make_shared<RoutedEmbedding>(weight);
      embeddings_.push_back(layer.get());
      return layer;
    }
    const c10::IValue bias = from.attr("bias");
    auto layer = std::make_shared<RoutedLinear>(weight, bias.isTensor() ? bias.toTensor() : torch::Tensor());
    linears_.push_back(layer.get());
    return layer;
  }

  std::string path_;
  mutable torch::jit::Module module_;  // save() is not const in every LibTorch version
  std::string code_fingerprint_;
  bool channels_last_;
  ScriptedChain chain_;  // Note [Scripted units]
  std::vector<MirroredBuffer> buffers_;
  std::vector<const RoutedLinear*> linears_;  // Note [Scripted routes]: the routable mirrors
  std::vector<const RoutedEmbedding*> embeddings_;
  std::optional<torch::jit::Module> routed_;  // the copy forward runs once a layer is routed
  std::string random_op_;                     // random_op(module_)

  // Note [Ranks as threads]: the module's CPU draws come from the process's one default generator,
  // which rank threads take turns at, each with its own state in it (one forward, or one block, at
  // a time: a pass's collectives come between blocks, never inside a turn). A CUDA rank draws from
  // its own device's generator.
  bool takes_turns(const torch::Tensor& x) const {
    return !random_op_.empty() && x.device().is_cpu() && on_rank_thread();
  }
  void in_turn(bool turns, const std::function<void()>& run) const {
    if (!turns) return run();
    if (any_routed())
      throw UserError("model.path: " + path_ + " draws random numbers in its forward (" + random_op_ +
                      ") from LibTorch's one CPU generator, which rank threads (dist.threads) take turns at; a pass "
                      "that routes its layers through collectives (dist.tensor, model.embedding_sharding) would wait "
                      "for the other ranks inside a turn: run the ranks as processes (ddprun --nproc-per-node N) or "
                      "drop that pass");
    drawing_as_rank(run);
  }
};

}  // namespace

void declare_config(ConfigSchema& schema, TorchScriptConfig& config, const std::string& model_name) {
  schema.add("model.path", &config.path,
             "torchscript: the module to train, as torch.jit.script(model).save(path) wrote it (a trained "
             "model_scripted.pt too)")
      .file_path();
  schema.add("model.jit_optimize", &config.jit_optimize,
             "torchscript: let TorchScript's profiling executor specialise and optimise the graph; off runs "
             "it as saved, which measured faster for training on CPU");
  schema.add("model.channels_last", &config.channels_last,
             "torchscript: the same, turned off for a module whose code calls .view, which a channels-last "
             "tensor cannot take");
  schema.add("model.sync_batchnorm", &config.sync_batchnorm,
             "torchscript: not available (a module's BatchNorms keep per-process statistics)");
  schema.rule("model.sync_batchnorm", [&config, &model_name]() -> std::string {
    return model_name == "torchscript" && config.sync_batchnorm ? "is not available for TorchScript modules" : "";
  });
  schema.rule("model.path", [&config, &model_name]() -> std::string {
    return model_name == "torchscript" && config.path.empty() ? "must name the module file when model.name is torchscript"
                                                              : "";
  });
}

/// Registers "torchscript"; called from model_registry.cpp (Note [Registries]).
void register_torchscript(ModelFactories& factories) {
  factories.add("torchscript", [](const ModelConfig& config, const ModelContext& context) {
    if (config.torchscript.path.empty())
      throw ConfigError("model.path: must name the module file when model.name is torchscript");
    return std::make_shared<ScriptedModel>(config.torchscript, context.warn);
  });
}

}  // namespace ddp
