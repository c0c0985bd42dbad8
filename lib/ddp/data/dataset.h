#pragma once
// An image classification dataset: labels in memory, images in memory or in the node's cache file.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "ddp/data/image_file.h"

namespace ddp {

/// Images and labels of one split, as raw pixels (normalised only when batched).
struct Dataset {
  torch::Tensor images;  ///< uint8 [N, H, W] in memory; undefined when `image_file` holds them
  torch::Tensor labels;  ///< int64 [N]
  std::string source;    ///< where the samples came from, for logs and errors
  std::shared_ptr<const ImageFile> image_file;  ///< the images, read on demand (the dataset cache)

  /// Number of samples (0 for an empty, default-constructed dataset).
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }

  /// Height and width of the images.
  std::pair<int64_t, int64_t> image_size() const {
    return image_file ? std::make_pair(image_file->height(), image_file->width())
                      : std::make_pair(images.size(1), images.size(2));
  }

  /// Images `indices` (int64 [n]) as uint8 [n, H, W], from memory or from the file.
  torch::Tensor select_images(const torch::Tensor& indices) const {
    return image_file ? image_file->read(indices) : images.index_select(0, indices);
  }
};

}  // namespace ddp
