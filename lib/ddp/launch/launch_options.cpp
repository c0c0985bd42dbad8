#include "ddp/launch/launch_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>

#include "ddp/common/cli_unknown_option.h"
#include "ddp/common/cli_values.h"
#include "ddp/common/error.h"
#include "ddp/common/limits.h"
#include "ddp/common/text.h"
#include "ddp/common/version.h"
#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/launch/machine.h"
#include "ddp/launch/script_command.h"

namespace ddp {
namespace {

constexpr const char* kUsage =
    "ddprun [OPTIONS] CONFIG.yaml [--set key=value ...]\n"
    "       ddprun [OPTIONS] SCRIPT.py [ARGS...]   (or -m MODULE, --no-python PROGRAM: torchrun's forms)\n"
    "         a script or module runs under $DDPRUN_PYTHON, else python3 on PATH, named at start\n"
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
// 300-digit numbers; these name the range as the help gives it. No description of their own: the
// help shows the option's type as SECONDS, not FLOAT:SECONDS.
CLI::Validator seconds_in(double low, bool low_open) {
  return CLI::Validator(
      [low, low_open](std::string& text) -> std::string {
        auto value = parse_double(text);
        if (!value || *value < low || (low_open && *value == low) || *value > kMaxSeconds)
          return "expected seconds " + std::string(low_open ? "> 0" : ">= 0") + " and at most " +
                 std::to_string(static_cast<long long>(kMaxSeconds)) + " (a week), got '" + text + "'";
        return "";
      },
      "");
}

// The --help usage: the description's three forms, not CLI11's "Usage: ddprun [OPTIONS] [config]" too.
class FormsFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return "\n"; }
};

// CLI11's messages are generic; ours name the option and the fix. `args` as given, `positional` the
// config or program parsed from them (CLI11 lists what it did not take in reverse).
[[noreturn]] void rethrow_parse_error(const CLI::ParseError& e, const CLI::App& app, const std::vector<std::string>& args,
                                      const std::string& positional) {
  std::string message = e.what();
  if (!dynamic_cast<const CLI::ExtrasError*>(&e)) throw UserError(message + "; see ddprun --help");
  std::vector<std::string> left = app.remaining(true), extras;
  for (const auto& arg : args)
    if (auto found = std::find(left.begin(), left.end(), arg); found != left.end()) {
      extras.push_back(arg);
      left.erase(found);
    }
  std::string words;
  for (const auto& extra : extras) words += (words.empty() ? "" : " ") + extra;
  const bool config = positional.ends_with(".yaml") || positional.ends_with(".yml");
  const std::string as_program = "ddprun [options] -- " + positional + " " + words;
  for (const auto& extra : extras) {
    if (extra.rfind("-", 0) != 0) continue;
    // `--nproc-pernode 2 x.yaml`: the "program" is the unknown option's value, and no program at all,
    // when it reads as one (a number) or a config or script comes after it. `--verbos ./train.sh`:
    // the program may well be the word after the unknown option.
    auto at = std::find(args.begin(), args.end(), extra);
    auto reads_as_program = [](const std::string& word) {
      return word.ends_with(".yaml") || word.ends_with(".yml") || word.ends_with(".py") || word.ends_with(".sh") ||
             word.find('/') != std::string::npos;
    };
    const bool its_value = at != args.end() && std::next(at) != args.end() && *std::next(at) == positional &&
                           (parse_double(positional) || std::any_of(std::next(at, 2), args.end(), reads_as_program));
    throw UserError(unknown_option(extra, app) +
                    (positional.empty() || config || its_value
                         ? ""
                         : "; if it is " + positional + "'s, the program goes after --: " + as_program) +
                    "; see ddprun --help");
  }
  if (auto setting = std::find_if(extras.begin(), extras.end(),
                                  [](const std::string& extra) { return extra.find('=') != std::string::npos; });
      config && setting != extras.end())
    throw UserError("unexpected argument(s) " + words + " after the config " + positional +
                    ": a config key is set with --set KEY=VALUE (--set " + *setting + ")");
  throw UserError("unexpected argument(s) " + words + (positional.empty() ? "" : " after " + positional) +
                  "; a program and its arguments go after --" + (positional.empty() ? "" : ": " + as_program));
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

// A script whose #! interpreter is missing fails in exec with ENOENT, "No such file or directory",
// which reads as if the script were missing: its interpreter is checked here, by name.
void check_interpreter(const std::string& program) {
  std::ifstream in(program, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line) || line.rfind("#!", 0) != 0) return;
  std::istringstream words(line.substr(2));
  std::string interpreter;
  words >> interpreter;
  if (interpreter.empty() || interpreter.front() != '/') return;  // relative: the kernel's own message
  if (access(interpreter.c_str(), X_OK) != 0)
    throw UserError(program + ": its interpreter " + interpreter + " (the #! line) is not found or not executable");
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

const std::vector<std::string> kRdzvBackends = {"static", "c10d"};

// torchrun's options that mean nothing to ddprun: accepted with their value, and one line says so.
struct IgnoredOption {
  const char* name;
  bool takes_value;
  const char* why;
};
constexpr IgnoredOption kIgnored[] = {
    {"--start-method", true, "ddprun starts every worker with fork and exec"},
    {"--logs-specs", true, "ddprun lays out its logs itself (--log-dir, --tee, --redirects)"},
    {"--log-line-prefix-template", true, "ddprun prefixes each line with its rank"},
    {"--numa-binding", true, "ddprun does not bind workers to NUMA nodes"},
    {"--event-log-handler", true, "ddprun logs events to its own console"},
    {"--signals-to-handle", true,
     "ddprun stops its workers on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2, passing each on (SIGHUP "
     "as SIGTERM: a lost terminal stops them as a request, not by SIGHUP's default action)"},
    {"--virtual-local-rank", false, "ddprun gives each worker its own LOCAL_RANK"},
};

// The words torchrun reads before its positional that make the positional a program, not a config.
bool names_a_program(const std::string& word) {
  return word == "-m" || word == "--module" || word == "--no-python" || word == "--no_python" ||
         word == "--run-path" || word == "--run_path";
}

// The index of the first word that is neither an option nor an option's value: the config, or
// torchrun's script. Words after a script are its own, so it must be found before parsing.
std::size_t first_positional(const CLI::App& app, const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word.size() < 2 || word[0] != '-') return i;
    if (word.find('=') != std::string::npos || (word[1] != '-' && word.size() > 2)) continue;  // value attached
    const CLI::Option* option = app.get_option_no_throw(word);
    if (option && option->get_expected_max() != 0) ++i;  // its value is the next word (a flag expects none)
  }
  return args.size();
}

