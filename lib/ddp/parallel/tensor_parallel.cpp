#include "ddp/parallel/tensor_parallel.h"

#include <torch/torch.h>

#include "ddp/comm/collectives.h"
#include "ddp/comm/shard_collectives.h"
#include "ddp/comm/shm_allreduce.h"

namespace ddp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a collective sends for `t`: Gloo sums float32 and float64, not the bfloat16 or half of a
// mixed-precision forward, which travel as float32 (and are rounded back after); NCCL takes them.
torch::Tensor on_the_wire(const Communicator& group, const torch::Tensor& t) {
  const bool narrow = t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
  return narrow && group.backend != "nccl" ? t.to(torch::kFloat) : t;
}

// Over the group, summed or by maximum, in `values`' type; a sum through shared memory where the
// group is its node's ranks (the shard collectives take the same path).
torch::Tensor all_reduce(const Communicator& group, const torch::Tensor& values, c10d::ReduceOp::RedOpType op) {
  if (group.world_size == 1) return values;
  torch::Tensor wide = on_the_wire(group, values);
  SharedMemoryAllReduce* shm = group.shared_memory.get();
  if (op == c10d::ReduceOp::SUM && shm && shm->size() == group.world_size && SharedMemoryAllReduce::supports(wide)) {
    const int64_t seq = group.tracker->begin("tensor all_reduce");
    group.tracker->wait(shm->run_async([shm, wide] { shm->sum(wide); }), seq);
    return wide.to(values.scalar_type());
  }
  std::vector<torch::Tensor> buffer{wide.contiguous().to(group.collective_device)};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp(op);
  const int64_t seq = group.tracker->begin("tensor all_reduce");
  group.tracker->wait(group.group->allreduce(buffer, options), seq);
  return buffer[0].to(values.device()).to(values.scalar_type());
}

torch::Tensor sum_over(const Communicator& group, const torch::Tensor& values) {
  return all_reduce(group, values.clone(), c10d::ReduceOp::SUM);
}

// The autograd context keeps the group by address: the functions below run inside a step, while
// the plan that owns the group lives.
const Communicator& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<const Communicator*>(ctx->saved_data["group"].toInt());
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const Communicator* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {sum_over(group_of(ctx), grads[0]), torch::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const Communicator* group) {
    (void)ctx;
    return sum_over(*group, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    (void)ctx;
    return {grads[0], torch::Tensor()};
  }
};

// The sequence (dimension 1) leading, contiguous, a copy: what the shard collectives take flat.
torch::Tensor sequence_leading(const torch::Tensor& x) {
  return x.transpose(0, 1).clone(at::MemoryFormat::Contiguous);
}

torch::Tensor gather_sequence(const Communicator& group, const torch::Tensor& x) {
  torch::Tensor part = sequence_leading(on_the_wire(group, x));
  auto sizes = part.sizes().vec();
  sizes[0] *= group.world_size;
  torch::Tensor full = torch::empty(sizes, part.options());
  all_gather(group, part.view(-1), full.view(-1)).wait();
  return full.transpose(0, 1).to(x.scalar_type());
}

torch::Tensor scatter_sequence_sum(const Communicator& group, const torch::Tensor& x) {
  torch::Tensor full = sequence_leading(on_the_wire(group, x));
  auto sizes = full.sizes().vec();
  TORCH_CHECK(sizes[0] % group.world_size == 0, "sequence parallelism: a sequence of ", sizes[0],
              " positions does not split over ", group.world_size, " ranks");
  sizes[0] /= group.world_size;
  torch::Tensor part = torch::empty(sizes, full.options());
  reduce_scatter(group, full.view(-1), part.view(-1), 1.0).wait();
  return part.transpose(0, 1).to(x.scalar_type());
}

torch::Tensor split_sequence(const Communicator& group, const torch::Tensor& x) {
  const int64_t part = x.size(1) / group.world_size;
  TORCH_CHECK(x.size(1) % group.world_size == 0, "sequence parallelism: a sequence of ", x.size(1),
              " positions does not split over ", group.world_size, " ranks");
  return x.narrow(1, group.rank * part, part).clone();
}

struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const Communicator* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return gather_sequence(*group, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {scatter_sequence_sum(group_of(ctx), grads[0]), torch::Tensor()};
  }
};

struct ReduceScatterToSequence : torch::autograd::Function<ReduceScatterToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const Communicator* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return scatter_sequence_sum(*group, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gather_sequence(group_of(ctx), grads[0]), torch::Tensor()};
  }
};

struct SplitToSequence : torch::autograd::Function<SplitToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const Communicator* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return split_sequence(*group, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gather_sequence(group_of(ctx), grads[0]), torch::Tensor()};
  }
};

