#include "ddp/record/run_report.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/version.h"
#include "ddp/config/config_keys.h"
#include "ddp/record/svg_chart.h"

namespace ddp {
namespace {

// auto-fill keeps a row's empty columns: with auto-fit a chart alone in its section took the whole
// width, its text scaled up with it.
constexpr const char* kStyle = R"(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #f6f6f4; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.meta { color: #666; margin-bottom: 16px; }
table { border-collapse: collapse; background: #fff; } td, th { padding: 4px 10px; border: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 12px; }
svg.chart { background: #fff; border: 1px solid #ddd; width: 100%; height: auto; }
.differs td { font-family: ui-monospace, monospace; }
svg .title { font-weight: 600; font-size: 14px; } svg .tick, svg .legend { font-size: 11px; fill: #444; }
svg .axis { font-size: 12px; fill: #444; } svg .frame { fill: none; stroke: #bbb; } svg .empty { fill: #999; } svg .note { font-size: 12px; fill: #b00; }
svg .grid { stroke: #eee; stroke-width: 1; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; overflow: auto; max-height: 400px; }
.failed { color: #b00; font-weight: 600; } .ok { color: #070; font-weight: 600; }
)";

std::string exit_text(const RunRecords& run) {
  auto status = run.exit_status();
  if (!status) return R"(<span class="failed">no exit recorded</span> (still running, or the run failed))";
  if (!std::isfinite(*status)) return R"(<span class="failed">exit status not recorded as a number</span>)";
  int code = static_cast<int>(*status);
  if (code == 0) return R"(<span class="ok">finished</span> (exit 0))";
  if (code > 128) return fmt::format(R"(<span class="failed">stopped by signal {}</span> (exit {}); a checkpoint was saved)",
                                     code - 128, code);
  // Rank 0's status, which is not the job's where another rank went first (its exit 2, or 137 for
  // a SIGKILL, while rank 0 exits 1 when the collective fails): that rank is named.
  if (auto other = run.never_arrived_rank(); other && std::isfinite(*other))
    return fmt::format(R"(<span class="failed">rank {} never arrived</span> at a collective, and rank 0 exited {})",
                       static_cast<int64_t>(*other), code);
  return fmt::format(R"(<span class="failed">exit {}</span>)", code);
}

std::string cell(std::optional<double> value, const char* format = "{:.4g}") {
  return value ? fmt::format(fmt::runtime(format), *value) : "";
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t half = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(half), values.end());
  if (values.size() % 2 == 1) return values[half];
  // An even count: the mean of the two middle values, the lower being the largest below `half`.
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(half)) + values[half]) / 2;
}

int ranks_in(const RunRecords& run) {
  int ranks = 0;
  while (!run.series("sys_rss_mib_rank" + std::to_string(ranks)).empty() ||
         !run.series("peak_rss_mib_rank" + std::to_string(ranks)).empty())
    ++ranks;
  return ranks;
}

// With one run, a colour per series; with several, a colour per run (and the series told apart by
// dashes or labels).
std::string color_for(std::size_t run, std::size_t series, std::size_t runs) {
  return chart_color(runs == 1 ? series : run);
}

std::string label_for(const RunRecords& run, const std::string& what, std::size_t runs) {
  return runs == 1 ? what : run.name + (what.empty() ? "" : " " + what);
}

// A chart of one key per run, or of several keys (solid, then dashed).
std::string chart_of(const std::vector<RunRecords>& runs, const std::string& title, const std::string& y_label,
                     const std::vector<std::pair<std::string, std::string>>& keys_and_labels) {
  std::vector<ChartSeries> series;
  for (std::size_t r = 0; r < runs.size(); ++r)
    for (std::size_t k = 0; k < keys_and_labels.size(); ++k) {
      const auto& [key, label] = keys_and_labels[k];
      series.push_back({label_for(runs[r], label, runs.size()), color_for(r, k, runs.size()),
                        runs.size() > 1 && k > 0, runs[r].points(key)});
    }
  return svg_line_chart(title, "step", y_label, series);
}

// One line per rank (one run), or per run and rank.
std::string per_rank_chart(const std::vector<RunRecords>& runs, const std::string& title, const std::string& y_label,
                           const std::string& key_prefix) {
  std::vector<ChartSeries> series;
  for (std::size_t r = 0; r < runs.size(); ++r)
    for (int rank = 0, ranks = ranks_in(runs[r]); rank < ranks; ++rank)
      series.push_back({label_for(runs[r], "rank " + std::to_string(rank), runs.size()),
                        color_for(r, static_cast<std::size_t>(rank), runs.size()), runs.size() > 1 && rank > 0,
                        runs[r].points(key_prefix + std::to_string(rank))});
  return svg_line_chart(title, "step", y_label, series);
}

// The all-reduce time that backward did not hide (exposed), and what it did (hidden).
std::string allreduce_chart(const std::vector<RunRecords>& runs) {
  std::vector<ChartSeries> series;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    // points(), NaN kept: a value not drawn breaks the line with its note, as in every chart; and
    // each hidden time from the total and exposed of its own step, not of the same index.
    const auto total = runs[r].points("allreduce_ms"), exposed = runs[r].points("allreduce_exposed_ms");
    std::map<double, double> total_at(total.begin(), total.end());
    std::vector<std::pair<double, double>> hidden;
    for (const auto& [step, exposed_ms] : exposed)
      if (auto found = total_at.find(step); found != total_at.end())
        hidden.emplace_back(step, std::isfinite(found->second - exposed_ms) ? std::max(0.0, found->second - exposed_ms)
                                                                            : found->second - exposed_ms);
    series.push_back({label_for(runs[r], "exposed", runs.size()), color_for(r, 0, runs.size()), false, exposed});
    series.push_back(
        {label_for(runs[r], "hidden by backward", runs.size()), color_for(r, 1, runs.size()), true, hidden, true});
  }
  return svg_line_chart("All-reduce per step", "step", "ms", series);
}

// Per rank: the median over the run of each monitor window's 10th, 50th and 90th percentile.
std::string step_time_chart(const std::vector<RunRecords>& runs) {
  std::vector<ChartBox> boxes;
  for (std::size_t r = 0; r < runs.size(); ++r)
    for (int rank = 0, ranks = ranks_in(runs[r]); rank < ranks; ++rank) {
      auto values = [&](const char* q) {
        std::vector<double> v;
        for (const auto& [step, value] : runs[r].series(fmt::format("sys_step_busy_ms_{}_rank{}", q, rank)))
          v.push_back(value);
        return v;
      };
      auto p10 = values("p10"), p50 = values("p50"), p90 = values("p90");
      if (p50.empty()) continue;
      boxes.push_back({label_for(runs[r], "rank " + std::to_string(rank), runs.size()),
                       color_for(r, static_cast<std::size_t>(rank), runs.size()), median(p10), median(p50),
                       median(p90)});
    }
  return svg_box_chart("Compute time per step, by rank (10th-90th percentile, median)", "ms", boxes);
}

bool any_series(const std::vector<RunRecords>& runs, const std::string& key) {
  return std::any_of(runs.begin(), runs.end(), [&](const RunRecords& run) { return !run.series(key).empty(); });
}

// Why no run has monitor records: the monitor was off in every one, or the runs were shorter than
// one of its intervals.
std::string unmonitored_text(const std::vector<RunRecords>& runs, bool ended) {
  const bool off = std::all_of(runs.begin(), runs.end(), [](const RunRecords& run) {
    auto keys = config_keys(run.config);
    auto every = keys.find("monitor.every_s");
    return every != keys.end() && std::strtod(every->second.c_str(), nullptr) == 0;
  });
  return std::string(off     ? "The system monitor was off (monitor.every_s: 0)"
                     : ended ? "The system monitor recorded nothing: the run ended before its first monitor.every_s"
                             : "The system monitor has recorded nothing yet (or the run failed before its first record)") +
         ": no compute time, data wait, CPU or memory by rank.";
}

// Several runs: a table of the config keys whose values are not the same in every run (a run
// without the key shows "-"), above each run's whole config.
std::string config_differences(const std::vector<RunRecords>& all_runs) {
  if (all_runs.size() < 2) return "";
  // Those that kept a config.yaml with keys: none, or one that is not YAML, is no evidence of sameness.
  std::vector<const RunRecords*> runs;
  std::vector<std::map<std::string, std::string>> keys;
  for (const auto& run : all_runs)
    if (auto run_keys = config_keys(run.config); !run_keys.empty()) {
      runs.push_back(&run);
      keys.push_back(std::move(run_keys));
    }
  if (runs.size() < 2)
    return fmt::format("<p class=\"meta\">The configs cannot be compared: {} of the {} runs kept no readable "
                       "config.yaml.</p>",
                       all_runs.size() - runs.size(), all_runs.size());
  std::set<std::string> all;
  for (const auto& run_keys : keys)
    for (const auto& [key, value] : run_keys) all.insert(key);
  std::string rows;
  for (const auto& key : all) {
    std::vector<std::string> values;
    for (const auto& run_keys : keys) {
      auto it = run_keys.find(key);
      values.push_back(it == run_keys.end() ? "-" : it->second);
    }
    if (std::all_of(values.begin(), values.end(), [&](const std::string& v) { return v == values.front(); })) continue;
    rows += "<tr><td>" + html_escape(key) + "</td>";
    for (const auto& value : values) rows += "<td>" + html_escape(value) + "</td>";
    rows += "</tr>";
  }
  const std::string among = runs.size() < all_runs.size() ? " (of those that kept a readable config.yaml)" : "";
  if (rows.empty()) return "<p class=\"meta\">The runs' configs" + among + " are the same, key for key.</p>";
  std::string header = "<tr><th>key</th>";
  for (const auto* run : runs) header += "<th>" + html_escape(run->name) + "</th>";
  return "<p class=\"meta\">What differs between the runs' configs" + among + ":</p><table class=\"differs\">" +
         header + "</tr>" + rows + "</table>";
}

// The task's own eval metrics (accuracy, perplexity...): not the loss, the sample count or a flag.
bool is_eval_metric(const std::string& key) {
  return key.rfind("eval_", 0) == 0 && key != "eval_loss" && key != "eval_samples" && key != "eval_interrupted";
}

std::string eval_keys_chart(const std::vector<RunRecords>& runs) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& run : runs)
    for (const auto& key : run.keys())
      if (is_eval_metric(key) &&
          std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; }) == keys.end())
        keys.emplace_back(key, key.substr(5));
  if (keys.empty()) return "";  // no evaluation, or one of the loss alone (in the loss chart)
  return chart_of(runs, "Evaluation", keys.size() == 1 ? keys[0].second : "value", keys);
}

