#include "trainer_options.h"

#include <climits>

#include "ddp/common/cli_values.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/version.h"
#include "ddp/common/worker_contract.h"

namespace ddp {

void declare_trainer_options(CLI::App& app, TrainerArguments& args, WorkerIdentity& identity) {
  app.add_option("config", args.config, "Trainer config (YAML)")->required();
  app.add_option("--set", args.overrides, "Override a config key, e.g. --set train.epochs=3 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--rank", identity.rank, "This process's rank (default $RANK or 0)")
      ->transform(integer_in(INT_MIN, INT_MAX, /*in_help=*/false));  // validate() says what fits
  app.add_option("--world-size", identity.world_size, "Number of processes (default $WORLD_SIZE or 1)")
      ->transform(integer_in(INT_MIN, INT_MAX, /*in_help=*/false));
  app.add_option("--master-addr", identity.master_addr,
                 "Rendezvous host (default $MASTER_ADDR or " + std::string(kDefaultMasterAddr) + ")");
  app.add_option("--master-port", identity.master_port,
                 "Rendezvous port (default $MASTER_PORT or " + std::to_string(kDefaultMasterPort) + ")")
      ->transform(integer_in(INT_MIN, INT_MAX, /*in_help=*/false));
  app.add_option("--threads", args.threads,
                 "Run N ranks as threads of this process, on the CPU (dist.threads): one command, no launcher")
      ->transform(integer_in(1, 1024));
  app.add_option("--devices", args.devices,
                 "Run a rank thread on each of these CUDA devices, e.g. 0,1,2 (dist.devices)");
  app.add_flag("--print-config", args.print_config, "Print the resolved config and exit");
  app.set_version_flag("--version", version_line(), "Print the versions this binary was built with");
}

std::vector<std::string> rank_thread_overrides(const TrainerArguments& args) {
  std::vector<std::string> overrides;
  if (args.threads > 0) overrides.push_back("dist.threads=" + std::to_string(args.threads));
  if (!args.devices.empty()) {
    std::string list;
    for (const auto& device : split(args.devices, ',')) {
      auto index = parse_int(device);
      if (!index || *index < 0)
        throw UserError("--devices: expected CUDA device numbers separated by commas (0,1,2), got '" + args.devices + "'");
      list += (list.empty() ? "" : ", ") + std::to_string(*index);
    }
    overrides.push_back("dist.devices=[" + list + "]");
  }
  return overrides;
}

}  // namespace ddp
