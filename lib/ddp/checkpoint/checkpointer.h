#pragma once
// Checkpoints written by rank 0: a data file committed by an atomic rename, then a manifest
// (format version, world size, step, size, CRC-32). A checkpoint without a valid manifest never counts.

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "ddp/checkpoint/checkpoint_config.h"
#include "ddp/checkpoint/train_progress.h"

namespace ddp {

/// A complete checkpoint on disk, as its manifest describes it.
struct CheckpointInfo {
  std::string data_path;
  std::string manifest_path;
  int64_t step = 0;
  int64_t world_size = 0;
};

/// Saves, finds and loads checkpoints in one directory.
class Checkpointer {
 public:
  static constexpr int kFormatVersion = 1;

  /// Checkpoints live in `directory` (created on the first save).
  Checkpointer(const CheckpointConfig& config, std::string directory);

  /// Writes model, optimizer, progress and RNG state atomically, then prunes to keep_last.
  /// `rank_rng`: every rank's CPU generator state, by rank (ranks draw different amounts, e.g.
  /// dropout on batches of different sizes); empty: this process's alone. Throws IoError (the
  /// previous checkpoints stay intact) when the disk is full or unwritable.
  void save(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
            const TrainProgress& progress, int world_size, const std::vector<torch::Tensor>& rank_rng = {});

  /// The checkpoint `checkpoint.resume` selects: auto → the newest one that verifies (a corrupt newer
  /// one is reported and skipped), never → none, a path → that one (FileError if it does not verify).
  std::optional<CheckpointInfo> find_resume_point() const;

  /// Restores model, optimizer and RNG state from the checkpoint's file; returns the progress.
  /// FileError if the checkpoint does not fit this model or was written by another world size.
  TrainProgress load(const CheckpointInfo& checkpoint, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                     int world_size) const;

  /// Complete checkpoints, newest first (not yet verified).
  std::vector<CheckpointInfo> list() const;

  const std::string& directory() const { return directory_; }

 private:
  /// Removes data files without a manifest and stray temporaries, except those of `current`.
  void remove_leftovers(const std::string& current) const;

  CheckpointConfig config_;
  std::string directory_;
};

/// Checkpointer::load() from a checkpoint file's bytes, read elsewhere: rank 0 reads and verifies
/// the file and broadcasts them, so no other rank needs it (node-local storage is enough).
/// `source` names them in errors.
/// `rank` restores its own generator state where the checkpoint has one per rank.
TrainProgress load_checkpoint_bytes(const std::string& bytes, const std::string& source, torch::nn::Module& model,
                                    torch::optim::Optimizer& optimizer, int world_size, int rank = 0);

/// The checkpoint a path names: its manifest (.json), its data file (.pt), or their common stem.
CheckpointInfo checkpoint_at(const std::string& path);

/// Verifies a checkpoint's data file against its manifest; returns the problem, or "" when it is sound.
std::string verify_checkpoint(const CheckpointInfo& checkpoint);

}  // namespace ddp
