#include "ddp/data/dataset.h"

namespace ddp {

torch::Tensor Dataset::select(const torch::Tensor& indices) const {
  if (!feature_file) return features.index_select(0, indices);
  return feature_file->read(file_rows.defined() ? file_rows.index_select(0, indices) : indices);
}

Dataset Dataset::subset(const torch::Tensor& rows) const {
  Dataset part;
  part.labels = labels.index_select(0, rows);
  part.source = source;
  part.feature_file = feature_file;
  part.source_rows = source_rows.defined() ? source_rows.index_select(0, rows) : rows.to(torch::kLong).clone();
  if (feature_file)
    part.file_rows = file_rows.defined() ? file_rows.index_select(0, rows) : rows.to(torch::kLong).clone();
  else
    part.features = features.index_select(0, rows);
  return part;
}

}  // namespace ddp
