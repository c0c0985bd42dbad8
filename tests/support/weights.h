#pragma once
// model.pt as the tests read it: the state_dict Python's torch.load reads, by name.

// Include it after Catch, as every test file does (torch.h, #undef CHECK, catch.hpp).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
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

/// The largest absolute difference between two state_dict files' weights, which must have the same names.
inline double largest_difference(const std::string& a, const std::string& b) {
  auto x = load_weights(a), y = load_weights(b);
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (const auto& [name, tensor] : x) worst = std::max(worst, (tensor - y.at(name)).abs().max().item<double>());
  return worst;
}

}  // namespace ddp::test
