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
  bool regression = false;  ///< targets are values [N, 1] (float), `classes` the outputs: 1
  std::string images_file;  ///< the training images' file (MNIST)
  std::vector<std::string> feature_names;  ///< a CSV file's feature columns, in order
  std::string description;                 ///< one line for the log
  std::vector<std::string> warnings;       ///< what the log should warn about
};

/// Loads `spec`: "synthetic", "mnist:DIR" or "csv:FILE[:LABEL]" (its cells split at
/// `csv_delimiter`, quoted as RFC 4180 says: csv_records.hpp). A malformed spec throws
/// torchbus::ConfigError; unreadable or malformed data throws torchbus::DataError naming the file.
/// With `regression` the targets are values [N, 1]: a CSV label column of any finite numbers, the
/// class index of the built-in set and of MNIST.
Dataset load_dataset(const std::string& spec, std::uint64_t seed, bool regression = false,
                     char csv_delimiter = ',');

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
Dataset csv_dataset(const std::string& path, const std::string& label, bool regression = false,
                    char delimiter = ',');

/// Data to test or predict on: every sample, in order.
struct HeldOut {
  at::Tensor inputs;   ///< [N, ...]
  at::Tensor targets;  ///< [N] class indices, [N, 1] values to regress; undefined without labels
  std::vector<std::string> feature_names;  ///< a CSV file's feature columns, in order
  std::string description;                 ///< one line for the log
};

/// The data of `spec` to test or predict on: synthetic: its held-out split; mnist:DIR: the t10k
/// files; csv:FILE[:LABEL]: every row of the file, the label column optional unless
/// `labels_required` (a test). Errors as load_dataset's.
HeldOut load_held_out(const std::string& spec, std::uint64_t seed, bool labels_required,
                      bool regression = false, char csv_delimiter = ',');

/// load_held_out for the flag `flag` (--test, --predict), checked against the data the model is
/// made for: samples of another shape, or labels past its classes, are a DataError naming both.
HeldOut load_held_out_for(const std::string& flag, const std::string& spec, std::uint64_t seed,
                          bool labels_required, const Dataset& trained_on,
                          char csv_delimiter = ',');

}  // namespace train
