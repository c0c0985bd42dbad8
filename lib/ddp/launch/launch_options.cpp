#include "ddp/launch/launch_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <tuple>

#include "ddp/common/error.h"
#include "ddp/common/limits.h"
#include "ddp/common/text.h"
#include "ddp/common/version.h"
#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/launch/machine.h"

namespace ddp {
namespace {

constexpr const char* kUsage =
    "ddprun [OPTIONS] CONFIG.yaml [--set key=value ...]\n"
    "       ddprun [OPTIONS] -- PROGRAM [ARGS...]\n"
    "Starts one worker per GPU or CPU slot with the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, ...),\n"
    "hosts the rendezvous, relays output by rank, and stops every worker when one fails.\n"
    "Options may be spelled with dashes or underscores (--nproc-per-node, --nproc_per_node).";

// torchrun's default port in --rdzv-endpoint HOST (its rendezvous store's, not MASTER_PORT's).
constexpr const char* kDefaultEndpointPort = "29400";

// "TEXT (default VALUE)", the value taken from a default-constructed LaunchOptions, so that the help
// cannot drift from the defaults. Streamed: 0.1 shows as "0.1", not std::to_string's "0.100000".
template <typename T>
std::string with_default(const std::string& text, const T& value, const std::string& note = "") {
  std::ostringstream out;
  out << text << " (default " << value << note << ")";
  return out.str();
}

// "--nproc-per-node,--nproc_per_node": torchrun accepts both spellings.
std::string both_spellings(const std::string& dashed) {
  std::string underscored = dashed;
  std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
  return underscored == dashed ? dashed : dashed + "," + underscored;
}

int parse_positive(const std::string& option, const std::string& value) {
  auto n = parse_int(value);
  if (!n || *n < 1 || *n > 1 << 20)
    throw UserError(option + ": expected an integer from 1 to " + std::to_string(1 << 20) + ", got '" + value + "'");
  return static_cast<int>(*n);
}

std::vector<int> parse_rank_list(const std::string& value) {
  std::vector<int> ranks;
  for (const auto& piece : split(value, ',')) {
    auto n = parse_int(piece);
    if (!n || *n < 0 || *n >= 1 << 20)  // bounded before the cast: 4294967297 is not rank 1
      throw UserError("--local-ranks-filter: expected local ranks like 0 or 0,2, got '" + value + "'");
    ranks.push_back(static_cast<int>(*n));
  }
  return ranks;
}


// CLI11's number checks pass NaN (every comparison with it is false) and print their open ends as
// 300-digit numbers; these name the range as the help gives it.
CLI::Validator seconds_in(double low, bool low_open) {
  return CLI::Validator(
      [low, low_open](std::string& text) -> std::string {
        auto value = parse_double(text);
        if (!value || *value < low || (low_open && *value == low) || *value > kMaxSeconds)
          return "expected seconds " + std::string(low_open ? "> 0" : ">= 0") + " and at most " +
                 std::to_string(static_cast<long long>(kMaxSeconds)) + " (a week), got '" + text + "'";
        return "";
      },
      "SECONDS");
}

// CLI11's messages are generic; ours name the option and the fix.
[[noreturn]] void rethrow_parse_error(const CLI::ParseError& e, const CLI::App& app) {
  std::string message = e.what();
  if (const auto* extras = dynamic_cast<const CLI::ExtrasError*>(&e)) {
    (void)extras;
    for (const auto& option_name : app.remaining(true)) {
      if (option_name.rfind("-", 0) != 0) continue;
      std::vector<std::string> names;
      for (const auto* option : app.get_options())
        for (const auto& long_name : option->get_lnames()) names.push_back("--" + long_name);
      std::string flag = option_name.substr(0, option_name.find('='));
      auto hint = nearest(flag, names);
      throw UserError("unknown option " + flag + (hint ? " (did you mean " + *hint + "?)" : "") +
                      "; see ddprun --help");
    }
    throw UserError("unexpected argument(s) " + message.substr(message.find(':') + 1) +
                    "; a program and its arguments go after --");
  }
  throw UserError(message + "; see ddprun --help");
}

// The job's secret: the file's first line, else $DDPRUN_RDZV_SECRET; "" when neither is given.
std::string read_secret(const std::string& file) {
  if (file.empty()) {
    const char* value = std::getenv(env::kRdzvSecret);
    return value ? value : "";
  }
  std::ifstream in(file);
  std::string secret;
  if (in && std::getline(in, secret))
    secret.erase(secret.find_last_not_of(" \t\r") + 1);  // a file written on Windows must still match
  if (secret.empty())
    throw UserError("--rdzv-secret-file: cannot read a secret (a non-empty first line) from " + file);
  return secret;
}

// torchrun's --rdzv-endpoint: HOST, HOST:PORT or [IPv6]:PORT; the port defaults to torchrun's.
std::pair<std::string, std::string> split_endpoint(const std::string& endpoint) {
  std::string host = endpoint, port = kDefaultEndpointPort;
  if (!endpoint.empty() && endpoint.front() == '[') {
    auto close = endpoint.find(']');
    if (close == std::string::npos) throw UserError("--rdzv-endpoint: no ']' in '" + endpoint + "'");
    host = endpoint.substr(1, close - 1);
    if (close + 1 < endpoint.size()) {
      if (endpoint[close + 1] != ':') throw UserError("--rdzv-endpoint: expected [ADDRESS]:PORT, got '" + endpoint + "'");
      port = endpoint.substr(close + 2);
    }
  } else if (auto colon = endpoint.rfind(':'); colon != std::string::npos) {
    if (endpoint.find(':') != colon)
      throw UserError("--rdzv-endpoint: write an IPv6 address as [ADDRESS]:PORT, got '" + endpoint + "'");
    host = endpoint.substr(0, colon);
    port = endpoint.substr(colon + 1);
  }
  if (host.empty()) throw UserError("--rdzv-endpoint: expected HOST[:PORT], got '" + endpoint + "'");
  return {host, port};
}

}  // namespace

// A plain name: it becomes a file name under --log-dir, so "..", "." and a leading dot are refused.
void check_run_id(const std::string& id) {
  if (!is_plain_name(id))
    throw UserError("--run-id: expected a plain name (letters, digits, '-', '_' or '.', not starting with '.'), got '" +
                    id + "'");
}

int resolve_nproc(const std::string& spec) { return resolve_nproc(spec, visible_gpu_count(), available_cores()); }

int resolve_nproc(const std::string& spec, int gpus, int cores) {
  if (spec == "cpu") return cores;
  if (spec == "gpu") {
    if (gpus == 0) throw UserError("--nproc-per-node gpu: no CUDA device is visible on this machine");
    return gpus;
  }
  if (spec == "auto") return gpus > 0 ? gpus : cores;
  auto n = parse_int(spec);
  if (!n || *n < 1 || *n > 4096)
    throw UserError("--nproc-per-node: expected a count from 1 to 4096, auto, cpu or gpu, got '" + spec + "'");
  return static_cast<int>(*n);
}

std::optional<LaunchOptions> parse_launch_options(int argc, const char* const* argv) {
  // Everything after the first `--` is the program, untouched by option parsing.
  std::vector<std::string> args(argv + 1, argv + argc);
  auto separator = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> program(separator == args.end() ? separator : separator + 1, args.end());
  args.erase(separator, args.end());

  // Every default is LaunchOptions's own; the options read as text start from it too.
  const LaunchOptions defaults;
  LaunchOptions options;
  std::string nproc = std::to_string(defaults.nproc_per_node), nnodes = std::to_string(defaults.nnodes);
  std::string node_rank = std::to_string(defaults.node_rank), master_port = std::to_string(defaults.master_port);
  std::string filter;
  std::string config;
  std::vector<std::string> overrides;

  CLI::App app(kUsage, "ddprun");
  app.get_formatter()->column_width(34);
  app.add_option(both_spellings("--nproc-per-node"), nproc,
                 with_default("Workers on this node: N, auto, cpu or gpu", nproc));
  app.add_option("--nnodes", nnodes, with_default("Number of nodes", nnodes));
  app.add_option(both_spellings("--node-rank"), node_rank, with_default("This node's rank, 0..nnodes-1", node_rank));
  app.add_option(both_spellings("--master-addr"), options.master_addr,
                 with_default("Address of node 0", defaults.master_addr));
  app.add_option(both_spellings("--master-port"), master_port,
                 with_default("Rendezvous port on node 0", master_port, "; 0 picks a free one"));
  app.add_flag("--standalone", options.standalone, "One node: loopback and a free port");
  app.add_option(both_spellings("--log-dir"), options.log_dir,
                 "Also write each rank's stdout and stderr under DIR/RUN_ID/attempt_N/");
  app.add_option(both_spellings("--local-ranks-filter"), filter,
                 "Only these local ranks reach the console, e.g. 0 or 0,2 (logs keep all)");
  app.add_option(both_spellings("--run-id"), options.run_id, "Run id (default: generated; node 0's across nodes)");
  app.add_option(both_spellings("--rdzv-timeout"), options.rdzv_timeout_s,
                 with_default("Seconds to wait for the master and the other nodes", defaults.rdzv_timeout_s))
      ->check(seconds_in(0, /*low_open=*/true));
  app.add_option(both_spellings("--shutdown-grace"), options.shutdown_grace_s,
                 with_default("Seconds between SIGTERM and SIGKILL when stopping workers", defaults.shutdown_grace_s))
      ->check(seconds_in(0, /*low_open=*/false));
  app.add_option(both_spellings("--max-restarts"), options.max_restarts,
                 with_default("Restart the whole group up to K times after a failure", defaults.max_restarts))
      ->check(CLI::Range(0, 1000000));
  app.add_option(both_spellings("--monitor-interval"), options.monitor_interval_s,
                 with_default("Seconds between health checks of the workers", defaults.monitor_interval_s))
      ->check(seconds_in(0, /*low_open=*/true));
  app.add_option(both_spellings("--stall-timeout"), options.stall_timeout_s,
                 with_default("Fail a worker whose heartbeat stops for this many seconds", defaults.stall_timeout_s,
                              defaults.stall_timeout_s == 0 ? ": off" : ""))
      ->check(seconds_in(0, /*low_open=*/false));
  std::string secret_file;
  app.add_option(both_spellings("--rdzv-secret-file"), secret_file,
                 "File holding the job's secret, the same on every node: control messages in the rendezvous store "
                 "are authenticated with it (default $" + std::string(env::kRdzvSecret) + ")");
  // torchrun's rendezvous spellings, so that its job scripts run with ddprun in its place.
  std::string rdzv_backend = "static", rdzv_endpoint, rdzv_id;
  app.add_option(both_spellings("--rdzv-backend"), rdzv_backend,
                 "static: node ranks from --node-rank (default); c10d: in order of arrival, as torchrun's")
      ->check(CLI::IsMember({"static", "c10d"}));
  app.add_option(both_spellings("--rdzv-endpoint"), rdzv_endpoint,
                 "HOST[:PORT] of the rendezvous store (torchrun's spelling of --master-addr/--master-port; port "
                 "default " + std::string(kDefaultEndpointPort) + ")");
  app.add_option(both_spellings("--rdzv-id"), rdzv_id, "torchrun's spelling of --run-id");
  bool no_slurm = false;
  app.add_flag("--no-slurm", no_slurm,
               "Inside a Slurm job, do not derive --nnodes, --node-rank, --master-addr, --master-port and "
               "--run-id from its environment");
  app.add_option("config", config, "Trainer config (YAML) to run with ddp-train");
  app.add_option("--set", overrides, "Override a config key, e.g. --set train.epochs=3 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  app.set_version_flag("--version", version_line(), "Print ddprun's and LibTorch's versions, and whether CUDA and "
                                                    "NCCL are built in");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForVersion&) {
    std::cout << version_line() << "\n";
    return std::nullopt;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help() << "\nA config runs " << "ddp-train beside ddprun; see README.md for the environment.\n";
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    rethrow_parse_error(e, app);
  }

