#include "ddp/model/batch_statistics.h"

namespace ddp {
namespace {

// A module's class by its name: "torch::nn::BatchNorm2dImpl", "ddp::SyncBatchNorm2dImpl", or a
// scripted mirror's Python class, "BatchNorm2d" (Note [Mirrored parameters]).
std::string bare_class(std::string name) {
  if (const auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.ends_with("Impl")) name.resize(name.size() - 4);
  return name;
}

bool is_batch_norm(const std::string& name) {
  for (const char* kind : {"BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "SyncBatchNorm1d",
                           "SyncBatchNorm2d", "SyncBatchNorm3d"})
    if (name == kind) return true;
  return false;
}

}  // namespace

BatchStatistics batch_statistics_of(const torch::nn::Module& model) {
  BatchStatistics found;
  for (const auto& module : model.named_modules()) {
    const std::string name = bare_class(module.value()->name());
    // A class of its own that keeps running statistics (a Python subclass of nn.BatchNorm2d) counts
    // too; InstanceNorm's are per sample.
    const bool keeps_statistics = module.value()->named_buffers(/*recurse=*/false).contains("running_mean") &&
                                  name.find("InstanceNorm") == std::string::npos;
    if (!is_batch_norm(name) && !keeps_statistics) continue;
    if (found.first_layer.empty()) found.first_layer = module.key().empty() ? name : module.key();
    found.all_synced = found.all_synced && name.starts_with("Sync");
  }
  return found;
}

}  // namespace ddp
