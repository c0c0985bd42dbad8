#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "ddp/common/error.h"
#include "ddp/common/worker_identity.h"
#include "ddp/launch/launch_options.h"
#include "ddp/launch/machine.h"
#include "ddp/launch/worker_env.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {
LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ddprun");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_launch_options(static_cast<int>(argv.size()), argv.data()).value();
}
}  // namespace

TEST_CASE("options accept torchrun's spellings") {
  auto dashed = parse({"--nproc-per-node", "3", "--master-port=1234", "--", "true"});
  CHECK(dashed.nproc_per_node == 3);
  CHECK(dashed.master_port == 1234);
  CHECK(dashed.program == std::vector<std::string>{"true"});
  auto underscored = parse({"--nproc_per_node=2", "--node_rank", "1", "--nnodes", "2", "--", "sh", "-c", "x"});
  CHECK(underscored.nproc_per_node == 2);
  CHECK(underscored.node_rank == 1);
  CHECK(underscored.program == std::vector<std::string>{"sh", "-c", "x"});
}

TEST_CASE("program arguments after -- are left alone") {
  auto options = parse({"--", "sh", "-c", "echo --nnodes", "--standalone"});
  CHECK(options.program == std::vector<std::string>{"sh", "-c", "echo --nnodes", "--standalone"});
  CHECK_FALSE(options.standalone);
}

TEST_CASE("standalone means loopback and a free port") {
  auto options = parse({"--standalone", "--master-addr", "10.0.0.1", "--", "true"});
  CHECK(options.master_addr == "127.0.0.1");
  CHECK(options.master_port == 0);
}

TEST_CASE("nproc-per-node cpu is the core count") {
  CHECK(resolve_nproc("cpu") >= 1);
  CHECK(resolve_nproc("auto") >= 1);
  CHECK(resolve_nproc("7") == 7);
}

