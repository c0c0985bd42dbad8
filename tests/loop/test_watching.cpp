// Watching a run: the quick start's TensorBoard events against its metrics.jsonl, its report in a
// real browser, the monitor naming a straggler, and a resumed run adding an event file.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "ddp/common/version.h"
#include "ddp/record/metrics_log.h"
#include "ddp/record/metrics_reader.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kSupport = std::string(DDP_SOURCE_DIR) + "/tests/support/";

// The quick start (scripts/quickstart.sh: the ConvNet at world 2), shortened.
std::string quickstart(const std::string& out, const std::string& extra = "") {
  return "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node=2 " + std::string(DDP_SOURCE_DIR) +
         "/configs/fashion_mnist_convnet.yaml --set run.output_dir=" + out +
         " --set train.max_steps=60 --set train.log_every=10 --set eval.every_steps=30 --set eval.at_start=false"
         " --set monitor.every_s=0.3 --set monitor.log_every_s=0.3 " + extra;
}

std::vector<std::string> event_files(const std::string& out) {
  std::vector<std::string> files;
  if (fs::is_directory(out + "/tb"))
    for (const auto& entry : fs::directory_iterator(out + "/tb")) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// Runs the shortened quick start into DIR/run and returns that directory; fails the test if it fails.
std::string trained_quickstart(const TempDir& dir) {
  std::string out = dir.file("run");
  auto run = run_shell(quickstart(out), std::chrono::seconds(240));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  return out;
}

bool has(const char* command) { return run_shell(std::string("command -v ") + command + " >/dev/null").exit_code == 0; }

// Headless Chromium renders `page` into `png`; returns what it said of the page's console (nothing
// when no script failed or logged).
std::string screenshot(const std::string& page, const std::string& png) {
  return run_shell("timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                   "--enable-logging=stderr --v=0 --window-size=1400,2400 --screenshot=" + png + " file://" + page +
                   " 2>&1 | grep -i 'CONSOLE' ; true",
                   std::chrono::seconds(150))
      .out;
}

// Whether headless Chromium is here to render a page; where it is not, says the test skips.
bool chromium_here() {
  if (has("chromium")) return true;
  WARN("skipped: no chromium here (Debian's chromium; scripts/setup.sh installs it)");
  return false;
}

// How many pixels of the screenshot `png` are of the colour `hex` (a curve's, drawn or not).
int pixels_of(const std::string& png, const std::string& hex) {
  auto pixels = run_command({"/usr/bin/python3", kSupport + "png_colors.py", png, hex}, std::chrono::seconds(120));
  INFO(pixels.out << pixels.err);
  std::smatch count;
  REQUIRE(std::regex_search(pixels.out, count, std::regex(hex + " ([0-9]+)")));
  return std::stoi(count[1]);
}

}  // namespace

