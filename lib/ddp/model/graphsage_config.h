#pragma once
// The graphsage family's model.* keys (graphsage.cpp declares them; train.task node_classification
// builds the model, as graph_task.cpp says why).

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// GraphSAGE over sampled neighbourhoods, as model.* shapes it (its outputs: model.num_classes).
struct GraphSageConfig {
  std::vector<int64_t> hidden = {256, 128};  ///< hidden layer widths, input side first
  std::string aggregation = "mean";          ///< mean | max | sum of the neighbours' features
  bool normalize = false;                    ///< L2-normalise each layer's output
  double dropout = 0;                        ///< between layers
};

/// Declares the graphsage keys, bound to `config`.
void declare_config(ConfigSchema& schema, GraphSageConfig& config);

}  // namespace ddp
