#include "ddp/parallel/pipeline_split.h"

#include <cmath>
#include <sstream>

#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {
namespace {

std::vector<std::string> comma_separated(const std::string& text) {
  std::vector<std::string> words;
  std::stringstream in(text);
  for (std::string word; std::getline(in, word, ',');) {
    auto begin = word.find_first_not_of(' '), end = word.find_last_not_of(' ');
    if (begin != std::string::npos) words.push_back(word.substr(begin, end - begin + 1));
  }
  return words;
}

std::string join(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : sep) + word;
  return out;
}

// Each cut as near as it can be to an equal share of the elements, every stage keeping a layer.
std::vector<int> balanced(const std::vector<int64_t>& sizes, int stages) {
  const int layers = static_cast<int>(sizes.size());
  std::vector<double> prefix(layers + 1, 0);
  for (int i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + static_cast<double>(sizes[i]);
  std::vector<int> bounds{0};
  for (int s = 1; s < stages; ++s) {
    double target = prefix[layers] * s / stages;
    int best = bounds.back() + 1;
    for (int b = best; b <= layers - (stages - s); ++b)
      if (std::abs(prefix[b] - target) < std::abs(prefix[best] - target)) best = b;
    bounds.push_back(best);
  }
  bounds.push_back(layers);
  return bounds;
}

}  // namespace

std::vector<int> split_pipeline(const std::vector<std::string>& names, const std::vector<int64_t>& sizes, int stages,
                                const std::string& split) {
  const int layers = static_cast<int>(names.size());
  if (layers < stages)
    throw ConfigError("dist.pipeline: " + std::to_string(stages) + " stages need at least as many layers, and the model has " +
                      std::to_string(layers) + " (" + join(names, ", ") + "); use at most " + std::to_string(layers));
  auto cuts = comma_separated(split);
  if (cuts.empty()) return balanced(sizes, stages);
  if (static_cast<int>(cuts.size()) != stages - 1)
    throw ConfigError("dist.pipeline_split: " + std::to_string(stages) + " stages need " + std::to_string(stages - 1) +
                      " layer name(s), where stages 1.. begin; got " + std::to_string(cuts.size()) + " (" + split + ")");
  std::vector<int> bounds{0};
  for (const auto& cut : cuts) {
    int at = -1;
    for (int i = 0; i < layers; ++i)
      if (names[i] == cut) at = i;
    if (at < 0) {
      auto near = nearest(cut, names);
      throw ConfigError("dist.pipeline_split: " + cut + " is not one of the model's layers" +
                        (near ? " (did you mean " + *near + "?)" : "") + "; they are " + join(names, ", "));
    }
    if (at <= bounds.back())
      throw ConfigError("dist.pipeline_split: " + cut + " must come after " +
                        (bounds.size() == 1 ? "the first layer, " + names[0] : cuts[bounds.size() - 2]) +
                        ": each stage begins after the previous one and holds at least one layer");
    bounds.push_back(at);
  }
  bounds.push_back(layers);
  return bounds;
}

}  // namespace ddp