TEST_CASE("the quick start's TensorBoard events hold every metrics.jsonl value, each record's CRC valid",
          "[watch][tensorboard]") {
  if (run_shell("/usr/bin/python3 -c 'import google.protobuf'").exit_code != 0) {
    WARN("skipped: no python3-protobuf for the independent reader (scripts/setup.sh installs it)");
    return;
  }
  TempDir dir;
  std::string out = trained_quickstart(dir);
  auto files = event_files(out);
  REQUIRE(files.size() == 1);
  auto scalars = run_command({"/usr/bin/python3", kSupport + "read_tfevents.py", "--scalars", files[0]});
  INFO(scalars.err);
  REQUIRE(scalars.exit_code == 0);  // every length and data CRC verified

  // "STEP TAG" → values, as the independent reader saw them.
  std::map<std::string, std::vector<double>> events;
  std::istringstream lines(scalars.out);
  for (std::string step, tag, value; lines >> step >> tag >> value;) events[step + " " + tag].push_back(std::stod(value));
  auto metrics = ddp::read_run(out);
  int compared = 0;
  for (const auto& record : metrics.records) {
    std::string step;
    for (const auto& [name, value] : record)
      if (name == "step") step = std::to_string(static_cast<long long>(value));
    for (const auto& [name, value] : record) {
      auto tag = ddp::tensorboard_tag(name);
      if (!tag) continue;
      INFO("step " << step << " " << name);
      auto& seen = events[step + " " + *tag];
      auto match = std::find(seen.begin(), seen.end(), static_cast<double>(static_cast<float>(value)));
      CHECK(match != seen.end());
      if (match != seen.end()) seen.erase(match), ++compared;
    }
  }
  // Train loss and lr at 6 log steps, eval at 2, the monitor's, peak RSS, the exit status...
  CHECK(compared > 60);
  for (const char* tag : {"train/loss", "train/lr", "train/samples_per_s", "comm/allreduce_ms",
                          "comm/allreduce_exposed_ms", "eval/loss", "eval/accuracy", "memory/peak_rss_mib_rank1",
                          "system/cpu_percent_rank1", "system/data_wait_ms_rank0", "run/exit_status"})
    CHECK_THAT(scalars.out, Contains(std::string(" ") + tag + " "));

  auto all = run_command({"/usr/bin/python3", kSupport + "read_tfevents.py", files[0]});
  CHECK_THAT(all.out, Contains(R"("tag": "config", "plugin": "text", "dtype": 7, "text": "    )" + ddp::version_line()));
  CHECK_THAT(read_file(out + "/config.yaml"), Contains("# " + ddp::version_line() + "\nrun:\n"));
}

TEST_CASE("the quick start's report renders in headless Chromium with curves and no console message",
          "[watch][report]") {
  if (!chromium_here()) return;
  TempDir dir;
  std::string out = trained_quickstart(dir);
  REQUIRE(fs::exists(out + "/report.html"));
  std::string html = read_file(out + "/report.html");
  CHECK_THAT(html, Contains("finished</span> (exit 0)"));

  // The console check can fail: a page with an error is caught by the same command.
  write_file(dir.file("broken.html"), "<html><body><script>undefined_function();</script></body></html>");
  CHECK_THAT(screenshot(dir.file("broken.html"), dir.file("broken.png")), Contains("undefined_function"));

  CHECK(screenshot(out + "/report.html", dir.file("report.png")).empty());  // no console line at all
  REQUIRE(fs::exists(dir.file("report.png")));
  // The curves' colours (the first two of the palette), counted in the screenshot: a blank plot
  // area has none. Loss, evaluation, throughput, learning rate, all-reduce, per-rank charts.
  CHECK(pixels_of(dir.file("report.png"), "1f77b4") > 3000);
  CHECK(pixels_of(dir.file("report.png"), "ff7f0e") > 1000);
  if (const char* keep = std::getenv("DDP_KEEP_SCREENSHOT")) fs::copy_file(dir.file("report.png"), keep,
                                                                         fs::copy_options::overwrite_existing);

  // The charts fill the page's width (before, fixed 640 px charts left half of a wide window empty):
  // a copy of the page with a script that measures the first row of charts, read back from the DOM.
  std::string measured = html;
  measured.replace(measured.rfind("</body>"), 7,
                   "<script>addEventListener('load', () => { const charts = [...document.querySelectorAll("
                   "'.charts')[0].children]; const top = charts[0].getBoundingClientRect().top; const row = "
                   "charts.filter(c => c.getBoundingClientRect().top === top).reduce((w, c) => w + "
                   "c.getBoundingClientRect().width, 0); document.body.setAttribute('data-fill', (row / "
                   "document.querySelector('.charts').getBoundingClientRect().width).toFixed(3)); });</script></body>");
  write_file(dir.file("measured.html"), measured);
  for (const char* width : {"1900", "1000"}) {
    auto dom = run_shell(std::string("timeout 120 chromium --headless --no-sandbox --disable-gpu --window-size=") + width +
                             ",1200 --dump-dom file://" + dir.file("measured.html") + " 2>/dev/null",
                         std::chrono::seconds(150));
    std::smatch fill;
    INFO("window " << width << " px wide");
    REQUIRE(std::regex_search(dom.out, fill, std::regex("data-fill=\"([0-9.]+)\"")));
    CHECK(std::stod(fill[1]) > 0.95);
  }
}

TEST_CASE("a report of 500k logged steps is a page of kilobytes that headless Chromium renders with its curves",
          "[watch][report]") {
  if (!chromium_here()) return;
  TempDir dir;
  fs::create_directories(dir.file("run"));
  {
    std::ofstream metrics(dir.file("run/metrics.jsonl"));
    for (int step = 1; step <= 500000; ++step)
      metrics << "{\"step\": " << step << ", \"loss\": " << 2 + 0.1 * std::sin(step * 0.001)
              << ", \"samples_per_s\": " << 1234567 + step % 100 << "}\n";
  }
  auto r = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("big.html")}, std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // Every point as drawn made 32 MB of 8 ranks' lines, which Chromium would not render (Note [Thinning]).
  CHECK(fs::file_size(dir.file("big.html")) < 200 * 1024);
  CHECK(screenshot(dir.file("big.html"), dir.file("big.png")).empty());
  REQUIRE(fs::exists(dir.file("big.png")));
  CHECK(pixels_of(dir.file("big.png"), "1f77b4") > 3000);
}

