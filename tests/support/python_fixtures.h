#pragma once
// Files Python's numpy and torch wrote (python_fixtures.py), made once per test binary.

#include <string>

namespace ddp::test {

/// The path of fixture `name` ("mlp.pt", "train_x.npy", ...); the first call runs the script and
/// fails the current test if it cannot.
std::string python_fixture(const std::string& name);

}  // namespace ddp::test
