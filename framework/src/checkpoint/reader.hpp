#pragma once

/// \file
/// CheckpointReader (private to torchbus_framework): the entries of one checkpoint file, read by
/// each part of the trainer that saved some.

#include <torch/serialize/input-archive.h>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/error.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace torchbus::detail {

/// What went wrong, in one line of at most 200 characters (LibTorch's errors carry a trace).
std::string reason_of(const std::exception& error);

/// `names` as one entry: a line each.
std::string join_lines(const std::vector<std::string>& names);
/// `key` for the first of several (optimizers, loss scalers), `key_<index>` for the others.
std::string indexed_key(std::string_view key, std::size_t index);
/// The lines of an entry written by `join_lines`.
std::vector<std::string> split_lines(const std::string& text);

/// Reads the entries of one checkpoint (framing and CRC checked, payload parsed), naming the file
/// in every error.
class CheckpointReader {
 public:
  /// Reads and parses `path`, its tensors placed on `device` whatever device they were saved from
  /// (a checkpoint of a CUDA run read on the CPU and the other way round, as Python's
  /// `torch.load(map_location=...)`); throws CheckpointError naming it when it cannot.
  explicit CheckpointReader(const std::filesystem::path& path,
                            c10::Device device = c10::Device(c10::kCPU));

  /// The file it reads.
  const std::filesystem::path& path() const noexcept { return path_; }
  /// The file's header (step, run identity).
  const CheckpointHeader& header() const noexcept { return header_; }
  /// The value at `key`; fails when there is none.
  c10::IValue value(const std::string& key);
  /// The tensor at `key`; fails when there is none.
  at::Tensor tensor(const std::string& key);
  /// The value at `key`, None when the checkpoint has none.
  c10::IValue optional_value(const std::string& key);
  /// The tensor at `key`, undefined when the checkpoint has none.
  at::Tensor optional_tensor(const std::string& key);
  /// The section at `key` (nested, or serialized apart as `<key>_bytes`); fails when there is
  /// none.
  torch::serialize::InputArchive nested(const std::string& key);

  /// Throws CheckpointError "checkpoint <path> <parts...>".
  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw CheckpointError(concat("checkpoint ", path_.string(), " ", parts...));
  }

 private:
  std::filesystem::path path_;
  CheckpointHeader header_;
  c10::Device device_;
  torch::serialize::InputArchive archive_;
};

}  // namespace torchbus::detail
