#pragma once
// What the loop trains, without the loop knowing what it is. A task supplies the model, makes the
// batches, and computes the loss and the eval metrics; the loop (ddp/loop) owns the rest: the
// schedule of steps, gradient sync, evaluation, checkpoints and signals.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddp/data/batch.h"
#include "ddp/data/data_config.h"
#include "ddp/model/model_config.h"
#include "ddp/model/model_registry.h"
#include "ddp/task/loss.h"
#include "ddp/task/task_config.h"

namespace ddp {

/// Per-row cross-entropy of logits [N, V] (or a rank's slice of the vocabulary) against targets [N],
/// with label smoothing as torch's.
using TokenLoss =
    std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing)>;

/// Which samples a batch comes from.
enum class Split { kTrain, kEval };

/// One kind of learning, chosen by train.task: supervised classification or regression of one output
/// per sample, node classification on a graph.
class Task {
 public:
  virtual ~Task() = default;

  /// The network being trained: its parameters, buffers, train()/eval() and state_dict.
  virtual torch::nn::Module& model() = 0;

  /// The epoch the coming training batches belong to (graph sampling draws per epoch). The loop
  /// calls it before it starts an epoch's batches, none of the previous epoch's being in flight.
  virtual void set_epoch(int64_t epoch) { (void)epoch; }

  /// Samples in `split`: the sampler deals [0, size) out to the ranks. 0 when there is no eval split.
  virtual int64_t size(Split split) const = 0;

  /// A digest of samples of the training data's content ("" when the task takes none): the same
  /// on every node that holds the same data, wherever its files lie, and, almost surely, not for
  /// data rewritten at the same size. Ranks compare it at start.
  virtual std::string data_content() const { return ""; }

  /// The training data as lines of text that change when it does (its files and their sizes, the
  /// sample count, their content: Note [Data content lines]). Checkpoints record it and a resume
  /// on other data is refused: the sampler's order depends on it. This default: the count of
  /// training samples and data_content().
  virtual std::string data_fingerprint() const {
    const std::string content = data_content();
    return "training samples: " + std::to_string(size(Split::kTrain)) + "\n" +
           (content.empty() ? "" : std::string(kDataContentLine) + "the training samples: " + content + "\n");
  }
  /// Note [Data content lines]: the lines of data_fingerprint() that say content, which checkpoints
  /// written before they were recorded lack (a resume of one compares the other lines alone).
  static constexpr const char* kDataContentLine = "content of ";

  /// The batch of samples `indices` (int64 [B]) of `split`, on the CPU. Called from the prefetch
  /// threads, several at once.
  virtual Batch make_batch(Split split, const torch::Tensor& indices) const = 0;

  /// Forward and loss of a training batch already on the model's device: the mean over its samples.
  virtual torch::Tensor loss(const Batch& batch) = 0;

  /// Pipeline stages: the loss of `output`, the model's output for `batch`, which the last stage
  /// computed. Tasks whose model runs as blocks (Model::blocks) have it.
  virtual torch::Tensor output_loss(const torch::Tensor& output, const Batch& batch) {
    (void)output, (void)batch;
    throw std::logic_error("this task's model does not run as pipeline stages");
  }
  /// Pipeline stages: metric_sums of the model's `output` for `batch`.
  virtual torch::Tensor output_metric_sums(const torch::Tensor& output, const Batch& batch) {
    (void)output, (void)batch;
    throw std::logic_error("this task's model does not run as pipeline stages");
  }

  /// The eval metrics, e.g. {"loss", "accuracy"}.
  virtual std::vector<std::string> metric_names() const = 0;

  /// An eval batch's per-sample metrics, summed over its samples: float64 [metric_names().size()].
  /// The evaluator adds them up over batches and ranks and divides by the sample count, so the
  /// result does not depend on the world size.
  virtual torch::Tensor metric_sums(const Batch& batch) = 0;

  /// Adds the metrics that follow from the means of metric_names() (a language model's perplexity
  /// is exp of its mean loss, not a mean of per-sample values) to `means`, in place.
  virtual void add_derived_metrics(std::vector<std::pair<std::string, double>>& means) const { (void)means; }

  /// The scores an evaluation ranks over its whole split (Note [Exact AUC]): metric_sums adds each
  /// batch's, the evaluator clears them before and gathers them after; null where none are ranked.
  virtual RankedScores* ranked_scores() { return nullptr; }

  /// Writes the trained model into `output_dir`: model.pt, a state_dict Python's torch.load reads,
  /// and whatever else the model has (TorchScript: model_scripted.pt). Throws FileError.
  virtual void save_model(const std::string& output_dir) const = 0;

  /// For a pass that leaves each rank a slice of the vocabulary's logits (Note [Tensor parallelism]):
  /// the loss and the metrics take the logits through `loss` from now on. False where the task's
  /// loss is not a cross-entropy over a vocabulary.
  virtual bool take_token_loss(TokenLoss loss) {
    (void)loss;
    return false;
  }
};

/// What a task is built with besides the configs it reads.
struct TaskContext {
  torch::Device device = torch::kCPU;  ///< where the model and batches live
  ModelContext model;                  ///< for layers that share statistics across ranks
  bool full_neighbourhood_eval = false; ///< graphs: evaluate over every neighbour (eval.full_neighbourhood)
  bool head_stays_whole = true;  ///< causal_lm: lm_head's weights outlive the forward (train.chunked_loss auto)
};

/// The task train.task names, from the registry (task_registry.h), its model initialised from the
/// global RNG and moved to the device. Throws ConfigError naming train.task when unknown, or naming
/// each key the task does not train with (task_mismatches); ConfigError or FileError naming the key
/// or file at fault as it loads.
std::unique_ptr<Task> make_task(const TaskConfig& task, const DataConfig& data, const SamplerConfig& sampler,
                                const ModelConfig& model, const LossConfig& loss, const TaskContext& context);

}  // namespace ddp
