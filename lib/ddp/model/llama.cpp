// A Llama-family decoder with Hugging Face's LlamaForCausalLM semantics and parameter names, so its
// weights move to and from theirs by name (model.init_from a safetensors file; model.safetensors):
//   model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
//   post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head
// As transformers' modeling_llama.py computes it:
// - RMSNorm in float32: x · rsqrt(mean(x²) + eps), cast back, times the weight.
// - Rotary positions over the two halves of each head (rotate_half), from inv_freq =
//   1 / theta^(2i/d), with Llama 3.1's llama3 scaling of inv_freq when model.rope_scaling says so.
// - Grouped-query attention: n_kv_heads key/value heads, each repeated for n_head / n_kv_heads query
//   heads (repeat_kv); causal; softmax in float32. The fused attention where LibTorch has it (2.x).
// - A SwiGLU MLP, down(silu(gate(x)) · up(x)); no biases anywhere.
// Weights start as HF's _init_weights leaves them: normal(0, 0.02) for every Linear and the
// embedding, ones for the norms.

#include <nlohmann/json.hpp>
#include <torch/nn.h>
#include <torch/version.h>

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "ddp/common/error.h"
#include "ddp/config/config_schema.h"
#include "ddp/model/deferred_init.h"
#include "ddp/model/hugging_face.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/routed_layers.h"
#include "ddp/model/token_stepper.h"

namespace ddp {
namespace {

constexpr double kInitStd = 0.02;  // HF's initializer_range default

// Routed (Note [Routed layers]): tensor parallelism splits them.
std::shared_ptr<RoutedLinear> projection(int64_t in, int64_t out) {
  return std::make_shared<RoutedLinear>(in, out, /*bias=*/false);
}

class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t width, double eps) : eps_(eps) { weight = register_parameter("weight", torch::ones({width})); }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x.to(torch::kFloat);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight * h.to(x.scalar_type());
  }
  torch::Tensor weight;

 private:
  double eps_;
};

// The rotary tables and the causal mask for a sequence length, made once per length, device and
// dtype and shared by every layer (all of a forward's layers ask for the same).
class Positions {
 public:
  explicit Positions(const LlamaConfig& c) : head_dim_(c.dim / c.n_head) {
    torch::Tensor exponents = torch::arange(0, head_dim_, 2, torch::kLong).to(torch::kFloat) / head_dim_;
    inv_freq_ = 1.0 / torch::pow(c.rope_theta, exponents);
    if (c.rope_scaling == "llama3") {  // transformers' _compute_llama3_parameters
      const double old_context = static_cast<double>(c.rope_original_context);
      const double low_wavelen = old_context / c.rope_low_freq_factor;
      const double high_wavelen = old_context / c.rope_high_freq_factor;
      torch::Tensor wavelen = 2 * M_PI / inv_freq_;
      torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq_ / c.rope_factor, inv_freq_);
      torch::Tensor smooth = (old_context / wavelen - c.rope_low_freq_factor) /
                             (c.rope_high_freq_factor - c.rope_low_freq_factor);
      torch::Tensor smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled;
      torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
      inv_freq_ = torch::where(medium, smoothed, scaled);
    }
  }

  struct Tables {
    torch::Tensor cos, sin;  // [T, head_dim]
    torch::Tensor mask;      // [T, T]: 0 on and below the diagonal, -inf above
  };

  const Tables& at(int64_t t, const torch::Device& device, torch::ScalarType dtype) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto key = std::make_tuple(t, device.str(), dtype);
    auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
    if (cache_.size() > 8) cache_.clear();  // lengths vary only between training and generation
    torch::NoGradGuard no_grad;
    torch::Tensor positions = torch::arange(t, torch::kLong).to(torch::kFloat);
    torch::Tensor freqs = positions.unsqueeze(1) * inv_freq_.unsqueeze(0);  // [T, head_dim / 2], in float32
    torch::Tensor angles = torch::cat({freqs, freqs}, -1);
    Tables tables{angles.cos().to(device, dtype), angles.sin().to(device, dtype),
                  torch::full({t, t}, -INFINITY).triu(1).to(device, dtype)};
    return cache_.emplace(key, std::move(tables)).first->second;
  }

  int64_t head_dim() const { return head_dim_; }

 private:
  int64_t head_dim_;
  torch::Tensor inv_freq_;
  std::mutex mutex_;
  std::map<std::tuple<int64_t, std::string, torch::ScalarType>, Tables> cache_;
};

