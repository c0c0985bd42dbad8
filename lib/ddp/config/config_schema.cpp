#include "ddp/config/config_schema.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/config/config_value.h"

namespace ddp {
namespace {

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

std::string trim(std::string_view text) {
  const char* space = " \t\r\n";
  std::size_t begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  std::size_t end = text.find_last_not_of(space);
  return std::string(text.substr(begin, end - begin + 1));
}

// Calls fn(path, value) for each entry of a YAML map, rejecting duplicates (yaml-cpp keeps both).
// With a `source` (the config file), an error about an entry starts with its FILE:LINE:COLUMN, as a
// compiler's does, the innermost entry's. With `collected`, an entry's error is kept there and the
// next entry read.
template <typename Fn>
void for_each_entry(const YAML::Node& map, const std::string& prefix, const std::string& source,
                    std::vector<std::string>* collected, Fn&& fn) {
  auto located = [&source](const std::string& message, const YAML::Node& key) {
    const YAML::Mark mark = key.Mark();
    if (source.empty() || mark.is_null() || message.rfind(source + ":", 0) == 0) return ConfigError(message);
    // yaml-cpp counts lines and columns from 0; editors count from 1. A stream, not string +: GCC 12
    // warns wrongly about the latter inlined here (-Wrestrict).
    std::ostringstream out;
    out << source << ":" << mark.line + 1 << ":" << mark.column + 1 << ": " << message;
    return ConfigError(out.str());
  };
  std::set<std::string> seen;
  auto refuse = [&](const ConfigError& error) {
    if (!collected) throw error;
    collected->push_back(error.what());
  };
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) {
      refuse(located(
          (prefix.empty() ? "config" : prefix) + ": keys must be names, got " + describe_yaml_value(entry.first),
          entry.first));
      continue;
    }
    const std::string& key = entry.first.Scalar();
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (!seen.insert(key).second) {
      refuse(located(path + ": duplicate key", entry.first));
      continue;
    }
    try {
      fn(path, entry.second);
    } catch (const ConfigError& e) {
      if (!collected) throw located(e.what(), entry.first);
      collected->push_back(located(e.what(), entry.first).what());
    }
  }
}

std::string escape_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

// --- Field ---

ConfigSchema::Field::Field(std::string path, Target target, std::string doc)
    : path_(std::move(path)), target_(target), doc_(std::move(doc)), default_text_(format_value(target)) {}

bool ConfigSchema::Field::is_number() const {
  return std::holds_alternative<int64_t*>(target_) || std::holds_alternative<double*>(target_) ||
         std::holds_alternative<std::vector<int64_t>*>(target_);
}

ConfigSchema::Field& ConfigSchema::Field::min(double bound) {
  if (!is_number()) throw std::logic_error(path_ + ": min() needs a number");
  lower_ = bound;
  lower_inclusive_ = true;
  return *this;
}

ConfigSchema::Field& ConfigSchema::Field::greater_than(double bound) {
  min(bound);
  lower_inclusive_ = false;
  return *this;
}

ConfigSchema::Field& ConfigSchema::Field::max(double bound) {
  if (!is_number()) throw std::logic_error(path_ + ": max() needs a number");
  upper_ = bound;
  upper_inclusive_ = true;
  return *this;
}

ConfigSchema::Field& ConfigSchema::Field::less_than(double bound) {
  max(bound);
  upper_inclusive_ = false;
  return *this;
}

ConfigSchema::Field& ConfigSchema::Field::choices(std::vector<std::string> allowed) {
  if (!std::holds_alternative<std::string*>(target_)) throw std::logic_error(path_ + ": choices() needs a string");
  choices_ = std::move(allowed);
  return *this;
}

ConfigSchema::Field& ConfigSchema::Field::non_empty() {
  if (!std::holds_alternative<std::string*>(target_) && !std::holds_alternative<std::vector<int64_t>*>(target_)) {
    throw std::logic_error(path_ + ": non_empty() needs a string or a list");
  }
  non_empty_ = true;
  return *this;
}

ConfigSchema::Field& ConfigSchema::Field::file_path(std::vector<std::string> words) {
  if (!std::holds_alternative<std::string*>(target_)) throw std::logic_error(path_ + ": file_path() needs a string");
  is_path_ = true;
  path_words_ = std::move(words);
  return *this;
}

