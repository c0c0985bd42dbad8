#pragma once
// A declarative config schema: each key is bound to a struct member, so the YAML parser, `--set`
// overrides, validation, the resolved-config dump and the docs all come from one declaration.

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ddp/common/limits.h"

namespace YAML {
class Node;
}

namespace ddp {

/// Keys `section.key` bound to struct members; their values at declaration time are the defaults.
///
/// Scalars read as follows (the same in files and in `--set`): booleans are `true`/`false` only
/// (never yes/no/on/off/1/0, which YAML 1.1 would read silently); integers are base-10; numbers are
/// anything strtod reads as finite; strings take any scalar's text, but null (`key:` or `~`) is an
/// error so a forgotten value is not read as "". Lists of integers are YAML sequences (`[256, 128]`).
class ConfigSchema {
 public:
  /// A member the schema writes to.
  using Target = std::variant<bool*, int64_t*, double*, std::string*, std::vector<int64_t>*>;

  /// One declared key; its fluent checks run in validate(), after the file and all overrides.
  class Field {
   public:
    /// value >= bound (each element, for lists).
    Field& min(double bound);
    /// value > bound (each element, for lists).
    Field& greater_than(double bound);
    /// value <= bound (each element, for lists).
    Field& max(double bound);
    /// value < bound (each element, for lists).
    Field& less_than(double bound);
    /// The string must be one of `allowed`.
    Field& choices(std::vector<std::string> allowed);
    /// The string or list must not be empty.
    Field& non_empty();
    /// The string is a file or directory: resolve_paths() makes it absolute. `words` are values
    /// that are not paths (data.cache_dir's `none`).
    Field& file_path(std::vector<std::string> words = {});

   private:
    friend class ConfigSchema;
    Field(std::string path, Target target, std::string doc);
    bool is_number() const;
    std::string range_text(bool markdown) const;
    std::vector<std::string> problems() const;

    std::string path_;
    Target target_;
    std::vector<Target> shared_;  // members that another declaration of this key bound (Note [Shared keys])
    std::string doc_;
    std::string default_text_;
    std::optional<double> lower_;
    bool lower_inclusive_ = true;
    std::optional<double> upper_;
    bool upper_inclusive_ = true;
    std::vector<std::string> choices_;
    bool non_empty_ = false;
    bool is_path_ = false;
    std::vector<std::string> path_words_;
    std::vector<std::string> readers_;  // set_reader()'s, in declaration order
  };

  ConfigSchema() = default;
  ConfigSchema(const ConfigSchema&) = delete;
  ConfigSchema& operator=(const ConfigSchema&) = delete;

  /// Gives a section a one-line description for markdown(); sections also appear on first add().
  void section(const std::string& name, const std::string& doc);

  /// Declares `section.key` bound to `*field`; the current value is recorded as its default.
  /// Note [Shared keys]: a key declared again, by another part that reads it (model.hidden by the mlp
  /// and graphsage families), binds that member too: one value, written to every member bound. The
  /// type must be the same (else std::logic_error), and so must the defaults (shared_disagreements);
  /// the docs are joined with "; ", and checks added through either declaration apply to the one value.
  Field& add(const std::string& path, bool* field, const std::string& doc);
  Field& add(const std::string& path, int64_t* field, const std::string& doc);
  Field& add(const std::string& path, double* field, const std::string& doc);
  Field& add(const std::string& path, std::string* field, const std::string& doc);
  Field& add(const std::string& path, std::vector<int64_t>* field, const std::string& doc);

  /// A check across keys, run by validate(); `check` returns "" when fine, else the problem,
  /// which is reported as "path: problem".
  void rule(const std::string& path, std::function<std::string()> check);

  /// A check across keys whose finding is no error but worth a line: a key set where it does
  /// nothing (dist.microbatches without a pipeline). Reported by notices() as "path: finding".
  void notice(const std::string& path, std::function<std::string()> check);

  /// Note [Keys a choice reads]: the keys declared from now on are read by `reader` (a model family,
  /// as model.name names it), added to its other readers for a shared key; "" ends it.
  void set_reader(std::string reader) {
    readers_now_.clear();
    if (!reader.empty()) readers_now_.push_back(std::move(reader));
  }
  /// The same for keys that several choices read (optim.beta1: adam and adamw); {} ends it.
  void set_readers(std::vector<std::string> readers) { readers_now_ = std::move(readers); }