TEST_CASE("a chart alone in its section is drawn the size of the others in headless Chromium", "[watch][report]") {
  if (!chromium_here()) return;
  TempDir dir;
  // A run shorter than monitor.every_s: its all-reduce chart alone under "Communication and ranks".
  fs::create_directories(dir.file("run"));
  {
    std::ofstream metrics(dir.file("run/metrics.jsonl"));
    for (int step = 1; step <= 20; ++step)
      metrics << "{\"step\": " << step << ", \"loss\": " << 2.0 / step << ", \"samples_per_s\": 1000, \"lr\": 0.1, "
              << "\"allreduce_ms\": 3}\n";
  }
  auto r = run_command({bin("ddp-report"), dir.file("run"), "-o", dir.file("page.html")}, std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::string html = read_file(dir.file("page.html"));
  // The width of each section's first chart, read back from the DOM.
  html.replace(html.rfind("</body>"), 7,
               "<script>addEventListener('load', () => { document.body.setAttribute('data-widths', [...document."
               "querySelectorAll('.charts')].map(s => s.children.length + ':' + Math.round(s.children[0]."
               "getBoundingClientRect().width)).join(' ')); });</script></body>");
  write_file(dir.file("measured.html"), html);
  for (const char* width : {"1900", "1000"}) {
    auto dom = run_shell(std::string("timeout 120 chromium --headless --no-sandbox --disable-gpu --window-size=") +
                             width + ",1200 --dump-dom file://" + dir.file("measured.html") + " 2>/dev/null",
                         std::chrono::seconds(150));
    std::smatch widths;
    INFO("window " << width << " px wide");
    REQUIRE(std::regex_search(dom.out, widths, std::regex("data-widths=\"([0-9]+):([0-9]+) 1:([0-9]+)\"")));
    INFO(widths[0]);
    CHECK(std::stoi(widths[1]) >= 3);  // Training: loss, throughput, learning rate
    CHECK(widths[2] == widths[3]);
  }
}

TEST_CASE("ddp-report overlays two runs on one page: both runs' curves in headless Chromium, legends that fit",
          "[watch][report]") {
  if (!chromium_here()) return;
  TempDir dir;
  for (const auto& [name, lr] : {std::pair{"a", "0.05"}, std::pair{"b_a_second_run_with_a_long_name", "0.01"}}) {
    auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2",
                          std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml", "--set",
                          "run.output_dir=" + dir.file(name), "--set", "train.max_steps=20", "--set",
                          "train.log_every=5", "--set", std::string("optim.lr=") + lr},
                         std::chrono::seconds(120), {"OMP_NUM_THREADS=1"});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  auto write = [&](std::vector<std::string> runs, const std::string& page) {
    std::vector<std::string> argv{bin("ddp-report")};
    for (const auto& run : runs) argv.push_back(dir.file(run));
    argv.insert(argv.end(), {"-o", dir.file(page)});
    auto r = run_command(argv);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  };
  write({"a"}, "one.html");
  write({"a", "b_a_second_run_with_a_long_name"}, "both.html");
  std::string html = read_file(dir.file("both.html"));
  CHECK_THAT(html, Contains("<td>a</td><td>20</td>") && Contains("<td>b_a_second_run_with_a_long_name</td><td>20</td>"));
  // Every legend entry inside the chart's 640 units: each wrapped line starts again at the left.
  std::regex entry(R"re(<line x1="([0-9.]+)" x2="[0-9.]+" y1="[0-9.]+" y2="[0-9.]+" stroke="#[0-9a-f]+" stroke-width="3"(?: stroke-dasharray="4 2")?/><text x="[0-9.]+" y="[0-9.]+" class="legend">([^<]*)</text>)re");
  int entries = 0;
  for (std::sregex_iterator it(html.begin(), html.end(), entry), end; it != end; ++it, ++entries)
    CHECK(std::stod((*it)[1]) + 30 + 6.5 * static_cast<double>((*it)[2].length()) <= 640 + 10);
  CHECK(entries > 8);

  // The second run's colour (the palette's second) appears only where its curves are drawn.
  auto orange = [&](const std::string& page) {
    screenshot(dir.file(page), dir.file(page + ".png"));
    return pixels_of(dir.file(page + ".png"), "ff7f0e");
  };
  int alone = orange("one.html"), overlaid = orange("both.html");
  INFO("orange pixels: one run " << alone << ", two runs " << overlaid);
  CHECK(overlaid > alone + 2000);  // four charts' worth of a second run's lines
}

TEST_CASE("the monitor names a rank slowed down as the straggler, and watches an even run alike",
          "[watch][timing]") {
  TempDir dir;
  auto slowed = run_shell("DDPRUN_TEST_STEP_DELAY=1:120 " + quickstart(dir.file("slow")), std::chrono::seconds(240));
  INFO(slowed.out << slowed.err);
  CHECK(slowed.exit_code == 0);
  CHECK_THAT(slowed.out, Contains("warning: straggler: rank 1 computes"));
  CHECK_THAT(slowed.out, Contains("and every rank waits for it in the all-reduce"));
  CHECK_THAT(slowed.out, Contains("info: monitor at step"));

  // Even ranks: the run is watched all the same. Whether it names one is left to find_straggler's
  // own test (test_system_monitor.cpp): on 2 cores two ranks with their data threads contend for
  // real, and a fresh clone's run has seen rank 1 named at 1.3x, rightly; a bound on that ratio
  // was a bound on durations, which a loaded machine moves.
  CommandResult even = run_shell(quickstart(dir.file("even")), std::chrono::seconds(240));
  INFO(even.out << even.err);
  CHECK(even.exit_code == 0);
  CHECK_THAT(even.out, Contains("info: monitor at step"));

  auto bad = run_shell("DDPRUN_TEST_STEP_DELAY=x " + quickstart(dir.file("bad")), std::chrono::seconds(60));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("DDPRUN_TEST_STEP_DELAY: expected RANK:MS, got 'x'"));
}

