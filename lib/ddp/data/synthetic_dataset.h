#pragma once
// A deterministic stand-in for Fashion-MNIST, for tests and runs on machines without the files.

#include "ddp/data/dataset.h"

#include <cstdint>

namespace ddp {

/// `samples` uint8 28x28 images in `num_classes` balanced classes: each class is a fixed random
/// blocky prototype plus per-sample noise, so a small MLP or ConvNet learns it in a few steps.
/// Depends only on the arguments (a local generator; the global RNG is untouched).
/// Throws std::invalid_argument if samples < 0 or num_classes < 1.
Dataset make_synthetic_dataset(int64_t samples, int64_t num_classes, uint64_t seed);

}  // namespace ddp
