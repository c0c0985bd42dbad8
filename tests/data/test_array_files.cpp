// NPY and CSV readers on files numpy wrote (tests/support/python_fixtures.py) and on broken copies.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <functional>

#include <spdlog/fmt/fmt.h>

#include "ddp/common/error.h"
#include "ddp/data/csv_reader.h"
#include "ddp/data/data_config.h"
#include "ddp/data/dataset_splits.h"
#include "ddp/data/normalizer.h"
#include "ddp/data/npy_reader.h"
#include "support/npy_writer.h"
#include "support/python_fixtures.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
using Catch::Equals;

namespace {

std::string fixture(const std::string& name) { return python_fixture(name); }

// A copy of a fixture with `edit` applied to its bytes.
std::string broken_copy(const TempDir& dir, const std::string& name, const std::function<void(std::string&)>& edit) {
  std::string bytes = read_file(fixture(name));
  edit(bytes);
  std::string path = dir.file("broken_" + name);
  write_file(path, bytes);
  return path;
}

// The NPY header of `bytes` with `from` replaced by `to` (the same length, so the data stays aligned).
void edit_header(std::string& bytes, const std::string& from, const std::string& to) {
  auto at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(at < 128);
  REQUIRE(from.size() == to.size());
  bytes.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("NPY files numpy wrote read back as the same arrays, from the file", "[data][npy]") {
  auto labels = ddp::read_npy(fixture("train_y.npy"));
  CHECK(labels.scalar_type() == torch::kLong);
  CHECK(labels.sizes() == torch::IntArrayRef({1024}));
  CHECK(torch::equal(ddp::read_npy(fixture("train_y32.npy")).to(torch::kLong), labels));

  auto samples = ddp::open_npy_samples(fixture("train_x.npy"));
  CHECK(samples->count() == 1024);
  CHECK(samples->sample_shape() == std::vector<int64_t>{20});
  auto x = ddp::read_npy(fixture("train_x.npy"));
  auto x64 = ddp::read_npy(fixture("train_x64.npy"));
  CHECK(x64.scalar_type() == torch::kDouble);
  CHECK(torch::equal(x64.to(torch::kFloat), x));
  auto some = torch::tensor({5, 0, 1023, 5}, torch::kLong);
  CHECK(torch::equal(samples->read(some), x.index_select(0, some)));

  auto images = ddp::open_npy_samples(fixture("images_u8.npy"));
  CHECK(images->dtype() == torch::kUInt8);
  CHECK(images->sample_shape() == std::vector<int64_t>({1, 28, 28}));

  // The CSV numpy wrote from the same arrays holds the same numbers.
  ddp::CsvTable table = ddp::read_csv(fixture("train.csv"), "label");
  CHECK(table.feature_names.size() == 20);
  CHECK(table.feature_names.front() == "f0");
  CHECK(torch::allclose(table.features, x, 1e-6, 1e-6));
  CHECK(torch::equal(table.labels.to(torch::kLong), labels));
}

TEST_CASE("broken NPY files are refused naming the file and the cause", "[data][npy]") {
  TempDir dir;
  auto refused = [](const std::string& path, const std::string& cause) {
    INFO(path);
    CHECK_THROWS_AS(ddp::open_npy_samples(path), ddp::FileError);
    CHECK_THROWS_WITH(ddp::open_npy_samples(path), Contains(path) && Contains(cause));
  };
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { b.resize(b.size() - 7); }), "is cut short");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { b += "xx"; }), "2 bytes after the array");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { b.resize(40); }), "cut short inside its NPY header");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { b[1] = 'X'; }), "is not an NPY file");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { edit_header(b, "'fortran_order': False", "'fortran_order': True "); }),
          "Fortran order");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { edit_header(b, "'<f4'", "'>f4'"); }), "big-endian");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { edit_header(b, "'<f4'", "'|O8'"); }), "Python objects");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { edit_header(b, "'<f4'", "'<c8'"); }), "not supported");
  refused(broken_copy(dir, "train_x.npy", [](std::string& b) { edit_header(b, "'shape': (1024, 20)", "'shape': (1024, 2x)"); }),
          "malformed shape");
  refused(broken_copy(dir, "mlp.pt", [](std::string&) {}), "is not an NPY file");
  std::string pickle = dir.file("pickle.npy");
  write_file(pickle, std::string("\x80\x04\x95", 3) + "rest of a pickle");
  refused(pickle, "is a Python pickle");
  refused(dir.file("missing.npy"), "cannot open");

  // Written by hand: a version 1 header padded to 64 bytes with spaces and a newline, then `data`.
  auto npy = [&](const std::string& name, std::string header, const std::string& data = "") {
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    const std::string length{static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    write_file(dir.file(name), std::string("\x93NUMPY\x01\x00", 8) + length + header + data);
    return dir.file(name);
  };
  // 10^12 samples of no values fit in a header alone; reading them allocated 8 TB. As features
  // they are refused; as an array (an edge list [2, 0]), read as the empty array they are.
  const std::string hollow = npy("hollow.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 0), }");
  CHECK(ddp::read_npy(hollow).sizes() == torch::IntArrayRef({1000000000000, 0}));
  ddp::DataConfig hollow_data;
  hollow_data.dataset = "npy";
  hollow_data.path = hollow;
  hollow_data.labels = fixture("train_y.npy");
  hollow_data.eval_split = "none";
  CHECK_THROWS_WITH(ddp::load_dataset_splits(hollow_data, 10),
                    Contains(hollow + ": holds samples of no values (each [0]): a sample needs at least one"));
  // The header is shown without its padding and newline, on the message's one line.
  const std::string no_order = npy("no_order.npy", "{'descr': '<f4', 'shape': (2,), }", std::string(8, '\0'));
  CHECK_THROWS_WITH(ddp::open_npy_samples(no_order),
                    Contains("the NPY header has no 'fortran_order' (header: {'descr': '<f4', 'shape': (2,), })") &&
                        !Contains("\n"));
  // What numpy's literal_eval reads besides its own writer's form: double-quoted keys and values,
  // Python 2's longs (were: "has no 'fortran_order'", "malformed shape").
  const std::string quoted =
      npy("quoted.npy", "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 1), }", std::string(8, '\0'));
  CHECK(ddp::read_npy(quoted).sizes() == torch::IntArrayRef({2, 1}));
  const std::string longs =
      npy("longs.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1L), }", std::string(8, '\0'));
  CHECK(ddp::read_npy(longs).sizes() == torch::IntArrayRef({2, 1}));
  REQUIRE(mkfifo(dir.file("pipe.npy").c_str(), 0600) == 0);  // its open used to wait for a writer
  refused(dir.file("pipe.npy"), "is not a regular file");
}

