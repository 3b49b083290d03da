#pragma once

/// \file
/// BatchLimit: how many batches of a pass run (TrainerOptions::limit_train_batches and
/// limit_val_batches), as Lightning's `limit_train_batches`.

#include <cstdint>
#include <optional>
#include <string>

namespace torchbus {

/// All batches of a pass, a count of them, or a fraction of the pass's size.
class BatchLimit {
 public:
  /// Every batch (the default).
  BatchLimit() = default;
  /// Every batch.
  static BatchLimit all() { return {}; }
  /// The first `batches` batches (>= 1) of each pass, or all of a shorter one.
  static BatchLimit count(std::int64_t batches);
  /// The first `share` (in (0, 1]) of each pass's batches, rounded down; needs the pass's size.
  static BatchLimit fraction(double share);

  /// Whether this is every batch (a fraction of 1 included).
  bool is_all() const noexcept;
  /// Whether this is a fraction below 1, which needs the size of the pass.
  bool needs_size() const noexcept;

  /// Throws ConfigError naming `option` when the count is below 1 or the fraction outside (0, 1].
  void validate(const char* option) const;
  /// Batches per pass of a pass of `size` batches (nullopt: unknown), -1 for all. Throws
  /// ConfigError naming `option` when a fraction meets an unknown size or rounds down to 0.
  std::int64_t batches_per_pass(std::optional<std::int64_t> size, const char* option) const;
  /// "all", the count ("10") or the fraction ("0.25").
  std::string to_string() const;

  friend bool operator==(const BatchLimit& a, const BatchLimit& b) noexcept {
    return a.kind_ == b.kind_ && a.count_ == b.count_ && a.fraction_ == b.fraction_;
  }
  friend bool operator!=(const BatchLimit& a, const BatchLimit& b) noexcept { return !(a == b); }

 private:
  enum class Kind { All, Count, Fraction };
  Kind kind_ = Kind::All;
  std::int64_t count_ = 0;
  double fraction_ = 1.0;
};

}  // namespace torchbus
