#include "ddp/model/python_state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/model/deferred_init.h"
#include "ddp/model/safetensors.h"
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

std::string shape(c10::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
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

// torch.save's format for a plain dict of tensors: a zip with data.pkl and a record per storage,
// written atomically to `path`. torch::pickle_save writes the same, but tags the dict with its type
// (torch.jit._pickle.restore_type_tag), a global that torch.load refuses by default since PyTorch
// 2.6 (weights_only). The zip is not assembled in memory: the storages go to the file from where
// they are, and only the zip's own headers are copied, so saving costs no second model.
void save_plain_dict(const c10::Dict<std::string, torch::Tensor>& dict, const std::string& path) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  const auto& tensors = pickler.tensorData();
  std::vector<torch::jit::WriteableTensorData> records;  // each storage's bytes, alive until the file is written
  for (const auto& t : tensors) records.push_back(torch::jit::getWriteableTensorData(t));
  std::deque<std::string> copied;  // the zip's headers, which the writer hands over from buffers of its own
  std::vector<std::string_view> pieces;
  auto writer = std::make_unique<caffe2::serialize::PyTorchStreamWriter>([&](const void* data, size_t size) {
    const char* from = static_cast<const char*>(data);
    bool a_record = false;
    for (const auto& r : records) {
      a_record = a_record || (from >= r.data() && from + size <= r.data() + r.sizeInBytes());
    }
    if (!a_record) from = copied.emplace_back(from, size).data();
    pieces.emplace_back(from, size);
    return size;
  });
  try {
    for (std::size_t i = 0; i < records.size(); ++i)
      writer->writeRecord("data/" + std::to_string(i), records[i].data(), records[i].sizeInBytes());
    writer->writeRecord("data.pkl", pickle.data(), pickle.size());
    writer->writeEndOfFile();  // here, not in the destructor, where an error could not be thrown
  } catch (...) {
    // Its destructor would try to finish the file and, out of memory again, throw: terminate.
    (void)writer.release();
    throw;
  }
  write_file_atomically(path, pieces);
}

// Note [Tied weights in a file]: a model whose two names share one tensor (a GPT's lm_head.weight
// and transformer.wte.weight) takes one value for both. A file holding both names with different
// values has untied weights; loaded, the last name's would silently replace the first's.
void check_tied_values(const std::vector<std::pair<std::string, torch::Tensor>>& targets,
                       const std::map<std::string, const StoredTensor*>& file, const std::string& path) {
  std::map<const c10::TensorImpl*, std::string> first_name;
  for (const auto& [name, target] : targets) {
    if (!file.count(name)) continue;
    auto [tied, fresh] = first_name.emplace(target.unsafeGetTensorImpl(), name);
    if (fresh) continue;
    if (!torch::equal(file.at(tied->second)->read(), file.at(name)->read()))
      throw FileError(path + ": " + tied->second + " and " + name + " differ, but this model ties them (one tensor "
                      "for both): the file's weights are untied, and neither can stand for the other");
  }
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
  std::map<std::pair<const void*, std::vector<int64_t>>, torch::Tensor> seen;  // tied weights: one storage
  for (const auto& [name, tensor] : python_state_dict(model)) {
    torch::Tensor t = tensor.detach();
    if (!t.device().is_cpu() || !t.is_contiguous()) {
      dict.insert(name, t.to(torch::kCPU).contiguous().clone());
      continue;
    }
    // A view would drag its whole storage into the file (a sharded run's parameters are views of
    // flat tensors): its bytes go as a storage of their own instead, aliased, not copied.
    auto key = std::make_pair(static_cast<const void*>(t.data_ptr()), t.sizes().vec());
    auto found = seen.find(key);
    if (found == seen.end()) found = seen.emplace(key, torch::from_blob(t.data_ptr(), t.sizes(), t.options())).first;
    dict.insert(name, found->second);
  }
  save_plain_dict(dict, path);
}