  options.rdzv_secret = read_secret(secret_file);
  auto given = [&](const char* option) { return app.count(option) > 0; };
  if (!rdzv_endpoint.empty()) {
    if (given("--master-addr") || given("--master-port"))
      throw UserError("give either --rdzv-endpoint or --master-addr/--master-port, not both");
    std::tie(options.master_addr, master_port) = split_endpoint(rdzv_endpoint);
  }
  if (!rdzv_id.empty()) {
    if (given("--run-id") && options.run_id != rdzv_id)
      throw UserError("--rdzv-id " + rdzv_id + " and --run-id " + options.run_id + " differ; give one");
    options.run_id = rdzv_id;
  }
  bool endpoint_given = !rdzv_endpoint.empty() || given("--master-addr");
  bool port_given = !rdzv_endpoint.empty() || given("--master-port");
  bool run_id_given = !options.run_id.empty();
  options.node_rank_by_arrival = rdzv_backend == "c10d" && !given("--node-rank");
  // Mode A under Slurm: what the job step says fills in what the command line left out. Explicit
  // options, then MASTER_ADDR / MASTER_PORT, win over it.
  if (!no_slurm && !options.standalone) {
    if (auto slurm = slurm_layout(process_variable)) {
      // Only what this command line left open is taken, and the line says exactly that.
      std::string derived;
      auto take = [&](const char* option, bool open, const std::function<void()>& apply) {
        if (!open) return;
        apply();
        derived += (derived.empty() ? "" : ", ") + std::string(option) + " " + slurm->sources.at(option);
      };
      take("--nnodes", !given("--nnodes"), [&] { nnodes = std::to_string(slurm->nnodes); });
      take("--node-rank", !given("--node-rank") && !options.node_rank_by_arrival,
           [&] { node_rank = std::to_string(slurm->node_rank); });
      take("--master-addr", !endpoint_given && !std::getenv(env::kMasterAddr),
           [&] { options.master_addr = slurm->master_addr; });
      take("--master-port", !port_given && !std::getenv(env::kMasterPort),
           [&] { master_port = std::to_string(slurm->master_port); });
      take("--run-id", !run_id_given, [&] { options.run_id = slurm->run_id; });
      if (!endpoint_given && std::getenv(env::kMasterAddr)) options.master_addr = std::getenv(env::kMasterAddr);
      if (!port_given && std::getenv(env::kMasterPort)) master_port = std::getenv(env::kMasterPort);
      std::cerr << "ddprun: Slurm job step: " << (derived.empty() ? "nothing derived (the command line gives it all)" : derived)
                << "; explicit options and MASTER_ADDR/MASTER_PORT take precedence (--no-slurm: ignore Slurm)\n";
    }
  }
  options.nproc_per_node = resolve_nproc(nproc);
  options.nnodes = parse_positive("--nnodes", nnodes);
  auto rank = parse_int(options.node_rank_by_arrival ? "0" : node_rank);
  if (!rank || *rank < 0 || *rank >= options.nnodes)
    throw UserError("--node-rank: expected 0.." + std::to_string(options.nnodes - 1) + " for --nnodes " +
                    std::to_string(options.nnodes) + ", got '" + node_rank + "'");
  options.node_rank = static_cast<int>(*rank);
  auto port = parse_int(master_port);
  if (!port || *port < 0 || *port > 65535)
    throw UserError("--master-port: expected a port 0..65535, got '" + master_port + "'");
  options.master_port = static_cast<int>(*port);
  if (!filter.empty()) {
    options.local_ranks_filter = parse_rank_list(filter);
    for (int local : *options.local_ranks_filter)
      if (local >= options.nproc_per_node)
        throw UserError("--local-ranks-filter: local rank " + std::to_string(local) + " does not exist with " +
                        std::to_string(options.nproc_per_node) + " worker(s) per node");
  }
  if (!options.run_id.empty()) check_run_id(options.run_id);

