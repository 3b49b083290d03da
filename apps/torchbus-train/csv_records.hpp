#pragma once

// The records of a CSV file as RFC 4180 defines them, read with libcsv: quoted cells, doubled
// quotes inside them, the delimiter and line breaks inside quotes, CR, LF or CRLF line ends, a
// UTF-8 byte order mark. The same records as Python's csv.reader (tests/reference/compare_csv.py).

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>
#include <vector>

namespace train {

/// One record of a CSV file: its cells, unquoted and untrimmed, and the line it starts on.
struct CsvRecord {
  std::vector<std::string> cells;
  std::int64_t line = 0;  ///< 1-based; a record with line breaks in quoted cells spans several
};

/// Calls `visit` with each record of `in`, in order, its cells split at `delimiter`. Blank lines
/// are no records. Quoting that RFC 4180 does not allow (a quote inside a cell that does not start
/// with one, text after a closing quote, a quote never closed) is a torchbus::DataError naming
/// `name` and the line; so is a failed read. An exception thrown by `visit` propagates.
void for_each_csv_record(std::istream& in, const std::string& name, char delimiter,
                         const std::function<void(const CsvRecord&)>& visit);

/// The delimiter `text` names: one character other than a quote or a line break, or "tab" (also
/// "\t" as two characters, as a shell passes it). std::nullopt when it names none.
std::optional<char> parse_csv_delimiter(const std::string& text);

/// `delimiter` for a message: "';'", or "tab".
std::string describe_csv_delimiter(char delimiter);

/// When `header` (a file's first record) is one cell holding another common delimiter (',', ';',
/// tab, '|'), a hint for a message naming it (" (did you mean --csv-delimiter ';'?)"); else "".
std::string csv_delimiter_hint(const std::vector<std::string>& header, char delimiter);

}  // namespace train