// One layer's keys and values of the positions read so far, [B, n_kv_heads, T, head_dim].
struct KvCache {
  torch::Tensor keys, values;
};

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

class Attention : public torch::nn::Module {
 public:
  Attention(const LlamaConfig& c, std::shared_ptr<Positions> positions)
      : heads_(c.n_head), kv_heads_(c.n_kv_heads > 0 ? c.n_kv_heads : c.n_head), positions_(std::move(positions)) {
    const int64_t d = positions_->head_dim();
    q_proj = register_module("q_proj", projection(c.dim, heads_ * d));
    k_proj = register_module("k_proj", projection(c.dim, kv_heads_ * d));
    v_proj = register_module("v_proj", projection(c.dim, kv_heads_ * d));
    o_proj = register_module("o_proj", projection(heads_ * d, c.dim));
  }

  // The head counts and the sequence come from the projections: a tensor-parallel rank computes a
  // slice of the heads, from the whole sequence where sequence parallelism gave it a part.
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t d = positions_->head_dim();
    torch::Tensor q = q_proj->forward(x), k = k_proj->forward(x), v = v_proj->forward(x);
    const int64_t b = q.size(0), t = q.size(1);
    const auto& tables = positions_->at(t, x.device(), x.scalar_type());
    auto heads = [&](const torch::Tensor& z) { return z.view({b, t, -1, d}).transpose(1, 2); };
    q = heads(q);
    k = heads(k);
    v = heads(v);
    const int64_t query_heads = q.size(1), kv_heads = k.size(1);
    q = q * tables.cos + rotate_half(q) * tables.sin;
    k = k * tables.cos + rotate_half(k) * tables.sin;
    if (kv_heads != query_heads) {  // repeat_kv: each key/value head serves query_heads / kv_heads query heads
      const int64_t repeats = query_heads / kv_heads;
      k = k.unsqueeze(2).expand({b, kv_heads, repeats, t, d}).reshape({b, query_heads, t, d});
      v = v.unsqueeze(2).expand({b, kv_heads, repeats, t, d}).reshape({b, query_heads, t, d});
    }
    torch::Tensor y;
#if TORCH_VERSION_MAJOR >= 2
    y = torch::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
    torch::Tensor scores = torch::matmul(q, k.transpose(2, 3)) * std::pow(static_cast<double>(d), -0.5) + tables.mask;
    y = torch::matmul(torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type()), v);
