#include "ddp/config/config_keys.h"

#include <yaml-cpp/yaml.h>

namespace ddp {

std::map<std::string, std::string> config_keys(const std::string& yaml) {
  std::map<std::string, std::string> keys;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception&) {
    return keys;  // an unreadable config compares as having no keys
  }
  if (!root.IsMap()) return keys;
  // Keys that are no names ("? [a, b]") are left out as the unreadable file is: as() would throw.
  for (const auto& section : root) {
    if (!section.first.IsScalar() || !section.second.IsMap()) continue;
    for (const auto& key : section.second) {
      if (!key.first.IsScalar()) continue;
      YAML::Emitter out;
      out << YAML::Flow << key.second;
      keys[section.first.as<std::string>() + "." + key.first.as<std::string>()] = out.c_str();
    }
  }
  return keys;
}

}  // namespace ddp