  /// A notice for every key with readers (set_reader) that holds other than its value in `fresh`
  /// (the same keys declared on a default config: this schema's may have been declared on loaded
  /// values) where `chosen()` (the value of `chooser`, as model.name) is none of its readers:
  /// "does nothing with model.name llama (gpt reads it)".
  void notice_unread(const std::string& chooser, std::function<std::string()> chosen, const ConfigSchema& fresh);

  /// The unknown key `path`, where another tool's name for a key is likely (Hugging Face's
  /// model.hidden_size): its message gives `hint` instead of the nearest spelling.
  void known_as(const std::string& path, const std::string& hint);

  /// Writes every key present in `root` (a map of sections; null means all defaults).
  /// Throws ConfigError on an unknown key, a duplicate key, or a value of the wrong type; with a
  /// `source` (the file `root` was read from), its message starts with SOURCE:LINE:COLUMN.
  void load(const YAML::Node& root, const std::string& source = "");

  /// Applies one `--set section.key=value`; the value is read as YAML, so `[1, 2]` is a list and
  /// an empty value is the empty string. Throws ConfigError like load().
  void apply_override(std::string_view assignment);

  /// Note [Relative paths]: every file_path() key holding a relative path becomes `base / value`.
  void resolve_paths(const std::filesystem::path& base);
  /// Empties every file_path() key: what to compare across nodes, whose files may lie at other paths.
  void clear_paths();

  /// Every range, choice and rule violation, one complete line each, in declaration order.
  std::vector<std::string> problems() const;

  /// Every notice that applies to the current values, in declaration order.
  std::vector<std::string> notices() const;

  /// Shared keys (Note [Shared keys]) whose members hold different values now, "path: A against B":
  /// declared on a default-constructed config, a family whose default differs from another's.
  std::vector<std::string> shared_disagreements() const;

  /// From now on, load() and apply_override() keep each key's error (unknown, duplicate, of the
  /// wrong type) for validate() and go on with the next, so that a config with several problems
  /// is told all of them at once; a config that is no map of sections still throws at once.
  void collect_errors() { collected_.emplace(); }

  /// Throws ConfigError with the errors collect_errors() kept, joined by newlines, if there are any.
  void throw_collected() const;

  /// Throws ConfigError with the collected errors and problems() joined by newlines, if there are
  /// any (with collected errors, the rules across keys are left out: they would judge defaults).
  void validate() const;

  /// The current values of every key, sections and keys in declaration order.
  std::string to_yaml() const;

  /// One key as the references (markdown, man page, completion) show it.
  struct KeyReference {
    std::string path;                  ///< section.key
    std::string type;                  ///< bool, integer, number, string, list of integers
    std::string default_text;          ///< as YAML writes it
    std::string meaning;               ///< the doc, with its limits in parentheses
    std::vector<std::string> choices;  ///< the allowed strings (true and false for a bool); empty: any
  };
  /// A section and its keys, in declaration order.
  struct SectionReference {
    std::string name;
    std::string doc;
    std::vector<KeyReference> keys;
  };
  /// Every section and key, for generated references.
  std::vector<SectionReference> reference() const;

  /// A reference table per section: key | type | default | meaning.
  std::string markdown() const;

 private:
  struct Section {
    std::string name;
    std::string doc;
    std::vector<std::string> keys;
  };
  struct Rule {
    std::string path;
    std::function<std::string()> check;
  };

  Field& add_field(const std::string& path, Target target, const std::string& doc);
  Section* find_section(std::string_view name);
  Field* find_field(std::string_view path);
  void assign(const std::string& path, const YAML::Node& value);
  void load_section(const Section& section, const YAML::Node& node);
  std::string unknown_key(const std::string& path) const;

  std::deque<Field> fields_;  // a deque: add() hands out references that must stay valid
  std::vector<Section> sections_;
  std::vector<Rule> rules_;
  std::vector<Rule> notices_;
  std::vector<std::string> readers_now_;         // set_reader(), set_readers()
  std::map<std::string, std::string> known_as_;  // known_as()
  std::vector<std::string>* collected_ptr() { return collected_ ? &*collected_ : nullptr; }
  std::vector<std::string> field_problems() const;  // each key's own range, choice and emptiness checks
  std::optional<std::vector<std::string>> collected_;  // collect_errors(): the keys' errors so far
  std::string source_;  // while load() reads a file: its name, for the errors' locations
  std::set<std::string>* written_in_load_ = nullptr;  // while load() reads: the keys written so far
};

}  // namespace ddp
