#include "ddp/model/gpt.h"

#include <spdlog/spdlog.h>
#include <torch/nn.h>
#include <torch/version.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ddp/common/error.h"
#include "ddp/config/config_schema.h"
#include "ddp/model/deferred_init.h"
#include "ddp/model/gpt2_layout.h"
#include "ddp/model/hugging_face.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/rank_random.h"
#include "ddp/model/routed_layers.h"
#include "ddp/model/state_dict_file.h"
#include "ddp/model/token_stepper.h"

namespace ddp {

// Note [Attention forms]
// nanoGPT attends with torch's fused scaled_dot_product_attention where the torch has it (2.x),
// and otherwise with the explicit form, softmax(q kᵀ / sqrt(d) masked above the diagonal) v,
// whose mask it keeps as a persistent buffer `attn.bias`: tril(ones(block, block)) viewed
// [1, 1, block, block]. So a nanoGPT state_dict has attn.bias keys exactly when its torch lacks the
// fused form. We do the same, per LibTorch, so model.pt loads with strict=True into nanoGPT on the
// torch of the same major version. The buffer is what Python sees; the step adds a precomputed
// additive mask (0 on and below the diagonal, -inf above), inside the same batched matmul that
// scales q kᵀ: the same values as masked_fill(-inf), with no mask rebuilt per step.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kFusedAttention = true;
#else
constexpr bool kFusedAttention = false;
#endif

bool gpt_fused_attention() { return kFusedAttention; }

namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

std::shared_ptr<RoutedLinear> routed_linear(int64_t in, int64_t out, bool bias, int64_t fused = 1) {
  return std::make_shared<RoutedLinear>(in, out, bias, fused);
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return p > 0 && training ? rank_dropout(x, p, true) : x;
}

// nanoGPT's LayerNorm: a weight, and a bias only when the model has biases.
class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t width, bool bias) : width_(width) {
    weight_ = register_parameter("weight", torch::ones({width}));
    if (bias) bias_ = register_parameter("bias", torch::zeros({width}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {width_}, weight_, bias_, 1e-5);
  }

 private:
  int64_t width_;
  torch::Tensor weight_, bias_;
};

class CausalSelfAttention : public torch::nn::Module {
 public:
  explicit CausalSelfAttention(const GptOptions& o)
      : head_dim_(o.n_embd / o.n_head), dropout_(o.dropout), fused_(o.fused_attention) {
    c_attn = register_module("c_attn", routed_linear(o.n_embd, 3 * o.n_embd, o.bias, /*fused=*/3));
    c_proj = register_module("c_proj", routed_linear(o.n_embd, o.n_embd, o.bias));
    if (!fused_) {  // Note [Attention forms]
      auto lower = torch::ones({o.block_size, o.block_size}).tril();
      register_buffer("bias", lower.view({1, 1, o.block_size, o.block_size}));
      additive_mask_ = torch::zeros({o.block_size, o.block_size}).masked_fill(lower == 0, -INFINITY);
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    // The heads and positions this layer computes: all of them, or a tensor-parallel slice of the
    // heads over the whole sequence, whatever part of it `x` holds (Note [Routed layers]).
    auto qkv = c_attn->forward(x).chunk(3, 2);
    const int64_t b = qkv[0].size(0), t = qkv[0].size(1), d = head_dim_;
    const int64_t heads = qkv[0].size(2) / d, c = heads * d;
    // [B, T, H·d] → [B, H, T, d]
    auto split_heads = [&](const torch::Tensor& z) { return z.view({b, t, heads, d}).transpose(1, 2); };
    torch::Tensor q = split_heads(qkv[0]), k = split_heads(qkv[1]), v = split_heads(qkv[2]), y;
    double p = is_training() ? dropout_ : 0.0;
#if TORCH_VERSION_MAJOR >= 2
    if (fused_) {
      y = torch::scaled_dot_product_attention(q, k, v, {}, p, /*is_causal=*/true);
      return maybe_dropout(c_proj->forward(y.transpose(1, 2).reshape({b, t, c})), dropout_, is_training());
    }
#endif
    if (additive_mask_.device() != x.device()) additive_mask_ = additive_mask_.to(x.device());
    auto mask = additive_mask_.narrow(0, 0, t).narrow(1, 0, t);
    auto scores = torch::baddbmm(mask, q.reshape({b * heads, t, d}), k.reshape({b * heads, t, d}).transpose(1, 2),
                                 /*beta=*/1, /*alpha=*/1.0 / std::sqrt(static_cast<double>(d)));
    auto weights = maybe_dropout(torch::softmax(scores, -1), p, p > 0);
    y = torch::bmm(weights, v.reshape({b * heads, t, d})).view({b, heads, t, d});
    y = y.transpose(1, 2).reshape({b, t, c});
    return maybe_dropout(c_proj->forward(y), dropout_, is_training());
  }

  std::shared_ptr<RoutedLinear> c_attn, c_proj;

 private:
  int64_t head_dim_;
  double dropout_;
  bool fused_;
  torch::Tensor additive_mask_;
};

class GptMlp : public torch::nn::Module {
 public:
  explicit GptMlp(const GptOptions& o) : dropout_(o.dropout) {
    c_fc = register_module("c_fc", routed_linear(o.n_embd, 4 * o.n_embd, o.bias));
    c_proj = register_module("c_proj", routed_linear(4 * o.n_embd, o.n_embd, o.bias));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return maybe_dropout(c_proj->forward(torch::gelu(c_fc->forward(x))), dropout_, is_training());
  }

