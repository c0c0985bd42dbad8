// Hugging Face model directories (Note [Hugging Face directories]): a Llama 3 config.json read as
// model.* keys, a trained Llama's config.json written and read back to the same keys, shards read
// through their index, and every hostile config.json or index refused in one line naming the file.

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/model/hugging_face.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/safetensors.h"
#include "ddp/model/state_dict_file.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

using Catch::Contains;
using ddp::test::TempDir;
using ddp::test::write_file;

// Meta-Llama-3.1-8B's config.json, as the hub serves it.
constexpr const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
  "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0",
  "use_cache": true, "vocab_size": 128256})";

// The one line `read` refuses `dir` with.
template <typename Read>
std::string refusal(Read read, const std::string& dir) {
  try {
    read(dir);
  } catch (const ddp::FileError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string config_refusal(const std::string& dir) { return refusal(ddp::hugging_face_model_keys, dir); }

std::string weights_refusal(const std::string& dir) { return refusal(ddp::read_state_dict_file, dir); }

}  // namespace

TEST_CASE("Hugging Face: Llama 3.1's config.json reads as the model.* keys of its architecture", "[model][hugging_face]") {
  TempDir dir;
  write_file(dir.file("config.json"), kLlama31);
  CHECK(ddp::hugging_face_model_keys(dir.path()).assignments ==
        std::vector<std::string>{"model.name=llama", "model.n_layer=32", "model.n_head=32", "model.n_kv_heads=8",
                                 "model.dim=4096", "model.ffn_dim=14336", "model.vocab_size=128256",
                                 "model.rope_theta=500000", "model.norm_eps=1.0000000000000001e-05",
                                 "model.tie_embeddings=false", "model.rope_scaling=llama3", "model.rope_factor=8",
                                 "model.rope_low_freq_factor=1", "model.rope_high_freq_factor=4",
                                 "model.rope_original_context=8192"});
  // What transformers' LlamaConfig defaults, this does too: no rope_scaling, no num_key_value_heads.
  write_file(dir.file("config.json"), R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                         "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 300})");
  auto keys = ddp::hugging_face_model_keys(dir.path()).assignments;
  CHECK(std::find(keys.begin(), keys.end(), "model.n_kv_heads=4") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "model.rope_scaling=none") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "model.norm_eps=9.9999999999999995e-07") != keys.end());
  CHECK(
      ddp::hugging_face_model_keys(dir.file("config.json")).assignments.empty());  // a file is weights, not a directory

  // transformers 5 writes rope_theta and the scaling as one rope_parameters object: the same keys.
  std::string v5 = kLlama31;
  v5.replace(v5.find("\"rope_scaling\""), std::string("\"rope_scaling\"").size(), "\"rope_parameters\"");
  v5.replace(v5.find("\"rope_theta\": 500000.0,"), std::string("\"rope_theta\": 500000.0,").size(), "");
  v5.replace(v5.find("\"rope_type\": \"llama3\"}"), std::string("\"rope_type\": \"llama3\"}").size(),
             "\"rope_type\": \"llama3\", \"rope_theta\": 500000.0}");
  write_file(dir.file("config.json"), kLlama31);
  const auto v4_keys = ddp::hugging_face_model_keys(dir.path()).assignments;
  write_file(dir.file("config.json"), v5);
  INFO(v5);
  CHECK(ddp::hugging_face_model_keys(dir.path()).assignments == v4_keys);
  write_file(dir.file("config.json"), R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                         "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}})");
  keys = ddp::hugging_face_model_keys(dir.path()).assignments;
  CHECK(std::find(keys.begin(), keys.end(), "model.rope_theta=250000") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "model.rope_scaling=none") != keys.end());
}

TEST_CASE("Hugging Face: a Llama's config.json, written at the end of a run, reads back as the keys it was built with",
          "[model][hugging_face]") {
  TempDir dir;
  ddp::ModelConfig config;
  config.name = "llama";
  config.block_size = 64;
  config.llama = {.n_layer = 2, .n_head = 4, .n_kv_heads = 2, .dim = 32, .multiple_of = 16,
                  .rope_theta = 500000, .rope_scaling = "llama3", .rope_factor = 16, .rope_original_context = 32,
                  .norm_eps = 1e-6, .vocab_size = 300, .tie_embeddings = true};
  auto model = ddp::make_model(config);
  model->save_extras(dir.path());
  auto written = nlohmann::json::parse(ddp::test::read_file(dir.file("config.json")));
  CHECK(written["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
  CHECK(written["intermediate_size"] == 96);  // Llama's rule, stated outright
  CHECK(written["max_position_embeddings"] == 64);
  CHECK(written["torch_dtype"] == "float32");
  CHECK(ddp::hugging_face_model_keys(dir.path()).assignments ==
        std::vector<std::string>{"model.name=llama", "model.n_layer=2", "model.n_head=4", "model.n_kv_heads=2",
                                 "model.dim=32", "model.ffn_dim=96", "model.vocab_size=300", "model.rope_theta=500000",
                                 "model.norm_eps=9.9999999999999995e-07", "model.tie_embeddings=true",
                                 "model.rope_scaling=llama3", "model.rope_factor=16", "model.rope_low_freq_factor=1",
                                 "model.rope_high_freq_factor=4", "model.rope_original_context=32"});

  // A tied model's weights without lm_head, as transformers saves them, load; so do older exports' rotary buffers.
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& [name, tensor] : ddp::python_state_dict(*model))
    if (name != "lm_head.weight") weights.emplace_back(name, torch::full_like(tensor, 0.5));
  weights.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({4}));  // as older exports have
  ddp::write_safetensors(dir.file("model.safetensors"), weights);
  model->load_weights(dir.path());
  for (const auto& [name, tensor] : ddp::python_state_dict(*model)) CHECK(tensor.eq(0.5).all().item<bool>());
}

