// What a run leaves to look at: TensorBoard event files (read back by an independent reader),
// metrics.jsonl parsing, the report's charts, and ddp-report.
#include <catch2/catch.hpp>

#include <regex>
#include <sstream>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>

#include "ddp/common/error.h"
#include "ddp/record/crc32c.h"
#include "ddp/record/event_file.h"
#include "ddp/record/metrics_log.h"
#include "ddp/record/metrics_reader.h"
#include "ddp/record/run_report.h"
#include "ddp/record/svg_chart.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using namespace ddp::test;
using Catch::Contains;

namespace {

const std::string kReader = std::string(DDP_SOURCE_DIR) + "/tests/support/read_tfevents.py";

bool has_protobuf() { return run_shell("/usr/bin/python3 -c 'import google.protobuf'").exit_code == 0; }

std::string only_event_file(const std::string& dir) {
  std::string found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) found = entry.path().string();
  return found;
}

}  // namespace

TEST_CASE("CRC-32C matches the standard check value and TFRecord's mask", "[record]") {
  CHECK(crc32c("123456789", 9) == 0xe3069283u);  // the catalogue's check value for CRC-32C
  CHECK(crc32c("", 0) == 0u);
  uint32_t crc = crc32c("a", 1);
  CHECK(masked_crc32c("a", 1) == ((crc >> 15 | crc << 17) + 0xa282ead8u));
}

TEST_CASE("an event file is read back by an independent reader: every CRC valid, every value as written",
          "[record][tensorboard]") {
  if (!has_protobuf()) {
    WARN("skipped: no python3-protobuf for the independent reader (scripts/setup.sh installs it)");
    return;
  }
  TempDir dir;
  {
    EventFileWriter events(dir.file("tb"));
    events.add_scalar("train/loss", 7, 0.25);
    events.add_scalar("eval/accuracy", 1ll << 40, 0.875);
    events.add_text("config", 0, "run:\n  name: \"x\" <&>");
    events.flush();
  }
  std::string file = only_event_file(dir.file("tb"));
  CHECK_THAT(file, Contains("/events.out.tfevents."));
  auto r = run_command({"/usr/bin/python3", kReader, file});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains(R"("step": 0, "file_version": "brain.Event:2")"));
  CHECK_THAT(r.out, Contains(R"("step": 7, "scalars": [{"tag": "train/loss", "value": 0.25}])"));
  CHECK_THAT(r.out, Contains(R"("step": 1099511627776, "scalars": [{"tag": "eval/accuracy", "value": 0.875}])"));
  CHECK_THAT(r.out, Contains(R"("tag": "config", "plugin": "text", "dtype": 7, "text": "run:\n  name: \"x\" <&>")"));

  // One flipped bit anywhere is found, and named by its record.
  std::string bytes = read_file(file);
  bytes[bytes.size() - 10] ^= 0x01;
  write_file(file, bytes);
  auto damaged = run_command({"/usr/bin/python3", kReader, file});
  CHECK(damaged.exit_code == 1);
  CHECK_THAT(damaged.err, Contains("record 3: bad data CRC"));
}

TEST_CASE("an evaluation a stop cut short reaches TensorBoard as cut short, without its loss or metrics",
          "[record][tensorboard]") {
  if (!has_protobuf()) {
    WARN("skipped: no python3-protobuf for the independent reader (scripts/setup.sh installs it)");
    return;
  }
  TempDir dir;
  {
    MetricsLog log(dir.file("metrics.jsonl"), dir.file("tb"));
    log.write({{"step", 10}, {"eval_loss", 0.5}, {"eval_accuracy", 0.75}, {"eval_samples", 100}});
    log.write({{"step", 20}, {"eval_loss", 9.5}, {"eval_accuracy", 0.25}, {"eval_samples", 3}, {"eval_interrupted", 1}});
  }
  auto r = run_command({"/usr/bin/python3", kReader, only_event_file(dir.file("tb"))});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains(R"({"tag": "eval/loss", "value": 0.5})") && Contains(R"({"tag": "eval/accuracy", "value": 0.75})"));
  CHECK_THAT(r.out, !Contains(R"("value": 9.5)") && !Contains(R"("value": 0.25)"));  // not "9.5": a wall time may hold it
  CHECK_THAT(r.out, Contains(R"({"tag": "eval/samples", "value": 3.0})") &&
                        Contains(R"({"tag": "eval/interrupted", "value": 1.0})"));
  CHECK_THAT(read_file(dir.file("metrics.jsonl")), Contains(R"("eval_loss": 9.5)"));  // the record itself is whole
}

TEST_CASE("metrics keys map to TensorBoard tags by group, and the step is no series", "[record][tensorboard]") {
  CHECK(tensorboard_tag("loss") == "train/loss");
  CHECK(tensorboard_tag("eval_accuracy") == "eval/accuracy");
  CHECK(tensorboard_tag("allreduce_exposed_ms") == "comm/allreduce_exposed_ms");
  CHECK(tensorboard_tag("peak_rss_mib_rank1") == "memory/peak_rss_mib_rank1");
  CHECK(tensorboard_tag("sys_cpu_percent_rank0") == "system/cpu_percent_rank0");
  CHECK(tensorboard_tag("exit_status") == "run/exit_status");
  CHECK(tensorboard_tag("setup_peak_rss_mib_max") == "memory/setup_peak_rss_mib_max");
  CHECK(tensorboard_tag("activation_mib_max") == "memory/activation_mib_max");
  CHECK_FALSE(tensorboard_tag("step"));
  CHECK_FALSE(tensorboard_tag("first_step_unix_s"));
}