// Note [Tensor regions]: Megatron's _VocabParallelCrossEntropy. With m the row's global maximum,
// loss = log Σ_v exp(z_v − m) − (z_t − m), where each rank sums its slice's exponentials and only
// the rank holding target t contributes z_t; the gradient is softmax − onehot(t) on each slice.
// With label smoothing ε (as torch's): (1 − ε)·that + ε·(log Σ_v exp(z_v − m) − mean_v (z_v − m)), the
// mean over the whole vocabulary summed over the group too; its gradient softmax − (1 − ε)·onehot − ε/V.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t first, const Communicator* group, double smoothing) {
    torch::Tensor z = logits.to(torch::kFloat);
    torch::Tensor maximum = all_reduce(*group, std::get<0>(z.max(-1)).contiguous(), c10d::ReduceOp::MAX);
    z = z - maximum.unsqueeze(-1);
    const int64_t width = z.size(-1);
    torch::Tensor outside = (targets < first).logical_or(targets >= first + width);
    torch::Tensor local = (targets - first).masked_fill(outside, 0);
    torch::Tensor target_logit = z.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0);
    target_logit = all_reduce(*group, target_logit.contiguous(), c10d::ReduceOp::SUM);
    torch::Tensor exps = z.exp();
    torch::Tensor sums = all_reduce(*group, exps.sum(-1).contiguous(), c10d::ReduceOp::SUM);
    torch::Tensor loss = sums.log() - target_logit;
    const int64_t vocabulary = width * group->world_size;
    if (smoothing > 0) {
      torch::Tensor mean = all_reduce(*group, z.sum(-1).contiguous(), c10d::ReduceOp::SUM) / static_cast<double>(vocabulary);
      loss = (1 - smoothing) * loss + smoothing * (sums.log() - mean);
    }
    ctx->save_for_backward({exps.div_(sums.unsqueeze(-1)), local, outside});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["vocabulary"] = vocabulary;
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor grad = saved[0].clone();  // softmax on this slice
    const double smoothing = ctx->saved_data["smoothing"].toDouble();
    torch::Tensor hit = saved[2].logical_not().to(grad.dtype()) * (1 - smoothing);
    grad.scatter_add_(-1, saved[1].unsqueeze(-1), -hit.unsqueeze(-1));
    if (smoothing > 0) grad.sub_(smoothing / static_cast<double>(ctx->saved_data["vocabulary"].toInt()));
    grad.mul_(grads[0].unsqueeze(-1));
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tensor_region(const torch::Tensor& x, const Communicator& group) {
  return group.world_size == 1 ? x : CopyToRegion::apply(x, &group);
}

torch::Tensor reduce_from_tensor_region(const torch::Tensor& x, const Communicator& group) {
  return group.world_size == 1 ? x : ReduceFromRegion::apply(x, &group);
}

torch::Tensor gather_from_sequence_region(const torch::Tensor& x, const Communicator& group) {
  return group.world_size == 1 ? x : GatherFromSequence::apply(x, &group);
}

torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, const Communicator& group) {
  return group.world_size == 1 ? x : ReduceScatterToSequence::apply(x, &group);
}

torch::Tensor split_to_sequence_region(const torch::Tensor& x, const Communicator& group) {
  return group.world_size == 1 ? x : SplitToSequence::apply(x, &group);
}

torch::Tensor tensor_slice(const torch::Tensor& whole, int64_t dim, int rank, int parts) {
  const int64_t size = whole.size(dim);
  TORCH_CHECK(size % parts == 0, "tensor_slice: dimension ", dim, " of ", size, " does not split into ", parts);
  return whole.narrow(dim, rank * (size / parts), size / parts);
}

torch::Tensor column_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     const Communicator& group, bool sequence_parallel) {
  torch::Tensor whole = sequence_parallel ? gather_from_sequence_region(x, group) : copy_to_tensor_region(x, group);
  return torch::nn::functional::linear(whole, weight, bias);
}

torch::Tensor row_parallel_linear(const torch::Tensor& x_slice, const torch::Tensor& weight, const torch::Tensor& bias,
                                  const Communicator& group, bool sequence_parallel) {
  torch::Tensor partial = torch::nn::functional::linear(x_slice, weight);
  torch::Tensor y = sequence_parallel ? reduce_scatter_to_sequence_region(partial, group)
                                      : reduce_from_tensor_region(partial, group);
  return bias.defined() ? y + bias : y;
}

torch::Tensor vocab_parallel_embedding(const torch::Tensor& ids, const torch::Tensor& weight, int64_t first,
                                       const Communicator& group) {
  torch::Tensor outside = (ids < first).logical_or(ids >= first + weight.size(0));
  torch::Tensor rows = torch::embedding(weight, (ids - first).masked_fill(outside, 0));
  rows = rows.masked_fill(outside.unsqueeze(-1), 0);
  return reduce_from_tensor_region(rows, group);
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t first,
                                           const Communicator& group, double label_smoothing) {
  return VocabParallelCrossEntropy::apply(logits, targets.to(torch::kLong), first, &group, label_smoothing);
}

}  // namespace ddp
