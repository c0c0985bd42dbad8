#include "ddp/model/gpt2_layout.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <set>

#include "ddp/common/error.h"
#include "ddp/model/hugging_face.h"

namespace ddp {
namespace {

const std::string kPrefix = "transformer.";

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The modules GPT-2 builds as Conv1D, whose weights are stored transposed.
bool is_conv1d_weight(const std::string& name) {
  for (const char* module : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, module)) return true;
  return false;
}

// Modules that have a bias in GPT-2 (all but the embeddings), by their weight's name.
bool has_gpt2_bias(const std::string& weight_name) {
  return is_conv1d_weight(weight_name) || ends_with(weight_name, ".ln_1.weight") ||
         ends_with(weight_name, ".ln_2.weight") || ends_with(weight_name, "ln_f.weight");
}

bool is_mask_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

}  // namespace

NamedTensors gpt_to_gpt2_layout(const NamedTensors& nanogpt) {
  std::set<std::string> names;
  for (const auto& entry : nanogpt) names.insert(entry.first);
  NamedTensors out;
  for (const auto& [name, tensor] : nanogpt) {
    if (name == "lm_head.weight" || is_mask_buffer(name)) continue;
    out.emplace_back(name, is_conv1d_weight(name) ? tensor.detach().t().contiguous() : tensor);
    const std::string bias = name.substr(0, name.size() - std::string("weight").size()) + "bias";
    if (ends_with(name, ".weight") && has_gpt2_bias(name) && !names.count(bias))
      out.emplace_back(bias, torch::zeros({tensor.size(0)}, tensor.options()));
  }
  return out;
}

bool is_gpt2_layout(const StoredTensors& file) {
  for (const auto& [name, tensor] : file)
    if (ends_with(name, "h.0.attn.c_attn.weight") && tensor.shape.size() == 2)
      return tensor.shape[1] == 3 * tensor.shape[0];
  return false;
}

StoredTensors gpt_from_gpt2_layout(const StoredTensors& gpt2, bool bias, const std::string& source) {
  StoredTensors out;
  for (const auto& [stored, tensor] : gpt2) {
    if (is_mask_buffer(stored)) continue;
    const std::string name = stored.rfind(kPrefix, 0) == 0 || stored == "lm_head.weight" ? stored : kPrefix + stored;
    if (!bias && ends_with(name, ".bias")) {
      // Read now, however the run is laid out: a bias is small, and a refusal must come before training.
      if (tensor.read().count_nonzero().item<int64_t>() != 0)
        throw FileError(source + ": " + stored + " is not zero, and model.bias false has no bias to take it "
                        "(config.json's \"bias\" says whether the model has biases; GPT-2's own do)");
      continue;
    }
    if (!is_conv1d_weight(name) || tensor.shape.size() != 2) {
      out.emplace_back(name, tensor);
      continue;
    }
    StoredTensor transposed{{tensor.shape[1], tensor.shape[0]}, tensor.dtype,
                            [read = tensor.read] { return read().t().contiguous(); }, nullptr};
    const std::vector<int64_t> shape = transposed.shape;
    // A box of the transpose is the transpose of the box mirrored, and a run of its elements (a
    // sharded unit's share) is at most three boxes.
    transposed.read_part = [read = tensor.read, read_part = tensor.read_part, shape](c10::IntArrayRef view,
                                                                                     const TensorPart& part) {
      auto box = [&](const TensorPart& of_transpose) {
        const auto& o = of_transpose.offsets;
        const auto& s = of_transpose.sizes;
        return read_part({shape[1], shape[0]}, {{o[1], o[0]}, {s[1], s[0]}}).t();
      };
      if (read_part && view == c10::IntArrayRef(shape)) return box(part).contiguous();
      if (read_part && view.size() == 1) {
        std::vector<torch::Tensor> pieces;
        for (const TensorPart& rows : run_as_boxes(shape[1], part.offsets[0], part.sizes[0]))
          pieces.push_back(box(rows).reshape(-1));
        return pieces.empty() ? torch::empty({0}) : torch::cat(pieces);
      }
      return cut_part(read().t(), view, part);
    };
    out.emplace_back(name, std::move(transposed));
  }
  return out;
}

nlohmann::json gpt2_config(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size, int64_t vocab_size,
                           bool bias, double dropout, torch::ScalarType dtype) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", vocab_size},
          {"n_positions", block_size},
          {"n_embd", n_embd},
          {"n_layer", n_layer},
          {"n_head", n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu"},  // exact, as nanoGPT's nn.GELU(); GPT-2's own is gelu_new
          {"resid_pdrop", dropout},
          {"embd_pdrop", dropout},
          {"attn_pdrop", dropout},
          {"layer_norm_epsilon", 1e-5},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false},
          {"tie_word_embeddings", true},
          {"bias", bias},  // nanoGPT's; transformers keeps keys it does not know
          {"torch_dtype", dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kHalf ? "float16" : "float32"}};
}

HuggingFaceKeys gpt_keys_from_hugging_face(const nlohmann::json& config, const std::string& file) {
  auto lacks = [&file](const std::string& what) {
    return FileError(file + ": " + what + ", which ddprun's GPT (nanoGPT's) does not have (exact GELU, an MLP of "
                     "4·n_embd, LayerNorm epsilon 1e-5, attention scaled by 1/sqrt(head width), one dropout rate, a "
                     "head tied to wte)");
  };
  const std::string activation = config.value("activation_function", std::string("gelu_new"));
  if (activation != "gelu")
    throw lacks("activation_function " + nlohmann::json(activation).dump() +
                (activation == "gelu_new" ? " (GPT-2's own tanh approximation)" : ""));
  const std::string width = hugging_face_integer(config, "n_embd", 768, file);
  if (hugging_face_integer(config, "n_inner", 4 * std::stoll(width), file) != std::to_string(4 * std::stoll(width)))
    throw lacks("n_inner " + config["n_inner"].dump());
  if (std::stod(hugging_face_number(config, "layer_norm_epsilon", 1e-5, file)) != 1e-5)
    throw lacks("layer_norm_epsilon " + config["layer_norm_epsilon"].dump());
  if (hugging_face_bool(config, "scale_attn_weights", true, file) != "true") throw lacks("scale_attn_weights false");
  if (hugging_face_bool(config, "scale_attn_by_inverse_layer_idx", false, file) != "false")
    throw lacks("scale_attn_by_inverse_layer_idx true");
  if (hugging_face_bool(config, "tie_word_embeddings", true, file) != "true") throw lacks("tie_word_embeddings false");
  const std::string dropout = hugging_face_number(config, "resid_pdrop", 0.1, file);
  for (const char* key : {"embd_pdrop", "attn_pdrop"})
    if (hugging_face_number(config, key, 0.1, file) != dropout)
      throw lacks(std::string(key) + " other than resid_pdrop's " + dropout);
  // Fine-tuning may use another dropout, and a shorter context (nanoGPT's override_args and
  // crop_block_size): wpe's first rows are the positions it keeps.
  return {{"model.name=gpt", "model.n_layer=" + hugging_face_integer(config, "n_layer", 12, file),
           "model.n_head=" + hugging_face_integer(config, "n_head", 12, file), "model.n_embd=" + width,
           "model.block_size=" + hugging_face_integer(config, "n_positions", 1024, file),
           "model.vocab_size=" + hugging_face_integer(config, "vocab_size", 50257, file),
           "model.bias=" + hugging_face_bool(config, "bias", true, file), "model.dropout=" + dropout},
          {"model.dropout"},
          {"model.block_size"}};
}

}  // namespace ddp