std::string ConfigSchema::Field::range_text(bool markdown) const {
  if (lower_ && upper_) {
    return std::string("in ") + (lower_inclusive_ ? "[" : "(") + format_double(*lower_) + ", " +
           format_double(*upper_) + (upper_inclusive_ ? "]" : ")");
  }
  if (lower_) return (lower_inclusive_ ? (markdown ? "≥ " : ">= ") : "> ") + format_double(*lower_);
  if (upper_) return (upper_inclusive_ ? (markdown ? "≤ " : "<= ") : "< ") + format_double(*upper_);
  return {};
}

std::vector<std::string> ConfigSchema::Field::problems() const {
  std::vector<std::string> found;
  auto check_range = [&](const std::string& where, double value, const std::string& text) {
    bool ok = (!lower_ || (lower_inclusive_ ? value >= *lower_ : value > *lower_)) &&
              (!upper_ || (upper_inclusive_ ? value <= *upper_ : value < *upper_));
    if (!ok) found.push_back(where + ": must be " + range_text(false) + ", got " + text);
  };
  if (auto* p = std::get_if<int64_t*>(&target_)) {
    check_range(path_, static_cast<double>(**p), std::to_string(**p));
  } else if (auto* p = std::get_if<double*>(&target_)) {
    check_range(path_, **p, format_double(**p));
  } else if (auto* p = std::get_if<std::string*>(&target_)) {
    if (non_empty_ && (*p)->empty()) {
      found.push_back(path_ + ": must not be empty");
    } else if (!choices_.empty() && std::find(choices_.begin(), choices_.end(), **p) == choices_.end()) {
      std::string problem = path_ + ": must be one of " + join(choices_, ", ") + ", got " + double_quoted(**p);
      if (auto guess = nearest(**p, choices_)) problem += " (did you mean " + *guess + "?)";
      found.push_back(problem);
    }
  } else if (auto* p = std::get_if<std::vector<int64_t>*>(&target_)) {
    if (non_empty_ && (*p)->empty()) found.push_back(path_ + ": must not be empty");
    for (std::size_t i = 0; i < (*p)->size(); ++i) {
      int64_t item = (**p)[i];
      check_range(path_ + "[" + std::to_string(i) + "]", static_cast<double>(item), std::to_string(item));
    }
  }
  return found;
}

// --- declaration ---

void ConfigSchema::section(const std::string& name, const std::string& doc) {
  if (name.empty() || name.find('.') != std::string::npos) throw std::logic_error("bad config section name: " + name);
  if (Section* existing = find_section(name)) {
    existing->doc = doc;
  } else {
    sections_.push_back({name, doc, {}});
  }
}

ConfigSchema::Field& ConfigSchema::add_field(const std::string& path, Target target, const std::string& doc) {
  std::size_t dot = path.find('.');
  // Exactly two levels keeps `--set` paths, YAML nesting and the docs' tables in step.
  if (dot == 0 || dot == std::string::npos || dot + 1 == path.size() || path.find('.', dot + 1) != std::string::npos) {
    throw std::logic_error("config key must be section.key: " + path);
  }
  if (Field* declared = find_field(path)) {  // Note [Shared keys]
    if (declared->target_.index() != target.index())
      throw std::logic_error("config key declared twice with another type: " + path);
    declared->shared_.push_back(target);
    if (!doc.empty()) declared->doc_ += (declared->doc_.empty() ? "" : "; ") + doc;
    declared->readers_.insert(declared->readers_.end(), readers_now_.begin(), readers_now_.end());
    return *declared;
  }
  std::string section_name = path.substr(0, dot);
  if (!find_section(section_name)) section(section_name, "");
  find_section(section_name)->keys.push_back(path.substr(dot + 1));
  fields_.push_back(Field(path, target, doc));
  fields_.back().readers_ = readers_now_;
  return fields_.back();
}

void ConfigSchema::known_as(const std::string& path, const std::string& hint) { known_as_[path] = hint; }

