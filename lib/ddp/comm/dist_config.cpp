#include "ddp/comm/dist_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, DistConfig& config) {
  schema.section("dist", "The process group and gradient sync.");
  schema.add("dist.backend", &config.backend,
             "process group backend; auto: nccl when every rank of a node has a GPU of its own, else gloo "
             "(which also sums CUDA tensors)")
      .choices({"auto", "gloo", "nccl"});
  schema.add("dist.device", &config.device,
             "where the model and batches live; auto: cuda:LOCAL_RANK (modulo the GPUs) on a CUDA build with a "
             "visible GPU, else cpu")
      .choices({"auto", "cpu", "cuda"});
  schema.rule("dist.backend", [&config]() -> std::string {
    return config.backend == "nccl" && config.device == "cpu" ? "nccl sums CUDA tensors, and dist.device is cpu; use gloo"
                                                              : "";
  });
  schema.add("dist.timeout_s", &config.timeout_s, "seconds a collective or the rendezvous may wait before it fails")
      .greater_than(0)
      .max(kMaxSeconds);
  schema.add("dist.bucket_cap_mb", &config.bucket_cap_mb, "gradient bucket size in MiB").greater_than(0)
      .max(4096);
  schema.add("dist.first_bucket_mb", &config.first_bucket_mb,
             "size of the first bucket in MiB: small, so its all-reduce starts early in backward")
      .greater_than(0)
      .max(4096);
  schema.add("dist.overlap", &config.overlap, "all-reduce buckets during backward, as their gradients become ready");
  schema.add("dist.shared_memory", &config.shared_memory,
             "sum gradients through shared memory among the ranks of each node on the CPU (across nodes: "
             "one Gloo leader per node); false: all through the backend (Gloo)");
}

}  // namespace ddp
