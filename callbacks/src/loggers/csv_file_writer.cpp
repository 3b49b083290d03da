#include "loggers/csv_file_writer.hpp"

#include <spdlog/spdlog.h>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/system_error_text.hpp>

#include <cerrno>
#include <system_error>
#include <utility>

namespace torchbus::detail {

CsvFileWriter::~CsvFileWriter() {
  try {
    wait();
  } catch (const std::exception& error) {
    logger()->error("{}", error.what());
  }
}

bool CsvFileWriter::open(const std::filesystem::path& path, bool append, std::string who) {
  close();
  path_ = path;
  who_ = std::move(who);
  file_.clear();
  file_.open(path, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  open_ = file_.is_open();
  return open_;
}

void CsvFileWriter::write(std::string_view prefix, bool background) {
  wait();
  text_.clear();
  text_.append(prefix.data(), prefix.data() + prefix.size());
  // The rows become the batch; recording goes on in the last batch's emptied buffers.
  std::swap(batch_, rows_);
  rows_.set_width(batch_.width());
  if (background) {
    try {
      thread_.start([this] { write_batch(); });
      return;
    } catch (const std::system_error&) {
      // No thread to be had (resource_unavailable_try_again): the rows are written here. (The
      // last batch's failure, which `start` would rethrow, was thrown by `wait` above.)
    }
  }
  write_batch();
}

void CsvFileWriter::write_batch() {
  batch_.format_into(text_);
  // A stream that failed before writes nothing and sets no errno: say so rather than name
  // whatever errno holds.
  const bool failed_before = !file_.good();
  errno = 0;
  file_.write(text_.data(), static_cast<std::streamsize>(text_.size()));
  file_.flush();
  TORCHBUS_CHECK(file_.good(), Error, who_, ": writing rows to '", path_.string(), "' failed: ",
                 failed_before ? "an earlier write to it failed" : system_error_text(errno));
}

void CsvFileWriter::wait() {
  thread_.wait();
}

void CsvFileWriter::close() {
  try {
    wait();
  } catch (...) {
    file_.close();
    open_ = false;
    throw;
  }
  if (open_) file_.close();
  open_ = false;
}

}  // namespace torchbus::detail