// Note [Keys a choice reads]: a key of one model family set under another (a GPT's n_embd for a
// Llama, whose width is model.dim) was left at the family's default without a word: a 768-wide
// Llama where 64 was meant. Each family's keys are tagged as it declares them, so that no family
// lists the others' keys.
void ConfigSchema::notice_unread(const std::string& chooser, std::function<std::string()> chosen,
                                 const ConfigSchema& fresh) {
  for (const Field& field : fields_) {
    if (field.readers_.empty()) continue;
    const Field* key = &field;
    auto same_path = [&field](const Field& other) { return other.path_ == field.path_; };
    const auto default_field = std::find_if(fresh.fields_.begin(), fresh.fields_.end(), same_path);
    if (default_field == fresh.fields_.end()) continue;
    notices_.push_back(
        {field.path_, [key, chooser, chosen, by_default = default_field->default_text_]() -> std::string {
           const std::string choice = chosen();
           const auto& readers = key->readers_;
           if (format_value(key->target_) == by_default ||
               std::find(readers.begin(), readers.end(), choice) != readers.end())
             return "";
           std::string names;
           for (std::size_t i = 0; i < readers.size(); ++i)
             names += (i == 0 ? "" : i + 1 == readers.size() ? " and " : ", ") + readers[i];
           return "does nothing with " + chooser + " " + choice + " (" + names +
                  (readers.size() == 1 ? " reads" : " read") + " it)";
         }});
  }
}

ConfigSchema::Field& ConfigSchema::add(const std::string& path, bool* field, const std::string& doc) {
  return add_field(path, field, doc);
}
ConfigSchema::Field& ConfigSchema::add(const std::string& path, int64_t* field, const std::string& doc) {
  return add_field(path, field, doc);
}
ConfigSchema::Field& ConfigSchema::add(const std::string& path, double* field, const std::string& doc) {
  return add_field(path, field, doc);
}
ConfigSchema::Field& ConfigSchema::add(const std::string& path, std::string* field, const std::string& doc) {
  return add_field(path, field, doc);
}
ConfigSchema::Field& ConfigSchema::add(const std::string& path, std::vector<int64_t>* field, const std::string& doc) {
  return add_field(path, field, doc);
}

void ConfigSchema::rule(const std::string& path, std::function<std::string()> check) {
  rules_.push_back({path, std::move(check)});
}

void ConfigSchema::notice(const std::string& path, std::function<std::string()> check) {
  notices_.push_back({path, std::move(check)});
}

ConfigSchema::Section* ConfigSchema::find_section(std::string_view name) {
  for (auto& section : sections_) {
    if (section.name == name) return &section;
  }
  return nullptr;
}

ConfigSchema::Field* ConfigSchema::find_field(std::string_view path) {
  for (auto& field : fields_) {
    if (field.path_ == path) return &field;
  }
  return nullptr;
}

// --- reading ---

void ConfigSchema::load(const YAML::Node& root, const std::string& source) {
  if (!root.IsDefined() || root.IsNull()) return;
  if (!root.IsMap())
    throw ConfigError("config: expected a map of sections (run:, train:, ...), got " + describe_yaml_value(root));
  source_ = source;
  std::set<std::string> written;  // a key's two spellings in one file (train: {epochs: 3} and train.epochs: 5)
  written_in_load_ = &written;
  try {
    for_each_entry(root, "", source_, collected_ptr(),
                   [&](const std::string& path, const YAML::Node& value) { assign(path, value); });
  } catch (...) {
    source_.clear();
    written_in_load_ = nullptr;
    throw;
  }
  source_.clear();  // --set values are not the file's
  written_in_load_ = nullptr;
}

// Note [Relative paths]: a relative path is resolved against the place it was written: a value in
// the config file against the file's directory (a config kept beside its data works from any
// directory, as a Makefile's or a compose file's paths do), a --set value against the current
// directory (where it was typed). Resolved paths are absolute, so every message naming one says
// what was looked for, and the run directory's config.yaml names the same files from anywhere.
void ConfigSchema::resolve_paths(const std::filesystem::path& base) {
  for (auto& field : fields_) {
    if (!field.is_path_) continue;
    std::string& value = *std::get<std::string*>(field.target_);
    if (value.empty() || std::filesystem::path(value).is_absolute() ||
        std::find(field.path_words_.begin(), field.path_words_.end(), value) != field.path_words_.end())
      continue;
    value = (std::filesystem::absolute(base) / value).lexically_normal().string();
    for (auto& shared : field.shared_) *std::get<std::string*>(shared) = value;
  }
}

void ConfigSchema::clear_paths() {
  for (auto& field : fields_) {
    if (!field.is_path_) continue;
    std::get<std::string*>(field.target_)->clear();
    for (auto& shared : field.shared_) std::get<std::string*>(shared)->clear();
  }
}

