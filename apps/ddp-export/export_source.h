#pragma once
// What ddp-export writes out: a checkpoint of the run (--checkpoint, or the newest that reads), or
// the run's end, model.pt (a run that kept none, or finished after its newest).

#include <functional>
#include <memory>
#include <string>

#include "ddp/loop/train_config.h"
#include "ddp/model/model_registry.h"
#include "export_options.h"

namespace ddp {

/// The weights an export takes.
struct ExportSource {
  std::shared_ptr<Model> model;  ///< holding them
  int64_t step = -1;             ///< the checkpoint's, or the finished run's end's; -1 for another model.pt
  std::string description;       ///< "the checkpoint of step 40 (RUN/checkpoints/step_0000000040.json)"
};

/// Reads the weights ddp-export writes out into a model `fresh` makes (again after one half read).
/// Without --checkpoint, a checkpoint that cannot be read gives way to the one before it, and one a
/// running run removed meanwhile to a new look. FileError or UserError naming what is wrong.
ExportSource read_export_source(const ExportArguments& args, const TrainConfig& config, const std::string& config_path,
                                const std::function<std::shared_ptr<Model>()>& fresh);

}  // namespace ddp