#endif
    return o_proj->forward(y.transpose(1, 2).reshape({b, t, query_heads * d}));
  }

  // The same for tokens that follow those whose keys and values `cache` holds (before repeat_kv),
  // which it then holds too: the rotary angles and the mask rows are those of positions p to p + t,
  // cut from the tables of `span` positions (the most a cache holds: the same tables every step).
  torch::Tensor forward_cached(const torch::Tensor& x, KvCache& cache, int64_t span) {
    const int64_t b = x.size(0), t = x.size(1), d = positions_->head_dim();
    const int64_t p = cache.keys.defined() ? cache.keys.size(2) : 0;
    const auto& tables = positions_->at(span, x.device(), x.scalar_type());
    torch::Tensor cos = tables.cos.narrow(0, p, t), sin = tables.sin.narrow(0, p, t);
    auto heads = [&](const torch::Tensor& z, int64_t n) { return z.view({b, t, n, d}).transpose(1, 2); };
    torch::Tensor q = heads(q_proj->forward(x), heads_), k = heads(k_proj->forward(x), kv_heads_),
                  v = heads(v_proj->forward(x), kv_heads_);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    cache.keys = p > 0 ? torch::cat({cache.keys, k}, 2) : k;
    cache.values = p > 0 ? torch::cat({cache.values, v}, 2) : v;
    k = cache.keys;
    v = cache.values;
    if (kv_heads_ != heads_) {
      const int64_t repeats = heads_ / kv_heads_;
      k = k.unsqueeze(2).expand({b, kv_heads_, repeats, p + t, d}).reshape({b, heads_, p + t, d});
      v = v.unsqueeze(2).expand({b, kv_heads_, repeats, p + t, d}).reshape({b, heads_, p + t, d});
    }
    torch::Tensor scores = torch::matmul(q, k.transpose(2, 3)) * std::pow(static_cast<double>(d), -0.5) +
                           tables.mask.narrow(0, p, t).narrow(1, 0, p + t);
    torch::Tensor y = torch::matmul(torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type()), v);
    return o_proj->forward(y.transpose(1, 2).reshape({b, t, heads_ * d}));
  }

  std::shared_ptr<RoutedLinear> q_proj, k_proj, v_proj, o_proj;

 private:
  int64_t heads_, kv_heads_;
  std::shared_ptr<Positions> positions_;
};

class SwiGlu : public torch::nn::Module {
 public:
  explicit SwiGlu(const LlamaConfig& c) {
    const int64_t width = llama_ffn_dim(c);
    gate_proj = register_module("gate_proj", projection(c.dim, width));
    up_proj = register_module("up_proj", projection(c.dim, width));
    down_proj = register_module("down_proj", projection(width, c.dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
  }
  std::shared_ptr<RoutedLinear> gate_proj, up_proj, down_proj;
};

class DecoderLayer : public torch::nn::Module {
 public:
  DecoderLayer(const LlamaConfig& c, std::shared_ptr<Positions> positions) {
    input_layernorm = register_module("input_layernorm", std::make_shared<RmsNorm>(c.dim, c.norm_eps));
    self_attn = register_module("self_attn", std::make_shared<Attention>(c, std::move(positions)));
    post_attention_layernorm = register_module("post_attention_layernorm", std::make_shared<RmsNorm>(c.dim, c.norm_eps));
    mlp = register_module("mlp", std::make_shared<SwiGlu>(c));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + self_attn->forward(input_layernorm->forward(x));
    return x + mlp->forward(post_attention_layernorm->forward(x));
  }
  torch::Tensor forward_cached(torch::Tensor x, KvCache& cache, int64_t span) {
    x = x + self_attn->forward_cached(input_layernorm->forward(x), cache, span);
    return x + mlp->forward(post_attention_layernorm->forward(x));
  }
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<SwiGlu> mlp;
};

// HF's LlamaModel: what sits under "model." in their state_dict.
class Decoder : public torch::nn::Module {
 public:
  explicit Decoder(const LlamaConfig& c) {
    auto positions = std::make_shared<Positions>(c);
    embed_tokens = register_module("embed_tokens", std::make_shared<RoutedEmbedding>(c.vocab_size, c.dim));
    auto list = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.n_layer; ++i) {
      layers.push_back(std::make_shared<DecoderLayer>(c, positions));
      list->push_back(layers.back());
    }
    norm = register_module("norm", std::make_shared<RmsNorm>(c.dim, c.norm_eps));
  }
  std::shared_ptr<RoutedEmbedding> embed_tokens;
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<RmsNorm> norm;
};

// Sampling with a KV cache. Past model.block_size positions the cache starts again from the last
// half of the window, so a long text costs one recomputation every block_size / 2 tokens.
class LlamaStepper : public TokenStepper {
 public:
  LlamaStepper(std::shared_ptr<Decoder> decoder, torch::Tensor head, int64_t block_size)
      : decoder_(std::move(decoder)), head_(std::move(head)), block_size_(block_size),
        caches_(decoder_->layers.size()) {}

