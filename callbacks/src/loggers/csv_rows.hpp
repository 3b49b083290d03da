#pragma once

// Internal to torchbus::callbacks (not installed): the rows a CsvLogger has recorded but not yet
// written.

#include <fmt/format.h>

#include <cstdint>
#include <vector>

namespace torchbus::detail {

/// Rows of a CSV file recorded as numbers and formatted in one go when they are written: a row
/// costs the training thread a few stores, and the formatting runs in a tight loop (its code and
/// data in the cache) once per flush instead of once per step in the middle of LibTorch's work.
/// Each row has the fixed columns kind, step, epoch, wall_time, then `width()` value columns.
class CsvRows {
 public:
  /// Value columns per row.
  std::size_t width() const noexcept { return width_; }
  /// Whether no row is recorded.
  bool empty() const noexcept { return starts_.empty(); }
  /// The rows recorded.
  std::size_t size() const noexcept { return starts_.size(); }

  /// Sets the value columns of rows recorded from now on; only while no row is recorded.
  void set_width(std::size_t width);
  /// Starts a row: `kind` (a string that outlives the row, e.g. a literal), step, epoch, and the
  /// wall time in milliseconds since 1970-01-01 UTC. Its value columns start empty.
  void begin(const char* kind, std::int64_t step, std::int64_t epoch, std::int64_t wall_ms);
  /// Sets value column `index` (0 = the first after wall_time) of the row begun last.
  void set(std::size_t index, double value);
  /// Adds `extra` empty value columns at the end of every recorded row and of later rows.
  void widen(std::size_t extra);
  /// Appends the recorded rows as CSV lines to `text` (numbers in the shortest form that reads
  /// back as the same double, an empty cell where no value was set) and forgets them.
  void format_into(fmt::memory_buffer& text);

 private:
  struct Start {
    const char* kind;
    std::int64_t step, epoch, wall_ms;
  };
  std::size_t width_ = 0;
  std::vector<Start> starts_;
  std::vector<double> values_;          // width_ per row
  std::vector<unsigned char> present_;  // 1 where values_ holds a number
};

}  // namespace torchbus::detail
