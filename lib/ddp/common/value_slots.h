#pragma once
// Numbers that travel together in one collective (the side values of the gradient all-reduce, a log
// window's sums), each participant's under a name. Nobody counts positions: a participant reserves a
// slot and reads and writes through its handle.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace ddp {

/// Named slots in one flat vector of doubles.
class ValueSlots {
 public:
  /// Where a participant's values are; from reserve().
  class Slot {
   public:
    Slot() = default;

   private:
    friend class ValueSlots;
    Slot(std::size_t offset, std::size_t count) : offset_(offset), count_(count) {}
    std::size_t offset_ = 0;
    std::size_t count_ = 0;
  };

  /// Room for `count` values under `name` (unique; for messages). Reserve everything before the
  /// first transfer: the transport sizes its buffer from size().
  Slot reserve(const std::string& name, std::size_t count = 1);

  /// A slot's values: this rank's to send, or the sums after a transfer.
  std::span<double> operator[](Slot slot) { return {values_.data() + slot.offset_, slot.count_}; }
  std::span<const double> operator[](Slot slot) const { return {values_.data() + slot.offset_, slot.count_}; }
  /// A one-value slot's value.
  double& value(Slot slot) { return values_.at(slot.offset_); }
  double value(Slot slot) const { return values_.at(slot.offset_); }

  /// Every slot's values, end to end: for the transport alone.
  std::vector<double>& packed() { return values_; }
  std::size_t size() const { return values_.size(); }
  /// Zeroes every value (a new window).
  void clear();

 private:
  std::vector<double> values_;
  std::vector<std::string> names_;
};

}  // namespace ddp