TEST_CASE("metrics.jsonl lines parse back, and a line cut short or not JSON is refused", "[record]") {
  auto record = parse_metrics_line(R"({"step": 3, "loss": 0.5, "x": null, "big": 1e+20})");
  REQUIRE(record);
  REQUIRE(record->size() == 4);
  CHECK((*record)[0] == std::make_pair(std::string("step"), 3.0));
  CHECK((*record)[1].second == 0.5);
  CHECK(std::isnan((*record)[2].second));
  CHECK((*record)[3].second == 1e20);
  CHECK(parse_metrics_line(to_json(*record)));  // to_json's own output
  for (const char* bad : {R"({"step": 3, "loss": 0.)", R"({"step" 3})", R"(["step", 3])", R"({"a": 1} trailing)", "",
                          R"({"a": inf})", R"({"a": +1})", R"({"a": 0x10})"})
    CHECK_FALSE(parse_metrics_line(bad));
  // Another version's text or flag is left out, named; the record's numbers stay.
  std::vector<std::string> left_out;
  auto mixed = parse_metrics_line(R"({"step": 4, "phase": "warmup", "loss": 0.25, "ok": true})", &left_out);
  REQUIRE(mixed);
  CHECK(*mixed == ddp::MetricsRecord{{"step", 4.0}, {"loss", 0.25}});
  CHECK(left_out == std::vector<std::string>{"phase", "ok"});
  // Names are JSON strings both ways: escapes written and read (a library's reader, not a search for '"').
  ddp::MetricsRecord odd = {{"quote\"d \\ name", 2.5}};
  auto back = parse_metrics_line(to_json(odd));
  REQUIRE(back);
  CHECK(*back == odd);
}

TEST_CASE("metrics.jsonl: a line cut short stays its own line, and a write that fails is an error, not silence",
          "[record]") {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  write_file(path, "{\"step\": 1, \"loss\": 2}\n{\"step\": 267, \"epoch\": 2");  // a full disk's cut line
  MetricsLog(path, "").write({{"step", 1}, {"first_step_unix_s", 5}});
  CHECK(read_file(path) == "{\"step\": 1, \"loss\": 2}\n{\"step\": 267, \"epoch\": 2\n{\"step\": 1, \"first_step_unix_s\": 5}\n");
  RunRecords run = read_run(dir.path());
  CHECK(run.skipped_lines == 1);                    // the cut line alone
  CHECK(run.last("first_step_unix_s") == 5);         // the new attempt's marker, read
  // /dev/full: every write fails with ENOSPC, as on a full disk.
  MetricsLog full("/dev/full", "");
  CHECK_THROWS_AS(full.write({{"step", 1}}), ddp::IoError);
  CHECK_THROWS_WITH(full.write({{"step", 1}}), "cannot write metrics to /dev/full: No space left on device");
}

TEST_CASE("the report draws each series as a polyline, overlays runs, and says how each ended", "[record][report]") {
  TempDir dir;
  for (const char* name : {"a", "b"}) {
    std::filesystem::create_directories(dir.file(name));
    MetricsLog log(dir.file(std::string(name) + "/metrics.jsonl"), "");
    for (int step = 10; step <= 30; step += 10)
      log.write({{"step", step}, {"loss", 1.0 / step}, {"samples_per_s", 100.0 * step}, {"allreduce_ms", 2},
                 {"allreduce_exposed_ms", 0.5}});
    log.write({{"step", 30}, {"eval_loss", 0.1}, {"eval_accuracy", 0.9}});
    log.write({{"step", 30}, {"sys_cpu_percent_rank0", 90}, {"sys_rss_mib_rank0", 100}, {"sys_data_wait_ms_rank0", 0.1},
               {"sys_step_busy_ms_p10_rank0", 1}, {"sys_step_busy_ms_p50_rank0", 2}, {"sys_step_busy_ms_p90_rank0", 3}});
    if (std::string(name) == "a") log.write({{"step", 30}, {"exit_status", 0}});
  }
  std::ofstream(dir.file("b/metrics.jsonl"), std::ios::app) << "{\"step\": 40, \"loss\"";  // a crash mid-line

  std::vector<RunRecords> runs{read_run(dir.file("a")), read_run(dir.file("b"))};
  CHECK(runs[1].skipped_lines == 1);
  CHECK(runs[0].series("loss").size() == 3);
  std::string html = render_report(runs);
  CHECK_THAT(html, Contains("ddprun report: a, b"));
  CHECK_THAT(html, Contains("finished</span> (exit 0)") && Contains("no exit recorded") &&
                       Contains("1 unreadable line(s) skipped"));
  auto count = [&](const std::string& needle) { return count_occurrences(html, needle); };
  // Loss (train, eval), eval accuracy, throughput, all-reduce (exposed, hidden), data wait, CPU,
  // RSS: 9 series per run, 4 of them lines and 5 a point each (marked); the learning rate has no
  // data, so "no data" once.
  CHECK(count("<polyline class=\"series\"") == 8);
  CHECK(count("<circle") == 10);
  CHECK(count("class=\"box\"") == 2);
  CHECK(count(">no data<") == 1);
  CHECK_THAT(html, !Contains("<script"));
  CHECK_THAT(html, !Contains("http://") && !Contains("https://"));
  CHECK_THAT(html, Contains("<td>accuracy 0.9</td>"));  // the summary's eval metrics column
}