  std::shared_ptr<RoutedLinear> c_fc, c_proj;

 private:
  double dropout_;
};

class Block : public torch::nn::Module {
 public:
  explicit Block(const GptOptions& o) {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(o.n_embd, o.bias));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(o));
    ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(o.n_embd, o.bias));
    mlp = register_module("mlp", std::make_shared<GptMlp>(o));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln_1->forward(x));
    return x + mlp->forward(ln_2->forward(x));
  }

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GptMlp> mlp;
};

// nanoGPT's crop_block_size: weights made for more positions than model.block_size keep wpe's first
// rows (model.init_from of GPT-2's 1024 for fine-tuning at 256, say). A run's share of the kept rows
// is the same box, or the same run of elements, of the whole.
StoredTensors keep_first_positions(StoredTensors file, int64_t block_size, const std::string& source) {
  for (auto& [name, tensor] : file) {
    if (name != "transformer.wpe.weight" || tensor.shape.size() != 2 || tensor.shape[0] <= block_size) continue;
    const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
    spdlog::info(
        "{}: its {} positions (wpe) are more than model.block_size {}: the first {} are kept, as nanoGPT's "
        "crop_block_size keeps them",
        source, rows, block_size, block_size);
    auto read_kept = [read = tensor.read, block_size] { return read().narrow(0, 0, block_size).contiguous(); };
    MakePart read_part;
    if (tensor.read_part)
      read_part = [whole = tensor.read_part, read_kept, rows, cols](at::IntArrayRef view, const TensorPart& part) {
        if (view.size() == 2 && view[1] == cols) return whole({rows, cols}, part);
        if (view.size() == 1) return whole({rows * cols}, part);
        return cut_part(read_kept(), view, part);
      };
    tensor = StoredTensor{{block_size, cols}, tensor.dtype, read_kept, read_part};
  }
  return file;
}

}  // namespace

class GptTransformer : public torch::nn::Module {
 public:
  explicit GptTransformer(const GptOptions& o) {
    wte = register_module("wte", std::make_shared<RoutedEmbedding>(o.vocab_size, o.n_embd));
    wpe = register_module("wpe", torch::nn::Embedding(o.block_size, o.n_embd));
    h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.n_layer; ++i) {
      blocks.push_back(std::make_shared<Block>(o));
      h->push_back(blocks.back());
    }
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(o.n_embd, o.bias));
  }

  std::shared_ptr<RoutedEmbedding> wte;
  torch::nn::Embedding wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<LayerNorm> ln_f;
};

