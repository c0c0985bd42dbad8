// DLRM (Naumov et al., arXiv 1906.00091; facebookresearch/dlrm's dot interaction), on the Criteo
// layout. Input: float64 [B, 13 + 26], the 13 log counts then the 26 categorical hashes, which
// float64 holds exactly (they are 32-bit). Each hash is folded into its table (hash mod rows), so a
// table's size is the model's choice, as DLRM's --max-ind-range makes it. The bottom MLP maps the
// counts to one vector of embedding_dim (ReLU after every layer); with the 26 looked-up rows that
// makes 27 vectors, whose 351 pairwise dot products (i > j, row by row) follow the bottom output into
// the top MLP, which ends in one logit (no ReLU after its last layer).
//
// Names: embeddings.F.weight (F = 0..25), bottom.K.weight / .bias and top.K.weight / .bias for the
// K-th Linear. Blocks: the features (tables, bottom MLP, interaction), then each top Linear.
//
// The tables start as DLRM's do, uniform in ±sqrt(1 / rows), but each block of 65,536 rows from a
// generator of its own, seeded from one draw of the run's: a rank that keeps some rows of a table
// makes those alone, and gets what a whole table would hold (Note [Sharded tables]). So does a
// rank that keeps part of a replicated table in a deferred build (dist.shard parameters, Note
// [Deferred initialisation]), and the MLPs' layers are deferred as the mlp family's are.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn.h>

#include "ddp/common/error.h"
#include "ddp/common/splitmix64.h"
#include "ddp/config/config_schema.h"
#include "ddp/model/deferred_init.h"
#include "ddp/model/drawn_layers.h"
#include "ddp/model/model_registry.h"

namespace ddp {
namespace {

// The Criteo layout (ddp/data/criteo_file.h, which this area does not include): the task checks the
// data against input_shape() and takes_stored_features().
constexpr int64_t kCriteoDense = 13;
constexpr int64_t kTables = 26;
// Rows a table's generator makes at a time (Note above): a rank's rows cost at most two blocks more.
constexpr int64_t kRowsPerSeed = 1 << 16;

class Dlrm : public Model {
 public:
  /// `defer_tables`: the tables empty, for a pass to fill (ModelContext).
  Dlrm(const DlrmConfig& config, bool defer_tables)
      : dim_(config.embedding_dim),
        seed_(static_cast<uint64_t>(torch::randint(int64_t{1} << 62, {1}, torch::kLong).item<int64_t>())) {
    torch::NoGradGuard no_grad;
    torch::nn::ModuleList tables;
    for (int64_t f = 0; f < kTables; ++f) {
      const int64_t rows = config.embedding_rows.size() == 1 ? config.embedding_rows[0] : config.embedding_rows[f];
      rows_.push_back(rows);
      auto table = std::make_shared<torch::nn::Module>();
      tables_.push_back(table->register_parameter("weight", torch::empty({defer_tables ? 0 : rows, dim_})));
      if (!defer_tables)
        init_parameter_without_draws(
            tables_.back(), [this, f](torch::Tensor& weight) { weight.copy_(initial_rows(f, 0, rows_[f])); },
            [this, f](c10::IntArrayRef view, const TensorPart& part) { return table_part(f, view, part); });
      tables->push_back(table);
    }
    register_module("embeddings", tables);
    rows_tensor_ = torch::tensor(rows_, torch::kLong);
    bottom_ = make_mlp("bottom", kCriteoDense, config.bottom_mlp, dim_);
    const int64_t pairs = (kTables + 1) * kTables / 2;
    top_ = make_mlp("top", dim_ + pairs, config.top_mlp, 1);
    auto [i, j] = pair_indices();
    pair_i_ = i;
    pair_j_ = j;
  }

  std::vector<int64_t> input_shape() const override { return {kCriteoDense + kTables}; }
  int64_t output_width() const override { return 1; }
  bool takes_stored_features() const override { return true; }
  std::vector<EmbeddingTable> embedding_tables() override {
    std::vector<EmbeddingTable> tables;
    for (int64_t f = 0; f < kTables; ++f)
      tables.push_back({tables_[f], rows_[f], dim_, [this, f](int64_t first, int64_t count) {
                          return initial_rows(f, first, count);
                        }});
    return tables;
  }

 protected:
  std::vector<ModelBlock> declare_blocks() override {
    std::vector<ModelBlock> blocks;
    std::vector<torch::Tensor> features;
    for (const auto& table : tables_) features.push_back(table);
    for (const auto& linear : bottom_)
      for (const auto& p : linear->parameters()) features.push_back(p);
    blocks.push_back({"features", features, {}, [this](torch::Tensor x) { return interact(x); }});
    for (std::size_t k = 0; k < top_.size(); ++k) {
      const bool last = k + 1 == top_.size();
      blocks.push_back({"top." + std::to_string(k), top_[k]->parameters(), {},
                        [linear = top_[k].ptr(), last](torch::Tensor x) {
                          x = linear->forward(x);
                          return last ? x : torch::relu(x);
                        }});
    }
    return blocks;
  }

 private:
  std::vector<torch::nn::Linear> make_mlp(const std::string& name, int64_t in, const std::vector<int64_t>& hidden,
                                          int64_t out) {
    std::vector<torch::nn::Linear> layers;
    torch::nn::ModuleList list;
    std::vector<int64_t> widths = hidden;
    widths.push_back(out);
    for (int64_t width : widths) {
      layers.push_back(drawn_linear(in, width));
      list->push_back(layers.back());
      in = width;
    }
    register_module(name, list);
    return layers;
  }