TEST_CASE("a resume's records supersede what the attempt before it wrote past its checkpoint, and a cut-short "
          "evaluation and an earlier attempt's exit are left out",
          "[record][report]") {
  // Note [Superseded records]: steps used to be shown twice (70, 80, 70, 80), a partial evaluation as
  // a whole one, and a run going on as "stopped by signal 2".
  TempDir dir;
  {
    MetricsLog log(dir.file("metrics.jsonl"), "");
    for (int step : {10, 20, 30}) log.write({{"step", step}, {"loss", 1.0 / step}});
    log.write({{"step", 30}, {"eval_loss", 9}, {"eval_samples", 5}, {"eval_interrupted", 1}});
    log.write({{"step", 30}, {"exit_status", 130}});  // stopped there, with a checkpoint
    log.write({{"step", 31}, {"first_step_unix_s", 1}});  // each attempt's first step, as the trainer writes it
    for (int step : {40, 50}) log.write({{"step", step}, {"loss", 1.0 / step}});  // a crash after 50
    log.write({{"step", 41}, {"first_step_unix_s", 2}});  // resumed from 40's checkpoint
    for (int step : {50, 60}) log.write({{"step", step}, {"loss", 2.0 / step}});
  }
  RunRecords run = read_run(dir.path());
  using Points = std::vector<std::pair<double, double>>;
  CHECK(run.series("loss") == Points{{10, 0.1}, {20, 0.05}, {30, 1.0 / 30}, {40, 0.025}, {50, 0.04}, {60, 2.0 / 60}});
  CHECK(run.superseded == 1);
  CHECK(run.interrupted_evals == 1);
  CHECK(run.series("eval_loss").empty());
  CHECK_FALSE(run.exit_status());  // 130 was an earlier attempt's, which the run went on from
  const std::string html = render_report({run});
  CHECK_THAT(html, Contains("no exit recorded") && !Contains("stopped by signal") &&
                       Contains("(1 record(s) a resume wrote again left out)") &&
                       Contains("(1 evaluation(s) a stop cut short left out)"));
  std::ofstream(dir.file("metrics.jsonl"), std::ios::app) << "{\"step\": 60, \"exit_status\": 0}\n";
  CHECK(read_run(dir.path()).exit_status() == 0.0);
}

TEST_CASE("a language model's report shows its perplexity in the summary, not an empty accuracy column",
          "[record][report]") {
  TempDir dir;
  MetricsLog log(dir.file("metrics.jsonl"), "");
  log.write({{"step", 10}, {"loss", 3.2}, {"samples_per_s", 100}});
  log.write({{"step", 10}, {"eval_loss", 2.5}, {"eval_perplexity", 12.1825}, {"eval_samples", 80}});
  log.write({{"step", 10}, {"exit_status", 0}});
  std::string html = render_report({read_run(dir.path())});
  CHECK_THAT(html, Contains("<th>last eval metrics</th>") && Contains("<td>perplexity 12.18</td>"));
  CHECK_THAT(html, !Contains("accuracy") && !Contains("samples 80"));
}

TEST_CASE("a report leaves out the panels a run has no data for, saying why, and shows what differs between the "
          "runs' configs", "[record][report]") {
  TempDir dir;
  for (const char* name : {"a", "b"}) {  // world 1, monitor.every_s 0: no all-reduce, no monitor records
    std::filesystem::create_directories(dir.file(name));
    MetricsLog(dir.file(std::string(name) + "/metrics.jsonl"), "").write({{"step", 1}, {"loss", 2}, {"lr", 0.1}, {"samples_per_s", 50}});
  }
  write_file(dir.file("a/config.yaml"),
             "# ddprun\nrun:\n  seed: 0\noptim:\n  lr: 0.01\n  name: sgd\nmodel:\n  hidden: [64]\nmonitor:\n  every_s: 0\n");
  write_file(dir.file("b/config.yaml"), "# ddprun\nrun:\n  seed: 0\noptim:\n  lr: 0.5\n  name: sgd\n");
  std::string one = render_report({read_run(dir.file("a"))});
  CHECK_THAT(one, !Contains(">no data<"));
  CHECK_THAT(one, Contains("No all-reduce was recorded: one rank") &&
                      Contains("The system monitor was off (monitor.every_s: 0)"));
  CHECK_THAT(one, !Contains("What differs"));
  std::string both = render_report({read_run(dir.file("a")), read_run(dir.file("b"))});
  CHECK_THAT(both, Contains("What differs between the runs' configs:"));
  CHECK_THAT(both, Contains("<tr><td>optim.lr</td><td>0.01</td><td>0.5</td></tr>"));
  CHECK_THAT(both, Contains("<tr><td>model.hidden</td><td>[64]</td><td>-</td></tr>"));
  CHECK_THAT(both, !Contains("<td>run.seed</td>") && !Contains("<td>optim.name</td>"));
  // b's monitor was on (its default) but recorded nothing: none yet while b runs (no exit recorded),
  // none in its whole run once it ended.
  CHECK_THAT(render_report({read_run(dir.file("b"))}), Contains("The system monitor has recorded nothing yet"));
  MetricsLog(dir.file("b/metrics.jsonl"), "").write({{"step", 1}, {"exit_status", 0}});
  CHECK_THAT(render_report({read_run(dir.file("b"))}), Contains("The system monitor recorded nothing: the run ended "
                                                                 "before its first monitor.every_s"));
  // Beside a run with monitor records, one without is named, not left out of those panels silently.
  std::filesystem::create_directories(dir.file("watched"));
  MetricsLog(dir.file("watched/metrics.jsonl"), "").write({{"step", 1}, {"sys_rss_mib_rank0", 100}, {"sys_step_busy_ms_p50_rank0", 5}});
  CHECK_THAT(render_report({read_run(dir.file("a")), read_run(dir.file("watched"))}),
             Contains("Not in the panels by rank: a (no system monitor record)."));
  std::string same = render_report({read_run(dir.file("a")), read_run(dir.file("a"))});
  CHECK_THAT(same, Contains("The runs' configs are the same, key for key."));
  // Runs without a config.yaml are never "the same".
  std::filesystem::create_directories(dir.file("c"));
  std::filesystem::copy_file(dir.file("a/metrics.jsonl"), dir.file("c/metrics.jsonl"));
  std::string unknown = render_report({read_run(dir.file("c")), read_run(dir.file("c"))});
  CHECK_THAT(unknown, Contains("The configs cannot be compared: 2 of the 2 runs kept no readable config.yaml.") &&
                          !Contains("key for key"));
  CHECK_THAT(render_report({read_run(dir.file("a")), read_run(dir.file("b")), read_run(dir.file("c"))}),
             Contains("What differs between the runs' configs (of those that kept a readable config.yaml):"));
  // Nor is a config.yaml that is not YAML, or not a map of sections: it is no config "with no keys".
  for (const char* unreadable : {"run: [unclosed\n", "just a line\n"}) {
    INFO(unreadable);
    std::filesystem::create_directories(dir.file("d"));
    std::filesystem::copy_file(dir.file("a/metrics.jsonl"), dir.file("d/metrics.jsonl"),
                               std::filesystem::copy_options::overwrite_existing);
    write_file(dir.file("d/config.yaml"), unreadable);
    CHECK_THAT(render_report({read_run(dir.file("d")), read_run(dir.file("d"))}),
               Contains("The configs cannot be compared: 2 of the 2 runs kept no readable config.yaml."));
    std::string beside = render_report({read_run(dir.file("a")), read_run(dir.file("b")), read_run(dir.file("d"))});
    CHECK_THAT(beside, Contains("(of those that kept a readable config.yaml)") && !Contains("<td>-</td><td>-</td>"));
  }
}