// The last value of `key`, NaN or infinite too: a loss that went NaN is the run's news, and the
// last finite one beside it would hide that it diverged.
std::optional<double> last_logged(const RunRecords& run, const std::string& key) {
  auto points = run.points(key);
  if (points.empty()) return std::nullopt;
  return points.back().second;
}

// "accuracy 0.8912", "perplexity 12.31": whichever the run's task measures, of the same evaluation
// as the eval loss beside it (a perplexity that overflowed is inf there, not an older one's).
std::string eval_metrics_cell(const RunRecords& run) {
  std::string text;
  for (const auto& key : run.keys())
    if (auto value = is_eval_metric(key) ? last_logged(run, key) : std::nullopt)
      text += fmt::format("{}{} {:.4g}", text.empty() ? "" : ", ", key.substr(5), *value);
  return html_escape(text);
}

std::string summary_table(const std::vector<RunRecords>& runs) {
  std::string out = "<table><tr><th>run</th><th>steps</th><th>last train loss</th><th>last eval loss</th>"
                    "<th>last eval metrics</th><th>samples/s (median)</th><th>peak RSS/rank (MiB)</th><th>ended</th></tr>";
  for (const auto& run : runs) {
    std::vector<double> throughput;
    for (const auto& [step, v] : run.series("samples_per_s")) throughput.push_back(v);
    out += "<tr><td>" + html_escape(run.name) + "</td><td>" + cell(run.last("step"), "{:.0f}") + "</td><td>" +
           cell(last_logged(run, "loss")) + "</td><td>" + cell(last_logged(run, "eval_loss")) + "</td><td>" +
           eval_metrics_cell(run) + "</td><td>" +
           (throughput.empty() ? std::string() : fmt::format("{:.0f}", median(throughput))) + "</td><td>" +
           cell(run.last("peak_rss_mib_max"), "{:.0f}") + "</td><td>" + exit_text(run) +
           (run.skipped_lines ? fmt::format(" ({} unreadable line(s) skipped)", run.skipped_lines) : "") +
           (run.superseded ? fmt::format(" ({} record(s) a resume wrote again left out)", run.superseded) : "") +
           (run.interrupted_evals
                ? fmt::format(" ({} evaluation(s) a stop cut short left out)", run.interrupted_evals)
                : "") +
           "</td></tr>";
  }
  return out + "</table>";
}

