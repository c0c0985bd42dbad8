#include "ddp/data/dataset_format.h"

#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {

// Note [Dataset format registration]
// Formats register as models do (Note [Model registration] in ddp/model/model_registry.cpp): each
// format's .cpp defines `void register_<name>_format(DatasetFormats&)`, and the list below calls
// them. ddp_data is a static library, so a format that registered itself through a static object
// would be dropped by the linker, unreferenced; naming each register function here is the
// reference. Adding a format is its .cpp plus one word in DDP_DATASET_FORMATS, and the data.dataset
// key's choices follow.
#define DDP_DATASET_FORMATS(X) \
  X(csv)                       \
  X(graph)                     \
  X(idx)                       \
  X(npy)                       \
  X(synthetic)                 \
  X(tokens)

#define DDP_DECLARE_REGISTER(name) void register_##name##_format(DatasetFormats& formats);
DDP_DATASET_FORMATS(DDP_DECLARE_REGISTER)
#undef DDP_DECLARE_REGISTER

namespace {

const DatasetFormats& formats() {
  static const DatasetFormats all = [] {
    DatasetFormats result;
#define DDP_CALL_REGISTER(name) register_##name##_format(result);
    DDP_DATASET_FORMATS(DDP_CALL_REGISTER)
#undef DDP_CALL_REGISTER
    return result;
  }();
  return all;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : ", ") + word;
  return out;
}

}  // namespace

const DatasetFormat& find_dataset_format(const std::string& name) {
  auto found = formats().find(name);
  if (found != formats().end()) return found->second;
  std::vector<std::string> names = dataset_format_names();
  std::string message = "data.dataset: unknown format \"" + name + "\"";
  if (auto suggestion = nearest(name, names)) message += " (did you mean " + *suggestion + "?)";
  throw ConfigError(message + "; available: " + join(names));
}

std::vector<std::string> dataset_format_names() {
  std::vector<std::string> names;
  for (const auto& [name, format] : formats()) names.push_back(name);
  return names;
}

}  // namespace ddp
