#include "ddp/model/python_state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>

#include <map>
#include <set>
#include <sstream>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/model/state_dict_file.h"

namespace ddp {
namespace {

// Python's Module.state_dict() emits, per module, its own parameters, then its own buffers, then
// recurses into children in registration order; None entries (a Linear without bias) are skipped.
void collect(const torch::nn::Module& module, const std::string& prefix,
             std::vector<std::pair<std::string, torch::Tensor>>& out) {
  for (const auto& item : module.named_parameters(/*recurse=*/false))
    if (item.value().defined()) out.emplace_back(prefix + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/false))
    if (item.value().defined()) out.emplace_back(prefix + item.key(), item.value());
  for (const auto& child : module.named_children()) collect(*child.value(), prefix + child.key() + ".", out);
}

std::string shape(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

// One line stays readable when a whole different model was loaded: show the first few of each kind.
std::string list(const std::vector<std::string>& items) {
  constexpr std::size_t kShown = 8;
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += " (+" + std::to_string(items.size() - kShown) + " more)";
  return out;
}

// torch.save's format for a plain dict of tensors: a zip with data.pkl and a record per storage.
// torch::pickle_save writes the same, but tags the dict with its type (torch.jit._pickle.
// restore_type_tag), a global that torch.load refuses by default since PyTorch 2.6 (weights_only).
std::vector<char> pickle_plain_dict(const c10::Dict<std::string, torch::Tensor>& dict) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> zip;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      const char* bytes = static_cast<const char*>(data);
      zip.insert(zip.end(), bytes, bytes + size);
      return size;
    });
    const auto& tensors = pickler.tensorData();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      auto data = torch::jit::getWriteableTensorData(tensors[i]);
      writer.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
    }
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();  // here, not in the destructor, where an error could not be thrown
  }
  return zip;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> python_state_dict(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  collect(module, "", out);
  return out;
}

void save_python_state_dict(const torch::nn::Module& model, const std::string& path) {
  // c10::Dict keeps insertion order, and pickles as a Python dict in that order.
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, tensor] : python_state_dict(model)) {
    // A clone of its own: a view would otherwise drag its whole storage into the file.
    dict.insert(name, tensor.detach().to(torch::kCPU).clone(torch::MemoryFormat::Contiguous));
  }
  auto bytes = pickle_plain_dict(dict);
  write_file_atomically(path, std::string_view(bytes.data(), bytes.size()));
}

void load_python_state_dict(torch::nn::Module& model, const std::string& path, const OptionalKey& optional) {
  std::map<std::string, torch::Tensor> file;
  std::vector<std::string> file_order;
  for (auto& [name, tensor] : read_state_dict_file(path)) {  // in file order, as messages list them
    file_order.push_back(name);
    file.emplace(name, tensor);
  }
  auto targets = python_state_dict(model);
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, target] : targets) {
    auto found = file.find(name);
    if (found == file.end()) {
      if (!optional || !optional(name)) missing.push_back(name);
    } else if (found->second.sizes() != target.sizes()) {
      mismatched.push_back(name + " (file " + shape(found->second) + ", model " + shape(target) + ")");
    }
  }
  std::set<std::string> known;
  for (const auto& target : targets) known.insert(target.first);
  for (const auto& name : file_order)
    if (!known.count(name) && (!optional || !optional(name))) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string message = path + ": state dict does not match the model:";
    if (!missing.empty()) message += " missing keys " + list(missing) + ";";
    if (!unexpected.empty()) message += " unexpected keys " + list(unexpected) + ";";
    if (!mismatched.empty()) message += " wrong shapes " + list(mismatched) + ";";
    message.pop_back();
    throw FileError(message);
  }
  // Every key was checked first, so a bad file leaves the model untouched.
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets)
    if (auto found = file.find(name); found != file.end()) target.copy_(found->second);
}

}  // namespace ddp