void ConfigSchema::apply_override(std::string_view assignment) {
  std::size_t eq = assignment.find('=');
  std::string key = trim(assignment.substr(0, eq));
  if (eq == std::string_view::npos || key.empty()) {
    throw ConfigError("--set " + trim(assignment) + ": expected key=value");
  }
  std::string text = trim(assignment.substr(eq + 1));
  YAML::Node value;
  if (text.empty()) {
    value = YAML::Node(std::string());  // `--set run.output_dir=` means "", not null
  } else {
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      ConfigError error(key + ": cannot read " + double_quoted(text) + " as a YAML value: " + e.msg);
      if (!collected_) throw error;
      collected_->push_back(error.what());
      return;
    }
  }
  try {
    assign(key, value);
  } catch (const ConfigError& e) {
    if (!collected_) throw;
    collected_->push_back(e.what());
  }
}

void ConfigSchema::assign(const std::string& path, const YAML::Node& value) {
  if (Field* field = find_field(path)) {
    if (written_in_load_ && !written_in_load_->insert(path).second)
      throw ConfigError(path + ": duplicate key (written both in its section and as " + path + ")");
    read_into(path, field->target_, value);
    for (auto& shared : field->shared_) read_into(path, shared, value);
  } else if (Section* section = find_section(path)) {
    load_section(*section, value);
  } else {
    throw ConfigError(unknown_key(path));
  }
}

void ConfigSchema::load_section(const Section& section, const YAML::Node& node) {
  if (node.IsNull()) return;  // `train:` with every key commented out
  if (!node.IsMap())
    throw ConfigError(section.name + ": expected a map of keys (a section), got " + describe_yaml_value(node));
  for_each_entry(node, section.name, source_, collected_ptr(),
                 [&](const std::string& path, const YAML::Node& value) { assign(path, value); });
}

std::string ConfigSchema::unknown_key(const std::string& path) const {
  std::string message = path + ": unknown key";
  // yaml-cpp reads YAML 1.2, which has no merge key: `<<: *defaults` is a key named "<<".
  if (path == "<<" || path.ends_with(".<<"))
    return message +
           " (YAML merge keys, `<<: *anchor`, are not read here: write the keys out, or use an "
           "alias for a whole section or value, `train: *defaults`)";
  std::vector<std::string> section_names, leaf_paths;
  for (const auto& section : sections_) section_names.push_back(section.name);
  for (const auto& field : fields_) leaf_paths.push_back(field.path_);

  std::size_t dot = path.rfind('.');
  std::string parent = dot == std::string::npos ? "" : path.substr(0, dot);
  std::string last = dot == std::string::npos ? path : path.substr(dot + 1);
  const Section* section = nullptr;
  for (const auto& s : sections_) {
    if (s.name == parent) section = &s;
  }

  for (const auto& leaf : leaf_paths) {
    if (path.rfind(leaf + ".", 0) == 0) return message + " (" + leaf + " is a value, not a section)";
  }
  if (auto known = known_as_.find(path); known != known_as_.end()) return message + " (" + known->second + ")";

  // A typo in the last component is the likeliest mistake; compare against siblings first.
  std::optional<std::string> guess;
  if (parent.empty()) {
    guess = nearest(last, section_names);
    // A section's name spelt out (`optimizer:`, `training:`): that section, not the leaf nearest
    // the word (was optim.lr).
    for (const auto& name : section_names)
      if (!guess && last.size() > name.size() && last.rfind(name, 0) == 0) guess = name;
  } else if (section) {
    if (auto key = nearest(last, section->keys)) guess = parent + "." + *key;
  }
  if (!guess) guess = nearest(path, leaf_paths);
  if (guess) return message + " (did you mean " + *guess + "?)";

  if (parent.empty()) {
    // A key written at the top level that belongs in a section: `batch_size: 32`.
    std::vector<std::string> homes;
    for (const auto& leaf : leaf_paths) {
      if (leaf.substr(leaf.find('.') + 1) == last) homes.push_back(leaf);
    }
    if (!homes.empty()) return message + " (did you mean " + join(homes, " or ") + "?)";
  }
  if (section) return message + " (valid keys of " + parent + ": " + join(section->keys, ", ") + ")";
  return message + " (valid sections: " + join(section_names, ", ") + ")";
}

// --- checking and writing out ---

