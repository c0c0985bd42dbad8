// safetensors files (Note [safetensors]): written and read back, read from bytes put together by hand
// from the format's description, loaded into a model, and every hostile header refused in one line.

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/safetensors.h"
#include "ddp/model/state_dict_file.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

using Catch::Contains;

// A file as the format describes it: the header's length in 8 little-endian bytes, the header, the data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return length + header + data;
}

std::string float_bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The one line `path` is refused with.
std::string refusal(const std::string& path) {
  try {
    ddp::SafetensorsFile file(path);
  } catch (const ddp::FileError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("safetensors: what write_safetensors writes reads back the same, in every dtype, with its metadata",
          "[model][safetensors]") {
  ddp::test::TempDir dir;
  torch::manual_seed(3);
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"w", torch::randn({3, 5})},
      {"half", torch::randn({4}).to(torch::kHalf)},
      {"brain", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"double", torch::randn({2}, torch::kDouble)},
      {"ids", torch::arange(7, torch::kLong)},
      {"small", torch::tensor({-3, 4}, torch::kInt)},
      {"bytes", torch::tensor({1, 255}, torch::kByte)},
      {"mask", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(2.5)},
      {"empty", torch::empty({0, 4})},
      {"strided", torch::randn({4, 6}).t()},  // written in C order whatever its strides
  };
  const std::string path = dir.file("model.safetensors");
  ddp::write_safetensors(path, tensors, {{"format", "pt"}});

  std::string bytes = ddp::test::read_file(path);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(header_length % 8 == 0);  // the data start 8-byte aligned
  CHECK(bytes[8] == '{');
  CHECK(ddp::looks_like_safetensors(path));

  ddp::SafetensorsFile file(path);
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(file.entries().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& entry = file.entries()[i];  // in data order, which is the order given
    INFO(entry.name);
    CHECK(entry.name == tensors[i].first);
    torch::Tensor back = file.read(entry);
    CHECK(back.scalar_type() == tensors[i].second.scalar_type());
    CHECK(back.sizes() == tensors[i].second.sizes());
    CHECK(torch::equal(back, tensors[i].second));
  }
  CHECK(file.entries()[1].dtype == "F16");
  CHECK(file.entries()[2].dtype == "BF16");
  CHECK(file.entries()[8].shape.empty());

  CHECK_THROWS_WITH(ddp::write_safetensors(dir.file("twice.safetensors"), {{"a", torch::ones(1)}, {"a", torch::ones(1)}}),
                    dir.file("twice.safetensors") + ": cannot write tensor 'a': the name is given twice");
  CHECK_THROWS_WITH(ddp::write_safetensors(dir.file("meta.safetensors"), {{"__metadata__", torch::ones(1)}}),
                    dir.file("meta.safetensors") + ": cannot write tensor '__metadata__': the name is the header's own");
  CHECK_THROWS_WITH(ddp::write_safetensors(dir.file("c.safetensors"), {{"z", torch::ones(1, torch::kComplexFloat)}}),
                    Contains("cannot write tensor 'z' of ComplexFloat"));
}

TEST_CASE("safetensors: a file put together by hand from the format's description reads as it says",
          "[model][safetensors]") {
  ddp::test::TempDir dir;
  // Tensors listed out of data order, spaces padding the header, and metadata, as other writers do.
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},"__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}   )";
  const std::string path = dir.file("hand.safetensors");
  ddp::test::write_file(path, safetensors_bytes(header, float_bytes({1, 2, 3, 4, 5, 6, -1.5f, 0.25f})));
  auto entries = ddp::read_state_dict_file(path);  // every value, as a whole build's model.init_from reads them
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].first == "a");
  CHECK(torch::equal(entries[0].second, torch::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({2, 3})));
  CHECK(entries[1].first == "b");
  CHECK(torch::equal(entries[1].second, torch::tensor({-1.5f, 0.25f})));
}

