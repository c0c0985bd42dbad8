// ddp-export: any checkpoint of a run (or its model.pt) as a Hugging Face model directory:
// model.safetensors (shards above --max-shard-size), config.json, model.pt, the run's config.yaml
// (which says the model) and the tokenizer.model the run's tokens were made with.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/interruption.h"
#include "ddp/common/run_main.h"
#include "ddp/common/worker_contract.h"
#include "ddp/loop/train_config.h"
#include "ddp/model/model_registry.h"
#include "ddp/text/tokenizer_ids.h"
#include "export_options.h"
#include "export_source.h"
#include "export_staging.h"
#include "tool_command_line.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  ddp::ProgramErrors errors;
  errors.program = "ddp-export";
  errors.failure = "failed";
  // The checkpointer's warnings (a damaged newest checkpoint skipped) are the tool's own lines, on
  // stderr beside its errors, not spdlog's timestamped ones on stdout.
  spdlog::set_default_logger(spdlog::stderr_logger_st("ddp-export"));
  spdlog::set_pattern("ddp-export: %l: %v");
  return ddp::run_main(errors, [&]() -> int {
    ddp::ExportArguments args;
    CLI::App app("ddp-export: a run's checkpoint as a Hugging Face model directory", "ddp-export");
    ddp::declare_export_options(app, args);
    if (!ddp::parse_tool_command_line(app, argc, argv, "ddp-export")) return ddp::kExitSuccess;
    const int64_t max_shard_bytes = ddp::parse_shard_size(args.max_shard_size);
    const std::string config_path = (fs::path(args.run) / "config.yaml").string();
    if (!fs::is_regular_file(config_path))
      throw ddp::FileError(config_path + ": no such file (RUN is a run directory: its config.yaml says the model)");
    ddp::TrainConfig config = ddp::load_train_config(config_path, {});
    // Its task builds it: no model of the registry, nor a Hugging Face form (not "unknown model").
    if (config.model.name == "graphsage")
      throw ddp::UserError(args.run + " trained model.name graphsage, which has no Hugging Face form to export: its "
                           "weights are " + (fs::path(args.run) / "model.pt").string() +
                           ", which loads with strict=True into PyG's GraphSAGE (docs/graphs.md)");
    // The checkpoint's weights replace them: never read the run's starting point, but a Hugging Face
    // directory's other config.json keys go with the export as with the run's end: from the run's
    // own config.json, which its end wrote with them (the directory may have moved since), else
    // from that directory.
    const std::string run_config_json = (fs::path(args.run) / "config.json").string();
    std::string started_from;
    if (!config.model.init_from.empty() && fs::is_regular_file(run_config_json))
      started_from = args.run;
    else if (fs::is_directory(config.model.init_from))
      started_from = config.model.init_from;
    else if (ddp::init_from_hugging_face_directory(config.model) && !fs::exists(config.model.init_from))
      spdlog::warn("model.init_from {} is gone, and the run wrote no config.json yet: the export's config.json "
                   "has the model's own keys only, not the others of the one it started from",
                   config.model.init_from);
    config.model.init_from.clear();
    ddp::ExportSource source = ddp::read_export_source(args, config, config_path, [&config, &started_from] {
      std::shared_ptr<ddp::Model> model = ddp::make_model(config.model);
      model->set_hugging_face_source(started_from);
      return model;
    });
    std::shared_ptr<ddp::Model> model = source.model;
    const std::string name = source.step >= 0 ? "export-step-" + std::to_string(source.step) : "export";
    const std::string output = !args.output.empty() ? args.output : (fs::path(args.run) / name).string();
    if (fs::exists(output) && fs::equivalent(output, args.run))
      throw ddp::UserError("-o " + output + " is the run directory itself, whose model.pt and model.safetensors are "
                           "the run's end; export elsewhere");
    // Another run's directory: its model.pt and config.yaml would be replaced under its checkpoints.
    for (const char* own : {"metrics.jsonl", "checkpoints"})
      if (fs::exists(fs::path(output) / own))
        throw ddp::UserError("-o " + output + " is a run directory (it holds " + own + "): the export would replace "
                             "that run's model.pt and config.yaml; export elsewhere");
    if (fs::exists(output) && !fs::is_directory(output))
      throw ddp::UserError("-o " + output + " is a file; name a directory for the export");
    // A checkpoint directory (this run's or another's): the export takes the directory's place, so
    // a checkpoint a running run wrote meanwhile would go with the earlier directory, and keep_last
    // never removes the export's files.
    if (fs::is_directory(output))
      for (const auto& entry : fs::directory_iterator(output))
        if (const std::string name = entry.path().filename().string();
            name.rfind("step_", 0) == 0 && (name.ends_with(".pt") || name.ends_with(".json")))
          throw ddp::UserError("-o " + output + " is a checkpoint directory (it holds " + name +
                               "): the export would take its place, and a checkpoint written there meanwhile would "
                               "be lost; export elsewhere (the default is " +
                               args.run + "/export-step-N)");
    std::error_code ec;
    const fs::path here = fs::current_path(ec);
    if (!ec && fs::exists(output) && fs::equivalent(output, here, ec))
      throw ddp::UserError("-o " + output + " is the current directory, which the export would replace whole, leaving "
                           "this shell in a removed one; name it from elsewhere");
    // An export replaces its directory whole (Note [An export replaces its directory whole]): a
    // directory that is no earlier export loses its files of an export's kinds (a tokenizer.model
    // beside token shards), and a run directory in it would be copied whole. Other files (a
    // README, a Hub clone's .git) are kept, as they are in an earlier export.
    if (fs::is_directory(output) && !fs::exists(fs::path(output) / "model.safetensors") &&
        !fs::exists(fs::path(output) / "model.safetensors.index.json"))
      for (const auto& entry : fs::directory_iterator(output)) {
        const std::string name = entry.path().filename().string();
        const bool a_run = entry.is_directory() && (fs::exists(entry.path() / "metrics.jsonl") ||
                                                    fs::exists(entry.path() / "checkpoints"));
        // A directory of directories (models/, a home, /usr) is no place an export is kept: the
        // export would take its place, its entries moved into it.
        const bool a_tree = entry.is_directory() && name != ".git";
        if (a_run || a_tree || ddp::written_by_an_export(name))
          throw ddp::UserError("-o " + output + " is no earlier export (it has no model.safetensors) and holds " +
                               name +
                               (a_run    ? ", a run directory"
                                : a_tree ? "/, a directory of its own (an export directory holds files, and a Hub "
                                           "clone's .git)"
                                         : ", which the export would replace") +
                               "; name a new or empty directory, or an earlier export to replace");
      }
    ddp::DeferredInterruption deferred(
        "ddp-export: stopping once the file in hand is written, and removing the export's own (again to stop at "
        "once)\n",
        "the export's files are removed, and -o is as it was");
    ddp::ExportStaging staging{fs::path(output)};
    const std::string into = staging.path();
    ddp::save_model(*model, into, max_shard_bytes);
    ddp::stop_if_interrupted();
    // The run's config.yaml, so that ddp-generate and ddp-export read the export as a run directory.
    ddp::write_file_atomically((fs::path(into) / "config.yaml").string(), ddp::read_whole_file(config_path));
    // How the run normalised its features, which the model takes so (its end writes it).
    const fs::path normalization = fs::path(args.run) / "normalization.json";
    if (fs::is_regular_file(normalization))
      ddp::write_file_atomically((fs::path(into) / "normalization.json").string(),
                                 ddp::read_whole_file(normalization.string()));
    else if (config.data.dataset != "tokens" && config.data.dataset != "graph")
      spdlog::warn(
          "{} has no normalization.json (its end writes it): the export's model takes features as "
          "data.normalize made them, and the numbers are not with it",
          args.run);
    // The tokenizer the run's tokens were made with belongs with the model: the one the run kept
    // (its end writes it), else the one beside data.path (as ddp-tokenize left it; a run that has
    // not ended yet).
    for (const std::string& tokenizer :
         {(fs::path(args.run) / "tokenizer.model").string(),
          config.data.path.empty() ? std::string() : ddp::tokenizer_beside(config.data.path)})
      if (!tokenizer.empty() && fs::is_regular_file(tokenizer)) {
        ddp::write_file_atomically((fs::path(into) / "tokenizer.model").string(), ddp::read_whole_file(tokenizer));
        ddp::write_tokenizer_ids(into, output);
        break;
      }
    // What this export wrote, before the earlier directory's other files join it.
    std::vector<std::pair<std::string, double>> written;
    for (const auto& entry : fs::directory_iterator(into))
      written.emplace_back(entry.path().filename().string(), static_cast<double>(fs::file_size(entry.path())) / 1e6);
    std::sort(written.begin(), written.end());
    ddp::stop_if_interrupted();  // the last point to stop at
    {
      ddp::SignalsHeld held;  // the exchange and its fsync whole; a signal then takes its own action
      staging.move_into_place();
      staging.discard_earlier();
      deferred.end();
    }
    std::printf("exported %s to %s\n", source.description.c_str(), output.c_str());
    for (const auto& [file, megabytes] : written) std::printf("  %s (%.1f MB)\n", file.c_str(), megabytes);
    return ddp::kExitSuccess;
  });
}
