#pragma once

/// \file
/// Weights exchanged with Python PyTorch: state_dict files in the format of Python's
/// `torch.save(model.state_dict(), path)` (a zip archive), read by `torch.load(path)` as a dict of
/// tensors, and read here from files Python wrote. See docs/interop.md.

#include <torch/nn/module.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace torchbus {

/// Tensors by name, in the order of the file or of the module.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// The parameters and then the buffers of `module`, named as named_parameters() and
/// named_buffers() name them (the names of a Python module of the same structure).
NamedTensors state_dict_of(const torch::nn::Module& module);

/// The bytes of a state_dict file holding `tensors` (copied to the CPU), as Python's torch.save
/// writes it: a zip archive with `archive/data.pkl` and one record per storage.
std::string state_dict_bytes(const NamedTensors& tensors);

/// Writes `module`'s state_dict to `path` atomically; Python's `torch.load(path)` returns it as a
/// dict of tensors. Throws CheckpointError naming the file when it cannot be written.
void save_state_dict(const torch::nn::Module& module, const std::filesystem::path& path);

/// Reads a state_dict file written by Python's `torch.save` (zip format, pickle protocol 2: the
/// defaults) or by save_state_dict. Throws CheckpointError naming the file when it is missing,
/// truncated, damaged (a record's bytes do not match its zip CRC-32), a TorchScript archive, in
/// the legacy format, or not a dict of str -> tensor.
NamedTensors read_state_dict(const std::filesystem::path& path);

/// Copies the state_dict in `path` into `module`'s parameters and buffers, as Python's
/// `load_state_dict`: strict (default) refuses missing and unexpected names; shape and dtype
/// mismatches are always refused (no conversion). All problems are reported in one
/// CheckpointError naming the file, and the module is unchanged then.
void load_state_dict(torch::nn::Module& module, const std::filesystem::path& path,
                     bool strict = true);

}  // namespace torchbus
