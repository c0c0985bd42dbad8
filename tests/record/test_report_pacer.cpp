// The live report's pacing (issue 22, item 15): renders at evaluations are kept apart by a floor
// and by a multiple of their own cost, so a run with an evaluation per step does not pay a
// render per step.
#include <catch2/catch.hpp>

#include "ddp/record/report_pacer.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using ddp::ReportPacer;
using namespace std::chrono_literals;

TEST_CASE("the report pacer renders first, then waits the floor or twenty renders' cost", "[record][report]") {
  ReportPacer pacer;
  auto t0 = ReportPacer::Clock::time_point{} + 1h;
  CHECK(pacer.due(t0));
  pacer.rendered(t0, t0 + 50ms);  // a cheap render: the 10 s floor applies
  CHECK_FALSE(pacer.due(t0 + 50ms));
  CHECK_FALSE(pacer.due(t0 + 10s));
  CHECK(pacer.due(t0 + 50ms + 10s));

  auto t1 = t0 + 1min;
  pacer.rendered(t1, t1 + 2s);  // a costly render (a long run): twenty times its cost, 40 s
  CHECK_FALSE(pacer.due(t1 + 2s + 39s));
  CHECK(pacer.due(t1 + 2s + 40s));
}

TEST_CASE("evaluations every step for many steps render a bounded number of times", "[record][report]") {
  // 2,560 evaluations 5 ms apart (13 s of run) whose renders cost 40 ms each: at most two.
  ReportPacer pacer;
  auto now = ReportPacer::Clock::time_point{} + 1h;
  int renders = 0;
  for (int eval = 0; eval < 2560; ++eval) {
    now += 5ms;
    if (!pacer.due(now)) continue;
    ++renders;
    pacer.rendered(now, now + 40ms);
    now += 40ms;
  }
  CHECK(renders == 2);
}

}  // namespace DDP_TEST_FILE
