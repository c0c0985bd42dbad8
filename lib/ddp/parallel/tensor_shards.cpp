#include "ddp/parallel/tensor_shards.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ddp/comm/collectives.h"
#include "ddp/common/error.h"
#include "ddp/model/rank_random.h"
#include "ddp/model/routed_layers.h"
#include "ddp/parallel/tensor_parallel.h"

namespace ddp {

// Note [Tensor parallelism]
// dist.tensor T splits each transformer layer between the T neighbouring ranks of a tensor group,
// as Megatron-LM does (arXiv 1909.08053) and torchtitan's plan for Llama says it: attention's fused
// q/k/v projection and the MLP's first Linear column-parallel (each rank computes a slice of the heads
// and of the hidden units), their output projections row-parallel (each rank's partial product,
// summed over the group), the token embedding by vocabulary, and the head, tied to it, column-parallel
// over the vocabulary with the loss-parallel cross-entropy, so the logits are never gathered whole.
// A plan says which layer takes which style; the pass slices the parameters in place and routes
// the layers (Note [Routed layers]) through the regions of Note [Tensor regions]: two all-reduces
// forward and two backward per block.
// What is not split (LayerNorms, positions, the row-parallel biases) is replicated: its gradient
// is the same on every rank of the group (each comes after a sum over it), so nothing syncs it
// there, and the clipping norm and the checkpoint count it once, at the group's rank 0. A split
// parameter's slice is a box of the whole tensor (one per projection of a fused layer), which the
// checkpoint saves as it is (Note [Checkpoint format]): any layout resumes it. The data-parallel
// ranks are those of the same tensor rank; a tensor group trains one replica's batch.
// Random numbers (Megatron's RNG tracker): every rank of a group starts from the same seed and
// draws alike where the activations are replicated (the embedding's and the residual branches'
// dropout), so its masks agree there. Between a column-parallel layer and the row-parallel one
// that closes its region (attention's weights, each rank's heads) dropout draws from a generator of
// the region's own, seeded from the rank's generator and the rank in the group: the heads of
// different ranks get masks of their own. It is reseeded at each region's entry, so a checkpoint
// needs only the ranks' generators. On CUDA, dropout draws from the device's generator (the same on
// the group's ranks: the region's masks then repeat across ranks).

namespace {

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (std::size_t dot; (dot = path.find('.', at)) != std::string::npos; at = dot + 1) parts.push_back(path.substr(at, dot - at));
  parts.push_back(path.substr(at));
  return parts;
}

bool path_matches(const std::string& pattern, const std::string& path) {
  auto want = components(pattern), have = components(path);
  if (want.size() != have.size()) return false;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] != "*" && want[i] != have[i]) return false;
  return true;
}

}  // namespace

