#include "ddp/loop/same_weights.h"

#include <optional>

#include "ddp/comm/collectives.h"
#include "ddp/common/error.h"
#include "ddp/model/weights_fingerprint.h"

namespace ddp {

void check_same_weights(const Communicator& world, const std::string& path) {
  // A rank that cannot read its copy still takes part, so that no other waits for it.
  std::string mine;
  std::optional<FileError> failed;
  try {
    mine = weights_fingerprint(path);
  } catch (const FileError& e) {
    failed = e;
    mine = "unreadable";
  }
  std::string first = mine;
  broadcast_bytes(world, first, 0);
  auto differs = torch::zeros({world.world_size}, torch::kDouble);
  differs[world.rank] = mine == first ? 0.0 : 1.0;
  differs = all_reduce_sum(world, differs);
  if (failed) throw FileError("model.init_from: " + std::string(failed->what()));
  std::string ranks;
  for (int r = 0; r < world.world_size; ++r)
    if (differs[r].item<double>() > 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    throw UserError("model.init_from: " + path + " on rank(s) " + ranks + " is not rank 0's (another file at that " +
                    "path on their node, or one that could not be read there): give every node the same weights");
}

}  // namespace ddp