// torchrun's --rdzv-conf KEY=VALUE,...: join_timeout is --rdzv-timeout; the rest mean nothing here.
void apply_rdzv_conf(const std::string& conf, LaunchOptions& options, bool timeout_given) {
  for (const auto& pair : split(conf, ',')) {
    auto equals = pair.find('=');
    if (equals == std::string::npos)
      throw UserError("--rdzv-conf: expected KEY=VALUE,..., got '" + conf + "'");
    std::string key = pair.substr(0, equals), value = pair.substr(equals + 1);
    if (key == "last_call_timeout") {  // torchrun's wait for more nodes once MIN are in
      auto seconds = parse_double(value);
      if (!seconds || *seconds < 0 || *seconds > kMaxSeconds)
        throw UserError("--rdzv-conf: last_call_timeout: expected seconds >= 0, got '" + value + "'");
      options.rdzv_settle_s = *seconds;
    } else if (key == "join_timeout") {
      auto seconds = parse_double(value);
      if (!seconds || *seconds <= 0 || *seconds > kMaxSeconds)
        throw UserError("--rdzv-conf: join_timeout: expected seconds > 0, got '" + value + "'");
      if (!timeout_given) options.rdzv_timeout_s = *seconds;
    } else {
      std::cerr << "ddprun: --rdzv-conf " << key
                << " is ignored (only join_timeout and last_call_timeout mean something here)\n";
    }
  }
}

// What the command line binds to, before it becomes LaunchOptions. Every default is LaunchOptions's
// own; the options read as text start from it too.
struct CommandLine {
  LaunchOptions defaults;
  LaunchOptions options;
  std::string nproc = std::to_string(defaults.nproc_per_node), nnodes = std::to_string(defaults.nnodes);
  std::string node_rank = std::to_string(defaults.node_rank), master_port = std::to_string(defaults.master_port);
  std::string filter, config, secret_file, rdzv_endpoint, rdzv_id, redirects, tee, rdzv_conf;
  std::string rdzv_backend = kRdzvBackends.front();
  std::vector<std::string> overrides;
  std::vector<std::string> ignored_values = std::vector<std::string>(std::size(kIgnored));
  bool no_slurm = false, no_python = false, module = false, run_path = false;
};

