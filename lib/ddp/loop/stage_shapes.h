#pragma once
// The shapes of the activations between two pipeline stages, learnt once (Note [Shapes between
// stages]).

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace ddp {

// Note [Shapes between stages]
// A stage must know what it receives (shape and dtype) to post its receive. A header saying so
// would be read on the host at every microbatch: on a GPU, a wait for the device each time (issue
// 42). So the header travels only while the shape is new. Every stage loads the same batches, and
// what a stage outputs for a microbatch has a shape that follows the microbatch's input shape, so
// both ends of a link keep a table from that input shape to what crossed, and a microbatch carries
// a header exactly when its key was not in the table as the step began: both ends saw the same
// steps, so they agree without a word. A sender whose output for a known key has another shape (a
// model whose shapes follow values, not the batch's shape) stops, saying so. Gradients need no
// header at all: a stage's output gradient has its output's shape and dtype. Evaluation keeps
// tables of its own, each batch a step: a shape new at one batch crosses bare from the next.

/// One end's table for one link (Note [Shapes between stages]).
class StageShapes {
 public:
  struct Shape {
    std::vector<int64_t> sizes;
    c10::ScalarType dtype = c10::ScalarType::Float;
    bool operator==(const Shape&) const = default;
  };

  /// What crossed for microbatches of input shape `key` in an earlier step; nullopt: new this step,
  /// so a header goes with it.
  std::optional<Shape> known(const std::vector<int64_t>& key) const;
  /// What crossed now for `key`, known from the next step on.
  void learn(const std::vector<int64_t>& key, Shape shape);
  /// The step is over: what it learnt is known.
  void step_ends();

 private:
  std::map<std::vector<int64_t>, Shape> known_, learnt_;
};

}  // namespace ddp