TEST_CASE("ddp-report writes one page for several runs, and names a directory that holds none", "[record][report]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("run"));
  MetricsLog(dir.file("run/metrics.jsonl"), "").write({{"step", 1}, {"loss", 2}});
  std::filesystem::copy(dir.file("run"), dir.file("other"));
  auto ok = run_command({bin("ddp-report"), dir.file("run"), dir.file("other"), "-o", dir.file("both.html")});
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Contains("wrote " + dir.file("both.html") + " (2 run(s))"));
  CHECK_THAT(read_file(dir.file("both.html")), Contains("ddprun report: run, other"));
  CHECK(ok.err.empty());
  // One run twice drew two identical lines under one name.
  auto twice = run_command({bin("ddp-report"), dir.file("run"), dir.file("other"), dir.file("run") + "/", "-o",
                            dir.file("twice.html")});
  CHECK(twice.exit_code == 2);
  CHECK(twice.err == "ddp-report: error: " + dir.file("run") + "/ and " + dir.file("run") + " are the same run "
                         "directory: give each run once\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("twice.html")));
  // Lines that are no record, or none that is: said on the command line, not only in the page.
  std::filesystem::create_directories(dir.file("edited"));
  std::filesystem::create_directories(dir.file("empty"));
  write_file(dir.file("edited/metrics.jsonl"), read_file(dir.file("run/metrics.jsonl")) + "not json at all\n");
  write_file(dir.file("empty/metrics.jsonl"), "not json at all\n{\"step\": \"x\"}\n");
  auto damaged = run_command({bin("ddp-report"), dir.file("edited"), "-o", dir.file("d.html")});
  INFO(damaged.err);
  CHECK(damaged.exit_code == 0);
  CHECK(damaged.err == "ddp-report: warning: " + dir.file("edited") +
                           "/metrics.jsonl: 1 line(s) that are no record skipped (a line a crash cut short, or an "
                           "edit)\n");
  auto none = run_command({bin("ddp-report"), dir.file("edited"), dir.file("empty"), "-o", dir.file("d.html")});
  INFO(none.err);
  CHECK(none.exit_code == 2);
  CHECK(none.err == "ddp-report: error: " + dir.file("empty") + "/metrics.jsonl: none of its 2 line(s) is a metrics "
                        "record (a JSON object of numbers a line, as ddp-train writes)\n");
  // A run that has written nothing yet (it is starting): a page of no charts, and a warning.
  write_file(dir.file("empty/metrics.jsonl"), "");
  auto starting = run_command({bin("ddp-report"), dir.file("empty"), "-o", dir.file("d.html")});
  CHECK(starting.exit_code == 0);
  CHECK(starting.err == "ddp-report: warning: " + dir.file("empty") + "/metrics.jsonl: no record in it, so no chart of "
                            "this run\n");
  auto missing = run_command({bin("ddp-report"), dir.file("nothing"), "-o", dir.file("x.html")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err == "ddp-report: error: no run in " + dir.file("nothing") + ": cannot read " +
                           dir.file("nothing") + "/metrics.jsonl\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("x.html")));
  // The run's metrics.jsonl for its directory (was: "cannot read .../metrics.jsonl/metrics.jsonl").
  auto file = run_command({bin("ddp-report"), dir.file("empty/metrics.jsonl"), "-o", dir.file("x.html")});
  CHECK(file.exit_code == 2);
  CHECK(file.err == "ddp-report: error: " + dir.file("empty/metrics.jsonl") + " is a file: ddp-report reads run "
                    "directories (the one that holds it: " + dir.file("empty") + ")\n");
  // Runs of one name in other directories are told apart by their paths; "." by its directory's name.
  std::filesystem::create_directories(dir.file("p1"));
  std::filesystem::copy(dir.file("run"), dir.file("p1/run"));
  auto same = run_command({bin("ddp-report"), dir.file("run"), dir.file("p1/run"), "-o", dir.file("same.html")});
  CHECK(same.exit_code == 0);
  CHECK_THAT(read_file(dir.file("same.html")), Contains("ddprun report: " + dir.file("run") + ", " + dir.file("p1/run")));
  auto here = run_shell("cd " + dir.file("run") + " && " + bin("ddp-report") + " . -o " + dir.file("here.html"));
  CHECK(here.exit_code == 0);
  CHECK_THAT(read_file(dir.file("here.html")), Contains("ddprun report: run<"));
  // -o naming a directory: said so, with the file it may mean (was rename's "Is a directory", exit 74).
  for (const std::string& output : {dir.file("run"), dir.file("run") + "/"}) {
    auto into = run_command({bin("ddp-report"), dir.file("run"), "-o", output});
    CHECK(into.exit_code == 2);
    CHECK(into.err == "ddp-report: error: --output: " + output + " is a directory; name the page's file, as " +
                          dir.file("run/report.html") + "\n");
  }
  // -o '' (a shell variable left empty): said so (was rename's "No such file or directory").
  auto empty = run_command({bin("ddp-report"), dir.file("run"), "-o", ""});
  CHECK(empty.exit_code == 2);
  CHECK(empty.err == "ddp-report: error: --output: an empty path; name the page's file, as report.html (the default)\n");
}

TEST_CASE("ddp-report -o never writes over a run's own files, and may replace its earlier page", "[record][report]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("run/checkpoints"));
  MetricsLog(dir.file("run/metrics.jsonl"), "").write({{"step", 1}, {"loss", 2}});
  write_file(dir.file("run/config.yaml"), "train: {epochs: 1}\n");
  write_file(dir.file("run/checkpoints/step_0000000001.pt"), "weights");
  for (const char* own : {"run/metrics.jsonl", "run/config.yaml", "run/checkpoints/step_0000000001.pt", "run/./config.yaml"}) {
    std::string before = read_file(dir.file(own));
    auto r = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file(own)});
    INFO(own << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err == "ddp-report: error: --output: " + dir.file(own) + " is a file of run " + dir.file("run") +
                       "; the report would replace it. Write the report elsewhere (the default is report.html)\n");
    CHECK(read_file(dir.file(own)) == before);
  }
  // Through a relative path and a second run directory too.
  auto relative = run_command({"sh", "-c", "cd " + dir.path() + " && " + bin("ddp-report") + " run run -o run/metrics.jsonl"});
  CHECK(relative.exit_code == 2);
  CHECK_THAT(read_file(dir.file("run/metrics.jsonl")), Contains("\"loss\": 2"));
  // Another run's metrics.jsonl, or any file that is not a page, is not replaced either.
  write_file(dir.file("other.jsonl"), "{\"step\": 1}\n");
  auto other = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("other.jsonl")});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("exists and is not an HTML page (.html); the report would replace it"));
  CHECK(read_file(dir.file("other.jsonl")) == "{\"step\": 1}\n");
  for (int pass = 0; pass < 2; ++pass) {  // the run's report, written and then rewritten in place
    auto page = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("run/report.html")});
    INFO(page.out << page.err);
    CHECK(page.exit_code == 0);
  }
  CHECK_THAT(read_file(dir.file("run/report.html")), Contains("ddprun report: run"));
}

