#include "ddp/model/token_sampler.h"

#include <torch/torch.h>

#include <cmath>

#include "ddp/common/error.h"
#include "ddp/model/token_stepper.h"

namespace ddp {

torch::Tensor WindowStepper::feed(const std::vector<int64_t>& tokens) {
  context_.insert(context_.end(), tokens.begin(), tokens.end());
  const auto start = static_cast<std::ptrdiff_t>(std::max<int64_t>(0, static_cast<int64_t>(context_.size()) - block_size_));
  auto window = torch::tensor(std::vector<int64_t>(context_.begin() + start, context_.end()), torch::kLong).unsqueeze(0);
  return model_.forward(window).select(1, -1).squeeze(0).to(torch::kFloat);
}

std::vector<int64_t> sample_tokens(Model& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                                   const std::function<void(int64_t)>& emit) {
  const int64_t vocab = model.output_width();
  if (prompt.empty()) throw UserError("the prompt is empty: generation needs at least one token to start from");
  for (int64_t id : prompt)
    if (id < 0 || id >= vocab)
      throw UserError("prompt token " + std::to_string(id) + " is outside the model's vocabulary (ids 0 to " +
                      std::to_string(vocab - 1) + ")");
  model.eval();
  torch::NoGradGuard no_grad;
  std::unique_ptr<TokenStepper> stepper = model.token_stepper();
  if (!stepper) throw UserError("this model cannot be sampled from: it is not a causal language model (gpt, llama)");
  auto generator = at::detail::createCPUGenerator(options.seed);
  std::vector<int64_t> drawn;
  torch::Tensor logits = stepper->feed(prompt);
  for (int64_t n = 0; n < options.tokens; ++n) {
    logits = logits.to(torch::kDouble);
    // A model whose weights hold NaN or infinity (a run that diverged) gives logits that are no
    // numbers; said so here, not as multinomial's "probability tensor contains either inf, nan".
    if (!torch::isfinite(logits).all().item<bool>())
      throw UserError("the model's output for token " + std::to_string(n + 1) +
                      " is not a number (NaN or infinite): its weights are broken, as a diverged run's are");
    if (options.id_limit > 0 && options.id_limit < logits.size(0))
      logits.narrow(0, options.id_limit, logits.size(0) - options.id_limit).fill_(-INFINITY);
    int64_t next;
    // A temperature so small that the logits overflow divided by it (1e-320) is temperature 0's
    // limit, the most likely token; multinomial would be handed NaNs.
    torch::Tensor scaled = options.temperature > 0 ? logits / options.temperature : logits;
    if (options.temperature <= 0 || std::isinf(scaled.max().item<double>())) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = scaled;
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        double kth = std::get<0>(logits.topk(options.top_k)).index({-1}).item<double>();
        logits.masked_fill_(logits < kth, -INFINITY);
      }
      next = torch::multinomial(torch::softmax(logits, 0), 1, false, generator).item<int64_t>();
    }
    drawn.push_back(next);
    if (emit) emit(next);
    if (n + 1 < options.tokens) logits = stepper->feed({next});
  }
  return drawn;
}

}  // namespace ddp