  // Rows [first, first + count) of table f as initialised: DLRM's uniform in ±sqrt(1 / rows), each
  // block of kRowsPerSeed rows from its own generator.
  torch::Tensor initial_rows(int64_t f, int64_t first, int64_t count) const {
    const int64_t rows = rows_[static_cast<std::size_t>(f)];
    const double bound = std::sqrt(1.0 / static_cast<double>(rows));
    torch::Tensor out = torch::empty({count, dim_});
    for (int64_t block = first / kRowsPerSeed; block * kRowsPerSeed < first + count; ++block) {
      const int64_t begin = block * kRowsPerSeed, size = std::min(kRowsPerSeed, rows - begin);
      uint64_t state = seed_ ^ (static_cast<uint64_t>(f) << 48) ^ static_cast<uint64_t>(block);
      auto generator = at::detail::createCPUGenerator(splitmix64(state));
      torch::Tensor made = torch::empty({size, dim_}).uniform_(-bound, bound, generator);
      const int64_t from = std::max(first, begin), to = std::min(first + count, begin + size);
      out.narrow(0, from - first, to - from).copy_(made.narrow(0, from - begin, to - from));
    }
    return out;
  }

  // `part` of table f viewed as `view`: its rows alone are made (a run of its elements is a run of rows).
  torch::Tensor table_part(int64_t f, c10::IntArrayRef view, const TensorPart& part) const {
    const int64_t rows = rows_[static_cast<std::size_t>(f)];
    if (view.size() == 2)
      return initial_rows(f, part.offsets[0], part.sizes[0]).narrow(1, part.offsets[1], part.sizes[1]).contiguous();
    if (view.size() != 1) return cut_part(initial_rows(f, 0, rows), view, part);
    const int64_t begin = part.offsets[0], end = begin + part.sizes[0];
    if (end <= begin) return torch::empty({0});
    const int64_t first = begin / dim_, last = (end - 1) / dim_;
    return initial_rows(f, first, last - first + 1).reshape(-1).narrow(0, begin - first * dim_, end - begin).clone();
  }

  // The strictly lower triangle of the 27 × 27 products, row by row, as DLRM's dot interaction takes it.
  static std::pair<torch::Tensor, torch::Tensor> pair_indices() {
    std::vector<int64_t> is, js;
    for (int64_t i = 0; i <= kTables; ++i)
      for (int64_t j = 0; j < i; ++j) {
        is.push_back(i);
        js.push_back(j);
      }
    return {torch::tensor(is, torch::kLong), torch::tensor(js, torch::kLong)};
  }

  // Counts and hashes in, the top MLP's input out: [B, dim + 351].
  torch::Tensor interact(const torch::Tensor& x) {
    if (x.dim() != 2 || x.size(1) != kCriteoDense + kTables)
      throw UserError("model.name dlrm takes [batch, 39] (13 counts, 26 categorical hashes), got " +
                      std::string(c10::str(x.sizes())));
    torch::Tensor dense = x.narrow(1, 0, kCriteoDense).to(torch::kFloat);
    for (std::size_t k = 0; k < bottom_.size(); ++k) dense = torch::relu(bottom_[k]->forward(dense));
    torch::Tensor ids = x.narrow(1, kCriteoDense, kTables).to(torch::kLong).remainder(rows_tensor_.to(x.device()));
    torch::Tensor stacked = torch::cat({dense.unsqueeze(1), look_up(ids)}, 1);  // [B, 27, dim]
    torch::Tensor products = torch::bmm(stacked, stacked.transpose(1, 2));  // [B, 27, 27]
    torch::Tensor pairs = products.index({torch::indexing::Slice(), pair_i_.to(x.device()), pair_j_.to(x.device())});
    return torch::cat({dense, pairs}, 1);
  }

  int64_t dim_;
  uint64_t seed_;  // the tables' generators' (Note above)
  std::vector<int64_t> rows_;
  torch::Tensor rows_tensor_, pair_i_, pair_j_;
  std::vector<torch::Tensor> tables_;  // embeddings.F.weight
  std::vector<torch::nn::Linear> bottom_, top_;
};

}  // namespace

void declare_config(ConfigSchema& schema, DlrmConfig& config, const std::string& model_name) {
  schema.add("model.embedding_dim", &config.embedding_dim,
             "dlrm: the width of each embedding row and of the bottom MLP's output")
      .min(1)
      .max(1e5);
  schema.add("model.embedding_rows", &config.embedding_rows,
             "dlrm: rows of the 26 embedding tables, one value for all or one per table (C1..C26); each "
             "categorical hash is taken modulo its table's rows")
      .min(1)
      .max(1e10);
  schema.add("model.bottom_mlp", &config.bottom_mlp,
             "dlrm: hidden widths of the MLP over the 13 counts, which then outputs model.embedding_dim")
      .min(1)
      .max(1e6);
  schema.add("model.top_mlp", &config.top_mlp,
             "dlrm: hidden widths of the MLP over the interactions, which then outputs one logit")
      .min(1)
      .max(1e6);
  schema.rule("model.embedding_rows", [&config, &model_name]() -> std::string {
    const auto n = config.embedding_rows.size();
    return model_name == "dlrm" && n != 1 && n != static_cast<std::size_t>(kTables)
               ? "expected one value for every table or " + std::to_string(kTables) + " (one per categorical feature), got " +
                     std::to_string(n)
               : "";
  });
}

/// Registers "dlrm"; called from model_registry.cpp (Note [Registries]).
void register_dlrm(ModelFactories& factories) {
  factories.add("dlrm", [](const ModelConfig& config, const ModelContext& context) {
    return std::make_shared<Dlrm>(config.dlrm, context.defer_tables);
  });
}

}  // namespace ddp
