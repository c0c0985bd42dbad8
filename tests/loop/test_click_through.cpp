// Click-through prediction end to end: DLRM trained by ddprun on click logs in Criteo's layout
// (scripts/make_clicks.py), its AUC rising from a guess's, its model.pt scoring the test log in an
// independent Python DLRM as ddprun reported it, world sizes and dist.shard agreeing, and a
// truncated log refused in one line.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "ddp/loop/train_config.h"
#include "ddp/model/model_registry.h"
#include "ddp/record/metrics_reader.h"
#include "support/metric_values.h"
#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

// A click log of `rows` impressions from scripts/make_clicks.py (train and test share the planted effects).
std::string make_log(const TempDir& dir, const std::string& name, int rows, int seed) {
  std::string path = dir.file(name);
  auto made = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_clicks.py", path, "--rows",
                           std::to_string(rows), "--seed", std::to_string(seed), "--vocabulary", "2000"},
                          std::chrono::seconds(120));
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  return path;
}

CommandResult train(int nproc, const std::string& train_log, const std::string& test_log, const std::string& out,
                    const std::string& sets) {
  return run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " + std::to_string(nproc) +
                       " " + std::string(DDP_SOURCE_DIR) + "/configs/clicks_dlrm.yaml --set data.path=" + train_log +
                       " --set data.eval_path=" + test_log + " --set run.output_dir=" + out +
                       " --set model.embedding_rows=[4000] --set train.log_every=20 --set checkpoint.every_epochs=0 " +
                       sets,
                   std::chrono::seconds(300));
}

// Rows of each of the 26 tables of `rows` rows that some impression of the log at `path` names
// (an empty field names row 0, as the reader gives it hash 0).
std::vector<std::set<int64_t>> named_rows(const std::string& path, int64_t rows) {
  std::vector<std::set<int64_t>> named(26);
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream in(line);
    for (std::string field; std::getline(in, field, '\t');) fields.push_back(field);
    fields.resize(40);
    for (int f = 0; f < 26; ++f) {
      const std::string& hex = fields[static_cast<std::size_t>(14 + f)];
      named[static_cast<std::size_t>(f)].insert(hex.empty() ? 0 : static_cast<int64_t>(std::stoull(hex, nullptr, 16) % rows));
    }
  }
  return named;
}

// The tables-sharding runs' shared settings: 30 steps of a global batch of 32, one epoch of a 960-line
// log; evaluations of 10 samples a batch, so that 203 test lines give ranks unequal batch counts. SGD
// on the MLPs: Adam's step, about lr whatever the gradient, would turn the summation order's 1e-9 in
// a near-zero gradient into 1e-6 of a weight.
const std::string kTableSteps =
    "--set train.max_steps=30 --set eval.every_epochs=1 --set eval.batch_size=10 --set optim.embeddings=rowwise_adagrad "
    "--set optim.embeddings_lr=0.05 --set optim.name=sgd --set optim.lr=0.05 ";

std::string batch_of(int world) { return "--set train.batch_size=" + std::to_string(32 / world) + " "; }

// The tables tests' logs (960 training lines, `test_rows` test lines), and the one-process
// reference run (row updates of replicated tables) in dir/one.
std::pair<std::string, std::string> logs_and_reference(const TempDir& dir, int test_rows) {
  std::string train_log = make_log(dir, "train.tsv", 960, 3), test_log = make_log(dir, "test.tsv", test_rows, 4);
  auto one = train(1, train_log, test_log, dir.file("one"), kTableSteps + batch_of(1));
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  return {train_log, test_log};
}

}  // namespace

