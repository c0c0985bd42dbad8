// Every config key, swept: a typo, a value of the wrong type and an out-of-range value each give an
// error naming the key's path.
#include <yaml-cpp/yaml.h>

#include "ddp/common/error.h"
#include "ddp/loop/train_config.h"

#include <catch2/catch.hpp>

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

struct Key {
  std::string section, name;
  YAML::Node default_value;
  std::string path() const { return section + "." + name; }
};

std::vector<Key> every_key() {
  std::vector<Key> keys;
  YAML::Node root = YAML::Load(to_yaml(TrainConfig{}));
  for (const auto& section : root)
    for (const auto& key : section.second)
      keys.push_back({section.first.as<std::string>(), key.first.as<std::string>(), key.second});
  return keys;
}

std::string error_of(const std::string& yaml) {
  try {
    parse_train_config(yaml, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool is_number(const YAML::Node& node) {
  if (!node.IsScalar()) return false;
  try {
    node.as<double>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

TEST_CASE("the sweep sees every section's keys", "[config]") {
  auto keys = every_key();
  CHECK(keys.size() > 40);
}

TEST_CASE("a typo in any key names it and suggests the key", "[config]") {
  for (const auto& key : every_key()) {
    std::string typo = key.name.substr(0, 1) + key.name;  // one letter doubled
    std::string message = error_of(key.section + ":\n  " + typo + ": 1\n");
    INFO(key.path() << " -> " << message);
    CHECK_THAT(message, Contains(key.section + "." + typo + ": unknown key (did you mean " + key.path() + "?)"));
  }
}

TEST_CASE("a value of the wrong type for any key names the key", "[config]") {
  for (const auto& key : every_key()) {
    // A map fits no leaf; a word fits no number or list.
    for (std::string bad : {std::string("{a: 1}"), std::string("notanumber")}) {
      if (bad == "notanumber" && !is_number(key.default_value) && !key.default_value.IsSequence()) continue;
      std::string message = error_of(key.section + ":\n  " + key.name + ": " + bad + "\n");
      INFO(key.path() << " = " << bad << " -> " << message);
      CHECK_THAT(message, Contains(key.path() + ":"));
    }
  }
}

TEST_CASE("out-of-range values name the key and what was expected", "[config]") {
  const std::vector<std::pair<std::string, std::string>> cases{{"dist.timeout_s", "0"},
                                                               {"dist.bucket_cap_mb", "-1"},
                                                               {"dist.backend", "mpi"},
                                                               {"data.dataset", "imagenet"},
                                                               {"data.std", "0"},
                                                               {"data.std", "1e-300"},
                                                               {"data.eval_split", "val"},
                                                               {"data.workers", "0"},
                                                               {"data.synthetic_train_samples", "0"},
                                                               {"model.name", "resnet"},
                                                               {"model.num_classes", "1"},
                                                               {"model.hidden", "[0]"},
                                                               {"optim.name", "lbfgs"},
                                                               {"optim.lr", "-0.1"},
                                                               {"optim.momentum", "1.5"},
                                                               {"optim.lr_scaling", "cubic"},
                                                               {"optim.weight_decay", "-1"},
                                                               {"schedule.name", "linear"},
                                                               {"schedule.warmup_steps", "-1"},
                                                               {"schedule.step_size", "0"},
                                                               {"train.epochs", "0"},
                                                               {"train.max_steps", "-1"},
                                                               {"train.batch_size", "0"},
                                                               {"train.grad_accum_steps", "0"},
                                                               {"train.clip_grad_norm", "-1"},
                                                               {"eval.batch_size", "0"},
                                                               {"checkpoint.keep_last", "0"},
                                                               {"checkpoint.every_steps", "-1"},
                                                               {"sampler.seed", "1.5"},
                                                               {"run.name", "\"\""},
                                                               {"dist.device", "tpu"},
                                                               {"train.precision", "fp16"},
                                                               {"train.task", "graph"}};
  for (const auto& [path, value] : cases) {
    auto dot = path.find('.');
    std::string message = error_of(path.substr(0, dot) + ":\n  " + path.substr(dot + 1) + ": " + value + "\n");
    INFO(path << " = " << value << " -> " << message);
    CHECK_THAT(message, Contains(path + ":") || Contains(path + "["));
  }
}

}  // namespace DDP_TEST_FILE
