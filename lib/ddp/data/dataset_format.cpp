#include "ddp/data/dataset_format.h"

namespace ddp {

// Each format's .cpp defines `void register_<name>_format(DatasetFormats&)`, and the list below
// calls them (Note [Registries] in ddp/common/registry.h): adding a format is its .cpp plus one
// word here, and the data.dataset key's choices follow.
#define DDP_DATASET_FORMATS(X) \
  X(criteo)                    \
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
    DatasetFormats result("data.dataset", "format");
#define DDP_CALL_REGISTER(name) register_##name##_format(result);
    DDP_DATASET_FORMATS(DDP_CALL_REGISTER)
#undef DDP_CALL_REGISTER
    return result;
  }();
  return all;
}

}  // namespace

const DatasetFormat& find_dataset_format(const std::string& name) {
  return formats().at(name);
}

std::vector<std::string> dataset_format_names() {
  return formats().names();
}

}  // namespace ddp
