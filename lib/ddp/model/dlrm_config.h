#pragma once
// The dlrm family's model.* keys (dlrm.cpp declares them and builds the model).

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// DLRM (Naumov et al., 2019), the click-through model of the Criteo layout (criteo_file.h): counts
/// through a bottom MLP, each categorical feature through an embedding table, the pairwise dot
/// products of those vectors, and a top MLP to one logit.
struct DlrmConfig {
  int64_t embedding_dim = 16;                  ///< width of every table's rows and of the bottom MLP's output
  std::vector<int64_t> embedding_rows = {100000};  ///< rows per table: one value for all 26, or one each
  std::vector<int64_t> bottom_mlp = {64, 32};  ///< hidden widths of the bottom MLP (then embedding_dim)
  std::vector<int64_t> top_mlp = {64, 32};     ///< hidden widths of the top MLP (then one logit)
};

/// Declares the dlrm keys, bound to `config`; their rules apply when `model_name` is dlrm.
void declare_config(ConfigSchema& schema, DlrmConfig& config, const std::string& model_name);

}  // namespace ddp