TEST_CASE("a resumed run adds an event file of its own, and monitor.every_s=0 and logging off write none",
          "[watch][tensorboard]") {
  TempDir dir;
  std::string out = dir.file("run");
  REQUIRE(run_shell(quickstart(out, "--set train.max_steps=30 --set checkpoint.every_steps=30"),
                    std::chrono::seconds(240)).exit_code == 0);
  auto second = run_shell(quickstart(out, "--set checkpoint.every_steps=30"), std::chrono::seconds(240));
  INFO(second.out << second.err);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.out, Contains("resumed from"));
  CHECK(event_files(out).size() == 2);

  std::string quiet = dir.file("quiet");
  auto off = run_shell(quickstart(quiet, "--set logging.tensorboard=false --set logging.report=false "
                                         "--set monitor.every_s=0"),
                       std::chrono::seconds(240));
  INFO(off.out << off.err);
  CHECK(off.exit_code == 0);
  CHECK(event_files(quiet).empty());
  CHECK_FALSE(fs::exists(quiet + "/report.html"));
  CHECK_THAT(off.out, !Contains("monitor at step"));
}

TEST_CASE("on a terminal rank 0 shows a live progress line, and logs and metrics keep the plain lines", "[watch]") {
  if (!has("script")) {
    WARN("skipped: no script(1) (util-linux) to give ddprun a terminal");
    return;
  }
  TempDir dir;
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node=2 --log-dir " + dir.file("logs") +
            " --run-id tty " + std::string(DDP_SOURCE_DIR) + "/configs/fashion_mnist_convnet.yaml --set run.output_dir=" +
            dir.file("run") + " --set train.max_steps=60 --set train.log_every=20 --set eval.at_start=false";
  auto tty = run_shell("script -q -c '" + command + "' /dev/null", std::chrono::seconds(240));
  INFO(tty.out << tty.err);
  CHECK(tty.exit_code == 0);
  std::smatch match;
  CHECK(std::regex_search(tty.out, match, std::regex("\r\x1b\[K\[rank 0\] epoch 1/1 step [0-9]+/60 \| [0-9]+ samples/s \| ETA 0:00:[0-9]{2}")));
  // The last line drawn says the run is done, not the evaluation at its end.
  CHECK_THAT(tty.out, Contains("\r\x1b[K[rank 0] step 60/60 | done"));
  // Nor does "evaluating" stay while model.pt is written after it: the step's line is drawn again.
  const auto evaluated = tty.out.rfind("| evaluating");
  REQUIRE(evaluated != std::string::npos);
  const auto redrawn = tty.out.find("[rank 0] epoch 1/1 step 60/60 |", evaluated);
  CHECK((redrawn != std::string::npos && redrawn < tty.out.find("| done", evaluated)));
  // 60 steps end in the first of the config's 3 epochs, and the lines count to that epoch.
  CHECK_THAT(read_file(dir.file("logs/tty/attempt_0/0/stdout.log")), !Contains("\r") && Contains("epoch 1/1 step 60/60"));
  auto piped = run_shell(command + " --set run.output_dir=" + dir.file("piped"), std::chrono::seconds(240));
  CHECK_THAT(piped.out, !Contains("samples/s | ETA"));

  // A pipeline: rank 0 holds the first stage, which counts no samples (the last does). Its line said
  // "0 samples/s" at every step; the pace now comes from the steps and the global batch.
  std::string staged = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node=2 " +
                       std::string(DDP_SOURCE_DIR) +
                       "/configs/synthetic_mlp.yaml --set run.output_dir=" + dir.file("staged") +
                       " --set dist.pipeline=2 --set train.max_steps=40 --set eval.at_start=false";
  auto pipeline = run_shell("script -q -c '" + staged + "' /dev/null", std::chrono::seconds(240));
  INFO(pipeline.out << pipeline.err);
  CHECK(pipeline.exit_code == 0);
  CHECK(std::regex_search(pipeline.out, match, std::regex("step [0-9]+/40 \\| [1-9][0-9]* samples/s \\| ETA")));
  CHECK_THAT(pipeline.out, !Contains("| 0 samples/s"));
}

}  // namespace DDP_TEST_FILE