TEST_CASE("ddp-report refuses an exit status that is no exit status, naming the file and the value", "[record][report]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("run"));
  for (const char* bad : {"1e300", "-1", "2.5", "256"}) {
    write_file(dir.file("run/metrics.jsonl"), std::string("{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"exit_status\": ") + bad + "}\n");
    auto r = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("x.html")});
    INFO(bad << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("ddp-report: error: " + dir.file("run") + "/metrics.jsonl: exit_status ") &&
                          Contains(" is not an exit status (an integer 0-255)"));
    CHECK_THAT(r.err, !Contains("2147483648"));
    CHECK_FALSE(std::filesystem::exists(dir.file("x.html")));
  }
}

TEST_CASE("ddp-report's bad command lines exit 2 with one line each, as its man page says", "[record][report]") {
  for (std::vector<std::string> args : {std::vector<std::string>{}, {"--nonsense", "run"}, {"run", "-o"}}) {
    args.insert(args.begin(), bin("ddp-report"));
    auto r = run_command(args);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("ddp-report: error: ") && Contains("; see ddp-report --help"));
  }
  auto help = run_command({bin("ddp-report"), "--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Contains("--output"));
}

TEST_CASE("NaN and infinite values are left out of a chart and counted in a note, never an empty or silent chart",
          "[record][report]") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  std::string some = svg_line_chart("loss", "step", "loss", {{"run", chart_color(0), false, {{1, 2.0}, {2, 1.5}, {3, nan}, {4, inf}}}});
  CHECK_THAT(some, Contains("<polyline class=\"series\"") && Contains("2 value(s) not drawn: NaN or infinite, from step 3"));
  CHECK_THAT(some, !Contains("nan") && !Contains("inf,"));
  std::string none = svg_line_chart("loss", "step", "loss", {{"run", chart_color(0), false, {{1, nan}, {2, nan}}}});
  CHECK_THAT(none, Contains("2 value(s) not drawn: NaN or infinite, from step 1") && !Contains(">no data<"));
  std::string fine = svg_line_chart("loss", "step", "loss", {{"run", chart_color(0), false, {{1, 2.0}, {2, 1.5}}}});
  CHECK_THAT(fine, !Contains("not drawn"));
  // A series made from the one before it (derived) counts a value as missing once, where that one
  // misses it too: two runs' exposed and hidden all-reduce, A's exposed missing at 20, B's total.
  std::vector<ChartSeries> overlay{{"a exposed", chart_color(0), false, {{10, 1.0}, {20, nan}}},
                                   {"a hidden", chart_color(1), true, {{10, 9.0}, {20, nan}}, true},
                                   {"b exposed", chart_color(2), false, {{10, 1.0}, {20, 2.0}}},
                                   {"b hidden", chart_color(3), true, {{10, 9.0}, {20, nan}}, true}};
  CHECK_THAT(svg_line_chart("all-reduce", "step", "ms", overlay), Contains("2 value(s) not drawn"));
  // Through ddp-report: a diverged loss is written as null.
  TempDir dir;
  std::filesystem::create_directories(dir.file("run"));
  write_file(dir.file("run/metrics.jsonl"), "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": null}\n");
  auto r = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("x.html")});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(read_file(dir.file("x.html")), Contains("1 value(s) not drawn: NaN or infinite, from step 2"));
  // The summary's last loss is the NaN, not the finite one before it.
  CHECK_THAT(read_file(dir.file("x.html")), Contains("<td>run</td><td>2</td><td>nan</td>"));
  // The all-reduce chart too: it left a null out unsaid, and paired the rest by index, not by step.
  // The hidden time made from the null is the same value missing: counted once.
  write_file(dir.file("run/metrics.jsonl"),
             "{\"step\": 10, \"loss\": 2, \"allreduce_ms\": 10, \"allreduce_exposed_ms\": 1}\n"
             "{\"step\": 20, \"loss\": 2, \"allreduce_ms\": 12, \"allreduce_exposed_ms\": null}\n"
             "{\"step\": 30, \"loss\": 2, \"allreduce_ms\": 9, \"allreduce_exposed_ms\": 3}\n");
  REQUIRE(run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("x.html")}).exit_code == 0);
  const std::string page = read_file(dir.file("x.html"));
  const auto chart = page.find("All-reduce per step");
  REQUIRE(chart != std::string::npos);
  CHECK_THAT(page.substr(chart, page.find("</svg>", chart) - chart),
             Contains("1 value(s) not drawn: NaN or infinite, from step 20"));
}