// Pipeline stages: each stage's time a step, computing and in all, the bubble that leaves beside
// the schedule's ideal, and the activation memory it held; empty without stages.
std::string pipeline_table(const std::vector<RunRecords>& runs) {
  std::string rows;
  for (const auto& run : runs)
    for (int stage = 0;; ++stage) {
      std::string key = "pipeline_stage" + std::to_string(stage);
      auto bubble = run.last(key + "_bubble");
      if (!bubble) break;
      rows += "<tr><td>" + html_escape(run.name) + "</td><td>" + std::to_string(stage) + "</td><td>" +
              cell(run.last(key + "_step_ms"), "{:.1f}") + "</td><td>" + cell(run.last(key + "_compute_ms"), "{:.1f}") +
              "</td><td>" + cell(bubble, "{:.3f}") + "</td><td>" + cell(run.last("pipeline_ideal_bubble"), "{:.3f}") +
              "</td><td>" + cell(run.last(key + "_peak_activation_mib"), "{:.2f}") + "</td></tr>";
    }
  if (rows.empty()) return "";
  return "\n<h2>Pipeline stages</h2><table><tr><th>run</th><th>stage</th><th>ms a step</th><th>ms computing</th>"
         "<th>bubble (measured)</th><th>bubble (P-1)/(M+P-1)</th><th>peak activation memory (MiB)</th></tr>" +
         rows + "</table>";
}

}  // namespace

