#pragma once
// The seam between the loop and embedding tables that a pass updates itself, apart from the
// optimizer (Note [Row updates]): replicated tables updated from their whole gradients
// (ReplicatedTables), or tables whose rows are spread over the ranks (ShardedTables).

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

/// What a table's per-row optimizer state is called in a checkpoint: the table's name and this.
inline constexpr const char* kRowStateSuffix = ".row_sums";

/// A whole tensor a checkpoint holds of the tables: a table, or its per-row optimizer state.
struct TableEntry {
  std::string name;            ///< the table's parameter name, or that name + kRowStateSuffix
  std::vector<int64_t> shape;  ///< its whole shape
};

/// A run of a TableEntry this rank keeps.
struct TablePiece {
  std::size_t entry = 0;  ///< index in entries()
  int64_t begin = 0;      ///< its first element in the whole tensor's row-major order
  torch::Tensor value;    ///< its elements here, which restoring writes through
};

/// Embedding tables a pass updates itself, after the optimizer's step (ParallelModel::tables).
class TableUpdates {
 public:
  virtual ~TableUpdates() = default;
  /// After the dense optimizer's step: the rows the step touched, at learning rate `lr`.
  virtual void step(double lr) = 0;
  /// The model's parameters it updates, which the dense optimizer leaves alone.
  virtual std::vector<torch::Tensor> updated() const = 0;
  /// What a checkpoint holds of the tables beyond the model's parameters, the same on every rank
  /// (their row state; sharded tables themselves), and this rank's pieces of those.
  virtual std::vector<TableEntry> entries() const = 0;
  virtual std::vector<TablePiece> pieces() const = 0;
  /// Whether the ranks keep different rows, so that a checkpoint has a shard per rank.
  virtual bool splits_state() const { return false; }
  /// Whether a forward communicates, so that every rank must run as many (an evaluation too).
  virtual bool forward_communicates() const { return false; }
  /// Every table whole in the model's parameters on rank `writer` (for model.pt) until release();
  /// every rank calls both. Where tables are apart, the writer holds them in files in `scratch_dir`
  /// (file_backed_tensor.h): whole tables may be larger than its memory.
  virtual void gather_whole(int writer, const std::string& scratch_dir) {
    (void)writer;
    (void)scratch_dir;
  }
  virtual void release() {}
  /// Bytes of table rows and of their optimizer state this rank keeps apart from the model's parameters.
  virtual int64_t parameter_bytes() const { return 0; }
  virtual int64_t state_bytes() const = 0;
};

}  // namespace ddp