std::vector<std::string> ConfigSchema::field_problems() const {
  std::vector<std::string> found;
  for (const auto& field : fields_) {
    for (auto& problem : field.problems()) found.push_back(std::move(problem));
  }
  return found;
}

std::vector<std::string> ConfigSchema::problems() const {
  std::vector<std::string> found = field_problems();
  for (const auto& rule : rules_) {
    std::string problem = rule.check();
    if (!problem.empty()) found.push_back(rule.path + ": " + problem);
  }
  return found;
}

std::vector<std::string> ConfigSchema::notices() const {
  std::vector<std::string> found;
  for (const auto& notice : notices_) {
    std::string finding = notice.check();
    if (!finding.empty()) found.push_back(notice.path + ": " + finding);
  }
  return found;
}

std::vector<std::string> ConfigSchema::shared_disagreements() const {
  std::vector<std::string> found;
  for (const auto& field : fields_) {
    std::vector<std::string> values = {format_value(field.target_)};
    for (const auto& shared : field.shared_) values.push_back(format_value(shared));
    if (std::any_of(values.begin(), values.end(), [&](const std::string& v) { return v != values.front(); }))
      found.push_back(field.path_ + ": " + join(values, " against "));
  }
  return found;
}

void ConfigSchema::throw_collected() const {
  if (collected_ && !collected_->empty()) throw ConfigError(join(*collected_, "\n"));
}

void ConfigSchema::validate() const {
  std::vector<std::string> found = collected_.value_or(std::vector<std::string>{});
  // A key that could not be read kept its default, which the rules across keys would judge as if
  // given ("evaluating over every neighbour is for graphs" beside "data.dataset: expected a
  // string"): with such errors, only each read key's own checks join them.
  for (auto& problem : found.empty() ? problems() : field_problems()) found.push_back(std::move(problem));
  if (!found.empty()) throw ConfigError(join(found, "\n"));
}

std::string ConfigSchema::to_yaml() const {
  std::ostringstream out;
  for (const auto& section : sections_) {
    if (section.keys.empty()) {
      out << section.name << ": {}\n";
      continue;
    }
    out << section.name << ":\n";
    for (const auto& key : section.keys) {
      const Field* field = nullptr;
      for (const auto& f : fields_) {
        if (f.path_ == section.name + "." + key) field = &f;
      }
      out << "  " << key << ": " << format_value(field->target_) << "\n";
    }
  }
  return out.str();
}

std::vector<ConfigSchema::SectionReference> ConfigSchema::reference() const {
  std::vector<SectionReference> sections;
  for (const auto& section : sections_) {
    SectionReference entry{section.name, section.doc, {}};
    for (const auto& field : fields_) {
      if (field.path_.rfind(section.name + ".", 0) != 0) continue;
      std::vector<std::string> limits;
      if (!field.choices_.empty()) {
        std::vector<std::string> quoted;
        for (const auto& choice : field.choices_) quoted.push_back("`" + choice + "`");
        limits.push_back("one of " + join(quoted, ", "));
      }
      if (field.lower_ || field.upper_) {
        std::string range = field.range_text(true);
        limits.push_back(std::holds_alternative<std::vector<int64_t>*>(field.target_) ? "each " + range : range);
      }
      if (field.non_empty_) limits.push_back("not empty");
      std::string meaning = field.doc_;
      if (!limits.empty()) {  // appended piece by piece: GCC 12 warns wrongly on "(" + ... + ")" here
        if (!meaning.empty()) meaning += ' ';
        meaning += '(';
        meaning += join(limits, "; ");
        meaning += ')';
      }
      std::vector<std::string> choices = field.choices_;
      if (std::holds_alternative<bool*>(field.target_)) choices = {"true", "false"};
      entry.keys.push_back({field.path_, value_type_name(field.target_), field.default_text_, meaning, choices});
    }
    sections.push_back(std::move(entry));
  }
  return sections;
}

std::string ConfigSchema::markdown() const {
  std::ostringstream out;
  bool first = true;
  for (const auto& section : reference()) {
    if (!first) out << "\n";
    first = false;
    out << "### `" << section.name << "`\n\n";
    if (!section.doc.empty()) out << section.doc << "\n\n";
    out << "| key | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& key : section.keys)
      out << "| `" << key.path.substr(section.name.size() + 1) << "` | " << key.type << " | `"
          << escape_cell(key.default_text) << "` | " << escape_cell(key.meaning) << " |\n";
  }
  return out.str();
}

}  // namespace ddp
