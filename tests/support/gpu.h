#pragma once
// The first line of a [gpu] test case: without a CUDA device the case says why and ends, and
// ctest, which looks for "skipped: " (tests/CMakeLists.txt), shows it as skipped, not passed.
#include <torch/cuda.h>

#define SKIP_WITHOUT_GPU()                                                  \
  do {                                                                      \
    if (!torch::cuda::is_available()) {                                     \
      WARN("skipped: no CUDA device here (CPU build, or no GPU visible)"); \
      return;                                                               \
    }                                                                       \
  } while (false)