TEST_CASE("a chart's axes carry round ticks with gridlines, so a narrow range reads as narrow", "[record][report]") {
  // CPU use between 96.3 % and 98.6 %: labelled only at its ends, it would look like wild swings.
  ChartSeries cpu{"cpu", chart_color(0), false, {{0, 96.3}, {10, 98.6}, {20, 97.1}}};
  std::string svg = svg_line_chart("CPU", "step", "%", {cpu});
  for (const char* tick : {">96</text>", ">96.5</text>", ">97</text>", ">98.5</text>", ">99</text>", ">0</text>",
                           ">20</text>"})
    CHECK_THAT(svg, Contains(tick));
  std::size_t grid = 0;
  for (std::size_t at = svg.find("class=\"grid\""); at != std::string::npos; at = svg.find("class=\"grid\"", at + 1)) ++grid;
  CHECK(grid >= 7 + 3);  // 96 to 99 by 0.5, and 0 to 20 by 5 or 10

  // A range within rounding (values an ulp apart) draws as flat, and ends: stepping ticks by a step
  // below the values' precision would never have.
  ChartSeries flat{"flat", chart_color(0), false, {{0, 0.1}, {1, std::nextafter(0.1, 1.0)}}};
  CHECK_THAT(svg_line_chart("flat", "step", "x", {flat}), Contains("<polyline"));

  // Finite values near the largest double: their range and rounded ends overflowed into NaN
  // coordinates, or a huge value was drawn at the bottom beside 0.
  ChartSeries wide{"wide", chart_color(0), false, {{-1e308, 1e308}, {1e308, -1e308}}};
  std::string huge = svg_line_chart("wide", "step", "x", {wide});
  CHECK_THAT(huge, Contains("points=\"75.5,46.0 624.0,236.0 \"") && !Contains("nan") && !Contains(">inf<"));
  ChartSeries zero_to_max{"z", chart_color(0), false, {{0, 0}, {1, 1.7e308}}};
  CHECK_THAT(svg_line_chart("z", "step", "x", {zero_to_max}), Contains("points=\"82.0,236.0 624.0,46.0 \""));
  // Ticks closer than four digits tell apart get the digits that do.
  ChartSeries close{"close", chart_color(0), false, {{0, 1}, {1, 1.0000001}}};
  std::string near = svg_line_chart("close", "step", "x", {close});
  CHECK_THAT(near, Contains(">1.00000005</text>") && Contains(">1.0000001</text>"));
  // Throughput's whole numbers written out, not as 6e+04.
  ChartSeries rate{"rate", chart_color(0), false, {{0, 50000}, {10, 130000}}};
  std::string rates = svg_line_chart("rate", "step", "samples/s", {rate});
  CHECK_THAT(rates, Contains(">60000</text>") && Contains(">120000</text>") && !Contains("e+0"));
  // A long run's last step label ends at the chart's right edge, not centred past it.
  ChartSeries long_run{"long", chart_color(0), false, {{500, 1}, {100000, 2}}};
  std::string steps = svg_line_chart("long", "step", "loss", {long_run});
  CHECK_THAT(steps, Contains("x=\"638.0\" y=\"252\" class=\"tick\" text-anchor=\"end\">100000</text>") &&
                        Contains("text-anchor=\"middle\">0</text>"));
}

TEST_CASE("a chart's one point, or one value, is drawn inside the frame, and its legend tells lines apart",
          "[record][report]") {
  // An evaluation at the end alone: step 64 in the middle of the x axis, not on the frame's corner.
  ChartSeries end{"eval", chart_color(0), false, {{64, 0.5}}};
  std::string one = svg_line_chart("eval", "step", "loss", {end});
  CHECK_THAT(one, Contains(">63</text>") && Contains(">65</text>") && Contains("<circle cx=\"344.0\""));
  // A constant rate: in the middle, not on the bottom line.
  ChartSeries lr{"lr", chart_color(0), false, {{0, 0.1}, {10, 0.1}}};
  CHECK_THAT(svg_line_chart("lr", "step", "lr", {lr}), Contains("points=\"64.0,160.0 624.0,160.0 \"") && Contains(">0.09</text>"));
  // A run's train and eval lines share its colour: the swatch is dashed where the line is; a long
  // run name is cut in its middle, between UTF-8 characters, keeping what tells its lines apart.
  const std::string name = "\xc3\xa9\xc3\xa9\xc3\xa9_a_run_name_long_enough_to_be_cut_short_in_a_legend";
  ChartSeries train{name + " train", chart_color(1), false, {{0, 1}, {1, 2}}};
  ChartSeries eval{name + " eval", chart_color(1), true, {{0, 1}, {1, 2}}};
  std::string both = svg_line_chart("loss", "step", "loss", {train, eval});
  CHECK_THAT(both, Contains("stroke-dasharray=\"4 2\"/><text"));
  CHECK_THAT(both, Contains(">\xc3\xa9\xc3\xa9\xc3\xa9_a_run_name_long_enough_to_b\xe2\x80\xa6n_a_legend train</text>") &&
                       Contains("_to_b\xe2\x80\xa6in_a_legend eval</text>"));
  CHECK_THAT(both, Contains("<title>" + name + " eval</title>"));  // the whole name on hover
  // 16 ranks' boxes: their labels every few boxes, not run together.
  std::vector<ChartBox> boxes;
  for (int r = 0; r < 16; ++r) boxes.push_back({"rank " + std::to_string(r), chart_color(r), 1, 2, 3});
  std::string many = svg_box_chart("compute", "ms", boxes);
  CHECK_THAT(many, Contains(">rank 0</text>") && Contains(">rank 8</text>") && !Contains(">rank 1</text>"));
}

}  // namespace DDP_TEST_FILE

