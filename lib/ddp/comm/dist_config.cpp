#include "ddp/comm/dist_config.h"

#include <set>

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
  // Below a second no rendezvous connects, and every collective fails with a bare time-out.
  schema.add("dist.timeout_s", &config.timeout_s, "seconds a collective or the rendezvous may wait before it fails")
      .min(1)
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
  schema.add("dist.threads", &config.threads,
             "ranks as threads of this one process, each with its own replica (DataParallel's use, without "
             "its GIL or its gather on one device): N ranks on the CPU with the cores split between them, "
             "the same algorithm, results and outputs as N processes; 0: one rank per process (ddprun). "
             "ddp-train --threads N sets it")
      .min(0)
      .max(1024);
  schema.add("dist.devices", &config.devices,
             "the CUDA devices of the rank threads, one rank each ([0, 1, 2]); sets the rank count. "
             "ddp-train --devices 0,1,2 sets it")
      .min(0)
      .max(127);  // LibTorch 1.13 names a device by an 8-bit index
  schema.rule("dist.devices", [&config]() -> std::string {
    if (config.devices.empty()) return "";
    if (std::set<int64_t>(config.devices.begin(), config.devices.end()).size() != config.devices.size())
      return "a device may appear once (each is one rank's)";
    if (config.device == "cpu") return "names CUDA devices, and dist.device is cpu; use dist.threads for CPU ranks";
    if (config.threads != 0 && config.threads != static_cast<int64_t>(config.devices.size()))
      return "gives " + std::to_string(config.devices.size()) + " rank threads and dist.threads " +
             std::to_string(config.threads) + "; set one of them";
    return "";
  });
}

int rank_threads(const DistConfig& config) {
  return config.devices.empty() ? static_cast<int>(config.threads) : static_cast<int>(config.devices.size());
}

}  // namespace ddp
