#pragma once
// A run several test cases compare against, made once per build (Note [Shared runs]).

#include <functional>
#include <string>

namespace ddp::test {

// Note [Shared runs]
// ctest runs each test case as a process of its own, so a reference run that several cases
// compare against (the uninterrupted run of the elastic jobs) was made once per case. It is kept
// on disk instead, in BUILD/test-shared-runs/NAME: the first case to ask makes it while holding an
// exclusive lock on the name, which a case running beside it waits for, and marks it made with its
// recipe (what the caller says it depends on: the command, the config's text) and the stamp of
// the built ddp-train. A changed recipe or a rebuilt ddp-train makes it again. A case that fails
// while making it marks nothing, so the next one makes it afresh. Cases only read it.

/// The directory of run `name`, made by `make(directory)` (which may REQUIRE) unless a run made
/// from the same `recipe` and the same ddp-train is there.
std::string shared_run(const std::string& name, const std::string& recipe,
                       const std::function<void(const std::string& directory)>& make);

}  // namespace ddp::test
