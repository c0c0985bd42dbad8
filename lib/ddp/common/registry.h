#pragma once
// Note [Registries]: what the config chooses by name (model.name, train.task, data.dataset) comes
// from a Registry: name → entry, and one message for a name it lacks.
//
// Each entry lives in one .cpp that defines `void register_<name>...(Registry<Entry>&)`, and the
// registry's .cpp calls them from a list (an X-macro). The usual trick, a static object whose
// constructor registers itself, silently fails here: ddp's areas are static libraries, and the
// linker only pulls an object file out of an archive when something references one of its
// symbols. Nothing references a self-registering object, so the entry would vanish from the binary
// with no error. Naming each register function in the list is that reference: adding an entry is
// its .cpp plus one word in the list, and a name without a definition is a link error rather than a
// choice that is missing at run time.

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {

template <typename Entry>
class Registry {
 public:
  /// `key` is the config key that chooses (model.name), `what` the kind of thing chosen (model).
  Registry(std::string key, std::string what) : key_(std::move(key)), what_(std::move(what)) {}

  /// Adds `name`; a name registered twice is a programming error.
  Entry& add(const std::string& name, Entry entry = {}) {
    auto [at, added] = entries_.emplace(name, std::move(entry));
    if (!added) throw std::logic_error(key_ + ": " + name + " is registered twice");
    return at->second;
  }

  /// The entry for `name`, or null.
  const Entry* find(const std::string& name) const {
    auto found = entries_.find(name);
    return found == entries_.end() ? nullptr : &found->second;
  }

  /// The entry for `name`; ConfigError `KEY: unknown WHAT "NAME" (did you mean X?); available: a, b`.
  const Entry& at(const std::string& name) const {
    if (const Entry* entry = find(name)) return *entry;
    std::string message = key_ + ": unknown " + what_ + " \"" + name + "\"";
    if (auto suggestion = nearest(name, names())) message += " (did you mean " + *suggestion + "?)";
    std::string available;
    for (const auto& known : names()) available += (available.empty() ? "" : ", ") + known;
    throw ConfigError(message + "; available: " + available);
  }

  /// Every name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }

  /// Name and entry, sorted by name.
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::string key_;
  std::string what_;
  std::map<std::string, Entry> entries_;
};

}  // namespace ddp
