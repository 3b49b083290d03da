#pragma once

// torchbus-train's data: the built-in synthetic set, MNIST IDX files, or a CSV file.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace train {

/// A classification dataset split into training and validation tensors.
struct Dataset {
  at::Tensor train_inputs, train_targets;            ///< inputs [N, ...], targets [N] (int64)
  at::Tensor validation_inputs, validation_targets;  ///< the held-out split
  std::int64_t classes = 0;                          ///< number of classes
  bool images = false;                               ///< inputs are [N, 1, H, W] images
  std::string images_file;                           ///< the training images' file (MNIST)
  std::string description;                           ///< one line for the log
  std::vector<std::string> warnings;                 ///< what the log should warn about
};

/// Loads `spec`: "synthetic", "mnist:DIR" or "csv:FILE[:LABEL]". A malformed spec throws
/// torchbus::ConfigError; unreadable or malformed data throws torchbus::DataError naming the file.
Dataset load_dataset(const std::string& spec, std::uint64_t seed);

/// The deterministic synthetic set: Gaussian clusters around one random centre per class.
Dataset synthetic_dataset(std::int64_t train_size, std::int64_t validation_size,
                          std::int64_t features, std::int64_t classes, std::uint64_t seed);

/// MNIST from a directory of the four standard IDX files (train-* for training, t10k-* for
/// validation), of any size: magic numbers, counts and lengths are checked. (LibTorch's
/// torch::data::datasets::MNIST insists on exactly 60000/10000 images, so it cannot read a subset.)
Dataset mnist_dataset(const std::string& directory);

/// A CSV file with a header row, numeric cells and an integer class column `label`; the last
/// fifth of the rows is the validation split. Labels that leave classes without a sample, or
/// name one class only, are warnings.
Dataset csv_dataset(const std::string& path, const std::string& label);

}  // namespace train