  torch::Tensor feed(const std::vector<int64_t>& tokens) override {
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    std::vector<int64_t> run = tokens;
    if (cached_ + static_cast<int64_t>(tokens.size()) > block_size_) {
      const int64_t keep = std::min<int64_t>(static_cast<int64_t>(history_.size()),
                                             std::max<int64_t>(block_size_ / 2, std::min<int64_t>(tokens.size(), block_size_)));
      run.assign(history_.end() - keep, history_.end());
      caches_.assign(caches_.size(), KvCache{});
      cached_ = 0;
    }
    torch::Tensor x = decoder_->embed_tokens->forward(torch::tensor(run, torch::kLong).unsqueeze(0));
    for (std::size_t i = 0; i < decoder_->layers.size(); ++i) x = decoder_->layers[i]->forward_cached(x, caches_[i], block_size_);
    cached_ += static_cast<int64_t>(run.size());
    torch::Tensor last = decoder_->norm->forward(x.select(1, -1));
    return torch::nn::functional::linear(last, head_).squeeze(0).to(torch::kFloat);
  }

 private:
  std::shared_ptr<Decoder> decoder_;
  torch::Tensor head_;
  int64_t block_size_;
  std::vector<KvCache> caches_;
  std::vector<int64_t> history_;
  int64_t cached_ = 0;
};

class Llama : public Model {
 public:
  Llama(const LlamaConfig& c, int64_t block_size) : config_(c), block_size_(block_size) {
    decoder_ = register_module("model", std::make_shared<Decoder>(c));
    torch::Tensor head = c.tie_embeddings ? decoder_->embed_tokens->weight : torch::empty({c.vocab_size, c.dim});
    head_ = register_module("lm_head", std::make_shared<RoutedLinear>(head));  // tied: the embedding's, by its name
    // HF's _init_weights, in module order: the embedding, each layer's projections, the head; each
    // through init_parameter, so that a deferred build replays it (Note [Deferred initialisation]).
    auto normal = [](torch::Tensor& t) { t.normal_(0, kInitStd); };
    init_parameter(decoder_->embed_tokens->weight, normal);
    for (const auto& layer : decoder_->layers)
      for (const auto& linear : {layer->self_attn->q_proj, layer->self_attn->k_proj, layer->self_attn->v_proj,
                                 layer->self_attn->o_proj, layer->mlp->gate_proj, layer->mlp->up_proj,
                                 layer->mlp->down_proj})
        init_parameter(linear->weight, normal);
    if (!c.tie_embeddings) init_parameter(head_->weight, normal);
  }

  std::vector<int64_t> input_shape() const override { return {}; }
  int64_t output_width() const override { return config_.vocab_size; }

  // A tied model's files may leave lm_head out: Hugging Face's do, its weight being the embedding's.
  // Older exports carry each layer's rotary inv_freq buffer, which transformers ignores, and so does this.
  void load_weights(const std::string& path) override {
    const bool tied = config_.tie_embeddings;
    load_python_state_dict(*this, path, [tied](const std::string& name) {
      const std::string buffer = "self_attn.rotary_emb.inv_freq";
      return (tied && name == "lm_head.weight") ||
             (name.size() > buffer.size() && name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0);
    });
  }

  std::unique_ptr<TokenStepper> token_stepper() override {
    return std::make_unique<LlamaStepper>(decoder_, head_->weight, block_size_);
  }

