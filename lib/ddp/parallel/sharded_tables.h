#pragma once
// Embedding tables spread over the data-parallel ranks (model.embedding_sharding table or row),
// looked up by all-to-all and updated only where a batch touched them (Note [Sharded tables]).

#include "ddp/comm/process_group.h"
#include "ddp/model/model_block.h"
#include "ddp/optim/row_updates.h"
#include "ddp/parallel/table_updates.h"

namespace ddp {

/// Tables whose rows live on the data-parallel ranks that keep them: the model's lookup, and their updates.
class ShardedTables : public TableLookup, public TableUpdates {
 public:
  /// Makes this rank's rows of `tables` (the model's, named `names`, all of one width; built deferred,
  /// or whole and then freed): `mode` table keeps each table whole on one rank (the largest first,
  /// each on the rank with the fewest rows yet), row splits every table's rows into `group`'s size
  /// contiguous blocks. `method`: sgd or rowwise_adagrad.
  ShardedTables(const std::vector<EmbeddingTable>& tables, std::vector<std::string> names, const std::string& mode,
                const Communicator& group, const std::string& method, double eps);

  torch::Tensor look_up(const torch::Tensor& ids) override;

  void step(double lr) override;
  std::vector<torch::Tensor> updated() const override { return {}; }
  std::vector<TableEntry> entries() const override;
  std::vector<TablePiece> pieces() const override;
  bool splits_state() const override { return group_.world_size > 1; }
  bool forward_communicates() const override { return group_.world_size > 1; }
  void gather_whole(int writer, const std::string& scratch_dir) override;
  void release() override;
  int64_t parameter_bytes() const override { return rows_.numel() * rows_.element_size(); }
  int64_t state_bytes() const override;

  /// For the log: "model.embedding_sharding row: 26 tables of 104000 rows, 52000 of them on rank 0 of 2".
  std::string describe() const;

  // The lookup's backward hands its rows' gradients here (store indices [m], gradients [m, dim]).
  void add_gradients(torch::Tensor indices, torch::Tensor grads);

 private:
  // Where the rows of `ids` [B, F] live: each id's owning rank and its index in that rank's store, [B·F] each.
  std::pair<torch::Tensor, torch::Tensor> locate(const torch::Tensor& ids) const;

  std::vector<torch::Tensor> tables_;  // the model's, freed to [0, dim] but while gathered
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;         // rows of each table
  std::string mode_;
  Communicator group_;
  int64_t dim_ = 0;
  // Table f's rows on rank r: first_[f·W + r] .. + count_[f·W + r], at offset_[f·W + r] in r's store.
  std::vector<int64_t> first_, count_, offset_;
  torch::Tensor first_t_, offset_t_, block_t_, owner_t_;  // their lookup forms (block_t_: row; owner_t_: table)
  torch::Tensor rows_;                 // this rank's store, [rows it keeps, dim]
  RowUpdater updater_;
  std::vector<torch::Tensor> pending_indices_, pending_grads_;  // since the last step
};

}  // namespace ddp