TEST_CASE("broken CSV files name the line and column at fault", "[data][csv]") {
  TempDir dir;
  auto csv = [&](const std::string& text) {
    std::string path = dir.file("t.csv");
    write_file(path, text);
    return path;
  };
  ddp::CsvTable ok = ddp::read_csv(csv("a, b,label\n1,2,0\n\n3,4.5,1\n"), "label");
  CHECK(ok.features.sizes() == torch::IntArrayRef({2, 2}));
  CHECK(ok.labels[1].item<double>() == 1);
  CHECK(ok.features[1][1].item<float>() == 4.5f);

  auto refused = [&](const std::string& text, const std::string& cause, const std::string& column = "label") {
    std::string path = csv(text);
    CHECK_THROWS_AS(ddp::read_csv(path, column), ddp::FileError);
    CHECK_THROWS_WITH(ddp::read_csv(path, column), Contains(path) && Contains(cause));
  };
  refused("a,b,label\n1,2,0\n3,x,1\n", "t.csv:3: column 2 (\"b\"): \"x\" is not a finite number");
  refused("a,b,label\n1,2,0\n3,,1\n", "t.csv:3: column 2 (\"b\"): empty cell");
  refused("a,b,label\n1,2,nan\n", "t.csv:2: column 3 (\"label\"): \"nan\" is not a finite number");
  refused("a,b,label\n1,2\n", "t.csv:2: 2 cells, but the header has 3");
  // Issue 22, item 5: finite as a double, infinite as the float32 it would train as.
  refused("a,b,label\n1,2,0\n3,1e39,1\n", "t.csv:3: column 2 (\"b\"): \"1e39\" is beyond float32's range");
  refused("a,b,labl\n1,2,0\n", "no column \"label\" (data.label_column) in the header (did you mean labl?)");
  refused("a,b,label\n", "has a header but no rows");
  // Files that are not comma-separated: the one column of their header says what they seem to be.
  refused("a;b;label\n1;2;0\n", "the header is one column holding semicolons");
  refused("a\tb\tlabel\n1\t2\t0\n", "the header is one column holding tabs");
  refused("a,b,label\r1,2,0\r", "are its lines ended by CR alone");
  refused(std::string("a\0,\0b\0", 8) + "\n1,2\n", "is it UTF-16?");
  refused("", "is empty");
  CHECK_THROWS_WITH(ddp::read_csv(dir.file("absent.csv"), "label"), Contains("absent.csv: cannot open"));
  // numpy's own file, cut mid-row.
  std::string cut = read_file(fixture("train.csv"));
  refused(cut.substr(0, cut.size() / 2), "cells, but the header has 21");
}