TEST_CASE(
    "the data scripts (make_clicks.py, make_reddit_like.py) refuse bad arguments in one line each, exit 2, "
    "no traceback",
    "[clicks][graph]") {
  TempDir dir;
  write_file(dir.file("a_file"), "x");
  const std::string scripts = std::string(DDP_SOURCE_DIR) + "/scripts/";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"make_clicks.py", dir.file("c.tsv"), "--zipf", "nan"}, "--zipf: expected a finite exponent"},
      {{"make_clicks.py", dir.file("c.tsv"), "--rows", "0"}, "--rows: expected at least 1, got 0"},
      {{"make_clicks.py", dir.path()}, dir.path() + " is a directory: name the file to write"},
      {{"make_reddit_like.py", dir.file("g"), "--nodes", "0"}, "--nodes: expected at least 2, got 0"},
      {{"make_reddit_like.py", dir.file("g"), "--classes", "0"}, "--classes: expected at least 2, got 0"},
      {{"make_reddit_like.py", dir.file("g"), "--nodes", "10", "--classes", "3", "--edges", "1000"},
       "--edges: 1000 is more than the 90 directed edges that 10 nodes have between them"},
      {{"make_reddit_like.py", dir.file("g"), "--homophily", "2"}, "--homophily: expected a share from 0 to 1"},
      {{"make_reddit_like.py", dir.file("a_file")}, dir.file("a_file") + " is a file: name the directory"},
  };
  for (const auto& [arguments, expected] : cases) {
    std::vector<std::string> argv{"/usr/bin/python3", scripts + arguments[0]};
    argv.insert(argv.end(), arguments.begin() + 1, arguments.end());
    auto r = run_command(argv, std::chrono::seconds(60));
    INFO(arguments[0] << " " << arguments.back() << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(expected) && !Contains("Traceback"));
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("g")));
}

TEST_CASE("DLRM learns a Criteo-layout click log at world 2, and an independent Python DLRM scores its model.pt "
          "as ddprun did",
          "[clicks][python]") {
  TempDir dir;
  std::string train_log = make_log(dir, "train.tsv", 12000, 1), test_log = make_log(dir, "test.tsv", 3000, 2);
  auto r = train(2, train_log, test_log, dir.file("run"), "--set eval.at_start=true --set train.epochs=2 --set train.batch_size=64");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto run = ddp::read_run(dir.file("run"));
  const auto& auc = run.series("eval_auc");
  REQUIRE(auc.size() == 3);  // at the start, after each of the two epochs
  INFO("AUC before training " << auc.front().second << ", after " << auc.back().second);
  CHECK(auc.front().second > 0.4);
  CHECK(auc.front().second < 0.6);
  CHECK(auc.back().second > 0.75);
  auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/eval_dlrm.py",
                             dir.file("run/model.pt"), test_log},
                            std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  double loss = 0, exact_auc = 0;
  std::istringstream(python.out) >> loss >> exact_auc;
  CHECK(std::abs(loss - run.last("eval_loss").value_or(0)) < 1e-4);
  CHECK(std::abs(exact_auc - auc.back().second) < 1e-5);  // Note [Exact AUC]
}

TEST_CASE("DLRM: world 2 with batch 16 equals world 1 with batch 32, replicated and under dist.shard parameters",
          "[clicks]") {
  TempDir dir;
  std::string train_log = make_log(dir, "train.tsv", 1600, 3), test_log = make_log(dir, "test.tsv", 200, 4);
  const std::string steps = "--set train.epochs=1 --set train.max_steps=40 --set eval.every_epochs=0 ";
  auto one = train(1, train_log, test_log, dir.file("one"), steps + "--set train.batch_size=32");
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  for (std::string shard : {"none", "parameters"}) {
    auto two = train(2, train_log, test_log, dir.file(shard), steps + "--set train.batch_size=16 --set dist.shard=" + shard);
    INFO(shard << "\n" << two.out << two.err);
    REQUIRE(two.exit_code == 0);
    CHECK(largest_difference(dir.file("one/model.pt"), dir.file(shard + "/model.pt")) < 1e-5);
  }
}

