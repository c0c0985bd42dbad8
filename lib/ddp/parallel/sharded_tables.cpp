#include "ddp/parallel/sharded_tables.h"

#include <torch/autograd.h>

#include <algorithm>
#include <numeric>

#include "ddp/comm/collectives.h"
#include "ddp/parallel/file_backed_tensor.h"
#include "ddp/common/error.h"

namespace ddp {

// Note [Sharded tables]
// A click-through model's tables can outgrow a rank's memory; the dense rest of it cannot. As in
// TorchRec, model.embedding_sharding keeps each table's rows on one rank: `table` puts each table
// whole on some rank, `row` splits every table's rows into contiguous blocks, one per rank (which
// also spreads a hot table's traffic). The rest of the model stays data-parallel.
// A lookup is two all-to-alls over the data-parallel ranks: each rank sends every id of its batch
// to the rank that keeps the row (sorted by that rank, the counts first), the owners gather the rows
// and send them back, and the rank puts them back in its batch's order. Backward is the reverse:
// the rows' gradients go to their owners, which keep them until the step; there the gradients of
// each row are summed (over micro-batches and ranks), divided by the ranks as the dense gradients
// are averaged, and only those rows are updated (Note [Row updates]). No rank ever holds a dense
// gradient of a table, or a row it does not keep, but rank 0 while it writes model.pt.
// Every rank computes where every row lives from the table sizes alone, so a lookup needs no
// directory. An evaluation runs every rank through as many forwards (empty ones where its share of
// the split ran out), since each lookup waits for every rank.
// Ranks' tables start as the plain model's do: the model is built with its tables deferred (empty),
// and each rank makes its own rows alone (EmbeddingTable::initial_rows); a checkpoint saves each rank's rows as pieces of the whole tables, so that it
// resumes at any world size and under replicate too.

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<int64_t> to_counts(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kCPU).to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// The lookup as autograd sees it: rows out of `store` (which only marks the output as needing a
// gradient; its gradient goes to the tables' pending updates, not to autograd).
struct AllToAllLookup : torch::autograd::Function<AllToAllLookup> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& store,
                               const torch::Tensor& owner, const torch::Tensor& index, ShardedTables* tables,
                               const Communicator* group, std::vector<int64_t> shape) {
    torch::NoGradGuard no_grad;
    const int world = group->world_size;
    torch::Tensor order = std::get<1>(owner.sort(/*stable=*/true, 0, false));
    std::vector<int64_t> send = to_counts(torch::bincount(owner, {}, world));
    std::vector<int64_t> ones(static_cast<std::size_t>(world), 1);
    std::vector<int64_t> recv = to_counts(all_to_all(*group, torch::tensor(send, torch::kLong), ones, ones));
    torch::Tensor wanted = all_to_all(*group, index.index_select(0, order), send, recv);
    torch::Tensor found = all_to_all(*group, store.index_select(0, wanted), recv, send);
    torch::Tensor rows = torch::empty_like(found).index_copy_(0, order, found);
    ctx->save_for_backward({order, wanted});
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["tables"] = reinterpret_cast<int64_t>(tables);
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    shape.push_back(store.size(1));
    return rows.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& order = saved[0];
    auto* tables = reinterpret_cast<ShardedTables*>(ctx->saved_data["tables"].toInt());
    auto* group = reinterpret_cast<const Communicator*>(ctx->saved_data["group"].toInt());
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    torch::Tensor grad = grads[0].reshape({order.size(0), grads[0].size(-1)}).index_select(0, order);
    tables->add_gradients(saved[1], all_to_all(*group, grad, send, recv));
    return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ShardedTables::ShardedTables(const std::vector<EmbeddingTable>& tables, std::vector<std::string> names,
                             const std::string& mode, const Communicator& group, const std::string& method, double eps)
    : names_(std::move(names)),
      mode_(mode),
      group_(group),
      dim_(tables.front().dim),
      updater_(method, 0, eps, tables.front().weight.options()) {
  torch::NoGradGuard no_grad;
  const auto world = static_cast<std::size_t>(group_.world_size), F = tables.size();
  for (const auto& t : tables) {
    if (t.dim != dim_) throw ConfigError("model.embedding_sharding " + mode_ + ": every table must be as wide");
    tables_.push_back(t.weight);
    sizes_.push_back(t.rows);
  }
  first_.assign(F * world, 0);
  count_.assign(F * world, 0);
  std::vector<int64_t> owner(F, 0), block(F, 1);
  if (mode_ == "row") {
    for (std::size_t f = 0; f < F; ++f) {
      block[f] = ceil_div(sizes_[f], group_.world_size);
      for (std::size_t r = 0; r < world; ++r) {
        const int64_t first = static_cast<int64_t>(r) * block[f];
        first_[f * world + r] = first;
        count_[f * world + r] = std::max<int64_t>(0, std::min(sizes_[f], first + block[f]) - first);
      }
    }
  } else {  // table: the largest tables first, each on the rank with the fewest rows yet
    std::vector<std::size_t> by_size(F);
    std::iota(by_size.begin(), by_size.end(), 0);
    std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) { return sizes_[a] > sizes_[b]; });
    std::vector<int64_t> load(world, 0);
    for (std::size_t f : by_size) {
      const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      owner[f] = static_cast<int64_t>(r);
      load[r] += sizes_[f];
      count_[f * world + r] = sizes_[f];
    }
  }
  offset_.assign(F * world, 0);
  std::vector<int64_t> used(world, 0);
  for (std::size_t f = 0; f < F; ++f)
    for (std::size_t r = 0; r < world; ++r) {
      offset_[f * world + r] = used[r];
      used[r] += count_[f * world + r];
    }
  const auto me = static_cast<std::size_t>(group_.rank);
  auto options = tables_.front().options();
  rows_ = torch::empty({used[me], dim_}, options);
  for (std::size_t f = 0; f < F; ++f) {
    const std::size_t at = f * world + me;
    if (count_[at] > 0) rows_.narrow(0, offset_[at], count_[at]).copy_(tables[f].initial_rows(first_[at], count_[at]));
    tables_[f].set_data(torch::empty({0, dim_}, options));  // a table built whole: freed
  }
  rows_.requires_grad_(true);
  updater_ = RowUpdater(method, used[me], eps, options);
  auto on = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(options.device()); };
  first_t_ = on(first_);
  offset_t_ = on(offset_);
  block_t_ = on(block);
  owner_t_ = on(owner);
}

