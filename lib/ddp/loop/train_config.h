#pragma once
// The whole trainer config: it only collects the parts' configs, each defined next to its owner.

#include <string>
#include <vector>

#include "ddp/checkpoint/checkpoint_config.h"
#include "ddp/config/config_schema.h"
#include "ddp/data/data_config.h"
#include "ddp/comm/dist_config.h"
#include "ddp/loop/loop_config.h"
#include "ddp/monitor/monitor_config.h"
#include "ddp/record/record_config.h"
#include "ddp/model/model_config.h"
#include "ddp/optim/optim_config.h"
#include "ddp/parallel/mesh_config.h"
#include "ddp/task/loss.h"
#include "ddp/task/task_config.h"

namespace ddp {

/// Everything `ddp-train CONFIG.yaml` reads.
struct TrainConfig {
  RunConfig run;
  DistConfig dist;
  MeshConfig mesh;  ///< declared under dist: (dist.pipeline, dist.data_replicate, dist.data_shard)
  DataConfig data;
  SamplerConfig sampler;
  ModelConfig model;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainLoopConfig train;
  TaskConfig task;  ///< declared under train: (train.task)
  LossConfig loss;  ///< declared under train: (train.loss, train.label_smoothing)
  EvalConfig eval;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  MonitorConfig monitor;
};

/// Reads a YAML file, applies `--set key=value` overrides in order, validates. Throws ConfigError.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides);

// Note [model.init_from gone]: a run that started from model.init_from needs it no more once it has
// a checkpoint, which holds every weight; a user who deleted the download should still be able to
// resume, or lengthen, the run. So where init_from no longer exists but the run directory's
// config.yaml records a run from it, the model keys come from that record (a Hugging Face
// directory's config.json gave some), beneath the file and the overrides as config.json's were;
// the model is built without reading init_from (ModelConfig::init_from_gone_run_dir), and the run
// must resume: with no checkpoint to resume from it is refused, never started from fresh weights.
// Anywhere else a missing init_from is refused, naming it.

/// load_train_config for a run (ddp-train): a model.init_from that does not exist is refused,
/// unless the run directory records a run from it (Note [model.init_from gone]).
TrainConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);

/// The same from YAML text (tests).
TrainConfig parse_train_config(const std::string& yaml_text, const std::vector<std::string>& overrides);

/// The resolved config as YAML, every key present (printed by rank 0 and saved in the run dir).
std::string to_yaml(const TrainConfig& config);

/// What running out of memory advises a run of `config`: the settings that split what it holds,
/// those it has not set yet (a rank's share of tables already split is cut by fewer rows or more
/// ranks).
std::string out_of_memory_advice(const TrainConfig& config);

/// Keys set where they do nothing ("dist.microbatches: ..."), one line each; rank 0 warns of them.
std::vector<std::string> config_notices(const TrainConfig& config);

/// to_yaml() with every path key empty: the part of a config that every rank must share, since
/// nodes may hold the same files at other absolute paths (Note [Relative paths]).
std::string to_yaml_without_paths(const TrainConfig& config);

/// Whether lm_head's weights stay whole and held from the forward through the backward: no pass
/// splits them by vocabulary (dist.tensor's built-in plans, or a dist.tensor_plan with lm_head
/// colwise) or frees them between blocks (dist.shard parameters). What train.chunked_loss needs.
bool head_stays_whole(const TrainConfig& config);

/// docs/config.md's reference table, made from the same declarations as the parser.
std::string config_reference_markdown();

/// Every config section and key, for the man page and the shell completion.
std::vector<ConfigSchema::SectionReference> config_reference();

}  // namespace ddp