  // config.json in transformers' LlamaConfig names (Note [Hugging Face directories]).
  void save_extras(const std::string& output_dir) const override {
    const LlamaConfig& c = config_;
    nlohmann::json rope_scaling = nullptr;
    if (c.rope_scaling == "llama3")
      rope_scaling = {{"rope_type", "llama3"},
                      {"factor", c.rope_factor},
                      {"low_freq_factor", c.rope_low_freq_factor},
                      {"high_freq_factor", c.rope_high_freq_factor},
                      {"original_max_position_embeddings", c.rope_original_context}};
    const auto dtype = decoder_->embed_tokens->weight.scalar_type();
    const nlohmann::json carried = carried_hugging_face_config(hugging_face_config());
    // Rotary positions reach past the context trained at: a model made for a longer one keeps it.
    int64_t positions = block_size_;
    if (auto made_for = carried.find("max_position_embeddings");
        made_for != carried.end() && made_for->is_number_integer())
      positions = std::max(positions, made_for->get<int64_t>());
    write_hugging_face_config(output_dir, {{"architectures", {"LlamaForCausalLM"}},
                                           {"model_type", "llama"},
                                           {"vocab_size", c.vocab_size},
                                           {"hidden_size", c.dim},
                                           {"intermediate_size", llama_ffn_dim(c)},
                                           {"num_hidden_layers", c.n_layer},
                                           {"num_attention_heads", c.n_head},
                                           {"num_key_value_heads", c.n_kv_heads > 0 ? c.n_kv_heads : c.n_head},
                                           {"head_dim", c.dim / c.n_head},
                                           {"hidden_act", "silu"},
                                           {"max_position_embeddings", positions},
                                           {"initializer_range", kInitStd},
                                           {"rms_norm_eps", c.norm_eps},
                                           {"rope_theta", c.rope_theta},
                                           {"rope_scaling", rope_scaling},
                                           {"attention_bias", false},
                                           {"attention_dropout", 0.0},
                                           {"mlp_bias", false},
                                           {"tie_word_embeddings", c.tie_embeddings},
                                           {"torch_dtype", dtype == torch::kBFloat16 ? "bfloat16"
                                                           : dtype == torch::kHalf  ? "float16"
                                                                                    : "float32"}},
                              carried);
  }

  // The embedding, each decoder layer, then the final norm with the head: a stage boundary may fall
  // before any layer; a tied head's weight is in the first block and the last.
  std::vector<ModelBlock> declare_blocks() override {
    std::vector<ModelBlock> blocks;
    blocks.push_back({"model.embed_tokens", {decoder_->embed_tokens->weight}, {}, [this](torch::Tensor idx) {
                        if (idx.dim() != 2 || idx.scalar_type() != torch::kLong)
                          throw UserError("model.name llama takes int64 token ids [B, T], got " +
                                          std::string(idx.toString()) + " of " + std::to_string(idx.dim()) +
                                          " dimensions");
                        return decoder_->embed_tokens->forward(idx);
                      }});
    for (std::size_t i = 0; i < decoder_->layers.size(); ++i) {
      auto layer = decoder_->layers[i];
      blocks.push_back({"model.layers." + std::to_string(i), layer->parameters(), {},
                        [layer](torch::Tensor x) { return layer->forward(x); }});
    }
    blocks.push_back({"model.norm", {decoder_->norm->weight, head_->weight}, {}, [this](torch::Tensor x) {
                        return head_->forward(decoder_->norm->forward(x));
                      }});
    return blocks;
  }

 private:
  LlamaConfig config_;
  int64_t block_size_;
  std::shared_ptr<Decoder> decoder_;
  std::shared_ptr<RoutedLinear> head_;
};

}  // namespace

int64_t llama_ffn_dim(const LlamaConfig& config) {
  if (config.ffn_dim > 0) return config.ffn_dim;
  auto width = static_cast<int64_t>(2.0 * static_cast<double>(4 * config.dim) / 3.0);  // Meta's int(2 · 4d / 3)
  if (config.ffn_dim_multiplier > 0) width = static_cast<int64_t>(config.ffn_dim_multiplier * static_cast<double>(width));
  return config.multiple_of * ((width + config.multiple_of - 1) / config.multiple_of);
}