TEST_CASE("Hugging Face: each hostile config.json is refused in one line naming the file and the fault",
          "[model][hugging_face]") {
  TempDir dir;
  const std::string file = dir.file("config.json");
  CHECK(config_refusal(dir.path()) == dir.path() + " is a directory without a config.json: model.init_from takes a "
                                                   "Hugging Face model directory (config.json and model.safetensors, as "
                                                   "save_pretrained writes them) or a weights file");
  std::filesystem::create_directories(file);
  CHECK(config_refusal(dir.path()) == file + " is a directory, not a file");
  std::filesystem::remove(file);
  const std::string base = R"("model_type": "llama", "hidden_size": 64, "num_attention_heads": 4)";
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{\"model_type\": ", ": not JSON that can be read ("},
           {"{\"model_type\": \"llama\", \"rope_theta\": 1e400}", ": not JSON that can be read ("},
           {"[1, 2]", ": expected a JSON object, got array"},
           {"{\"hidden_size\": 64}", ": no model_type string, so the architecture is unknown"},
           {"{\"model_type\": \"qwen2\"}", ": model_type \"qwen2\" is no architecture ddprun has (it reads gpt2, llama)"},
           {"{" + base + ", \"attention_bias\": true}", ": attention_bias true, which ddprun's Llama does not have"},
           {"{" + base + ", \"mlp_bias\": true}", ": mlp_bias true, which ddprun's Llama does not have"},
           {"{" + base + ", \"hidden_act\": \"gelu\"}", ": hidden_act \"gelu\", which ddprun's Llama does not have"},
           {"{" + base + ", \"head_dim\": 32}", ": head_dim 32 with hidden_size 64 and 4 heads, which"},
           {"{" + base + ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
            ": rope_scaling of type \"yarn\", which ddprun's Llama does not have"},
           {"{" + base + ", \"rope_scaling\": 4}", ": rope_scaling: expected an object or null, got 4"},
           {"{" + base + ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
            ": rope_scaling of type llama3 lacks low_freq_factor"},
           {"{" + base + ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"type\": \"default\"}}",
            ": rope_scaling: type \"default\" and rope_type \"llama3\" disagree"},
           {"{" + base + ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"rope_theta\": 1e6}}",
            ": rope_parameters of type \"yarn\", which ddprun's Llama does not have"},
           {"{" + base + ", \"rope_parameters\": [1]}", ": rope_parameters: expected an object or null, got [1]"},
           {"{" + base + ", \"rope_theta\": 10000, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5e5}}",
            ": rope_theta 10000 and rope_parameters' rope_theta 500000 disagree"},
           {"{" + base + ", \"rope_scaling\": {\"rope_type\": \"default\"}, \"rope_parameters\": {\"rope_type\": "
                         "\"llama3\", \"factor\": 8}}",
            ": rope_scaling and rope_parameters both say how rotary positions scale, and differ"},
           {"{" + base + ", \"attention_dropout\": 0.1}", ": attention_dropout 0.1, which ddprun's Llama does not"},
           {"{" + base + ", \"num_hidden_layers\": \"2\"}", ": num_hidden_layers: expected an integer, got \"2\""},
           {"{" + base + ", \"rope_theta\": \"big\"}", ": rope_theta: expected a number, got \"big\""},
           {"{" + base + ", \"tie_word_embeddings\": 1}", ": tie_word_embeddings: expected true or false, got 1"}}) {
    INFO(text);
    write_file(file, text);
    CHECK_THAT(config_refusal(dir.path()), Catch::StartsWith(file + expected));
  }
}