std::pair<torch::Tensor, torch::Tensor> ShardedTables::locate(const torch::Tensor& ids) const {
  const int64_t F = static_cast<int64_t>(tables_.size());
  if (ids.dim() != 2 || ids.size(1) != F)
    throw UserError("sharded tables: expected ids [batch, " + std::to_string(F) + "], got " + c10::str(ids.sizes()));
  torch::Tensor owner = mode_ == "row" ? ids.div(block_t_.unsqueeze(0), "floor") : owner_t_.unsqueeze(0).expand_as(ids);
  torch::Tensor at = (torch::arange(F, ids.options()).unsqueeze(0) * group_.world_size + owner).reshape(-1);
  torch::Tensor index = offset_t_.index_select(0, at) + ids.reshape(-1) - first_t_.index_select(0, at);
  return {owner.reshape(-1).contiguous(), index};
}

torch::Tensor ShardedTables::look_up(const torch::Tensor& ids) {
  auto [owner, index] = locate(ids);
  return AllToAllLookup::apply(rows_, owner, index, this, &group_, ids.sizes().vec());
}

void ShardedTables::add_gradients(torch::Tensor indices, torch::Tensor grads) {
  pending_indices_.push_back(std::move(indices));
  pending_grads_.push_back(std::move(grads));
}

void ShardedTables::step(double lr) {
  if (pending_indices_.empty()) return;
  auto [rows, summed] = coalesce_rows(torch::cat(pending_indices_), torch::cat(pending_grads_));
  pending_indices_.clear();
  pending_grads_.clear();
  updater_.update(rows_, rows, summed / static_cast<double>(group_.world_size), lr);
}

std::vector<TableEntry> ShardedTables::entries() const {
  std::vector<TableEntry> entries;
  for (std::size_t f = 0; f < tables_.size(); ++f) entries.push_back({names_[f], {sizes_[f], dim_}});
  if (updater_.state().defined())
    for (std::size_t f = 0; f < tables_.size(); ++f) entries.push_back({names_[f] + kRowStateSuffix, {sizes_[f]}});
  return entries;
}

std::vector<TablePiece> ShardedTables::pieces() const {
  std::vector<TablePiece> pieces;
  const auto world = static_cast<std::size_t>(group_.world_size), me = static_cast<std::size_t>(group_.rank);
  const std::size_t F = tables_.size();
  for (std::size_t f = 0; f < F; ++f) {
    const std::size_t at = f * world + me;
    if (count_[at] == 0) continue;
    pieces.push_back({f, first_[at] * dim_, rows_.detach().narrow(0, offset_[at], count_[at])});
    if (updater_.state().defined()) pieces.push_back({F + f, first_[at], updater_.state().narrow(0, offset_[at], count_[at])});
  }
  return pieces;
}

void ShardedTables::gather_whole(int writer, const std::string& scratch_dir) {
  torch::NoGradGuard no_grad;
  const auto world = static_cast<std::size_t>(group_.world_size), me = static_cast<std::size_t>(group_.rank);
  for (std::size_t f = 0; f < tables_.size(); ++f) {
    // Each rank's rows to the writer, in rank order: for row, that is the table's order already.
    std::vector<int64_t> send(world, 0), recv(world, 0);
    send[static_cast<std::size_t>(writer)] = count_[f * world + me];
    if (group_.rank == writer)
      for (std::size_t r = 0; r < world; ++r) recv[r] = count_[f * world + r];
    torch::Tensor mine = rows_.detach().narrow(0, offset_[f * world + me], count_[f * world + me]);
    // The whole tables, together, may be more than the writer's memory: they go to files (the page
    // cache), from which model.pt's writers read them.
    torch::Tensor whole = group_.rank == writer ? file_backed_empty({sizes_[f], dim_}, rows_.scalar_type(), scratch_dir)
                                                : torch::empty({0, dim_}, rows_.options());
    all_to_all(group_, mine, send, recv, whole);
    if (group_.rank == writer) tables_[f].set_data(whole);
  }
}

void ShardedTables::release() {
  torch::NoGradGuard no_grad;
  for (auto& table : tables_) table.set_data(torch::empty({0, dim_}, table.options()));
}

int64_t ShardedTables::state_bytes() const {
  return updater_.state().defined() ? updater_.state().numel() * updater_.state().element_size() : 0;
}

std::string ShardedTables::describe() const {
  int64_t total = 0;
  for (int64_t n : sizes_) total += n;
  const auto [fewest, most] = std::minmax_element(sizes_.begin(), sizes_.end());
  const std::string each =
      *fewest == *most ? std::to_string(*most) : std::to_string(*fewest) + " to " + std::to_string(*most);
  return "model.embedding_sharding " + mode_ + ": " + std::to_string(tables_.size()) + " tables of " + each +
         " rows, " + std::to_string(total) + " in all, " + std::to_string(rows_.size(0)) + " of them on rank " +
         std::to_string(group_.rank) + " of " + std::to_string(group_.world_size);
}

}  // namespace ddp