TEST_CASE("rank 0 writes a whole checkpoint of 192 MiB of state without holding copies of it", "[clicks][memory]") {
  TempDir dir;
  std::string train_log = make_log(dir, "train.tsv", 800, 6);
  // 26 tables of 40,000 rows of 16: 16.6M parameters, 64 MiB, and 192 MiB with Adam's two moments.
  auto r = train(2, train_log, train_log, dir.file("run"),
                 "--set model.embedding_rows=[40000] --set train.batch_size=32 --set train.max_steps=4 --set eval.every_epochs=0 "
                 "--set checkpoint.every_steps=4");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto run = ddp::read_run(dir.file("run"));
  // What each rank's peak grew by after the model was built and placed: the ranks' start differs by
  // tens of MiB from run to run, which is not what this measures.
  auto growth = [&run](const std::string& rank) {
    return run.last("peak_rss_mib_rank" + rank).value_or(0) - run.last("setup_peak_rss_mib_rank" + rank).value_or(0);
  };
  const double writer = growth("0"), other = growth("1");
  INFO("peak RSS growth after the model was placed: rank 0 (writes the checkpoint and model.pt) " << writer
                                                                                                  << " MiB, rank 1 "
                                                                                                  << other << " MiB");
  REQUIRE(run.last("setup_peak_rss_mib_rank1").value_or(0) > 0);
  REQUIRE(other > 0);
  // Note [Streamed checkpoint files]: it was 5 times the state (a copy in the archive, its bytes,
  // their growth, and again to merge them) before the archive went straight to the file.
  CHECK(writer - other < 192);
  CHECK(std::filesystem::exists(dir.file("run/checkpoints/step_0000000004.pt")));
}

TEST_CASE("a click log goes through the node cache: ranks read impressions from the file, not a copy each in memory, "
          "and train to the same bits",
          "[clicks][memory]") {
  TempDir dir;
  // 200,000 impressions: 52 MB of text, 62 MB of features as float64.
  std::string log = make_log(dir, "train.tsv", 200000, 5);
  auto run = [&](const std::string& name, const std::string& cache) {
    auto r = train(2, log, log, dir.file(name),
                   "--set data.eval_path= --set data.eval_split=none --set eval.every_epochs=0 --set train.max_steps=5 "
                   "--set data.cache_dir=" + cache);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return ddp::read_run(dir.file(name)).last("peak_rss_mib_max").value_or(0);
  };
  const double in_memory = run("memory", "none"), cached = run("cached", dir.file("cache"));
  INFO("peak RSS per rank: " << in_memory << " MiB reading the log into memory, " << cached << " MiB through the cache");
  CHECK(cached > 0);
  CHECK(cached < in_memory - 60);
  CHECK(read_file(dir.file("memory/model.pt")) == read_file(dir.file("cached/model.pt")));
}

TEST_CASE("a truncated click log stops the run at start in one line naming the file and the line", "[clicks]") {
  TempDir dir;
  std::string train_log = make_log(dir, "train.tsv", 300, 5);
  std::string text = read_file(train_log);
  std::string cut = dir.file("cut.tsv");
  write_file(cut, text.substr(0, text.size() - 40));
  auto r = train(2, cut, train_log, dir.file("run"), "");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains(cut + " line 300: ") && Contains("looks truncated"));
  CHECK_FALSE(std::filesystem::exists(dir.file("run/model.pt")));
  // The same 39 columns as a CSV would be normalised to float32, which rounds the hashes: refused.
  std::string header = "label", row = "1";
  for (int j = 0; j < 39; ++j) {
    header += ",f" + std::to_string(j);
    row += "," + std::to_string(4000000000LL + j);
  }
  write_file(dir.file("clicks.csv"), header + "\n" + row + "\n" + row + "\n");
  auto csv = train(1, dir.file("clicks.csv"), dir.file("clicks.csv"), dir.file("csv"), "--set data.dataset=csv");
  INFO(csv.out << csv.err);
  CHECK(csv.exit_code == 2);
  CHECK_THAT(csv.err, Contains("model.name dlrm takes its features as stored (32-bit hashes that float32 would round), "
                               "which data.dataset criteo gives; data.dataset csv is normalised to float32"));
}