std::string render_report(const std::vector<RunRecords>& runs) {
  std::string names;
  for (const auto& run : runs) names += (names.empty() ? "" : ", ") + run.name;
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ddprun report: " +
                     html_escape(names) + "</title><style>" + kStyle + "</style></head><body>\n";
  html += "<h1>ddprun report: " + html_escape(names) + "</h1>\n<div class=\"meta\">written " + when + " by " +
          html_escape(version_line()) + "</div>\n";
  html += summary_table(runs);
  html += pipeline_table(runs);
  html += "\n<h2>Training</h2><div class=\"charts\">";
  html += chart_of(runs, "Loss", "loss", {{"loss", "train"}, {"eval_loss", "eval"}});
  html += eval_keys_chart(runs);
  html += chart_of(runs, "Throughput", "samples/s", {{"samples_per_s", "samples/s"}});
  bool language_model = std::any_of(runs.begin(), runs.end(), [](const RunRecords& run) { return run.last("tokens_per_s").has_value(); });
  if (language_model) html += chart_of(runs, "Tokens", "tokens/s", {{"tokens_per_s", "tokens/s"}});
  html += chart_of(runs, "Learning rate", "lr", {{"lr", "lr"}});
  html += "</div>\n";
  // Panels that could only say "no data" are left out, with one line saying why.
  const bool all_reduced = std::any_of(runs.begin(), runs.end(), [](const RunRecords& run) {
    const auto& values = run.series("allreduce_ms");  // older runs wrote 0 where nothing was synced
    return std::any_of(values.begin(), values.end(), [](const auto& point) { return point.second > 0; });
  });
  const bool monitored = any_series(runs, "sys_rss_mib_rank0");
  html += "<h2>Communication and ranks</h2>";
  // A page rendered mid-run (or of a run that failed) may simply have no records yet: it says so
  // rather than give a reason that holds only for a run that ended.
  const bool ended = std::all_of(runs.begin(), runs.end(), [](const RunRecords& run) { return run.exit_status().has_value(); });
  const bool stepped = std::any_of(runs.begin(), runs.end(), [](const RunRecords& run) { return run.last("loss").has_value(); });
  // Only a run that logged a loss without one ran with no gradients to exchange; one that ended
  // before its first logged step (stopped, or failed) says nothing of that.
  // A run that diverged at its first logged step logged a loss of null (NaN), and stopped there.
  const bool diverged = !stepped && std::any_of(runs.begin(), runs.end(),
                                                [](const RunRecords& run) { return !run.points("loss").empty(); });
  if (!all_reduced)
    html += stepped ? "<p class=\"meta\">No all-reduce was recorded: one rank, or one replica per pipeline stage, has "
                      "no gradients to exchange.</p>"
            : diverged ? "<p class=\"meta\">No all-reduce was recorded: the run's first logged loss was no number (it "
                         "diverged), and it stopped there.</p>"
            : ended
                ? "<p class=\"meta\">No all-reduce was recorded: the run ended before it logged a training step.</p>"
                : "<p class=\"meta\">No all-reduce has been recorded yet: no training step was logged.</p>";
  if (!monitored) html += "<p class=\"meta\">" + unmonitored_text(runs, ended) + "</p>";
  if (monitored && runs.size() > 1) {  // a comparison: the runs the rank panels cannot show, named
    std::string missing;
    for (const auto& run : runs)
      if (run.series("sys_rss_mib_rank0").empty()) missing += (missing.empty() ? "" : ", ") + html_escape(run.name);
    if (!missing.empty())
      html += "<p class=\"meta\">Not in the panels by rank: " + missing + " (no system monitor record).</p>";
  }
  if (all_reduced || monitored) {
    html += "<div class=\"charts\">";
    if (all_reduced) html += allreduce_chart(runs);
    if (monitored) {
      html += step_time_chart(runs);
      html += per_rank_chart(runs, "Data wait per step, by rank", "ms", "sys_data_wait_ms_rank");
      html += per_rank_chart(runs, "CPU, by rank", "% of one core", "sys_cpu_percent_rank");
      html += per_rank_chart(runs, "Resident memory, by rank", "MiB", "sys_rss_mib_rank");
    }
    html += "</div>\n";
  }
  html += "<h2>Config</h2>" + config_differences(runs);
  for (const auto& run : runs)
    html += "<details" + std::string(runs.size() == 1 ? " open" : "") + "><summary>" + html_escape(run.name) +
            "</summary><pre>" + html_escape(run.config.empty() ? "(no config.yaml)" : run.config) + "</pre></details>";
  return html + "\n</body></html>\n";
}

