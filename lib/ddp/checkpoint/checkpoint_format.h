#pragma once
// The one checkpoint format: each shard of the model and optimizer state is written by a rank that
// holds it, as pieces with their boxes in the whole tensors, beside a manifest naming the layout;
// a resume at any layout reads just the pieces it needs. A whole checkpoint (checkpoint.format:
// whole) is the one-file case. See Note [Checkpoint format] in checkpoint_format.cpp.

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/checkpoint/checkpointer.h"
#include "ddp/parallel/tensor_box.h"
#include "ddp/checkpoint/train_progress.h"
#include "ddp/comm/process_group.h"
#include "ddp/parallel/owned_range.h"

namespace ddp {

/// One rank's view of the layout a sharded checkpoint saves or restores.
struct CheckpointLayout {
  std::vector<std::string> names;         ///< every parameter's name, in the plan's order
  std::vector<torch::Tensor> parameters;  ///< the plan's parameters (prepare_model's list)
  std::vector<std::vector<int64_t>> shapes;  ///< each one's whole shape (a pipeline stage frees the others')
  std::vector<OwnedRange> ranges;         ///< what this rank keeps of them
  /// The ranges before this one are restored here but another rank writes them (a replicated
  /// parameter beside this rank's rows of sharded tables).
  std::size_t first_written = 0;
  int shard = 0;                          ///< this rank's shard, of `shards`
  int shards = 1;
  bool writes = false;                    ///< one replica of each shard writes it
  std::string mesh;                       ///< the mesh, described, for the manifest
  int data_parallel_size = 0;             ///< ranks that split the samples (0: the world), for the resume position
  /// Row updates' state of embedding tables (TableEntry, kRowStateSuffix) may be in the checkpoint
  /// and not in the layout: a reader of the weights alone (ddp-export) skips it.
  bool skips_row_state = false;
  /// The whole checkpoint: one file, written by the one writer, holding the common state too.
  bool single_file = false;
  /// An optimizer like this run's over whole tensors, to read a format-1 whole checkpoint's state into.
  std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>&)> whole_optimizer;
};

/// Every parameter of `model` whole, each tensor once (its first name), one piece each, in one
/// file that the caller writes: the whole checkpoint's layout.
CheckpointLayout whole_layout(const torch::nn::Module& model);

/// Every rank: the writers each save their shard (ranges' values and optimizer state), then rank 0
/// the common file (progress, buffers, `rank_rng`, every rank's generator) and the manifest that
/// commits the checkpoint. With `layout.single_file` (checkpoint.format whole) the writers send
/// their pieces to rank 0 instead, which writes them and the common state as one file. A rank
/// that cannot write fails every rank with its message (IoError); the previous checkpoints stay intact.
void write_checkpoint(Checkpointer& checkpointer, const Communicator& world, const CheckpointLayout& layout,
                      const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                      const TrainProgress& progress, const std::vector<torch::Tensor>& rank_rng);

/// One process: writes the whole checkpoint of `model` and `optimizer` (an optimizer over every
/// parameter) as one file and commits it, then prunes to keep_last. `rank_rng` as in
/// write_checkpoint (empty: this process's generator alone). IoError (the previous
/// checkpoints stay intact) when the disk is full or unwritable.
void save_whole_checkpoint(Checkpointer& checkpointer, const torch::nn::Module& model,
                           const torch::optim::Optimizer& optimizer, const TrainProgress& progress, int world_size,
                           const std::vector<torch::Tensor>& rank_rng = {});

/// One process: restores `model` and `optimizer` (over every parameter) from a checkpoint of any
/// layout whose manifest's text is `manifest` at `manifest_path`, `data` being the bytes of the file
/// its manifest calls common (or a format-1 whole checkpoint's file); returns the progress. `accept`
/// sees the progress before anything is restored and throws to refuse it. FileError if it does not
/// fit the model, leaving the model unchanged.
TrainProgress load_whole_checkpoint(const std::string& manifest, const std::string& manifest_path,
                                    const std::string& data, torch::nn::Module& model,
                                    torch::optim::Optimizer& optimizer, int rank = 0,
                                    const std::function<void(const TrainProgress&)>& accept = {});

