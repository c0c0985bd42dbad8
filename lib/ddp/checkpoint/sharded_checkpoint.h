#pragma once
// Sharded checkpoints (checkpoint.format: sharded, the default under dist.shard): each shard of the
// model and optimizer state is written by a rank that holds it, beside a small common file and a
// manifest naming the layout, and a resume at any layout reads just the runs it needs. See
// Note [Sharded checkpoints] in sharded_checkpoint.cpp.

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/checkpoint/checkpointer.h"
#include "ddp/checkpoint/train_progress.h"
#include "ddp/comm/process_group.h"
#include "ddp/parallel/owned_range.h"

namespace ddp {

/// One rank's view of the layout a sharded checkpoint saves or restores.
struct ShardLayout {
  std::vector<std::string> names;         ///< every parameter's name, in the plan's order
  std::vector<torch::Tensor> parameters;  ///< the plan's parameters (prepare_model's list)
  std::vector<std::vector<int64_t>> shapes;  ///< each one's whole shape (a pipeline stage frees the others')
  std::vector<OwnedRange> ranges;         ///< what this rank keeps of them
  int shard = 0;                          ///< this rank's shard, of `shards`
  int shards = 1;
  bool writes = false;                    ///< one replica of each shard writes it
  std::string mesh;                       ///< the mesh, described, for the manifest
  std::string optimizer;                  ///< optim.name: whose state the shards hold
  int data_parallel_size = 0;             ///< ranks that split the samples (0: the world), for the resume position
};

/// Every rank: the writers each save their shard (ranges' values and optimizer state), then rank 0
/// the common file (progress, buffers, `rank_rng`, every rank's generator) and the manifest that
/// commits the checkpoint. A rank that cannot write fails every rank with its message (IoError);
/// the previous checkpoints stay intact.
void save_sharded_checkpoint(Checkpointer& checkpointer, const Communicator& world, const ShardLayout& layout,
                             const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                             const TrainProgress& progress, const std::vector<torch::Tensor>& rank_rng);

/// Whether a manifest's text is a sharded checkpoint's.
bool is_sharded_manifest(const std::string& manifest);
/// The path of a sharded checkpoint's common file, from its manifest's text and path; FileError if it names none.
std::string sharded_common_file(const std::string& manifest, const std::string& manifest_path);

/// A sharded checkpoint being restored, on every rank.
class ShardedCheckpointReader {
 public:
  /// `manifest`: the manifest's text, `manifest_path` where it lies (the files are beside it),
  /// `common`: the common file's bytes, which rank 0 verified. FileError if they do not parse.
  ShardedCheckpointReader(const std::string& manifest, const std::string& manifest_path, const std::string& common);
  ~ShardedCheckpointReader();

  /// The progress the checkpoint records.
  const TrainProgress& progress() const { return progress_; }
  /// "4 shards of data_replicate 1 × data_shard 4": what wrote it.
  std::string describe() const;

  /// FileError unless the checkpoint's optimizer, parameters and buffers are `layout`'s and
  /// `model`'s, by name and shape.
  void check_fits(const ShardLayout& layout, const torch::nn::Module& model) const;

  /// Reads and verifies the shard files `layout`'s ranges overlap; returns what is wrong with one,
  /// or "". Every rank calls it, and the ranks agree before any restores.
  std::string read_shards(const ShardLayout& layout);

  /// Writes the checkpoint's values into `layout`'s ranges, their optimizer state into `optimizer`,
  /// the buffers into `model`, and rank `rank`'s generator state; after read_shards().
  void restore(const ShardLayout& layout, torch::nn::Module& model, torch::optim::Optimizer& optimizer, int rank);

 private:
  struct Range {
    std::size_t parameter;  // index in names_
    int64_t begin, numel;
  };
  struct Shard {
    std::string file;
    uint64_t bytes = 0;
    uint32_t crc32 = 0;
    std::vector<Range> ranges;
  };
  struct Common;

  std::string directory_, manifest_path_;
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<Shard> shards_;
  std::string mesh_, optimizer_;
  TrainProgress progress_;
  std::unique_ptr<Common> common_;
  std::map<std::size_t, std::unique_ptr<torch::serialize::InputArchive>> read_;  // shard → its file, read
};

}  // namespace ddp