void declare_config(ConfigSchema& schema, LlamaConfig& config, const std::string& model_name) {
  schema.add("model.n_layer", &config.n_layer, "llama: decoder layers");
  schema.add("model.n_head", &config.n_head, "llama: query heads per layer; model.dim must divide by it");
  schema.add("model.n_kv_heads", &config.n_kv_heads,
             "llama: key/value heads, each shared by model.n_head / n_kv_heads query heads (grouped-query "
             "attention); 0: model.n_head, multi-head attention")
      .min(0)
      .max(1024);
  schema.add("model.dim", &config.dim, "llama: the width of the residual stream (HF hidden_size)").min(1).max(1e6);
  schema.add("model.ffn_dim", &config.ffn_dim,
             "llama: the MLP's width (HF intermediate_size); 0: Llama's rule, 8·dim/3 times model.ffn_dim_multiplier "
             "rounded up to a multiple of model.multiple_of")
      .min(0)
      .max(1e7);
  schema.add("model.multiple_of", &config.multiple_of, "llama: Llama's rule rounds the MLP's width up to a multiple "
             "of this").min(1).max(1e6);
  schema.add("model.ffn_dim_multiplier", &config.ffn_dim_multiplier,
             "llama: Llama's rule scales 8·dim/3 by this first; 0: by 1").min(0).max(100);
  schema.add("model.rope_theta", &config.rope_theta, "llama: the rotary positions' base (Llama 3: 500000)")
      .greater_than(0)
      .max(1e12);
  schema.add("model.rope_scaling", &config.rope_scaling,
             "llama: none, or llama3: Llama 3.1's scaling of the rotary frequencies (model.rope_factor, "
             "rope_low_freq_factor, rope_high_freq_factor, rope_original_context)")
      .choices({"none", "llama3"});
  schema.add("model.rope_factor", &config.rope_factor, "llama: rope_scaling llama3's factor").greater_than(0).max(1e6);
  schema.add("model.rope_low_freq_factor", &config.rope_low_freq_factor, "llama: rope_scaling llama3's low_freq_factor")
      .greater_than(0)
      .max(1e6);
  schema.add("model.rope_high_freq_factor", &config.rope_high_freq_factor,
             "llama: rope_scaling llama3's high_freq_factor (above low_freq_factor)")
      .greater_than(0)
      .max(1e6);
  schema.add("model.rope_original_context", &config.rope_original_context,
             "llama: rope_scaling llama3's original_max_position_embeddings")
      .min(1)
      .max(1e9);
  // rope_scaling's numbers without it: unread (was: without a word).
  const LlamaConfig defaults;
  auto unread_without_llama3 = [&schema, &config, &model_name](const char* key, const auto* value, auto by_default) {
    schema.notice(key, [&config, &model_name, value, by_default]() -> std::string {
      return model_name == "llama" && config.rope_scaling != "llama3" && *value != by_default
                 ? "does nothing with model.rope_scaling " + config.rope_scaling + " (llama3 reads it)"
                 : "";
    });
  };
  unread_without_llama3("model.rope_factor", &config.rope_factor, defaults.rope_factor);
  unread_without_llama3("model.rope_low_freq_factor", &config.rope_low_freq_factor, defaults.rope_low_freq_factor);
  unread_without_llama3("model.rope_high_freq_factor", &config.rope_high_freq_factor, defaults.rope_high_freq_factor);
  unread_without_llama3("model.rope_original_context", &config.rope_original_context, defaults.rope_original_context);
  // Llama's rule for the MLP's width reads these only where model.ffn_dim leaves it to the rule: a
  // width given, as model.init_from's config.json gives intermediate_size, leaves them unread.
  auto unread_with_width = [&schema, &config, &model_name](const char* key, const auto* value, auto by_default) {
    schema.notice(key, [&config, &model_name, value, by_default]() -> std::string {
      return model_name == "llama" && config.ffn_dim > 0 && *value != by_default
                 ? "does nothing with model.ffn_dim " + std::to_string(config.ffn_dim) +
                       " (Llama's rule for the MLP's width reads it where model.ffn_dim is 0; a model.init_from "
                       "directory's config.json gives the width as intermediate_size)"
                 : "";
    });
  };
  unread_with_width("model.multiple_of", &config.multiple_of, defaults.multiple_of);
  unread_with_width("model.ffn_dim_multiplier", &config.ffn_dim_multiplier, defaults.ffn_dim_multiplier);
  schema.add("model.norm_eps", &config.norm_eps, "llama: RMSNorm's epsilon (HF rms_norm_eps)").greater_than(0).max(1);
  schema.add("model.vocab_size", &config.vocab_size, "llama: the same");
  schema.add("model.tie_embeddings", &config.tie_embeddings,
             "llama: lm_head uses the token embedding's weight (HF tie_word_embeddings)");
  schema.rule("model.n_head", [&config, &model_name]() -> std::string {
    if (model_name != "llama" || config.n_head < 1) return "";
    if (config.dim % config.n_head != 0 || (config.dim / config.n_head) % 2 != 0)
      return "model.dim " + std::to_string(config.dim) + " must divide by it into heads of an even width (" +
             std::to_string(config.n_head) + " heads)";
    return "";
  });
  schema.rule("model.n_kv_heads", [&config, &model_name]() -> std::string {
    return model_name == "llama" && config.n_kv_heads > 0 && config.n_head % config.n_kv_heads != 0
               ? "model.n_head " + std::to_string(config.n_head) + " must divide by it (" +
                     std::to_string(config.n_kv_heads) + " key/value heads)"
               : "";
  });
  schema.rule("model.rope_high_freq_factor", [&config, &model_name]() -> std::string {
    return model_name == "llama" && config.rope_scaling == "llama3" &&
                   config.rope_high_freq_factor <= config.rope_low_freq_factor
               ? "must be above model.rope_low_freq_factor for rope_scaling llama3"
               : "";
  });
}