TEST_CASE("safetensors: a model's weights load from a safetensors file, bf16 converted, and a mismatch is named",
          "[model][safetensors]") {
  ddp::test::TempDir dir;
  ddp::ModelConfig config;
  config.name = "mlp";
  config.mlp.hidden = {16};
  torch::manual_seed(1);
  auto trained = ddp::make_model(config);
  ddp::write_safetensors(dir.file("mlp.safetensors"), ddp::python_state_dict(*trained));

  torch::manual_seed(2);
  config.init_from = dir.file("mlp.safetensors");
  auto loaded = ddp::make_model(config);  // model.init_from
  auto expected = ddp::python_state_dict(*trained), actual = ddp::python_state_dict(*loaded);
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) CHECK(torch::equal(actual[i].second, expected[i].second));

  // Stored in bf16, as Hugging Face models are: read into the model's float32, rounded once.
  std::vector<std::pair<std::string, torch::Tensor>> halved;
  for (const auto& [name, tensor] : expected) halved.emplace_back(name, tensor.to(torch::kBFloat16));
  ddp::write_safetensors(dir.file("bf16.safetensors"), halved);
  config.init_from = dir.file("bf16.safetensors");
  auto from_bf16 = ddp::python_state_dict(*ddp::make_model(config));
  for (std::size_t i = 0; i < from_bf16.size(); ++i) {
    CHECK(from_bf16[i].second.scalar_type() == torch::kFloat);
    CHECK(torch::equal(from_bf16[i].second, expected[i].second.to(torch::kBFloat16).to(torch::kFloat)));
  }

  halved.pop_back();
  halved.emplace_back("layers.9.weight", torch::zeros({2, 2}));
  ddp::write_safetensors(dir.file("other.safetensors"), halved);
  config.init_from = dir.file("other.safetensors");
  CHECK_THROWS_WITH(ddp::make_model(config), "model.init_from: " + dir.file("other.safetensors") +
                                                 ": state dict does not match the model: missing keys layers.2.bias; "
                                                 "unexpected keys layers.9.weight");
}

TEST_CASE("safetensors: each hostile file is refused in one line naming the file and the fault",
          "[model][safetensors]") {
  ddp::test::TempDir dir;
  const std::string data = float_bytes({1, 2, 3, 4});
  auto file = [&](const std::string& name, const std::string& bytes) {
    ddp::test::write_file(dir.file(name), bytes);
    return dir.file(name);
  };
  auto one = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
  };
  std::string good = file("good.safetensors", safetensors_bytes(one("F32", "[4]", "[0,16]"), data));
  CHECK(refusal(good) == "(accepted)");

  std::string p = file("short.safetensors", "abc");
  CHECK(refusal(p) == p + ": 3 bytes, shorter than a safetensors file's 8-byte header length");
  std::string whole = safetensors_bytes(one("F32", "[4]", "[0,16]"), data);
  p = file("beyond.safetensors", whole.substr(0, 20));
  CHECK(refusal(p) == p + ": header length 55 runs past the end of the file (20 bytes): a truncated or corrupt file");
  std::string huge = whole;
  huge[5] = 1;  // 2^40 and more
  p = file("huge.safetensors", huge);
  CHECK_THAT(refusal(p), Contains(p + ": header length ") && Contains("is over the format's limit of 100000000 bytes"));
  p = file("text.safetensors", safetensors_bytes("[1, 2]  ", data));
  CHECK(refusal(p) == p + ": the header does not start with '{': not a safetensors file, or a corrupt one");
  p = file("json.safetensors", safetensors_bytes(R"({"t": {"dtype": )", data));
  CHECK_THAT(refusal(p), Catch::StartsWith(p + ": the header is not JSON that can be read ([json.exception.parse_error") &&
                             Catch::EndsWith("): a corrupt file"));
  p = file("nan.safetensors", safetensors_bytes(R"({"t": NaN})", data));
  CHECK_THAT(refusal(p), Contains("the header is not JSON that can be read (") && Contains("syntax error"));
  p = file("dtype.safetensors", safetensors_bytes(one("Q7", "[4]", "[0,16]"), data));
  CHECK(refusal(p) == p + ": tensor 't' has dtype \"Q7\", which ddprun does not read (it reads F64, F32, F16, BF16, "
                          "I64, I32, I16, I8, U8, BOOL)");
  p = file("shape.safetensors", safetensors_bytes(one("F32", "[5]", "[0,16]"), data));
  CHECK(refusal(p) == p + ": tensor 't' spans 16 bytes, but its shape [5] of F32 needs 20");
  p = file("negative.safetensors", safetensors_bytes(one("F32", "[-4]", "[0,16]"), data));
  CHECK(refusal(p) == p + ": tensor 't': \"shape\" [-4] is not a list of sizes");
  p = file("past.safetensors", safetensors_bytes(one("F32", "[8]", "[0,32]"), data));
  CHECK(refusal(p) == p + ": tensor 't''s data_offsets [0, 32] run past the end of the file's 16 data bytes: a "
                          "truncated or corrupt file");
  p = file("backwards.safetensors", safetensors_bytes(one("F32", "[4]", "[16,0]"), data));
  CHECK(refusal(p) == p + ": tensor 't': \"data_offsets\" [16,0] is not [begin, end] with begin <= end");
  p = file("overlap.safetensors",
           safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                             data));
  CHECK(refusal(p) == p + ": tensor 'b''s data_offsets [8, 16] overlap tensor 'a' [0, 12]");
  p = file("gap.safetensors", safetensors_bytes(one("F32", "[3]", "[4,16]"), data));
  CHECK(refusal(p) == p + ": tensor 't''s data start at 4, leaving bytes 0 to 4 of the data to no tensor");
  p = file("trailing.safetensors", safetensors_bytes(one("F32", "[3]", "[0,12]"), data));
  CHECK(refusal(p) == p + ": 4 bytes follow the last tensor's data, which no tensor describes: a corrupt file");
  p = file("missing.safetensors", safetensors_bytes(R"({"t":{"dtype":"F32","shape":[4]}})", data));
  CHECK(refusal(p) == p + ": tensor 't' has no \"data_offsets\"");
  p = file("metadata.safetensors",
           safetensors_bytes(R"({"__metadata__":{"step":3},"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                             data));
  CHECK(refusal(p) == p + ": __metadata__ 'step' is not a string");
  p = file("metalist.safetensors", safetensors_bytes(R"({"__metadata__":[1]})", ""));
  CHECK(refusal(p) == p + ": __metadata__ is not a map of strings");
  p = file("entry.safetensors", safetensors_bytes(R"({"t":[1]})", ""));
  CHECK(refusal(p) == p + ": tensor 't' is not described by a JSON object");
  p = file("dtypenum.safetensors",
           safetensors_bytes(R"({"t":{"dtype":7,"shape":[4],"data_offsets":[0,16]}})", data));
  CHECK(refusal(p) == p + ": tensor 't': \"dtype\" is not a string");
  p = file("shapeword.safetensors",
           safetensors_bytes(R"({"t":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})", data));
  CHECK(refusal(p) == p + ": tensor 't': \"shape\" is not a list");
  CHECK(refusal(dir.path()) == dir.path() + " is a directory, not a safetensors file");
  CHECK(refusal(dir.file("absent.safetensors")) ==
        "cannot read " + dir.file("absent.safetensors") + ": No such file or directory");
  // A file that shrinks after its header was checked: an error when its data are read, not a SIGBUS.
  ddp::write_safetensors(dir.file("shrinks.safetensors"), {{"t", torch::ones({1000})}});
  ddp::SafetensorsFile shrinking(dir.file("shrinks.safetensors"));
  std::filesystem::resize_file(dir.file("shrinks.safetensors"), 100);
  CHECK_THROWS_WITH(shrinking.read(shrinking.entries().front()),
                    dir.file("shrinks.safetensors") + ": ended early: it shrank while it was read");
  // Through the weights reader, a truncated safetensors file is still named as one, not as a bad zip.
  CHECK_THROWS_WITH(ddp::read_state_dict_file(dir.file("past.safetensors")), refusal(dir.file("past.safetensors")));
}