TEST_CASE("data splits: counts must agree, NaN labels are refused, eval_fraction is a seeded split", "[data][npy]") {
  TempDir dir;
  ddp::DataConfig config;
  config.dataset = "npy";
  config.path = fixture("train_x.npy");
  config.labels = fixture("test_y.npy");  // 512 labels for 1024 samples
  config.eval_split = "none";
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10),
                    Contains("train_x.npy holds 1024 samples") && Contains("test_y.npy holds 512 labels"));
  // A missing file is named by its key, for npy, csv and criteo alike.
  for (auto [key, field] : {std::pair{"data.path", &ddp::DataConfig::path}, std::pair{"data.labels", &ddp::DataConfig::labels}}) {
    ddp::DataConfig missing = config;
    missing.*field = dir.file("absent.npy");
    CHECK_THROWS_WITH(ddp::load_dataset_splits(missing, 10), std::string(key) + ": no such file " + dir.file("absent.npy"));
  }
  ddp::DataConfig no_eval = config;
  no_eval.labels = fixture("train_y.npy");
  no_eval.eval_split = "test";
  no_eval.eval_path = dir.file("absent.npy");
  CHECK_THROWS_WITH(ddp::load_dataset_splits(no_eval, 10), "data.eval_path: no such file " + dir.file("absent.npy"));
  ddp::DataConfig no_table = config;
  no_table.dataset = "csv";
  no_table.path = dir.file("absent.csv");
  no_table.labels.clear();
  CHECK_THROWS_WITH(ddp::load_dataset_splits(no_table, 10), "data.path: no such file " + dir.file("absent.csv"));

  std::string nan_labels = dir.file("nan.npy");
  {
    std::string bytes = read_file(fixture("train_target.npy"));
    float nan = std::nanf("");
    bytes.replace(bytes.size() - 4 * 10, 4, reinterpret_cast<const char*>(&nan), 4);  // sample 1014
    write_file(nan_labels, bytes);
  }
  config.labels = nan_labels;
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10), Contains("nan.npy: label of sample 1014 is NaN"));

  config.labels = fixture("train_y.npy");
  config.eval_split = "test";
  config.eval_fraction = 0.25;
  config.split_seed = 3;
  auto splits = ddp::load_dataset_splits(config, 10);
  REQUIRE(splits.eval);
  CHECK(splits.eval->size() == 256);
  CHECK(splits.train.size() == 768);
  CHECK(splits.train.feature_file);  // still read from the file, through a row map
  auto again = ddp::load_dataset_splits(config, 10);
  CHECK(torch::equal(again.eval->labels, splits.eval->labels));
  // Train and eval partition the file: every sample's features appear exactly once.
  auto all = torch::cat({splits.train.select(torch::arange(768)), splits.eval->select(torch::arange(256))});
  auto x = ddp::read_npy(fixture("train_x.npy"));
  CHECK(torch::equal(std::get<0>(all.sum(1).sort()), std::get<0>(x.sum(1).sort())));
  config.split_seed = 4;
  CHECK_FALSE(torch::equal(ddp::load_dataset_splits(config, 10).eval->labels, splits.eval->labels));
  config.eval_fraction = 0.0005;  // not one sample of 1024
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10), Contains("data.eval_fraction:") && Contains("empty split"));
}

TEST_CASE("infinite float labels are refused at load, naming the file and the first sample (issue 22, item 14)",
          "[data][npy]") {
  TempDir dir;
  ddp::DataConfig config;
  config.dataset = "npy";
  config.path = fixture("train_x.npy");
  config.eval_split = "none";
  std::string bytes = read_file(fixture("train_target.npy"));  // float32 [1024]
  float inf = INFINITY;
  bytes.replace(bytes.size() - 4 * 10, 4, reinterpret_cast<const char*>(&inf), 4);  // sample 1014
  bytes.replace(bytes.size() - 4 * 3, 4, reinterpret_cast<const char*>(&inf), 4);   // and 1021
  write_file(dir.file("inf.npy"), bytes);
  config.labels = dir.file("inf.npy");
  CHECK_THROWS_AS(ddp::load_dataset_splits(config, 10), ddp::FileError);
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10), Contains("inf.npy: label of sample 1014 is infinite"));
}

