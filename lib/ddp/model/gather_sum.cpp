#include "ddp/model/gather_sum.h"

#include <torch/autograd.h>

namespace ddp {
namespace {

// out[to[e]] += in[from[e]] for every edge e, rows of `width` floats, in edge order.
void scatter_rows(const float* in, const int64_t* from, const int64_t* to, int64_t edges, int64_t width, float* out) {
  for (int64_t e = 0; e < edges; ++e) {
    const float* row = in + from[e] * width;
    float* sum = out + to[e] * width;
    for (int64_t f = 0; f < width; ++f) sum[f] += row[f];
  }
}

class GatherSum : public torch::autograd::Function<GatherSum> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& src, const torch::Tensor& dst, int64_t num_dst) {
    auto input = x.contiguous();
    auto from = src.contiguous(), to = dst.contiguous();
    auto out = torch::zeros({num_dst, input.size(1)}, input.options());
    scatter_rows(input.data_ptr<float>(), from.data_ptr<int64_t>(), to.data_ptr<int64_t>(), from.numel(), input.size(1),
                 out.data_ptr<float>());
    ctx->save_for_backward({from, to});
    ctx->saved_data["rows"] = input.size(0);
    return {out, input.narrow(0, 0, num_dst).clone()};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& sums = grads[0].defined() ? grads[0] : grads[1];
    auto grad_x = torch::zeros({ctx->saved_data["rows"].toInt(), sums.size(1)}, sums.options());
    if (grads[0].defined()) {  // the messages' gradient is grad[dst]; index_select's backward adds it into src's rows
      auto grad = grads[0].contiguous();
      scatter_rows(grad.data_ptr<float>(), saved[1].data_ptr<int64_t>(), saved[0].data_ptr<int64_t>(), saved[0].numel(),
                   grad.size(1), grad_x.data_ptr<float>());
    }
    if (grads[1].defined()) grad_x.narrow(0, 0, grads[1].size(0)).add_(grads[1]);
    return {grad_x, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> gather_sum(const torch::Tensor& x, const torch::Tensor& src,
                                                   const torch::Tensor& dst, int64_t num_dst) {
  if (x.scalar_type() != torch::kFloat || !x.device().is_cpu() || x.dim() != 2)  // the loop is for CPU float32
    return {torch::zeros({num_dst, x.size(1)}, x.options()).index_add_(0, dst, x.index_select(0, src)),
            x.narrow(0, 0, num_dst)};
  auto outputs = GatherSum::apply(x, src, dst, num_dst);
  return {outputs[0], outputs[1]};
}

}  // namespace ddp