void save_model_weights(const torch::nn::Module& model, const std::string& output_dir) {
  save_python_state_dict(model, output_dir + "/model.pt");
  write_safetensors(output_dir + "/model.safetensors", python_state_dict(model), {{"format", "pt"}});
}

void load_python_state_dict(torch::nn::Module& model, const std::string& path, const OptionalKey& optional) {
  load_state_dict_entries(model, open_state_dict_file(path), path, optional);
}

void load_state_dict_entries(torch::nn::Module& model, const StoredTensors& entries, const std::string& path,
                             const OptionalKey& optional) {
  std::map<std::string, const StoredTensor*> file;
  std::vector<std::string> file_order;
  for (const auto& [name, tensor] : entries) {  // in file order, as messages list them
    file_order.push_back(name);
    file.emplace(name, &tensor);
  }
  auto targets = python_state_dict(model);
  std::vector<std::string> missing, unexpected, mismatched, mistyped;
  for (const auto& [name, target] : targets) {
    auto found = file.find(name);
    if (found == file.end()) {
      if (!optional || !optional(name)) missing.push_back(name);
    } else if (target.sizes() != c10::IntArrayRef(found->second->shape)) {
      mismatched.push_back(name + " (file " + shape(found->second->shape) + ", model " + shape(target.sizes()) + ")");
    } else if (target.is_floating_point() && !c10::isFloatingType(found->second->dtype)) {
      // copy_ would convert them without a word; float bytes labelled I32 are a damaged file.
      mistyped.push_back(name + " (file " + std::string(c10::toString(found->second->dtype)) + ", model " +
                         std::string(c10::toString(target.scalar_type())) + ")");
    }
  }
  std::set<std::string> known;
  for (const auto& target : targets) known.insert(target.first);
  for (const auto& name : file_order)
    if (!known.count(name) && (!optional || !optional(name))) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty() || !mistyped.empty()) {
    std::string message = path + ": state dict does not match the model:";
    if (!missing.empty()) message += " missing keys " + list(missing) + ";";
    if (!unexpected.empty()) message += " unexpected keys " + list(unexpected) + ";";
    if (!mismatched.empty()) message += " wrong shapes " + list(mismatched) + ";";
    if (!mistyped.empty()) message += " integers for floating-point tensors " + list(mistyped) + ";";
    message.pop_back();
    throw FileError(message);
  }
  check_tied_values(targets, file, path);
  // Every key was checked, and every value read now is read, before the model changes: a bad file
  // leaves it untouched. In a deferred build (make_model's of model.init_from) a parameter's values
  // are read when a pass takes them; an error then names the tensor.
  std::set<const c10::TensorImpl*> parameters;
  for (const auto& parameter : model.parameters()) parameters.insert(parameter.unsafeGetTensorImpl());
  std::vector<std::pair<torch::Tensor, std::string>> later;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> now;
  for (const auto& [name, target] : targets) {
    auto found = file.find(name);
    if (found == file.end()) continue;
    if (deferring() && parameters.count(target.unsafeGetTensorImpl()))
      later.emplace_back(target, name);
    else
      now.emplace_back(target, found->second->read());
  }
  for (const auto& [target, name] : later) {
    const StoredTensor& stored = *file.at(name);
    auto failed = [name = name](const std::exception& e) {
      return FileError("model.init_from: reading tensor '" + name + "': " + e.what());
    };
    MakePart part;
    if (stored.read_part)
      part = [read_part = stored.read_part, failed](c10::IntArrayRef view, const TensorPart& kept) {
        try {
          return read_part(view, kept);
        } catch (const std::exception& e) {
          throw failed(e);
        }
      };
    init_parameter_without_draws(
        target,
        [read = stored.read, failed](torch::Tensor& values) {
          try {
            values.copy_(read());
          } catch (const std::exception& e) {
            throw failed(e);
          }
        },
        std::move(part));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, values] : now) target.copy_(values);
}

}  // namespace ddp