TEST_CASE("non-finite features are refused at load, naming the file and the first position (issue 22, item 5)",
          "[data][npy]") {
  TempDir dir;
  ddp::DataConfig config;
  config.dataset = "npy";
  config.labels = fixture("train_y.npy");
  config.eval_split = "none";
  // train_x.npy is float32 [1024, 20]: the value at `index` (flat) replaced.
  auto with_value = [&](const std::string& name, int64_t index, float value) {
    std::string bytes = read_file(fixture("train_x.npy"));
    std::size_t header = bytes.size() - 1024 * 20 * 4;
    bytes.replace(header + static_cast<std::size_t>(index) * 4, 4, reinterpret_cast<const char*>(&value), 4);
    write_file(dir.file(name), bytes);
    return dir.file(name);
  };
  config.path = with_value("nan.npy", 700 * 20 + 3, std::nanf(""));
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10),
                    Contains("nan.npy: feature 3 of sample 700 is NaN; training needs finite features"));
  config.path = with_value("inf.npy", 1023 * 20 + 19, -INFINITY);
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10), Contains("inf.npy: feature 19 of sample 1023 is infinite"));
  // The eval file is checked as well.
  config.path = fixture("train_x.npy");
  config.eval_split = "test";
  config.eval_path = with_value("eval.npy", 0, INFINITY);
  config.eval_labels = fixture("train_y.npy");
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10), Contains("eval.npy: feature 0 of sample 0 is infinite"));
  // float64 beyond float32's range.
  {
    std::string bytes = read_file(fixture("train_x64.npy"));
    double huge = 1e39;
    bytes.replace(bytes.size() - 8, 8, reinterpret_cast<const char*>(&huge), 8);
    write_file(dir.file("huge.npy"), bytes);
  }
  config.eval_split = "none";
  config.path = dir.file("huge.npy");
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 10),
                    Contains("huge.npy: feature 19 of sample 1023 is beyond float32's range"));
  config.path = fixture("train_x.npy");
  CHECK_NOTHROW(ddp::load_dataset_splits(config, 10));
}

TEST_CASE("normalisation: fixed, global and per-feature statistics of the training features", "[data][npy]") {
  ddp::DataConfig config;
  config.dataset = "npy";
  ddp::Dataset data;
  data.features = torch::tensor({{1.0, 10.0}, {3.0, 10.0}, {5.0, 10.0}}, torch::kDouble);
  data.labels = torch::zeros({3}, torch::kLong);
  config.normalize = "per_feature";
  auto per_feature = ddp::make_normalizer(config, data).apply(data.features);
  CHECK(per_feature.scalar_type() == torch::kFloat);
  CHECK(torch::allclose(per_feature.select(1, 0), torch::tensor({-1.2247449f, 0.f, 1.2247449f}), 1e-5, 1e-5));
  CHECK(torch::equal(per_feature.select(1, 1), torch::zeros({3})));  // no spread: only shifted
  config.normalize = "global";
  auto global = ddp::make_normalizer(config, data).apply(data.features);
  auto reference = (data.features - data.features.mean()) / data.features.std(/*unbiased=*/false);
  CHECK(torch::allclose(global, reference.to(torch::kFloat), 1e-5, 1e-5));
  config.normalize = "none";
  CHECK(torch::equal(ddp::make_normalizer(config, data).apply(data.features), data.features.to(torch::kFloat)));
  config.normalize = "auto";
  config.dataset = "idx";
  data.features = torch::full({1, 2}, 255, torch::kUInt8);
  CHECK(ddp::make_normalizer(config, data).apply(data.features)[0][0].item<double>() ==
        Approx((1 - config.mean) / config.std));
}