TensorShards::TensorShards(torch::nn::Module& model, const std::vector<TensorPlanEntry>& plan,
                           const std::vector<torch::Tensor>& parameters, const Communicator& group,
                           SequenceParallel sequence, DeferredInit* deferred)
    : group_(group),
      parameters_(parameters),
      boxes_(parameters.size()),
      sequence_parallel_(sequence.on),
      region_random_(at::detail::createCPUGenerator()) {
  std::map<const c10::TensorImpl*, std::size_t> index;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    index.emplace(parameters[i].unsafeGetTensorImpl(), i);
    wholes_.push_back(parameters[i].sizes().vec());
  }
  slice_shapes_ = wholes_;
  const int rank = group_.rank, parts = group_.world_size;
  torch::NoGradGuard no_grad;
  // Keeps slice `rank` along `dim` of each of the `fused` equal chunks of parameter `p`.
  auto split = [&](const torch::Tensor& p, int64_t dim, int64_t fused, const std::string& what) {
    const std::size_t i = index.at(p.unsafeGetTensorImpl());
    if (p.numel() == 0) return;  // another pipeline stage's, freed here (Note [Stage parameters])
    const std::vector<int64_t>& whole = wholes_[i];
    if (whole[dim] % (fused * parts) != 0)
      throw ConfigError(fmt::format("dist.tensor {}: {} has {} {} along dimension {}, which do not divide by it{}", parts,
                                    what, whole[dim], dim == 0 ? "rows" : "columns", dim,
                                    fused > 1 ? fmt::format(" in each of its {} projections", fused) : ""));
    std::vector<TensorBox> boxes;
    const int64_t chunk = whole[dim] / fused, mine = chunk / parts;
    for (int64_t f = 0; f < fused; ++f) {
      TensorBox box{std::vector<int64_t>(whole.size(), 0), whole};
      box.offsets[dim] = f * chunk + rank * mine;
      box.sizes[dim] = mine;
      boxes.push_back(std::move(box));
    }
    if (!boxes_[i].empty()) {  // tied to a layer split already (the head to the embedding)
      const bool same = boxes_[i].size() == boxes.size() && boxes_[i][0].offsets == boxes[0].offsets &&
                        boxes_[i][0].sizes == boxes[0].sizes;
      if (!same)
        throw ConfigError("dist.tensor: " + what + " is tied to a layer split another way");
      return;
    }
    std::vector<torch::Tensor> slices;
    std::vector<TensorPart> parts_kept;
    for (const TensorBox& box : boxes) parts_kept.push_back({box.offsets, box.sizes});
    if (auto taken = deferred ? deferred->take_parts(p, whole, parts_kept) : std::nullopt)
      slices = std::move(*taken);  // read alone, or cut from a fill (Note [Deferred initialisation])
    else
      for (const auto& piece : p.detach().chunk(fused, dim)) slices.push_back(tensor_slice(piece, dim, rank, parts));
    p.set_data(torch::cat(slices, dim).contiguous());
    slice_shapes_[i] = p.sizes().vec();
    boxes_[i] = std::move(boxes);
  };

  std::map<const torch::nn::Module*, char> styles;  // what the plan made of each layer it splits
  for (const TensorPlanEntry& entry : plan) {
    int matched = 0;
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      if (!path_matches(entry.path, item.key())) continue;
      ++matched;
      if (entry.style == "replicate") continue;
      const std::string what = item.key();
      if (auto* linear = dynamic_cast<RoutedLinear*>(item.value().get())) {
        if (entry.style == "colwise") {
          split(linear->weight, 0, linear->fused(), what + ".weight");
          if (linear->bias.defined()) split(linear->bias, 0, linear->fused(), what + ".bias");
          if (entry.output) output_first_ = rank * (linear->weight.size(0));
          const bool opens_region = !entry.output;  // a rowwise layer closes it
          linear->route([this, opens_region](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
            torch::Tensor y = column_parallel_linear(x, w, b, group_, sequence_parallel_);
            if (opens_region) open_region();
            return y;
          });
          ++colwise_;
          styles[linear] = entry.output ? 'o' : 'c';
        } else {
          if (linear->fused() > 1)
            throw ConfigError("dist.tensor: " + what + " computes " + std::to_string(linear->fused()) +
                              " projections side by side, which split colwise, not " + entry.style);
          split(linear->weight, 1, 1, what + ".weight");
          linear->route([this](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
            set_region_generator(nullptr);
            torch::Tensor y = row_parallel_linear(x, w, b, group_, sequence_parallel_);
            if (sequence_parallel_) open_region();  // the sequence region's activations are split too
            return y;
          });
          ++rowwise_;
          styles[linear] = 'r';
        }
      } else if (auto* embedding = dynamic_cast<RoutedEmbedding*>(item.value().get())) {
        if (entry.style != "rowwise")
          throw ConfigError("dist.tensor: " + what + " is an Embedding, which splits rowwise (by vocabulary), not " +
                            entry.style);
        split(embedding->weight, 0, 1, what + ".weight");
        const int64_t first = rank * embedding->weight.size(0);
        embedding->route([this, first](const torch::Tensor& ids, const torch::Tensor& w) {
          set_region_generator(nullptr);  // a forward begins in the replicated region, whatever the last one left
          return vocab_parallel_embedding(ids, w, first, group_);
        });
        ++embeddings_;
        styles[embedding] = 'e';
      } else {
        const std::string& type = item.value()->name();  // "ddp::(anonymous namespace)::LayerNorm"
        const std::string name = type.substr(type.rfind(':') + 1);
        if (name == "LinearImpl" || name == "EmbeddingImpl")  // LibTorch's own, which the model calls itself
          throw ConfigError("dist.tensor: " + what + " is a layer this model computes itself, which no plan can "
                            "split: dist.tensor_plan splits the gpt's, the llama's and TorchScript modules' layers");
        throw ConfigError("dist.tensor: " + what + " is a " + name + ", which cannot be split " + entry.style +
                          " (a Linear can, or an Embedding rowwise)");
      }
    }
    if (matched == 0) throw ConfigError("dist.tensor: the plan's " + entry.path + " matches no submodule of the model");
  }
  check_plan_order(model, styles, index);
  sequence_partial_.assign(parameters.size(), false);
  if (!sequence_parallel_) return;
  for (std::size_t i = 0; i < parameters.size(); ++i) sequence_partial_[i] = boxes_[i].empty();
  for (const auto& p : sequence.before_split)
    if (auto found = index.find(p.unsafeGetTensorImpl()); found != index.end()) sequence_partial_[found->second] = false;
}

