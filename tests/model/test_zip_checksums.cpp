// Note [torch.save's checksums]: the CRC-32s of a zip's records, read from its central directory
// (zip64's too), checked against the bytes, and zips that do not read refused in one line.

#include <catch2/catch.hpp>

#include <string>

#include "ddp/common/error.h"
#include "ddp/model/zip_checksums.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

// A zip of stored records under one top folder, as torch.save lays them out, written by Python's zipfile.
void write_zip(const std::string& path, int extra_records) {
  auto r = run_shell("/usr/bin/python3 -c \"import zipfile\nwith zipfile.ZipFile('" + path +
                     "', 'w', zipfile.ZIP_STORED) as z:\n z.writestr('archive/data.pkl', b'pickled')\n z.writestr("
                     "'archive/data/0', bytes(range(256)) * 4)\n for i in range(" + std::to_string(extra_records) +
                     "):\n  z.writestr('archive/x/' + str(i), b'')\"");
  REQUIRE(r.exit_code == 0);
}

std::string bytes_0_to_255_four_times() {
  std::string bytes;
  for (int n = 0; n < 4; ++n)
    for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  return bytes;
}

}  // namespace

TEST_CASE("a zip's records check against its directory's CRC-32s, zip64's too, and a changed byte is named",
          "[model][zip]") {
  TempDir dir;
  // 70,000 records need zip64's end record (a plain one counts to 65,535).
  for (int extra : {0, 70000}) {
    INFO(extra << " more records");
    const std::string path = dir.file("records" + std::to_string(extra) + ".zip");
    write_zip(path, extra);
    ddp::ZipChecksums checksums(path);
    const std::string data = bytes_0_to_255_four_times();
    CHECK_NOTHROW(checksums.check("data.pkl", "pickled", 7));
    CHECK_NOTHROW(checksums.check("data/0", data.data(), data.size()));
    std::string changed = data;
    changed[700] ^= 1;
    CHECK_THROWS_WITH(checksums.check("data/0", changed.data(), changed.size()),
                      Contains(path + ": damaged: record data/0 is not what was written (its CRC-32 is "));
    CHECK_THROWS_WITH(checksums.check("data/9", data.data(), data.size()),
                      Contains(path + ": record data/9 is not in its zip directory"));
  }
}

TEST_CASE("a zip whose directory does not read is refused in one line naming the file", "[model][zip]") {
  TempDir dir;
  const std::string whole = dir.file("whole.zip");
  write_zip(whole, 0);
  const std::string bytes = read_file(whole);
  const std::string cut = dir.file("cut.zip"), tiny = dir.file("tiny.zip"), moved = dir.file("moved.zip");
  write_file(cut, bytes.substr(0, bytes.size() - 30));  // the end record cut short
  write_file(tiny, "PK");
  std::string far = bytes;
  far[far.size() - 22 + 16] = '\xff';  // the directory's offset, past the end
  far[far.size() - 22 + 19] = '\x7f';
  write_file(moved, far);
  // The entry count 0xffff says zip64, but no zip64 locator precedes the end record.
  const std::string no_locator = dir.file("no_locator.zip");
  std::string counted = bytes;
  counted[counted.size() - 22 + 10] = counted[counted.size() - 22 + 11] = '\xff';
  write_file(no_locator, counted);
  // The directory's first entry: its signature broken, or its name's length past the directory's end.
  const std::size_t directory_at = static_cast<unsigned char>(bytes[bytes.size() - 22 + 16]) |
                                   static_cast<unsigned char>(bytes[bytes.size() - 22 + 17]) << 8;
  const std::string unsigned_entry = dir.file("unsigned_entry.zip"), long_name = dir.file("long_name.zip");
  std::string unsigned_bytes = bytes, long_bytes = bytes;
  unsigned_bytes[directory_at] = 'X';
  long_bytes[directory_at + 28] = long_bytes[directory_at + 29] = '\xff';
  write_file(unsigned_entry, unsigned_bytes);
  write_file(long_name, long_bytes);
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {cut, "no zip directory at its end: cut short?"},
           {tiny, "too short for a zip"},
           {moved, "its zip directory lies outside it"},
           {no_locator, "a zip64 directory without its locator"},
           {unsigned_entry, "a zip directory entry that does not read"},
           {long_name, "a zip directory entry cut short"},
           {dir.file("absent.zip"), "cannot be opened"}}) {
    CHECK_THROWS_AS(ddp::ZipChecksums(path), ddp::FileError);
    CHECK_THROWS_WITH(ddp::ZipChecksums(path), path + ": not a whole torch.save file (" + why + ")");
  }
}

}  // namespace DDP_TEST_FILE
