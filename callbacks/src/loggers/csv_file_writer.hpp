#pragma once

// Internal to torchbus::callbacks (not installed): the file a CsvLogger writes, its rows recorded
// as numbers and formatted and written on a background task.

#include "loggers/csv_rows.hpp"
#include "support/background_thread.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace torchbus::detail {

/// A CSV file that rows are recorded for (`rows`) and handed to in batches (`write`): a batch
/// handed over in the background is formatted (CsvRows::format_into), written and flushed to the
/// operating system by the writer's thread while the caller records the next rows. The next
/// hand-over, `wait` and `close` wait for it first, so batches reach the file in order and at most
/// one is in flight. The recorded rows and the batch swap buffers: in a steady run a hand-over
/// allocates nothing. A write error is thrown (as Error naming `who` and the file) by the
/// hand-over, `wait` or `close` that finds it, once.
class CsvFileWriter {
 public:
  CsvFileWriter() = default;
  /// Waits for a batch in flight; its error is logged (destructors do not throw).
  ~CsvFileWriter();
  CsvFileWriter(const CsvFileWriter&) = delete;
  CsvFileWriter& operator=(const CsvFileWriter&) = delete;

  /// Opens `path`, appending (`append`) or replacing it, after closing the file open before (the
  /// recorded rows stay); false when it cannot be opened (errno tells why). `who` starts
  /// error messages, e.g. "CsvLogger 'csv_logger'".
  bool open(const std::filesystem::path& path, bool append, std::string who);
  /// Whether a file is open (read on the caller's thread while a task may write the file).
  bool is_open() const noexcept { return open_; }
  /// The rows recorded and not yet handed over.
  CsvRows& rows() noexcept { return rows_; }

  /// Hands `prefix` (written first, e.g. the header) and the recorded rows over to be written; the
  /// recorded rows are empty afterwards, at the same width. In the background (`background`) a task
  /// on another thread formats and writes them; else they are in the file when this returns.
  void write(std::string_view prefix, bool background);
  /// Returns once everything handed over is in the file and flushed to the operating system.
  void wait();
  /// Waits, then closes the file (also after an error, which it then throws).
  void close();

 private:
  /// Formats `batch_` after the prefix in `text_`, writes and flushes it: the task's work.
  void write_batch();

  std::filesystem::path path_;
  std::string who_;
  std::ofstream file_;
  bool open_ = false;        // file_ is open; changed by the caller's thread only
  CsvRows rows_;             // recorded, not yet handed over
  CsvRows batch_;            // the rows in flight, or the emptied buffers of the last batch
  fmt::memory_buffer text_;  // the batch's text: its prefix, then its rows
  BackgroundThread thread_;  // writes batch_ when handed over in the background
};

}  // namespace torchbus::detail