std::vector<std::string> write_run_report(const std::string& path, const std::vector<std::string>& run_dirs) {
  // A report written over a run's own files (metrics.jsonl, config.yaml, a checkpoint) would destroy
  // what it reports; an earlier page (.html) is the one file of a run it may replace.
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw UserError("--output: an empty path; name the page's file, as report.html (the default)");
  if (fs::is_directory(path, ec) || (!path.empty() && path.back() == '/'))
    throw UserError("--output: " + path + " is a directory; name the page's file, as " +
                    (fs::path(path) / "report.html").lexically_normal().string());
  const fs::path target = fs::weakly_canonical(path, ec);
  for (const auto& dir : run_dirs) {
    const fs::path root = fs::weakly_canonical(dir, ec);
    auto [end, rest] = std::mismatch(root.begin(), root.end(), target.begin(), target.end());
    bool inside = end == root.end() && rest != target.end();
    if (inside && fs::exists(target) && target.extension() != ".html")
      throw UserError("--output: " + path + " is a file of run " + dir +
                      "; the report would replace it. Write the report elsewhere (the default is report.html)");
  }
  // Another run's files, or anything else that is not a page: replaced, they are lost.
  if (fs::exists(target, ec) && target.extension() != ".html")
    throw UserError("--output: " + path + " exists and is not an HTML page (.html); the report would replace it. "
                    "Name a new file, or an .html one");
  // One run twice drew two identical lines under one name: a slip in the command line.
  std::map<fs::path, std::string> given;
  for (const auto& dir : run_dirs) {
    fs::path canonical = fs::weakly_canonical(dir, ec);
    if (ec || canonical.empty()) canonical = dir;  // one that cannot be resolved: read_run says why
    if (auto [seen, fresh] = given.emplace(canonical, dir); !fresh)
      throw UserError(dir + " and " + seen->second + " are the same run directory: give each run once");
  }
  std::vector<RunRecords> runs;
  for (const auto& dir : run_dirs) {
    runs.push_back(read_run(dir));
    // An exit status is 0-255; anything else (1e300 once cast to int read as -2147483648) is a file
    // not written by ddp-train, and the page would state it as a fact.
    // points(), not last(): a null (NaN) status must be refused too, not passed over.
    const auto statuses = runs.back().points("exit_status");
    if (auto status = statuses.empty() ? std::nullopt : std::optional<double>(statuses.back().second);
        status && !(*status >= 0 && *status <= 255 && *status == std::floor(*status)))
      throw FileError(dir + "/metrics.jsonl: exit_status " + fmt::format("{}", *status) +
                      " is not an exit status (an integer 0-255); the file was not written by ddp-train as it is");
  }
  // Runs of one name in other directories (p1/run, p2/run) would read alike in every row and
  // legend: those are named by their paths as given.
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (std::size_t j = 0; j < runs.size(); ++j)
      if (i != j && read_run_name(run_dirs[i]) == read_run_name(run_dirs[j]) &&
          fs::weakly_canonical(run_dirs[i], ec) != fs::weakly_canonical(run_dirs[j], ec))
        runs[i].name = fs::path(run_dirs[i]).lexically_normal().string();
  write_file_atomically(path, render_report(runs));
  std::vector<std::string> notes;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string file = run_dirs[i] + "/metrics.jsonl";
    if (runs[i].records.empty())
      notes.push_back(file + ": no record in it, so no chart of this run");
    else if (runs[i].skipped_lines > 0)
      notes.push_back(file + ": " + std::to_string(runs[i].skipped_lines) +
                      " line(s) that are no record skipped (a line a crash cut short, or an edit)");
    if (!runs[i].non_numeric.empty()) {
      std::string names;
      for (const auto& name : runs[i].non_numeric) names += (names.empty() ? "" : ", ") + name;
      notes.push_back(file + ": field(s) " + names + " hold no number (another version's file?), left out");
    }
  }
  return notes;
}

}  // namespace ddp
