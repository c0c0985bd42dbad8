#pragma once
// Gradient sync as the loop sees it (flashlight's Reducer: prepare / finish): which ranks average
// what, and how, is the parallel plan's choice (ddp/parallel).

namespace ddp {

/// Time spent in gradient communication in one step.
struct ReducerTiming {
  double total_ms = 0;    ///< from the first launch to the last completion
  double exposed_ms = 0;  ///< of that, after backward ended: what the step waited for
};

/// Makes the gradients of one optimizer step what the optimizer must see.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Before the backward of an optimizer step's last micro-step (earlier ones only accumulate).
  virtual void prepare() = 0;
  /// After that backward: the gradients are ready for the optimizer.
  virtual void finish() = 0;
  /// Zeroes the gradients for the next step (instead of the optimizer's zero_grad).
  virtual void zero_grad() = 0;
  /// The last step's communication time.
  virtual const ReducerTiming& timing() const = 0;
};

}  // namespace ddp