TEST_CASE("sharded tables, table-wise and row-wise at world 2 and 4, equal one process with the same row optimizer "
          "after 30 steps, and rows no batch named keep their initial bits",
          "[clicks][tables]") {
  TempDir dir;
  auto [train_log, test_log] = logs_and_reference(dir, 203);
  // The model as every run starts it: built from the run's seed, as the trainer builds it.
  ddp::TrainConfig config = ddp::load_train_config(std::string(DDP_SOURCE_DIR) + "/configs/clicks_dlrm.yaml",
                                                   {"model.embedding_rows=[4000]", "data.path=" + train_log});
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  auto initial = ddp::make_model(config.model)->named_parameters();
  auto named = named_rows(train_log, 4000);
  for (std::string mode : {"table", "row"})
    for (int world : {2, 4}) {
      const std::string out = dir.file(mode + std::to_string(world));
      auto r = train(world, train_log, test_log, out, kTableSteps + batch_of(world) + "--set model.embedding_sharding=" + mode);
      INFO(mode << " at world " << world << "\n" << r.out << r.err);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.out, Contains("model.embedding_sharding " + mode + ": 26 tables of 4000 rows, 104000 in all, "));
      CHECK(largest_difference(dir.file("one/model.pt"), out + "/model.pt") < 1e-6);
      // Evaluated in lockstep (Note [Sharded tables]): every test sample once, as one process does.
      auto run = ddp::read_run(out);
      CHECK(run.last("eval_samples").value_or(0) == 203);
      CHECK(std::abs(run.last("eval_loss").value_or(0) - ddp::read_run(dir.file("one")).last("eval_loss").value_or(1)) < 1e-5);
      auto trained = load_weights(out + "/model.pt");
      int64_t unnamed = 0, moved = 0;
      for (int f = 0; f < 26; ++f) {
        const std::string name = "embeddings." + std::to_string(f) + ".weight";
        torch::Tensor before = initial[name], after = trained.at(name);
        REQUIRE(after.sizes() == before.sizes());
        for (int64_t row = 0; row < 4000; ++row) {
          if (named[static_cast<std::size_t>(f)].count(row)) {
            moved += !torch::equal(after[row], before[row]);
            continue;
          }
          ++unnamed;
          if (!torch::equal(after[row], before[row])) FAIL(name << " row " << row << " changed, though no batch named it");
        }
      }
      INFO(unnamed << " rows unnamed, " << moved << " named rows moved");
      CHECK(unnamed > 26 * 1000);
      CHECK(moved > 26 * 10);
    }
}

TEST_CASE("the dense part under dist.shard optimizer, gradients and parameters beside row-sharded tables equals one "
          "process, and its checkpoint resumes table-sharded at world 4 without dist.shard",
          "[clicks][tables][sharding]") {
  TempDir dir;
  auto [train_log, test_log] = logs_and_reference(dir, 203);
  for (std::string shard : {"optimizer", "gradients", "parameters"}) {
    const std::string out = dir.file(shard);
    auto r = train(2, train_log, test_log, out,
                   kTableSteps + batch_of(2) + "--set model.embedding_sharding=row --set dist.shard=" + shard);
    INFO(shard << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("dist.shard " + shard));
    CHECK(largest_difference(dir.file("one/model.pt"), out + "/model.pt") < 1e-6);
    CHECK(ddp::read_run(out).last("eval_samples").value_or(0) == 203);  // lockstep, blocks gathered alike
  }
  const std::string out = dir.file("parameters_then_table");
  auto a = train(2, train_log, test_log, out,
                 kTableSteps + "--set checkpoint.every_steps=15 --set train.max_steps=15 " + batch_of(2) +
                     "--set model.embedding_sharding=row --set dist.shard=parameters");
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  auto b = train(4, train_log, test_log, out,
                 kTableSteps + "--set checkpoint.every_steps=15 " + batch_of(4) + "--set model.embedding_sharding=table");
  INFO(b.out << b.err);
  REQUIRE(b.exit_code == 0);
  CHECK_THAT(b.out, Contains("resumed from") && Contains("at step 15"));
  CHECK(largest_difference(dir.file("one/model.pt"), out + "/model.pt") < 1e-6);
}

