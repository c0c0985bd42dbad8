// The CSV reader on the awkward files of issue 22, item 4: quoted cells (RFC 4180), a byte-order
// mark, repeated column names, and lines too long to split.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/data/csv_reader.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

struct CsvFiles {
  test::TempDir dir;
  std::string write(const std::string& text) {
    std::string path = dir.file("t.csv");
    test::write_file(path, text);
    return path;
  }
  void refused(const std::string& text, const std::string& cause, const std::string& column = "label") {
    std::string path = write(text);
    INFO(cause);
    CHECK_THROWS_AS(read_csv(path, column), FileError);
    CHECK_THROWS_WITH(read_csv(path, column), Contains(cause));
  }
};

}  // namespace

TEST_CASE("quoted cells are one cell each, with commas and escaped quotes inside (RFC 4180)", "[data][csv]") {
  CsvFiles files;
  CsvTable t = read_csv(files.write("\"e, f\",\"say \"\"hi\"\"\",label\n\"1.5\", \"2\" ,0\n3,4,\"1\"\n"), "label");
  CHECK(t.feature_names == std::vector<std::string>{"e, f", "say \"hi\""});
  REQUIRE(t.features.sizes() == torch::IntArrayRef({2, 2}));
  CHECK(t.features[0][0].item<float>() == 1.5f);
  CHECK(t.features[0][1].item<float>() == 2.0f);
  CHECK(t.labels[1].item<double>() == 1);
  // A quoted label column name is found by its unquoted name.
  CHECK(read_csv(files.write("a,\"the, label\"\n1,0\n"), "the, label").labels.size(0) == 1);

  files.refused("a,label\n\"1,0\n", "t.csv:2: column 1: a quoted cell is not closed on its line");
  files.refused("a,label\n\"1\"2,0\n", "t.csv:2: column 1: characters after the closing quote");
  files.refused("\"a\nb\",label\n1,0\n", "t.csv:1: column 1: a quoted cell is not closed on its line");
  files.refused("a,label\n\"1\",\"x,y\"\n", "t.csv:2: column 2 (\"label\"): \"x,y\" is not a finite number");
}

TEST_CASE("a UTF-8 byte-order mark does not hide the first column's name", "[data][csv]") {
  CsvFiles files;
  CsvTable t = read_csv(files.write("\xEF\xBB\xBFlabel,a,b\r\n1,2,3\r\n"), "label");
  CHECK(t.labels[0].item<double>() == 1);
  CHECK(t.feature_names == std::vector<std::string>{"a", "b"});
}

TEST_CASE("a column name given twice is refused, naming it and both positions", "[data][csv]") {
  CsvFiles files;
  files.refused("label,a,label\n0,1,2\n", "t.csv:1: column \"label\" appears twice, as columns 1 and 3");
  files.refused("a,b,\"a\",label\n0,1,2,3\n", "t.csv:1: column \"a\" appears twice, as columns 1 and 3");
  files.refused(" label ,label\n0,1\n", "t.csv:1: column \"label\" appears twice, as columns 1 and 2");
  // Lines ended by CR alone read as one header line, whose values repeat: the hint, not "twice" alone.
  files.refused("a,b,label\r1,2,0\r1,2,0\r", "t.csv:1: column \"2\" appears twice, as columns 4 and 6; its header "
                "runs past a carriage return: are its lines ended by CR alone");
}

TEST_CASE("a directory, a named pipe or a gzip file as a CSV is named as such, at once", "[data][csv]") {
  CsvFiles files;
  std::filesystem::create_directory(files.dir.file("d.csv"));
  CHECK_THROWS_WITH(read_csv(files.dir.file("d.csv"), "label"), files.dir.file("d.csv") + ": is a directory, not a file");
  REQUIRE(mkfifo(files.dir.file("p.csv").c_str(), 0600) == 0);  // its open used to wait for a writer
  CHECK_THROWS_WITH(read_csv(files.dir.file("p.csv"), "label"),
                    Contains(files.dir.file("p.csv") + ": is not a regular file (a named pipe or a device"));
  const std::string gz = files.dir.file("t.csv.gz");
  test::write_file(gz, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + std::string(20, '\0'));
  CHECK_THROWS_WITH(read_csv(gz, "label"), gz + ": is gzip-compressed; decompress it first (gunzip -k)");
}

TEST_CASE("a line too long, or with more cells than the header, is refused before it is split", "[data][csv]") {
  CsvFiles files;
  files.refused("a,b,label\n1,2,3,4,5\n", "t.csv:2: 5 cells, but the header has 3");
  // 100 MB of "1," on one line: refused after a bounded read, in far less memory than the line.
  std::string huge = "a,b,label\n1,2,0\n" + std::string(100 << 20, '1') + "\n";
  for (std::size_t i = 1; i < (100u << 20); i += 2) huge[16 + i] = ',';
  std::string path = files.write(huge);
  huge.clear();
  huge.shrink_to_fit();
  struct rusage before {}, after {};
  getrusage(RUSAGE_SELF, &before);
  CHECK_THROWS_WITH(read_csv(path, "label"), Contains("t.csv:3: the line is longer than") && Contains("bytes"));
  getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 200 * 1024);  // KiB: the old reader peaked at 2.4 GB here
  files.refused("label\n" + std::string(5 << 20, '7') + "\n", "t.csv:2: the line is longer than");
}

}  // namespace DDP_TEST_FILE