GptOptions gpt_options(const ModelConfig& model) {
  const GptConfig& config = model.gpt;
  if (config.n_embd % config.n_head != 0)
    throw ConfigError("model.n_head: model.n_embd " + std::to_string(config.n_embd) + " must divide by it (" +
                      std::to_string(config.n_head) + " heads)");
  GptOptions o;
  o.n_layer = config.n_layer;
  o.n_head = config.n_head;
  o.n_embd = config.n_embd;
  o.block_size = model.block_size;
  o.vocab_size = config.vocab_size;
  o.bias = config.bias;
  o.dropout = config.dropout;
  return o;
}

Gpt::Gpt(const GptOptions& options) : options_(options) {
  if (options.fused_attention && !kFusedAttention)
    throw UserError("the fused scaled_dot_product_attention needs LibTorch 2.x; this is " TORCH_VERSION);
  // Built in nanoGPT's order, so each layer's default initialisation draws what Python's does...
  transformer_ = register_module("transformer", std::make_shared<GptTransformer>(options));
  (void)linear(options.n_embd, options.vocab_size, false);  // nanoGPT's lm_head, built and then tied
  head_weight_ = transformer_->wte->weight;
  // lm_head: no weight of its own, the token embedding's under its name.
  lm_head_ = register_module("lm_head", std::make_shared<RoutedLinear>(head_weight_));
  // ...then nanoGPT's _init_weights, in module.apply's order (the tied lm_head last, as its Linear),
  // and the residual projections scaled by 1/sqrt(2·n_layer); each fill through init_parameter, so
  // that a deferred build replays it (Note [Deferred initialisation]).
  auto normal = [](double std) { return [std](torch::Tensor& t) { t.normal_(0, std); }; };
  auto init_linear = [&normal](const std::shared_ptr<RoutedLinear>& layer) {
    init_parameter(layer->weight, normal(0.02));
    if (layer->bias.defined()) init_parameter(layer->bias, [](torch::Tensor& b) { b.zero_(); });
  };
  init_parameter(transformer_->wte->weight, normal(0.02));
  init_parameter(transformer_->wpe->weight, normal(0.02));
  for (const auto& block : transformer_->blocks)
    for (const auto& layer : {block->attn->c_attn, block->attn->c_proj, block->mlp->c_fc, block->mlp->c_proj})
      init_linear(layer);
  init_parameter(head_weight_, normal(0.02));
  double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(options.n_layer));
  for (const auto& block : transformer_->blocks) {
    init_parameter(block->attn->c_proj->weight, normal(residual_std));
    init_parameter(block->mlp->c_proj->weight, normal(residual_std));
  }
}

void Gpt::load_weights(const std::string& path) {
  auto file = open_state_dict_file(path);
  if (is_gpt2_layout(file)) file = gpt_from_gpt2_layout(file, options_.bias, path);
  file = keep_first_positions(std::move(file), options_.block_size, path);
  // The mask buffer only one attention form keeps; lm_head, tied to wte, which GPT-2's files leave out.
  const std::string buffer = ".attn.bias";
  load_state_dict_entries(*this, file, path, [&buffer](const std::string& name) {
    return name == "lm_head.weight" ||
           (name.size() > buffer.size() && name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0);
  });
}

std::vector<std::pair<std::string, torch::Tensor>> Gpt::hugging_face_state_dict() const {
  return gpt_to_gpt2_layout(python_state_dict(*this));
}

void Gpt::save_extras(const std::string& output_dir) const {
  const GptOptions& o = options_;
  nlohmann::json carried = carried_hugging_face_config(hugging_face_config());
  carried.erase("n_ctx");  // older GPT-2 files' n_positions, which a shorter block_size would contradict
  write_hugging_face_config(output_dir,
                            gpt2_config(o.n_layer, o.n_head, o.n_embd, o.block_size, o.vocab_size, o.bias, o.dropout,
                                        head_weight_.scalar_type()),
                            carried);
}