// Note [Checking a tensor plan]: a plan that splits the wrong layers computes the wrong thing with
// no error, so what can be seen before a step is checked. A colwise layer leaves its output split
// by columns until a rowwise layer joins it, and a rowwise layer takes its input so split: each
// needs a partner of the other style in its block (a descendant of its parent module; at the top
// level, a sibling), whatever their order there (torchtitan's w1, w2, w3). A colwise layer with none
// would hand on a slice as if whole, except the logits (lm_head), which the loss-parallel
// cross-entropy takes split; a rowwise one would take a whole input as its slice. A parameter split
// through one layer and used by another the plan leaves whole (a tied head and embedding split in
// one of their roles) would be computed with as if it were the whole weight.
void TensorShards::check_plan_order(torch::nn::Module& model, const std::map<const torch::nn::Module*, char>& styles,
                                    const std::map<const c10::TensorImpl*, std::size_t>& index) const {
  std::vector<std::pair<std::string, char>> split;  // path, style ('c' or 'r'), in module order
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto style = styles.find(item.value().get());
    for (const auto& parameter : item.value()->named_parameters(/*recurse=*/false)) {
      const auto found = index.find(parameter.value().unsafeGetTensorImpl());
      if (style == styles.end() && found != index.end() && !boxes_[found->second].empty())
        throw ConfigError("dist.tensor: " + item.key() + "." + parameter.key() + " is split through a layer it is tied "
                          "to, but " + item.key() + " is not split, so it would compute with a slice as if it were the "
                          "whole weight: split " + item.key() + " too (the head colwise with the embedding rowwise)");
    }
    if (style != styles.end() && (style->second == 'c' || style->second == 'r')) split.emplace_back(item.key(), style->second);
  }
  auto parent = [](const std::string& path) {
    const auto dot = path.rfind('.');
    return dot == std::string::npos ? std::string() : path.substr(0, dot);
  };
  auto in_block = [](const std::string& block, const std::string& path) {
    return block.empty() ? path.find('.') == std::string::npos : path.rfind(block + ".", 0) == 0;
  };
  for (const auto& [path, style] : split) {
    const std::string block = parent(path);
    const bool partnered = std::any_of(split.begin(), split.end(), [&](const auto& other) {
      return other.second != style && in_block(block, other.first);
    });
    if (partnered) continue;
    if (style == 'c')
      throw ConfigError("dist.tensor: " + path + " is split colwise with no rowwise layer in its block to join its "
                        "output, which would go on as a slice; only lm_head, a gpt's or llama's logits, may stay split "
                        "(loss-parallel). Pair it with a rowwise layer, or replicate it");
    throw ConfigError("dist.tensor: " + path + " is split rowwise with no colwise layer in its block to split its "
                      "input: pair it with the colwise layer(s) that feed it, or replicate it");
  }
}

