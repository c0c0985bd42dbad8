#pragma once
// Checkpoints: data files committed by an atomic rename, then a manifest (format version, world
// size, step, each file's size and CRC-32). A checkpoint without a valid manifest never counts.
// What the files hold, whole or sharded, is checkpoint_format.h's.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddp/checkpoint/checkpoint_config.h"
#include "ddp/checkpoint/train_progress.h"

namespace YAML {
class Emitter;
}

namespace ddp {

/// What a checkpoint was trained on, for a resume to check against (Note [Re-running a run]): the
/// run's resolved config (to_yaml), a fingerprint of its training data (Task::data_fingerprint) and
/// of its model's code where a file gives it (Model::code_fingerprint). Empty in checkpoints
/// written before they were recorded, and the model's for a built-in family.
struct RunIdentity {
  std::string config;
  std::string data;
  std::string model_code;
};

/// The run identity a manifest records (empty fields where it has none).
RunIdentity read_run_identity(const std::string& manifest);

/// A complete checkpoint on disk, as its manifest describes it.
struct CheckpointInfo {
  std::string data_path;
  std::string manifest_path;
  int64_t step = 0;
  int64_t world_size = 0;
  bool sharded = false;  ///< its manifest lists shard files (checkpoint_format.h), not one data file
  std::string damage;    ///< list(): why its manifest is not read (step -1); "" for an unreadable one
};

/// Saves, finds and loads checkpoints in one directory.
class Checkpointer {
 public:
  /// Format 2 (Note [Checkpoint format]); format 1's checkpoints are still read.
  static constexpr int kFormatVersion = 2;

  /// Checkpoints live in `directory` (created on the first save).
  Checkpointer(const CheckpointConfig& config, std::string directory);

  /// What every manifest from now on records of the run (write_run_identity).
  void set_run_identity(RunIdentity identity) { identity_ = std::move(identity); }
  const RunIdentity& run_identity() const { return identity_; }
  /// Adds the run identity to a manifest's map, as `config` and `data`.
  void write_run_identity(YAML::Emitter& manifest) const;

  /// Whether checkpoint.every_steps asks for a checkpoint after optimizer step `step`.
  bool due_after_step(int64_t step) const { return config_.every_steps > 0 && step % config_.every_steps == 0; }
  /// Whether checkpoint.every_epochs asks for one once `epochs_done` epochs are, at step `step`
  /// (not if that step has one already).
  bool due_after_epoch(int64_t epochs_done, int64_t step) const {
    return config_.every_epochs > 0 && epochs_done % config_.every_epochs == 0 && !saved_at(step);
  }
  /// Whether the run has a checkpoint of step `step`: saved, or resumed from.
  bool saved_at(int64_t step) const { return last_saved_step_ == step; }
  /// Every rank, whichever writes: the run has a checkpoint of step `step` now. The cadence is
  /// decided alike on every rank, as all take part in gathering a checkpoint.
  void mark_saved(int64_t step) { last_saved_step_ = step; }

  /// The checkpoint `checkpoint.resume` selects: auto → the newest one that verifies (a corrupt newer
  /// one is reported and skipped), never → none, a path → that one (FileError if it does not verify).
  /// `older_than`: auto takes only checkpoints of earlier steps (after a newer one failed elsewhere).
  std::optional<CheckpointInfo> find_resume_point(int64_t older_than = INT64_MAX) const;
  /// The newest checkpoint of the directory past step `step` that verifies, if any: a restart's own
  /// progress beyond the checkpoint `checkpoint.resume` names (Note [A named checkpoint rewinds]).
  std::optional<CheckpointInfo> newest_after(int64_t step) const;
  /// Moves the checkpoints of steps after `step` into a new `superseded-N` folder of the directory,
  /// where `resume: auto` and pruning never look; returns their steps, newest first, and the folder.
  std::pair<std::vector<int64_t>, std::string> set_aside_after(int64_t step) const;

  /// Creates the directory (and makes its entry durable) if it is not there yet.
  void ensure_directory() const;
  /// Commits the checkpoint of `step`, whose data files are written: writes its manifest, then
  /// removes leftovers and prunes to keep_last.
  void commit(int64_t step, const std::string& manifest);

  /// Removes every checkpoint file (data, shard, temporary) of a step not in `steps`: a writer of
  /// shards whose directory no commit prunes (another node's).
  void remove_all_but(const std::set<int64_t>& steps) const;

  /// Complete checkpoints, newest first (not yet verified).
  std::vector<CheckpointInfo> list() const;

  /// Checkpoint data files (step_N.pt, its .common.pt or shards) with no manifest step_N.json beside
  /// them: a save cut short before its commit, or a manifest removed. Sorted; never resumed from.
  std::vector<std::string> without_manifest() const;

  const std::string& directory() const { return directory_; }

 private:
  /// Removes data files without a manifest and stray temporaries, except those of `current`.
  void remove_leftovers(const std::string& current) const;

  CheckpointConfig config_;
  std::string directory_;
  RunIdentity identity_;
  int64_t last_saved_step_ = -1;
};

/// The checkpoint a path names: its manifest (.json), its data file (.pt), or their common stem.
CheckpointInfo checkpoint_at(const std::string& path);

/// A checkpoint's progress and generator states, in an archive (a whole checkpoint, a sharded one's
/// common file): `rank_rng` as save() takes it.
void write_progress(torch::serialize::OutputArchive& archive, const TrainProgress& progress, int world_size,
                    const std::vector<torch::Tensor>& rank_rng);
/// The progress write_progress wrote; FileError naming `source` if it is not there.
TrainProgress read_progress(torch::serialize::InputArchive& archive, const std::string& source);
/// Sets this process's generator to rank `rank`'s state in `archive` (the writer's where it has none).
void restore_rng(torch::serialize::InputArchive& archive, int rank);

/// The file name every file of step `step`'s checkpoint starts with: "step_0000000020".
std::string checkpoint_stem(int64_t step);

/// The CRC-32 manifests record; `crc`: that of the bytes before `data`, to go on from.
uint32_t crc32_of(std::string_view data, uint32_t crc = 0);

/// "" when the file at `path` has `bytes` bytes of CRC-32 `crc`, else what is wrong; its bytes in `data`.
std::string verify_file(const std::string& path, uint64_t bytes, uint32_t crc, std::string* data = nullptr);

/// Verifies a checkpoint's data file against its manifest; returns the problem, or "" when it is sound.
std::string verify_checkpoint(const CheckpointInfo& checkpoint);

}  // namespace ddp
