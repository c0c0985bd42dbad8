#pragma once
// What `ddprun` was asked to do, parsed from its command line.

#include <optional>
#include <string>
#include <vector>

#include "ddp/common/worker_contract.h"

namespace CLI {
class App;
}

namespace ddp {

/// Every launcher option, with torchrun's defaults.
struct LaunchOptions {
  int nproc_per_node = 1;  ///< resolved from N | auto | cpu | gpu
  int nnodes = 1;     ///< with --nnodes MIN:MAX, MAX
  int min_nodes = 1;  ///< MIN; below nnodes the job is elastic (Note [Elastic rounds])
  int node_rank = 0;
  /// --rdzv-backend c10d without --node-rank: the launcher that hosts the store is node 0, the others
  /// take 1, 2, ... in order of arrival (torchrun's c10d rendezvous); node_rank is then set by join.
  bool node_rank_by_arrival = false;
  std::string master_addr = kDefaultMasterAddr;
  int master_port = kDefaultMasterPort;  ///< 0: pick a free port (node 0 only)
  bool standalone = false;
  std::string log_dir;                 ///< empty: no log files
  std::optional<std::vector<int>> local_ranks_filter;  ///< unset: every local rank reaches the console
  std::string run_id;                  ///< empty: generated (multi-node: node 0's)
  double rdzv_timeout_s = 300;         ///< how long to wait for the master or the other nodes
  double rdzv_settle_s = 3;            ///< elastic: once MIN nodes are in, how long to wait for more
  double node_timeout_s = 5;           ///< elastic: a node whose launcher is silent this long is lost
  double shutdown_grace_s = 10;        ///< SIGTERM → SIGKILL delay when stopping workers
  int max_restarts = 0;                ///< restarts of the whole group after a failure
  double monitor_interval_s = 0.1;     ///< how often the monitor checks on workers without events
  double stall_timeout_s = 0;          ///< 0: off; else a heartbeating worker silent this long has failed
  std::string role = "default";        ///< torchrun's --role: the workers' ROLE_NAME
  std::string local_addr;              ///< this node's name in the rendezvous and in messages (default: host name)
  /// torchrun's --redirects and --tee, by local rank: which streams (1 stdout, 2 stderr, 3 both) go to
  /// log files only, and which to the console and log files, laid out as --log-dir alone lays them
  /// out (Note [Log layout]): LOG_DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log.
  std::vector<int> redirects, tees;
  std::string rdzv_secret;  ///< tags the store's control values ($DDPRUN_RDZV_SECRET or --rdzv-secret-file); empty: none

  /// The program each worker runs: ddp-train CONFIG --set ... by default, what follows `--`, or, as
  /// torchrun runs them, a Python script (`train.py ARGS`), module (-m) or program (--no-python).
  std::vector<std::string> program;
  bool runs_trainer = false;  ///< program is ddp-train on a config
  /// The Python that runs a script or module (program[0]); empty for any other program.
  std::string python;
  /// The script it runs, which the launcher reads for an import of torch; empty for a module.
  std::string python_script;
  /// That Python's torch ("1.13.0"), once probed at start; empty when unknown or none.
  std::string python_torch_version;

  /// --nnodes MIN:MAX with MIN < MAX: nodes may leave and join between rendezvous rounds.
  bool elastic() const { return min_nodes < nnodes; }
};

/// Parses argv. Throws UserError (exit status 2) on any bad command line.
/// `--help` prints usage and returns nullopt.
std::optional<LaunchOptions> parse_launch_options(int argc, const char* const* argv);

/// One launcher option as the man page and the shell completion show it.
struct OptionReference {
  std::vector<std::string> names;    ///< short first: -m, --module; both spellings where torchrun has them
  std::string value;                 ///< what it takes (INT, FLOAT, TEXT); empty for a flag
  std::string description;
  std::vector<std::string> choices;  ///< words to offer for the value; empty: any
  bool takes_path = false;           ///< its value is a file or directory
};

/// Every option declared on `app` (a CLI11 program's), with the choices and paths ddprun's options take.
std::vector<OptionReference> option_reference(const CLI::App& app);

/// Every launcher option, from the declarations the parser uses.
std::vector<OptionReference> launcher_option_reference();

/// `--nproc-per-node` as a count on this machine: N, gpu (the visible CUDA devices), cpu (cores),
/// auto (gpu if any, else cpu).
int resolve_nproc(const std::string& spec);

/// The same for a machine with `gpus` visible devices and `cores` cores. Throws UserError for
/// `gpu` without devices or a spec that is none of these.
int resolve_nproc(const std::string& spec, int gpus, int cores);

/// Throws UserError unless `id` is a plain name: letters, digits, '-', '_' and '.', not starting with
/// '.' (it names a directory under --log-dir, so ".." must not).
void check_run_id(const std::string& id);

}  // namespace ddp