  if (options.standalone) {
    if (options.nnodes != 1) throw UserError("--standalone runs one node; drop --nnodes " + nnodes);
    options.master_addr = "127.0.0.1";  // loopback, whatever the default address
    options.master_port = 0;
  }
  if (options.standalone || options.nnodes == 1) options.node_rank_by_arrival = false;
  if (options.master_port == 0 && options.nnodes > 1)
    throw UserError("--master-port 0 picks a port only node 0 knows; give every node the same --master-port");

  if (!config.empty() && !program.empty())
    throw UserError("give either CONFIG.yaml or -- PROGRAM, not both");
  if (!overrides.empty() && config.empty()) throw UserError("--set needs a CONFIG.yaml to override");
  if (config.empty() && program.empty())
    throw UserError("nothing to run: give CONFIG.yaml, or -- PROGRAM [ARGS...]; see ddprun --help");

  if (!config.empty()) {
    if (!std::filesystem::is_regular_file(config)) throw UserError("config file not found: " + config);
    std::string trainer = executable_dir() + "/ddp-train";
    if (find_executable(trainer).empty())
      throw UserError("the trainer " + trainer + " is missing; build it (cmake --build build) or install it beside ddprun");
    options.program = {trainer, config};
    for (const auto& assignment : overrides) {
      options.program.push_back("--set");
      options.program.push_back(assignment);
    }
    options.runs_trainer = true;
  } else {
    if (find_executable(program[0]).empty())
      throw UserError("program not found or not executable: " + program[0]);
    options.program = program;
  }
  return options;
}

}  // namespace ddp