TEST_CASE(
    "an eval file is the training file's kind: CSV columns by name, features of one scale, targets of one shape, "
    "labels unrounded",
    "[data][csv]") {
  TempDir dir;
  // 100 samples whose class is column a's sign; the eval copy lists its columns in another order.
  std::string train_csv = "a,b,c,label\n", reordered = "c,b,a,label\n", renamed = "x,b,c,label\n";
  for (int i = 0; i < 100; ++i) {
    const int a = i % 2 ? 5 : -5, b = i % 7, c = 100 + i;
    train_csv += fmt::format("{},{},{},{}\n", a, b, c, a > 0 ? 1 : 0);
    reordered += fmt::format("{},{},{},{}\n", c, b, a, a > 0 ? 1 : 0);
    renamed += fmt::format("{},{},{},{}\n", a, b, c, a > 0 ? 1 : 0);
  }
  write_file(dir.file("train.csv"), train_csv);
  write_file(dir.file("reordered.csv"), reordered);
  write_file(dir.file("renamed.csv"), renamed);
  ddp::DataConfig config;
  config.dataset = "csv";
  config.path = dir.file("train.csv");
  config.eval_split = "test";
  config.eval_path = dir.file("reordered.csv");
  auto splits = ddp::load_dataset_splits(config, 2);
  REQUIRE(splits.eval);
  CHECK(torch::equal(splits.eval->features, splits.train.features));  // a, b, c: by name
  config.eval_path = dir.file("renamed.csv");
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 2),
                    Contains("renamed.csv: its feature columns are not " + config.path + "'s; it lacks \"a\"; it has "
                             "\"x\""));

  // eval_fraction 0.29 of 100 is 29 samples, though 100 × 0.29 is 28.999999999999996 in float64.
  config.eval_path.clear();
  config.eval_fraction = 0.29;
  CHECK(ddp::load_dataset_splits(config, 2).eval->size() == 29);
  config.eval_fraction = 0;

  // uint8 pixels against float32 in [0, 1] under data.normalize fixed, which divides by 255 by the
  // training file's dtype: other scales. By their values (global, auto for npy), both are fine.
  config.dataset = "npy";
  config.normalize = "fixed";
  auto pixels = torch::randint(0, 256, {8, 4}, torch::kLong).to(torch::kUInt8);
  write_npy(dir.file("x_u8.npy"), pixels);
  write_npy(dir.file("x_f4.npy"), pixels.to(torch::kFloat).div(255));
  write_npy(dir.file("y.npy"), torch::zeros({8}, torch::kLong));
  config.path = dir.file("x_f4.npy");
  config.labels = config.eval_labels = dir.file("y.npy");
  config.eval_path = dir.file("x_u8.npy");
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 2),
                    Contains("x_u8.npy holds Byte features, " + config.path + " holds Float: data.normalize fixed"));
  config.normalize = "auto";
  CHECK_NOTHROW(ddp::load_dataset_splits(config, 2));
  config.normalize = "fixed";
  config.eval_path = dir.file("x_f4.npy");
  CHECK_NOTHROW(ddp::load_dataset_splits(config, 2));
  // Multi-label targets in one split, one value a sample in the other: refused at load, naming both
  // (was: an epoch trained, then LibTorch's "shape '[8]' is invalid" at the evaluation).
  write_npy(dir.file("y_multi.npy"), torch::zeros({8, 2}, torch::kFloat));
  config.eval_labels = dir.file("y_multi.npy");
  CHECK_THROWS_WITH(ddp::load_dataset_splits(config, 2),
                    Equals(dir.file("y_multi.npy") + " holds labels of [2] a sample, " + dir.file("y.npy") +
                           " of one value: the splits' targets must be of one shape"));
  // A column ([N, 1]) beside [N] is one value a sample in both (was: refused as [1] against one value).
  write_npy(dir.file("y_column.npy"), torch::zeros({8, 1}, torch::kLong));
  config.eval_labels = dir.file("y_column.npy");
  CHECK_NOTHROW(ddp::load_dataset_splits(config, 2));
  config.labels = dir.file("y_column.npy");
  config.eval_labels = dir.file("y.npy");
  CHECK_NOTHROW(ddp::load_dataset_splits(config, 2));
  config.labels = dir.file("y.npy");

  // float64 labels stay float64 (the loss checks for whole numbers before any rounding).
  write_npy(dir.file("y_f8.npy"), torch::tensor({0.0, 1.00000001, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0}, torch::kDouble));
  config.labels = dir.file("y_f8.npy");
  config.eval_split = "none";
  auto f8 = ddp::load_dataset_splits(config, 2);
  CHECK(f8.train.labels.scalar_type() == torch::kDouble);
  CHECK(f8.train.labels[1].item<double>() == 1.00000001);
}

}  // namespace DDP_TEST_FILE