TEST_CASE("a checkpoint of sharded tables resumes at another world size and sharding, and under replicate, as "
          "if uninterrupted",
          "[clicks][tables][checkpoint]") {
  TempDir dir;
  auto [train_log, test_log] = logs_and_reference(dir, 200);
  struct Leg {
    int world;
    std::string sharding;
  };
  for (auto [first, second] : {std::pair<Leg, Leg>{{2, "row"}, {4, "table"}}, {{4, "row"}, {1, "replicate"}}}) {
    const std::string out = dir.file(first.sharding + std::to_string(first.world) + "_then_" + second.sharding);
    const std::string half = "--set checkpoint.every_steps=15 --set train.max_steps=15 ";
    auto a = train(first.world, train_log, test_log, out,
                   kTableSteps + half + batch_of(first.world) + "--set model.embedding_sharding=" + first.sharding);
    INFO(a.out << a.err);
    REQUIRE(a.exit_code == 0);
    // ddp-export reads the tables' pieces and leaves their row state: the weights model.pt has.
    auto exported = run_command({bin("ddp-export"), out, "-o", out + "_export"}, std::chrono::seconds(120));
    INFO(exported.out << exported.err);
    REQUIRE(exported.exit_code == 0);
    CHECK(largest_difference(out + "/model.pt", out + "_export/model.pt") == 0);
    auto b = train(second.world, train_log, test_log, out,
                   kTableSteps + "--set checkpoint.every_steps=15 " + batch_of(second.world) +
                       "--set model.embedding_sharding=" + second.sharding);
    INFO(b.out << b.err);
    REQUIRE(b.exit_code == 0);
    CHECK_THAT(b.out, Contains("resumed from") && Contains("at step 15") &&
                          Contains("model.embedding_sharding " + first.sharding + " → " + second.sharding));
    CHECK(largest_difference(dir.file("one/model.pt"), out + "/model.pt") < 1e-6);
  }
  // optim.embeddings auto is rowwise_adagrad when sharded and dense when replicated: such a resume
  // would change the tables' optimizer, and is refused saying so.
  const std::string auto_out = dir.file("auto");
  const std::string half = "--set checkpoint.every_steps=15 --set train.max_steps=15 --set optim.embeddings=auto ";
  auto sharded = train(2, train_log, test_log, auto_out, half + batch_of(2) + "--set model.embedding_sharding=row");
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  auto replicated = train(1, train_log, test_log, auto_out,
                          "--set checkpoint.every_steps=15 --set train.max_steps=30 --set optim.embeddings=auto " + batch_of(1));
  INFO(replicated.out << replicated.err);
  CHECK(replicated.exit_code == 2);
  CHECK_THAT(replicated.err, Contains("does not fit this run: its embedding tables were updated row by row, and this "
                                      "run's by optim.name") &&
                                 Contains("set optim.embeddings as the run that wrote it had it"));
}


