#include "loggers/csv_rows.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>
#include <torchbus/error.hpp>

#include <algorithm>

namespace torchbus::detail {

void CsvRows::set_width(std::size_t width) {
  TORCHBUS_CHECK(empty(), Error, "CsvRows: the width changes only while no row is recorded");
  width_ = width;
}

void CsvRows::begin(const char* kind, std::int64_t step, std::int64_t epoch, std::int64_t wall_ms) {
  starts_.push_back(Start{kind, step, epoch, wall_ms});
  values_.resize(values_.size() + width_, 0.0);
  present_.resize(present_.size() + width_, 0);
}

void CsvRows::set(std::size_t index, double value) {
  const std::size_t at = (starts_.size() - 1) * width_ + index;
  values_[at] = value;
  present_[at] = 1;
}

void CsvRows::widen(std::size_t extra) {
  if (extra == 0) return;
  const std::size_t width = width_ + extra;
  std::vector<double> values(starts_.size() * width, 0.0);
  std::vector<unsigned char> present(starts_.size() * width, 0);
  for (std::size_t row = 0; row < starts_.size(); ++row) {
    std::copy_n(values_.begin() + row * width_, width_, values.begin() + row * width);
    std::copy_n(present_.begin() + row * width_, width_, present.begin() + row * width);
  }
  values_ = std::move(values);
  present_ = std::move(present);
  width_ = width;
}

void CsvRows::format_into(fmt::memory_buffer& text) {
  auto out = fmt::appender(text);
  for (std::size_t row = 0; row < starts_.size(); ++row) {
    const Start& start = starts_[row];
    // The wall time as seconds with milliseconds, from integers.
    fmt::format_to(out, FMT_COMPILE("{},{},{},{}.{:03}"), start.kind, start.step, start.epoch,
                   start.wall_ms / 1000, start.wall_ms % 1000);
    for (std::size_t column = row * width_; column < (row + 1) * width_; ++column) {
      text.push_back(',');
      if (present_[column]) fmt::format_to(out, FMT_COMPILE("{}"), values_[column]);
    }
    text.push_back('\n');
  }
  starts_.clear();
  values_.clear();
  present_.clear();
}

}  // namespace torchbus::detail
