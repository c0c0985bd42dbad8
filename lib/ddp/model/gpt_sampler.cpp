#include "ddp/model/gpt_sampler.h"

#include <torch/torch.h>

#include "ddp/common/error.h"

namespace ddp {

std::vector<int64_t> sample_tokens(Gpt& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                                   const std::function<void(int64_t)>& emit) {
  const GptOptions& shape = model.options();
  if (prompt.empty()) throw UserError("the prompt is empty: generation needs at least one token to start from");
  for (int64_t id : prompt)
    if (id < 0 || id >= shape.vocab_size)
      throw UserError("prompt token " + std::to_string(id) + " is outside the model's vocabulary (ids 0 to " +
                      std::to_string(shape.vocab_size - 1) + ")");
  model.eval();
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(options.seed);
  std::vector<int64_t> context = prompt, drawn;
  for (int64_t n = 0; n < options.tokens; ++n) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(context.size()) - shape.block_size);
    auto window = torch::tensor(std::vector<int64_t>(context.begin() + start, context.end()), torch::kLong).unsqueeze(0);
    torch::Tensor logits = model.forward(window).select(1, -1).squeeze(0).to(torch::kDouble);
    int64_t next;
    if (options.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / options.temperature;
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        double kth = std::get<0>(logits.topk(options.top_k)).index({-1}).item<double>();
        logits.masked_fill_(logits < kth, -INFINITY);
      }
      next = torch::multinomial(torch::softmax(logits, 0), 1, false, generator).item<int64_t>();
    }
    context.push_back(next);
    drawn.push_back(next);
    if (emit) emit(next);
  }
  return drawn;
}

}  // namespace ddp