void TensorShards::open_region() const {
  // Reseeded from the rank's generator, whose draws the group's ranks share, and the rank.
  set_region_generator(nullptr);
  region_random_.set_current_seed(draw_seed() ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(group_.rank + 1)));
  set_region_generator(&region_random_);
}

torch::Tensor TensorShards::split_sequence(const torch::Tensor& x) const {
  torch::Tensor part = split_to_sequence_region(x, group_);
  open_region();
  return part;
}

void TensorShards::sum_sequence_gradients(const Placements& placements) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const PlacedPiece& piece : placements.held)
    if (sequence_partial_[piece.range.parameter] && piece.range.stepped.grad().defined())
      grads.push_back(piece.range.stepped.grad());
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat;  // one all-reduce for all of them (small: norms and biases)
  for (const auto& g : grads) flat.push_back(g.reshape(-1));
  torch::Tensor sums = all_reduce_sum(group_, torch::cat(flat));
  int64_t at = 0;
  for (auto& g : grads) {
    g.copy_(sums.narrow(0, at, g.numel()).view_as(g));
    at += g.numel();
  }
}

OwnedRange TensorShards::in_whole(OwnedRange range) const {
  const std::vector<TensorBox>& slices = boxes_[range.parameter];
  if (slices.empty()) return range;
  range.boxes = boxes_of_slice_run(slice_shapes_[range.parameter], slices, range.begin, range.value.numel());
  range.begin = 0;
  return range;
}

void TensorShards::materialize() {
  torch::NoGradGuard no_grad;
  kept_.assign(parameters_.size(), torch::Tensor());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (boxes_[i].empty()) continue;
    const torch::Tensor& p = parameters_[i];
    auto whole = torch::zeros(wholes_[i], p.options());
    auto flat = p.detach().reshape(-1);
    int64_t first = 0;
    for (const TensorBox& box : boxes_[i]) {
      narrow_to(whole, whole_box(wholes_[i]), box).copy_(flat.narrow(0, first, box.numel()).view(box.sizes));
      first += box.numel();
    }
    kept_[i] = p.detach();
    p.set_data(all_reduce_sum(group_, whole));
  }
}

void TensorShards::release() {
  for (std::size_t i = 0; i < kept_.size(); ++i)
    if (kept_[i].defined()) parameters_[i].set_data(kept_[i]);
  kept_.clear();
}

std::string TensorShards::describe() const {
  int64_t held = 0, whole = 0;  // elements of the split parameters this rank holds, and of them whole
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (boxes_[i].empty()) continue;
    for (const TensorBox& box : boxes_[i]) held += box.numel();
    whole += whole_box(wholes_[i]).numel();
  }
  const double mib = static_cast<double>(parameters_.empty() ? 4 : parameters_.front().element_size()) / (1 << 20);
  return fmt::format("dist.tensor {}: {} Linear layers split colwise and {} rowwise, {} Embedding by vocabulary{}; "
                     "this rank holds {:.2f} MiB of their {:.2f} MiB of parameters (1/{:g})",
                     group_.world_size, colwise_, rowwise_, embeddings_,
                     splits_output() ? "; the logits stay split by vocabulary (loss-parallel cross-entropy)" : "",
                     static_cast<double>(held) * mib, static_cast<double>(whole) * mib,
                     held > 0 ? static_cast<double>(whole) / static_cast<double>(held) : 0.0);
}

}  // namespace ddp
