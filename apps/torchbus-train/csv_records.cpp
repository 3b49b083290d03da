#include "csv_records.hpp"

#include <csv.h>
#include <torchbus/error.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <exception>
#include <memory>
#include <string_view>
#include <system_error>
#include <utility>

namespace train {
namespace {

using torchbus::ConfigError;
using torchbus::DataError;
using torchbus::detail::concat;

/// The line breaks in `text`: CRLF, CR or LF, each one (the lines Python's csv.reader counts).
std::int64_t line_breaks(const std::string& text) {
  std::int64_t breaks = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'))) {
      ++breaks;
    }
  }
  return breaks;
}

/// libcsv's callbacks' state: the record being read, the line being fed, and what `visit` threw.
struct Reader {
  const std::function<void(const CsvRecord&)>& visit;
  CsvRecord record;
  std::int64_t line = 1;              // the line of the bytes being parsed
  std::int64_t last_record_line = 0;  // the line the last complete record ended on
  std::exception_ptr failure;         // from `visit`: rethrown once libcsv has returned
};

void on_cell(void* text, std::size_t size, void* state) {
  auto& reader = *static_cast<Reader*>(state);
  if (reader.failure) return;
  reader.record.cells.emplace_back(text == nullptr ? "" : static_cast<const char*>(text), size);
}

void on_record(int /*terminator*/, void* state) {
  auto& reader = *static_cast<Reader*>(state);
  if (reader.failure) return;
  // The record ends on the line being parsed; the line breaks inside its quoted cells are the
  // lines it spans.
  std::int64_t breaks = 0;
  for (const auto& cell : reader.record.cells) breaks += line_breaks(cell);
  reader.record.line = reader.line - breaks;
  reader.last_record_line = reader.line;
  try {
    reader.visit(reader.record);
  } catch (...) {
    reader.failure = std::current_exception();
  }
  reader.record.cells.clear();
}

/// No character is a space to libcsv: cells keep their spaces, as Python's csv.reader keeps them.
int no_spaces(unsigned char /*character*/) {
  return 0;
}

}  // namespace

void for_each_csv_record(std::istream& in, const std::string& name, char delimiter,
                         const std::function<void(const CsvRecord&)>& visit) {
  TORCHBUS_CHECK(parse_csv_delimiter(std::string(1, delimiter)).has_value(), ConfigError,
                 "CSV: ", describe_csv_delimiter(delimiter),
                 " cannot be a delimiter; expected one character other than a quote or a line "
                 "break");
  csv_parser parser{};
  TORCHBUS_CHECK(csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) == 0, DataError,
                 "CSV: cannot start reading '", name, "': out of memory");
  const std::unique_ptr<csv_parser, decltype(&csv_free)> release(&parser, &csv_free);
  csv_set_delim(&parser, static_cast<unsigned char>(delimiter));
  csv_set_space_func(&parser, &no_spaces);
  Reader reader{visit, {}, 1, 0, nullptr};

  // Parses `size` bytes that lie on the line `reader.line`.
  const auto parse = [&](const char* bytes, std::size_t size) {
    const auto parsed = csv_parse(&parser, bytes, size, &on_cell, &on_record, &reader);
    if (reader.failure) std::rethrow_exception(reader.failure);
    if (parsed == size) return;
    TORCHBUS_CHECK(csv_error(&parser) == CSV_EPARSE, DataError, "CSV: ", name, " line ",
                   reader.line, ": ", csv_strerror(csv_error(&parser)));
    TORCHBUS_CHECK(parser.quoted != 0, DataError, "CSV: ", name, " line ", reader.line,
                   ": a quote inside a cell that does not start with one; expected RFC 4180 "
                   "quoting: a cell holding quotes is quoted whole and its quotes doubled "
                   "(\"a \"\"b\"\" c\")");
    throw DataError(concat("CSV: ", name, " line ", reader.line,
                           ": text after the closing quote of a cell; expected the delimiter ",
                           describe_csv_delimiter(delimiter),
                           " or the end of the line after it (a quote inside a quoted cell is "
                           "doubled: \"\")"));
  };

  // Feeds the parser a line at a time, so that each callback knows the line it is on.
  std::array<char, 1 << 16> buffer{};
  bool first_chunk = true;
  bool after_carriage_return = false;  // the last byte fed was a CR: an LF now ends the same line
  errno = 0;                           // what a failed read sets
  while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) {
    std::string_view chunk(buffer.data(), static_cast<std::size_t>(in.gcount()));
    // A UTF-8 byte order mark (as spreadsheets write one) is not part of the first cell.
    constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
    if (first_chunk && chunk.substr(0, kByteOrderMark.size()) == kByteOrderMark) {
      chunk.remove_prefix(kByteOrderMark.size());
    }
    first_chunk = false;
    std::size_t start = 0;
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      const auto byte = chunk[i];
      if (byte != '\n' && byte != '\r') continue;
      parse(chunk.data() + start, i + 1 - start);
      const bool previous_was_carriage_return =
          i > 0 ? chunk[i - 1] == '\r' : after_carriage_return;
      if (byte == '\r' || !previous_was_carriage_return) ++reader.line;
      start = i + 1;
    }
    parse(chunk.data() + start, chunk.size() - start);
    after_carriage_return = !chunk.empty() && chunk.back() == '\r';
    errno = 0;
  }
  TORCHBUS_CHECK(!in.bad(), DataError, "CSV: reading '", name, "' failed after line ",
                 reader.line - 1, errno != 0 ? ": " + std::generic_category().message(errno) : "");
  const auto finished = csv_fini(&parser, &on_cell, &on_record, &reader);
  if (reader.failure) std::rethrow_exception(reader.failure);
  TORCHBUS_CHECK(finished == 0 && csv_error(&parser) == CSV_SUCCESS, DataError, "CSV: ", name,
                 " ends inside a quoted cell",
                 reader.last_record_line > 0
                     ? concat(" opened after line ", reader.last_record_line)
                     : std::string(),
                 "; expected a closing quote (a quote inside a quoted cell is doubled: \"\")");
}

std::optional<char> parse_csv_delimiter(const std::string& text) {
  if (text == "tab" || text == "\\t") return '\t';
  if (text.size() != 1 || text[0] == '"' || text[0] == '\n' || text[0] == '\r') {
    return std::nullopt;
  }
  return text[0];
}

std::string describe_csv_delimiter(char delimiter) {
  return delimiter == '\t' ? "tab" : concat("'", delimiter, "'");
}

std::string csv_delimiter_hint(const std::vector<std::string>& header, char delimiter) {
  if (header.size() != 1) return {};
  for (const char other : {',', ';', '\t', '|'}) {
    if (other != delimiter && header[0].find(other) != std::string::npos) {
      return concat(" (did you mean --csv-delimiter ",
                    other == '\t' ? "tab" : concat("'", other, "'"), "?)");
    }
  }
  return {};
}

}  // namespace train
