#pragma once
// A config value between its YAML text and a schema field: read with one message for each kind of
// wrong value (naming the key, what was expected and what was written), and written back as YAML
// that reads back the same.

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

#include "ddp/config/config_schema.h"

namespace ddp {

/// Reads `node` into `target`, whole or not at all; ConfigError naming `path` for a value of the wrong kind.
void read_into(const std::string& path, const ConfigSchema::Target& target, const YAML::Node& node);

/// The field's value as YAML that reads back as the same.
std::string format_value(const ConfigSchema::Target& target);

/// "bool", "integer", "number", "string" or "list of integers".
std::string value_type_name(const ConfigSchema::Target& target);

/// The shortest text that reads back as exactly `value`.
std::string format_double(double value);

/// `text` in double quotes, with quotes, backslashes and control characters escaped.
std::string double_quoted(std::string_view text);

/// A value the user wrote, as an error echoes it: numbers and booleans bare, other text quoted.
std::string describe_yaml_value(const YAML::Node& node);

}  // namespace ddp
