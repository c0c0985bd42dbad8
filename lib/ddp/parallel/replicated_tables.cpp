#include "ddp/parallel/replicated_tables.h"

namespace ddp {

ReplicatedTables::ReplicatedTables(std::vector<torch::Tensor> tables, std::vector<std::string> names,
                                   const std::string& method, double eps)
    : tables_(std::move(tables)), names_(std::move(names)) {
  for (const auto& table : tables_) updaters_.emplace_back(method, table.size(0), eps, table.options());
}

void ReplicatedTables::step(double lr) {
  torch::NoGradGuard no_grad;
  for (std::size_t t = 0; t < tables_.size(); ++t) {
    const torch::Tensor& grad = tables_[t].grad();
    if (!grad.defined()) continue;
    // A row no sample named has a zero gradient; one that was named but summed to zero would not
    // move under either method, so the two sets step alike.
    torch::Tensor rows = grad.ne(0).any(1).nonzero().squeeze(1);
    updaters_[t].update(tables_[t], rows, grad.index_select(0, rows), lr);
  }
}

std::vector<TableEntry> ReplicatedTables::entries() const {
  std::vector<TableEntry> entries;
  for (std::size_t t = 0; t < tables_.size(); ++t)
    if (updaters_[t].state().defined()) entries.push_back({names_[t] + kRowStateSuffix, {tables_[t].size(0)}});
  return entries;
}

std::vector<TablePiece> ReplicatedTables::pieces() const {
  std::vector<TablePiece> pieces;
  for (std::size_t t = 0; t < tables_.size(); ++t)
    if (updaters_[t].state().defined()) pieces.push_back({pieces.size(), 0, updaters_[t].state()});
  return pieces;
}

int64_t ReplicatedTables::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& updater : updaters_)
    if (updater.state().defined()) bytes += updater.state().numel() * updater.state().element_size();
  return bytes;
}

}  // namespace ddp