TEST_CASE("bad command lines are UserErrors with one clear message") {
  using Catch::Contains;
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "0", "--", "true"}), Contains("--nproc-per-node") && Contains("'0'"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "abc", "--", "true"}), Contains("'abc'"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node=-3", "--", "true"}), Contains("'-3'"));
  CHECK_THROWS_WITH(parse({"--nnodes", "2", "--node-rank", "2", "--", "true"}), Contains("--node-rank"));
  CHECK_THROWS_WITH(parse({"--master-port", "70000", "--", "true"}), Contains("--master-port"));
  CHECK_THROWS_WITH(parse({"--nproc-per-nod", "2", "--", "true"}),
                    Contains("unknown option --nproc-per-nod") && Contains("--nproc-per-node"));
  // The unknown option's value is no program (was: "the program goes after --: ddprun [options] -- 2 ...").
  CHECK_THROWS_WITH(parse({"--nprocs-per-node", "1", "configs/synthetic_mlp.yaml"}),
                    Contains("unknown option --nprocs-per-node") && !Contains("the program goes after"));
  CHECK_THROWS_WITH(parse({"--master-adr", "node1", "configs/synthetic_mlp.yaml"}),
                    !Contains("the program goes after"));
  CHECK_THROWS_WITH(parse({"--master-adr", "node1", "./train.sh"}), !Contains("the program goes after"));
  // An unknown option just before a program: the program may be the word after it (was: no hint).
  CHECK_THROWS_WITH(parse({"--verbos", "./prog.sh"}),
                    "unknown option --verbos; if it is ./prog.sh's, the program goes after --: ddprun [options] -- "
                    "./prog.sh --verbos; see ddprun --help");
  // A program with arguments, `--` forgotten: named, in order, with the command meant (was: "c b a").
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "./prog.sh", "a", "b", "c"}),
                    "unexpected argument(s) a b c after ./prog.sh; a program and its arguments go after --: "
                    "ddprun [options] -- ./prog.sh a b c");
  CHECK_THROWS_WITH(parse({"./prog.sh", "--foo"}),
                    "unknown option --foo; if it is ./prog.sh's, the program goes after --: ddprun [options] -- "
                    "./prog.sh --foo; see ddprun --help");
  CHECK_THROWS_WITH(parse({"configs/x.yaml", "train.epochs=2"}),
                    "unexpected argument(s) train.epochs=2 after the config configs/x.yaml: a config key is set with "
                    "--set KEY=VALUE (--set train.epochs=2)");
  CHECK_THROWS_WITH(parse({}), Contains("nothing to run"));
  CHECK_THROWS_WITH(parse({"/nonexistent/train.yaml"}), Contains("config file not found: /nonexistent/train.yaml"));
  // `ddprun hostname` meant `ddprun -- hostname`: said so, not "config file not found".
  CHECK_THROWS_WITH(parse({"hostname"}), Contains("hostname is a program on PATH, not a config; run it with -- hostname"));
  CHECK_THROWS_WITH(parse({"hostname.yaml"}), Contains("config file not found: hostname.yaml"));
  CHECK_THROWS_WITH(parse({"--", "/nonexistent/program"}), Contains("program not found"));
  CHECK_THROWS_WITH(parse({"--local-ranks-filter", "0,x", "--", "true"}), Contains("--local-ranks-filter"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "--local-ranks-filter", "2", "--", "true"}),
                    Contains("local rank 2 does not exist with 2 worker(s)"));
  CHECK_THROWS_WITH(parse({"--nnodes", "2", "--master-port", "0", "--", "true"}), Contains("--master-port gives port 0"));
  CHECK_THROWS_WITH(parse({"--run-id", "a b", "--", "true"}), Contains("--run-id"));
  // A run id becomes a file name under --log-dir: nothing that leaves it (issue 12, item 13).
  for (const char* escape : {"..", ".", ".hidden", "../x", "a/b"})
    CHECK_THROWS_WITH(parse({"--run-id", escape, "--", "true"}), Contains("--run-id: expected a plain name"));
  CHECK_NOTHROW(parse({"--run-id", "job.42", "--", "true"}));
  {
    ddp::test::TempDir dir;
    ddp::test::write_file(dir.file("secret"), "s3cret\r\n");  // written on Windows: the same secret
    CHECK(parse({"--rdzv-secret-file", dir.file("secret"), "--", "true"}).rdzv_secret == "s3cret");
  }
  CHECK_THROWS_WITH(parse({"--rdzv-secret-file", "/nonexistent/secret", "--", "true"}),
                    Contains("--rdzv-secret-file: cannot read a secret (a non-empty first line) from /nonexistent/secret"));
  // Durations and counts are bounded before any cast (issue 12, item 9): a week, a million restarts.
  for (const char* option : {"--shutdown-grace", "--monitor-interval", "--rdzv-timeout", "--stall-timeout"})
    CHECK_THROWS_WITH(parse({option, "1e10", "--", "true"}), Contains(option) && Contains("604800"));
  CHECK_THROWS_WITH(parse({"--max-restarts", "99999999999", "--", "true"}), Contains("--max-restarts"));
  // Issue 22, item 13: NaN is no duration, a huge rank is not truncated to a small one, and a
  // range names its ends as the help does.
  for (const char* option : {"--shutdown-grace", "--monitor-interval", "--rdzv-timeout", "--stall-timeout"})
    for (const char* value : {"nan", "inf", "-1"})
      CHECK_THROWS_WITH(parse({option, value, "--", "true"}),
                        Contains(option) && Contains("and at most 604800 (a week), got '" + std::string(value) + "'"));
  CHECK_THROWS_WITH(parse({"--rdzv-timeout", "0", "--", "true"}), Contains("expected seconds > 0"));
  CHECK(parse({"--shutdown-grace", "0", "--", "true"}).shutdown_grace_s == 0);
  CHECK_THROWS_WITH(parse({"--local-ranks-filter", "4294967297", "--", "true"}),
                    Contains("--local-ranks-filter: expected local ranks like 0 or 0,2, got '4294967297'"));
  std::string negative;
  try {
    parse({"--max-restarts", "-1", "--", "true"});
  } catch (const UserError& e) {
    negative = e.what();
  }
  CHECK_THAT(negative, Contains("--max-restarts") && Contains("-1") && Contains("1000000"));
  CHECK(negative.size() < 200);  // was a 300-digit upper end
  // A bad port in --rdzv-endpoint names that option, not --master-port, which was not given.
  CHECK_THROWS_WITH(parse({"--rdzv-endpoint", "localhost:abc", "--", "true"}),
                    "--rdzv-endpoint: expected a port 0..65535, got 'abc' (in 'localhost:abc')");
  CHECK_THROWS_WITH(parse({"--rdzv-endpoint", "localhost:70000", "--", "true"}),
                    Contains("--rdzv-endpoint: expected a port 0..65535, got '70000'"));
  CHECK_THROWS_WITH(parse({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--", "true"}),
                    Contains("--rdzv-endpoint gives port 0, which picks a port only node 0 knows"));
  // Base 10, as torchrun reads it: CLI11 took 010 for 8 and 0x10 for 16, and called 3x out of range.
  CHECK(parse({"--max-restarts", "010", "--", "true"}).max_restarts == 10);
  for (const char* value : {"0x10", "3x", ""})
    CHECK_THROWS_WITH(parse({"--max-restarts", value, "--", "true"}),
                      "--max-restarts: expected a base-10 integer, got '" + std::string(value) + "'; see ddprun --help");
  // A base-10 integer past 64 bits is out of range, not "no integer" (ddp-generate --seed 2^64-1).
  for (const char* value : {"99999999999999999999", "-99999999999999999999"})
    CHECK_THROWS_WITH(parse({"--max-restarts", value, "--", "true"}),
                      Contains("--max-restarts: expected an integer in [0, ") && Contains("got " + std::string(value)));
  CHECK_THROWS_WITH(parse({"--nnodes", "9999999", "--", "true"}),
                    Contains("--nnodes: expected an integer from 1 to 1048576, got '9999999'"));
  CHECK_THROWS_AS(parse({"--set", "a=1", "--", "true"}), UserError);
}

namespace {

// What `ddprun --help` prints, from parse_launch_options itself.
std::string help_text() {
  std::ostringstream captured;
  auto* saved = std::cout.rdbuf(captured.rdbuf());
  const char* argv[] = {"ddprun", "--help"};
  auto parsed = parse_launch_options(2, argv);
  std::cout.rdbuf(saved);
  CHECK_FALSE(parsed.has_value());
  return captured.str();
}

// The help of one option: from its name to the next option's line.
std::string help_of(const std::string& help, const std::string& option) {
  auto start = help.find("  " + option);
  if (start == std::string::npos) return "";
  auto end = help.find("\n  -", start + 1);
  std::string text = help.substr(start, end == std::string::npos ? std::string::npos : end - start);
  std::string words;  // CLI11 may wrap a long description: compare with single spaces
  std::istringstream in(text);
  for (std::string word; in >> word;) words += (words.empty() ? "" : " ") + word;
  return words;
}

std::string shown(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

TEST_CASE("ddprun's help shows each option's default as LaunchOptions declares it", "[launch][options]") {
  const LaunchOptions defaults;
  std::string help = help_text();
  REQUIRE_THAT(help, Catch::Contains("--nproc-per-node"));
  std::vector<std::pair<std::string, std::string>> expected{
      {"--nproc-per-node", std::to_string(defaults.nproc_per_node)},
      {"--nnodes", std::to_string(defaults.nnodes)},
      {"--node-rank", std::to_string(defaults.node_rank)},
      {"--master-addr", defaults.master_addr},
      {"--master-port", std::to_string(defaults.master_port)},
      {"--rdzv-timeout", shown(defaults.rdzv_timeout_s)},
      {"--shutdown-grace", shown(defaults.shutdown_grace_s)},
      {"--max-restarts", std::to_string(defaults.max_restarts)},
      {"--monitor-interval", shown(defaults.monitor_interval_s)},
      {"--stall-timeout", shown(defaults.stall_timeout_s)},
  };
  for (const auto& [option, value] : expected) {
    INFO(option << " in:\n" << help);
    std::string text = help_of(help, option);
    CHECK_THAT(text, Catch::Contains("(default " + value + ")") || Catch::Contains("(default " + value + ";") ||
                         Catch::Contains("(default " + value + ":"));
  }
  // The values themselves, so that a default changed by accident shows here as well.
  CHECK(defaults.nproc_per_node == 1);
  CHECK(defaults.master_addr == kDefaultMasterAddr);
  CHECK(defaults.master_port == kDefaultMasterPort);
  CHECK(help_of(help, "--rdzv-timeout").find("(default 300)") != std::string::npos);
  CHECK(help_of(help, "--monitor-interval").find("(default 0.1)") != std::string::npos);
  CHECK(help_of(help, "--stall-timeout").find("(default 0: off)") != std::string::npos);
}

TEST_CASE("worker variables follow torchrun's contract") {
  WorkerIdentity id;
  id.rank = 5;
  id.local_rank = 1;
  id.world_size = 8;
  id.local_world_size = 4;
  id.node_rank = 1;
  id.node_count = 2;
  id.master_addr = "node0";
  id.master_port = 29500;
  id.run_id = "abc";
  id.restart_count = 2;
  id.launcher_store = true;
  auto vars = worker_variables(id);
  CHECK(vars.at("RANK") == "5");
  CHECK(vars.at("LOCAL_RANK") == "1");
  CHECK(vars.at("WORLD_SIZE") == "8");
  CHECK(vars.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(vars.at("GROUP_RANK") == "1");
  CHECK(vars.at("GROUP_WORLD_SIZE") == "2");
  CHECK(vars.at("MASTER_ADDR") == "node0");
  CHECK(vars.at("MASTER_PORT") == "29500");
  CHECK(vars.at("DDPRUN_RUN_ID") == "abc");
  CHECK(vars.at("DDPRUN_RESTART_COUNT") == "2");
  CHECK(vars.at("TORCHELASTIC_USE_AGENT_STORE") == "True");

  auto env = merge_environment({"RANK=99", "HOME=/root"}, vars);
  CHECK(std::count(env.begin(), env.end(), "RANK=5") == 1);
  CHECK(std::count(env.begin(), env.end(), "RANK=99") == 0);
  CHECK(std::count(env.begin(), env.end(), "HOME=/root") == 1);
}

TEST_CASE("nproc-per-node N, gpu, cpu and auto against the machine's GPUs and cores") {
  CHECK(resolve_nproc("3", 0, 2) == 3);
  CHECK(resolve_nproc("cpu", 4, 2) == 2);
  CHECK(resolve_nproc("gpu", 4, 2) == 4);
  CHECK(resolve_nproc("auto", 4, 2) == 4);
  CHECK(resolve_nproc("auto", 0, 2) == 2);
  CHECK_THROWS_WITH(resolve_nproc("gpu", 0, 2), "--nproc-per-node gpu: no CUDA device is visible on this machine");
  for (const char* bad : {"0", "-1", "gpus", "", "4097"})
    CHECK_THROWS_WITH(resolve_nproc(bad, 1, 2), Catch::Contains("expected a count from 1 to 4096, auto, cpu or gpu"));
}

TEST_CASE("CUDA_VISIBLE_DEVICES counts devices as CUDA does") {
  CHECK(count_visible_devices("0,1,2,3", 4) == 4);
  CHECK(count_visible_devices("2,0", 4) == 2);
  CHECK(count_visible_devices("3", 4) == 1);
  CHECK(count_visible_devices("", 4) == 0);
  CHECK(count_visible_devices("-1", 4) == 0);
  CHECK(count_visible_devices("0,-1,1", 4) == 1);    // stops at the first invalid entry
  CHECK(count_visible_devices("0,7,1", 4) == 1);     // 7 names no device on this machine
  CHECK(count_visible_devices("0,,1", 4) == 1);
  CHECK(count_visible_devices("0,x", 4) == 1);
  CHECK(count_visible_devices("GPU-8a3c0f1e-8c4e-4f3a,MIG-1d2e", 2) == 2);
  CHECK(count_visible_devices("0,1", 0) == 0);       // no driver: nothing behind the names
  CHECK(count_visible_devices("0,1,2", 2) == 2);
}

TEST_CASE("torchrun's rendezvous spellings set the endpoint, the run id and node ranks by arrival") {
  auto c10d = parse({"--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "head:29600", "--rdzv_id", "J7",
                     "--", "true"});
  CHECK(c10d.master_addr == "head");
  CHECK(c10d.master_port == 29600);
  CHECK(c10d.run_id == "J7");
  CHECK(c10d.node_rank_by_arrival);
  auto default_port = parse({"--nnodes", "2", "--rdzv-backend=c10d", "--rdzv-endpoint=head", "--", "true"});
  CHECK(default_port.master_port == 29400);  // torchrun's
  auto ipv6 = parse({"--nnodes", "2", "--rdzv-endpoint", "[::1]:29601", "--node-rank", "1", "--", "true"});
  CHECK(ipv6.master_addr == "::1");
  CHECK(ipv6.master_port == 29601);
  CHECK_FALSE(ipv6.node_rank_by_arrival);  // static (the default backend): --node-rank
  auto ranked = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--node-rank", "1", "--rdzv-endpoint", "h:1", "--",
                       "true"});
  CHECK_FALSE(ranked.node_rank_by_arrival);
  CHECK(ranked.node_rank == 1);
  CHECK_FALSE(parse({"--rdzv-backend", "c10d", "--", "true"}).node_rank_by_arrival);  // one node: nothing to order

  auto error = [](std::vector<std::string> args) {
    try {
      parse(std::move(args));
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error({"--rdzv-backend", "etcd", "--", "true"}), Catch::Contains("--rdzv-backend") &&
                                                                 Catch::Contains("etcd"));
  CHECK_THAT(error({"--rdzv-endpoint", "h:1", "--master-addr", "h", "--", "true"}),
             Catch::Contains("either --rdzv-endpoint or --master-addr/--master-port"));
  CHECK_THAT(error({"--rdzv-id", "a", "--run-id", "b", "--", "true"}), Catch::Contains("--rdzv-id a and --run-id b differ"));
  CHECK_THAT(error({"--rdzv-endpoint", "::1:5", "--", "true"}), Catch::Contains("[ADDRESS]:PORT"));
  CHECK_THAT(error({"--rdzv-endpoint", "h:x", "--", "true"}), Catch::Contains("--rdzv-endpoint: expected a port 0..65535, got 'x' (in 'h:x')"));
  CHECK_THAT(error({"--rdzv-endpoint", "[::1", "--", "true"}), Catch::Contains("--rdzv-endpoint: no ']' in '[::1'"));
  CHECK_THAT(error({"--rdzv-endpoint", "[::1]5", "--", "true"}),
             Catch::Contains("--rdzv-endpoint: expected [ADDRESS]:PORT, got '[::1]5'"));
  CHECK_THAT(error({"--rdzv-endpoint", ":5", "--", "true"}), Catch::Contains("--rdzv-endpoint: expected HOST[:PORT], got ':5'"));
}

TEST_CASE("torchrun's program forms: a script, -m, --run-path and --no-python take every word after them",
          "[launch][options][torchrun]") {
  ddp::test::TempDir dir;
  std::string script = dir.file("train.py");
  ddp::test::write_file(script, "print('hi')\n");
  setenv(env::kPython, "/bin/sh", 1);  // any executable: only the command line is looked at here
  auto options = parse({"--nproc-per-node", "2", "--master_port=1234", script, "--lr", "0.1", "--nproc-per-node", "5"});
  CHECK(options.nproc_per_node == 2);
  CHECK(options.master_port == 1234);
  CHECK(options.program == std::vector<std::string>{"/bin/sh", "-u", script, "--lr", "0.1", "--nproc-per-node", "5"});
  CHECK_FALSE(options.runs_trainer);
  CHECK(parse({"-m", "pkg.train", "--epochs", "2"}).program ==
        std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg.train", "--epochs", "2"});
  CHECK(parse({"--module", "pkg.train"}).program == std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg.train"});
  auto run_path = parse({"--run_path", script, "x"}).program;
  REQUIRE(run_path.size() == 6);
  CHECK(run_path[2] == "-c");
  CHECK_THAT(run_path[3], Catch::Contains("runpy.run_path"));
  CHECK(std::vector<std::string>(run_path.begin() + 4, run_path.end()) == std::vector<std::string>{script, "x"});
  CHECK(parse({"--no-python", "true", "--flag", "-m"}).program == std::vector<std::string>{"true", "--flag", "-m"});
  CHECK(parse({"--no-python", "--", "true", "a"}).program == std::vector<std::string>{"true", "a"});
  // As torchrun's REMAINDER: a `--` after the script is the script's.
  CHECK(parse({"--standalone", script, "--", "--x"}).program == std::vector<std::string>{"/bin/sh", "-u", script, "--", "--x"});
  CHECK(parse({"--standalone", "-m", "pkg", "--epochs", "2"}).program ==
        std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg", "--epochs", "2"});
  // The last of a repeated option wins, as argparse has it.
  CHECK(parse({"--nproc-per-node", "2", "--nproc_per_node", "3", "--", "true"}).nproc_per_node == 3);
  // A YAML config keeps its form: options and --set may still follow it.
  ddp::test::write_file(dir.file("c.yaml"), "train: {epochs: 1}\n");
  auto config = parse({dir.file("c.yaml"), "--nproc-per-node", "3", "--set", "train.epochs=2"});
  CHECK(config.runs_trainer);
  CHECK(config.nproc_per_node == 3);
  CHECK(config.program.back() == "train.epochs=2");
  unsetenv(env::kPython);
}

TEST_CASE("torchrun's other options: --tee, --redirects, --role, --local-addr, --rdzv-conf, and the ignored ones",
          "[launch][options][torchrun]") {
  using Catch::Contains;
  auto options = parse({"--nproc-per-node", "3", "--redirects", "0:1,2:3", "-t", "2", "--role", "trainer",
                        "--local-addr", "node-a", "--", "true"});
  CHECK(options.redirects == std::vector<int>{1, 0, 3});
  CHECK(options.tees == std::vector<int>{2, 2, 2});
  CHECK(options.role == "trainer");
  CHECK(options.local_addr == "node-a");
  CHECK(parse({"--", "true"}).redirects.empty());  // neither given: ddprun's own log layout
  CHECK(parse({"--rdzv-conf", "join_timeout=7,last_call_timeout=3", "--", "true"}).rdzv_timeout_s == 7);
  CHECK(parse({"--nnodes", "2:2", "--node-rank", "1", "--", "true"}).nnodes == 2);
  // MIN:MAX is elastic: node ranks by arrival (c10d), and the settle time from torchrun's last_call_timeout.
  auto elastic = parse({"--nnodes", "1:3", "--rdzv-backend", "c10d", "--rdzv-conf", "last_call_timeout=2", "--", "true"});
  CHECK(elastic.min_nodes == 1);
  CHECK(elastic.nnodes == 3);
  CHECK(elastic.elastic());
  CHECK(elastic.rdzv_settle_s == 2);
  CHECK_FALSE(parse({"--nnodes", "2:2", "--node-rank", "1", "--", "true"}).elastic());
  CHECK_THROWS_WITH(parse({"--nnodes", "1:2", "--", "true"}),
                    Contains("--nnodes 1:2 (elastic): node ranks change from round to round") &&
                        Contains("use --rdzv-backend c10d, without --node-rank"));
  CHECK_THROWS_WITH(parse({"--rdzv-conf", "last_call_timeout=soon", "--", "true"}),
                    Contains("--rdzv-conf: last_call_timeout: expected seconds >= 0, got 'soon'"));
  CHECK_THROWS_WITH(parse({"--nnodes", "3:2", "--rdzv-backend", "c10d", "--", "true"}),
                    Contains("--nnodes 3:2: MIN:MAX with MIN above MAX"));
  CHECK(parse({"--rdzv-conf", "join_timeout=7", "--rdzv-timeout", "9", "--", "true"}).rdzv_timeout_s == 9);
  CHECK_NOTHROW(parse({"--start-method", "spawn", "--start_method=fork", "--virtual-local-rank", "--", "true"}));
  CHECK_NOTHROW(parse({"--log-line-prefix-template", "x", "--numa-binding", "node", "--", "true"}));

  CHECK_THROWS_WITH(parse({"--redirects", "4", "--", "true"}), Contains("--redirects: expected 0 (none)") && Contains("'4'"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "--tee", "2:1", "--", "true"}),
                    Contains("--tee: expected LOCAL_RANK:N with local ranks 0..1"));
  CHECK_THROWS_WITH(parse({"--rdzv-conf", "join_timeout", "--", "true"}), Contains("--rdzv-conf: expected KEY=VALUE"));
  CHECK_THROWS_WITH(parse({"--local-addr", "a b", "--", "true"}), Contains("--local-addr: expected an address"));
}

TEST_CASE("torchrun's forms refuse what cannot run, with one line each", "[launch][options][torchrun][errors]") {
  using Catch::Contains;
  using Catch::Equals;
  ddp::test::TempDir dir;
  CHECK_THROWS_WITH(parse({"/nonexistent/train.py", "--lr", "1"}), Contains("script not found: /nonexistent/train.py"));
  CHECK_THROWS_WITH(parse({"--no-python", "/nonexistent/prog"}),
                    Contains("--no-python: program not found or not executable: /nonexistent/prog"));
  CHECK_THROWS_WITH(parse({"--no-python", "-m", "x"}), Contains("give one of --no-python, -m/--module and --run-path"));
  CHECK_THROWS_WITH(parse({"-m"}), Contains("-m needs a script"));
  ddp::test::write_file(dir.file("t.py"), "\n");
  setenv(env::kPython, "/nonexistent/python", 1);
  CHECK_THROWS_WITH(parse({dir.file("t.py")}), Contains("/nonexistent/python is not an executable ($DDPRUN_PYTHON)"));
  unsetenv(env::kPython);
  // A config that is a directory, or a program given where a config goes.
  CHECK_THROWS_WITH(parse({dir.path()}), Contains(dir.path() + " is a directory; give a config file in it"));
  CHECK_THROWS_WITH(parse({"--set", dir.file("t.yaml"), "--set", "train.epochs=2"}),
                    Equals("--set " + dir.file("t.yaml") +
                           ": expected key=value; a CONFIG.yaml goes before the first --set, not as its value"));
  CHECK_THROWS_WITH(parse({"--set", "train.epochs=2"}), Equals("--set needs a CONFIG.yaml to override"));
  ddp::test::write_file(dir.file("orphan.sh"), "#!/no/such/interp -e\necho hi\n");
  chmod(dir.file("orphan.sh").c_str(), 0755);
  CHECK_THROWS_WITH(parse({"--", dir.file("orphan.sh")}),
                    Equals(dir.file("orphan.sh") +
                           ": its interpreter /no/such/interp (the #! line) is not found or not executable"));
  ddp::test::write_file(dir.file("run.sh"), "#!/bin/sh\n");
  chmod(dir.file("run.sh").c_str(), 0755);
  CHECK_THROWS_WITH(parse({dir.file("run.sh")}), Contains("is a program, not a config; run it with --no-python"));
}

TEST_CASE("every launcher option has a reference entry, short names first", "[launch][options][docs]") {
  auto reference = launcher_option_reference();
  auto find = [&](const std::string& name) -> const OptionReference* {
    for (const auto& option : reference)
      if (std::count(option.names.begin(), option.names.end(), name)) return &option;
    return nullptr;
  };
  for (const char* name : {"--nproc-per-node", "--nproc_per_node", "--set", "--tee", "--no-python", "--start-method",
                           "--rdzv-backend", "--help", "--version"})
    CHECK(find(name) != nullptr);
  REQUIRE(find("--module"));
  CHECK(find("--module")->names.front() == "-m");
  CHECK(find("--module")->value.empty());  // a flag
  CHECK(find("--nnodes")->value == "TEXT");
  CHECK(find("--rdzv-backend")->choices == std::vector<std::string>{"static", "c10d"});
  CHECK(find("--log-dir")->takes_path);
}

}  // namespace DDP_TEST_FILE