namespace DDP_TEST_FILE {

TEST_CASE("the report's numbers: the median of an even count, the eval metrics of the eval loss's evaluation, a "
          "null exit status refused, and the no-all-reduce reason only for a run that logged a loss",
          "[record][report]") {
  TempDir dir;
  auto report = [&](const std::string& name, const std::string& lines) {
    std::filesystem::create_directories(dir.file(name));
    write_file(dir.file(name + "/metrics.jsonl"), lines);
    auto r = run_command({bin("ddp-report"), dir.file(name), "-o", dir.file(name + ".html")});
    INFO(r.out << r.err);
    return r;
  };
  auto page = [&](const std::string& name) { return read_file(dir.file(name + ".html")); };
  REQUIRE(report("even", "{\"step\": 1, \"loss\": 1, \"samples_per_s\": 100}\n"
                         "{\"step\": 2, \"loss\": 1, \"samples_per_s\": 1000}\n").exit_code == 0);
  CHECK_THAT(page("even"), Contains("<td>550</td>"));
  // Perplexity overflowed (null) at the evaluation whose loss is shown: inf or nan, not step 10's.
  REQUIRE(report("overflow", "{\"step\": 10, \"eval_loss\": 2.5, \"eval_perplexity\": 12.18}\n"
                             "{\"step\": 20, \"eval_loss\": 800, \"eval_perplexity\": null}\n"
                             "{\"step\": 20, \"exit_status\": 0}\n").exit_code == 0);
  CHECK_THAT(page("overflow"), Contains("<td>perplexity nan</td>") && !Contains("12.18</td>"));
  auto null_exit = report("null_exit", "{\"step\": 1, \"loss\": 1}\n{\"step\": 1, \"exit_status\": null}\n");
  CHECK(null_exit.exit_code != 0);
  CHECK_THAT(null_exit.err, Contains("exit_status nan is not an exit status"));
  // A world-2 run stopped before its first logged step: no one-rank reason.
  REQUIRE(report("early_stop", "{\"step\": 0, \"eval_loss\": 2.3}\n{\"step\": 17, \"exit_status\": 143}\n")
              .exit_code == 0);
  CHECK_THAT(page("early_stop"), Contains("the run ended before it logged a training step") &&
                                     !Contains("one rank, or one replica"));
  // Diverged at its first logged step: that record is there, with a loss of null (was: "ended before
  // it logged a training step", against its own records).
  REQUIRE(report("diverged", "{\"step\": 5, \"epoch\": 1, \"loss\": null}\n{\"step\": 5, \"exit_status\": 2}\n")
              .exit_code == 0);
  CHECK_THAT(page("diverged"), Contains("the run's first logged loss was no number (it diverged)") &&
                                   !Contains("ended before it logged"));
  // Rank 0's exit 1 after another rank's failure names that rank.
  REQUIRE(report("peer", "{\"step\": 3, \"loss\": 1}\n{\"step\": 3, \"exit_status\": 1, \"never_arrived_rank\": 2}\n")
              .exit_code == 0);
  CHECK_THAT(page("peer"), Contains(">rank 2 never arrived</span> at a collective, and rank 0 exited 1"));
}

namespace {

// The (x, y) pairs of a chart's polylines' points, in order.
std::vector<std::pair<double, double>> polyline_points(const std::string& svg) {
  std::vector<std::pair<double, double>> points;
  for (auto at = svg.find(" points=\""); at != std::string::npos; at = svg.find(" points=\"", at + 1)) {
    std::istringstream list(svg.substr(at + 9, svg.find('"', at + 9) - at - 9));
    double x = 0, y = 0;
    char comma = 0;
    while (list >> x >> comma >> y) points.emplace_back(x, y);
  }
  return points;
}

}  // namespace

TEST_CASE("a line of 500k points is thinned to what it draws: a page of kilobytes, every spike and both ends kept",
          "[record][report]") {
  auto value = [](int step) { return 2.0 + 0.1 * std::sin(step * 0.001) + (step == 123457 ? 5.0 : 0.0); };
  ChartSeries loss{"run", chart_color(0), false, {}};
  for (int step = 1; step <= 500000; ++step) loss.points.emplace_back(step, value(step));
  ChartSeries few{"few", chart_color(1), false, {{1, 2.0}, {250000, 2.2}, {500000, 1.9}}};
  std::string svg = svg_line_chart("loss", "step", "loss", {loss, few});
  INFO(svg.size() << " bytes");
  CHECK(svg.size() < 100 * 1024);  // every point as drawn was 7 MB
  auto points = polyline_points(svg);
  // At most four a pixel column (the plot is under 600 px wide), and the short line whole.
  CHECK(points.size() < 4 * 600 + 3);
  CHECK(count_occurrences(svg, "<polyline class=\"series\"") == 2);
  const auto few_at = svg.rfind(" points=\"");
  CHECK(std::count(svg.begin() + few_at, svg.begin() + svg.find('"', few_at + 9), ',') == 3);
  // The spike to 7.0 at one step in 500k is drawn where a chart of that point alone (same scale)
  // draws it; both ends stay.
  double top = 1e9, first_x = 1e9, last_x = 0;
  for (const auto& [x, y] : points) top = std::min(top, y), first_x = std::min(first_x, x), last_x = std::max(last_x, x);
  ChartSeries spike{"run", chart_color(0), false, {{1, 2.0}, {123457, value(123457)}, {500000, 2.0}}};
  double spike_top = 1e9;
  for (const auto& [x, y] : polyline_points(svg_line_chart("loss", "step", "loss", {spike, few})))
    spike_top = std::min(spike_top, y);
  CHECK(top == spike_top);
  CHECK(first_x == Approx(64.0).margin(1));
  CHECK(last_x == Approx(624.0).margin(1));
  // x stays in order: a line, not a scribble.
  CHECK(std::is_sorted(points.begin(), points.begin() + static_cast<long>(points.size() - 3),
                       [](const auto& a, const auto& b) { return a.first < b.first; }));
}

TEST_CASE("a chart's y tick labels of 7 digits move the plot right, clear of the axis name, and its title and "
          "legend with it", "[record][report]") {
  ChartSeries rate{"tokens/s", chart_color(0), false, {{1, 1234567.0}, {2, 1234999.0}}};
  std::string svg = svg_line_chart("throughput", "step", "tokens/s", {rate});
  std::smatch tick;
  std::string rest = svg;
  std::size_t labels = 0;
  // Every y tick label (anchored at its end) starts right of x 22, where the rotated axis name ends.
  while (std::regex_search(rest, tick, std::regex("<text x=\"([0-9.]+)\" y=\"[0-9.]+\" class=\"tick\" "
                                                  "text-anchor=\"end\">([^<]+)</text>"))) {
    CHECK(std::stod(tick[1]) - 6.5 * static_cast<double>(tick[2].length()) >= 22);
    ++labels;
    rest = tick.suffix();
  }
  CHECK(labels >= 3);
  CHECK_THAT(svg, Contains(">1234600</text>") || Contains(">1234800</text>"));
  // The title and the legend start where the moved plot does.
  std::smatch frame;
  REQUIRE(std::regex_search(svg, frame, std::regex("<rect x=\"([0-9.]+)\"")));
  CHECK(std::stod(frame[1]) > 64);
  CHECK_THAT(svg, Contains("<text x=\"" + frame[1].str() + "\" y=\"20\" class=\"title\">throughput</text>") &&
                      Contains("<g><line x1=\"" + frame[1].str() + "\""));  // the legend's swatch
  // A short label keeps the usual frame.
  CHECK_THAT(svg_line_chart("loss", "step", "loss", {{"run", chart_color(0), false, {{1, 2.0}, {2, 1.5}}}}),
             Contains("<rect x=\"64\""));
}

TEST_CASE("a chart breaks its line at a value it cannot draw, marks a lone point, and keeps its plot under a "
          "legend of 128 ranks",
          "[record][report]") {
  const double nan = std::nan("");
  std::string gap = svg_line_chart("loss", "step", "loss", {{"run", chart_color(0), false,
                                                             {{1, 2.0}, {2, 1.5}, {3, nan}, {4, 1.0}, {5, 0.5}}}});
  CHECK(count_occurrences(gap, "<polyline class=\"series\"") == 2);  // 1-2 and 4-5, nothing across 3
  std::string lone = svg_line_chart("loss", "step", "loss", {{"run", chart_color(0), false, {{1, nan}, {2, 0.5}, {3, nan}}}});
  CHECK_THAT(lone, Contains("<circle") && !Contains("<polyline class=\"series\""));
  std::vector<ChartSeries> ranks;
  for (int r = 0; r < 128; ++r)
    ranks.push_back({"fashion_mnist_convnet_lr01 rank " + std::to_string(r), chart_color(r), false, {{0, 1.0 * r}, {1, 2.0}}});
  std::string many = svg_line_chart("CPU", "step", "%", ranks);
  CHECK_THAT(many, Contains(" more</text>"));
  const auto frame = many.find("class=\"frame\"");
  REQUIRE(frame != std::string::npos);
  const auto height = many.rfind("height=\"", frame);
  REQUIRE(height != std::string::npos);
  CHECK(std::stod(many.substr(height + 8)) >= 120);  // the plot keeps most of its height
  CHECK(count_occurrences(many, "<polyline class=\"series\"") == 128);  // every line is drawn
}

TEST_CASE("ddp-report refuses a metrics.jsonl that is a directory, another program's file or one with no step, "
          "naming the cause, and leaves out a field with text, named, keeping the record",
          "[record][report]") {
  TempDir dir;
  auto report = [&](const std::string& name) {
    auto r = run_command({bin("ddp-report"), dir.file(name), "-o", dir.file(name + ".html")});
    INFO(r.out << r.err);
    return r;
  };
  std::filesystem::create_directories(dir.file("folder/metrics.jsonl"));
  auto folder = report("folder");
  CHECK(folder.exit_code == 2);
  CHECK_THAT(folder.err, Contains("metrics.jsonl is not a file (a directory)"));
  std::filesystem::create_directories(dir.file("binary"));
  write_file(dir.file("binary/metrics.jsonl"), std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\n\x09brain.Event:2\n", 24));
  auto binary = report("binary");
  CHECK(binary.exit_code == 2);
  CHECK_THAT(binary.err, Contains("none of its 2 line(s) is a metrics record"));
  std::filesystem::create_directories(dir.file("nostep"));
  write_file(dir.file("nostep/metrics.jsonl"), "{\"global_step\": 1, \"loss\": 1.0}\n{\"global_step\": 2, \"loss\": 0.5}\n");
  auto nostep = report("nostep");
  CHECK(nostep.exit_code == 2);
  CHECK_THAT(nostep.err, Contains("none of its 2 record(s) has a \"step\""));
  std::filesystem::create_directories(dir.file("text"));
  write_file(dir.file("text/metrics.jsonl"), "{\"step\": 1, \"phase\": \"warmup\", \"loss\": 1.5}\n"
                                             "{\"step\": 2, \"phase\": \"main\", \"loss\": 0.75}\n");
  auto text = report("text");
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.err, Contains("field(s) phase hold no number") && !Contains("skipped"));
  CHECK_THAT(read_file(dir.file("text.html")), Contains("<td>0.75</td>"));
}

}  // namespace DDP_TEST_FILE
