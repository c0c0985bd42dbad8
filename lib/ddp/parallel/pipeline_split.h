#pragma once
// Where a model's layers are cut into pipeline stages (dist.pipeline_split).

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

/// Stage s runs layers [bounds[s], bounds[s + 1]) of the `names.size()` layers: `stages + 1`
/// ascending indices. `split`: the names of the layers that begin stages 1.. (comma-separated), or
/// empty to balance `sizes` (each layer's parameter elements) over the stages. ConfigError naming
/// dist.pipeline or dist.pipeline_split when the layers cannot make that many stages, or a name is
/// not a layer's (with the nearest one) or out of order.
std::vector<int> split_pipeline(const std::vector<std::string>& names, const std::vector<int64_t>& sizes, int stages,
                                const std::string& split);

}  // namespace ddp