std::unique_ptr<TokenStepper> Gpt::token_stepper() {
  return std::make_unique<WindowStepper>(*this, options_.block_size);
}

torch::Tensor Gpt::embed(const torch::Tensor& idx) {
  if (idx.dim() != 2 || idx.scalar_type() != torch::kLong)
    throw UserError("model.name gpt takes int64 token ids [B, T], got " + std::string(idx.toString()) + " of " +
                    std::to_string(idx.dim()) + " dimensions");
  const int64_t t = idx.size(1);
  if (t > options_.block_size)
    throw UserError("model.block_size: a sequence of " + std::to_string(t) + " tokens is longer than the " +
                    std::to_string(options_.block_size) + " positions the model has");
  // Positions 0..T-1 are the first T rows of wpe: the embedding of arange(T), without the gather.
  torch::Tensor x = transformer_->wte->forward(idx) + transformer_->wpe->weight.narrow(0, 0, t);
  return maybe_dropout(x, options_.dropout, is_training());
}

torch::Tensor Gpt::head(const torch::Tensor& x) {
  return lm_head_->forward(transformer_->ln_f->forward(x));
}

std::vector<ModelBlock> Gpt::declare_blocks() {
  std::vector<ModelBlock> layers;
  layers.push_back({"transformer.wte", {transformer_->wte->weight, transformer_->wpe->weight}, {},
                    [this](torch::Tensor idx) { return embed(idx); }});
  for (std::size_t i = 0; i < transformer_->blocks.size(); ++i) {
    auto block = transformer_->blocks[i];
    layers.push_back({"transformer.h." + std::to_string(i), block->parameters(), block->buffers(),
                      [block](torch::Tensor x) { return block->forward(x); }});
  }
  // The head's weight is the embedding's: both end stages hold it (Note [Tied weights across stages]).
  std::vector<torch::Tensor> head_parameters = transformer_->ln_f->parameters();
  head_parameters.push_back(head_weight_);
  layers.push_back({"transformer.ln_f", head_parameters, {}, [this](torch::Tensor x) { return head(x); }});
  return layers;
}

void declare_config(ConfigSchema& schema, GptConfig& config, const std::string& model_name) {
  schema.add("model.n_layer", &config.n_layer, "gpt: transformer blocks").min(1).max(1000);
  schema.add("model.n_head", &config.n_head, "gpt: attention heads per block; model.n_embd must divide by it")
      .min(1)
      .max(1024);
  schema.add("model.n_embd", &config.n_embd, "gpt: the width of the residual stream").min(1).max(1e6);
  schema.add("model.vocab_size", &config.vocab_size,
             "gpt: token ids 0 to vocab_size - 1; every token of the data is checked against it (256: byte-level "
             "text, as scripts/make_tokens.py writes)")
      .min(2)
      .max(1e9);
  schema.add("model.bias", &config.bias, "gpt: biases in the Linear and LayerNorm layers (nanoGPT's bias)");
  schema
      .add("model.dropout", &config.dropout,
           "gpt: after the embeddings, on the attention weights and after each residual branch, as nanoGPT")
      .min(0)
      .less_than(1);  // 1 zeroes every activation
  schema.rule("model.n_head", [&config, &model_name]() -> std::string {
    return model_name == "gpt" && config.n_head > 0 && config.n_embd % config.n_head != 0
               ? "model.n_embd " + std::to_string(config.n_embd) + " must divide by it (" + std::to_string(config.n_head) +
                     " heads)"
               : "";
  });
}

/// Registers "gpt"; called from model_registry.cpp (Note [Registries]).
void register_gpt(ModelFactories& factories) {
  factories.add("gpt", [](const ModelConfig& config, const ModelContext&) { return std::make_shared<Gpt>(gpt_options(config)); });
}

}  // namespace ddp
