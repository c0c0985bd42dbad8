#pragma once
// Replicated embedding tables updated row by row (optim.embeddings sgd or rowwise_adagrad with
// model.embedding_sharding replicate): the plain model's tables, their gradients all-reduced whole
// with the rest, then only the rows with a gradient stepped (Note [Row updates]). The reference the
// sharded tables must equal, and the bench's dense all-reduce.

#include "ddp/optim/row_updates.h"
#include "ddp/parallel/table_updates.h"

namespace ddp {

/// The model's own tables, stepped row by row from their whole, synced gradients.
class ReplicatedTables : public TableUpdates {
 public:
  /// `tables`: the model's, named `names`; `method`: sgd or rowwise_adagrad.
  ReplicatedTables(std::vector<torch::Tensor> tables, std::vector<std::string> names, const std::string& method,
                   double eps);

  void step(double lr) override;
  std::vector<torch::Tensor> updated() const override { return tables_; }
  std::vector<TableEntry> entries() const override;
  std::vector<TablePiece> pieces() const override;
  int64_t state_bytes() const override;

 private:
  std::vector<torch::Tensor> tables_;
  std::vector<std::string> names_;
  std::vector<RowUpdater> updaters_;
};

}  // namespace ddp
