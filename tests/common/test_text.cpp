#include <catch2/catch.hpp>

#include "ddp/common/text.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

TEST_CASE("edit_distance counts single-character edits") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("bach_size", "batch_size") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("nearest suggests plausible typos only") {
  std::vector<std::string> keys{"batch_size", "epochs", "max_steps"};
  CHECK(nearest("bach_size", keys) == std::optional<std::string>("batch_size"));
  CHECK(nearest("epoch", keys) == std::optional<std::string>("epochs"));
  CHECK_FALSE(nearest("learning_rate", keys).has_value());
  // Case is no typo: the candidate that differs only in case, not the nearest spelling.
  CHECK(nearest("AdamW", {"sgd", "adam", "adamw"}) == std::optional<std::string>("adamw"));
  CHECK(nearest("NCCL", {"auto", "gloo", "nccl"}) == std::optional<std::string>("nccl"));
  CHECK(nearest("Adam", {"sgd", "adam", "adamw"}) == std::optional<std::string>("adam"));
}

TEST_CASE("parse_int and parse_double reject junk") {
  CHECK(parse_int("42") == 42);
  CHECK(parse_int("-3") == -3);
  CHECK_FALSE(parse_int("4x").has_value());
  CHECK_FALSE(parse_int("").has_value());
  CHECK_FALSE(parse_int("99999999999999999999").has_value());
  CHECK(parse_double("0.5") == 0.5);
  CHECK_FALSE(parse_double("fast").has_value());
  CHECK_FALSE(parse_double("inf").has_value());
  // strtod reads hexadecimal; the integers never took it, and nor does Python's float().
  CHECK_FALSE(parse_double("0x1p-3").has_value());
  CHECK_FALSE(parse_double("-0X10").has_value());
  CHECK(parse_double("0.125") == 0.125);
}

TEST_CASE("number_runs writes ascending numbers as runs, and at most so many") {
  CHECK(ddp::number_runs({}) == "");
  CHECK(ddp::number_runs({4}) == "4");
  CHECK(ddp::number_runs({1, 2, 3, 5, 7, 8}) == "1-3, 5, 7-8");
  std::vector<long long> all(1048575);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<long long>(i) + 1;
  CHECK(ddp::number_runs(all) == "1-1048575");  // was every one of them, 8 MB on one line
  CHECK(ddp::number_runs({0, 2, 4, 6}, 2) == "0, 2 (+2 more)");
}

TEST_CASE("split keeps empty pieces") {
  CHECK(split("a,,b", ',') == std::vector<std::string>{"a", "", "b"});
  CHECK(split("", ',') == std::vector<std::string>{""});
}

TEST_CASE("without_backtrace keeps the message and drops LibTorch's frames of every kind") {
  CHECK(ddp::without_backtrace("bad thing\nException raised from f at x.cpp:3 (most recent call first):\nframe #0: a\n") ==
        "bad thing");
  CHECK(ddp::without_backtrace("DefaultCPUAllocator: can't allocate memory\nframe #0: c10::alloc\nframe #1: b") ==
        "DefaultCPUAllocator: can't allocate memory");
  CHECK(ddp::without_backtrace("Error in foo (most recent call first):\nframe #0: x") == "Error in foo");
  CHECK(ddp::without_backtrace("plain message") == "plain message");
}

TEST_CASE("printable escapes control characters and bounds the length") {
  CHECK(ddp::printable("rank 1 failed") == "rank 1 failed");
  CHECK(ddp::printable("\x1b]2;owned\x07 ok\n") == "\\x1b]2;owned\\x07 ok\\x0a");
  CHECK(ddp::printable(std::string(2000, 'a'), 10) == "aaaaaaaaaa...");
}

}  // namespace DDP_TEST_FILE