/// The path of the file a checkpoint's manifest calls common, which rank 0 reads and sends to
/// every rank: the one file of a whole checkpoint, the common file of a sharded one.
std::string common_file(const std::string& manifest, const std::string& manifest_path);

/// A sharded checkpoint being restored, on every rank.
class CheckpointReader {
 public:
  /// `manifest`: the manifest's text, `manifest_path` where it lies (the files are beside it),
  /// `common`: the common file's bytes (common_file()), which rank 0 verified. FileError if they do
  /// not parse. Format 1 is read too: its sharded checkpoints' runs, and its whole ones' one file.
  CheckpointReader(const std::string& manifest, const std::string& manifest_path, const std::string& common);
  ~CheckpointReader();

  /// The progress the checkpoint records.
  const TrainProgress& progress() const { return progress_; }
  /// "4 shards of data_replicate 1 × data_shard 4", or "whole": what wrote it.
  std::string describe() const;
  /// The file to name in messages: a whole checkpoint's one file, else the manifest.
  std::string source() const;
  /// Whether it is one file (a whole checkpoint), which rank 0 alone reads.
  bool single_file() const { return shards_.size() == 1 && shards_.front().file == common_name_; }

  /// FileError unless the checkpoint's optimizer, parameters and buffers are `optimizer`'s,
  /// `layout`'s and `model`'s, by kind, name and shape.
  void check_fits(const CheckpointLayout& layout, const torch::nn::Module& model, const torch::optim::Optimizer& optimizer);

  /// Reads and verifies the shard files whose pieces `layout`'s ranges overlap; returns what is
  /// wrong with one, or "". Every rank calls it, and the ranks agree before any restores.
  std::string read_pieces(const CheckpointLayout& layout);

  /// Writes the checkpoint's values into `layout`'s ranges, their optimizer state into `optimizer`,
  /// the buffers into `model`, and rank `rank`'s generator state; after read_pieces().
  void restore(const CheckpointLayout& layout, torch::nn::Module& model, torch::optim::Optimizer& optimizer, int rank);

 private:
  // A piece of a parameter a file holds: its box, and where its tensors are.
  struct Piece {
    std::size_t parameter;  // index in names_
    TensorBox box;
    std::size_t shard;      // index in shards_
    std::string key;        // its tensors' keys start with this: "p3/" ("r3/" in format 1's runs)
    int64_t first = -1;     // format 1: the box's first element in the stored run; -1: stored box-shaped
  };
  struct Shard {
    std::string file;
    uint64_t bytes = 0;
    uint32_t crc32 = 0;
  };
  struct Common;

  // A format-1 whole checkpoint's file as one piece per parameter of `layout`.
  void adopt_whole_file(const CheckpointLayout& layout);
  // The tensor `what` ("value", "step", "slot0"...) of `piece`, box-shaped; FileError if it is not there.
  torch::Tensor piece_tensor(const Piece& piece, const std::string& what);
  // The pieces of `parameter` (this checkpoint's numbering).
  const std::vector<std::size_t>& pieces_of(std::size_t parameter) const;

  std::string directory_, manifest_path_;
  int format_ = 0;
  bool whole_format_1_ = false;  // format 1's whole file: the model by name and LibTorch's optimizer archive
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<Shard> shards_;
  std::vector<Piece> pieces_;
  std::map<std::size_t, std::vector<std::size_t>> by_parameter_;
  std::string common_name_;  // the common file's name: a whole checkpoint's one file
  std::string mesh_, optimizer_, buffer_prefix_ = "buffer/";
  TrainProgress progress_;
  std::unique_ptr<Common> common_;
  std::map<std::size_t, std::shared_ptr<torch::serialize::InputArchive>> read_;  // shard → its file, read
  std::map<std::string, torch::Tensor> adopted_;  // a format-1 whole file's state, by piece key
};

}  // namespace ddp