TEST_CASE("safetensors: a part of a tensor reads alone, a box along any dimensions or a run of its elements, "
          "equal to the same part cut from the whole, and a part outside it is refused",
          "[safetensors][deferred]") {
  ddp::test::TempDir dir;
  auto a = torch::arange(4 * 5 * 6, torch::kFloat).reshape({4, 5, 6});
  ddp::write_safetensors(dir.file("parts.safetensors"), {{"before", torch::ones({3})}, {"a", a},
                                                           {"b", a.to(torch::kBFloat16)}});
  ddp::SafetensorsFile file(dir.file("parts.safetensors"));
  struct Case {
    std::vector<int64_t> view;
    ddp::TensorPart part;
  };
  const std::vector<Case> cases = {
      {{4, 5, 6}, {{0, 0, 0}, {4, 5, 6}}},  // whole: one run
      {{4, 5, 6}, {{1, 0, 0}, {2, 5, 6}}},  // rows: one run
      {{4, 5, 6}, {{0, 2, 0}, {4, 2, 6}}},  // a column-parallel slice of each row: a run per row
      {{4, 5, 6}, {{0, 0, 3}, {4, 5, 3}}},  // innermost: a run per (row, column)
      {{4, 5, 6}, {{3, 1, 2}, {1, 3, 4}}},  // any box
      {{4, 5, 6}, {{1, 4, 5}, {0, 1, 1}}},  // nothing
      {{120}, {{37}, {50}}},                // a run of the elements, as a sharded unit takes them
      {{20, 6}, {{5}, {0}}}};               // (refused below: a part of another rank)
  for (const auto& entry : file.entries()) {
    if (entry.name == "before") continue;
    INFO(entry.name);
    for (std::size_t c = 0; c + 1 < cases.size(); ++c) {
      INFO("case " << c);
      auto part = file.read_part(entry, cases[c].view, cases[c].part);
      CHECK(part.scalar_type() == entry.type);
      CHECK(torch::equal(part, ddp::cut_part(file.read(entry), cases[c].view, cases[c].part)));
    }
    CHECK_THROWS_AS(file.read_part(entry, cases.back().view, cases.back().part), std::invalid_argument);
    CHECK_THROWS_AS(file.read_part(entry, {4, 5, 6}, {{0, 4, 0}, {4, 2, 6}}), std::invalid_argument);  // past the end
    CHECK_THROWS_AS(file.read_part(entry, {4, 5, 7}, {{0, 0, 0}, {1, 1, 1}}), std::invalid_argument);  // not its view
  }
}

}  // namespace DDP_TEST_FILE