// Every option, declared once: parsing, --help, the man page and the shell completion come from here.
void declare_options(CLI::App& app, CommandLine& line) {
  auto& [defaults, options, nproc, nnodes, node_rank, master_port, filter, config, secret_file, rdzv_endpoint, rdzv_id,
         redirects, tee, rdzv_conf, rdzv_backend, overrides, ignored_values, no_slurm, no_python, module, run_path] = line;
  app.formatter(std::make_shared<FormsFormatter>());
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as argparse: the last one wins
  app.add_option(both_spellings("--nproc-per-node"), nproc,
                 with_default("Workers on this node: N, auto, cpu or gpu", nproc));
  app.add_option("--nnodes", nnodes, with_default("Number of nodes, or MIN:MAX for an elastic job", nnodes));
  app.add_option(both_spellings("--node-rank"), node_rank, with_default("This node's rank, 0..nnodes-1", node_rank));
  app.add_option(both_spellings("--master-addr"), options.master_addr,
                 with_default("Address of node 0", defaults.master_addr));
  app.add_option(both_spellings("--master-port"), master_port,
                 with_default("Rendezvous port on node 0", master_port, "; 0 picks a free one"));
  app.add_flag("--standalone", options.standalone, "One node: loopback and a free port");
  app.add_option(both_spellings("--log-dir"), options.log_dir,
                 "Also write each rank's stdout and stderr to DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log");
  app.add_option(both_spellings("--local-ranks-filter"), filter,
                 "Only these local ranks reach the console, e.g. 0 or 0,2 (logs keep all)");
  app.add_option(both_spellings("--run-id"), options.run_id, "Run id (default: generated; node 0's across nodes)");
  app.add_option(both_spellings("--rdzv-timeout"), options.rdzv_timeout_s,
                 with_default("Seconds to wait for the master and the other nodes", defaults.rdzv_timeout_s))
      ->check(seconds_in(0, /*low_open=*/true))
      ->type_name("SECONDS");
  app.add_option(both_spellings("--rdzv-settle"), options.rdzv_settle_s,
                 with_default("Elastic: once MIN nodes are in, seconds to wait for more (up to MAX)",
                              defaults.rdzv_settle_s))
      ->check(seconds_in(0, /*low_open=*/false))
      ->type_name("SECONDS");
  app.add_option(both_spellings("--node-timeout"), options.node_timeout_s,
                 with_default("Elastic: a node whose launcher is silent this long has left, and the rest go on",
                              defaults.node_timeout_s))
      ->check(seconds_in(0, /*low_open=*/true))
      ->type_name("SECONDS");
  app.add_option(both_spellings("--shutdown-grace"), options.shutdown_grace_s,
                 with_default("Seconds between SIGTERM and SIGKILL when stopping workers", defaults.shutdown_grace_s))
      ->check(seconds_in(0, /*low_open=*/false))
      ->type_name("SECONDS");
  app.add_option(both_spellings("--max-restarts"), options.max_restarts,
                 with_default("Restart the whole group up to K times after a failure", defaults.max_restarts))
      ->transform(integer_in(0, 1000000, /*in_help=*/false))
      ->type_name("K");
  app.add_option(both_spellings("--monitor-interval"), options.monitor_interval_s,
                 with_default("Seconds between health checks of the workers", defaults.monitor_interval_s))
      ->check(seconds_in(0, /*low_open=*/true))
      ->type_name("SECONDS");
  app.add_option(both_spellings("--stall-timeout"), options.stall_timeout_s,
                 with_default("Fail a worker whose heartbeat stops for this many seconds", defaults.stall_timeout_s,
                              defaults.stall_timeout_s == 0 ? ": off" : ""))
      ->check(seconds_in(0, /*low_open=*/false))
      ->type_name("SECONDS");
  app.add_option(both_spellings("--rdzv-secret-file"), secret_file,
                 "File holding the job's secret, the same on every node: control messages in the rendezvous store "
                 "are authenticated with it (default $" + std::string(env::kRdzvSecret) + ")");
  // torchrun's rendezvous spellings, so that its job scripts run with ddprun in its place.
  app.add_option(both_spellings("--rdzv-backend"), rdzv_backend,
                 "static: node ranks from --node-rank (default); c10d: in order of arrival, as torchrun's")
      ->check(CLI::IsMember(kRdzvBackends));
  app.add_option(both_spellings("--rdzv-endpoint"), rdzv_endpoint,
                 "HOST[:PORT] of the rendezvous store (torchrun's spelling of --master-addr/--master-port; port "
                 "default " + std::string(kDefaultEndpointPort) + ")");
  app.add_option(both_spellings("--rdzv-id"), rdzv_id, "torchrun's spelling of --run-id");
  app.add_flag("--no-slurm", no_slurm,
               "Inside a Slurm job, do not derive --nnodes, --node-rank, --master-addr, --master-port and "
               "--run-id from its environment");
  app.add_option("config", config, "Trainer config (YAML) to run with ddp-train");
  app.add_option("--set", overrides, "Override a config key, e.g. --set train.epochs=3 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  // torchrun's program forms and output options.
  app.add_flag(both_spellings("--no-python"), no_python, "Run the positional as a program, not under Python");
  app.add_flag("-m,--module", module, "Run the positional as a Python module, as python3 -m does");
  app.add_flag(both_spellings("--run-path"), run_path, "Run the Python script through runpy.run_path");
  app.add_option("-r,--redirects", redirects,
                 "Send workers' streams to log files only: 1 stdout, 2 stderr, 3 both; or by local rank, 0:3,1:2");
  app.add_option("-t,--tee", tee, "Send workers' streams to the console and log files, chosen as for --redirects");
  app.add_option(both_spellings("--local-addr"), options.local_addr,
                 "This node's address as the rendezvous and messages name it (default: its host name)");
  app.add_option("--role", options.role, with_default("The workers' ROLE_NAME", defaults.role));
  app.add_option(both_spellings("--rdzv-conf"), rdzv_conf, "torchrun's KEY=VALUE,...: join_timeout sets --rdzv-timeout");
  for (std::size_t i = 0; i < std::size(kIgnored); ++i) {
    std::string text = std::string("Accepted for torchrun's command lines and ignored: ") + kIgnored[i].why;
    // A flag's description goes through description(): add_flag(name, std::string&) would bind the flag to it.
    CLI::Option* option = kIgnored[i].takes_value ? app.add_option(both_spellings(kIgnored[i].name), ignored_values[i])
                                                  : app.add_flag(both_spellings(kIgnored[i].name));
    option->description(text)->group("Accepted from torchrun and ignored");
  }

  app.set_version_flag("--version", version_line(), "Print ddprun's and LibTorch's versions, and whether CUDA and "
                                                    "NCCL are built in");
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
  std::vector<std::string> args(argv + 1, argv + argc);
  CommandLine line;
  CLI::App app(kUsage, "ddprun");
  declare_options(app, line);
  auto& [defaults, options, nproc, nnodes, node_rank, master_port, filter, config, secret_file, rdzv_endpoint, rdzv_id,
         redirects, tee, rdzv_conf, rdzv_backend, overrides, ignored_values, no_slurm, no_python, module, run_path] = line;
  // torchrun's positional: a script whose arguments are its own (train.py --lr 0.1, `--` included),
  // found before parsing. Otherwise everything after the first `--` is the program, untouched by
  // option parsing, and a config keeps its form, in which launcher options and --set may follow it.
  auto separator = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> script, program;
  std::size_t at = first_positional(app, std::vector<std::string>(args.begin(), separator));
  bool flagged = std::any_of(args.begin(), args.begin() + std::min(at, args.size()), names_a_program);
  if (at < static_cast<std::size_t>(separator - args.begin()) && (flagged || args[at].ends_with(".py"))) {
    script.assign(args.begin() + at, args.end());
    args.resize(at);
  } else {
    program.assign(separator == args.end() ? separator : separator + 1, args.end());
    args.erase(separator, args.end());
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForVersion&) {
    std::cout << version_line() << "\n";
    return std::nullopt;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help() << "\nA config runs " << "ddp-train beside ddprun; see docs/launcher.md for the environment.\n";
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    rethrow_parse_error(e, app, args, config);
  }

  options.rdzv_secret = read_secret(secret_file);
  auto given = [&](const char* option) { return app.count(option) > 0; };
  for (std::size_t i = 0; i < std::size(kIgnored); ++i)
    if (given(kIgnored[i].name))
      std::cerr << "ddprun: " << kIgnored[i].name << " is accepted for torchrun's sake and ignored: " << kIgnored[i].why
                << "\n";
  if (!rdzv_conf.empty()) apply_rdzv_conf(rdzv_conf, options, given("--rdzv-timeout"));
  if (options.local_addr.find_first_of(" \t\n") != std::string::npos || printable(options.local_addr) != options.local_addr)
    throw UserError("--local-addr: expected an address or host name, got '" + printable(options.local_addr) + "'");
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
      if (!given("--nnodes") && !slurm->nnodes_refusal.empty()) throw UserError(slurm->nnodes_refusal);
      if (!given("--node-rank") && !options.node_rank_by_arrival && !slurm->node_rank_refusal.empty())
        throw UserError(slurm->node_rank_refusal);
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
  std::string min_nodes = nnodes;
  if (auto colon = nnodes.find(':'); colon != std::string::npos) {  // torchrun's MIN:MAX
    min_nodes = nnodes.substr(0, colon);
    nnodes = nnodes.substr(colon + 1);
  }
  options.nnodes = parse_positive("--nnodes", nnodes);
  options.min_nodes = parse_positive("--nnodes", min_nodes);
  if (options.min_nodes > options.nnodes)
    throw UserError("--nnodes " + min_nodes + ":" + nnodes + ": MIN:MAX with MIN above MAX; the job starts with MIN "
                    "nodes and takes up to MAX");
  if (options.elastic() && !options.node_rank_by_arrival)
    throw UserError("--nnodes " + min_nodes + ":" + nnodes + " (elastic): node ranks change from round to round, so "
                    "nodes take them by arrival: use --rdzv-backend c10d, without --node-rank");
  auto rank = parse_int(options.node_rank_by_arrival ? "0" : node_rank);
  if (!rank || *rank < 0 || *rank >= options.nnodes)
    throw UserError("--node-rank: expected 0.." + std::to_string(options.nnodes - 1) + " for --nnodes " +
                    std::to_string(options.nnodes) + ", got '" + node_rank + "'");
  options.node_rank = static_cast<int>(*rank);
  // The option the port came from: --rdzv-endpoint HOST:PORT sets it too.
  const std::string port_option = rdzv_endpoint.empty() ? "--master-port" : "--rdzv-endpoint";
  auto port = parse_int(master_port);
  if (!port || *port < 0 || *port > 65535)
    throw UserError(port_option + ": expected a port 0..65535, got '" + master_port + "'" +
                    (rdzv_endpoint.empty() ? "" : " (in '" + rdzv_endpoint + "')"));
  options.master_port = static_cast<int>(*port);
  if (!filter.empty()) {
    options.local_ranks_filter = parse_rank_list(filter);
    for (int local : *options.local_ranks_filter)
      if (local >= options.nproc_per_node)
        throw UserError("--local-ranks-filter: local rank " + std::to_string(local) + " does not exist with " +
                        std::to_string(options.nproc_per_node) + " worker(s) per node");
  }
  if (!options.run_id.empty()) check_run_id(options.run_id);
  if (!redirects.empty() || !tee.empty()) {
    options.redirects = parse_stream_choice("--redirects", redirects.empty() ? "0" : redirects, options.nproc_per_node);
    options.tees = parse_stream_choice("--tee", tee.empty() ? "0" : tee, options.nproc_per_node);
  }

  if (options.standalone) {
    if (options.nnodes != 1) throw UserError("--standalone runs one node; drop --nnodes " + nnodes);
    std::string unused;  // as torchrun, which ignores them silently: said once here
    for (const char* option : {"--master-addr", "--master-port", "--rdzv-endpoint"})
      if (given(option)) unused += (unused.empty() ? "" : ", ") + std::string(option);
    if (!unused.empty())
      std::cerr << "ddprun: --standalone runs on loopback with a free port: " << unused
                << " not used (drop --standalone to use it)\n";
    options.master_addr = "127.0.0.1";  // loopback, whatever the default address
    options.master_port = 0;
  }
  if (options.standalone || options.nnodes == 1) options.node_rank_by_arrival = false;
  if (options.master_port == 0 && options.nnodes > 1)
    throw UserError(port_option + " gives port 0, which picks a port only node 0 knows; give every node the same port");

  if (no_python + module + run_path > 1)
    throw UserError("give one of --no-python, -m/--module and --run-path: each says how to run the script");
  if ((no_python || module || run_path) && script.empty()) std::swap(script, program);  // ... -- SCRIPT ARGS
  if ((no_python || module || run_path) && script.empty())
    throw UserError(std::string(no_python ? "--no-python" : module ? "-m" : "--run-path") +
                    " needs a script (or module, or program) after the options");
  if (!script.empty()) {
    if (!overrides.empty()) throw UserError("--set overrides a CONFIG.yaml's keys; a script takes its own arguments");
    ScriptKind kind = no_python ? ScriptKind::kExecutable
                      : module  ? ScriptKind::kModule
                      : run_path ? ScriptKind::kRunPath
                                 : ScriptKind::kPython;
    options.program = script_command(kind, script);
    if (kind != ScriptKind::kExecutable) options.python = options.program.front();
    if (kind == ScriptKind::kPython || kind == ScriptKind::kRunPath) options.python_script = script.front();
    return options;
  }
  if (!config.empty() && !program.empty())
    throw UserError("give either CONFIG.yaml or -- PROGRAM, not both");
  if (!overrides.empty() && config.empty()) {
    // `--set CONFIG.yaml --set k=v`: the config was taken as the first --set's value.
    for (const auto& assignment : overrides)
      if (assignment.find('=') == std::string::npos)
        throw UserError("--set " + assignment + ": expected key=value; a CONFIG.yaml goes before the first --set, "
                        "not as its value");
    throw UserError("--set needs a CONFIG.yaml to override");
  }
  if (config.empty() && program.empty())
    throw UserError("nothing to run: give CONFIG.yaml, or -- PROGRAM [ARGS...]; see ddprun --help");

  if (!config.empty()) {
    if (std::filesystem::is_directory(config))
      throw UserError(config + " is a directory; give a config file in it, e.g. " + config +
                      (config.back() == '/' ? "" : "/") + "NAME.yaml");
    const bool yaml_name = config.ends_with(".yaml") || config.ends_with(".yml");
    if (!std::filesystem::is_regular_file(config) && !yaml_name && !find_executable(config).empty())
      throw UserError(config + " is a program on PATH, not a config; run it with -- " + config);  // `ddprun hostname`
    if (!std::filesystem::is_regular_file(config)) throw UserError("config file not found: " + config);
    if (!yaml_name && access(config.c_str(), X_OK) == 0)
      throw UserError(config + " is a program, not a config; run it with --no-python " + config + " or -- " + config);
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
    const std::string found = find_executable(program[0]);
    if (found.empty()) throw UserError("program not found or not executable: " + program[0]);
    check_interpreter(found);
    options.program = program;
  }
  return options;
}

std::vector<OptionReference> option_reference(const CLI::App& app) {
  // What the declarations cannot say: the words to offer for a value, and which values are paths.
  const std::map<std::string, std::vector<std::string>> choices = {
      {"--nproc-per-node", {"auto", "cpu", "gpu"}},
      {"--rdzv-backend", kRdzvBackends},
      {"--redirects", {"0", "1", "2", "3"}},
      {"--tee", {"0", "1", "2", "3"}},
  };
  const std::vector<std::string> paths = {"--log-dir", "--rdzv-secret-file"};
  std::vector<OptionReference> reference;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_lnames().empty()) continue;  // a positional
    OptionReference entry;
    for (const auto& name : option->get_snames()) entry.names.push_back("-" + name);
    for (const auto& name : option->get_lnames()) entry.names.push_back("--" + name);
    if (option->get_expected_max() != 0) {
      std::string type = option->get_type_name();
      entry.value = type.substr(0, type.find(':'));  // any validator's note after the type is left to the text
    }
    entry.description = option->get_description();
    std::string primary = "--" + option->get_lnames().front();
    if (auto it = choices.find(primary); it != choices.end()) entry.choices = it->second;
    entry.takes_path = std::count(paths.begin(), paths.end(), primary) > 0;
    reference.push_back(std::move(entry));
  }
  return reference;
}

std::vector<OptionReference> launcher_option_reference() {
  CommandLine line;
  CLI::App app(kUsage, "ddprun");
  declare_options(app, line);
  return option_reference(app);
}

}  // namespace ddp
