// ddp-train: one data-parallel worker. Started by ddprun (which sets RANK, WORLD_SIZE, ...),
// or by hand, one process per rank, as the PyTorch tutorials do; or, with --threads N, N ranks
// as threads of this one process (Note [Ranks as threads]).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "ddp/comm/collective_tracker.h"
#include "ddp/common/error.h"
#include "ddp/common/malloc_tuning.h"
#include "ddp/common/run_main.h"
#include "ddp/common/version.h"
#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/loop/thread_ranks.h"
#include "ddp/loop/train_config.h"
#include "ddp/loop/trainer.h"
#include "tool_command_line.h"
#include "trainer_options.h"

int main(int argc, char** argv) {
  // As CPython does at start-up, so torchrun's workers too: a write to a peer that has gone (Gloo
  // writes its sockets with plain writev) is an error that names the peer, not a silent SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  ddp::keep_freed_memory_for_reuse();
  ddp::WorkerIdentity identity;
  // Outside the body: on an error the message comes first, and the process then leaves without
  // destroying it (Gloo's teardown can wait a whole timeout for collectives that will never finish).
  std::unique_ptr<ddp::Trainer> trainer;
  ddp::ProgramErrors errors;
  errors.program = "ddp-train";
  errors.failure = "failed";
  errors.prefix = [&] { return "rank " + std::to_string(identity.rank) + ": "; };
  errors.exit_at_once = [&] { return trainer != nullptr; };
  errors.before_exit = ddp::CollectiveTracker::publish_last_words;  // rank threads take it too
  std::string memory_advice;                                        // the config's, once it is read
  errors.memory_advice = [&] { return memory_advice; };
  return ddp::run_main(errors, [&]() -> int {
    identity = ddp::worker_identity_from_environment();
    ddp::TrainerArguments args;
    CLI::App app("ddp-train: one data-parallel worker (see ddprun)", "ddp-train");
    ddp::declare_trainer_options(app, args, identity);
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForVersion&) {
      std::cout << ddp::version_line() << "\n";
      return ddp::kExitSuccess;
    } catch (const CLI::CallForHelp& e) {
      // The key list comes from the same declarations the parser uses, so it cannot drift.
      std::cout << app.help() << "\nConfig keys for --set, with their defaults (docs/config.md explains each):\n"
                << ddp::to_yaml(ddp::TrainConfig{});
      return ddp::kExitSuccess;
    } catch (const CLI::ParseError& e) {
      ddp::throw_command_line_error(e, app, "ddp-train");
    }
    if (app.count("--rank") && !app.count("--world-size") && !ddp::process_variable(ddp::env::kWorldSize))
      throw ddp::UserError("--rank needs --world-size");
    ddp::validate(identity);

    for (auto& assignment : ddp::rank_thread_overrides(args)) args.overrides.push_back(std::move(assignment));
    ddp::TrainConfig config = ddp::load_run_config(args.config, args.overrides);
    memory_advice = ddp::out_of_memory_advice(config);
    if (args.print_config) {
      std::cout << ddp::to_yaml(config);
      return ddp::kExitSuccess;
    }
    spdlog::set_pattern("[%H:%M:%S] %^%l%$: %v");
    spdlog::set_level(identity.rank == 0 ? spdlog::level::info : spdlog::level::warn);
    if (identity.rank == 0)
      for (const auto& notice : ddp::config_notices(config)) spdlog::warn("{}", notice);
    // Note [Slurm's batch step]: the world Slurm's job gives is no world of ranks here, unless the
    // command line gives one.
    if (!identity.outside_slurm_step.empty() && !app.count("--world-size")) throw ddp::UserError(identity.outside_slurm_step);
    if (ddp::rank_threads(config.dist) > 0) return ddp::run_rank_threads(config, identity, errors);
    trainer = std::make_unique<ddp::Trainer>(std::move(config), identity);
    int stopped_by = trainer->fit();
    return stopped_by ? 128 + stopped_by : ddp::kExitSuccess;
  });
}
