#include <catch2/catch.hpp>

#include "ddp/common/value_slots.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE("value slots hand each participant its own named values", "[common]") {
  ddp::ValueSlots slots;
  auto vote = slots.reserve("stop vote");
  auto monitor = slots.reserve("monitor", 3);
  CHECK(slots.size() == 4);
  slots.value(vote) = 1;
  slots[monitor][2] = 7;
  CHECK(slots.packed() == std::vector<double>{1, 0, 0, 7});
  slots.packed() = {2, 3, 4, 5};  // what a transfer leaves: the sums
  CHECK(slots.value(vote) == 2);
  CHECK(slots[monitor].size() == 3);
  CHECK(slots[monitor][0] == 3);
  slots.clear();
  CHECK(slots.packed() == std::vector<double>{0, 0, 0, 0});
  CHECK_THROWS_WITH(slots.reserve("monitor"), "value slot 'monitor' reserved twice");
}

}  // namespace DDP_TEST_FILE
