#include "ddp/common/value_slots.h"

#include <algorithm>

#include <stdexcept>

namespace ddp {

ValueSlots::Slot ValueSlots::reserve(const std::string& name, std::size_t count) {
  if (std::find(names_.begin(), names_.end(), name) != names_.end())
    throw std::logic_error("value slot '" + name + "' reserved twice");
  names_.push_back(name);
  Slot slot(values_.size(), count);
  values_.resize(values_.size() + count, 0.0);
  return slot;
}

void ValueSlots::clear() { std::fill(values_.begin(), values_.end(), 0.0); }

}  // namespace ddp
