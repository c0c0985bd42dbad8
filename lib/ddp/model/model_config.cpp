#include "ddp/model/model_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, ModelConfig& config, const std::vector<std::string>& task_models) {
  schema.section("model", "Which network, by registry name, and its parameters.");
  std::vector<std::string> names = model_names();
  names.insert(names.end(), task_models.begin(), task_models.end());
  schema.add("model.name", &config.name,
             "network from the model registry, or one a task builds itself (graphsage: train.task node_classification)")
      .choices(names);
  schema.add("model.path", &config.path,
             "torchscript: the module to train, as torch.jit.script(model).save(path) wrote it (a trained "
             "model_scripted.pt too)")
      .file_path();
  schema.add("model.jit_optimize", &config.jit_optimize,
             "torchscript: let TorchScript's profiling executor specialise and optimise the graph; off runs "
             "it as saved, which measured faster for training on CPU");
  schema.add("model.init_from", &config.init_from,
             "start from these weights instead of a fresh initialisation: a state_dict file, as model.pt "
             "or torch.save(model.state_dict(), path) writes it")
      .file_path();
  schema.add("model.num_classes", &config.num_classes, "built-in models: outputs of the last layer").min(kMinClasses)
      .max(1e7);
  schema.add("model.batchnorm", &config.batchnorm, "convnet: BatchNorm2d after each conv");
  schema.add("model.sync_batchnorm", &config.sync_batchnorm,
             "convnet: BatchNorm statistics over the global batch of all ranks, as torch.nn.SyncBatchNorm; "
             "world N with batch b then trains as world 1 with batch N·b");
  schema.add("model.relu", &config.relu, "convnet: ReLU after each max-pooling (the same as before it)");
  schema.add("model.channels_last", &config.channels_last,
             "convnet, torchscript: channels-last (NHWC) memory format for 4-D weights and inputs, whose CPU "
             "kernels are faster; same model and weights, results equal up to float rounding (off for a module "
             "that calls .view, which a channels-last tensor cannot take)");
  schema.add("model.hidden", &config.hidden, "mlp, graphsage: hidden layer widths, input side first").min(1)
      .max(1e6);
  schema.add("model.aggregation", &config.aggregation, "graphsage: how a node combines its neighbours' features")
      .choices({"mean", "max", "sum"});
  schema.add("model.normalize", &config.normalize, "graphsage: L2-normalise each layer's output");
  schema.add("model.dropout", &config.dropout,
             "graphsage: dropout between layers; gpt: after the embeddings, on the attention weights and after "
             "each residual branch, as nanoGPT")
      .min(0)
      .max(1);
  schema.add("model.n_layer", &config.n_layer, "gpt: transformer blocks").min(1).max(1000);
  schema.add("model.n_head", &config.n_head, "gpt: attention heads per block; model.n_embd must divide by it")
      .min(1)
      .max(1024);
  schema.add("model.n_embd", &config.n_embd, "gpt: the width of the residual stream").min(1).max(1e6);
  schema.add("model.block_size", &config.block_size,
             "gpt: positions of context; train.task causal_lm: tokens per sample's inputs (a sample is a window of "
             "block_size + 1 tokens, its inputs and next-token targets)")
      .min(1)
      .max(1e7);
  schema.add("model.vocab_size", &config.vocab_size,
             "gpt: token ids 0 to vocab_size - 1; every token of the data is checked against it (256: byte-level "
             "text, as scripts/make_tokens.py writes)")
      .min(2)
      .max(1e9);
  schema.add("model.bias", &config.bias, "gpt: biases in the Linear and LayerNorm layers (nanoGPT's bias)");
  schema.rule("model.path", [&config]() -> std::string {
    return config.name == "torchscript" && config.path.empty() ? "must name the module file when model.name is torchscript"
                                                               : "";
  });
  schema.rule("model.sync_batchnorm", [&config]() -> std::string {
    return config.name == "torchscript" && config.sync_batchnorm ? "is not available for TorchScript modules" : "";
  });
  schema.rule("model.n_head", [&config]() -> std::string {
    return config.name == "gpt" && config.n_head > 0 && config.n_embd % config.n_head != 0
               ? "model.n_embd " + std::to_string(config.n_embd) + " must divide by it (" + std::to_string(config.n_head) +
                     " heads)"
               : "";
  });
  schema.rule("model.hidden", [&config]() -> std::string {
    return config.name == "mlp" && config.hidden.empty() ? "must not be empty when model.name is mlp" : "";
  });
}

}  // namespace ddp