TEST_CASE("row-sharded tables at world 4: no rank but model.pt's writer ever holds more than its quarter of the tables",
          "[clicks][tables][memory]") {
  TempDir dir;
  std::string train_log = make_log(dir, "train.tsv", 1000, 7);
  // 26 tables of 200,000 rows of 16 floats: 333 MB whole, 83 MB (and 5 MB of row sums) a rank.
  const double tables_mib = 26.0 * 200000 * 16 * 4 / (1 << 20);
  auto peaks = [&](const std::string& name, const std::string& rows) {
    auto r = train(4, train_log, train_log, dir.file(name),
                   "--set model.embedding_sharding=row --set model.embedding_rows=[" + rows +
                       "] --set train.batch_size=32 --set train.max_steps=4 --set eval.every_epochs=0");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    auto run = ddp::read_run(dir.file(name));
    std::vector<double> mib;
    for (int rank = 0; rank < 4; ++rank) mib.push_back(run.last("peak_rss_mib_rank" + std::to_string(rank)).value_or(0));
    return mib;
  };
  auto small = peaks("small", "1000"), large = peaks("large", "200000");
  for (int rank = 1; rank < 4; ++rank) {
    INFO("rank " << rank << ": peak RSS " << large[rank] << " MiB with the tables of " << tables_mib << " MiB, "
                 << small[rank] << " MiB with tables of 1,000 rows");
    REQUIRE(small[rank] > 0);
    CHECK(large[rank] - small[rank] < 0.4 * tables_mib);
  }
  // Rank 0 gathers each table whole to write model.pt (and model.safetensors), and no more.
  INFO("rank 0: " << large[0] << " MiB, " << small[0] << " MiB");
  CHECK(large[0] - small[0] < 2.5 * tables_mib);
}

TEST_CASE("tables twice a rank's memory cap train row-sharded at world 4, each rank under prlimit, and replicate "
          "fails naming the rank",
          "[clicks][tables][memory]") {
  TempDir dir;
  std::string log = make_log(dir, "train.tsv", 1000, 7);
  // 26 tables of 2,650,000 rows of 16 floats: 4.41 GB, against a cap of 2 GiB a rank on the data
  // segment (ulimit -d: the heap and every private writable mapping, where LibTorch's tensors live).
  // A rank keeps a quarter of the rows, with their row sums, beside about 550 MiB of its own, most of
  // it address reserved and never touched (a thread's 8 MiB stack, OpenBLAS's 128 MiB buffer for
  // each thread that calls it), which the cap counts all the same: at 1.5 GiB and 3.33 GB of tables
  // the margin was under 200 MiB, and one more such reservation failed a rank. Rank 0 gathers the
  // whole tables for model.pt into files (the page cache), not into its heap.
  constexpr int64_t kCap = int64_t{2048} << 20;
  constexpr int64_t kRows = 2650000;
  constexpr double kTableBytes = 26.0 * kRows * 16 * 4;
  REQUIRE(kTableBytes > 2 * kCap);
  auto capped = [&](const std::string& sharding, const std::string& out) {
    return run_shell("OMP_NUM_THREADS=1 prlimit --data=" + std::to_string(kCap) + " " + bin("ddprun") +
                         " --standalone --nproc-per-node 4 " + std::string(DDP_SOURCE_DIR) +
                         "/configs/clicks_dlrm.yaml --set data.path=" + log + " --set data.eval_path=" + log +
                         " --set run.output_dir=" + dir.file(out) + " --set model.embedding_rows=[" + std::to_string(kRows) + "]" +
                         " --set model.embedding_sharding=" + sharding +
                         " --set train.max_steps=4 --set train.batch_size=32 --set checkpoint.every_epochs=0" +
                         " --set eval.every_epochs=0",
                     std::chrono::seconds(400));
  };
  auto replicated = capped("replicate", "replicated");
  INFO(replicated.out << replicated.err);
  CHECK(replicated.exit_code == 1);
  CHECK_THAT(replicated.err, Contains("out of memory: DefaultCPUAllocator") &&
                                 Contains("model.embedding_sharding table or row"));
  std::smatch rank;
  CHECK(std::regex_search(replicated.err, rank, std::regex("ddp-train: rank [0-3]: out of memory")));

  auto sharded = capped("row", "sharded");
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  CHECK(metric_value(dir.file("sharded/metrics.jsonl"), "parameter_mib_max") < 0.3 * kTableBytes / (1 << 20));
  // model.pt and model.safetensors hold every table whole.
  for (const char* file : {"model.pt", "model.safetensors"})
    CHECK(static_cast<double>(std::filesystem::file_size(dir.file(std::string("sharded/") + file))) > kTableBytes);
}

