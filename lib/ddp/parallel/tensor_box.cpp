#include "ddp/parallel/tensor_box.h"

#include <algorithm>
#include <functional>

namespace ddp {

int64_t TensorBox::numel() const {
  int64_t n = 1;
  for (int64_t size : sizes) n *= size;
  return n;
}

std::string TensorBox::describe() const {
  std::string text = "[";
  for (std::size_t d = 0; d < sizes.size(); ++d)
    text += (d ? ", " : "") + std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + sizes[d]);
  return text + "]";
}

TensorBox whole_box(const std::vector<int64_t>& shape) { return {std::vector<int64_t>(shape.size(), 0), shape}; }

std::vector<RunBox> boxes_of_run(const std::vector<int64_t>& shape, int64_t begin, int64_t numel) {
  std::vector<RunBox> boxes;
  if (numel <= 0) return boxes;
  if (shape.empty()) return {{TensorBox{}, 0}};  // a scalar: its one element
  // Elements [lo, hi) of the sub-tensor at `prefix` (its leading indices fixed), `first` into the run.
  std::function<void(std::vector<int64_t>, std::size_t, int64_t, int64_t, int64_t)> tile =
      [&](std::vector<int64_t> prefix, std::size_t dim, int64_t lo, int64_t hi, int64_t first) {
        int64_t inner = 1;
        for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
        auto emit = [&](int64_t row, int64_t rows) {
          TensorBox box{prefix, std::vector<int64_t>(dim, 1)};
          box.offsets.push_back(row);
          box.sizes.push_back(rows);
          for (std::size_t d = dim + 1; d < shape.size(); ++d) {
            box.offsets.push_back(0);
            box.sizes.push_back(shape[d]);
          }
          boxes.push_back({std::move(box), first});
          first += rows * inner;
        };
        int64_t row = lo / inner;
        if (lo % inner != 0 || (hi - lo < inner)) {
          // A part of one row (or the run's head): its own sub-tensor, one dimension further in.
          int64_t end = std::min(hi, (row + 1) * inner);
          auto inside = prefix;
          inside.push_back(row);
          tile(inside, dim + 1, lo - row * inner, end - row * inner, first);
          first += end - lo;
          lo = end;
          row += 1;
          if (lo >= hi) return;
        }
        int64_t rows = (hi - lo) / inner;
        if (rows > 0) emit(row, rows);
        lo += rows * inner;
        if (lo < hi) {
          auto inside = prefix;
          inside.push_back(row + rows);
          tile(inside, dim + 1, 0, hi - lo, first);
        }
      };
  tile({}, 0, begin, begin + numel, 0);
  return boxes;
}

std::vector<TensorBox> boxes_of_slice_run(const std::vector<int64_t>& slice_shape, const std::vector<TensorBox>& slices,
                                          int64_t begin, int64_t numel) {
  std::vector<TensorBox> boxes;
  for (const RunBox& run : boxes_of_run(slice_shape, begin, numel)) {
    int64_t at = 0;  // where slice k begins along dimension 0 of the slice tensor
    for (const TensorBox& slice : slices) {
      const int64_t lo = std::max(run.box.offsets[0], at);
      const int64_t hi = std::min(run.box.offsets[0] + run.box.sizes[0], at + slice.sizes[0]);
      if (lo < hi) {  // cut along dimension 0 only: the run's order is kept
        TensorBox box = run.box;
        box.offsets[0] = lo - at;
        box.sizes[0] = hi - lo;
        for (std::size_t d = 0; d < box.offsets.size(); ++d) box.offsets[d] += slice.offsets[d];
        boxes.push_back(std::move(box));
      }
      at += slice.sizes[0];
    }
  }
  return boxes;
}

std::optional<TensorBox> box_overlap(const TensorBox& a, const TensorBox& b) {
  TensorBox overlap;
  for (std::size_t d = 0; d < a.sizes.size(); ++d) {
    int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (lo >= hi) return std::nullopt;
    overlap.offsets.push_back(lo);
    overlap.sizes.push_back(hi - lo);
  }
  return overlap;
}

torch::Tensor narrow_to(const torch::Tensor& values, const TensorBox& box, const TensorBox& part) {
  torch::Tensor view = values;
  for (std::size_t d = 0; d < box.sizes.size(); ++d)
    view = view.narrow(static_cast<int64_t>(d), part.offsets[d] - box.offsets[d], part.sizes[d]);
  return view;
}

}  // namespace ddp