HuggingFaceKeys llama_keys_from_hugging_face(const nlohmann::json& config, const std::string& file) {
  // What transformers' LlamaConfig can say that this Llama does not do is refused, never ignored.
  auto lacks = [&file](const std::string& what) {
    return FileError(file + ": " + what + ", which ddprun's Llama does not have (no biases, SiLU, heads of "
                     "hidden_size / num_attention_heads, rope_scaling none or llama3)");
  };
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (hugging_face_bool(config, bias, false, file) == "true") throw lacks(std::string(bias) + " true");
  if (config.contains("hidden_act") && config["hidden_act"] != "silu")
    throw lacks("hidden_act " + config["hidden_act"].dump());
  if (std::stod(hugging_face_number(config, "attention_dropout", 0, file)) != 0)
    throw lacks("attention_dropout " + config["attention_dropout"].dump());
  const std::string heads = hugging_face_integer(config, "num_attention_heads", 32, file);
  const std::string width = hugging_face_integer(config, "hidden_size", 4096, file);
  if (std::stoll(heads) > 0) {
    const std::string head_dim = hugging_face_integer(config, "head_dim", std::stoll(width) / std::stoll(heads), file);
    if (std::stoll(head_dim) * std::stoll(heads) != std::stoll(width))
      throw lacks("head_dim " + head_dim + " with hidden_size " + width + " and " + heads + " heads");
  }
  // transformers 5 writes rope_theta and the scaling in one rope_parameters object; earlier
  // versions, and 5 when it reads their files, rope_theta and rope_scaling beside the others.
  const auto parameters = config.find("rope_parameters");
  const bool grouped = parameters != config.end() && !parameters->is_null();
  if (grouped && !parameters->is_object())
    throw FileError(file + ": rope_parameters: expected an object or null, got " + parameters->dump());
  std::string theta = hugging_face_number(config, "rope_theta", 10000, file);
  if (grouped && parameters->contains("rope_theta")) {
    const std::string grouped_theta = hugging_face_number(*parameters, "rope_theta", 10000, file);
    if (config.contains("rope_theta") && std::stod(theta) != std::stod(grouped_theta))
      throw FileError(file + ": rope_theta " + theta + " and rope_parameters' rope_theta " + grouped_theta +
                      " disagree");
    theta = grouped_theta;
  }
  std::vector<std::string> keys = {
      "model.name=llama",
      "model.n_layer=" + hugging_face_integer(config, "num_hidden_layers", 32, file),
      "model.n_head=" + heads,
      "model.n_kv_heads=" + hugging_face_integer(config, "num_key_value_heads", std::stoll(heads), file),
      "model.dim=" + width,
      "model.ffn_dim=" + hugging_face_integer(config, "intermediate_size", 11008, file),
      "model.vocab_size=" + hugging_face_integer(config, "vocab_size", 32000, file),
      "model.rope_theta=" + theta,
      "model.norm_eps=" + hugging_face_number(config, "rms_norm_eps", 1e-6, file),
      "model.tie_embeddings=" + hugging_face_bool(config, "tie_word_embeddings", false, file)};
  const auto scaling = config.find("rope_scaling");
  const bool legacy = scaling != config.end() && !scaling->is_null();
  if (grouped && legacy) {
    nlohmann::json without_theta = *parameters;
    without_theta.erase("rope_theta");
    if (*scaling != without_theta)
      throw FileError(file + ": rope_scaling and rope_parameters both say how rotary positions scale, and differ");
  }
  if (!grouped && !legacy) {
    keys.push_back("model.rope_scaling=none");
    return {keys, {}, {}};
  }
  const std::string name = grouped ? "rope_parameters" : "rope_scaling";
  const nlohmann::json& scale = grouped ? *parameters : *scaling;
  if (!scale.is_object()) throw FileError(file + ": " + name + ": expected an object or null, got " + scale.dump());
  // transformers reads rope_type, or type in older files (LlamaConfig copies type over rope_type);
  // "default" is no scaling.
  const nlohmann::json type = scale.contains("type") ? scale["type"] : scale.value("rope_type", nlohmann::json());
  if (scale.contains("type") && scale.contains("rope_type") && scale["type"] != scale["rope_type"])
    throw FileError(file + ": " + name + ": type " + scale["type"].dump() + " and rope_type " +
                    scale["rope_type"].dump() + " disagree");
  if (type == "default") {
    keys.push_back("model.rope_scaling=none");
  } else if (type == "llama3") {
    // transformers needs all four, as does this: a default would be a guess at the model.
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!scale.contains(key) || scale[key].is_null())
        throw FileError(file + ": " + name + " of type llama3 lacks " + key);
    keys.insert(keys.end(),
                {"model.rope_scaling=llama3", "model.rope_factor=" + hugging_face_number(scale, "factor", 8, file),
                 "model.rope_low_freq_factor=" + hugging_face_number(scale, "low_freq_factor", 1, file),
                 "model.rope_high_freq_factor=" + hugging_face_number(scale, "high_freq_factor", 4, file),
                 "model.rope_original_context=" +
                     hugging_face_integer(scale, "original_max_position_embeddings", 8192, file)});
  } else {
    throw lacks(name + " of type " + type.dump());
  }
  return {keys, {}, {}};
}

/// Registers "llama"; called from model_registry.cpp (Note [Registries]).
void register_llama(ModelFactories& factories) {
  factories.add("llama", [](const ModelConfig& config, const ModelContext&) -> std::shared_ptr<Model> {
    const LlamaConfig& c = config.llama;
    if (c.dim % c.n_head != 0 || (c.dim / c.n_head) % 2 != 0 || (c.n_kv_heads > 0 && c.n_head % c.n_kv_heads != 0))
      throw ConfigError("model.n_head: model.dim " + std::to_string(c.dim) + ", model.n_head " +
                        std::to_string(c.n_head) + " and model.n_kv_heads " + std::to_string(c.n_kv_heads) +
                        " do not make heads of an even width, each key/value head serving whole query heads");
    return std::make_shared<Llama>(c, config.block_size);
  });
}

}  // namespace ddp