TEST_CASE("SIGINT during an evaluation of sharded tables stops every rank before the same batch, with 130",
          "[clicks][tables][signals]") {
  TempDir dir;
  std::string train_log = make_log(dir, "train.tsv", 200, 8), test_log = make_log(dir, "test.tsv", 2000, 9);
  // Rank 0 takes 0.3 s a batch over its 100 batches of 10: 30 s, unless it is stopped; the lookups
  // keep rank 1 at its pace.
  const std::string log = dir.file("log");
  const std::string command =
      "DDPRUN_TEST_EVAL_BATCH_DELAY=0:300 OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
      std::string(DDP_SOURCE_DIR) + "/configs/clicks_dlrm.yaml --set data.path=" + train_log +
      " --set data.eval_path=" + test_log + " --set run.output_dir=" + dir.file("run") +
      " --set model.embedding_rows=[4000] --set model.embedding_sharding=row --set eval.at_start=true"
      " --set eval.batch_size=10 --set train.max_steps=2 --set train.batch_size=16 --set checkpoint.every_epochs=0";
  auto r = run_shell(command + " > " + log + " 2>&1 & L=$!; " + until_logged(log, "evaluating at step 0") +
                         "kill -INT $L; wait $L; echo status=$?",
                     std::chrono::seconds(90));
  const std::string output = read_file(log);
  INFO(r.out << r.err << output);
  CHECK_THAT(r.out, Contains("status=130"));
  CHECK_THAT(output, Contains("interrupted after") && !Contains("killed them"));
  const std::string metrics = dir.file("run/metrics.jsonl");
  CHECK(metric_value(metrics, "eval_interrupted") == 1);
  CHECK(metric_value(metrics, "eval_samples") < 2000);
  CHECK(metric_value(metrics, "exit_status") == 130);
}

TEST_CASE(
    "tables too large for a rank's share run out of memory advising fewer rows or more ranks, not the "
    "sharding the run has",
    "[clicks][tables][errors]") {
  // 26 tables of 10^10 rows: 8.3 TB a rank's share at world 2, refused by the allocator at once,
  // as the kernel's default overcommit rule (0) or the strict one (2) refuses it; under 1 (always)
  // it would be granted, and the machine's memory taken page by page.
  if (read_file("/proc/sys/vm/overcommit_memory").rfind("1", 0) == 0) {
    WARN("skipped: vm.overcommit_memory is 1 here, which grants any allocation, so none is refused at once");
    return;
  }
  TempDir dir;
  const std::string log = make_log(dir, "train.tsv", 200, 8);
  auto r = train(2, log, log, dir.file("run"),
                 "--set model.embedding_rows=[10000000000] --set model.embedding_sharding=row");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("out of memory: DefaultCPUAllocator") &&
                        Contains("model.embedding_sharding row splits the embedding tables already, and this rank's "
                                 "share is too large: fewer model.embedding_rows, or more ranks") &&
                        !Contains("table or row"));
}

TEST_CASE("a model without embedding tables refuses model.embedding_sharding and row updates in one line",
          "[clicks][tables]") {
  TempDir dir;
  for (std::string set : {"model.embedding_sharding=row", "optim.embeddings=sgd"}) {
    auto r = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                           std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml --set run.output_dir=" +
                           dir.file("run") + " --set " + set,
                       std::chrono::seconds(120));
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    const std::string key = set.substr(0, set.find('=')) + " " + set.substr(set.find('=') + 1);
    CHECK_THAT(r.err, Contains(key + ": model.name mlp has no embedding tables (dlrm has)"));
    CHECK_FALSE(std::filesystem::exists(dir.file("run/model.pt")));
  }
}

}  // namespace DDP_TEST_FILE