TEST_CASE("Hugging Face: a GPT-2 config.json reads as the GPT's keys, and what nanoGPT's GPT does not compute is "
          "refused naming it", "[model][hugging_face]") {
  TempDir dir;
  const std::string file = dir.file("config.json");
  const std::string base = R"("model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, )"
                           R"("vocab_size": 300, "activation_function": "gelu")";
  write_file(file, "{" + base + ", \"resid_pdrop\": 0, \"embd_pdrop\": 0, \"attn_pdrop\": 0, \"bias\": false}");
  const ddp::HuggingFaceKeys keys = ddp::hugging_face_model_keys(dir.path());
  CHECK(keys.assignments == std::vector<std::string>{"model.name=gpt", "model.n_layer=2", "model.n_head=4",
                                                     "model.n_embd=64", "model.block_size=32", "model.vocab_size=300",
                                                     "model.bias=false", "model.dropout=0"});
  // Fine-tuning may change the dropout, and shorten the context (nanoGPT's override_args, crop_block_size).
  CHECK(keys.free == std::vector<std::string>{"model.dropout"});
  CHECK(keys.at_most == std::vector<std::string>{"model.block_size"});
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model_type": "gpt2"})", R"(: activation_function "gelu_new" (GPT-2's own tanh approximation), which)"},
           {"{" + base + ", \"n_inner\": 100}", ": n_inner 100, which ddprun's GPT (nanoGPT's) does not have"},
           {"{" + base + ", \"layer_norm_epsilon\": 1e-6}", ": layer_norm_epsilon 1e-06, which ddprun's GPT"},
           {"{" + base + ", \"scale_attn_by_inverse_layer_idx\": true}", ": scale_attn_by_inverse_layer_idx true, which"},
           {"{" + base + ", \"tie_word_embeddings\": false}", ": tie_word_embeddings false, which ddprun's GPT"},
           {"{" + base + ", \"resid_pdrop\": 0.1, \"attn_pdrop\": 0}", ": attn_pdrop other than resid_pdrop's 0.1"}}) {
    INFO(text);
    write_file(file, text);
    CHECK_THAT(config_refusal(dir.path()), Catch::StartsWith(file + expected));
  }
}

TEST_CASE("Hugging Face: shards are read through their index, and each fault of an index is named",
          "[model][hugging_face]") {
  TempDir dir;
  const auto a = torch::arange(6, torch::kFloat).reshape({2, 3}), b = torch::ones({4}), c = torch::zeros({1});
  ddp::write_safetensors(dir.file("one.safetensors"), {{"a", a}, {"b", b}});
  ddp::write_safetensors(dir.file("two.safetensors"), {{"c", c}});
  const std::string index = dir.file("model.safetensors.index.json");
  write_file(index, R"({"weight_map": {"a": "one.safetensors", "b": "one.safetensors", "c": "two.safetensors"}})");
  auto entries = ddp::read_state_dict_file(dir.path());
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].first == "a");
  CHECK(torch::equal(entries[0].second, a));
  CHECK(entries[2].first == "c");

  CHECK(weights_refusal(dir.file("nowhere")) == "cannot read model weights " + dir.file("nowhere") +
                                                    ": No such file or directory");
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{}", index + ": no weight_map object (tensor name → shard file)"},
           {R"({"weight_map": {}})", index + ": weight_map lists no tensor"},
           {R"({"weight_map": {"a": 3}})", index + ": weight_map.a: expected a file name, got 3"},
           {R"({"weight_map": {"a": "../one.safetensors"}})",
            index + ": weight_map.a: \"../one.safetensors\" is not a file name in " + dir.path()},
           {R"({"weight_map": {"a": "three.safetensors"}})",
            index + ": weight_map.a is in three.safetensors, which is not in " + dir.path()},
           {R"({"weight_map": {"a": "one.safetensors", "c": "two.safetensors"}})",
            dir.file("one.safetensors") + ": tensor 'b' is not in the index's weight_map"},
           {R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": "two.safetensors"}})",
            dir.file("one.safetensors") + ": tensor 'b' is here, but the index puts it in " + dir.file("two.safetensors")},
           {R"({"weight_map": {"a": "one.safetensors", "b": "one.safetensors", "c": "two.safetensors",
                              "d": "two.safetensors"}})",
            dir.file("two.safetensors") + ": holds no tensor 'd', which the index puts there"}}) {
    INFO(text);
    write_file(index, text);
    CHECK(weights_refusal(dir.path()) == expected);
  }
  // A name in two shards.
  ddp::write_safetensors(dir.file("two.safetensors"), {{"a", c}, {"x", c}});
  write_file(index, R"({"weight_map": {"a": "one.safetensors", "b": "one.safetensors", "x": "two.safetensors"}})");
  CHECK(weights_refusal(dir.path()) ==
        dir.file("two.safetensors") + ": tensor 'a' is also in " + dir.file("one.safetensors"));
  ddp::write_safetensors(dir.file("model.safetensors"), {{"a", a}});
  CHECK(ddp::read_state_dict_file(dir.path()).size() == 1);  // one model.safetensors wins over an index
}

}  // namespace DDP_TEST_FILE
