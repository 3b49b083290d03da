#pragma once

/// \file
/// CheckpointSection (private to torchbus_framework): one named part of a trainer's checkpoint,
/// saved and loaded by the part it belongs to. checkpoint_io.cpp lists the sections once; capturing
/// a checkpoint is a loop over that list, and so is loading one.

#include <torch/serialize/output-archive.h>

#include "checkpoint/reader.hpp"
#include "checkpoint/tensor_copy_pool.hpp"

#include <functional>
#include <string>

namespace torchbus {

/// What a section's save is given: where copies of the tensors go when the capture keeps copies
/// (a background checkpoint), or null when it holds the live tensors.
struct SectionCapture {
  detail::TensorCopyPool* copies = nullptr;
};

/// One named part of a trainer's checkpoint (the model, the optimizers, a loop's progress, the
/// metrics, the subscribers...), saved and loaded by its owner.
struct CheckpointSection {
  /// Applies what `read` read: the trainer changes.
  using Apply = std::function<void()>;

  std::string name;  ///< named in the error of a file whose payload this section cannot parse
  /// Writes the section's entries.
  std::function<void(torch::serialize::OutputArchive&, const SectionCapture&)> save;
  /// Reads and checks the section's entries (`reader.fail` names a mismatch), changing nothing;
  /// returns how to apply them.
  std::function<Apply(detail::CheckpointReader&)> read;
  /// Whether applying can still fail (putting back what it changed before it rethrows): such a
  /// section applies before the others, so that its failure leaves the trainer as it was. At most
  /// one section of a list may say so.
  bool apply_may_fail = false;
};

/// When a nested archive becomes bytes: with the rest of the checkpoint, or at once.
enum class SectionBytes { Deferred, Serialized };

/// Writes `nested` under `key`: nested (Deferred), or serialized now into a byte tensor
/// `<key>_bytes` (CheckpointReader::nested reads both).
void write_nested(torch::serialize::OutputArchive& archive, const std::string& key,
                  torch::serialize::OutputArchive& nested, SectionBytes when);

}  // namespace torchbus
