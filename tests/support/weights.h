#pragma once
// model.pt as the tests read it: the state_dict Python's torch.load reads, by name.

// Include it after Catch, as every test file does (torch.h, #undef CHECK, catch.hpp).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "support/subprocess.h"

namespace ddp::test {

/// Name → tensor of a state_dict file ddp-train wrote; fails the test if it is missing or empty.
inline std::map<std::string, torch::Tensor> load_weights(const std::string& path) {
  std::map<std::string, torch::Tensor> weights;
  std::string bytes = read_file(path);
  INFO(path);
  REQUIRE(!bytes.empty());
  auto dict = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  for (const auto& item : dict) weights[item.key().toStringRef()] = item.value().toTensor();
  return weights;
}

}  // namespace ddp::test
